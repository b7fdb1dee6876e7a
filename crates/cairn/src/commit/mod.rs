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
    /// little) while the guard lives: a group append hands it to
    /// [`Self::commit`], others drop it after their write.
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
    /// end its wait) — not at every arrival: a leader woken early only
    /// finds it must wait again, and takes the CPU from the appenders it
    /// waits for.
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
    /// wake-up before the waker can be preempted by the first it woke (with
    /// one `unpark` per waiter, a woken thread runs its next append before
    /// the waker reaches the next `unpark`). Taking `wake` first orders this
    /// after any waiter's check of its slot, so none misses it.
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
mod tests;
