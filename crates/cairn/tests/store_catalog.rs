//! The session store from the outside: listing (fields, order, excerpts),
//! `latest`, resolving sessions by id or prefix, removal, opening a session
//! file by path, and the catalog — a cache at `<home>/catalog.json` that must
//! never make a listing wrong, whether it is deleted, stale, corrupted,
//! describes sessions that are gone or misses ones that exist, or is written
//! by threads listing while others append.

// Test helpers panic on purpose: a panic is a failed test.
#![allow(clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};

use cairn::testkit::build::{assistant, user};
use cairn::{
    Access, Durability, EntryBody, MemoryBackend, Message, NewSession, OpenError, Role, Session,
    SessionId, SessionInfo, SessionSummary, Store, StoreError, locate_path, summary_of,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn home() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

fn catalog_path(home: &Path) -> PathBuf {
    home.join("catalog.json")
}

fn create(store: &Store, title: Option<&str>) -> Session {
    let s = store
        .create(NewSession {
            title: title.map(str::to_owned),
            ..NewSession::default()
        })
        .expect("create session");
    s.set_durability(Durability::Buffered);
    s
}

fn create_with_id(store: &Store, id: &str) -> Session {
    let id = SessionId::parse(id).expect("valid id");
    store
        .create(NewSession {
            id: Some(id),
            ..NewSession::default()
        })
        .expect("create session")
}

fn append(s: &Session, body: EntryBody) {
    s.append(body).unwrap_or_else(|e| panic!("append: {e}"));
}

/// Waits until the clock shows a later millisecond than every record
/// written so far, so the next record's time sorts strictly after them.
fn next_millisecond() {
    let now = cairn::now_rfc3339();
    while cairn::now_rfc3339() == now {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The listing computed without any catalog: every session opened
/// read-only and summarized, newest first.
fn truth(store: &Store) -> Vec<SessionSummary> {
    let mut out: Vec<SessionSummary> = store
        .backend()
        .list()
        .expect("list ids")
        .into_iter()
        .map(|id| {
            let s = store.open(&id, Access::Read).expect("open read-only");
            let mut summary = summary_of(&s).expect("summarize");
            summary.status = summary.phase.status(store.backend().writer_active(&id));
            summary
        })
        .collect();
    out.sort_by(|a, b| b.updated.cmp(&a.updated).then_with(|| b.id.cmp(&a.id)));
    out
}

fn ids(list: &[SessionSummary]) -> Vec<SessionId> {
    list.iter().map(|s| s.id.clone()).collect()
}

fn summary<'a>(list: &'a [SessionSummary], id: &SessionId) -> &'a SessionSummary {
    list.iter()
        .find(|s| &s.id == id)
        .unwrap_or_else(|| panic!("{id} is not listed"))
}

/// The `ts` of a session's last record, read from its file.
fn last_ts(s: &Session) -> String {
    let text = std::fs::read_to_string(s.location()).expect("read session file");
    let last = text.lines().last().expect("a header at least");
    let v: Value = serde_json::from_str(last).expect("json line");
    v["ts"].as_str().expect("ts").to_owned()
}

fn read_catalog(home: &Path) -> Value {
    let bytes = std::fs::read(catalog_path(home)).expect("catalog.json exists");
    serde_json::from_slice(&bytes).expect("the catalog is JSON")
}

fn catalog_ids(home: &Path) -> BTreeSet<String> {
    read_catalog(home)["sessions"]
        .as_object()
        .expect("sessions")
        .keys()
        .cloned()
        .collect()
}

// ---------------------------------------------------------------------------
// Listing
// ---------------------------------------------------------------------------

#[test]
fn listing_shows_each_session_newest_first() {
    let home = home();
    let store = Store::open_dir(home.path());
    let a = create(&store, Some("Alpha"));
    append(&a, user("hello from alpha"));
    append(&a, assistant("hi"));
    next_millisecond();
    let b = create(&store, None);
    append(
        &b,
        EntryBody::Message(Message::text(Role::System, "you draw comics")),
    );
    append(&b, assistant("ready"));
    append(&b, user("draw the pig hero"));
    next_millisecond();
    let c = create(&store, Some("Empty"));

    let list = store.list().expect("list");
    assert_eq!(ids(&list), [c.id().clone(), b.id().clone(), a.id().clone()]);
    let sa = summary(&list, a.id());
    assert_eq!(sa.title.as_deref(), Some("Alpha"));
    assert_eq!(sa.created, a.header().created);
    assert_eq!(sa.updated, last_ts(&a));
    assert_eq!((sa.entries, sa.records), (2, 3));
    assert_eq!(sa.first_message.as_deref(), Some("hello from alpha"));
    assert_eq!(sa.forked_from, None);
    let sb = summary(&list, b.id());
    assert_eq!(sb.title, None);
    // The first *user* message, not the first message.
    assert_eq!(sb.first_message.as_deref(), Some("draw the pig hero"));
    assert_eq!((sb.entries, sb.records), (3, 4));
    let sc = summary(&list, c.id());
    assert_eq!(
        (sc.entries, sc.records, sc.first_message.as_deref()),
        (0, 1, None)
    );
    assert_eq!(sc.updated, sc.created);
    assert_eq!(list, truth(&store));

    // Appending to the oldest makes it the newest.
    next_millisecond();
    append(&a, user("and again"));
    let list = store.list().expect("list");
    assert_eq!(ids(&list), [a.id().clone(), c.id().clone(), b.id().clone()]);
    assert_eq!(summary(&list, a.id()).updated, last_ts(&a));
    assert_eq!(
        summary(&list, a.id()).first_message.as_deref(),
        Some("hello from alpha")
    );
}

#[test]
fn listing_in_memory_follows_the_same_rules() {
    let backend = MemoryBackend::new();
    let store = Store::with_backend(Arc::new(backend));
    let a = create(&store, Some("Alpha"));
    append(&a, user("one"));
    next_millisecond();
    let b = create(&store, Some("Beta"));
    assert_eq!(
        ids(&store.list().expect("list")),
        [b.id().clone(), a.id().clone()]
    );
    next_millisecond();
    append(
        &a,
        EntryBody::SessionInfo(SessionInfo {
            title: Some("Alpha, renamed".into()),
        }),
    );
    let list = store.list().expect("list");
    assert_eq!(ids(&list), [a.id().clone(), b.id().clone()]);
    assert_eq!(
        summary(&list, a.id()).title.as_deref(),
        Some("Alpha, renamed")
    );
    assert_eq!(summary(&list, a.id()).entries, 2);
    assert_eq!(list, truth(&store));
}

#[test]
fn first_user_message_is_cut_to_80_characters() {
    let home = home();
    let store = Store::open_dir(home.path());
    let long = create(&store, None);
    // Multi-byte characters: the cut is by characters, never inside one.
    append(&long, user(&"猪猪侠 大战 超人强。".repeat(20)));
    let spaced = create(&store, None);
    append(&spaced, user("  draw\n\n the   pig\thero  "));
    let exact = create(&store, None);
    let eighty = "x".repeat(80);
    append(&exact, user(&eighty));

    let list = store.list().expect("list");
    let cut = summary(&list, long.id())
        .first_message
        .clone()
        .expect("excerpt");
    assert_eq!(cut.chars().count(), 80);
    assert!(cut.ends_with('…'), "{cut}");
    assert!(cut.starts_with("猪猪侠 大战 超人强。猪猪侠 大战"), "{cut}");
    assert_eq!(
        summary(&list, spaced.id()).first_message.as_deref(),
        Some("draw the pig hero")
    );
    assert_eq!(
        summary(&list, exact.id()).first_message.as_deref(),
        Some(eighty.as_str())
    );
    assert_eq!(cairn::excerpt(&"y".repeat(81), 80).chars().count(), 80);
}

#[test]
fn listing_an_empty_store_creates_nothing() {
    let home = home();
    let store = Store::open_dir(home.path().join("not-yet"));
    assert_eq!(store.list().expect("list"), Vec::<SessionSummary>::new());
    assert!(!home.path().join("not-yet").exists());
}

#[test]
fn latest_is_the_most_recently_updated_session() {
    let home = home();
    let store = Store::open_dir(home.path());
    let err = store.latest().expect_err("empty store");
    assert!(matches!(err, StoreError::Empty(_)), "{err}");
    assert!(
        err.to_string()
            .contains("has no sessions yet; `cairn new` creates one"),
        "{err}"
    );

    let a = create(&store, None);
    next_millisecond();
    let b = create(&store, None);
    assert_eq!(store.latest().expect("latest"), b.id().clone());
    next_millisecond();
    append(&a, user("back to a"));
    assert_eq!(store.latest().expect("latest"), a.id().clone());
}

#[test]
fn unreadable_session_is_listed_without_hiding_the_others() {
    let home = home();
    let store = Store::open_dir(home.path());
    let good = create(&store, Some("good"));
    append(&good, user("fine"));
    let bad_id = "01hzy00000000000000000000b";
    std::fs::write(
        home.path().join("sessions").join(format!("{bad_id}.jsonl")),
        b"not a session\n",
    )
    .expect("write");
    let list = store.list().expect("list");
    assert_eq!(list.len(), 2);
    assert_eq!(summary(&list, good.id()).title.as_deref(), Some("good"));
    let bad = summary(&list, &SessionId::parse(bad_id).expect("id"));
    assert!(
        bad.title
            .as_deref()
            .is_some_and(|t| t.contains("cairn fsck")),
        "{bad:?}"
    );
    assert_eq!(bad.entries, 0);
}

// ---------------------------------------------------------------------------
// Resolve, remove, locate
// ---------------------------------------------------------------------------

#[test]
fn resolve_accepts_a_full_id_or_a_unique_prefix() {
    let home = home();
    let store = Store::open_dir(home.path());
    create_with_id(&store, "01hzy0000000000000000000a1");
    create_with_id(&store, "01hzy0000000000000000000a2");
    create_with_id(&store, "01hzy0000000000000000000b3");
    let b3 = SessionId::parse("01hzy0000000000000000000b3").expect("id");
    assert_eq!(
        store.resolve("01hzy0000000000000000000b3").expect("full"),
        b3
    );
    assert_eq!(
        store.resolve("01hzy0000000000000000000b").expect("prefix"),
        b3
    );
    assert_eq!(
        store
            .resolve("01HZY0000000000000000000B")
            .expect("upper case"),
        b3
    );
}

#[test]
fn ambiguous_session_prefix_lists_the_candidates() {
    let home = home();
    let store = Store::open_dir(home.path());
    create_with_id(&store, "01hzy0000000000000000000a1");
    create_with_id(&store, "01hzy0000000000000000000a2");
    create_with_id(&store, "01hzy0000000000000000000b3");
    match store.resolve("01hzy0000000000000000000a") {
        Err(StoreError::Ambiguous { query, candidates }) => {
            assert_eq!(query, "01hzy0000000000000000000a");
            assert_eq!(
                candidates,
                ["01hzy0000000000000000000a1", "01hzy0000000000000000000a2"]
            );
        }
        other => panic!("expected an ambiguous prefix, got {other:?}"),
    }
    let msg = store.resolve("01hzy").expect_err("ambiguous").to_string();
    assert!(
        msg.contains(
            "matches 01hzy0000000000000000000a1, 01hzy0000000000000000000a2, 01hzy0000000000000000000b3; \
             type more characters"
        ),
        "{msg}"
    );
}

#[test]
fn unknown_session_is_reported_with_the_store() {
    let home = home();
    let store = Store::open_dir(home.path());
    create_with_id(&store, "01hzy0000000000000000000a1");
    for q in ["7zzz", "01hzy0000000000000000000a1x", "no such thing", ""] {
        let err = store.resolve(q).expect_err(q);
        assert!(
            matches!(&err, StoreError::NoSuchSession { query, .. } if query == q),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("sessions") && msg.contains("`cairn ls` lists them"),
            "{msg}"
        );
    }
}

#[test]
fn remove_deletes_the_session_and_its_listing() {
    let home = home();
    let store = Store::open_dir(home.path());
    let keep = create(&store, Some("keep"));
    let gone = create(&store, Some("gone"));
    append(&gone, user("bye"));
    let gone_id = gone.id().clone();
    assert_eq!(store.list().expect("list").len(), 2);

    // A session held by a writer is not removed.
    let err = store.remove(&gone_id).expect_err("in use");
    assert!(
        matches!(err, StoreError::Open(OpenError::InUse { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("in use"), "{err}");
    drop(gone);

    store.remove(&gone_id).expect("remove");
    assert!(
        !home
            .path()
            .join("sessions")
            .join(format!("{gone_id}.jsonl"))
            .exists()
    );
    assert_eq!(ids(&store.list().expect("list")), [keep.id().clone()]);
    assert_eq!(
        catalog_ids(home.path()),
        BTreeSet::from([keep.id().to_string()])
    );
    assert!(matches!(
        store.open(&gone_id, Access::Read),
        Err(OpenError::NotFound { .. })
    ));
    assert!(matches!(
        store.resolve(gone_id.as_str()),
        Err(StoreError::NoSuchSession { .. })
    ));
    assert!(matches!(
        store.remove(&gone_id),
        Err(StoreError::NoSuchSession { .. })
    ));
}

#[test]
fn locate_path_opens_a_session_file_by_path() {
    let home = home();
    let store = Store::open_dir(home.path());
    let s = create(&store, Some("by path"));
    append(&s, user("hello"));
    let ctx = s.context();
    let path = PathBuf::from(s.location());
    assert_eq!(
        path,
        home.path()
            .join("sessions")
            .join(format!("{}.jsonl", s.id()))
    );
    drop(s);
    let (found, id) = locate_path(&path).expect("locate");
    let again = found.open(&id, Access::Read).expect("open by path");
    assert_eq!(*again.context(), *ctx);
    assert_eq!(again.title().as_deref(), Some("by path"));
    assert_eq!(ids(&found.list().expect("list")), [id]);
}

#[test]
fn locate_path_rejects_a_file_not_named_after_a_session() {
    let home = home();
    for name in ["notes.txt", "abc.jsonl", "01HZY0000000000000000000A1.jsonl"] {
        let err = locate_path(&home.path().join(name))
            .err()
            .unwrap_or_else(|| panic!("{name} located"));
        assert!(matches!(err, OpenError::NotASession { .. }), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains("a session file is named <session id>.jsonl"),
            "{msg}"
        );
        assert!(msg.contains(name), "{msg}");
    }
    assert!(matches!(
        locate_path(Path::new("/")),
        Err(OpenError::NotASession { .. })
    ));
}

// ---------------------------------------------------------------------------
// The catalog is a cache: never trusted over the logs
// ---------------------------------------------------------------------------

/// Three sessions, listed once so the catalog exists.
fn listed_store(home: &Path) -> (Store, Vec<Session>) {
    let store = Store::open_dir(home);
    let mut sessions = Vec::new();
    for (i, title) in ["one", "two", "three"].iter().enumerate() {
        let s = create(&store, Some(title));
        for j in 0..=i {
            append(&s, user(&format!("message {j} of {title}")));
        }
        sessions.push(s);
        next_millisecond();
    }
    let list = store.list().expect("list");
    assert_eq!(list, truth(&store));
    assert!(catalog_path(home).exists(), "listing writes the catalog");
    (store, sessions)
}

#[test]
fn catalog_with_matching_stamps_is_served_without_rereading_sessions() {
    // This is what makes listing fast; it is also why the other catalog tests
    // are not vacuous.
    let home = home();
    let (store, sessions) = listed_store(home.path());
    let mut catalog = read_catalog(home.path());
    let key = sessions[0].id().to_string();
    catalog["sessions"][&key]["summary"]["title"] = json!("served from the catalog");
    std::fs::write(
        catalog_path(home.path()),
        serde_json::to_vec(&catalog).expect("json"),
    )
    .expect("write");
    let list = store.list().expect("list");
    assert_eq!(
        summary(&list, sessions[0].id()).title.as_deref(),
        Some("served from the catalog")
    );
}

#[test]
fn deleted_catalog_is_rebuilt_by_listing() {
    let home = home();
    let (store, sessions) = listed_store(home.path());
    std::fs::remove_file(catalog_path(home.path())).expect("delete catalog");
    assert_eq!(store.list().expect("list"), truth(&store));
    assert_eq!(
        catalog_ids(home.path()),
        sessions.iter().map(|s| s.id().to_string()).collect()
    );
    // And the rebuilt catalog serves the next listing correctly.
    assert_eq!(store.list().expect("list"), truth(&store));
}

#[test]
fn stale_catalog_is_refreshed_after_appends() {
    let home = home();
    let (store, sessions) = listed_store(home.path());
    let s = &sessions[0];
    next_millisecond();
    append(s, user("more"));
    append(
        s,
        EntryBody::SessionInfo(SessionInfo {
            title: Some("one, renamed".into()),
        }),
    );
    let list = store.list().expect("list");
    assert_eq!(list, truth(&store));
    let sum = summary(&list, s.id());
    assert_eq!(
        (sum.entries, sum.title.as_deref()),
        (3, Some("one, renamed"))
    );
    assert_eq!(sum.updated, last_ts(s));
    assert_eq!(
        list[0].id,
        *s.id(),
        "the session appended to is now the newest"
    );

    // An append through another handle, after the first is closed.
    let id = s.id().clone();
    drop(sessions);
    let again = store.open(&id, Access::Write).expect("reopen");
    append(&again, assistant("reply"));
    drop(again);
    let list = store.list().expect("list");
    assert_eq!(summary(&list, &id).entries, 4);
    assert_eq!(list, truth(&store));
}

#[test]
fn garbage_catalog_is_ignored_and_rewritten() {
    let home = home();
    let (store, _sessions) = listed_store(home.path());
    for garbage in [
        &b"\x00\xffnot json at all{"[..],
        b"",
        b"{\"version\":1,\"sessions\":[1,2,3]}",
        b"null",
    ] {
        std::fs::write(catalog_path(home.path()), garbage).expect("write garbage");
        assert_eq!(store.list().expect("list"), truth(&store));
        assert_eq!(
            read_catalog(home.path())["version"],
            json!(1),
            "the catalog was rewritten"
        );
    }
}

#[test]
fn catalog_with_wrong_stamps_extra_and_missing_sessions_is_corrected() {
    let home = home();
    let (store, sessions) = listed_store(home.path());
    let mut catalog = read_catalog(home.path());
    let [one, two, three] = [0, 1, 2].map(|i| sessions[i].id().to_string());
    // Wrong stamp and wrong summary for one.
    let entry = &mut catalog["sessions"][&one];
    entry["stamp"]["len"] = json!(1);
    entry["summary"]["title"] = json!("WRONG");
    entry["summary"]["entries"] = json!(999);
    // A summary under another session's key (stamp of two, summary of three).
    let three_summary = catalog["sessions"][&three]["summary"].clone();
    catalog["sessions"][&two]["summary"] = three_summary;
    // A session that does not exist, and one that is missing.
    let ghost = "01hzy00000000000000000000g";
    let copy = catalog["sessions"][&one].clone();
    catalog["sessions"][ghost] = copy;
    catalog["sessions"]
        .as_object_mut()
        .expect("object")
        .remove(&three);
    std::fs::write(
        catalog_path(home.path()),
        serde_json::to_vec(&catalog).expect("json"),
    )
    .expect("write");

    let list = store.list().expect("list");
    assert_eq!(list, truth(&store));
    assert_eq!(
        summary(&list, sessions[0].id()).title.as_deref(),
        Some("one")
    );
    assert_eq!(
        summary(&list, sessions[1].id()).title.as_deref(),
        Some("two")
    );
    assert!(list.iter().all(|s| s.id.as_str() != ghost));
    assert_eq!(catalog_ids(home.path()), BTreeSet::from([one, two, three]));
}

#[test]
fn catalog_of_another_version_is_ignored() {
    let home = home();
    let (store, sessions) = listed_store(home.path());
    let mut catalog = read_catalog(home.path());
    catalog["version"] = json!(99);
    let key = sessions[0].id().to_string();
    catalog["sessions"][&key]["summary"]["title"] = json!("from a future catalog");
    std::fs::write(
        catalog_path(home.path()),
        serde_json::to_vec(&catalog).expect("json"),
    )
    .expect("write");
    assert_eq!(store.list().expect("list"), truth(&store));
}

#[test]
fn session_file_removed_from_disk_disappears_from_the_listing() {
    let home = home();
    let (store, sessions) = listed_store(home.path());
    let id = sessions[1].id().clone();
    drop(sessions);
    std::fs::remove_file(home.path().join("sessions").join(format!("{id}.jsonl"))).expect("rm");
    let list = store.list().expect("list");
    assert_eq!(list.len(), 2);
    assert!(list.iter().all(|s| s.id != id));
    assert_eq!(list, truth(&store));
    assert!(!catalog_ids(home.path()).contains(id.as_str()));
    assert!(matches!(store.latest(), Ok(latest) if latest != id));
}

// ---------------------------------------------------------------------------
// Concurrency
// ---------------------------------------------------------------------------

/// Two writers append to their own session and list after every append,
/// while a third thread only lists. Each writer's listing shows its own
/// session exactly as it is, and the final listing is the truth.
fn concurrent_listing_and_appending(store: &Store) {
    const APPENDS: usize = 30;
    let writers: Vec<Session> = (0..2)
        .map(|i| create(store, Some(&format!("writer {i}"))))
        .collect();
    let ids: Vec<SessionId> = writers.iter().map(|s| s.id().clone()).collect();
    let start = Arc::new(Barrier::new(3));
    std::thread::scope(|scope| {
        for s in writers {
            let (store, start) = (store.clone(), Arc::clone(&start));
            scope.spawn(move || {
                start.wait();
                for k in 1..=APPENDS {
                    s.append(user(&format!("append {k}"))).expect("append");
                    let list = store.list().expect("list");
                    let mine = summary(&list, s.id());
                    assert_eq!(
                        mine.entries, k as u64,
                        "a listing after my append must show it"
                    );
                    assert_eq!(mine.updated, s.updated());
                }
            });
        }
        let (store, start, ids) = (store.clone(), Arc::clone(&start), ids.clone());
        scope.spawn(move || {
            start.wait();
            let mut last = [0u64; 2];
            for _ in 0..APPENDS {
                let list = store.list().expect("list");
                for (i, id) in ids.iter().enumerate() {
                    let n = summary(&list, id).entries;
                    assert!(
                        n >= last[i] && n <= APPENDS as u64,
                        "entries went from {} to {n}",
                        last[i]
                    );
                    last[i] = n;
                }
            }
        });
    });
    let list = store.list().expect("list");
    assert_eq!(list, truth(store));
    for id in &ids {
        assert_eq!(summary(&list, id).entries, APPENDS as u64);
    }
}

#[test]
fn concurrent_listing_and_appending_never_leaves_a_wrong_listing_on_files() {
    let home = home();
    let store = Store::open_dir(home.path());
    concurrent_listing_and_appending(&store);
    // The catalog left behind is right too: delete nothing, list again.
    assert_eq!(store.list().expect("list"), truth(&store));
}

#[test]
fn concurrent_listing_and_appending_never_leaves_a_wrong_listing_in_memory() {
    let store = Store::with_backend(Arc::new(MemoryBackend::new()));
    concurrent_listing_and_appending(&store);
}

#[test]
fn regression_a_new_fork_sorted_below_its_source_so_continue_opened_the_source() {
    let dir = home();
    let store = Store::open_dir(dir.path());
    let source = create(&store, Some("source"));
    append(&source, user("hello"));
    append(&source, assistant("hi"));
    next_millisecond();
    let fork = store
        .fork(&source, source.leaf().as_ref(), None)
        .expect("fork");
    drop(fork);
    let list = store.list().expect("list");
    let f = list
        .iter()
        .find(|s| s.forked_from.as_ref() == Some(source.id()))
        .expect("the fork is listed");
    assert!(
        f.updated >= f.created,
        "the fork was made at {} but is listed as updated at {}",
        f.created,
        f.updated
    );
    assert_eq!(list[0].id, f.id, "the fork was made last: it sorts first");
    assert_eq!(
        store.latest().expect("latest"),
        f.id,
        "`--continue` opens the fork"
    );
    // The same through a fresh open (no catalog): the rule is the session's.
    let reopened = store.open(&f.id, Access::Read).expect("open the fork");
    assert_eq!(reopened.updated(), f.created);
}

#[test]
fn a_warm_listing_of_an_unchanged_store_does_not_rewrite_the_catalog() {
    use std::os::unix::fs::MetadataExt;
    let home = home();
    let (store, _sessions) = listed_store(home.path());
    let inode = || {
        std::fs::metadata(catalog_path(home.path()))
            .expect("catalog")
            .ino()
    };
    let before = inode();
    assert_eq!(store.list().expect("list"), truth(&store));
    assert_eq!(inode(), before, "the catalog was replaced");
}

/// Why a listing stats every session file rather than trusting the
/// catalog while the sessions directory is unchanged: an append changes the
/// file, not the directory.
#[test]
fn an_append_that_leaves_the_directory_unchanged_is_still_listed() {
    let home = home();
    let (store, sessions) = listed_store(home.path());
    let dir = home.path().join("sessions");
    let dir_mtime = || {
        std::fs::metadata(&dir)
            .and_then(|m| m.modified())
            .expect("dir")
    };
    let before = dir_mtime();
    next_millisecond();
    append(&sessions[1], user("one more"));
    assert_eq!(
        dir_mtime(),
        before,
        "the premise: the directory did not change"
    );
    let list = store.list().expect("list");
    assert_eq!(summary(&list, sessions[1].id()).entries, 3);
    assert_eq!(list, truth(&store));
}
