// cairn's web view: the session list and a session's page, live over
// Server-Sent Events. Everything shown from a session is written by models
// and tools and is untrusted: it only ever reaches the page as text
// (textContent, never innerHTML), and the server's content security policy
// allows no inline script or style.
"use strict";

const app = document.getElementById("app");
const live = document.getElementById("live");
let cleanup = [];

/** Builds an element: el("div", {class: "x", onclick: f}, child, "text"). */
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else if (k === "dataset") Object.assign(e.dataset, v);
    else e.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function toast(text, error) {
  const t = document.getElementById("toast");
  t.textContent = text;
  t.className = error ? "toast error" : "toast";
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, 5000);
}

/** Calls the API; throws an Error carrying the server's message and hint. */
async function api(method, path, body) {
  const init = { method, headers: {} };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  if (res.status === 401) { location.reload(); throw new Error("signed out"); }
  const text = await res.text();
  const data = text ? JSON.parse(text) : null;
  if (!res.ok) {
    const e = (data && data.error) || {};
    throw new Error(`${e.message || res.statusText} — ${e.hint || ""}`);
  }
  return data;
}

/** Opens an event stream, closed when the page changes. */
function stream(path, handlers) {
  const es = new EventSource(path);
  es.onopen = () => live.classList.add("on");
  es.onerror = () => live.classList.remove("on");
  for (const [name, f] of Object.entries(handlers)) es.addEventListener(name, f);
  cleanup.push(() => es.close());
  return es;
}

function badge(status) {
  return el("span", { class: `badge ${status}` }, status);
}

function route() {
  for (const f of cleanup) f();
  cleanup = [];
  live.classList.remove("on");
  const m = location.hash.match(/^#\/s\/([0-9A-Za-z]+)$/);
  if (m) sessionPage(m[1]);
  else listPage();
}

// ---- the list -------------------------------------------------------------

function listPage() {
  const sessions = new Map();
  const search = el("input", { type: "search", placeholder: "Search titles and first messages", "aria-label": "search", id: "search" });
  const status = el("select", { "aria-label": "status", id: "status" },
    ["", "init", "running", "interrupted", "paused", "succeeded", "failed"].map((s) => el("option", { value: s }, s || "any status")));
  const body = el("tbody", { id: "sessions" });
  const table = el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "status"), el("th", {}, "title"), el("th", {}, "first message"), el("th", {}, "entries"), el("th", {}, "updated"))), body);
  const empty = el("p", { class: "dim", id: "empty" }, "No sessions yet.");
  app.replaceChildren(el("h1", {}, "Sessions"), el("div", { class: "filters" }, search, status), el("div", { class: "card" }, table, empty));

  function draw() {
    const q = search.value.trim().toLowerCase();
    const want = status.value;
    const rows = [...sessions.values()]
      .filter((s) => !want || s.status === want)
      .filter((s) => !q || (s.title || "").toLowerCase().includes(q) || (s.first_message || "").toLowerCase().includes(q))
      .sort((a, b) => (b.updated > a.updated ? 1 : b.updated < a.updated ? -1 : 0));
    body.replaceChildren(...rows.map((s) => el("tr", { class: "row", dataset: { id: s.id }, onclick: () => { location.hash = `#/s/${s.id}`; } },
      el("td", {}, badge(s.status)),
      el("td", {}, el("a", { href: `#/s/${s.id}` }, s.title || s.id)),
      el("td", { class: "dim" }, s.first_message || ""),
      el("td", {}, String(s.entries)),
      el("td", { class: "dim mono" }, s.updated))));
    empty.hidden = rows.length > 0;
  }
  search.addEventListener("input", draw);
  status.addEventListener("change", draw);
  stream("/streams/sessions", {
    session: (e) => { const s = JSON.parse(e.data); sessions.set(s.id, s); draw(); },
    removed: (e) => { sessions.delete(JSON.parse(e.data).id); draw(); },
    ready: draw,
  });
}

// ---- a session --------------------------------------------------------------

function blockText(b) {
  switch (b.type) {
    case "text": return b.text;
    case "thinking": return `(thinking) ${b.thinking}`;
    case "tool_call": return `→ ${b.name}(${JSON.stringify(b.arguments)}) [${b.call_id}]`;
    case "tool_result": return `← [${b.call_id}]${b.is_error ? " error" : ""} ${(b.content || []).map(blockText).join(" ")}`;
    case "image": return `(image ${b.media_type})`;
    case "blob": return `(blob ${b.uri})`;
    default: return `(${b.type})`;
  }
}

function sessionPage(id) {
  let selected = null;
  let tree = null;
  const title = el("h1", { id: "title" }, id);
  const head = el("div", { class: "dim" });
  const verdict = el("div", { id: "verdict" });
  const treeList = el("ul", { class: "tree", id: "tree" });
  const detail = el("div", { id: "detail" }, el("p", { class: "dim" }, "Click an entry to see the context and app state as of it."));
  const steps = el("tbody", { id: "steps" });
  const memory = el("pre", { id: "memory" });
  const actions = el("div", { class: "actions" },
    el("button", { id: "rewind", onclick: rewind }, "Rewind here"),
    el("button", { id: "fork", onclick: fork }, "Fork here"),
    el("button", { id: "label", onclick: label }, "Label…"));
  app.replaceChildren(
    el("p", {}, el("a", { href: "#/" }, "← sessions")),
    title, head,
    el("div", { class: "card" }, el("h2", {}, "Recovery"), verdict),
    el("div", { class: "grid" },
      el("div", { class: "card" }, el("h2", {}, "Tree"), treeList),
      el("div", { class: "card" }, el("h2", {}, "Selected entry"), actions, detail)),
    el("div", { class: "card" }, el("h2", {}, "Steps"),
      el("table", {}, el("thead", {}, el("tr", {}, ["#", "kind", "name", "status", "duration", "tokens"].map((h) => el("th", {}, h)))), steps)),
    el("div", { class: "card" }, el("h2", {}, "Memory"), memory));

  async function refresh() {
    try {
      const [s, t, v, st, mem] = await Promise.all([
        api("GET", `/sessions/${id}`), api("GET", `/sessions/${id}/tree`), api("GET", `/sessions/${id}/verdict`),
        api("GET", `/sessions/${id}/steps`), api("GET", `/sessions/${id}/memory`)]);
      title.textContent = s.title || s.id;
      head.replaceChildren(badge(s.status), ` ${s.id} · ${s.records} records · ${s.entries} entries · updated ${s.updated}`,
        s.forked_from ? ` · forked from ${s.forked_from.session}` : "");
      verdict.replaceChildren(el("span", { class: "verdict" }, v.verdict.verdict), " — ", v.action);
      tree = t;
      drawTree();
      steps.replaceChildren(...st.steps.map((x) => el("tr", {},
        el("td", { class: "mono" }, `s${String(x.number).padStart(4, "0")}`), el("td", {}, x.kind), el("td", {}, x.name),
        el("td", {}, badge(x.status)), el("td", {}, x.duration_ms == null ? "" : `${x.duration_ms} ms`),
        el("td", {}, x.usage ? `${x.usage.input} in / ${x.usage.output} out` : ""))));
      memory.textContent = mem.text;
      if (selected && !t.nodes.some((n) => n.id === selected)) selected = null;
    } catch (e) {
      toast(e.message, true);
    }
  }

  function drawTree() {
    const byId = new Map(tree.nodes.map((n) => [n.id, n]));
    const roots = tree.nodes.filter((n) => n.parent === null);
    const items = [];
    const walk = (n, depth) => {
      const li = el("li", {
        class: `node ${n.kind} ${n.active ? "active" : "off"} ${n.id === selected ? "selected" : ""}`,
        dataset: { id: n.id, kind: n.kind }, tabindex: 0, role: "button",
        onclick: () => select(n.id), onkeydown: (e) => { if (e.key === "Enter") select(n.id); },
      },
      el("span", { class: "dot" }, n.active ? "●" : "○"),
      el("span", { class: "kind" }, n.kind),
      el("span", { class: "text" }, n.summary),
      n.labels.map((l) => el("span", { class: "chip" }, l)),
      n.id === tree.leaf ? el("span", { class: "chip leaf" }, "leaf") : null);
      li.style.paddingLeft = `${4 + depth * 16}px`;
      items.push(li);
      for (const c of n.children) walk(byId.get(c), depth + 1);
    };
    for (const r of roots) walk(r, 0);
    treeList.replaceChildren(...items);
  }

  async function select(entry) {
    selected = entry;
    drawTree();
    try {
      const c = await api("GET", `/sessions/${id}/context?at=${encodeURIComponent(entry)}`);
      detail.replaceChildren(
        el("p", { class: "dim" }, `as of ${entry}`),
        el("div", { id: "context" }, c.messages.map((m) => el("div", { class: `msg ${m.message.role}` },
          el("div", { class: "who" }, `${m.message.role} · ${m.entry}${m.source !== "message" ? ` · ${m.source}` : ""}`),
          el("pre", {}, m.message.content.map(blockText).join("\n"))))),
        el("h2", {}, "App state"),
        el("pre", { id: "app-state" }, JSON.stringify(c.app_state, null, 2)));
    } catch (e) {
      toast(e.message, true);
    }
  }

  function need() {
    if (!selected) toast("Click an entry of the tree first.", true);
    return selected;
  }

  async function rewind() {
    const at = need();
    if (!at || !confirm(`Rewind to ${at}? A checkout entry is appended; nothing is deleted.`)) return;
    try {
      await api("POST", `/sessions/${id}/checkout`, { target: at });
      toast(`Rewound to ${at}.`);
      await refresh();
    } catch (e) { toast(e.message, true); }
  }

  async function fork() {
    const at = need();
    if (!at || !confirm(`Fork a new session from the branch up to ${at}?`)) return;
    try {
      const s = await api("POST", `/sessions/${id}/copy`, { at });
      location.hash = `#/s/${s.id}`;
    } catch (e) { toast(e.message, true); }
  }

  async function label() {
    const at = need();
    if (!at) return;
    const name = prompt(`Label for ${at} (letters, digits, - and _):`);
    if (!name) return;
    try {
      await api("POST", `/sessions/${id}/labels`, { name, target: at });
      await refresh();
    } catch (e) { toast(e.message, true); }
  }

  let pending = null;
  const later = () => { clearTimeout(pending); pending = setTimeout(refresh, 50); };
  refresh().then(async () => {
    const s = await api("GET", `/sessions/${id}`);
    stream(`/sessions/${id}/stream?from=${s.records}`, { record: later, removed: () => toast("This session was deleted.", true) });
  }).catch((e) => toast(e.message, true));
}

window.addEventListener("hashchange", route);
route();
