//! Trace records (`cairn agent --trace`) in the CLI: `cairn log` gives each
//! one line, `cairn log --trace` the whole exchange, the HTML export a
//! collapsed section; the context never shows them.

// Test helpers panic on a failed step; that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use cairn::testkit::build::user;
use cairn::{EntryBody, NewSession};
use cairn_agent::provider::{Exchange, Purpose};
use cairn_agent::trace::{Request, TraceConfig, record};
use support::Home;

fn traced_session(home: &Home) -> String {
    let store = home.store();
    let s = store.create(NewSession::default()).unwrap();
    s.append(user("Say hello.")).unwrap();
    let exchange = Exchange {
        method: "POST".into(),
        url: "https://llm.example/v1/chat/completions".into(),
        request_headers: vec![("Authorization".into(), "Bearer [redacted]".into())],
        request_body: format!("{{\"messages\":\"{}\"}}", "x".repeat(500)).into_bytes(),
        status: Some(200),
        response_headers: vec![("X-Request-Id".into(), "req-42".into())],
        response_body: b"data: {\"choices\":[]}\n\ndata: [DONE]\n".to_vec(),
        headers_ms: Some(120),
        duration_ms: 340,
    };
    let request = Request {
        op: None,
        purpose: Purpose::Turn,
        attempt: Some(1),
        entry: None,
        retry: 0,
    };
    let blobs = home.path().join("blobs");
    record(
        &s,
        TraceConfig { body_limit: 64 },
        &blobs,
        request,
        &exchange,
        None,
    )
    .unwrap();
    s.append(EntryBody::Message(cairn::Message::text(
        cairn::Role::Assistant,
        "Hello.",
    )))
    .unwrap();
    s.id().to_string()
}

#[test]
fn log_shows_a_trace_record_in_one_line_and_whole_with_trace() {
    let home = Home::new();
    let id = traced_session(&home);
    let out = home.cairn().args(["log", &id]).output().unwrap();
    let text = support::stdout(&out);
    assert!(
        text.contains("agent.trace (ignorable)  POST https://llm.example/v1/chat/completions → 200 in 340 ms (turn, attempt 1)"),
        "{text}"
    );
    assert!(
        !text.contains("req-42"),
        "bodies and headers only with --trace: {text}"
    );
    let out = home.cairn().args(["log", &id, "--trace"]).output().unwrap();
    let text = support::stdout(&out);
    for shown in [
        "response headers after 120 ms",
        "Authorization: Bearer [redacted]",
        "X-Request-Id: req-42",
        "| data: [DONE]",
        "cut at 64 of 515 bytes; the whole body is cairn-blob:sha256:",
    ] {
        assert!(text.contains(shown), "{shown:?} in {text}");
    }
}

#[test]
fn the_html_export_shows_the_trace_and_the_context_does_not() {
    let home = Home::new();
    let id = traced_session(&home);
    let out = home
        .cairn()
        .args(["export", &id, "-f", "html"])
        .output()
        .unwrap();
    let html = support::stdout(&out);
    assert!(html.contains("<section id=\"trace\">"), "{html}");
    assert!(html.contains("X-Request-Id: req-42"), "{html}");
    let ctx = home.json(&["context", &id, "--json"]);
    assert_eq!(ctx["messages"].as_array().unwrap().len(), 2);
    assert!(!ctx.to_string().contains("req-42"));
    let steps = home.json(&["steps", &id, "--json"]);
    assert_eq!(steps.as_array().unwrap().len(), 2, "a trace is not a step");
}
