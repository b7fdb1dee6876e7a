//! A restore SIGKILLed at every step: each file ends before or after, never
//! torn, and running the restore again completes it. The restore runs in a
//! child process (this test binary again) that kills itself with SIGKILL
//! right after its N-th step; the parent checks the files, then restores
//! again. Both ways of making the files durable before the renames are
//! killed so: an `fdatasync` of each, and one `syncfs`.

// Test helpers panic on a failed step; that is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use cairn::testkit::build::{assistant, user};
use cairn::testkit::child::rerun_ignored;
use cairn::{Access, Store};
use cairn_blobs::BlobStore;
use cairn_workspace::{
    Flush, Limits, Phase, Snapshotter, Touches, Workspace, checkout_files, plan, read_all,
};

const OLD: &str = "old content, long enough that a torn write would show\n";
const NEW: &str = "new content, which the rewind must take away again\n";
/// Enough that the restore writes, syncs and renames them from several
/// threads at once.
const FILES: [&str; 10] = [
    "m1.txt",
    "sub/m2.txt",
    "m3.txt",
    "m4.txt",
    "sub/m5.txt",
    "m6.txt",
    "m7.txt",
    "sub/m8.txt",
    "m9.txt",
    "m10.txt",
];
/// Steps of the restore: the files written and renamed, 1 deleted, 1
/// created (written, renamed), the record.
const STEPS: usize = FILES.len() * 2 + 1 + 2 + 1;

struct Fixture {
    home: PathBuf,
    work: PathBuf,
}

/// A session whose one "tool" changed three files, deleted one and
/// created one; the first entry is the one to restore to.
fn fixture(dir: &Path) -> Fixture {
    let home = dir.join("home");
    let work = dir.join("work");
    std::fs::create_dir_all(work.join("sub")).unwrap();
    for f in FILES {
        std::fs::write(work.join(f), OLD).unwrap();
    }
    std::fs::write(work.join("gone.txt"), OLD).unwrap();
    let store = Store::open_dir(&home);
    let session = store.create(cairn::NewSession::default()).unwrap();
    session.append(user("change the files")).unwrap();
    let snap = Snapshotter::new(&work, BlobStore::new(home.join("blobs")), Limits::default());
    let mut ws = Workspace::open(&session, snap).unwrap();
    ws.before(&session, session.leaf(), "c1", &Touches::Tree)
        .unwrap();
    for f in FILES {
        std::fs::write(work.join(f), NEW).unwrap();
    }
    std::fs::remove_file(work.join("gone.txt")).unwrap();
    std::fs::write(work.join("made.txt"), NEW).unwrap();
    let done = session.append(assistant("changed them")).unwrap();
    ws.after(&session, done.id.unwrap(), "c1", &Touches::Tree)
        .unwrap();
    Fixture { home, work }
}

fn first_entry(home: &Path) -> (Store, cairn::Session, cairn::EntryId) {
    let store = Store::open_dir(home);
    let id = store.latest().unwrap();
    let session = store.open(&id, Access::Write).unwrap();
    let first = session.nodes()[0].id.clone();
    (store, session, first)
}

#[test]
#[ignore = "run as a child process by the tests a_restore_syncing_*_killed_at_every_step_completes_when_run_again"]
fn child_restores_until_killed() {
    let (Ok(home), Ok(kill_at), Ok(flush)) = (
        std::env::var("CAIRN_WS_HOME"),
        std::env::var("CAIRN_WS_KILL_AT"),
        std::env::var("CAIRN_WS_FLUSH"),
    ) else {
        return;
    };
    let kill_at: usize = kill_at.parse().unwrap();
    let flush = flush_named(&flush);
    let (store, session, first) = first_entry(Path::new(&home));
    let blobs = BlobStore::new(Path::new(&home).join("blobs"));
    let p = plan(&store, &session, &blobs, Some(&first)).unwrap();
    session.checkout(Some(&first), None).unwrap();
    let mut step = 0;
    cairn_workspace::apply_with(&session, &blobs, &p, false, flush, &mut |_, _| {
        step += 1;
        if step == kill_at {
            let me = std::process::id().to_string();
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &me])
                .status();
            // SIGKILL is not deliverable late: wait for it.
            loop {
                std::thread::park();
            }
        }
    })
    .unwrap();
}

fn flush_named(name: &str) -> Flush {
    match name {
        "each-file" => Flush::EachFile,
        "file-system" => Flush::FileSystem,
        other => panic!("no flush {other:?}"),
    }
}

#[test]
fn a_restore_syncing_each_file_killed_at_every_step_completes_when_run_again() {
    killed_at_every_step("each-file");
}

#[test]
fn a_restore_syncing_the_file_system_killed_at_every_step_completes_when_run_again() {
    killed_at_every_step("file-system");
}

fn killed_at_every_step(flush: &str) {
    for kill_at in 1..=STEPS {
        let dir = tempfile::tempdir().unwrap();
        let fx = fixture(dir.path());
        let status = rerun_ignored("child_restores_until_killed")
            .env("CAIRN_WS_HOME", &fx.home)
            .env("CAIRN_WS_KILL_AT", kill_at.to_string())
            .env("CAIRN_WS_FLUSH", flush)
            .status()
            .unwrap();
        assert!(
            !status.success(),
            "step {kill_at}: the child was not killed"
        );
        // Every file is before or after, never torn.
        for f in FILES {
            let text = std::fs::read_to_string(fx.work.join(f)).unwrap();
            assert!(
                text == OLD || text == NEW,
                "step {kill_at}: {f} is torn: {text:?}"
            );
        }
        for f in ["gone.txt", "made.txt"] {
            if let Ok(text) = std::fs::read_to_string(fx.work.join(f)) {
                assert!(
                    text == OLD || text == NEW,
                    "step {kill_at}: {f} is torn: {text:?}"
                );
            }
        }
        // Running the restore again completes it, without a false conflict.
        let (store, session, first) = first_entry(&fx.home);
        let blobs = BlobStore::new(fx.home.join("blobs"));
        let report = checkout_files(&store, &session, &blobs, Some(&first), None, false)
            .unwrap_or_else(|e| panic!("step {kill_at}: {}", cairn::with_causes(&e)));
        for f in FILES.iter().chain(&["gone.txt"]) {
            assert_eq!(
                std::fs::read_to_string(fx.work.join(f)).unwrap(),
                OLD,
                "step {kill_at}: {f}"
            );
        }
        assert!(!fx.work.join("made.txt").exists(), "step {kill_at}");
        let leftovers: Vec<_> = walk(&fx.work)
            .into_iter()
            .filter(|p| p.to_string_lossy().ends_with(".cairn-restore"))
            .collect();
        assert!(leftovers.is_empty(), "step {kill_at}: {leftovers:?}");
        let records = read_all(&session).unwrap();
        let last = &records.last().unwrap().1;
        assert_eq!(last.phase, Phase::Restore, "step {kill_at}");
        if kill_at == STEPS {
            // Killed after the record: the second run finds nothing to do.
            assert!(
                report.created.is_empty()
                    && report.restored.is_empty()
                    && report.deleted.is_empty()
            );
        } else {
            assert_eq!(
                last.files.len(),
                FILES.len() + 2,
                "step {kill_at}: {last:?}"
            );
        }
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
