//! The operation journal through a backend: a session left at each
//! recovery verdict (the writer gone, as after a crash) reopens with the
//! same verdict, operation records and status; recovery resolves it, and the
//! resolution reads back the same from another handle.

use serde_json::json;

use super::build::{calls, user};
use super::fixture::Fixture;
use super::util::{OrFail, other_store, store};
use crate::backend::Access;
use crate::journal::{Status, Verdict};
use crate::record::{EffectClass, Message, Outcome, Role};
use crate::recovery::{Policy, recover};
use crate::session::{NewSession, Session};
use crate::store::Store;

/// Where a scripted operation stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    NoOperation,
    ProviderInterrupted,
    ToolsNotStarted,
    AwaitingApproval,
    IndeterminateTool,
    Finished,
}

const STOPS: [Stop; 6] = [
    Stop::NoOperation,
    Stop::ProviderInterrupted,
    Stop::ToolsNotStarted,
    Stop::AwaitingApproval,
    Stop::IndeterminateTool,
    Stop::Finished,
];

impl Stop {
    fn verdict(self) -> &'static str {
        match self {
            Stop::NoOperation => "Ready",
            Stop::ProviderInterrupted => "ProviderInterrupted",
            Stop::ToolsNotStarted => "ToolsNotStarted",
            Stop::AwaitingApproval => "AwaitingApproval",
            Stop::IndeterminateTool => "IndeterminateTool",
            Stop::Finished => "Finished",
        }
    }

    /// The status once the writer is gone.
    fn status(self) -> Status {
        match self {
            Stop::NoOperation => Status::Init,
            Stop::AwaitingApproval => Status::Paused,
            Stop::Finished => Status::Failed,
            Stop::ProviderInterrupted | Stop::ToolsNotStarted | Stop::IndeterminateTool => {
                Status::Interrupted
            }
        }
    }
}

/// Runs an operation (a model call asking for a side-effecting `charge`
/// and a read-only `lookup`) up to `stop`.
fn script(name: &str, s: &Session, stop: Stop) {
    let ok = |what: &str| format!("{name}: {what} (stopping at {stop:?})");
    s.append(user("earlier message")).or_fail(ok("append"));
    if stop == Stop::NoOperation {
        return;
    }
    let op = s
        .start_operation(Message::text(Role::User, "charge me, then look it up"))
        .or_fail(ok("start an operation"));
    let ticket = op
        .model_attempt(Some("provider"), Some("model"))
        .or_fail(ok("model attempt"));
    if stop == Stop::ProviderInterrupted {
        return;
    }
    op.record_assistant(
        ticket,
        calls(
            "on it",
            &[
                ("c1", "charge", json!({"credits": 10})),
                ("c2", "lookup", json!({"what": "balance"})),
            ],
        ),
    )
    .or_fail(ok("record the reply"));
    if stop == Stop::ToolsNotStarted {
        return;
    }
    op.request_approval("c1", "charge")
        .or_fail(ok("request approval"));
    if stop == Stop::AwaitingApproval {
        return;
    }
    op.resolve_approval("c1", true, Some("tester"))
        .or_fail(ok("approve"));
    let t1 = op
        .dispatch_tool("c1", EffectClass::SideEffect)
        .or_fail(ok("dispatch"));
    if stop == Stop::IndeterminateTool {
        return;
    }
    op.record_result(t1, crate::operation::ToolOutput::text("charged"))
        .or_fail(ok("record the result"));
    op.deny("c2", "not needed").or_fail(ok("deny"));
    op.finish(Outcome::Failed, Some("the tester stopped it".into()))
        .or_fail(ok("finish"));
}

fn sessions_at_every_stop(f: &dyn Fixture) -> Vec<(Stop, crate::id::SessionId, Verdict)> {
    let name = f.name();
    STOPS
        .iter()
        .map(|&stop| {
            let s = store(f)
                .create(NewSession::default())
                .or_fail(format_args!("{name}: create"));
            script(&name, &s, stop);
            let verdict = s.verdict().or_fail("the verdict");
            assert_eq!(
                verdict.name(),
                stop.verdict(),
                "{name}: the scripted verdict"
            );
            (stop, s.id().clone(), verdict)
        })
        .collect()
}

/// A session left at each verdict — no operation, provider interrupted,
/// tools not started, awaiting approval, indeterminate tool, finished — by
/// a writer that then went away reopens (read and write, another handle)
/// with the same verdict and operation records; `Store::status` says
/// `running` while a writer holds an open operation and `interrupted`,
/// `paused`, `failed` or `init` once it is gone.
pub fn operation_records_and_verdicts_survive_reopen(f: &dyn Fixture) {
    let name = f.name();
    for stop in STOPS {
        let s = store(f)
            .create(NewSession::default())
            .or_fail(format_args!("{name}: create"));
        let id = s.id().clone();
        script(&name, &s, stop);
        let (verdict, ops, phase) = (
            s.verdict().or_fail("the verdict"),
            s.op_records(),
            s.phase(),
        );
        assert_eq!(
            verdict.name(),
            stop.verdict(),
            "{name}: the scripted verdict"
        );
        let held = Store::with_backend(f.reopen())
            .status(&id)
            .or_fail(format_args!("{name}: status while the writer holds it"));
        let expected_held = match stop.status() {
            Status::Interrupted => Status::Running,
            other => other,
        };
        assert_eq!(
            held, expected_held,
            "{name}: status with a writer ({stop:?})"
        );
        drop(s);
        let status = other_store(f)
            .status(&id)
            .or_fail(format_args!("{name}: status after the writer left"));
        assert_eq!(
            status,
            stop.status(),
            "{name}: status without a writer ({stop:?})"
        );
        for access in [Access::Read, Access::Write] {
            let again = other_store(f)
                .open(&id, access)
                .or_fail(format_args!("{name}: reopen ({stop:?}, {access:?})"));
            assert_eq!(
                again.verdict().or_fail("the verdict"),
                verdict,
                "{name}: the verdict survives ({stop:?})"
            );
            assert_eq!(
                again.op_records(),
                ops,
                "{name}: the operation records survive"
            );
            assert_eq!(again.phase(), phase);
        }
    }
}

/// `recover` with the default policy and no tool runner, on a session
/// reopened for writing through another handle, resolves every verdict
/// that needs no model (closing calls that never started, recording the
/// indeterminate side effect as unknown, denying the unanswered approval);
/// afterwards every tool call in the context has a result, and readers on
/// any handle compute the same verdict and context from the stored records.
pub fn recovery_resolves_and_is_deterministic(f: &dyn Fixture) {
    let name = f.name();
    for (stop, id, before) in sessions_at_every_stop(f) {
        let s = other_store(f)
            .open(&id, Access::Write)
            .or_fail(format_args!("{name}: reopen for recovery"));
        let report = recover(&s, Policy::default(), None)
            .or_fail(format_args!("{name}: recover ({stop:?})"));
        assert_eq!(
            report.before, before,
            "{name}: recovery starts from the stored verdict"
        );
        let resolvable = matches!(
            stop,
            Stop::ToolsNotStarted | Stop::AwaitingApproval | Stop::IndeterminateTool
        );
        if resolvable {
            assert!(
                !report.actions.is_empty(),
                "{name}: recovery acted ({stop:?})"
            );
            assert!(
                matches!(report.after, Verdict::Ready { .. }),
                "{name}: after recovering from {stop:?} the verdict is Ready, not {}",
                report.after.name()
            );
            let ctx = s.context();
            let mut calls = Vec::new();
            let mut results = Vec::new();
            for m in ctx.messages() {
                let m = m.message().or_fail("read a message");
                calls.extend(m.tool_calls().map(|(c, _, _)| c.to_owned()));
                results.extend(m.tool_results().map(str::to_owned));
            }
            calls.sort();
            results.sort();
            assert_eq!(
                calls, results,
                "{name}: every tool call has a result ({stop:?})"
            );
        } else {
            assert!(
                report.actions.is_empty(),
                "{name}: nothing to do for {stop:?}"
            );
        }
        let (context, ops) = (s.context(), s.op_records());
        drop(s);
        for b in [f.reopen(), f.backend()] {
            let again = Store::with_backend(b)
                .open(&id, Access::Read)
                .or_fail(format_args!("{name}: reopen after recovery"));
            assert_eq!(
                again.verdict().or_fail("the verdict"),
                report.after,
                "{name}: the same verdict ({stop:?})"
            );
            assert_eq!(
                again.context(),
                context,
                "{name}: the same context ({stop:?})"
            );
            assert_eq!(again.op_records(), ops);
        }
    }
}
