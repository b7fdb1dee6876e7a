//! Writer leases: one writer per session across processes, and fencing.
//!
//! A writer holds a row of `leases` naming it (pid, machine, boot, pid
//! namespace, process start time) with a **fencing token**: the session's
//! `lease_epoch`, incremented at every acquisition, so tokens never repeat.
//! Every append transaction first checks that the lease row still carries
//! the writer's token; a writer whose lease was broken or taken over cannot
//! append, whatever it believes. Safety rests on that check alone.
//!
//! **When is a holder dead?** Deciding that only affects liveness (whether a
//! new writer may take the lease over without being told to):
//!
//! - same machine (`/etc/machine-id`), same boot (`boot_id`) and same pid
//!   namespace: dead when `/proc/<pid>` is gone or the process there started
//!   at another time (a recycled pid); otherwise alive;
//! - same machine, another boot: dead (the machine restarted since);
//! - anything else (another machine, another pid namespace, no `/proc`):
//!   unknown, treated as alive. [`crate::SqliteBackend::break_lease`] with
//!   [`Takeover::Force`] is the operator's way out.
//!
//! A writer releases its lease when its handle is dropped; a killed writer
//! leaves its row behind, which the rule above lets the next writer replace.

use std::sync::OnceLock;

use rusqlite::{Connection, OptionalExtension, params};

/// Who holds (or wants) a lease: enough to tell, on the same machine,
/// whether that process still runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// Process id.
    pub pid: u32,
    /// `/etc/machine-id`, or `host:<hostname>` where there is none.
    pub machine: String,
    /// The kernel's boot id (empty where unknown).
    pub boot: String,
    /// The pid namespace, e.g. `pid:[4026531836]` (empty where unknown).
    pub pid_ns: String,
    /// The process's start time in clock ticks since boot (0 where unknown).
    pub started: u64,
}

/// A session's writer lease as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The fencing token: appends must carry it.
    pub token: i64,
    /// The holder.
    pub holder: Holder,
    /// When it was acquired (RFC 3339).
    pub acquired: String,
    /// When its holder last appended (RFC 3339).
    pub heartbeat: String,
}

/// Whether a lease's holder still runs, as far as this process can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// It runs (or it is this process).
    Alive,
    /// It is gone: its lease may be taken over.
    Dead,
    /// It runs elsewhere (another machine or pid namespace): treated as alive.
    Unknown,
}

/// How [`crate::SqliteBackend::break_lease`] decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takeover {
    /// Only when the holder is known to be dead (see the module docs).
    IfDead,
    /// Whatever the holder's state, on the operator's word: a live holder's
    /// next append fails, fenced.
    Force,
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// Field 22 of `/proc/<pid>/stat` (the start time in ticks since boot),
/// and whether the process has exited (a zombie not yet reaped, field 3).
fn proc_stat(pid: &str) -> Option<(u64, bool)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold anything.
    let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace();
    let exited = matches!(rest.next()?, "Z" | "X" | "x");
    Some((rest.nth(18)?.parse().ok()?, exited))
}

impl Holder {
    /// This process.
    pub fn me() -> &'static Holder {
        static ME: OnceLock<Holder> = OnceLock::new();
        ME.get_or_init(|| {
            let machine = match read_trimmed("/etc/machine-id") {
                m if !m.is_empty() => m,
                _ => format!("host:{}", read_trimmed("/proc/sys/kernel/hostname")),
            };
            Holder {
                pid: std::process::id(),
                machine,
                boot: read_trimmed("/proc/sys/kernel/random/boot_id"),
                pid_ns: std::fs::read_link("/proc/self/ns/pid")
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                started: proc_stat("self").map_or(0, |(t, _)| t),
            }
        })
    }

    /// Whether this holder still runs, judged from this process.
    pub fn liveness(&self) -> Liveness {
        let me = Holder::me();
        if self.machine != me.machine || me.boot.is_empty() || self.boot.is_empty() {
            return Liveness::Unknown;
        }
        if self.boot != me.boot {
            // Another boot of this machine: every process of that boot is
            // gone. A host name is no proof of the same machine, though.
            return if me.machine.starts_with("host:") {
                Liveness::Unknown
            } else {
                Liveness::Dead
            };
        }
        if self.pid_ns != me.pid_ns || me.pid_ns.is_empty() {
            return Liveness::Unknown;
        }
        if self.pid == me.pid && self.started == me.started {
            return Liveness::Alive;
        }
        match proc_stat(&self.pid.to_string()) {
            Some((_, true)) => Liveness::Dead,
            Some((t, false)) if t == self.started || self.started == 0 => Liveness::Alive,
            Some(_) => Liveness::Dead,
            None if std::path::Path::new(&format!("/proc/{}", self.pid)).exists() => {
                Liveness::Alive
            }
            None => Liveness::Dead,
        }
    }
}

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
            heartbeat: r.get(7)?,
        })
    })
    .optional()
}

/// Whether a lease keeps other writers out.
pub(crate) fn holds(lease: &Lease) -> bool {
    lease.holder.liveness() != Liveness::Dead
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

/// Releases the lease of session `sid` if it still carries `token`.
pub(crate) fn release(conn: &Connection, sid: i64, token: i64) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM leases WHERE session = ?1 AND token = ?2")?
        .execute(params![sid, token])
        .map(drop)
}

/// The token the lease of session `sid` carries now (`None`: no lease).
pub(crate) fn current_token(conn: &Connection, sid: i64) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT token FROM leases WHERE session = ?1")?
        .query_row([sid], |r| r.get(0))
        .optional()
}
