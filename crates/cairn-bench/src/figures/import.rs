//! `cairn import` of a long pi session vs pi's own reading of the same file:
//! `SessionManager.open` + `buildSessionContext` of
//! `@mariozechner/pi-coding-agent`, run by node in the same run (the package
//! the importer's tests install in `crates/cairn-import/tests/pi-oracle`).
//! Without node, the figure is skipped with a notice, except in CI (`CI`
//! set), where that is an error.

use std::io::{BufWriter, Write as _};
use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, Result, bail};
use cairn::{Block, EntryBody, Role, Store};
use cairn_import::{Ledger, Options, import_file};
use serde_json::{Value, json};

use super::Bench;
use crate::config::issue;
use crate::measure::{best, timed};
use crate::report::{Figure, Target, Unit};
use crate::workload;

pub fn run(b: &Bench) -> Result<Vec<Figure>> {
    let s = &b.sizes;
    let Some(oracle) = cairn_import::oracle::prepare().map_err(anyhow::Error::msg)? else {
        return Ok(Vec::new());
    };
    let dir = b.sub("import")?;
    let file = dir.join("pi-session.jsonl");
    let bytes = write_pi_session(&file, s.import_entries)?;
    // Warm both sides (and the page cache) once, untimed, and check that
    // both read the whole session.
    let messages = node_bench(&oracle, &file, 1)?.1;
    if messages != s.import_entries {
        bail!(
            "pi reads {messages} messages from {}, {} written",
            file.display(),
            s.import_entries
        );
    }
    import_once(&dir, &file, 0)?;
    let mut cairn_ms = Vec::new();
    let mut pi_ms = Vec::new();
    for round in 0..s.import_repeats {
        pi_ms.push(node_bench(&oracle, &file, 1)?.0);
        let (t, written) = timed(|| import_once(&dir, &file, round + 1))?;
        // Every entry, and pi's header line kept as a log-only record.
        let expected = s.import_entries as u64 + 1;
        if written != expected {
            bail!("the import wrote {written} records, {expected} expected");
        }
        cairn_ms.push(t * 1e3);
    }
    let scaled = s.scaled(
        "entries",
        s.import_entries as u64,
        issue::IMPORT_ENTRIES as u64,
    );
    Ok(vec![
        Figure::new(
            "import_pi",
            format!("import a pi session, {} entries", crate::report::thousands(s.import_entries as u64)),
            Unit::Millis,
            best(cairn_ms),
            "pi's own SessionManager.open + buildSessionContext (node)",
            best(pi_ms),
            Some(Target::AtMost(2.0)),
        )
        .scaled(scaled)
        .note(format!(
            "{:.1} MiB; cairn: read, parse, convert, check every invariant, write a new session file (synced) and the ledger; best of {} each; node's start and module load not counted",
            bytes as f64 / 1048576.0,
            s.import_repeats
        )),
    ])
}

/// pi's best time (ms) over `rounds` opens, and the messages of its context.
fn node_bench(dir: &Path, file: &Path, rounds: usize) -> Result<(f64, usize)> {
    let out = Command::new("node")
        .arg(dir.join("oracle.mjs"))
        .arg("bench")
        .arg(file)
        .arg(rounds.to_string())
        .output()
        .context("run node")?;
    if !out.status.success() {
        bail!(
            "the pi oracle failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v: Value = serde_json::from_slice(&out.stdout).context("read the pi oracle's answer")?;
    let ms = v["ms"]
        .as_f64()
        .context("no time in the pi oracle's answer")?;
    let messages = v["messages"]
        .as_u64()
        .context("no count in the pi oracle's answer")?;
    Ok((ms, usize::try_from(messages).unwrap_or(usize::MAX)))
}

/// One import into a fresh store; returns the records written.
fn import_once(dir: &Path, file: &Path, round: usize) -> Result<u64> {
    let home = dir.join(format!("store-{round}"));
    let store = Store::open_dir(&home);
    let mut ledger = Ledger::open(&home)?;
    let report = import_file(&store, &mut ledger, file, &Options::default())?;
    Ok(report.written)
}

/// A linear pi session (version 3) of the benchmark's workload cycles;
/// returns its size in bytes.
fn write_pi_session(path: &Path, entries: usize) -> Result<u64> {
    let mut w = BufWriter::new(std::fs::File::create(path)?);
    let header = json!({"type": "session", "version": 3, "id": "bench", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/work"});
    writeln!(w, "{header}")?;
    let bodies = workload::bodies(17, "call_", entries.div_ceil(4));
    let mut parent = Value::Null;
    for (i, body) in bodies.iter().take(entries).enumerate() {
        let EntryBody::Message(m) = body else {
            continue;
        };
        let id = format!("{i:08x}");
        let t = 1_767_225_600_000u64 + i as u64 * 1000;
        let message = pi_message(m, t);
        let line = json!({"type": "message", "id": id, "parentId": parent,
            "timestamp": cairn::format_millis(t as i64), "message": message});
        writeln!(w, "{line}")?;
        parent = json!(id);
    }
    w.flush()?;
    Ok(std::fs::metadata(path)?.len())
}

fn pi_message(m: &cairn::Message, t: u64) -> Value {
    let blocks: Vec<Value> = m
        .content
        .iter()
        .filter_map(|b| match b {
            Block::Text { text } => Some(json!({"type": "text", "text": text})),
            Block::ToolCall {
                call_id,
                name,
                arguments,
            } => Some(
                json!({"type": "toolCall", "id": call_id, "name": name, "arguments": arguments}),
            ),
            _ => None,
        })
        .collect();
    match m.role {
        Role::Tool => {
            let (call, text) = m
                .content
                .iter()
                .find_map(|b| match b {
                    Block::ToolResult {
                        call_id, content, ..
                    } => Some((call_id.clone(), content.clone())),
                    _ => None,
                })
                .unwrap_or_default();
            let text: Vec<Value> = text
                .iter()
                .filter_map(|c| match c {
                    Block::Text { text } => Some(json!({"type": "text", "text": text})),
                    _ => None,
                })
                .collect();
            json!({"role": "toolResult", "toolCallId": call, "toolName": "bash", "content": text, "isError": false, "timestamp": t})
        }
        Role::Assistant => {
            let u = m.usage.clone().unwrap_or_default();
            json!({"role": "assistant", "content": blocks, "api": "openai-completions", "provider": "openai",
                "model": m.model, "usage": {"input": u.input, "output": u.output, "cacheRead": u.cached, "cacheWrite": 0,
                "totalTokens": u.input + u.output, "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}},
                "stopReason": if m.stop_reason.as_deref() == Some("tool_use") { "toolUse" } else { "stop" }, "timestamp": t})
        }
        Role::User | Role::System | Role::Developer => {
            json!({"role": "user", "content": m.plain_text(), "timestamp": t})
        }
    }
}
