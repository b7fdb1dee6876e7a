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

/// The cause chain joined with `: `. Library errors never print their
/// cause in their message (they return it as `source()`), so every link is
/// printed once.
fn chain(e: &anyhow::Error) -> String {
    cairn::with_causes(e.as_ref())
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
    fn an_io_error_is_printed_once_after_the_library_message() {
        let io = io::Error::other("disk on fire");
        let e = anyhow::Error::new(cairn::ReadError::Io {
            location: "s.jsonl".into(),
            source: io,
        })
        .context("stdin line 2");
        assert_eq!(chain(&e), "stdin line 2: cannot read s.jsonl: disk on fire");
    }

    #[test]
    fn broken_pipes_are_recognised_through_context() {
        let e = anyhow::Error::new(io::Error::from(io::ErrorKind::BrokenPipe)).context("writing");
        assert!(is_broken_pipe(&e));
        assert!(!is_broken_pipe(&anyhow::anyhow!("other")));
    }
}
