//! How the agent names its store on a command line, and which session
//! "the newest" is (`--continue`, the CLI's `--last`). Opening a store from
//! its location, and where tools keep their own files beside it, is
//! `cairn_stores`' job.

use std::path::Path;

use cairn::{SessionId, Store};

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
