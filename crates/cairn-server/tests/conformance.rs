//! The served OpenAPI document against the real answers: every request of
//! every test through `support::Srv` is checked against the schema the
//! document gives for its route and status (`support/schema.rs`). Here, a
//! walk through every route (streams aside) so that each one's success
//! answer is checked, and the check itself shown to refuse a shape its
//! schema does not describe.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{Value, json};
use support::{Srv, user, user_message};

/// Asserts a status, the answer being checked on the way.
#[track_caller]
fn ok(answer: (u16, Value), status: u16) -> Value {
    assert_eq!(answer.0, status, "{}", answer.1);
    answer.1
}

#[test]
fn every_route_answers_the_shape_its_schema_gives() {
    let srv = Srv::start();
    let id = srv.new_session("walk");
    ok(srv.get("/sessions?limit=5"), 200);
    ok(srv.get(&format!("/sessions/{id}")), 200);
    let a = ok(srv.append(&id, json!([user("hello")])), 200);
    let first = a["appended"][0]["id"].as_str().unwrap().to_owned();
    ok(srv.get(&format!("/sessions/{id}/history?from=0")), 200);
    ok(srv.get(&format!("/sessions/{id}/context?at={first}")), 200);
    ok(srv.get(&format!("/sessions/{id}/state")), 200);
    ok(srv.get(&format!("/sessions/{id}/steps")), 200);
    ok(srv.get(&format!("/sessions/{id}/memory")), 200);
    ok(
        srv.post(
            &format!("/sessions/{id}/labels"),
            &json!({"name": "start", "target": first}),
        ),
        200,
    );
    ok(
        srv.post(
            &format!("/sessions/{id}/checkout"),
            &json!({"target": first, "summary": "back"}),
        ),
        200,
    );
    ok(srv.get(&format!("/sessions/{id}/tree")), 200);
    let copy = ok(
        srv.post(&format!("/sessions/{id}/copy"), &json!({"title": "copy"})),
        201,
    );

    let base = format!("/sessions/{id}/operations");
    let op = ok(
        srv.post(&base, &json!({"input": user_message("work")})),
        201,
    )["op"]
        .as_str()
        .unwrap()
        .to_owned();
    ok(srv.get(&format!("{base}/current")), 200);
    let o = format!("{base}/{op}");
    let t = ok(
        srv.post(&format!("{o}/attempts"), &json!({"model": "m"})),
        201,
    );
    let reply = json!({"role": "assistant", "content": [
        {"type": "tool_call", "call_id": "c1", "name": "ls", "arguments": {}},
        {"type": "tool_call", "call_id": "c2", "name": "pay", "arguments": {}},
        {"type": "tool_call", "call_id": "c3", "name": "rm", "arguments": {}}]});
    ok(
        srv.post(
            &format!("{o}/replies"),
            &json!({"entry": t["entry"], "message": reply, "usage": {"input": 3, "output": 2}}),
        ),
        201,
    );
    ok(
        srv.post(
            &format!("{o}/dispatches"),
            &json!({"call_id": "c1", "effect": "read_only"}),
        ),
        201,
    );
    ok(
        srv.post(&format!("{o}/reruns"), &json!({"call_id": "c1"})),
        201,
    );
    ok(
        srv.post(
            &format!("{o}/results"),
            &json!({"call_id": "c1", "content": [{"type": "text", "text": "a"}]}),
        ),
        201,
    );
    ok(
        srv.post(
            &format!("{o}/approvals"),
            &json!({"call_id": "c2", "tool": "pay"}),
        ),
        201,
    );
    ok(
        srv.post(&format!("{o}/approvals/c2"), &json!({"approved": false})),
        200,
    );
    ok(
        srv.post(
            &format!("{o}/denials"),
            &json!({"call_id": "c2", "reason": "no"}),
        ),
        201,
    );
    ok(
        srv.post(&format!("{o}/inputs"), &json!({"text": "later"})),
        201,
    );
    ok(srv.get(&format!("/sessions/{id}/verdict")), 200);
    ok(
        srv.post(&format!("/sessions/{id}/recover"), &json!({})),
        200,
    );
    ok(
        srv.post(&format!("{o}/finish"), &json!({"outcome": "completed"})),
        200,
    );
    let copy = copy["id"].as_str().unwrap();
    ok(srv.delete(&format!("/sessions/{copy}?confirm={copy}")), 204);

    let c = srv.conformance();
    let checked = c.checked();
    let mut missing = Vec::new();
    for (path, item) in c.doc()["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            // Streams (text/event-stream) are the SSE tests' to check.
            let stream = op["responses"]["200"]["content"]
                .get("text/event-stream")
                .is_some();
            let key = format!("{} {path}", method.to_uppercase());
            if !stream && !checked.contains(&key) {
                missing.push(key);
            }
        }
    }
    assert!(missing.is_empty(), "not checked: {missing:?}");
}

#[test]
fn a_shape_the_document_does_not_describe_is_refused() {
    let srv = Srv::start();
    let id = srv.new_session("shape");
    let (st, good) = srv.get(&format!("/sessions/{id}"));
    let c = srv.conformance();
    let path = format!("/sessions/{id}");
    assert_eq!(c.check("GET", &path, st, &good), Ok(()));
    let mut renamed = good.clone();
    let records = renamed.as_object_mut().unwrap().remove("records").unwrap();
    renamed["record_count"] = records;
    let err = c.check("GET", &path, st, &renamed).unwrap_err();
    assert!(err.contains("records"), "{err}");
    let mut retyped = good.clone();
    retyped["status"] = json!("sleeping");
    assert!(c.check("GET", &path, st, &retyped).is_err());
    let error =
        json!({"error": {"code": "no_such_code", "message": "m", "hint": "h", "request_id": "r"}});
    assert!(c.check("GET", &path, 404, &error).is_err());
}
