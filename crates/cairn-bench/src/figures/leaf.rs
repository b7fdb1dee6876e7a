//! Append at the leaf + the updated context, with a long history vs a short
//! one. Both sessions are opened for writing once; rounds alternate between
//! them, each round appending cycles (user → tool call → result → reply) and
//! taking `context()` after every append, as an agent loop does before its
//! next model call. `Buffered`, so the figure shows the CPU work that could
//! grow with history rather than the disk's sync latency.
//!
//! A third figure does the same with session memory enabled: its update per
//! append must stay flat too.
//!
//! A second figure does the same while holding the previous context snapshot
//! across the next append (a host that keeps the request it sent until the
//! reply is stored), against the first figure's number at the same size: the
//! context's message list is a persistent chunked list, so the next append
//! copies only its short tail, not the whole context.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use cairn::memory::MemoryConfig;
use cairn::{Access, Context, Durability, Session, Store};

use super::Bench;
use crate::config::issue;
use crate::fixture::{self, Plan};
use crate::measure::{best, timed};
use crate::report::{Figure, Target, Unit};
use crate::workload;

pub fn run(b: &Bench) -> Result<Vec<Figure>> {
    let s = &b.sizes;
    let home = b.sub("leaf")?;
    let big_w = fixture::write_session(&home, &Plan::linear(s.leaf_big_entries, 31), true)?;
    let small_w = fixture::write_session(&home, &Plan::linear(s.leaf_small_entries, 32), true)?;
    let big = open(&home, &big_w.id)?;
    let small = open(&home, &small_w.id)?;

    let mut figures = Vec::new();
    let mut plain_big = None;
    for variant in [Variant::Plain, Variant::Held, Variant::Memory] {
        let hold = variant == Variant::Held;
        if variant == Variant::Memory {
            // Derived from each branch once, untimed; then kept up to date by every append.
            big.enable_memory(MemoryConfig::default())?;
            small.enable_memory(MemoryConfig::default())?;
        }
        let cycles = s.leaf_cycles;
        let mut big_us = Vec::new();
        let mut small_us = Vec::new();
        for r in 0..s.leaf_rounds {
            let calls = format!("leaf-{variant:?}-{r}-");
            let per = |session: &Session| -> Result<f64> {
                let bodies = workload::bodies(400 + r as u64, &calls, cycles);
                let n = bodies.len() as f64;
                let mut held: Option<Arc<Context>> = hold.then(|| session.context());
                let (t, ()) = timed(|| {
                    for body in bodies {
                        session.append(body)?;
                        let ctx = session.context();
                        std::hint::black_box(ctx.messages().len());
                        if variant == Variant::Memory {
                            std::hint::black_box(session.memory());
                        }
                        if hold {
                            held = Some(ctx);
                        }
                    }
                    Ok(())
                })?;
                drop(held);
                Ok(t * 1e6 / n)
            };
            if r % 2 == 0 {
                small_us.push(per(&small)?);
                big_us.push(per(&big)?);
            } else {
                big_us.push(per(&big)?);
                small_us.push(per(&small)?);
            }
        }
        let (name, key, target) = match variant {
            Variant::Plain => (
                "append at leaf + context",
                "leaf_append",
                Some(Target::AtMost(1.2)),
            ),
            Variant::Held => (
                "append at leaf + context, previous snapshot held",
                "leaf_append_held",
                Some(Target::AtMost(1.2)),
            ),
            Variant::Memory => (
                "append at leaf + context + session memory",
                "leaf_append_memory",
                Some(Target::AtMost(1.2)),
            ),
        };
        let (baseline_name, baseline) = match (variant, plain_big) {
            (Variant::Held, Some(plain)) => (
                format!(
                    "figure 7: not held, {} entries",
                    crate::report::thousands(big_w.entries)
                ),
                plain,
            ),
            (Variant::Plain | Variant::Held | Variant::Memory, _) => (
                format!(
                    "the same at {} entries",
                    crate::report::thousands(small_w.entries)
                ),
                best(small_us.clone()),
            ),
        };
        let cairn = best(big_us);
        if variant == Variant::Plain {
            plain_big = Some(cairn);
        }
        let fig = Figure::new(
            key,
            format!("{name}, {} entries", crate::report::thousands(big_w.entries)),
            Unit::Micros,
            cairn,
            baseline_name,
            baseline,
            target,
        )
        .scaled(s.scaled("entries", s.leaf_big_entries as u64, issue::LEAF_BIG as u64))
        .note(format!(
            "per append, Buffered; best of {} alternating rounds of {} appends (each history grows by {} entries)",
            s.leaf_rounds,
            cycles * 4,
            s.leaf_rounds * cycles * 4
        ));
        figures.push(match variant {
            Variant::Plain => fig,
            Variant::Held => fig.note(format!(
                "a held snapshot makes the next append copy the context's unshared tail only (persistent chunked message list); the same at {} entries: {:.2} µs",
                crate::report::thousands(small_w.entries),
                best(small_us)
            )),
            Variant::Memory => fig.note("memory update per append stays flat: session memory enabled (MemoryConfig::default()), updated by every append and read after it"),
        });
    }
    Ok(figures)
}

/// What each append does besides appending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// Takes the new context, drops it before the next append.
    Plain,
    /// Keeps the previous context snapshot alive across the next append.
    Held,
    /// Session memory enabled; reads the memory too.
    Memory,
}

fn open(home: &Path, id: &cairn::SessionId) -> Result<Session> {
    let s = Store::open_dir(home)
        .open(id, Access::Write)
        .with_context(|| format!("opening session {id}"))?;
    s.set_durability(Durability::Buffered);
    Ok(s)
}
