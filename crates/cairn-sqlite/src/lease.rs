//! Writer leases: one writer per session across processes, and fencing.
//!
//! A writer holds a row of `leases` naming it (pid, machine, boot, pid
//! namespace, process start time) with a **fencing token**: the session's
//! `lease_epoch`, incremented at every acquisition, so tokens never repeat.
//! Every append transaction first checks that the lease row still carries
//! the writer's token; a writer whose lease was broken or taken over cannot
//! append, whatever it believes. Safety rests on that check alone.
//!
//! A lease never expires: it holds ([`cairn_sql::Lease::holds`]) until it
//! is released or its holder is dead. **When is a holder dead?** Deciding
//! that only affects liveness (whether a new writer may take the lease over
//! without being told to):
//!
//! - same machine (`/etc/machine-id`), same boot (`boot_id`) and same pid
//!   namespace: dead when `/proc/<pid>` is gone or the process there started
//!   at another time (a recycled pid); otherwise alive;
//! - same machine, another boot: dead (the machine restarted since);
//! - anything else (another machine, another pid namespace, no `/proc`):
//!   unknown, treated as alive. [`crate::SqliteBackend::break_lease`] with
//!   [`cairn_sql::Takeover::Force`] is the operator's way out.
//!
//! A writer releases its lease when its handle is dropped; a killed writer
//! leaves its row behind, which the rule above lets the next writer replace.

use cairn_sql::{Holder, Lease};
use rusqlite::{Connection, OptionalExtension, params};

/// The lease of session `sid`, if any.
pub(crate) fn get(conn: &Connection, sid: i64) -> rusqlite::Result<Option<Lease>> {
    conn.prepare_cached(
        "SELECT token, pid, machine, boot, pid_ns, started, acquired, heartbeat
         FROM leases WHERE session = ?1",
    )?
    .query_row([sid], |r| {
        Ok(Lease {
            token: r.get(0)?,
            holder: Holder {
                pid: r.get(1)?,
                machine: r.get(2)?,
                boot: r.get(3)?,
                pid_ns: r.get(4)?,
                started: u64::try_from(r.get::<_, i64>(5)?).unwrap_or(0),
            },
            acquired: r.get(6)?,
            expires: None,
            expired: false,
            heartbeat: Some(r.get(7)?),
        })
    })
    .optional()
}

/// Gives this process a new lease of session `sid` (replacing any row,
/// which the caller has judged dead), inside the caller's transaction.
/// Returns the new fencing token.
pub(crate) fn acquire(conn: &Connection, sid: i64) -> rusqlite::Result<i64> {
    let token: i64 = conn.query_row(
        "UPDATE sessions SET lease_epoch = lease_epoch + 1 WHERE sid = ?1 RETURNING lease_epoch",
        [sid],
        |r| r.get(0),
    )?;
    let me = Holder::me();
    let now = cairn::now_rfc3339();
    conn.prepare_cached(
        "INSERT OR REPLACE INTO leases
            (session, token, pid, machine, boot, pid_ns, started, acquired, heartbeat)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8)",
    )?
    .execute(params![
        sid,
        token,
        me.pid,
        me.machine,
        me.boot,
        me.pid_ns,
        i64::try_from(me.started).unwrap_or(0),
        now
    ])?;
    Ok(token)
}

/// Releases the lease of session `sid` if it still carries `token` and
/// `sid` is still session `id` (a removed session's key is given to the
/// next one created, whose tokens start again from 1).
pub(crate) fn release(conn: &Connection, sid: i64, id: &str, token: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "DELETE FROM leases WHERE session = ?1 AND token = ?2
             AND (SELECT id FROM sessions WHERE sid = ?1) = ?3",
    )?
    .execute(params![sid, token, id])
    .map(drop)
}
