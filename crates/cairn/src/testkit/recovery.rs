//! Random histories for recovery tests, shared by every surface (library,
//! CLI, agent): appends with and without operation records, tool calls left
//! unanswered, operations stopped at any record, checkouts, explicit
//! parents, forks and recoveries. Each surface cuts the history at any
//! record, recovers it its own way, and checks with
//! [`assert_no_unanswered_call_reaches_a_provider`].

use std::sync::Arc;

use serde_json::{Value, json};

use crate::backend::MemoryBackend;
use crate::error::AppendError;
use crate::id::{EntryId, SessionId};
use crate::journal::Verdict;
use crate::operation::{Operation, ToolOutput, ToolTicket};
use crate::record::{Block, EffectClass, EntryBody, Message, Outcome, Role};
use crate::recovery::{Policy, RecoveryError, ToolRunner, recover};
use crate::session::{NewEntry, NewSession, Parent, Session};
use crate::store::Store;
use crate::view::ViewBuilder;

use super::Rng;
use super::util::OrFail;

/// The tools of the histories: `read` is read-only, `put` idempotent, `bash`
/// a side effect.
pub fn effect_of(tool: &str) -> EffectClass {
    match tool {
        "read" => EffectClass::ReadOnly,
        "put" => EffectClass::Idempotent,
        _ => EffectClass::SideEffect,
    }
}

/// A runner for the histories' tools: records what it ran.
#[derive(Debug, Default)]
pub struct ScenarioRunner {
    /// `(call id, idempotency key)` of every run.
    pub runs: Vec<(String, String)>,
}

impl ToolRunner for ScenarioRunner {
    fn effect(&self, tool: &str) -> EffectClass {
        effect_of(tool)
    }

    fn run(&mut self, call_id: &str, tool: &str, _arguments: &Value, key: &str) -> ToolOutput {
        self.runs.push((call_id.to_owned(), key.to_owned()));
        ToolOutput::text(format!("{tool} ran"))
    }
}

/// A random history of `steps` steps from `seed`: the records of its last
/// session (a fork of the first, sometimes), line by line, and that
/// session's id. Every step went through the append path, so every record
/// is one a writer accepted; cut the lines anywhere to stop it at any record.
pub fn recovery_history(seed: u64, steps: usize) -> (SessionId, Vec<Vec<u8>>) {
    let backend = Arc::new(MemoryBackend::new());
    let store = Store::with_backend(backend.clone());
    let mut h = History {
        rng: Rng::new(seed),
        calls: 0,
        session: store
            .create(NewSession::default())
            .unwrap_or_else(|e| panic!("creating a session: {e}")),
        store,
    };
    for _ in 0..steps {
        h.step();
    }
    let id = h.session.id().clone();
    drop(h);
    let lines = backend
        .raw(&id)
        .unwrap_or_else(|| panic!("the history's session {id} is gone"));
    (id, lines)
}

/// Panics unless a provider could be handed the session's context: no tool
/// call without a result (the model view builds), and the verdict needs no
/// more recovery.
pub fn assert_no_unanswered_call_reaches_a_provider(s: &Session, what: &str) {
    if let Err(e) = ViewBuilder::new(Some("system".into())).build(None, &s.context()) {
        panic!("{what}: {e} (verdict {:?})", s.verdict());
    }
    match s.verdict().or_fail("the verdict") {
        Verdict::Finished { .. } | Verdict::Ready { .. } | Verdict::ProviderInterrupted { .. } => {}
        other => panic!("{what}: recovery left the verdict {other:?}"),
    }
}

/// A policy for the seed: re-run what is safe and run what never started,
/// or close everything.
pub fn policy_for(seed: u64) -> Policy {
    match seed % 3 {
        0 => Policy::default(),
        1 => Policy::close_all(),
        _ => Policy {
            rerun_safe: false,
            ..Policy::default()
        },
    }
}

struct History {
    rng: Rng,
    calls: u32,
    store: Store,
    session: Session,
}

impl History {
    fn tool(&mut self) -> &'static str {
        ["read", "put", "bash"][self.rng.index(3)]
    }

    fn assistant(&mut self, max_calls: usize) -> Message {
        let n = self.rng.index(max_calls + 1);
        let mut content = vec![Block::Text {
            text: "thinking aloud".into(),
        }];
        for _ in 0..n {
            self.calls += 1;
            content.push(Block::ToolCall {
                call_id: format!("call{}", self.calls),
                name: self.tool().into(),
                arguments: json!({"n": self.calls}),
            });
        }
        Message {
            role: Role::Assistant,
            content,
            usage: None,
            model: Some("m".into()),
            stop_reason: None,
        }
    }

    fn any_entry(&mut self) -> Option<EntryId> {
        let nodes = self.session.nodes();
        if nodes.is_empty() || self.rng.index(8) == 0 {
            return None;
        }
        Some(nodes[self.rng.index(nodes.len())].id.clone())
    }

    /// An unanswered call of the branch, if any.
    fn open_call(&mut self) -> Option<String> {
        let open = crate::journal::unanswered_calls(&self.session.context())
            .or_fail("the unanswered calls");
        if open.is_empty() {
            return None;
        }
        Some(open[self.rng.index(open.len())].call_id.clone())
    }

    fn step(&mut self) {
        let s = &self.session;
        let r: Result<(), AppendError> = match self.rng.index(14) {
            0 | 1 => s
                .append(EntryBody::Message(Message::text(Role::User, "do it")))
                .map(drop),
            // An assistant with calls, no operation records (`cairn append`).
            2 => {
                let m = self.assistant(3);
                self.session.append(EntryBody::Message(m)).map(drop)
            }
            // A result for an unanswered call, no operation records.
            3 => match self.open_call() {
                Some(c) => self.session.append(result(&c)).map(drop),
                None => Ok(()),
            },
            // A user message under an explicit parent (a new branch).
            4 => {
                let parent = self.any_entry();
                let body = EntryBody::Message(Message::text(Role::User, "elsewhere"));
                self.session
                    .append_entry(NewEntry {
                        id: None,
                        parent: parent.map_or(Parent::Root, Parent::Entry),
                        body,
                    })
                    .map(drop)
            }
            5 => {
                let target = self.any_entry();
                self.session.checkout(target.as_ref(), None).map(drop)
            }
            6 => self.fork(),
            7 => self.recover(),
            _ => self.operation_step(),
        };
        match r {
            Ok(()) | Err(AppendError::Invalid(_)) => {}
            Err(e) => panic!("a history step failed: {e}"),
        }
    }

    fn fork(&mut self) -> Result<(), AppendError> {
        let at = self.any_entry();
        match self.store.fork(&self.session, at.as_ref(), None) {
            Ok(f) => {
                if self.rng.index(2) == 0 {
                    self.session = f;
                }
                Ok(())
            }
            Err(crate::StoreError::Append(e)) => Err(e),
            Err(e) => panic!("fork: {e}"),
        }
    }

    fn recover(&mut self) -> Result<(), AppendError> {
        let mut runner = ScenarioRunner::default();
        let policy = policy_for(self.rng.next_u64());
        let with_runner = self.rng.index(2) == 0;
        let r = recover(
            &self.session,
            policy,
            with_runner.then_some(&mut runner as &mut dyn ToolRunner),
        );
        match r {
            Ok(_) => Ok(()),
            Err(RecoveryError::Append(e)) => Err(e),
            Err(e) => panic!("recovery by policy: {e}"),
        }
    }

    /// One step of the open operation (starting one if none is open): a
    /// model attempt with or without its reply, a dispatch with or without
    /// its result, an approval, a denial, the end.
    fn operation_step(&mut self) -> Result<(), AppendError> {
        let reply = self.assistant(3);
        let (pick, a, b) = (self.rng.index(8), self.rng.index(3), self.rng.index(3));
        let Some(op) = self.session.resume_operation() else {
            return self
                .session
                .start_operation(Message::text(Role::User, "task"))
                .map(drop);
        };
        let call = crate::journal::unanswered_calls(&self.session.context())
            .or_fail("the unanswered calls")
            .into_iter()
            .next();
        match (pick, call) {
            (0, _) => op.model_attempt(Some("p"), Some("m")).map(drop),
            (1 | 2, _) => {
                let t = op.model_attempt(Some("p"), Some("m"))?;
                op.record_assistant(t, reply).map(drop)
            }
            (3 | 4, Some(c)) => {
                let t = op.dispatch_tool(&c.call_id, effect_of(&c.tool))?;
                if a > 0 { record(&op, t) } else { Ok(()) }
            }
            (5, Some(c)) => {
                op.request_approval(&c.call_id, &c.tool)?;
                match a {
                    0 => Ok(()),
                    1 => {
                        op.resolve_approval(&c.call_id, false, Some("person"))?;
                        if b > 0 {
                            op.deny(&c.call_id, crate::recovery::DENIED_BY_PERSON)
                                .map(drop)
                        } else {
                            Ok(())
                        }
                    }
                    _ => op.resolve_approval(&c.call_id, true, Some("person")),
                }
            }
            (6, _) => op.finish(
                [Outcome::Completed, Outcome::Failed, Outcome::Aborted][a],
                None,
            ),
            _ => Ok(()),
        }
    }
}

fn record(op: &Operation<'_>, t: ToolTicket) -> Result<(), AppendError> {
    op.record_result(t, ToolOutput::text("done")).map(drop)
}

fn result(call_id: &str) -> EntryBody {
    EntryBody::Message(Message {
        role: Role::Tool,
        content: vec![Block::ToolResult {
            call_id: call_id.to_owned(),
            content: vec![Block::Text { text: "ok".into() }],
            is_error: false,
            code: None,
        }],
        usage: None,
        model: None,
        stop_reason: None,
    })
}
