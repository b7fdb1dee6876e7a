//! Round trips: every record kind, large records and many records come back
//! from storage as the exact bytes written, through the raw seam and
//! through [`Session`], for readers and writers on another handle.

use serde_json::json;

use super::build::calls;
use super::fixture::Fixture;
use super::util::{OrFail, other_store, raw_records, store, stored_lines};
use crate::backend::Access;
use crate::commit::Durability;
use crate::operation::ToolOutput;
use crate::record::{
    AppStateChange, Block, Compaction, Custom, EffectClass, EntryBody, Label, Message, OpRecord,
    Outcome, Role, SessionInfo, Settings, Unknown, Usage,
};
use crate::session::{Appended, NewSession, Session};

/// Appends one entry of every kind and one operation record of every kind
/// (blocks of every type, unicode and escapes included).
fn append_every_kind(s: &Session) {
    let (hello, reply) = append_messages(s);
    append_other_entries(s, &hello, &reply);
    append_every_op_record(s);
}

/// What an append failed to do, for the failure message.
fn ok(what: &str) -> String {
    format!("append {what}")
}

/// A user message, an assistant message with thinking and a tool call, and
/// its result with text, image and blob blocks; returns the first two.
fn append_messages(s: &Session) -> (Appended, Appended) {
    let hello = s
        .append(EntryBody::Message(Message::text(
            Role::User,
            "hello \"world\"\n\ttabs, back\\slash, ünïcödé, 🐖, \u{1}",
        )))
        .or_fail(ok("a user message"));
    let mut reply = calls(
        "let me look",
        &[(
            "c1",
            "read_file",
            json!({"path": "a.txt", "n": [1, 2.5, null]}),
        )],
    );
    reply.content.insert(
        0,
        Block::Thinking {
            thinking: "the user wants a file".into(),
            signature: Some("sig==".into()),
        },
    );
    reply.usage = Some(Usage {
        input: 120,
        output: 30,
        cached: 100,
        cost: Some(0.25),
    });
    reply.model = Some("model-x".into());
    let reply = s
        .append(EntryBody::Message(reply))
        .or_fail(ok("an assistant message with thinking and a tool call"));
    s.append(EntryBody::Message(Message {
        role: Role::Tool,
        content: vec![Block::ToolResult {
            call_id: "c1".into(),
            content: vec![
                Block::Text {
                    text: "contents of a.txt".into(),
                },
                Block::Image {
                    media_type: "image/png".into(),
                    data: "iVBORw0KGgo=".into(),
                },
                Block::Blob {
                    uri: "file:///tmp/a.txt".into(),
                    media_type: Some("text/plain".into()),
                    size: Some(17),
                    sha256: Some("ab".repeat(32)),
                },
            ],
            is_error: false,
            code: Some("OK".into()),
        }],
        usage: None,
        model: None,
        stop_reason: None,
    }))
    .or_fail(ok("a tool result with text, image and blob blocks"));
    (hello, reply)
}

/// Every other entry kind (the compaction keeping from `reply`, a label on
/// `hello`), then a checkout back to `hello` and a label removal.
fn append_other_entries(s: &Session, hello: &Appended, reply: &Appended) {
    for (what, body) in [
        (
            "app_state set",
            EntryBody::AppState(AppStateChange::Set(
                json!({"step": 1, "files": ["a.txt"], "nested": {"k": true}}),
            )),
        ),
        (
            "app_state patch",
            EntryBody::AppState(AppStateChange::Patch(
                json!({"step": 2, "files": null, "nested": {"j": 1}}),
            )),
        ),
        (
            "settings",
            EntryBody::Settings(Settings {
                values: json!({"model": "m2", "temperature": 0.5, "gone": null})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            }),
        ),
        (
            "label",
            EntryBody::Label(Label {
                name: "start".into(),
                target: hello.id.clone(),
            }),
        ),
        (
            "session_info",
            EntryBody::SessionInfo(SessionInfo {
                title: Some("renamed ✓".into()),
            }),
        ),
        (
            "a visible custom entry",
            EntryBody::Custom(Custom {
                namespace: "test.notes".into(),
                visible: true,
                content: json!("remember the milk"),
            }),
        ),
        (
            "an invisible custom entry",
            EntryBody::Custom(Custom {
                namespace: "test.state".into(),
                visible: false,
                content: json!({"a": [1, 2, 3]}),
            }),
        ),
        (
            "an ignorable entry of an unknown kind",
            EntryBody::Ignored(Unknown {
                kind: "future_entry".into(),
                data: json!({"from": "the future"}),
            }),
        ),
        (
            "compaction",
            EntryBody::Compaction(Compaction {
                summary: "the user asked for a.txt; it was read".into(),
                first_kept: reply.id.clone(),
                tokens_before: Some(4096),
            }),
        ),
    ] {
        s.append(body).or_fail(ok(what));
    }
    s.checkout(
        hello.id.as_ref(),
        Some("read a.txt on another branch".into()),
    )
    .or_fail(ok("checkout"));
    s.append(EntryBody::Message(Message::text(Role::User, "again")))
        .or_fail(ok("a message on the new branch"));
    s.label("start", None).or_fail(ok("a label removal"));
}

/// An operation with a record of every operation kind, and an ignorable
/// operation record of an unknown kind.
fn append_every_op_record(s: &Session) {
    let op = s
        .start_operation(Message::text(Role::User, "charge me and look it up"))
        .or_fail("start an operation");
    let ticket = op
        .model_attempt(Some("provider"), Some("model-x"))
        .or_fail(ok("model_attempted"));
    let entry = ticket.entry().clone();
    op.record_assistant(
        ticket,
        calls(
            "",
            &[
                ("c2", "charge", json!({"credits": 10})),
                ("c3", "lookup", json!({})),
            ],
        ),
    )
    .or_fail(ok("the attempt's reply"));
    op.settle_usage(
        &entry,
        Usage {
            input: 5,
            output: 6,
            cached: 0,
            cost: None,
        },
        Some(321),
    )
    .or_fail(ok("usage_settled"));
    op.request_approval("c2", "charge")
        .or_fail(ok("approval_requested"));
    op.resolve_approval("c2", true, Some("tester"))
        .or_fail(ok("approval_resolved"));
    let t1 = op
        .dispatch_tool("c2", EffectClass::SideEffect)
        .or_fail(ok("tool_dispatched"));
    op.record_result(t1, ToolOutput::text("charged 10"))
        .or_fail(ok("the dispatched call's result"));
    op.request_approval("c3", "lookup")
        .or_fail(ok("a second approval_requested"));
    op.resolve_approval("c3", false, None)
        .or_fail(ok("a denial"));
    op.deny("c3", "denied by the tester")
        .or_fail(ok("the denied call's result"));
    op.queue_input("and also this").or_fail(ok("input_queued"));
    s.append_op(OpRecord::Ignored(Unknown {
        kind: "future_op".into(),
        data: json!([1, "two"]),
    }))
    .or_fail(ok("an ignorable operation record of an unknown kind"));
    op.finish(Outcome::Completed, None)
        .or_fail(ok("op_finished"));
}

/// Every entry kind and operation record kind, written through the
/// backend, reads back byte for byte: through the raw seam (the visitor of
/// `Backend::open` gets the exact lines, in order) and through sessions
/// opened for reading and for writing on another handle, with the same
/// context, labels, title, tree and verdict. A new session's header is
/// visible to another handle before anything else is appended.
pub fn every_record_kind_round_trips_byte_for_byte(f: &dyn Fixture) {
    let name = f.name();
    let s = store(f)
        .create(NewSession {
            title: Some("every kind".into()),
            cwd: Some("/work/ü".into()),
            app_state: Some(json!({"start": true})),
            ..NewSession::default()
        })
        .or_fail(format_args!("{name}: create a session"));
    let id = s.id().clone();
    let (header_only, torn) = stored_lines(&*f.reopen(), &id, Access::Read);
    assert_eq!(
        header_only,
        raw_records(&s),
        "{name}: a new session's header is stored at once"
    );
    assert_eq!(torn, None);

    append_every_kind(&s);
    let written = raw_records(&s);
    let before = (
        s.context(),
        s.labels(),
        s.title(),
        s.nodes(),
        s.op_records(),
        s.verdict().or_fail("the verdict"),
    );
    let decoded: Vec<_> = (0..s.len())
        .map(|seq| s.record(seq).or_fail("decode a record"))
        .collect();
    // Readers on another handle see every record while the writer is open.
    let (lines, torn) = stored_lines(&*f.reopen(), &id, Access::Read);
    assert!(
        lines == written,
        "{name}: a reader on another handle sees the exact bytes written"
    );
    assert_eq!(torn, None, "{name}: no torn tail after clean appends");
    drop(s);

    for access in [Access::Read, Access::Write] {
        let (lines, torn) = stored_lines(&*f.reopen(), &id, access);
        assert!(
            lines == written,
            "{name}: the raw seam returns the exact bytes written ({access:?})"
        );
        assert_eq!(torn, None);
        let again = other_store(f)
            .open(&id, access)
            .or_fail(format_args!("{name}: reopen ({access:?})"));
        assert!(
            raw_records(&again) == written,
            "{name}: Session::raw_record returns the exact bytes ({access:?})"
        );
        for (seq, rec) in decoded.iter().enumerate() {
            assert_eq!(
                &again.record(seq as u64).or_fail("decode a record again"),
                rec,
                "{name}: record {seq} decodes as written"
            );
        }
        let after = (
            again.context(),
            again.labels(),
            again.title(),
            again.nodes(),
            again.op_records(),
            again.verdict().or_fail("the verdict"),
        );
        assert_eq!(after, before, "{name}: the session reopens as it was");
        assert_eq!(again.title().as_deref(), Some("renamed ✓"));
    }
}

/// Records of several mebibytes (bigger than any read buffer) and
/// thousands of small records written in one burst read back intact, and
/// appends continue after them at the right `seq`.
pub fn large_and_many_records_round_trip(f: &dyn Fixture) {
    let name = f.name();
    let s = store(f)
        .create(NewSession::default())
        .or_fail(format_args!("{name}: create"));
    let id = s.id().clone();
    let chunk = "abc \"quoted\" \\ ü 🐖\n";
    let big: String = chunk.repeat((3 << 20) / chunk.len());
    s.append(EntryBody::Message(Message::text(Role::User, big.clone())))
        .or_fail(format_args!("{name}: append a 3 MiB message"));
    s.set_durability(Durability::Buffered);
    for i in 0..2000 {
        s.append(EntryBody::Message(Message::text(
            Role::Assistant,
            format!("{i}"),
        )))
        .or_fail(format_args!("{name}: append small record {i}"));
    }
    s.sync().or_fail(format_args!("{name}: sync"));
    s.append(EntryBody::Message(Message::text(Role::User, big.clone())))
        .or_fail(format_args!("{name}: append another big message"));
    s.sync().or_fail(format_args!("{name}: sync"));
    let written = raw_records(&s);
    drop(s);

    let (lines, _) = stored_lines(&*f.reopen(), &id, Access::Read);
    assert_eq!(lines.len(), 2003, "{name}: every record is stored");
    assert!(lines == written, "{name}: large records are byte-identical");
    let again = other_store(f)
        .open(&id, Access::Write)
        .or_fail(format_args!("{name}: reopen for writing"));
    assert_eq!(again.len(), 2003);
    let last = again.record(2002).or_fail("decode the last record");
    match last.body {
        crate::record::Body::Entry(e) => match e.body {
            EntryBody::Message(m) => assert!(m.plain_text() == big, "{name}: big text intact"),
            other => panic!("{name}: the last record is a {}", other.kind()),
        },
        other => panic!("{name}: the last record is not an entry: {other:?}"),
    }
    let a = again
        .append(EntryBody::Message(Message::text(Role::User, "after")))
        .or_fail(format_args!("{name}: append after reopening"));
    assert_eq!(a.seq, 2003, "{name}: appends continue at the next seq");
}
