//! The self-contained HTML page: inline CSS, no scripts, nothing fetched.
//! The session tree as SVG on top, then the conversation of the current
//! branch (each entry anchored as `e-<id>`, so tree nodes link to it).

use std::fmt::Write as _;

use anyhow::Result;
use cairn::{AppStateChange, EntryBody, ResultBlock, Session};

use super::blocks::{BlockFormat, Blocks};
use super::{Sink, escape_html as esc, svg};
use crate::cmd::list::short_time;
use cairn_view::describe::{compact, entry_line};
use cairn_view::tree::TreeView;

const CSS: &str = r#"
:root { color-scheme: light dark; --fg:#1d1f23; --bg:#fbfaf7; --muted:#6b6f76; --line:#d9d6cf;
  --user:#0b6e99; --assistant:#7a3e9d; --tool:#9a6700; --active:#1a7f37; --label:#b35900; }
@media (prefers-color-scheme: dark) { :root { --fg:#e6e4df; --bg:#17181b; --muted:#9a9ea6; --line:#34363b;
  --user:#5cb8e6; --assistant:#c99ae6; --tool:#e0b050; --active:#4ac26b; --label:#f0a050; } }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 60rem; padding: 1.5rem; font: 15px/1.5 system-ui, sans-serif;
  color: var(--fg); background: var(--bg); }
h1 { margin: 0 0 .25rem; font-size: 1.6rem; }
h2 { font-size: 1.1rem; border-bottom: 1px solid var(--line); padding-bottom: .25rem; margin-top: 2rem; }
.meta { color: var(--muted); font-size: .85rem; }
code, pre, .tree text { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; }
.treebox { overflow-x: auto; border: 1px solid var(--line); border-radius: 6px; padding: .25rem; }
.tree text { font-size: 12px; fill: var(--fg); }
.tree .id { fill: var(--muted); }
.tree .tag { font-weight: 600; }
.tree .label { fill: var(--label); font-weight: 600; }
.tree .leafmark { fill: var(--active); font-weight: 700; }
.tree .edge { fill: none; stroke: var(--line); stroke-width: 2; }
.tree .edge.active { stroke: var(--active); stroke-width: 3; }
.tree .dot { fill: var(--bg); stroke: var(--muted); stroke-width: 2; }
.tree .active .dot { fill: var(--active); stroke: var(--active); }
.tree .ring { fill: none; stroke: var(--active); stroke-width: 2; }
.tree .node:not(.active) text { opacity: .7; }
.tree a { cursor: pointer; }
.legend { color: var(--muted); font-size: .8rem; margin: .25rem 0 0; }
.entry { margin: .75rem 0; padding: .5rem .75rem; border-left: 3px solid var(--line); border-radius: 3px; }
.entry:target { outline: 2px solid var(--active); }
.entry .who { font-weight: 700; }
.entry .when { color: var(--muted); font-size: .8rem; margin-left: .5rem; }
.user { border-color: var(--user); } .user .who { color: var(--user); }
.assistant { border-color: var(--assistant); } .assistant .who { color: var(--assistant); }
.tool { border-color: var(--tool); } .tool .who { color: var(--tool); }
.note { color: var(--muted); font-size: .9rem; border-left-style: dashed; }
.text { white-space: pre-wrap; overflow-wrap: anywhere; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; background: rgba(127,127,127,.1);
  padding: .5rem; border-radius: 4px; margin: .35rem 0; }
.call, .result { margin: .35rem 0; } .error { color: #cf222e; }
.chip { display: inline-block; padding: 0 .4rem; border-radius: 9px; background: var(--label); color: var(--bg);
  font-size: .75rem; font-weight: 700; margin-left: .4rem; }
table.state { border-collapse: collapse; }
"#;

/// Writes the page to `sink` as it renders it, a tree node or an entry at
/// a time.
///
/// # Errors
///
/// When a record cannot be read, or the output cannot be written.
pub fn render(session: &Session, sink: &mut Sink<'_>) -> Result<()> {
    let view = TreeView::load(session);
    let branch: Vec<usize> = view.branch().collect();
    let title = session
        .title()
        .unwrap_or_else(|| format!("Session {}", session.id()));
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\n\
         <title>{} · cairn</title>\n<style>{CSS}</style>\n</head>\n<body>\n",
        esc(&title)
    );
    let _ = writeln!(h, "<header><h1>{}</h1>", esc(&title));
    let _ = writeln!(
        h,
        "<p class=\"meta\">session <code>{}</code> · created {} UTC · updated {} UTC · {} entries, {} on the current branch</p></header>",
        session.id(),
        esc(&short_time(&session.header().created)),
        esc(&short_time(&session.updated())),
        view.nodes.len(),
        branch.len(),
    );
    h.push_str("<section id=\"tree\">\n<h2>Session tree</h2>\n<div class=\"treebox\">\n");
    svg::render(session, &view, &mut h, sink)?;
    h.push_str(
        "</div>\n<p class=\"legend\">Filled dots and green lines: the current branch, root to leaf (ringed). \
         Hollow dots: other branches, kept in the log. Labels in brackets. Click a dot on the current branch to \
         jump to it.</p>\n</section>\n",
    );
    h.push_str("<section id=\"conversation\">\n<h2>Conversation (current branch)</h2>\n");
    if branch.is_empty() {
        h.push_str("<p class=\"meta\">No entries yet.</p>\n");
    }
    let mut blocks = Blocks::default();
    for n in branch {
        let node = &view.nodes[n];
        let (body, ts) = view.read(session, n)?;
        let chips: String = node
            .labels
            .iter()
            .map(|l| format!("<span class=\"chip\">{}</span>", esc(l)))
            .collect();
        let when = format!(
            "<span class=\"when\">{} · {} UTC</span>",
            esc(node.id.as_str()),
            esc(&short_time(&ts))
        );
        match &body {
            EntryBody::Message(m) => {
                let role = m.role.as_str();
                let _ = writeln!(
                    h,
                    "<div class=\"entry {role}\" id=\"e-{}\"><div><span class=\"who\">{role}</span>{when}{chips}</div>",
                    esc(node.id.as_str())
                );
                for b in &m.content {
                    blocks.write::<Html>(&mut h, b);
                }
                h.push_str("</div>\n");
            }
            other => {
                let text = match other {
                    EntryBody::AppState(AppStateChange::Set(v)) => {
                        format!("app state set to {}", compact(v))
                    }
                    EntryBody::AppState(AppStateChange::Patch(v)) => {
                        format!("app state patched with {}", compact(v))
                    }
                    _ => {
                        let d = entry_line(other);
                        format!("{}: {}", d.tag, d.text)
                    }
                };
                let _ = writeln!(
                    h,
                    "<div class=\"entry note\" id=\"e-{}\"><div>{}{when}{chips}</div></div>",
                    esc(node.id.as_str()),
                    esc(&text)
                );
            }
        }
        sink.emit(&mut h)?;
    }
    h.push_str("</section>\n");
    let ctx = session.context();
    let state = serde_json::to_string_pretty(ctx.app_state()).unwrap_or_default();
    let _ = writeln!(
        h,
        "<section id=\"state\">\n<h2>App state at the leaf</h2>\n<pre>{}</pre>\n</section>",
        esc(&state)
    );
    trace_section(&mut h, session)?;
    let _ = writeln!(
        h,
        "<footer class=\"meta\"><p>Exported by {} from {}.</p></footer>\n</body>\n</html>",
        esc(cairn::WRITER),
        esc(session.location())
    );
    sink.emit(&mut h)?;
    Ok(())
}

/// The exchanges `cairn agent --trace` recorded, each a collapsed
/// `<details>`: headers and bodies (as much as the record holds). None: no
/// section.
fn trace_section(h: &mut String, session: &Session) -> Result<()> {
    let mut traced = Vec::new();
    for (seq, kind) in session.op_records() {
        if kind != cairn_agent::trace::KIND {
            continue;
        }
        let record = session.record(seq)?;
        if let cairn::Body::Op(cairn::OpRecord::Ignored(u)) = &record.body
            && let Some(t) = cairn_agent::trace::Traced::parse(&u.data)
        {
            traced.push((seq, record.ts, t));
        }
    }
    if traced.is_empty() {
        return Ok(());
    }
    h.push_str("<section id=\"trace\">\n<h2>Trace (exchanges with the model server; never in the context)</h2>\n");
    for (seq, ts, t) in traced {
        let mut text = String::new();
        for (title, headers, body) in [
            ("request", &t.request_headers, &t.request_body),
            ("response", &t.response_headers, &t.response_body),
        ] {
            let _ = writeln!(text, "{title}:");
            for (n, v) in headers {
                let _ = writeln!(text, "  {n}: {v}");
            }
            let _ = writeln!(text, "{}", body.text);
            if let Some(blob) = &body.blob {
                let _ = writeln!(
                    text,
                    "… cut at {} of {} bytes; the whole body is {blob}",
                    body.text.len(),
                    body.bytes
                );
            }
        }
        if let Some(e) = &t.error {
            let _ = writeln!(text, "error: {e}");
        }
        let _ = writeln!(
            h,
            "<details class=\"trace\"><summary>#{seq} {} · {}</summary><pre>{}</pre></details>",
            esc(&ts),
            esc(&t.headline()),
            esc(&text)
        );
    }
    h.push_str("</section>\n");
    Ok(())
}

/// The HTML of a transcript's blocks.
struct Html;

impl BlockFormat for Html {
    fn text(h: &mut String, text: &str) {
        let _ = writeln!(h, "<div class=\"text\">{}</div>", esc(text));
    }

    fn thinking(h: &mut String, thinking: &str) {
        let _ = writeln!(
            h,
            "<details><summary>thinking</summary><div class=\"text\">{}</div></details>",
            esc(thinking)
        );
    }

    fn call(h: &mut String, name: &str, call_id: &str, arguments: &str) {
        let _ = writeln!(
            h,
            "<div class=\"call\">→ tool call <code>{}</code> <span class=\"when\">{}</span><pre>{}</pre></div>",
            esc(name),
            esc(call_id),
            esc(arguments)
        );
    }

    fn result_head(h: &mut String, tool: Option<&str>, r: ResultBlock<'_>) {
        let name = tool
            .map(|n| format!(" of <code>{}</code>", esc(n)))
            .unwrap_or_default();
        let err = if r.is_error {
            " <span class=\"error\">error</span>"
        } else {
            ""
        };
        let code = r
            .code
            .map(|c| format!(" <code>{}</code>", esc(c)))
            .unwrap_or_default();
        let _ = writeln!(
            h,
            "<div class=\"result\">← result{name}{err}{code} <span class=\"when\">{}</span>",
            esc(r.call_id)
        );
    }

    fn result_text(h: &mut String, text: &str) {
        let _ = writeln!(h, "<pre>{}</pre>", esc(text));
    }

    fn result_end(h: &mut String) {
        h.push_str("</div>\n");
    }

    fn image(h: &mut String, media_type: &str, data: &str) {
        let safe = media_type.starts_with("image/")
            && media_type
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"/+-.".contains(&c))
            && data
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"+/=".contains(&c));
        if safe {
            let _ = writeln!(
                h,
                "<img alt=\"image\" style=\"max-width:100%\" src=\"data:{media_type};base64,{data}\">"
            );
        } else {
            let _ = writeln!(h, "<p class=\"meta\">[image {}]</p>", esc(media_type));
        }
    }

    fn blob(h: &mut String, uri: &str) {
        let _ = writeln!(h, "<p class=\"meta\">[blob <code>{}</code>]</p>", esc(uri));
    }
}
