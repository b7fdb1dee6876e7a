//! Peak memory after opening a large session, vs the file's size. The open
//! runs in a child process (this binary, hidden `peak-rss` subcommand) so the
//! high-water mark (`VmHWM` in `/proc/self/status`) is the open's alone.
//!
//! The session is long-lived and realistic: a compaction every 250 cycles
//! (~1,000 entries), so the context at the leaf is small and the figure shows
//! what the index and the open itself keep, not a context that legitimately
//! holds every message.

use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, Result, anyhow, bail};
use cairn::{Access, SessionId, Store};
use serde::{Deserialize, Serialize};

use super::Bench;
use crate::config::issue;
use crate::fixture::{self, Compactions, Plan};
use crate::report::{Figure, Target, Unit};

/// What the child reports.
#[derive(Debug, Serialize, Deserialize)]
struct Peak {
    /// VmHWM before opening, bytes.
    before: u64,
    /// VmHWM after open + context, bytes.
    after: u64,
    /// VmRSS after open + context, bytes.
    rss: u64,
    /// Entries in the session.
    entries: u64,
    /// Messages in its context.
    messages: usize,
}

pub fn run(b: &Bench) -> Result<Vec<Figure>> {
    let s = &b.sizes;
    let home = b.sub("memory")?;
    // Size the file from a sample of the same content.
    let sample_home = b.sub("memory-sample")?;
    let sample = fixture::write_session(&sample_home, &plan(1_000), false)?;
    let per_cycle = sample.bytes as f64 / 1_000.0;
    let cycles = (s.memory_bytes as f64 / per_cycle).ceil() as usize;
    std::fs::remove_dir_all(&sample_home)?;
    let w = fixture::write_session(&home, &plan(cycles), true)?;
    let peak = child(&home, &w.id)?;
    if peak.entries != w.entries || peak.messages != w.context_messages {
        bail!(
            "the child saw {} entries and {} messages, expected {} and {}",
            peak.entries,
            peak.messages,
            w.entries,
            w.context_messages
        );
    }
    let fig = Figure::new(
        "peak_memory",
        format!("peak memory after opening {:.0} MiB", w.bytes as f64 / 1048576.0),
        Unit::Bytes,
        peak.after as f64,
        "the file's size",
        w.bytes as f64,
        Some(Target::AtMost(0.25)),
    )
    .scaled(s.scaled("bytes", s.memory_bytes, issue::MEMORY_BYTES))
    .note(format!(
        "VmHWM of a child process that opens the session for writing and takes its context; {} B before opening, VmRSS after {}",
        crate::report::thousands(peak.before),
        Unit::Bytes.format(peak.rss as f64)
    ))
    .note(format!(
        "{} entries, a compaction every 250 cycles (~1,000 entries); the context holds {} messages; {:.0} B of memory per entry",
        crate::report::thousands(w.entries),
        peak.messages,
        (peak.after - peak.before) as f64 / w.entries as f64
    ));
    Ok(vec![fig])
}

fn plan(cycles: usize) -> Plan {
    Plan {
        cycles,
        compactions: Some(Compactions {
            period: 250,
            keep: 25,
            tail: 25,
        }),
        seed: 41,
    }
}

/// Runs the child and parses its report.
fn child(home: &Path, id: &SessionId) -> Result<Peak> {
    let exe = std::env::current_exe().context("finding this executable")?;
    let out = Command::new(exe)
        .arg("peak-rss")
        .arg(home)
        .arg(id.as_str())
        .output()
        .context("running the peak-memory child")?;
    if !out.status.success() {
        bail!(
            "the peak-memory child failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "reading the child's report {:?}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// The child's side: opens `id` in the store at `home`, takes its context,
/// and prints its memory high-water marks as JSON.
///
/// # Errors
///
/// Open errors, or a `/proc/self/status` without the fields.
pub fn child_main(home: &Path, id: &str) -> Result<()> {
    let id = SessionId::parse(id).map_err(|e| anyhow!("{e}"))?;
    let before = status_bytes("VmHWM")?;
    let session = Store::open_dir(home)
        .open(&id, Access::Write)
        .with_context(|| format!("opening session {id}"))?;
    let ctx = session.context();
    let peak = Peak {
        before,
        after: status_bytes("VmHWM")?,
        rss: status_bytes("VmRSS")?,
        entries: session.entry_count() as u64,
        messages: ctx.messages().len(),
    };
    println!("{}", serde_json::to_string(&peak)?);
    Ok(())
}

/// A `kB` field of `/proc/self/status`, in bytes.
fn status_bytes(field: &str) -> Result<u64> {
    let status =
        std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    parse_status(&status, field).ok_or_else(|| anyhow!("no {field} in /proc/self/status"))
}

fn parse_status(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        let rest = l.strip_prefix(field)?.strip_prefix(':')?;
        let kb: u64 = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
        Some(kb * 1024)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields_are_parsed_in_bytes() {
        let s = "Name:\tx\nVmHWM:\t   12345 kB\nVmRSS:\t  100 kB\n";
        assert_eq!(parse_status(s, "VmHWM"), Some(12345 * 1024));
        assert_eq!(parse_status(s, "VmRSS"), Some(100 * 1024));
        assert_eq!(parse_status(s, "VmSwap"), None);
    }
}
