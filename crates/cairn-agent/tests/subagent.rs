//! Subagents: the `delegate` tool runs a child agent in a child session, and
//! a crash anywhere recovers from the outside in. The must-show test kills
//! the `cairn-agent` process (SIGKILL) while the child runs a tool with a
//! side effect; resuming the parent resolves the child first, then answers
//! the parent's call honestly — every call in both sessions answered, the
//! side effect done once.

// Test helpers panic on a failed step; that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use cairn::testkit::child::succeeded;
use cairn::{Access, Body, OpRecord, Session, SessionId, Store, Verdict};
use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_cairn-agent");

fn script() -> serde_json::Value {
    json!({"turns": [
        {"match": "order more ink", "replies": [
            {"text": "Placing the order.", "tool_calls": [
                {"name": "bash", "arguments": {"command": "echo ordered >> tally.txt; exec sleep 60"}}]},
            {"text": "I could not confirm the order; check tally.txt before ordering again."}]},
        {"match": "issue 7", "replies": [
            {"text": "Delegating the ink order.", "tool_calls": [
                {"name": "delegate", "arguments": {"task": "Order more ink for issue 7.", "title": "ink"}}]},
            {"text": "Issue 7: the ink order is uncertain; I reported it."}]}
    ]})
}

fn agent(home: &Path, work: &Path, script: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.arg("--store")
        .arg(home)
        .arg("--workdir")
        .arg(work)
        .arg("--script")
        .arg(script)
        .args(["--yes", "--on-unknown", "mark", "--compact-at", "0"])
        .args(args)
        .env_remove("CAIRN_AGENT_CHILD")
        .stdin(Stdio::null());
    c
}

/// The idempotency keys of a tool's dispatches (T1 records), in order.
fn dispatches(s: &Session, tool: &str) -> Vec<String> {
    s.op_records()
        .into_iter()
        .filter_map(|(seq, _)| match s.record(seq).unwrap().body {
            Body::Op(OpRecord::ToolDispatched(t)) if t.tool == tool => Some(t.key),
            _ => None,
        })
        .collect()
}

#[test]
fn a_child_killed_mid_tool_is_recovered_first_and_the_parent_call_ends_honestly() {
    let dir = tempfile::tempdir().unwrap();
    let (home, work) = (dir.path().join("home"), dir.path().join("work"));
    std::fs::create_dir_all(&work).unwrap();
    let script_path = dir.path().join("script.json");
    std::fs::write(&script_path, script().to_string()).unwrap();
    let tally = work.join("tally.txt");

    let mut run = agent(&home, &work, &script_path, &["-p", "Finish issue 7."])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The child's tool has done its effect and is still running.
    while !std::fs::read_to_string(&tally)
        .unwrap_or_default()
        .contains("ordered")
    {
        assert!(
            run.try_wait().unwrap().is_none(),
            "the agent exited before the child's tool ran"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    run.kill().unwrap();
    run.wait().unwrap();

    let store = Store::open_dir(&home);
    let sessions = store.list().unwrap();
    let parent = sessions
        .iter()
        .find(|s| s.parent.is_none())
        .unwrap()
        .id
        .clone();
    let child = sessions
        .iter()
        .find(|s| s.parent.is_some())
        .unwrap()
        .id
        .clone();
    let verdict = |id: &SessionId| {
        store
            .open(id, Access::Read)
            .unwrap()
            .verdict()
            .expect("the verdict")
    };
    assert!(
        matches!(verdict(&parent), Verdict::IndeterminateTool { calls, .. } if calls[0].tool == "delegate"),
        "{:?}",
        verdict(&parent)
    );
    assert!(
        matches!(verdict(&child), Verdict::IndeterminateTool { calls, .. } if calls[0].tool == "bash"),
        "{:?}",
        verdict(&child)
    );

    // The child's command still runs (a SIGKILL does not reach its group):
    // stopped, its outcome stays unknown.
    let resume = ["--resume", parent.as_str(), "--on-running", "stop"];
    let out = agent(&home, &work, &script_path, &resume).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    assert_eq!(store.list().unwrap().len(), 2, "no second subagent: {said}");
    let (p, c) = (
        store.open(&parent, Access::Read).unwrap(),
        store.open(&child, Access::Read).unwrap(),
    );
    for s in [&p, &c] {
        assert!(
            matches!(s.verdict().expect("the verdict"), Verdict::Finished { .. }),
            "{:?}",
            s.verdict().expect("the verdict")
        );
        support::every_call_answered(s).unwrap();
    }
    // The child carries the parent's settings: it can be resumed on its own.
    assert_eq!(c.context().settings()["provider"], "scripted");
    assert_eq!(
        c.context().settings()["workdir"],
        work.display().to_string()
    );
    // Inside first: the child's side effect is of unknown outcome, not re-run.
    assert_eq!(std::fs::read_to_string(&tally).unwrap(), "ordered\n");
    assert_eq!(dispatches(&c, "bash").len(), 1, "never re-run");
    let bash = support::call_ids(&c)[0].clone();
    let (_, code, _) = support::result_of(&c, &bash).unwrap();
    assert_eq!(code.as_deref(), Some(cairn::TOOL_OUTCOME_UNKNOWN));
    // Then the parent: its call names the child and is honestly unknown.
    let delegate = support::call_ids(&p)[0].clone();
    let (is_error, code, text) = support::result_of(&p, &delegate).unwrap();
    assert!(is_error);
    assert_eq!(code.as_deref(), Some(cairn::TOOL_OUTCOME_UNKNOWN), "{text}");
    assert!(
        text.contains(child.as_str()) && text.contains("check tally.txt"),
        "{text}"
    );
    // Re-run by recovery with its recorded key: the same call, the same child.
    let keys = dispatches(&p, "delegate");
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert_eq!(keys[0], keys[1]);
    assert_eq!(
        support::last_text(&p),
        "Issue 7: the ink order is uncertain; I reported it."
    );
}

#[test]
fn past_the_depth_limit_delegate_refuses_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let (home, work) = (dir.path().join("home"), dir.path().join("work"));
    std::fs::create_dir_all(&work).unwrap();
    let script_path = dir.path().join("script.json");
    // Every agent delegates again: the chain stops at the limit.
    std::fs::write(
        &script_path,
        json!({"turns": [{"replies": [
            {"text": "Passing it on.", "tool_calls": [
                {"name": "delegate", "arguments": {"task": "Pass it on."}}]},
            {"text": "Done."}]}]})
        .to_string(),
    )
    .unwrap();
    succeeded(
        agent(
            &home,
            &work,
            &script_path,
            &["--max-depth", "2", "-p", "Pass it on."],
        )
        .output()
        .unwrap(),
    );
    let store = Store::open_dir(&home);
    let sessions = store.list().unwrap();
    assert_eq!(
        sessions.len(),
        3,
        "the top agent and two levels of subagents"
    );
    let deepest = sessions
        .iter()
        .map(|s| store.open(&s.id, Access::Read).unwrap())
        .find(|s| {
            s.header()
                .lineage
                .parent
                .as_ref()
                .is_some_and(|p| p.depth == 2)
        })
        .unwrap();
    let call = support::call_ids(&deepest)[0].clone();
    let (is_error, _, text) = support::result_of(&deepest, &call).unwrap();
    assert!(is_error);
    assert!(
        text.contains("delegation depth 3, beyond the limit of 2")
            && text.contains("Do this task yourself"),
        "{text}"
    );
}
