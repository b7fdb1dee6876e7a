//! One writer per session: a second writer is refused with
//! [`OpenError::InUse`] naming the holder, on every handle; readers are
//! never blocked and never block; the lock is released when the writer goes.

use super::build::user;
use super::fixture::Fixture;
use super::util::{OrFail, other_store, raw_records, store};
use crate::backend::Access;
use crate::error::{AppendError, OpenError};
use crate::session::{NewSession, Session};

fn expect_in_use(name: &str, r: Result<Session, OpenError>, what: &str) {
    match r {
        Err(OpenError::InUse { holder, .. }) => assert_eq!(
            holder,
            Some(std::process::id()),
            "{name}: {what}: the error names the holder's process"
        ),
        Err(e) => panic!("{name}: {what}: expected InUse, got: {e}"),
        Ok(_) => panic!("{name}: {what}: a second writer was let in"),
    }
}

/// While a writer holds a session (created or opened for writing), opening
/// it for writing again — through the same handle or another — fails with
/// `InUse` naming this process, `writer_active` is true on both handles,
/// and creating a session with the same id fails (`AlreadyExists`, or
/// `InUse` for backends that lock first). Once the writer is dropped,
/// `writer_active` is false, creating the id again fails with
/// `AlreadyExists`, and a new writer gets in; while that one holds it,
/// others are refused again.
pub fn a_second_writer_is_refused_naming_the_holder(f: &dyn Fixture) {
    let name = f.name();
    let s = store(f)
        .create(NewSession::default())
        .or_fail(format_args!("{name}: create"));
    let id = s.id().clone();
    s.append(user("hello")).or_fail("append");
    expect_in_use(
        &name,
        store(f).open(&id, Access::Write),
        "same handle, after create",
    );
    expect_in_use(
        &name,
        other_store(f).open(&id, Access::Write),
        "another handle, after create",
    );
    assert!(
        f.backend().writer_active(&id),
        "{name}: writer_active while held"
    );
    assert!(
        f.reopen().writer_active(&id),
        "{name}: writer_active seen by another handle"
    );
    // Creating a held session may be refused either way (the file backend
    // takes the lock first); what matters is that nothing is created.
    match store(f).create(NewSession {
        id: Some(id.clone()),
        ..NewSession::default()
    }) {
        Err(OpenError::AlreadyExists { .. } | OpenError::InUse { .. }) => {}
        Err(e) => panic!("{name}: creating a held id: expected AlreadyExists, got: {e}"),
        Ok(_) => panic!("{name}: a session was created twice"),
    }
    // The refused attempts took nothing away from the holder.
    s.append(user("still mine"))
        .or_fail(format_args!("{name}: the holder appends"));
    drop(s);
    assert!(
        !f.backend().writer_active(&id),
        "{name}: no writer after drop"
    );
    assert!(
        !f.reopen().writer_active(&id),
        "{name}: no writer after drop (other handle)"
    );
    match other_store(f).create(NewSession {
        id: Some(id.clone()),
        ..NewSession::default()
    }) {
        Err(OpenError::AlreadyExists { .. }) => {}
        Err(e) => panic!("{name}: creating an existing id: expected AlreadyExists, got: {e}"),
        Ok(_) => panic!("{name}: a session was created twice"),
    }

    let second = other_store(f)
        .open(&id, Access::Write)
        .or_fail(format_args!("{name}: a new writer after the first dropped"));
    assert_eq!(second.len(), 3);
    expect_in_use(
        &name,
        store(f).open(&id, Access::Write),
        "while the second writer holds it",
    );
    assert!(f.backend().writer_active(&id));
    second.append(user("second writer")).or_fail("append");
    drop(second);
    let third = store(f)
        .open(&id, Access::Write)
        .or_fail(format_args!("{name}: a third writer"));
    assert_eq!(third.len(), 4);
}

/// While a writer holds a session, readers on any handle open it, see every
/// acknowledged record, cannot append (`ReadOnly`) and do not stop the
/// writer from appending; a reader's view is the snapshot it opened, and a
/// later reader sees the later records.
pub fn readers_are_not_blocked_by_a_writer(f: &dyn Fixture) {
    let name = f.name();
    let w = store(f)
        .create(NewSession::default())
        .or_fail(format_args!("{name}: create"));
    let id = w.id().clone();
    for i in 0..3 {
        w.append(user(&format!("record {i}"))).or_fail("append");
    }
    let r1 = other_store(f).open(&id, Access::Read).or_fail(format_args!(
        "{name}: a reader while a writer holds the session"
    ));
    let r2 = store(f)
        .open(&id, Access::Read)
        .or_fail(format_args!("{name}: a reader on the writer's handle"));
    assert!(
        raw_records(&r1) == raw_records(&w),
        "{name}: the reader sees every record"
    );
    assert_eq!(r2.len(), 4);
    assert!(!r1.is_writer());
    match r1.append(user("sneaky")) {
        Err(AppendError::ReadOnly { .. }) => {}
        Err(e) => panic!("{name}: a reader's append: expected ReadOnly, got: {e}"),
        Ok(_) => panic!("{name}: a reader appended"),
    }
    w.append(user("written while readers are open"))
        .or_fail(format_args!(
            "{name}: the writer appends while readers are open"
        ));
    assert_eq!(
        r1.len(),
        4,
        "{name}: a reader's view is the snapshot it opened"
    );
    let r3 = other_store(f)
        .open(&id, Access::Read)
        .or_fail(format_args!("{name}: a later reader"));
    assert_eq!(r3.len(), 5, "{name}: a later reader sees the later record");
    assert!(raw_records(&r3) == raw_records(&w));
    drop((r1, r2, r3));
    assert!(
        f.backend().writer_active(&id),
        "{name}: readers leave the writer's lock alone"
    );
    w.append(user("after the readers left")).or_fail("append");
    drop(w);
    let r = other_store(f)
        .open(&id, Access::Read)
        .or_fail(format_args!("{name}: a reader after the writer left"));
    assert_eq!(r.len(), 6);
    let w2 = other_store(f)
        .open(&id, Access::Write)
        .or_fail(format_args!("{name}: a writer while a reader is open"));
    assert_eq!(w2.len(), 6);
}
