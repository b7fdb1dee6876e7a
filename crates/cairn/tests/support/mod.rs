//! Shared helpers for cairn's integration tests: sample sessions on disk,
//! line surgery (find lines, re-seal, change a `seq`), and two hooks for
//! [`cairn::testkit::vfs::HookVfs`] (the seam under [`cairn::FileBackend`]
//! whose `Faults` hook fails the N-th write or sync of a session log):
//!
//! - [`Recorder`] logs every write and sync of a session log, in one global
//!   order shared with the acknowledgements the test records;
//! - [`RacingWriter`] appends to a session file right after a reader has
//!   measured it, as a concurrent writer would.
//!
//! Both only interfere with session logs (`*.jsonl`); lock files, the
//! catalog and saved torn tails go straight to the real file system.

// Each test binary that includes this module uses its own subset of it;
// and this is test code, which clippy's `allow-expect-in-tests` does not reach.
#![allow(dead_code, clippy::expect_used)]

/// The simulated page-cache file system (crash and fault injection).
pub mod simfs;
/// The random workload and acknowledgement model of the crash and fault harnesses.
pub mod workload;

use std::fs;
use std::io;
use std::ops::Range;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use cairn::frame::{self, TRAILER_LEN};
use cairn::testkit::vfs::{Hook, HookVfs, Hooked, lock};
use cairn::vfs::{OpenMode, Vfs};
use cairn::{AppStateChange, EntryBody, FileBackend, Message, Record, Role, SessionId, Store};
use serde_json::json;

// ---------------------------------------------------------------------------
// Sample sessions and files
// ---------------------------------------------------------------------------

/// The directory holding the session files of a store home.
pub fn sessions_dir(home: &Path) -> PathBuf {
    home.join("sessions")
}

/// The path of a session's log file in a store home.
pub fn session_path(home: &Path, id: &SessionId) -> PathBuf {
    FileBackend::new(sessions_dir(home)).path(id)
}

/// A store of session files under `home` going through `vfs`.
pub fn store_with_vfs(home: &Path, vfs: Arc<dyn Vfs>) -> Store {
    Store::with_backend(Arc::new(FileBackend::with_vfs(sessions_dir(home), vfs)))
}

/// A session written by cairn itself, closed, with its bytes.
pub struct Sample {
    /// The store home (owns the temporary directory).
    pub home: tempfile::TempDir,
    /// The session.
    pub id: SessionId,
    /// Its log file.
    pub path: PathBuf,
    /// The log file's bytes.
    pub bytes: Vec<u8>,
}

impl Sample {
    /// A session of a header and four entries: two messages, an app-state
    /// patch and a third message (the last line is a message).
    pub fn new() -> Sample {
        let home = tempfile::tempdir().expect("tempdir");
        let store = Store::open_dir(home.path());
        let session = store.create(cairn::NewSession::default()).expect("create");
        session
            .append(EntryBody::Message(Message::text(
                Role::User,
                "list the files",
            )))
            .expect("append");
        session
            .append(EntryBody::Message(Message::text(
                Role::Assistant,
                "Here they are: a, b, c.",
            )))
            .expect("append");
        session
            .append(EntryBody::AppState(AppStateChange::Patch(
                json!({"todo": ["b"]}),
            )))
            .expect("append");
        session
            .append(EntryBody::Message(Message::text(
                Role::User,
                "now remove b",
            )))
            .expect("append");
        let id = session.id().clone();
        drop(session);
        let path = session_path(home.path(), &id);
        let bytes = fs::read(&path).expect("read sample");
        Sample {
            home,
            id,
            path,
            bytes,
        }
    }

    /// A store over the sample's home on the real file system.
    pub fn store(&self) -> Store {
        Store::open_dir(self.home.path())
    }

    /// The decoded records of the sample.
    pub fn records(&self) -> Vec<Record> {
        decode_all(&self.bytes)
    }

    /// The byte ranges of the sample's lines.
    pub fn lines(&self) -> Vec<Range<usize>> {
        line_spans(&self.bytes)
    }

    /// A fresh store home holding this session with its file replaced by `bytes`.
    pub fn copy_with(&self, bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
        let home = tempfile::tempdir().expect("tempdir");
        let path = install(home.path(), &self.id, bytes);
        (home, path)
    }
}

/// Writes `bytes` as the log of session `id` in store home `home` (creating
/// the sessions directory, mode 0700, and the file, mode 0600).
pub fn install(home: &Path, id: &SessionId, bytes: &[u8]) -> PathBuf {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(sessions_dir(home))
        .expect("mkdir");
    let path = session_path(home, id);
    let mut o = fs::OpenOptions::new();
    o.write(true).create(true).truncate(true).mode(0o600);
    let mut f = o.open(&path).expect("open for install");
    io::Write::write_all(&mut f, bytes).expect("install");
    path
}

/// The byte ranges of the complete lines (newline included) in `bytes`; a
/// trailing partial line is not included.
pub fn line_spans(bytes: &[u8]) -> Vec<Range<usize>> {
    let mut spans = Vec::new();
    let mut start = 0;
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'\n' {
            spans.push(start..i + 1);
            start = i + 1;
        }
    }
    spans
}

/// Decodes every line of a well-formed log.
pub fn decode_all(bytes: &[u8]) -> Vec<Record> {
    line_spans(bytes)
        .into_iter()
        .map(|r| {
            let (seq, ts, body) = frame::decode_line(&bytes[r]).expect("sample line decodes");
            Record { seq, ts, body }
        })
        .collect()
}

/// The covered bytes of a sealed line: everything before the trailer.
pub fn covered(line: &[u8]) -> &[u8] {
    let body = line.strip_suffix(b"\n").expect("a complete line");
    &body[..body.len() - TRAILER_LEN]
}

/// Seals covered bytes (from `{` to the end of the `data` value) into a line.
pub fn sealed(covered: &[u8]) -> Vec<u8> {
    let mut line = covered.to_vec();
    frame::seal(&mut line);
    line
}

/// `line` with its `seq` replaced, re-sealed so its checksum is valid.
pub fn with_seq(line: &[u8], seq: u64) -> Vec<u8> {
    let c = covered(line);
    let rest_at = c
        .iter()
        .position(|b| *b == b',')
        .expect("a field after seq");
    assert!(c.starts_with(b"{\"seq\":"), "a line starts with its seq");
    let mut out = format!("{{\"seq\":{seq}").into_bytes();
    out.extend_from_slice(&c[rest_at..]);
    sealed(&out)
}

/// `line` with `from` replaced by `to` (exactly once), re-sealed.
pub fn replaced(line: &[u8], from: &str, to: &str) -> Vec<u8> {
    let text = std::str::from_utf8(covered(line)).expect("utf-8 line");
    assert_eq!(
        text.matches(from).count(),
        1,
        "{from:?} occurs once in {text}"
    );
    sealed(text.replacen(from, to, 1).as_bytes())
}

/// The seq written at the start of a line or write buffer, if it holds one.
pub fn leading_seq(buf: &[u8]) -> Option<u64> {
    let rest = buf.strip_prefix(b"{\"seq\":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

/// The saved torn tails (`*.torn-*`) in a directory, sorted.
pub fn torn_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = match fs::read_dir(dir) {
        Ok(rd) => rd
            .map(|e| e.expect("dir entry").path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.contains(".torn-"))
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    out.sort();
    out
}

// ---------------------------------------------------------------------------
// Recorder
// ---------------------------------------------------------------------------

/// One event on a session log, or an acknowledgement recorded by the test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A write returned; it held records `seq..=last` and ended at byte
    /// `end`.
    Write {
        /// The first record in the write.
        seq: u64,
        /// The last record in the write (a group commit writes a batch).
        last: u64,
        /// The file offset just past the written bytes.
        end: u64,
    },
    /// A sync is about to start; the file was `len` bytes long.
    SyncStart {
        /// Pairs the start with its end.
        sync: u64,
        /// The file length when the sync started.
        len: u64,
    },
    /// A sync returned successfully.
    SyncEnd {
        /// Pairs the end with its start.
        sync: u64,
    },
    /// The test saw an append of record `seq` return.
    Ack {
        /// The acknowledged record.
        seq: u64,
    },
}

/// What the next sync waits for ([`Recorder::hold_next_sync_until`]).
type Until = Box<dyn Fn() -> bool + Send>;

#[derive(Default)]
struct Log {
    events: Vec<Event>,
    next_sync: u64,
    /// The next sync waits until this says so.
    hold_sync_until: Option<Until>,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("events", &self.events)
            .field("next_sync", &self.next_sync)
            .field("holding", &self.hold_sync_until.is_some())
            .finish()
    }
}

/// A hook logging the writes and syncs of session logs. Events are appended under one
/// mutex, so their positions are a single global order consistent with real
/// time: if one event was logged before another began, it comes first.
#[derive(Debug, Default)]
pub struct Recorder {
    log: Mutex<Log>,
    changed: Condvar,
}

impl Recorder {
    /// Records that an append of record `seq` returned to its caller.
    pub fn ack(&self, seq: u64) {
        self.push(Event::Ack { seq });
    }

    /// Every event so far, in order.
    pub fn events(&self) -> Vec<Event> {
        lock(&self.log).events.clone()
    }

    /// Forgets every event so far.
    pub fn clear(&self) {
        lock(&self.log).events.clear();
    }

    /// Makes the next sync wait, before it starts, until `ready` says so
    /// (asked again each millisecond, and whenever an event is logged). A
    /// handshake, not a delay: it forces other writers to append while a
    /// sync is pending (a group append's line may be written only by the
    /// next sync, so what they did is best seen in the session, not here).
    pub fn hold_next_sync_until(&self, ready: impl Fn() -> bool + Send + 'static) {
        lock(&self.log).hold_sync_until = Some(Box::new(ready));
    }

    fn push(&self, e: Event) {
        lock(&self.log).events.push(e);
        self.changed.notify_all();
    }
}

/// The real file system under a new [`Recorder`], and the recorder.
pub fn recording_vfs() -> (Arc<HookVfs<Recorder>>, Arc<Recorder>) {
    let recorder = Arc::new(Recorder::default());
    (HookVfs::sharing(Arc::clone(&recorder)), recorder)
}

impl Hook for Recorder {
    fn write_all_at(&self, file: Hooked<'_>, buf: &[u8], offset: u64) -> io::Result<()> {
        file.inner.write_all_at(buf, offset)?;
        let seq = leading_seq(buf).expect("writes to a session log start with a record");
        let lines = buf.iter().filter(|&&b| b == b'\n').count() as u64;
        self.push(Event::Write {
            seq,
            last: seq + lines.max(1) - 1,
            end: offset + buf.len() as u64,
        });
        Ok(())
    }
    fn sync_data(&self, file: Hooked<'_>) -> io::Result<()> {
        let sync = {
            let mut log = lock(&self.log);
            if let Some(ready) = log.hold_sync_until.take() {
                while !ready() {
                    log = self
                        .changed
                        .wait_timeout(log, std::time::Duration::from_millis(1))
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            }
            // Measured and logged under the lock: every write logged before
            // this point has returned, so this sync covers it.
            let len = file.inner.len()?;
            let sync = log.next_sync;
            log.next_sync += 1;
            log.events.push(Event::SyncStart { sync, len });
            sync
        };
        file.inner.sync_data()?;
        self.push(Event::SyncEnd { sync });
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// RacingWriter
// ---------------------------------------------------------------------------

/// A hook that, the first time a reader measures a session log opened
/// read-only, appends `extra` to the file right after the measurement: what
/// a writer appending at that moment does.
#[derive(Debug)]
pub struct RacingWriter {
    /// Bytes still to append at the first measurement.
    extra: Mutex<Option<Vec<u8>>>,
}

impl RacingWriter {
    /// The real file system, appending `extra` after the first read-only
    /// measurement of a session log.
    pub fn vfs(extra: Vec<u8>) -> Arc<HookVfs<RacingWriter>> {
        HookVfs::new(RacingWriter {
            extra: Mutex::new(Some(extra)),
        })
    }
}

impl Hook for RacingWriter {
    fn hooks_file(&self, path: &Path, mode: OpenMode) -> bool {
        cairn::testkit::vfs::is_session_log(path) && mode == OpenMode::Read
    }
    fn len(&self, file: Hooked<'_>) -> io::Result<u64> {
        let len = file.inner.len()?;
        if let Some(extra) = lock(&self.extra).take() {
            let mut f = fs::OpenOptions::new().append(true).open(file.path)?;
            io::Write::write_all(&mut f, &extra)?;
        }
        Ok(len)
    }
}
