//! The persisted indexes of an SQLite store (`docs/STORES.md` §4: the
//! core's index of a session, a cache of its log): one row of `indexes`
//! per session, written through a healthy writer's handle (`SqliteRows`'s
//! `Db::save_index`, in `log.rs`), checked against the rows at every open
//! (`cairn_sql::stale_prefix`), removed with its session or when a block of
//! it is found damaged (`cairn_sql::LoadedIndex`). Deleting one is
//! always safe.

use std::sync::Arc;

use cairn::{IndexBytes, IndexStore, IndexedOpen, OpenError, OpenFrom, SessionId, Visitor};
use cairn_sql::LoadedIndex;
use rusqlite::OptionalExtension;

use crate::backend::SqliteBackend;

impl IndexStore for SqliteBackend {
    fn load_index(&self, id: &SessionId) -> Option<Vec<u8>> {
        self.conn()
            .prepare_cached(
                "SELECT i.bytes FROM indexes i JOIN sessions s ON s.sid = i.session
                 WHERE s.id = ?1",
            )
            .and_then(|mut s| s.query_row([id.as_str()], |r| r.get(0)).optional())
            .ok()
            .flatten()
    }

    /// The row's bytes, and its removal (on a connection of its own) when
    /// a block of it is found damaged.
    fn open_index(&self, id: &SessionId) -> Option<Arc<dyn IndexBytes>> {
        let bytes = self.load_index(id)?;
        let (path, id) = (self.path().to_owned(), id.clone());
        Some(Arc::new(LoadedIndex::new(bytes, move || {
            crate::schema::connect(&path)
                .ok()
                .and_then(|c| {
                    c.execute(
                        "DELETE FROM indexes WHERE session = (SELECT sid FROM sessions WHERE id = ?1)",
                        [id.as_str()],
                    )
                    .ok()
                })
                .is_some_and(|n| n > 0)
        })))
    }

    fn open_from(
        &self,
        f: OpenFrom<'_>,
        visit: &mut Visitor<'_>,
    ) -> Result<IndexedOpen, OpenError> {
        cairn_sql::open_from(self, f.id, f.access, f.prefix, visit)
    }
}
