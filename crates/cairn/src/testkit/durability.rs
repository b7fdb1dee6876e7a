//! Durability modes: whatever the mode, an acknowledged record is visible
//! to another handle at once and present, byte for byte, after reopening;
//! group commit from many threads loses and duplicates nothing.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::build::user;
use super::fixture::Fixture;
use super::util::{OrFail, other_store, raw_records, store, stored_lines};
use crate::backend::Access;
use crate::commit::Durability;
use crate::id::EntryId;
use crate::session::NewSession;

/// In `Sync`, `Group` and `Buffered` mode, every acknowledged append is
/// seen by a reader on another handle while the writer is still open, and
/// by writers and readers after it is dropped, as the exact bytes written.
/// An explicit `sync` after buffered appends succeeds.
pub fn every_durability_mode_keeps_acknowledged_records(f: &dyn Fixture) {
    let name = f.name();
    for mode in [Durability::Sync, Durability::Group, Durability::Buffered] {
        let s = store(f)
            .create(NewSession::default())
            .or_fail(format_args!("{name}: create"));
        let id = s.id().clone();
        s.set_durability(mode);
        let mut acked = Vec::new();
        for i in 0..25 {
            let a = s
                .append(user(&format!("{} record {i}", mode.as_str())))
                .or_fail(format_args!("{name}: append in {mode:?} mode"));
            acked.push(a.seq);
        }
        assert_eq!(
            acked,
            (1..=25).collect::<Vec<u64>>(),
            "{name}: seqs count up"
        );
        let written = raw_records(&s);
        let (seen, _) = stored_lines(&*f.reopen(), &id, Access::Read);
        assert!(
            seen == written,
            "{name}: a reader on another handle sees every acknowledged record ({mode:?})"
        );
        s.sync()
            .or_fail(format_args!("{name}: sync in {mode:?} mode"));
        drop(s);
        let again = other_store(f)
            .open(&id, Access::Write)
            .or_fail(format_args!("{name}: reopen after {mode:?} appends"));
        assert!(
            raw_records(&again) == written,
            "{name}: every acknowledged record survives ({mode:?})"
        );
    }
}

/// Eight threads append to one session in `Group` mode at once: every
/// acknowledged record is stored exactly once, at the `seq` it was
/// acknowledged with, and `seq`s have no gap.
pub fn eight_threads_in_group_mode_lose_nothing(f: &dyn Fixture) {
    const THREADS: usize = 8;
    const EACH: usize = 40;
    let name = f.name();
    let s = store(f)
        .create(NewSession::default())
        .or_fail(format_args!("{name}: create"));
    let id = s.id().clone();
    s.set_durability(Durability::Group);
    let s = Arc::new(s);
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                (0..EACH)
                    .map(|i| {
                        s.append(user(&format!("thread {t} record {i}")))
                            .map(|a| (a.seq, a.id, format!("thread {t} record {i}")))
                            .map_err(|e| e.to_string())
                    })
                    .collect::<Result<Vec<_>, String>>()
            })
        })
        .collect();
    let mut acked: BTreeMap<u64, (Option<EntryId>, String)> = BTreeMap::new();
    for h in handles {
        let got = match h.join() {
            Ok(r) => r.or_fail(format_args!("{name}: a group-commit append")),
            Err(_) => panic!("{name}: an appending thread panicked"),
        };
        for (seq, eid, text) in got {
            assert!(
                acked.insert(seq, (eid, text)).is_none(),
                "{name}: seq {seq} acknowledged twice"
            );
        }
    }
    let total = (THREADS * EACH) as u64;
    assert_eq!(
        acked.keys().copied().collect::<Vec<_>>(),
        (1..=total).collect::<Vec<_>>(),
        "{name}: acknowledged seqs are 1..={total} without gaps"
    );
    drop(s);
    let again = other_store(f)
        .open(&id, Access::Write)
        .or_fail(format_args!("{name}: reopen"));
    assert_eq!(again.len(), total + 1, "{name}: every record is stored");
    let nodes = again.nodes();
    for (seq, (eid, text)) in &acked {
        let node = &nodes[(*seq - 1) as usize];
        assert_eq!(
            Some(&node.id),
            eid.as_ref(),
            "{name}: record {seq} is the acknowledged entry"
        );
        let e = again
            .entry(&node.id)
            .or_fail("read an entry")
            .or_fail("the entry exists");
        match e.body {
            crate::record::EntryBody::Message(m) => assert_eq!(&m.plain_text(), text),
            other => panic!("{name}: record {seq} is a {}", other.kind()),
        }
    }
}
