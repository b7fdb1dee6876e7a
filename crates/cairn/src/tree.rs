//! The entry tree, as an index built from the frames alone (no payloads):
//! ids, parents, depths and kinds, in append order. Lookup by id, by unique
//! id prefix, children, and the path from a root to any entry.
//!
//! The entries a persisted index covers are read in place from its `Table`
//! (nothing allocated or hashed per entry at open); the later ones (all of
//! them, without an index) are built from frames. `BranchFold` is an
//! incremental fold that follows one branch,
//! held from some depth on: `move_to` diverges to the common ancestor
//! (walking up above the part held when needed), truncates and extends. It
//! is written once and implemented by the projector and the memory tracker.

use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::{DefaultHashBuilder, HashTable};

use crate::error::{Damage, LookupError, ReadError};
use crate::id::EntryId;
pub(crate) use crate::index::Node;
use crate::index::Table;
use crate::kind::EntryKind;
use crate::source::EntrySource;

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
    /// The branch followed, root first: the node at depth `path_from() + i`
    /// at index `i`.
    fn path(&self) -> &[u32];

    /// The depth of the first node [`BranchFold::path`] holds (a fold may
    /// hold only the end of its branch).
    fn path_from(&self) -> usize {
        0
    }

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
        let (keep, suffix) = walk.tree.diverge(self.path_from(), self.path(), target);
        self.truncate(keep, walk)?;
        self.extend(&suffix, walk)
    }
}

/// Every entry of a session, in append order: the entries a persisted
/// index covered kept as the index's bytes (node table, ids and id table,
/// read in place: nothing allocated or hashed per entry at open), then the
/// entries after them, each with its id.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tree {
    base: Option<Arc<Table>>,
    /// Entries after the base (all of them without an index).
    nodes: Vec<Node>,
    ids: Vec<EntryId>,
    /// Numbers of the entries after the base, by the hash of their id,
    /// each with that hash ([`Tree::hash`]): growing the table rehashes
    /// without reading an id (each its own allocation, a cache miss).
    by_id: HashTable<(u32, u32)>,
    /// Seeded per process (foldhash), so ids from a file cannot be chosen
    /// to collide.
    hasher: DefaultHashBuilder,
}

/// A 32-bit hash as the table's 64 bits: multiplied by an odd constant,
/// so the top bits (hashbrown's tag) depend on all of it and the low bits
/// (the bucket) stay as random as the hash's.
fn spread(hash: u32) -> u64 {
    u64::from(hash).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Why an entry cannot join the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reject {
    MissingParent,
    DuplicateId,
}

impl Tree {
    /// The tree of the entries a persisted index covers.
    pub fn from_table(table: Table) -> Tree {
        Tree {
            base: Some(Arc::new(table)),
            ..Tree::default()
        }
    }

    /// The first problem found in a block of the persisted index read after
    /// the open, if any: the tree then answers for those entries as if it
    /// did not hold them, so whoever reads through it must check this.
    pub fn damage(&self) -> Option<&str> {
        self.base.as_ref().and_then(|t| t.damage())
    }

    /// [`Tree::damage`] as the error a read reports: the index of the
    /// session at `location` did not verify after the open.
    pub fn check_damage(&self, location: &str) -> Result<(), ReadError> {
        match self.damage() {
            None => Ok(()),
            Some(why) => Err(ReadError::Damaged(Box::new(Damage {
                location: format!("{location} (its persisted index)"),
                line: 0,
                offset: 0,
                problem: format!("the index {why}"),
            }))),
        }
    }

    /// Entries read from a persisted index (the first ones).
    pub fn base_len(&self) -> u32 {
        self.base.as_ref().map_or(0, |b| b.len())
    }

    pub fn len(&self) -> usize {
        self.base_len() as usize + self.nodes.len()
    }

    pub fn node(&self, n: u32) -> Node {
        let base = self.base_len();
        match &self.base {
            Some(t) if n < base => t.node(n),
            _ => self.nodes[(n - base) as usize],
        }
    }

    /// The parent of entry `n`.
    pub fn parent(&self, n: u32) -> Option<u32> {
        let base = self.base_len();
        match &self.base {
            Some(t) if n < base => t.parent(n),
            _ => self.nodes[(n - base) as usize].parent,
        }
    }

    /// The id of entry `n`.
    pub fn id(&self, n: u32) -> &str {
        let base = self.base_len();
        match &self.base {
            Some(t) if n < base => t.id(n),
            _ => self.ids[(n - base) as usize].as_str(),
        }
    }

    /// The id of entry `n`, owned.
    pub fn entry_id(&self, n: u32) -> EntryId {
        let base = self.base_len();
        match &self.base {
            Some(t) if n < base => EntryId::from_checked(t.id(n)),
            _ => self.ids[(n - base) as usize].clone(),
        }
    }

    /// Every entry, in append order, with its number.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (u32, Node)> + '_ {
        (0..self.len() as u32).map(|n| (n, self.node(n)))
    }

    pub fn get(&self, id: &EntryId) -> Option<u32> {
        self.get_str(id.as_str())
    }

    pub fn get_str(&self, id: &str) -> Option<u32> {
        if let Some(n) = self.base.as_ref().and_then(|t| t.find(id)) {
            return Some(n);
        }
        let base = self.base_len();
        let hash = self.hash(id);
        self.by_id
            .find(spread(hash), |&(n, h)| {
                h == hash && self.ids[(n - base) as usize].as_str() == id
            })
            .map(|&(n, _)| n)
    }

    /// The hash of an id, as kept in `by_id`.
    fn hash(&self, id: &str) -> u32 {
        // (The low half of foldhash's 64 bits, spread again for the table.)
        self.hasher.hash_one(id) as u32
    }

    /// The entry appended last.
    pub fn last(&self) -> Option<u32> {
        (self.len() > 0).then(|| self.len() as u32 - 1)
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
        let depth = parent.map_or(0, |p| self.node(p).depth + 1);
        let n = self.len() as u32;
        let hash = self.hash(id.as_str());
        self.by_id
            .insert_unique(spread(hash), (n, hash), |&(_, h)| spread(h));
        self.ids.push(id);
        self.nodes.push(Node {
            seq,
            parent,
            depth,
            kind,
        });
        n
    }

    /// The path from the root to `n`, inclusive, as node numbers.
    pub fn path_to(&self, n: Option<u32>) -> Vec<u32> {
        let mut path = Vec::with_capacity(n.map_or(0, |c| self.node(c).depth as usize + 1));
        let mut cur = n;
        while let Some(c) = cur {
            path.push(c);
            cur = self.parent(c);
        }
        path.reverse();
        path
    }

    /// How to move a branch held as `path` (root first, the node at depth
    /// `from + i` at index `i`) to end at `target`: the length of the
    /// branch kept (up to the common ancestor, which may be deeper in the
    /// tree than `from`: the branch above `path` is walked up from its first
    /// node as far as needed), and the nodes from there to `target`, root
    /// first.
    pub fn diverge(&self, from: usize, path: &[u32], target: Option<u32>) -> (usize, Vec<u32>) {
        let mut suffix = Vec::new();
        let mut cur = target;
        // The branch's node at a depth above `path`, walked up lazily.
        let mut above = path.first().map(|&n| (from, n));
        while let Some(c) = cur {
            let node = self.node(c);
            let d = node.depth as usize;
            let on = if d >= from {
                path.get(d - from) == Some(&c)
            } else {
                while let Some((ad, an)) = above.filter(|&(ad, _)| ad > d) {
                    above = self.parent(an).map(|p| (ad - 1, p));
                }
                above == Some((d, c))
            };
            if on {
                break;
            }
            suffix.push(c);
            cur = node.parent;
        }
        suffix.reverse();
        (cur.map_or(0, |c| self.node(c).depth as usize + 1), suffix)
    }

    /// The path from depth `depth` down to `n` (an entry at least that
    /// deep), as node numbers, first the shallowest.
    pub fn path_from(&self, depth: u32, n: u32) -> Vec<u32> {
        let d = self.node(n).depth;
        let mut path = Vec::with_capacity(d.saturating_sub(depth) as usize + 1);
        let mut cur = Some(n);
        for _ in depth..=d {
            let Some(c) = cur else { break };
            path.push(c);
            cur = self.parent(c);
        }
        path.reverse();
        path
    }

    /// The children of `n` (roots for `None`), in append order.
    pub fn children(&self, n: Option<u32>) -> Vec<u32> {
        self.iter()
            .filter(|(_, c)| c.parent == n)
            .map(|(c, _)| c)
            .collect()
    }

    /// Resolves a full id or a unique id prefix.
    pub fn resolve_prefix(&self, query: &str) -> Result<u32, LookupError> {
        if let Some(n) = self.get_str(query) {
            return Ok(n);
        }
        let mut found: Vec<u32> = Vec::new();
        if !query.is_empty() {
            for n in 0..self.len() as u32 {
                if self.id(n).starts_with(query) {
                    found.push(n);
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
                    .map(|&n| self.id(n).to_owned())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_id_is_found_after_the_table_grew_many_times_and_no_other() {
        let mut tree = Tree::default();
        let id = |i: u32| EntryId::parse(&format!("e{i:x}")).unwrap();
        for i in 0..5000u32 {
            let parent = i.checked_sub(1);
            assert_eq!(tree.check(&id(i), parent.map(id).as_ref()), Ok(parent));
            assert_eq!(tree.insert_checked(u64::from(i), id(i), parent, None), i);
        }
        for i in 0..5000u32 {
            assert_eq!(tree.get(&id(i)), Some(i));
            assert_eq!(tree.id(i), id(i).as_str());
        }
        assert_eq!(tree.get(&id(5000)), None);
        assert_eq!(tree.check(&id(7), None), Err(Reject::DuplicateId));
        assert_eq!(
            tree.check(&id(9000), Some(&id(6000))),
            Err(Reject::MissingParent)
        );
    }
}
