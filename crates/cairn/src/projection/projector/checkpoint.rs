//! The projection's checkpoint in a persisted index ([`Saved`]): what
//! [`Projector::save`] keeps at the last indexed entry, and
//! [`Projector::restore`], which stands there again reading only the
//! messages from the compaction in force on, after checking that what it
//! names fits the tree.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Mark, Projector};
use crate::error::ReadError;
use crate::kind::EntryKind;
use crate::source::EntrySource;
use crate::tree::Tree;

/// The projection at one entry as a persisted index keeps it
/// ([`Projector::save`], [`Projector::restore`]): what folding the branch
/// found, so that an open need not read its app-state and settings entries
/// again. Positions are on the branch from the root to `leaf`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Saved {
    /// The entry it stands at.
    pub leaf: u32,
    app_state: Value,
    settings: Map<String, Value>,
    /// Positions of the app-state entries.
    state_at: Vec<u32>,
    /// Their entry numbers (so that a restore need not walk to them).
    state_nodes: Vec<u32>,
    /// Positions of the settings entries.
    settings_at: Vec<u32>,
    /// Their entry numbers.
    settings_nodes: Vec<u32>,
    /// Positions of the compactions.
    compactions: Vec<u32>,
}

/// The marks of entries `nodes` at positions `at` of the branch: only the
/// last holds its value (`last`); a move back past it replays the entries
/// from an earlier snapshot, or from the start.
fn restored_marks<T: Clone>(at: &[u32], nodes: &[u32], last: &T) -> Vec<Mark<T>> {
    let mut marks: Vec<Mark<T>> = at
        .iter()
        .zip(nodes)
        .map(|(&pos, &node)| Mark {
            pos,
            node,
            snapshot: None,
        })
        .collect();
    if let Some(m) = marks.last_mut() {
        m.snapshot = Some(Arc::new(last.clone()));
    }
    marks
}

impl Projector {
    /// What [`Projector::restore`] needs to stand here again without
    /// reading the branch (`None` before the first entry).
    pub fn save(&self) -> Option<Saved> {
        fn pos<T>(marks: &[Mark<T>]) -> Vec<u32> {
            marks.iter().map(|m| m.pos).collect()
        }
        fn nodes<T>(marks: &[Mark<T>]) -> Vec<u32> {
            marks.iter().map(|m| m.node).collect()
        }
        Some(Saved {
            leaf: *self.path.last()?,
            app_state: self.ctx.app_state.clone(),
            settings: self.ctx.settings.clone(),
            state_at: pos(&self.state_marks),
            state_nodes: nodes(&self.state_marks),
            settings_at: pos(&self.settings_marks),
            settings_nodes: nodes(&self.settings_marks),
            compactions: self.compactions.clone(),
        })
    }

    /// The projection at `saved.leaf`, from what [`Projector::save`] kept:
    /// the path is walked back from the leaf to the compaction in force
    /// (the root without one) and the messages are read from there on; no
    /// app-state or settings entry is read. `None` when `saved` does not
    /// fit `tree` (its leaf is not an entry the persisted index covers, or
    /// an entry it names is not of its kind, not at its position's depth,
    /// or, on the walked part of the branch, not on it): it is then not
    /// trusted. That the entries above the walked part are on the branch is
    /// trusted to the index's checksum.
    ///
    /// With `messages` false the messages are left out (the context holds
    /// none): only for a reader that takes them with
    /// [`Projector::each_message`] and never hands this context out.
    pub fn restore(
        initial_state: Value,
        saved: Saved,
        tree: &Tree,
        src: &dyn EntrySource,
        messages: bool,
    ) -> Result<Option<Projector>, ReadError> {
        if saved.leaf >= tree.base_len() {
            return Ok(None);
        }
        let depth = tree.node(saved.leaf).depth;
        let from = saved.compactions.last().copied().unwrap_or(0);
        if from > depth {
            return Ok(None);
        }
        let path = tree.path_from(from, saved.leaf);
        if path.len() != (depth - from) as usize + 1 {
            return Ok(None);
        }
        let fits = |at: &[u32], nodes: Option<&[u32]>, kind: EntryKind| {
            at.windows(2).all(|w| w[0] < w[1])
                && nodes.is_none_or(|n| n.len() == at.len())
                && at.iter().enumerate().all(|(i, &p)| {
                    let held = p.checked_sub(from).and_then(|i| path.get(i as usize));
                    // An earlier compaction above the part walked: trusted.
                    let Some(n) = nodes.map_or(held, |n| n.get(i)).copied() else {
                        return nodes.is_none() && p < from;
                    };
                    let node = tree.node(n);
                    (n as usize) < tree.len()
                        && node.depth == p
                        && node.kind == Some(kind)
                        && held.is_none_or(|&h| h == n)
                })
        };
        if !fits(
            &saved.state_at,
            Some(&saved.state_nodes),
            EntryKind::AppState,
        ) || !fits(
            &saved.settings_at,
            Some(&saved.settings_nodes),
            EntryKind::Settings,
        ) || !fits(&saved.compactions, None, EntryKind::Compaction)
        {
            return Ok(None);
        }
        let mut p = Projector::new(initial_state);
        p.state_marks = restored_marks(&saved.state_at, &saved.state_nodes, &saved.app_state);
        p.settings_marks =
            restored_marks(&saved.settings_at, &saved.settings_nodes, &saved.settings);
        p.compactions = saved.compactions;
        {
            let ctx = Arc::make_mut(&mut p.ctx);
            ctx.app_state = saved.app_state;
            ctx.settings = saved.settings;
            ctx.leaf = Some(tree.entry_id(saved.leaf));
        }
        p.path = path;
        p.from = from;
        if messages {
            p.rebuild_messages(tree, src)?;
        }
        Ok(Some(p))
    }
}
