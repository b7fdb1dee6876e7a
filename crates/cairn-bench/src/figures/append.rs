//! Append throughput: `Sync` vs a raw `write` + `fdatasync` loop, group
//! commit from many threads vs `Sync`, and `Buffered` vs one raw `write` per
//! record. Rounds alternate cairn and baseline (swapping which goes first) on
//! fresh files in the same directory; each side's figure is the median of its
//! rounds' rates.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Barrier;

use anyhow::{Context as _, Result, anyhow};
use cairn::{CommitStats, Durability, EntryBody, NewSession, Session, Store};

use super::Bench;
use crate::config::Sizes;
use crate::fixture;
use crate::measure::{median, timed};
use crate::report::{Figure, Target, Unit};
use crate::workload;

/// Records in `cycles` cycles of the workload (four messages each).
fn records(cycles: usize) -> f64 {
    (cycles * 4) as f64
}

pub fn run(b: &Bench) -> Result<Vec<Figure>> {
    let dir = b.sub("append")?;
    let s = &b.sizes;

    // Sync vs write + fdatasync, and group commit (many threads on one
    // session) vs Sync, interleaved so a disk that slows down mid-run (other
    // tenants' I/O) slows every side alike.
    let mut cairn_sync = Vec::new();
    let mut raw_sync = Vec::new();
    let mut group = Vec::new();
    let mut batches = CommitStats::default();
    for r in 0..s.append_rounds {
        let group_home = dir.join(format!("group-{r}"));
        let mut group_side = || -> Result<()> {
            let (t, stats) = group_round(&group_home, s.group_threads, s.group_cycles, r)?;
            group.push(records(s.group_cycles * s.group_threads) / t);
            batches.merge(&stats);
            Ok(())
        };
        let bodies = workload::bodies(100 + r as u64, "call-", s.sync_cycles);
        let lines = fixture::encode_chain(&bodies, 1);
        let home = dir.join(format!("sync-{r}"));
        let raw = dir.join(format!("raw-sync-{r}.jsonl"));
        let mut cairn_round = || -> Result<()> {
            let t = append_all(&home, Durability::Sync, bodies.clone())?;
            cairn_sync.push(records(s.sync_cycles) / t);
            Ok(())
        };
        let mut raw_round = || -> Result<()> {
            let t = raw_loop(&raw, &lines, true)?;
            raw_sync.push(records(s.sync_cycles) / t);
            Ok(())
        };
        if r % 2 == 0 {
            raw_round()?;
            cairn_round()?;
            group_side()?;
        } else {
            group_side()?;
            cairn_round()?;
            raw_round()?;
        }
    }
    let sync_rounds = rounds_note(&cairn_sync, &raw_sync);
    let sync = median(cairn_sync);
    let raw_sync = median(raw_sync);

    let group_rounds = rounds_note(&group, &[]);
    let group = median(group);

    let (buffered, raw_buf, buf_rounds) = buffered_rounds(&dir, s)?;

    let rounds = format!(
        "median of {} alternating rounds; a record is one message of the user → tool call → tool result → reply cycle (mean {} B per line)",
        s.append_rounds,
        mean_line(&fixture::encode_chain(&workload::bodies(1, "c", 50), 1))
    );
    Ok(vec![
        Figure::new(
            "sync_append",
            "durable append (Sync)",
            Unit::RecordsPerSec,
            sync,
            "raw write + fdatasync per record, same bytes, same directory",
            raw_sync,
            Some(Target::AtLeast(0.85)),
        )
        .note(format!("{} records per round; {rounds}", s.sync_cycles * 4))
        .note(sync_rounds),
        Figure::new(
            "group_commit",
            format!("group commit, {} threads, one session", s.group_threads),
            Unit::RecordsPerSec,
            group,
            "the durable append (Sync) figure above",
            sync,
            Some(Target::AtLeast(8.0)),
        )
        .note(format!(
            "{} threads x {} records per round, every append durable (Durability::Group) before it returns; {} cores",
            s.group_threads,
            s.group_cycles * 4,
            std::thread::available_parallelism().map_or(1, usize::from)
        ))
        .note(group_rounds)
        .note(format!(
            "records per fdatasync, all rounds: mean {:.1} over {} syncs; histogram {}",
            batches.mean_batch(),
            batches.syncs,
            batches.histogram()
        )),
        buffered_figure(s, buffered, raw_buf, buf_rounds),
    ])
}

/// Only the `Buffered` figure (the `buffered` group): for profiling the
/// append path without the synced rounds before it.
pub fn run_buffered(b: &Bench) -> Result<Vec<Figure>> {
    let dir = b.sub("append")?;
    let (buffered, raw_buf, buf_rounds) = buffered_rounds(&dir, &b.sizes)?;
    Ok(vec![buffered_figure(
        &b.sizes, buffered, raw_buf, buf_rounds,
    )])
}

/// `Buffered` appends vs one write per record, in alternating rounds: the
/// medians of cairn's and the baseline's rates, and the rounds' note.
fn buffered_rounds(dir: &Path, s: &Sizes) -> Result<(f64, f64, String)> {
    let mut cairn_buf = Vec::new();
    let mut raw_buf = Vec::new();
    for r in 0..s.append_rounds {
        let bodies = workload::bodies(200 + r as u64, "call-", s.buffered_cycles);
        let lines = fixture::encode_chain(&bodies, 1);
        let home = dir.join(format!("buffered-{r}"));
        let raw = dir.join(format!("raw-buffered-{r}.jsonl"));
        let mut cairn_round = || -> Result<()> {
            let t = append_all(&home, Durability::Buffered, bodies.clone())?;
            cairn_buf.push(records(s.buffered_cycles) / t);
            Ok(())
        };
        let mut raw_round = || -> Result<()> {
            let t = raw_loop(&raw, &lines, false)?;
            raw_buf.push(records(s.buffered_cycles) / t);
            Ok(())
        };
        if r % 2 == 0 {
            raw_round()?;
            cairn_round()?;
        } else {
            cairn_round()?;
            raw_round()?;
        }
    }
    let buf_rounds = rounds_note(&cairn_buf, &raw_buf);
    let buffered = median(cairn_buf);
    let raw_buf = median(raw_buf);
    Ok((buffered, raw_buf, buf_rounds))
}

/// Figure 3 from its medians and rounds' note.
fn buffered_figure(s: &Sizes, buffered: f64, raw_buf: f64, buf_rounds: String) -> Figure {
    Figure::new(
        "buffered_append",
        "append (Buffered)",
        Unit::RecordsPerSec,
        buffered,
        "one raw write per record, same bytes, no sync",
        raw_buf,
        Some(Target::AtLeast(0.5)),
    )
    .note(format!(
        "{} records per round; cairn's side includes checking, encoding, CRC, indexing and the incremental context",
        s.buffered_cycles * 4
    ))
    .note(buf_rounds)
}

/// The rounds' rates, cairn's then the baseline's, for the notes.
pub(super) fn rounds_note(cairn: &[f64], base: &[f64]) -> String {
    let show = |v: &[f64]| {
        v.iter()
            .map(|r| crate::report::thousands(r.round() as u64))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if base.is_empty() {
        format!("rounds (rec/s): {}", show(cairn))
    } else {
        format!(
            "rounds (rec/s): cairn {}; baseline {}",
            show(cairn),
            show(base)
        )
    }
}

pub(super) fn mean_line(lines: &[Vec<u8>]) -> usize {
    lines.iter().map(Vec::len).sum::<usize>() / lines.len().max(1)
}

fn new_session(home: &Path, d: Durability) -> Result<Session> {
    new_session_in(&Store::open_dir(home), d)
}

/// A new session of `store` (any backend) with durability `d`.
pub(super) fn new_session_in(store: &Store, d: Durability) -> Result<Session> {
    let s = store
        .create(NewSession {
            title: Some("append benchmark".into()),
            cwd: Some("/work/project".into()),
            ..NewSession::default()
        })
        .context("creating a session")?;
    s.set_durability(d);
    Ok(s)
}

/// Appends `bodies` to a new session; seconds taken (creation excluded).
fn append_all(home: &Path, d: Durability, bodies: Vec<EntryBody>) -> Result<f64> {
    let s = new_session(home, d)?;
    let (t, ()) = timed(|| {
        for body in bodies {
            s.append(body)?;
        }
        Ok(())
    })?;
    Ok(t)
}

/// Writes `lines` one `write` call each (and `fdatasync` after each when
/// `sync`) to a new file; seconds taken (creation excluded).
fn raw_loop(path: &Path, lines: &[Vec<u8>], sync: bool) -> Result<f64> {
    let mut f: File = OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    // As cairn's create does: the file exists durably with its first line.
    f.write_all(b"{\"header\":true}\n")?;
    f.sync_all()?;
    let (t, ()) = timed(|| {
        for l in lines {
            f.write_all(l)?;
            if sync {
                f.sync_data()?;
            }
        }
        Ok(())
    })?;
    Ok(t)
}

/// `threads` threads append `cycles` cycles each to one session under
/// `Durability::Group`, all starting together; seconds until the last
/// returns, and how many records each sync covered.
fn group_round(
    home: &Path,
    threads: usize,
    cycles: usize,
    round: usize,
) -> Result<(f64, CommitStats)> {
    let s = new_session(home, Durability::Group)?;
    let work: Vec<Vec<EntryBody>> = (0..threads)
        .map(|t| {
            workload::bodies(
                (300 + round * threads + t) as u64,
                &format!("t{t}-"),
                cycles,
            )
        })
        .collect();
    let start = Barrier::new(threads + 1);
    let t = std::thread::scope(|scope| -> Result<f64> {
        let handles: Vec<_> = work
            .into_iter()
            .map(|bodies| {
                let (s, start) = (&s, &start);
                scope.spawn(move || -> Result<()> {
                    start.wait();
                    for body in bodies {
                        s.append(body)?;
                    }
                    Ok(())
                })
            })
            .collect();
        let (t, ()) = timed(|| {
            start.wait();
            for h in handles {
                h.join()
                    .map_err(|_| anyhow!("an appending thread panicked"))??;
            }
            Ok(())
        })?;
        Ok(t)
    })?;
    Ok((t, s.commit_stats()))
}
