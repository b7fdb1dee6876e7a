//! Resume: open + context of a session whose file is very long but whose
//! context is about 200 entries (a compaction near the end), vs the same with
//! a short file. Both files have a compaction every 250 cycles (~1,000
//! entries, about when a coding agent's window fills), counted from the end,
//! so both end with the same shape: a compaction keeping 25 cycles, then 25
//! more cycles (1 summary + 200 messages).

use anyhow::{Result, bail};

use super::Bench;
use super::open::open_context;
use crate::config::issue;
use crate::fixture::{self, Compactions, Plan, Written};
use crate::measure::{best, timed};
use crate::report::{Figure, Target, Unit};

const SHAPE: Compactions = Compactions {
    period: 250,
    keep: 25,
    tail: 25,
};

/// Cycles whose file holds about `entries` entries (compactions included).
fn plan(entries: usize, seed: u64) -> Plan {
    let per_cycle = 4.0 + 1.0 / SHAPE.period as f64;
    Plan {
        cycles: ((entries as f64) / per_cycle).round() as usize,
        compactions: Some(SHAPE),
        seed,
    }
}

pub fn run(b: &Bench) -> Result<Vec<Figure>> {
    let s = &b.sizes;
    let home = b.sub("resume")?;
    let big = fixture::write_session(&home, &plan(s.resume_big_entries, 21), true)?;
    let small = fixture::write_session(&home, &plan(s.resume_small_entries, 22), true)?;
    let time = |w: &Written, repeats: usize| -> Result<f64> {
        let (_, n) = open_context(&home, &w.id)?; // warm-up, and a check
        if n != w.context_messages {
            bail!(
                "the context has {n} messages, {} expected",
                w.context_messages
            );
        }
        let mut ms = Vec::new();
        for _ in 0..repeats {
            let (t, _) = timed(|| open_context(&home, &w.id))?;
            ms.push(t * 1e3);
        }
        Ok(best(ms))
    };
    let small_repeats = (s.resume_repeats * 5).max(5);
    let small_ms = time(&small, small_repeats)?;
    let big_ms = time(&big, s.resume_repeats)?;
    let fig = Figure::new(
        "resume",
        format!(
            "resume, {}-message context, {} entries in the file",
            big.context_messages,
            crate::report::thousands(big.entries)
        ),
        Unit::Millis,
        big_ms,
        format!(
            "the same resume with {} entries in the file",
            crate::report::thousands(small.entries)
        ),
        small_ms,
        Some(Target::AtMost(2.0)),
    )
    .scaled(s.scaled("entries", s.resume_big_entries as u64, issue::RESUME_BIG as u64))
    .note(format!(
        "files of {:.1} MiB and {:.2} MiB; a compaction every {} cycles (~{} entries); writer open; warm page cache; best of {} and {} runs",
        big.bytes as f64 / 1048576.0,
        small.bytes as f64 / 1048576.0,
        SHAPE.period,
        SHAPE.period * 4,
        s.resume_repeats,
        small_repeats
    ));
    Ok(vec![fig])
}
