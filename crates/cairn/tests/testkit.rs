//! The tests' toolkit (`cairn::testkit`) does what the tests that use it
//! rely on: the I/O seam passes every call through unless a hook says
//! otherwise and only hooks session logs, `Faults` fails exactly the call it
//! was armed for, and `Rng` keeps its sequence for a seed (failing seeds
//! printed by the crash and fault harnesses must replay).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io;
use std::path::Path;
use std::sync::Arc;

use cairn::testkit::Rng;
use cairn::testkit::build::user;
use cairn::testkit::vfs::{Event, Events, Fault, Faults, Hook, HookVfs, Hooked};
use cairn::vfs::OpenMode;
use cairn::{Access, AppendError, FileBackend, NewSession, Store};

fn store_over(dir: &Path, vfs: Arc<dyn cairn::vfs::Vfs>) -> Store {
    Store::with_backend(Arc::new(FileBackend::with_vfs(dir.join("sessions"), vfs)))
}

/// A hook that overrides nothing.
#[derive(Debug)]
struct PassThrough;

impl Hook for PassThrough {}

#[test]
fn a_hook_that_overrides_nothing_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_over(dir.path(), HookVfs::new(PassThrough));
    let s = store.create(NewSession::default()).unwrap();
    s.append(user("one")).unwrap();
    let id = s.id().clone();
    drop(s);
    let plain = Store::open_dir(dir.path());
    let s = plain.open(&id, Access::Write).unwrap();
    assert_eq!((s.len(), s.open_report().torn.clone()), (2, None));
}

#[test]
fn faults_fail_the_armed_write_once_and_count_the_calls() {
    let dir = tempfile::tempdir().unwrap();
    let vfs = HookVfs::new(Faults::new());
    let store = store_over(dir.path(), vfs.clone());
    let s = store.create(NewSession::default()).unwrap();
    let (writes, syncs) = (vfs.hook().writes(), vfs.hook().syncs());
    s.append(user("one")).unwrap();
    assert_eq!(
        (vfs.hook().writes(), vfs.hook().syncs()),
        (writes + 1, syncs + 1),
        "one write and one sync of the log per Sync append"
    );
    vfs.hook().fail_write(2, Fault::NoSpace);
    s.append(user("two")).unwrap();
    match s.append(user("three")) {
        Err(AppendError::Io { source, .. }) => assert_eq!(source.raw_os_error(), Some(28)),
        other => panic!("the second write from arming fails with ENOSPC, got {other:?}"),
    }
    let id = s.id().clone();
    drop(s);
    // Once fired, the fault is gone.
    let s = store.open(&id, Access::Write).unwrap();
    s.append(user("four")).unwrap();
}

#[test]
fn failing_faults_refuse_every_write_until_switched_off() {
    let dir = tempfile::tempdir().unwrap();
    let vfs = HookVfs::new(Faults::new());
    let store = store_over(dir.path(), vfs.clone());
    let s = store.create(NewSession::default()).unwrap();
    vfs.hook().set_failing(true);
    assert!(matches!(
        s.append(user("lost")),
        Err(AppendError::Io { .. })
    ));
    vfs.hook().set_failing(false);
    let id = s.id().clone();
    drop(s);
    let s = store.open(&id, Access::Write).unwrap();
    s.append(user("kept")).unwrap();
    assert_eq!(s.len(), 2);
}

#[test]
fn events_log_the_writes_and_syncs_of_session_logs_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let events = Arc::new(Events::new());
    let store = store_over(dir.path(), HookVfs::sharing(events.clone()));
    let s = store.create(NewSession::default()).unwrap();
    events.take();
    s.append(user("one")).unwrap();
    let log = events.take();
    assert!(
        matches!(log.as_slice(), [Event::Write { path, .. }, Event::Sync { .. }] if path.extension().is_some_and(|e| e == "jsonl")),
        "{log:?}"
    );
    assert!(events.events().is_empty());
}

/// Opens nothing but says which files it was asked about.
#[derive(Debug, Default)]
struct Asked(std::sync::Mutex<Vec<(String, OpenMode)>>);

impl Hook for Asked {
    fn hooks_file(&self, path: &Path, mode: OpenMode) -> bool {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        cairn::testkit::vfs::lock(&self.0).push((name, mode));
        false
    }
    fn write_all_at(&self, _: Hooked<'_>, _: &[u8], _: u64) -> io::Result<()> {
        panic!("a file the hook declined was hooked")
    }
}

#[test]
fn a_file_the_hook_declines_goes_straight_to_the_file_system() {
    let dir = tempfile::tempdir().unwrap();
    let vfs = HookVfs::new(Asked::default());
    let store = store_over(dir.path(), vfs.clone());
    let s = store.create(NewSession::default()).unwrap();
    s.append(user("one")).unwrap();
    let asked = cairn::testkit::vfs::lock(&vfs.hook().0).clone();
    assert!(
        asked.iter().any(|(name, _)| name.ends_with(".jsonl")),
        "{asked:?}"
    );
}

#[test]
fn rng_keeps_its_sequence_for_a_seed() {
    let mut rng = Rng::new(7);
    assert_eq!(
        [rng.next_u64(), rng.next_u64(), rng.next_u64()],
        [
            0xd814_e58a_040f_45a8,
            0x0c9d_2ae6_cb41_9e52,
            0x7683_78ca_9282_f31c
        ],
        "SplitMix64 from seed 7: a changed sequence breaks every recorded seed"
    );
    let mut a = Rng::new(42);
    for _ in 0..1000 {
        assert!(a.below(10) < 10);
        assert!((3..=5).contains(&a.range(3, 5)));
    }
}
