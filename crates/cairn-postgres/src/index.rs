//! The persisted indexes of a Postgres store (`docs/STORES.md` §4: the
//! core's index of a session, a cache of its log): one row of `indexes`
//! per session, written through a healthy writer's handle (`PgRows`'s
//! `Db::save_index`, in `log.rs`), checked against the rows at every open
//! (`cairn_sql::stale_prefix`), removed with its session (`ON DELETE
//! CASCADE`) or when a block of it is found damaged
//! (`cairn_sql::LoadedIndex`). Deleting one is always safe.

use std::sync::Arc;

use cairn::{IndexBytes, IndexStore, IndexedOpen, OpenError, OpenFrom, SessionId, Visitor};
use cairn_sql::LoadedIndex;
use postgres::types::Type;

use crate::backend::PostgresBackend;

impl IndexStore for PostgresBackend {
    fn load_index(&self, id: &SessionId) -> Option<Vec<u8>> {
        let schema = self.schema();
        self.pool()
            .run(|c| {
                c.query_typed_opt(
                    &format!(
                        "SELECT i.bytes FROM {schema}.indexes i
                           JOIN {schema}.sessions s ON s.sid = i.session
                          WHERE s.id = $1"
                    ),
                    &[(&id.as_str(), Type::TEXT)],
                )
            })
            .ok()
            .flatten()
            .and_then(|r| r.try_get(0).ok())
    }

    /// The row's bytes, and its removal when a block of it is found
    /// damaged.
    fn open_index(&self, id: &SessionId) -> Option<Arc<dyn IndexBytes>> {
        let bytes = self.load_index(id)?;
        let (shared, id) = (Arc::clone(&self.shared), id.clone());
        Some(Arc::new(LoadedIndex::new(bytes, move || {
            let schema = &shared.url.schema;
            shared
                .pool
                .run(|c| {
                    c.execute_typed(
                        &format!(
                            "DELETE FROM {schema}.indexes
                              WHERE session = (SELECT sid FROM {schema}.sessions WHERE id = $1)"
                        ),
                        &[(&id.as_str(), Type::TEXT)],
                    )
                })
                .is_ok_and(|n| n > 0)
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
