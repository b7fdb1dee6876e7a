//! The content-addressed blob store of a cairn store: bytes too large for a
//! record (long tool output, the workspace snapshots of `cairn-workspace`,
//! traces) kept once each, by their SHA-256, zstd-compressed.
//!
//! Layout, under [`crate::blob_dir`]: `<aa>/<sha256>.zst`, where `aa` is the
//! first two hex digits of the digest. Files written by cairn before this
//! store (plain bytes named `<sha256>` directly in the directory) are read
//! too.
//!
//! **Durable before it is referenced.** [`BlobStore::put`] writes the
//! compressed bytes to a temporary name, syncs the file, renames it into
//! place and syncs the directory before it returns, so a record that names
//! the digest is appended only after the blob is on disk.
//!
//! **Garbage collection** ([`BlobStore::gc`]) removes blobs that no record
//! of any session of the store references (a record references a blob when
//! a member named `sha256` in its data holds the digest, or a `uri` is the
//! blob's [`uri`]). It is safe while writers run, by two rules:
//!
//! 1. a blob younger than the grace period (its modification time) is never
//!    removed: a writer appends the record that references a new blob well
//!    within it. [`BlobStore::put`] of bytes already stored sets the blob's
//!    modification time to now, so a blob about to be referenced again is
//!    young again;
//! 2. a blob is removed in two steps: renamed to `<sha256>.zst.gc`, then its
//!    modification time checked again (a `put` may have touched it between
//!    the listing and the rename) — a young one is renamed back, an old one
//!    removed. A `put` that finds the blob gone (renamed away) writes it
//!    afresh, so it never relies on a blob the collector is removing.

use std::fs::File;
use std::io::{self, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use cairn::{Access, IoFailure, Store};
use sha2::{Digest, Sha256};

/// The zstd level blobs are written at (zstd's default: fast, and most of
/// the gain of higher levels on text).
pub const LEVEL: i32 = 3;

/// The scheme of a blob's URI: `cairn-blob:sha256:<hex>`.
pub const URI_PREFIX: &str = "cairn-blob:sha256:";

/// The grace period of [`BlobStore::gc`] unless another is given: one hour.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(3600);

/// A failure of the blob store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BlobError {
    /// An I/O failure at a path.
    #[error(transparent)]
    Io(IoFailure),
    /// No blob has this digest.
    #[error(
        "no blob {sha256} in {dir}: it was never stored here, or removed by `cairn gc` after nothing referenced it"
    )]
    Missing {
        /// The digest.
        sha256: String,
        /// The blob directory.
        dir: PathBuf,
    },
    /// A digest that is not 64 lower-case hex digits.
    #[error("{0:?} is not a blob digest (64 lower-case hex digits of a SHA-256)")]
    BadDigest(String),
    /// The stored bytes do not hash to their name.
    #[error("blob {sha256} is damaged: its content hashes to {actual}")]
    Damaged {
        /// The name.
        sha256: String,
        /// What the content hashes to.
        actual: String,
    },
    /// A session could not be read, so `gc` cannot know what it references.
    #[error(
        "cannot read session {session}, so gc cannot tell which blobs it references; nothing was removed (check it with `cairn fsck`)"
    )]
    Unreadable {
        /// The session.
        session: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

thread_local! {
    /// This thread's zstd decompression context, made once: creating one
    /// per blob was the largest user-space cost of a restore (~15 µs each).
    static DCTX: std::cell::RefCell<Option<zstd::zstd_safe::DCtx<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// Decompresses a stored blob (every frame in it, as
/// `zstd::stream::copy_decode` does) with this thread's context.
fn decompress(compressed: &[u8]) -> io::Result<Vec<u8>> {
    DCTX.with_borrow_mut(|slot| {
        let ctx = slot.get_or_insert_with(zstd::zstd_safe::DCtx::create);
        let size = zstd::zstd_safe::get_frame_content_size(compressed)
            .ok()
            .flatten()
            .unwrap_or(0);
        // A size read from the frame header is a hint, never trusted for more than 64 MiB up front.
        let mut out = Vec::with_capacity(usize::try_from(size.min(64 << 20)).unwrap_or(0));
        let mut dec = zstd::stream::read::Decoder::with_context(compressed, ctx);
        io::copy(&mut dec, &mut out)?;
        Ok(out)
    })
}

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> BlobError + 'a {
    move |source| BlobError::Io(IoFailure::new(action, path.display().to_string(), source))
}

/// A stored blob: its digest and sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobRef {
    /// SHA-256 of the content, 64 lower-case hex digits.
    pub sha256: String,
    /// Bytes of the content.
    pub size: u64,
}

impl BlobRef {
    /// The blob's URI, `cairn-blob:sha256:<hex>`.
    pub fn uri(&self) -> String {
        uri(&self.sha256)
    }
}

/// The URI of the blob with digest `sha256`.
pub fn uri(sha256: &str) -> String {
    format!("{URI_PREFIX}{sha256}")
}

/// What [`BlobStore::gc`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Blobs kept because a record references them.
    pub referenced: u64,
    /// Unreferenced blobs kept because they are younger than the grace period.
    pub young: u64,
    /// Blobs removed.
    pub removed: u64,
    /// Bytes (on disk) freed.
    pub freed_bytes: u64,
}

/// The blob directory of one store.
#[derive(Debug, Clone)]
pub struct BlobStore {
    dir: PathBuf,
}

impl BlobStore {
    /// The blob store in `dir` (created on the first [`BlobStore::put`]).
    pub fn new(dir: impl Into<PathBuf>) -> BlobStore {
        BlobStore { dir: dir.into() }
    }

    /// The blob store of the store at `spec` (a directory or `sqlite:PATH`).
    pub fn for_store(spec: &Path) -> BlobStore {
        BlobStore::new(crate::blob_dir(spec))
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the blob `sha256` is (or would be) stored, compressed.
    pub fn path(&self, sha256: &str) -> PathBuf {
        self.dir
            .join(&sha256[..2.min(sha256.len())])
            .join(format!("{sha256}.zst"))
    }

    /// Stores `bytes` (once: the same bytes stored twice cost nothing
    /// more) and returns the reference. The blob is durable when this
    /// returns.
    ///
    /// # Errors
    ///
    /// [`BlobError::Io`] when it cannot be written or synced.
    pub fn put(&self, bytes: &[u8]) -> Result<BlobRef, BlobError> {
        let sha256 = digest(bytes);
        let r = BlobRef {
            sha256,
            size: bytes.len() as u64,
        };
        if self.touch(&r.sha256) {
            return Ok(r);
        }
        let compressed =
            zstd::bulk::compress(bytes, LEVEL).map_err(io_err("compress", &self.dir))?;
        self.install(&r.sha256, |out| out.write_all(&compressed), true)?;
        Ok(r)
    }

    /// Stores the content of the file at `path`, as [`BlobStore::put`],
    /// streaming it (any size costs no memory): one pass to hash it, and
    /// one to compress it when it is not stored yet.
    ///
    /// # Errors
    ///
    /// [`BlobError::Io`] when it cannot be read, written or synced.
    pub fn put_file(&self, path: &Path) -> Result<BlobRef, BlobError> {
        self.put_file_with(path, true)
    }

    /// [`BlobStore::put_file`] without the syncs: the blob is in place but
    /// not yet durable. A caller storing many blobs calls
    /// [`BlobStore::sync`] once, before it appends the record naming them.
    ///
    /// # Errors
    ///
    /// As [`BlobStore::put_file`].
    pub fn put_file_unsynced(&self, path: &Path) -> Result<BlobRef, BlobError> {
        self.put_file_with(path, false)
    }

    /// Makes every blob stored unsynced durable: one `syncfs` of the blob
    /// directory's file system (data and names) where that persists data
    /// ([`crate::syncfs::persists_at`]: a local file system such as ext4 or
    /// XFS, Linux 5.8 or later), else, or where it fails, a sync of every
    /// blob and directory.
    ///
    /// # Errors
    ///
    /// [`BlobError::Io`].
    pub fn sync(&self) -> Result<(), BlobError> {
        #[cfg(target_os = "linux")]
        if crate::syncfs::persists_at(&self.dir)
            && File::open(&self.dir)
                .and_then(|d| rustix::fs::syncfs(&d).map_err(io::Error::from))
                .is_ok()
        {
            return Ok(());
        }
        for (_, path) in self.stored()? {
            File::open(&path)
                .and_then(|f| f.sync_all())
                .map_err(io_err("sync", &path))?;
            if let Some(parent) = path.parent() {
                sync_dir(parent)?;
            }
        }
        sync_dir(&self.dir)
    }

    /// Makes the named blobs durable (each blob and its directory synced):
    /// cheaper than [`BlobStore::sync`] for a few blobs on a busy file
    /// system.
    ///
    /// # Errors
    ///
    /// [`BlobError::Io`]; [`BlobError::BadDigest`].
    pub fn sync_some<'a>(
        &self,
        digests: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), BlobError> {
        let mut dirs = std::collections::BTreeSet::new();
        for sha in digests {
            if !valid_digest(sha) {
                return Err(BlobError::BadDigest(sha.to_owned()));
            }
            let path = self.path(sha);
            File::open(&path)
                .and_then(|f| f.sync_all())
                .map_err(io_err("sync", &path))?;
            if let Some(parent) = path.parent() {
                dirs.insert(parent.to_owned());
            }
        }
        // (A new fan-out directory's name was synced when it was made.)
        for d in dirs {
            sync_dir(&d)?;
        }
        Ok(())
    }

    fn put_file_with(&self, path: &Path, durable: bool) -> Result<BlobRef, BlobError> {
        let mut f = File::open(path).map_err(io_err("read", path))?;
        let (sha256, size) = digest_of(&mut f).map_err(io_err("read", path))?;
        let r = BlobRef { sha256, size };
        if self.touch(&r.sha256) {
            return Ok(r);
        }
        f.seek(io::SeekFrom::Start(0))
            .map_err(io_err("read", path))?;
        self.install(
            &r.sha256,
            |out| {
                let mut enc = zstd::stream::Encoder::new(out, LEVEL)?;
                io::copy(&mut f, &mut enc)?;
                enc.finish()?;
                Ok(())
            },
            durable,
        )?;
        Ok(r)
    }

    /// Whether the blob is stored (in either layout).
    pub fn contains(&self, sha256: &str) -> bool {
        valid_digest(sha256) && (self.path(sha256).exists() || self.dir.join(sha256).exists())
    }

    /// The content of blob `sha256`, verified against its digest.
    ///
    /// # Errors
    ///
    /// [`BlobError::BadDigest`], [`BlobError::Missing`], [`BlobError::Io`],
    /// [`BlobError::Damaged`].
    pub fn get(&self, sha256: &str) -> Result<Vec<u8>, BlobError> {
        if !valid_digest(sha256) {
            return Err(BlobError::BadDigest(sha256.to_owned()));
        }
        let path = self.path(sha256);
        let bytes = match std::fs::read(&path) {
            Ok(compressed) => decompress(&compressed).map_err(io_err("decompress", &path))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let plain = self.dir.join(sha256);
                match std::fs::read(&plain) {
                    Ok(b) => b,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        return Err(BlobError::Missing {
                            sha256: sha256.to_owned(),
                            dir: self.dir.clone(),
                        });
                    }
                    Err(e) => return Err(io_err("read", &plain)(e)),
                }
            }
            Err(e) => return Err(io_err("read", &path)(e)),
        };
        let actual = digest(&bytes);
        if actual != sha256 {
            return Err(BlobError::Damaged {
                sha256: sha256.to_owned(),
                actual,
            });
        }
        Ok(bytes)
    }

    /// The content a blob URI names: `cairn-blob:sha256:<hex>`, or a
    /// `file://` URI of an older cairn's blob file (its last path
    /// component is the digest).
    ///
    /// # Errors
    ///
    /// [`BlobError::BadDigest`] for a URI that names no blob, else as
    /// [`BlobStore::get`].
    pub fn get_uri(&self, uri: &str) -> Result<Vec<u8>, BlobError> {
        let sha = match uri.strip_prefix(URI_PREFIX) {
            Some(s) => s,
            None => uri.rsplit('/').next().unwrap_or(uri),
        };
        self.get(sha)
    }

    /// Sets an existing blob's modification time to now; false when it is
    /// not there (or the touch failed), so the caller writes it afresh.
    fn touch(&self, sha256: &str) -> bool {
        let path = self.path(sha256);
        match File::open(&path) {
            Ok(f) => f.set_modified(SystemTime::now()).is_ok(),
            Err(_) => false,
        }
    }

    /// Writes a blob under a temporary name with `write`, syncs it (when
    /// `durable`), renames it into place and syncs the directory (when
    /// `durable`).
    fn install(
        &self,
        sha256: &str,
        write: impl FnOnce(&mut File) -> io::Result<()>,
        durable: bool,
    ) -> Result<(), BlobError> {
        let path = self.path(sha256);
        let parent = path.parent().unwrap_or(&self.dir);
        if !parent.is_dir() {
            std::fs::create_dir_all(parent).map_err(io_err("create", parent))?;
            // The fan-out directory's name is durable from the start.
            sync_dir(&self.dir)?;
        }
        let tmp = parent.join(format!(".{sha256}.{}.tmp", std::process::id()));
        let written = (|| {
            let mut f = File::create(&tmp)?;
            write(&mut f)?;
            if durable { f.sync_all() } else { Ok(()) }
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(io_err("write", &tmp)(e));
        }
        std::fs::rename(&tmp, &path).map_err(io_err("rename into place", &path))?;
        if !durable {
            return Ok(());
        }
        sync_dir(parent)?;
        Ok(())
    }

    /// Every stored blob: digest, path and bytes on disk.
    fn stored(&self) -> Result<Vec<(String, PathBuf)>, BlobError> {
        let mut out = Vec::new();
        let top = match std::fs::read_dir(&self.dir) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(io_err("list", &self.dir)(e)),
        };
        for e in top {
            let e = e.map_err(io_err("list", &self.dir))?;
            let name = e.file_name().to_string_lossy().into_owned();
            let path = e.path();
            if valid_digest(&name) {
                out.push((name, path));
            } else if name.len() == 2 && path.is_dir() {
                for f in std::fs::read_dir(&path).map_err(io_err("list", &path))? {
                    let f = f.map_err(io_err("list", &path))?;
                    let n = f.file_name().to_string_lossy().into_owned();
                    if let Some(sha) = n.strip_suffix(".zst").filter(|s| valid_digest(s)) {
                        out.push((sha.to_owned(), f.path()));
                    }
                }
            }
        }
        Ok(out)
    }

    /// Removes every blob that no record of `store` references and that is
    /// older than `grace` (module docs: why this is safe while writers run).
    ///
    /// # Errors
    ///
    /// [`BlobError::Unreadable`] when a session cannot be read (nothing is
    /// removed then); [`BlobError::Io`] when the directory cannot be listed
    /// or a blob removed.
    pub fn gc(&self, store: &Store, grace: Duration) -> Result<GcReport, BlobError> {
        self.gc_with(store, grace, &mut |_, _| {})
    }

    /// [`BlobStore::gc`], calling `hook(step, sha256)` before (`"rename"`)
    /// and after (`"renamed"`) each rename of a candidate: the race tests'
    /// seam.
    fn gc_with(
        &self,
        store: &Store,
        grace: Duration,
        hook: &mut dyn FnMut(&str, &str),
    ) -> Result<GcReport, BlobError> {
        let mut report = GcReport::default();
        // Candidates first, references second: a blob stored after the
        // listing is not a candidate; one stored before it is old only if
        // its record had time to be appended (rule 1).
        let now = SystemTime::now();
        let old = |p: &Path| {
            std::fs::metadata(p)
                .and_then(|m| m.modified())
                .is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age >= grace))
        };
        let candidates = self.stored()?;
        let referenced = referenced_digests(store)?;
        for (sha, path) in candidates {
            if referenced.contains(&sha) {
                report.referenced += 1;
                continue;
            }
            if !old(&path) {
                report.young += 1;
                continue;
            }
            let mut doomed = path.clone().into_os_string();
            doomed.push(".gc");
            let doomed = PathBuf::from(doomed);
            hook("rename", &sha);
            if std::fs::rename(&path, &doomed).is_err() {
                continue; // gone already
            }
            hook("renamed", &sha);
            if !old(&doomed) {
                // Touched by a `put` between the listing and the rename.
                std::fs::rename(&doomed, &path).map_err(io_err("restore", &path))?;
                report.young += 1;
                continue;
            }
            let bytes = std::fs::metadata(&doomed).map_or(0, |m| m.len());
            std::fs::remove_file(&doomed).map_err(io_err("remove", &doomed))?;
            report.removed += 1;
            report.freed_bytes += bytes;
        }
        Ok(report)
    }
}

/// Every blob digest any record of any session of `store` references.
fn referenced_digests(store: &Store) -> Result<std::collections::HashSet<String>, BlobError> {
    let mut out = std::collections::HashSet::new();
    let unreadable =
        |session: &str, e: Box<dyn std::error::Error + Send + Sync>| BlobError::Unreadable {
            session: session.to_owned(),
            source: e,
        };
    let sessions = store
        .list()
        .map_err(|e| unreadable("(the listing)", e.into()))?;
    for summary in sessions {
        let id = summary.id.to_string();
        let session = store
            .open(&summary.id, Access::Read)
            .map_err(|e| unreadable(&id, e.into()))?;
        for seq in 0..session.len() {
            let line = session
                .raw_record(seq)
                .map_err(|e| unreadable(&id, e.into()))?;
            collect_digests(&line, &mut out);
        }
    }
    Ok(out)
}

/// The digests a record line names: after `"sha256":"` or `cairn-blob:sha256:`.
fn collect_digests(line: &[u8], out: &mut std::collections::HashSet<String>) {
    for marker in [&b"\"sha256\":\""[..], URI_PREFIX.as_bytes()] {
        let mut rest = line;
        while let Some(i) = memchr::memmem::find(rest, marker) {
            rest = &rest[i + marker.len()..];
            if let Some(d) = rest.get(..64).and_then(|d| std::str::from_utf8(d).ok())
                && valid_digest(d)
            {
                out.insert(d.to_owned());
            }
        }
    }
}

/// Feeds what is written to a hasher.
struct HashWriter<'a>(&'a mut Sha256);

impl Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Whether `s` is 64 lower-case hex digits.
pub fn valid_digest(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The SHA-256 of `bytes`, in lower-case hex: the digest a blob of them
/// is stored under.
pub fn digest(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// The digest and size of everything `r` reads, streamed.
///
/// # Errors
///
/// When `r` fails.
pub fn digest_of(r: &mut impl io::Read) -> io::Result<(String, u64)> {
    let mut hasher = Sha256::new();
    let size = io::copy(r, &mut HashWriter(&mut hasher))?;
    Ok((hex(&hasher.finalize()), size))
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Syncs a directory, so the names created in it are durable.
///
/// # Errors
///
/// [`BlobError::Io`].
pub fn sync_dir(dir: &Path) -> Result<(), BlobError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("sync", dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_bytes_are_stored_once_compressed_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::new(dir.path().join("blobs"));
        let text = "line of text\n".repeat(1000);
        let a = blobs.put(text.as_bytes()).unwrap();
        let b = blobs.put(text.as_bytes()).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.size, text.len() as u64);
        let on_disk = std::fs::metadata(blobs.path(&a.sha256)).unwrap().len();
        assert!(on_disk < a.size / 10, "{on_disk}");
        assert_eq!(blobs.get(&a.sha256).unwrap(), text.as_bytes());
        assert_eq!(blobs.get_uri(&a.uri()).unwrap(), text.as_bytes());
        assert_eq!(blobs.stored().unwrap().len(), 1);
    }

    #[test]
    fn plain_blob_files_of_older_cairn_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::new(dir.path());
        let sha = hex(&Sha256::digest(b"old"));
        std::fs::write(dir.path().join(&sha), b"old").unwrap();
        assert_eq!(blobs.get(&sha).unwrap(), b"old");
        let uri = format!("file://{}", dir.path().join(&sha).display());
        assert_eq!(blobs.get_uri(&uri).unwrap(), b"old");
    }

    #[test]
    fn a_damaged_or_missing_blob_is_an_error_not_wrong_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::new(dir.path());
        let r = blobs.put(b"hello").unwrap();
        std::fs::write(
            blobs.path(&r.sha256),
            zstd::bulk::compress(b"hellO", 3).unwrap(),
        )
        .unwrap();
        assert!(matches!(
            blobs.get(&r.sha256),
            Err(BlobError::Damaged { .. })
        ));
        let other = hex(&Sha256::digest(b"x"));
        assert!(matches!(blobs.get(&other), Err(BlobError::Missing { .. })));
        assert!(matches!(blobs.get("../x"), Err(BlobError::BadDigest(_))));
    }

    fn store_referencing(dir: &Path, sha: &str) -> Store {
        let store = Store::open_dir(dir.join("home"));
        let s = store.create(cairn::NewSession::default()).unwrap();
        s.append(cairn::EntryBody::Custom(cairn::Custom {
            namespace: "test.blobs".into(),
            visible: false,
            content: serde_json::json!({"file": {"sha256": sha}}),
        }))
        .unwrap();
        store
    }

    fn age(path: &Path) {
        let old = SystemTime::now() - Duration::from_secs(7200);
        File::open(path).unwrap().set_modified(old).unwrap();
    }

    #[test]
    fn a_truncated_blob_fails_and_the_next_blob_on_the_thread_still_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::new(dir.path());
        let big: Vec<u8> = (0..200_000u32).flat_map(|i| i.to_le_bytes()).collect();
        let cut = blobs.put(&big).unwrap();
        let whole = blobs.put(b"the next blob").unwrap();
        let path = blobs.path(&cut.sha256);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        // The thread's decompression context stops mid-frame here…
        assert!(blobs.get(&cut.sha256).is_err());
        // …and starts afresh for the next blob.
        assert_eq!(blobs.get(&whole.sha256).unwrap(), b"the next blob");
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(blobs.get(&cut.sha256).unwrap(), big);
    }

    #[test]
    fn gc_removes_only_old_unreferenced_blobs() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::new(dir.path().join("home/blobs"));
        let kept = blobs.put(b"referenced").unwrap();
        let young = blobs.put(b"young").unwrap();
        let old = blobs.put(b"old").unwrap();
        age(&blobs.path(&kept.sha256));
        age(&blobs.path(&old.sha256));
        let store = store_referencing(dir.path(), &kept.sha256);
        let report = blobs.gc(&store, DEFAULT_GRACE).unwrap();
        assert_eq!(
            report,
            GcReport {
                referenced: 1,
                young: 1,
                removed: 1,
                freed_bytes: report.freed_bytes
            }
        );
        assert!(blobs.contains(&kept.sha256) && blobs.contains(&young.sha256));
        assert!(!blobs.contains(&old.sha256));
    }

    #[test]
    fn a_put_between_the_listing_and_the_rename_keeps_the_blob() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::new(dir.path().join("home/blobs"));
        let r = blobs.put(b"about to be referenced again").unwrap();
        age(&blobs.path(&r.sha256));
        let store = store_referencing(dir.path(), &"0".repeat(64));
        let writer = blobs.clone();
        let report = blobs
            .gc_with(&store, DEFAULT_GRACE, &mut |step, _| {
                if step == "rename" {
                    writer.put(b"about to be referenced again").unwrap();
                }
            })
            .unwrap();
        assert_eq!(report.removed, 0);
        assert_eq!(
            blobs.get(&r.sha256).unwrap(),
            b"about to be referenced again"
        );
    }

    #[test]
    fn a_put_after_the_rename_writes_the_blob_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::new(dir.path().join("home/blobs"));
        let r = blobs.put(b"stored while collected").unwrap();
        age(&blobs.path(&r.sha256));
        let store = store_referencing(dir.path(), &"0".repeat(64));
        let writer = blobs.clone();
        let report = blobs
            .gc_with(&store, DEFAULT_GRACE, &mut |step, _| {
                if step == "renamed" {
                    writer.put(b"stored while collected").unwrap();
                }
            })
            .unwrap();
        // The old copy went; the writer's fresh copy stays.
        assert_eq!(report.removed, 1);
        assert_eq!(blobs.get(&r.sha256).unwrap(), b"stored while collected");
    }

    #[test]
    fn gc_removes_nothing_when_a_session_cannot_be_read() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::new(dir.path().join("home/blobs"));
        let r = blobs.put(b"x").unwrap();
        age(&blobs.path(&r.sha256));
        let store = store_referencing(dir.path(), &"0".repeat(64));
        let sessions = dir.path().join("home/sessions");
        let file = std::fs::read_dir(&sessions)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
            .unwrap();
        let mut bytes = std::fs::read(&file).unwrap();
        bytes.extend_from_slice(b"garbage\n{\"seq\":9}\n");
        let len = bytes.len();
        bytes[len / 3] ^= 0x55;
        std::fs::write(&file, bytes).unwrap();
        assert!(matches!(
            blobs.gc(&store, DEFAULT_GRACE),
            Err(BlobError::Unreadable { .. })
        ));
        assert!(blobs.contains(&r.sha256));
    }

    #[test]
    fn digests_are_found_in_sha256_members_and_blob_uris() {
        let mut out = std::collections::HashSet::new();
        let a = "a".repeat(64);
        let b = "b".repeat(64);
        let line = format!(
            r#"{{"data":{{"files":{{"x":{{"sha256":"{a}"}}}},"uri":"cairn-blob:sha256:{b}","sha256":"short"}}}}"#
        );
        collect_digests(line.as_bytes(), &mut out);
        assert_eq!(out.len(), 2);
        assert!(out.contains(&a) && out.contains(&b));
    }
}
