//! The agent loop on the scripted provider: approvals, validation before
//! T1, app state and rewind, interruption, output capping, compaction, the
//! step limit, and resume from every verdict.

// Test helpers panic on a failed step; that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn::{Access, Block, Body, EffectClass, Message, OpRecord, Outcome, Role, Session, Verdict};
use cairn_agent::OnUnknown;
use cairn_agent::compaction::CompactionPolicy;
use cairn_agent::prompt::{Approval, Canned, UnknownChoice};
use cairn_agent::provider::{ChatRequest, Provider, ProviderError, Reply, StreamEvent};
use cairn_agent::tools::CODE_INTERRUPTED;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use support::{
    Harness, call_ids, every_call_answered, last_assistant, last_text, op_kinds, result_of,
};

fn calls_then_done(calls: Value) -> Value {
    json!({"turns": [{"replies": [{"text": "On it.", "tool_calls": calls}, {"text": "All done."}]}]})
}

fn canned(approvals: &[Approval], unknowns: &[UnknownChoice]) -> Canned {
    Canned {
        approvals: approvals.iter().copied().collect(),
        unknowns: unknowns.iter().cloned().collect(),
        ..Canned::default()
    }
}

fn ops(session: &Session) -> Vec<OpRecord> {
    session
        .op_records()
        .into_iter()
        .filter_map(|(seq, _)| match session.record(seq).ok()?.body {
            Body::Op(o) => Some(o),
            _ => None,
        })
        .collect()
}

#[test]
fn a_denied_side_effect_is_answered_and_never_dispatched() {
    let h = Harness::new();
    let p = Harness::scripted(calls_then_done(
        json!([{"name": "bash", "arguments": {"command": "touch denied.txt"}}]),
    ));
    let mut agent = h.agent(h.new_session(), h.runtime(p, canned(&[Approval::No], &[])));
    let end = agent.prompt("make a file").unwrap();
    assert_eq!(end.outcome, Outcome::Completed);
    let s = agent.session();
    assert!(!h.work.join("denied.txt").exists());
    let kinds = op_kinds(s);
    assert!(
        kinds.contains(&"approval_requested".to_owned())
            && kinds.contains(&"approval_resolved".to_owned()),
        "{kinds:?}"
    );
    assert!(!kinds.contains(&"tool_dispatched".to_owned()), "{kinds:?}");
    let (is_error, _, text) = result_of(s, &call_ids(s)[0]).unwrap();
    assert!(is_error && text.contains("denied"), "{text}");
    every_call_answered(s).unwrap();
}

#[test]
fn always_approves_the_rest_of_the_session() {
    let h = Harness::new();
    let p = Harness::scripted(calls_then_done(json!([
        {"name": "bash", "arguments": {"command": "echo one > a.txt"}},
        {"name": "write_file", "arguments": {"path": "b.txt", "content": "two"}}
    ])));
    let mut agent = h.agent(
        h.new_session(),
        h.runtime(p, canned(&[Approval::Always], &[])),
    );
    agent.prompt("write two files").unwrap();
    assert_eq!(
        std::fs::read_to_string(h.work.join("a.txt")).unwrap(),
        "one\n"
    );
    assert_eq!(
        std::fs::read_to_string(h.work.join("b.txt")).unwrap(),
        "two"
    );
    let kinds = op_kinds(agent.session());
    assert_eq!(
        kinds.iter().filter(|k| *k == "approval_requested").count(),
        1
    );
    assert_eq!(kinds.iter().filter(|k| *k == "tool_dispatched").count(), 2);
}

#[test]
fn without_anyone_to_ask_a_side_effect_is_not_run() {
    let h = Harness::new();
    let p = Harness::scripted(calls_then_done(
        json!([{"name": "bash", "arguments": {"command": "touch x"}}]),
    ));
    let mut agent = h.agent(h.new_session(), h.runtime(p, Canned::default()));
    agent.prompt("go").unwrap();
    assert!(!h.work.join("x").exists());
    let s = agent.session();
    let (is_error, _, text) = result_of(s, &call_ids(s)[0]).unwrap();
    assert!(is_error && text.contains("--yes"), "{text}");
}

#[test]
fn invalid_arguments_and_unknown_tools_are_rejected_before_t1() {
    let h = Harness::new();
    let p = Harness::scripted(calls_then_done(json!([
        {"name": "read_file", "arguments": {"path": 5}},
        {"name": "fly", "arguments": {}},
        {"name": "read_file", "arguments": "{not json"}
    ])));
    let mut agent = h.agent(h.new_session(), h.runtime(p, Canned::default()));
    assert_eq!(agent.prompt("go").unwrap().outcome, Outcome::Completed);
    let s = agent.session();
    assert!(!op_kinds(s).contains(&"tool_dispatched".to_owned()));
    let ids = call_ids(s);
    let texts: Vec<String> = ids.iter().map(|id| result_of(s, id).unwrap().2).collect();
    assert!(
        texts[0].contains("Invalid arguments for read_file: $.path: expected string"),
        "{}",
        texts[0]
    );
    assert!(
        texts[1].contains("There is no tool named \"fly\""),
        "{}",
        texts[1]
    );
    assert!(texts[2].contains("expected object"), "{}", texts[2]);
}

#[test]
fn set_state_is_part_of_the_branch_so_rewind_restores_it() {
    let h = Harness::new();
    let script = json!({"turns": [
        {"match": "one", "replies": [{"tool_calls": [{"name": "set_state", "arguments": {"patch": {"buff": "power-up", "skill": "strike"}}}]}, {"text": "ok"}]},
        {"match": "two", "replies": [{"tool_calls": [{"name": "set_state", "arguments": {"patch": {"buff": "exhausted", "skill": null}}}]}, {"text": "ok"}]}
    ]});
    let mut agent = h.agent(
        h.new_session(),
        h.runtime(Harness::scripted(script), Canned::default()),
    );
    agent.prompt("panel one").unwrap();
    let panel1 = agent.session().leaf().unwrap();
    agent.prompt("panel two").unwrap();
    assert_eq!(
        *agent.session().context().app_state(),
        json!({"buff": "exhausted"})
    );
    agent.session().checkout(Some(&panel1), None).unwrap();
    assert_eq!(
        *agent.session().context().app_state(),
        json!({"buff": "power-up", "skill": "strike"})
    );
}

#[test]
fn ctrl_c_while_streaming_records_an_interrupted_reply() {
    let h = Harness::new();
    let long = "word ".repeat(200);
    let script =
        json!({"chunk_chars": 5, "chunk_delay_ms": 10, "turns": [{"replies": [{"text": long}]}]});
    let mut agent = h.agent(
        h.new_session(),
        h.runtime(Harness::scripted(script), Canned::default()),
    );
    let i = h.interrupt.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(150));
        i.trigger();
    });
    let end = agent.prompt("talk").unwrap();
    t.join().unwrap();
    assert_eq!(end.outcome, Outcome::Aborted);
    let last = last_assistant(agent.session()).unwrap();
    assert_eq!(last.stop_reason.as_deref(), Some("interrupted"));
    let partial = last.plain_text();
    assert!(
        !partial.is_empty() && partial.len() < long.len(),
        "{} of {}",
        partial.len(),
        long.len()
    );
    assert!(matches!(
        agent.session().verdict().expect("the verdict"),
        Verdict::Finished {
            outcome: Outcome::Aborted,
            ..
        }
    ));
    assert!(!h.interrupt.is_set(), "the interrupt was handled");
}

#[test]
fn ctrl_c_during_a_tool_stops_it_and_records_an_error_saying_so() {
    let h = Harness::new();
    let p = Harness::scripted(calls_then_done(json!([
        {"name": "bash", "arguments": {"command": "echo started; sleep 20; echo never"}},
        {"name": "list_dir", "arguments": {}}
    ])));
    let mut rt = h.runtime(p, Canned::default());
    rt.config.auto_approve = true;
    let mut agent = h.agent(h.new_session(), rt);
    let i = h.interrupt.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(400));
        i.trigger();
    });
    let end = agent.prompt("run it").unwrap();
    t.join().unwrap();
    assert_eq!(end.outcome, Outcome::Aborted);
    let s = agent.session();
    let ids = call_ids(s);
    let (is_error, code, text) = result_of(s, &ids[0]).unwrap();
    assert!(is_error);
    assert_eq!(code.as_deref(), Some(CODE_INTERRUPTED));
    assert!(
        text.contains("started")
            && text.contains("interrupted by the person")
            && !text.contains("never"),
        "{text}"
    );
    let (is_error, _, text) = result_of(s, &ids[1]).unwrap();
    assert!(is_error && text.contains("Not run"), "{text}");
    every_call_answered(s).unwrap();
    assert_eq!(
        op_kinds(s)
            .iter()
            .filter(|k| *k == "tool_dispatched")
            .count(),
        1
    );
}

#[test]
fn large_output_is_capped_and_the_full_output_kept_as_a_blob() {
    let h = Harness::new();
    let p = Harness::scripted(calls_then_done(
        json!([{"name": "bash", "arguments": {"command": "seq 1 30000"}}]),
    ));
    let mut rt = h.runtime(p, Canned::default());
    rt.config.auto_approve = true;
    let mut agent = h.agent(h.new_session(), rt);
    agent.prompt("count").unwrap();
    let s = agent.session();
    let ctx = s.context();
    let (content, size) = ctx
        .messages()
        .iter()
        .find_map(|m| {
            m.message()
                .expect("read the message")
                .content
                .iter()
                .find_map(|b| match b {
                    Block::ToolResult { content, .. } => {
                        let size = content.iter().find_map(|c| match c {
                            Block::Blob { uri, size, .. } => Some((uri.clone(), *size)),
                            _ => None,
                        });
                        Some((content.clone(), size))
                    }
                    _ => None,
                })
        })
        .unwrap();
    let (uri, size) = size.expect("a blob reference");
    let blobs = cairn_blobs::BlobStore::new(h.home.join("blobs"));
    let full = String::from_utf8(blobs.get_uri(&uri).unwrap()).unwrap();
    assert_eq!(full.lines().count(), 30000);
    assert_eq!(size, Some(full.len() as u64));
    let shown = cairn_agent::provider::result_text(&content);
    assert!(
        shown.len() < 20_000 && shown.contains("omitted") && shown.contains("30000"),
        "{}",
        shown.len()
    );
}

#[test]
fn the_step_limit_ends_the_operation() {
    let h = Harness::new();
    let reply = json!({"tool_calls": [{"name": "list_dir", "arguments": {}}]});
    let script = json!({"turns": [{"replies": [reply.clone(), reply.clone(), reply.clone(), reply.clone(), reply]}]});
    let mut rt = h.runtime(Harness::scripted(script), Canned::default());
    rt.config.max_steps = 3;
    let mut agent = h.agent(h.new_session(), rt);
    let end = agent.prompt("loop").unwrap();
    assert_eq!(end.outcome, Outcome::MaxSteps);
    assert_eq!(
        op_kinds(agent.session())
            .iter()
            .filter(|k| *k == "model_attempted")
            .count(),
        3
    );
    every_call_answered(agent.session()).unwrap();
}

/// Records every request it is sent, answering from a script.
struct Spy {
    inner: Arc<dyn Provider>,
    seen: Arc<Mutex<Vec<ChatRequest>>>,
}

impl Provider for Spy {
    fn name(&self) -> &str {
        "spy"
    }
    fn model(&self) -> &str {
        "spy-model"
    }
    fn stream(
        &self,
        r: &ChatRequest,
        on_event: &mut dyn FnMut(StreamEvent) -> bool,
    ) -> Result<Reply, ProviderError> {
        self.seen.lock().unwrap().push(r.clone());
        self.inner.stream(r, on_event)
    }
}

#[test]
fn memory_follows_the_system_prompt_and_compaction_keeps_calls_with_results() {
    let h = Harness::new();
    let script = json!({
        "summary": "SUMMARY: the person asked for several listings.",
        "turns": [{"replies": [
            {"text": "Listing.", "tool_calls": [{"name": "list_dir", "arguments": {}}]},
            {"text": "Here is the listing, described at some length so that the context grows past the small budget of this test."}
        ]}]
    });
    let seen = Arc::new(Mutex::new(Vec::new()));
    let spy: Arc<dyn Provider> = Arc::new(Spy {
        inner: Harness::scripted(script),
        seen: Arc::clone(&seen),
    });
    let mut rt = h.runtime(spy, Canned::default());
    rt.config.compaction = CompactionPolicy {
        budget_tokens: Some(250),
        keep_recent_tokens: 80,
    };
    let mut agent = h.agent(h.new_session(), rt);
    for i in 0..4 {
        assert_eq!(
            agent
                .prompt(&format!("list the directory, round {i}"))
                .unwrap()
                .outcome,
            Outcome::Completed
        );
    }
    let reqs = seen.lock().unwrap().clone();
    assert_eq!(reqs[1].messages[0].role, Role::System);
    assert_eq!(reqs[1].messages[1].role, Role::Developer);
    assert!(
        reqs[1].messages[1]
            .plain_text()
            .starts_with("Session memory"),
        "{:?}",
        reqs[1].messages[1]
    );
    assert!(
        h.recorder.lines().contains(&"compacted".to_owned()),
        "{:?}",
        h.recorder.lines()
    );
    let s = agent.session();
    let ctx = s.context();
    let c = ctx.compaction().expect("a compaction is active");
    assert_eq!(c.summary, "SUMMARY: the person asked for several listings.");
    assert!(
        ctx.messages()[0]
            .message()
            .expect("read the message")
            .plain_text()
            .contains("SUMMARY")
    );
    every_call_answered(s).unwrap();
    let summary_requests = reqs
        .iter()
        .filter(|r| r.purpose == cairn_agent::provider::Purpose::Summary)
        .count();
    assert!(summary_requests >= 1);
    // Summary requests are not model attempts: one attempt per reply.
    assert_eq!(
        op_kinds(s)
            .iter()
            .filter(|k| *k == "model_attempted")
            .count(),
        8
    );
    let forced = agent.compact().unwrap();
    assert!(
        forced.is_some()
            || h.recorder
                .lines()
                .iter()
                .any(|l| l.contains("nothing to compact"))
    );
    every_call_answered(agent.session()).unwrap();
}

fn assistant(calls: &[(&str, &str, Value)]) -> Message {
    Message {
        role: Role::Assistant,
        content: calls
            .iter()
            .map(|(id, name, args)| Block::ToolCall {
                call_id: (*id).into(),
                name: (*name).into(),
                arguments: args.clone(),
            })
            .collect(),
        usage: None,
        model: Some("scripted".into()),
        stop_reason: Some("tool_use".into()),
    }
}

/// Leaves a session as a crash would, via the operation API, and reopens it.
fn crashed(h: &Harness, stage: impl FnOnce(&Session)) -> Session {
    let s = h.new_session();
    let id = s.id().clone();
    stage(&s);
    drop(s);
    h.store.open(&id, Access::Write).unwrap()
}

const DONE: &str = r#"{"turns": [{"replies": [{"text": "unused"}, {"text": "All done."}]}]}"#;

fn resume_with(
    h: &Harness,
    s: Session,
    prompter: Canned,
    on_unknown: OnUnknown,
) -> (
    cairn_agent::Agent,
    anyhow::Result<cairn_agent::agent::Resumed>,
) {
    let mut rt = h.runtime(
        Harness::scripted(serde_json::from_str(DONE).unwrap()),
        prompter,
    );
    rt.config.on_unknown = on_unknown;
    let mut agent = h.agent(s, rt);
    let r = agent.resume();
    (agent, r)
}

#[test]
fn resume_retries_an_interrupted_model_call() {
    let h = Harness::new();
    let s = crashed(&h, |s| {
        let op = s
            .start_operation(Message::text(Role::User, "hello"))
            .unwrap();
        let _ticket = op.model_attempt(Some("scripted"), Some("m")).unwrap();
    });
    assert!(matches!(
        s.verdict().expect("the verdict"),
        Verdict::ProviderInterrupted { .. }
    ));
    let script = r#"{"turns": [{"replies": [{"text": "Hello again."}]}]}"#;
    let mut agent = h.agent(
        s,
        h.runtime(
            Harness::scripted(serde_json::from_str(script).unwrap()),
            Canned::default(),
        ),
    );
    let r = agent.resume().unwrap();
    assert_eq!(r.before.name(), "ProviderInterrupted");
    assert_eq!(r.end.unwrap().outcome, Outcome::Completed);
    assert_eq!(last_text(agent.session()), "Hello again.");
}

#[test]
fn resume_runs_tools_that_never_started() {
    let h = Harness::new();
    std::fs::write(h.work.join("f.txt"), "content").unwrap();
    let s = crashed(&h, |s| {
        let op = s.start_operation(Message::text(Role::User, "go")).unwrap();
        let t = op.model_attempt(None, None).unwrap();
        op.record_assistant(
            t,
            assistant(&[("c1", "read_file", json!({"path": "f.txt"}))]),
        )
        .unwrap();
    });
    assert_eq!(s.verdict().expect("the verdict").name(), "ToolsNotStarted");
    let (agent, r) = resume_with(&h, s, Canned::default(), OnUnknown::Ask);
    assert_eq!(r.unwrap().end.unwrap().outcome, Outcome::Completed);
    let (is_error, _, text) = result_of(agent.session(), "c1").unwrap();
    assert!(!is_error && text.contains("content"), "{text}");
    assert_eq!(last_text(agent.session()), "All done.");
}

#[test]
fn resume_asks_a_pending_approval_again() {
    let h = Harness::new();
    let s = crashed(&h, |s| {
        let op = s.start_operation(Message::text(Role::User, "go")).unwrap();
        let t = op.model_attempt(None, None).unwrap();
        op.record_assistant(
            t,
            assistant(&[("c1", "bash", json!({"command": "echo ran >> tally"}))]),
        )
        .unwrap();
        op.request_approval("c1", "bash").unwrap();
    });
    assert_eq!(s.verdict().expect("the verdict").name(), "AwaitingApproval");
    let (agent, r) = resume_with(&h, s, canned(&[Approval::Yes], &[]), OnUnknown::Ask);
    assert_eq!(r.unwrap().end.unwrap().outcome, Outcome::Completed);
    assert_eq!(
        std::fs::read_to_string(h.work.join("tally")).unwrap(),
        "ran\n"
    );
    let resolved = ops(agent.session())
        .into_iter()
        .any(|o| matches!(o, OpRecord::ApprovalResolved(a) if a.approved && a.call_id == "c1"));
    assert!(resolved);
}

#[test]
fn resume_reruns_an_idempotent_call_with_its_recorded_key() {
    let h = Harness::new();
    let s = crashed(&h, |s| {
        let op = s.start_operation(Message::text(Role::User, "go")).unwrap();
        let t = op.model_attempt(None, None).unwrap();
        op.record_assistant(
            t,
            assistant(&[
                ("c1", "set_state", json!({"patch": {"mode": "draw"}})),
                ("c2", "list_dir", json!({})),
            ]),
        )
        .unwrap();
        let _t1 = op.dispatch_tool("c1", EffectClass::Idempotent).unwrap();
    });
    let Verdict::IndeterminateTool { calls, .. } = s.verdict().expect("the verdict") else {
        panic!("{:?}", s.verdict().expect("the verdict"))
    };
    let key = calls[0].key.clone();
    let (agent, r) = resume_with(&h, s, Canned::default(), OnUnknown::Fail);
    assert_eq!(r.unwrap().end.unwrap().outcome, Outcome::Completed);
    let s = agent.session();
    assert_eq!(*s.context().app_state(), json!({"mode": "draw"}));
    let keys: Vec<String> = ops(s)
        .into_iter()
        .filter_map(|o| match o {
            OpRecord::ToolDispatched(t) if t.call_id == "c1" => Some(t.key),
            _ => None,
        })
        .collect();
    assert_eq!(keys, vec![key.clone(), key]);
    every_call_answered(s).unwrap();
    assert!(
        !result_of(s, "c2").unwrap().0,
        "the call that never started ran too"
    );
}

fn side_effect_crash(h: &Harness) -> Session {
    crashed(h, |s| {
        let op = s.start_operation(Message::text(Role::User, "go")).unwrap();
        let t = op.model_attempt(None, None).unwrap();
        op.record_assistant(
            t,
            assistant(&[("c1", "bash", json!({"command": "echo ran >> tally"}))]),
        )
        .unwrap();
        let _t1 = op.dispatch_tool("c1", EffectClass::SideEffect).unwrap();
    })
}

#[test]
fn an_unknown_side_effect_is_never_rerun_without_a_decision() {
    let h = Harness::new();
    std::fs::write(h.work.join("tally"), "ran\n").unwrap();

    // Marked unknown: not re-run, a real result with the code.
    let (agent, r) = resume_with(
        &h,
        side_effect_crash(&h),
        canned(&[], &[UnknownChoice::Mark]),
        OnUnknown::Ask,
    );
    assert_eq!(r.unwrap().end.unwrap().outcome, Outcome::Completed);
    let (is_error, code, _) = result_of(agent.session(), "c1").unwrap();
    assert!(is_error);
    assert_eq!(code.as_deref(), Some(cairn::TOOL_OUTCOME_UNKNOWN));
    assert_eq!(
        std::fs::read_to_string(h.work.join("tally")).unwrap(),
        "ran\n"
    );

    // Told: the person's words become the result.
    let (agent, r) = resume_with(
        &h,
        side_effect_crash(&h),
        canned(&[], &[UnknownChoice::Tell("it ran once".into())]),
        OnUnknown::Ask,
    );
    r.unwrap();
    assert!(
        result_of(agent.session(), "c1")
            .unwrap()
            .2
            .contains("it ran once")
    );

    // Re-run, as decided: recorded as a person's approval.
    let (agent, r) = resume_with(
        &h,
        side_effect_crash(&h),
        canned(&[], &[UnknownChoice::Rerun]),
        OnUnknown::Ask,
    );
    r.unwrap();
    assert_eq!(
        std::fs::read_to_string(h.work.join("tally")).unwrap(),
        "ran\nran\n"
    );
    assert!(ops(agent.session()).iter().any(|o| matches!(o, OpRecord::ApprovalResolved(a) if a.approved && a.by.as_deref() == Some("person"))));

    // Fail: an error, and the session is left as it was.
    let (agent, r) = resume_with(
        &h,
        side_effect_crash(&h),
        Canned::default(),
        OnUnknown::Fail,
    );
    let e = r.unwrap_err().to_string();
    assert!(
        e.contains("may or may not have run") && e.contains("--on-unknown"),
        "{e}"
    );
    assert_eq!(
        agent.session().verdict().expect("the verdict").name(),
        "IndeterminateTool"
    );

    // No one to ask: marked.
    let (agent, r) = resume_with(&h, side_effect_crash(&h), Canned::default(), OnUnknown::Ask);
    r.unwrap();
    assert_eq!(
        result_of(agent.session(), "c1").unwrap().1.as_deref(),
        Some(cairn::TOOL_OUTCOME_UNKNOWN)
    );
}

#[test]
fn a_new_prompt_on_an_interrupted_session_recovers_first() {
    let h = Harness::new();
    let s = crashed(&h, |s| {
        let op = s
            .start_operation(Message::text(Role::User, "first"))
            .unwrap();
        let t = op.model_attempt(None, None).unwrap();
        op.record_assistant(t, assistant(&[("c1", "list_dir", json!({}))]))
            .unwrap();
    });
    let script = json!({"turns": [
        {"match": "first", "replies": [{"text": "unused"}, {"text": "first done"}]},
        {"match": "second", "replies": [{"text": "second done"}]}
    ]});
    let mut agent = h.agent(s, h.runtime(Harness::scripted(script), Canned::default()));
    let end = agent.prompt("second").unwrap();
    assert_eq!(end.outcome, Outcome::Completed);
    every_call_answered(agent.session()).unwrap();
    let texts: Vec<String> = agent
        .session()
        .context()
        .messages()
        .iter()
        .filter(|m| m.message().expect("read the message").role == Role::Assistant)
        .map(|m| m.message().expect("read the message").plain_text())
        .collect();
    assert_eq!(texts, ["", "first done", "second done"]);
}
