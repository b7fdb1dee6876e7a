//! [`ContextStream`]: a session's context read once, a message at a time,
//! for a reader that writes each message out and drops it (`cairn context
//! --json`). Memory holds the tree, the context's state and one message,
//! not every message.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::{Reader, Session, lock};
use crate::backend::{Access, Backend};
use crate::error::{OpenError, ReadError};
use crate::id::{EntryId, SessionId};
use crate::projection::{ActiveCompaction, Context, ContextMessage};

/// A session opened read-only to read its context once, in order.
///
/// When the persisted index's checkpoint stands at the leaf, the open reads
/// no message; [`ContextStream::each_message`] then reads each one from the
/// log (its checksum checked, as every read is), hands it over and drops
/// it. Otherwise the session opens as [`Session::open`] does and the
/// messages come from its context (those it kept unread are read in turn). Either way the messages, compaction,
/// leaf, app state, settings and labels are those of
/// [`Session::context`].
///
/// ```
/// use cairn::{ContextStream, MemoryBackend, Session};
/// use cairn::testkit::build::user;
///
/// let backend = MemoryBackend::new();
/// let s = Session::create(&backend, Default::default())?;
/// s.append(user("hello"))?;
/// let stream = ContextStream::open(&backend, s.id())?;
/// let mut seen = Vec::new();
/// stream.each_message(&mut |m| seen.push(m.entry().clone()))?;
/// assert_eq!(seen, s.branch());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ContextStream {
    session: Session,
    /// The open left the messages out: they are read by `each_message`.
    deferred: bool,
    /// The context, without its messages when `deferred`.
    ctx: Arc<Context>,
}

impl ContextStream {
    /// Opens session `id` of `backend` read-only, for its context.
    ///
    /// # Errors
    ///
    /// As [`Session::open`].
    pub fn open(backend: &dyn Backend, id: &SessionId) -> Result<ContextStream, OpenError> {
        let (session, deferred) = Session::open_with(backend, id, Access::Read, true)?;
        let ctx = lock(&session.inner).proj.context();
        Ok(ContextStream {
            session,
            deferred,
            ctx,
        })
    }

    /// The session's id.
    pub fn id(&self) -> &SessionId {
        self.session.id()
    }

    /// The context's leaf.
    pub fn leaf(&self) -> Option<&EntryId> {
        self.ctx.leaf()
    }

    /// The app state at the leaf.
    pub fn app_state(&self) -> &Value {
        self.ctx.app_state()
    }

    /// The settings at the leaf.
    pub fn settings(&self) -> &Map<String, Value> {
        self.ctx.settings()
    }

    /// The labels.
    pub fn labels(&self) -> &BTreeMap<String, EntryId> {
        self.ctx.labels()
    }

    /// Hands each message of the context to `each`, in order, read and
    /// checked (its [`ContextMessage::message`] is `Ok`); returns the
    /// compaction in force. Stops at the first message that cannot be read.
    ///
    /// # Errors
    ///
    /// [`ReadError`] when a message's record cannot be read back (damaged
    /// since the open, or the file changed underneath).
    pub fn each_message(
        &self,
        each: &mut dyn FnMut(&ContextMessage),
    ) -> Result<Option<ActiveCompaction>, ReadError> {
        if !self.deferred {
            for m in self.ctx.messages().iter() {
                m.message()?;
                each(m);
            }
            return Ok(self.ctx.compaction().cloned());
        }
        let inner = lock(&self.session.inner);
        let reader = Reader {
            log: &*self.session.log,
            tree: &inner.tree,
        };
        let mut failed = None;
        let (compaction, _) = inner.proj.each_message(&inner.tree, &reader, &mut |m| {
            if failed.is_none() {
                // Read now, handed over, then dropped with its message.
                match m.message() {
                    Ok(_) => each(&m),
                    Err(e) => failed = Some(e),
                }
            }
        })?;
        match failed {
            Some(e) => Err(e),
            None => Ok(compaction),
        }
    }
}
