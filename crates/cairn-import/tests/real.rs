//! Fixtures recorded from the real CLIs (`fixtures/real/make.sh` runs
//! Claude Code and Codex offline against a scripted local provider): each
//! import's context must be what the CLI itself sent the model in its last
//! request (`*.wire.json`, as the provider received it), followed by the
//! final answer; subagents and forks must be linked as cairn links its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn::{Access, Block, Context, MemoryBackend, Role, Session, SessionId, Store};
use cairn_import::{FileReport, Ledger, Options, Outcome, import_file};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn real(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/real")
        .join(rel)
}

/// The one file of `dir` whose name matches.
fn find(dir: &str, f: impl Fn(&str) -> bool) -> PathBuf {
    let mut hits: Vec<PathBuf> = std::fs::read_dir(real(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.file_name().and_then(|n| n.to_str()).is_some_and(&f))
        .collect();
    assert_eq!(hits.len(), 1, "{dir}: {hits:?}");
    hits.remove(0)
}

fn wire(rel: &str) -> Vec<Value> {
    serde_json::from_slice(&std::fs::read(real(rel)).unwrap()).unwrap()
}

fn store() -> Store {
    Store::with_backend(Arc::new(MemoryBackend::new()))
}

fn open(store: &Store, r: &FileReport) -> Session {
    store
        .open(&SessionId::parse(&r.session).unwrap(), Access::Read)
        .unwrap()
}

/// Consecutive messages of one role as one (the Messages API's rule).
fn merged(messages: Vec<(String, Vec<Value>)>) -> Vec<Value> {
    let mut out: Vec<(String, Vec<Value>)> = Vec::new();
    for (role, content) in messages {
        match out.last_mut() {
            Some((r, c)) if *r == role => c.extend(content),
            _ => out.push((role, content)),
        }
    }
    out.into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

/// What the Anthropic Messages API received, in the comparison form: text,
/// tool calls, and tool results as their text (parts joined as Claude Code
/// joins a reminder to a result's text). Texts are compared without their
/// trailing white space: the one difference Claude Code's own record of a
/// reminder has from what it sent (its `rendered` text of the commit
/// attribution reminder, marked `renderedBesideToolResult`, lacks the final
/// newline it sends when the reminder goes before a prompt).
fn anthropic_wire(messages: &[Value]) -> Vec<Value> {
    let texts = |c: &Value| match c {
        Value::String(s) => s.trim_end().to_owned(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str().map(str::trim_end))
            .collect::<Vec<_>>()
            .join("\n\n"),
        _ => String::new(),
    };
    merged(
        messages
            .iter()
            .map(|m| {
                let content = match &m["content"] {
                    Value::String(s) => vec![json!({"text": s.trim_end()})],
                    Value::Array(blocks) => blocks
                        .iter()
                        .map(|b| match b["type"].as_str().unwrap_or("") {
                            "text" => json!({"text": b["text"].as_str().unwrap().trim_end()}),
                            "tool_use" => json!({"call": [b["id"], b["name"], b["input"]]}),
                            "tool_result" => {
                                json!({"result": [b["tool_use_id"], texts(&b["content"])]})
                            }
                            other => json!({"unexpected": other}),
                        })
                        .collect(),
                    _ => Vec::new(),
                };
                (m["role"].as_str().unwrap_or("").to_owned(), content)
            })
            .collect(),
    )
}

/// One block in the comparison form (texts without trailing white space),
/// a tool result's text as `result_text` joins it.
fn block_form(b: &Block, result_text: fn(&[Block]) -> String) -> Value {
    match b {
        Block::Text { text } => json!({"text": text.trim_end()}),
        Block::ToolCall {
            call_id,
            name,
            arguments,
        } => json!({"call": [call_id, name, arguments]}),
        Block::ToolResult {
            call_id, content, ..
        } => json!({"result": [call_id, result_text(content)]}),
        other => json!({"unexpected": format!("{other:?}")}),
    }
}

/// The text blocks of a tool result's content.
fn texts(content: &[Block]) -> impl Iterator<Item = &str> {
    content.iter().filter_map(|c| match c {
        Block::Text { text } => Some(text.as_str()),
        _ => None,
    })
}

/// cairn's context in the same form.
fn anthropic_cairn(ctx: &Context) -> Vec<Value> {
    merged(
        ctx.messages()
            .iter()
            .map(|cm| {
                let m = cm.message().expect("read the message");
                let role = match m.role {
                    Role::Assistant => "assistant",
                    _ => "user",
                };
                let content = m
                    .content
                    .iter()
                    .map(|b| {
                        block_form(b, |c| {
                            texts(c).map(str::trim_end).collect::<Vec<_>>().join("\n\n")
                        })
                    })
                    .collect();
                (role.to_owned(), content)
            })
            .collect(),
    )
}

/// The Responses API's input items, in the comparison form: one item per
/// message part, call and output.
fn responses_wire(items: &[Value]) -> Vec<Value> {
    let mut out = Vec::new();
    for i in items {
        match i["type"].as_str().unwrap_or("") {
            "message" => {
                for part in i["content"].as_array().unwrap() {
                    let text = part["text"].as_str().unwrap().trim_end();
                    out.push(json!({"role": i["role"], "text": text}));
                }
            }
            "function_call" => {
                let args: Value = serde_json::from_str(i["arguments"].as_str().unwrap()).unwrap();
                out.push(json!({"call": [i["call_id"], i["name"], args]}));
            }
            "function_call_output" => out.push(json!({"result": [i["call_id"], i["output"]]})),
            other => out.push(json!({"unexpected": other})),
        }
    }
    out
}

/// The Responses API's input without its first item, Codex's base
/// instructions (its system prompt: kept in the `codex.session_meta` record,
/// out of the context).
fn without_instructions(items: &[Value]) -> Vec<Value> {
    let mut out = responses_wire(items);
    let first = out.remove(0);
    assert_eq!(first["role"], "developer");
    assert!(
        first["text"]
            .as_str()
            .unwrap()
            .starts_with("You are a coding agent running in the Codex CLI")
    );
    out
}

fn responses_cairn(ctx: &Context) -> Vec<Value> {
    let mut out = Vec::new();
    for cm in ctx.messages() {
        let m = cm.message().expect("read the message");
        for b in &m.content {
            let mut item = block_form(b, |c| texts(c).collect());
            if let Some(text) = item.as_object_mut().filter(|o| o.contains_key("text")) {
                text.insert("role".into(), json!(m.role.as_str()));
            }
            out.push(item);
        }
    }
    out
}

/// Asserts two canonical contexts are equal, naming the first difference
/// (the full values hold whole system prompts).
fn assert_same(got: &[Value], sent: &[Value]) {
    let cut = |v: &Value| v.to_string().chars().take(300).collect::<String>();
    for (i, (g, w)) in got.iter().zip(sent).enumerate() {
        if g != w {
            // Around the first character that differs.
            let (g, w) = (g.to_string(), w.to_string());
            let at = g.chars().zip(w.chars()).take_while(|(a, b)| a == b).count();
            let near = |s: &str| {
                s.chars()
                    .skip(at.saturating_sub(150))
                    .take(300)
                    .collect::<String>()
            };
            panic!(
                "message {i} differs at character {at}:\n cairn: …{}\n wire:  …{}",
                near(&g),
                near(&w)
            );
        }
    }
    assert_eq!(
        got.len(),
        sent.len(),
        "cairn: {:?}\nwire: {:?}",
        got.iter().map(cut).collect::<Vec<_>>(),
        sent.iter().map(cut).collect::<Vec<_>>()
    );
}

/// The Codex rollouts: the session, then its fork (file names begin with
/// the time).
fn codex_rollouts() -> (PathBuf, PathBuf) {
    let mut v: Vec<PathBuf> = std::fs::read_dir(real("codex"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("rollout-")
        })
        .collect();
    v.sort();
    let [parent, fork] = &v[..] else {
        panic!("{v:?}")
    };
    (parent.clone(), fork.clone())
}

/// The context's last message's text (the final answer, after the last
/// request).
fn last_text(ctx: &Context) -> String {
    ctx.messages()
        .last()
        .unwrap()
        .message()
        .expect("read the message")
        .plain_text()
}

#[test]
fn claude_code_transcript_imports_to_what_claude_code_sent() {
    let store = store();
    let r = import_file(
        &store,
        &mut Ledger::in_memory(),
        &real("claude-code/shell.jsonl"),
        &Options::default(),
    )
    .unwrap();
    assert_eq!(r.format, "claude-code");
    let s = open(&store, &r);
    let ctx = s.context();
    let mut got = anthropic_cairn(&ctx);
    assert_eq!(last_text(&ctx), "Done: out.txt says hello.");
    got.pop();
    // The reminders Claude Code attaches to the prompt and to the tool
    // result are in the context where it sent them.
    assert_same(&got, &anthropic_wire(&wire("claude-code/shell.wire.json")));
}

#[test]
fn claude_code_subagent_transcript_is_linked_under_the_call_that_started_it() {
    let parent_file = find("claude-code", |n| {
        n.ends_with(".jsonl") && n != "shell.jsonl"
    });
    let dir = parent_file.with_extension("");
    let child_file = std::fs::read_dir(dir.join("subagents"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .unwrap();
    let store = store();
    let mut ledger = Ledger::in_memory();
    // The subagent first: its parent is imported on the way.
    let child = import_file(&store, &mut ledger, &child_file, &Options::default()).unwrap();
    assert_eq!(child.also.len(), 1, "{child:?}");
    let parent = &child.also[0];
    assert_eq!(parent.outcome, Outcome::New);
    assert_eq!(
        import_file(&store, &mut ledger, &parent_file, &Options::default())
            .unwrap()
            .outcome,
        Outcome::Unchanged
    );
    let c = open(&store, &child);
    let spawn = c.header().lineage.parent.clone().expect("linked");
    assert_eq!(spawn.session.to_string(), parent.session);
    assert_eq!(spawn.call_id, "toolu_mock_task_1");
    assert_eq!(spawn.depth, 1);
    let parent_id = SessionId::parse(&parent.session).unwrap();
    let children = store.children(&parent_id).unwrap();
    assert_eq!(children.len(), 1);
    assert_eq!(children[0].0.id.to_string(), child.session);
    // Each side's context is what Claude Code sent for it.
    let ctx = c.context();
    assert_eq!(last_text(&ctx), "There are 2 files.");
    let mut got = anthropic_cairn(&ctx);
    got.pop();
    assert_same(
        &got,
        &anthropic_wire(&wire("claude-code/subagent.wire.json")),
    );
    let p = open(&store, parent);
    let mut got = anthropic_cairn(&p.context());
    got.pop();
    let mut sent = anthropic_wire(&wire("claude-code/delegate.wire.json"));
    // One known difference: Claude Code wraps a background task's
    // notification in a system reminder with a preamble of its own when it
    // sends it; the transcript (and so cairn) has it as queued.
    let (Some(got_last), Some(sent_last)) = (got.pop(), sent.pop()) else {
        panic!()
    };
    assert_same(&got, &sent);
    let notification = got_last["content"][1]["text"].as_str().unwrap();
    let wrapped = sent_last["content"][1]["text"].as_str().unwrap();
    assert!(notification.starts_with("<task-notification>"));
    assert!(wrapped.starts_with("<system-reminder>\n[SYSTEM NOTIFICATION"));
    assert!(wrapped.contains(notification.trim_end()));
    assert_eq!(got_last["content"][0], sent_last["content"][0]);
}

#[test]
fn codex_fork_continues_a_copy_of_its_parents_branch_and_is_linked() {
    let (parent_file, fork_file) = codex_rollouts();
    let (parent_file, fork_file) = (&parent_file, &fork_file);
    let store = store();
    let mut ledger = Ledger::in_memory();
    // The fork first: its parent is found beside it and imported on the way.
    let fork = import_file(&store, &mut ledger, fork_file, &Options::default()).unwrap();
    assert_eq!(fork.also.len(), 1, "{fork:?}");
    let parent = open(&store, &fork.also[0]);
    let f = open(&store, &fork);
    let origin = f.header().lineage.forked_from.clone().expect("linked");
    assert_eq!(&origin.session, parent.id());
    assert_eq!(
        origin.entry,
        parent.leaf(),
        "forked after all of the parent's items"
    );
    assert!(
        fork.also[0]
            .path
            .ends_with(parent_file.file_name().unwrap().to_str().unwrap())
    );
    // Codex sent the parent's history, then the fork's own turn.
    let ctx = f.context();
    assert_eq!(last_text(&ctx), "Done: out.txt says hello.");
    let mut got = responses_cairn(&ctx);
    got.pop();
    assert_same(&got, &without_instructions(&wire("codex/fork.wire.json")));
    let mut got = responses_cairn(&parent.context());
    got.pop();
    assert_same(&got, &without_instructions(&wire("codex/shell.wire.json")));
}

#[test]
fn a_codex_fork_imported_as_it_grows_ends_where_importing_it_whole_does() {
    // A grown fork replays the copy of its parent's branch, then its own
    // items, before it appends the new ones.
    let (parent_file, fork_file) = codex_rollouts();
    let (whole_store, whole) = {
        let store = store();
        let r = import_file(
            &store,
            &mut Ledger::in_memory(),
            &fork_file,
            &Options::default(),
        )
        .unwrap();
        (store, r)
    };
    let expected = responses_cairn(&open(&whole_store, &whole).context());
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        &parent_file,
        dir.path().join(parent_file.file_name().unwrap()),
    )
    .unwrap();
    let path = dir.path().join(fork_file.file_name().unwrap());
    let text = std::fs::read_to_string(&fork_file).unwrap();
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let store = store();
    let mut ledger = Ledger::in_memory();
    let live = Options {
        live: true,
        ..Options::default()
    };
    for cut in [1, lines.len() / 2] {
        std::fs::write(&path, lines[..cut].concat()).unwrap();
        import_file(&store, &mut ledger, &path, &live).unwrap();
    }
    std::fs::write(&path, &text).unwrap();
    let last = import_file(&store, &mut ledger, &path, &Options::default()).unwrap();
    assert_eq!(last.outcome, Outcome::Grown);
    assert_eq!(responses_cairn(&open(&store, &last).context()), expected);
}

#[test]
fn a_codex_fork_finds_its_parent_under_the_sessions_root() {
    // As Codex keeps them: sessions/YYYY/MM/DD/, the parent on another day.
    let (parent_file, fork_file) = codex_rollouts();
    let dir = tempfile::tempdir().unwrap();
    let day = |d: &str, f: &Path| {
        let at = dir.path().join("sessions/2026/11").join(d);
        std::fs::create_dir_all(&at).unwrap();
        let to = at.join(f.file_name().unwrap());
        std::fs::copy(f, &to).unwrap();
        to
    };
    day("29", &parent_file);
    let fork = day("30", &fork_file);
    let store = store();
    let r = import_file(&store, &mut Ledger::in_memory(), &fork, &Options::default()).unwrap();
    assert_eq!(r.also.len(), 1, "{r:?}");
    assert!(r.also[0].path.contains("/sessions/2026/11/29/"));
    assert!(open(&store, &r).header().lineage.forked_from.is_some());
}
