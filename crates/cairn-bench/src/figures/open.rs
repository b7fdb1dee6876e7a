//! Open + context of a long session vs reading its file and counting lines
//! with memchr (both with a warm page cache), and bytes on disk per entry vs
//! bytes of the entries' JSON content, measured on the same file.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use anyhow::{Context as _, Result, bail};
use cairn::{Access, Session, SessionId, Store};

use super::Bench;
use crate::config::issue;
use crate::fixture::{self, Plan};
use crate::measure::{best, timed};
use crate::report::{Figure, Target, Unit, thousands};

pub fn run(b: &Bench) -> Result<Vec<Figure>> {
    let s = &b.sizes;
    let home = b.sub("open")?;
    let w = fixture::write_session(&home, &Plan::linear(s.open_entries, 11), true)?;
    // Warm the page cache and check the fixture once, untimed.
    count_lines(&w.path)?;
    let (_, warm) = open_context(&home, &w.id)?;
    if warm != w.context_messages {
        bail!(
            "the fixture's context has {warm} messages, {} expected",
            w.context_messages
        );
    }
    let mut cairn_ms = Vec::new();
    let mut base_ms = Vec::new();
    for _ in 0..s.open_repeats {
        let (t, lines) = timed(|| count_lines(&w.path))?;
        if lines != w.entries + 1 {
            bail!(
                "counted {lines} lines in {}, wrote {}",
                w.path.display(),
                w.entries + 1
            );
        }
        base_ms.push(t * 1e3);
        let (t, _) = timed(|| open_context(&home, &w.id))?;
        cairn_ms.push(t * 1e3);
    }
    let scaled = s.scaled("entries", s.open_entries as u64, issue::OPEN_ENTRIES as u64);
    let open = Figure::new(
        "open_context",
        format!("open + context, {} entries", thousands(w.entries)),
        Unit::Millis,
        best(cairn_ms),
        "read the file and count lines with memchr",
        best(base_ms),
        Some(Target::AtMost(3.0)),
    )
    .scaled(scaled)
    .note(w.open_note("writer open; warm page cache", s.open_repeats));

    let per_entry = w.bytes as f64 / w.entries as f64;
    let data_per_entry = w.data_bytes as f64 / w.entries as f64;
    let size = Figure::new(
        "bytes_per_entry",
        "bytes on disk per entry",
        Unit::Bytes,
        per_entry,
        "bytes of the entry's JSON content (its `data` value)",
        data_per_entry,
        Some(Target::AtMost(1.15)),
    )
    .note(format!(
        "framing per record (seq, ts, kind, id, parent, crc, newline): {:.0} B; the header is counted in the file size",
        per_entry - data_per_entry
    ))
    .note(format!(
        "file length {} B; allocated on disk {} B",
        thousands(w.bytes),
        thousands(allocated(&w.path).unwrap_or(0))
    ));
    Ok(vec![open, size])
}

/// The CLI figure, on a fixture like figure 4's (same plan, seed and size).
pub fn run_cli(b: &Bench) -> Result<Vec<Figure>> {
    let s = &b.sizes;
    let home = b.sub("cli")?;
    let w = fixture::write_session(&home, &Plan::linear(s.open_entries, 11), true)?;
    count_lines(&w.path)?;
    // Untimed: warms the page cache and writes the persisted index, as the
    // session's writer would have.
    open_context(&home, &w.id)?;
    let scaled = s.scaled("entries", s.open_entries as u64, issue::OPEN_ENTRIES as u64);
    Ok(vec![cli_figure(&home, &w, s.open_repeats)?.scaled(scaled)])
}

/// `cairn context --json > /dev/null` as a whole process vs the library's
/// read-only open + context of the same file with every message read, with
/// the process's peak memory (GNU `time`'s maximum resident set) against
/// the file's size.
fn cli_figure(home: &Path, w: &fixture::Written, repeats: usize) -> Result<Figure> {
    let cairn = cairn_binary()?;
    let mut cli_ms = Vec::new();
    let mut lib_ms = Vec::new();
    let mut peak_kib = Vec::new();
    for _ in 0..repeats {
        let (t, kib) = timed(|| run_cairn(&cairn, home, &w.id))?;
        cli_ms.push(t * 1e3);
        peak_kib.extend(kib);
        // Every message read, as the command reads them (the context
        // keeps the messages the open did not read, and reads each when
        // first asked for).
        let (t, _) = timed(|| {
            let s = Store::open_dir(home).open(&w.id, Access::Read)?;
            let ctx = s.context();
            for m in ctx.messages() {
                m.message()?;
            }
            let n = ctx.messages().len();
            Ok::<_, anyhow::Error>((s, n))
        })?;
        lib_ms.push(t * 1e3);
    }
    let mut fig = Figure::new(
        "cli_context_json",
        format!(
            "`cairn context --json > /dev/null`, {} entries",
            thousands(w.entries)
        ),
        Unit::Millis,
        best(cli_ms),
        "the library's read-only open + context of the same file, every message read",
        best(lib_ms),
        Some(Target::AtMost(3.0)),
    )
    .note(format!(
        "whole process (exec, open, context, JSON to /dev/null) of {}; best of {repeats}",
        cairn.display()
    ));
    fig = match peak_kib.iter().copied().max() {
        Some(kib) => fig.note(format!(
            "peak memory (max RSS, GNU time): {:.1} MiB = {:.2}x the file's {:.1} MiB (target <= 1x)",
            kib as f64 / 1024.0,
            kib as f64 * 1024.0 / w.bytes as f64,
            w.bytes as f64 / 1048576.0
        )),
        None => fig.note("peak memory not measured: /usr/bin/time (GNU time) is not installed"),
    };
    Ok(fig)
}

/// The `cairn` binary built beside this one (`cargo build --release -p cairn-cli`).
fn cairn_binary() -> Result<std::path::PathBuf> {
    let me = std::env::current_exe()?;
    let cairn = me.with_file_name("cairn");
    if !cairn.exists() {
        bail!(
            "{} does not exist: build the CLI first (cargo build --release -p cairn-cli)",
            cairn.display()
        );
    }
    Ok(cairn)
}

/// Runs `cairn context --json` on session `id` of store `home`, output to
/// /dev/null; returns its peak RSS in KiB when GNU time is there to say.
fn run_cairn(cairn: &Path, home: &Path, id: &SessionId) -> Result<Option<u64>> {
    use std::process::{Command, Stdio};
    let gnu_time = Path::new("/usr/bin/time");
    let report = tempfile::NamedTempFile::new()?;
    let mut cmd = if gnu_time.exists() {
        let mut c = Command::new(gnu_time);
        c.arg("-f")
            .arg("%M")
            .arg("-o")
            .arg(report.path())
            .arg(cairn);
        c
    } else {
        Command::new(cairn)
    };
    let status = cmd
        .arg("--store")
        .arg(home)
        .args(["context", "--json", id.as_str()])
        .stdout(Stdio::null())
        .status()
        .with_context(|| format!("running {}", cairn.display()))?;
    if !status.success() {
        bail!("{} context --json exited with {status}", cairn.display());
    }
    Ok(std::fs::read_to_string(report.path())
        .ok()
        .and_then(|s| s.lines().last().and_then(|l| l.trim().parse().ok())))
}

/// Opens a session for writing and takes its context: the session (so the
/// caller can drop it after stopping its clock) and the number of messages.
pub fn open_context(home: &Path, id: &SessionId) -> Result<(Session, usize)> {
    let store = Store::open_dir(home);
    let session = store
        .open(id, Access::Write)
        .with_context(|| format!("opening session {id}"))?;
    let n = session.context().messages().len();
    Ok((session, n))
}

/// [`open_context`], then every message of the context read (the file
/// backend reads each when first asked for): what figures 15 and 21 compare
/// with the SQL backends, which decode the messages at open.
pub fn open_context_read(home: &Path, id: &SessionId) -> Result<(Session, usize)> {
    let (session, n) = open_context(home, id)?;
    read_every_message(&session)?;
    Ok((session, n))
}

/// Reads every message of `session`'s context.
pub fn read_every_message(session: &Session) -> Result<()> {
    for m in session.context().messages() {
        m.message()
            .with_context(|| format!("reading a message of session {}", session.id()))?;
    }
    Ok(())
}

/// Reads a file in 1 MiB chunks and counts its newlines with memchr.
pub fn count_lines(path: &Path) -> Result<u64> {
    let mut f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let got = f.read(&mut buf)?;
        if got == 0 {
            return Ok(n);
        }
        n += memchr::memchr_iter(b'\n', &buf[..got]).count() as u64;
    }
}

fn allocated(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| m.blocks() * 512)
}
