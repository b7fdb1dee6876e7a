//! Durability modes and group commit.
//!
//! In [`Durability::Group`] a writer writes its record under the session lock,
//! releases the lock, and then waits until a sync that started after its write
//! has completed. The first waiter to find no sync in flight becomes the
//! leader and runs one `fdatasync` for everybody written so far; the others
//! wait for it. Nobody is acknowledged before a sync that covers their record.
//!
//! Before it syncs, the leader gathers: while other appenders are in flight
//! (between the start of their append and their write), or fewer appenders
//! wait than waited for the previous sync (they were just released by it
//! and are on their way back with their next record), it waits for them —
//! at most [`MAX_GATHER`], and at most a quarter of the recent sync time, so
//! a fast disk is never kept waiting long for the sync it would share.
//! Without it the leader syncs the moment it finds no sync running, when
//! most of the appenders just woken by the previous sync have not written
//! yet: they wait a whole sync and make the next, small, batch. Gathering
//! changes who shares a sync, never what a sync covers: the target is read
//! after the gathering, and nobody is acknowledged before a sync that
//! started after their write.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::backend::Log;
use crate::error::AppendError;

/// What an acknowledged append survives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Durability {
    /// `fdatasync` before `append` returns: an acknowledged record survives
    /// process crash and power loss. One sync per append.
    #[default]
    Sync,
    /// Group commit: `append` returns after an `fdatasync` that covers the
    /// record, shared with every thread appending at the same time. Same
    /// guarantee as `Sync`, higher throughput under concurrency.
    Group,
    /// The record is handed to the OS (`write`) before `append` returns, but
    /// not synced: it survives a crash of the process (kill -9), not a power
    /// loss or kernel crash until [`crate::Session::sync`] returns.
    Buffered,
}

impl Durability {
    /// The name used on the command line and in docs.
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Sync => "sync",
            Durability::Group => "group",
            Durability::Buffered => "buffered",
        }
    }
}

impl std::str::FromStr for Durability {
    type Err = String;
    fn from_str(s: &str) -> Result<Durability, String> {
        match s {
            "sync" => Ok(Durability::Sync),
            "group" => Ok(Durability::Group),
            "buffered" => Ok(Durability::Buffered),
            other => Err(format!(
                "unknown durability {other:?}: expected sync, group or buffered"
            )),
        }
    }
}

/// The longest a group-commit leader waits for appenders in flight.
pub const MAX_GATHER: Duration = Duration::from_micros(50);

/// How the group syncs of a session went: how many records each covered
/// (what the leader's gathering is for). Counts the syncs led by
/// [`Durability::Group`] appends and [`crate::Session::sync`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Syncs run.
    pub syncs: u64,
    /// Records those syncs made durable.
    pub records: u64,
    /// Syncs by the records each made durable: `batches[i]` counts the
    /// syncs that covered `2^i ..= 2^(i+1) - 1` records (`batches[0]`: one
    /// record, or none), the last bucket everything from 128 up.
    pub batches: [u64; 8],
}

impl CommitStats {
    /// Records per sync, on average (0 before the first sync).
    pub fn mean_batch(&self) -> f64 {
        if self.syncs == 0 {
            0.0
        } else {
            self.records as f64 / self.syncs as f64
        }
    }

    /// The histogram for people: `1: 3, 2-3: 0, 4-7: 12, …` (empty buckets
    /// past the last used one left out).
    pub fn histogram(&self) -> String {
        let last = self.batches.iter().rposition(|&n| n > 0).unwrap_or(0);
        (0..=last)
            .map(|i| {
                let (lo, hi) = (1u64 << i, (1u64 << (i + 1)) - 1);
                let range = match i {
                    0 => "1".to_owned(),
                    7 => format!("{lo}+"),
                    _ => format!("{lo}-{hi}"),
                };
                format!("{range}: {}", self.batches[i])
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Adds `other`'s syncs to these (several sessions' or rounds' stats).
    pub fn merge(&mut self, other: &CommitStats) {
        self.syncs += other.syncs;
        self.records += other.records;
        for (mine, theirs) in self.batches.iter_mut().zip(other.batches) {
            *mine += theirs;
        }
    }

    fn add(&mut self, records: u64) {
        self.syncs += 1;
        self.records += records;
        let bucket = (63 - records.max(1).leading_zeros()) as usize;
        self.batches[bucket.min(self.batches.len() - 1)] += 1;
    }
}

#[derive(Debug, Default)]
struct State {
    /// Records `< written` have been written.
    written: u64,
    /// Records `< synced` are durable.
    synced: u64,
    /// A leader is running (or gathering for) a sync.
    syncing: bool,
    /// Threads in [`GroupCommit::wait_durable`], the leader included.
    waiting: usize,
    /// How many were waiting when the last sync completed: the appenders
    /// likely to be back with a record for the next one.
    expected: usize,
    /// Why the log failed, once it has.
    failed: Option<String>,
    stats: CommitStats,
}

/// Coordinates syncs of one log.
#[derive(Debug, Default)]
pub(crate) struct GroupCommit {
    state: Mutex<State>,
    /// Followers wait here for the sync that covers them.
    cv: Condvar,
    /// A gathering leader waits here for appenders to arrive.
    gather_cv: Condvar,
    /// Appends started and not yet written (or failed): [`InFlight`] guards.
    in_flight: AtomicUsize,
    /// The recent sync time in nanoseconds, smoothed (0 before the first).
    sync_ns: AtomicU64,
    /// The longest a leader gathers ([`MAX_GATHER`]; tests set their own).
    max_gather: Duration,
}

/// One append in flight, from its start to its write ([`GroupCommit::begin`]);
/// dropping it ends it, whether the append wrote or failed.
#[derive(Debug)]
pub(crate) struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl GroupCommit {
    pub fn new(records: u64) -> GroupCommit {
        GroupCommit {
            state: Mutex::new(State {
                written: records,
                synced: records,
                ..State::default()
            }),
            max_gather: MAX_GATHER,
            ..GroupCommit::default()
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes an append starting: a leader about to sync waits for it (a
    /// little) while the guard lives. Drop the guard after [`Self::written`].
    pub fn begin(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(&self.in_flight)
    }

    /// How the group syncs went so far.
    pub fn stats(&self) -> CommitStats {
        self.lock().stats
    }

    /// How long a leader may gather: a quarter of the recent sync time, at
    /// most [`MAX_GATHER`] (not at all before the first sync was timed).
    fn gather_limit(&self) -> Duration {
        let quarter = Duration::from_nanos(self.sync_ns.load(Ordering::Relaxed) / 4);
        quarter.min(self.max_gather)
    }

    /// The leader's wait before its sync, at most the gather limit: while
    /// appends are in flight (started, not yet written), or fewer appenders
    /// wait than waited for the last sync (those released by it, on their
    /// way back with their next record).
    fn gather<'a>(&self, mut st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        let limit = self.gather_limit();
        if limit.is_zero() {
            return st;
        }
        let deadline = Instant::now() + limit;
        while self.in_flight.load(Ordering::Acquire) > 0 || st.waiting < st.expected {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            st = self
                .gather_cv
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        st
    }

    fn note_sync_time(&self, took: Duration) {
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let old = self.sync_ns.load(Ordering::Relaxed);
        let new = if old == 0 { ns } else { old - old / 8 + ns / 8 };
        self.sync_ns.store(new, Ordering::Relaxed);
    }

    /// Notes that records `< upto` have been written (call after the write returned).
    pub fn written(&self, upto: u64) {
        let mut st = self.lock();
        st.written = st.written.max(upto);
    }

    /// Notes that records `< upto` are durable (after a sync made under the session lock).
    pub fn synced(&self, upto: u64) {
        let mut st = self.lock();
        st.synced = st.synced.max(upto);
        st.written = st.written.max(upto);
        self.cv.notify_all();
    }

    /// Records `< durable()` are durable.
    pub fn durable(&self) -> u64 {
        self.lock().synced
    }

    /// Returns once records `< upto` are durable, leading a sync if none is
    /// running. Records `< upto` must have been noted [`Self::written`].
    pub fn wait_durable(&self, log: &dyn Log, upto: u64) -> Result<(), AppendError> {
        let mut st = self.lock();
        st.waiting += 1;
        if st.syncing {
            // A gathering leader may be waiting for this appender.
            self.gather_cv.notify_one();
        }
        let result = loop {
            if st.synced >= upto {
                break Ok(());
            }
            if let Some(cause) = &st.failed {
                break Err(AppendError::Poisoned {
                    session: log.location().to_owned(),
                    cause: cause.clone(),
                });
            }
            if st.syncing {
                st = self.cv.wait(st).unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            // Lead. Appenders arriving from now on wait for this sync.
            st.syncing = true;
            st = self.gather(st);
            let target = st.written;
            drop(st);
            let started = Instant::now();
            let synced = log.sync();
            self.note_sync_time(started.elapsed());
            st = self.lock();
            st.syncing = false;
            if let Err(e) = synced {
                st.failed = Some(crate::error::with_causes(&e));
                self.cv.notify_all();
                break Err(e);
            }
            let newly = target.saturating_sub(st.synced);
            st.stats.add(newly);
            st.synced = st.synced.max(target);
            st.expected = st.waiting;
            self.cv.notify_all();
        };
        st.waiting -= 1;
        result
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use super::{GroupCommit, MAX_GATHER};
    use crate::backend::Log;
    use crate::error::{AppendError, ReadError};

    /// A log that only counts its syncs.
    #[derive(Debug, Default)]
    struct CountingLog {
        syncs: AtomicU64,
    }

    impl Log for CountingLog {
        fn location(&self) -> &str {
            "counting log"
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
            self.syncs.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
        fn is_writer(&self) -> bool {
            true
        }
        fn byte_len(&self) -> u64 {
            0
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
        let log = CountingLog::default();
        let other = gc.begin();
        std::thread::scope(|scope| {
            let leader = scope.spawn(|| {
                let me = gc.begin();
                gc.written(2);
                drop(me);
                gc.wait_durable(&log, 2)
            });
            // Once the leader is gathering, the other appender writes.
            while !gc.lock().syncing {
                std::thread::yield_now();
            }
            gc.written(3);
            drop(other);
            gc.wait_durable(&log, 3).unwrap();
            leader.join().unwrap().unwrap();
        });
        assert_eq!(log.syncs.load(Ordering::SeqCst), 1);
        let stats = gc.stats();
        assert_eq!((stats.syncs, stats.records), (1, 2));
        assert_eq!(stats.batches[1], 1, "{}", stats.histogram());
    }

    /// The appenders the last sync released are waited for, even before
    /// they have started their next append.
    #[test]
    fn the_leader_waits_for_as_many_appenders_as_the_last_sync_released() {
        let gc = with_gather(Duration::from_secs(3600));
        gc.lock().expected = 2;
        let log = CountingLog::default();
        std::thread::scope(|scope| {
            let leader = scope.spawn(|| {
                gc.written(2);
                gc.wait_durable(&log, 2)
            });
            while !gc.lock().syncing {
                std::thread::yield_now();
            }
            // Nothing in flight: only the expected count holds the leader.
            let me = gc.begin();
            gc.written(3);
            drop(me);
            gc.wait_durable(&log, 3).unwrap();
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
        let log = CountingLog::default();
        let _stuck = gc.begin();
        gc.written(2);
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
        assert_eq!(fast.gather_limit(), Duration::from_micros(10));
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
}
