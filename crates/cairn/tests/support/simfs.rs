//! [`SimFs`]: an in-memory file system behind cairn's [`Vfs`] seam that
//! models what survives a power loss, and [`Rng`], the deterministic
//! generator every reliability harness draws from.
//!
//! The model, per file: a *visible* image (what reads return: the page
//! cache), a *durable* image (what is on the platter), and the *pending*
//! operations (writes and truncations) between them, in order. `sync_data`
//! makes a file's visible image durable. Per directory: the visible entries
//! and the durable ones; `sync_dir` makes a directory's entries (creations,
//! renames, removals) durable. Nothing else is durable: not the data of an
//! unsynced file, not the name of a file whose directory was not synced, not
//! a new directory whose parent was not synced.
//!
//! [`SimFs::crash_after`] arms a crash before the N-th *mutating* operation
//! (create, write, sync, sync_dir, set_len, rename, remove, mkdir). At the
//! crash every handle dies (its operations fail with `EIO`), every lock is
//! released, and the disk becomes a *crash image*, chosen by a seeded
//! [`Rng`]: each pending write is lost, kept, or torn (a prefix kept),
//! independently — so a later write can survive an earlier lost one (the
//! gap reads as zeros) — optionally split at 512-byte sector boundaries
//! first; each pending directory operation survives or not, independently;
//! sometimes the file size survives without the data (zeros). A file whose
//! directory entry did not survive is gone. [`SimFs::reboot`] brings the
//! disk back: the crash image is now what every read sees, and all of it is
//! durable.
//!
//! [`SimFs::fail`] arms an I/O fault instead: the N-th operation of chosen
//! kinds fails with `EIO` or `ENOSPC`, a write lands only a prefix, and a
//! failed `sync_data` behaves as Linux does ("fsyncgate"): the kernel writes
//! back some of the pending data, drops the rest, and marks every page
//! clean, so the page cache still shows data the disk may not have and a
//! retried sync succeeds without writing it.
//!
//! Everything is deterministic given the seeds, except the interleaving of
//! threads that the caller runs.

#![allow(dead_code, clippy::expect_used, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use cairn::vfs::{Metadata, OpenMode, Vfs, VfsFile};

// ---------------------------------------------------------------------------
// Rng
// ---------------------------------------------------------------------------

/// The tests' one generator (SplitMix64; the same sequence for a seed as before).
pub use cairn::testkit::Rng;

// ---------------------------------------------------------------------------
// Operations, faults, crash images
// ---------------------------------------------------------------------------

/// The kinds of operation the seam performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    /// Opening a file (any mode).
    Open,
    /// `read_at`.
    Read,
    /// `write_all_at`.
    Write,
    /// `sync_data`.
    Sync,
    /// `sync_dir`.
    SyncDir,
    /// `set_len`.
    SetLen,
    /// `rename`.
    Rename,
    /// `remove_file`.
    Remove,
    /// `create_dir_all`.
    Mkdir,
    /// `metadata`, `read_dir`, `len`, `try_lock`.
    Inspect,
}

impl Op {
    /// Every kind a fault can be injected into.
    pub const FAULTABLE: &'static [Op] = &[
        Op::Open,
        Op::Read,
        Op::Write,
        Op::Sync,
        Op::SyncDir,
        Op::SetLen,
        Op::Rename,
    ];

    /// The name used in messages.
    pub fn name(self) -> &'static str {
        match self {
            Op::Open => "open",
            Op::Read => "read",
            Op::Write => "write",
            Op::Sync => "sync",
            Op::SyncDir => "sync_dir",
            Op::SetLen => "set_len",
            Op::Rename => "rename",
            Op::Remove => "remove",
            Op::Mkdir => "mkdir",
            Op::Inspect => "inspect",
        }
    }
}

/// How an injected fault fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// `EIO`. On a sync: the kernel wrote back some pending data, dropped the
    /// rest and marked the pages clean (Linux's behaviour).
    Eio,
    /// `ENOSPC`. On a write nothing lands; on a sync as `Eio`.
    NoSpace,
    /// A write that lands a prefix of its bytes, then fails with `EIO`
    /// (on other operations, `EIO`).
    ShortWrite,
}

impl FaultKind {
    /// Every kind.
    pub const ALL: &'static [FaultKind] =
        &[FaultKind::Eio, FaultKind::NoSpace, FaultKind::ShortWrite];

    fn errno(self) -> i32 {
        match self {
            FaultKind::Eio | FaultKind::ShortWrite => 5,
            FaultKind::NoSpace => 28,
        }
    }
}

/// An armed fault: the `nth` operation (from 1) among `ops` fails with `kind`;
/// `sticky` keeps failing every later operation among `ops` until [`SimFs::heal`].
#[derive(Debug, Clone)]
pub struct FaultPlan {
    /// Which operations count and can fail.
    pub ops: BTreeSet<Op>,
    /// Which of them fails first (1: the next one).
    pub nth: u64,
    /// How.
    pub kind: FaultKind,
    /// Whether the fault stays (a full disk) or fires once (a glitch).
    pub sticky: bool,
    /// Only files whose name ends with this (e.g. `.jsonl`); `None`: all.
    pub suffix: Option<String>,
}

/// A fault that fired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fired {
    /// The operation.
    pub op: Op,
    /// The file or directory.
    pub path: PathBuf,
    /// How it failed.
    pub kind: FaultKind,
}

/// How adversarial a crash image is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// Every pending write and directory operation survives (a process
    /// crash: the kernel keeps the page cache).
    KeepAll,
    /// Nothing pending survives (only what was synced).
    LoseAll,
    /// Each pending write is lost, kept or torn independently (reordering
    /// included), sometimes sector by sector; directory operations survive
    /// independently; sometimes sizes survive without data.
    PowerLoss,
}

/// What the last crash did, for statistics and messages.
#[derive(Debug, Clone, Default)]
pub struct CrashReport {
    /// The operation the crash replaced (its kind and path).
    pub at: Option<(Op, PathBuf)>,
    /// Pending writes at the crash, and how many were lost, kept, torn.
    pub writes: u64,
    /// Lost writes (or sectors).
    pub lost: u64,
    /// Kept writes (or sectors).
    pub kept: u64,
    /// Torn writes (or sectors).
    pub torn: u64,
    /// Whether a lost write was followed by a kept one in the same file.
    pub reordered: bool,
    /// Pending directory operations, and how many were lost.
    pub dir_ops: u64,
    /// Lost directory operations.
    pub dir_lost: u64,
    /// Every file's visible bytes at the moment of the crash.
    pub visible: BTreeMap<PathBuf, Vec<u8>>,
}

#[derive(Debug, Clone)]
enum Pending {
    Write { off: u64, bytes: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    File(u64),
    Dir,
}

#[derive(Debug, Clone)]
enum DirOp {
    Create {
        path: PathBuf,
        node: Node,
    },
    Remove {
        path: PathBuf,
    },
    Rename {
        from: PathBuf,
        to: PathBuf,
        node: Node,
    },
}

impl DirOp {
    /// The directory whose sync makes this operation durable.
    fn dir(&self) -> &Path {
        let p = match self {
            DirOp::Create { path, .. } | DirOp::Remove { path } => path,
            DirOp::Rename { to, .. } => to,
        };
        p.parent().unwrap_or(Path::new("/"))
    }
    /// Whether it also touches `dir` (a rename's source directory).
    fn touches(&self, dir: &Path) -> bool {
        match self {
            DirOp::Rename { from, to, .. } => {
                from.parent() == Some(dir) || to.parent() == Some(dir)
            }
            _ => self.dir() == dir,
        }
    }
    fn apply(&self, names: &mut BTreeMap<PathBuf, Node>) {
        match self {
            DirOp::Create { path, node } => {
                names.insert(path.clone(), *node);
            }
            DirOp::Remove { path } => {
                names.remove(path);
            }
            DirOp::Rename { from, to, node } => {
                names.remove(from);
                names.insert(to.clone(), *node);
            }
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Inode {
    visible: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<Pending>,
    mtime: u64,
}

#[derive(Debug, Default)]
struct State {
    /// Bumped at every crash: handles of older generations are dead.
    generation: u64,
    /// Between a crash and `reboot`: every operation fails.
    halted: bool,
    inodes: BTreeMap<u64, Inode>,
    next_ino: u64,
    names: BTreeMap<PathBuf, Node>,
    durable_names: BTreeMap<PathBuf, Node>,
    dir_pending: Vec<DirOp>,
    /// ino → handle holding the lock.
    locks: BTreeMap<u64, u64>,
    next_handle: u64,
    clock: u64,
    /// Mutating operations so far.
    mutations: u64,
    crash_at: Option<(u64, CrashMode, u64)>,
    crash_count: u64,
    last_crash: Option<CrashReport>,
    fault: Option<FaultPlan>,
    /// Operations counted towards the fault plan so far.
    fault_seen: u64,
    /// Per-kind operation counts (all operations).
    counts: BTreeMap<Op, u64>,
    fired: Vec<Fired>,
    /// Rng for fsyncgate decisions.
    rng: Option<Rng>,
    /// A failed sync drops every pending write (instead of a random subset).
    failed_sync_drops_all: bool,
    /// Planted bug: `sync_data` reports success and makes nothing durable.
    lie_on_sync: bool,
    /// Writes that began past the end of their file (leaving a hole).
    writes_past_end: u64,
}

fn apply_all(img: &mut Vec<u8>, pending: &[Pending]) {
    for p in pending {
        match p {
            Pending::SetLen(n) => img.resize(*n as usize, 0),
            Pending::Write { off, bytes } => {
                let start = *off as usize;
                if img.len() < start + bytes.len() {
                    img.resize(start + bytes.len(), 0);
                }
                img[start..start + bytes.len()].copy_from_slice(bytes);
            }
        }
    }
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn err(errno: i32) -> io::Error {
    io::Error::from_raw_os_error(errno)
}

fn crashed_error() -> io::Error {
    io::Error::other("simulated crash: the process is gone (EIO)")
}

/// The in-memory file system. Cheap to clone (an `Arc`).
#[derive(Debug, Clone, Default)]
pub struct SimFs {
    state: Arc<Mutex<State>>,
}

impl SimFs {
    /// An empty file system with a durable root directory `/`.
    pub fn new() -> SimFs {
        let fs = SimFs::default();
        {
            let mut st = lock(&fs.state);
            st.names.insert(PathBuf::from("/"), Node::Dir);
            st.durable_names.insert(PathBuf::from("/"), Node::Dir);
            st.rng = Some(Rng::new(1));
        }
        fs
    }

    /// The seam to hand to [`cairn::FileBackend::with_vfs`].
    pub fn vfs(&self) -> Arc<dyn Vfs> {
        Arc::new(self.clone())
    }

    /// Creates a directory and its parents, durably (test setup: "the store
    /// home already existed").
    pub fn mkdir_durable(&self, path: &Path) {
        let mut st = lock(&self.state);
        let mut p = PathBuf::new();
        for c in path.components() {
            p.push(c);
            st.names.insert(p.clone(), Node::Dir);
            st.durable_names.insert(p.clone(), Node::Dir);
        }
    }

    /// Makes a failed sync drop every pending write (deterministic fsyncgate).
    pub fn failed_sync_drops_all(&self, on: bool) {
        lock(&self.state).failed_sync_drops_all = on;
    }

    /// Plants a lying disk: `sync_data` succeeds and makes nothing durable
    /// (to prove the crash checker notices).
    pub fn lie_on_sync(&self, on: bool) {
        lock(&self.state).lie_on_sync = on;
    }

    /// Seeds the generator used for fsyncgate decisions.
    pub fn seed(&self, seed: u64) {
        lock(&self.state).rng = Some(Rng::new(seed));
    }

    /// Arms a crash that replaces the `n`-th mutating operation from now
    /// (1: the next one); the crash image is drawn from `seed`.
    pub fn crash_after(&self, n: u64, mode: CrashMode, seed: u64) {
        assert!(n >= 1);
        let mut st = lock(&self.state);
        let at = st.mutations + n;
        st.crash_at = Some((at, mode, seed));
    }

    /// Crashes now (as if the next mutating operation had been the crash point).
    /// A disk already halted by a crash is left as it is (the first crash's
    /// report stands).
    pub fn crash_now(&self, mode: CrashMode, seed: u64) {
        let mut st = lock(&self.state);
        if !st.halted {
            st.crash(mode, seed, None);
        }
    }

    /// Disarms a crash not yet fired.
    pub fn disarm(&self) {
        lock(&self.state).crash_at = None;
    }

    /// Whether a crash fired and the disk waits for [`SimFs::reboot`].
    pub fn halted(&self) -> bool {
        lock(&self.state).halted
    }

    /// Crashes so far.
    pub fn crashes(&self) -> u64 {
        lock(&self.state).crash_count
    }

    /// What the last crash did.
    pub fn last_crash(&self) -> Option<CrashReport> {
        lock(&self.state).last_crash.clone()
    }

    /// Brings the disk back after a crash: the crash image is what every read
    /// sees from now on, and it is all durable.
    pub fn reboot(&self) {
        let mut st = lock(&self.state);
        st.halted = false;
        st.crash_at = None;
    }

    /// Mutating operations so far.
    pub fn mutations(&self) -> u64 {
        lock(&self.state).mutations
    }

    /// How many operations of kind `op` were performed (failed ones included).
    pub fn count(&self, op: Op) -> u64 {
        lock(&self.state).counts.get(&op).copied().unwrap_or(0)
    }

    /// Arms a fault. Counting starts now.
    pub fn fail(&self, plan: FaultPlan) {
        assert!(plan.nth >= 1);
        let mut st = lock(&self.state);
        st.fault = Some(plan);
        st.fault_seen = 0;
    }

    /// Disarms faults: the disk is healthy again.
    pub fn heal(&self) {
        lock(&self.state).fault = None;
    }

    /// The faults that fired so far.
    pub fn fired(&self) -> Vec<Fired> {
        lock(&self.state).fired.clone()
    }

    /// Operations that counted towards the armed fault plan so far.
    pub fn fault_ops_seen(&self) -> u64 {
        lock(&self.state).fault_seen
    }

    /// The visible bytes of a file (what a read returns now).
    pub fn read(&self, path: &Path) -> Option<Vec<u8>> {
        let st = lock(&self.state);
        match st.names.get(path)? {
            Node::File(ino) => Some(st.inodes[ino].visible.clone()),
            Node::Dir => None,
        }
    }

    /// The durable bytes of a file reachable by a durable name.
    pub fn durable(&self, path: &Path) -> Option<Vec<u8>> {
        let st = lock(&self.state);
        match st.durable_names.get(path)? {
            Node::File(ino) => Some(st.inodes[ino].durable.clone()),
            Node::Dir => None,
        }
    }

    /// Replaces a file's bytes (visible and durable), creating it durably.
    pub fn install(&self, path: &Path, bytes: &[u8]) {
        let mut st = lock(&self.state);
        let ino = match st.names.get(path) {
            Some(Node::File(i)) => *i,
            _ => {
                let i = st.next_ino;
                st.next_ino += 1;
                st.inodes.insert(i, Inode::default());
                i
            }
        };
        st.names.insert(path.to_path_buf(), Node::File(ino));
        st.durable_names.insert(path.to_path_buf(), Node::File(ino));
        let node = st.inodes.get_mut(&ino).expect("inode");
        node.visible = bytes.to_vec();
        node.durable = bytes.to_vec();
        node.pending.clear();
    }

    /// The names of every file (visible), sorted.
    pub fn files(&self) -> Vec<PathBuf> {
        let st = lock(&self.state);
        st.names
            .iter()
            .filter(|(_, n)| matches!(n, Node::File(_)))
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// Writes that began past the end of their file, leaving a hole of
    /// zeros: cairn never does that (it would read back as damage).
    pub fn writes_past_end(&self) -> u64 {
        lock(&self.state).writes_past_end
    }

    /// Whether a file has data or names not yet durable.
    pub fn has_pending(&self) -> bool {
        let st = lock(&self.state);
        !st.dir_pending.is_empty() || st.inodes.values().any(|i| !i.pending.is_empty())
    }
}

impl State {
    /// Counts an operation; crashes or fails it as armed. `mutating`
    /// operations advance the crash countdown.
    fn enter(&mut self, op: Op, path: &Path, mutating: bool) -> io::Result<Option<FaultKind>> {
        if self.halted {
            return Err(crashed_error());
        }
        *self.counts.entry(op).or_insert(0) += 1;
        if mutating {
            self.mutations += 1;
            if let Some((at, mode, seed)) = self.crash_at
                && self.mutations >= at
            {
                self.crash(mode, seed, Some((op, path.to_path_buf())));
                return Err(crashed_error());
            }
        }
        let Some(plan) = &self.fault else {
            return Ok(None);
        };
        if !plan.ops.contains(&op) {
            return Ok(None);
        }
        if let Some(sfx) = &plan.suffix
            && !path.to_string_lossy().ends_with(sfx.as_str())
        {
            return Ok(None);
        }
        self.fault_seen += 1;
        let (nth, kind, sticky) = (plan.nth, plan.kind, plan.sticky);
        if self.fault_seen == nth || (sticky && self.fault_seen > nth) {
            if !sticky {
                self.fault = None;
            }
            self.fired.push(Fired {
                op,
                path: path.to_path_buf(),
                kind,
            });
            return Ok(Some(kind));
        }
        Ok(None)
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn crash(&mut self, mode: CrashMode, seed: u64, at: Option<(Op, PathBuf)>) {
        let mut rng = Rng::new(seed);
        let mut report = CrashReport {
            at,
            ..CrashReport::default()
        };
        for (p, n) in &self.names {
            if let Node::File(ino) = n {
                report
                    .visible
                    .insert(p.clone(), self.inodes[ino].visible.clone());
            }
        }
        let sectors = mode == CrashMode::PowerLoss && rng.chance(1, 3);
        let size_only = mode == CrashMode::PowerLoss && rng.chance(1, 8);
        let clock = self.tick();
        for inode in self.inodes.values_mut() {
            if inode.pending.is_empty() {
                // Clean pages need not be on disk (after a failed sync).
                if inode.visible != inode.durable {
                    inode.visible = inode.durable.clone();
                    inode.mtime = clock;
                }
                continue;
            }
            let mut img = inode.durable.clone();
            let mut lost_before = false;
            for p in &inode.pending {
                match p {
                    Pending::SetLen(n) => {
                        let keep = match mode {
                            CrashMode::KeepAll => true,
                            CrashMode::LoseAll => false,
                            CrashMode::PowerLoss => rng.chance(1, 2),
                        };
                        if keep {
                            img.resize(*n as usize, 0);
                        }
                    }
                    Pending::Write { off, bytes } => {
                        report.writes += 1;
                        // Split into pieces (sectors) or keep whole.
                        let mut pieces: Vec<(usize, usize)> = Vec::new();
                        if sectors {
                            let mut a = 0usize;
                            while a < bytes.len() {
                                let abs = *off as usize + a;
                                let b = ((abs / 512 + 1) * 512 - *off as usize).min(bytes.len());
                                pieces.push((a, b));
                                a = b;
                            }
                        } else {
                            pieces.push((0, bytes.len()));
                        }
                        for (a, b) in pieces {
                            let choice = match mode {
                                CrashMode::KeepAll => 1,
                                CrashMode::LoseAll => 0,
                                CrashMode::PowerLoss => rng.below(3),
                            };
                            let end = match choice {
                                0 => {
                                    report.lost += 1;
                                    lost_before = true;
                                    continue;
                                }
                                1 => {
                                    report.kept += 1;
                                    b
                                }
                                _ => {
                                    report.torn += 1;
                                    lost_before = true;
                                    a + rng.below((b - a) as u64) as usize
                                }
                            };
                            if lost_before && choice == 1 {
                                report.reordered = true;
                            }
                            let start = *off as usize + a;
                            let stop = *off as usize + end;
                            if img.len() < stop {
                                img.resize(stop, 0);
                            }
                            img[start..stop].copy_from_slice(&bytes[a..end]);
                        }
                    }
                }
            }
            if size_only && img.len() < inode.visible.len() {
                img.resize(inode.visible.len(), 0);
            }
            if img != inode.visible {
                inode.mtime = clock;
            }
            inode.visible = img.clone();
            inode.durable = img;
            inode.pending.clear();
        }
        // Directory entries.
        let mut names = self.durable_names.clone();
        for op in &self.dir_pending {
            report.dir_ops += 1;
            let keep = match mode {
                CrashMode::KeepAll => true,
                CrashMode::LoseAll => false,
                CrashMode::PowerLoss => rng.chance(1, 2),
            };
            if keep {
                op.apply(&mut names);
            } else {
                report.dir_lost += 1;
            }
        }
        // A name whose directory did not survive is unreachable.
        let dirs: BTreeSet<PathBuf> = names
            .iter()
            .filter(|(_, n)| **n == Node::Dir)
            .map(|(p, _)| p.clone())
            .collect();
        names.retain(|p, _| p.ancestors().skip(1).all(|a| dirs.contains(a)));
        let live: BTreeSet<u64> = names
            .values()
            .filter_map(|n| {
                if let Node::File(i) = n {
                    Some(*i)
                } else {
                    None
                }
            })
            .collect();
        self.inodes.retain(|i, _| live.contains(i));
        self.names = names.clone();
        self.durable_names = names;
        self.dir_pending.clear();
        self.locks.clear();
        self.generation += 1;
        self.halted = true;
        self.crash_at = None;
        self.crash_count += 1;
        self.last_crash = Some(report);
    }

    fn parent_is_dir(&self, path: &Path) -> bool {
        path.parent()
            .is_some_and(|p| self.names.get(p) == Some(&Node::Dir))
    }

    /// fsyncgate: some pending data reaches the disk, the rest is dropped,
    /// and the pages are clean (the visible image keeps showing all of it).
    fn failed_sync(&mut self, ino: u64) {
        let mut rng = self.rng.take().unwrap_or_else(|| Rng::new(7));
        let drop_all = self.failed_sync_drops_all;
        if let Some(inode) = self.inodes.get_mut(&ino) {
            let mut img = inode.durable.clone();
            for p in &inode.pending {
                match p {
                    Pending::SetLen(n) => {
                        if rng.chance(1, 2) {
                            img.resize(*n as usize, 0);
                        }
                    }
                    Pending::Write { .. } if drop_all => {}
                    Pending::Write { off, bytes } => {
                        let end = match rng.below(3) {
                            0 => continue,
                            1 => bytes.len(),
                            _ => rng.below(bytes.len().max(1) as u64) as usize,
                        };
                        let start = *off as usize;
                        if img.len() < start + end {
                            img.resize(start + end, 0);
                        }
                        img[start..start + end].copy_from_slice(&bytes[..end]);
                    }
                }
            }
            inode.durable = img;
            inode.pending.clear();
        }
        self.rng = Some(rng);
    }
}

#[derive(Debug)]
struct SimFile {
    state: Arc<Mutex<State>>,
    path: PathBuf,
    ino: u64,
    handle: u64,
    generation: u64,
    writable: bool,
}

impl SimFile {
    fn live(&self, st: &mut MutexGuard<'_, State>) -> io::Result<()> {
        if st.generation != self.generation || st.halted {
            return Err(crashed_error());
        }
        if !st.inodes.contains_key(&self.ino) {
            return Err(err(116)); // ESTALE
        }
        Ok(())
    }
}

impl Drop for SimFile {
    fn drop(&mut self) {
        let mut st = lock(&self.state);
        if st.locks.get(&self.ino) == Some(&self.handle) {
            st.locks.remove(&self.ino);
        }
    }
}

impl VfsFile for SimFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut st = lock(&self.state);
        self.live(&mut st)?;
        if let Some(k) = st.enter(Op::Read, &self.path, false)? {
            return Err(err(k.errno()));
        }
        let data = &st.inodes[&self.ino].visible;
        let off = usize::try_from(offset).unwrap_or(usize::MAX);
        if off >= data.len() {
            return Ok(0);
        }
        let n = buf.len().min(data.len() - off);
        buf[..n].copy_from_slice(&data[off..off + n]);
        Ok(n)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut st = lock(&self.state);
        self.live(&mut st)?;
        if !self.writable {
            return Err(err(9)); // EBADF
        }
        let fault = st.enter(Op::Write, &self.path, true)?;
        let len = match fault {
            None => buf.len(),
            Some(FaultKind::ShortWrite) => {
                let mut rng = st.rng.take().unwrap_or_else(|| Rng::new(3));
                let n = rng.below(buf.len().max(1) as u64) as usize;
                st.rng = Some(rng);
                n
            }
            Some(_) => 0,
        };
        if len > 0 {
            let t = st.tick();
            let inode = st.inodes.get_mut(&self.ino).expect("inode");
            let past_end = offset as usize > inode.visible.len();
            let start = offset as usize;
            if inode.visible.len() < start + len {
                inode.visible.resize(start + len, 0);
            }
            inode.visible[start..start + len].copy_from_slice(&buf[..len]);
            inode.pending.push(Pending::Write {
                off: offset,
                bytes: buf[..len].to_vec(),
            });
            inode.mtime = t;
            if past_end {
                st.writes_past_end += 1;
            }
        }
        match fault {
            None => Ok(()),
            Some(k) => Err(err(k.errno())),
        }
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut st = lock(&self.state);
        self.live(&mut st)?;
        if let Some(k) = st.enter(Op::Sync, &self.path, true)? {
            st.failed_sync(self.ino);
            return Err(err(k.errno()));
        }
        if st.lie_on_sync {
            return Ok(());
        }
        let inode = st.inodes.get_mut(&self.ino).expect("inode");
        // Only dirty data is written back: pages a failed sync dropped stay
        // missing on disk although reads still return them.
        let pending = std::mem::take(&mut inode.pending);
        apply_all(&mut inode.durable, &pending);
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        let mut st = lock(&self.state);
        self.live(&mut st)?;
        st.enter(Op::Inspect, &self.path, false)?;
        Ok(st.inodes[&self.ino].visible.len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut st = lock(&self.state);
        self.live(&mut st)?;
        if !self.writable {
            return Err(err(22)); // EINVAL, as ftruncate on a read-only fd
        }
        if let Some(k) = st.enter(Op::SetLen, &self.path, true)? {
            return Err(err(k.errno()));
        }
        let t = st.tick();
        let inode = st.inodes.get_mut(&self.ino).expect("inode");
        inode.visible.resize(len as usize, 0);
        inode.pending.push(Pending::SetLen(len));
        inode.mtime = t;
        Ok(())
    }

    fn try_lock(&self) -> io::Result<bool> {
        let mut st = lock(&self.state);
        self.live(&mut st)?;
        st.enter(Op::Inspect, &self.path, false)?;
        match st.locks.get(&self.ino) {
            Some(h) if *h != self.handle => Ok(false),
            _ => {
                st.locks.insert(self.ino, self.handle);
                Ok(true)
            }
        }
    }
}

impl Vfs for SimFs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Arc<dyn VfsFile>> {
        let mut st = lock(&self.state);
        let exists = st.names.get(path).copied();
        let creates = matches!(mode, OpenMode::CreateNew)
            || (matches!(mode, OpenMode::CreateOrOpen) && exists.is_none());
        if let Some(k) = st.enter(Op::Open, path, creates)? {
            return Err(err(k.errno()));
        }
        let ino = match (mode, exists) {
            (_, Some(Node::Dir)) => return Err(err(21)), // EISDIR
            (OpenMode::CreateNew, Some(_)) => {
                return Err(io::Error::from(io::ErrorKind::AlreadyExists));
            }
            (OpenMode::Read | OpenMode::ReadWrite, None) => {
                return Err(io::Error::from(io::ErrorKind::NotFound));
            }
            (_, Some(Node::File(i))) => i,
            (OpenMode::CreateNew | OpenMode::CreateOrOpen, None) => {
                if !st.parent_is_dir(path) {
                    return Err(io::Error::from(io::ErrorKind::NotFound));
                }
                let i = st.next_ino;
                st.next_ino += 1;
                let t = st.tick();
                st.inodes.insert(
                    i,
                    Inode {
                        mtime: t,
                        ..Inode::default()
                    },
                );
                st.names.insert(path.to_path_buf(), Node::File(i));
                st.dir_pending.push(DirOp::Create {
                    path: path.to_path_buf(),
                    node: Node::File(i),
                });
                i
            }
        };
        let handle = st.next_handle;
        st.next_handle += 1;
        Ok(Arc::new(SimFile {
            state: Arc::clone(&self.state),
            path: path.to_path_buf(),
            ino,
            handle,
            generation: st.generation,
            writable: mode != OpenMode::Read,
        }))
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut st = lock(&self.state);
        let missing: Vec<PathBuf> = path
            .ancestors()
            .filter(|a| !a.as_os_str().is_empty() && !st.names.contains_key(*a))
            .map(Path::to_path_buf)
            .collect();
        for a in path.ancestors() {
            if let Some(Node::File(_)) = st.names.get(a) {
                return Err(err(20)); // ENOTDIR
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        if let Some(k) = st.enter(Op::Mkdir, path, true)? {
            return Err(err(k.errno()));
        }
        for a in missing.into_iter().rev() {
            st.names.insert(a.clone(), Node::Dir);
            st.dir_pending.push(DirOp::Create {
                path: a,
                node: Node::Dir,
            });
        }
        Ok(())
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut st = lock(&self.state);
        if st.names.get(path) != Some(&Node::Dir) {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        }
        if let Some(k) = st.enter(Op::SyncDir, path, true)? {
            return Err(err(k.errno()));
        }
        let (now, later): (Vec<DirOp>, Vec<DirOp>) = std::mem::take(&mut st.dir_pending)
            .into_iter()
            .partition(|op| op.touches(path));
        let mut durable = std::mem::take(&mut st.durable_names);
        for op in &now {
            op.apply(&mut durable);
        }
        st.durable_names = durable;
        st.dir_pending = later;
        Ok(())
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let mut st = lock(&self.state);
        st.enter(Op::Inspect, path, false)?;
        if st.names.get(path) != Some(&Node::Dir) {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        }
        Ok(st
            .names
            .keys()
            .filter(|p| p.parent() == Some(path) && p.as_path() != path)
            .filter_map(|p| p.file_name().and_then(|n| n.to_str()).map(str::to_owned))
            .collect())
    }

    fn metadata(&self, path: &Path) -> io::Result<Metadata> {
        let mut st = lock(&self.state);
        st.enter(Op::Inspect, path, false)?;
        match st.names.get(path) {
            None => Err(io::Error::from(io::ErrorKind::NotFound)),
            Some(Node::Dir) => Ok(Metadata {
                len: 0,
                modified_ns: 0,
                is_file: false,
                is_symlink: false,
            }),
            Some(Node::File(i)) => {
                let inode = &st.inodes[i];
                Ok(Metadata {
                    len: inode.visible.len() as u64,
                    modified_ns: u128::from(inode.mtime),
                    is_file: true,
                    is_symlink: false,
                })
            }
        }
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = lock(&self.state);
        if let Some(k) = st.enter(Op::Rename, to, true)? {
            return Err(err(k.errno()));
        }
        let Some(node) = st.names.get(from).copied() else {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        };
        if !st.parent_is_dir(to) {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        }
        let op = DirOp::Rename {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
            node,
        };
        op.apply(&mut st.names);
        st.dir_pending.push(op);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut st = lock(&self.state);
        if let Some(k) = st.enter(Op::Remove, path, true)? {
            return Err(err(k.errno()));
        }
        match st.names.get(path) {
            Some(Node::File(_)) => {}
            Some(Node::Dir) => return Err(err(21)),
            None => return Err(io::Error::from(io::ErrorKind::NotFound)),
        }
        let op = DirOp::Remove {
            path: path.to_path_buf(),
        };
        op.apply(&mut st.names);
        st.dir_pending.push(op);
        Ok(())
    }
}
