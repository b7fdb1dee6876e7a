//! The store the agent is handed, how it names that store on a command
//! line, and which session "the newest" is (`--continue`, the CLI's
//! `--last`). Opening a store from its location (a directory, `sqlite:PATH`,
//! a `postgres://` URL), and where tools keep their own files beside it, is
//! the caller's job (the `cairn` binary does it with `cairn_stores`): the
//! agent links no database driver, and takes an [`OpenedStore`], or an
//! [`Opener`] where it must open a store again in a child process.

use std::path::{Path, PathBuf};

use cairn::{SessionId, Store};

/// A store its caller opened, with the directories beside it the agent
/// keeps its own files in.
#[derive(Debug, Clone)]
pub struct OpenedStore {
    /// The location it was opened from, as named on the command line
    /// (printed back as `--store`, and handed to the demo's child process).
    pub location: PathBuf,
    /// The store.
    pub store: Store,
    /// Where tools keep their own files: the REPL's history, the demo's
    /// working directories.
    pub files: PathBuf,
    /// The blob directory: long tool output, traces, workspace snapshots.
    pub blobs: PathBuf,
}

impl OpenedStore {
    /// The directory store at `home`, which the core opens without any
    /// driver: sessions in `home/sessions`, tools' files in `home` itself,
    /// blobs in `home/blobs` (the layout `cairn_stores::files_dir` and
    /// `blob_dir` give a directory). Nothing is created until it is used.
    pub fn dir(home: impl Into<PathBuf>) -> OpenedStore {
        let home = home.into();
        OpenedStore {
            store: Store::open_dir(&home),
            files: home.clone(),
            blobs: home.join("blobs"),
            location: home,
        }
    }
}

/// Opens the store at a location, as the command line names it: what the
/// demo's child process (`crate::child::run_if_requested`) is given to
/// reach the demo's store.
pub type Opener = fn(&Path) -> anyhow::Result<OpenedStore>;

/// ` --store SPEC` for a command line that should reach the store `spec`,
/// or nothing when `spec` is the default store (`$CAIRN_HOME`, else the
/// default home).
pub fn store_flag(spec: &Path) -> String {
    if Store::default_home().is_some_and(|h| h == spec) {
        return String::new();
    }
    format!(" --store {}", shell_quote(&spec.display().to_string()))
}

/// The most recently updated session that is not a subagent's: a child
/// session is resumed through its parent, never as a top-level agent
/// (after a crash inside `delegate`, the child is the newest).
///
/// # Errors
///
/// An empty store (the store's own message), a store holding only
/// subagents' sessions, listing errors.
pub fn newest_top_level(store: &Store) -> anyhow::Result<SessionId> {
    let listed = store.list()?;
    if let Some(s) = listed.into_iter().find(|s| s.parent.is_none()) {
        return Ok(s.id);
    }
    store.latest()?;
    anyhow::bail!(
        "the store holds only subagents' sessions, which resume through their parent: name one to use it alone"
    )
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
    fn store_flags_are_quoted_for_the_shell() {
        assert_eq!(shell_quote("sqlite:/x/a.db"), "sqlite:/x/a.db");
        assert_eq!(shell_quote("/x/my store"), "'/x/my store'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
