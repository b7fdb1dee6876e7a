//! Lookups by SQL that the core's `Backend` trait has no room for yet:
//! summaries and status without reading a payload, entry and children
//! lookups by the `id` and `parent` columns, and the writer lease (inspect,
//! break).

use cairn::Backend;
use cairn::{EntryId, SessionId, SessionSummary, Status, StoreError};
use cairn_sql::summary::{self, HeaderInfo, Summary};
use cairn_sql::{Lease, Takeover};
use rusqlite::{OptionalExtension, TransactionBehavior, params};

use crate::backend::{SqliteBackend, summary_at, whole};
use crate::error::store_err;
use crate::lease;
use crate::schema::{SUMMARY_COLUMNS, SUMMARY_FROM};

impl SqliteBackend {
    /// The writer lease of a session, if one is recorded (its holder may be
    /// dead: see [`Lease::holds`]).
    ///
    /// # Errors
    ///
    /// [`StoreError::NoSuchSession`] or SQLite errors.
    pub fn lease(&self, id: &SessionId) -> Result<Option<Lease>, StoreError> {
        let conn = self.conn();
        let location = self.location(id);
        let sid = Self::sid(&conn, id)
            .map_err(store_err("read", &location))?
            .ok_or_else(|| self.no_such(id))?;
        lease::get(&conn, sid).map_err(store_err("read the lease of", &location))
    }

    /// Breaks the writer lease of a session so that a new writer can open
    /// it: with [`Takeover::IfAbandoned`] only if its holder is known to be
    /// dead, with [`Takeover::Force`] in any case (the holder, if it still
    /// runs, is fenced: its next append fails). Returns the broken lease.
    ///
    /// # Errors
    ///
    /// [`cairn::OpenError::InUse`] (as [`StoreError::Open`]) when the holder
    /// may still run and `rule` is `IfAbandoned`;
    /// [`StoreError::NoSuchSession`]; SQLite errors.
    pub fn break_lease(&self, id: &SessionId, rule: Takeover) -> Result<Option<Lease>, StoreError> {
        let mut conn = self.conn();
        let location = self.location(id);
        let err = store_err("break the lease of", &location);
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(&err)?;
        let (sid, Some(held)) = self.leased(&tx, id, &err)? else {
            return Ok(None);
        };
        rule.check(id, &held)?;
        lease::release(&tx, sid, id.as_str(), held.token).map_err(&err)?;
        tx.commit().map_err(&err)?;
        Ok(Some(held))
    }

    /// Every session's summary, most recently updated first, by SQL over
    /// the `sessions` table and each session's last record (no payload is
    /// read), with the status the leases give.
    ///
    /// # Errors
    ///
    /// SQLite errors.
    pub fn summaries(&self) -> Result<Vec<SessionSummary>, StoreError> {
        let describe = self.describe();
        let err = store_err("list", &describe);
        let rows = self.rows().map_err(&err)?;
        let conn = self.conn();
        let mut out = Vec::with_capacity(rows.len());
        for (sid, id, info, summary) in rows {
            let held = lease::get(&conn, sid).map_err(&err)?;
            out.push((id, info, summary, held.is_some_and(|l| l.holds())));
        }
        Ok(summary::listing(out))
    }

    /// A session's status by SQL (no payload is read): its last operation's
    /// phase, and whether a writer holds its lease.
    ///
    /// # Errors
    ///
    /// [`StoreError::NoSuchSession`] or SQLite errors.
    pub fn status(&self, id: &SessionId) -> Result<Status, StoreError> {
        let conn = self.conn();
        let location = self.location(id);
        let row: Option<(i64, String)> = conn
            .prepare_cached("SELECT sid, phase FROM sessions WHERE id = ?1")
            .and_then(|mut s| {
                s.query_row([id.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()
            })
            .map_err(store_err("read", &location))?;
        let (sid, phase) = row.ok_or_else(|| self.no_such(id))?;
        let held = lease::get(&conn, sid).map_err(store_err("read", &location))?;
        Ok(summary::status(&phase, held.is_some_and(|l| l.holds())))
    }

    /// The `seq` of an entry, by id, through the index (no payload read).
    ///
    /// # Errors
    ///
    /// [`StoreError::NoSuchSession`] or SQLite errors.
    pub fn entry_seq(&self, id: &SessionId, entry: &EntryId) -> Result<Option<u64>, StoreError> {
        let conn = self.conn();
        let location = self.location(id);
        let sid = Self::sid(&conn, id)
            .map_err(store_err("read", &location))?
            .ok_or_else(|| self.no_such(id))?;
        conn.prepare_cached("SELECT seq FROM records WHERE session = ?1 AND id = ?2")
            .and_then(|mut s| {
                s.query_row(params![sid, entry.as_str()], |r| r.get::<_, i64>(0))
                    .optional()
            })
            .map(|s| s.and_then(|s| u64::try_from(s).ok()))
            .map_err(store_err("read", &location))
    }

    /// The children of an entry (`None`: the roots), in append order, from
    /// the session's rows read by their key (no payload decoded).
    ///
    /// # Errors
    ///
    /// [`StoreError::NoSuchSession`] or SQLite errors.
    pub fn children(
        &self,
        id: &SessionId,
        parent: Option<&EntryId>,
    ) -> Result<Vec<EntryId>, StoreError> {
        let conn = self.conn();
        let location = self.location(id);
        let err = store_err("read", &location);
        let sid = Self::sid(&conn, id)
            .map_err(&err)?
            .ok_or_else(|| self.no_such(id))?;
        let mut stmt = conn
            .prepare_cached(
                "SELECT id FROM records
                 WHERE key BETWEEN ?1 AND ?2 AND id IS NOT NULL AND parent IS ?3 ORDER BY key",
            )
            .map_err(&err)?;
        let [lo, hi] = whole(sid);
        let ids = stmt
            .query_map(params![lo, hi, parent.map(|p| p.as_str())], |r| {
                r.get::<_, String>(0)
            })
            .map_err(&err)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(&err)?;
        Ok(ids.iter().filter_map(|i| EntryId::parse(i).ok()).collect())
    }

    /// Every session's row: key, id, header facts and summary columns.
    pub(crate) fn rows(&self) -> rusqlite::Result<Vec<(i64, SessionId, HeaderInfo, Summary)>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT s.sid, s.id, s.header, s.created, s.forked_from, s.parent, {SUMMARY_COLUMNS}
             FROM {SUMMARY_FROM}"
        ))?;
        let rows = stmt.query_map([], |r| {
            let id: String = r.get(1)?;
            let info = HeaderInfo {
                json: r.get(2)?,
                created: r.get(3)?,
                forked_from: r.get(4)?,
                parent: r.get(5)?,
            };
            Ok((r.get::<_, i64>(0)?, id, info, summary_at(r, 6)?))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (sid, id, info, summary) = row?;
            // Rows are written by cairn with valid ids; skip anything else.
            if let Ok(id) = SessionId::parse(&id) {
                out.push((sid, id, info, summary));
            }
        }
        Ok(out)
    }
}
