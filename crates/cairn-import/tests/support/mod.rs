//! Shared by the importer tests: pi's own SessionManager run with node (the
//! oracle), and the canonical form both sides' contexts are compared in.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use cairn::{Block, Context, Role, Source, TOOL_OUTCOME_UNKNOWN};
use cairn_import::pi::{
    BRANCH_SUMMARY_PREFIX, BRANCH_SUMMARY_SUFFIX, COMPACTION_SUMMARY_PREFIX,
    COMPACTION_SUMMARY_SUFFIX,
};
use serde_json::{Value, json};

/// pi's oracle, ready to run (`None`, with a notice, without node outside CI).
/// The text of each message of a context.
pub fn texts(ctx: &Context) -> Vec<String> {
    ctx.messages()
        .iter()
        .map(|m| m.message().expect("read the message").plain_text())
        .collect()
}

pub fn oracle() -> Option<PathBuf> {
    cairn_import::oracle::prepare().unwrap_or_else(|e| panic!("{e}"))
}

/// pi's context for each file: one JSON value per file, in order.
pub fn pi_contexts(dir: &Path, files: &[PathBuf]) -> Vec<Value> {
    let mut out = Vec::new();
    // Keep command lines short.
    for chunk in files.chunks(200) {
        let output = Command::new("node")
            .arg(dir.join("oracle.mjs"))
            .arg("context")
            .args(chunk)
            .output()
            .expect("run node");
        assert!(
            output.status.success(),
            "the pi oracle failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        for line in String::from_utf8(output.stdout).unwrap().lines() {
            out.push(serde_json::from_str(line).unwrap());
        }
    }
    assert_eq!(out.len(), files.len());
    out
}

/// pi's messages for the model (its `convertToLlm` of the context), in the
/// canonical form.
pub fn canonical_pi(ctx: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    for m in ctx["messages"].as_array().unwrap() {
        let llm = &m["llm"];
        if llm.is_null() {
            continue;
        }
        let blocks = |content: &Value| -> Vec<Value> {
            match content {
                Value::String(s) => vec![json!({"text": s})],
                Value::Array(bs) => bs
                    .iter()
                    .map(|b| match b["type"].as_str().unwrap_or("") {
                        "text" => json!({"text": b["text"]}),
                        "image" => json!({"image": [b["mimeType"], b["data"]]}),
                        "thinking" => json!({"thinking": b["thinking"]}),
                        "toolCall" => json!({"call": [b["id"], b["name"], b["arguments"]]}),
                        other => json!({"unknown": other}),
                    })
                    .collect(),
                _ => Vec::new(),
            }
        };
        match llm["role"].as_str().unwrap_or("") {
            "toolResult" => out.push(json!({"result": [
                llm["toolCallId"],
                llm["isError"].as_bool().unwrap_or(false),
                blocks(&llm["content"]),
            ]})),
            r => out.push(json!({"role": r, "content": blocks(&llm["content"])})),
        }
    }
    out
}

/// cairn's context in the canonical form; without the results the import
/// wrote for calls the source left open (returned beside it) unless
/// `keep_repairs`.
pub fn canonical_cairn(ctx: &Context, keep_repairs: bool) -> (Vec<Value>, Vec<String>) {
    let mut out = Vec::new();
    let mut repaired = Vec::new();
    let block = |b: &Block| match b {
        Block::Text { text } => json!({"text": text}),
        Block::Image { media_type, data } => json!({"image": [media_type, data]}),
        Block::Thinking { thinking, .. } => json!({"thinking": thinking}),
        Block::ToolCall {
            call_id,
            name,
            arguments,
        } => json!({"call": [call_id, name, arguments]}),
        other => json!({"unexpected": format!("{other:?}")}),
    };
    for cm in ctx.messages() {
        let m = cm.message().expect("read the message");
        match cm.source() {
            // Summaries as pi frames them for the model.
            Source::CompactionSummary => {
                let s = &ctx.compaction().unwrap().summary;
                let text = format!("{COMPACTION_SUMMARY_PREFIX}{s}{COMPACTION_SUMMARY_SUFFIX}");
                out.push(json!({"role": "user", "content": [{"text": text}]}));
                continue;
            }
            Source::CheckoutSummary => {
                let text = m.plain_text();
                let s = text.split_once("\n\n").map_or("", |(_, s)| s);
                let text = format!("{BRANCH_SUMMARY_PREFIX}{s}{BRANCH_SUMMARY_SUFFIX}");
                out.push(json!({"role": "user", "content": [{"text": text}]}));
                continue;
            }
            _ => {}
        }
        match m.role {
            Role::Tool => {
                for b in &m.content {
                    match b.as_result() {
                        Some(r) if !keep_repairs && r.code == Some(TOOL_OUTCOME_UNKNOWN) => {
                            repaired.push(r.call_id.to_owned());
                        }
                        Some(r) => out.push(json!({"result": [
                            r.call_id,
                            r.is_error,
                            r.content.iter().map(block).collect::<Vec<_>>(),
                        ]})),
                        None => out.push(json!({"stray": block(b)})),
                    }
                }
            }
            r => out.push(json!({
                "role": r.as_str(),
                "content": m.content.iter().map(block).collect::<Vec<_>>(),
            })),
        }
    }
    (out, repaired)
}

/// The calls of a canonical context that no result follows.
pub fn dangling(canonical: &[Value]) -> Vec<String> {
    let mut open: Vec<String> = Vec::new();
    for m in canonical {
        if let Some(r) = m.get("result") {
            let id = r[0].as_str().unwrap_or("").to_owned();
            open.retain(|c| *c != id);
        }
        if let Some(content) = m.get("content").and_then(Value::as_array) {
            for b in content {
                if let Some(c) = b.get("call") {
                    open.push(c[0].as_str().unwrap_or("").to_owned());
                }
            }
        }
    }
    open
}
