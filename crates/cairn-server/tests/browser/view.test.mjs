// The web view in headless Chromium (Debian's `chromium`, driven by
// playwright-core): sign in → the list → a session → click an entry → its
// context → rewind with the button → the tree updates live while another
// process appends; hostile strings render as text. Screenshots go to
// $CAIRN_ARTIFACTS.
//
// Run by .ci/serve.sh: CAIRN_BIN (the cairn binary), PLAYWRIGHT_DIR (where
// playwright-core is installed), CHROMIUM (the browser), CAIRN_ARTIFACTS.

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { mkdtempSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

const need = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`set ${name} (see .ci/serve.sh)`);
  return v;
};
const CAIRN = need("CAIRN_BIN");
const { chromium } = createRequire(join(need("PLAYWRIGHT_DIR"), "/"))("playwright-core");
const ARTIFACTS = need("CAIRN_ARTIFACTS");
mkdirSync(ARTIFACTS, { recursive: true });
const TOKEN = "browser-test-token-0123456789";
const HOSTILE = `<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>`;

/** Starts `cairn serve` on a free port; resolves to its base URL. */
async function serve(store) {
  const child = spawn(CAIRN, ["--store", store, "serve", "--listen", "127.0.0.1:0", "--token", TOKEN, "--hold-ms", "50"], { stdio: ["ignore", "pipe", "inherit"] });
  const line = await new Promise((resolve, reject) => {
    createInterface({ input: child.stdout }).once("line", resolve);
    child.once("exit", (code) => reject(new Error(`cairn serve exited with ${code}`)));
  });
  return { child, base: line.trim().replace(/\/$/, "") };
}

async function api(base, method, path, body) {
  const res = await fetch(base + path, {
    method,
    headers: { Authorization: `Bearer ${TOKEN}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await res.json();
  assert.ok(res.ok, JSON.stringify(data));
  return data;
}

const text = (role, t) => ({ kind: "message", data: { role, content: [{ type: "text", text: t }] } });

/** Appends from another process (`cairn append`), retrying while the server holds the writer lock. */
function appendElsewhere(store, session, record) {
  for (let i = 0; ; i++) {
    const r = spawnSync(CAIRN, ["--store", store, "append", session], { input: JSON.stringify(record) + "\n" });
    if (r.status === 0) return;
    if (!String(r.stderr).includes("in use") && !String(r.stderr).includes("holds")) {
      throw new Error(`cairn append failed: ${r.stderr}`);
    }
    assert.ok(i < 200, `the server never gave the writer lock back: ${r.stderr}`);
  }
}

test("the web view: list → session → entry → context → rewind → live updates; hostile text stays text", async () => {
  const store = mkdtempSync(join(tmpdir(), "cairn-browser-"));
  const { child, base } = await serve(store);
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", args: ["--no-sandbox"] });
  try {
    const s = await api(base, "POST", "/sessions", { title: `hostile <b>title</b> ${HOSTILE}`, app_state: { mode: "plan" } });
    const acks = await api(base, "POST", `/sessions/${s.id}/records`, {
      records: [
        text("user", "first question"),
        { kind: "app_state", data: { patch: { mode: "build" } } },
        text("assistant", `answer ${HOSTILE}`),
        text("user", "second question"),
      ],
    });
    const first = acks.appended[0].id;
    await api(base, "POST", "/sessions", { title: "another session" });

    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.setDefaultTimeout(Number(process.env.PW_TIMEOUT || 0));
    const failures = [];
    page.on("pageerror", (e) => failures.push(String(e)));
    page.on("dialog", (d) => d.accept());

    // Signed out: the login form.
    await page.goto(base + "/");
    await page.fill("#token", "wrong");
    await page.click("button[type=submit]");
    await page.waitForSelector(".error");
    await page.fill("#token", TOKEN);
    await page.click("button[type=submit]");

    // The list.
    const row = page.locator(`tr.row[data-id="${s.id}"]`);
    await row.waitFor();
    assert.equal(await page.locator("tr.row").count(), 2);
    assert.equal(await row.locator("a").textContent(), `hostile <b>title</b> ${HOSTILE}`);
    await page.fill("#search", "another");
    await page.waitForFunction(() => document.querySelectorAll("tr.row").length === 1);
    await page.fill("#search", "");
    await page.screenshot({ path: join(ARTIFACTS, "1-list.png"), fullPage: true });

    // A session.
    await row.click();
    await page.waitForSelector(`#tree .node[data-id="${first}"]`);
    assert.equal(await page.locator("#tree .node").count(), 4);
    await page.waitForSelector("#verdict .verdict");
    assert.match(await page.locator("#verdict").textContent(), /ready/);

    // Click an entry: the context and the app state as of it.
    await page.click(`#tree .node[data-id="${first}"]`);
    await page.waitForSelector("#context .msg");
    assert.equal(await page.locator("#context .msg").count(), 1);
    assert.match(await page.locator("#context").textContent(), /first question/);
    assert.deepEqual(JSON.parse(await page.locator("#app-state").textContent()), { mode: "plan" });
    await page.screenshot({ path: join(ARTIFACTS, "2-entry.png"), fullPage: true });

    // Rewind with the button: a checkout becomes the leaf.
    await page.click("#rewind");
    await page.waitForSelector('#tree .node[data-kind="checkout"]');
    const leaf = page.locator("#tree .node", { has: page.locator(".chip.leaf") });
    assert.equal(await leaf.getAttribute("data-kind"), "checkout");

    // Another process appends: the tree follows live.
    appendElsewhere(store, s.id, text("user", "from another process"));
    await page.locator("#tree .node", { hasText: "from another process" }).waitFor();
    assert.equal(await page.locator("#tree .node").count(), 6);
    await page.screenshot({ path: join(ARTIFACTS, "3-rewound-and-live.png"), fullPage: true });

    // Hostile strings are text: nothing ran, no element was made of them.
    const assistant = page.locator("#tree .node", { hasText: "answer" });
    assert.match(await assistant.textContent(), /<img src=x onerror=/);
    await assistant.click();
    await page.waitForFunction(() => document.querySelectorAll("#context .msg").length === 2);
    assert.match(await page.locator("#context").textContent(), /<script>window.__pwned=2<\/script>/);
    assert.equal(await page.evaluate(() => window.__pwned), undefined);
    assert.equal(await page.locator("#app img, #app script, #app b").count(), 0);
    assert.match(await page.locator("#title").textContent(), /<b>title<\/b>/);
    await page.screenshot({ path: join(ARTIFACTS, "4-hostile-as-text.png"), fullPage: true });
    assert.deepEqual(failures, []);
  } finally {
    await browser.close();
    child.kill();
  }
});
