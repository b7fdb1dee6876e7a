//! Garbage collection of a blob store: [`BlobStore::gc`] removes blobs that no record
//! of any session of the store references (a record references a blob when
//! a member named `sha256` in its data holds the digest, or a `uri` is the
//! blob's [`uri`](crate::uri)). It is safe while writers run, by two rules:
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

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use cairn::{Access, Store};

use crate::store::{URI_PREFIX, io_err};
use crate::{BlobError, BlobStore, valid_digest};

/// The grace period of [`BlobStore::gc`] unless another is given: one hour.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(3600);

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

impl BlobStore {
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
fn referenced_digests(store: &Store) -> Result<HashSet<String>, BlobError> {
    let mut out = HashSet::new();
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
fn collect_digests(line: &[u8], out: &mut HashSet<String>) {
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

#[cfg(test)]
mod tests {
    use std::fs::File;

    use super::*;

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

    /// Stores `bytes` as an old, unreferenced blob, then collects with a
    /// writer storing them again at `step` of the blob's removal: the
    /// store's directory, the blob store, the digest and what gc did.
    fn gc_with_a_put_at(
        step: &str,
        bytes: &[u8],
    ) -> (tempfile::TempDir, BlobStore, String, GcReport) {
        let dir = tempfile::tempdir().unwrap();
        let blobs = BlobStore::new(dir.path().join("home/blobs"));
        let r = blobs.put(bytes).unwrap();
        age(&blobs.path(&r.sha256));
        let store = store_referencing(dir.path(), &"0".repeat(64));
        let writer = blobs.clone();
        let report = blobs
            .gc_with(&store, DEFAULT_GRACE, &mut |at, _| {
                if at == step {
                    writer.put(bytes).unwrap();
                }
            })
            .unwrap();
        (dir, blobs, r.sha256, report)
    }

    #[test]
    fn a_put_between_the_listing_and_the_rename_keeps_the_blob() {
        let (_dir, blobs, sha, report) = gc_with_a_put_at("rename", b"about to be referenced");
        assert_eq!(report.removed, 0);
        assert_eq!(blobs.get(&sha).unwrap(), b"about to be referenced");
    }

    #[test]
    fn a_put_after_the_rename_writes_the_blob_afresh() {
        let (_dir, blobs, sha, report) = gc_with_a_put_at("renamed", b"stored while collected");
        // The old copy went; the writer's fresh copy stays.
        assert_eq!(report.removed, 1);
        assert_eq!(blobs.get(&sha).unwrap(), b"stored while collected");
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
        let mut out = HashSet::new();
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
