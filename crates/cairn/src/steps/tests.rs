//! Tests of the steps derivation.

use super::*;
use crate::record::{Entry, Message, ModelAttempted, OpStarted};

fn op(seq: u64, ts: &str, op: OpRecord) -> Record {
    Record {
        seq,
        ts: ts.into(),
        body: Body::Op(op),
    }
}

fn reply(seq: u64, ts: &str, id: &EntryId) -> Record {
    Record {
        seq,
        ts: ts.into(),
        body: Body::Entry(Entry {
            id: id.clone(),
            parent: None,
            body: EntryBody::Message(Message::text(Role::Assistant, "done")),
        }),
    }
}

fn model_step(started: &str, answered: &str) -> Step {
    let entry = EntryId::parse("reply").unwrap();
    let records = [
        op(
            1,
            started,
            OpRecord::OpStarted(OpStarted {
                op: "op-1".into(),
                input: None,
            }),
        ),
        op(
            2,
            started,
            OpRecord::ModelAttempted(ModelAttempted {
                op: "op-1".into(),
                attempt: 1,
                entry: entry.clone(),
                provider: None,
                model: Some("m".into()),
            }),
        ),
        reply(3, answered, &entry),
    ];
    let steps = derive(&records);
    assert_eq!(steps.len(), 2, "{steps:?}");
    steps[1].clone()
}

#[test]
fn a_model_step_lasts_from_its_attempt_to_its_reply() {
    let s = model_step("2026-11-30T23:59:59.250Z", "2026-12-01T00:00:01.001Z");
    assert_eq!(s.status, StepStatus::Ok);
    assert_eq!(s.started, "2026-11-30T23:59:59.250Z", "as written");
    assert_eq!(s.started_at, time::parse("2026-11-30T23:59:59.250Z"));
    assert_eq!(s.duration_ms, Some(1751));
}

#[test]
fn a_duration_is_unknown_when_a_time_is_not_rfc3339_or_runs_backwards() {
    let s = model_step("yesterday", "2026-12-01T00:00:01.001Z");
    assert_eq!((s.started.as_str(), s.started_at), ("yesterday", None));
    assert_eq!(s.duration_ms, None);
    let s = model_step("2026-12-01T00:00:01.001Z", "not a time");
    assert_eq!(s.duration_ms, None);
    let s = model_step("2026-12-01T00:00:01.001Z", "2026-12-01T00:00:00.000Z");
    assert_eq!(s.duration_ms, None, "the clock went back: no duration");
}

#[test]
fn step_labels_are_s_and_at_least_four_digits() {
    assert_eq!(parse_label("s0005"), Some(5));
    assert_eq!(parse_label("s12345"), Some(12345));
    assert_eq!(label(5), "s0005");
    for not in ["s5", "s000", "S0005", "s0000", "0005", "s00x5", "s-001", ""] {
        assert_eq!(parse_label(not), None, "{not}");
    }
}

#[test]
fn messages_no_operation_accounts_for_are_steps_numbered_in_log_order() {
    let entry = |seq: u64, id: &str, m: Message| Record {
        seq,
        ts: "2026-12-01T00:00:00.000Z".into(),
        body: Body::Entry(Entry {
            id: EntryId::parse(id).unwrap(),
            parent: None,
            body: EntryBody::Message(m),
        }),
    };
    let mut ask = Message::text(Role::Assistant, "");
    ask.content = vec![Block::ToolCall {
        call_id: "c1".into(),
        name: "grep".into(),
        arguments: serde_json::json!({"q": "x"}),
    }];
    let mut answer = Message::text(Role::Tool, "");
    answer.content = vec![Block::ToolResult {
        call_id: "c1".into(),
        content: vec![Block::Text {
            text: "no match".into(),
        }],
        is_error: true,
        code: None,
    }];
    let records = [
        entry(1, "u1", Message::text(Role::User, "find x")),
        entry(2, "a1", ask),
        entry(3, "t1", answer),
    ];
    let steps = derive(&records);
    let got: Vec<_> = steps
        .iter()
        .map(|s| (s.number, s.kind, s.status, s.op.clone(), s.parent))
        .collect();
    assert_eq!(
        got,
        [
            (1, StepKind::Input, StepStatus::Ok, None, None),
            (2, StepKind::Model, StepStatus::Ok, None, None),
            (3, StepKind::Tool, StepStatus::Error, None, Some(2)),
        ]
    );
    assert_eq!(steps[1].output.as_deref(), Some("asked for grep"));
    assert_eq!(steps[2].input.as_deref(), Some(r#"{"q":"x"}"#));
    assert_eq!(steps[2].output.as_deref(), Some("no match"));
    assert_eq!(steps[2].duration_ms, None, "no operation: no timing");
}

#[test]
fn times_with_an_offset_are_compared_as_instants() {
    let s = model_step("2026-12-01T01:00:00+01:00", "2026-12-01T00:00:00.500Z");
    assert_eq!(s.duration_ms, Some(500));
}

/// A crashed tool call: started at 0 s, the dead process's last record
/// at 1 s, the resume at 60 s; then `ending` (none, a re-run's T1, or
/// recovery's unknown result at 61 s).
fn crashed_tool(ending: &str) -> Vec<Step> {
    use crate::record::{ToolDispatched, Unknown};
    let t = |s: u32| format!("2026-12-01T00:{:02}:{:02}.000Z", s / 60, s % 60);
    let reply_id = EntryId::parse("reply").unwrap();
    let result_id = EntryId::parse("result").unwrap();
    let mut ask = Message::text(Role::Assistant, "");
    ask.content = vec![Block::ToolCall {
        call_id: "c1".into(),
        name: "bash".into(),
        arguments: serde_json::json!({}),
    }];
    let dispatch = |seq: u64, at: u32| {
        op(
            seq,
            &t(at),
            OpRecord::ToolDispatched(ToolDispatched {
                op: "op-1".into(),
                call_id: "c1".into(),
                tool: "bash".into(),
                args_hash: String::new(),
                effect: crate::EffectClass::SideEffect,
                key: "k".into(),
                result_entry: result_id.clone(),
            }),
        )
    };
    let mut records = vec![
        op(
            1,
            &t(0),
            OpRecord::OpStarted(OpStarted {
                op: "op-1".into(),
                input: None,
            }),
        ),
        op(
            2,
            &t(0),
            OpRecord::ModelAttempted(ModelAttempted {
                op: "op-1".into(),
                attempt: 1,
                entry: reply_id.clone(),
                provider: None,
                model: None,
            }),
        ),
        Record {
            seq: 3,
            ts: t(0),
            body: Body::Entry(Entry {
                id: reply_id,
                parent: None,
                body: EntryBody::Message(ask),
            }),
        },
        dispatch(4, 0),
        op(
            5,
            &t(1),
            OpRecord::Ignored(Unknown {
                kind: "cairn.workspace".into(),
                data: serde_json::json!({}),
            }),
        ),
        op(
            6,
            &t(60),
            OpRecord::Ignored(Unknown {
                kind: RESUMED.into(),
                data: serde_json::json!({"op": "op-1"}),
            }),
        ),
    ];
    let mut answer = Message::text(Role::Tool, "");
    answer.content = vec![Block::ToolResult {
        call_id: "c1".into(),
        content: vec![],
        is_error: true,
        code: Some(TOOL_OUTCOME_UNKNOWN.into()),
    }];
    match ending {
        "rerun" => records.push(dispatch(7, 61)),
        "unknown" => records.push(Record {
            seq: 7,
            ts: t(61),
            body: Body::Entry(Entry {
                id: result_id,
                parent: None,
                body: EntryBody::Message(answer),
            }),
        }),
        _ => {}
    }
    derive(&records)
}

#[test]
fn a_tool_whose_process_died_is_interrupted_and_its_downtime_is_apart() {
    let steps = crashed_tool("");
    let tool = &steps[2];
    assert_eq!(
        (tool.kind, tool.status),
        (StepKind::Tool, StepStatus::Interrupted)
    );
    assert_eq!(
        tool.duration_ms,
        Some(1000),
        "until the dead process's last record"
    );
    assert_eq!(tool.downtime_ms, Some(59_000));
}

#[test]
fn an_interrupted_tool_recovery_marks_unknown_keeps_its_running_time_apart_from_downtime() {
    let steps = crashed_tool("unknown");
    assert_eq!(steps.len(), 3, "{steps:?}");
    let tool = &steps[2];
    assert_eq!(tool.status, StepStatus::Unknown);
    assert_eq!(
        (tool.duration_ms, tool.downtime_ms),
        (Some(1000), Some(59_000))
    );
}

#[test]
fn a_rerun_leaves_the_first_dispatch_interrupted() {
    let steps = crashed_tool("rerun");
    let statuses: Vec<_> = steps.iter().map(|s| s.status).collect();
    assert_eq!(
        statuses,
        [
            StepStatus::Ok,
            StepStatus::Ok,
            StepStatus::Interrupted,
            StepStatus::Running
        ]
    );
}

#[test]
fn steps_still_running_when_the_process_is_gone_are_interrupted() {
    let entry = EntryId::parse("reply").unwrap();
    let mut steps = derive(&[
        op(
            1,
            "2026-12-01T00:00:00.000Z",
            OpRecord::OpStarted(OpStarted {
                op: "op-1".into(),
                input: None,
            }),
        ),
        op(
            2,
            "2026-12-01T00:00:00.000Z",
            OpRecord::ModelAttempted(ModelAttempted {
                op: "op-1".into(),
                attempt: 1,
                entry,
                provider: None,
                model: None,
            }),
        ),
    ]);
    assert_eq!(steps[1].status, StepStatus::Running);
    interrupt_running(&mut steps);
    assert_eq!(steps[1].status, StepStatus::Interrupted);
}
