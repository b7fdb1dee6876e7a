//! Resume through the agent never sends a provider a tool call without a
//! result: random histories (appends without operation records, checkouts,
//! forks, operations stopped at any record) are resumed by the agent, which
//! recovers through cairn's one loop and then continues; a second resume
//! does nothing. Plus the regression of `agent --resume` on a call with no
//! operation records.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};

use cairn::testkit::recovery::{assert_no_unanswered_call_reaches_a_provider, recovery_history};
use cairn::{Access, Block, EntryBody, Message, Role, Verdict};
use cairn_agent::OnUnknown;
use cairn_agent::prompt::Canned;
use cairn_agent::provider::{ChatRequest, Provider, ProviderError, Reply, StreamEvent};
use serde_json::json;
use support::Harness;

/// A provider that fails the test's check if a request holds a tool call
/// without a result, and answers with a plain reply.
#[derive(Default)]
struct Strict {
    requests: Mutex<Vec<Vec<Message>>>,
}

impl Provider for Strict {
    fn name(&self) -> &str {
        "strict"
    }

    fn model(&self) -> &str {
        "m"
    }

    fn stream(
        &self,
        request: &ChatRequest,
        _on_event: &mut dyn FnMut(StreamEvent) -> bool,
    ) -> Result<Reply, ProviderError> {
        self.requests.lock().unwrap().push(request.messages.clone());
        Ok(Reply {
            text: "All done.".into(),
            ..Reply::default()
        })
    }
}

/// An assistant entry asking for `read_file` (call `c1`), with no
/// operation records.
fn read_missing_file() -> EntryBody {
    EntryBody::Message(Message {
        role: Role::Assistant,
        content: vec![Block::ToolCall {
            call_id: "c1".into(),
            name: "read_file".into(),
            arguments: json!({"path": "missing.txt"}),
        }],
        usage: None,
        model: None,
        stop_reason: None,
    })
}

fn dangling(messages: &[Message]) -> Vec<String> {
    let mut open: Vec<String> = Vec::new();
    for m in messages {
        for b in &m.content {
            match b {
                Block::ToolCall { call_id, .. } => open.push(call_id.clone()),
                Block::ToolResult { call_id, .. } => open.retain(|c| c != call_id),
                _ => {}
            }
        }
    }
    open
}

#[test]
fn no_call_without_a_result_reaches_the_provider_after_agent_resume_at_any_cut() {
    for seed in 0..8u64 {
        let (id, lines) = recovery_history(seed * 0x2545_F491 + 5, 30);
        let n = lines.len();
        for k in [1, n / 4, n / 2, 3 * n / 4, n.saturating_sub(1), n] {
            if k == 0 {
                continue;
            }
            let what = format!("seed {seed}, cut at record {k} of {n}");
            let h = Harness::new();
            let file = h.home.join("sessions").join(format!("{id}.jsonl"));
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, lines[..k].concat()).unwrap();
            let s = h.store.open(&id, Access::Write).unwrap();
            let provider = Arc::new(Strict::default());
            let mut rt = h.runtime(provider.clone(), Canned::default());
            rt.config.on_unknown = OnUnknown::Mark;
            let mut agent = h.agent(s, rt);
            agent
                .resume()
                .unwrap_or_else(|e| panic!("{what}: resume failed: {e:#}"));
            assert_no_unanswered_call_reaches_a_provider(agent.session(), &what);
            for request in provider.requests.lock().unwrap().iter() {
                assert_eq!(dangling(request), Vec::<String>::new(), "{what}");
            }
            let len = agent.session().len();
            let again = agent.resume().unwrap();
            assert!(again.actions.is_empty(), "{what}: {again:?}");
            assert_eq!(agent.session().len(), len, "{what}: a second resume wrote");
        }
    }
}

#[test]
fn regression_agent_resume_sent_a_tool_call_appended_without_operation_records() {
    let h = Harness::new();
    let s = h.new_session();
    s.append(EntryBody::Message(Message::text(Role::User, "read it")))
        .unwrap();
    s.append(read_missing_file()).unwrap();
    assert!(matches!(
        s.verdict().expect("the verdict"),
        Verdict::ToolsNotStarted { op: None, .. }
    ));
    let provider = Arc::new(Strict::default());
    let rt = h.runtime(provider.clone(), Canned::default());
    let mut agent = h.agent(s, rt);
    let resumed = agent.resume().unwrap();
    assert!(!resumed.actions.is_empty(), "{resumed:?}");
    assert_no_unanswered_call_reaches_a_provider(agent.session(), "after resume");
    // The next prompt reaches the provider with the call answered.
    agent.prompt("and now?").unwrap();
    let requests = provider.requests.lock().unwrap();
    assert!(!requests.is_empty());
    for r in requests.iter() {
        assert_eq!(dangling(r), Vec::<String>::new());
    }
}

#[test]
fn a_prompt_after_a_call_with_no_operation_records_recovers_first() {
    let h = Harness::new();
    let s = h.new_session();
    s.append(read_missing_file()).unwrap();
    let provider = Arc::new(Strict::default());
    let rt = h.runtime(provider.clone(), Canned::default());
    let mut agent = h.agent(s, rt);
    agent.prompt("go on").unwrap();
    let requests = provider.requests.lock().unwrap();
    assert!(!requests.is_empty());
    for r in requests.iter() {
        assert_eq!(dangling(r), Vec::<String>::new());
    }
}

/// The user messages of the session's branch, in order.
fn user_texts(session: &cairn::Session) -> Vec<String> {
    let ctx = session.context();
    ctx.messages()
        .iter()
        .map(|m| m.message().unwrap())
        .filter(|m| m.role == Role::User)
        .map(|m| m.plain_text())
        .collect()
}

#[test]
fn regression_input_queued_before_a_crash_was_never_delivered_after_it() {
    let h = Harness::new();
    let s = h.new_session();
    let id = s.id().clone();
    // A host's operation took input "first", then queued two more while
    // it ran, and its process died with the operation open.
    let op = s
        .start_operation(Message::text(Role::User, "first"))
        .unwrap();
    op.queue_input("then A").unwrap();
    op.queue_input("then B").unwrap();
    drop(op);
    drop(s);
    let script = json!({"turns": [{"replies": [{"text": "Noted."}]}]});
    let rt = h.runtime(Harness::scripted(script), Canned::default());
    let mut agent = h.agent(h.store.open(&id, Access::Write).unwrap(), rt);
    assert_eq!(
        cairn_agent::resumed::undelivered(agent.session()).unwrap(),
        ["then A", "then B"]
    );
    agent.resume().unwrap();
    let ends = agent.deliver_queued().unwrap();
    assert_eq!(ends.len(), 2);
    assert_eq!(user_texts(agent.session()), ["first", "then A", "then B"]);
    // Delivered once: nothing waits any more.
    assert!(
        cairn_agent::resumed::undelivered(agent.session())
            .unwrap()
            .is_empty()
    );
    assert!(agent.deliver_queued().unwrap().is_empty());
}
