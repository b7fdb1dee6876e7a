//! `cairn fsck`: verifies one session or the whole store with
//! `cairn::fsck`, reports every problem precisely, and with `--salvage DIR`
//! writes a repaired copy. Exits 1 when anything is wrong.

use std::path::Path;

use anyhow::{Result, bail};
use cairn::fsck::{self, FsckReport, Problem, SalvageReport, Severity};
use serde_json::json;

use super::Status;
use crate::args::SessionArg;
use crate::target::{self, Ctx};
use crate::term::{Out, Style};

/// Runs `cairn fsck` on any store (a directory or `sqlite:PATH`).
///
/// # Errors
///
/// A session that cannot be found or read at all (by id or path), a failed
/// salvage, or write errors. Damage inside a session is not an error: it is
/// reported and makes the exit status 1; so is, with `--all`, a session that
/// cannot be read at all.
pub fn run(
    ctx: &Ctx,
    arg: &SessionArg,
    all: bool,
    salvage: Option<&Path>,
    json: bool,
) -> Result<Status> {
    let mut reports = Vec::new();
    let mut one = None;
    if all {
        let store = ctx.store()?;
        let backend = store.backend();
        let mut ids = backend.list()?;
        ids.sort();
        for id in &ids {
            reports.push(
                fsck::check(&**backend, id)
                    .unwrap_or_else(|e| unreadable(backend.location(id), &e)),
            );
        }
    } else {
        let (store, id) = target::locate(ctx, &target::spec(arg)?)?;
        reports.push(fsck::check(&**store.backend(), &id)?);
        one = Some((store, id));
    }
    let rescued = match (salvage, &one) {
        (None, _) => None,
        (Some(dir), Some((store, id))) => Some(fsck::salvage_session(&**store.backend(), id, dir)?),
        (Some(_), None) => bail!("--salvage works on one session at a time"),
    };
    let clean = reports.iter().all(FsckReport::is_clean);
    let mut out = ctx.out();
    if json {
        out.json(&json!({ "clean": clean, "reports": reports, "salvage": rescued }))?;
    } else {
        if reports.is_empty() {
            out.line("no sessions to check")?;
        }
        for r in &reports {
            report(&mut out, r)?;
        }
        if let Some(s) = &rescued {
            salvaged(&mut out, s)?;
        }
    }
    Ok(if clean { Status::Ok } else { Status::NotSo })
}

/// The report of a session `--all` found but cannot read at all (a symlink,
/// an unreadable file): an open refuses it too.
fn unreadable(location: String, e: &cairn::OpenError) -> FsckReport {
    FsckReport {
        location,
        records: 0,
        entries: 0,
        bytes: 0,
        refused: Some(e.to_string()),
        newer_format: None,
        problems: vec![Problem {
            line: 1,
            offset: 0,
            seq: None,
            severity: Severity::Damaged,
            what: format!("cannot be read: {e}"),
        }],
    }
}

fn report(out: &mut Out<'_>, r: &FsckReport) -> std::io::Result<()> {
    let facts = format!(
        "{}, {}, {} bytes",
        count(r.records, "record", "records"),
        count(r.entries, "entry", "entries"),
        r.bytes
    );
    if r.is_clean() {
        return out.spans(&[
            (Style::Active, "ok  "),
            (Style::Plain, &r.location),
            (Style::Dim, &format!(" · {facts}")),
        ]);
    }
    let n = r.problems.len();
    out.spans(&[
        (Style::Warn, "BAD "),
        (Style::Plain, &r.location),
        (
            Style::Dim,
            &format!(" · {facts} · {}", count(n as u64, "problem", "problems")),
        ),
    ])?;
    for p in &r.problems {
        problem(out, p)?;
    }
    let advice = if r.newer_format.is_some() {
        "a newer cairn wrote it: upgrade cairn to read it (salvage cannot help)"
    } else if !r.is_damaged() && r.problems.iter().all(|p| p.severity == Severity::TornTail) {
        "only the tail is torn: the next write open cuts it (saving the bytes beside the file)"
    } else {
        "`cairn fsck SESSION --salvage DIR` writes a repaired copy; the original stays as it is"
    };
    out.spans(&[(Style::Dim, &format!("    {advice}"))])
}

fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn problem(out: &mut Out<'_>, p: &Problem) -> std::io::Result<()> {
    let sev = match p.severity {
        Severity::Damaged => "damaged",
        Severity::TornTail => "torn tail",
        Severity::Invalid => "invalid",
    };
    let seq = p.seq.map(|s| format!(", seq {s}")).unwrap_or_default();
    out.spans(&[
        (Style::Plain, "    "),
        (
            Style::Dim,
            &format!("line {} (byte {}{seq}) ", p.line, p.offset),
        ),
        (Style::Warn, sev),
        (Style::Plain, &format!(": {}", p.what)),
    ])
}

fn salvaged(out: &mut Out<'_>, s: &SalvageReport) -> std::io::Result<()> {
    out.spans(&[
        (Style::Bold, "salvaged "),
        (
            Style::Plain,
            &format!("{} records into {}", s.kept, s.written.display()),
        ),
    ])?;
    for (entry, was, now) in &s.reparented {
        let now = now
            .as_ref()
            .map_or_else(|| "a new root".to_owned(), |n| format!("under {n}"));
        out.line(&format!(
            "    {entry}: its parent {was} was lost; attached {now}"
        ))?;
    }
    out.spans(&[(
        Style::Dim,
        &format!("    open it with `cairn show {}`", s.written.display()),
    )])
}
