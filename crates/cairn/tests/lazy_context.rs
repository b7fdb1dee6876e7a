//! Messages kept as where their lines are (the file backend, entries its
//! persisted index covers): an open through the index reads no message
//! entry; `ContextMessage::message` reads, checks and decodes it the first
//! time, so a record damaged or changed after the open is an error naming
//! its line — never another message — and one read once stays read.

#![allow(clippy::expect_used)]

use std::fs;
use std::path::PathBuf;

use cairn::testkit::build::{calls, tool_result, user};
use cairn::{Access, AppendError, EntryBody, Invalid, NewSession, ReadError, Session, Store};
use pretty_assertions::assert_eq;
use serde_json::json;

struct Fixture {
    home: tempfile::TempDir,
    id: cairn::SessionId,
}

impl Fixture {
    /// A closed session holding `bodies`, its persisted index saved.
    fn new(bodies: Vec<EntryBody>) -> Fixture {
        let home = tempfile::tempdir().expect("tempdir");
        let store = Store::open_dir(home.path());
        let s = store.create(NewSession::default()).expect("create");
        for b in bodies {
            s.append(b).expect("append");
        }
        assert!(s.save_index(), "the index is saved");
        let id = s.id().clone();
        Fixture { home, id }
    }

    /// Ten user messages of the same length: "message 0" … "message 9".
    fn ten() -> Fixture {
        Fixture::new((0..10).map(|i| user(&format!("message {i}"))).collect())
    }

    fn open(&self, access: Access) -> Session {
        Store::open_dir(self.home.path())
            .open(&self.id, access)
            .expect("open")
    }

    fn log(&self) -> PathBuf {
        self.home
            .path()
            .join("sessions")
            .join(format!("{}.jsonl", self.id))
    }

    /// The byte offset where each line of the log starts.
    fn line_starts(&self) -> Vec<usize> {
        let bytes = fs::read(self.log()).expect("read");
        let mut starts = vec![0];
        starts.extend(
            bytes
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n')
                .map(|(i, _)| i + 1),
        );
        starts.pop();
        starts
    }

    /// Rewrites the log in place (the open session's handle sees it).
    fn rewrite(&self, f: impl FnOnce(&mut Vec<u8>)) {
        let mut bytes = fs::read(self.log()).expect("read");
        f(&mut bytes);
        fs::write(self.log(), bytes).expect("write");
    }

    /// Flips a byte inside record `seq`'s line.
    fn damage(&self, seq: usize) {
        let at = self.line_starts()[seq] + 30;
        self.rewrite(|b| b[at] ^= 0x20);
    }
}

fn text(s: &Session, i: usize) -> Result<String, ReadError> {
    Ok(s.context().messages()[i].message()?.plain_text())
}

#[test]
fn an_open_reads_no_message_and_one_damaged_after_it_is_reported_when_read() {
    let f = Fixture::ten();
    let s = f.open(Access::Read);
    // Record 4 (seq 4: the header is seq 0) holds the fourth message.
    f.damage(4);
    let ctx = s.context();
    assert_eq!(ctx.messages().len(), 10, "counting reads nothing");
    assert_eq!(text(&s, 0).expect("intact"), "message 0");
    match ctx.messages()[3].message() {
        Err(ReadError::Damaged(d)) => {
            assert_eq!(d.line, 5, "{d:?}");
            assert_eq!(d.offset as usize, f.line_starts()[4], "{d:?}");
            let said = d.to_string();
            assert!(said.contains(&f.log().display().to_string()), "{said}");
            assert!(said.contains("cairn fsck"), "{said}");
        }
        other => panic!("expected damage, got {other:?}"),
    }
    assert_eq!(text(&s, 9).expect("intact"), "message 9");
}

#[test]
fn a_message_swapped_for_another_valid_line_is_an_error_never_the_other_message() {
    let f = Fixture::ten();
    let starts = f.line_starts();
    let (a, b) = (starts[2]..starts[3], starts[3]..starts[4]);
    assert_eq!(a.len(), b.len(), "the fixture's lines are the same length");
    let s = f.open(Access::Read);
    // Both lines stay intact (their checksums hold), each at the other's place.
    f.rewrite(|bytes| {
        let first = bytes[a.clone()].to_vec();
        bytes.copy_within(b.clone(), a.start);
        bytes[b.start..b.end].copy_from_slice(&first);
    });
    for i in [1, 2] {
        match text(&s, i) {
            Err(ReadError::Damaged(d)) => {
                assert!(d.problem.contains("seq"), "{d:?}");
                assert_eq!(d.line as usize, i + 2, "{d:?}");
            }
            other => panic!("message {i}: expected an error, got {other:?}"),
        }
    }
}

#[test]
fn a_message_read_once_is_kept_when_the_file_changes_later() {
    let f = Fixture::ten();
    let s = f.open(Access::Read);
    let ctx = s.context();
    assert_eq!(text(&s, 5).expect("read"), "message 5");
    f.damage(6);
    assert_eq!(
        ctx.messages()[5].message().expect("kept").plain_text(),
        "message 5"
    );
    assert_eq!(
        text(&s, 5).expect("kept"),
        "message 5",
        "a new snapshot too"
    );
}

#[test]
fn the_verdict_over_a_message_damaged_after_the_open_is_an_error_not_a_guess() {
    let f = Fixture::new(vec![
        user("go"),
        EntryBody::Message(calls("", &[("call-1", "read", json!({}))])),
    ]);
    let s = f.open(Access::Read);
    f.damage(2);
    assert!(
        matches!(s.verdict(), Err(ReadError::Damaged(_))),
        "{:?}",
        s.verdict()
    );
}

#[test]
fn tool_results_appended_after_the_open_are_checked_against_the_calls_before_it() {
    let f = Fixture::new(vec![
        user("go"),
        EntryBody::Message(calls("", &[("call-1", "read", json!({}))])),
    ]);
    let s = f.open(Access::Write);
    s.append(tool_result("call-1", "done")).expect("answers it");
    match s.append(tool_result("call-1", "again")) {
        Err(AppendError::Invalid(Invalid::AlreadyAnswered(c))) => assert_eq!(c, "call-1"),
        other => panic!("expected AlreadyAnswered, got {other:?}"),
    }
    match s.append(tool_result("call-9", "what?")) {
        Err(AppendError::Invalid(Invalid::NoSuchCall(c))) => assert_eq!(c, "call-9"),
        other => panic!("expected NoSuchCall, got {other:?}"),
    }
    match s.append(EntryBody::Message(calls(
        "",
        &[("call-1", "read", json!({}))],
    ))) {
        Err(AppendError::Invalid(Invalid::CallIdReused(c))) => assert_eq!(c, "call-1"),
        other => panic!("expected CallIdReused, got {other:?}"),
    }
}

#[test]
fn a_tool_result_after_a_message_damaged_since_the_open_is_refused_with_the_damage() {
    let f = Fixture::new(vec![
        user("go"),
        EntryBody::Message(calls("", &[("call-1", "read", json!({}))])),
    ]);
    let s = f.open(Access::Write);
    f.damage(2);
    match s.append(tool_result("call-1", "done")) {
        Err(AppendError::Read(ReadError::Damaged(d))) => assert_eq!(d.line, 3, "{d:?}"),
        other => panic!("expected the damage, got {other:?}"),
    }
}

#[test]
fn a_context_kept_after_its_session_closed_reads_its_messages_and_holds_no_lock() {
    let f = Fixture::ten();
    let s = f.open(Access::Write);
    let ctx = s.context();
    drop(s);
    // Another writer can take the session while the snapshot lives.
    let again = f.open(Access::Write);
    again.append(user("later")).expect("append");
    assert_eq!(ctx.messages().len(), 10);
    assert_eq!(
        ctx.messages()[7].message().expect("read").plain_text(),
        "message 7"
    );
    drop(again);
}

#[test]
fn an_open_without_the_index_decodes_the_messages_it_parsed() {
    let f = Fixture::ten();
    fs::remove_file(f.log().with_extension("idx")).expect("remove the index");
    let s = f.open(Access::Read);
    f.damage(4);
    // Every line was parsed and decoded by the open (FORMAT.md §7).
    assert_eq!(text(&s, 3).expect("decoded at open"), "message 3");
}

#[test]
fn messages_appended_after_the_index_are_decoded_at_open() {
    let f = Fixture::ten();
    {
        let s = f.open(Access::Write);
        s.append(user("message x")).expect("append");
    }
    let s = f.open(Access::Read);
    let starts = f.line_starts();
    f.damage(starts.len() - 1);
    f.damage(5);
    assert_eq!(text(&s, 10).expect("decoded at open"), "message x");
    assert!(text(&s, 4).is_err(), "an indexed one is read now");
}

#[test]
fn contexts_compare_by_their_decoded_messages() {
    let f = Fixture::ten();
    let a = f.open(Access::Read).context();
    let b = f.open(Access::Read).context();
    // Neither has read a message: equality reads them (from two handles).
    assert_eq!(a, b);
    let folded = cairn::Context::fold(
        &json!({}),
        &f.open(Access::Read)
            .branch_entries(a.leaf())
            .expect("entries")
            .into_iter()
            .map(|(e, _)| e)
            .collect::<Vec<_>>(),
        a.leaf(),
    );
    assert_eq!(*a, folded, "as the rule folds it");
}

#[test]
fn the_model_view_of_a_context_with_a_message_damaged_since_the_open_is_refused() {
    let f = Fixture::ten();
    let s = f.open(Access::Read);
    f.damage(7);
    match cairn::view::ViewBuilder::new(None).build(None, &s.context()) {
        Err(cairn::view::ViewError::Read(ReadError::Damaged(d))) => assert_eq!(d.line, 8, "{d:?}"),
        other => panic!("expected the damage, got {other:?}"),
    }
}

#[test]
fn a_context_stream_hands_over_messages_read_and_stops_at_damage() {
    let f = Fixture::ten();
    // The stream's open through the index reads no message either.
    let stream = Store::open_dir(f.home.path())
        .open_context_stream(&f.id)
        .expect("open");
    f.damage(6);
    let mut texts = Vec::new();
    let got = stream.each_message(&mut |m| {
        texts.push(m.message().expect("handed over read").plain_text());
    });
    assert!(
        matches!(got, Err(ReadError::Damaged(ref d)) if d.line == 7),
        "{got:?}"
    );
    assert_eq!(
        texts,
        [
            "message 0",
            "message 1",
            "message 2",
            "message 3",
            "message 4"
        ]
    );
}
