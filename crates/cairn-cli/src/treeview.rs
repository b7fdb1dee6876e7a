//! A session's whole tree, decoded, with the active path and labels, and a
//! layout in rows (depth-first, children in append order) and lanes (a
//! branch's first child continues its lane; later children open new ones).
//! Shared by `cairn tree`, the HTML export's SVG and `tree --json`.

use std::collections::{BTreeMap, HashMap, HashSet};

use anyhow::{Result, bail};
use cairn::{Body, EntryBody, EntryId, Session};

/// One entry of the tree.
#[derive(Debug, Clone)]
pub struct Node {
    /// Its id.
    pub id: EntryId,
    /// Its parent, if any.
    pub parent: Option<usize>,
    /// Its record's position.
    pub seq: u64,
    /// When it was written.
    pub ts: String,
    /// What it records.
    pub body: EntryBody,
    /// Its children, in append order.
    pub children: Vec<usize>,
    /// Whether it is on the branch from the root to the leaf.
    pub active: bool,
    /// Labels pointing at it.
    pub labels: Vec<String>,
}

/// The tree of a session.
#[derive(Debug, Clone)]
pub struct TreeView {
    /// Every entry, in append order.
    pub nodes: Vec<Node>,
    /// The roots, in append order.
    pub roots: Vec<usize>,
    /// The leaf.
    pub leaf: Option<usize>,
}

/// Where a node is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// The node.
    pub node: usize,
    /// Its row (depth-first order).
    pub row: usize,
    /// Its lane (column of the graph).
    pub lane: usize,
}

impl TreeView {
    /// Reads and decodes every entry of a session.
    ///
    /// # Errors
    ///
    /// When a record cannot be read back.
    pub fn load(session: &Session) -> Result<TreeView> {
        let infos = session.nodes();
        let index: HashMap<EntryId, usize> = infos
            .iter()
            .enumerate()
            .map(|(i, n)| (n.id.clone(), i))
            .collect();
        let active: HashSet<EntryId> = session.branch().into_iter().collect();
        let mut labels: BTreeMap<EntryId, Vec<String>> = BTreeMap::new();
        for (name, target) in session.labels() {
            labels.entry(target).or_default().push(name);
        }
        let mut nodes: Vec<Node> = Vec::with_capacity(infos.len());
        let mut roots = Vec::new();
        for (i, info) in infos.iter().enumerate() {
            let rec = session.record(info.seq)?;
            let Body::Entry(entry) = rec.body else {
                bail!(
                    "record {} should hold entry {} but does not",
                    info.seq,
                    info.id
                );
            };
            let parent = info.parent.as_ref().and_then(|p| index.get(p).copied());
            match parent.and_then(|p| nodes.get_mut(p)) {
                Some(p) => p.children.push(i),
                None => roots.push(i),
            }
            nodes.push(Node {
                active: active.contains(&info.id),
                labels: labels.remove(&info.id).unwrap_or_default(),
                id: info.id.clone(),
                parent,
                seq: info.seq,
                ts: rec.ts,
                body: entry.body,
                children: Vec::new(),
            });
        }
        let leaf = session.leaf().and_then(|l| index.get(&l).copied());
        Ok(TreeView { nodes, roots, leaf })
    }

    /// Rows and lanes for every node, in row order.
    pub fn layout(&self) -> Vec<Place> {
        let mut out = Vec::with_capacity(self.nodes.len());
        let mut next_lane = 0;
        // (node, lane); popped in depth-first order.
        let mut stack: Vec<(usize, usize)> = Vec::new();
        for &r in self.roots.iter().rev() {
            stack.push((r, usize::MAX));
        }
        while let Some((n, lane)) = stack.pop() {
            let lane = if lane == usize::MAX {
                next_lane += 1;
                next_lane - 1
            } else {
                lane
            };
            out.push(Place {
                node: n,
                row: out.len(),
                lane,
            });
            let children = &self.nodes[n].children;
            for (i, &c) in children.iter().enumerate().rev() {
                stack.push((c, if i == 0 { lane } else { usize::MAX }));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn::{MemoryBackend, Message, NewEntry, NewSession, Parent, Role, Store};
    use std::sync::Arc;

    fn put(s: &Session, id: &str, parent: Parent) {
        let body = EntryBody::Message(Message::text(Role::User, id));
        s.append_entry(NewEntry {
            id: Some(EntryId::parse(id).unwrap()),
            parent,
            body,
        })
        .unwrap();
    }

    #[test]
    fn first_children_keep_the_lane_and_later_ones_open_new_lanes() {
        let store = Store::with_backend(Arc::new(MemoryBackend::new()));
        let s = store.create(NewSession::default()).unwrap();
        put(&s, "a", Parent::Leaf);
        put(&s, "b", Parent::Leaf);
        put(&s, "c", Parent::Entry(EntryId::parse("a").unwrap()));
        put(&s, "d", Parent::Leaf);
        put(&s, "r", Parent::Root);
        let view = TreeView::load(&s).unwrap();
        let placed: Vec<(&str, usize, usize)> = view
            .layout()
            .iter()
            .map(|p| (view.nodes[p.node].id.as_str(), p.row, p.lane))
            .collect();
        assert_eq!(
            placed,
            [
                ("a", 0, 0),
                ("b", 1, 0),
                ("c", 2, 1),
                ("d", 3, 1),
                ("r", 4, 2)
            ]
        );
        assert_eq!(view.leaf, Some(4));
        assert!(view.nodes[4].active && !view.nodes[0].active);
    }
}
