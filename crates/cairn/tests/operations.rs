//! The operation journal: the verdict table at every record boundary of real
//! operations (property-tested against an independent oracle), resolution
//! always leaving every tool call answered, T1 durable before a tool starts
//! even under `Buffered`, misuse refused, keys stable across restarts,
//! status, steps and subagents.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::sync::Arc;

use cairn::MemoryBackend;
use cairn::steps::{StepKind, StepStatus};
use cairn::testkit::build::{assistant, user};
use cairn::testkit::recovery::{ScenarioRunner as CountingRunner, effect_of};
use cairn::testkit::vfs::{Event, Events, HookVfs};
use cairn::{
    Access, AppendError, Block, Body, Durability, EffectClass, EntryBody, Message, NewEntry,
    NewSession, OpRecord, Operation, Outcome, Parent, Policy, Role, Session, Status, Store,
    ToolOutput, Verdict,
};
use proptest::prelude::*;
use serde_json::{Value, json};

// ---------------------------------------------------------------- oracle ---

/// The verdict table of `docs/DESIGN.md` §4, evaluated directly over decoded records.
fn oracle(records: &[Body]) -> &'static str {
    let Some(start) = records
        .iter()
        .rposition(|r| matches!(r, Body::Op(OpRecord::OpStarted(_))))
    else {
        return "Ready";
    };
    let op = &records[start..];
    let entry_ids: HashSet<String> = op
        .iter()
        .filter_map(|r| match r {
            Body::Entry(e) => Some(e.id.to_string()),
            _ => None,
        })
        .collect();
    let answered: HashSet<String> = op
        .iter()
        .filter_map(|r| match r {
            Body::Entry(e) => match &e.body {
                EntryBody::Message(m) => {
                    Some(m.tool_results().map(str::to_owned).collect::<Vec<_>>())
                }
                _ => None,
            },
            _ => None,
        })
        .flatten()
        .collect();
    let dispatched: Vec<(String, String)> = op
        .iter()
        .filter_map(|r| match r {
            Body::Op(OpRecord::ToolDispatched(t)) => {
                Some((t.call_id.clone(), t.result_entry.to_string()))
            }
            _ => None,
        })
        .collect();
    if dispatched
        .iter()
        .any(|(_, result)| !entry_ids.contains(result))
    {
        return "IndeterminateTool";
    }
    if op
        .iter()
        .any(|r| matches!(r, Body::Op(OpRecord::OpFinished(_))))
    {
        return "Finished";
    }
    let requested: Vec<&str> = op
        .iter()
        .filter_map(|r| match r {
            Body::Op(OpRecord::ApprovalRequested(a)) => Some(a.call_id.as_str()),
            _ => None,
        })
        .collect();
    let resolved: HashSet<&str> = op
        .iter()
        .filter_map(|r| match r {
            Body::Op(OpRecord::ApprovalResolved(a)) => Some(a.call_id.as_str()),
            _ => None,
        })
        .collect();
    if requested.iter().any(|c| !resolved.contains(c)) {
        return "AwaitingApproval";
    }
    let last_attempt = op.iter().rev().find_map(|r| match r {
        Body::Op(OpRecord::ModelAttempted(m)) => Some(m.entry.to_string()),
        _ => None,
    });
    if last_attempt.is_some_and(|e| !entry_ids.contains(&e)) {
        return "ProviderInterrupted";
    }
    let last_assistant = op.iter().rev().find_map(|r| match r {
        Body::Entry(e) => match &e.body {
            EntryBody::Message(m) if m.role == Role::Assistant => Some(m),
            _ => None,
        },
        _ => None,
    });
    if let Some(m) = last_assistant {
        let dispatched: HashSet<&str> = dispatched.iter().map(|(c, _)| c.as_str()).collect();
        if m.tool_calls()
            .any(|(c, _, _)| !dispatched.contains(c) && !answered.contains(c))
        {
            return "ToolsNotStarted";
        }
    }
    "Ready"
}

fn decoded(lines: &[Vec<u8>]) -> Vec<Body> {
    lines
        .iter()
        .map(|l| cairn::frame::decode_line(l).unwrap().2)
        .collect()
}

fn every_call_answered(s: &Session) -> Result<(), String> {
    let ctx = s.context();
    for m in ctx.messages() {
        for (call_id, _, _) in m.message().expect("read the message").tool_calls() {
            if !ctx.messages().iter().any(|r| {
                r.message()
                    .expect("read the message")
                    .tool_results()
                    .any(|c| c == call_id)
            }) {
                return Err(format!("call {call_id} has no result"));
            }
        }
    }
    Ok(())
}

// --------------------------------------------------------------- scripts ---

#[derive(Debug, Clone)]
struct CallPlan {
    tool: &'static str,
    approval: Option<bool>,
}

#[derive(Debug, Clone)]
struct OpPlan {
    interrupted_attempts: usize,
    calls: Vec<CallPlan>,
    outcome: Outcome,
}

fn call_plan() -> impl Strategy<Value = CallPlan> {
    (
        prop_oneof![Just("read"), Just("put"), Just("bash")],
        prop_oneof![Just(None), Just(Some(true)), Just(Some(false))],
    )
        .prop_map(|(tool, approval)| CallPlan { tool, approval })
}

fn op_plan() -> impl Strategy<Value = OpPlan> {
    (
        0usize..2,
        prop::collection::vec(call_plan(), 0..4),
        prop_oneof![
            Just(Outcome::Completed),
            Just(Outcome::Failed),
            Just(Outcome::Aborted)
        ],
    )
        .prop_map(|(interrupted_attempts, calls, outcome)| OpPlan {
            interrupted_attempts,
            calls,
            outcome,
        })
}

/// Runs the plans through the operation API, as an agent loop would.
fn run_plans(s: &Session, plans: &[OpPlan]) {
    for (n, plan) in plans.iter().enumerate() {
        let op = s
            .start_operation(Message::text(Role::User, format!("task {n}")))
            .unwrap();
        for _ in 0..plan.interrupted_attempts {
            let _lost = op.model_attempt(Some("p"), Some("m")).unwrap();
        }
        let ticket = op.model_attempt(Some("p"), Some("m")).unwrap();
        let content = plan
            .calls
            .iter()
            .enumerate()
            .map(|(i, c)| Block::ToolCall {
                call_id: format!("o{n}c{i}"),
                name: c.tool.into(),
                arguments: json!({"i": i}),
            })
            .collect();
        let reply = Message {
            role: Role::Assistant,
            content,
            usage: None,
            model: Some("m".into()),
            stop_reason: None,
        };
        op.record_assistant(ticket, reply).unwrap();
        for (i, c) in plan.calls.iter().enumerate() {
            let call_id = format!("o{n}c{i}");
            if let Some(approved) = c.approval {
                op.request_approval(&call_id, c.tool).unwrap();
                op.resolve_approval(&call_id, approved, Some("test"))
                    .unwrap();
                if !approved {
                    op.deny(&call_id, "denied").unwrap();
                    continue;
                }
            }
            let t = op.dispatch_tool(&call_id, effect_of(c.tool)).unwrap();
            op.record_result(t, ToolOutput::text("ok")).unwrap();
        }
        let ticket = op.model_attempt(Some("p"), Some("m")).unwrap();
        op.record_assistant(ticket, Message::text(Role::Assistant, "done"))
            .unwrap();
        op.finish(plan.outcome, None).unwrap();
    }
}

fn check_prefix(lines: &[Vec<u8>], id: &cairn::SessionId) -> Result<(), TestCaseError> {
    let backend = MemoryBackend::new();
    backend.put_raw(id, lines.to_vec());
    let s = Session::open(&backend, id, Access::Write).unwrap();
    let v = s.verdict().expect("the verdict");
    prop_assert_eq!(
        v.name(),
        oracle(&decoded(lines)),
        "prefix of {} records: {:?}",
        lines.len(),
        v
    );
    let mut runner = CountingRunner { runs: Vec::new() };
    let report = cairn::recover(&s, Policy::default(), Some(&mut runner)).unwrap();
    if let Err(e) = every_call_answered(&s) {
        return Err(TestCaseError::fail(format!(
            "{e} after recovery at prefix {}: {report:?}",
            lines.len()
        )));
    }
    prop_assert!(
        matches!(
            report.after,
            Verdict::Finished { .. } | Verdict::Ready { .. } | Verdict::ProviderInterrupted { .. }
        ),
        "recovery left {:?}",
        report.after
    );
    // A call a person denied is never run by recovery.
    if let Verdict::ToolsNotStarted { calls, .. } = &report.before {
        for c in calls.iter().filter(|c| c.denied) {
            prop_assert!(
                !runner.runs.iter().any(|(id, _)| id == &c.call_id),
                "ran denied call {}",
                c.call_id
            );
        }
    }
    // A SideEffect call is never re-run by the default policy.
    if let Verdict::IndeterminateTool { calls, .. } = &report.before {
        for c in calls.iter().filter(|c| c.effect == EffectClass::SideEffect) {
            prop_assert!(
                !runner.runs.iter().any(|(id, _)| id == &c.call_id),
                "re-ran side effect {}",
                c.call_id
            );
        }
        for c in calls.iter().filter(|c| c.effect != EffectClass::SideEffect) {
            prop_assert!(
                runner.runs.contains(&(c.call_id.clone(), c.key.clone())),
                "{} not re-run with its key",
                c.call_id
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("CAIRN_PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(48)
    ))]

    /// Truncating real operations at every record boundary: the verdict is
    /// always the table's, and recovery always answers every call.
    #[test]
    fn verdict_matches_the_table_at_every_record_boundary(plans in prop::collection::vec(op_plan(), 1..3)) {
        let backend = MemoryBackend::new();
        let s = Session::create(&backend, NewSession::default()).unwrap();
        let id = s.id().clone();
        run_plans(&s, &plans);
        drop(s);
        let lines = backend.raw(&id).unwrap();
        for k in 1..=lines.len() {
            check_prefix(&lines[..k], &id)?;
        }
    }
}

// ------------------------------------------------------------- durability ---

/// The writes (their lengths) and syncs of session logs, in order, forgetting them.
fn io_events(rec: &Events) -> Vec<String> {
    rec.take()
        .into_iter()
        .map(|e| match e {
            Event::Write { len, .. } => format!("write {len}"),
            Event::Sync { .. } => "sync".to_owned(),
        })
        .collect()
}

#[test]
fn t1_is_synced_before_dispatch_returns_even_under_buffered_durability() {
    let tmp = tempfile::tempdir().unwrap();
    let rec = Arc::new(Events::new());
    let backend =
        cairn::FileBackend::with_vfs(tmp.path().join("sessions"), HookVfs::sharing(rec.clone()));
    let store = Store::with_backend(Arc::new(backend));
    let s = store.create(NewSession::default()).unwrap();
    s.set_durability(Durability::Buffered);
    let op = started_with_call(&s, "bash", json!({"cmd": "rm -rf build"}));
    // Buffered appends so far: no sync after the header's.
    let before = io_events(&rec);
    assert!(
        before.last().is_some_and(|e| e.starts_with("write")),
        "buffered appends are not synced: {before:?}"
    );
    let t = op.dispatch_tool("c1", EffectClass::SideEffect).unwrap();
    // The tool may start now: T1 must be written and then synced.
    assert_eq!(
        io_events(&rec),
        vec![format!("write {}", rec_len(&s)), "sync".to_owned()]
    );
    op.record_result(t, ToolOutput::text("done")).unwrap();
    let ev = io_events(&rec);
    assert_eq!(
        ev.last().map(String::as_str),
        Some("sync"),
        "T2 is durable by default: {ev:?}"
    );
}

/// Starts an operation ("go") whose model replied with one call, `c1`, of `tool`.
fn started_with_call<'s>(s: &'s Session, tool: &str, arguments: Value) -> Operation<'s> {
    let op = s.start_operation(Message::text(Role::User, "go")).unwrap();
    let ticket = op.model_attempt(None, None).unwrap();
    let call = Block::ToolCall {
        call_id: "c1".into(),
        name: tool.into(),
        arguments,
    };
    let reply = Message {
        role: Role::Assistant,
        content: vec![call],
        usage: None,
        model: None,
        stop_reason: None,
    };
    op.record_assistant(ticket, reply).unwrap();
    op
}

fn rec_len(s: &Session) -> usize {
    s.raw_record(s.len() - 1).unwrap().len()
}

// ----------------------------------------------------------------- misuse ---

fn session_with_call(tool: &str) -> (MemoryBackend, Session) {
    let backend = MemoryBackend::new();
    let s = Session::create(&backend, NewSession::default()).unwrap();
    started_with_call(&s, tool, json!({}));
    (backend, s)
}

fn is_invalid(r: Result<impl std::fmt::Debug, AppendError>) -> String {
    match r {
        Err(AppendError::Invalid(i)) => i.to_string(),
        other => panic!("expected an invalid-record error, got {other:?}"),
    }
}

#[test]
fn an_assistant_entry_must_use_its_preallocated_id() {
    let backend = MemoryBackend::new();
    let s = Session::create(&backend, NewSession::default()).unwrap();
    let op = s.start_operation(Message::text(Role::User, "go")).unwrap();
    let ticket = op.model_attempt(None, None).unwrap();
    let n = s.len();
    let msg = is_invalid(s.append(assistant("sneaky")));
    assert!(msg.contains(ticket.entry().as_str()), "{msg}");
    // The reserved id cannot be taken by another kind of entry either.
    let other = NewEntry {
        id: Some(ticket.entry().clone()),
        parent: Parent::Leaf,
        body: user("x"),
    };
    is_invalid(s.append_entry(other));
    assert_eq!(s.len(), n, "nothing was written");
    op.record_assistant(ticket, Message::text(Role::Assistant, "ok"))
        .unwrap();
}

#[test]
fn a_dispatched_call_is_answered_only_under_its_result_id() {
    let (_b, s) = session_with_call("bash");
    let op = s.resume_operation().unwrap();
    let t = op.dispatch_tool("c1", EffectClass::SideEffect).unwrap();
    // A second dispatch of the same call is refused (a ticket is used once).
    is_invalid(op.dispatch_tool("c1", EffectClass::SideEffect));
    // A result for it appended around the ticket is refused.
    let block = Block::ToolResult {
        call_id: "c1".into(),
        content: vec![],
        is_error: false,
        code: None,
    };
    let rogue = Message {
        role: Role::Tool,
        content: vec![block],
        usage: None,
        model: None,
        stop_reason: None,
    };
    let msg = is_invalid(s.append(EntryBody::Message(rogue)));
    assert!(msg.contains(t.result_entry().as_str()), "{msg}");
    op.record_result(t, ToolOutput::text("ok")).unwrap();
    // A call that is not on the branch cannot be dispatched.
    is_invalid(op.dispatch_tool("nope", EffectClass::ReadOnly));
}

#[test]
fn a_ticket_of_another_operation_is_refused() {
    let (_b, s) = session_with_call("bash");
    let op = s.resume_operation().unwrap();
    let t = op.dispatch_tool("c1", EffectClass::SideEffect).unwrap();
    op.record_result(t, ToolOutput::text("ok")).unwrap();
    let ticket = op.model_attempt(None, None).unwrap();
    op.record_assistant(ticket, Message::text(Role::Assistant, "done"))
        .unwrap();
    op.finish(Outcome::Completed, None).unwrap();
    let (_b2, other) = session_with_call("read");
    let op2 = other.resume_operation().unwrap();
    let t2 = op2.dispatch_tool("c1", EffectClass::ReadOnly).unwrap();
    let op1 = s
        .start_operation(Message::text(Role::User, "again"))
        .unwrap();
    is_invalid(op1.record_result(t2, ToolOutput::text("x")));
}

#[test]
fn only_one_operation_is_open_at_a_time() {
    let (_b, s) = session_with_call("bash");
    is_invalid(s.start_operation(Message::text(Role::User, "second")));
    is_invalid(s.append_op(OpRecord::OpFinished(cairn::OpFinished {
        op: "op-9".into(),
        outcome: Outcome::Completed,
        error: None,
    })));
}

#[test]
fn recovery_never_reruns_a_side_effect_without_a_person() {
    let (_b, s) = session_with_call("bash");
    let op = s.resume_operation().unwrap();
    let _t = op.dispatch_tool("c1", EffectClass::SideEffect).unwrap();
    let Verdict::IndeterminateTool { calls, .. } = s.verdict().expect("the verdict") else {
        panic!("{:?}", s.verdict().expect("the verdict"))
    };
    let msg = is_invalid(op.rerun(&calls[0]));
    assert!(msg.contains("side effects"), "{msg}");
    // A person may decide to re-run it; the decision is recorded.
    let t = op.rerun_side_effect(&calls[0], "alice").unwrap();
    assert_eq!(t.key(), calls[0].key);
    op.record_result(t, ToolOutput::text("ran again")).unwrap();
    assert_eq!(s.verdict().expect("the verdict").name(), "Ready");
}

#[test]
fn idempotency_key_is_the_same_after_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open_dir(tmp.path());
    let s = store.create(NewSession::default()).unwrap();
    let id = s.id().clone();
    let op = started_with_call(&s, "put", json!({"k": 1}));
    let key = op
        .dispatch_tool("c1", EffectClass::Idempotent)
        .unwrap()
        .key()
        .to_owned();
    drop(op);
    drop(s);
    for _ in 0..3 {
        let s = store.open(&id, Access::Write).unwrap();
        let Verdict::IndeterminateTool { calls, .. } = s.verdict().expect("the verdict") else {
            panic!()
        };
        assert_eq!(calls[0].key, key);
        assert_eq!(cairn::idempotency_key(&id, "op-2", "c1"), key);
    }
    let s = store.open(&id, Access::Write).unwrap();
    let mut runner = CountingRunner { runs: Vec::new() };
    cairn::recover(&s, Policy::default(), Some(&mut runner)).unwrap();
    assert_eq!(runner.runs, vec![("c1".to_owned(), key)]);
}

// ------------------------------------------------------ status and steps ---

#[test]
fn status_follows_the_last_operation() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open_dir(tmp.path());
    let s = store.create(NewSession::default()).unwrap();
    let id = s.id().clone();
    assert_eq!(store.status(&id).unwrap(), Status::Init);
    let op = s.start_operation(Message::text(Role::User, "go")).unwrap();
    assert_eq!(store.status(&id).unwrap(), Status::Running);
    op.request_approval("c9", "bash").unwrap();
    assert_eq!(store.status(&id).unwrap(), Status::Paused);
    op.resolve_approval("c9", false, None).unwrap();
    op.finish(Outcome::Failed, Some("boom".into())).unwrap();
    assert_eq!(store.status(&id).unwrap(), Status::Failed);
    let op = s
        .start_operation(Message::text(Role::User, "again"))
        .unwrap();
    drop(op);
    drop(s);
    assert_eq!(store.status(&id).unwrap(), Status::Interrupted);
    let listed = store.list().unwrap();
    assert_eq!(listed[0].status, Status::Interrupted);
    let s = store.open(&id, Access::Write).unwrap();
    s.resume_operation()
        .unwrap()
        .finish(Outcome::Completed, None)
        .unwrap();
    assert_eq!(store.status(&id).unwrap(), Status::Succeeded);
}

#[test]
fn steps_are_numbered_stably_and_link_tools_to_their_model_call() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open_dir(tmp.path());
    let s = store.create(NewSession::default()).unwrap();
    let id = s.id().clone();
    run_plans(
        &s,
        &[OpPlan {
            interrupted_attempts: 1,
            calls: vec![
                CallPlan {
                    tool: "read",
                    approval: None,
                },
                CallPlan {
                    tool: "bash",
                    approval: Some(false),
                },
            ],
            outcome: Outcome::Completed,
        }],
    );
    let steps = s.steps().unwrap();
    drop(s);
    let again = store.open(&id, Access::Read).unwrap().steps().unwrap();
    assert_eq!(steps, again, "steps are a function of the log");
    let kinds: Vec<(StepKind, StepStatus)> = steps.iter().map(|s| (s.kind, s.status)).collect();
    assert_eq!(
        kinds,
        vec![
            (StepKind::Input, StepStatus::Ok),
            (StepKind::Model, StepStatus::Interrupted),
            (StepKind::Model, StepStatus::Ok),
            (StepKind::Tool, StepStatus::Ok),
            (StepKind::Tool, StepStatus::Denied),
            (StepKind::Model, StepStatus::Ok),
        ]
    );
    assert_eq!(steps[0].label(), "s0001");
    assert_eq!(
        steps[3].parent,
        Some(3),
        "the read call was requested by model step s0003"
    );
    assert_eq!(steps[3].name, "read");
    assert_eq!(steps[0].name, "task 0");
}

#[test]
fn subagents_name_their_parent_and_depth_is_bounded() {
    let store = Store::with_backend(Arc::new(MemoryBackend::new()));
    let root = store.create(NewSession::default()).unwrap();
    let child = store
        .spawn_child(&root, "call-1", Some("child".into()), 2)
        .unwrap();
    let lineage = child.header().lineage.parent.clone().unwrap();
    assert_eq!(
        (lineage.session, lineage.call_id.as_str(), lineage.depth),
        (root.id().clone(), "call-1", 1)
    );
    let grandchild = store.spawn_child(&child, "call-2", None, 2).unwrap();
    assert_eq!(
        grandchild.header().lineage.parent.as_ref().unwrap().depth,
        2
    );
    let err = store
        .spawn_child(&grandchild, "call-3", None, 2)
        .unwrap_err();
    assert!(err.to_string().contains("beyond the maximum 2"), "{err}");
    let reference = cairn::child_reference(child.id());
    assert!(
        matches!(reference, Block::Blob { uri, .. } if uri == format!("cairn:session/{}", child.id()))
    );
}

/// Regression: a crash between a person's "no" and the denial's tool result
/// left the call looking "not started", and the default policy ran it.
#[test]
fn recovery_never_runs_a_call_a_person_denied() {
    let (_b, s) = session_with_call("bash");
    let op = s.resume_operation().unwrap();
    op.request_approval("c1", "bash").unwrap();
    op.resolve_approval("c1", false, Some("alice")).unwrap();
    let Verdict::ToolsNotStarted { calls, .. } = s.verdict().expect("the verdict") else {
        panic!("{:?}", s.verdict().expect("the verdict"))
    };
    assert!(calls[0].denied);
    let mut runner = CountingRunner { runs: Vec::new() };
    cairn::recover(&s, Policy::default(), Some(&mut runner)).unwrap();
    assert!(
        runner.runs.is_empty(),
        "ran a denied call: {:?}",
        runner.runs
    );
    every_call_answered(&s).unwrap();
}
