//! Errors of opening a database, and the conversions of SQLite errors into
//! the core's error types (which carry an `io::Error` as their source).

use std::io;
use std::path::PathBuf;

/// Errors opening a cairn SQLite database.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqliteError {
    /// The database was written by a newer cairn-sqlite.
    #[error(
        "{path} has cairn-sqlite schema version {found}, but this build knows versions up to \
         {supported}; upgrade cairn to open it (the database was not changed)"
    )]
    NewerSchema {
        /// The database.
        path: PathBuf,
        /// Its schema version (`PRAGMA user_version`).
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// The file is an SQLite database of another application.
    #[error(
        "{path} is not a cairn database ({why}); point --store at a new file or an existing \
         cairn database (the file was not changed)"
    )]
    NotCairn {
        /// The database.
        path: PathBuf,
        /// What gave it away.
        why: String,
    },
    /// WAL mode could not be turned on (e.g. on a network file system).
    #[error(
        "cannot put {path} in WAL mode (the journal mode is {mode:?}); cairn needs WAL, which \
         needs a local file system"
    )]
    NoWal {
        /// The database.
        path: PathBuf,
        /// The journal mode SQLite kept.
        mode: String,
    },
    /// Creating the database file or its directory failed.
    #[error("cannot {action} {path}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The database.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// SQLite failed.
    #[error("cannot {action} {path}")]
    Sqlite {
        /// What was being done.
        action: &'static str,
        /// The database.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
}

/// An `io::Error` carrying an SQLite error, for the core's error types.
pub(crate) fn io(e: rusqlite::Error) -> io::Error {
    io::Error::other(e)
}

/// The core's open error for an SQLite failure.
pub(crate) fn open_err(
    action: &'static str,
    location: &str,
) -> impl Fn(rusqlite::Error) -> cairn::OpenError {
    move |e| cairn::OpenError::Io(cairn::IoFailure::new(action, location.to_owned(), io(e)))
}

/// The core's store error for an SQLite failure.
pub(crate) fn store_err(
    action: &'static str,
    location: &str,
) -> impl Fn(rusqlite::Error) -> cairn::StoreError {
    move |e| cairn::StoreError::Io(cairn::IoFailure::new(action, location.to_owned(), io(e)))
}
