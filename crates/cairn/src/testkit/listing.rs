//! Listing and removal: `Store::list` through any backend (and whatever
//! listing cache it keeps) is newest first and agrees with the sessions
//! themselves — counts, titles, first message, lineage, status — and follows
//! appends and removals at once.

use serde_json::json;

use super::build::{calls, user};
use super::fixture::Fixture;
use super::util::{OrFail, next_millisecond, other_store, store};
use crate::backend::Access;
use crate::error::{OpenError, StoreError};
use crate::id::SessionId;
use crate::journal::Status;
use crate::record::{EntryBody, Message, Outcome, Role, SessionInfo};
use crate::session::NewSession;
use crate::store::{Store, summary_of};
use crate::summary::SessionSummary;

/// Checks a listing against the sessions it lists, opened read-only: every
/// field but the status equals [`summary_of`]; the status is the phase
/// with the writer lock as `writer_active` reports it.
fn assert_agrees(name: &str, store: &Store, listed: &[SessionSummary], when: &str) {
    for l in listed {
        let s = store
            .open(&l.id, Access::Read)
            .or_fail(format_args!("{name}: open a listed session"));
        let mut truth = summary_of(&s).or_fail("summarize");
        truth.status = truth.phase.status(store.backend().writer_active(&l.id));
        assert_eq!(
            l, &truth,
            "{name}: the listing agrees with the session {when}"
        );
    }
    let mut sorted = listed.to_vec();
    sorted.sort_by(|a, b| b.updated.cmp(&a.updated).then_with(|| b.id.cmp(&a.id)));
    assert_eq!(listed, sorted.as_slice(), "{name}: newest first {when}");
}

fn ids(listed: &[SessionSummary]) -> Vec<SessionId> {
    listed.iter().map(|l| l.id.clone()).collect()
}

/// Sessions with titles set at creation and later, a long first message,
/// a finished operation, a fork and a subagent, one held by a writer with an
/// operation open: `Store::list` on another handle lists them newest first,
/// agreeing field by field with each session (entries, records, title,
/// first message cut to 80 characters, fork origin, parent, status
/// `running` while the writer holds it and `interrupted` after). An append
/// to the oldest moves it first at once, with its new counts; listing twice
/// gives the same; `Store::latest` is the first listed.
pub fn listing_is_newest_first_with_counts_titles_and_status(f: &dyn Fixture) {
    let name = f.name();
    let st = store(f);
    let ok = |what: &str| format!("{name}: {what}");
    let long = format!("{} end", "a long first message ".repeat(8));

    let alpha = st
        .create(NewSession {
            title: Some("alpha".into()),
            ..NewSession::default()
        })
        .or_fail(ok("create alpha"));
    let first = alpha.append(user(&long)).or_fail(ok("append"));
    alpha
        .append(EntryBody::Message(Message::text(Role::Assistant, "ok")))
        .or_fail(ok("append"));
    next_millisecond();

    let beta = st.create(NewSession::default()).or_fail(ok("create beta"));
    let op = beta
        .start_operation(Message::text(Role::User, "do the thing"))
        .or_fail(ok("start"));
    let t = op.model_attempt(None, None).or_fail(ok("attempt"));
    op.record_assistant(
        t,
        calls("spawning", &[("spawn-1", "subagent", json!({"task": "x"}))]),
    )
    .or_fail(ok("reply"));
    beta.append(EntryBody::SessionInfo(SessionInfo {
        title: Some("beta renamed".into()),
    }))
    .or_fail(ok("rename"));
    next_millisecond();

    let child = st
        .spawn_child(&beta, "spawn-1", Some("child".into()), 3)
        .or_fail(ok("spawn a child"));
    child.append(user("child task")).or_fail(ok("append"));
    let child_id = child.id().clone();
    drop(child);
    next_millisecond();
    let op = beta.resume_operation().or_fail(ok("the open operation"));
    op.deny("spawn-1", "done elsewhere").or_fail(ok("deny"));
    op.finish(Outcome::Completed, None).or_fail(ok("finish"));
    let beta_id = beta.id().clone();
    drop(beta);
    next_millisecond();

    let fork = st
        .fork(&alpha, first.id.as_ref(), None)
        .or_fail(ok("fork alpha"));
    fork.append(user("the fork goes on"))
        .or_fail(ok("append to the fork"));
    let fork_id = fork.id().clone();
    drop(fork);
    next_millisecond();

    let running = st
        .create(NewSession::default())
        .or_fail(ok("create running"));
    let running_id = running.id().clone();
    let _op = running
        .start_operation(Message::text(Role::User, "working on it"))
        .or_fail(ok("start"));
    let alpha_id = alpha.id().clone();
    drop(alpha);

    let other = other_store(f);
    let listed = other.list().or_fail(ok("list"));
    assert_eq!(
        ids(&listed),
        vec![
            running_id.clone(),
            fork_id.clone(),
            beta_id.clone(),
            child_id.clone(),
            alpha_id.clone()
        ],
        "{name}: newest first"
    );
    assert_agrees(&name, &other, &listed, "with a writer open");
    let by_id = |id: &SessionId| {
        listed
            .iter()
            .find(|l| &l.id == id)
            .or_fail(format_args!("{name}: {id} is listed"))
            .clone()
    };
    let a = by_id(&alpha_id);
    assert_eq!(a.title.as_deref(), Some("alpha"));
    assert_eq!((a.entries, a.records), (2, 3), "{name}: alpha's counts");
    assert_eq!(
        a.first_message.as_ref().map(|m| m.chars().count()),
        Some(80)
    );
    assert_eq!(a.status, Status::Init);
    let b = by_id(&beta_id);
    assert_eq!(
        b.title.as_deref(),
        Some("beta renamed"),
        "{name}: a later title wins"
    );
    assert_eq!(b.status, Status::Succeeded);
    assert_eq!(b.first_message.as_deref(), Some("do the thing"));
    assert_eq!(
        by_id(&child_id).parent.as_ref(),
        Some(&beta_id),
        "{name}: child's parent"
    );
    assert_eq!(
        by_id(&fork_id).forked_from.as_ref(),
        Some(&alpha_id),
        "{name}: fork origin"
    );
    assert_eq!(
        by_id(&running_id).status,
        Status::Running,
        "{name}: held and open"
    );
    assert_eq!(other.latest().or_fail(ok("latest")), running_id);

    drop(running);
    let listed = other.list().or_fail(ok("list again"));
    assert_eq!(by_id(&running_id).records, listed[0].records);
    assert_eq!(
        listed[0].status,
        Status::Interrupted,
        "{name}: open, writer gone"
    );
    assert_agrees(&name, &other, &listed, "after the writer left");

    next_millisecond();
    let alpha = st
        .open(&alpha_id, Access::Write)
        .or_fail(ok("reopen alpha"));
    alpha.append(user("alpha again")).or_fail(ok("append"));
    let listed = other.list().or_fail(ok("list after an append"));
    assert_eq!(
        listed[0].id, alpha_id,
        "{name}: the session appended to last is first"
    );
    assert_eq!((listed[0].entries, listed[0].records), (3, 4));
    assert_agrees(&name, &other, &listed, "after an append");
    drop(alpha);
    let twice = other.list().or_fail(ok("list twice"));
    assert_eq!(
        twice,
        other.list().or_fail(ok("list thrice")),
        "{name}: listing is stable"
    );
    assert_eq!(ids(&twice), ids(&listed));
}

/// The stamp — what listing caches are validated with — changes with every
/// append and not otherwise, on every handle; an unknown session has none.
pub fn stamp_changes_whenever_the_log_changes(f: &dyn Fixture) {
    let name = f.name();
    let s = store(f)
        .create(NewSession::default())
        .or_fail(format_args!("{name}: create"));
    let id = s.id().clone();
    let mut seen = vec![f.backend().stamp(&id).or_fail("stamp")];
    for i in 0..5 {
        assert_eq!(f.reopen().stamp(&id).or_fail("stamp"), seen[seen.len() - 1]);
        s.append(user(&format!("{i}"))).or_fail("append");
        let now = f.reopen().stamp(&id).or_fail("stamp");
        assert!(!seen.contains(&now), "{name}: an append changes the stamp");
        assert_eq!(f.backend().stamp(&id).or_fail("stamp"), now);
        seen.push(now);
    }
    match f.backend().stamp(&SessionId::generate()) {
        Err(StoreError::NoSuchSession { .. }) => {}
        other => panic!("{name}: the stamp of an unknown session: {other:?}"),
    }
}

/// `Store::remove` is refused (`InUse`) while a writer holds the session;
/// afterwards it removes that session only: it is no longer listed, opens
/// fail with `NotFound`, removing it again fails with `NoSuchSession`, and
/// its id can be used again.
pub fn remove_deletes_one_session_and_is_refused_while_written(f: &dyn Fixture) {
    let name = f.name();
    let st = store(f);
    let keep = st.create(NewSession::default()).or_fail("create");
    keep.append(user("keep me")).or_fail("append");
    let keep_id = keep.id().clone();
    drop(keep);
    let gone = st.create(NewSession::default()).or_fail("create");
    gone.append(user("remove me")).or_fail("append");
    let gone_id = gone.id().clone();
    match other_store(f).remove(&gone_id) {
        Err(StoreError::Open(OpenError::InUse { .. })) => {}
        other => panic!("{name}: removing a session a writer holds: {other:?}"),
    }
    drop(gone);
    let listed = other_store(f).list().or_fail("list");
    assert_eq!(listed.len(), 2);
    other_store(f)
        .remove(&gone_id)
        .or_fail(format_args!("{name}: remove"));
    let listed = st.list().or_fail("list after remove");
    assert_eq!(
        ids(&listed),
        vec![keep_id.clone()],
        "{name}: only the other session is left"
    );
    for access in [Access::Read, Access::Write] {
        match st.open(&gone_id, access) {
            Err(OpenError::NotFound { .. }) => {}
            Err(e) => panic!("{name}: opening a removed session: expected NotFound, got: {e}"),
            Ok(_) => panic!("{name}: a removed session opened"),
        }
    }
    match st.remove(&gone_id) {
        Err(StoreError::NoSuchSession { .. }) => {}
        other => panic!("{name}: removing twice: {other:?}"),
    }
    st.open(&keep_id, Access::Read)
        .or_fail(format_args!("{name}: the other session is intact"));
    let reborn = st
        .create(NewSession {
            id: Some(gone_id.clone()),
            ..NewSession::default()
        })
        .or_fail(format_args!("{name}: reuse a removed id"));
    assert_eq!(
        reborn.len(),
        1,
        "{name}: nothing of the removed session comes back"
    );
}
