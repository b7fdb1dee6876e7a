//! Tree snapshots with the watcher: after the first snapshot (a full scan)
//! only what changed is looked at, and still nothing is missed — a change
//! made outside the agent between calls, one made by the command, new and
//! removed directories — and when the kernel's event queue overflows, the
//! snapshot falls back to a full scan. Also the stat shortcut's blind
//! spot: a same-size rewrite within the timestamp tick.

// Test helpers panic on a failed step; that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::SystemTime;

use cairn::testkit::build::user;
use cairn::{Session, Store};
use cairn_blobs::BlobStore;
use cairn_workspace::{Flush, Limits, Manifest, Snapshotter, Touches, Workspace, plan};

struct Setup {
    _dir: tempfile::TempDir,
    work: std::path::PathBuf,
    blobs: BlobStore,
    store: Store,
    session: Session,
}

fn setup(files: usize) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    for i in 0..files {
        let sub = work.join(format!("d{}", i % 4));
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join(format!("f{i}.txt")), format!("file {i}\n")).unwrap();
    }
    std::fs::write(work.join(".gitignore"), "*.log\nbuild/\n").unwrap();
    let store = Store::open_dir(dir.path().join("home"));
    let session = store.create(cairn::NewSession::default()).unwrap();
    session.append(user("go")).unwrap();
    let blobs = BlobStore::new(dir.path().join("blobs"));
    Setup {
        work,
        blobs,
        store,
        session,
        _dir: dir,
    }
}

fn workspace(s: &Setup) -> Workspace {
    let snap = Snapshotter::new(&s.work, s.blobs.clone(), Limits::default());
    Workspace::open(&s.session, snap).unwrap()
}

fn before(ws: &mut Workspace, s: &Setup) -> Manifest {
    ws.before(&s.session, s.session.leaf(), "c", &Touches::Tree)
        .unwrap()
        .files
}

fn after(ws: &mut Workspace, s: &Setup) -> Manifest {
    let at = s.session.append(user("ran")).unwrap().id.unwrap();
    ws.after(&s.session, at, "c", &Touches::Tree).unwrap().files
}

fn names(m: &Manifest) -> Vec<(&str, bool)> {
    m.iter().map(|(p, s)| (p.as_str(), s.is_some())).collect()
}

/// What a fresh tracker's full scan finds that the records do not say:
/// nothing, when the watched snapshots missed nothing (Linux: the tests of
/// the watcher).
#[cfg(target_os = "linux")]
fn missed(s: &Setup) -> Manifest {
    let mut fresh = workspace(s);
    before(&mut fresh, s)
}

// The watcher is inotify's: elsewhere every snapshot is a full scan.
#[cfg(target_os = "linux")]
#[test]
fn changes_outside_the_agent_and_by_the_command_are_both_caught_without_a_full_scan() {
    let s = setup(40);
    let mut ws = workspace(&s);
    assert!(!ws.is_watching());
    let first = before(&mut ws, &s);
    assert!(first.contains_key("d1/f1.txt") && first.contains_key("d1"));
    assert!(
        ws.is_watching(),
        "the first tree snapshot starts the watcher"
    );
    assert_eq!(names(&after(&mut ws, &s)), vec![]);

    // Outside the agent, between two calls.
    std::fs::write(s.work.join("d1/f1.txt"), "edited outside\n").unwrap();
    std::fs::remove_file(s.work.join("d2/f2.txt")).unwrap();
    std::fs::create_dir_all(s.work.join("new/sub")).unwrap();
    std::fs::write(s.work.join("new/sub/x.txt"), "x").unwrap();
    std::fs::write(s.work.join("d0/noise.log"), "ignored").unwrap();
    assert_eq!(
        names(&before(&mut ws, &s)),
        vec![
            ("d1/f1.txt", true),
            ("d2/f2.txt", false),
            ("new", true),
            ("new/sub", true),
            ("new/sub/x.txt", true),
        ]
    );

    // The command: a file changed, a directory moved, one removed, a file
    // created in the directory that appeared between the calls.
    std::fs::write(s.work.join("d3/f3.txt"), "by the command\n").unwrap();
    std::fs::rename(s.work.join("d0"), s.work.join("moved")).unwrap();
    std::fs::write(s.work.join("new/sub/y.txt"), "y").unwrap();
    std::fs::remove_dir_all(s.work.join("d2")).unwrap();
    std::fs::create_dir(s.work.join("build")).unwrap();
    std::fs::write(s.work.join("build/out.o"), "ignored").unwrap();
    let changed = after(&mut ws, &s);
    assert!(changed["d3/f3.txt"].is_some());
    assert!(changed["new/sub/y.txt"].is_some());
    assert_eq!(changed["d0"], None);
    assert_eq!(changed["d0/f0.txt"], None);
    assert!(changed["moved"].as_ref().unwrap().dir);
    assert!(changed["moved/f4.txt"].is_some());
    assert_eq!(changed["d2/f6.txt"], None);
    assert!(
        !changed
            .keys()
            .any(|p| p.starts_with("build") || p.ends_with(".log"))
    );

    // And in the moved directory, whose watch now has another path.
    std::fs::write(s.work.join("moved/f8.txt"), "after the move\n").unwrap();
    assert_eq!(names(&before(&mut ws, &s)), vec![("moved/f8.txt", true)]);
    assert_eq!(
        ws.full_scans(),
        1,
        "only the first snapshot scanned everything"
    );
    assert_eq!(names(&missed(&s)), vec![]);
}

// The watcher is inotify's: elsewhere every snapshot is a full scan.
#[cfg(target_os = "linux")]
#[test]
fn an_overflowed_event_queue_falls_back_to_a_full_scan() {
    let s = setup(8);
    let mut ws = workspace(&s);
    before(&mut ws, &s);
    assert!(ws.is_watching());
    // More events than the kernel queues (a create, a write and a close
    // per file, in a watched directory): those after the overflow are
    // lost, among them the change to a known file made last.
    let queued: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    for i in 0..queued {
        std::fs::write(s.work.join(format!("d0/flood{i}")), "x").unwrap();
    }
    std::fs::write(s.work.join("d1/f1.txt"), "changed after the flood\n").unwrap();
    let changed = after(&mut ws, &s);
    assert_eq!(ws.full_scans(), 2, "the overflow made it scan everything");
    assert!(changed["d1/f1.txt"].is_some());
    assert_eq!(
        changed.keys().filter(|p| p.starts_with("d0/flood")).count(),
        queued
    );
    assert!(ws.is_watching(), "watching again after the full scan");
    std::fs::write(s.work.join("d3/f3.txt"), "then one change\n").unwrap();
    assert_eq!(names(&before(&mut ws, &s)), vec![("d3/f3.txt", true)]);
    assert_eq!(ws.full_scans(), 2);
    assert_eq!(names(&missed(&s)), vec![]);
}

fn conflicts(p: &cairn_workspace::Plan) -> Vec<&str> {
    p.conflicts.iter().map(|c| c.path.as_str()).collect()
}

/// Rewrites `rel` with `text` (the same size), keeping its mtime: what a
/// rewrite within one timestamp tick looks like to a stat.
fn rewrite_in_the_same_tick(work: &Path, rel: &str, text: &str) {
    let p = work.join(rel);
    let mtime: SystemTime = std::fs::metadata(&p).unwrap().modified().unwrap();
    std::fs::write(&p, text).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&p)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
}

#[test]
fn a_same_size_rewrite_within_the_timestamp_tick_is_caught() {
    let s = setup(0);
    std::fs::write(s.work.join("a.txt"), "one\n").unwrap();
    let mut ws = workspace(&s);
    let files = Touches::Files(vec!["a.txt".to_owned()]);
    let at = s.session.leaf();
    let first = ws.before(&s.session, at, "c", &files).unwrap().files;
    assert!(first["a.txt"].as_ref().unwrap().recent);
    rewrite_in_the_same_tick(&s.work, "a.txt", "two\n");
    let at = s.session.append(user("ran")).unwrap().id.unwrap();
    let seen = ws.after(&s.session, at, "c", &files).unwrap().files;
    assert_ne!(
        seen["a.txt"].as_ref().unwrap().sha256,
        first["a.txt"].as_ref().unwrap().sha256,
        "the stat is the same, the content is not"
    );
    // Outside the agent, then a restore: a conflict, not a silent overwrite.
    rewrite_in_the_same_tick(&s.work, "a.txt", "six\n");
    let p = plan(&s.store, &s.session, &s.blobs, None).unwrap();
    assert_eq!(conflicts(&p), vec!["a.txt"]);
}

/// A tree snapshot before and after `act` (in the working directory):
/// the entry before, and what the after snapshot lists.
fn around(s: &Setup, act: impl FnOnce(&Path)) -> (Option<cairn::EntryId>, Manifest) {
    let mut ws = workspace(s);
    let start = s.session.leaf();
    before(&mut ws, s);
    act(&s.work);
    (start, after(&mut ws, s))
}

#[test]
fn empty_directories_are_created_and_removed_by_a_restore() {
    let s = setup(0);
    let (start, changed) = around(&s, |work| {
        std::fs::create_dir_all(work.join("empty/inner")).unwrap();
        std::fs::create_dir(work.join("kept")).unwrap();
        std::fs::write(work.join("kept/f.txt"), "f").unwrap();
    });
    assert!(changed["empty/inner"].as_ref().unwrap().dir);
    let made = s.session.leaf().unwrap();
    let report = cairn_workspace::checkout_files(
        &s.store,
        &s.session,
        &s.blobs,
        start.as_ref(),
        None,
        false,
    )
    .unwrap();
    assert_eq!(
        report.deleted,
        vec!["empty", "empty/inner", "kept", "kept/f.txt"]
    );
    assert!(!s.work.join("empty").exists() && !s.work.join("kept").exists());
    cairn_workspace::checkout_files(&s.store, &s.session, &s.blobs, Some(&made), None, false)
        .unwrap();
    assert!(s.work.join("empty/inner").is_dir());
    assert_eq!(
        std::fs::read_to_string(s.work.join("kept/f.txt")).unwrap(),
        "f"
    );
}

#[test]
fn a_directory_holding_a_file_no_snapshot_recorded_is_a_conflict() {
    let s = setup(0);
    let (start, _) = around(&s, |work| std::fs::create_dir(work.join("out")).unwrap());
    // Ignored, so never recorded.
    std::fs::write(s.work.join("out/x.log"), "log").unwrap();
    let p = plan(&s.store, &s.session, &s.blobs, start.as_ref()).unwrap();
    assert_eq!(conflicts(&p), vec!["out"]);
    let report = cairn_workspace::apply(&s.session, &s.blobs, &p, true).unwrap();
    // Both named: the ignored file, and the directory kept for it.
    assert_eq!(
        report
            .unrestorable
            .iter()
            .map(|l| l.path.as_str())
            .collect::<Vec<_>>(),
        vec!["out/x.log", "out"]
    );
    assert!(s.work.join("out/x.log").exists());
}

// The watcher is inotify's: elsewhere every snapshot is a full scan.
#[cfg(target_os = "linux")]
#[test]
fn regression_a_file_written_through_a_hard_link_outside_the_tree_is_caught() {
    // inotify reports a write to the watch of the directory the writer
    // opened the file through: a write through another name of the same
    // file, outside the working directory, reaches no watch of ours.
    let s = setup(4);
    let outside = s.work.parent().unwrap().join("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();
    let linked = s.work.join("d0/f0.txt");
    std::fs::hard_link(&linked, outside.join("f0.txt")).unwrap();
    let mut ws = workspace(&s);
    before(&mut ws, &s);
    after(&mut ws, &s);
    assert!(ws.is_watching());
    std::fs::write(outside.join("f0.txt"), "changed through the other name\n").unwrap();
    let seen = before(&mut ws, &s);
    assert_eq!(names(&seen), [("d0/f0.txt", true)]);
    assert_eq!(ws.full_scans(), 1, "caught by the watched snapshot itself");
    assert!(missed(&s).is_empty(), "{:?}", missed(&s));
}

#[test]
fn regression_a_forced_restore_made_the_overwritten_content_durable_only_after_overwriting_it() {
    // A file changed outside the agent is kept as a blob by the plan "so
    // that even a forced restore loses nothing"; that blob was synced only
    // after the restore had renamed the old content over the file, so a
    // power loss in between could lose both.
    let s = setup(2);
    let (start, _) = around(&s, |work| {
        std::fs::write(work.join("d0/f0.txt"), "by the command\n").unwrap();
    });
    std::fs::write(s.work.join("d0/f0.txt"), "by hand, outside the agent\n").unwrap();
    let p = plan(&s.store, &s.session, &s.blobs, start.as_ref()).unwrap();
    assert_eq!(conflicts(&p), vec!["d0/f0.txt"]);
    let mut events: Vec<(String, String)> = Vec::new();
    cairn_workspace::apply_with(
        &s.session,
        &s.blobs,
        &p,
        true,
        cairn_workspace::Flush::Auto,
        &mut |e, path| {
            events.push((e.to_owned(), path.to_owned()));
        },
    )
    .unwrap();
    let at = |event: &str| {
        events
            .iter()
            .position(|(e, p)| e == event && p == "d0/f0.txt")
    };
    let (kept, renamed) = (at("kept"), at("renamed"));
    assert!(
        kept.is_some() && kept < renamed,
        "the overwritten content is durable before it is replaced: {events:?}"
    );
    assert_eq!(
        std::fs::read_to_string(s.work.join("d0/f0.txt")).unwrap(),
        "file 0\n"
    );
    let outside = p.changes[0]
        .from
        .as_ref()
        .unwrap()
        .sha256
        .as_deref()
        .unwrap();
    assert_eq!(
        s.blobs.get(outside).unwrap(),
        b"by hand, outside the agent\n"
    );
}

#[test]
fn regression_a_directory_a_file_replaced_could_not_be_restored() {
    // The restore made the directory before anything was removed, and
    // failed on the file in its place ("File exists"), every time.
    let s = setup(2);
    let (start, _) = around(&s, |work| {
        std::fs::remove_dir_all(work.join("d0")).unwrap();
        std::fs::write(work.join("d0"), "now a file\n").unwrap();
    });
    let p = plan(&s.store, &s.session, &s.blobs, start.as_ref()).unwrap();
    assert!(conflicts(&p).is_empty());
    let report = cairn_workspace::apply(&s.session, &s.blobs, &p, false).unwrap();
    assert_eq!(report.restored, vec!["d0"]);
    assert_eq!(
        std::fs::read(s.work.join("d0/f0.txt")).unwrap(),
        b"file 0\n"
    );
}

// The watcher is inotify's: elsewhere every snapshot is a full scan.
#[cfg(target_os = "linux")]
#[test]
fn regression_a_change_to_the_git_exclude_file_falls_back_to_a_full_scan() {
    // `.git/info/exclude` decides what a scan reaches as a `.gitignore`
    // does, but `.git` is never walked, so never watched: a path it stops
    // excluding was missed until it changed.
    let s = setup(2);
    std::fs::create_dir_all(s.work.join(".git/info")).unwrap();
    std::fs::write(s.work.join(".git/info/exclude"), "secret/\n").unwrap();
    std::fs::create_dir_all(s.work.join("secret")).unwrap();
    std::fs::write(s.work.join("secret/a.txt"), "kept out\n").unwrap();
    let mut ws = workspace(&s);
    assert!(!before(&mut ws, &s).contains_key("secret/a.txt"));
    after(&mut ws, &s);
    std::fs::write(s.work.join(".git/info/exclude"), "").unwrap();
    let seen = before(&mut ws, &s);
    assert!(seen.contains_key("secret/a.txt"), "{:?}", names(&seen));
    assert_eq!(ws.full_scans(), 2);
    assert!(ws.is_watching());
    assert!(missed(&s).is_empty(), "{:?}", missed(&s));
}

#[test]
fn regression_a_working_directory_named_through_a_symlink_missed_changes_at_its_top() {
    // The root's watch was refused (a watch does not follow a symlink) and
    // the refusal taken for a directory gone since the walk: the watcher
    // ran without it, blind to the top level. Such a root is not watched.
    let s = setup(2);
    let link = s.work.parent().unwrap().join("link");
    std::os::unix::fs::symlink(&s.work, &link).unwrap();
    let snap = Snapshotter::new(&link, s.blobs.clone(), Limits::default());
    let mut ws = Workspace::open(&s.session, snap).unwrap();
    let first = before(&mut ws, &s);
    assert!(first.contains_key("d0/f0.txt"), "{:?}", names(&first));
    after(&mut ws, &s);
    std::fs::write(s.work.join("top.txt"), "new at the top\n").unwrap();
    std::fs::write(s.work.join("d1/f1.txt"), "changed below\n").unwrap();
    let seen = before(&mut ws, &s);
    assert_eq!(names(&seen), [("d1/f1.txt", true), ("top.txt", true)]);
    assert!(!ws.is_watching());
}

/// A restore of many files (written, synced and renamed from several
/// threads at once) brings every file back whole, both ways: through
/// `checkout_files` (the flush it picks), and with each flush forced — one
/// `syncfs`, and the fallback when other processes hold much dirty data,
/// an `fdatasync` of each file.
#[test]
fn a_restore_of_many_files_from_several_threads_brings_every_file_back() {
    many_files_back_and_forth(None);
}

#[test]
fn a_restore_of_many_files_syncing_the_file_system_once_brings_every_file_back() {
    many_files_back_and_forth(Some(Flush::FileSystem));
}

#[test]
fn a_restore_of_many_files_syncing_each_file_brings_every_file_back() {
    many_files_back_and_forth(Some(Flush::EachFile));
}

/// Restores to `to` with `flush` (`None`: `checkout_files`).
fn restore(s: &Setup, to: Option<&cairn::EntryId>, flush: Option<Flush>) -> usize {
    let Some(flush) = flush else {
        let report =
            cairn_workspace::checkout_files(&s.store, &s.session, &s.blobs, to, None, false);
        return report.unwrap().restored.len();
    };
    let p = plan(&s.store, &s.session, &s.blobs, to).unwrap();
    s.session.checkout(to, None).unwrap();
    let report =
        cairn_workspace::apply_with(&s.session, &s.blobs, &p, false, flush, &mut |_, _| {})
            .unwrap();
    report.restored.len()
}

fn many_files_back_and_forth(flush: Option<Flush>) {
    let s = setup(150);
    let (start, changed) = around(&s, |work| {
        for i in 0..150 {
            let f = work.join(format!("d{}/f{i}.txt", i % 4));
            std::fs::write(
                f,
                format!("file {i}, rewritten with {}\n", "x".repeat(2000)),
            )
            .unwrap();
        }
    });
    assert_eq!(changed.len(), 150);
    let rewritten = s.session.leaf().unwrap();
    assert_eq!(restore(&s, start.as_ref(), flush), 150);
    for i in 0..150 {
        let f = s.work.join(format!("d{}/f{i}.txt", i % 4));
        assert_eq!(std::fs::read_to_string(f).unwrap(), format!("file {i}\n"));
    }
    assert_eq!(restore(&s, Some(&rewritten), flush), 150);
    for i in 0..150 {
        let f = s.work.join(format!("d{}/f{i}.txt", i % 4));
        let text = std::fs::read_to_string(f).unwrap();
        assert!(text.starts_with(&format!("file {i}, rewritten")), "{text}");
    }
    // The restore record holds each file's mtime as the disk has it (so
    // the next plan can trust the stat once the tick has passed).
    let records = cairn_workspace::read_all(&s.session).unwrap();
    let last = &records.last().unwrap().1;
    for i in 0..150 {
        let rel = format!("d{}/f{i}.txt", i % 4);
        let meta = std::fs::metadata(s.work.join(&rel)).unwrap();
        let on_disk = meta.mtime() * 1_000_000_000 + meta.mtime_nsec();
        let state = last.files[&rel].as_ref().unwrap();
        assert_eq!(state.mtime_ns, on_disk, "{rel}");
        assert!(state.recent, "{rel}");
    }
    let leftovers = std::fs::read_dir(s.work.join("d0"))
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().ends_with(".cairn-restore")
        })
        .count();
    assert_eq!(leftovers, 0);
}

/// A file tool's temporary file left by a write killed before its rename
/// (`.NAME.cairn-write-PID`): no snapshot records it, full or watched, so
/// a restore neither brings it back nor names it as left out.
#[test]
fn a_stale_write_temporary_is_in_no_snapshot_and_no_restore_plan() {
    let s = setup(8);
    let stale = cairn_workspace::write_temporary("f1.txt", 4_000_000);
    assert!(cairn_workspace::is_write_temporary(&stale));
    std::fs::write(s.work.join("d1").join(&stale), "torn").unwrap();
    let mut ws = workspace(&s);
    let start = s.session.leaf();
    let first = before(&mut ws, &s);
    assert!(first.contains_key("d1/f1.txt"));
    assert!(
        !first.contains_key(&format!("d1/{stale}")),
        "the full scan leaves the temporary out"
    );
    // Between two watched snapshots: another one appears beside a real
    // change; only the change is recorded.
    let later = cairn_workspace::write_temporary("f2.txt", 4_000_001);
    std::fs::write(s.work.join("d2").join(&later), "torn").unwrap();
    std::fs::write(s.work.join("d2/f2.txt"), "changed\n").unwrap();
    assert_eq!(names(&after(&mut ws, &s)), vec![("d2/f2.txt", true)]);
    let p = plan(&s.store, &s.session, &s.blobs, start.as_ref()).unwrap();
    let named: Vec<&str> = p
        .changes
        .iter()
        .map(|c| c.path.as_str())
        .chain(p.unrestorable.iter().map(|l| l.path.as_str()))
        .collect();
    assert_eq!(named, vec!["d2/f2.txt"], "{p:?}");
}
