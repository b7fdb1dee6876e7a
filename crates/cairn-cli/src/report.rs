//! Error reporting: the cause chain, a likely fix, and broken-pipe detection.

use std::io::{self, Write};

use cairn::{OpenError, StoreError};

use crate::term::{Lines, clean};

/// Whether the error is a write to a closed pipe (`cairn log X | head -1`).
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}

/// Prints `error: {cause chain}` and, when one is known, a hint, to stderr.
pub fn print_error(e: &anyhow::Error) {
    let mut err = io::stderr().lock();
    // Messages may quote file contents: clean them like any other output.
    let _ = writeln!(err, "error: {}", clean(&chain(e), Lines::Keep));
    if let Some(h) = hint(e) {
        let _ = writeln!(err, "hint: {h}");
    }
}

/// The cause chain joined with `: `, leaving out a cause whose text the
/// message before it already includes (library errors often quote their source).
fn chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    let mut last = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !last.is_empty() && last.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
        last = text;
    }
    out
}

/// A likely fix for errors whose message does not already say it.
fn hint(e: &anyhow::Error) -> Option<&'static str> {
    for cause in e.chain() {
        let open = cause.downcast_ref::<OpenError>().or_else(|| {
            match cause.downcast_ref::<StoreError>() {
                Some(StoreError::Open(o)) => Some(o),
                _ => None,
            }
        });
        if let Some(OpenError::InUse { .. }) = open {
            return Some(
                "read commands (ls, show, context, tree, log, steps, memory, export, fsck) work while another process writes; fsck may report a line being written as a torn tail",
            );
        }
        if let Some(OpenError::Damaged(_)) = open {
            return Some(
                "`cairn fsck SESSION` lists every problem; `--salvage OUT` writes a repaired copy",
            );
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_quoted_by_its_message_is_not_repeated() {
        let inner = anyhow::anyhow!("the cause");
        let e = inner
            .context("it failed: the cause")
            .context("stdin line 2");
        assert_eq!(chain(&e), "stdin line 2: it failed: the cause");
    }

    #[test]
    fn broken_pipes_are_recognised_through_context() {
        let e = anyhow::Error::new(io::Error::from(io::ErrorKind::BrokenPipe)).context("writing");
        assert!(is_broken_pipe(&e));
        assert!(!is_broken_pipe(&anyhow::anyhow!("other")));
    }
}
