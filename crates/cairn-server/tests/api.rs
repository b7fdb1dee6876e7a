//! The API over real HTTP on loopback: every endpoint, and every error it
//! answers (a JSON body with a code, a message, a hint and the request id).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use axum::Router;
use axum::routing::get;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use support::{Srv, options, user, user_message};

/// Asserts an error answer: status, code, and a body that names the
/// request and says what to do.
#[track_caller]
fn refused(answer: (u16, Value), status: u16, code: &str) -> Value {
    let (st, v) = answer;
    assert_eq!(st, status, "{v}");
    let e = &v["error"];
    assert_eq!(e["code"], json!(code), "{v}");
    assert!(!e["message"].as_str().unwrap().is_empty(), "{v}");
    assert!(!e["hint"].as_str().unwrap().is_empty(), "{v}");
    assert!(e["request_id"].as_str().unwrap().starts_with("req-"), "{v}");
    v
}

#[test]
fn every_request_needs_the_token() {
    let srv = Srv::start();
    for path in [
        "/sessions",
        "/openapi.json",
        "/streams/sessions",
        "/sessions/x/stream",
    ] {
        let r = srv.agent().get(&srv.url(path)).call().unwrap();
        let allow = r.headers().get("www-authenticate").cloned();
        refused(support::answer(r), 401, "unauthorized");
        assert_eq!(allow.unwrap(), "Bearer realm=\"cairn\"");
        let r = srv
            .agent()
            .get(&srv.url(path))
            .header("Authorization", "Bearer wrong-token-of-some-length")
            .call()
            .unwrap();
        refused(support::answer(r), 401, "unauthorized");
    }
}

#[test]
fn a_generated_token_is_kept_private_and_reused() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || options();
    let first = Srv::start_at(dir.path(), opts(), Router::new());
    let token = first.token.clone();
    drop(first);
    let file = dir.path().join(cairn_server::TOKEN_FILE);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), token);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let second = Srv::start_at(dir.path(), opts(), Router::new());
    assert_eq!(second.token, token);
    assert_eq!(second.get("/sessions").0, 200);
}

#[test]
fn a_given_token_must_be_long_enough() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let err = rt
        .block_on(cairn_server::Server::bind(
            cairn::Store::open_dir(dir.path()),
            dir.path(),
            cairn_server::Options {
                token: Some("short".into()),
                ..options()
            },
        ))
        .unwrap_err();
    assert!(err.to_string().contains("at least 16"), "{err}");
}

#[test]
fn sessions_are_created_listed_filtered_paged_and_shown() {
    let srv = Srv::start();
    let a = srv.new_session("alpha plans");
    let b = srv.new_session("beta");
    srv.append(&b, json!([user("find the Alpha bug")]));
    let (st, v) = srv.get("/sessions");
    assert_eq!(st, 200);
    assert_eq!(v["total"], json!(2));
    assert_eq!(
        support::fields(&v["sessions"], "id"),
        [b.as_str(), a.as_str()],
        "newest first"
    );
    // Title search also matches the first message, case-insensitively.
    let (_, v) = srv.get("/sessions?title=ALPHA");
    assert_eq!(v["total"], json!(2));
    let (_, v) = srv.get("/sessions?title=plans");
    assert_eq!(v["sessions"][0]["id"], json!(a));
    let (_, v) = srv.get("/sessions?status=init&limit=1&offset=1");
    assert_eq!(v["total"], json!(2));
    assert_eq!(v["sessions"].as_array().unwrap().len(), 1);
    assert_eq!(v["sessions"][0]["id"], json!(a));
    let (_, v) = srv.get("/sessions?status=failed");
    assert_eq!(v["total"], json!(0));
    let updated = srv.get(&format!("/sessions/{a}")).1["updated"].clone();
    let (_, v) = srv.get(&format!(
        "/sessions?updated_after={}",
        updated.as_str().unwrap()
    ));
    assert_eq!(v["sessions"][0]["id"], json!(b));
    // A unique prefix names a session.
    let (st, v) = srv.get(&format!("/sessions/{}", &a[..20]));
    assert_eq!(st, 200);
    assert_eq!(v["title"], json!("alpha plans"));
    assert_eq!(v["status"], json!("init"));
    assert_eq!(v["records"], json!(1));

    refused(srv.get("/sessions?status=bogus"), 400, "bad_request");
    refused(srv.get("/sessions?limit=0"), 400, "bad_request");
    refused(srv.get("/sessions?limit=x"), 400, "bad_request");
    refused(srv.get("/sessions?colour=red"), 400, "bad_request");
    refused(
        srv.get("/sessions/0000000000000000000000000Z"),
        404,
        "not_found",
    );
    refused(srv.get("/sessions/not-an-id!"), 400, "bad_request");
    refused(
        srv.post("/sessions", &json!({"app_state": [1]})),
        400,
        "bad_request",
    );
}

#[test]
fn a_session_is_deleted_only_when_confirmed_and_no_operation_is_open() {
    let srv = Srv::start();
    let id = srv.new_session("doomed");
    refused(srv.delete(&format!("/sessions/{id}")), 400, "bad_request");
    refused(
        srv.delete(&format!("/sessions/{id}?confirm={}", &id[..10])),
        400,
        "bad_request",
    );
    let (st, v) = srv.post(
        &format!("/sessions/{id}/operations"),
        &json!({"input": user_message("go")}),
    );
    assert_eq!(st, 201, "{v}");
    refused(
        srv.delete(&format!("/sessions/{id}?confirm={id}")),
        409,
        "operation_open",
    );
    let op = v["op"].as_str().unwrap();
    srv.post(
        &format!("/sessions/{id}/operations/{op}/finish"),
        &json!({"outcome": "aborted"}),
    );
    let (st, _) = srv.delete(&format!("/sessions/{id}?confirm={id}"));
    assert_eq!(st, 204);
    refused(srv.get(&format!("/sessions/{id}")), 404, "not_found");
}

#[test]
fn a_batch_is_acknowledged_record_by_record_and_a_stale_expected_seq_is_refused() {
    let srv = Srv::start();
    let id = srv.new_session("batch");
    let path = format!("/sessions/{id}/records");
    let (st, v) = srv.post(
        &path,
        &json!({"records": [
                    {"kind": "message", "id": "one1", "data": user("one")["data"]},
                    user("two"),
                    {"kind": "label", "data": {"name": "here", "target": "one1"}}],
                "expected_seq": 1, "durability": "group"}),
    );
    assert_eq!(st, 200, "{v}");
    let acks = v["appended"].as_array().unwrap();
    assert_eq!(acks.len(), 3);
    assert_eq!(acks[0]["seq"], json!(1));
    assert_eq!(acks[2]["seq"], json!(3));
    assert_eq!(acks[0]["id"], json!("one1"));
    assert!(acks[1]["id"].is_string());
    assert_eq!(v["next_seq"], json!(4));
    for d in ["sync", "buffered"] {
        let (st, _) = srv.post(&path, &json!({"records": [user(d)], "durability": d}));
        assert_eq!(st, 200);
    }
    // Someone else appended since seq 4 was next: refused, nothing written.
    let v = refused(
        srv.post(
            &path,
            &json!({"records": [user("late")], "expected_seq": 4}),
        ),
        409,
        "seq_mismatch",
    );
    assert!(v["error"]["message"].as_str().unwrap().contains("it is 6"));
    assert_eq!(srv.get(&format!("/sessions/{id}")).1["records"], json!(6));
    // An explicit parent, by label.
    let (st, v) = srv.post(
        &path,
        &json!({"records": [{"kind": "message", "parent": "here", "data": user("branch")["data"]}]}),
    );
    assert_eq!(st, 200, "{v}");
}

#[test]
fn a_refused_record_keeps_the_ones_before_it_and_says_which_it_was() {
    let srv = Srv::start();
    let id = srv.new_session("partial");
    let v = refused(
        srv.post(
            &format!("/sessions/{id}/records"),
            &json!({"records": [user("kept"), {"kind": "message", "parent": "nope", "data": user("x")["data"]}]}),
        ),
        422,
        "unknown_entry",
    );
    let detail = &v["error"]["detail"];
    assert_eq!(detail["failed_index"], json!(1));
    assert_eq!(detail["appended"][0]["seq"], json!(1));
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("record 1:")
    );
    // An invariant the library checks: a tool result answering no call.
    let v = refused(
        srv.append(
            &id,
            json!([{"kind": "message", "data": {"role": "tool", "content": [
                {"type": "tool_result", "call_id": "c9", "content": [{"type": "text", "text": "?"}]}]}}]),
        ),
        422,
        "invalid_record",
    );
    assert_eq!(v["error"]["detail"]["appended"], json!([]));
    assert_eq!(srv.get(&format!("/sessions/{id}")).1["records"], json!(2));
}

#[test]
fn malformed_requests_get_json_errors_with_hints() {
    let srv = Srv::start();
    let id = srv.new_session("errors");
    let path = format!("/sessions/{id}/records");
    refused(
        srv.post_raw(&path, "application/json", "{not json"),
        400,
        "invalid_json",
    );
    refused(
        srv.post_raw(&path, "text/plain", "{}"),
        415,
        "unsupported_media_type",
    );
    refused(
        srv.post(&path, &json!({"records": [], "extra": 1})),
        400,
        "invalid_json",
    );
    refused(srv.post(&path, &json!({"records": []})), 400, "bad_request");
    refused(
        srv.post(
            &path,
            &json!({"records": [user("x")], "durability": "eventually"}),
        ),
        400,
        "bad_request",
    );
    refused(
        srv.post(&path, &json!({"records": [{"kind": "nope", "data": {}}]})),
        400,
        "bad_record",
    );
    refused(
        srv.post(&path, &json!({"records": [{"kind": "header", "data": {}}]})),
        400,
        "bad_record",
    );
    // Regression: serde reads a struct from an array of its fields, so
    // `[null, null]` was taken as a checkout to the root.
    refused(
        srv.post_raw(
            &format!("/sessions/{id}/checkout"),
            "application/json",
            "[null, null]",
        ),
        400,
        "invalid_json",
    );
    refused(
        srv.post_raw(&format!("/sessions/{id}/copy"), "application/json", "[]"),
        400,
        "invalid_json",
    );
    refused(srv.get("/no/such/path"), 404, "not_found");
    let r = srv
        .agent()
        .put(&srv.url("/sessions"))
        .header("Authorization", &format!("Bearer {}", srv.token))
        .send("")
        .unwrap();
    refused(support::answer(r), 405, "method_not_allowed");
}

#[test]
fn an_oversized_body_is_refused_with_413() {
    let dir = tempfile::tempdir().unwrap();
    let opts = cairn_server::Options {
        max_body: 1024,
        ..options()
    };
    let srv = Srv::start_at(dir.path(), opts, Router::new());
    let id = srv.new_session("small");
    let big = "x".repeat(4096);
    refused(srv.append(&id, json!([user(&big)])), 413, "too_large");
    let (st, _) = srv.append(&id, json!([user("fits")]));
    assert_eq!(st, 200);
}

#[test]
fn history_reads_the_log_by_seq_range_in_pages() {
    let srv = Srv::start();
    let id = srv.new_session("log");
    let recs: Vec<Value> = (0..5).map(|i| user(&format!("m{i}"))).collect();
    srv.append(&id, Value::Array(recs));
    let (st, v) = srv.get(&format!("/sessions/{id}/history"));
    assert_eq!(st, 200);
    assert_eq!(v["records"].as_array().unwrap().len(), 6);
    assert_eq!(v["records"][0]["kind"], json!("header"));
    assert!(v["records"][1].get("crc").is_none());
    assert_eq!(v["next"], Value::Null);
    let (_, v) = srv.get(&format!("/sessions/{id}/history?from=2&to=4&limit=2"));
    let seqs: Vec<u64> = v["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [2, 3]);
    assert_eq!(v["next"], json!(4));
    let (_, v) = srv.get(&format!("/sessions/{id}/history?from=4&to=4"));
    assert_eq!(v["records"][0]["data"]["content"][0]["text"], json!("m3"));
    let (_, v) = srv.get(&format!("/sessions/{id}/history?from=99"));
    assert_eq!(v["records"], json!([]));
    refused(
        srv.get(&format!("/sessions/{id}/history?limit=0")),
        400,
        "bad_request",
    );
    refused(
        srv.get(&format!("/sessions/{id}/history?from=-1")),
        400,
        "bad_request",
    );
}

#[test]
fn context_and_state_are_shown_as_of_any_entry() {
    let srv = Srv::start();
    let id = srv.new_session("views");
    let (_, v) = srv.append(
        &id,
        json!([
            user("first"),
            {"kind": "app_state", "data": {"set": {"mode": "plan"}}},
            user("second"),
            {"kind": "app_state", "data": {"patch": {"mode": "build"}}},
        ]),
    );
    let first = v["appended"][0]["id"].as_str().unwrap().to_owned();
    let plan = v["appended"][1]["id"].as_str().unwrap().to_owned();
    let (_, now) = srv.get(&format!("/sessions/{id}/context"));
    assert_eq!(now["messages"].as_array().unwrap().len(), 2);
    assert_eq!(now["app_state"], json!({"mode": "build"}));
    let (_, then) = srv.get(&format!("/sessions/{id}/context?at={plan}"));
    assert_eq!(then["leaf"], json!(plan));
    assert_eq!(then["messages"].as_array().unwrap().len(), 1);
    assert_eq!(then["app_state"], json!({"mode": "plan"}));
    let (_, st) = srv.get(&format!("/sessions/{id}/state?at={first}"));
    assert_eq!(st["app_state"], json!({}));
    assert_eq!(st["at"], json!(first));
    let (_, st) = srv.get(&format!("/sessions/{id}/state"));
    assert_eq!(st["app_state"], json!({"mode": "build"}));
    refused(
        srv.get(&format!("/sessions/{id}/context?at=zzzz")),
        422,
        "unknown_entry",
    );
}

#[test]
fn tree_steps_memory_and_verdict_are_served() {
    let srv = Srv::start();
    let id = srv.new_session("derived");
    srv.append(&id, json!([user("goal: make it fast")]));
    let (st, t) = srv.get(&format!("/sessions/{id}/tree"));
    assert_eq!(st, 200);
    assert_eq!(t["nodes"].as_array().unwrap().len(), 1);
    assert_eq!(t["nodes"][0]["summary"], json!("user goal: make it fast"));
    assert_eq!(t["leaf"], t["nodes"][0]["id"]);
    let (st, s) = srv.get(&format!("/sessions/{id}/steps"));
    assert_eq!(st, 200);
    // A user message is a step even without operation records.
    assert_eq!(support::fields(&s["steps"], "kind"), ["input"]);
    assert_eq!(s["steps"][0]["name"], json!("goal: make it fast"));
    assert_eq!(s["steps"][0]["entry"], t["nodes"][0]["id"]);
    let (st, m) = srv.get(&format!("/sessions/{id}/memory"));
    assert_eq!(st, 200);
    assert!(m["text"].as_str().unwrap().starts_with("Session memory"));
    let (st, v) = srv.get(&format!("/sessions/{id}/verdict"));
    assert_eq!(st, 200);
    assert_eq!(v["verdict"]["verdict"], json!("ready"));
    assert_eq!(v["status"], json!("init"));
    assert!(v["action"].as_str().unwrap().contains("continue"));
}

#[test]
fn checkout_copy_and_labels_change_the_tree() {
    let srv = Srv::start();
    let id = srv.new_session("actions");
    let (_, v) = srv.append(&id, json!([user("a"), user("b")]));
    let a = v["appended"][0]["id"].as_str().unwrap().to_owned();
    let b = v["appended"][1]["id"].as_str().unwrap().to_owned();
    let (st, v) = srv.post(
        &format!("/sessions/{id}/checkout"),
        &json!({"target": a, "summary": "tried b"}),
    );
    assert_eq!(st, 200, "{v}");
    let checkout = v["leaf"].as_str().unwrap().to_owned();
    assert_ne!(checkout, b);
    let (_, ctx) = srv.get(&format!("/sessions/{id}/context"));
    assert_eq!(
        ctx["messages"].as_array().unwrap().len(),
        2,
        "a and the checkout summary"
    );
    let (st, v) = srv.post(
        &format!("/sessions/{id}/labels"),
        &json!({"name": "good", "target": b}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["labels"]["good"], json!(b));
    let (st, v) = srv.post(
        &format!("/sessions/{id}/labels"),
        &json!({"name": "good", "target": null}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["labels"], json!({}));
    let (st, fork) = srv.post(
        &format!("/sessions/{id}/copy"),
        &json!({"at": b, "title": "copy"}),
    );
    assert_eq!(st, 201, "{fork}");
    assert_eq!(fork["forked_from"]["session"], json!(id));
    assert_eq!(fork["leaf"], json!(b));
    assert_eq!(fork["title"], json!("copy"));
    refused(
        srv.post(
            &format!("/sessions/{id}/checkout"),
            &json!({"target": "nope"}),
        ),
        422,
        "unknown_entry",
    );
    refused(
        srv.post(
            &format!("/sessions/{id}/labels"),
            &json!({"name": "x", "target": "nope"}),
        ),
        422,
        "unknown_entry",
    );
    refused(
        srv.post(&format!("/sessions/{id}/copy"), &json!({"at": "nope"})),
        422,
        "unknown_entry",
    );
}

#[test]
fn an_operation_runs_end_to_end_over_http_with_the_librarys_guarantees() {
    let srv = Srv::start();
    let id = srv.new_session("operation");
    let base = format!("/sessions/{id}/operations");
    let (st, v) = srv.post(&base, &json!({"input": user_message("list files")}));
    assert_eq!(st, 201, "{v}");
    let op = v["op"].as_str().unwrap().to_owned();
    refused(
        srv.post(&base, &json!({"input": user_message("again")})),
        422,
        "invalid_record",
    );
    let (st, cur) = srv.get(&format!("{base}/current"));
    assert_eq!(st, 200);
    assert_eq!(cur["op"], json!(op));
    let o = format!("{base}/{op}");
    let (st, t) = srv.post(
        &format!("{o}/attempts"),
        &json!({"provider": "p", "model": "m"}),
    );
    assert_eq!(st, 201, "{t}");
    assert_eq!(t["attempt"], json!(1));
    let entry = t["entry"].as_str().unwrap().to_owned();
    let reply = json!({"role": "assistant", "content": [
        {"type": "tool_call", "call_id": "c1", "name": "ls", "arguments": {"dir": "."}}]});
    // Under another id than the ticket's: refused by the library.
    refused(
        srv.post(
            &format!("{o}/replies"),
            &json!({"entry": "other01", "message": reply}),
        ),
        422,
        "invalid_record",
    );
    refused(
        srv.post(
            &format!("{o}/replies"),
            &json!({"entry": entry, "message": user_message("x")}),
        ),
        400,
        "bad_request",
    );
    let (st, v) = srv.post(
        &format!("{o}/replies"),
        &json!({"entry": entry, "message": reply, "usage": {"input": 10, "output": 3}, "latency_ms": 40}),
    );
    assert_eq!(st, 201, "{v}");
    assert_eq!(v["id"], json!(entry));
    // A result before its dispatch is refused: T2 needs T1.
    refused(
        srv.post(
            &format!("{o}/results"),
            &json!({"call_id": "c1", "content": [{"type": "text", "text": "a"}]}),
        ),
        409,
        "not_dispatched",
    );
    refused(
        srv.post(
            &format!("{o}/dispatches"),
            &json!({"call_id": "c1", "effect": "sometimes"}),
        ),
        400,
        "invalid_json",
    );
    refused(
        srv.post(
            &format!("{o}/dispatches"),
            &json!({"call_id": "c404", "effect": "read_only"}),
        ),
        422,
        "invalid_record",
    );
    let (st, d) = srv.post(
        &format!("{o}/dispatches"),
        &json!({"call_id": "c1", "effect": "read_only"}),
    );
    assert_eq!(st, 201, "{d}");
    let sid = cairn::SessionId::parse(&id).unwrap();
    assert_eq!(d["key"], json!(cairn::idempotency_key(&sid, &op, "c1")));
    assert_eq!(d["tool"], json!("ls"));
    // T1 is in the log before the ticket came back.
    let (_, h) = srv.get(&format!("/sessions/{id}/history?from=0"));
    assert!(
        h["records"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["kind"] == json!("tool_dispatched"))
    );
    let (_, v) = srv.get(&format!("/sessions/{id}/verdict"));
    assert_eq!(v["verdict"]["verdict"], json!("indeterminate_tool"));
    let (st, r) = srv.post(
        &format!("{o}/results"),
        &json!({"call_id": "c1", "content": [{"type": "text", "text": "a.txt"}]}),
    );
    assert_eq!(st, 201, "{r}");
    assert_eq!(r["id"], d["result_entry"]);
    let (st, _) = srv.post(&format!("{o}/inputs"), &json!({"text": "also b"}));
    assert_eq!(st, 201);
    refused(
        srv.post(
            &format!("{base}/op-999/finish"),
            &json!({"outcome": "completed"}),
        ),
        409,
        "wrong_operation",
    );
    let (st, f) = srv.post(&format!("{o}/finish"), &json!({"outcome": "completed"}));
    assert_eq!(st, 200, "{f}");
    assert_eq!(f["verdict"]["verdict"], json!("finished"));
    refused(
        srv.post(&format!("{o}/finish"), &json!({"outcome": "completed"})),
        409,
        "no_open_operation",
    );
    let (st, cur) = srv.get(&format!("{base}/current"));
    assert_eq!(st, 200);
    assert_eq!(cur["op"], Value::Null);
    let (_, steps) = srv.get(&format!("/sessions/{id}/steps"));
    assert_eq!(
        support::fields(&steps["steps"], "kind"),
        ["input", "model", "tool"]
    );
    assert_eq!(steps["steps"][1]["usage"]["input"], json!(10));
}

#[test]
fn approvals_denials_and_recovery_over_http() {
    let srv = Srv::start();
    let id = srv.new_session("approvals");
    let base = format!("/sessions/{id}/operations");
    let (_, v) = srv.post(&base, &json!({"input": user_message("pay")}));
    let op = v["op"].as_str().unwrap().to_owned();
    let o = format!("{base}/{op}");
    let (_, t) = srv.post(&format!("{o}/attempts"), &json!({}));
    let reply = json!({"role": "assistant", "content": [
        {"type": "tool_call", "call_id": "p1", "name": "pay", "arguments": {}},
        {"type": "tool_call", "call_id": "p2", "name": "pay", "arguments": {"n": 2}},
        {"type": "tool_call", "call_id": "p3", "name": "rm", "arguments": {}}]});
    srv.post(
        &format!("{o}/replies"),
        &json!({"entry": t["entry"], "message": reply}),
    );
    let (st, _) = srv.post(
        &format!("{o}/approvals"),
        &json!({"call_id": "p1", "tool": "pay"}),
    );
    assert_eq!(st, 201);
    let (_, v) = srv.get(&format!("/sessions/{id}/verdict"));
    assert_eq!(v["status"], json!("paused"));
    let (st, v) = srv.post(
        &format!("{o}/approvals/p1"),
        &json!({"approved": false, "by": "ann"}),
    );
    assert_eq!(st, 200, "{v}");
    let (st, v) = srv.post(
        &format!("{o}/denials"),
        &json!({"call_id": "p1", "reason": "no"}),
    );
    assert_eq!(st, 201, "{v}");
    let (st, _) = srv.post(
        &format!("{o}/dispatches"),
        &json!({"call_id": "p2", "effect": "side_effect"}),
    );
    assert_eq!(st, 201);
    refused(
        srv.post(
            &format!("/sessions/{id}/recover"),
            &json!({"policy": "yolo"}),
        ),
        400,
        "bad_request",
    );
    // p2 may have run (unknown), p3 never started (closed).
    let (st, r) = srv.post(&format!("/sessions/{id}/recover"), &json!({}));
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["before"]["verdict"], json!("indeterminate_tool"));
    let actions = support::fields(&r["actions"], "action");
    assert_eq!(actions.len(), 2, "{r}");
    assert_eq!(r["after"]["verdict"], json!("ready"));
}

#[test]
fn a_session_another_process_writes_is_refused_as_in_use() {
    let srv = Srv::start();
    let id = srv.new_session("busy");
    // Wait for the server to give the lock back (it holds it 200 ms).
    let store = cairn::Store::open_dir(&srv.home);
    let sid = cairn::SessionId::parse(&id).unwrap();
    let writer = loop {
        match store.open(&sid, cairn::Access::Write) {
            Ok(s) => break s,
            Err(cairn::OpenError::InUse { .. }) => {
                std::thread::sleep(std::time::Duration::from_millis(50))
            }
            Err(e) => panic!("{e}"),
        }
    };
    refused(srv.append(&id, json!([user("x")])), 409, "in_use");
    // Reads never need the lock.
    assert_eq!(srv.get(&format!("/sessions/{id}/context")).0, 200);
    assert_eq!(srv.get(&format!("/sessions/{id}")).1["in_use"], json!(true));
    drop(writer);
    assert_eq!(srv.append(&id, json!([user("now")])).0, 200);
}

async fn boom() -> &'static str {
    panic!("a bug in a handler")
}

#[test]
fn a_panic_in_a_handler_is_a_500_naming_the_request_and_the_server_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Srv::start_at(
        dir.path(),
        options(),
        Router::new().route("/test/panic", get(boom)),
    );
    let r = srv
        .agent()
        .get(&srv.url("/test/panic"))
        .header("Authorization", &format!("Bearer {}", srv.token))
        .call()
        .unwrap();
    let header = r
        .headers()
        .get("x-request-id")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let v = refused(support::answer(r), 500, "internal");
    assert_eq!(v["error"]["request_id"], json!(header));
    assert_eq!(srv.get("/sessions").0, 200);
}

#[test]
fn the_login_form_signs_a_browser_in_with_an_httponly_cookie() {
    let srv = Srv::start();
    let r = srv.agent().get(&srv.url("/")).call().unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let csp = r
        .headers()
        .get("content-security-policy")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    let (_, page) = support::answer(r);
    assert!(page.as_str().unwrap().contains("name=\"token\""));
    let r = srv
        .agent()
        .post(&srv.url("/login"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .send("token=wrong")
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let r = srv
        .agent()
        .post(&srv.url("/login"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .send(format!("token={}", srv.token))
        .unwrap();
    assert_eq!(r.status().as_u16(), 303);
    let cookie = r
        .headers()
        .get("set-cookie")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_owned();
    let r = srv
        .agent()
        .get(&srv.url("/sessions"))
        .header("Cookie", &pair)
        .call()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let r = srv
        .agent()
        .get(&srv.url("/"))
        .header("Cookie", &pair)
        .call()
        .unwrap();
    let (_, page) = support::answer(r);
    assert!(page.as_str().unwrap().contains("/assets/app.js"));
    // A write by cookie from another site's page is refused.
    let r = srv
        .agent()
        .post(&srv.url("/sessions"))
        .header("Cookie", &pair)
        .header("Origin", "http://evil.example")
        .header("Content-Type", "application/json")
        .send("{}")
        .unwrap();
    refused(support::answer(r), 403, "cross_origin");
    let r = srv
        .agent()
        .post(&srv.url("/sessions"))
        .header("Cookie", &pair)
        .header("Origin", &format!("http://{}", srv.addr))
        .header("Content-Type", "application/json")
        .send("{}")
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    for asset in ["/assets/app.js", "/assets/app.css"] {
        assert_eq!(
            srv.agent()
                .get(&srv.url(asset))
                .call()
                .unwrap()
                .status()
                .as_u16(),
            200
        );
    }
    refused(
        support::answer(srv.agent().get(&srv.url("/assets/x.js")).call().unwrap()),
        404,
        "not_found",
    );
}

#[test]
fn the_openapi_document_lists_every_route() {
    let srv = Srv::start();
    let (st, doc) = srv.get("/openapi.json");
    assert_eq!(st, 200);
    assert_eq!(doc["openapi"], json!("3.1.0"));
    let paths = doc["paths"].as_object().unwrap();
    for p in [
        "/sessions",
        "/sessions/{id}",
        "/sessions/{id}/records",
        "/sessions/{id}/history",
        "/sessions/{id}/context",
        "/sessions/{id}/state",
        "/sessions/{id}/tree",
        "/sessions/{id}/steps",
        "/sessions/{id}/memory",
        "/sessions/{id}/verdict",
        "/sessions/{id}/checkout",
        "/sessions/{id}/copy",
        "/sessions/{id}/labels",
        "/sessions/{id}/operations",
        "/sessions/{id}/operations/current",
        "/sessions/{id}/operations/{op}/attempts",
        "/sessions/{id}/operations/{op}/replies",
        "/sessions/{id}/operations/{op}/dispatches",
        "/sessions/{id}/operations/{op}/results",
        "/sessions/{id}/operations/{op}/reruns",
        "/sessions/{id}/operations/{op}/approvals",
        "/sessions/{id}/operations/{op}/approvals/{call_id}",
        "/sessions/{id}/operations/{op}/denials",
        "/sessions/{id}/operations/{op}/inputs",
        "/sessions/{id}/operations/{op}/finish",
        "/sessions/{id}/recover",
        "/sessions/{id}/stream",
        "/streams/sessions",
    ] {
        assert!(paths.contains_key(p), "{p} is not in the document");
    }
    assert_eq!(paths.len(), 28, "a route is missing from the list above");
}

#[test]
fn a_sqlite_store_is_served_the_same_way() {
    let dir = tempfile::tempdir().unwrap();
    let spec = std::path::PathBuf::from(format!("sqlite:{}", dir.path().join("db").display()));
    let srv = Srv::start_at(&spec, options(), Router::new());
    let id = srv.new_session("in sqlite");
    let (st, v) = srv.append(&id, json!([user("hello")]));
    assert_eq!(st, 200, "{v}");
    assert_eq!(srv.get("/sessions").1["total"], json!(1));
    assert!(
        dir.path()
            .join("db-files")
            .join(cairn_server::TOKEN_FILE)
            .exists()
    );
}

#[test]
fn a_call_left_without_a_result_by_a_crash_is_rerun_with_its_recorded_key() {
    let dir = tempfile::tempdir().unwrap();
    let (id, op, t1) = {
        let srv = Srv::start_at(dir.path(), options(), Router::new());
        let id = srv.new_session("crash");
        let base = format!("/sessions/{id}/operations");
        let (_, v) = srv.post(&base, &json!({"input": user_message("fetch")}));
        let op = v["op"].as_str().unwrap().to_owned();
        let o = format!("{base}/{op}");
        let (_, t) = srv.post(&format!("{o}/attempts"), &json!({}));
        let reply = json!({"role": "assistant", "content": [
            {"type": "tool_call", "call_id": "g1", "name": "get", "arguments": {}},
            {"type": "tool_call", "call_id": "s1", "name": "send", "arguments": {}}]});
        srv.post(
            &format!("{o}/replies"),
            &json!({"entry": t["entry"], "message": reply}),
        );
        let (_, t1) = srv.post(
            &format!("{o}/dispatches"),
            &json!({"call_id": "g1", "effect": "idempotent"}),
        );
        srv.post(
            &format!("{o}/dispatches"),
            &json!({"call_id": "s1", "effect": "side_effect"}),
        );
        (id, op, t1)
        // The server goes away here with both calls dispatched, unanswered.
    };
    let srv = Srv::start_at(dir.path(), options(), Router::new());
    let o = format!("/sessions/{id}/operations/{op}");
    let (_, v) = srv.get(&format!("/sessions/{id}/verdict"));
    assert_eq!(v["verdict"]["verdict"], json!("indeterminate_tool"));
    let (st, again) = srv.post(&format!("{o}/reruns"), &json!({"call_id": "g1"}));
    assert_eq!(st, 201, "{again}");
    assert_eq!(again["key"], t1["key"], "the same idempotency key");
    assert_eq!(again["result_entry"], t1["result_entry"]);
    // A side effect is not run again without a person's decision.
    refused(
        srv.post(&format!("{o}/reruns"), &json!({"call_id": "s1"})),
        422,
        "invalid_record",
    );
    let (st, v) = srv.post(
        &format!("{o}/reruns"),
        &json!({"call_id": "s1", "decided_by": "ann"}),
    );
    assert_eq!(st, 201, "{v}");
    refused(
        srv.post(&format!("{o}/reruns"), &json!({"call_id": "zz"})),
        409,
        "not_dispatched",
    );
    for call in ["g1", "s1"] {
        let (st, v) = srv.post(
            &format!("{o}/results"),
            &json!({"call_id": call, "content": [{"type": "text", "text": "done"}]}),
        );
        assert_eq!(st, 201, "{v}");
    }
    let (_, v) = srv.get(&format!("/sessions/{id}/verdict"));
    assert_eq!(v["verdict"]["verdict"], json!("ready"));
}

/// The statuses of the steps of one kind.
fn statuses<'v>(steps: &'v Value, kind: &str) -> Vec<&'v str> {
    steps["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == json!(kind))
        .map(|s| s["status"].as_str().unwrap())
        .collect()
}

#[test]
fn a_tool_step_whose_process_died_is_interrupted_not_running() {
    let dir = tempfile::tempdir().unwrap();
    let id = {
        // Held for the whole test: the operation API drives the operation
        // through this server's writer.
        let opts = cairn_server::Options {
            hold: std::time::Duration::from_secs(3600),
            ..options()
        };
        let srv = Srv::start_at(dir.path(), opts, Router::new());
        let id = srv.new_session("died");
        let base = format!("/sessions/{id}/operations");
        let (_, v) = srv.post(&base, &json!({"input": user_message("build")}));
        let o = format!("{base}/{}", v["op"].as_str().unwrap());
        let (_, t) = srv.post(&format!("{o}/attempts"), &json!({}));
        let reply = json!({"role": "assistant", "content": [
            {"type": "tool_call", "call_id": "b1", "name": "bash", "arguments": {}}]});
        srv.post(
            &format!("{o}/replies"),
            &json!({"entry": t["entry"], "message": reply}),
        );
        let (st, d) = srv.post(
            &format!("{o}/dispatches"),
            &json!({"call_id": "b1", "effect": "side_effect"}),
        );
        assert_eq!(st, 201, "{d}");
        let (_, steps) = srv.get(&format!("/sessions/{id}/steps"));
        assert_eq!(statuses(&steps, "tool"), ["running"], "{steps}");
        id
        // The server goes away with the call dispatched and unanswered.
    };
    let srv = Srv::start_at(dir.path(), options(), Router::new());
    let (st, steps) = srv.get(&format!("/sessions/{id}/steps"));
    assert_eq!(st, 200, "{steps}");
    assert_eq!(statuses(&steps, "tool"), ["interrupted"], "{steps}");
    assert_eq!(
        srv.get(&format!("/sessions/{id}/verdict")).1["status"],
        json!("interrupted")
    );
    // Another process holding the session (here: this one's writer) may
    // still be running the tool.
    let store = cairn::Store::open_dir(dir.path());
    let writer = store
        .open(&cairn::SessionId::parse(&id).unwrap(), cairn::Access::Write)
        .unwrap();
    let (_, steps) = srv.get(&format!("/sessions/{id}/steps"));
    assert_eq!(statuses(&steps, "tool"), ["running"], "{steps}");
    drop(writer);
    let (_, steps) = srv.get(&format!("/sessions/{id}/steps"));
    assert_eq!(statuses(&steps, "tool"), ["interrupted"], "{steps}");
}
