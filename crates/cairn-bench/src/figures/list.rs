//! Listing a store of many sessions through the catalog, vs listing the
//! sessions directory's file names. The warm figure lists with a valid
//! catalog (the usual case); the cold rebuild (no catalog: every session is
//! opened and summarised, then the catalog written) is reported beside it.

use std::path::Path;

use anyhow::{Context as _, Result, bail};
use cairn::Store;

use super::Bench;
use crate::config::issue;
use crate::fixture;
use crate::measure::{best, timed};
use crate::report::{Figure, Target, Unit};

pub fn run(b: &Bench) -> Result<Vec<Figure>> {
    let s = &b.sizes;
    let home = b.sub("list")?;
    fixture::write_many(&home, s.list_sessions)?;
    let dir = home.join("sessions");
    let store = Store::open_dir(&home);
    let catalog = home.join("catalog.json");

    // Cold: no catalog. The directory listing is timed right before it.
    let (cold_base, names) = timed(|| file_names(&dir))?;
    let (cold, listed) = timed(|| Ok(store.list()?))?;
    if listed.len() != s.list_sessions || names.len() != 2 * s.list_sessions {
        bail!(
            "listed {} sessions and {} files, expected {} sessions",
            listed.len(),
            names.len(),
            s.list_sessions
        );
    }
    if !catalog.exists() {
        bail!("listing wrote no catalog at {}", catalog.display());
    }

    let mut warm_ms = Vec::new();
    let mut base_ms = Vec::new();
    for _ in 0..s.list_repeats {
        let (t, _) = timed(|| file_names(&dir))?;
        base_ms.push(t * 1e3);
        let (t, l) = timed(|| Ok(store.list()?))?;
        if l.len() != s.list_sessions {
            bail!("listed {} sessions, expected {}", l.len(), s.list_sessions);
        }
        warm_ms.push(t * 1e3);
    }
    let scaled = s.scaled(
        "sessions",
        s.list_sessions as u64,
        issue::LIST_SESSIONS as u64,
    );
    let n = crate::report::thousands(s.list_sessions as u64);
    let base = best(base_ms);
    Ok(vec![
        Figure::new(
            "list_warm",
            format!("list {n} sessions (catalog warm)"),
            Unit::Millis,
            best(warm_ms),
            "read_dir of the sessions directory, collecting file names",
            base,
            Some(Target::AtMost(5.0)),
        )
        .below(100.0)
        .scaled(scaled.clone())
        .note(format!(
            "{} sessions of one cycle each, each with its .lock file (as cairn leaves them); the listing stats every session file and reads the catalog; best of {}",
            n, s.list_repeats
        )),
        Figure::new(
            "list_cold",
            format!("list {n} sessions (cold: catalog rebuilt)"),
            Unit::Millis,
            cold * 1e3,
            "read_dir of the sessions directory, collecting file names",
            cold_base * 1e3,
            None,
        )
        .scaled(scaled)
        .note("informational: no catalog.json, so every session is opened read-only and summarised once, and the catalog is written (one run)"),
    ])
}

/// The directory's file names.
fn file_names(dir: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        out.push(e?.file_name().to_string_lossy().into_owned());
    }
    Ok(out)
}
