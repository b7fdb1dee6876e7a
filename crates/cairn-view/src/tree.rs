//! A session's tree, for `cairn tree`, the HTML export's SVG, `tree --json`,
//! the REPL's `/tree` and the demo: [`TreeView`] holds the structure of
//! every entry (id, parent, children, record, active path, labels) but no
//! bodies: [`TreeView::read`] reads one entry's record when it is drawn, so
//! memory holds one body at a time. [`TreeView::rows`] lays it out
//! as an indented drawing (a chain of entries drawn flat, a branch point
//! indenting its children) and [`TreeView::layout`] in rows and lanes (a
//! branch's first child continues its lane; later children open new ones).
//! [`render`] is the plain drawing: `*` marks the active branch, labels are
//! shown in brackets.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;

use cairn::{Body, EntryBody, EntryId, Session};

use crate::ViewError;
use crate::describe::entry_line;
use crate::term::{clean_line, excerpt};

/// The connectors of an indented drawing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connectors {
    /// Before a child that has siblings after it.
    pub tee: &'static str,
    /// Before the last child.
    pub corner: &'static str,
    /// Below a child that has siblings after it.
    pub pipe: &'static str,
    /// Below the last child.
    pub blank: &'static str,
}

/// Box-drawing connectors.
pub const BOX: Connectors = Connectors {
    tee: "├─ ",
    corner: "└─ ",
    pipe: "│  ",
    blank: "   ",
};

/// Plain ASCII connectors.
pub const ASCII: Connectors = Connectors {
    tee: "|- ",
    corner: "`- ",
    pipe: "|  ",
    blank: "   ",
};

/// An entry in one line of at most about `max` characters: its tag
/// (`user`, `state`, `checkout`, …) and what it says ([`entry_line`]).
pub fn describe(body: &EntryBody, max: usize) -> String {
    let d = entry_line(body);
    format!("{} {}", d.tag, excerpt(&d.text, max))
}

/// Draws the tree of `session` to `out`.
///
/// # Errors
///
/// [`ViewError`] when an entry's record cannot be read back or the drawing
/// cannot be written.
pub fn render(session: &Session, out: &mut dyn Write) -> Result<(), ViewError> {
    let view = TreeView::load(session);
    for (n, prefix) in view.rows(BOX) {
        let node = &view.nodes[n];
        let (body, _) = view.read(session, n)?;
        let mark = if node.active { "*" } else { "o" };
        let tags = if node.labels.is_empty() {
            String::new()
        } else {
            let names: Vec<String> = node.labels.iter().map(|l| clean_line(l)).collect();
            format!(" [{}]", names.join(", "))
        };
        let here = if view.leaf == Some(n) {
            "  ← leaf"
        } else {
            ""
        };
        writeln!(
            out,
            "{prefix}{mark} {} {}{tags}{here}",
            node.id,
            describe(&body, 60)
        )
        .map_err(ViewError::Write)?;
    }
    Ok(())
}

/// One entry of the tree.
#[derive(Debug, Clone)]
pub struct Node {
    /// Its id.
    pub id: EntryId,
    /// Its parent, if any.
    pub parent: Option<usize>,
    /// Its record's position (its body and time: [`TreeView::read`]).
    pub seq: u64,
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
    /// The structure of a session's tree, from its index: no record is read.
    pub fn load(session: &Session) -> TreeView {
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
                children: Vec::new(),
            });
        }
        let leaf = session.leaf().and_then(|l| index.get(&l).copied());
        TreeView { nodes, roots, leaf }
    }

    /// Reads and decodes node `n`'s record (checked as every read is): what
    /// it records and when it was written.
    ///
    /// # Errors
    ///
    /// [`ViewError`] when the record cannot be read back, or holds no entry.
    pub fn read(&self, session: &Session, n: usize) -> Result<(EntryBody, String), ViewError> {
        let node = &self.nodes[n];
        let rec = session.record(node.seq)?;
        let Body::Entry(entry) = rec.body else {
            return Err(ViewError::NotAnEntry {
                seq: node.seq,
                id: node.id.clone(),
            });
        };
        Ok((entry.body, rec.ts))
    }

    /// The nodes of the active branch, root first (a parent is always
    /// appended before its children).
    pub fn branch(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(|&n| self.nodes[n].active)
    }

    /// The rows of an indented drawing, in order: each node with the prefix
    /// of its line. A chain of single children stays in one column; a
    /// branch point (or more than one root) opens `tee`/`corner` branches.
    pub fn rows(&self, c: Connectors) -> Vec<(usize, String)> {
        // (node, prefix of its own line, prefix of the lines below it)
        let mut stack: Vec<(usize, String, String)> = Vec::new();
        let push = |stack: &mut Vec<(usize, String, String)>, kids: &[usize], rest: &str| {
            if let [only] = kids {
                stack.push((*only, rest.to_owned(), rest.to_owned()));
                return;
            }
            for (i, &k) in kids.iter().enumerate().rev() {
                let last = i + 1 == kids.len();
                let first = format!("{rest}{}", if last { c.corner } else { c.tee });
                let below = format!("{rest}{}", if last { c.blank } else { c.pipe });
                stack.push((k, first, below));
            }
        };
        push(&mut stack, &self.roots, "");
        let mut rows = Vec::with_capacity(self.nodes.len());
        while let Some((n, first, rest)) = stack.pop() {
            push(&mut stack, &self.nodes[n].children, &rest);
            rows.push((n, first));
        }
        rows
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

    /// `a → b`, and `a → c → d`: a branch point at `a`.
    fn branched() -> Session {
        let store = Store::with_backend(Arc::new(MemoryBackend::new()));
        let s = store.create(NewSession::default()).unwrap();
        put(&s, "a", Parent::Leaf);
        put(&s, "b", Parent::Leaf);
        put(&s, "c", Parent::Entry(EntryId::parse("a").unwrap()));
        put(&s, "d", Parent::Leaf);
        s
    }

    #[test]
    fn first_children_keep_the_lane_and_later_ones_open_new_lanes() {
        let s = branched();
        put(&s, "r", Parent::Root);
        let view = TreeView::load(&s);
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

    #[test]
    fn rows_keep_chains_flat_and_indent_branch_points() {
        let s = branched();
        let view = TreeView::load(&s);
        let rows: Vec<(&str, String)> = view
            .rows(ASCII)
            .into_iter()
            .map(|(n, p)| (view.nodes[n].id.as_str(), p))
            .collect();
        assert_eq!(
            rows,
            [
                ("a", String::new()),
                ("b", "|- ".to_owned()),
                ("c", "`- ".to_owned()),
                ("d", "   ".to_owned()),
            ]
        );
        s.label("top", Some(&EntryId::parse("a").unwrap())).unwrap();
        let mut out = Vec::new();
        render(&s, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "* a user a [top]");
        assert_eq!(lines[1], "├─ o b user b");
        assert!(lines[2].starts_with("└─ * c user c"), "{text}");
        assert!(lines[4].ends_with("← leaf"), "{text}");
    }
}
