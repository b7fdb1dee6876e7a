//! `cairn agent` stopped by SIGTERM during a tool: the CLI exits with
//! 128 + 15 and says why, after the tool was stopped and recorded.

// Test helpers panic on a failed step; that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use serde_json::json;

#[test]
fn sigterm_during_a_tool_exits_143_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.json");
    std::fs::write(
        &script,
        json!({"turns": [{"replies": [
            {"text": "Waiting.", "tool_calls": [{"name": "bash", "arguments": {"command": "exec sleep 30"}}]},
            {"text": "unreachable"}]}]})
        .to_string(),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .current_dir(dir.path())
        .env_remove("CAIRN_HOME")
        .env("CAIRN_AGENT_ACKS", "1")
        .arg("--store")
        .arg(dir.path().join("home"))
        .args(["agent", "--yes", "-p", "go", "--script"])
        .arg(&script)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for line in lines.by_ref() {
        if line.unwrap().starts_with("@ack t1") {
            break;
        }
    }
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let exit = child.wait().unwrap();
    assert_eq!(exit.code(), Some(143), "{exit}: {stderr}");
    assert!(stderr.contains("stopped by SIGTERM"), "{stderr}");
    assert!(
        rest.iter().any(|l| l.contains("interrupted by SIGTERM")),
        "the tool's result says why: {rest:?}"
    );
}
