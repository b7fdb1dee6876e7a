//! Crashes, failures and damage: an append interrupted by a crash loses
//! nothing acknowledged (a torn tail is cut by the next writer, or nothing
//! was visible); a failed write poisons the handle; damage in the middle is a
//! hard error naming the line; a newer format is refused without keeping
//! the lock.

use serde_json::json;

use super::build::user;
use super::fixture::{Fixture, Interrupted};
use super::util::{OrFail, other_store, raw_records, store, stored_lines};
use crate::backend::Access;
use crate::error::{AppendError, OpenError};
use crate::frame;
use crate::id::{EntryId, SessionId};
use crate::record::Body;
use crate::record::{Entry, FORMAT_VERSION, Header, Lineage};
use crate::session::{NewSession, Session, WRITER};

/// A writer killed in the middle of appending a record (simulated by the
/// fixture) leaves the acknowledged records intact: a reader sees exactly
/// them (reporting, not cutting, a torn tail); the next writer sees exactly
/// them (cutting and reporting a torn tail, for backends that can have
/// one), appends at the next `seq`, and after that the session opens clean.
pub fn an_interrupted_append_loses_nothing_acknowledged(f: &dyn Fixture) {
    let name = f.name();
    let s = store(f)
        .create(NewSession::default())
        .or_fail(format_args!("{name}: create"));
    let id = s.id().clone();
    for i in 0..3 {
        s.append(user(&format!("acknowledged {i}")))
            .or_fail("append");
    }
    let written = raw_records(&s);
    let n = s.len();
    let lost = Entry {
        id: EntryId::random(),
        parent: s.leaf(),
        body: user("never acknowledged"),
    };
    drop(s);
    let line = frame::encode_entry(n, &crate::time::now_rfc3339(), &lost);
    let kind = f.interrupt_append(&id, &line);

    let reader = other_store(f)
        .open(&id, Access::Read)
        .or_fail(format_args!("{name}: a reader after an interrupted append"));
    assert!(
        raw_records(&reader) == written,
        "{name}: a reader sees the acknowledged records"
    );
    match (kind, &reader.open_report().torn) {
        (Interrupted::Torn, Some(t)) => assert!(!t.cut, "{name}: readers never cut"),
        (Interrupted::Atomic, None) => {}
        (kind, torn) => panic!("{name}: {kind:?} append, reader reported {torn:?}"),
    }
    drop(reader);

    let writer = other_store(f)
        .open(&id, Access::Write)
        .or_fail(format_args!("{name}: a writer after an interrupted append"));
    assert!(
        raw_records(&writer) == written,
        "{name}: the writer sees the acknowledged records"
    );
    let end: u64 = written.iter().map(|l| l.len() as u64).sum();
    match (kind, &writer.open_report().torn) {
        (Interrupted::Torn, Some(t)) => {
            assert!(t.cut, "{name}: a writer cuts a torn tail");
            assert_eq!(
                t.offset, end,
                "{name}: the cut starts after the last intact line"
            );
        }
        (Interrupted::Atomic, None) => {}
        (kind, torn) => panic!("{name}: {kind:?} append, writer reported {torn:?}"),
    }
    assert!(writer.entry(&lost.id).or_fail("look up").is_none());
    let next = writer
        .append(user("after the crash"))
        .or_fail(format_args!("{name}: append after the crash"));
    assert_eq!(
        next.seq, n,
        "{name}: the next record takes the lost one's seq"
    );
    drop(writer);

    let (lines, torn) = stored_lines(&*f.reopen(), &id, Access::Read);
    assert_eq!(torn, None, "{name}: the session is clean afterwards");
    assert_eq!(lines.len() as u64, n + 1);
    assert!(lines[..written.len()] == written[..]);
}

/// After a failed write (the fixture's failing disk), the append reports
/// an I/O error, and the handle refuses every later append and sync as
/// poisoned even once the disk works again. Other handles see exactly the
/// acknowledged records; reopening recovers and appends continue.
/// Backends that cannot fail on demand pass vacuously.
pub fn a_failed_write_poisons_the_handle(f: &dyn Fixture) {
    let name = f.name();
    if !f.fail_writes(false) {
        return;
    }
    let s = store(f)
        .create(NewSession::default())
        .or_fail(format_args!("{name}: create"));
    let id = s.id().clone();
    s.append(user("acknowledged")).or_fail("append");
    let written = raw_records(&s);
    f.fail_writes(true);
    let failed = s.append(user("fails"));
    f.fail_writes(false);
    match failed {
        Err(AppendError::Io { .. }) => {}
        Err(e) => panic!("{name}: a failed write: expected an I/O error, got: {e}"),
        Ok(_) => panic!("{name}: an append succeeded on a failing disk"),
    }
    match s.append(user("after the failure")) {
        Err(AppendError::Poisoned { .. }) => {}
        Err(e) => panic!("{name}: append after a failure: expected Poisoned, got: {e}"),
        Ok(_) => panic!("{name}: a poisoned handle appended"),
    }
    match s.sync() {
        Err(AppendError::Poisoned { .. }) => {}
        Err(e) => panic!("{name}: sync after a failure: expected Poisoned, got: {e}"),
        Ok(()) => panic!("{name}: a poisoned handle synced"),
    }
    let reader = other_store(f)
        .open(&id, Access::Read)
        .or_fail(format_args!("{name}: a reader after the failure"));
    assert!(
        raw_records(&reader) == written,
        "{name}: only acknowledged records are there"
    );
    drop((reader, s));
    let again = store(f)
        .open(&id, Access::Write)
        .or_fail(format_args!("{name}: reopen after the failure"));
    assert!(raw_records(&again) == written);
    let a = again
        .append(user("after reopening"))
        .or_fail(format_args!("{name}: append after reopening"));
    assert_eq!(a.seq, written.len() as u64);
}

/// A record damaged in storage, with intact records after it, makes every
/// open — for reading and for writing, on any handle — fail with
/// `Damaged` naming its line; a failed open for writing leaves no lock, and
/// other sessions are unaffected. Backends that cannot be damaged on demand
/// pass vacuously.
pub fn a_bad_record_in_the_middle_is_a_hard_error(f: &dyn Fixture) {
    let name = f.name();
    let s = store(f)
        .create(NewSession::default())
        .or_fail(format_args!("{name}: create"));
    let id = s.id().clone();
    for i in 0..4 {
        s.append(user(&format!("record {i}"))).or_fail("append");
    }
    drop(s);
    let healthy = store(f)
        .create(NewSession::default())
        .or_fail(format_args!("{name}: create another session"));
    let healthy_id = healthy.id().clone();
    drop(healthy);
    if !f.corrupt(&id, 2) {
        return;
    }
    for access in [Access::Read, Access::Write, Access::Write] {
        match other_store(f).open(&id, access) {
            Err(OpenError::Damaged(d)) => {
                assert_eq!(d.line, 3, "{name}: the error names line 3 ({access:?})");
            }
            Err(e) => panic!("{name}: expected Damaged ({access:?}), got: {e}"),
            Ok(_) => panic!("{name}: a damaged session opened ({access:?})"),
        }
    }
    assert!(
        !f.backend().writer_active(&id),
        "{name}: a failed open keeps no lock"
    );
    other_store(f)
        .open(&healthy_id, Access::Write)
        .or_fail(format_args!("{name}: another session still opens"));
    let listed = other_store(f)
        .list()
        .or_fail(format_args!("{name}: list a store with a damaged session"));
    assert!(
        listed.iter().any(|l| l.id == id),
        "{name}: the damaged session is listed"
    );
}

/// A session whose header has a newer format version is refused with
/// `NewerFormat` (naming the version), by readers and writers, every time:
/// the refused writer keeps no lock, and the session can be removed.
pub fn a_newer_format_is_refused_and_the_lock_released(f: &dyn Fixture) {
    let name = f.name();
    let id = SessionId::generate();
    let ts = crate::time::now_rfc3339();
    let header = Header {
        format: FORMAT_VERSION + 1,
        session: id.clone(),
        created: ts.clone(),
        cwd: None,
        title: Some("from the future".into()),
        app_state: json!({}),
        lineage: Lineage::default(),
        writer: WRITER.into(),
    };
    let line = frame::encode(0, &ts, &Body::Header(header));
    let log = f
        .backend()
        .create(&id, &line)
        .or_fail(format_args!("{name}: create a session from raw bytes"));
    drop(log);
    for access in [Access::Write, Access::Write, Access::Read] {
        match Session::open(&*f.reopen(), &id, access) {
            Err(OpenError::NewerFormat { found, .. }) => assert_eq!(found, FORMAT_VERSION + 1),
            Err(e) => panic!("{name}: expected NewerFormat ({access:?}), got: {e}"),
            Ok(_) => panic!("{name}: a newer format opened ({access:?})"),
        }
    }
    assert!(
        !f.backend().writer_active(&id),
        "{name}: a refused writer keeps no lock"
    );
    f.backend()
        .remove(&id)
        .or_fail(format_args!("{name}: remove the refused session"));
}
