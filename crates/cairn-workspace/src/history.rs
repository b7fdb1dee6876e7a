//! The workspace state at any entry, folded from the session's
//! `cairn.workspace` records (RECORDS.md §4 states the rule).

use std::collections::HashMap;

use cairn::{EntryId, Session};

use crate::WorkspaceError;
use crate::record::{Manifest, Phase, WorkspaceRecord, read_all};

/// The workspace records of one session, for one working directory.
#[derive(Debug, Clone, Default)]
pub struct History {
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
        let mut records = read_all(session)?;
        if let Some(root) = records.last().map(|(_, r)| r.root.clone()) {
            records.retain(|(_, r)| r.root == root);
        }
        let parents = session
            .nodes()
            .into_iter()
            .map(|n| (n.id, n.parent))
            .collect();
        Ok(History { records, parents })
    }

    /// Whether the session has any workspace record.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The working directory the records describe.
    pub fn root(&self) -> Option<&str> {
        self.records.last().map(|(_, r)| r.root.as_str())
    }

    /// The records, with their `seq`.
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
