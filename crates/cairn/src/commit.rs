//! Durability modes and group commit.
//!
//! In [`Durability::Group`] a writer hands its record to the log under the
//! session lock ([`Log::defer`]: the file backend keeps it in memory, to be
//! written with the others of its batch by one `pwrite` at the start of the
//! next sync), releases the lock, and then waits until a sync that started
//! after its record was handed over has completed. The first waiter to find
//! no sync in flight becomes the leader and runs one sync — the batch's
//! write, then one `fdatasync` — for everybody so far; the others park,
//! each with the records it needs durable. Nobody is acknowledged before a
//! sync that covers their record. No group append extends the file while
//! an `fdatasync` of it runs, and a batch costs one write, not one per
//! record (a `Sync` or `Buffered` append on the same handle, or a batch
//! past 1 MiB, writes the deferred lines before its own).
//!
//! After its sync the leader tells each waiter the sync covered, and the
//! first one it left uncovered (written during the sync) that it leads the
//! next — no election, and while anybody waits uncovered a leader exists —
//! then wakes them all with one call of a condition variable of their own
//! (not the commit state's: a covered waiter returns without taking the
//! state's lock). Those told nothing wait again. A failed sync fails every
//! waiter and poisons the handle.
//!
//! Before it syncs, the leader gathers: while other appenders are in flight
//! (between the start of their append and their write), or fewer appenders
//! wait than waited for the previous sync (they were just released by it
//! and are on their way back with their next record), it waits for them —
//! at most [`MAX_GATHER`], and at most half the recent sync time, so a
//! fast disk is never kept waiting long for the sync it would share.
//! Without it the leader syncs the moment it finds no sync running, when
//! most of the appenders just woken by the previous sync have not written
//! yet: they wait a whole sync and make the next, small, batch. Gathering
//! changes who shares a sync, never what a sync covers: the target is read
//! after the gathering, and nobody is acknowledged before a sync that
//! started after their write.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
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
pub const MAX_GATHER: Duration = Duration::from_micros(200);

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

/// Where a waiting appender stands; set by whoever wakes it.
const WAITING: u8 = 0;
/// A sync that started after its write has completed.
const COVERED: u8 = 1;
/// Handed the leadership: it runs the next sync.
const LEAD: u8 = 2;
/// A sync failed; the cause is in [`State::failed`].
const FAILED: u8 = 3;

/// A thread waiting in [`GroupCommit::wait_durable`]: one per thread, kept
/// from one wait to the next.
#[derive(Debug)]
struct Slot {
    state: AtomicU8,
}

impl Slot {
    /// This thread's slot (a new one while the thread is being torn down).
    fn mine() -> Arc<Slot> {
        thread_local! {
            static SLOT: Arc<Slot> = Slot::new();
        }
        SLOT.try_with(Arc::clone).unwrap_or_else(|_| Slot::new())
    }

    /// A slot for the current thread.
    fn new() -> Arc<Slot> {
        Arc::new(Slot {
            state: AtomicU8::new(WAITING),
        })
    }

    /// Tells the slot's thread `state`; it sees it once woken
    /// ([`GroupCommit::wake_all`]).
    fn tell(&self, state: u8) {
        self.state.store(state, Ordering::Release);
    }
}

/// A parked appender: durable once records `< upto` are.
#[derive(Debug)]
struct Waiter {
    upto: u64,
    slot: Arc<Slot>,
}

#[derive(Debug, Default)]
struct State {
    /// Records `< written` have been written.
    written: u64,
    /// Records `< synced` are durable.
    synced: u64,
    /// A leader is running (or gathering for) a sync, or has been handed
    /// the next one: whoever arrives now waits.
    syncing: bool,
    /// The appenders parked for a sync, none of them covered by `synced`.
    /// While one is here, `syncing` is set: somebody will sync for it.
    waiters: Vec<Waiter>,
    /// Threads in [`GroupCommit::wait_durable`], the leader included.
    waiting: usize,
    /// How many were waiting when the last sync completed: the appenders
    /// likely to be back with a record for the next one.
    expected: usize,
    /// Why the log failed, once it has.
    failed: Option<String>,
    stats: CommitStats,
    /// Gatherings that ran out their limit (rather than ending when the
    /// appenders they waited for arrived).
    gathers_ran_out: u64,
    /// Times a gathering leader was woken before it had what it waits for.
    gathers_woken_early: u64,
}

impl State {
    /// Takes the waiters records `< synced` cover, in `out`.
    fn take_covered(&mut self, out: &mut Vec<Arc<Slot>>) {
        let synced = self.synced;
        let before = self.waiters.len();
        self.waiters.retain(|w| {
            if w.upto <= synced {
                out.push(Arc::clone(&w.slot));
                false
            } else {
                true
            }
        });
        self.waiting -= before - self.waiters.len();
    }
}

/// Coordinates syncs of one log.
#[derive(Debug, Default)]
pub(crate) struct GroupCommit {
    state: Mutex<State>,
    /// A gathering leader waits here for appenders to arrive.
    gather_cv: Condvar,
    /// Waiting appenders wait on `woken` (holding `wake` only to check
    /// their slot): one call wakes them all ([`GroupCommit::wake_all`]).
    wake: Mutex<()>,
    woken: Condvar,
    /// The leader is waiting on `gather_cv` (set and cleared under the
    /// state lock; read without it by an append that ends its flight
    /// early, see [`InFlight`]).
    gathering: AtomicBool,
    /// Appends started and not yet written (or failed): [`InFlight`] guards.
    in_flight: AtomicUsize,
    /// The recent sync time in nanoseconds, smoothed (0 before the first).
    sync_ns: AtomicU64,
    /// The longest a leader gathers ([`MAX_GATHER`]; tests set their own).
    max_gather: Duration,
}

/// One append in flight, from its start to its write ([`GroupCommit::begin`]);
/// dropping it ends it, whether the append wrote or failed, and wakes a
/// leader gathering for it (which would otherwise wait out its limit for
/// an append that failed, or that is not a group append).
#[derive(Debug)]
pub(crate) struct InFlight<'a>(&'a GroupCommit);

impl InFlight<'_> {
    /// Ends the flight under the state lock, whose holder tells a
    /// gathering leader.
    fn end_locked(self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        std::mem::forget(self);
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let gc = self.0;
        gc.in_flight.fetch_sub(1, Ordering::SeqCst);
        // Either the leader's check sees the flight ended, or this sees
        // it gathering (both sequentially consistent); under the lock, the
        // leader is then waiting and gets the notification.
        if gc.gathering.load(Ordering::SeqCst) {
            let st = gc.lock();
            gc.tell_gatherer(&st);
        }
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
    /// little) while the guard lives: a group append hands it to [`Self::commit`], others drop it after their write.
    pub fn begin(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self)
    }

    /// How the group syncs went so far.
    pub fn stats(&self) -> CommitStats {
        self.lock().stats
    }

    /// How long a leader may gather: half the recent sync time, at most
    /// [`MAX_GATHER`] (not at all before the first sync was timed).
    fn gather_limit(&self) -> Duration {
        let half = Duration::from_nanos(self.sync_ns.load(Ordering::Relaxed) / 2);
        half.min(self.max_gather)
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
        self.gathering.store(true, Ordering::SeqCst);
        while !self.gathered(&st) {
            let now = Instant::now();
            if now >= deadline {
                st.gathers_ran_out += 1;
                break;
            }
            let (guard, waited) = self
                .gather_cv
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(PoisonError::into_inner);
            st = guard;
            if waited.timed_out() {
                st.gathers_ran_out += 1;
                break;
            }
            if !self.gathered(&st) {
                st.gathers_woken_early += 1;
            }
        }
        self.gathering.store(false, Ordering::SeqCst);
        st
    }

    /// Whether a gathering leader has what it waits for: no append in
    /// flight, and as many appenders waiting as waited for the last sync.
    fn gathered(&self, st: &State) -> bool {
        self.in_flight.load(Ordering::SeqCst) == 0 && st.waiting >= st.expected
    }

    /// Wakes the gathering leader, if there is one, once it has what it
    /// waits for (called under the state lock after every change that can
    /// end its wait). Not at every arrival, as before: each woke the
    /// leader only for it to find it must wait again, while the appenders
    /// it waits for need the CPU (two vCPUs here: gathering took ~100 µs,
    /// now ~85; figure 2 from 5.6-6.3x to 6.4-6.7x in five pairs).
    fn tell_gatherer(&self, st: &State) {
        if self.gathering.load(Ordering::SeqCst) && self.gathered(st) {
            self.gather_cv.notify_one();
        }
    }

    fn note_sync_time(&self, took: Duration) {
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let old = self.sync_ns.load(Ordering::Relaxed);
        let new = if old == 0 { ns } else { old - old / 8 + ns / 8 };
        self.sync_ns.store(new, Ordering::Relaxed);
    }

    /// Notes that records `< upto` are durable (after a sync made under the
    /// session lock), and releases the waiters that covers.
    pub fn synced(&self, upto: u64) {
        let mut covered = Vec::new();
        {
            let mut st = self.lock();
            st.synced = st.synced.max(upto);
            st.written = st.written.max(upto);
            st.take_covered(&mut covered);
        }
        for slot in covered {
            slot.tell(COVERED);
        }
        self.wake_all();
    }

    /// Wakes every waiting appender, to find what its slot was told (those
    /// told nothing wait again): one futex call, which queues every
    /// wake-up before the waker can be preempted by the first it woke. (An
    /// `unpark` each cost ~7 µs on a two-vCPU VM, the woken thread running
    /// its next append before the waker got to the next `unpark`: ~100 µs
    /// to wake 14.) Taking `wake` first orders this after any waiter's check
    /// of its slot, so none misses it.
    fn wake_all(&self) {
        drop(self.wake.lock().unwrap_or_else(PoisonError::into_inner));
        self.woken.notify_all();
    }

    /// Records `< durable()` are durable.
    pub fn durable(&self) -> u64 {
        self.lock().synced
    }

    /// Ends the group append `flight`, which wrote records up to `upto`
    /// (the session lock released): returns once they are durable.
    pub fn commit(
        &self,
        log: &dyn Log,
        upto: u64,
        flight: InFlight<'_>,
    ) -> Result<(), AppendError> {
        self.wait(log, upto, Some(flight))
    }

    /// Returns once records `< upto` are durable, leading a sync if none is
    /// running. Every record `< upto` must have been written.
    pub fn wait_durable(&self, log: &dyn Log, upto: u64) -> Result<(), AppendError> {
        self.wait(log, upto, None)
    }

    fn wait(
        &self,
        log: &dyn Log,
        upto: u64,
        flight: Option<InFlight<'_>>,
    ) -> Result<(), AppendError> {
        let mut st = self.lock();
        st.written = st.written.max(upto);
        // Written: no longer in flight (noted under the lock, so a
        // gathering leader sees the write and the end of the flight together).
        if let Some(flight) = flight {
            flight.end_locked();
        }
        if st.synced >= upto {
            self.tell_gatherer(&st);
            return Ok(());
        }
        if let Some(cause) = &st.failed {
            self.tell_gatherer(&st);
            return Err(poisoned(log, cause));
        }
        st.waiting += 1;
        // The leader may be waiting for this appender to park.
        self.tell_gatherer(&st);
        if st.syncing {
            let slot = Slot::mine();
            slot.state.store(WAITING, Ordering::Relaxed);
            st.waiters.push(Waiter {
                upto,
                slot: Arc::clone(&slot),
            });
            drop(st);
            let woken = {
                let mut g = self.wake.lock().unwrap_or_else(PoisonError::into_inner);
                loop {
                    match slot.state.load(Ordering::Acquire) {
                        WAITING => {
                            g = self.woken.wait(g).unwrap_or_else(PoisonError::into_inner);
                        }
                        state => break state,
                    }
                }
            };
            match woken {
                // Whoever woke it counted it out of `waiting`.
                COVERED => return Ok(()),
                LEAD => st = self.lock(),
                _ => {
                    let st = self.lock();
                    let cause = st.failed.as_deref().unwrap_or("a sync failed");
                    return Err(poisoned(log, cause));
                }
            }
        } else {
            st.syncing = true;
        }
        // Lead: `syncing` is set, and stays set until no waiter is left.
        self.lead(log, st)
    }

    /// Runs one sync for everybody written so far, wakes the waiters it
    /// covers and hands the next sync to the first waiter it left uncovered
    /// (written during the sync), so no election follows a sync. A failed
    /// sync fails every waiter.
    fn lead<'a>(&'a self, log: &dyn Log, st: MutexGuard<'a, State>) -> Result<(), AppendError> {
        let st = self.gather(st);
        let target = st.written;
        drop(st);
        // Should the sync panic, the log and the waiters fail instead of
        // waiting for a leader that is gone.
        let leading = Leading(Some((self, log)));
        let started = Instant::now();
        let synced = log.sync();
        self.note_sync_time(started.elapsed());
        leading.done();
        let mut st = self.lock();
        let mut covered = Vec::new();
        if let Err(e) = synced {
            self.fail_all(st, crate::error::with_causes(&e));
            return Err(e);
        }
        let newly = target.saturating_sub(st.synced);
        st.stats.add(newly);
        st.synced = st.synced.max(target);
        st.expected = st.waiting;
        st.waiting -= 1;
        st.take_covered(&mut covered);
        let next = if st.waiters.is_empty() {
            st.syncing = false;
            None
        } else {
            Some(st.waiters.remove(0))
        };
        drop(st);
        // The next sync first: its leader starts gathering while the
        // others go back to their appends.
        if let Some(next) = next {
            next.slot.tell(LEAD);
        }
        for slot in covered {
            slot.tell(COVERED);
        }
        self.wake_all();
        Ok(())
    }
}

impl GroupCommit {
    /// The leader's sync failed (`cause`): every waiter fails with it, and
    /// so does every later group append.
    fn fail_all(&self, mut st: MutexGuard<'_, State>, cause: String) {
        st.failed = Some(cause);
        st.syncing = false;
        st.waiting -= 1 + st.waiters.len();
        let failed: Vec<_> = st.waiters.drain(..).map(|w| w.slot).collect();
        drop(st);
        for slot in failed {
            slot.tell(FAILED);
        }
        self.wake_all();
    }
}

/// A leader's sync in progress: dropped before [`Leading::done`], by a
/// panic unwinding through the sync, it poisons the log (whose deferred
/// lines are then never written) and fails every waiter (who would
/// otherwise wait forever, `syncing` set and no leader left).
struct Leading<'a>(Option<(&'a GroupCommit, &'a dyn Log)>);

impl Leading<'_> {
    fn done(mut self) {
        self.0 = None;
    }
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        if let Some((gc, log)) = self.0 {
            let cause = "a sync panicked";
            log.fail_sync(cause);
            gc.fail_all(gc.lock(), cause.to_owned());
        }
    }
}

fn poisoned(log: &dyn Log, cause: &str) -> AppendError {
    AppendError::Poisoned {
        session: log.location().to_owned(),
        cause: cause.to_owned(),
    }
}

#[cfg(test)]
mod tests {
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
            while !gc.gathering.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
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

    /// Regression (review finding F1): an append that ended its flight
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
            while !gc.gathering.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
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

    /// Regression (review finding F2): a sync that panicked left `syncing`
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
}
