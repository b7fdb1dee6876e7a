//! The append path: every invariant is checked against the tree, the
//! projection and the operation journal before anything is written; the
//! index and the projection change only after the write succeeded.

use std::collections::BTreeMap;

use super::{Appended, Inner, NewEntry, Parent, Reader, Session, Writing, lock};
use crate::commit::Durability;
use crate::error::{AppendError, Invalid, StoreError};
use crate::frame;
use crate::id::{self, EntryId};
use crate::input::{InputParent, InputRecord};
use crate::journal;
use crate::kind::EntryKind;
use crate::projection::{CheckError, Source};
use crate::record::{Checkout, Entry, EntryBody, Label, OpRecord};
use crate::time::TsText;
use crate::tree::{BranchFold, Reject, Tree, Walk};

impl Session {
    /// Appends an entry at the leaf with a generated id.
    ///
    /// # Errors
    ///
    /// As [`Session::append_entry`].
    pub fn append(&self, body: EntryBody) -> Result<Appended, AppendError> {
        self.append_entry(NewEntry::at_leaf(body))
    }

    /// Appends an entry, checking first (nothing is written if a check fails):
    /// the parent exists; the id is new; a tool result answers an unanswered
    /// tool call on the entry's branch; a compaction's `first_kept` is on the
    /// branch and separates no call from its result; a label names an entry.
    /// Returns once the record is written under the session's durability.
    ///
    /// # Errors
    ///
    /// [`AppendError::Invalid`] for a failed check, [`AppendError::ReadOnly`],
    /// [`AppendError::Poisoned`], [`AppendError::Io`] (which poisons the handle).
    pub fn append_entry(&self, new: NewEntry) -> Result<Appended, AppendError> {
        self.append_entry_at(new, None, None)
    }

    /// Appends an entry brought in from another tool's session (an
    /// importer): checked exactly as [`Session::append_entry`], written with
    /// the source's time as `ts` (RFC 3339 UTC with milliseconds, as
    /// `ts` is written; the append's own time when `None`) and with `extra`
    /// members in its `data` object: the source fields cairn has no place
    /// for, which readers ignore (`docs/FORMAT.md` section 1) and which stay
    /// in the line's bytes.
    ///
    /// # Errors
    ///
    /// As [`Session::append_entry`].
    pub fn append_imported(
        &self,
        new: NewEntry,
        ts: Option<String>,
        extra: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Appended, AppendError> {
        self.append_entry_with(new, ts, None, extra)
    }

    pub(crate) fn append_entry_at(
        &self,
        new: NewEntry,
        ts: Option<String>,
        durability: Option<Durability>,
    ) -> Result<Appended, AppendError> {
        self.append_entry_with(new, ts, durability, &serde_json::Map::new())
    }

    fn append_entry_with(
        &self,
        new: NewEntry,
        ts: Option<String>,
        durability: Option<Durability>,
        extra: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Appended, AppendError> {
        let mut w = self.begin_write(durability)?;
        // A group append's line is written by the sync it waits for.
        let defer = w.durability == Durability::Group;
        let inner = &mut *w.g;
        let parent = match new.parent {
            Parent::Leaf => inner.tree.last().map(|n| inner.tree.entry_id(n)),
            Parent::Root => None,
            Parent::Entry(p) => Some(p),
        };
        let id = match new.id {
            Some(id) => id,
            None => loop {
                let id = EntryId::random();
                if inner.tree.get(&id).is_none() {
                    break id;
                }
            },
        };
        let checked = inner.tree.check(&id, parent.as_ref());
        // The lookups read nothing from a block of the persisted index
        // that did not verify: say so rather than answer without it.
        inner.tree.check_damage(self.log.location())?;
        let parent_node = checked.map_err(|r| match r {
            Reject::DuplicateId => Invalid::DuplicateId(id.to_string()),
            Reject::MissingParent => Invalid::MissingParent(
                parent
                    .as_ref()
                    .map_or_else(String::new, ToString::to_string),
            ),
        })?;
        let entry = Entry {
            id,
            parent,
            body: new.body,
        };
        match &entry.body {
            EntryBody::Label(l) => check_label(&inner.tree, &inner.wide.labels, l)?,
            EntryBody::Custom(c) if c.namespace.is_empty() => {
                return Err(Invalid::NoNamespace.into());
            }
            EntryBody::Message(m) if !m.results_hold_only_content() => {
                return Err(Invalid::ResultContent.into());
            }
            EntryBody::Message(_)
            | EntryBody::AppState(_)
            | EntryBody::Compaction(_)
            | EntryBody::Checkout(_)
            | EntryBody::Settings(_)
            | EntryBody::SessionInfo(_)
            | EntryBody::Custom(_)
            | EntryBody::Ignored(_) => {}
        }
        inner.fold.check_entry(&entry)?;
        let reader = Reader {
            log: &*self.log,
            tree: &inner.tree,
        };
        // The check is made against the projection at the parent: the live
        // one when the entry continues the leaf, else a moved copy. The live
        // projection changes only once the write succeeded.
        let moved = if parent_node == inner.proj.leaf() {
            None
        } else {
            let mut p = inner.proj.clone();
            p.move_to(
                parent_node,
                Walk {
                    tree: &inner.tree,
                    src: &reader,
                },
            )?;
            Some(p)
        };
        moved
            .as_ref()
            .unwrap_or(&inner.proj)
            .check(&inner.tree, &entry, &reader)
            .and_then(|()| match &moved {
                None => Ok(()),
                // A new branch may not start where a tool call has no result.
                Some(p) => journal::check_branch_point(&p.context(), &entry, &inner.tree, &reader),
            })
            .map_err(|e| match e {
                CheckError::Invalid(i) => AppendError::from(i),
                CheckError::Read(r) => r.into(),
            })?;
        // The checks and the move read the tree: a block of the persisted
        // index that failed on the way made them answer without it.
        inner.tree.check_damage(self.log.location())?;
        let seq = self.write_line(inner, ts, defer, |line, seq, ts| {
            frame::encode_entry_into(line, seq, ts, &entry, extra);
        })?;
        if let Some(p) = moved {
            inner.proj = p;
        }
        let node =
            inner
                .tree
                .insert_checked(seq, entry.id.clone(), parent_node, entry.body.known_kind());
        let reader = Reader {
            log: &*self.log,
            tree: &inner.tree,
        };
        inner.fold.apply_entry(&entry);
        if let Some(m) = inner.memory.as_mut() {
            let parent = inner.tree.node(node).parent;
            if parent == m.leaf() {
                m.push(node, &entry);
            } else {
                m.move_to(
                    Some(node),
                    Walk {
                        tree: &inner.tree,
                        src: &reader,
                    },
                )?;
            }
        }
        inner.wide.apply(&entry.body);
        if let EntryBody::Label(_) = &entry.body {
            inner.proj.set_labels(inner.wide.labels.clone());
        }
        let appended = Appended {
            seq,
            id: Some(entry.id.clone()),
        };
        // Last: the projection takes the entry (a message moves into the context).
        inner.proj.push(&inner.tree, node, entry, &reader)?;
        self.finish_write(w, seq + 1)?;
        Ok(appended)
    }

    /// Appends one input record ([`decode_input`](crate::decode_input)): an
    /// operation record as it is, an entry with its parent resolved as
    /// [`Session::resolve`] resolves it (an entry id, else a label, else a
    /// unique id prefix; no `"parent"`: the leaf; `null`: a new root). What
    /// `cairn append`, the server's records endpoint and the Python binding
    /// write.
    ///
    /// ```
    /// use cairn::{MemoryBackend, Session, decode_input};
    ///
    /// let backend = MemoryBackend::new();
    /// let s = Session::create(&backend, Default::default())?;
    /// let hi = r#"{"role":"user","content":[{"type":"text","text":"hi"}]}"#;
    /// let first = format!(r#"{{"kind":"message","id":"0000abcd","data":{hi}}}"#);
    /// s.append_input(decode_input(&first)?)?;
    /// // The parent by a unique prefix of its id.
    /// let reply = format!(r#"{{"kind":"message","parent":"0000","data":{hi}}}"#);
    /// let second = s.append_input(decode_input(&reply)?)?;
    /// assert_eq!(s.context().messages().len(), 2);
    /// assert_eq!(second.seq, 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`StoreError::Lookup`] when the parent names no entry or several;
    /// [`StoreError::Append`] as [`Session::append_entry`] and
    /// [`Session::append_op`].
    pub fn append_input(&self, input: InputRecord) -> Result<Appended, StoreError> {
        match input {
            InputRecord::Op(op) => Ok(self.append_op(op)?),
            InputRecord::Entry { id, parent, body } => {
                let parent = match parent {
                    InputParent::Leaf => Parent::Leaf,
                    InputParent::Root => Parent::Root,
                    InputParent::Reference(query) => Parent::Entry(self.resolve(&query)?),
                };
                Ok(self.append_entry(NewEntry { id, parent, body })?)
            }
        }
    }

    /// Appends an operation-journal record.
    ///
    /// # Errors
    ///
    /// [`AppendError::ReadOnly`], [`AppendError::Poisoned`], [`AppendError::Io`].
    pub fn append_op(&self, op: OpRecord) -> Result<Appended, AppendError> {
        let durability = match op {
            // T1 is on disk before the tool starts, whatever the session's mode.
            OpRecord::ToolDispatched(_) => Some(Durability::Sync),
            OpRecord::OpStarted(_)
            | OpRecord::ModelAttempted(_)
            | OpRecord::UsageSettled(_)
            | OpRecord::ApprovalRequested(_)
            | OpRecord::ApprovalResolved(_)
            | OpRecord::InputQueued(_)
            | OpRecord::OpFinished(_)
            | OpRecord::Ignored(_) => None,
        };
        self.append_op_at(op, None, durability)
    }

    pub(crate) fn append_op_at(
        &self,
        op: OpRecord,
        ts: Option<String>,
        durability: Option<Durability>,
    ) -> Result<Appended, AppendError> {
        let mut w = self.begin_write(durability)?;
        // A group append's line is written by the sync it waits for.
        let defer = w.durability == Durability::Group;
        let inner = &mut *w.g;
        inner
            .fold
            .check_op(&self.id, &op, &inner.tree, &inner.proj)?;
        let seq = self.write_line(inner, ts, defer, |line, seq, ts| {
            frame::encode_op_into(line, seq, ts, &op);
        })?;
        inner.ops.push((seq, op.kind().to_owned()));
        inner.fold.apply_op(&op);
        self.finish_write(w, seq + 1)?;
        Ok(Appended { seq, id: None })
    }

    /// Takes the session for a write, once the handle may write: the
    /// durability to write under (the session's unless given), the append
    /// noted as in flight, and the locked state.
    fn begin_write(&self, durability: Option<Durability>) -> Result<Writing<'_>, AppendError> {
        let durability = durability.unwrap_or_else(|| self.durability());
        // In flight from before the lock: a group-commit leader waits (a
        // little) for appenders queued on it too.
        let flight = self.commit.begin();
        let g = lock(&self.inner);
        self.check_writable()?;
        Ok(Writing {
            durability,
            flight,
            g,
        })
    }

    /// Writes one record line at the next `seq`, stamped `ts` (now unless
    /// given), and moves the session past it. Returns the line's `seq`.
    ///
    /// The line is encoded into a buffer the thread keeps from one append
    /// to the next, so a record costs no allocation for its line. With
    /// `defer` it is handed to the log to be written by the next sync
    /// ([`crate::backend::Log::defer`]).
    fn write_line(
        &self,
        inner: &mut Inner,
        ts: Option<String>,
        defer: bool,
        encode: impl FnOnce(&mut Vec<u8>, u64, &str),
    ) -> Result<u64, AppendError> {
        /// A buffer grown past this by a large record is not kept.
        const KEEP: usize = 1 << 20;
        thread_local! {
            static LINE: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
        }
        let seq = inner.next_seq;
        let now;
        let ts = match &ts {
            Some(ts) => ts.as_str(),
            None => {
                now = TsText::now();
                now.as_str()
            }
        };
        // (`try_with` fails only while the thread is being torn down.)
        let mut line = LINE.try_with(std::cell::Cell::take).unwrap_or_default();
        encode(&mut line, seq, ts);
        let line_ref = std::slice::from_ref(&line);
        let written = if defer {
            self.log.defer(line_ref)
        } else {
            self.log.append(line_ref)
        };
        if line.capacity() <= KEEP {
            let _ = LINE.try_with(|cell| cell.set(line));
        }
        written?;
        inner.next_seq += 1;
        inner.last_ts.clear();
        inner.last_ts.push_str(ts);
        Ok(seq)
    }

    /// Moves the leaf: appends a `checkout` entry whose parent is `target`
    /// (`None`: before the first entry), recording the leaf it came from and
    /// an optional summary of the branch left behind (shown to the model).
    ///
    /// Returns `None`, writing nothing, when the branch already ends at
    /// `target` (the leaf, or the parent of a summary-less checkout leaf)
    /// and there is no summary.
    ///
    /// # Errors
    ///
    /// As [`Session::append_entry`]; [`Invalid::MissingParent`] for an
    /// unknown target; [`Invalid::UnansweredCalls`] for a target whose branch
    /// has a tool call without a result (an assistant entry whose calls are
    /// answered only on another branch, or not at all): the error names the
    /// nearest safe entries.
    pub fn checkout(
        &self,
        target: Option<&EntryId>,
        summary: Option<String>,
    ) -> Result<Option<Appended>, AppendError> {
        let from = self.leaf();
        if summary.is_none() && self.is_at(target) {
            return Ok(None);
        }
        self.append_entry(NewEntry {
            id: None,
            parent: target.map_or(Parent::Root, |t| Parent::Entry(t.clone())),
            body: EntryBody::Checkout(Checkout { from, summary }),
        })
        .map(Some)
    }

    /// Whether the branch already ends at `target`: the leaf is `target`, or
    /// a checkout without summary whose parent is `target`.
    fn is_at(&self, target: Option<&EntryId>) -> bool {
        let inner = lock(&self.inner);
        let Some(leaf) = inner.tree.last() else {
            return target.is_none();
        };
        let node = inner.tree.node(leaf);
        let leaf_id = inner.tree.id(leaf);
        let target = target.map(EntryId::as_str);
        if target == Some(leaf_id) {
            return true;
        }
        if node.kind != Some(EntryKind::Checkout) || node.parent.map(|p| inner.tree.id(p)) != target
        {
            return false;
        }
        // The leaf checkout shows no summary (its summary would be the last message).
        inner
            .proj
            .context()
            .messages()
            .last()
            .is_none_or(|m| m.source() != &Source::CheckoutSummary || m.entry().as_str() != leaf_id)
    }

    /// Sets (or with `target: None`, removes) a label.
    ///
    /// # Errors
    ///
    /// As [`Session::append_entry`]; [`Invalid::Label`] for a bad name, an
    /// unknown target, or removing a label that does not exist.
    pub fn label(&self, name: &str, target: Option<&EntryId>) -> Result<Appended, AppendError> {
        self.append(EntryBody::Label(Label {
            name: name.to_owned(),
            target: target.cloned(),
        }))
    }
}

fn check_label(tree: &Tree, labels: &BTreeMap<String, EntryId>, l: &Label) -> Result<(), Invalid> {
    let bad = |problem: String| Invalid::Label {
        name: l.name.clone(),
        problem,
    };
    if !id::is_name(&l.name) {
        return Err(bad(
            "a label name is 1 to 64 characters of A-Z, a-z, 0-9, '-', '_' and '.'".into(),
        ));
    }
    match &l.target {
        Some(t) if tree.get(t).is_none() => Err(bad(format!(
            "its target {t} is not an entry of this session"
        ))),
        None if !labels.contains_key(&l.name) => {
            Err(bad("there is no such label to remove".into()))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::backend::MemoryBackend;
    use crate::error::{AppendError, Invalid, LookupError, StoreError};
    use crate::record::{Block, EntryBody, Message, Role};
    use crate::session::{NewEntry, NewSession, Parent, Session};

    fn tool_result(call_id: &str) -> EntryBody {
        EntryBody::Message(Message {
            role: Role::Tool,
            content: vec![Block::ToolResult {
                call_id: call_id.into(),
                content: vec![],
                is_error: false,
                code: None,
            }],
            usage: None,
            model: None,
            stop_reason: None,
        })
    }

    /// An input record's parent is found by entry id, label or unique id
    /// prefix; one that names nothing is a lookup error and writes nothing.
    #[test]
    fn an_input_parent_resolves_by_id_label_or_prefix_and_an_unknown_one_writes_nothing() {
        let backend = MemoryBackend::new();
        let s = Session::create(&backend, NewSession::default()).unwrap();
        let input = |parent: &str| {
            let hi = r#"{"role":"user","content":[{"type":"text","text":"hi"}]}"#;
            crate::decode_input(&format!(
                r#"{{"kind":"message","parent":{parent},"data":{hi}}}"#
            ))
            .unwrap()
        };
        let root = s.append_input(input("null")).unwrap().id.unwrap();
        s.label("top", Some(&root)).unwrap();
        for parent in [root.as_str(), "top", &root.as_str()[..4]] {
            let child = s.append_input(input(&format!("{parent:?}"))).unwrap();
            let entry = s.entry(child.id.as_ref().unwrap()).unwrap().unwrap();
            assert_eq!(entry.parent.as_ref(), Some(&root), "{parent}");
        }
        let len = s.len();
        let unknown = s.append_input(input(r#""nowhere""#));
        assert!(
            matches!(unknown, Err(StoreError::Lookup(LookupError::NotFound(_)))),
            "{unknown:?}"
        );
        assert_eq!(s.len(), len);
    }

    /// Regression: the append-time check moved the live projection to the
    /// new entry's parent and back, so a rejected append off the leaf
    /// rebuilt the context (and a failure moving back was discarded).
    #[test]
    fn regression_a_rejected_append_off_the_leaf_moved_the_projection_and_back() {
        let backend = MemoryBackend::new();
        let s = Session::create(&backend, NewSession::default()).unwrap();
        let first = s
            .append(EntryBody::Message(Message::text(Role::User, "a")))
            .unwrap();
        s.append(EntryBody::Message(Message::text(Role::Assistant, "b")))
            .unwrap();
        let before = s.context();
        let rejected = s.append_entry(NewEntry {
            id: None,
            parent: Parent::Entry(first.id.clone().unwrap()),
            body: tool_result("nope"),
        });
        assert!(
            matches!(rejected, Err(AppendError::Invalid(Invalid::NoSuchCall(_)))),
            "{rejected:?}"
        );
        assert!(
            Arc::ptr_eq(&before, &s.context()),
            "the live context was rebuilt"
        );
        // An accepted append off the leaf takes the moved projection.
        s.append_entry(NewEntry {
            id: None,
            parent: Parent::Entry(first.id.unwrap()),
            body: EntryBody::Message(Message::text(Role::Assistant, "c")),
        })
        .unwrap();
        let texts: Vec<String> = s
            .context()
            .messages()
            .iter()
            .map(|m| m.message().unwrap().plain_text())
            .collect();
        assert_eq!(texts, ["a", "c"]);
    }
}
