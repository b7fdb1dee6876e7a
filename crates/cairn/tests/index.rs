//! The persisted index (`docs/STORES.md` §4): written by an open that
//! had to parse a long log, used by the next open, and never trusted over
//! the log — deleted, damaged, cut short, stale or foreign, it is rebuilt
//! with a line in the open report, and an open through it sees exactly the
//! records a full open sees, damage included.

#![allow(clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};

use cairn::testkit::build::{assistant, user};
use cairn::testkit::indexed;
use cairn::{
    Access, AppStateChange, Compaction, Durability, EntryBody, NewSession, OpenError, Session,
    SessionId, Store,
};
use pretty_assertions::assert_eq;
use serde_json::json;

/// Records beyond which an open writes an index (`index::INDEX_AFTER_RECORDS`).
const LONG: usize = 1100;

struct Fixture {
    home: tempfile::TempDir,
    id: SessionId,
}

impl Fixture {
    /// A session of `LONG` messages with a compaction, app-state patches,
    /// settings and a label, closed, without an index (the one its writer
    /// saved at close is deleted).
    fn new() -> Fixture {
        let home = tempfile::tempdir().expect("tempdir");
        let store = Store::open_dir(home.path());
        let s = store.create(NewSession::default()).expect("create");
        s.set_durability(Durability::Buffered);
        let mut kept = None;
        for i in 0..LONG {
            let body = if i % 2 == 0 {
                user(&format!("question {i}"))
            } else {
                assistant(&format!("answer {i}"))
            };
            let a = s.append(body).expect("append");
            if i == LONG - 40 {
                kept = a.id;
            }
            if i % 100 == 7 {
                s.append(EntryBody::AppState(AppStateChange::Patch(
                    json!({ "turn": i }),
                )))
                .expect("state");
            }
            if i % 300 == 11 {
                s.append(EntryBody::Settings(cairn::Settings {
                    values: json!({ "model": format!("m{i}") })
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                }))
                .expect("settings");
            }
        }
        s.append(EntryBody::Compaction(Compaction {
            summary: "the story so far".into(),
            first_kept: kept,
            tokens_before: None,
        }))
        .expect("compact");
        s.append(user("after the compaction")).expect("append");
        let leaf = s.leaf().expect("leaf");
        s.label("here", Some(&leaf)).expect("label");
        s.sync().expect("sync");
        let id = s.id().clone();
        drop(s);
        let f = Fixture { home, id };
        fs::remove_file(f.index()).expect("the closing writer saved an index");
        f
    }

    /// A fixture opened once by a writer (which writes the index), then
    /// given five more messages the index does not cover.
    fn indexed_then_five_more() -> Fixture {
        let f = Fixture::new();
        drop(f.open(Access::Write).expect("index"));
        let s = f.open(Access::Write).expect("open");
        for i in 0..5 {
            s.append(user(&format!("more {i}"))).expect("append");
        }
        drop(s);
        f
    }

    fn store(&self) -> Store {
        Store::open_dir(self.home.path())
    }

    fn dir(&self) -> PathBuf {
        self.home.path().join("sessions")
    }

    fn log(&self) -> PathBuf {
        self.dir().join(format!("{}.jsonl", self.id))
    }

    fn index(&self) -> PathBuf {
        self.dir().join(format!("{}.idx", self.id))
    }

    /// The branch, read without the index.
    fn reference_branch(&self) -> Vec<cairn::EntryId> {
        let saved = fs::read(self.index()).ok();
        let _ = fs::remove_file(self.index());
        let s = self.open(Access::Read).expect("open");
        let branch = s.branch();
        drop(s);
        if let Some(bytes) = saved {
            fs::write(self.index(), bytes).expect("restore index");
        }
        branch
    }

    fn open(&self, access: Access) -> Result<Session, OpenError> {
        self.store().open(&self.id, access)
    }

    /// Opens read-only with no index at all: the reference every open
    /// through an index must equal.
    fn reference(&self) -> View {
        let saved = fs::read(self.index()).ok();
        let _ = fs::remove_file(self.index());
        let s = self.open(Access::Read).expect("open");
        let v = View::of(&s);
        drop(s);
        match saved {
            Some(bytes) => fs::write(self.index(), bytes).expect("restore index"),
            None => {
                let _ = fs::remove_file(self.index());
            }
        }
        v
    }
}

/// What an open shows.
#[derive(Debug, PartialEq)]
struct View {
    records: u64,
    leaf: Option<String>,
    texts: Vec<String>,
    state: serde_json::Value,
    settings: serde_json::Map<String, serde_json::Value>,
    labels: Vec<String>,
    title: Option<String>,
    branch: usize,
}

impl View {
    /// What the context alone shows (no walk of the whole branch).
    fn of_context(s: &Session) -> (Vec<String>, serde_json::Value, Option<String>) {
        let ctx = s.context();
        let texts = ctx
            .messages()
            .iter()
            .map(|m| {
                m.message()
                    .expect("a context message reads back")
                    .plain_text()
            })
            .collect();
        (
            texts,
            ctx.app_state().clone(),
            s.leaf().map(|l| l.to_string()),
        )
    }

    fn of_context_of(&self) -> (Vec<String>, serde_json::Value, Option<String>) {
        (self.texts.clone(), self.state.clone(), self.leaf.clone())
    }

    fn of(s: &Session) -> View {
        let ctx = s.context();
        View {
            records: s.len(),
            leaf: s.leaf().map(|l| l.to_string()),
            texts: ctx
                .messages()
                .iter()
                .map(|m| m.message().expect("read the message").plain_text())
                .collect(),
            state: ctx.app_state().clone(),
            settings: ctx.settings().clone(),
            labels: ctx.labels().keys().cloned().collect(),
            title: s.title(),
            branch: s.branch().len(),
        }
    }
}

fn note(s: &Session) -> String {
    s.open_report().index.clone().unwrap_or_default()
}

/// Opens the fixture; its open report's index line must contain `says`.
fn open_saying(f: &Fixture, access: Access, says: &str) -> Session {
    let s = f.open(access).expect("open");
    assert!(note(&s).contains(says), "expected {says:?}: {}", note(&s));
    s
}

/// The byte offset after every newline of `bytes`.
fn line_ends(bytes: &[u8]) -> Vec<usize> {
    bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .map(|(i, _)| i + 1)
        .collect()
}

fn flip(path: &Path, at: usize) {
    let mut b = fs::read(path).expect("read");
    b[at] ^= 0x20;
    fs::write(path, b).expect("write");
}

/// Flips a byte of a message in the kept range (its line is 20 from the
/// end); returns that line's number.
fn damage_a_kept_message(f: &Fixture) -> usize {
    let ends = line_ends(&fs::read(f.log()).expect("read"));
    flip(&f.log(), ends[ends.len() - 20] + 40);
    ends.len() - 18
}

#[test]
fn a_long_open_writes_the_index_and_the_next_open_uses_it() {
    let f = Fixture::new();
    assert!(!f.index().exists());
    let first = f.open(Access::Write).expect("open");
    assert!(
        note(&first).starts_with("index written"),
        "{}",
        note(&first)
    );
    let want = View::of(&first);
    drop(first);
    assert!(f.index().exists());
    for access in [Access::Read, Access::Write] {
        let s = open_saying(&f, access, "index used");
        assert_eq!(View::of(&s), want);
    }
    assert_eq!(f.reference(), want);
}

#[test]
fn appends_after_the_index_are_verified_and_reindexed_only_when_many() {
    let f = Fixture::indexed_then_five_more();
    let s = open_saying(&f, Access::Read, "5 verified after it");
    assert_eq!(View::of(&s), f.reference());
}

#[test]
fn deleting_the_index_is_safe() {
    let f = Fixture::new();
    drop(f.open(Access::Write).expect("index"));
    let want = f.reference();
    fs::remove_file(f.index()).expect("delete");
    let s = f.open(Access::Read).expect("open");
    assert_eq!(s.open_report().index, None, "a reader writes no index");
    assert_eq!(View::of(&s), want);
    drop(s);
    assert!(!f.index().exists());
    let s = open_saying(&f, Access::Write, "index written");
    assert_eq!(View::of(&s), want);
}

#[test]
fn a_damaged_or_cut_index_is_rebuilt_and_the_report_says_why() {
    let f = Fixture::new();
    drop(f.open(Access::Write).expect("index"));
    let want = f.reference();
    let good = fs::read(f.index()).expect("read");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("checksum", {
            // A byte of the head (the session id), which every open reads.
            let mut b = good.clone();
            b[20] ^= 1;
            b
        }),
        ("cut short", good[..good.len() / 3].to_vec()),
        ("shorter than its header", Vec::new()),
        ("magic", {
            let mut b = good.clone();
            b[0] = b'X';
            b
        }),
    ];
    for (why, bytes) in cases {
        fs::write(f.index(), &bytes).expect("write");
        let s = f.open(Access::Write).expect("open");
        let n = note(&s);
        assert!(
            n.starts_with("index not used") && n.contains("rebuilt"),
            "{n}"
        );
        assert!(n.contains(why), "{why}: {n}");
        assert_eq!(View::of(&s), want, "{why}");
        drop(s);
        // Rebuilt as it was, but for the id table's seed, drawn anew.
        let s = open_saying(&f, Access::Read, "index used");
        assert_eq!(View::of(&s), want, "{why}, through the rebuilt index");
        let rebuilt = fs::read(f.index()).expect("read");
        assert_eq!(rebuilt.len(), good.len(), "{why}");
    }
}

#[test]
fn an_index_longer_than_the_log_is_stale_and_never_shows_records_the_log_lost() {
    let f = Fixture::new();
    drop(f.open(Access::Write).expect("index"));
    // The log loses its last records (as if restored from an older copy).
    let bytes = fs::read(f.log()).expect("read");
    let cut = line_ends(&bytes)[600];
    fs::write(f.log(), &bytes[..cut]).expect("cut");
    let s = open_saying(&f, Access::Read, "shorter than");
    assert_eq!(s.len(), 601);
    assert_eq!(View::of(&s), f.reference());
}

#[test]
fn an_index_of_other_lines_is_stale() {
    let f = Fixture::new();
    drop(f.open(Access::Write).expect("index"));
    let idx = fs::read(f.index()).expect("read");
    // The same session written again with other content of at least the
    // same length: the last indexed line differs.
    let store = f.store();
    store.remove(&f.id).expect("remove");
    let s = store
        .create(NewSession {
            id: Some(f.id.clone()),
            ..NewSession::default()
        })
        .expect("create");
    s.set_durability(Durability::Buffered);
    for i in 0..LONG + 200 {
        s.append(user(&format!("another story, line {i}")))
            .expect("append");
    }
    drop(s);
    fs::write(f.index(), idx).expect("put the old index back");
    let s = open_saying(&f, Access::Read, "is not the one it indexed");
    assert_eq!(View::of(&s), f.reference());

    // An index of another session is not used either.
    let other = Fixture::new();
    drop(other.open(Access::Write).expect("index"));
    fs::copy(other.index(), f.index()).expect("copy");
    open_saying(&f, Access::Read, "another session");
}

#[test]
fn damage_after_the_index_refuses_to_open() {
    let f = Fixture::indexed_then_five_more();
    let bytes = fs::read(f.log()).expect("read");
    // A flipped bit in the second of the five new lines (not the tail).
    let ends = line_ends(&bytes);
    let second_new = ends[ends.len() - 5];
    flip(&f.log(), second_new + 30);
    for access in [Access::Read, Access::Write] {
        match f.open(access) {
            Err(OpenError::Damaged(d)) => assert_eq!(d.line as usize, ends.len() - 3),
            other => panic!("expected damage, got {other:?}"),
        }
    }
}

#[test]
fn damage_in_an_indexed_message_of_the_context_is_reported_when_read_and_fsck_finds_it() {
    let f = Fixture::new();
    drop(f.open(Access::Write).expect("index"));
    let line = damage_a_kept_message(&f);
    // The open through the index reads no message entry; reading the
    // damaged one fails with its line, never hands out another message.
    let s = f.open(Access::Read).expect("open");
    let ctx = s.context();
    let damaged: Vec<_> = ctx
        .messages()
        .iter()
        .filter_map(|m| m.message().err())
        .collect();
    match damaged.as_slice() {
        [cairn::ReadError::Damaged(d)] => assert_eq!(d.line as usize, line, "{d:?}"),
        other => panic!("expected one damaged message, got {other:?}"),
    }
    assert!(s.verdict().is_err(), "the verdict reads every message");
    let report = cairn::fsck::check(&**f.store().backend(), &f.id).expect("fsck");
    assert!(!report.problems.is_empty(), "fsck reads every line");
}

#[test]
fn a_short_session_writes_no_index() {
    let home = tempfile::tempdir().expect("tempdir");
    let store = Store::open_dir(home.path());
    let s = store.create(NewSession::default()).expect("create");
    s.append(EntryBody::Message(cairn::Message::text(
        cairn::Role::User,
        "hi",
    )))
    .expect("append");
    let id = s.id().clone();
    drop(s);
    let s = store.open(&id, Access::Write).expect("open");
    assert_eq!(s.open_report().index, None);
    assert!(!home.path().join(format!("sessions/{id}.idx")).exists());
}

#[test]
fn a_writer_that_closes_after_many_durable_appends_writes_the_index() {
    let f = Fixture::new();
    let want = f.reference();
    // A writer that appends little after the index does not rewrite it.
    drop(f.open(Access::Write).expect("index"));
    let before = fs::read(f.index()).expect("read");
    let s = f.open(Access::Write).expect("open");
    s.append(user("one more")).expect("append");
    s.sync().expect("sync");
    drop(s);
    assert_eq!(fs::read(f.index()).expect("read"), before);
    // One that appends many, all durable, does: the next open parses nothing.
    let s = f.open(Access::Write).expect("open");
    for i in 0..LONG {
        s.append(user(&format!("grown {i}"))).expect("append");
    }
    s.sync().expect("sync");
    let grown = View::of(&s);
    drop(s);
    assert_ne!(grown, want);
    let s = open_saying(&f, Access::Read, "0 verified after it");
    assert_eq!(View::of(&s), grown);
    assert_eq!(f.reference(), grown);
}

#[test]
fn a_writer_that_closes_with_records_not_yet_durable_saves_no_index() {
    let f = Fixture::new();
    let s = f.open(Access::Write).expect("open");
    s.set_durability(Durability::Buffered);
    fs::remove_file(f.index()).expect("the open wrote one");
    for i in 0..LONG {
        s.append(user(&format!("buffered {i}"))).expect("append");
    }
    drop(s);
    assert!(
        !f.index().exists(),
        "an index never covers records a power loss could take"
    );
}

#[test]
fn a_branch_moved_away_from_the_checkpoint_folds_the_same_as_without_the_index() {
    let f = Fixture::new();
    drop(f.open(Access::Write).expect("index"));
    // Check out an early entry (before the compaction, the app-state
    // patches and the settings): the checkpoint's branch is left.
    let s = f.open(Access::Write).expect("open");
    let old_leaf = s.leaf().expect("leaf");
    let early = s.branch()[30].clone();
    s.checkout(Some(&early), None).expect("checkout");
    s.append(user("on another branch")).expect("append");
    s.sync().expect("sync");
    let want = View::of(&s);
    drop(s);
    let s = open_saying(&f, Access::Read, "index used");
    assert_eq!(View::of(&s), want);
    assert_eq!(f.reference(), want);
    // And moving back to the checkpoint's branch from there.
    drop(s);
    let s = f.open(Access::Write).expect("open");
    s.checkout(Some(&old_leaf), None).expect("checkout back");
    let back = View::of(&s);
    drop(s);
    assert_eq!(f.reference(), back);
    assert_eq!(back.state, json!({ "turn": 1007 }));
}

#[test]
fn a_checkpoint_that_does_not_fit_the_tree_is_not_trusted() {
    let f = Fixture::new();
    drop(f.open(Access::Write).expect("index"));
    let want = f.reference();
    let mut idx = fs::read(f.index()).expect("read");
    // Point the checkpoint's first app-state entry at entry 1 (a message),
    // keeping the length, and seal it with a valid checksum: only the
    // check against the tree can refuse it.
    let key = b"\"state_at\":[";
    let at = idx
        .windows(key.len())
        .position(|w| w == key)
        .expect("the checkpoint names its app-state entries")
        + key.len();
    let digits = idx[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    for (i, b) in idx[at..at + digits].iter_mut().enumerate() {
        *b = if i + 1 == digits { b'1' } else { b' ' };
    }
    let body = Layout::of(&idx).blocks_at - 4;
    let crc = crc32c::crc32c(&idx[..body]);
    idx[body..body + 4].copy_from_slice(&crc.to_le_bytes());
    fs::write(f.index(), &idx).expect("write");
    let s = open_saying(&f, Access::Read, "checkpoint did not fit");
    assert_eq!(View::of(&s), want);
}

#[test]
fn an_index_of_the_old_layout_is_rebuilt() {
    let f = Fixture::new();
    drop(f.open(Access::Write).expect("index"));
    let want = f.reference();
    let mut idx = fs::read(f.index()).expect("read");
    idx[8..12].copy_from_slice(&1u32.to_le_bytes());
    fs::write(f.index(), &idx).expect("write");
    let s = open_saying(&f, Access::Write, "layout version 1");
    assert_eq!(View::of(&s), want);
}

/// Where an index's sections are (`docs/STORES.md` §4, layout 3).
struct Layout {
    /// The first byte after the head: the length blocks start here.
    blocks_at: usize,
    records: usize,
    /// Where the id table's blocks start (the row blocks end).
    slots_at: usize,
}

impl Layout {
    fn of(idx: &[u8]) -> Layout {
        let u32_at =
            |at: usize| u32::from_le_bytes(idx[at..at + 4].try_into().expect("4")) as usize;
        let head = 16 + 1 + idx[16] as usize; // preamble, then the session id
        let records = u32_at(head);
        let slots = u32_at(head + 8 + 8 + 4 + 4);
        Layout {
            blocks_at: 16 + u32_at(12),
            records,
            slots_at: idx.len() - slots * 8,
        }
    }
}

#[test]
fn a_damaged_block_read_at_open_is_rebuilt_and_the_report_says_which() {
    let f = Fixture::new();
    drop(f.open(Access::Write).expect("index"));
    let want = f.reference();
    let good = fs::read(f.index()).expect("read");
    let l = Layout::of(&good);
    // The last line's length (every open checks the last indexed line),
    // and the last id of the last row block (the leaf's: the projection
    // is restored from it).
    let cases = [
        ("line length block", l.blocks_at + l.records * 4 - 2),
        ("row block", l.slots_at - 1),
    ];
    for (what, at) in cases {
        let mut b = good.clone();
        b[at] ^= 0x01;
        for access in [Access::Read, Access::Write] {
            fs::write(f.index(), &b).expect("write");
            let s = f.open(access).expect("open");
            let n = note(&s);
            assert!(
                n.starts_with("index not used") && n.contains(what),
                "{what}: {n}"
            );
            assert!(n.contains("does not match its checksum"), "{what}: {n}");
            assert_eq!(View::of(&s), want, "{what}");
        }
        let s = open_saying(&f, Access::Read, "index used");
        assert_eq!(View::of(&s), want, "{what}, through the rebuilt index");
    }
}

#[test]
fn a_damaged_row_block_read_late_fails_that_read_and_never_shows_a_wrong_record() {
    // Messages only, then a compaction near the end: the open walks from
    // the leaf back to the compaction and never reads the first row block.
    let home = tempfile::tempdir().expect("tempdir");
    let (id, ids) = indexed::compacted_session(&Store::open_dir(home.path()), LONG, LONG - 10);
    let f = Fixture { home, id };
    drop(f.open(Access::Write).expect("index"));
    let want = f.reference();
    let first = ids[0].clone();

    let mut idx = fs::read(f.index()).expect("read");
    let at = indexed::row_block_at(&idx, 0) + 2;
    idx[at] ^= 0x01;
    fs::write(f.index(), &idx).expect("write");
    let s = open_saying(&f, Access::Write, "index used");
    assert_eq!(View::of_context(&s), View::of_context_of(&want));
    // A move to the first entry needs that block: it fails, naming the
    // index and the block, and nothing is written.
    match s.checkout(Some(&first), None) {
        Err(e) => {
            let text = cairn::with_causes(&e);
            assert!(
                text.contains("persisted index") && text.contains("row block 0"),
                "{text}"
            );
        }
        Ok(_) => panic!("a move through a damaged index block was accepted"),
    }
    assert_eq!(s.len(), want.records);
    // Lookups that miss because of the block say so, never "no such entry".
    assert!(
        s.entry(&first).is_err(),
        "an entry in the damaged block was reported absent"
    );
    assert!(
        matches!(
            s.resolve(first.as_str()),
            Err(cairn::LookupError::IndexDamaged { .. })
        ),
        "{:?}",
        s.resolve(first.as_str())
    );
    drop(s);
    // The damaged index was removed when the damage was found: the next
    // open reads the log (and writes a good index).
    assert!(!f.index().exists());
    let s = f.open(Access::Write).expect("open");
    s.checkout(Some(&first), None).expect("checkout");
    assert_eq!(s.context().messages().len(), 1);
}

#[test]
fn regression_a_damaged_row_block_under_the_kept_range_made_a_context_stream_drop_the_kept_messages()
 {
    // A compaction keeping entries far above it: a stream's open restores
    // at the leaf without reading them, and the kept range's start is
    // first looked up (through row block 0) when the messages are handed
    // over. A block that fails its check there must fail the stream, not
    // make it hand over the summary alone.
    let home = tempfile::tempdir().expect("tempdir");
    let (id, _) = indexed::compacted_session(&Store::open_dir(home.path()), LONG, 100);
    let f = Fixture { home, id };
    drop(f.open(Access::Write).expect("index"));
    let (texts, _) = streamed(&f);
    assert_eq!(texts.len(), 1 + LONG - 100, "summary and the kept messages");

    let good = fs::read(f.index()).expect("read");
    // Block 0 holds the kept range's first entry (its lookup fails); block 1
    // lies between it and the compaction (the walk up to it is cut short).
    for block in [0, 1] {
        let mut idx = good.clone();
        idx[indexed::row_block_at(&good, block) + 2] ^= 0x01;
        fs::write(f.index(), &idx).expect("write");
        let stream = f.store().open_context_stream(&f.id).expect("open");
        let mut handed = 0;
        match stream.each_message(&mut |_| handed += 1) {
            Err(e) => {
                let text = cairn::with_causes(&e);
                assert!(text.contains("persisted index"), "block {block}: {text}");
                assert_eq!(
                    handed, 0,
                    "block {block}: messages handed over before the error"
                );
            }
            Ok(_) => panic!(
                "block {block}: the stream handed over {handed} messages past a damaged index block"
            ),
        }
    }
}

/// The messages a context stream hands over, as `View::texts` shows them,
/// and its compaction's summary.
fn streamed(f: &Fixture) -> (Vec<String>, Option<String>) {
    let stream = f.store().open_context_stream(&f.id).expect("open");
    let mut texts = Vec::new();
    let compaction = stream
        .each_message(&mut |m| texts.push(m.message().expect("read the message").plain_text()))
        .expect("read");
    (texts, compaction.map(|c| c.summary))
}

#[test]
fn a_context_stream_hands_over_the_context_with_or_without_the_index() {
    let f = Fixture::new();
    let reference = f.reference();
    let summary = Some("the story so far".to_owned());
    // No index: the open reads the messages; with the index at the leaf,
    // they are read as they are handed over; with entries after it, the
    // open reads them again.
    assert_eq!(streamed(&f), (reference.texts.clone(), summary.clone()));
    drop(f.open(Access::Write).expect("index"));
    assert_eq!(streamed(&f), (reference.texts.clone(), summary.clone()));
    let stream = f.store().open_context_stream(&f.id).expect("open");
    assert_eq!(stream.app_state(), &reference.state);
    assert_eq!(stream.settings(), &reference.settings);
    assert_eq!(
        stream.labels().keys().cloned().collect::<Vec<_>>(),
        reference.labels
    );
    assert_eq!(stream.leaf().map(|l| l.to_string()), reference.leaf);
    let f = Fixture::indexed_then_five_more();
    assert_eq!(streamed(&f), (f.reference().texts, summary));
}

#[test]
fn a_context_stream_reads_each_message_checked_and_reports_damage() {
    let f = Fixture::new();
    drop(f.open(Access::Write).expect("index"));
    let line = damage_a_kept_message(&f);
    // The open trusts the index and reads no message; the damaged one is
    // found when its turn comes.
    let stream = f.store().open_context_stream(&f.id).expect("open");
    let mut handed = 0;
    match stream.each_message(&mut |_| handed += 1) {
        Err(cairn::ReadError::Damaged(d)) => {
            assert_eq!(d.line as usize, line, "{d:?}");
        }
        other => panic!("expected damage, got {other:?}"),
    }
    assert!(handed > 0, "the messages before it were handed over");
}

#[test]
fn a_compaction_keeping_entries_above_the_walked_branch_folds_the_same_as_without_the_index() {
    // The open through the index holds the branch from the compaction in
    // force on; a new compaction that keeps entries from near the root
    // makes it walk further up for the check and the messages.
    let f = Fixture::new();
    drop(f.open(Access::Write).expect("index"));
    let early = f.reference_branch()[5].clone();
    let s = open_saying(&f, Access::Write, "index used");
    s.append(EntryBody::Compaction(Compaction {
        summary: "keep nearly everything".into(),
        first_kept: Some(early),
        tokens_before: None,
    }))
    .expect("compact");
    s.append(user("after the second compaction"))
        .expect("append");
    s.sync().expect("sync");
    let got = View::of(&s);
    drop(s);
    assert_eq!(f.reference(), got);
    assert!(got.texts.len() > 1000, "{}", got.texts.len());
}
