//! Opening a session from arbitrary bytes, through the file backend on an
//! in-memory disk (`SimFs`): read-only and for writing, then `fsck`.
//! No panic; a reader changes nothing; reader and writer agree; a writer
//! changes nothing but cutting a torn tail (what it keeps is a prefix of the
//! input); an opened session's context is `Context::fold` of its entries;
//! fsck reports damage exactly when the reader refuses the session.

#![no_main]

#[allow(dead_code, unused_imports, clippy::all)]
#[path = "../../crates/cairn/tests/support/simfs.rs"]
mod simfs;

use std::cell::RefCell;
use std::path::Path;
use std::sync::Arc;

use cairn::testkit;
use cairn::{Access, FileBackend, OpenError, Session, SessionId, Store};
use libfuzzer_sys::fuzz_target;

/// The session id the seed corpus was written with (`crates/cairn/tests/fuzz_seeds.rs`).
const ID: &str = "01kfzzz0000000000000000000";

thread_local! {
    static DIR: RefCell<Option<tempfile::TempDir>> = const { RefCell::new(None) };
}

fn consistent(s: &Session) {
    testkit::assert_folds("open_session", s, "as opened");
    let _ = s.verdict();
    let _ = s.steps();
}

fuzz_target!(|data: &[u8]| {
    let id = SessionId::parse(ID).expect("a valid id");
    let fs = simfs::SimFs::new();
    let dir = Path::new("/s/sessions");
    fs.mkdir_durable(dir);
    let path = dir.join(format!("{ID}.jsonl"));
    fs.install(&path, data);
    let store = Store::with_backend(Arc::new(FileBackend::with_vfs(dir, fs.vfs())));

    let reader = store.open(&id, Access::Read);
    assert_eq!(
        fs.read(&path).as_deref(),
        Some(data),
        "a reader changed the file"
    );
    if let Ok(r) = &reader {
        consistent(r);
    }
    let writer = store.open(&id, Access::Write);
    let after = fs.read(&path).expect("the file is still there");
    match &writer {
        Ok(w) => {
            assert!(
                data.starts_with(&after),
                "a writer changed more than a torn tail"
            );
            let torn = w.open_report().torn.clone();
            assert_eq!(
                torn.is_some(),
                after.len() < data.len(),
                "an unreported cut, or a report without one"
            );
            if let Some(t) = torn {
                assert_eq!(t.offset, after.len() as u64);
                let saved = t.saved_to.as_deref().and_then(|p| fs.read(Path::new(p)));
                assert_eq!(
                    saved.as_deref(),
                    Some(&data[after.len()..]),
                    "the torn tail was not saved whole"
                );
            }
            consistent(w);
            match &reader {
                Ok(r) => {
                    assert_eq!(
                        r.len(),
                        w.len(),
                        "reader and writer disagree on the records"
                    );
                    assert_eq!(
                        *r.context(),
                        *w.context(),
                        "reader and writer disagree on the context"
                    );
                }
                Err(e) => panic!("a writer opened what a reader refused: {e}"),
            }
            let _ = w.append(cairn::EntryBody::Message(cairn::Message::text(
                cairn::Role::User,
                "after",
            )));
        }
        Err(e) => {
            assert_eq!(after, data, "a refused writer changed the file");
            assert!(
                reader.is_err(),
                "a reader opened what a writer refused: {e}"
            );
            if let OpenError::Damaged(d) = e {
                assert!(d.line >= 1 && (d.offset as usize) < data.len().max(1));
            }
        }
    }
    let reader_refused = reader.is_err();
    drop(writer);
    drop(reader);

    // fsck reads a real file.
    DIR.with(|d| {
        let mut d = d.borrow_mut();
        let dir = d.get_or_insert_with(|| tempfile::tempdir().expect("a temporary directory"));
        let copy = dir.path().join(format!("{ID}.jsonl"));
        std::fs::write(&copy, data).expect("write the copy");
        if let Ok(report) = cairn::fsck::check_file(&copy) {
            assert_eq!(
                report.is_damaged(),
                reader_refused,
                "fsck and the reader disagree: {report:?}"
            );
        }
    });
});
