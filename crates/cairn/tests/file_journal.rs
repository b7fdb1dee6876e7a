//! The durable file journal: a torn tail is cut, saved
//! and reported at every byte offset while damage anywhere else is a hard
//! error that leaves the file byte-identical; format versions and unknown
//! kinds are handled as `docs/DESIGN.md` §3.6 says; one writer per session, across
//! processes; private file modes; a handle poisoned by a failed write or sync;
//! and the order in which each durability mode writes, syncs and acknowledges.

// Helpers outside `#[test]` functions are test code too, but clippy's
// `allow-expect-in-tests` does not reach them.
#![allow(clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::env;
use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use std::sync::Arc;
use std::thread;

use cairn::TornTail;
use cairn::frame;
use cairn::testkit::build::user;
use cairn::{
    Access, AppendError, Block, Body, Damage, Durability, Entry, EntryBody, EntryId, Message,
    NewSession, OpRecord, OpenError, Role, Session, SessionId, Store, ToolOutput,
};
use cairn::{EffectClass, OpStarted, Unknown};
use pretty_assertions::assert_eq;
use serde_json::json;

use cairn::testkit::child::rerun_ignored;
use cairn::testkit::vfs::{Fault, Faults, Hook, HookVfs};
use support::{
    Event, RacingWriter, Recorder, Sample, install, line_spans, recording_vfs, replaced, sealed,
    session_path, sessions_dir, store_with_vfs, torn_files, with_seq,
};

const TS: &str = "2026-01-02T03:04:05.678Z";

/// The texts of the messages the model would see.
fn context_texts(s: &Session) -> Vec<String> {
    s.context()
        .messages()
        .iter()
        .map(|m| m.message().expect("read the message").plain_text())
        .collect()
}

fn damage_of(e: OpenError) -> Damage {
    match e {
        OpenError::Damaged(d) => *d,
        other => panic!("expected OpenError::Damaged, got: {other}"),
    }
}

/// Opens for writing and then read-only, expecting both to fail without
/// changing a byte of the file or saving anything beside it. Returns the two
/// errors (writer's first).
/// A copy of the sample whose log holds `bytes`, its path and a store over it.
fn copy_store(sample: &Sample, bytes: &[u8]) -> (tempfile::TempDir, PathBuf, Store) {
    let (home, path) = sample.copy_with(bytes);
    let store = Store::open_dir(home.path());
    (home, path, store)
}

/// The texts of the sample's messages, as the model sees them.
const SAMPLE_TEXTS: [&str; 3] = ["list the files", "Here they are: a, b, c.", "now remove b"];

/// A copy of the sample with `covered` sealed and appended as its next
/// line: its home, path, a store over it and the file's bytes.
fn copy_with_line(sample: &Sample, covered: &str) -> (tempfile::TempDir, PathBuf, Store, Vec<u8>) {
    let mut bytes = sample.bytes.clone();
    bytes.extend_from_slice(&sealed(covered.as_bytes()));
    let (home, path, store) = copy_store(sample, &bytes);
    (home, path, store, bytes)
}

/// Both kinds of open refuse the file at `path` as not a session, saying `about`.
fn refused_as_not_a_session(store: &Store, id: &SessionId, path: &Path, about: &str, what: &str) {
    for err in refused_both_ways(store, id, path) {
        assert!(
            matches!(&err, OpenError::NotASession { problem, .. } if problem.contains(about)),
            "{what}: {err}"
        );
    }
}

/// Opens session `id` and returns it with the torn tail the open reported.
fn open_torn(store: &Store, id: &SessionId, access: Access, what: &str) -> (Session, TornTail) {
    let s = store
        .open(id, access)
        .unwrap_or_else(|e| panic!("{what}: {access:?} open: {e}"));
    let torn = s.open_report().torn.clone();
    let torn = torn.unwrap_or_else(|| panic!("{what}: no torn tail reported"));
    (s, torn)
}

/// Appends `bytes` to the file at `path` as a torn write would leave them.
fn append_raw(path: &Path, bytes: &[u8]) {
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(path)
        .expect("open to append");
    f.write_all(bytes).expect("append raw bytes");
}

fn refused_both_ways(store: &Store, id: &SessionId, path: &Path) -> [OpenError; 2] {
    let before = fs::read(path).expect("read before");
    let refuse = |access: Access| {
        let err = store
            .open(id, access)
            .expect_err("the open must be refused");
        assert_eq!(
            fs::read(path).expect("read after"),
            before,
            "{access:?} open changed the file"
        );
        assert_eq!(
            torn_files(path.parent().expect("dir")),
            Vec::<PathBuf>::new()
        );
        err
    };
    [refuse(Access::Write), refuse(Access::Read)]
}

// ---------------------------------------------------------------------------
// Torn tails
// ---------------------------------------------------------------------------

#[test]
fn torn_tail_is_cut_saved_and_reported_at_every_byte_offset() {
    let sample = Sample::new();
    let records = sample.records();
    let n = records.len() as u64;
    let last = sample.lines().last().expect("lines").clone();
    let all_texts = ["list the files", "Here they are: a, b, c.", "now remove b"];

    for cut in last.start..=last.end {
        let bytes = &sample.bytes[..cut];
        let (home, path) = sample.copy_with(bytes);
        let dir = sessions_dir(home.path());
        let store = Store::open_dir(home.path());
        // Cutting at either end of the last line tears nothing.
        let torn_len = (cut - last.start) as u64;
        let is_torn = cut != last.start && cut != last.end;
        let kept = if cut == last.end { n } else { n - 1 };
        let what = format!("file cut at byte {cut} (last line spans {last:?})");

        // A reader ignores the torn bytes and changes nothing.
        let reader = store
            .open(&sample.id, Access::Read)
            .expect("read-only open");
        assert_eq!(reader.len(), kept, "{what}");
        let torn = reader.open_report().torn.clone();
        if is_torn {
            let t =
                torn.unwrap_or_else(|| panic!("{what}: the reader did not report the torn tail"));
            assert_eq!(
                (t.offset, t.len, t.cut, t.saved_to),
                (last.start as u64, torn_len, false, None),
                "{what}"
            );
        } else {
            assert_eq!(torn, None, "{what}");
        }
        drop(reader);
        assert_eq!(
            fs::read(&path).expect("read"),
            bytes,
            "{what}: the reader changed the file"
        );
        assert_eq!(
            torn_files(&dir),
            Vec::<PathBuf>::new(),
            "{what}: the reader saved something"
        );

        // A writer cuts them, saves them beside the log and reports it.
        let writer = store
            .open(&sample.id, Access::Write)
            .expect("open for writing");
        assert_eq!(writer.len(), kept, "{what}");
        assert_eq!(writer.open_report().records, kept, "{what}");
        let torn = writer.open_report().torn.clone();
        if is_torn {
            let t =
                torn.unwrap_or_else(|| panic!("{what}: the writer did not report the torn tail"));
            assert_eq!(
                (t.offset, t.len, t.cut),
                (last.start as u64, torn_len, true),
                "{what}"
            );
            assert!(!t.problem.is_empty(), "{what}");
            let saved = PathBuf::from(t.saved_to.unwrap_or_else(|| panic!("{what}: not saved")));
            assert_eq!(torn_files(&dir), vec![saved.clone()], "{what}");
            let name = saved.file_name().and_then(|n| n.to_str()).expect("name");
            assert!(
                name.starts_with(&format!("{}.jsonl.torn-", sample.id)),
                "{what}: saved as {name}"
            );
            assert_eq!(
                fs::read(&saved).expect("saved tail"),
                &sample.bytes[last.start..cut],
                "{what}"
            );
        } else {
            assert_eq!(torn, None, "{what}");
            assert_eq!(torn_files(&dir), Vec::<PathBuf>::new(), "{what}");
        }
        let intact_end = if kept == n { last.end } else { last.start };
        assert_eq!(
            fs::read(&path).expect("read"),
            &sample.bytes[..intact_end],
            "{what}"
        );
        for r in &records[..kept as usize] {
            assert_eq!(&writer.record(r.seq).expect("earlier record"), r, "{what}");
        }
        assert_eq!(
            context_texts(&writer),
            all_texts[..kept as usize - 2],
            "{what}"
        );

        // The next append lands cleanly after the last intact record.
        let appended = writer.append(user("again")).expect("append after the cut");
        assert_eq!(appended.seq, kept, "{what}");
        drop(writer);
        let reopened = store.open(&sample.id, Access::Write).expect("reopen");
        assert_eq!(reopened.open_report().torn, None, "{what}");
        assert_eq!(reopened.len(), kept + 1, "{what}");
        assert_eq!(reopened.leaf(), appended.id, "{what}");
        let mut texts: Vec<&str> = all_texts[..kept as usize - 2].to_vec();
        texts.push("again");
        assert_eq!(context_texts(&reopened), texts, "{what}");
        let file = fs::read(&path).expect("read");
        assert!(file.starts_with(&sample.bytes[..intact_end]), "{what}");
        assert_eq!(line_spans(&file).len() as u64, kept + 1, "{what}");
        assert!(file.ends_with(b"\n"), "{what}");
    }
}

#[test]
fn any_flipped_bit_in_the_last_line_is_a_torn_tail_and_is_cut() {
    let sample = Sample::new();
    let n = sample.records().len() as u64;
    let last = sample.lines().last().expect("lines").clone();
    let home = tempfile::tempdir().expect("tempdir");
    let dir = sessions_dir(home.path());
    let store = Store::open_dir(home.path());
    for at in last.clone() {
        for bit in 0..8 {
            let mut bytes = sample.bytes.clone();
            bytes[at] ^= 1 << bit;
            let what = format!("bit {bit} of byte {at} flipped (last line spans {last:?})");
            let path = install(home.path(), &sample.id, &bytes);

            let (reader, t) = open_torn(&store, &sample.id, Access::Read, &what);
            assert_eq!(
                (t.offset, t.len, t.cut),
                (last.start as u64, last.len() as u64, false),
                "{what}"
            );
            assert_eq!(reader.len(), n - 1, "{what}");
            drop(reader);
            assert_eq!(fs::read(&path).expect("read"), bytes, "{what}");

            let (writer, t) = open_torn(&store, &sample.id, Access::Write, &what);
            assert_eq!(
                (t.offset, t.len, t.cut),
                (last.start as u64, last.len() as u64, true),
                "{what}"
            );
            let saved = t.saved_to.unwrap_or_else(|| panic!("{what}: not saved"));
            assert_eq!(
                fs::read(&saved).expect("saved"),
                &bytes[last.clone()],
                "{what}"
            );
            assert_eq!(writer.len(), n - 1, "{what}");
            drop(writer);
            assert_eq!(
                fs::read(&path).expect("read"),
                &sample.bytes[..last.start],
                "{what}"
            );
            fs::remove_file(&saved).expect("remove saved tail");
        }
    }
    assert_eq!(torn_files(&dir), Vec::<PathBuf>::new());
}

#[test]
fn several_damaged_lines_at_the_end_are_cut_together() {
    let sample = Sample::new();
    let lines = sample.lines();
    let n = lines.len();
    let tail_start = lines[n - 2].start;
    let mut bytes = sample.bytes.clone();
    // Damage the last two lines and leave half a line after them.
    bytes[lines[n - 2].start + 3] ^= 0x01;
    bytes[lines[n - 1].start + 3] ^= 0x01;
    bytes.extend_from_slice(b"{\"seq\":5,\"ts\":");
    let (_home, path, store) = copy_store(&sample, &bytes);

    let (writer, t) = open_torn(&store, &sample.id, Access::Write, "the damaged tail");
    assert_eq!(
        (t.offset, t.len, t.cut),
        (tail_start as u64, (bytes.len() - tail_start) as u64, true)
    );
    assert_eq!(
        fs::read(t.saved_to.expect("saved")).expect("saved"),
        &bytes[tail_start..]
    );
    assert_eq!(writer.len(), n as u64 - 2);
    drop(writer);
    assert_eq!(fs::read(&path).expect("read"), &sample.bytes[..tail_start]);
}

#[test]
fn torn_tails_cut_at_successive_opens_are_all_kept() {
    let sample = Sample::new();
    let store = sample.store();
    let dir = sessions_dir(sample.home.path());
    let mut expected = Vec::new();
    for partial in [
        &b"{\"seq\":5,\"ts\":\"20"[..],
        &b"{\"seq\":5"[..],
        &b"{"[..],
    ] {
        append_raw(&sample.path, partial);
        let (_writer, t) = open_torn(&store, &sample.id, Access::Write, "a partial line");
        let saved = t.saved_to.expect("saved");
        expected.push((PathBuf::from(saved), partial.to_vec()));
    }
    let mut saved: Vec<(PathBuf, Vec<u8>)> = torn_files(&dir)
        .into_iter()
        .map(|p| (p.clone(), fs::read(&p).expect("read")))
        .collect();
    saved.sort();
    expected.sort();
    assert_eq!(saved, expected, "each cut keeps its own file");
    assert_eq!(fs::read(&sample.path).expect("read"), sample.bytes);
}

// ---------------------------------------------------------------------------
// Damage that is not a torn tail
// ---------------------------------------------------------------------------

#[test]
fn a_damaged_middle_line_is_a_hard_error_naming_file_line_and_offset() {
    let sample = Sample::new();
    let mid = sample.lines()[2].clone();
    let mut bytes = sample.bytes.clone();
    let at = mid.start + mid.len() / 2;
    bytes[at..at + 4].copy_from_slice(b"XXXX");
    let (_home, path, store) = copy_store(&sample, &bytes);
    let location = path.display().to_string();

    for err in refused_both_ways(&store, &sample.id, &path) {
        let text = err.to_string();
        let d = damage_of(err);
        assert_eq!(
            (d.location.as_str(), d.line, d.offset),
            (location.as_str(), 3, mid.start as u64)
        );
        assert!(d.problem.contains("checksum mismatch"), "{}", d.problem);
        assert!(d.problem.contains("intact records follow"), "{}", d.problem);
        for needle in [
            location.clone(),
            "line 3".into(),
            format!("byte offset {}", mid.start),
            "untouched".into(),
        ] {
            assert!(
                text.contains(&needle),
                "{text:?} does not mention {needle:?}"
            );
        }
    }
    // The refused writer left no lock behind: a second try fails the same way.
    assert!(matches!(
        store.open(&sample.id, Access::Write),
        Err(OpenError::Damaged(_))
    ));
}

#[test]
fn any_flipped_bit_in_a_middle_line_is_a_hard_error_that_changes_nothing() {
    let sample = Sample::new();
    let mid = sample.lines()[2].clone();
    let home = tempfile::tempdir().expect("tempdir");
    let store = Store::open_dir(home.path());
    // The newline is included: flipping it fuses the line with the next one.
    for at in mid.clone() {
        for bit in 0..8 {
            let mut bytes = sample.bytes.clone();
            bytes[at] ^= 1 << bit;
            let path = install(home.path(), &sample.id, &bytes);
            for err in refused_both_ways(&store, &sample.id, &path) {
                let d = damage_of(err);
                assert_eq!(
                    (d.line, d.offset),
                    (3, mid.start as u64),
                    "bit {bit} of byte {at}: {}",
                    d.problem
                );
            }
        }
    }
}

#[test]
fn an_intact_line_after_damaged_ones_makes_them_a_hard_error() {
    let sample = Sample::new();
    let lines = sample.lines();
    let n = lines.len();
    let mut bytes = sample.bytes.clone();
    bytes[lines[n - 3].start + 3] ^= 0x01;
    bytes[lines[n - 2].start + 3] ^= 0x01;
    let (_home, path, store) = copy_store(&sample, &bytes);
    for err in refused_both_ways(&store, &sample.id, &path) {
        let d = damage_of(err);
        assert_eq!(
            (d.line, d.offset),
            (n as u64 - 2, lines[n - 3].start as u64)
        );
    }
}

#[test]
fn a_blank_line_between_records_is_damage_not_skipped() {
    let sample = Sample::new();
    let at = sample.lines()[2].start;
    let mut bytes = sample.bytes.clone();
    bytes.insert(at, b'\n');
    let (_home, path, store) = copy_store(&sample, &bytes);
    for err in refused_both_ways(&store, &sample.id, &path) {
        let d = damage_of(err);
        assert_eq!((d.line, d.offset), (3, at as u64));
    }
}

#[test]
fn a_seq_gap_or_repeat_is_a_hard_error_even_in_the_last_line() {
    let sample = Sample::new();
    let lines = sample.lines();
    let n = lines.len();
    let last = lines[n - 1].clone();
    let mid = lines[2].clone();
    let cases = [
        // The last line claims seq n where n - 1 belongs: seq n - 1 is missing.
        (
            "gap in the last line",
            last.clone(),
            with_seq(&sample.bytes[last.clone()], n as u64),
            n as u64 - 1,
        ),
        // Line 3 repeats seq 1.
        (
            "repeat in the middle",
            mid.clone(),
            with_seq(&sample.bytes[mid.clone()], 1),
            2,
        ),
        // A new last line skips seq n.
        (
            "gap after the last line",
            last.end..last.end,
            with_seq(&sample.bytes[last.clone()], n as u64 + 1),
            n as u64,
        ),
    ];
    for (what, span, line, record) in cases {
        let mut bytes = sample.bytes.clone();
        bytes.splice(span.clone(), line.iter().copied());
        let (_home, path, store) = copy_store(&sample, &bytes);
        for err in refused_both_ways(&store, &sample.id, &path) {
            let d = damage_of(err);
            assert_eq!(
                (d.line, d.offset),
                (record + 1, span.start as u64),
                "{what}"
            );
            let claimed = support::leading_seq(&line).expect("seq");
            assert!(
                d.problem
                    .contains(&format!("its seq is {claimed} but it is record {record}")),
                "{what}: {}",
                d.problem
            );
        }
    }
}

#[test]
fn a_newer_format_version_is_refused_naming_both_versions() {
    let sample = Sample::new();
    let header = sample.lines()[0].clone();
    let newer_header = replaced(
        &sample.bytes[header.clone()],
        "\"format\":1,",
        "\"format\":2,",
    );
    // A newer header need not decode as this version's header at all.
    let alien_header = sealed(b"{\"seq\":0,\"ts\":\"2030-01-01T00:00:00.000Z\",\"kind\":\"header\",\"data\":{\"format\":2,\"shape\":\"new\"}");
    for (what, line) in [
        ("known fields", newer_header),
        ("unknown fields", alien_header),
    ] {
        let mut bytes = sample.bytes.clone();
        bytes.splice(header.clone(), line);
        let (_home, path, store) = copy_store(&sample, &bytes);
        for err in refused_both_ways(&store, &sample.id, &path) {
            let text = err.to_string();
            match err {
                OpenError::NewerFormat {
                    location,
                    found,
                    supported,
                } => {
                    assert_eq!(
                        (location, found, supported),
                        (path.display().to_string(), 2, 1),
                        "{what}"
                    );
                }
                other => panic!("{what}: expected NewerFormat, got {other}"),
            }
            assert!(
                text.contains("version 2") && text.contains("up to 1"),
                "{what}: {text}"
            );
            assert!(text.contains("upgrade cairn"), "{what}: {text}");
        }
    }
}

#[test]
fn an_unknown_kind_not_marked_ignorable_is_a_hard_error_naming_it() {
    let sample = Sample::new();
    let n = sample.lines().len();
    let entry_shaped = format!(
        "{{\"seq\":{n},\"ts\":\"{TS}\",\"kind\":\"x.future\",\"id\":\"f1\",\"parent\":null,\"data\":{{\"a\":1}}"
    );
    let op_shaped =
        format!("{{\"seq\":{n},\"ts\":\"{TS}\",\"kind\":\"x.future\",\"data\":{{\"a\":1}}");
    for covered in [entry_shaped, op_shaped] {
        let mut bytes = sample.bytes.clone();
        bytes.extend_from_slice(&sealed(covered.as_bytes()));
        let (_home, path, store) = copy_store(&sample, &bytes);
        for err in refused_both_ways(&store, &sample.id, &path) {
            let text = err.to_string();
            let d = damage_of(err);
            assert_eq!(
                (d.line, d.offset),
                (n as u64 + 1, sample.bytes.len() as u64),
                "{covered}"
            );
            assert!(
                d.problem.contains("unknown record kind \"x.future\""),
                "{}",
                d.problem
            );
            assert!(text.contains("ignorable"), "{text}");
        }
    }
}

#[test]
fn an_ignorable_unknown_entry_is_kept_in_the_tree_and_skipped_by_the_context() {
    let sample = Sample::new();
    let n = sample.lines().len() as u64;
    let leaf = match &sample.records().last().expect("records").body {
        Body::Entry(e) => e.id.clone(),
        other => panic!("the sample ends with an entry, not {other:?}"),
    };
    let (_home, path, store, bytes) = copy_with_line(
        &sample,
        &format!(
            "{{\"seq\":{n},\"ts\":\"{TS}\",\"kind\":\"x.bookmark\",\"ignorable\":true,\"id\":\"note1\",\"parent\":\"{leaf}\",\"data\":{{\"note\":\"keep\"}}"
        ),
    );
    let before = SAMPLE_TEXTS;

    let s = store.open(&sample.id, Access::Write).expect("opens");
    assert_eq!(s.open_report().torn, None);
    assert_eq!(s.len(), n + 1);
    let note = EntryId::parse("note1").expect("id");
    let expected = Body::Entry(Entry {
        id: note.clone(),
        parent: Some(leaf.clone()),
        body: EntryBody::Ignored(Unknown {
            kind: "x.bookmark".into(),
            data: json!({"note": "keep"}),
        }),
    });
    assert_eq!(s.record(n).expect("record").body, expected);
    let node = s.nodes().last().cloned().expect("nodes");
    assert_eq!(
        (node.id, node.parent, node.seq),
        (note.clone(), Some(leaf), n)
    );
    assert_eq!(context_texts(&s), before);
    assert_eq!(s.context().app_state(), &json!({"todo": ["b"]}));

    let after = s
        .append(user("after the bookmark"))
        .expect("a later append works");
    assert_eq!(
        s.entry(after.id.as_ref().expect("id"))
            .expect("entry")
            .expect("exists")
            .parent,
        Some(note)
    );
    drop(s);
    let s = store.open(&sample.id, Access::Read).expect("reopen");
    assert_eq!(
        context_texts(&s),
        [&before[..], &["after the bookmark"]].concat()
    );
    assert_eq!(s.record(n).expect("record").body, expected);
    assert!(
        fs::read(&path).expect("read").starts_with(&bytes),
        "the ignorable record is kept as written"
    );
}

#[test]
fn an_ignorable_unknown_op_record_is_kept_and_skipped_by_the_context() {
    let sample = Sample::new();
    let n = sample.lines().len() as u64;
    let (_home, path, store, bytes) = copy_with_line(
        &sample,
        &format!(
            "{{\"seq\":{n},\"ts\":\"{TS}\",\"kind\":\"x.audit\",\"ignorable\":true,\"data\":{{\"who\":\"ops\"}}"
        ),
    );
    let before = SAMPLE_TEXTS;

    let s = store.open(&sample.id, Access::Write).expect("opens");
    assert_eq!((s.len(), s.entry_count()), (n + 1, 4));
    assert_eq!(s.op_records(), vec![(n, "x.audit".to_owned())]);
    let expected = Body::Op(OpRecord::Ignored(Unknown {
        kind: "x.audit".into(),
        data: json!({"who": "ops"}),
    }));
    assert_eq!(s.record(n).expect("record").body, expected);
    assert_eq!(context_texts(&s), before);

    let after = s
        .append(user("after the audit"))
        .expect("a later append works");
    assert_eq!(after.seq, n + 1);
    drop(s);
    let s = store.open(&sample.id, Access::Read).expect("reopen");
    assert_eq!(
        context_texts(&s),
        [&before[..], &["after the audit"]].concat()
    );
    assert_eq!(s.record(n).expect("record").body, expected);
    assert!(fs::read(&path).expect("read").starts_with(&bytes));
}

/// A record whose framing is intact but whose data does not fit its kind is
/// found when the context is built; its `Damage` used to say "byte offset 0".
#[test]
fn regression_damage_in_an_intact_record_was_reported_at_byte_offset_0() {
    let sample = Sample::new();
    let last = sample.lines().last().expect("lines").clone();
    let n = sample.lines().len() as u64;
    let bad = replaced(
        &sample.bytes[last.clone()],
        "\"role\":\"user\"",
        "\"role\":\"wizard\"",
    );
    let mut bytes = sample.bytes.clone();
    bytes.splice(last.clone(), bad);
    let (_home, path, store) = copy_store(&sample, &bytes);
    for err in refused_both_ways(&store, &sample.id, &path) {
        let text = err.to_string();
        let d = damage_of(err);
        assert_eq!(
            (d.location, d.line, d.offset),
            (path.display().to_string(), n, last.start as u64),
            "{text}"
        );
        assert!(d.problem.contains("wizard"), "{}", d.problem);
    }
}

// ---------------------------------------------------------------------------
// Files that are not sessions
// ---------------------------------------------------------------------------

#[test]
fn an_empty_session_file_is_not_a_session_and_is_left_alone() {
    let sample = Sample::new();
    let (_home, path, store) = copy_store(&sample, b"");
    refused_as_not_a_session(&store, &sample.id, &path, "empty", "an empty file");
}

#[test]
fn a_torn_header_is_refused_and_never_repaired_or_overwritten() {
    let sample = Sample::new();
    let header = sample.lines()[0].clone();
    let home = tempfile::tempdir().expect("tempdir");
    let store = Store::open_dir(home.path());
    for cut in 1..header.end {
        let path = install(home.path(), &sample.id, &sample.bytes[..cut]);
        let what = format!("cut at {cut}");
        refused_as_not_a_session(&store, &sample.id, &path, "header", &what);
    }
}

#[test]
fn a_session_of_only_a_header_opens_with_no_entries() {
    let sample = Sample::new();
    let header = sample.lines()[0].clone();
    let (_home, path, store) = copy_store(&sample, &sample.bytes[header]);
    for access in [Access::Read, Access::Write] {
        let s = store.open(&sample.id, access).expect("opens");
        assert_eq!((s.len(), s.entry_count(), s.leaf()), (1, 0, None));
        assert_eq!(s.open_report().torn, None);
        assert!(s.context().messages().is_empty());
    }
    let s = store.open(&sample.id, Access::Write).expect("opens");
    assert_eq!(s.append(user("first")).expect("append").seq, 1);
    drop(s);
    assert_eq!(line_spans(&fs::read(&path).expect("read")).len(), 2);
}

#[test]
fn opening_a_missing_session_is_not_found_and_creates_nothing() {
    let home = tempfile::tempdir().expect("tempdir");
    let store = Store::open_dir(home.path());
    let id = SessionId::generate();
    for access in [Access::Write, Access::Read] {
        assert!(matches!(
            store.open(&id, access),
            Err(OpenError::NotFound { .. })
        ));
    }
    assert!(!session_path(home.path(), &id).exists());
}

#[test]
fn a_symlink_in_place_of_a_session_file_is_refused() {
    let sample = Sample::new();
    let home = tempfile::tempdir().expect("tempdir");
    let elsewhere = home.path().join("elsewhere.jsonl");
    fs::write(&elsewhere, &sample.bytes).expect("write target");
    fs::create_dir_all(sessions_dir(home.path())).expect("mkdir");
    let link = session_path(home.path(), &sample.id);
    std::os::unix::fs::symlink(&elsewhere, &link).expect("symlink");
    let store = Store::open_dir(home.path());
    for access in [Access::Write, Access::Read] {
        let err = store
            .open(&sample.id, access)
            .expect_err("a symlink is refused");
        assert!(
            matches!(&err, OpenError::NotASession { problem, .. } if problem.contains("symlink")),
            "{access:?}: {err}"
        );
    }
    assert_eq!(fs::read(&elsewhere).expect("read"), sample.bytes);
    assert!(
        fs::symlink_metadata(&link)
            .expect("link")
            .file_type()
            .is_symlink()
    );
}

#[test]
fn a_symlink_in_place_of_the_lock_file_is_not_followed() {
    let sample = Sample::new();
    let victim = sample.home.path().join("victim.txt");
    fs::write(&victim, b"precious").expect("write victim");
    let lock = sessions_dir(sample.home.path()).join(format!("{}.lock", sample.id));
    let _ = fs::remove_file(&lock);
    std::os::unix::fs::symlink(&victim, &lock).expect("symlink");
    let err = sample
        .store()
        .open(&sample.id, Access::Write)
        .expect_err("refused");
    assert!(matches!(err, OpenError::Io(_)), "{err}");
    assert_eq!(
        fs::read(&victim).expect("read"),
        b"precious",
        "the lock's target was written to"
    );
    assert_eq!(fs::read(&sample.path).expect("read"), sample.bytes);
}

// ---------------------------------------------------------------------------
// One writer per session
// ---------------------------------------------------------------------------

const HOLD_HOME: &str = "CAIRN_TEST_HOLD_HOME";
const HOLD_SESSION: &str = "CAIRN_TEST_HOLD_SESSION";
const HOLDING: &str = "cairn-test-helper: holding the writer lock, pid";
const HELPER: &str = "helper_holds_the_writer_lock_until_stdin_closes";

/// Run by [`a_second_writer_in_another_process_gets_in_use_naming_the_holder_pid`]
/// in a child process: opens the session for writing, appends one entry,
/// says so on stdout, and holds the lock until its stdin is closed.
#[test]
#[ignore = "a helper process for the cross-process lock test"]
fn helper_holds_the_writer_lock_until_stdin_closes() {
    let (Some(home), Ok(id)) = (env::var_os(HOLD_HOME), env::var(HOLD_SESSION)) else {
        return;
    };
    let id = SessionId::parse(&id).expect("session id");
    let session = Store::open_dir(home)
        .open(&id, Access::Write)
        .expect("helper opens for writing");
    session
        .append(user("from the helper"))
        .expect("helper appends");
    println!("{HOLDING} {}", std::process::id());
    io::stdout().flush().expect("flush");
    let mut rest = Vec::new();
    io::stdin().read_to_end(&mut rest).expect("read stdin");
    drop(session);
}

#[test]
fn a_second_writer_in_another_process_gets_in_use_naming_the_holder_pid() {
    let sample = Sample::new();
    let store = sample.store();
    let n = sample.records().len() as u64;
    let mut child = rerun_ignored(HELPER)
        .env(HOLD_HOME, sample.home.path())
        .env(HOLD_SESSION, sample.id.as_str())
        .spawn()
        .expect("spawn the helper");
    let pid = child.id();
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut seen = String::new();
    let announced = loop {
        let mut line = String::new();
        if out.read_line(&mut line).expect("read helper output") == 0 {
            panic!("the helper exited without taking the lock; its output:\n{seen}");
        }
        // libtest may print the test's name on the same line first.
        if let Some(at) = line.find(HOLDING) {
            break line[at + HOLDING.len()..]
                .trim()
                .parse::<u32>()
                .expect("pid");
        }
        seen.push_str(&line);
    };
    assert_eq!(announced, pid);

    let err = store
        .open(&sample.id, Access::Write)
        .expect_err("a second writer is refused");
    let text = err.to_string();
    match err {
        OpenError::InUse { session, holder } => {
            assert_eq!((session, holder), (sample.id.to_string(), Some(pid)))
        }
        other => panic!("expected InUse, got {other}"),
    }
    assert!(
        text.contains(&format!("process {pid}")) && text.contains("read-only"),
        "{text}"
    );
    assert!(store.backend().writer_active(&sample.id));

    // A reader is not blocked, and sees what the holder acknowledged.
    let reader = store
        .open(&sample.id, Access::Read)
        .expect("a reader opens while the writer holds");
    assert_eq!(reader.len(), n + 1);
    assert_eq!(
        context_texts(&reader).last().map(String::as_str),
        Some("from the helper")
    );
    drop(reader);

    drop(child.stdin.take());
    io::copy(&mut out, &mut io::sink()).expect("drain helper output");
    assert!(child.wait().expect("wait for the helper").success());
    assert!(!store.backend().writer_active(&sample.id));
    let writer = store
        .open(&sample.id, Access::Write)
        .expect("the lock is free once the holder exits");
    assert_eq!(writer.len(), n + 1);
}

#[test]
fn a_second_writer_in_the_same_process_is_refused_until_the_first_drops() {
    let sample = Sample::new();
    let store = sample.store();
    let first = store.open(&sample.id, Access::Write).expect("first writer");
    match store.open(&sample.id, Access::Write) {
        Err(OpenError::InUse { holder, .. }) => assert_eq!(holder, Some(std::process::id())),
        other => panic!("expected InUse, got {other:?}"),
    }
    assert!(
        store
            .create(NewSession {
                id: Some(sample.id.clone()),
                ..NewSession::default()
            })
            .is_err()
    );
    drop(first);
    let second = store
        .open(&sample.id, Access::Write)
        .expect("a writer opens after the first dropped");
    second.append(user("second writer")).expect("append");
}

#[test]
fn readers_are_never_blocked_by_a_writer_and_never_write() {
    let sample = Sample::new();
    let store = sample.store();
    let n = sample.records().len() as u64;
    let writer = store.open(&sample.id, Access::Write).expect("writer");
    let early = store
        .open(&sample.id, Access::Read)
        .expect("reader while a writer holds");
    writer
        .append(user("later"))
        .expect("the writer is not blocked by a reader");
    let late = store
        .open(&sample.id, Access::Read)
        .expect("another reader");
    assert_eq!((early.len(), late.len()), (n, n + 1));
    assert_eq!(
        context_texts(&late).last().map(String::as_str),
        Some("later")
    );
    let before = fs::read(&sample.path).expect("read");
    assert!(matches!(
        late.append(user("nope")),
        Err(AppendError::ReadOnly { .. })
    ));
    assert!(matches!(late.sync(), Err(AppendError::ReadOnly { .. })));
    assert_eq!(fs::read(&sample.path).expect("read"), before);
    assert!(!late.is_writer() && writer.is_writer());
}

// ---------------------------------------------------------------------------
// Permissions
// ---------------------------------------------------------------------------

fn mode(path: &Path) -> u32 {
    fs::metadata(path).expect("metadata").permissions().mode() & 0o777
}

#[test]
fn session_files_are_0600_and_the_sessions_directory_0700() {
    let home = tempfile::tempdir().expect("tempdir");
    let store = Store::open_dir(home.path());
    let s = store.create(NewSession::default()).expect("create");
    let id = s.id().clone();
    let dir = sessions_dir(home.path());
    let path = session_path(home.path(), &id);
    assert_eq!(mode(&dir), 0o700, "sessions directory");
    assert_eq!(mode(&path), 0o600, "session file");
    assert_eq!(mode(&dir.join(format!("{id}.lock"))), 0o600, "lock file");
    drop(s);

    append_raw(&path, b"{\"seq\":1,");
    let (_s, t) = open_torn(&store, &id, Access::Write, "a partial line");
    let saved = t.saved_to.expect("saved");
    assert_eq!(mode(Path::new(&saved)), 0o600, "saved torn tail");
    assert_eq!(mode(&path), 0o600, "session file after the cut");
}

// ---------------------------------------------------------------------------
// Poisoning after a failed write or sync
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum Failing {
    Write(Fault),
    Sync(Fault),
}

fn op_started() -> OpRecord {
    OpRecord::OpStarted(OpStarted {
        op: "op1".into(),
        input: None,
    })
}

/// One failure, then: the failing call reports `Io`, every later write or
/// sync reports `Poisoned` without touching the disk, and a reopen keeps
/// every acknowledged record, cuts any partial write and appends again.
fn check_poisoned_until_reopen(failing: Failing, durability: Durability) {
    let case = format!("{failing:?} under {durability:?}");
    let home = tempfile::tempdir().expect("tempdir");
    let vfs = HookVfs::new(Faults::new());
    let store = store_with_vfs(home.path(), vfs.clone());
    let session = store.create(NewSession::default()).expect("create");
    let id = session.id().clone();
    let path = session_path(home.path(), &id);
    session.set_durability(durability);
    let mut acked = Vec::new();
    for text in ["one", "two", "three"] {
        acked.push(session.append(user(text)).expect("healthy append"));
    }
    let fault = match failing {
        Failing::Write(f) => {
            vfs.hook().fail_write(1, f);
            f
        }
        Failing::Sync(f) => {
            vfs.hook().fail_sync(1, f);
            f
        }
    };
    let intact_len = fs::metadata(&path).expect("metadata").len();

    let err = match (failing, durability) {
        (Failing::Sync(_), Durability::Buffered) => {
            // A buffered append does not sync: the explicit sync is what fails.
            acked.push(session.append(user("four")).expect("buffered append"));
            session.sync().expect_err("the sync fails")
        }
        _ => session.append(user("four")).expect_err("the append fails"),
    };
    let expected_action = if matches!(failing, Failing::Write(_)) {
        "write"
    } else {
        "sync"
    };
    match &err {
        AppendError::Io { action, source, .. } => {
            assert_eq!(
                (*action, source.raw_os_error()),
                (expected_action, Some(fault.errno())),
                "{case}"
            );
        }
        other => panic!("{case}: expected AppendError::Io, got {other}"),
    }

    vfs.hook().clear();
    let (writes, syncs) = (vfs.hook().writes(), vfs.hook().syncs());
    let poisoned = |r: Result<(), AppendError>, what: &str| match r {
        Err(AppendError::Poisoned { cause, .. }) => {
            assert!(
                cause.contains(expected_action),
                "{case}: {what}: cause {cause:?}"
            );
        }
        other => panic!("{case}: {what} after the failure: expected Poisoned, got {other:?}"),
    };
    poisoned(session.append(user("five")).map(drop), "append");
    poisoned(session.sync(), "sync");
    poisoned(session.append_op(op_started()).map(drop), "append_op");
    poisoned(session.checkout(None, None).map(drop), "checkout");
    poisoned(session.sync(), "a second sync");
    assert_eq!(
        (vfs.hook().writes(), vfs.hook().syncs()),
        (writes, syncs),
        "{case}: a poisoned handle touched the disk"
    );
    let message = session.sync().expect_err("poisoned").to_string();
    assert!(message.contains("reopen"), "{case}: {message}");
    drop(session);

    // Reopen on a healthy disk.
    let store = Store::open_dir(home.path());
    let s = store.open(&id, Access::Write).expect("reopen");
    for a in &acked {
        let r = s.record(a.seq).expect("acknowledged record");
        assert!(
            matches!(&r.body, Body::Entry(e) if Some(&e.id) == a.id.as_ref()),
            "{case}: seq {}",
            a.seq
        );
    }
    let expected_torn = match failing {
        Failing::Write(Fault::Short(k)) if k > 0 => Some(k as u64),
        _ => None,
    };
    let torn = s.open_report().torn.clone();
    assert_eq!(
        torn.as_ref().map(|t| (t.offset, t.len, t.cut)),
        expected_torn.map(|k| (intact_len, k, true)),
        "{case}"
    );
    if let Some(TornTail {
        saved_to: Some(saved),
        ..
    }) = torn
    {
        // The saved bytes are the start of the line that failed.
        let saved = fs::read(saved).expect("saved");
        let head = format!("{{\"seq\":{},\"ts\":", acked.len() + 1);
        let k = saved.len().min(head.len());
        assert_eq!(&saved[..k], &head.as_bytes()[..k], "{case}");
    }
    // The failed append was never acknowledged: it may be there only if its
    // write reached the file whole (a failed sync), and then as written.
    let extra = s.len() - 1 - acked.len() as u64;
    match failing {
        Failing::Write(_) => assert_eq!(extra, 0, "{case}"),
        Failing::Sync(_) => assert!(extra <= 1, "{case}"),
    }
    if extra == 1 {
        assert_eq!(
            context_texts(&s).last().map(String::as_str),
            Some("four"),
            "{case}"
        );
    }
    let again = s.append(user("after reopen")).expect("appends work again");
    drop(s);
    let s = store.open(&id, Access::Read).expect("reopen");
    assert_eq!(
        (s.len(), s.open_report().torn.clone()),
        (again.seq + 1, None),
        "{case}"
    );
}

#[test]
fn a_failed_write_poisons_the_handle_until_it_is_reopened() {
    for fault in [
        Fault::Eio,
        Fault::NoSpace,
        Fault::Short(0),
        Fault::Short(1),
        Fault::Short(40),
    ] {
        for durability in [Durability::Sync, Durability::Group, Durability::Buffered] {
            check_poisoned_until_reopen(Failing::Write(fault), durability);
        }
    }
}

/// In `Sync` and `Group` mode every acknowledged record is already synced, so
/// `sync()` after a failed write found nothing to do and returned `Ok`.
#[test]
fn regression_sync_reported_success_on_a_handle_poisoned_by_a_failed_write() {
    for durability in [Durability::Sync, Durability::Group] {
        let home = tempfile::tempdir().expect("tempdir");
        let vfs = HookVfs::new(Faults::new());
        let session = store_with_vfs(home.path(), vfs.clone())
            .create(NewSession::default())
            .expect("create");
        session.set_durability(durability);
        session.append(user("one")).expect("append");
        vfs.hook().fail_write(1, Fault::Eio);
        assert!(matches!(
            session.append(user("two")),
            Err(AppendError::Io { .. })
        ));
        assert!(
            matches!(session.sync(), Err(AppendError::Poisoned { .. })),
            "{durability:?}"
        );
    }
}

#[test]
fn a_failed_sync_poisons_the_handle_until_it_is_reopened() {
    for fault in [Fault::Eio, Fault::NoSpace] {
        for durability in [Durability::Sync, Durability::Group, Durability::Buffered] {
            check_poisoned_until_reopen(Failing::Sync(fault), durability);
        }
    }
}

// ---------------------------------------------------------------------------
// Acknowledgement order of each durability mode
// ---------------------------------------------------------------------------

/// A new session on a recording file system, with the creation's events forgotten.
fn recorded_session(durability: Durability) -> (tempfile::TempDir, Session, Arc<Recorder>) {
    let home = tempfile::tempdir().expect("tempdir");
    let (vfs, recorder) = recording_vfs();
    let session = store_with_vfs(home.path(), vfs)
        .create(NewSession::default())
        .expect("create");
    session.set_durability(durability);
    recorder.clear();
    (home, session, recorder)
}

/// The end offset of every record in a session file, by seq.
fn line_ends(path: &Path) -> Vec<u64> {
    line_spans(&fs::read(path).expect("read"))
        .into_iter()
        .map(|r| r.end as u64)
        .collect()
}

#[test]
fn sync_mode_syncs_each_record_before_append_returns() {
    let (home, s, rec) = recorded_session(Durability::Sync);
    assert_eq!(s.durability(), Durability::default(), "Sync is the default");
    for text in ["a", "b", "c"] {
        rec.ack(s.append(user(text)).expect("append").seq);
    }
    rec.ack(s.append_op(op_started()).expect("append op").seq);
    let ends = line_ends(&session_path(home.path(), s.id()));
    let mut expected = Vec::new();
    for seq in 1..=4u64 {
        let end = ends[seq as usize];
        // The header was synced at creation under its temporary name, which
        // the recorder does not watch: the log's own syncs count from 0.
        let sync = seq - 1;
        expected.extend([
            Event::Write {
                seq,
                last: seq,
                end,
            },
            Event::SyncStart { sync, len: end },
            Event::SyncEnd { sync },
            Event::Ack { seq },
        ]);
    }
    assert_eq!(rec.events(), expected);
}

#[test]
fn buffered_mode_acknowledges_after_the_write_and_syncs_on_request() {
    let (home, s, rec) = recorded_session(Durability::Buffered);
    for text in ["a", "b", "c"] {
        rec.ack(s.append(user(text)).expect("append").seq);
    }
    rec.ack(s.append_op(op_started()).expect("append op").seq);
    let ends = line_ends(&session_path(home.path(), s.id()));
    let mut expected: Vec<Event> = (1..=4u64)
        .flat_map(|seq| {
            [
                Event::Write {
                    seq,
                    last: seq,
                    end: ends[seq as usize],
                },
                Event::Ack { seq },
            ]
        })
        .collect();
    assert_eq!(rec.events(), expected, "no sync before an explicit one");
    assert_eq!(
        uncovered_acks(&expected),
        vec![1, 2, 3, 4],
        "the coverage check sees unsynced acks"
    );
    s.sync().expect("sync");
    expected.extend([
        Event::SyncStart {
            sync: 0,
            len: ends[4],
        },
        Event::SyncEnd { sync: 0 },
    ]);
    assert_eq!(rec.events(), expected);
}

/// `docs/DESIGN.md` §2.7 and §3.1: T1 (`tool_dispatched`) is durable before the tool
/// starts and T2 (the result) before the loop goes on, whatever the mode.
#[test]
fn tool_dispatch_and_result_are_synced_before_they_return_in_every_mode() {
    for durability in [Durability::Buffered, Durability::Group, Durability::Sync] {
        let (_home, s, rec) = recorded_session(durability);
        let op = s
            .start_operation(Message::text(Role::User, "list the files"))
            .expect("start");
        let attempt = op
            .model_attempt(Some("scripted"), None)
            .expect("model attempt");
        let call = Message {
            role: Role::Assistant,
            content: vec![Block::ToolCall {
                call_id: "call-1".into(),
                name: "ls".into(),
                arguments: json!({}),
            }],
            usage: None,
            model: None,
            stop_reason: Some("tool_use".into()),
        };
        op.record_assistant(attempt, call).expect("assistant");
        let before_t1 = rec.events();
        if durability == Durability::Buffered {
            assert_eq!(
                syncs_in(&before_t1),
                0,
                "buffered records before T1 were synced: {before_t1:?}"
            );
        }
        let ticket = op
            .dispatch_tool("call-1", EffectClass::ReadOnly)
            .expect("T1");
        rec.ack(s.len() - 1);
        let t2 = op
            .record_result(ticket, ToolOutput::text("a b c"))
            .expect("T2");
        rec.ack(t2.seq);
        let events = rec.events();
        assert_eq!(
            events
                .iter()
                .filter(|e| matches!(e, Event::Ack { .. }))
                .count(),
            2
        );
        assert_eq!(uncovered_acks(&events), Vec::<u64>::new(), "{events:?}");
    }
}

/// The acknowledged records that were not covered, before their
/// acknowledgement, by a sync that started after their write returned and
/// whose file length included them.
fn uncovered_acks(events: &[Event]) -> Vec<u64> {
    let mut uncovered = Vec::new();
    for (ack_at, e) in events.iter().enumerate() {
        let Event::Ack { seq } = *e else { continue };
        // The write that holds it, before the ack (a group commit writes
        // a batch at once).
        let Some((write_at, end)) =
            events[..ack_at]
                .iter()
                .enumerate()
                .find_map(|(i, e)| match *e {
                    Event::Write { seq: s, last, end } if (s..=last).contains(&seq) => {
                        Some((i, end))
                    }
                    _ => None,
                })
        else {
            uncovered.push(seq);
            continue;
        };
        let covered = events.iter().enumerate().any(|(start_at, e)| match *e {
            Event::SyncStart { sync, len } => {
                start_at > write_at
                    && start_at < ack_at
                    && len >= end
                    && events[start_at..ack_at].contains(&Event::SyncEnd { sync })
            }
            _ => false,
        });
        if !covered {
            uncovered.push(seq);
        }
    }
    uncovered
}

fn syncs_in(events: &[Event]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, Event::SyncStart { .. }))
        .count()
}

fn append_concurrently(s: &Arc<Session>, rec: &Arc<Recorder>, threads: usize, each: usize) {
    thread::scope(|scope| {
        for t in 0..threads {
            scope.spawn(move || {
                for i in 0..each {
                    let a = s
                        .append(user(&format!("thread {t} append {i}")))
                        .expect("append");
                    rec.ack(a.seq);
                }
            });
        }
    });
}

#[test]
fn group_commit_acknowledges_each_record_only_after_a_sync_that_covers_it() {
    const THREADS: usize = 16;
    const EACH: usize = 20;
    let (home, s, rec) = recorded_session(Durability::Group);
    let s = Arc::new(s);
    append_concurrently(&s, &rec, THREADS, EACH);
    let events = rec.events();
    let total = THREADS * EACH;

    let acked: BTreeSet<u64> = events
        .iter()
        .filter_map(|e| {
            if let Event::Ack { seq } = e {
                Some(*seq)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(
        acked,
        (1..=total as u64).collect::<BTreeSet<u64>>(),
        "each record acknowledged once"
    );
    assert_eq!(uncovered_acks(&events), Vec::<u64>::new(), "{events:?}");
    let syncs = syncs_in(&events);
    // Batching is proved deterministically below; here it is only reported.
    eprintln!("group commit: {syncs} syncs for {total} appends from {THREADS} threads");
    assert!(syncs <= total, "{syncs} syncs for {total} appends");

    let id = s.id().clone();
    drop(s);
    let reopened = Store::open_dir(home.path())
        .open(&id, Access::Read)
        .expect("reopen");
    assert_eq!(
        (reopened.len(), reopened.open_report().torn.clone()),
        (total as u64 + 1, None)
    );
}

#[test]
fn group_commit_shares_a_sync_among_writers_waiting_together() {
    const THREADS: usize = 16;
    let (_home, s, rec) = recorded_session(Durability::Group);
    let s = Arc::new(s);
    // The first sync waits until every thread has appended. (If group
    // commit held the session lock while syncing, nobody else could append
    // and this test would hang.)
    let appended = Arc::clone(&s);
    rec.hold_next_sync_until(move || appended.len() > THREADS as u64);
    append_concurrently(&s, &rec, THREADS, 1);
    let events = rec.events();
    assert_eq!(uncovered_acks(&events), Vec::<u64>::new(), "{events:?}");
    // The held sync covers its leader; while it is pending every other writer
    // writes and waits, and one more sync covers them all (a second one at
    // most for the one writer that may not yet have said it wrote).
    let syncs = syncs_in(&events);
    assert!(
        syncs <= 3,
        "{syncs} syncs for {THREADS} appends made at once: {events:?}"
    );
}

// ---------------------------------------------------------------------------
// Readers racing a writer
// ---------------------------------------------------------------------------

/// A reader that measured the file just before a writer appended (a whole
/// record, then half of the next) used to read past the measured length and
/// then compute the torn tail's length as `measured - offset`, which
/// underflowed: it panicked on a file that was fine.
#[test]
fn regression_a_reader_racing_an_append_panicked_on_the_tail_it_had_not_measured() {
    let sample = Sample::new();
    let n = sample.lines().len() as u64;
    let leaf = sample.records().last().and_then(|r| match &r.body {
        Body::Entry(e) => Some(e.id.clone()),
        _ => None,
    });
    let raced = |seq: u64, id: &str, parent: Option<EntryId>| {
        let id = EntryId::parse(id).expect("id");
        frame::encode_entry(
            seq,
            TS,
            &Entry {
                id,
                parent,
                body: user("appended while a reader opened"),
            },
        )
    };
    let mut extra = raced(n, "race1", leaf);
    let next = raced(n + 1, "race2", EntryId::parse("race1").ok());
    extra.extend_from_slice(&next[..next.len() / 2]);
    let measured = sample.bytes.len() as u64;
    let store = store_with_vfs(sample.home.path(), RacingWriter::vfs(extra));

    let reader = store
        .open(&sample.id, Access::Read)
        .expect("a racing reader opens");
    // What was measured is read whole; what came after may be seen only as
    // far as it is complete, and is never cut.
    assert!(
        (n..=n + 1).contains(&reader.len()),
        "{} records",
        reader.len()
    );
    for r in sample.records() {
        assert_eq!(reader.record(r.seq).expect("record"), r);
    }
    let file_len = fs::metadata(&sample.path).expect("metadata").len();
    if let Some(t) = reader.open_report().torn.clone() {
        assert!(!t.cut && t.saved_to.is_none(), "{t:?}");
        assert!(
            t.offset >= measured && t.offset + t.len <= file_len,
            "{t:?}"
        );
    }
    assert_eq!(
        torn_files(&sessions_dir(sample.home.path())),
        Vec::<PathBuf>::new()
    );
}

/// Giving a file a second name fails (as a crash between writing a new
/// session's header and naming it would).
#[derive(Debug)]
struct LinkFails;

impl Hook for LinkFails {
    fn hard_link(&self, _: &dyn cairn::vfs::Vfs, _: &Path, _: &Path) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(5))
    }
}

/// Regression: a crash between creating a session file and writing its
/// header left an empty file that every later open refused ("the file is
/// empty"), `--continue` included. The header is now written under a
/// temporary name and the session named only once it is whole.
#[test]
fn regression_a_crash_while_creating_a_session_left_an_empty_unopenable_file() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("sessions");
    let broken = store_with_vfs(home.path(), HookVfs::new(LinkFails));
    let err = broken.create(cairn::NewSession::default()).unwrap_err();
    assert!(err.to_string().contains("cannot create"), "{err}");
    // No session, and no file that looks like one.
    let store = Store::open_dir(home.path());
    assert!(store.list().unwrap().is_empty());
    let names: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(names.iter().all(|n| !n.ends_with(".jsonl")), "{names:?}");
    // A leftover temporary file from a crashed create does not stop the next one.
    let id = cairn::SessionId::generate();
    fs::write(
        dir.join(format!(".{id}.jsonl.new")),
        b"{\"seq\":0,\"ts\":\"t\",\"kin",
    )
    .unwrap();
    let s = store
        .create(cairn::NewSession {
            id: Some(id.clone()),
            ..Default::default()
        })
        .unwrap();
    drop(s);
    assert!(!dir.join(format!(".{id}.jsonl.new")).exists());
    assert_eq!(store.list().unwrap().len(), 1);
    assert!(store.open(&id, Access::Write).is_ok());
}

/// A file system without hard links (`hard_link` says `Unsupported`).
#[derive(Debug)]
struct NoHardLinks;

impl Hook for NoHardLinks {
    fn hard_link(&self, _: &dyn cairn::vfs::Vfs, _: &Path, _: &Path) -> io::Result<()> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "no hard links"))
    }
}

/// The test seams of other tests pass `hard_link` through, so this pins the
/// fallback on its own: without hard links a new session is named by a
/// rename, leaves no temporary file, and an id in use is still refused.
#[test]
fn without_hard_links_a_new_session_is_named_by_a_rename() {
    let home = tempfile::tempdir().expect("tempdir");
    let store = store_with_vfs(home.path(), HookVfs::new(NoHardLinks));
    let s = store.create(NewSession::default()).expect("create");
    s.append(user("one")).expect("append");
    let id = s.id().clone();
    drop(s);
    let again = store.create(NewSession {
        id: Some(id.clone()),
        ..NewSession::default()
    });
    assert!(again.is_err(), "the id of an existing session is refused");
    let names: Vec<String> = fs::read_dir(sessions_dir(home.path()))
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .collect();
    assert!(names.iter().all(|n| !n.ends_with(".new")), "{names:?}");
    let s = Store::open_dir(home.path())
        .open(&id, Access::Write)
        .expect("the renamed session opens");
    assert_eq!(s.len(), 2);
}

/// Regression: a crash during `create` left `.<id>.jsonl.new`, which was
/// never listed and never removed. The store's first write removes such a
/// file unless a create in progress holds its session's lock.
#[test]
fn a_crashed_creates_temporary_is_removed_at_the_first_write_unless_in_use() {
    use cairn::vfs::{OpenMode, StdVfs, Vfs};
    let home = tempfile::tempdir().expect("temp dir");
    let store = Store::open_dir(home.path());
    drop(store.create(NewSession::default()).expect("create"));
    let dir = sessions_dir(home.path());
    let tmp = |id: &SessionId| dir.join(format!(".{id}.jsonl.new"));
    let (stale, locked_free, busy) = (
        SessionId::generate(),
        SessionId::generate(),
        SessionId::generate(),
    );
    for id in [&stale, &locked_free, &busy] {
        fs::write(tmp(id), b"{\"seq\":0,\"ts\":\"2026-").expect("write temporary");
    }
    // A lock file nobody holds, and one a create in progress holds.
    fs::write(dir.join(format!("{locked_free}.lock")), b"4242\n").expect("lock file");
    let held = StdVfs
        .open(&dir.join(format!("{busy}.lock")), OpenMode::CreateOrOpen)
        .expect("open lock");
    assert!(held.try_lock().expect("lock"));

    // Readers change nothing.
    let store = Store::open_dir(home.path());
    store.list().expect("list");
    assert!(tmp(&stale).exists() && tmp(&locked_free).exists());

    let s = store.create(NewSession::default()).expect("create");
    assert!(!tmp(&stale).exists(), "no lock file: removed");
    assert!(!tmp(&locked_free).exists(), "its lock was free: removed");
    assert!(tmp(&busy).exists(), "its create holds the lock: kept");
    let listed = store.list().expect("list");
    assert_eq!(listed.len(), 2, "temporaries are never sessions");

    // Once its create is gone, the next store that writes removes it too.
    drop((held, s));
    let again = Store::open_dir(home.path());
    let first = again.list().expect("list")[0].id.clone();
    drop(again.open(&first, Access::Write).expect("open for writing"));
    assert!(!tmp(&busy).exists());
}
