//! Errors of opening a Postgres store, and the conversions of driver errors
//! into the core's error types (which carry an `io::Error` as their source).

use std::io;

/// Errors opening a cairn Postgres store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PgError {
    /// The store URL cannot be used.
    #[error("{url} is not a usable Postgres store URL: {problem}")]
    BadUrl {
        /// The URL (password hidden).
        url: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The schema was written by a newer cairn-postgres.
    #[error(
        "schema {schema} has cairn-postgres schema version {found}, but this build knows versions \
         up to {supported}; upgrade cairn to open it (the schema was not changed)"
    )]
    NewerSchema {
        /// The Postgres schema.
        schema: String,
        /// Its version (the greatest in its `migrations` table).
        found: i32,
        /// The newest version this build knows.
        supported: i32,
    },
    /// The schema belongs to another application.
    #[error(
        "schema {schema} is not a cairn store ({why}); name another one with cairn_schema=NAME in \
         the URL (nothing was changed)"
    )]
    NotCairn {
        /// The Postgres schema.
        schema: String,
        /// What gave it away.
        why: String,
    },
    /// The server could not be reached or refused the connection.
    #[error(
        "cannot connect to {url}; is the server running and does it accept this user \
         (pg_isready -h HOST)?"
    )]
    Connect {
        /// The URL (password hidden).
        url: String,
        /// The driver's error.
        #[source]
        source: postgres::Error,
    },
    /// A statement failed.
    #[error("cannot {action} {location}")]
    Postgres {
        /// What was being done.
        action: &'static str,
        /// What it was done to.
        location: String,
        /// The driver's error.
        #[source]
        source: postgres::Error,
    },
}

/// An `io::Error` carrying a driver error, for the core's error types: a
/// lost connection is `ConnectionAborted`, so callers can tell it apart.
pub(crate) fn io(e: postgres::Error) -> io::Error {
    let kind = if crate::pool::connection_lost(&e) {
        io::ErrorKind::ConnectionAborted
    } else {
        io::ErrorKind::Other
    };
    io::Error::new(kind, e)
}

/// The core's open error for a driver failure.
pub(crate) fn open_err(
    action: &'static str,
    location: &str,
) -> impl Fn(postgres::Error) -> cairn::OpenError + use<> {
    let location = location.to_owned();
    move |e| cairn::OpenError::Io(cairn::IoFailure::new(action, location.clone(), io(e)))
}

/// The core's store error for a driver failure.
pub(crate) fn store_err(
    action: &'static str,
    location: &str,
) -> impl Fn(postgres::Error) -> cairn::StoreError + use<> {
    let location = location.to_owned();
    move |e| cairn::StoreError::Io(cairn::IoFailure::new(action, location.clone(), io(e)))
}
