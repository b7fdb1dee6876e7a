//! [`BlobStore`]: one blob directory — storing bytes (once each, by their
//! SHA-256, zstd-compressed), reading them back verified, making them
//! durable.
//!
//! Layout, under the directory it is given: `<aa>/<sha256>.zst`, where `aa` is the
//! first two hex digits of the digest. Files written by cairn before this
//! store (plain bytes named `<sha256>` directly in the directory) are read
//! too.
//!
//! **Durable before it is referenced.** [`BlobStore::put`] writes the
//! compressed bytes to a temporary name, syncs the file, renames it into
//! place and syncs the directory before it returns, so a record that names
//! the digest is appended only after the blob is on disk.

use std::fs::File;
use std::io::{self, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use cairn::IoFailure;

use crate::{digest, digest_of, valid_digest};

/// The zstd level blobs are written at (zstd's default: fast, and most of
/// the gain of higher levels on text).
pub const LEVEL: i32 = 3;

/// The scheme of a blob's URI: `cairn-blob:sha256:<hex>`.
pub const URI_PREFIX: &str = "cairn-blob:sha256:";

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

pub(crate) fn io_err<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> BlobError + 'a {
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
    pub(crate) fn stored(&self) -> Result<Vec<(String, PathBuf)>, BlobError> {
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
        let sha = digest(b"old");
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
        let other = digest(b"x");
        assert!(matches!(blobs.get(&other), Err(BlobError::Missing { .. })));
        assert!(matches!(blobs.get("../x"), Err(BlobError::BadDigest(_))));
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
}
