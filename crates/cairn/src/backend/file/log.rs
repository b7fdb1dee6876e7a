//! An open session file ([`Log`]): the line index (the lines a persisted
//! index covers read from its length blocks, the offset of every line after
//! them kept), reads by sequence number, appends and syncs, and the
//! poisoning that refuses writes after a failed write or sync.
//!
//! The lines a group append defers are kept in memory (and read from there)
//! and written with one `pwrite` by the next sync, the next plain append, or
//! once they pass 1 MiB — never by a poisoned log, so the file has no gap.
//! Syncs run one at a time: a sync beside a failed one would be told success
//! by the kernel. A writer's log also saves the persisted index.

use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use super::super::Log;
use super::lock::{remember_unsynced, write_lock_note};
use super::scan::read_exact_at;
use crate::error::{AppendError, Damage, ReadError};
use crate::frame;
use crate::index::LineTable;
use crate::source::{LineAt, LineReader};
use crate::vfs::{Vfs, VfsFile, write_atomic};

/// An open session file.
#[derive(Debug)]
pub(super) struct FileLog {
    location: String,
    file: Arc<dyn VfsFile>,
    /// Reads lines by position (shared with the contexts that keep
    /// messages to read later; holds no lock).
    lines: Arc<Lines>,
    lock: Option<Arc<dyn VfsFile>>,
    /// Where every line is; the end of the last is `end`.
    index: RwLock<Index>,
    /// Set by the first failed write or sync; refuses writes afterwards.
    poisoned: Mutex<Option<String>>,
    /// Held across a sync, from the poison check to the poisoning: one
    /// sync runs at a time (see [`Log::sync`]).
    syncing: Mutex<()>,
    /// The end of what the last successful sync covered (at open: the
    /// whole file, whose dirty pages, if any, are still queued).
    synced_end: std::sync::atomic::AtomicU64,
    /// Where a writer saves the session's persisted index.
    index_file: Option<(Arc<dyn Vfs>, PathBuf)>,
}

/// The session file read by position: [`LineReader`].
#[derive(Debug)]
struct Lines {
    location: String,
    file: Arc<dyn VfsFile>,
}

impl LineReader for Lines {
    fn location(&self) -> &str {
        &self.location
    }

    fn read_at(&self, seq: u64, offset: u64, len: u64) -> Result<Vec<u8>, ReadError> {
        let len = usize::try_from(len).map_err(|_| ReadError::NoSuchRecord(seq))?;
        let mut buf = vec![0u8; len];
        read_exact_at(&*self.file, &mut buf, offset).map_err(|source| ReadError::Io {
            location: self.location.clone(),
            source,
        })?;
        frame::check(&buf).map_err(|d| {
            ReadError::Damaged(Box::new(Damage {
                location: self.location.clone(),
                line: seq + 1,
                offset,
                problem: format!(
                    "{d} (the line was checked when it was written, and again when an open \
                     parsed it; it is damaged on disk or was changed since: `cairn fsck` checks \
                     every line)"
                ),
            }))
        })?;
        Ok(buf)
    }
}

#[derive(Debug)]
struct Index {
    /// The first lines, as a persisted index gives them.
    base: Option<Arc<LineTable>>,
    /// Offsets of the lines after `base`.
    offsets: Vec<u64>,
    end: u64,
    /// Lines taken by [`Log::defer`] and not yet written: the last
    /// `pending.len()` bytes before `end`.
    pending: Vec<u8>,
}

impl Index {
    fn base_records(&self) -> u64 {
        self.base.as_ref().map_or(0, |b| b.records())
    }

    fn len(&self) -> u64 {
        self.base_records() + self.offsets.len() as u64
    }

    /// The end of what has been written to the file.
    fn written_end(&self) -> u64 {
        self.end - self.pending.len() as u64
    }

    /// Notes `lines` at the end.
    fn push(&mut self, lines: &[Vec<u8>]) {
        for l in lines {
            self.offsets.push(self.end);
            self.end += l.len() as u64;
        }
    }

    /// Where line `seq` starts and ends; `Err` with why the persisted
    /// index cannot say (a damaged length block).
    fn span(&self, seq: u64) -> Option<Result<(u64, u64), String>> {
        let base = self.base_records();
        match &self.base {
            Some(b) if seq < base => Some(b.span(seq).map(|(at, len)| (at, at + len))),
            _ => {
                let i = usize::try_from(seq - base).ok()?;
                let start = *self.offsets.get(i)?;
                Some(Ok((
                    start,
                    self.offsets.get(i + 1).copied().unwrap_or(self.end),
                )))
            }
        }
    }
}

impl FileLog {
    pub(super) fn new(
        location: String,
        file: Arc<dyn VfsFile>,
        lock: Option<Arc<dyn VfsFile>>,
        base: Option<Arc<LineTable>>,
        offsets: Vec<u64>,
        end: u64,
    ) -> FileLog {
        FileLog {
            lines: Arc::new(Lines {
                location: location.clone(),
                file: Arc::clone(&file),
            }),
            location,
            file,
            lock,
            index: RwLock::new(Index {
                base,
                offsets,
                end,
                pending: Vec::new(),
            }),
            poisoned: Mutex::new(None),
            syncing: Mutex::new(()),
            synced_end: std::sync::atomic::AtomicU64::new(end),
            index_file: None,
        }
    }

    /// The log, saving the persisted index at `path` (writers only).
    pub(super) fn with_index(mut self, vfs: Arc<dyn Vfs>, path: PathBuf) -> FileLog {
        if self.lock.is_some() {
            self.index_file = Some((vfs, path));
        }
        self
    }

    /// Where line `seq` begins and ends: `NoSuchRecord` past the end,
    /// `Damaged` when the persisted index's length block for it is damaged.
    fn span(&self, seq: u64) -> Result<(u64, u64), ReadError> {
        let span = self
            .index
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .span(seq)
            .ok_or(ReadError::NoSuchRecord(seq))?;
        span.map_err(|why| {
            ReadError::Damaged(Box::new(Damage {
                location: format!("{} (its persisted index)", self.location),
                line: seq + 1,
                offset: 0,
                problem: format!("the index {why}"),
            }))
        })
    }

    fn check_writable(&self) -> Result<(), AppendError> {
        if self.lock.is_none() {
            return Err(AppendError::ReadOnly {
                session: self.location.clone(),
            });
        }
        if let Some(cause) = self
            .poisoned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            return Err(AppendError::Poisoned {
                session: self.location.clone(),
                cause: cause.clone(),
            });
        }
        Ok(())
    }

    fn poison(&self, action: &'static str, source: io::Error) -> AppendError {
        let mut p = self.poisoned.lock().unwrap_or_else(PoisonError::into_inner);
        if p.is_none() {
            *p = Some(format!("{action} failed: {source}"));
            // Tell the next writer what may not have reached the disk: in
            // this process, and in the lock file for other processes.
            if let Some(lock) = &self.lock {
                let from = self.synced_end.load(std::sync::atomic::Ordering::Acquire);
                remember_unsynced(&self.location, from);
                if write_lock_note(&**lock, Some(from)).is_err() && action == "sync" {
                    // No marker for another process: a failed sync may have
                    // dropped the pages after `from`, so keep none of them
                    // (records not yet acknowledged as durable, which a power
                    // loss could take anyway). Nothing more can be done if
                    // this fails too: the in-process marker remains.
                    let _ = self.file.set_len(from);
                }
            }
        }
        AppendError::Io {
            action,
            location: self.location.clone(),
            source,
        }
    }
}

/// Deferred lines left when the handle goes (an append cut short: nobody
/// was acknowledged for them) are written as a `Buffered` append's would
/// be, unless the log failed.
impl Drop for FileLog {
    fn drop(&mut self) {
        let idx = self.index.get_mut().unwrap_or_else(PoisonError::into_inner);
        if !idx.pending.is_empty() && self.lock.is_some() {
            let at = idx.written_end();
            if self
                .poisoned
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .is_none()
            {
                let _ = self.file.write_all_at(&idx.pending, at);
            }
        }
    }
}

/// Deferred lines past this are written without waiting for a sync.
const PENDING_LIMIT: usize = 1 << 20;

impl FileLog {
    /// Writes the deferred lines, then `lines`, in one write at the end of
    /// what the file holds, and only then takes `lines` into the index.
    /// Under the index's write lock, so no other write lands past them first
    /// and nobody finds a gap. A poisoned log writes nothing more (a failed
    /// sync may have cut the file where the deferred lines would go); a
    /// failed write poisons it and leaves `lines` out of the index.
    fn write_with(&self, idx: &mut Index, lines: &[Vec<u8>]) -> Result<(), AppendError> {
        if idx.pending.is_empty() && lines.is_empty() {
            return Ok(());
        }
        self.check_writable()?;
        let (deferred, at) = (idx.pending.len(), idx.written_end());
        for l in lines {
            idx.pending.extend_from_slice(l);
        }
        if let Err(e) = self.file.write_all_at(&idx.pending, at) {
            idx.pending.truncate(deferred);
            return Err(self.poison("write", e));
        }
        idx.pending.clear();
        if idx.pending.capacity() > PENDING_LIMIT {
            idx.pending = Vec::new();
        }
        idx.push(lines);
        Ok(())
    }

    /// Line `start..end`, while it is deferred: its bytes from memory (a
    /// read never writes).
    fn deferred(&self, start: u64, end: u64) -> Option<Vec<u8>> {
        let idx = self.index.read().unwrap_or_else(PoisonError::into_inner);
        let written = idx.written_end();
        // Deferred lines start where the written ones end: a line is never
        // split between the two.
        let from = usize::try_from(start.checked_sub(written)?).ok()?;
        let to = usize::try_from(end - written).ok()?;
        idx.pending.get(from..to).map(<[u8]>::to_vec)
    }
}

impl Log for FileLog {
    fn location(&self) -> &str {
        &self.location
    }

    fn len(&self) -> u64 {
        self.index
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    fn read(&self, seq: u64) -> Result<Vec<u8>, ReadError> {
        let (start, end) = self.span(seq)?;
        if let Some(line) = self.deferred(start, end) {
            return Ok(line);
        }
        self.lines.read_at(seq, start, end - start)
    }

    fn append(&self, lines: &[Vec<u8>]) -> Result<(), AppendError> {
        self.check_writable()?;
        let mut idx = self.index.write().unwrap_or_else(PoisonError::into_inner);
        if !idx.pending.is_empty() {
            // After the deferred lines, in the same write.
            return self.write_with(&mut idx, lines);
        }
        // One write call for the whole batch (a single line needs no copy).
        let joined;
        let buf: &[u8] = match lines {
            [one] => one,
            many => {
                joined = many.concat();
                &joined
            }
        };
        self.file
            .write_all_at(buf, idx.end)
            .map_err(|e| self.poison("write", e))?;
        idx.push(lines);
        Ok(())
    }

    fn defer(&self, lines: &[Vec<u8>]) -> Result<(), AppendError> {
        self.check_writable()?;
        let mut idx = self.index.write().unwrap_or_else(PoisonError::into_inner);
        let size: usize = lines.iter().map(Vec::len).sum();
        if idx.pending.len() + size >= PENDING_LIMIT {
            return self.write_with(&mut idx, lines);
        }
        for l in lines {
            idx.pending.extend_from_slice(l);
        }
        idx.push(lines);
        Ok(())
    }

    /// One sync at a time (a `Sync` append and a group-commit leader may
    /// both sync): Linux reports a write-back error to one `fdatasync` of
    /// an open file, so a sync running beside a failed one could return
    /// `Ok` for pages the kernel dropped. Held from the poison check to
    /// the poisoning, the lock makes a sync that follows a failed one
    /// refuse instead.
    fn sync(&self) -> Result<(), AppendError> {
        let _one = self.syncing.lock().unwrap_or_else(PoisonError::into_inner);
        self.check_writable()?;
        let covers = {
            let mut idx = self.index.write().unwrap_or_else(PoisonError::into_inner);
            self.write_with(&mut idx, &[])?;
            idx.end
        };
        self.file.sync_data().map_err(|e| self.poison("sync", e))?;
        self.synced_end
            .fetch_max(covers, std::sync::atomic::Ordering::AcqRel);
        Ok(())
    }

    fn is_writer(&self) -> bool {
        self.lock.is_some()
    }

    fn byte_len(&self) -> u64 {
        self.index
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .end
    }

    fn offset(&self, seq: u64) -> u64 {
        let idx = self.index.read().unwrap_or_else(PoisonError::into_inner);
        match idx.span(seq) {
            Some(Ok((at, _))) => at,
            Some(Err(_)) | None => 0,
        }
    }

    fn line_at(&self, seq: u64) -> Option<LineAt> {
        // A damaged length block: no place to keep; reading the record
        // (`read`) reports the damage.
        let (start, end) = self.span(seq).ok()?;
        // A deferred line has no place in the file yet: `read` gives it.
        if end
            > self
                .index
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .written_end()
        {
            return None;
        }
        Some(LineAt {
            reader: Arc::clone(&self.lines) as Arc<dyn LineReader>,
            offset: start,
            len: end - start,
        })
    }

    fn poisoned(&self) -> Option<String> {
        self.poisoned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn keeps_index(&self) -> bool {
        self.index_file.is_some()
    }

    fn fail_sync(&self, cause: &str) {
        let _ = self.poison("sync", io::Error::other(cause.to_owned()));
    }

    fn save_index(&self, bytes: &[u8]) {
        if let Some((vfs, path)) = &self.index_file {
            let _ = write_atomic(&**vfs, path, bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::atomic::Ordering;
    use std::sync::mpsc::{self, Receiver, Sender};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::FileLog;
    use crate::backend::Log;
    use crate::error::AppendError;
    use crate::vfs::VfsFile;

    /// A file whose first `sync_data` waits to be released and fails, as
    /// Linux's does once for a write-back error; every later one succeeds
    /// (the error was reported), telling `entered` it ran.
    #[derive(Debug)]
    struct FailsOnce {
        release: Mutex<Receiver<()>>,
        entered: Mutex<Sender<()>>,
        calls: Mutex<u32>,
    }

    impl VfsFile for FailsOnce {
        fn read_at(&self, _buf: &mut [u8], _offset: u64) -> io::Result<usize> {
            Ok(0)
        }
        fn write_all_at(&self, _buf: &[u8], _offset: u64) -> io::Result<()> {
            Ok(())
        }
        fn sync_data(&self) -> io::Result<()> {
            let first = {
                let mut calls = self.calls.lock().unwrap();
                *calls += 1;
                *calls == 1
            };
            if first {
                let _ = self.release.lock().unwrap().recv();
                Err(io::Error::other("write-back failed (EIO)"))
            } else {
                let _ = self.entered.lock().unwrap().send(());
                Ok(())
            }
        }
        fn len(&self) -> io::Result<u64> {
            Ok(0)
        }
        fn set_len(&self, _len: u64) -> io::Result<()> {
            Ok(())
        }
        fn try_lock(&self) -> io::Result<bool> {
            Ok(true)
        }
    }

    /// A file in memory that counts its writes; told to, it fails them,
    /// and its next sync waits for a signal and fails.
    #[derive(Debug, Default)]
    struct MemFile {
        bytes: Mutex<Vec<u8>>,
        writes: Mutex<u32>,
        fail_writes: std::sync::atomic::AtomicBool,
        /// The next sync waits for this, then fails.
        failing_sync: Mutex<Option<Receiver<()>>>,
        /// Syncs started.
        syncs: std::sync::atomic::AtomicU32,
    }

    impl VfsFile for MemFile {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
            let bytes = self.bytes.lock().unwrap();
            let from = usize::try_from(offset).unwrap().min(bytes.len());
            let n = buf.len().min(bytes.len() - from);
            buf[..n].copy_from_slice(&bytes[from..from + n]);
            Ok(n)
        }
        fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
            if self.fail_writes.load(Ordering::SeqCst) {
                return Err(io::Error::other("the disk is full (ENOSPC)"));
            }
            let mut bytes = self.bytes.lock().unwrap();
            let at = usize::try_from(offset).unwrap();
            if bytes.len() < at + buf.len() {
                bytes.resize(at + buf.len(), 0);
            }
            bytes[at..at + buf.len()].copy_from_slice(buf);
            *self.writes.lock().unwrap() += 1;
            Ok(())
        }
        fn sync_data(&self) -> io::Result<()> {
            self.syncs.fetch_add(1, Ordering::SeqCst);
            match self.failing_sync.lock().unwrap().take() {
                Some(release) => {
                    let _ = release.recv();
                    Err(io::Error::other("write-back failed (EIO)"))
                }
                None => Ok(()),
            }
        }
        fn len(&self) -> io::Result<u64> {
            Ok(self.bytes.lock().unwrap().len() as u64)
        }
        fn set_len(&self, len: u64) -> io::Result<()> {
            self.bytes
                .lock()
                .unwrap()
                .resize(usize::try_from(len).unwrap(), 0);
            Ok(())
        }
        fn try_lock(&self) -> io::Result<bool> {
            Ok(true)
        }
    }

    /// Line `seq` of the test's log: a framed user message.
    fn line(seq: u64) -> Vec<u8> {
        use crate::record::{Entry, EntryBody, Message, Role};
        let entry = Entry {
            id: crate::id::EntryId::parse(&format!("e{seq}")).unwrap(),
            parent: None,
            body: EntryBody::Message(Message::text(Role::User, "deferred")),
        };
        crate::frame::encode_entry(seq, "2026-12-01T00:00:00.000Z", &entry)
    }

    /// A log of one header-sized line over a [`MemFile`], and the file.
    fn mem_log() -> (FileLog, Arc<MemFile>) {
        mem_log_locked(Arc::new(MemFile::default()))
    }

    /// As [`mem_log`], with `lock` as the lock file.
    fn mem_log_locked(lock: Arc<MemFile>) -> (FileLog, Arc<MemFile>) {
        let file = Arc::new(MemFile::default());
        let first = line(0);
        file.write_all_at(&first, 0).unwrap();
        *file.writes.lock().unwrap() = 0;
        let log = FileLog::new(
            "mem.jsonl".into(),
            Arc::clone(&file) as Arc<dyn VfsFile>,
            Some(lock as Arc<dyn VfsFile>),
            None,
            vec![0],
            first.len() as u64,
        );
        (log, file)
    }

    fn expected(upto: u64) -> Vec<u8> {
        (0..upto).flat_map(line).collect()
    }

    #[test]
    fn deferred_lines_are_written_by_the_next_sync_in_one_write() {
        let (log, file) = mem_log();
        log.defer(&[line(1)]).unwrap();
        log.defer(&[line(2), line(3)]).unwrap();
        assert_eq!((log.len(), log.byte_len()), (4, expected(4).len() as u64));
        assert_eq!(*file.writes.lock().unwrap(), 0, "nothing written yet");
        assert_eq!(file.len().unwrap(), expected(1).len() as u64);
        log.sync().unwrap();
        assert_eq!(*file.writes.lock().unwrap(), 1, "one write for the batch");
        assert_eq!(*file.bytes.lock().unwrap(), expected(4));
    }

    #[test]
    fn a_plain_append_after_deferred_lines_writes_them_first_leaving_no_gap() {
        let (log, file) = mem_log();
        log.defer(&[line(1), line(2)]).unwrap();
        log.append(&[line(3)]).unwrap();
        assert_eq!(*file.bytes.lock().unwrap(), expected(4));
        assert_eq!(*file.writes.lock().unwrap(), 1);
        log.sync().unwrap();
        assert_eq!(*file.writes.lock().unwrap(), 1, "nothing left to write");
    }

    #[test]
    fn a_deferred_line_is_read_from_memory_and_has_no_place_in_the_file_yet() {
        let (log, file) = mem_log();
        log.defer(&[line(1), line(2)]).unwrap();
        assert_eq!(log.read(2).unwrap(), line(2));
        assert_eq!(log.read(0).unwrap(), line(0));
        assert!(log.line_at(1).is_none(), "nothing to read by position yet");
        assert_eq!(*file.writes.lock().unwrap(), 0, "a read writes nothing");
        log.sync().unwrap();
        let at = log
            .line_at(1)
            .expect("a place to read line 1, once written");
        assert_eq!(at.reader.read_at(1, at.offset, at.len).unwrap(), line(1));
        assert_eq!(log.read(2).unwrap(), line(2));
    }

    /// Regression (review of the deferred lines): a line deferred while a
    /// sync ran that then failed was written by a later read of it, past
    /// the end the failed sync cut the file back to — a hole of zeros
    /// before an intact, never acknowledged record.
    #[test]
    fn regression_a_poisoned_log_wrote_its_deferred_lines_past_the_cut_leaving_a_hole() {
        // The lock file cannot take the unsynced marker either, so the
        // failed sync cuts the file back to what was synced.
        let lock = Arc::new(MemFile::default());
        lock.fail_writes.store(true, Ordering::SeqCst);
        let (log, file) = mem_log_locked(lock);
        let (release, released) = mpsc::channel();
        *file.failing_sync.lock().unwrap() = Some(released);
        log.defer(&[line(1)]).unwrap();
        std::thread::scope(|scope| {
            let sync = scope.spawn(|| log.sync());
            while file.syncs.load(Ordering::SeqCst) == 0 {
                std::thread::yield_now();
            }
            // Deferred during the sync, which then fails.
            log.defer(&[line(2)]).unwrap();
            release.send(()).unwrap();
            assert!(sync.join().unwrap().is_err());
        });
        assert_eq!(
            *file.bytes.lock().unwrap(),
            expected(1),
            "cut to what was synced"
        );
        assert_eq!(
            log.read(2).unwrap(),
            line(2),
            "the handle's view still reads it"
        );
        assert!(matches!(
            log.append(&[line(3)]),
            Err(AppendError::Poisoned { .. })
        ));
        assert!(matches!(log.sync(), Err(AppendError::Poisoned { .. })));
        drop(log);
        assert_eq!(
            *file.bytes.lock().unwrap(),
            expected(1),
            "nothing written after the cut"
        );
    }

    /// Regression (review of the deferred lines): a plain append that
    /// failed after deferred lines stayed in the log's index, and a later
    /// write of the deferred lines wrote it too, on a poisoned log.
    #[test]
    fn regression_a_failed_plain_append_after_deferred_lines_stayed_in_the_index() {
        let (log, file) = mem_log();
        log.defer(&[line(1)]).unwrap();
        file.fail_writes.store(true, Ordering::SeqCst);
        assert!(matches!(
            log.append(&[line(2)]),
            Err(AppendError::Io { .. })
        ));
        assert_eq!(log.len(), 2, "the failed line is not in the index");
        assert_eq!(log.byte_len(), expected(2).len() as u64);
        file.fail_writes.store(false, Ordering::SeqCst);
        assert_eq!(log.read(1).unwrap(), line(1));
        assert!(matches!(log.sync(), Err(AppendError::Poisoned { .. })));
        assert!(matches!(
            log.defer(&[line(2)]),
            Err(AppendError::Poisoned { .. })
        ));
        drop(log);
        assert_eq!(
            *file.bytes.lock().unwrap(),
            expected(1),
            "nothing written once poisoned"
        );
    }

    #[test]
    fn deferred_lines_past_the_limit_are_written_without_waiting_for_a_sync() {
        let (log, file) = mem_log();
        let first = line(0).len() as u64;
        let mut seq = 1;
        while *file.writes.lock().unwrap() == 0 {
            log.defer(&[line(seq)]).unwrap();
            seq += 1;
        }
        let (limit, last) = (super::PENDING_LIMIT as u64, line(seq - 1).len() as u64);
        let deferred = file.len().unwrap() - first;
        assert_eq!(*file.bytes.lock().unwrap(), expected(seq));
        assert!(
            deferred >= limit && deferred - last < limit,
            "written once the deferred lines passed the limit: {deferred} bytes"
        );
    }

    #[test]
    fn deferred_lines_left_when_the_handle_goes_are_written() {
        let (log, file) = mem_log();
        log.defer(&[line(1)]).unwrap();
        drop(log);
        assert_eq!(*file.bytes.lock().unwrap(), expected(2));
    }

    /// Regression (review finding F3): a `Sync` append's sync and a group
    /// leader's could run at once, and the second `fdatasync` of a file
    /// whose write-back failed returns success; its appenders were
    /// acknowledged for pages the kernel may have dropped.
    #[test]
    fn a_sync_beside_a_failed_sync_is_refused_not_acknowledged() {
        let (release, released) = mpsc::channel();
        let (entered_tx, entered) = mpsc::channel();
        let file = Arc::new(FailsOnce {
            release: Mutex::new(released),
            entered: Mutex::new(entered_tx),
            calls: Mutex::new(0),
        });
        let log = FileLog::new(
            "test.jsonl".into(),
            Arc::clone(&file) as Arc<dyn VfsFile>,
            Some(Arc::clone(&file) as Arc<dyn VfsFile>),
            None,
            vec![0],
            10,
        );
        std::thread::scope(|scope| {
            let first = scope.spawn(|| log.sync());
            while *file.calls.lock().unwrap() == 0 {
                std::thread::yield_now();
            }
            let second = scope.spawn(|| log.sync());
            // Before the fix the second sync reaches the file while the
            // first is still in it; with it, it waits for the first (the
            // timeout only bounds how long this test gives it to try).
            let overlapped = entered.recv_timeout(Duration::from_millis(200)).is_ok();
            release.send(()).unwrap();
            assert!(first.join().unwrap().is_err(), "the first sync failed");
            let second = second.join().unwrap();
            assert!(
                matches!(second, Err(AppendError::Poisoned { .. })),
                "the second sync must be refused, not acknowledged \
                 (overlapped the failed one: {overlapped}): {second:?}"
            );
        });
    }
}
