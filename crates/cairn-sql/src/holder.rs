//! Who holds a writer lease, and whether that process still runs: the rule
//! every SQL backend judges a lease's holder by (liveness only — safety
//! rests on the fencing token each append carries).
//!
//! - same machine (`/etc/machine-id`), same boot (`boot_id`) and same pid
//!   namespace: dead when `/proc/<pid>` is gone or the process there started
//!   at another time (a recycled pid); otherwise alive;
//! - same machine, another boot: dead (the machine restarted since);
//! - anything else (another machine, another pid namespace, no `/proc`):
//!   unknown, treated as alive; each backend has an operator's way out
//!   (breaking the lease by force).

use std::sync::OnceLock;

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
