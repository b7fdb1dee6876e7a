//! Lookups and claims by SQL that the core's `Backend` trait has no room
//! for: the writer lease (inspect, break), summaries and status without
//! reading a payload, claiming interrupted sessions for recovery with
//! `FOR UPDATE SKIP LOCKED`, and following a session's new records.

use std::time::{Duration, Instant};

use cairn::{Backend, OpPhase, SessionId, SessionSummary, Status, StoreError};
use cairn_sql::summary::{self, count, uncount};
use cairn_sql::{Holder, Lease, Takeover};
use postgres::types::Type;

use crate::backend::PostgresBackend;
use crate::error::store_err;
use crate::lease;

impl PostgresBackend {
    /// The writer lease of a session, if a writer holds one (it may have
    /// expired: see [`Lease::holds`]).
    ///
    /// # Errors
    ///
    /// [`StoreError::NoSuchSession`] or database errors.
    pub fn lease(&self, id: &SessionId) -> Result<Option<Lease>, StoreError> {
        let schema = self.schema();
        let location = self.location(id);
        let row = self
            .pool()
            .run(|c| {
                c.query_typed_opt(
                    &format!(
                        "SELECT {} FROM {schema}.sessions WHERE id = $1",
                        lease::COLUMNS
                    ),
                    &[(&id.as_str(), Type::TEXT)],
                )
            })
            .map_err(store_err("read the lease of", &location))?
            .ok_or_else(|| self.no_such(id))?;
        lease::from_row(&row, 0).map_err(store_err("read the lease of", &location))
    }

    /// Breaks the writer lease of a session: with [`Takeover::IfAbandoned`]
    /// only if it expired or its holder is known to be dead, with
    /// [`Takeover::Force`] in any case (a holder that still runs is
    /// fenced: its next append fails). Returns the broken lease.
    ///
    /// # Errors
    ///
    /// [`cairn::OpenError::InUse`] (as [`StoreError::Open`]) when the holder
    /// may still run and `rule` is `IfAbandoned`;
    /// [`StoreError::NoSuchSession`]; database errors.
    pub fn break_lease(&self, id: &SessionId, rule: Takeover) -> Result<Option<Lease>, StoreError> {
        let Some(held) = self.lease(id)? else {
            return Ok(None);
        };
        rule.check(id, &held)?;
        let sid = self
            .sid(id)
            .map_err(store_err("break the lease of", &self.location(id)))?
            .ok_or_else(|| self.no_such(id))?;
        self.pool()
            .run(|c| {
                c.query_typed(
                    &lease::release_sql(self.schema()),
                    &[(&sid, Type::INT8), (&held.token, Type::INT8)],
                )
            })
            .map_err(store_err("break the lease of", &self.location(id)))?;
        Ok(Some(held))
    }

    /// Every session's summary, most recently updated first, by SQL over
    /// the `sessions` table (no payload is read), with the status the
    /// leases give.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn summaries(&self) -> Result<Vec<SessionSummary>, StoreError> {
        let rows = self.rows().map_err(store_err("list", &self.describe()))?;
        Ok(summary::listing(rows.into_iter().map(
            |(_, id, info, summary, lease)| (id, info, summary, lease.is_some_and(|l| l.holds())),
        )))
    }

    /// A session's status by SQL (no payload is read): its last operation's
    /// phase, and whether a writer holds its lease.
    ///
    /// # Errors
    ///
    /// [`StoreError::NoSuchSession`] or database errors.
    pub fn status(&self, id: &SessionId) -> Result<Status, StoreError> {
        let schema = self.schema();
        let location = self.location(id);
        let err = store_err("read", &location);
        let row = self
            .pool()
            .run(|c| {
                c.query_typed_opt(
                    &format!(
                        "SELECT phase, {} FROM {schema}.sessions WHERE id = $1",
                        lease::COLUMNS
                    ),
                    &[(&id.as_str(), Type::TEXT)],
                )
            })
            .map_err(&err)?
            .ok_or_else(|| self.no_such(id))?;
        let phase: String = row.try_get(0).map_err(&err)?;
        let held = lease::from_row(&row, 1).map_err(&err)?;
        Ok(summary::status(&phase, held.is_some_and(|l| l.holds())))
    }

    /// Claims, for this process, one session whose last operation was
    /// interrupted (open, and no live writer holds it), skipping those in
    /// `skip`: its row is locked with `FOR UPDATE SKIP LOCKED`, so workers
    /// claiming at the same time never get the same session and never wait
    /// for each other, and its lease is taken in the same transaction. The
    /// next [`Backend::open`] for writing in this process adopts the lease
    /// (`Store::open(id, Access::Write)`), as long as it has not expired.
    ///
    /// Returns `None` when no session is left to claim.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn claim(&self, skip: &[SessionId]) -> Result<Option<SessionId>, StoreError> {
        let schema = self.schema();
        let err = store_err("claim a session of", &self.describe());
        let me = Holder::me();
        let open = summary::phase_json(OpPhase::Open);
        let skip: Vec<&str> = skip.iter().map(SessionId::as_str).collect();
        let mut conn = self.pool().live().map_err(&err)?;
        let mut tx = conn.transaction().map_err(&err)?;
        // Expired or released leases, and (judged below) holders on this
        // machine that may be dead. Only the keys: the rows' values are
        // read again below, once locked (a locking query with ORDER BY may
        // hand back values from before a concurrent update).
        let rows = tx
            .query_typed(
                &format!(
                    "SELECT sid FROM {schema}.sessions
                      WHERE phase = $1 AND id <> ALL($2)
                        AND (lease_expires IS NULL OR lease_expires <= now()
                             OR holder_machine = $3)
                      ORDER BY updated
                      LIMIT 64
                      FOR UPDATE SKIP LOCKED"
                ),
                &[
                    (&open, Type::TEXT),
                    (&skip, Type::TEXT_ARRAY),
                    (&me.machine, Type::TEXT),
                ],
            )
            .map_err(&err)?;
        for row in &rows {
            let sid: i64 = row.try_get(0).map_err(&err)?;
            let now = tx
                .query_typed_one(
                    &format!(
                        "SELECT id, phase, {} FROM {schema}.sessions WHERE sid = $1",
                        lease::COLUMNS
                    ),
                    &[(&sid, Type::INT8)],
                )
                .map_err(&err)?;
            let phase: String = now.try_get(1).map_err(&err)?;
            let held = lease::from_row(&now, 2).map_err(&err)?;
            if phase != open || held.as_ref().is_some_and(Lease::holds) {
                continue;
            }
            let id: String = now.try_get(0).map_err(&err)?;
            let Ok(id) = SessionId::parse(&id) else {
                continue;
            };
            let token = lease::acquire(&mut tx, schema, sid, self.url().lease).map_err(&err)?;
            tx.commit().map_err(&err)?;
            self.claimed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(id.clone(), token);
            return Ok(Some(id));
        }
        Ok(None)
    }

    /// The records of a session from `seq` on (newest last), for a reader
    /// following a session another process writes: one indexed range read,
    /// never a rescan. Poll it (with the last `seq` seen + 1), or use
    /// [`PostgresBackend::wait_for_records`].
    ///
    /// # Errors
    ///
    /// [`StoreError::NoSuchSession`] or database errors.
    pub fn records_since(&self, id: &SessionId, seq: u64) -> Result<Vec<Vec<u8>>, StoreError> {
        let schema = self.schema();
        let location = self.location(id);
        let err = store_err("read", &location);
        let from = count(seq);
        let rows = self
            .pool()
            .run(|c| {
                c.query_typed(
                    &format!(
                        "SELECT r.payload FROM {schema}.sessions s
                           JOIN {schema}.records r ON r.session = s.sid
                          WHERE s.id = $1 AND r.seq >= $2 ORDER BY r.seq"
                    ),
                    &[(&id.as_str(), Type::TEXT), (&from, Type::INT8)],
                )
            })
            .map_err(&err)?;
        if rows.is_empty() && self.sid(id).map_err(&err)?.is_none() {
            return Err(self.no_such(id));
        }
        rows.iter()
            .map(|r| r.try_get::<_, Vec<u8>>(0))
            .collect::<Result<_, _>>()
            .map_err(&err)
    }

    /// Waits until session `id` holds more than `seq` records (polling its
    /// `records` column every `every`, a primary-key read), or `timeout`
    /// passes. Returns the number of records now.
    ///
    /// # Errors
    ///
    /// [`StoreError::NoSuchSession`] or database errors.
    pub fn wait_for_records(
        &self,
        id: &SessionId,
        seq: u64,
        every: Duration,
        timeout: Duration,
    ) -> Result<u64, StoreError> {
        let schema = self.schema();
        let err = store_err("read", &self.location(id));
        let start = Instant::now();
        loop {
            let row = self
                .pool()
                .run(|c| {
                    c.query_typed_opt(
                        &format!("SELECT records FROM {schema}.sessions WHERE id = $1"),
                        &[(&id.as_str(), Type::TEXT)],
                    )
                })
                .map_err(&err)?
                .ok_or_else(|| self.no_such(id))?;
            let records = uncount(row.try_get(0).map_err(&err)?);
            if records > seq || start.elapsed() >= timeout {
                return Ok(records);
            }
            std::thread::sleep(every);
        }
    }
}
