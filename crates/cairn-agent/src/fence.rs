//! Tool processes, fenced: what identifies a process a tool started, kept
//! in the session before the process can do anything, so that a resume in
//! another process can tell whether it still runs.
//!
//! A tool that runs a process (`bash`) starts it held (it waits on a pipe),
//! appends a [`Started`] record and syncs it, and only then lets it go
//! ([`record_started`]). The record is a **log-only ignorable record** of
//! the agent's own kind [`KIND`] (`docs/RECORDS.md` §5), like the trace
//! records: the core decodes it as an unknown ignorable record, so no fold
//! (context, verdict, status, listing, steps) ever reads it, and the
//! verdict stays a pure function of the log. Whether a recorded process
//! still runs is a fact of the machine, checked at resume time
//! ([`liveness`]), never stored as the truth.
//!
//! A process is the one recorded when its pid, its start time (field 22 of
//! `/proc/<pid>/stat`, clock ticks since boot), the boot (`boot_id`) and
//! the host all match: a pid reused by another process has another start
//! time. Its process group counts too: a group whose leader died but whose
//! members (started after the leader) still run is running. A process
//! recorded on another host, or where `/proc` cannot tell, is
//! [`Liveness::Unknown`], never assumed dead.
//!
//! What ending one looks like ([`stop`]): SIGTERM to the group, a grace
//! period, then SIGKILL; [`wait`] waits for the group to empty (stopping it
//! at its recorded deadline). Both end with an [`Ended`] record saying
//! which, with the exit status when the process wrote one.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cairn::{AppendError, OpRecord, Session, Unknown};
use rustix::process::{Pid, Signal};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::interrupt::Interrupt;

/// The record kind of a tool process's records (an ignorable, log-only kind).
pub const KIND: &str = "agent.process";

/// How long a stopped group has between SIGTERM and SIGKILL.
pub const GRACE: Duration = Duration::from_secs(5);

/// What identifies a process, as recorded when it started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessId {
    /// Its process id.
    pub pid: u32,
    /// Its process group (the tool's own: the pid of its first process).
    pub pgid: u32,
    /// Field 22 of `/proc/<pid>/stat`: its start, in clock ticks since boot
    /// (`None` where there is no `/proc`).
    pub start_ticks: Option<u64>,
    /// The boot it started in (`/proc/sys/kernel/random/boot_id`).
    pub boot_id: Option<String>,
    /// The host it runs on.
    pub host: Option<String>,
}

impl ProcessId {
    /// The identity of process `pid` in group `pgid`, read now.
    pub fn of(pid: u32, pgid: u32) -> ProcessId {
        ProcessId {
            pid,
            pgid,
            start_ticks: stat(pid).map(|s| s.start_ticks),
            boot_id: boot_id(),
            host: Some(host_name()),
        }
    }
}

/// A tool process, as its `started` record holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Started {
    /// The tool call that started it.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The idempotency key of the run (the dispatch it belongs to).
    pub key: String,
    /// What it runs, for people (the command line).
    pub command: String,
    /// Which process it is.
    #[serde(flatten)]
    pub process: ProcessId,
    /// When it was let go, in ms since the Unix epoch.
    pub started_ms: u64,
    /// The longest it may run (the tool's timeout), in ms.
    pub timeout_ms: u64,
    /// Where its output goes, if to a file.
    pub output: Option<PathBuf>,
    /// Where it writes its exit status when it ends by itself.
    pub status_file: Option<PathBuf>,
}

/// How a recorded process ended, as recovery saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum How {
    /// It had ended by itself when recovery looked.
    Gone,
    /// It ended by itself while recovery waited for it.
    Exited,
    /// Recovery stopped its group with this signal (`SIGTERM`, then `SIGKILL`).
    Stopped {
        /// The last signal sent.
        signal: String,
    },
}

/// What recovery did with a recorded process, as its `ended` record holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ended {
    /// The tool call.
    pub call_id: String,
    /// The process.
    pub pid: u32,
    /// Waited for, or stopped.
    pub how: How,
    /// The exit status the process wrote (absent when it wrote none: killed).
    pub exit_status: Option<i32>,
    /// Who decided (`cairn-agent --on-running wait`, …).
    pub by: String,
}

/// Whether a recorded process still runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Liveness {
    /// The same process (pid, start time, boot, host), or members of its group, run.
    Running,
    /// Neither it nor its group runs.
    Gone,
    /// It cannot be told from here (why).
    Unknown(String),
}

/// Appends the `started` record of a process and syncs it: call it while
/// the process is held, and let it go only when this returns `Ok`.
///
/// # Errors
///
/// When the record cannot be appended or synced (the process must then not
/// be let go).
pub fn record_started(session: &Session, started: &Started) -> Result<(), AppendError> {
    append(session, "started", started)
}

/// Appends what recovery did with a process (synced).
///
/// # Errors
///
/// When the record cannot be appended or synced.
pub fn record_ended(session: &Session, ended: &Ended) -> Result<(), AppendError> {
    append(session, "ended", ended)
}

fn append(session: &Session, phase: &str, data: &impl Serialize) -> Result<(), AppendError> {
    let mut data = serde_json::to_value(data).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut data {
        m.insert("phase".to_owned(), Value::String(phase.to_owned()));
    }
    session.append_op(OpRecord::Ignored(Unknown {
        kind: KIND.to_owned(),
        data,
    }))?;
    session.sync()
}

/// The processes recorded for `call_id` that no `ended` record closed, in
/// the order they started.
///
/// # Errors
///
/// Why a process record could not be read, or a `started` record of the
/// call could not be decoded: then whether a process of the call still
/// runs cannot be known, and the caller must not take it for "none".
pub fn recorded(session: &Session, call_id: &str) -> Result<Vec<Started>, String> {
    let mut open: Vec<Started> = Vec::new();
    for (seq, kind) in session.op_records() {
        if kind != KIND {
            continue;
        }
        let record = session.record(seq).map_err(|e| {
            format!(
                "the process record at seq {seq} cannot be read: {}",
                cairn::with_causes(&e)
            )
        })?;
        let cairn::Body::Op(OpRecord::Ignored(u)) = record.body else {
            continue;
        };
        if u.data.get("call_id").and_then(Value::as_str) != Some(call_id) {
            continue;
        }
        match u.data.get("phase").and_then(Value::as_str) {
            Some("started") => {
                open.push(serde_json::from_value::<Started>(u.data).map_err(|e| {
                    format!("the process record at seq {seq} cannot be decoded: {e}")
                })?)
            }
            Some("ended") => {
                if let Some(pid) = u.data.get("pid").and_then(Value::as_u64) {
                    open.retain(|s| u64::from(s.process.pid) != pid);
                }
            }
            _ => {}
        }
    }
    Ok(open)
}

/// Whether the process `p` identifies (or its group) still runs.
pub fn liveness(p: &ProcessId) -> Liveness {
    let here = host_name();
    match &p.host {
        Some(h) if *h == here => {}
        Some(h) => {
            return Liveness::Unknown(format!(
                "it was started on host {h}, and this is {here}: it cannot be checked from here"
            ));
        }
        None => return Liveness::Unknown("its host was not recorded".to_owned()),
    }
    if let (Some(then), Some(now)) = (&p.boot_id, boot_id())
        && *then != now
    {
        // Rebooted since: nothing of that boot runs.
        return Liveness::Gone;
    }
    let Some(start) = p.start_ticks else {
        return Liveness::Unknown("its start time was not recorded".to_owned());
    };
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Liveness::Unknown("this system has no /proc to look in".to_owned());
    };
    if stat(p.pid).is_some_and(|s| s.live && s.start_ticks == start) {
        return Liveness::Running;
    }
    // The leader is gone (or its pid reused): members of its group that
    // started after it are its children, still running.
    let member = dir
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(stat)
        .any(|s| s.live && s.pgrp == p.pgid && s.start_ticks >= start);
    if member {
        Liveness::Running
    } else {
        Liveness::Gone
    }
}

/// Waits until `started`'s process and group are gone, stopping them
/// ([`stop`]) at its recorded deadline or when `interrupt` is set.
pub fn wait(started: &Started, interrupt: &Interrupt) -> (How, Option<i32>) {
    let deadline_ms = started.started_ms.saturating_add(started.timeout_ms);
    loop {
        if liveness(&started.process) != Liveness::Running {
            return (How::Exited, exit_status(started));
        }
        if interrupt.is_set() || now_ms() >= deadline_ms {
            return stop(started);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stops `started`'s process group: SIGTERM, then SIGKILL after [`GRACE`]
/// if anything of it still runs. Signals only a process whose identity
/// still matches ([`liveness`]).
pub fn stop(started: &Started) -> (How, Option<i32>) {
    let p = &started.process;
    let mut signal = None;
    for (sig, name, grace) in [
        (Signal::TERM, "SIGTERM", GRACE),
        (Signal::KILL, "SIGKILL", GRACE),
    ] {
        if liveness(p) != Liveness::Running {
            break;
        }
        if let Some(pgid) = i32::try_from(p.pgid).ok().and_then(Pid::from_raw) {
            let _ = rustix::process::kill_process_group(pgid, sig);
            signal = Some(name);
        }
        let end = Instant::now() + grace;
        while Instant::now() < end && liveness(p) == Liveness::Running {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let how = match signal {
        Some(s) => How::Stopped {
            signal: s.to_owned(),
        },
        None => How::Exited,
    };
    (how, exit_status(started))
}

/// The exit status `started`'s process wrote, if it wrote one.
pub fn exit_status(started: &Started) -> Option<i32> {
    let text = std::fs::read_to_string(started.status_file.as_ref()?).ok()?;
    text.trim().parse().ok()
}

/// Removes the files a recorded process wrote its output and status to.
pub fn remove_files(started: &Started) {
    for p in [&started.output, &started.status_file]
        .into_iter()
        .flatten()
    {
        let _ = std::fs::remove_file(p);
    }
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// This host's name.
pub fn host_name() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_owned())
}

/// What `/proc/<pid>/stat` says of a process.
struct Stat {
    /// Not a zombie (or dead): it can still act.
    live: bool,
    pgrp: u32,
    start_ticks: u64,
}

fn stat(pid: u32) -> Option<Stat> {
    let text =
        std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat")).ok()?;
    parse_stat(&text)
}

/// Parses a `/proc/<pid>/stat` line: `pid (comm) state ppid pgrp … starttime …`
/// (the command name may hold spaces and parentheses: fields are counted
/// after its last `)`).
fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Field 3 (state) is fields[0]; field N is fields[N - 3].
    let state = *fields.first()?;
    Some(Stat {
        live: !matches!(state, "Z" | "X" | "x"),
        pgrp: fields.get(2)?.parse().ok()?,
        start_ticks: fields.get(19)?.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regression_a_process_record_that_does_not_decode_was_taken_for_no_process() {
        let store = cairn::Store::with_backend(std::sync::Arc::new(cairn::MemoryBackend::new()));
        let session = store.create(cairn::NewSession::default()).unwrap();
        // A `started` record of call c1 whose process identity is missing:
        // whether it still runs cannot be known, so it is not "none".
        let data = serde_json::json!({"phase": "started", "call_id": "c1", "tool": "bash"});
        session
            .append_op(OpRecord::Ignored(Unknown {
                kind: KIND.to_owned(),
                data,
            }))
            .unwrap();
        let why = recorded(&session, "c1").unwrap_err();
        assert!(why.contains("cannot be decoded"), "{why}");
        // Another call's records are not read into it.
        assert!(recorded(&session, "c2").unwrap().is_empty());
    }

    #[test]
    fn a_stat_line_is_read_after_the_last_parenthesis() {
        let line = "4242 (a (b) c) S 1 4240 4240 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 18446744073709551615";
        let s = parse_stat(line).unwrap();
        assert_eq!((s.live, s.pgrp, s.start_ticks), (true, 4240, 987654));
        let zombie = line.replace(") S ", ") Z ");
        assert!(!parse_stat(&zombie).unwrap().live);
        assert!(parse_stat("garbage").is_none());
    }

    #[test]
    fn this_process_is_running_and_a_reused_pid_is_not_it() {
        let me = std::process::id();
        let pgid = u32::try_from(
            rustix::process::getpgid(None)
                .unwrap()
                .as_raw_nonzero()
                .get(),
        )
        .unwrap();
        let id = ProcessId::of(me, pgid);
        assert_eq!(liveness(&id), Liveness::Running);
        // Another start time with a group of nobody: a process that reused the pid.
        let reused = ProcessId {
            start_ticks: id.start_ticks.map(|t| t + 1_000_000_000),
            pgid: u32::MAX / 2,
            ..id.clone()
        };
        assert_eq!(liveness(&reused), Liveness::Gone);
        let elsewhere = ProcessId {
            host: Some("another-host.invalid".to_owned()),
            ..id
        };
        assert!(matches!(liveness(&elsewhere), Liveness::Unknown(_)));
    }
}
