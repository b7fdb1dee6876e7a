//! `cairn import`: pi, Claude Code and Codex sessions into the store, through
//! `cairn_import` (one session per source file, a ledger in the store's
//! files directory), with a report of every repair and damaged line; and
//! `--watch`, which keeps importing what the sources append.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Result, anyhow};
use cairn_import::{FileReport, Format, Ledger, NoteKind, Options, Outcome, import_file};
use serde_json::json;

use super::Status;
use crate::args::ImportFrom;
use crate::target::Ctx;
use crate::term::{Out, Style};

/// How often `--watch` looks at the sources again.
const WATCH_EVERY: Duration = Duration::from_millis(500);

/// Runs `cairn import`.
///
/// # Errors
///
/// No source to import, an unreadable ledger or store. A file that cannot be
/// imported is reported and makes the exit status 1; the others are imported.
pub fn run(
    ctx: &Ctx,
    from: ImportFrom,
    strict: bool,
    watch: bool,
    json: bool,
    paths: &[PathBuf],
) -> Result<Status> {
    let home = ctx.home()?;
    let store = ctx.store()?;
    let mut ledger = Ledger::open(&cairn_stores::files_dir(&home))?;
    let roots = roots(from, paths)?;
    let mut out = ctx.out();
    let mut stamps: HashMap<PathBuf, (u64, Option<SystemTime>)> = HashMap::new();
    loop {
        let mut reports = Vec::new();
        let mut failures = Vec::new();
        for (format, root) in &roots {
            let files = cairn_import::source_files(root)
                .map_err(|e| anyhow!("cannot read {}: {e}", root.display()))?;
            for file in files {
                if watch {
                    let stamp = std::fs::metadata(&file)
                        .map(|m| (m.len(), m.modified().ok()))
                        .unwrap_or((0, None));
                    if stamps.get(&file) == Some(&stamp) {
                        continue;
                    }
                    stamps.insert(file.clone(), stamp);
                }
                let opts = Options {
                    format: *format,
                    strict,
                    live: watch,
                };
                match import_file(&store, &mut ledger, &file, &opts) {
                    Ok(mut r) => {
                        // Parents imported on the way (a flat list, oldest
                        // ancestor first) are reported first.
                        reports.append(&mut r.also);
                        reports.push(r);
                    }
                    Err(e) => failures.push((file, cairn::with_causes(&e))),
                }
            }
        }
        if json {
            let quiet = watch
                && reports.iter().all(|r| r.outcome == Outcome::Unchanged)
                && failures.is_empty();
            if !quiet {
                out.json(&json!({
                    "files": reports,
                    "errors": failures.iter().map(|(p, e)| json!({"path": p.display().to_string(), "error": e})).collect::<Vec<_>>(),
                }))?;
            }
        } else {
            print(&mut out, &reports, &failures, watch)?;
        }
        if !watch {
            return Ok(if failures.is_empty() {
                Status::Ok
            } else {
                Status::NotSo
            });
        }
        std::thread::sleep(WATCH_EVERY);
    }
}

/// The files or directories to import, each with the format to read it as
/// (`None`: detect).
fn roots(from: ImportFrom, paths: &[PathBuf]) -> Result<Vec<(Option<Format>, PathBuf)>> {
    let named = match from {
        ImportFrom::Auto => None,
        ImportFrom::Pi => Some(Format::Pi),
        ImportFrom::ClaudeCode => Some(Format::ClaudeCode),
        ImportFrom::Codex => Some(Format::Codex),
    };
    if !paths.is_empty() {
        for p in paths {
            if !p.exists() {
                return Err(anyhow!("{} does not exist", p.display()));
            }
        }
        return Ok(paths.iter().map(|p| (named, p.clone())).collect());
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .ok_or_else(|| anyhow!("HOME is not set: name the files or directories to import"))?;
    let found: Vec<(Option<Format>, PathBuf)> = cairn_import::default_sources(&home)
        .into_iter()
        .filter(|(f, _)| named.is_none_or(|n| n == *f))
        .map(|(f, d)| (Some(f), d))
        .collect();
    if found.is_empty() {
        let wanted = named.map_or_else(
            || {
                Format::ALL
                    .iter()
                    .map(|f| f.default_dir(Path::new("~")).display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            },
            |f| f.default_dir(Path::new("~")).display().to_string(),
        );
        return Err(anyhow!(
            "no sessions found in {wanted}: name the files or directories to import"
        ));
    }
    Ok(found)
}

fn print(
    out: &mut Out<'_>,
    reports: &[FileReport],
    failures: &[(PathBuf, String)],
    watch: bool,
) -> Result<()> {
    let mut counts: HashMap<&'static str, usize> = HashMap::new();
    for r in reports {
        *counts.entry(r.outcome.as_str()).or_default() += 1;
        if watch && r.outcome == Outcome::Unchanged {
            continue;
        }
        let style = match r.outcome {
            Outcome::New | Outcome::Grown | Outcome::Rewritten => Style::Active,
            Outcome::Unchanged => Style::Dim,
        };
        out.spans(&[
            (style, &format!("{:<9}", r.outcome.as_str())),
            (
                Style::Plain,
                &format!(" {}  {:<11} {}", r.session, r.format, r.path),
            ),
            (
                Style::Dim,
                &format!("  ({} records from {} lines)", r.written, r.lines),
            ),
        ])?;
        for n in &r.notes {
            let style = match n.kind {
                NoteKind::Damaged => Style::Warn,
                NoteKind::Repaired | NoteKind::Kept => Style::Dim,
            };
            out.spans(&[(Style::Plain, "    "), (style, &n.to_string())])?;
        }
    }
    for (p, e) in failures {
        out.spans(&[
            (Style::Warn, "failed   "),
            (Style::Plain, &format!(" {}: {e}", p.display())),
        ])?;
    }
    if !watch || !failures.is_empty() || counts.keys().any(|k| *k != "unchanged") {
        let mut parts: Vec<String> = ["new", "grown", "rewritten", "unchanged"]
            .iter()
            .filter_map(|k| counts.get(k).map(|n| format!("{n} {k}")))
            .collect();
        if !failures.is_empty() {
            parts.push(format!("{} failed", failures.len()));
        }
        if parts.is_empty() {
            parts.push("no session files".into());
        }
        out.line(&format!(
            "{} file(s): {}",
            reports.len() + failures.len(),
            parts.join(", ")
        ))?;
    }
    Ok(())
}
