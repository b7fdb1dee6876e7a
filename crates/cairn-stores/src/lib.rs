//! Where a cairn store is, named by one string: a directory of session
//! files, `sqlite:PATH` for a SQLite database, or a `postgres://…` (or
//! `postgresql://…`) URL for a Postgres schema. Every surface that takes
//! a store location — the CLI's `--store`, the agent, the server, the
//! Python package — opens it with [`open_store`], so a location means the
//! same thing everywhere.
//!
//! Beside the store, tools keep files of their own (the REPL's history, the
//! server's token): [`files_dir`] says where. Bytes too large for a record
//! go to the store's content-addressed blob store (`cairn_blobs::BlobStore`)
//! in [`blob_dir`].
//!
//! [`copy_store`] copies every session of one store into another, whatever
//! their backends, byte for byte.

pub use copy::{Copied, CopyError, CopyOutcome, CopyReport, copy_session, copy_store};

mod copy;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn::Store;

/// The kinds of store a location can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location<'a> {
    /// A directory of session files (the embedded default).
    Dir(&'a Path),
    /// A SQLite database file, from `sqlite:PATH`.
    Sqlite(&'a str),
    /// A Postgres store, from a `postgres://` or `postgresql://` URL.
    Postgres(&'a str),
}

impl<'a> Location<'a> {
    /// Reads a location: `sqlite:PATH` names a SQLite database,
    /// `postgres://…` or `postgresql://…` a Postgres store; anything else is
    /// a directory.
    pub fn parse(spec: &'a Path) -> Location<'a> {
        let text = spec.to_str();
        if let Some(url) = text.filter(|s| cairn_postgres::is_postgres_url(s)) {
            return Location::Postgres(url);
        }
        match text.and_then(|s| s.strip_prefix("sqlite:")) {
            Some(db) => Location::Sqlite(db),
            None => Location::Dir(spec),
        }
    }
}

/// Why a store named by its location could not be opened. The cause
/// (`source()`) says what is wrong with the database and how to fix it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenStoreError {
    /// The SQLite database could not be opened or created, or was written
    /// by a newer cairn.
    #[error("cannot open the SQLite store {path}")]
    Sqlite {
        /// The database's path, as named after `sqlite:`.
        path: String,
        /// Why.
        #[source]
        source: Box<cairn_sqlite::SqliteError>,
    },
    /// The Postgres store could not be reached or opened, or its schema was
    /// written by a newer cairn.
    #[error("cannot open the Postgres store {url}")]
    Postgres {
        /// The URL, its password hidden.
        url: String,
        /// Why.
        #[source]
        source: Box<cairn_postgres::PgError>,
    },
}

/// Opens the store a location names (a SQLite database is created if
/// missing; a directory is created on the first session).
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// use cairn::NewSession;
///
/// let db = format!("sqlite:{}", dir.path().join("cairn.db").display());
/// let store = cairn_stores::open_store(db.as_ref())?;
/// let session = store.create(NewSession::default())?;
/// assert_eq!(store.list()?.len(), 1);
/// # drop(session);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// [`OpenStoreError`] when the SQLite database or the Postgres store cannot
/// be opened, or was written by a newer cairn. A directory always opens.
pub fn open_store(spec: &Path) -> Result<Store, OpenStoreError> {
    match Location::parse(spec) {
        Location::Postgres(url) => {
            let backend = cairn_postgres::PostgresBackend::open(url).map_err(|source| {
                OpenStoreError::Postgres {
                    url: cairn_postgres::hide_password(url),
                    source: Box::new(source),
                }
            })?;
            Ok(Store::with_backend(Arc::new(backend)))
        }
        Location::Sqlite(db) => {
            let backend =
                cairn_sqlite::SqliteBackend::open(db).map_err(|source| OpenStoreError::Sqlite {
                    path: db.to_owned(),
                    source: Box::new(source),
                })?;
            Ok(Store::with_backend(Arc::new(backend)))
        }
        Location::Dir(dir) => Ok(Store::open_dir(dir)),
    }
}

/// The directory of tools' own files for the store at `spec`: a directory
/// store's home itself, `PATH-files` beside a SQLite database `PATH` (as
/// SQLite keeps `PATH-wal` beside it), and for a Postgres store the
/// `cairn_files=DIR` of its URL, else `postgres/HOST_PORT_DB_SCHEMA` under
/// the default home (`$CAIRN_HOME` unless it is the URL itself, else
/// `$XDG_DATA_HOME/cairn`, else `~/.local/share/cairn`): a database has no
/// directory of its own, and
/// every worker host keeps its tools' files locally.
pub fn files_dir(spec: &Path) -> PathBuf {
    match Location::parse(spec) {
        Location::Postgres(url) => postgres_files_dir(url),
        Location::Sqlite(db) => PathBuf::from(format!("{db}-files")),
        Location::Dir(dir) => dir.to_owned(),
    }
}

fn postgres_files_dir(url: &str) -> PathBuf {
    let parsed = cairn_postgres::PgUrl::parse(url).ok();
    if let Some(dir) = parsed.as_ref().and_then(|u| u.files.clone()) {
        return PathBuf::from(dir);
    }
    let config = parsed.as_ref().and_then(|u| u.config().ok());
    let host = config
        .as_ref()
        .and_then(|c| c.get_hosts().first().cloned())
        .map_or_else(
            || "localhost".to_owned(),
            |h| match h {
                cairn_postgres::Host::Tcp(h) => h,
                cairn_postgres::Host::Unix(p) => p.display().to_string(),
            },
        );
    let port = config
        .as_ref()
        .and_then(|c| c.get_ports().first().copied())
        .unwrap_or(5432);
    let db = config
        .as_ref()
        .and_then(|c| c.get_dbname().map(str::to_owned))
        .unwrap_or_default();
    let schema = parsed.map_or_else(|| "cairn".to_owned(), |u| u.schema);
    let name: String = format!("{host}_{port}_{db}_{schema}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    // `$CAIRN_HOME` may be this very URL: then the next default applies.
    let home = Store::default_home()
        .filter(|h| !h.to_str().is_some_and(cairn_postgres::is_postgres_url))
        .or_else(|| {
            let xdg = std::env::var_os("XDG_DATA_HOME").filter(|x| !x.is_empty());
            let home = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share"));
            xdg.map(PathBuf::from).or(home).map(|d| d.join("cairn"))
        })
        .unwrap_or_else(|| PathBuf::from(".cairn"));
    home.join("postgres").join(name)
}

/// Where blobs (long tool output, workspace snapshots) are kept for the
/// store at `spec`: the directory of its `cairn_blobs::BlobStore`.
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

    #[test]
    fn a_store_that_cannot_be_opened_is_named_in_the_error_without_its_password() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a-file");
        std::fs::write(&file, b"").unwrap();
        let db = file.join("cairn.db");
        let e = open_store(Path::new(&format!("sqlite:{}", db.display()))).unwrap_err();
        assert!(matches!(e, OpenStoreError::Sqlite { .. }));
        assert_eq!(
            e.to_string(),
            format!("cannot open the SQLite store {}", db.display())
        );
        let e = open_store(Path::new("postgres://u:secret@127.0.0.1:1/db")).unwrap_err();
        assert!(matches!(e, OpenStoreError::Postgres { .. }));
        let text = cairn::with_causes(&e);
        assert!(
            text.starts_with("cannot open the Postgres store postgres://u:")
                && !text.contains("secret"),
            "{text}"
        );
    }

    #[test]
    fn postgres_urls_are_postgres_locations_with_files_named_in_the_url_or_under_the_home() {
        for url in ["postgres://h/db", "postgresql://u@h:6432/db?cairn_schema=s"] {
            assert_eq!(Location::parse(Path::new(url)), Location::Postgres(url));
        }
        assert_eq!(
            files_dir(Path::new("postgres://h/db?cairn_files=/srv/tools")),
            Path::new("/srv/tools")
        );
        let dir = files_dir(Path::new(
            "postgresql://u:pw@db.example:6432/prod?cairn_schema=team1",
        ));
        assert!(
            dir.ends_with("postgres/db.example_6432_prod_team1"),
            "{}",
            dir.display()
        );
    }
}
