//! `cairn steps`, and the commands that take a step number (`checkout`,
//! `fork`), on the delegation fixture: one operation with tool calls, an
//! approval, a denial, a tool error and a subagent session.

// Test helpers panic on a failed step; that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::Value;
use support::{BOSS, HELPER, Home, delegation, stdout};

fn steps(home: &Home, id: &str) -> Vec<Value> {
    home.json(&["steps", id, "--json"])
        .as_array()
        .unwrap()
        .clone()
}

/// The entry of the context's last message (a checkout adds a `checkout`
/// entry as the new leaf, under the entry it goes to).
fn last_message(home: &Home, id: &str) -> Value {
    let ctx = home.json(&["context", id, "--json"]);
    ctx["messages"].as_array().unwrap().last().unwrap()["entry"].clone()
}

#[test]
fn checkout_by_step_number_goes_to_the_state_right_after_it() {
    let home = Home::new();
    delegation(&home);
    home.prints(&["checkout", BOSS, "s0005"], "");
    assert_eq!(
        last_message(&home, BOSS),
        "t3",
        "s0005 is the denied call, answered by t3"
    );
    home.prints(&["rewind", BOSS, "s0001"], "");
    assert_eq!(last_message(&home, BOSS), "u1");
}

#[test]
fn checkout_to_a_step_that_leaves_calls_unanswered_is_refused_with_the_safe_entries() {
    let home = Home::new();
    delegation(&home);
    // After s0003 (the first of three calls) two calls have no result yet.
    home.refuses(&["checkout", BOSS, "s0003"], "without a result");
    assert_eq!(last_message(&home, BOSS), "a3", "nothing moved");
}

#[test]
fn a_step_past_the_last_is_refused_naming_how_many_there_are() {
    let home = Home::new();
    delegation(&home);
    home.refuses(
        &["checkout", BOSS, "s0099"],
        "no step s0099 in this session (it has 9)",
    );
    home.refuses(&["steps", BOSS, "s0099"], "it has 9");
    home.refuses(&["steps", BOSS, "99"], "steps are written s0001");
}

#[test]
fn fork_by_step_number_copies_the_branch_and_the_fork_has_the_same_steps() {
    let home = Home::new();
    delegation(&home);
    let out = home.cairn().args(["fork", BOSS, "s0005"]).output().unwrap();
    assert!(out.status.success(), "{}", support::stderr(&out));
    let fork = stdout(&out).split_whitespace().last().unwrap().to_owned();
    let (source, copied) = (steps(&home, BOSS), steps(&home, &fork));
    assert_eq!(copied.len(), 5, "{copied:?}");
    for (a, b) in source.iter().zip(&copied) {
        for field in [
            "number", "kind", "name", "entry", "input", "output", "parent", "call_id",
        ] {
            assert_eq!(a[field], b[field], "{field} of {}", a["label"]);
        }
        assert_eq!(b["op"], Value::Null, "derived from the fork's entries");
    }
    // Without the approval records, the denial is a tool error.
    assert_eq!(source[4]["status"], "denied");
    assert_eq!(copied[4]["status"], "error");
}

#[test]
fn steps_of_a_session_written_with_append_are_derived_and_numbered_the_same_every_time() {
    let home = Home::new();
    let id = home.new_session("appended");
    let out = home.append(
        &id,
        &[
            support::msg("user", "q1", "What is a cairn?"),
            serde_json::json!({"kind": "message", "id": "a1", "data": {"role": "assistant", "content": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_call", "call_id": "c1", "name": "search", "arguments": {"q": "cairn"}}]}}),
            serde_json::json!({"kind": "message", "id": "r1", "data": {"role": "tool", "content": [
                {"type": "tool_result", "call_id": "c1", "content": [{"type": "text", "text": "a pile of stones"}], "is_error": false}]}}),
            support::msg("assistant", "a2", "A pile of stones marking a path."),
        ],
    );
    assert!(out.status.success(), "{}", support::stderr(&out));
    let first = steps(&home, &id);
    let kinds: Vec<&str> = first.iter().map(|s| s["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["input", "model", "tool", "model"]);
    assert_eq!(first[2]["parent"], 2);
    assert_eq!(first[2]["input"], r#"{"q":"cairn"}"#);
    assert_eq!(first[2]["output"], "a pile of stones");
    assert_eq!(steps(&home, &id), first, "the same numbers on every run");
}

#[test]
fn steps_json_nests_the_subagent_steps_to_the_depth_asked() {
    let home = Home::new();
    delegation(&home);
    let all = steps(&home, BOSS);
    let delegate = &all[7];
    assert_eq!(delegate["child"], HELPER);
    let nested = delegate["child_steps"].as_array().unwrap();
    assert_eq!(nested.len(), 4);
    assert_eq!(nested[2]["output"], "order #88 placed");
    let flat = home.json(&["steps", BOSS, "--json", "--depth", "0"]);
    assert_eq!(flat[7]["child"], HELPER);
    assert!(flat[7].get("child_steps").is_none());
}

#[test]
fn regression_a_tool_whose_process_died_showed_running_and_its_checkout_hint_failed() {
    let home = Home::new();
    // A process dispatched a bash call (T1) and died before its result.
    let store = home.store();
    let s = store.create(cairn::NewSession::default()).unwrap();
    let id = s.id().to_string();
    let op = s
        .start_operation(cairn::Message::text(cairn::Role::User, "go"))
        .unwrap();
    let t = op.model_attempt(None, None).unwrap();
    let ask = cairn::testkit::build::calls(
        "",
        &[("c1", "bash", serde_json::json!({"command": "true"}))],
    );
    op.record_assistant(t, ask).unwrap();
    op.dispatch_tool("c1", cairn::EffectClass::SideEffect)
        .unwrap();
    drop(op);
    drop(s);
    let tool = |home: &Home| {
        steps(home, &id)
            .into_iter()
            .find(|s| s["name"] == "bash")
            .unwrap()
    };
    let dead = tool(&home);
    assert_eq!(dead["status"], "interrupted", "{dead}");
    let label = dead["label"].as_str().unwrap().to_owned();
    home.prints(&["steps", &id, &label], "cairn recover");
    // Once recovery records its outcome: unknown, and the hint works.
    home.prints(&["recover", &id, "--policy", "unknown"], "");
    assert_eq!(tool(&home)["status"], "unknown");
    home.prints(&["checkout", &id, &label], "");
}
