//! Recovery through the library: no tool call without a result ever reaches
//! a provider — whatever was appended, checked out, forked, or cut at any
//! record — and a second recovery changes nothing. Plus the regressions of
//! the dangling-call rules (checkout, fork, explicit parents, finished
//! operations, calls with no operation records), the idempotency-key check,
//! the no-op checkout, and how steps and memory show calls that never ran.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use cairn::MemoryBackend;
use cairn::ToolDispatched;
use cairn::memory::MemoryConfig;
use cairn::steps::StepStatus;
use cairn::testkit::recovery::{
    ScenarioRunner, assert_no_unanswered_call_reaches_a_provider, policy_for, recovery_history,
};
use cairn::view::{ViewBuilder, ViewError};
use cairn::{
    Access, AppendError, Block, EffectClass, EntryBody, EntryId, Invalid, Message, NewEntry,
    NewSession, OpRecord, Outcome, Parent, Policy, Role, Session, Store, StoreError, ToolRunner,
    Verdict,
};
use cairn::{TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN, idempotency_key};
use proptest::prelude::*;
use serde_json::json;

fn store() -> Store {
    Store::with_backend(Arc::new(MemoryBackend::new()))
}

fn user(text: &str) -> EntryBody {
    EntryBody::Message(Message::text(Role::User, text))
}

fn calls(ids: &[(&str, &str)]) -> EntryBody {
    EntryBody::Message(Message {
        role: Role::Assistant,
        content: ids
            .iter()
            .map(|(id, tool)| Block::ToolCall {
                call_id: (*id).into(),
                name: (*tool).into(),
                arguments: json!({"path": "a.txt"}),
            })
            .collect(),
        usage: None,
        model: None,
        stop_reason: None,
    })
}

fn results(ids: &[&str]) -> EntryBody {
    EntryBody::Message(Message {
        role: Role::Tool,
        content: ids
            .iter()
            .map(|id| Block::ToolResult {
                call_id: (*id).into(),
                content: vec![Block::Text { text: "ok".into() }],
                is_error: false,
                code: None,
            })
            .collect(),
        usage: None,
        model: None,
        stop_reason: None,
    })
}

/// An open operation whose model asked for `ids` (call id, tool).
fn operation_asking<'s>(s: &'s Session, ids: &[(&str, &str)]) -> cairn::Operation<'s> {
    let op = s.start_operation(Message::text(Role::User, "go")).unwrap();
    let t = op.model_attempt(None, Some("m")).unwrap();
    let EntryBody::Message(m) = calls(ids) else {
        unreachable!()
    };
    op.record_assistant(t, m).unwrap();
    op
}

fn codes(s: &Session) -> Vec<(String, Option<String>)> {
    s.context()
        .messages()
        .iter()
        .flat_map(|m| m.message().expect("read the message").content.clone())
        .filter_map(|b| match b {
            Block::ToolResult { call_id, code, .. } => Some((call_id, code)),
            _ => None,
        })
        .collect()
}

fn id(a: Option<cairn::Appended>) -> EntryId {
    a.and_then(|a| a.id).expect("an entry")
}

/// The raw records of `s`, to check that something wrote nothing.
fn raw(backend: &MemoryBackend, s: &Session) -> Vec<Vec<u8>> {
    backend.raw(s.id()).unwrap()
}

fn recover_twice(s: &Session, policy: Policy, runner: Option<&mut dyn ToolRunner>) {
    let first = cairn::recover(s, policy, runner).unwrap();
    assert_no_unanswered_call_reaches_a_provider(s, &format!("after {first:?}"));
    let len = s.len();
    let second = cairn::recover(s, policy, None).unwrap();
    assert!(
        second.actions.is_empty(),
        "a second recovery acted: {second:?}"
    );
    assert_eq!(second.before, second.after);
    assert_eq!(s.len(), len, "a second recovery wrote");
}

// --------------------------------------------------------- the property ---

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("CAIRN_PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(48)
    ))]

    /// Random appends, checkouts, forks, operations and recoveries, cut at
    /// every record: after one recovery by policy the model view holds no
    /// call without a result, and a second recovery is a no-op.
    #[test]
    fn no_recovered_view_holds_a_call_without_a_result(seed in any::<u64>(), steps in 1usize..40) {
        let (id, lines) = recovery_history(seed, steps);
        for k in 1..=lines.len() {
            let backend = MemoryBackend::new();
            backend.put_raw(&id, lines[..k].to_vec());
            let s = Session::open(&backend, &id, Access::Write).unwrap();
            let mut runner = ScenarioRunner::default();
            let policy = policy_for(seed.wrapping_add(k as u64));
            recover_twice(&s, policy, Some(&mut runner));
            // What recovery wrote reads back the same.
            let ctx = s.context();
            drop(s);
            let again = Session::open(&backend, &id, Access::Read).unwrap();
            prop_assert_eq!(&*again.context(), &*ctx);
            assert_no_unanswered_call_reaches_a_provider(&again, "after reopening");
        }
    }
}

// ------------------------------------------------------------ regressions ---

#[test]
fn regression_a_tool_call_with_no_operation_records_was_reported_ready() {
    let s = store().create(NewSession::default()).unwrap();
    s.append(user("list the files")).unwrap();
    s.append(calls(&[("c1", "read"), ("c2", "bash")])).unwrap();
    match s.verdict().expect("the verdict") {
        Verdict::ToolsNotStarted { op: None, calls } => {
            let ids: Vec<&str> = calls.iter().map(|c| c.call_id.as_str()).collect();
            assert_eq!(ids, ["c1", "c2"]);
        }
        other => panic!("expected ToolsNotStarted without an operation, got {other:?}"),
    }
    // `--policy unknown`: closes both as not started (nothing can run
    // without an operation).
    let report = cairn::recover(&s, Policy::close_all(), None).unwrap();
    assert_eq!(report.actions.len(), 2, "{report:?}");
    assert_eq!(
        codes(&s),
        [
            ("c1".to_owned(), Some(TOOL_NOT_STARTED.to_owned())),
            ("c2".to_owned(), Some(TOOL_NOT_STARTED.to_owned()))
        ]
    );
    assert_eq!(report.after, Verdict::Ready { op: None });
    recover_twice(&s, Policy::default(), None);
}

#[test]
fn regression_op_finished_with_a_dispatched_call_left_it_unanswered_forever() {
    let s = store().create(NewSession::default()).unwrap();
    let op = operation_asking(&s, &[("c1", "read")]);
    let ticket = op.dispatch_tool("c1", EffectClass::ReadOnly).unwrap();
    let result_entry = ticket.result_entry().clone();
    op.finish(Outcome::Failed, Some("crashed".into())).unwrap();
    assert!(
        matches!(s.verdict().expect("the verdict"), Verdict::IndeterminateTool { ref calls, .. } if calls.len() == 1),
        "{:?}",
        s.verdict().expect("the verdict")
    );
    // Even with a runner, nothing runs after op_finished: the outcome is unknown.
    let mut runner = ScenarioRunner::default();
    let report = cairn::recover(&s, Policy::default(), Some(&mut runner)).unwrap();
    assert!(runner.runs.is_empty(), "ran after the operation ended");
    assert_eq!(
        codes(&s),
        [("c1".to_owned(), Some(TOOL_OUTCOME_UNKNOWN.to_owned()))]
    );
    assert_eq!(report.actions[0].entry.as_ref(), Some(&result_entry));
    assert!(matches!(report.after, Verdict::Finished { .. }));
    recover_twice(&s, Policy::default(), None);
}

#[test]
fn regression_an_operation_aborted_before_its_tools_ran_left_them_unanswered() {
    let s = store().create(NewSession::default()).unwrap();
    let op = operation_asking(&s, &[("c1", "read"), ("c2", "put")]);
    op.finish(Outcome::Aborted, None).unwrap();
    assert!(
        matches!(s.verdict().expect("the verdict"), Verdict::ToolsNotStarted { ref calls, .. } if calls.len() == 2),
        "{:?}",
        s.verdict().expect("the verdict")
    );
    let mut runner = ScenarioRunner::default();
    cairn::recover(&s, Policy::default(), Some(&mut runner)).unwrap();
    assert!(runner.runs.is_empty());
    assert!(
        codes(&s)
            .iter()
            .all(|(_, c)| c.as_deref() == Some(TOOL_NOT_STARTED))
    );
    recover_twice(&s, Policy::default(), None);
}

#[test]
fn regression_checkout_onto_an_assistant_with_tool_calls_left_them_dangling() {
    let backend = Arc::new(MemoryBackend::new());
    let store = Store::with_backend(backend.clone());
    let s = store.create(NewSession::default()).unwrap();
    let ask = id(Some(s.append(user("read it")).unwrap()));
    let asked = id(Some(s.append(calls(&[("c1", "read")])).unwrap()));
    let answered = id(Some(s.append(results(&["c1"])).unwrap()));
    s.append(user("thanks")).unwrap();
    let before = raw(&backend, &s);
    let err = s.checkout(Some(&asked), None).unwrap_err();
    let AppendError::Invalid(Invalid::UnansweredCalls { calls, hint, .. }) = &err else {
        panic!("expected UnansweredCalls, got {err}");
    };
    assert_eq!(calls, &[r#""c1" (read)"#.to_owned()]);
    assert!(hint.contains(ask.as_str()), "{hint}");
    assert!(hint.contains(answered.as_str()), "{hint}");
    assert_eq!(raw(&backend, &s), before, "a refused checkout wrote");
    // The nearest safe entries named in the hint are accepted.
    s.checkout(Some(&answered), None).unwrap().unwrap();
    s.checkout(Some(&ask), None).unwrap().unwrap();
    assert!(ViewBuilder::new(None).build(None, &s.context()).is_ok());
}

#[test]
fn regression_fork_onto_an_assistant_with_tool_calls_left_them_dangling() {
    let store = store();
    let s = store.create(NewSession::default()).unwrap();
    s.append(user("read it")).unwrap();
    let asked = id(Some(s.append(calls(&[("c1", "read")])).unwrap()));
    let answered = id(Some(s.append(results(&["c1"])).unwrap()));
    let before = store.list().unwrap().len();
    match store.fork(&s, Some(&asked), None) {
        Err(StoreError::Append(AppendError::Invalid(Invalid::UnansweredCalls {
            hint, ..
        }))) => {
            assert!(hint.contains(answered.as_str()), "{hint}");
        }
        Err(e) => panic!("expected UnansweredCalls, got {e}"),
        Ok(f) => panic!("forked {} with a dangling call", f.id()),
    }
    assert_eq!(
        store.list().unwrap().len(),
        before,
        "a refused fork left a session"
    );
    store.fork(&s, Some(&answered), None).unwrap();
}

#[test]
fn an_explicit_parent_at_an_unanswered_call_is_refused_unless_the_entry_answers_it() {
    let s = store().create(NewSession::default()).unwrap();
    s.append(user("read it")).unwrap();
    let asked = id(Some(
        s.append(calls(&[("c1", "read"), ("c2", "read")])).unwrap(),
    ));
    s.append(results(&["c1", "c2"])).unwrap();
    let under = |body| NewEntry {
        id: None,
        parent: Parent::Entry(asked.clone()),
        body,
    };
    for body in [user("elsewhere"), results(&["c1"])] {
        let err = s.append_entry(under(body)).unwrap_err();
        assert!(
            matches!(err, AppendError::Invalid(Invalid::UnansweredCalls { .. })),
            "{err}"
        );
    }
    // Answering every call starts the branch: another outcome for the same calls.
    s.append_entry(under(results(&["c1", "c2"]))).unwrap();
    assert!(ViewBuilder::new(None).build(None, &s.context()).is_ok());
}

#[test]
fn regression_checkout_to_the_leaf_appended_a_checkout_that_showed_as_a_branch() {
    let s = store().create(NewSession::default()).unwrap();
    let a = id(Some(s.append(user("a")).unwrap()));
    let b = id(Some(s.append(user("b")).unwrap()));
    let len = s.len();
    assert_eq!(s.checkout(Some(&b), None).unwrap(), None);
    assert_eq!(s.len(), len, "a checkout to the leaf wrote");
    assert_eq!(s.children(Some(&b)), Vec::<EntryId>::new());
    // Once moved, moving to the same place again changes nothing either.
    s.checkout(Some(&a), None).unwrap().unwrap();
    let len = s.len();
    assert_eq!(s.checkout(Some(&a), None).unwrap(), None);
    assert_eq!(s.len(), len);
    assert_eq!(s.children(Some(&a)).len(), 2, "b and one checkout");
    // With a summary it is a real move: the summary is news for the model.
    s.checkout(Some(&a), Some("went back".into()))
        .unwrap()
        .unwrap();
}

#[test]
fn regression_a_tool_dispatched_with_a_key_not_derived_as_documented_was_accepted() {
    let s = store().create(NewSession::default()).unwrap();
    let op = operation_asking(&s, &[("c1", "bash")]);
    let record = |key: String| {
        OpRecord::ToolDispatched(ToolDispatched {
            op: op.id().to_owned(),
            call_id: "c1".into(),
            tool: "bash".into(),
            args_hash: cairn::args_hash(&json!({"path": "a.txt"})),
            effect: EffectClass::SideEffect,
            key,
            result_entry: EntryId::parse("r1").unwrap(),
        })
    };
    let len = s.len();
    let err = s.append_op(record("ik-made-up".into())).unwrap_err();
    let AppendError::Invalid(Invalid::IdempotencyKey { expected, .. }) = &err else {
        panic!("expected IdempotencyKey, got {err}");
    };
    assert_eq!(expected, &idempotency_key(s.id(), op.id(), "c1"));
    assert!(err.to_string().contains("FORMAT.md"), "{err}");
    assert_eq!(s.len(), len);
    s.append_op(record(idempotency_key(s.id(), op.id(), "c1")))
        .unwrap();
}

#[test]
fn regression_a_denied_call_showed_in_steps_as_not_started() {
    let s = store().create(NewSession::default()).unwrap();
    let op = operation_asking(&s, &[("c1", "bash"), ("c2", "bash")]);
    op.request_approval("c1", "bash").unwrap();
    op.resolve_approval("c1", false, Some("person")).unwrap();
    op.deny("c1", cairn::DENIED_BY_PERSON).unwrap();
    op.finish(Outcome::Aborted, None).unwrap();
    cairn::recover(&s, Policy::default(), None).unwrap();
    let tools: Vec<(String, StepStatus)> = s
        .steps()
        .unwrap()
        .into_iter()
        .filter_map(|st| st.call_id.map(|c| (c, st.status)))
        .collect();
    assert_eq!(
        tools,
        [
            ("c1".to_owned(), StepStatus::Denied),
            ("c2".to_owned(), StepStatus::NotStarted)
        ]
    );
}

#[test]
fn regression_memory_listed_never_started_calls_as_failed_attempts() {
    let s = store().create(NewSession::default()).unwrap();
    s.enable_memory(MemoryConfig::default()).unwrap();
    s.append(user("run the tests")).unwrap();
    s.append(calls(&[("c1", "bash")])).unwrap();
    cairn::recover(&s, Policy::close_all(), None).unwrap();
    assert_eq!(
        codes(&s),
        [("c1".to_owned(), Some(TOOL_NOT_STARTED.to_owned()))]
    );
    let memory = s.memory().unwrap();
    assert!(memory.failed.items.is_empty(), "{}", memory.render());
    assert!(memory.verification.is_none(), "{}", memory.render());
}

#[test]
fn the_model_view_refuses_a_context_with_an_unanswered_call() {
    let s = store().create(NewSession::default()).unwrap();
    s.append(user("read it")).unwrap();
    s.append(calls(&[("c1", "read")])).unwrap();
    let err = ViewBuilder::new(None)
        .build(None, &s.context())
        .unwrap_err();
    assert!(
        matches!(&err, ViewError::UnansweredCalls { calls } if calls == &[r#""c1" (read)"#]),
        "{err:?}"
    );
    assert!(err.to_string().contains("cairn recover"), "{err}");
    s.append(results(&["c1"])).unwrap();
    assert!(ViewBuilder::new(None).build(None, &s.context()).is_ok());
}

#[test]
fn starting_an_operation_while_a_dispatched_call_has_no_result_is_refused() {
    let s = store().create(NewSession::default()).unwrap();
    let op = operation_asking(&s, &[("c1", "bash")]);
    let _ticket = op.dispatch_tool("c1", EffectClass::SideEffect).unwrap();
    op.finish(Outcome::Failed, None).unwrap();
    let len = s.len();
    let err = s
        .start_operation(Message::text(Role::User, "next"))
        .unwrap_err();
    assert!(err.to_string().contains("cairn recover"), "{err}");
    assert_eq!(s.len(), len, "a refused start wrote");
    cairn::recover(&s, Policy::default(), None).unwrap();
    s.start_operation(Message::text(Role::User, "next"))
        .unwrap();
}

/// A log written before the branch-point rule: the call was dispatched and
/// answered on one branch, and a user message was added under the call on
/// another. Recovery closes it there (it cannot be dispatched twice).
#[test]
fn a_call_answered_only_on_another_branch_in_an_older_log_is_closed_not_rerun() {
    let backend = MemoryBackend::new();
    let s = Session::create(&backend, NewSession::default()).unwrap();
    let id = s.id().clone();
    let op = operation_asking(&s, &[("c1", "read")]);
    let asked = s.leaf().unwrap();
    let ticket = op.dispatch_tool("c1", EffectClass::ReadOnly).unwrap();
    op.record_result(ticket, cairn::ToolOutput::text("a b"))
        .unwrap();
    drop(op);
    drop(s);
    // What an older writer accepted: a user message under the call.
    let mut lines = backend.raw(&id).unwrap();
    let elsewhere = cairn::Entry {
        id: EntryId::parse("u9").unwrap(),
        parent: Some(asked),
        body: user("elsewhere"),
    };
    lines.push(cairn::frame::encode_entry(
        lines.len() as u64,
        "2026-01-01T00:00:00.000Z",
        &elsewhere,
    ));
    backend.put_raw(&id, lines);
    let s = Session::open(&backend, &id, Access::Write).unwrap();
    assert!(
        matches!(s.verdict().expect("the verdict"), Verdict::ToolsNotStarted { ref calls, .. } if calls.len() == 1),
        "{:?}",
        s.verdict().expect("the verdict")
    );
    let mut runner = ScenarioRunner::default();
    recover_twice(&s, Policy::default(), Some(&mut runner));
    assert!(
        runner.runs.is_empty(),
        "re-ran a call that ran on another branch"
    );
    assert_eq!(
        codes(&s),
        [("c1".to_owned(), Some(TOOL_NOT_STARTED.to_owned()))]
    );
}
