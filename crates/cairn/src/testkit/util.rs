//! Helpers shared by the checks: failing with a message instead of
//! unwrapping, stores over a fixture's handles and the raw lines a backend
//! hands to its visitor.

use std::fmt::Display;

use super::fixture::Fixture;
use crate::backend::{Access, Backend, RawLine, TornTail};
use crate::id::SessionId;
use crate::record::Entry;
use crate::session::Session;
use crate::store::Store;

/// `unwrap` with a message: the checks are library code, where the
/// workspace forbids `unwrap`/`expect`, but they fail like tests.
pub(crate) trait OrFail<T> {
    /// The value, or a panic saying what failed and why.
    fn or_fail(self, what: impl Display) -> T;
}

impl<T, E: Display> OrFail<T> for Result<T, E> {
    #[track_caller]
    fn or_fail(self, what: impl Display) -> T {
        match self {
            Ok(v) => v,
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

impl<T> OrFail<T> for Option<T> {
    #[track_caller]
    fn or_fail(self, what: impl Display) -> T {
        match self {
            Some(v) => v,
            None => panic!("{what}: nothing there"),
        }
    }
}

/// A store over the fixture's backend.
pub(crate) fn store(f: &dyn Fixture) -> Store {
    Store::with_backend(f.backend())
}

/// A store over an independent handle, as another process would see it.
pub(crate) fn other_store(f: &dyn Fixture) -> Store {
    Store::with_backend(f.reopen())
}

/// Every line a backend hands to the visitor of [`Backend::open`], checking
/// that their indexes count from 0; and the torn tail it reported.
pub(crate) fn stored_lines(
    b: &dyn Backend,
    id: &SessionId,
    access: Access,
) -> (Vec<Vec<u8>>, Option<TornTail>) {
    let mut lines: Vec<Vec<u8>> = Vec::new();
    let mut visit = |raw: RawLine<'_>| {
        assert_eq!(
            raw.index,
            lines.len() as u64,
            "the visitor's indexes count the lines from 0"
        );
        lines.push(raw.bytes.to_vec());
        Ok(())
    };
    let opened = b
        .open(id, access, &mut visit)
        .or_fail(format_args!("open {id} through the raw seam"));
    assert_eq!(
        opened.log.len(),
        lines.len() as u64,
        "the log's length is the number of lines visited"
    );
    let bytes: u64 = lines.iter().map(|l| l.len() as u64).sum();
    assert_eq!(
        opened.log.byte_len(),
        bytes,
        "the log's byte length is the sum of its lines"
    );
    (lines, opened.torn)
}

/// The stored bytes of every record of an open session.
pub(crate) fn raw_records(s: &Session) -> Vec<Vec<u8>> {
    (0..s.len())
        .map(|seq| {
            s.raw_record(seq)
                .or_fail(format_args!("read record {seq} of {}", s.id()))
        })
        .collect()
}

/// Every entry of an open session, decoded, in append order.
pub(crate) fn all_entries(s: &Session) -> Vec<Entry> {
    s.nodes()
        .iter()
        .map(|n| {
            s.entry(&n.id)
                .or_fail(format_args!("read entry {}", n.id))
                .or_fail(format_args!("entry {} is in the index", n.id))
        })
        .collect()
}

/// Waits until the millisecond clock of record times has moved on, so that
/// the next record's `ts` sorts after every earlier one. Not a time limit:
/// it only waits for the clock.
pub(crate) fn next_millisecond() {
    let start = crate::time::now_rfc3339();
    while crate::time::now_rfc3339() == start {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}
