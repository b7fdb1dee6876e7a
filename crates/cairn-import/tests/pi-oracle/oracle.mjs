// pi's own reading of a session file, for cairn-import's tests and bench.
//
//   node oracle.mjs context FILE...   one JSON line per file: what pi's
//                                     SessionManager builds for its leaf
//   node oracle.mjs bench FILE ROUNDS best time (ms) of SessionManager.open
//                                     + buildSessionContext
//
// Each file is copied to a temporary directory first: pi rewrites a
// version 1 or 2 file in place when it opens it (its migration).
import { copyFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { performance } from "node:perf_hooks";

const pkg = new URL("./node_modules/@mariozechner/pi-coding-agent/dist/core/", import.meta.url);
const { SessionManager } = await import(new URL("session-manager.js", pkg));
const { convertToLlm } = await import(new URL("messages.js", pkg));

const [mode, ...args] = process.argv.slice(2);
const scratch = mkdtempSync(join(tmpdir(), "pi-oracle-"));
try {
  if (mode === "context") {
    for (const file of args) {
      const copy = join(scratch, basename(file));
      copyFileSync(file, copy);
      const sm = SessionManager.open(copy, scratch);
      const ctx = sm.buildSessionContext();
      const messages = ctx.messages.map((m) => ({
        role: m.role,
        summary: m.summary ?? null,
        llm: convertToLlm([m])[0] ?? null,
      }));
      process.stdout.write(
        JSON.stringify({ file, messages, thinkingLevel: ctx.thinkingLevel, model: ctx.model }) + "\n",
      );
      rmSync(copy, { force: true });
    }
  } else if (mode === "bench") {
    const [file, rounds] = args;
    let best = Infinity;
    let count = 0;
    for (let i = 0; i < Number(rounds ?? 5); i++) {
      const t0 = performance.now();
      const sm = SessionManager.open(file, scratch);
      const ctx = sm.buildSessionContext();
      const t = performance.now() - t0;
      count = ctx.messages.length;
      if (t < best) best = t;
    }
    process.stdout.write(JSON.stringify({ ms: best, messages: count }) + "\n");
  } else {
    process.stderr.write("usage: node oracle.mjs context FILE... | bench FILE ROUNDS\n");
    process.exit(2);
  }
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
