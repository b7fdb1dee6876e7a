//! What the model is shown of records whose display the source tool
//! decides: Claude Code's attachments, Codex's replacement histories.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use cairn::{Access, Block, Context, MemoryBackend, Role, Session, SessionId, Store};
use cairn_import::{Ledger, Options, import_file};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn import(name: &str, records: &[Value]) -> Session {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    let text: String = records.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&path, text).unwrap();
    let store = Store::with_backend(Arc::new(MemoryBackend::new()));
    let r = import_file(&store, &mut Ledger::in_memory(), &path, &Options::default()).unwrap();
    store
        .open(&SessionId::parse(&r.session).unwrap(), Access::Read)
        .unwrap()
}

/// Each message's role and its blocks' texts (a tool result's as `result:`).
fn shown(ctx: &Context) -> Vec<(Role, Vec<String>)> {
    ctx.messages()
        .iter()
        .map(|cm| {
            let m = cm.message().expect("read the message");
            let texts = m
                .content
                .iter()
                .flat_map(|b| match b {
                    Block::Text { text } => vec![text.clone()],
                    Block::ToolResult { content, .. } => content
                        .iter()
                        .map(|c| match c {
                            Block::Text { text } => format!("result: {text}"),
                            other => format!("{other:?}"),
                        })
                        .collect(),
                    Block::ToolCall { name, .. } => vec![format!("call: {name}")],
                    other => vec![format!("{other:?}")],
                })
                .collect();
            (m.role, texts)
        })
        .collect()
}

fn claude(uuid: &str, parent: Option<&str>, ty: &str, extra: Value) -> Value {
    let mut v = json!({"type": ty, "uuid": uuid, "parentUuid": parent, "sessionId": "s",
        "isSidechain": false, "timestamp": "2026-01-01T00:00:00.000Z"});
    v.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    v
}

fn attachment(uuid: &str, parent: &str, rendered: Option<&str>) -> Value {
    let mut extra = json!({"attachment": {"type": "date", "date": "2026-01-01"}});
    if let Some(r) = rendered {
        extra["rendered"] = json!([{"content": r}]);
        extra["renderedRole"] = json!("system");
    }
    claude(uuid, Some(parent), "attachment", extra)
}

#[test]
fn claude_code_attachments_are_shown_where_claude_code_sends_them() {
    let s = import(
        "s.jsonl",
        &[
            claude(
                "u1",
                None,
                "user",
                json!({"message": {"role": "user", "content": "list"}}),
            ),
            attachment("t1", "u1", Some("<system-reminder>date</system-reminder>")),
            attachment("t2", "t1", None),
            attachment("t3", "t2", Some("<system-reminder>env</system-reminder>")),
            claude(
                "a1",
                Some("t3"),
                "assistant",
                json!({"message": {"id": "m1", "role": "assistant",
                "content": [{"type": "tool_use", "id": "c1", "name": "Bash", "input": {}}]}}),
            ),
            claude(
                "u2",
                Some("a1"),
                "user",
                json!({"message": {"role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "a b"}]}}),
            ),
            attachment(
                "t4",
                "u2",
                Some("<system-reminder>tokens</system-reminder>"),
            ),
            claude(
                "a2",
                Some("t4"),
                "assistant",
                json!({"message": {"id": "m2", "role": "assistant",
                "content": [{"type": "text", "text": "two files"}]}}),
            ),
            attachment("t5", "a2", Some("<system-reminder>late</system-reminder>")),
            attachment("t6", "t5", None),
        ],
    );
    let t = |x: &str| x.to_owned();
    assert_eq!(
        shown(&s.context()),
        vec![
            // A prompt's reminders go before its text; the one that renders
            // nothing (an older line, or a kind not sent) is not shown.
            (
                Role::User,
                vec![
                    t("<system-reminder>date</system-reminder>"),
                    t("<system-reminder>env</system-reminder>"),
                    t("list")
                ]
            ),
            (Role::Assistant, vec![t("call: Bash")]),
            // A tool result's go after its text.
            (
                Role::Tool,
                vec![
                    t("result: a b"),
                    t("result: <system-reminder>tokens</system-reminder>")
                ]
            ),
            (Role::Assistant, vec![t("two files")]),
            // One after no user line is a message of its own.
            (
                Role::User,
                vec![t("<system-reminder>late</system-reminder>")]
            ),
        ]
    );
    // What the source chains under an attachment goes under the entry the
    // attachment joined; the attachment records are kept in it.
    let a1 = s.entry(&s.resolve("a1").unwrap()).unwrap().unwrap();
    assert_eq!(a1.parent.unwrap().to_string(), "u1");
    // The last record, an attachment that renders nothing, is not the live
    // leaf (the last message is): the import ends with a checkout to it.
    let kinds: Vec<&str> = s.nodes().iter().map(|n| n.kind).collect();
    assert_eq!(
        kinds,
        [
            "message", "message", "message", "message", "message", "ignored", "checkout"
        ]
    );
    let raw = String::from_utf8(s.raw_record(1).unwrap()).unwrap();
    assert!(raw.contains(r#""attachments":["#), "{raw}");
}

fn codex(ty: &str, payload: Value) -> Value {
    json!({"timestamp": "2026-01-01T00:00:00.000Z", "type": ty, "payload": payload})
}

fn codex_message(role: &str, text: &str) -> Value {
    let part = if role == "assistant" {
        "output_text"
    } else {
        "input_text"
    };
    json!({"type": "message", "role": role, "content": [{"type": part, "text": text}]})
}

#[test]
fn codex_replacement_history_shows_its_summary_once() {
    // The bug: the summary was shown as a compaction and again as the
    // replacement history's own summary message.
    let summary = "SUMMARY: the tests pass";
    let s = import(
        "rollout-2026-01-01T00-00-00-r1.jsonl",
        &[
            codex("session_meta", json!({"id": "r1", "cwd": "/w"})),
            codex("turn_context", json!({"model": "gpt-5", "cwd": "/w"})),
            codex("response_item", codex_message("user", "run the tests")),
            codex("response_item", codex_message("assistant", "they pass")),
            codex(
                "compacted",
                json!({"message": summary, "replacement_history": [
                    codex_message("user", "run the tests"),
                    codex_message("user", &format!("Another model summarized:\n{summary}")),
                ]}),
            ),
            codex("response_item", codex_message("user", "now add one")),
        ],
    );
    let ctx = s.context();
    let texts: Vec<String> = shown(&ctx).into_iter().flat_map(|(_, t)| t).collect();
    assert_eq!(
        texts,
        [
            "run the tests",
            &format!("Another model summarized:\n{summary}"),
            "now add one"
        ]
    );
    // The turn context carries over the compaction; the history it replaced
    // stays in the log.
    assert_eq!(ctx.settings().get("model"), Some(&json!("gpt-5")));
    assert_eq!(s.entry_count(), 8);
}
