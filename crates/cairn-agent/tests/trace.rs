//! `cairn agent --trace`: each exchange with the model server is recorded
//! as a log-only record beside the transcript. The must-show test: the
//! trace never reaches the context (nor the next request), and an API key
//! given in the environment never appears in the session file or its blobs,
//! even when the server echoes it back.

// Test helpers panic on a failed step; that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::{Command, Stdio};

use cairn::testkit::child::succeeded;
use cairn::{Access, Body, OpRecord, Store};
use cairn_agent::trace::{KIND, Traced};
use serde_json::json;
use support::{MockServer, Reply, finish, text};

const BIN: &str = env!("CARGO_BIN_EXE_cairn-agent");
const KEY: &str = "sk-live-SECRET-0123456789";

/// Every file under `dir`, read whole.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.push((p.display().to_string(), std::fs::read(&p).unwrap()));
        }
    }
    out
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn the_trace_never_reaches_the_context_and_an_environment_key_never_reaches_the_store() {
    let server = MockServer::start(vec![
        // A transient failure whose body echoes the key, then the reply.
        Reply::Json {
            status: 503,
            body: json!({"error": {"message": format!("overloaded (your key {KEY} is fine)")}}),
            headers: vec![
                ("Retry-After".into(), "0".into()),
                ("X-Request-Id".into(), "req-trace-marker".into()),
            ],
        },
        Reply::sse(vec![text("Hello from the server."), finish("stop")]),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let (home, work) = (dir.path().join("home"), dir.path().join("work"));
    std::fs::create_dir_all(&work).unwrap();
    succeeded(
        Command::new(BIN)
            .arg("--store")
            .arg(&home)
            .arg("--workdir")
            .arg(&work)
            .args([
                "--base-url",
                &server.url,
                "--model",
                "m",
                "--compact-at",
                "0",
            ])
            .args(["--trace", "--trace-body-limit", "300", "-p", "Say hello."])
            .env("CAIRN_API_KEY", KEY)
            .env_remove("OPENAI_API_KEY")
            .env_remove("CAIRN_AGENT_CHILD")
            .stdin(Stdio::null())
            .output()
            .unwrap(),
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        requests[0].head.contains(&format!("Bearer {KEY}")),
        "the key was sent: {}",
        requests[0].head
    );
    // The retry carries the same view: the first trace record did not reach it.
    assert_eq!(requests[0].body, requests[1].body);

    // Nowhere in the store: the session files, the blobs, the catalog.
    let stored = files(&home);
    assert!(
        stored.iter().any(|(p, _)| p.contains("/blobs/")),
        "a body over 300 bytes is a blob"
    );
    for (path, bytes) in &stored {
        assert!(!contains(bytes, KEY), "the key is in {path}");
    }

    let store = Store::open_dir(&home);
    let id = store.latest().unwrap();
    let session = store.open(&id, Access::Read).unwrap();
    let file = std::fs::read(session.location()).unwrap();
    assert!(contains(&file, "req-trace-marker") && contains(&file, "Bearer [redacted]"));
    let traced: Vec<Traced> = session
        .op_records()
        .into_iter()
        .filter(|(_, k)| k == KIND)
        .map(|(seq, _)| match session.record(seq).unwrap().body {
            Body::Op(OpRecord::Ignored(u)) => Traced::parse(&u.data).unwrap(),
            other => panic!("a trace record decodes as ignorable: {other:?}"),
        })
        .collect();
    assert_eq!(
        traced.len(),
        2,
        "one record per exchange, the retry included"
    );
    assert_eq!((traced[0].status, traced[0].retry), (Some(503), 0));
    assert!(traced[0].error.as_deref().unwrap().contains("[redacted]"));
    assert!(
        traced[0]
            .response_body
            .text
            .contains("your key [redacted] is fine")
    );
    assert_eq!(
        (traced[1].status, traced[1].retry, traced[1].attempt),
        (Some(200), 1, Some(2))
    );
    assert!(
        traced[1]
            .response_body
            .text
            .contains("Hello from the server.")
    );
    let cut = &traced[1].request_body;
    assert!(
        cut.blob.is_some() && cut.text.len() <= 300 && cut.bytes > 300,
        "{cut:?}"
    );

    // The context (what any model sees) holds the conversation and nothing else.
    let ctx = session.context();
    let messages: Vec<String> = ctx
        .messages()
        .iter()
        .map(|m| m.message().expect("read the message").plain_text())
        .collect();
    assert_eq!(messages, ["Say hello.", "Hello from the server."]);
    let context = serde_json::to_string(
        &ctx.messages()
            .iter()
            .map(|m| m.message().expect("read the message"))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    for absent in ["req-trace-marker", "[redacted]", KIND, "overloaded"] {
        assert!(!context.contains(absent), "{absent} reached the context");
    }
}
