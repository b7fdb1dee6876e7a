//! The REPL's commands, through the `cairn-agent` binary with requests and
//! commands on stdin (no terminal): what they print is for people.

// Test helpers panic on a failed step; that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_cairn-agent");

/// Runs the REPL on `input` and returns what it printed.
fn repl(input: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.json");
    std::fs::write(
        &script,
        json!({"summary": "Two panels were drawn.", "turns": [{"replies": [{"text": "Done, as asked."}]}]})
            .to_string(),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .current_dir(dir.path())
        .arg("--store")
        .arg(dir.path().join("home"))
        .arg("--script")
        .arg(&script)
        .args(["--compact-at", "10"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn regression_repl_context_printed_rust_debug_text() {
    let out = repl("draw panel 1\ndraw panel 2\n/compact\n/context\n/quit\n");
    let line = out
        .lines()
        .find(|l| l.starts_with("(compacted at"))
        .unwrap_or_else(|| panic!("/context shows no compaction:\n{out}"));
    assert!(!line.contains("Some("), "{line}");
    assert!(!line.contains('"'), "{line}");
    assert!(
        line.contains("a summary, then the messages from entry")
            || line.contains("a summary of everything before it"),
        "{line}"
    );
}

#[test]
fn rewind_takes_a_step_number_and_steps_show_what_went_in_and_out() {
    // Two requests: s0001 input, s0002 model, s0003 input, s0004 model.
    let out =
        repl("draw panel 1\ndraw panel 2\n/steps\n/rewind s0002\n/context\n/rewind s0099\n/quit\n");
    assert!(out.contains("s0002 model"), "{out}");
    assert!(
        out.contains("out Done, as asked."),
        "/steps shows the output: {out}"
    );
    let rewound = out
        .lines()
        .find(|l| l.starts_with("rewound to "))
        .unwrap_or_else(|| panic!("no rewind:\n{out}"));
    let context = &out[out.find(rewound).unwrap()..];
    assert!(
        context.contains("draw panel 1") && !context.contains("draw panel 2"),
        "{context}"
    );
    assert!(
        out.contains("no step s0099 in this session (it has 4)"),
        "{out}"
    );
}
