//! The entry tree, as an index built from the frames alone (no payloads):
//! ids, parents, depths and kinds, in append order. Lookup by id, by unique
//! id prefix, children, and the path from a root to any entry.

use hashbrown::{DefaultHashBuilder, HashTable};
use std::hash::BuildHasher;

use crate::error::{LookupError, ReadError};
use crate::id::EntryId;
use crate::kind::EntryKind;
use crate::projection::EntrySource;

/// What a [`BranchFold`] reads as it walks the tree: the index, and the
/// entries themselves.
#[derive(Clone, Copy)]
pub(crate) struct Walk<'a> {
    pub tree: &'a Tree,
    pub src: &'a dyn EntrySource,
}

/// An incremental fold that follows one branch of the tree (the projection,
/// the session memory). It holds the branch as a path of nodes and moves
/// along the tree the one way: back to the common ancestor, then forward.
pub(crate) trait BranchFold {
    /// The branch followed, root first (each node at the index of its depth).
    fn path(&self) -> &[u32];

    /// Drops the branch's nodes from position `keep` on (nothing when `keep`
    /// is past the end).
    fn truncate(&mut self, keep: usize, walk: Walk<'_>) -> Result<(), ReadError>;

    /// Folds in `suffix`, a path continuing the branch.
    fn extend(&mut self, suffix: &[u32], walk: Walk<'_>) -> Result<(), ReadError>;

    /// The node at the end of the branch.
    fn leaf(&self) -> Option<u32> {
        self.path().last().copied()
    }

    /// Moves the end of the branch to `target`: truncates to the common
    /// ancestor and replays the entries from there to `target`.
    fn move_to(&mut self, target: Option<u32>, walk: Walk<'_>) -> Result<(), ReadError> {
        if target == self.leaf() {
            return Ok(());
        }
        let (keep, suffix) = walk.tree.diverge(self.path(), target);
        self.truncate(keep, walk)?;
        self.extend(&suffix, walk)
    }
}

/// One entry in the index.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub seq: u64,
    pub id: EntryId,
    pub parent: Option<u32>,
    /// Number of ancestors (0 for a root).
    pub depth: u32,
    /// `None` for an ignorable entry of a kind this version does not know.
    pub kind: Option<EntryKind>,
}

/// Every entry of a session, in append order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tree {
    nodes: Vec<Node>,
    /// Node numbers by the hash of their id: the id itself is stored once,
    /// in its node (one allocation per entry, not two).
    by_id: HashTable<u32>,
    /// Seeded per process (foldhash), so ids from a file cannot be chosen
    /// to collide.
    hasher: DefaultHashBuilder,
}

/// Why an entry cannot join the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reject {
    MissingParent,
    DuplicateId,
}

impl Tree {
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Makes room for `n` more entries.
    pub fn reserve(&mut self, n: usize) {
        let Tree {
            nodes,
            by_id,
            hasher,
        } = self;
        nodes.reserve(n);
        by_id.reserve(n, |&m| hasher.hash_one(nodes[m as usize].id.as_str()));
    }

    pub fn node(&self, n: u32) -> &Node {
        &self.nodes[n as usize]
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub fn get(&self, id: &EntryId) -> Option<u32> {
        self.get_str(id.as_str())
    }

    pub fn get_str(&self, id: &str) -> Option<u32> {
        let hash = self.hasher.hash_one(id);
        self.by_id
            .find(hash, |&n| self.nodes[n as usize].id.as_str() == id)
            .copied()
    }

    /// The entry appended last.
    pub fn last(&self) -> Option<u32> {
        (!self.nodes.is_empty()).then(|| self.nodes.len() as u32 - 1)
    }

    /// Checks that an entry could be inserted.
    pub fn check(&self, id: &EntryId, parent: Option<&EntryId>) -> Result<Option<u32>, Reject> {
        if self.get(id).is_some() {
            return Err(Reject::DuplicateId);
        }
        match parent {
            None => Ok(None),
            Some(p) => self.get(p).map(Some).ok_or(Reject::MissingParent),
        }
    }

    /// Adds an entry that [`Tree::check`] accepted, under its parent node.
    pub fn insert_checked(
        &mut self,
        seq: u64,
        id: EntryId,
        parent: Option<u32>,
        kind: Option<EntryKind>,
    ) -> u32 {
        let depth = parent.map_or(0, |p| self.nodes[p as usize].depth + 1);
        let n = self.nodes.len() as u32;
        let Tree {
            nodes,
            by_id,
            hasher,
        } = self;
        by_id.insert_unique(hasher.hash_one(id.as_str()), n, |&m| {
            hasher.hash_one(nodes[m as usize].id.as_str())
        });
        self.nodes.push(Node {
            seq,
            id,
            parent,
            depth,
            kind,
        });
        n
    }

    /// The path from the root to `n`, inclusive, as node numbers.
    pub fn path_to(&self, n: Option<u32>) -> Vec<u32> {
        let mut path = Vec::new();
        let mut cur = n;
        while let Some(c) = cur {
            path.push(c);
            cur = self.nodes[c as usize].parent;
        }
        path.reverse();
        path
    }

    /// How to move a branch held as `path` (root first, each node at its
    /// depth) to end at `target`: the length of the prefix of `path` kept
    /// (up to the common ancestor), and the nodes from there to `target`,
    /// root first.
    pub fn diverge(&self, path: &[u32], target: Option<u32>) -> (usize, Vec<u32>) {
        let mut suffix = Vec::new();
        let mut cur = target;
        while let Some(c) = cur {
            let node = &self.nodes[c as usize];
            if path.get(node.depth as usize) == Some(&c) {
                break;
            }
            suffix.push(c);
            cur = node.parent;
        }
        suffix.reverse();
        (
            cur.map_or(0, |c| self.nodes[c as usize].depth as usize + 1),
            suffix,
        )
    }

    /// The children of `n` (roots for `None`), in append order.
    pub fn children(&self, n: Option<u32>) -> Vec<u32> {
        (0..self.nodes.len() as u32)
            .filter(|&c| self.nodes[c as usize].parent == n)
            .collect()
    }

    /// Resolves a full id or a unique id prefix.
    pub fn resolve_prefix(&self, query: &str) -> Result<u32, LookupError> {
        if let Some(n) = self.get_str(query) {
            return Ok(n);
        }
        let mut found: Vec<u32> = Vec::new();
        if !query.is_empty() {
            for (i, node) in self.nodes.iter().enumerate() {
                if node.id.as_str().starts_with(query) {
                    found.push(i as u32);
                }
            }
        }
        match found.as_slice() {
            [] => Err(LookupError::NotFound(query.to_owned())),
            [one] => Ok(*one),
            many => {
                let mut candidates: Vec<String> = many
                    .iter()
                    .take(10)
                    .map(|&n| self.nodes[n as usize].id.to_string())
                    .collect();
                if many.len() > 10 {
                    candidates.push(format!("and {} more", many.len() - 10));
                }
                Err(LookupError::Ambiguous {
                    query: query.to_owned(),
                    candidates,
                })
            }
        }
    }
}
