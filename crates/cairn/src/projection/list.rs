//! [`Messages`]: the context's message list, a persistent chunked vector so
//! that a snapshot is cheap to share. Cloning it copies two `Arc`s; appending
//! to a list while a clone of it is held copies nothing in the usual case
//! and at most the unfilled tail chunk otherwise, plus, once per [`LEAF`]
//! appends, one group's spine — never the whole list (figure 8 of
//! docs/PERFORMANCE.md).
//!
//! Layout: chunks of [`LEAF`] slots. Full chunks are the leaves, grouped by
//! [`GROUP`] under one `Arc`, all groups under one `Arc`; the last chunk,
//! the tail, holds the fewer than [`LEAF`] messages after them. A slot is
//! set once and never changes, so lists share chunks: a list reads only its
//! own first slots of the tail, and an append sets the next slot in place
//! when it is still empty — a held snapshot, which reads fewer slots, does
//! not see it. When another list sharing the chunk has set that slot first
//! (their histories diverged), the append copies the chunk's first slots
//! into a chunk of its own. Every leaf is full, so the message at index `i`
//! is at leaf `i / LEAF`, slot `i % LEAF`.

use std::fmt;
use std::iter::FusedIterator;
use std::ops::Index;
use std::sync::{Arc, OnceLock};

use super::message::ContextMessage;

/// Messages per chunk.
const LEAF: usize = 16;
/// Leaves per group.
const GROUP: usize = 64;

/// [`LEAF`] slots, each set at most once.
struct Chunk([OnceLock<ContextMessage>; LEAF]);

impl Default for Chunk {
    fn default() -> Chunk {
        Chunk(std::array::from_fn(|_| OnceLock::new()))
    }
}

/// A full chunk.
type Leaf = Arc<Chunk>;

/// The messages of a [`Context`](super::Context), in order: an immutable,
/// cheaply cloned list (a snapshot shares all its messages with the
/// session's live context). Index it, iterate it (`for m in
/// ctx.messages()`, `.iter().rev()`), or copy it out with
/// [`to_vec`](Messages::to_vec).
#[derive(Clone, Default)]
pub struct Messages {
    groups: Arc<Vec<Arc<Vec<Leaf>>>>,
    /// Full leaves in `groups`.
    leaves: usize,
    /// The chunk after the leaves, of which this list holds `tail_len` slots.
    tail: Arc<Chunk>,
    tail_len: usize,
}

impl Messages {
    /// An empty list.
    pub fn new() -> Messages {
        Messages::default()
    }

    /// The number of messages.
    pub fn len(&self) -> usize {
        self.leaves * LEAF + self.tail_len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The message at `index`, if there is one.
    pub fn get(&self, index: usize) -> Option<&ContextMessage> {
        let leaf = index / LEAF;
        if leaf < self.leaves {
            self.groups[leaf / GROUP][leaf % GROUP].0[index % LEAF].get()
        } else {
            let slot = index - self.leaves * LEAF;
            (slot < self.tail_len)
                .then(|| self.tail.0[slot].get())
                .flatten()
        }
    }

    /// The first message.
    pub fn first(&self) -> Option<&ContextMessage> {
        self.get(0)
    }

    /// The last message.
    pub fn last(&self) -> Option<&ContextMessage> {
        self.len().checked_sub(1).and_then(|i| self.get(i))
    }

    /// The messages in order (double-ended, exact size).
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            list: self,
            front: 0,
            back: self.len(),
        }
    }

    /// The messages copied into a `Vec` (each message's content is shared).
    pub fn to_vec(&self) -> Vec<ContextMessage> {
        self.iter().cloned().collect()
    }

    /// Appends a message.
    pub(crate) fn push(&mut self, m: ContextMessage) {
        if let Err(m) = self.tail.0[self.tail_len].set(m) {
            // A list sharing the chunk appended here first: take a copy of
            // this list's slots of it.
            let own = Chunk::default();
            for (to, from) in own.0.iter().zip(&self.tail.0[..self.tail_len]) {
                if let Some(from) = from.get() {
                    let _ = to.set(from.clone());
                }
            }
            let _ = own.0[self.tail_len].set(m);
            self.tail = Arc::new(own);
        }
        self.tail_len += 1;
        if self.tail_len == LEAF {
            let leaf = std::mem::take(&mut self.tail);
            self.tail_len = 0;
            self.push_leaf(leaf);
        }
    }

    fn push_leaf(&mut self, leaf: Leaf) {
        let groups = Arc::make_mut(&mut self.groups);
        match groups.last_mut() {
            Some(g) if g.len() < GROUP => Arc::make_mut(g).push(leaf),
            Some(_) | None => groups.push(Arc::new(vec![leaf])),
        }
        self.leaves += 1;
    }

    /// Keeps the first `len` messages: every chunk before the cut stays
    /// shared, and so does the one it falls in, which becomes the tail.
    pub(crate) fn truncate(&mut self, len: usize) {
        if len >= self.len() {
            return;
        }
        let full = self.leaves * LEAF;
        if len >= full {
            self.tail_len = len - full;
            return;
        }
        let keep = len / LEAF;
        let tail = Arc::clone(&self.groups[keep / GROUP][keep % GROUP]);
        let kept: Vec<Leaf> = (0..keep)
            .map(|l| Arc::clone(&self.groups[l / GROUP][l % GROUP]))
            .collect();
        *self = Messages::default();
        for leaf in kept {
            self.push_leaf(leaf);
        }
        self.tail = tail;
        self.tail_len = len % LEAF;
    }
}

impl FromIterator<ContextMessage> for Messages {
    fn from_iter<I: IntoIterator<Item = ContextMessage>>(iter: I) -> Messages {
        let mut list = Messages::new();
        for m in iter {
            list.push(m);
        }
        list
    }
}

impl Index<usize> for Messages {
    type Output = ContextMessage;

    fn index(&self, index: usize) -> &ContextMessage {
        match self.get(index) {
            Some(m) => m,
            None => panic!(
                "message index {index} out of range for a context of {} messages",
                self.len()
            ),
        }
    }
}

impl PartialEq for Messages {
    fn eq(&self, other: &Messages) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl fmt::Debug for Messages {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for &'a Messages {
    type Item = &'a ContextMessage;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// Iterator over a [`Messages`] list.
#[derive(Debug, Clone)]
pub struct Iter<'a> {
    list: &'a Messages,
    front: usize,
    back: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a ContextMessage;

    fn next(&mut self) -> Option<&'a ContextMessage> {
        if self.front == self.back {
            return None;
        }
        let m = self.list.get(self.front);
        self.front += 1;
        m
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.back - self.front;
        (n, Some(n))
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.front == self.back {
            return None;
        }
        self.back -= 1;
        self.list.get(self.back)
    }
}

impl ExactSizeIterator for Iter<'_> {}
impl FusedIterator for Iter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::EntryId;
    use crate::projection::Source;
    use crate::record::{Message, Role};

    fn msg(i: u32) -> ContextMessage {
        ContextMessage::decoded(
            EntryId::random(),
            Source::Message,
            Message::text(Role::User, format!("{i}")),
            i,
        )
    }

    fn positions(l: &Messages) -> Vec<u32> {
        l.iter().map(|m| m.pos).collect()
    }

    #[test]
    fn list_matches_a_vec_through_pushes_and_truncations() {
        let mut list = Messages::new();
        let mut model: Vec<u32> = Vec::new();
        let mut next = 0u32;
        // Sizes that cross leaf and group boundaries, and cuts inside the
        // tail, inside a leaf and on a leaf boundary.
        for (grow, cut) in [
            (5, 3),
            (40, 20),
            (LEAF * GROUP + 7, LEAF * GROUP),
            (LEAF * GROUP * 2 + 3, LEAF * 5 + 1),
            (LEAF, 0),
            (3 * LEAF * GROUP, LEAF * GROUP * 2 - 1),
        ] {
            for _ in 0..grow {
                list.push(msg(next));
                model.push(next);
                next += 1;
            }
            assert_eq!(positions(&list), model);
            assert_eq!(list.len(), model.len());
            let held = list.clone();
            list.truncate(cut);
            model.truncate(cut);
            assert_eq!(positions(&list), model);
            assert_eq!(list.last().map(|m| m.pos), model.last().copied());
            assert_eq!(
                held.len(),
                positions(&held).len(),
                "a held clone is untouched"
            );
        }
        let rev: Vec<u32> = list.iter().rev().map(|m| m.pos).collect();
        assert_eq!(rev, model.iter().rev().copied().collect::<Vec<_>>());
        assert_eq!(list.iter().len(), model.len());
    }

    #[test]
    fn appending_to_a_clone_leaves_the_original_as_it_was() {
        let mut a: Messages = (0..1000).map(msg).collect();
        let b = a.clone();
        for i in 1000..1100 {
            a.push(msg(i));
        }
        assert_eq!(b.len(), 1000);
        assert_eq!(positions(&b), (0..1000).collect::<Vec<_>>());
        assert_eq!(a.len(), 1100);
        assert_eq!(a[1099].pos, 1099);
        assert_ne!(a, b);
        a.truncate(1000);
        assert_eq!(a, b);
    }

    #[test]
    fn lists_sharing_a_tail_chunk_that_diverge_keep_their_own_messages() {
        let mut a: Messages = (0..20).map(msg).collect();
        let mut b = a.clone();
        a.push(msg(100));
        // `b` shares the chunk, whose next slot `a` has just set.
        b.push(msg(200));
        assert_eq!(positions(&a), (0..20).chain([100]).collect::<Vec<_>>());
        assert_eq!(positions(&b), (0..20).chain([200]).collect::<Vec<_>>());
        // A held snapshot does not see later appends to the chunk.
        let held = a.clone();
        a.push(msg(101));
        assert_eq!(held.len(), 21);
        assert_eq!(held.last().map(|m| m.pos), Some(100));
        // Cut inside a full leaf, then grow past the cut again.
        let mut c = a.clone();
        c.truncate(5);
        c.push(msg(300));
        assert_eq!(positions(&c), vec![0, 1, 2, 3, 4, 300]);
        assert_eq!(
            a.get(5).map(|m| m.pos),
            Some(5),
            "the shared leaf is unchanged"
        );
    }
}
