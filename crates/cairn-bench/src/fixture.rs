//! Fixture sessions written straight into the store layout
//! (`<home>/sessions/<id>.jsonl`, header as record 0), line by line with
//! cairn's own encoder, through one buffered writer and one final sync:
//! a million entries take seconds instead of a million fsyncs.
//!
//! A fixture is a linear session of workload cycles (see `workload.rs`),
//! optionally with compactions placed at cycle boundaries, counted from the
//! end so that files of different lengths end with the same context.

use std::collections::VecDeque;
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use cairn::frame::{self, TRAILER_LEN};
use cairn::{Body, Entry, EntryBody, EntryId, SessionId};
use cairn::{Compaction, FORMAT_VERSION, Header, Lineage};
use serde_json::json;

use crate::workload::{self, Rng};

/// Where compactions go, in cycles of four messages.
#[derive(Debug, Clone, Copy)]
pub struct Compactions {
    /// One compaction every this many cycles.
    pub period: usize,
    /// Cycles each compaction keeps (its `first_kept` is the user message
    /// this many cycles back).
    pub keep: usize,
    /// Cycles after the last compaction.
    pub tail: usize,
}

/// The shape of a fixture session.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Number of message cycles (4 entries each).
    pub cycles: usize,
    /// Compactions, if any.
    pub compactions: Option<Compactions>,
    /// Seed of the content.
    pub seed: u64,
}

impl Plan {
    /// About `entries` entries, without compactions.
    pub fn linear(entries: usize, seed: u64) -> Plan {
        Plan {
            cycles: entries.div_ceil(4),
            compactions: None,
            seed,
        }
    }
}

/// What was written.
#[derive(Debug, Clone)]
pub struct Written {
    /// The session.
    pub id: SessionId,
    /// Its file.
    pub path: PathBuf,
    /// Entries written (the header is not one).
    pub entries: u64,
    /// Size of the file.
    pub bytes: u64,
    /// Bytes of the entries' JSON content (their `data` values).
    pub data_bytes: u64,
    /// Messages the context at the leaf must have.
    pub context_messages: usize,
}

impl Written {
    /// What an open figure's note says of the session: its size and
    /// context, then `how` it was opened, and how many runs gave the best.
    pub fn open_note(&self, how: &str, repeats: usize) -> String {
        format!(
            "{:.1} MiB of lines, no compaction (the context holds all {} messages); {how}; best of {repeats}",
            self.bytes as f64 / 1048576.0,
            self.context_messages,
        )
    }
}

/// Milliseconds between records' timestamps.
const TICK_MS: i64 = 1_000;
/// A fixed epoch for fixture timestamps (2026-01-01T00:00:00Z).
const EPOCH_MS: i64 = 1_767_225_600_000;

/// Sequential writer of one session file.
struct Writer {
    out: BufWriter<File>,
    seq: u64,
    bytes: u64,
    data_bytes: u64,
    entries: u64,
    last: Option<EntryId>,
}

impl Writer {
    fn line(&mut self, line: &[u8]) -> Result<()> {
        self.out.write_all(line)?;
        self.bytes += line.len() as u64;
        self.seq += 1;
        Ok(())
    }

    /// Appends an entry at the leaf; returns its id.
    fn entry(&mut self, body: EntryBody) -> Result<EntryId> {
        let id = workload::entry_id(self.entries);
        let e = Entry {
            id: id.clone(),
            parent: self.last.replace(id.clone()),
            body,
        };
        let ts = cairn::format_millis(EPOCH_MS + self.seq as i64 * TICK_MS);
        let line = frame::encode_entry(self.seq, &ts, &e);
        self.data_bytes += data_len(&line) as u64;
        self.entries += 1;
        self.line(&line)?;
        Ok(id)
    }
}

/// Bytes of a line's `data` value: between `,"data":` and the checksum trailer.
pub fn data_len(line: &[u8]) -> usize {
    // No member before `data` can contain `,"data":` (ids and kinds have no quotes).
    memchr::memmem::find(line, b",\"data\":")
        .map_or(0, |i| line.len().saturating_sub(i + 8 + TRAILER_LEN + 1))
}

/// The header line of a fixture session.
fn header(id: &SessionId) -> Vec<u8> {
    let created = cairn::format_millis(EPOCH_MS);
    let h = Header {
        format: FORMAT_VERSION,
        session: id.clone(),
        created: created.clone(),
        cwd: Some("/work/project".into()),
        title: Some("benchmark fixture".into()),
        app_state: json!({}),
        lineage: Lineage::default(),
        writer: cairn::WRITER.to_owned(),
    };
    frame::encode(0, &created, &Body::Header(h))
}

fn compacts_after(c: usize, plan: &Plan) -> Option<Compactions> {
    let k = plan.compactions?;
    let from_end = plan.cycles.checked_sub(c + 1)?;
    (k.period > 0 && c + 1 >= k.keep && from_end >= k.tail && (from_end - k.tail) % k.period == 0)
        .then_some(k)
}

/// Writes a new session under `home` (creating `home/sessions`). With
/// `durable`, the file is fsynced before returning, so its write-back does not
/// disturb later measurements.
///
/// # Errors
///
/// I/O errors.
pub fn write_session(home: &Path, plan: &Plan, durable: bool) -> Result<Written> {
    let dir = home.join("sessions");
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let id = SessionId::generate();
    let path = dir.join(format!("{id}.jsonl"));
    let file = File::create_new(&path).with_context(|| format!("creating {}", path.display()))?;
    let mut w = Writer {
        out: BufWriter::with_capacity(1 << 20, file),
        seq: 0,
        bytes: 0,
        data_bytes: 0,
        entries: 0,
        last: None,
    };
    w.line(&header(&id))?;
    let mut rng = Rng::new(plan.seed);
    let mut starts: VecDeque<EntryId> = VecDeque::new();
    let mut context_messages = 0usize;
    for c in 0..plan.cycles {
        let [user, call, result, reply] = workload::cycle(&mut rng, &format!("call-{c}"));
        starts.push_back(w.entry(EntryBody::Message(user))?);
        w.entry(EntryBody::Message(call))?;
        w.entry(EntryBody::Message(result))?;
        w.entry(EntryBody::Message(reply))?;
        context_messages += 4;
        if let Some(k) = compacts_after(c, plan) {
            while starts.len() > k.keep.max(1) {
                starts.pop_front();
            }
            let first_kept = if k.keep == 0 {
                None
            } else {
                starts.front().cloned()
            };
            let summary = workload::prose(&mut rng, 1_800, 2_200);
            w.entry(EntryBody::Compaction(Compaction {
                summary,
                first_kept,
                tokens_before: Some(150_000),
            }))?;
            context_messages = 1 + 4 * k.keep;
        }
        if let Some(k) = plan.compactions {
            while starts.len() > k.keep.max(1) {
                starts.pop_front();
            }
        }
    }
    let file = w
        .out
        .into_inner()
        .map_err(|e| e.into_error())
        .with_context(|| format!("writing {}", path.display()))?;
    if durable {
        file.sync_all()
            .with_context(|| format!("syncing {}", path.display()))?;
    }
    let bytes = file.metadata()?.len();
    if bytes != w.bytes {
        bail!(
            "{} holds {bytes} bytes, {} were written",
            path.display(),
            w.bytes
        );
    }
    Ok(Written {
        id,
        path,
        entries: w.entries,
        bytes,
        data_bytes: w.data_bytes,
        context_messages,
    })
}

/// Writes `count` small sessions (one cycle each) and an empty writer-lock
/// file beside each, as a store that has been used for a while looks.
///
/// # Errors
///
/// I/O errors.
pub fn write_many(home: &Path, count: usize) -> Result<Vec<SessionId>> {
    let mut ids = Vec::with_capacity(count);
    for n in 0..count {
        let plan = Plan {
            cycles: 1,
            compactions: None,
            seed: n as u64,
        };
        let w = write_session(home, &plan, false)?;
        File::create(w.path.with_extension("lock"))?;
        ids.push(w.id);
    }
    Ok(ids)
}

/// Lines encoded as cairn would write `bodies` at the leaf of a session whose
/// next record is `first_seq` (same framing, id shape and time format), for
/// the raw baselines.
pub fn encode_chain(bodies: &[EntryBody], first_seq: u64) -> Vec<Vec<u8>> {
    let mut parent: Option<EntryId> = None;
    let ts = cairn::now_rfc3339();
    bodies
        .iter()
        .enumerate()
        .map(|(i, body)| {
            let id = workload::entry_id(first_seq + i as u64);
            let e = Entry {
                id: id.clone(),
                parent: parent.replace(id),
                body: body.clone(),
            };
            frame::encode_entry(first_seq + i as u64, &ts, &e)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn::{Access, Store};

    #[test]
    fn fixture_opens_with_the_planned_context() {
        let home = tempfile::tempdir().unwrap();
        let plan = Plan {
            cycles: 60,
            compactions: Some(Compactions {
                period: 20,
                keep: 5,
                tail: 7,
            }),
            seed: 3,
        };
        let w = write_session(home.path(), &plan, false).unwrap();
        // 60 cycles; compactions after cycles 12, 32 and 52.
        assert_eq!(w.entries, 60 * 4 + 3);
        let s = Store::open_dir(home.path())
            .open(&w.id, Access::Write)
            .unwrap();
        assert_eq!(s.entry_count() as u64, w.entries);
        assert_eq!(s.context().messages().len(), w.context_messages);
        assert_eq!(w.context_messages, 1 + 4 * 5 + 4 * 7);
        assert!(s.context().compaction().is_some());
    }

    #[test]
    fn linear_fixture_keeps_every_message() {
        let home = tempfile::tempdir().unwrap();
        let w = write_session(home.path(), &Plan::linear(40, 1), false).unwrap();
        let s = Store::open_dir(home.path())
            .open(&w.id, Access::Read)
            .unwrap();
        assert_eq!(s.context().messages().len(), 40);
        assert!(w.data_bytes < w.bytes);
    }

    #[test]
    fn data_len_measures_the_data_value() {
        let body = EntryBody::Message(cairn::Message::text(cairn::Role::User, "hi"));
        let line = &encode_chain(std::slice::from_ref(&body), 1)[0];
        let data = serde_json::to_string(&cairn::Message::text(cairn::Role::User, "hi")).unwrap();
        assert_eq!(data_len(line), data.len());
    }

    #[test]
    fn many_sessions_are_listed() {
        let home = tempfile::tempdir().unwrap();
        write_many(home.path(), 5).unwrap();
        assert_eq!(Store::open_dir(home.path()).list().unwrap().len(), 5);
    }
}
