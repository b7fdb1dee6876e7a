//! [`PostgresBackend`]: the core's [`Backend`] over one Postgres schema —
//! create, open (lease, then one ordered read of the session's records),
//! list, stamp, remove, and the listing cache made from the `sessions`
//! table. The SQL-only lookups (summaries, claims, following) are in
//! `queries.rs`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use cairn::OpPhase;
use cairn::{Access, Backend, Catalog, Claim, IndexStore, Log};
use cairn::{OpenError, SessionId, StoreError};
use cairn::{Opening, Stamp, Visitor};
use cairn_sql::summary::{self, HeaderInfo, Summary, count};
use cairn_sql::{Holder, Lease, Scan, Scanned, SqlStore, Writer};
use postgres::Transaction;
use postgres::types::Type;

use crate::config::PgUrl;
use crate::error::{PgError, io, open_err, store_err};
use crate::lease;
use crate::log::{PgLog, PgRows};
use crate::pool::Pool;
use crate::schema;
use crate::shared::{Shared, Sql};

/// One session's row: key, id, header facts, summary, lease.
pub(crate) type Row = (i64, SessionId, HeaderInfo, Summary, Option<Lease>);

/// Many sessions in one Postgres schema, for many processes and hosts at
/// once. See the crate docs for the schema, durability and the lease.
#[derive(Debug)]
pub struct PostgresBackend {
    pub(crate) shared: Arc<Shared>,
    /// Leases this process took by claiming, by session: the next open for
    /// writing adopts the lease instead of taking a new one.
    pub(crate) claimed: Mutex<HashMap<SessionId, i64>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl PostgresBackend {
    /// Connects to the store a `postgres://` (or `postgresql://`) URL names,
    /// checks its schema is cairn's and of a version this build knows, and
    /// applies pending migrations (creating the schema if needed). See
    /// [`crate::PgUrl`] for cairn's URL parameters.
    ///
    /// # Errors
    ///
    /// [`PgError::BadUrl`], [`PgError::Connect`], [`PgError::NewerSchema`],
    /// [`PgError::NotCairn`], or a failed migration.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use cairn::{EntryBody, Message, NewSession, Role, Store};
    ///
    /// let backend = cairn_postgres::PostgresBackend::open("postgres://postgres@127.0.0.1/test")?;
    /// let store = Store::with_backend(Arc::new(backend));
    /// let s = store.create(NewSession::default())?;
    /// s.append(EntryBody::Message(Message::text(Role::User, "hello")))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open(url: &str) -> Result<PostgresBackend, PgError> {
        let url = PgUrl::parse(url)?;
        let pool = Pool::new(url.config()?);
        {
            let mut conn = pool.get().map_err(|source| PgError::Connect {
                url: url.shown.clone(),
                source,
            })?;
            schema::prepare(&mut conn, &url.schema)?;
        }
        let sql = Sql::new(&url.schema);
        Ok(PostgresBackend {
            shared: Arc::new(Shared { url, pool, sql }),
            claimed: Mutex::new(HashMap::new()),
        })
    }

    /// The store's URL (password hidden) and settings.
    pub fn url(&self) -> &PgUrl {
        &self.shared.url
    }

    /// The schema version of the store (as applied in the database).
    ///
    /// # Errors
    ///
    /// The server cannot be reached.
    pub fn schema_version(&self) -> Result<i32, PgError> {
        let mut conn = self.shared.pool.live().map_err(|source| PgError::Connect {
            url: self.shared.url.shown.clone(),
            source,
        })?;
        schema::applied(&mut conn, &self.shared.url.schema)
    }

    /// `synchronous_commit` as it is in force on cairn's connections: `on`
    /// unless a pooler in front of the server dropped cairn's `SET` (see
    /// the crate docs on durability).
    ///
    /// # Errors
    ///
    /// The server cannot be reached.
    pub fn synchronous_commit(&self) -> Result<String, StoreError> {
        self.shared
            .pool
            .run(|c| c.query_typed_one("SELECT current_setting('synchronous_commit')", &[]))
            .and_then(|r| r.try_get(0))
            .map_err(store_err("read the settings of", &self.describe()))
    }

    pub(crate) fn schema(&self) -> &str {
        &self.shared.url.schema
    }

    pub(crate) fn pool(&self) -> &Pool {
        &self.shared.pool
    }

    pub(crate) fn no_such(&self, id: &SessionId) -> StoreError {
        StoreError::NoSuchSession {
            query: id.to_string(),
            store: self.describe(),
        }
    }

    fn not_found(&self, id: &SessionId) -> OpenError {
        OpenError::NotFound {
            session: id.to_string(),
            location: self.describe(),
        }
    }

    pub(crate) fn sid(&self, id: &SessionId) -> Result<Option<i64>, postgres::Error> {
        self.shared
            .pool
            .run(|c| c.query_typed_opt(&self.shared.sql.sid, &[(&id.as_str(), Type::TEXT)]))?
            .map(|r| r.try_get(0))
            .transpose()
    }

    /// Runs `f` in a transaction on a live connection with session `id`'s
    /// row locked (`FOR UPDATE`), given its key and lease; `missing` is the
    /// error when there is no such session. What `f` did is committed if it
    /// returns `Ok`, else rolled back.
    fn with_locked_row<T, E>(
        &self,
        id: &SessionId,
        err: impl Fn(postgres::Error) -> E,
        missing: E,
        f: impl FnOnce(&mut Transaction<'_>, i64, Option<Lease>) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut conn = self.shared.pool.live().map_err(&err)?;
        let mut tx = conn.transaction().map_err(&err)?;
        let (sid, held) = self.lock_row(&mut tx, id).map_err(&err)?.ok_or(missing)?;
        let out = f(&mut tx, sid, held)?;
        tx.commit().map_err(&err)?;
        Ok(out)
    }

    /// Locks session `id`'s row for the rest of `tx` (`FOR UPDATE`): its key
    /// and lease, `None` if there is no such session.
    fn lock_row(
        &self,
        tx: &mut postgres::Transaction<'_>,
        id: &SessionId,
    ) -> Result<Option<(i64, Option<Lease>)>, postgres::Error> {
        let row = tx.query_typed_opt(
            &format!(
                "SELECT sid, {} FROM {}.sessions WHERE id = $1 FOR UPDATE",
                lease::COLUMNS,
                self.schema()
            ),
            &[(&id.as_str(), Type::TEXT)],
        )?;
        let Some(row) = row else {
            return Ok(None);
        };
        Ok(Some((row.try_get(0)?, lease::from_row(&row, 1)?)))
    }

    /// Every session's row: key, id, header facts, summary, lease.
    pub(crate) fn rows(&self) -> Result<Vec<Row>, postgres::Error> {
        let schema = self.schema();
        let rows = self.shared.pool.run(|c| {
            c.query_typed(
                &format!(
                    "SELECT sid, id, header, created, forked_from, parent, updated, title,
                            first_message, op_state, entries, records, bytes, {}
                       FROM {schema}.sessions",
                    lease::COLUMNS
                ),
                &[],
            )
        })?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let id: String = r.try_get(1)?;
            // Rows are written by cairn with valid ids; skip anything else.
            let Ok(id) = SessionId::parse(&id) else {
                continue;
            };
            let info = HeaderInfo {
                json: r.try_get(2)?,
                created: r.try_get(3)?,
                forked_from: r.try_get(4)?,
                parent: r.try_get(5)?,
            };
            let summary = summary_at(r, 6)?;
            out.push((r.try_get(0)?, id, info, summary, lease::from_row(r, 13)?));
        }
        Ok(out)
    }
}

/// The summary columns `updated, title, first_message, op_state, entries,
/// records, bytes` of a row, from column `at` on.
fn summary_at(r: &postgres::Row, at: usize) -> Result<Summary, postgres::Error> {
    Ok(Summary::from_columns(
        r.try_get(at)?,
        r.try_get(at + 1)?,
        r.try_get(at + 2)?,
        r.try_get(at + 3)?,
        [r.try_get(at + 4)?, r.try_get(at + 5)?, r.try_get(at + 6)?],
    ))
}

/// The open path's Postgres side (`cairn_sql::open_from`): every query on
/// the backend's pool, so an open holds no connection of its own.
impl SqlStore for PostgresBackend {
    type Conn = ();

    fn connect(&self, _location: &str) -> Result<(), OpenError> {
        Ok(())
    }

    /// Takes the writer lease of session `id` (replacing an expired or dead
    /// holder's; adopting one this process claimed).
    fn take_lease(
        &self,
        (): &mut (),
        id: &SessionId,
        location: &str,
    ) -> Result<(i64, i64), OpenError> {
        let claimed = lock(&self.claimed).remove(id);
        let err = open_err("lock", location);
        let schema = self.schema();
        self.with_locked_row(id, &err, self.not_found(id), |tx, sid, held| {
            if let Some(held) = held {
                let mine = claimed == Some(held.token) && &held.holder == Holder::me();
                if mine && !held.expired {
                    return Ok((sid, held.token));
                }
                if held.holds() {
                    return Err(held.in_use(id));
                }
            }
            let token = lease::acquire(tx, schema, sid, self.shared.url.lease).map_err(&err)?;
            Ok((sid, token))
        })
    }

    fn find(&self, (): &(), id: &SessionId, location: &str) -> Result<i64, OpenError> {
        self.sid(id)
            .map_err(open_err("read", location))?
            .ok_or_else(|| self.not_found(id))
    }

    fn load_summary(&self, (): &(), sid: i64) -> std::io::Result<Summary> {
        let r = self
            .shared
            .pool
            .run(|c| c.query_typed_one(&self.shared.sql.summary, &[(&sid, Type::INT8)]))
            .map_err(io)?;
        summary_at(&r, 0).map_err(io)
    }

    fn row(&self, (): &(), sid: i64, seq: u64) -> std::io::Result<Option<Vec<u8>>> {
        let seq = count(seq);
        self.shared
            .pool
            .run(|c| {
                c.query_typed_opt(
                    &self.shared.sql.row,
                    &[(&sid, Type::INT8), (&seq, Type::INT8)],
                )
            })
            .and_then(|r| r.map(|r| r.try_get(0)).transpose())
            .map_err(io)
    }

    /// The rows in one query, read whole before they are handed on.
    fn scan(
        &self,
        (): &(),
        sid: i64,
        scan: &mut Scan<'_>,
        visit: &mut Visitor<'_>,
    ) -> Result<(), OpenError> {
        let from = count(scan.next_index());
        let rows = self
            .shared
            .pool
            .run(|c| {
                c.query_typed(
                    &self.shared.sql.scan_from,
                    &[(&sid, Type::INT8), (&from, Type::INT8)],
                )
            })
            .map_err(|e| scan.failed(io(e)))?;
        for row in &rows {
            let seq: i64 = row.try_get(0).map_err(|e| scan.failed(io(e)))?;
            let bytes = row.try_get(1).map_err(|e| scan.failed(io(e)))?;
            scan.row(seq, bytes, visit)?;
        }
        Ok(())
    }

    fn release(&self, (): &(), sid: i64, _id: &SessionId, token: i64) {
        let _ = self.shared.pool.run(|c| {
            c.query_typed(
                &self.shared.sql.release,
                &[(&sid, Type::INT8), (&token, Type::INT8)],
            )
        });
    }

    /// The log handle, with its lease's heartbeat for a writer.
    fn log(
        &self,
        location: String,
        (): (),
        sid: i64,
        _id: &SessionId,
        scanned: Scanned,
        writer: Option<Writer>,
    ) -> Box<dyn Log> {
        let token = writer.as_ref().map(|w| w.token);
        let log = PgLog::new(
            location,
            PgRows::new(sid, Arc::clone(&self.shared)),
            scanned,
            writer,
        );
        if let Some(token) = token {
            log.db().start_heartbeat(token, log.poisoner());
        }
        Box::new(log)
    }
}

impl Backend for PostgresBackend {
    fn describe(&self) -> String {
        self.shared.url.shown.clone()
    }

    fn location(&self, id: &SessionId) -> String {
        format!("{}#{id}", self.shared.url.shown)
    }

    fn create(&self, id: &SessionId, header: &[u8]) -> Result<Box<dyn Log>, OpenError> {
        let location = self.location(id);
        let (info, summary) = summary::header_of(&location, header)?;
        let err = open_err("create", &location);
        let schema = self.schema();
        let mut conn = self.shared.pool.live().map_err(&err)?;
        let mut tx = conn.transaction().map_err(&err)?;
        let phase = summary::phase_json(OpPhase::None);
        let op_state = summary::op_state_json(&summary.fold.op);
        let bytes = count(summary.bytes);
        let sid: Option<i64> = tx
            .query_typed_opt(
                &format!(
                    "INSERT INTO {schema}.sessions (id, header, created, updated, title,
                         first_message, forked_from, parent, phase, op_state, entries, records,
                         bytes)
                     VALUES ($1, $2, $3, $4, $5, NULL, $6, $7, $8, $9, 0, 1, $10)
                     ON CONFLICT (id) DO NOTHING
                     RETURNING sid"
                ),
                &[
                    (&id.as_str(), Type::TEXT),
                    (&info.json, Type::TEXT),
                    (&info.created, Type::TEXT),
                    (&summary.fold.updated, Type::TEXT),
                    (&summary.fold.title, Type::TEXT),
                    (&info.forked_from, Type::TEXT),
                    (&info.parent, Type::TEXT),
                    (&phase, Type::TEXT),
                    (&op_state, Type::TEXT),
                    (&bytes, Type::INT8),
                ],
            )
            .map_err(&err)?
            .map(|r| r.try_get(0))
            .transpose()
            .map_err(&err)?;
        let Some(sid) = sid else {
            return Err(OpenError::AlreadyExists {
                session: id.to_string(),
                location: self.describe(),
            });
        };
        let token = lease::acquire(&mut tx, schema, sid, self.shared.url.lease).map_err(&err)?;
        tx.query_typed(
            &format!(
                "INSERT INTO {schema}.records (session, seq, kind, id, parent, crc, payload, writer)
                 VALUES ($1, 0, 'header', NULL, NULL, $2, $3, $4)"
            ),
            &[
                (&sid, Type::INT8),
                (&summary::crc_of(header), Type::INT8),
                (&header, Type::BYTEA),
                (&token, Type::INT8),
            ],
        )
        .map_err(&err)?;
        tx.commit().map_err(&err)?;
        drop(conn);
        let writer = Writer { token, summary };
        Ok(self.log(
            location,
            (),
            sid,
            id,
            Scanned::created(header),
            Some(writer),
        ))
    }

    fn open(&self, id: &SessionId, access: Access, visit: &mut Visitor<'_>) -> Opening {
        cairn_sql::open(self, id, access, visit)
    }

    fn stored_lines(&self, id: &SessionId) -> Result<Vec<Vec<u8>>, OpenError> {
        let location = self.location(id);
        let err = open_err("read", &location);
        let sid = self
            .sid(id)
            .map_err(&err)?
            .ok_or_else(|| self.not_found(id))?;
        let rows = self
            .shared
            .pool
            .run(|c| c.query_typed(&self.shared.sql.scan, &[(&sid, Type::INT8)]))
            .map_err(&err)?;
        rows.iter()
            .map(|r| r.try_get::<_, Vec<u8>>(1))
            .collect::<Result<_, _>>()
            .map_err(&err)
    }

    fn list(&self) -> Result<Vec<SessionId>, StoreError> {
        let schema = self.schema();
        let rows = self
            .shared
            .pool
            .run(|c| c.query_typed(&format!("SELECT id FROM {schema}.sessions"), &[]))
            .map_err(store_err("list", &self.describe()))?;
        Ok(rows
            .iter()
            .filter_map(|r| r.try_get::<_, String>(0).ok())
            .filter_map(|i| SessionId::parse(&i).ok())
            .collect())
    }

    fn stamp(&self, id: &SessionId) -> Result<Stamp, StoreError> {
        let schema = self.schema();
        let row = self
            .shared
            .pool
            .run(|c| {
                c.query_typed_opt(
                    &format!("SELECT bytes, records FROM {schema}.sessions WHERE id = $1"),
                    &[(&id.as_str(), Type::TEXT)],
                )
            })
            .map_err(store_err("inspect", &self.location(id)))?
            .ok_or_else(|| self.no_such(id))?;
        let get = |i: usize| {
            row.try_get::<_, i64>(i).map_err(|e| {
                StoreError::Io(cairn::IoFailure::new("inspect", self.location(id), io(e)))
            })
        };
        Ok(summary::stamp(get(0)?, get(1)?))
    }

    fn writer_active(&self, id: &SessionId) -> bool {
        self.lease(id).ok().flatten().is_some_and(|l| l.holds())
    }

    fn remove(&self, id: &SessionId) -> Result<(), StoreError> {
        let location = self.location(id);
        let err = store_err("remove", &location);
        let schema = self.schema();
        self.with_locked_row(id, &err, self.no_such(id), |tx, sid, held| {
            if let Some(held) = held.filter(Lease::holds) {
                return Err(held.in_use(id).into());
            }
            // The row alone: the trigger of migration 3 deletes its records
            // in this statement (one place that does it, for cairn and for
            // anyone else deleting a row), and its persisted index goes with
            // it (`ON DELETE CASCADE`). The row is locked, so no append of
            // it runs meanwhile.
            tx.query_typed(
                &format!("DELETE FROM {schema}.sessions WHERE sid = $1"),
                &[(&sid, Type::INT8)],
            )
            .map_err(&err)?;
            Ok(())
        })
    }

    /// The listing cache, made on the fly from the `sessions` table (no
    /// payload is read): every session with the stamp [`Backend::stamp`]
    /// reports, so the core's listing trusts every entry.
    fn load_catalog(&self) -> Option<Catalog> {
        let rows = self.rows().ok()?;
        Some(summary::catalog(
            rows.into_iter().map(|(_, id, info, s, _)| (id, info, s)),
        ))
    }

    /// Nothing to save: the `sessions` table is the catalog, kept current by
    /// every append.
    fn save_catalog(&self, _catalog: &Catalog) {}

    /// [`PostgresBackend::claim`]: `FOR UPDATE SKIP LOCKED`, lease taken.
    fn claim_interrupted(&self, skip: &[SessionId]) -> Result<Claim, StoreError> {
        Ok(match self.claim(skip)? {
            Some(id) => Claim::Claimed(id),
            None => Claim::NoneLeft,
        })
    }

    /// The persisted indexes, in the schema's `indexes` table (`index.rs`).
    fn indexes(&self) -> Option<&dyn IndexStore> {
        Some(self)
    }
}
