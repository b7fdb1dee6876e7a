//! `cairn import` and `cairn export --format pi` through the built binary:
//! the fixtures of every format, the ledger across runs, `--strict`,
//! `--watch` following a file that grows, and a pi export read back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::{Value, json};
use support::{Home, stderr};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../cairn-import/tests/fixtures")
}

fn outcomes(report: &Value) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = report["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["format"].as_str().unwrap().to_owned(),
                f["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn import_of_every_format_then_again_changes_nothing() {
    let home = Home::new();
    let dir = fixtures();
    let first = home.json(&["import", "--json", dir.to_str().unwrap()]);
    let new = |f: &str| (f.to_owned(), "new".to_owned());
    assert_eq!(
        outcomes(&first),
        vec![
            new("claude-code"),
            new("codex"),
            new("pi"),
            new("pi"),
            new("pi")
        ]
    );
    let damaged = first["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"].as_str().unwrap().ends_with("damaged.jsonl"))
        .unwrap();
    let kinds: Vec<&str> = damaged["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["kind"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"damaged") && kinds.contains(&"repaired"),
        "{kinds:?}"
    );
    assert!(
        home.path().join("imports.json").exists(),
        "the ledger is in the store"
    );
    let again = home.json(&["import", "--json", dir.to_str().unwrap()]);
    assert!(
        outcomes(&again).iter().all(|(_, o)| o == "unchanged"),
        "{again}"
    );
    assert_eq!(home.store().list().unwrap().len(), 5);
    home.prints(&["fsck", "--all"], "ok");
}

#[test]
fn strict_import_of_a_damaged_file_fails_with_its_line() {
    let home = Home::new();
    let file = fixtures().join("pi/damaged.jsonl");
    let out = home
        .cairn()
        .args(["import", "--strict", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("line 3") && text.contains("drop --strict"),
        "{text}"
    );
    assert!(home.store().list().unwrap().is_empty());
}

#[test]
fn unknown_format_is_refused_with_a_hint() {
    let home = Home::new();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("x.jsonl");
    std::fs::write(&file, "{\"hello\":1}\n").unwrap();
    let out = home
        .cairn()
        .args(["import", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8(out.stdout)
            .unwrap()
            .contains("--from pi|claude-code|codex")
    );
    home.refuses(&["import", "/nonexistent/dir"], "does not exist");
}

#[test]
fn pi_export_imports_back_to_the_same_context() {
    let home = Home::new();
    let src = fixtures().join("pi/v3-everything.jsonl");
    let first = home.json(&["import", "--json", src.to_str().unwrap()]);
    let id = first["files"][0]["session"].as_str().unwrap().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("exported.jsonl");
    home.cairn()
        .args(["export", &id, "--format", "pi", "-o", out.to_str().unwrap()])
        .assert()
        .success();
    let header: Value = serde_json::from_str(
        std::fs::read_to_string(&out)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(header["type"], json!("session"));
    assert_eq!(header["version"], json!(3));
    let back = home.json(&["import", "--json", out.to_str().unwrap()]);
    let id2 = back["files"][0]["session"].as_str().unwrap().to_owned();
    let a = home.json(&["context", &id, "--json"]);
    let b = home.json(&["context", &id2, "--json"]);
    let messages = |c: &Value| -> Vec<Value> {
        c["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["message"].clone())
            .collect()
    };
    assert_eq!(messages(&a), messages(&b));
    assert_eq!(a["settings"], b["settings"]);
}

/// Reads one pretty-printed JSON report from `--watch --json`.
fn next_report(r: &mut impl BufRead) -> Value {
    let mut text = String::new();
    loop {
        let mut line = String::new();
        assert!(
            r.read_line(&mut line).unwrap() > 0,
            "cairn import --watch ended"
        );
        let end = line == "}\n";
        text.push_str(&line);
        if end {
            return serde_json::from_str(&text).unwrap();
        }
    }
}

#[test]
fn watch_imports_what_a_live_source_appends() {
    let home = Home::new();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("live.jsonl");
    let header = json!({"type": "session", "version": 3, "id": "live", "timestamp": "2025-01-01T00:00:00.000Z", "cwd": "/w"});
    let line = |id: &str, parent: Value, text: &str| {
        json!({"type": "message", "id": id, "parentId": parent, "timestamp": "2025-01-01T00:00:01.000Z",
            "message": {"role": "user", "content": text, "timestamp": 1}})
    };
    std::fs::write(
        &file,
        format!("{header}\n{}\n", line("a1", Value::Null, "one")),
    )
    .unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
        .env_remove("CAIRN_HOME")
        .arg("--store")
        .arg(home.path())
        .args(["import", "--watch", "--json", file.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let first = next_report(&mut out);
    assert_eq!(first["files"][0]["outcome"], json!("new"));
    let session = first["files"][0]["session"].as_str().unwrap().to_owned();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap();
    writeln!(f, "{}", line("a2", json!("a1"), "two")).unwrap();
    drop(f);
    let second = next_report(&mut out);
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success());
    assert_eq!(second["files"][0]["outcome"], json!("grown"), "{second}");
    assert_eq!(second["files"][0]["session"], json!(session));
    let ctx = home.json(&["context", &session, "--json"]);
    assert_eq!(ctx["messages"].as_array().unwrap().len(), 2);
    let _ = stderr;
}

#[test]
fn an_imported_claude_code_subagent_shows_under_the_call_that_started_it() {
    // Only the subagent's transcript is named: its parent is imported first.
    let home = Home::new();
    let real =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../cairn-import/fixtures/real/claude-code");
    let agent = std::fs::read_dir(&real)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .map(|d| d.join("subagents"))
        .and_then(|d| std::fs::read_dir(d).ok())
        .into_iter()
        .flatten()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .unwrap();
    let report = home.json(&["import", "--json", agent.to_str().unwrap()]);
    let files = report["files"].as_array().unwrap();
    assert_eq!(files.len(), 2, "{report}");
    let (parent, child) = (&files[0]["session"], &files[1]["session"]);
    let steps = home.json(&["steps", "--json", parent.as_str().unwrap()]);
    let call = steps
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["call_id"] == "toolu_mock_task_1")
        .unwrap();
    assert_eq!(&call["child"], child);
    assert!(!call["child_steps"].as_array().unwrap().is_empty());
    home.prints(
        &["tree", parent.as_str().unwrap()],
        &format!("subagent session {}", child.as_str().unwrap()),
    );
    home.prints(
        &["show", child.as_str().unwrap()],
        "spawned it (tool call toolu_mock_task_1, depth 1)",
    );
}
