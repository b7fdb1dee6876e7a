//! Group commit under controlled schedules: gathering, who leads, what a
//! sync covers, failed and panicking syncs, the batch histogram.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use super::{GroupCommit, MAX_GATHER};
use crate::backend::Log;
use crate::error::{AppendError, ReadError};

/// What a test log does when synced; everything else a [`Stub`] does
/// for it (it holds no records).
trait Syncs: Send + Sync + std::fmt::Debug {
    fn sync(&self) -> Result<(), AppendError>;
    /// What [`Log::fail_sync`] was told, if anything.
    fn fail_sync(&self, _cause: &str) {}
}

/// A log of no records around a [`Syncs`] (whose fields and methods
/// it lends).
#[derive(Debug, Default)]
struct Stub<S>(S);

impl<S> std::ops::Deref for Stub<S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.0
    }
}

impl<S: Syncs> Log for Stub<S> {
    fn location(&self) -> &str {
        "test log"
    }
    fn len(&self) -> u64 {
        0
    }
    fn read(&self, seq: u64) -> Result<Vec<u8>, ReadError> {
        Err(ReadError::NoSuchRecord(seq))
    }
    fn append(&self, _lines: &[Vec<u8>]) -> Result<(), AppendError> {
        Ok(())
    }
    fn sync(&self) -> Result<(), AppendError> {
        self.0.sync()
    }
    fn fail_sync(&self, cause: &str) {
        self.0.fail_sync(cause);
    }
    fn is_writer(&self) -> bool {
        true
    }
    fn byte_len(&self) -> u64 {
        0
    }
}

/// A log that only counts its syncs.
#[derive(Debug, Default)]
struct CountingLog {
    syncs: AtomicU64,
}

impl Syncs for CountingLog {
    fn sync(&self) -> Result<(), AppendError> {
        self.syncs.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// Returns once a leader is gathering.
fn until_gathering(gc: &GroupCommit) {
    while !gc.gathering.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
}

fn with_gather(max: Duration) -> GroupCommit {
    let mut g = GroupCommit::new(1);
    g.max_gather = max;
    // As if the disk took a long time to sync: the limit is `max`.
    g.note_sync_time(max.saturating_mul(8));
    g
}

/// The leader waits for an appender in flight, so one sync covers both.
#[test]
fn the_leader_waits_for_an_appender_in_flight_and_one_sync_covers_both() {
    // Long enough never to run out here: the wait ends when the appender writes.
    let gc = with_gather(Duration::from_secs(3600));
    let log = Stub(CountingLog::default());
    let other = gc.begin();
    std::thread::scope(|scope| {
        let leader = scope.spawn(|| {
            let me = gc.begin();
            gc.commit(&log, 2, me)
        });
        // Once the leader is gathering, the other appender writes.
        while !gc.lock().syncing {
            std::thread::yield_now();
        }
        gc.commit(&log, 3, other).unwrap();
        leader.join().unwrap().unwrap();
    });
    assert_eq!(log.syncs.load(Ordering::SeqCst), 1);
    let stats = gc.stats();
    assert_eq!((stats.syncs, stats.records), (1, 2));
    assert_eq!(stats.batches[1], 1, "{}", stats.histogram());
}

/// The gathering leader is woken once, when the last appender it
/// waits for has written, not at each arrival before it.
#[test]
fn the_gathering_leader_is_woken_only_when_its_wait_can_end() {
    let gc = with_gather(Duration::from_secs(3600));
    let log = Stub(CountingLog::default());
    let (first, second) = (gc.begin(), gc.begin());
    std::thread::scope(|scope| {
        let leader = scope.spawn(|| {
            let me = gc.begin();
            gc.commit(&log, 2, me)
        });
        until_gathering(&gc);
        // Written and parked, with another append still in flight:
        // the leader must go on waiting, and is not woken to find that.
        let early = scope.spawn(|| gc.commit(&log, 3, first));
        while gc.lock().waiting < 2 {
            std::thread::yield_now();
        }
        gc.commit(&log, 4, second).unwrap();
        early.join().unwrap().unwrap();
        leader.join().unwrap().unwrap();
    });
    let st = gc.lock();
    assert_eq!(st.gathers_woken_early, 0, "woken before its wait could end");
    assert_eq!(st.gathers_ran_out, 0);
    assert_eq!((st.stats.syncs, st.stats.records), (1, 3));
}

/// Regression: an append that ended its flight
/// without writing (it failed, or it is not a group append) did not
/// wake the gathering leader, which waited out its whole limit.
#[test]
fn an_append_that_fails_before_its_write_wakes_the_gathering_leader() {
    // Long enough never to run out here but by the bug: only the wake
    // ends the wait in time (and the bug is seen, not waited for long).
    let gc = with_gather(Duration::from_secs(10));
    let log = Stub(CountingLog::default());
    let failing = gc.begin();
    std::thread::scope(|scope| {
        let leader = scope.spawn(|| {
            let me = gc.begin();
            gc.commit(&log, 2, me)
        });
        until_gathering(&gc);
        drop(failing);
        leader.join().unwrap().unwrap();
    });
    assert_eq!(
        gc.lock().gathers_ran_out,
        0,
        "the leader waited out its gathering limit"
    );
    assert_eq!(log.syncs.load(Ordering::SeqCst), 1);
    assert_eq!(gc.durable(), 2);
}

/// The appenders the last sync released are waited for, even before
/// they have started their next append.
#[test]
fn the_leader_waits_for_as_many_appenders_as_the_last_sync_released() {
    let gc = with_gather(Duration::from_secs(3600));
    gc.lock().expected = 2;
    let log = Stub(CountingLog::default());
    std::thread::scope(|scope| {
        let leader = scope.spawn(|| gc.wait_durable(&log, 2));
        while !gc.lock().syncing {
            std::thread::yield_now();
        }
        // Nothing in flight: only the expected count holds the leader.
        let me = gc.begin();
        gc.commit(&log, 3, me).unwrap();
        leader.join().unwrap().unwrap();
    });
    assert_eq!(log.syncs.load(Ordering::SeqCst), 1);
    assert_eq!(gc.stats().records, 2);
    assert_eq!(gc.lock().waiting, 0);
}

/// An appender that never writes delays the sync by the limit, not forever.
#[test]
fn the_leader_gathers_for_a_bounded_time() {
    let gc = with_gather(Duration::from_millis(1));
    let log = Stub(CountingLog::default());
    let _stuck = gc.begin();
    gc.wait_durable(&log, 2).unwrap();
    assert_eq!(log.syncs.load(Ordering::SeqCst), 1);
    assert_eq!(gc.stats().batches[0], 1);
}

#[test]
fn no_gathering_before_the_first_sync_time_is_known_and_never_past_the_cap() {
    let gc = GroupCommit::new(1);
    assert!(gc.gather_limit().is_zero());
    gc.note_sync_time(Duration::from_secs(1));
    assert_eq!(gc.gather_limit(), MAX_GATHER);
    let fast = GroupCommit::new(1);
    fast.note_sync_time(Duration::from_micros(40));
    assert_eq!(fast.gather_limit(), Duration::from_micros(20));
}

/// A log whose syncs each wait for the test to open them, and fail
/// once told to.
#[derive(Debug, Default)]
struct GatedLog {
    started: AtomicU64,
    /// Syncs let through so far.
    opened: Mutex<u64>,
    cv: Condvar,
    fail: AtomicBool,
    /// Panics instead of failing.
    panic: AtomicBool,
    /// Why the log was told it failed ([`Log::fail_sync`]).
    failed: Mutex<Option<String>>,
}

impl GatedLog {
    fn wait_started(&self, n: u64) {
        while self.started.load(Ordering::SeqCst) < n {
            std::thread::yield_now();
        }
    }

    fn open_one(&self) {
        *self.opened.lock().unwrap() += 1;
        self.cv.notify_all();
    }
}

impl Syncs for GatedLog {
    fn sync(&self) -> Result<(), AppendError> {
        let n = self.started.fetch_add(1, Ordering::SeqCst) + 1;
        let mut opened = self.opened.lock().unwrap();
        while *opened < n {
            opened = self.cv.wait(opened).unwrap();
        }
        if self.panic.load(Ordering::SeqCst) {
            drop(opened);
            panic!("the sync panicked");
        }
        if self.fail.load(Ordering::SeqCst) {
            return Err(AppendError::Io {
                action: "sync",
                location: "gated log".into(),
                source: std::io::Error::other("the disk is gone"),
            });
        }
        Ok(())
    }
    fn fail_sync(&self, cause: &str) {
        *self.failed.lock().unwrap() = Some(cause.to_owned());
    }
}

/// Waits until `n` appenders are parked for a sync.
fn wait_parked(gc: &GroupCommit, n: usize) {
    while gc.lock().waiters.len() < n {
        std::thread::yield_now();
    }
}

/// Records written while a sync runs are not acknowledged by it: the
/// first of their writers is handed the next sync, which covers them
/// all; the leader's own append returns after its sync.
#[test]
fn records_written_during_a_sync_wait_for_the_next_which_one_of_them_runs() {
    let gc = GroupCommit::new(1);
    let log = Stub(GatedLog::default());
    std::thread::scope(|scope| {
        let leader = scope.spawn(|| gc.wait_durable(&log, 2));
        log.wait_started(1);
        let (a, b) = (
            scope.spawn(|| {
                gc.wait_durable(&log, 3)
                    .map(|()| std::thread::current().id())
            }),
            scope.spawn(|| {
                gc.wait_durable(&log, 4)
                    .map(|()| std::thread::current().id())
            }),
        );
        wait_parked(&gc, 2);
        log.open_one();
        leader.join().unwrap().unwrap();
        // The next sync starts without anybody else arriving.
        log.wait_started(2);
        assert_eq!(
            gc.durable(),
            2,
            "the first sync covered only what it found written"
        );
        assert_eq!(gc.lock().waiters.len(), 1, "one waiter leads, one waits");
        assert!(!a.is_finished() && !b.is_finished());
        log.open_one();
        a.join().unwrap().unwrap();
        b.join().unwrap().unwrap();
    });
    assert_eq!(log.started.load(Ordering::SeqCst), 2);
    let stats = gc.stats();
    assert_eq!((stats.syncs, stats.records), (2, 3));
    let st = gc.lock();
    assert_eq!((st.synced, st.waiting, st.syncing), (4, 0, false));
    assert!(st.waiters.is_empty());
}

/// A sync made under the session lock (a `Sync` append) releases the
/// group waiters it covers, and only those.
#[test]
fn a_sync_under_the_session_lock_releases_the_waiters_it_covers() {
    let gc = GroupCommit::new(1);
    let log = Stub(GatedLog::default());
    std::thread::scope(|scope| {
        let leader = scope.spawn(|| gc.wait_durable(&log, 2));
        log.wait_started(1);
        let covered = scope.spawn(|| gc.wait_durable(&log, 3));
        let later = scope.spawn(|| gc.wait_durable(&log, 5));
        wait_parked(&gc, 2);
        gc.synced(4);
        covered.join().unwrap().unwrap();
        assert!(!later.is_finished());
        log.open_one();
        leader.join().unwrap().unwrap();
        log.wait_started(2);
        log.open_one();
        later.join().unwrap().unwrap();
    });
    assert_eq!(gc.durable(), 5);
    assert_eq!(gc.lock().waiting, 0);
}

/// How the leader's thread ended, and each parked appender's result.
type Ended = (
    std::thread::Result<Result<(), AppendError>>,
    Vec<Result<(), AppendError>>,
);

/// Runs a leader whose sync `log` ends badly (it was told how) while
/// `parked` more appenders wait; returns how the leader's thread ended
/// (`Err`: it panicked) and each parked appender's result.
fn end_the_first_sync_badly(gc: &GroupCommit, log: &Stub<GatedLog>, parked: u64) -> Ended {
    std::thread::scope(|scope| {
        let leader = scope.spawn(|| gc.wait_durable(log, 2));
        log.wait_started(1);
        let waiters: Vec<_> = (3..3 + parked)
            .map(|upto| scope.spawn(move || gc.wait_durable(log, upto)))
            .collect();
        wait_parked(gc, parked as usize);
        log.open_one();
        let leader = leader.join();
        let waiters = waiters.into_iter().map(|w| w.join().unwrap()).collect();
        (leader, waiters)
    })
}

/// Every result is `Poisoned` with a cause that names `why`, and so is
/// every later wait; nobody is left waiting or handed a sync.
fn failed_for_good(
    gc: &GroupCommit,
    log: &Stub<GatedLog>,
    results: &[Result<(), AppendError>],
    why: &str,
) {
    for r in results {
        match r {
            Err(AppendError::Poisoned { cause, .. }) => {
                assert!(cause.contains(why), "{cause}");
            }
            other => panic!("expected Poisoned, got {other:?}"),
        }
    }
    assert!(matches!(
        gc.wait_durable(log, 99),
        Err(AppendError::Poisoned { .. })
    ));
    assert_eq!(log.started.load(Ordering::SeqCst), 1);
    let st = gc.lock();
    assert_eq!((st.waiting, st.syncing, st.waiters.len()), (0, false, 0));
}

/// A failed sync fails its leader and every parked appender (covered or
/// not), and every later wait, with the cause; nobody is handed a sync.
#[test]
fn a_failed_sync_fails_every_waiter_and_every_later_wait() {
    let gc = GroupCommit::new(1);
    let log = Stub(GatedLog::default());
    log.fail.store(true, Ordering::SeqCst);
    let (leader, waiters) = end_the_first_sync_badly(&gc, &log, 3);
    assert!(matches!(leader.unwrap(), Err(AppendError::Io { .. })));
    failed_for_good(&gc, &log, &waiters, "the disk is gone");
}

/// Regression: a sync that panicked left `syncing`
/// set with nobody to lead, and every parked or later group append
/// waited forever. Now they fail, the log refuses too, and the panic
/// reaches its leader.
#[test]
fn a_panicking_sync_fails_every_waiter_instead_of_leaving_them_parked() {
    let gc = GroupCommit::new(1);
    let log = Stub(GatedLog::default());
    log.panic.store(true, Ordering::SeqCst);
    let (leader, waiters) = end_the_first_sync_badly(&gc, &log, 2);
    assert!(leader.is_err(), "the leader's panic goes on");
    assert_eq!(
        log.failed.lock().unwrap().as_deref(),
        Some("a sync panicked"),
        "the log refuses from now on too"
    );
    failed_for_good(&gc, &log, &waiters, "panicked");
}

/// Many appenders, each writing under a lock as a session does:
/// nobody is acknowledged before a sync that started after its write
/// completed, and everybody is acknowledged.
#[test]
fn no_appender_is_acknowledged_before_a_sync_that_started_after_its_write() {
    /// Counts syncs started and the latest start a completed sync had.
    #[derive(Debug, Default)]
    struct StampLog {
        started: AtomicU64,
        completed_start: AtomicU64,
    }
    impl Syncs for StampLog {
        fn sync(&self) -> Result<(), AppendError> {
            let me = self.started.fetch_add(1, Ordering::SeqCst) + 1;
            std::thread::yield_now();
            self.completed_start.fetch_max(me, Ordering::SeqCst);
            Ok(())
        }
    }
    let gc = with_gather(Duration::from_micros(20));
    let log = Stub(StampLog::default());
    let session = Mutex::new(1u64);
    let acked = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for _ in 0..8 {
            scope.spawn(|| {
                for _ in 0..300 {
                    let flight = gc.begin();
                    let mut next = session.lock().unwrap();
                    *next += 1;
                    let upto = *next;
                    // The write is complete: any sync started from now covers it.
                    let before = log.started.load(Ordering::SeqCst);
                    drop(next);
                    gc.commit(&log, upto, flight).unwrap();
                    assert!(
                        log.completed_start.load(Ordering::SeqCst) > before,
                        "record {upto} acknowledged with no sync started after its write"
                    );
                    acked.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
    });
    assert_eq!(acked.load(Ordering::SeqCst), 2400);
    assert_eq!(gc.durable(), 2401);
    assert_eq!(gc.stats().records, 2400);
    let st = gc.lock();
    assert_eq!((st.waiting, st.syncing, st.waiters.len()), (0, false, 0));
}

#[test]
fn the_histogram_buckets_records_per_sync_by_powers_of_two() {
    let mut s = super::CommitStats::default();
    for n in [1, 2, 3, 4, 16, 17, 200] {
        s.add(n);
    }
    assert_eq!(s.batches, [1, 2, 1, 0, 2, 0, 0, 1]);
    assert_eq!(
        s.histogram(),
        "1: 1, 2-3: 2, 4-7: 1, 8-15: 0, 16-31: 2, 32-63: 0, 64-127: 0, 128+: 1"
    );
    assert_eq!(s.mean_batch(), 243.0 / 7.0);
}
