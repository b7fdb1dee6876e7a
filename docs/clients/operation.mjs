// @ts-check
// One operation driven end to end over cairn's HTTP API with Node's fetch
// (TypeScript types as JSDoc: `tsc --checkJs` checks this file; node runs
// it as it is).
//
// The "model" here is scripted (it asks for one tool call, then answers), so
// the example runs offline; a real harness calls its provider where the
// comments say. What matters is the order, which gives the crash guarantees:
// announce the model attempt before calling the model, dispatch the tool (T1)
// and wait for the answer before running it, record its result (T2), finish.
//
//   CAIRN_URL=http://127.0.0.1:7171 CAIRN_TOKEN=$(cat ~/.local/share/cairn/server-token) \
//     node docs/clients/operation.mjs

/** @typedef {{type: "text", text: string} | {type: "tool_call", call_id: string, name: string, arguments: Record<string, unknown>}} Block */
/** @typedef {{role: "user" | "assistant" | "tool", content: Block[]}} Message */
/** @typedef {{code: string, message: string, hint: string, request_id: string}} ApiError */

const BASE = (process.env.CAIRN_URL ?? "http://127.0.0.1:7171").replace(/\/$/, "");
const TOKEN = process.env.CAIRN_TOKEN;
if (!TOKEN) throw new Error("set CAIRN_TOKEN to the server's token");

/**
 * One request; an error answer throws with the server's message and hint.
 * @param {string} method
 * @param {string} path
 * @param {unknown} [body]
 * @returns {Promise<any>}
 */
async function call(method, path, body) {
  /** @type {Record<string, string>} */
  const headers = { Authorization: `Bearer ${TOKEN}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(BASE + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  const data = text ? JSON.parse(text) : null;
  if (!res.ok) {
    /** @type {ApiError} */
    const e = data.error;
    throw new Error(`${method} ${path}: ${e.code}: ${e.message} (${e.hint})`);
  }
  return data;
}

/**
 * @param {"user" | "assistant"} role
 * @param {string} t
 * @returns {Message}
 */
const text = (role, t) => ({ role, content: [{ type: "text", text: t }] });

/**
 * The tool: read-only, so safe to run again after a crash.
 * @param {{text: string}} args
 */
const wordCount = (args) => String(args.text.split(/\s+/).filter(Boolean).length);

const session = await call("POST", "/sessions", { title: "typescript client example" });
const sid = session.id;
const { op } = await call("POST", `/sessions/${sid}/operations`, { input: text("user", "How many words in 'the log is the truth'?") });
const ops = `/sessions/${sid}/operations/${op}`;

// 1. Announce the model attempt, then call the model (scripted here).
let ticket = await call("POST", `${ops}/attempts`, { provider: "scripted", model: "example" });
const args = { text: "the log is the truth" };
/** @type {Message} */
const reply = { role: "assistant", content: [{ type: "tool_call", call_id: "call-1", name: "word_count", arguments: args }] };
await call("POST", `${ops}/replies`, { entry: ticket.entry, message: reply, usage: { input: 12, output: 9 } });

// 2. T1: dispatch. The answer comes only once T1 is durable; run the tool after it.
const t1 = await call("POST", `${ops}/dispatches`, { call_id: "call-1", effect: "read_only" });
const output = wordCount(args);

// 3. T2: the result, synced before the answer.
await call("POST", `${ops}/results`, { call_id: t1.call_id, content: [{ type: "text", text: output }] });

// 4. The model answers; the operation finishes.
ticket = await call("POST", `${ops}/attempts`, { provider: "scripted", model: "example" });
await call("POST", `${ops}/replies`, { entry: ticket.entry, message: text("assistant", `${output} words.`) });
const done = await call("POST", `${ops}/finish`, { outcome: "completed" });

console.log(JSON.stringify({ session: sid, op, key: t1.key, status: done.status, verdict: done.verdict.verdict }));
