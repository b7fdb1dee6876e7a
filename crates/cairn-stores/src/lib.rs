//! Where a cairn store is, named by one string: a directory of session
//! files, or `sqlite:PATH` for a SQLite database. Every surface that takes
//! a store location — the CLI's `--store`, the agent, the server, the
//! Python package — opens it with [`open_store`], so a location means the
//! same thing everywhere.
//!
//! Beside the store, tools keep files of their own (blobs of long tool
//! output, the REPL's history, the server's token): [`files_dir`] says where.
//! Bytes too large for a record go to the store's content-addressed blob
//! store, [`BlobStore`] (module [`blobs`]: layout, durability, `gc`).

pub mod blobs;

pub use blobs::{BlobError, BlobRef, BlobStore, GcReport};

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, Result};
use cairn::Store;

/// The kinds of store a location can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location<'a> {
    /// A directory of session files (the embedded default).
    Dir(&'a Path),
    /// A SQLite database file, from `sqlite:PATH`.
    Sqlite(&'a str),
}

impl<'a> Location<'a> {
    /// Reads a location: `sqlite:PATH` names a SQLite database; anything
    /// else is a directory.
    pub fn parse(spec: &'a Path) -> Location<'a> {
        match spec.to_str().and_then(|s| s.strip_prefix("sqlite:")) {
            Some(db) => Location::Sqlite(db),
            None => Location::Dir(spec),
        }
    }
}

/// Opens the store a location names (a SQLite database is created if
/// missing; a directory is created on the first session).
///
/// # Errors
///
/// When the SQLite database cannot be opened, or was written by a newer
/// cairn.
pub fn open_store(spec: &Path) -> Result<Store> {
    match Location::parse(spec) {
        Location::Sqlite(db) => {
            let backend = cairn_sqlite::SqliteBackend::open(db)
                .with_context(|| format!("cannot open the SQLite store {db}"))?;
            Ok(Store::with_backend(Arc::new(backend)))
        }
        Location::Dir(dir) => Ok(Store::open_dir(dir)),
    }
}

/// The directory of tools' own files for the store at `spec`: a directory
/// store's home itself, or `PATH-files` beside a SQLite database `PATH`
/// (as SQLite keeps `PATH-wal` beside it).
pub fn files_dir(spec: &Path) -> PathBuf {
    match Location::parse(spec) {
        Location::Sqlite(db) => PathBuf::from(format!("{db}-files")),
        Location::Dir(dir) => dir.to_owned(),
    }
}

/// Where blobs (long tool output, workspace snapshots) are kept for the
/// store at `spec`: the directory of its [`BlobStore`].
pub fn blob_dir(spec: &Path) -> PathBuf {
    files_dir(spec).join("blobs")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_locations_keep_their_files_beside_the_database() {
        assert_eq!(
            Location::parse(Path::new("sqlite:/x/db")),
            Location::Sqlite("/x/db")
        );
        assert_eq!(
            Location::parse(Path::new("/x/db")),
            Location::Dir(Path::new("/x/db"))
        );
        assert_eq!(
            files_dir(Path::new("sqlite:/x/db")),
            Path::new("/x/db-files")
        );
        assert_eq!(files_dir(Path::new("/x/home")), Path::new("/x/home"));
        assert_eq!(blob_dir(Path::new("/x/home")), Path::new("/x/home/blobs"));
    }
}
