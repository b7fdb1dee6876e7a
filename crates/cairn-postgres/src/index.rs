//! The persisted indexes of a Postgres store (`docs/FORMAT.md` §16: the
//! core's index of a session, a cache of its log): one row of `indexes`
//! per session, written through a healthy writer's handle (`PgRows`'s
//! `Db::save_index`, in `log.rs`), checked against the rows at every open
//! (`cairn_sql::stale_prefix`), removed with its session (`ON DELETE
//! CASCADE`). Deleting one is always safe.

use cairn::{Access, IndexStore, IndexedOpen, IndexedPrefix, OpenError, SessionId, Visitor};
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

    fn open_indexed(
        &self,
        id: &SessionId,
        access: Access,
        prefix: IndexedPrefix,
        visit: &mut Visitor<'_>,
    ) -> Result<IndexedOpen, OpenError> {
        self.open_from(id, access, Some(prefix), visit)
    }
}
