//! Tool processes outlive a SIGKILLed agent: the resume finds the one still
//! running (from its `agent.process` record) and, under each policy, waits
//! for it or stops it before anything else — so a command's effect happens
//! at most once per decision and no two runs of a call overlap.
//!
//! Real processes and real signals: `cairn-agent` (the scripted provider)
//! runs a bash command that writes a start timestamp, sleeps, writes an end
//! timestamp and appends a line; it is SIGKILLed while the command sleeps,
//! and resumed at once. The command writes its own timestamps (`start`,
//! `end`, or `stop` from its SIGTERM trap), so overlap is judged from what
//! the runs themselves saw, not from the test's clock.

// Test helpers panic on a failed step; that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use cairn::{Access, Body, OpRecord, Session, SessionId, Store};
use cairn_agent::fence::{self, Liveness, Started};
use serde_json::{Value, json};

/// The command: its own timestamps around a sleep, then the counted effect.
const COMMAND: &str = "trap 'echo \"stop $(date +%s%N)\" >> times.txt; exit 143' TERM; \
echo \"start $(date +%s%N)\" >> times.txt; sleep 2; \
echo \"end $(date +%s%N)\" >> times.txt; echo x >> out.txt";

struct Dirs {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    work: PathBuf,
    script: PathBuf,
}

fn dirs(script: &Value) -> Dirs {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let path = tmp.path().join("script.json");
    std::fs::write(&path, script.to_string()).unwrap();
    Dirs {
        home,
        work,
        script: path,
        _tmp: tmp,
    }
}

fn bash_script() -> Value {
    json!({"turns": [{"replies": [
        {"text": "Counting.", "tool_calls": [{"name": "bash", "arguments": {"command": COMMAND}}]},
        {"text": "Counted once."}]}]})
}

fn delegating_script() -> Value {
    json!({"turns": [
        {"match": "count with bash", "replies": [
            {"text": "Counting.", "tool_calls": [{"name": "bash", "arguments": {"command": COMMAND}}]},
            {"text": "Counted once."}]},
        {"replies": [
            {"text": "Handing it over.", "tool_calls": [
                {"name": "delegate", "arguments": {"task": "Please count with bash."}}]},
            {"text": "The subagent counted."}]}]})
}

fn agent(d: &Dirs, args: &[&str]) -> Command {
    let mut cmd = support::agent_command(&d.home, &d.work, &d.script);
    cmd.args(args);
    cmd
}

/// Waits, bounded, for `cond`.
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !cond() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Starts the agent, SIGKILLs it once the command wrote its start
/// timestamp, and returns the session.
fn kill_mid_bash(d: &Dirs) -> SessionId {
    let mut child: Child = agent(d, &["-p", "go"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let times = d.work.join("times.txt");
    wait_for("the command to start", || read(&times).contains("start"));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let sessions = Store::open_dir(&d.home).list().unwrap();
    let parent = sessions
        .iter()
        .find(|s| s.parent.is_none())
        .expect("the session");
    parent.id.clone()
}

fn resume(d: &Dirs, id: &SessionId, policy: &[&str]) -> Output {
    let id = id.to_string();
    let mut args = vec!["--resume", id.as_str()];
    args.extend_from_slice(policy);
    let out = agent(d, &args).output().unwrap();
    assert!(
        out.status.success(),
        "the resume failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

fn open(d: &Dirs, id: &SessionId) -> Session {
    Store::open_dir(&d.home).open(id, Access::Read).unwrap()
}

/// The session's `agent.process` records, in order.
fn process_records(s: &Session) -> Vec<Value> {
    s.op_records()
        .into_iter()
        .filter(|(_, kind)| kind == fence::KIND)
        .map(|(seq, _)| match s.record(seq).unwrap().body {
            Body::Op(OpRecord::Ignored(u)) => u.data,
            other => panic!("not an ignorable record: {other:?}"),
        })
        .collect()
}

fn phase<'a>(records: &'a [Value], phase: &str) -> Vec<&'a Value> {
    records.iter().filter(|r| r["phase"] == phase).collect()
}

/// The runs the command's own timestamps describe: each `start` followed
/// by its `end` or `stop` before the next `start` (no two runs overlap),
/// times increasing. Returns how each run finished.
fn runs(times: &str) -> Vec<String> {
    let lines: Vec<(&str, u128)> = times
        .lines()
        .map(|l| {
            let (what, at) = l.split_once(' ').unwrap();
            (what, at.parse().unwrap())
        })
        .collect();
    assert_eq!(lines.len() % 2, 0, "every run finished:\n{times}");
    let mut finished = Vec::new();
    for (i, pair) in lines.chunks(2).enumerate() {
        assert_eq!(pair[0].0, "start", "run {i} starts first:\n{times}");
        assert!(
            matches!(pair[1].0, "end" | "stop"),
            "run {i} finishes before another starts:\n{times}"
        );
        finished.push(pair[1].0.to_owned());
    }
    for w in lines.windows(2) {
        assert!(w[0].1 <= w[1].1, "timestamps in order:\n{times}");
    }
    finished
}

/// The one bash call's result: (is_error, code, text).
fn bash_result(s: &Session) -> (bool, Option<String>, String) {
    let call = support::call_ids(s)[0].clone();
    support::result_of(s, &call).unwrap()
}

/// The first run's recorded process, checked to be alive now.
fn first_process_alive(s: &Session) -> Started {
    let records = process_records(s);
    let started = phase(&records, "started");
    assert_eq!(started.len(), 1, "{records:#?}");
    let p: Started = serde_json::from_value(started[0].clone()).unwrap();
    assert_eq!(
        fence::liveness(&p.process),
        Liveness::Running,
        "the first run outlives the SIGKILLed agent"
    );
    p
}

/// The resume said `first` was running, waited for it, and recorded it
/// ended by itself with status 0 in `s`; its one run did its effect once.
fn waited_for_once(d: &Dirs, out: &Output, first: &Started, s: &Session) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("is running: pid {}", first.process.pid)),
        "the person is told it runs:\n{stdout}"
    );
    assert_eq!(runs(&read(&d.work.join("times.txt"))), ["end"]);
    assert_eq!(
        read(&d.work.join("out.txt")),
        "x\n",
        "the effect happened once"
    );
    let records = process_records(s);
    let ended = phase(&records, "ended");
    assert_eq!(ended.len(), 1, "{records:#?}");
    assert_eq!(ended[0]["how"], "exited");
    assert_eq!(ended[0]["exit_status"], 0);
    assert_eq!(ended[0]["by"], "cairn-agent --on-running wait");
}

#[test]
fn resume_waits_for_a_command_still_running_and_records_its_own_outcome() {
    let d = dirs(&bash_script());
    let id = kill_mid_bash(&d);
    let first = first_process_alive(&open(&d, &id));
    // Even with --on-unknown rerun: the run still going is waited for, and
    // having seen it end, there is nothing unknown to re-run.
    let out = resume(&d, &id, &["--on-running", "wait", "--on-unknown", "rerun"]);
    let s = open(&d, &id);
    waited_for_once(&d, &out, &first, &s);
    let (is_error, code, text) = bash_result(&s);
    assert!(!is_error && code.is_none(), "{text}");
    assert!(
        text.contains("ran on to its end") && text.contains("[exit code 0]"),
        "{text}"
    );
    support::every_call_answered(&s).unwrap();
}

#[test]
fn resume_stops_a_command_still_running_and_marks_it_unknown() {
    let d = dirs(&bash_script());
    let id = kill_mid_bash(&d);
    let first = first_process_alive(&open(&d, &id));
    resume(&d, &id, &["--on-running", "stop", "--on-unknown", "mark"]);
    assert_eq!(runs(&read(&d.work.join("times.txt"))), ["stop"]);
    assert_eq!(
        read(&d.work.join("out.txt")),
        "",
        "stopped before its effect"
    );
    assert_eq!(fence::liveness(&first.process), Liveness::Gone);
    let s = open(&d, &id);
    let records = process_records(&s);
    let ended = phase(&records, "ended");
    assert_eq!(ended.len(), 1, "{records:#?}");
    assert_eq!(ended[0]["how"], json!({"stopped": {"signal": "SIGTERM"}}));
    assert_eq!(ended[0]["exit_status"], Value::Null, "killed: no status");
    let (_, code, _) = bash_result(&s);
    assert_eq!(code.as_deref(), Some(cairn::TOOL_OUTCOME_UNKNOWN));
}

#[test]
fn resume_reruns_only_after_stopping_the_first_run() {
    let d = dirs(&bash_script());
    let id = kill_mid_bash(&d);
    first_process_alive(&open(&d, &id));
    resume(&d, &id, &["--on-running", "stop", "--on-unknown", "rerun"]);
    // The first run stopped (its stop timestamp) before the re-run started.
    assert_eq!(runs(&read(&d.work.join("times.txt"))), ["stop", "end"]);
    assert_eq!(
        read(&d.work.join("out.txt")),
        "x\n",
        "the effect happened once"
    );
    let s = open(&d, &id);
    let records = process_records(&s);
    assert_eq!(phase(&records, "started").len(), 2, "{records:#?}");
    let ended = phase(&records, "ended");
    assert_eq!(ended.len(), 1, "{records:#?}");
    assert_eq!(ended[0]["how"], json!({"stopped": {"signal": "SIGTERM"}}));
    let (is_error, code, text) = bash_result(&s);
    assert!(
        !is_error && code.is_none(),
        "the re-run's own result: {text}"
    );
}

#[test]
fn resume_finds_a_subagents_command_still_running() {
    let d = dirs(&delegating_script());
    let parent = kill_mid_bash(&d);
    let store = Store::open_dir(&d.home);
    let children = store.children(&parent).unwrap();
    assert_eq!(children.len(), 1);
    let child = children[0].0.id.clone();
    let first = first_process_alive(&open(&d, &child));
    let out = resume(
        &d,
        &parent,
        &["--on-running", "wait", "--on-unknown", "mark"],
    );
    let c = open(&d, &child);
    waited_for_once(&d, &out, &first, &c);
    support::every_call_answered(&c).unwrap();
    let p = open(&d, &parent);
    support::every_call_answered(&p).unwrap();
    let (is_error, code, text) = bash_result(&p);
    assert!(
        !is_error && code.is_none(),
        "the parent's delegate call: {text}"
    );
}
