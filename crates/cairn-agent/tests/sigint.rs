//! Real Ctrl-C (SIGINT) to the `cairn-agent` binary: while a tool runs, the
//! tool is stopped and an error result says so; while the model streams, the
//! partial reply is recorded as interrupted. The process then exits on its
//! own, leaving a finished (aborted) operation. SIGTERM and SIGHUP do the
//! same, and the process then exits with 128 + the signal's number.

// Test helpers panic on a failed step; that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use cairn::{Access, Outcome, Store, Verdict};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_cairn-agent");

/// Runs the agent on `script` with `-p go`, sends `signal` once a line
/// starting with `when` appears (plus `delay`), and returns the session and
/// how the agent exited.
fn signalled(
    signal: &str,
    script: Value,
    when: &str,
    delay: Duration,
) -> (tempfile::TempDir, cairn::Session, std::process::ExitStatus) {
    signalled_with(&["-p", "go"], signal, script, when, delay)
}

/// [`signalled`] with other arguments (the REPL without `-p`), stdin open
/// and silent until the agent has exited.
fn signalled_with(
    args: &[&str],
    signal: &str,
    script: Value,
    when: &str,
    delay: Duration,
) -> (tempfile::TempDir, cairn::Session, std::process::ExitStatus) {
    let dir = tempfile::tempdir().unwrap();
    let (home, work) = (dir.path().join("home"), dir.path().join("work"));
    std::fs::create_dir_all(&work).unwrap();
    let path = dir.path().join("script.json");
    std::fs::write(&path, script.to_string()).unwrap();
    let mut child = Command::new(BIN)
        .arg("--store")
        .arg(&home)
        .arg("--workdir")
        .arg(&work)
        .arg("--script")
        .arg(&path)
        .arg("--yes")
        .args(args)
        .env("CAIRN_AGENT_ACKS", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut session = None;
    for l in lines.by_ref() {
        let l = l.unwrap();
        if let Some(id) = l.strip_prefix("@ack session ") {
            session = Some(id.to_owned());
        }
        if l.starts_with(when) {
            break;
        }
    }
    std::thread::sleep(delay);
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let drain = std::thread::spawn(move || lines.count());
    // The agent must exit on its own (a hang here is the failure), with its
    // stdin still open (`wait` would close it).
    let stdin = child.stdin.take();
    let exit = child.wait().unwrap();
    drop(stdin);
    drain.join().unwrap();
    let store = Store::open_dir(&home);
    let id = cairn::SessionId::parse(&session.unwrap()).unwrap();
    let s = store.open(&id, Access::Read).unwrap();
    (dir, s, exit)
}

#[test]
fn ctrl_c_during_a_tool_stops_it_and_records_why() {
    let (dir, s, exit) = signalled("INT", sleeper(), "@ack t1", Duration::from_millis(200));
    assert!(exit.success(), "{exit}");
    assert_stopped_and_recorded(&dir, &s, "the person (Ctrl-C)");
}

#[test]
fn ctrl_c_while_the_model_streams_records_an_interrupted_reply() {
    let long = "panel ".repeat(400);
    let script =
        json!({"chunk_chars": 3, "chunk_delay_ms": 10, "turns": [{"replies": [{"text": long}]}]});
    let (_dir, s, exit) = signalled("INT", script, "@ack entry", Duration::from_millis(300));
    assert!(exit.success(), "{exit}");
    assert_aborted(&s);
    let last = support::last_assistant(&s).unwrap();
    assert_eq!(last.stop_reason.as_deref(), Some("interrupted"));
    assert!(!last.plain_text().is_empty() && last.plain_text().len() < long.len());
}

/// The operation finished, aborted.
fn assert_aborted(s: &cairn::Session) {
    assert!(
        matches!(
            s.verdict().expect("the verdict"),
            Verdict::Finished {
                outcome: Outcome::Aborted,
                ..
            }
        ),
        "{:?}",
        s.verdict().expect("the verdict")
    );
}

/// Whether process `pid` is gone (or a zombie nobody reaped: it runs no more).
fn gone(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        stat.rsplit(") ").next().is_some_and(|s| s.starts_with('Z'))
    })
}

/// A bash call that writes its pid to `pid` in the working directory, then
/// sleeps, and a reply that must never be reached.
fn sleeper() -> Value {
    json!({"turns": [{"replies": [
        {"text": "Waiting.", "tool_calls": [{"name": "bash", "arguments": {"command": "echo $$ > pid; echo begun; exec sleep 30"}}]},
        {"text": "unreachable"}]}]})
}

fn assert_stopped_and_recorded(dir: &tempfile::TempDir, s: &cairn::Session, signal: &str) {
    assert_aborted(s);
    support::every_call_answered(s).unwrap();
    let call = support::last_assistant(s)
        .and_then(|m| m.tool_calls().next().map(|(id, _, _)| id.to_owned()))
        .unwrap();
    let (is_error, code, text) = support::result_of(s, &call).unwrap();
    assert!(is_error);
    assert_eq!(code.as_deref(), Some(cairn_agent::tools::CODE_INTERRUPTED));
    assert!(
        text.contains("begun") && text.contains(&format!("interrupted by {signal}")),
        "{text}"
    );
    let pid = std::fs::read_to_string(dir.path().join("work/pid")).unwrap();
    assert!(
        gone(pid.trim()),
        "the tool's process {pid} is still running"
    );
}

#[test]
fn regression_sigterm_during_a_tool_left_its_child_running_and_recorded_nothing() {
    let (dir, s, exit) = signalled("TERM", sleeper(), "@ack t1", Duration::from_millis(200));
    assert_eq!(exit.code(), Some(128 + 15), "{exit}");
    assert_stopped_and_recorded(&dir, &s, "SIGTERM");
}

#[test]
fn regression_sighup_during_a_tool_left_its_child_running_and_recorded_nothing() {
    let (dir, s, exit) = signalled("HUP", sleeper(), "@ack t1", Duration::from_millis(200));
    assert_eq!(exit.code(), Some(128 + 1), "{exit}");
    assert_stopped_and_recorded(&dir, &s, "SIGHUP");
}

#[test]
fn sigterm_while_the_model_streams_records_an_interrupted_reply_and_exits_143() {
    let long = "panel ".repeat(400);
    let script =
        json!({"chunk_chars": 3, "chunk_delay_ms": 10, "turns": [{"replies": [{"text": long}]}]});
    let (_dir, s, exit) = signalled("TERM", script, "@ack entry", Duration::from_millis(300));
    assert_eq!(exit.code(), Some(128 + 15), "{exit}");
    let last = support::last_assistant(&s).unwrap();
    assert_eq!(last.stop_reason.as_deref(), Some("interrupted"));
    assert_aborted(&s);
}

#[test]
fn sigterm_at_the_repl_prompt_exits_at_once_with_143() {
    let script = json!({"turns": [{"replies": [{"text": "unused"}]}]});
    let (_dir, s, exit) = signalled_with(
        &[],
        "TERM",
        script,
        "Type a request",
        Duration::from_millis(300),
    );
    assert_eq!(exit.code(), Some(128 + 15), "{exit}");
    assert!(s.resume_operation().is_none(), "no operation was started");
}
