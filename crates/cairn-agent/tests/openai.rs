//! The OpenAI-compatible provider against an in-process mock server that
//! speaks the Chat Completions streaming protocol (loopback only, bounded).

// Test helpers panic on a failed step; that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use cairn::{Body, OpRecord, Outcome, Role, Usage};
use cairn_agent::prompt::Canned;
use cairn_agent::provider::openai::{OpenAiConfig, OpenAiProvider};
use cairn_agent::provider::{ChatRequest, Provider, ProviderError, Purpose, StreamEvent, ToolSpec};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use support::{Harness, MockServer, Reply, call, finish, text, usage};

fn provider(server: &MockServer) -> OpenAiProvider {
    let mut c = OpenAiConfig::new(server.url.clone(), "mock-model");
    c.api_key = Some("test-key".into());
    c.read_timeout = Duration::from_millis(800);
    c.connect_timeout = Duration::from_secs(2);
    OpenAiProvider::new(c).unwrap()
}

fn request() -> ChatRequest {
    ChatRequest {
        messages: vec![
            cairn::Message::text(Role::System, "be brief"),
            cairn::Message::text(Role::User, "read a.txt"),
        ],
        tools: vec![ToolSpec {
            name: "read_file".into(),
            description: "read".into(),
            parameters: json!({"type": "object"}),
        }],
        purpose: Purpose::Turn,
        reply_id: Some("e1".into()),
    }
}

fn finished_error(session: &cairn::Session) -> Option<(Outcome, Option<String>)> {
    session.op_records().into_iter().rev().find_map(|(seq, _)| {
        match session.record(seq).ok()?.body {
            Body::Op(OpRecord::OpFinished(f)) => Some((f.outcome, f.error)),
            _ => None,
        }
    })
}

#[test]
fn text_and_tool_call_deltas_split_across_chunks_are_assembled_with_usage() {
    let server = MockServer::start(vec![Reply::sse(vec![
        text("Let me "),
        text("look."),
        call(0, Some("c1"), Some("read_file"), "{\"pa"),
        call(0, None, None, "th\": \"a.t"),
        call(0, None, None, "xt\"}"),
        finish("tool_calls"),
        usage(20, 7),
    ])]);
    let p = provider(&server);
    let mut events = Vec::new();
    let reply = p
        .stream(&request(), &mut |e| {
            events.push(e);
            true
        })
        .unwrap();
    assert_eq!(reply.text, "Let me look.");
    assert_eq!(reply.tool_calls.len(), 1);
    assert_eq!(reply.tool_calls[0].id, "c1");
    assert_eq!(reply.tool_calls[0].arguments, json!({"path": "a.txt"}));
    assert_eq!(
        reply.usage,
        Some(Usage {
            input: 20,
            output: 7,
            cached: 0,
            cost: None
        })
    );
    assert_eq!(reply.stop_reason.as_deref(), Some("tool_use"));
    assert_eq!(reply.model.as_deref(), Some("mock-model"));
    assert_eq!(
        events,
        vec![
            StreamEvent::Text("Let me ".into()),
            StreamEvent::Text("look.".into()),
            StreamEvent::ToolCall {
                name: "read_file".into()
            }
        ]
    );
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    let head = reqs[0].head.to_ascii_lowercase();
    assert!(head.starts_with("post /v1/chat/completions"), "{head}");
    assert!(head.contains("authorization: bearer test-key"), "{head}");
    let body = &reqs[0].body;
    assert_eq!(body["model"], "mock-model");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert_eq!(body["tools"][0]["function"]["name"], "read_file");
    assert_eq!(
        body["messages"][1],
        json!({"role": "user", "content": "read a.txt"})
    );
}

#[test]
fn the_agent_loop_runs_tools_and_sends_their_results_back() {
    let h = Harness::new();
    std::fs::write(h.work.join("a.txt"), "alpha\nbeta\n").unwrap();
    let server = MockServer::start(vec![
        Reply::sse(vec![
            text("Reading."),
            call(0, Some("c1"), Some("read_file"), "{\"path\":\"a.txt\"}"),
            finish("tool_calls"),
            usage(30, 9),
        ]),
        Reply::sse(vec![
            text("It says alpha"),
            text(" and beta."),
            finish("stop"),
            usage(60, 5),
        ]),
    ]);
    let p: Arc<dyn Provider> = Arc::new(provider(&server));
    let mut agent = h.agent(h.new_session(), h.runtime(p, Canned::default()));
    let end = agent.prompt("what is in a.txt?").unwrap();
    assert_eq!(end.outcome, Outcome::Completed);
    let s = agent.session();
    support::every_call_answered(s).unwrap();
    let (is_error, _, out) = support::result_of(s, "c1").unwrap();
    assert!(!is_error);
    assert!(out.contains("alpha"), "{out}");
    let last = support::last_assistant(s).unwrap();
    assert_eq!(last.plain_text(), "It says alpha and beta.");
    assert_eq!(
        last.usage,
        Some(Usage {
            input: 60,
            output: 5,
            cached: 0,
            cost: None
        })
    );
    assert_eq!(last.stop_reason.as_deref(), Some("end_turn"));
    let kinds = support::op_kinds(s);
    assert_eq!(
        kinds,
        [
            "op_started",
            "model_attempted",
            "usage_settled",
            "tool_dispatched",
            "model_attempted",
            "usage_settled",
            "op_finished"
        ]
    );
    let reqs = server.requests();
    let msgs = reqs[1].body["messages"].as_array().unwrap();
    let tool_msg = msgs.iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(tool_msg["tool_call_id"], "c1");
    let asked = msgs.iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(
        asked["tool_calls"][0]["function"]["arguments"],
        "{\"path\":\"a.txt\"}"
    );
}

#[test]
fn a_rate_limit_is_retried_after_the_servers_delay() {
    let h = Harness::new();
    let server = MockServer::start(vec![
        Reply::Json {
            status: 429,
            body: json!({"error": {"message": "slow down"}}),
            headers: vec![("Retry-After".into(), "0".into())],
        },
        Reply::Json {
            status: 503,
            body: json!({"error": {"message": "busy"}}),
            headers: vec![],
        },
        Reply::sse(vec![text("ok"), finish("stop")]),
    ]);
    let p: Arc<dyn Provider> = Arc::new(provider(&server));
    let mut agent = h.agent(h.new_session(), h.runtime(p, Canned::default()));
    let end = agent.prompt("hi").unwrap();
    assert_eq!(end.outcome, Outcome::Completed);
    let retries = h.recorder.starting_with("retry");
    assert_eq!(retries.len(), 2, "{retries:?}");
    assert!(
        retries[0].contains("429") && retries[0].contains("slow down"),
        "{retries:?}"
    );
    let attempts = support::op_kinds(agent.session())
        .iter()
        .filter(|k| *k == "model_attempted")
        .count();
    assert_eq!(attempts, 3, "each try is a recorded model attempt");
    assert_eq!(support::last_text(agent.session()), "ok");
}

#[test]
fn a_connection_dropped_mid_stream_is_retried_and_the_partial_reply_discarded() {
    let h = Harness::new();
    let server = MockServer::start(vec![
        Reply::Sse {
            events: vec![text("Hel"), text("lo wor"), text("ld")],
            done: true,
            cut_after: Some(2),
            chunked: false,
        },
        Reply::Sse {
            events: vec![text("Hel"), text("lo")],
            done: false,
            cut_after: Some(1),
            chunked: true,
        },
        Reply::sse(vec![text("Hello "), text("world"), finish("stop")]),
    ]);
    let p: Arc<dyn Provider> = Arc::new(provider(&server));
    let mut agent = h.agent(h.new_session(), h.runtime(p, Canned::default()));
    let end = agent.prompt("greet").unwrap();
    assert_eq!(end.outcome, Outcome::Completed);
    let retries = h.recorder.starting_with("retry");
    assert_eq!(retries.len(), 2, "{retries:?}");
    assert!(retries[0].contains("incomplete"), "{retries:?}");
    assert_eq!(support::last_text(agent.session()), "Hello world");
}

#[test]
fn a_client_error_fails_the_operation_and_is_recorded() {
    let h = Harness::new();
    let server = MockServer::start(vec![Reply::Json {
        status: 404,
        body: json!({"error": {"message": "The model `nope` does not exist"}}),
        headers: vec![],
    }]);
    let p: Arc<dyn Provider> = Arc::new(provider(&server));
    let mut agent = h.agent(h.new_session(), h.runtime(p, Canned::default()));
    let end = agent.prompt("hi").unwrap();
    assert_eq!(end.outcome, Outcome::Failed);
    let (outcome, error) = finished_error(agent.session()).unwrap();
    assert_eq!(outcome, Outcome::Failed);
    let error = error.unwrap();
    assert!(
        error.contains("HTTP 404")
            && error.contains("does not exist")
            && error.contains("--base-url"),
        "{error}"
    );
    assert_eq!(server.requests().len(), 1, "a 404 is not retried");
    assert_eq!(agent.session().status(), cairn::Status::Failed);
}

#[test]
fn malformed_and_error_events_are_recorded_never_a_panic() {
    let h = Harness::new();
    let server = MockServer::start(vec![
        Reply::sse(vec![
            text("fine so far"),
            Value::String("{\"choices\": [oops".into()),
        ]),
        Reply::sse(vec![
            json!({"error": {"message": "the server is overloaded", "type": "server_error"}}),
        ]),
    ]);
    let p: Arc<dyn Provider> = Arc::new(provider(&server));
    let mut agent = h.agent(h.new_session(), h.runtime(p, Canned::default()));
    let end = agent.prompt("one").unwrap();
    assert_eq!(end.outcome, Outcome::Failed);
    assert!(
        end.error.as_deref().unwrap().contains("malformed response"),
        "{end:?}"
    );
    let end = agent.prompt("two").unwrap();
    assert_eq!(end.outcome, Outcome::Failed);
    assert!(
        end.error.as_deref().unwrap().contains("overloaded"),
        "{end:?}"
    );
    assert_eq!(finished_error(agent.session()).unwrap().0, Outcome::Failed);
}

#[test]
fn a_hang_up_and_a_silent_server_are_transient_errors() {
    let server = MockServer::start(vec![
        Reply::Hangup,
        Reply::Stall(Duration::from_millis(1500)),
    ]);
    let p = provider(&server);
    let e = p.stream(&request(), &mut |_| true).unwrap_err();
    assert!(e.is_transient(), "{e}");
    let e = p.stream(&request(), &mut |_| true).unwrap_err();
    assert!(
        matches!(e, ProviderError::Timeout(_)),
        "the read timeout applies: {e:?}"
    );
}

#[test]
fn a_refused_connection_is_a_connection_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut c = OpenAiConfig::new(format!("http://127.0.0.1:{port}/v1"), "m");
    c.api_key = None;
    let e = OpenAiProvider::new(c)
        .unwrap()
        .stream(&request(), &mut |_| true)
        .unwrap_err();
    assert!(matches!(e, ProviderError::Connection(_)), "{e:?}");
}

#[test]
fn call_ids_a_server_repeats_are_made_unique() {
    let h = Harness::new();
    let turn = || {
        Reply::sse(vec![
            call(0, Some("call_0"), Some("list_dir"), "{}"),
            call(1, Some("call_0"), Some("list_dir"), "{}"),
            finish("tool_calls"),
        ])
    };
    let server = MockServer::start(vec![
        turn(),
        turn(),
        Reply::sse(vec![text("done"), finish("stop")]),
    ]);
    let p: Arc<dyn Provider> = Arc::new(provider(&server));
    let mut agent = h.agent(h.new_session(), h.runtime(p, Canned::default()));
    assert_eq!(
        agent.prompt("list twice").unwrap().outcome,
        Outcome::Completed
    );
    let s = agent.session();
    support::every_call_answered(s).unwrap();
    let ids = support::call_ids(s);
    assert_eq!(ids.len(), 4);
    assert_eq!(ids[0], "call_0");
    let unique: std::collections::HashSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), 4, "{ids:?}");
    let last = &server.requests()[2].body["messages"];
    let sent: Vec<&str> = last
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["tool_call_id"].as_str())
        .collect();
    assert_eq!(sent, ids.iter().map(String::as_str).collect::<Vec<_>>());
}
