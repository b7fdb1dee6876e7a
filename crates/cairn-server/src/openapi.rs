//! The OpenAPI 3.1 document of the API, served at `/openapi.json`. It is
//! built here, beside the routes it describes; a test checks that every
//! route is in it, and schemathesis checks the running server against it.

use serde_json::{Value, json};

use crate::api::MAX_INT;

/// A `$ref` to a schema of `components`.
fn schema(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// The `id` path parameter, and any others after it.
fn params(names: &[&str]) -> Vec<Value> {
    names
        .iter()
        .map(|n| {
            let (desc, pattern) = match *n {
                "id" => (
                    "The session: its id or a unique prefix of it.",
                    "^[0-9A-Za-z]{1,64}$",
                ),
                "op" => (
                    "The open operation's id, as starting it returned.",
                    "^[!-~]{1,128}$",
                ),
                _ => ("The tool call's id.", "^[!-~]{1,128}$"),
            };
            json!({"name": n, "in": "path", "required": true, "description": desc,
                   "schema": {"type": "string", "pattern": pattern}})
        })
        .collect()
}

fn query(name: &str, desc: &str, s: Value) -> Value {
    json!({"name": name, "in": "query", "required": false, "description": desc, "schema": s})
}

/// One operation: summary, parameters, optional JSON body, and its success
/// answer; every error is the `Error` body (`default`).
fn op(summary: &str, params: Vec<Value>, body: Option<Value>, ok: (&str, Value)) -> Value {
    let mut o = json!({
        "summary": summary,
        "parameters": params,
        "responses": {
            ok.0: {"description": "Done.", "content": {"application/json": {"schema": ok.1}}},
            "default": {"$ref": "#/components/responses/Error"},
        },
    });
    if let Some(b) = body {
        o["requestBody"] =
            json!({"required": true, "content": {"application/json": {"schema": b}}});
    }
    o
}

fn object(required: &[&str], props: Value) -> Value {
    json!({"type": "object", "required": required, "properties": props, "additionalProperties": false})
}

fn open_object(required: &[&str], props: Value) -> Value {
    json!({"type": "object", "required": required, "properties": props})
}

/// One block type: its `type` tag and fields.
fn block(tag: &str, required: &[&str], mut props: Value) -> Value {
    props["type"] = json!({"const": tag});
    let mut req = vec!["type"];
    req.extend_from_slice(required);
    json!({"type": "object", "required": req, "properties": props})
}

fn sse(summary: &str, params: Vec<Value>, desc: &str) -> Value {
    json!({
        "summary": summary,
        "description": desc,
        "parameters": params,
        "responses": {
            "200": {"description": "An event stream.", "content": {"text/event-stream": {"schema": {"type": "string"}}}},
            "default": {"$ref": "#/components/responses/Error"},
        },
    })
}

/// The document.
pub fn document() -> Value {
    let id = || params(&["id"]);
    let id_op = || params(&["id", "op"]);
    let at = || {
        vec![
            params(&["id"]).remove(0),
            query(
                "at",
                "An entry (id, unique prefix or label): the view as of it. The current leaf when left out.",
                json!({"type": "string"}),
            ),
        ]
    };
    let nullable_str = json!({"type": ["string", "null"]});
    let ack = schema("Ack");
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "cairn",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The HTTP API of a cairn store (`cairn serve`). Sessions are append-only logs; every view is derived from the log. Paths follow the Agent Protocol's threads where the concepts match: a session is a thread, its log the history, a fork a copy. Every request needs the server's bearer token; every error is an Error body with a code and a hint.",
        },
        "security": [{"bearer": []}],
        "paths": {
            "/sessions": {
                "get": op("List sessions, newest first", vec![
                    query("status", "Only sessions of this status.", json!({"type": "string", "enum": ["init", "running", "interrupted", "paused", "succeeded", "failed"]})),
                    query("title", "Only sessions whose title or first message contains this (case-insensitive).", json!({"type": "string"})),
                    query("updated_after", "Only sessions updated after this RFC 3339 time.", json!({"type": "string"})),
                    query("updated_before", "Only sessions updated before this RFC 3339 time.", json!({"type": "string"})),
                    query("limit", "Page size.", json!({"type": "integer", "minimum": 1, "maximum": 1000, "default": 50})),
                    query("offset", "Sessions to skip.", json!({"type": "integer", "minimum": 0, "maximum": MAX_INT, "default": 0})),
                ], None, ("200", open_object(&["sessions", "total", "offset", "limit"], json!({
                    "sessions": {"type": "array", "items": schema("Summary")},
                    "total": {"type": "integer", "minimum": 0, "maximum": MAX_INT},
                    "offset": {"type": "integer", "minimum": 0, "maximum": MAX_INT},
                    "limit": {"type": "integer", "minimum": 1},
                })))),
                "post": op("Create a session", vec![], Some(object(&[], json!({
                    "title": {"type": ["string", "null"]},
                    "app_state": {"type": ["object", "null"]},
                    "cwd": {"type": ["string", "null"]},
                }))), ("201", schema("Session"))),
            },
            "/sessions/{id}": {
                "get": op("Get a session", id(), None, ("200", schema("Session"))),
                "delete": {
                    "summary": "Delete a session (guarded: repeat its full id in confirm; refused while an operation is open or another process writes it)",
                    "parameters": [params(&["id"]).remove(0), {"name": "confirm", "in": "query", "required": true, "description": "The session's full id, again.", "schema": {"type": "string"}}],
                    "responses": {
                        "204": {"description": "Deleted."},
                        "default": {"$ref": "#/components/responses/Error"},
                    },
                },
            },
            "/sessions/{id}/records": {
                "post": op("Append a batch of records; each is acknowledged with its seq and id once durable under the durability asked for", id(), Some(object(&["records"], json!({
                    "records": {"type": "array", "minItems": 1, "items": schema("InputRecord")},
                    "durability": {"type": ["string", "null"], "enum": ["sync", "group", "buffered", null]},
                    "expected_seq": {"type": ["integer", "null"], "minimum": 0, "maximum": MAX_INT, "description": "Refuse the batch (409 seq_mismatch) unless the first record would get this seq."},
                }))), ("200", open_object(&["appended", "next_seq"], json!({
                    "appended": {"type": "array", "items": ack.clone()},
                    "next_seq": {"type": "integer"},
                })))),
            },
            "/sessions/{id}/history": {
                "get": op("Read the log by seq range", vec![
                    params(&["id"]).remove(0),
                    query("from", "First seq.", json!({"type": "integer", "minimum": 0, "maximum": MAX_INT})),
                    query("to", "Last seq (inclusive).", json!({"type": "integer", "minimum": 0, "maximum": MAX_INT})),
                    query("limit", "Most records.", json!({"type": "integer", "minimum": 1, "maximum": 10000, "default": 1000})),
                ], None, ("200", open_object(&["records", "next", "len"], json!({
                    "records": {"type": "array", "items": schema("Record")},
                    "next": {"type": ["integer", "null"], "description": "The seq to continue from, when the page is cut."},
                    "len": {"type": "integer"},
                })))),
            },
            "/sessions/{id}/context": {
                "get": op("The context the model sees, with the app state and settings, as of an entry", at(), None, ("200", schema("Context"))),
            },
            "/sessions/{id}/state": {
                "get": op("The app state and settings as of an entry", at(), None, ("200", open_object(&["session", "at", "app_state", "settings"], json!({
                    "session": {"type": "string"}, "at": nullable_str.clone(), "app_state": {}, "settings": {},
                })))),
            },
            "/sessions/{id}/tree": {
                "get": op("Every entry of the tree, the active branch, the leaf and the labels", id(), None, ("200", open_object(&["session", "leaf", "active", "labels", "nodes"], json!({
                    "session": {"type": "string"},
                    "leaf": nullable_str.clone(),
                    "active": {"type": "array", "items": {"type": "string"}},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "nodes": {"type": "array", "items": open_object(&["id", "parent", "seq", "kind", "summary"], json!({
                        "id": {"type": "string"}, "parent": nullable_str.clone(), "seq": {"type": "integer"},
                        "ts": {"type": "string"}, "kind": {"type": "string"}, "summary": {"type": "string"},
                        "labels": {"type": "array", "items": {"type": "string"}}, "active": {"type": "boolean"},
                        "children": {"type": "array", "items": {"type": "string"}},
                    }))},
                })))),
            },
            "/sessions/{id}/steps": {
                "get": op("The numbered steps, with durations and tokens", id(), None, ("200", open_object(&["session", "steps"], json!({
                    "session": {"type": "string"},
                    "steps": {"type": "array", "items": {"type": "object"}},
                })))),
            },
            "/sessions/{id}/memory": {
                "get": op("The session memory of the current branch", id(), None, ("200", open_object(&["session", "memory", "text"], json!({
                    "session": {"type": "string"}, "memory": {"type": "object"}, "text": {"type": "string"},
                })))),
            },
            "/sessions/{id}/verdict": {
                "get": op("The recovery verdict, the status and the next action", id(), None, ("200", open_object(&["session", "status", "verdict", "action"], json!({
                    "session": {"type": "string"}, "status": schema("Status"), "verdict": schema("Verdict"), "action": {"type": "string"},
                })))),
            },
            "/sessions/{id}/checkout": {
                "post": op("Move the leaf (rewind): appends a checkout entry", id(), Some(object(&[], json!({
                    "target": {"type": ["string", "null"], "description": "An entry (id, prefix or label); null starts over before the first entry."},
                    "summary": {"type": ["string", "null"], "description": "A summary of the branch left, shown to the model."},
                }))), ("200", open_object(&["appended", "leaf"], json!({
                    "appended": {"oneOf": [ack.clone(), {"type": "null"}]}, "leaf": nullable_str.clone(),
                })))),
            },
            "/sessions/{id}/copy": {
                "post": op("Fork: a new session holding the branch up to an entry", id(), Some(object(&[], json!({
                    "at": {"type": ["string", "null"]}, "title": {"type": ["string", "null"]},
                }))), ("201", schema("Session"))),
            },
            "/sessions/{id}/labels": {
                "post": op("Set a label on an entry, or remove it (target null)", id(), Some(object(&["name"], json!({
                    "name": schema("EntryId"), "target": {"type": ["string", "null"]},
                }))), ("200", open_object(&["appended", "labels"], json!({
                    "appended": ack.clone(), "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                })))),
            },
            "/sessions/{id}/operations": {
                "post": op("Start an operation with an input message", id(), Some(object(&["input"], json!({"input": schema("Message")}))),
                    ("201", open_object(&["op", "input", "next_seq"], json!({"op": {"type": "string"}, "input": nullable_str.clone(), "next_seq": {"type": "integer"}})))),
            },
            "/sessions/{id}/operations/current": {
                "get": op("The open operation (op is null when none is open)", id(), None, ("200", open_object(&["op", "phase", "verdict"], json!({
                    "op": nullable_str.clone(), "phase": {"description": "The last operation's phase: none, open, or {\"finished\": OUTCOME}."}, "verdict": schema("Verdict"),
                })))),
            },
            "/sessions/{id}/operations/{op}/attempts": {
                "post": op("Announce a model request: returns the id its reply must use", id_op(), Some(object(&[], json!({
                    "provider": {"type": ["string", "null"]}, "model": {"type": ["string", "null"]},
                }))), ("201", open_object(&["attempt", "entry"], json!({"attempt": {"type": "integer"}, "entry": {"type": "string"}})))),
            },
            "/sessions/{id}/operations/{op}/replies": {
                "post": op("Record the model's reply under its attempt's id (and its usage)", id_op(), Some(object(&["entry", "message"], json!({
                    "entry": schema("EntryId"), "message": schema("Message"),
                    "usage": {"type": ["object", "null"]}, "latency_ms": {"type": ["integer", "null"], "minimum": 0, "maximum": MAX_INT},
                }))), ("201", ack.clone())),
            },
            "/sessions/{id}/operations/{op}/dispatches": {
                "post": op("Dispatch a tool call (T1): answers with the ticket and the idempotency key only once T1 is durable", id_op(), Some(object(&["call_id", "effect"], json!({
                    "call_id": {"type": "string"}, "effect": {"type": "string", "enum": ["read_only", "idempotent", "side_effect"]},
                }))), ("201", open_object(&["call_id", "tool", "key", "effect", "result_entry"], json!({
                    "call_id": {"type": "string"}, "tool": {"type": "string"}, "key": {"type": "string"},
                    "effect": {"type": "string"}, "result_entry": {"type": "string"},
                })))),
            },
            "/sessions/{id}/operations/{op}/results": {
                "post": op("Record a dispatched call's result (T2), synced before the answer", id_op(), Some(object(&["call_id", "content"], json!({
                    "call_id": {"type": "string"}, "content": {"type": "array", "items": schema("Block")},
                    "is_error": {"type": "boolean"}, "code": {"type": ["string", "null"]},
                }))), ("201", ack.clone())),
            },
            "/sessions/{id}/operations/{op}/reruns": {
                "post": op("Re-run a dispatched call that has no result (after a crash): T1 again with its recorded key and result id; a side effect needs decided_by", id_op(), Some(object(&["call_id"], json!({
                    "call_id": {"type": "string"}, "decided_by": {"type": ["string", "null"]},
                }))), ("201", open_object(&["call_id", "tool", "key", "effect", "result_entry"], json!({
                    "call_id": {"type": "string"}, "tool": {"type": "string"}, "key": {"type": "string"},
                    "effect": {"type": "string"}, "result_entry": {"type": "string"},
                })))),
            },
            "/sessions/{id}/operations/{op}/approvals": {
                "post": op("Record that a person is asked to approve a call", id_op(), Some(object(&["call_id", "tool"], json!({
                    "call_id": {"type": "string"}, "tool": {"type": "string"},
                }))), ("201", open_object(&["requested"], json!({"requested": {"type": "boolean"}})))),
            },
            "/sessions/{id}/operations/{op}/approvals/{call_id}": {
                "post": op("Record the person's decision", params(&["id", "op", "call_id"]), Some(object(&["approved"], json!({
                    "approved": {"type": "boolean"}, "by": {"type": ["string", "null"]},
                }))), ("200", open_object(&["approved"], json!({"approved": {"type": "boolean"}})))),
            },
            "/sessions/{id}/operations/{op}/denials": {
                "post": op("Answer a call that will not run with an error result", id_op(), Some(object(&["call_id", "reason"], json!({
                    "call_id": {"type": "string"}, "reason": {"type": "string"},
                }))), ("201", ack.clone())),
            },
            "/sessions/{id}/operations/{op}/inputs": {
                "post": op("Queue input that arrived while the operation runs", id_op(), Some(object(&["text"], json!({"text": {"type": "string"}}))),
                    ("201", open_object(&["queued"], json!({"queued": {"type": "boolean"}})))),
            },
            "/sessions/{id}/operations/{op}/finish": {
                "post": op("Finish the operation", id_op(), Some(object(&["outcome"], json!({
                    "outcome": {"type": "string", "enum": ["completed", "failed", "aborted", "max_steps"]},
                    "error": {"type": ["string", "null"]},
                }))), ("200", open_object(&["status", "verdict"], json!({"status": schema("Status"), "verdict": schema("Verdict")})))),
            },
            "/sessions/{id}/recover": {
                "post": op("Resolve the verdict with the core's recovery loop under a policy (no tool runs on the server)", id(), Some(object(&[], json!({
                    "policy": {"type": ["string", "null"], "enum": ["close_all", "leave_approvals", null]},
                }))), ("200", open_object(&["before", "actions", "after"], json!({
                    "before": schema("Verdict"), "actions": {"type": "array", "items": {"type": "object"}}, "after": schema("Verdict"),
                })))),
            },
            "/sessions/{id}/stream": {
                "get": sse("Live tail of a session's records", vec![
                    params(&["id"]).remove(0),
                    query("from", "First seq to send (0 when left out). A Last-Event-ID header wins over it.", json!({"type": "integer", "minimum": 0, "maximum": MAX_INT})),
                ], "Every record from `from` on, then each new one as it is written: `event: record`, `id:` the record's seq, `data:` the record (as in history). Reconnecting with `Last-Event-ID: N` resumes exactly after N. `event: removed` when the session is deleted."),
            },
            "/streams/sessions": {
                "get": sse("Live listing", vec![], "One `event: session` per session (its summary), `event: ready`, then a `session` event for each session created or changed and `removed` for each deleted."),
            },
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "The server's token (`server-token` in the store's files directory, or --token). Browsers sign in with the form at / and send it as an HttpOnly cookie."}},
            "responses": {
                "Error": {"description": "An error.", "content": {"application/json": {"schema": schema("Error")}}},
            },
            "schemas": {
                "Error": object(&["error"], json!({"error": open_object(&["code", "message", "hint", "request_id"], json!({
                    "code": {"type": "string", "description": "Stable: unauthorized, not_found, unknown_entry, bad_request, invalid_json, bad_record, invalid_record, seq_mismatch, in_use, too_large, unsupported_media_type, method_not_allowed, operation_open, no_open_operation, wrong_operation, not_dispatched, cross_origin, write_failed, damaged, newer_format, internal."},
                    "message": {"type": "string"},
                    "hint": {"type": "string", "description": "What to do about it."},
                    "request_id": {"type": "string"},
                    "detail": {"description": "More, for programs: for a refused batch, the records appended before it and the index of the refused one."},
                }))})),
                "EntryId": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$", "description": "An entry id or label name: 1 to 64 of A-Z, a-z, 0-9, '-', '_' and '.'."},
                "Ack": open_object(&["seq", "id"], json!({"seq": {"type": "integer", "minimum": 0, "maximum": MAX_INT}, "id": nullable_str.clone()})),
                "Status": {"type": "string", "enum": ["init", "running", "interrupted", "paused", "succeeded", "failed"]},
                "Verdict": open_object(&["verdict"], json!({"verdict": {"type": "string", "enum": ["indeterminate_tool", "finished", "awaiting_approval", "provider_interrupted", "tools_not_started", "ready"]}})),
                "Summary": open_object(&["id", "created", "updated", "entries", "records", "status"], json!({
                    "id": {"type": "string"}, "title": nullable_str.clone(), "created": {"type": "string"},
                    "updated": {"type": "string"}, "entries": {"type": "integer"}, "records": {"type": "integer"},
                    "first_message": nullable_str.clone(), "forked_from": nullable_str.clone(), "parent": nullable_str.clone(),
                    "phase": {"description": "The last operation's phase: none, open, or {\"finished\": OUTCOME}."}, "status": schema("Status"),
                })),
                "Session": open_object(&["id", "title", "created", "updated", "records", "entries", "leaf", "status"], json!({
                    "id": {"type": "string"}, "title": nullable_str.clone(), "location": {"type": "string"},
                    "format": {"type": "integer"}, "writer": {"type": ["string", "null"]}, "created": {"type": "string"},
                    "updated": {"type": "string"}, "cwd": {"type": ["string", "null"]}, "records": {"type": "integer"},
                    "entries": {"type": "integer"}, "leaf": nullable_str.clone(),
                    "forked_from": {"type": ["object", "null"]}, "spawned_by": {"type": ["object", "null"]},
                    "in_use": {"type": "boolean"}, "torn_tail": {"type": ["object", "null"]}, "status": schema("Status"),
                })),
                "Record": open_object(&["seq", "ts", "kind", "data"], json!({
                    "seq": {"type": "integer", "minimum": 0, "maximum": MAX_INT}, "ts": {"type": "string"}, "kind": {"type": "string"},
                    "ignorable": {"type": "boolean"}, "id": {"type": "string"}, "parent": nullable_str.clone(), "data": {},
                })),
                "InputRecord": object(&["kind", "data"], json!({
                    "kind": {"type": "string", "description": "An entry kind (message, app_state, settings, compaction, checkout, label, session_info, custom) or an operation kind; a kind of your own needs ignorable."},
                    "data": {"description": "The kind's payload (docs/FORMAT.md)."},
                    "id": {"type": "string"}, "parent": nullable_str.clone(), "ignorable": {"type": "boolean"},
                })),
                "Message": open_object(&["role", "content"], json!({
                    "role": {"type": "string", "enum": ["user", "assistant", "tool", "system", "developer"]},
                    "content": {"type": "array", "items": schema("Block")},
                })),
                "Block": {"oneOf": [
                    block("text", &["text"], json!({"text": {"type": "string"}})),
                    block("thinking", &["thinking"], json!({"thinking": {"type": "string"}, "signature": {"type": ["string", "null"]}})),
                    block("tool_call", &["call_id", "name", "arguments"], json!({"call_id": {"type": "string"}, "name": {"type": "string"}, "arguments": {}})),
                    block("tool_result", &["call_id", "content"], json!({"call_id": {"type": "string"}, "content": {"type": "array", "items": schema("Block")}, "is_error": {"type": ["boolean", "null"]}, "code": {"type": ["string", "null"]}})),
                    block("image", &["media_type", "data"], json!({"media_type": {"type": "string"}, "data": {"type": "string"}})),
                    block("blob", &["uri"], json!({"uri": {"type": "string"}, "media_type": {"type": ["string", "null"]}, "size": {"type": ["integer", "null"], "minimum": 0}})),
                ]},
                "Context": open_object(&["session", "leaf", "messages", "app_state", "settings", "labels"], json!({
                    "session": {"type": "string"}, "leaf": nullable_str.clone(),
                    "messages": {"type": "array", "items": open_object(&["entry", "source", "message"], json!({
                        "entry": {"type": "string"}, "source": {"type": "string"}, "namespace": nullable_str.clone(), "message": {"type": "object"},
                    }))},
                    "app_state": {}, "settings": {}, "labels": {"type": "object"}, "compaction": {"type": ["object", "null"]},
                })),
            },
        },
    })
}
