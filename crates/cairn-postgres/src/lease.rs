//! The writer lease: one writer per session across every worker and host,
//! with a fencing token, timed by the database's clock.
//!
//! The lease is part of the session's `sessions` row: `lease_token` (the
//! fencing token: incremented at every acquisition, so tokens never
//! repeat), `lease_expires` (`NULL`: no writer), `lease_acquired` and the
//! holder (pid, machine, boot, pid namespace, start time).
//!
//! - **Acquire** (open for writing, create, claim): in one transaction, lock
//!   the row (`SELECT … FOR UPDATE`); if a writer holds it — `lease_expires >
//!   now()` and its holder is not known to be dead — refuse with
//!   [`cairn::OpenError::InUse`]; else set `lease_token = lease_token + 1`
//!   and `lease_expires = now() + lease`. Every time is the server's
//!   `now()`: workers' clocks never matter.
//! - **Renew**: every append moves `lease_expires` to `now() + lease`, and a
//!   heartbeat thread of each writer does so every third of the lease while
//!   the writer is idle.
//! - **Fence**: every append is one statement whose first step is
//!   `UPDATE sessions … WHERE sid = $1 AND lease_token = $2 AND
//!   lease_expires > now() AND records = $n`; the records are inserted only
//!   if that row was updated. A writer paused past its lease, cut off, or
//!   taken over has its append refused and its handle poisoned, whether or
//!   not another writer has appeared yet; the row lock orders an append and
//!   a takeover, so they never interleave.
//! - **Release**: dropping the writer clears `lease_expires` (only if the
//!   row still carries its token).
//!
//! Whether a lease still holds is the rule every SQL backend shares
//! ([`cairn_sql::Lease::holds`]: unexpired, and its holder not known to be
//! dead — on this machine, its process gone); a dead holder's unexpired
//! lease is taken over at once, so a SIGKILLed worker does not block its
//! session for the rest of the lease.

use std::time::Duration;

use cairn_sql::{Holder, Lease};
use postgres::types::Type;
use postgres::{Row, Transaction};

/// The lease columns as a select list, for [`from_row`] at `at`.
pub(crate) const COLUMNS: &str = "lease_token, lease_expires IS NULL, lease_expires <= now(),
    to_char(lease_acquired AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'),
    to_char(lease_expires AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'),
    holder_pid, holder_machine, holder_boot, holder_pid_ns, holder_started";

/// The lease in a row selected with [`COLUMNS`] starting at column `at`.
pub(crate) fn from_row(row: &Row, at: usize) -> Result<Option<Lease>, postgres::Error> {
    let free: bool = row.try_get(at + 1)?;
    if free {
        return Ok(None);
    }
    let pid: Option<i32> = row.try_get(at + 5)?;
    let started: Option<i64> = row.try_get(at + 9)?;
    Ok(Some(Lease {
        token: row.try_get(at)?,
        expired: row.try_get::<_, Option<bool>>(at + 2)?.unwrap_or(true),
        acquired: row
            .try_get::<_, Option<String>>(at + 3)?
            .unwrap_or_default(),
        expires: Some(
            row.try_get::<_, Option<String>>(at + 4)?
                .unwrap_or_default(),
        ),
        heartbeat: None,
        holder: Holder {
            pid: pid.and_then(|p| u32::try_from(p).ok()).unwrap_or(0),
            machine: row
                .try_get::<_, Option<String>>(at + 6)?
                .unwrap_or_default(),
            boot: row
                .try_get::<_, Option<String>>(at + 7)?
                .unwrap_or_default(),
            pid_ns: row
                .try_get::<_, Option<String>>(at + 8)?
                .unwrap_or_default(),
            started: started.and_then(|s| u64::try_from(s).ok()).unwrap_or(0),
        },
    }))
}

/// Gives this process a new lease of session `sid` inside the caller's
/// transaction (which has locked the row and judged any holder). Returns
/// the new fencing token.
pub(crate) fn acquire(
    tx: &mut Transaction<'_>,
    schema: &str,
    sid: i64,
    lease: Duration,
) -> Result<i64, postgres::Error> {
    let me = Holder::me();
    let pid = i32::try_from(me.pid).unwrap_or(0);
    let started = i64::try_from(me.started).unwrap_or(0);
    let row = tx.query_typed_one(
        &format!(
            "UPDATE {schema}.sessions
                SET lease_token = lease_token + 1,
                    lease_expires = now() + make_interval(secs => $2),
                    lease_acquired = now(),
                    holder_pid = $3, holder_machine = $4, holder_boot = $5,
                    holder_pid_ns = $6, holder_started = $7
              WHERE sid = $1
          RETURNING lease_token"
        ),
        &[
            (&sid, Type::INT8),
            (&lease.as_secs_f64(), Type::FLOAT8),
            (&pid, Type::INT4),
            (&me.machine, Type::TEXT),
            (&me.boot, Type::TEXT),
            (&me.pid_ns, Type::TEXT),
            (&started, Type::INT8),
        ],
    )?;
    row.try_get(0)
}

/// The SQL that releases the lease of `$1` if it still carries token `$2`.
pub(crate) fn release_sql(schema: &str) -> String {
    format!(
        "UPDATE {schema}.sessions
            SET lease_expires = NULL, lease_acquired = NULL, holder_pid = NULL,
                holder_machine = NULL, holder_boot = NULL, holder_pid_ns = NULL,
                holder_started = NULL
          WHERE sid = $1 AND lease_token = $2"
    )
}

/// The SQL that renews the lease of `$1` for `$3` seconds if it still
/// carries token `$2` and has not expired; returns a row if it did.
pub(crate) fn renew_sql(schema: &str) -> String {
    format!(
        "UPDATE {schema}.sessions SET lease_expires = now() + make_interval(secs => $3)
          WHERE sid = $1 AND lease_token = $2 AND lease_expires > now()
          RETURNING sid"
    )
}
