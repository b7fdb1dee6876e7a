//! `cairn-bench`: cairn measured against its physical limits and against what
//! users would pick instead (`docs/PERFORMANCE.md`). Every figure is measured together with
//! its baseline in the same run and reported as a ratio, with its target and
//! whether it is met; the table goes to stdout and the report to JSON.
//!
//! Exit codes: 0 when every figure was measured (whether or not it meets its
//! target: machines are noisy, and CI only smoke-tests this); 1 when a figure
//! could not be measured; 2 for usage errors. See `docs/PERFORMANCE.md`.

mod config;
mod figures;
mod fixture;
mod machine;
mod measure;
mod report;
mod workload;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context as _, Result, bail};
use clap::{Parser, Subcommand};

use crate::config::Sizes;
use crate::figures::{Bench, GROUPS};
use crate::machine::Machine;
use crate::report::Report;

/// Benchmarks cairn against baselines measured in the same run.
#[derive(Debug, Parser)]
#[command(name = "cairn-bench", version)]
struct Cli {
    /// Scaled-down sizes (20,000 entries instead of 100,000 and 1,000,000;
    /// a 64 MiB session instead of 1 GiB): a smoke run of well under two minutes.
    #[arg(long)]
    quick: bool,
    /// Scratch directory for sessions and fixtures (a temporary directory is
    /// made inside it). Default: the cargo target directory.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Where to write the report as JSON. Default: `<target dir>/cairn-bench.json`.
    #[arg(long, value_name = "PATH")]
    json_out: Option<PathBuf>,
    /// Run only these groups (comma-separated): append, open, resume, leaf, list, memory, sqlite, cli, import, postgres, serve, workspace; and buffered (figure 3's rounds alone, for profiling; never in a full run).
    #[arg(long, value_delimiter = ',', value_name = "GROUPS")]
    only: Vec<String>,
    /// Keep the scratch directory (to profile against its fixtures).
    #[arg(long)]
    keep: bool,
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// (internal) Open a session and print the memory high-water mark as JSON.
    #[command(hide = true)]
    PeakRss {
        /// The store's home directory.
        home: PathBuf,
        /// The session id.
        id: String,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let result = match &cli.command {
        Some(Cmd::PeakRss { home, id }) => figures::child_main(home, id).map(|()| true),
        None => run(&cli),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("cairn-bench: error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Runs the selected groups; `Ok(false)` when some figure failed with an error.
fn run(cli: &Cli) -> Result<bool> {
    let started = Instant::now();
    let sizes = if cli.quick {
        Sizes::quick()
    } else {
        Sizes::full()
    };
    for name in &cli.only {
        if !GROUPS.iter().any(|g| g.name == name) {
            let names: Vec<&str> = GROUPS.iter().map(|g| g.name).collect();
            bail!(
                "no figure group {name:?}; the groups are {}",
                names.join(", ")
            );
        }
    }
    let target = target_dir();
    let parent = cli.dir.clone().unwrap_or_else(|| target.clone());
    std::fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
    let scratch = tempfile::Builder::new()
        .prefix("cairn-bench-")
        .tempdir_in(&parent)
        .with_context(|| format!("making a scratch directory in {}", parent.display()))?;
    let machine = Machine::describe(scratch.path());
    eprintln!(
        "cairn-bench: {} run in {}",
        if cli.quick {
            "quick (scaled-down)"
        } else {
            "full"
        },
        scratch.path().display()
    );
    let bench = Bench {
        dir: scratch.path().to_path_buf(),
        sizes,
    };
    let mut figures = Vec::new();
    let mut errors = Vec::new();
    for g in GROUPS {
        if !g.selected(&cli.only) {
            continue;
        }
        let t = Instant::now();
        eprint!("  {:<7} {} ... ", g.name, g.about);
        match (g.run)(&bench) {
            Ok(f) => {
                eprintln!("{:.1} s", t.elapsed().as_secs_f64());
                figures.extend(f);
            }
            Err(e) => {
                eprintln!("error");
                errors.push(format!("{}: {e:#}", g.name));
            }
        }
        // Free the group's fixtures before the next one (unless kept for
        // profiling: `--keep` with `--only` keeps what a group wrote).
        if !cli.keep {
            let _ = std::fs::remove_dir_all(bench.dir().join(g.name));
        }
    }
    let report = Report {
        mode: if cli.quick { "quick" } else { "full" },
        scaled: cli.quick,
        machine,
        seconds: started.elapsed().as_secs_f64(),
        figures,
        errors,
    };
    print!("{}", report.table());
    let json = cli
        .json_out
        .clone()
        .unwrap_or_else(|| target.join("cairn-bench.json"));
    report.write_json(&json)?;
    eprintln!("cairn-bench: report written to {}", json.display());
    if cli.keep {
        let kept = scratch.keep();
        eprintln!("cairn-bench: kept {}", kept.display());
    }
    Ok(report.errors.is_empty())
}

/// The cargo target directory this binary was built in (`<target>/<profile>/cairn-bench`),
/// else `./target`.
fn target_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| {
            let t = exe.parent()?.parent()?.to_path_buf();
            is_target_dir(&t).then_some(t)
        })
        .unwrap_or_else(|| PathBuf::from("target"))
}

fn is_target_dir(p: &Path) -> bool {
    p.join("CACHEDIR.TAG").exists()
}
