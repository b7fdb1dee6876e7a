//! The Postgres backend (`cairn-postgres`), on the server named by
//! `CAIRN_TEST_POSTGRES_URL` (default the local one), in a scratch schema
//! dropped at the end: durable append against raw `INSERT`s of the same
//! bytes, the aggregate rate of 16 workers against one, and open + context
//! against the file backend, all measured in this group.
//!
//! - **Append.** One `Session::append` (`Durability::Sync`) per record,
//!   against a raw connection doing one `INSERT` of the same line per
//!   transaction (autocommit, an unnamed statement with binary parameters:
//!   the protocol cairn uses) into a plain `(session, seq, payload)` table
//!   with its primary key. The sides take turns by chunks, as in the
//!   SQLite group; each side's figure is the median of its rounds' rates.
//! - **Workers.** 16 threads, each with its own backend (its own
//!   connections, as 16 worker processes would have), each appending to its
//!   own session, against one thread appending alone: the aggregate rate of
//!   durable appends (the server's group commit shares WAL flushes between
//!   concurrent commits).
//! - **Open + context.** The open figure's linear session (same plan and
//!   seed as `open.rs`) written as a file and copied line for line into the
//!   Postgres store; then each repeat opens it for writing and takes its
//!   context with each backend; each side keeps its best time.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, Result, bail};
use cairn::{Access, Backend, Durability, FileBackend, SessionId, Store};
use cairn_postgres::PostgresBackend;
use cairn_postgres::scratch::Scratch;
use cairn_stores::{CopyOutcome, copy_session};
use postgres::types::Type;

use super::Bench;
use super::append::{mean_line, new_session_in, rounds_note};
use super::open::open_context_read as open_context;
use super::sqlite::{append_chunk, show, split_lines, sqlite_open_context};
use crate::config::issue;
use crate::fixture::{self, Plan};
use crate::measure::{best, median, timed};
use crate::report::{Figure, Target, Unit, thousands};
use crate::workload;

/// Records each side appends before the next side's turn.
const CHUNK: usize = 25;

/// Concurrent workers of the throughput figure.
const WORKERS: usize = 16;

pub fn run(b: &Bench) -> Result<Vec<Figure>> {
    // No server: the figures are skipped with a notice, except under CI,
    // which must measure them.
    let scratch = match Scratch::connect("bench") {
        Ok(scratch) => scratch,
        Err(why) if std::env::var_os("CI").is_some() => bail!("{why}"),
        Err(why) => {
            eprintln!("postgres: skipped ({why}; set CAIRN_TEST_POSTGRES_URL)");
            return Ok(Vec::new());
        }
    };
    let backend =
        Arc::new(PostgresBackend::open(&scratch.url).context("opening the cairn-postgres store")?);
    let store = Store::with_backend(backend.clone());
    let mut raw = scratch.raw();
    raw.batch_execute(&format!(
        "CREATE TABLE {}.raw_records (session text NOT NULL, seq bigint NOT NULL,
             payload bytea NOT NULL, PRIMARY KEY (session, seq))",
        scratch.schema
    ))?;
    let mut figures = append_figure(b, &scratch, &store, &mut raw)?;
    figures.push(workers_figure(b, &scratch)?);
    figures.push(open_figure(b, &backend, &store)?);
    Ok(figures)
}

/// Inserts `lines` as `session`'s records `first_seq`.., one statement
/// (one transaction) each; seconds taken.
fn raw_chunk(
    raw: &mut postgres::Client,
    schema: &str,
    session: &str,
    first_seq: i64,
    lines: &[Vec<u8>],
) -> Result<f64> {
    let sql =
        format!("INSERT INTO {schema}.raw_records (session, seq, payload) VALUES ($1, $2, $3)");
    let (t, ()) = timed(|| {
        for (i, line) in lines.iter().enumerate() {
            let seq = first_seq + i as i64;
            raw.query_typed(
                &sql,
                &[
                    (&session, Type::TEXT),
                    (&seq, Type::INT8),
                    (&line.as_slice(), Type::BYTEA),
                ],
            )?;
        }
        Ok(())
    })?;
    Ok(t)
}

fn append_figure(
    b: &Bench,
    scratch: &Scratch,
    store: &Store,
    raw: &mut postgres::Client,
) -> Result<Vec<Figure>> {
    let s = &b.sizes;
    let (mut pg, mut rawr) = (Vec::new(), Vec::new());
    for r in 0..s.sqlite_rounds {
        let bodies = workload::bodies(500 + r as u64, "call-", s.sqlite_cycles);
        let records = bodies.len() as f64;
        let lines = fixture::encode_chain(&bodies, 1);
        let session = new_session_in(store, Durability::Sync)?;
        let raw_id = SessionId::generate();
        let mut t = [0.0f64; 2];
        for (c, (chunk, raw_lines)) in bodies.chunks(CHUNK).zip(lines.chunks(CHUNK)).enumerate() {
            for side in (0..2).map(|k| (k + c + r) % 2) {
                t[side] += match side {
                    0 => append_chunk(&session, chunk.to_vec())?,
                    _ => raw_chunk(
                        raw,
                        &scratch.schema,
                        raw_id.as_str(),
                        1 + (c * CHUNK) as i64,
                        raw_lines,
                    )?,
                };
            }
        }
        pg.push(records / t[0]);
        rawr.push(records / t[1]);
    }
    let vs_raw = rounds_note(&pg, &rawr);
    let (pgv, rawv) = (median(pg), median(rawr));
    Ok(vec![
        Figure::new(
            "pg_append",
            "durable append, Postgres backend",
            Unit::RecordsPerSec,
            pgv,
            "raw Postgres: one INSERT of the same line per transaction (synchronous_commit on) into (session, seq, payload)",
            rawv,
            Some(Target::AtLeast(0.85)),
        )
        .note(format!(
            "{} records per round and side, one Session::append (Durability::Sync) each; the sides take turns by chunks of {CHUNK} records; median of {} rounds (mean {} B per line)",
            s.sqlite_cycles * 4,
            s.sqlite_rounds,
            mean_line(&fixture::encode_chain(&workload::bodies(1, "c", 50), 1))
        ))
        .note("cairn-postgres sends one statement per append (one round trip, one transaction), a call of the schema's PL/pgSQL append_one function: the fenced UPDATE of the session's row (lease token, expiry, summary columns) and the INSERT of the line with kind/id/parent/crc/writer (its primary key and one secondary index, on entry id; no foreign key)")
        .note(vs_raw),
    ])
}

fn workers_figure(b: &Bench, scratch: &Scratch) -> Result<Figure> {
    let s = &b.sizes;
    let per_worker = s.sqlite_cycles * 2;
    // Each worker: its own backend (its own connections) and session.
    let run = |workers: usize| -> Result<f64> {
        let stores: Vec<Store> = (0..workers)
            .map(|_| {
                PostgresBackend::open(&scratch.url)
                    .map(|b| Store::with_backend(Arc::new(b)))
                    .context("opening a worker's store")
            })
            .collect::<Result<_>>()?;
        let sessions = stores
            .iter()
            .map(|st| new_session_in(st, Durability::Sync))
            .collect::<Result<Vec<_>>>()?;
        let start = Instant::now();
        std::thread::scope(|t| -> Result<()> {
            let handles: Vec<_> = sessions
                .iter()
                .enumerate()
                .map(|(i, session)| {
                    t.spawn(move || {
                        let bodies = workload::bodies(600 + i as u64, "call-", per_worker / 4);
                        append_chunk(session, bodies).map(drop)
                    })
                })
                .collect();
            for h in handles {
                h.join()
                    .map_err(|_| anyhow::anyhow!("a worker panicked"))??;
            }
            Ok(())
        })?;
        let secs = start.elapsed().as_secs_f64();
        let records: u64 = sessions.iter().map(|s| s.len() - 1).sum();
        Ok(records as f64 / secs)
    };
    let one = run(1)?;
    let many = run(WORKERS)?;
    Ok(Figure::new(
        "pg_workers",
        format!("durable appends, {WORKERS} workers on {WORKERS} sessions (aggregate)"),
        Unit::RecordsPerSec,
        many,
        "one worker appending alone",
        one,
        None,
    )
    .note(format!(
        "each worker a thread with its own backend (own connections), {} records each, one Session::append (Durability::Sync) each; wall time of the whole run; {} cores on this machine",
        per_worker,
        std::thread::available_parallelism().map_or(0, usize::from)
    ))
    .note("informational: the server shares WAL flushes between concurrent commits (group commit), so the aggregate grows with workers until the CPU or the disk is saturated"))
}

fn open_figure(b: &Bench, backend: &Arc<PostgresBackend>, store: &Store) -> Result<Figure> {
    let s = &b.sizes;
    let home = b.sub("postgres-open")?;
    let w = fixture::write_session(&home, &Plan::linear(s.open_entries, 11), true)?;
    let records = w.entries + 1;
    let files = FileBackend::new(home.join("sessions"));
    match copy_session(&files, &**backend, &w.id)
        .with_context(|| format!("copying session {} into Postgres", w.id))?
    {
        CopyOutcome::Copied(c) if c.records == records && c.bytes == w.bytes => {}
        other => bail!("copying the fixture into Postgres gave {other:?}, not {records} records"),
    }
    // The copy is the same bytes as the file.
    let lines = split_lines(&std::fs::read(&w.path)?);
    if backend.stored_lines(&w.id)? != lines {
        bail!("the Postgres copy of {} differs from its file", w.id);
    }
    for (name, n) in [
        ("file", open_context(&home, &w.id)?.1),
        (
            "Postgres",
            sqlite_open_context(store, &w.id, Access::Write)?.1,
        ),
    ] {
        if n != w.context_messages {
            bail!(
                "the {name} session's context has {n} messages, {} expected",
                w.context_messages
            );
        }
    }
    let (mut pg_ms, mut file_ms) = (Vec::new(), Vec::new());
    for r in 0..s.sqlite_open_repeats {
        for side in (0..2).map(|k| (k + r) % 2) {
            if side == 0 {
                let (t, _) = timed(|| sqlite_open_context(store, &w.id, Access::Write))?;
                pg_ms.push(t * 1e3);
            } else {
                let (t, _) = timed(|| open_context(&home, &w.id))?;
                file_ms.push(t * 1e3);
            }
        }
    }
    let times = format!(
        "runs (ms): Postgres {}; file {}",
        show(&pg_ms),
        show(&file_ms)
    );
    let scaled = s.scaled("entries", s.open_entries as u64, issue::OPEN_ENTRIES as u64);
    Ok(Figure::new(
        "pg_open_context_vs_file",
        format!("open + context, Postgres vs file backend, {} entries", thousands(w.entries)),
        Unit::Millis,
        best(pg_ms),
        "the file backend's open + context of the same records, every message read on both sides",
        best(file_ms),
        Some(Target::AtMost(1.5)),
    )
    .scaled(scaled)
    .note(w.open_note(
        "writer open (for Postgres: a lease transaction, then one ordered read of the rows over a local TCP connection)",
        s.sqlite_open_repeats,
    ))
    .note(times))
}
