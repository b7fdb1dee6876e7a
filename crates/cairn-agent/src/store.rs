//! Where the agent's store is: a directory, or `sqlite:PATH` for a SQLite
//! database. [`open_store`] opens either; [`files_dir`] is where the agent
//! keeps its own files beside it (blobs of capped tool output, the REPL's
//! history, the demo's working directories).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, Result};
use cairn::Store;

/// The SQLite database a store spec names (`sqlite:PATH`), if it names one.
pub fn sqlite_path(spec: &Path) -> Option<&str> {
    spec.to_str().and_then(|s| s.strip_prefix("sqlite:"))
}

/// Opens a store named by a directory, or by `sqlite:PATH` for a SQLite
/// database (created if missing).
///
/// # Errors
///
/// When the SQLite database cannot be opened (or was written by a newer
/// cairn).
pub fn open_store(spec: &Path) -> Result<Store> {
    match sqlite_path(spec) {
        Some(db) => {
            let backend = cairn_sqlite::SqliteBackend::open(db)
                .with_context(|| format!("cannot open the SQLite store {db}"))?;
            Ok(Store::with_backend(Arc::new(backend)))
        }
        None => Ok(Store::open_dir(spec)),
    }
}

/// The directory of the agent's own files for the store `spec`: a directory
/// store's home itself, or `PATH-files` beside a SQLite database `PATH`
/// (as SQLite keeps `PATH-wal` beside it).
pub fn files_dir(spec: &Path) -> PathBuf {
    match sqlite_path(spec) {
        Some(db) => PathBuf::from(format!("{db}-files")),
        None => spec.to_owned(),
    }
}

/// Where the agent keeps blobs (long tool output) for the store `spec`.
pub fn blob_dir(spec: &Path) -> PathBuf {
    files_dir(spec).join("blobs")
}

/// ` --store SPEC` for a command line that should reach the store `spec`,
/// or nothing when `spec` is the default store (`$CAIRN_HOME`, else the
/// default home).
pub fn store_flag(spec: &Path) -> String {
    if Store::default_home().is_some_and(|h| h == spec) {
        return String::new();
    }
    format!(" --store {}", shell_quote(&spec.display().to_string()))
}

/// Quotes `s` for a POSIX shell when it holds anything but plain path characters.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"/._-+=:,@".contains(&c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_specs_keep_their_files_beside_the_database() {
        assert_eq!(sqlite_path(Path::new("sqlite:/x/db")), Some("/x/db"));
        assert_eq!(sqlite_path(Path::new("/x/db")), None);
        assert_eq!(
            files_dir(Path::new("sqlite:/x/db")),
            Path::new("/x/db-files")
        );
        assert_eq!(files_dir(Path::new("/x/home")), Path::new("/x/home"));
    }

    #[test]
    fn store_flags_are_quoted_for_the_shell() {
        assert_eq!(shell_quote("sqlite:/x/a.db"), "sqlite:/x/a.db");
        assert_eq!(shell_quote("/x/my store"), "'/x/my store'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
