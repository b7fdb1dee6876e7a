//! Crash recovery with a real process: a child runs a scripted operation
//! (a model call requesting two tools: `charge`, a SideEffect that increments
//! a counter file standing in for "charge the user", and `read`, ReadOnly)
//! and is killed with SIGKILL at each boundary in turn. The parent reopens
//! the session and checks the verdict `docs/DESIGN.md` §4 prescribes, that nothing
//! acknowledged was lost, the status before and after the kill, and that
//! after recovery with the default policy the charge happened at most once
//! and every tool call in the context has a result.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use cairn::testkit::child::rerun_ignored;
use cairn::{
    Access, Block, Durability, EffectClass, Message, NewSession, Outcome, Policy, Role, SessionId,
    Status, Store, ToolOutput, ToolRunner, Verdict,
};
use serde_json::{Value, json};

const CHILD_ENV: &str = "CAIRN_CRASH_CHILD_DIR";
const STOP_ENV: &str = "CAIRN_CRASH_STOP_AT";

/// The boundaries, in the order the scripted operation reaches them.
const BOUNDARIES: &[&str] = &[
    "during_model_call",
    "during_approval",
    "before_t1",
    "after_t1",
    "in_tool_after_effect",
    "before_t2",
    "after_t2",
    "done",
];

fn counter(dir: &Path) -> u64 {
    std::fs::read_to_string(dir.join("charges"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// The stand-in for a paid API: increments the counter durably.
fn charge(dir: &Path) {
    let n = counter(dir) + 1;
    let path = dir.join("charges");
    let mut f = std::fs::File::create(&path).unwrap();
    write!(f, "{n}").unwrap();
    f.sync_all().unwrap();
}

struct Runner {
    dir: PathBuf,
}

impl ToolRunner for Runner {
    fn effect(&self, tool: &str) -> EffectClass {
        if tool == "charge" {
            EffectClass::SideEffect
        } else {
            EffectClass::ReadOnly
        }
    }
    fn run(&mut self, _call_id: &str, tool: &str, _arguments: &Value, _key: &str) -> ToolOutput {
        if tool == "charge" {
            charge(&self.dir);
            ToolOutput::text("charged 10 credits")
        } else {
            ToolOutput::text(format!("balance: {}", counter(&self.dir) * 10))
        }
    }
}

/// The child: runs the operation, printing `ack <seq>` after each append and
/// `at <boundary>` at each boundary; at `CAIRN_CRASH_STOP_AT` it waits for
/// the parent to kill it.
#[test]
#[ignore = "run by crash_at_every_boundary_is_recovered_with_at_most_one_charge as a child process"]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let stop = std::env::var(STOP_ENV).unwrap_or_default();
    let out = std::io::stdout();
    let say = |line: String| {
        let mut o = out.lock();
        writeln!(o, "{line}").unwrap();
        o.flush().unwrap();
    };
    let boundary = |name: &str| {
        say(format!("at {name}"));
        if name == stop {
            // Wait to be killed.
            let mut buf = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut buf);
            std::process::exit(3);
        }
    };
    let store = Store::open_dir(&dir);
    let id = SessionId::parse(std::fs::read_to_string(dir.join("id")).unwrap().trim()).unwrap();
    let s = store.open(&id, Access::Write).unwrap();
    // Buffered: T1 and T2 must still be synced by the operation API.
    s.set_durability(Durability::Buffered);
    let op = s
        .start_operation(Message::text(
            Role::User,
            "charge me for panel 3 and show the balance",
        ))
        .unwrap();
    say(format!("ack {}", s.len() - 1));
    let ticket = op.model_attempt(Some("scripted"), Some("m1")).unwrap();
    say(format!("ack {}", s.len() - 1));
    boundary("during_model_call");
    let reply = Message {
        role: Role::Assistant,
        content: vec![
            Block::ToolCall {
                call_id: "c1".into(),
                name: "charge".into(),
                arguments: json!({"credits": 10}),
            },
            Block::ToolCall {
                call_id: "c2".into(),
                name: "read".into(),
                arguments: json!({"what": "balance"}),
            },
        ],
        usage: None,
        model: Some("m1".into()),
        stop_reason: Some("tool_use".into()),
    };
    op.record_assistant(ticket, reply).unwrap();
    say(format!("ack {}", s.len() - 1));
    op.request_approval("c1", "charge").unwrap();
    say(format!("ack {}", s.len() - 1));
    boundary("during_approval");
    op.resolve_approval("c1", true, Some("tester")).unwrap();
    say(format!("ack {}", s.len() - 1));
    boundary("before_t1");
    let t1 = op.dispatch_tool("c1", EffectClass::SideEffect).unwrap();
    say(format!("ack {}", s.len() - 1));
    boundary("after_t1");
    charge(&dir);
    boundary("in_tool_after_effect");
    let output = ToolOutput::text("charged 10 credits");
    boundary("before_t2");
    op.record_result(t1, output).unwrap();
    say(format!("ack {}", s.len() - 1));
    boundary("after_t2");
    let t2 = op.dispatch_tool("c2", EffectClass::ReadOnly).unwrap();
    op.record_result(t2, ToolOutput::text("balance: 10"))
        .unwrap();
    let ticket = op.model_attempt(Some("scripted"), Some("m1")).unwrap();
    op.record_assistant(
        ticket,
        Message::text(Role::Assistant, "Done: charged once."),
    )
    .unwrap();
    op.finish(Outcome::Completed, None).unwrap();
    say(format!("ack {}", s.len() - 1));
    boundary("done");
}

fn expected_verdict(boundary: &str) -> &'static str {
    match boundary {
        "during_model_call" => "ProviderInterrupted",
        "during_approval" => "AwaitingApproval",
        "before_t1" | "after_t2" => "ToolsNotStarted",
        "after_t1" | "in_tool_after_effect" | "before_t2" => "IndeterminateTool",
        _ => "Finished",
    }
}

#[test]
fn crash_at_every_boundary_is_recovered_with_at_most_one_charge() {
    for &boundary in BOUNDARIES {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let store = Store::open_dir(&dir);
        let id = store.create(NewSession::default()).unwrap().id().clone();
        std::fs::write(dir.join("id"), id.as_str()).unwrap();

        let mut child = rerun_ignored("crash_child")
            .env(CHILD_ENV, &dir)
            .env(STOP_ENV, boundary)
            .spawn()
            .unwrap();
        let mut acked: Option<u64> = None;
        let mut reached = false;
        for line in BufReader::new(child.stdout.take().unwrap()).lines() {
            let line = line.unwrap();
            if let Some(seq) = line.strip_prefix("ack ") {
                acked = Some(seq.parse().unwrap());
            }
            if line == format!("at {boundary}") {
                reached = true;
                break;
            }
        }
        assert!(reached, "the child never reached {boundary}");
        if boundary != "done" {
            assert_eq!(
                store.status(&id).unwrap(),
                if boundary == "during_approval" {
                    Status::Paused
                } else {
                    Status::Running
                },
                "{boundary}: status while the writer is alive"
            );
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();

        let charges_before = counter(&dir);
        let status = store.status(&id).unwrap();
        let s = store.open(&id, Access::Write).unwrap();
        let acked = acked.expect("the child acknowledged records");
        assert!(
            s.len() > acked,
            "{boundary}: acknowledged record {acked} lost (session has {})",
            s.len()
        );
        let verdict = s.verdict().expect("the verdict");
        assert_eq!(
            verdict.name(),
            expected_verdict(boundary),
            "{boundary}: {verdict:?}"
        );
        match boundary {
            "during_approval" => assert_eq!(status, Status::Paused),
            "done" => assert_eq!(status, Status::Succeeded),
            _ => assert_eq!(status, Status::Interrupted, "{boundary}"),
        }
        if let Verdict::IndeterminateTool { calls, .. } = &verdict {
            assert_eq!(calls.len(), 1);
            assert_eq!(calls[0].call_id, "c1");
            assert_eq!(calls[0].effect, EffectClass::SideEffect);
        }

        let mut runner = Runner { dir: dir.clone() };
        let report = cairn::recover(&s, Policy::default(), Some(&mut runner)).unwrap();
        let charges = counter(&dir);
        assert!(
            charges <= 1,
            "{boundary}: charged {charges} times ({report:?})"
        );
        if matches!(boundary, "after_t1" | "in_tool_after_effect" | "before_t2") {
            assert_eq!(
                charges, charges_before,
                "{boundary}: a SideEffect call was re-run by recovery"
            );
        }
        // After recovery the provider would accept the history.
        let ctx = s.context();
        for m in ctx.messages() {
            for (call_id, _, _) in m.message().expect("read the message").tool_calls() {
                let answered = ctx.messages().iter().any(|r| {
                    r.message()
                        .expect("read the message")
                        .tool_results()
                        .any(|c| c == call_id)
                });
                assert!(
                    answered,
                    "{boundary}: call {call_id} has no result after recovery: {report:?}"
                );
            }
        }
        if boundary == "in_tool_after_effect" || boundary == "before_t2" || boundary == "after_t1" {
            let unknown = ctx.messages().iter().any(|m| {
                m.message().expect("read the message").content.iter().any(|b| matches!(b, Block::ToolResult { code: Some(c), .. } if c == cairn::TOOL_OUTCOME_UNKNOWN))
            });
            assert!(
                unknown,
                "{boundary}: the SideEffect call was not recorded as unknown"
            );
        }
        if boundary == "during_model_call" {
            // Retry the model call: the new attempt gets a new preallocated id.
            let op = s.resume_operation().unwrap();
            let ticket = op.model_attempt(None, None).unwrap();
            op.record_assistant(ticket, Message::text(Role::Assistant, "retried"))
                .unwrap();
            op.finish(Outcome::Completed, None).unwrap();
            assert_eq!(s.verdict().expect("the verdict").name(), "Finished");
        }
    }
}
