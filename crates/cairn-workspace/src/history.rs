//! The workspace state at any entry, folded from the session's
//! `cairn.workspace` records (RECORDS.md §4 states the rule) — and, for a
//! restore or a diff, from those of its subagents' sessions too, which
//! work in the same directory: a child's records count as taken during
//! the parent's call that spawned it, at that call's result entry.

use std::collections::{BTreeSet, HashMap};

use cairn::{Access, Body, EntryId, OpRecord, Session, SessionId, Store};

use crate::WorkspaceError;
use crate::record::{Manifest, Phase, WorkspaceRecord, read_all};

/// How deep [`History::read_family`] follows subagent sessions (the
/// agent's own limit on delegation is far lower).
const MAX_FAMILY_DEPTH: usize = 16;

/// The workspace records of one session, for one working directory.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// In the order of the disk's timeline, each with its `seq` in the
    /// session that holds it.
    records: Vec<(u64, WorkspaceRecord)>,
    /// Each entry's parent (`None`: a root), from the session's tree.
    parents: HashMap<EntryId, Option<EntryId>>,
}

impl History {
    /// Reads the session's workspace records (those of the working
    /// directory of its last record).
    ///
    /// # Errors
    ///
    /// As [`read_all`].
    pub fn read(session: &Session) -> Result<History, WorkspaceError> {
        let records = read_all(session)?;
        let root = records.last().map(|(_, r)| r.root.clone());
        Ok(History::of(session, records, root))
    }

    /// The history of `session` made of `records`, those of working
    /// directory `root` only.
    fn of(
        session: &Session,
        mut records: Vec<(u64, WorkspaceRecord)>,
        root: Option<String>,
    ) -> History {
        if let Some(root) = root {
            records.retain(|(_, r)| r.root == root);
        }
        let parents = session
            .nodes()
            .into_iter()
            .map(|n| (n.id, n.parent))
            .collect();
        History { records, parents }
    }

    /// Reads the session's workspace records and those of every subagent
    /// session it spawned (recursively), which work in the same directory:
    /// a child's records are placed where the parent dispatched the call
    /// that spawned it (its first `tool_dispatched`), in the child's own
    /// order, and count as taken at that call's result entry. Only the
    /// records of the session's working directory (that of its own last
    /// record; without one, that of the last of its subagents') are kept.
    ///
    /// # Errors
    ///
    /// As [`History::read`]; [`WorkspaceError::Subagent`] when a child
    /// session cannot be listed or opened (its files would be left out).
    pub fn read_family(store: &Store, session: &Session) -> Result<History, WorkspaceError> {
        let mut keyed: Vec<(Vec<u64>, u64, WorkspaceRecord)> = Vec::new();
        gather(store, session, &[], None, 0, &mut keyed)?;
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        // The session's own working directory (its last record's), else
        // its subagents'.
        let root = keyed
            .iter()
            .rev()
            .find(|(key, _, _)| key.len() == 1)
            .or(keyed.last())
            .map(|(_, _, r)| r.root.clone());
        let records = keyed.into_iter().map(|(_, seq, r)| (seq, r)).collect();
        Ok(History::of(session, records, root))
    }

    /// Whether the session has any workspace record.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The working directory the records describe.
    pub fn root(&self) -> Option<&str> {
        self.records.last().map(|(_, r)| r.root.as_str())
    }

    /// The records in the order they are folded, each with its `seq` in
    /// the session that holds it.
    pub fn records(&self) -> &[(u64, WorkspaceRecord)] {
        &self.records
    }

    /// What the records say the disk holds now: every record folded in
    /// order (the state after the last one).
    pub fn last(&self) -> Manifest {
        self.upto(self.records.len())
    }

    /// The fold of the first `n` records.
    fn upto(&self, n: usize) -> Manifest {
        let mut m = Manifest::new();
        for (_, r) in &self.records[..n] {
            for (p, s) in &r.files {
                m.insert(p.clone(), s.clone());
            }
        }
        m
    }

    /// The workspace state at `entry` (`None`: before the first entry):
    /// the fold of the records up to the last one taken at the nearest
    /// entry of `entry`'s branch (itself first, then its ancestors) that
    /// has one; a path no record up to there names has the state it was
    /// first seen in — absent when that was in an `after` record (the tool
    /// created it).
    pub fn state_at(&self, entry: Option<&EntryId>) -> Manifest {
        let n = self.index_at(entry);
        let mut m = self.upto(n);
        for (_, r) in &self.records[n..] {
            for (p, s) in &r.files {
                if !m.contains_key(p) {
                    let first = match r.phase {
                        Phase::After => None,
                        Phase::Before | Phase::Restore => s.clone(),
                    };
                    m.insert(p.clone(), first);
                }
            }
        }
        m
    }

    /// The paths whose state at `entry` the records cannot tell: first
    /// named after it in an `after` record, once a tree scan stopped at its
    /// path limit (the path may have been there all along, unseen), so
    /// [`History::state_at`]'s "absent" is a guess a restore must not act on.
    pub fn uncertain_at(&self, entry: Option<&EntryId>) -> BTreeSet<String> {
        let n = self.index_at(entry);
        let named: BTreeSet<&String> = self.records[..n]
            .iter()
            .flat_map(|(_, r)| r.files.keys())
            .collect();
        let mut truncated = self.records[..n].iter().any(|(_, r)| r.truncated);
        let mut seen: BTreeSet<&String> = BTreeSet::new();
        let mut out = BTreeSet::new();
        for (_, r) in &self.records[n..] {
            for p in r.files.keys() {
                if named.contains(p) || !seen.insert(p) {
                    continue;
                }
                if truncated && r.phase == Phase::After {
                    out.insert(p.clone());
                }
            }
            truncated |= r.truncated;
        }
        out
    }

    /// The paths tools named after `entry` that no record describes
    /// (outside the working directory, …): a restore to `entry` cannot
    /// bring them back.
    pub fn unrecorded_after(&self, entry: Option<&EntryId>) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (_, r) in &self.records[self.index_at(entry)..] {
            for p in &r.unrecorded {
                if !out.contains(p) {
                    out.push(p.clone());
                }
            }
        }
        out
    }

    /// How many records count at `entry`: up to and including the last one
    /// taken at the nearest entry of its branch that has one (0 if none).
    fn index_at(&self, entry: Option<&EntryId>) -> usize {
        let mut last_at: HashMap<&EntryId, usize> = HashMap::new();
        for (i, (_, r)) in self.records.iter().enumerate() {
            if let Some(at) = &r.at {
                last_at.insert(at, i + 1);
            }
        }
        let mut cur = entry.cloned();
        // Bounded by the tree's size: parents always precede their children.
        for _ in 0..=self.parents.len() {
            let Some(id) = cur else {
                break;
            };
            if let Some(n) = last_at.get(&id) {
                return *n;
            }
            cur = self.parents.get(&id).cloned().flatten();
        }
        0
    }
}

/// Adds `session`'s records to `out`, each keyed by `prefix` and its `seq`
/// (so that sorting the keys puts a child's records where its parent's
/// call was dispatched), then its children's. `at`: the top session's
/// entry every record of a subagent counts at (`None` for the top
/// session's own records, which keep their `at`).
fn gather(
    store: &Store,
    session: &Session,
    prefix: &[u64],
    at: Option<&Option<EntryId>>,
    depth: usize,
    out: &mut Vec<(Vec<u64>, u64, WorkspaceRecord)>,
) -> Result<(), WorkspaceError> {
    for (seq, mut r) in read_all(session)? {
        if let Some(at) = at {
            r.at.clone_from(at);
        }
        let mut key = prefix.to_vec();
        key.push(seq);
        out.push((key, seq, r));
    }
    if depth >= MAX_FAMILY_DEPTH {
        return Ok(());
    }
    let subagent = |id: &SessionId, source: cairn::StoreError| WorkspaceError::Subagent {
        id: id.to_string(),
        source,
    };
    let children: Vec<SessionId> = store
        .list()
        .map_err(|e| subagent(session.id(), e))?
        .into_iter()
        .filter(|s| s.parent.as_ref() == Some(session.id()))
        .map(|s| s.id)
        .collect();
    if children.is_empty() {
        return Ok(());
    }
    let dispatched = dispatches(session)?;
    for id in children {
        let child = store
            .open(&id, Access::Read)
            .map_err(|e| subagent(&id, cairn::StoreError::from(e)))?;
        let Some(origin) = child.header().lineage.parent.clone() else {
            continue;
        };
        // Where the parent dispatched the call (else after all its records).
        let (anchor, result) = dispatched
            .get(&origin.call_id)
            .map_or((u64::MAX, None), |(seq, entry)| (*seq, Some(entry.clone())));
        let mut key = prefix.to_vec();
        key.push(anchor);
        let at = match at {
            Some(top) => top.clone(),
            None => result,
        };
        gather(store, &child, &key, Some(&at), depth + 1, out)?;
    }
    Ok(())
}

/// The first `tool_dispatched` of each call of `session`: its `seq` and
/// the result entry it preallocated.
fn dispatches(session: &Session) -> Result<HashMap<String, (u64, EntryId)>, WorkspaceError> {
    let mut out = HashMap::new();
    for (seq, kind) in session.op_records() {
        if kind != cairn::OpKind::ToolDispatched.name() {
            continue;
        }
        let record = session.record(seq).map_err(WorkspaceError::Read)?;
        if let Body::Op(OpRecord::ToolDispatched(d)) = record.body {
            out.entry(d.call_id).or_insert((seq, d.result_entry));
        }
    }
    Ok(out)
}
