//! Live tails over Server-Sent Events, on loopback: the event id is the
//! record's seq, `Last-Event-ID` resumes exactly after it, records other
//! processes write arrive too, and the listing stream follows the store.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use cairn::{Access, EntryBody, Message, Role, SessionId, Store};
use pretty_assertions::assert_eq;
use serde_json::json;
use support::{Srv, user};

#[test]
fn a_tail_sends_every_record_with_its_seq_as_event_id_and_resumes_after_last_event_id() {
    let srv = Srv::start();
    let id = srv.new_session("tail");
    srv.append(&id, json!([user("a"), user("b")]));
    let mut events = srv.tail(&format!("/sessions/{id}/stream"), None);
    let seqs: Vec<u64> = (0..3).map(|_| events.record().0).collect();
    assert_eq!(seqs, [0, 1, 2]);
    // Live: appended after the tail opened.
    srv.append(&id, json!([user("c")]));
    let (seq, rec) = events.record();
    assert_eq!(seq, 3);
    assert_eq!(rec["data"]["content"][0]["text"], json!("c"));
    drop(events);
    srv.append(&id, json!([user("d"), user("e")]));
    // The client saw up to 2 (say): it gets 3, 4, 5 and nothing twice.
    let mut resumed = srv.tail(&format!("/sessions/{id}/stream?from=0"), Some(2));
    let seqs: Vec<u64> = (0..3).map(|_| resumed.record().0).collect();
    assert_eq!(seqs, [3, 4, 5]);
    srv.append(&id, json!([user("f")]));
    assert_eq!(resumed.record().0, 6);
    let mut from = srv.tail(&format!("/sessions/{id}/stream?from=5"), None);
    assert_eq!(from.record().0, 5);
}

#[test]
fn a_tail_sees_records_another_process_writes() {
    let srv = Srv::start();
    let id = srv.new_session("outside");
    let mut events = srv.tail(&format!("/sessions/{id}/stream"), None);
    assert_eq!(events.record().0, 0);
    let store = Store::open_dir(&srv.home);
    let sid = SessionId::parse(&id).unwrap();
    // The server gives the writer lock back after its hold time.
    let writer = loop {
        match store.open(&sid, Access::Write) {
            Ok(s) => break s,
            Err(cairn::OpenError::InUse { .. }) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("{e}"),
        }
    };
    for i in 0..3 {
        writer
            .append(EntryBody::Message(Message::text(
                Role::User,
                format!("outside {i}"),
            )))
            .unwrap();
    }
    for i in 0..3 {
        let (seq, rec) = events.record();
        assert_eq!(seq, i + 1);
        assert_eq!(
            rec["data"]["content"][0]["text"],
            json!(format!("outside {i}"))
        );
    }
}

#[test]
fn a_tail_of_a_deleted_session_ends_with_removed() {
    let srv = Srv::start();
    let id = srv.new_session("short-lived");
    let mut events = srv.tail(&format!("/sessions/{id}/stream"), None);
    assert_eq!(events.record().0, 0);
    assert_eq!(srv.delete(&format!("/sessions/{id}?confirm={id}")).0, 204);
    loop {
        let ev = events.next();
        if ev.event == "removed" {
            break;
        }
        assert_eq!(ev.event, "record");
    }
}

#[test]
fn a_bad_last_event_id_or_session_is_refused_before_the_stream_starts() {
    let srv = Srv::start();
    let id = srv.new_session("bad");
    let r = srv
        .agent()
        .get(&srv.url(&format!("/sessions/{id}/stream")))
        .header("Authorization", &format!("Bearer {}", srv.token))
        .header("Last-Event-ID", "yesterday")
        .call()
        .unwrap();
    let (st, v) = support::answer(r);
    assert_eq!(st, 400);
    assert_eq!(v["error"]["code"], json!("bad_request"));
    let (st, v) = srv.get("/sessions/0000000000000000000000000Z/stream");
    assert_eq!(st, 404, "{v}");
}

#[test]
fn the_listing_stream_sends_the_listing_then_every_change() {
    let srv = Srv::start();
    let a = srv.new_session("first");
    let mut events = srv.tail("/streams/sessions", None);
    let ev = events.next();
    assert_eq!(ev.event, "session");
    let s: serde_json::Value = serde_json::from_str(&ev.data).unwrap();
    assert_eq!(s["id"], json!(a));
    assert_eq!(events.next().event, "ready");
    let b = srv.new_session("second");
    let ev = events.next();
    assert_eq!(ev.event, "session");
    let s: serde_json::Value = serde_json::from_str(&ev.data).unwrap();
    assert_eq!(s["id"], json!(b));
    assert_eq!(s["title"], json!("second"));
    srv.append(&a, json!([user("now with a message")]));
    loop {
        let ev = events.next();
        let s: serde_json::Value = serde_json::from_str(&ev.data).unwrap();
        if s["id"] == json!(a) && s["entries"] == json!(1) {
            assert_eq!(s["first_message"], json!("now with a message"));
            break;
        }
    }
    assert_eq!(srv.delete(&format!("/sessions/{b}?confirm={b}")).0, 204);
    loop {
        let ev = events.next();
        if ev.event == "removed" {
            let s: serde_json::Value = serde_json::from_str(&ev.data).unwrap();
            assert_eq!(s["id"], json!(b));
            break;
        }
    }
}
