//! Lineage between imported sessions, linked the way cairn links its own:
//! a fork's header names the session and entry it was forked from
//! (`lineage.forked_from`), a subagent's the session and tool call that
//! spawned it (`lineage.parent`), so `cairn show`, `tree`, `steps` and the
//! server show them as they show native forks and subagents.
//!
//! - pi: the header's `parentSession` is the path of the session it was
//!   branched or forked from; the file holds a copy of the branch, or of
//!   every entry (same ids), so the fork point is the last of the child's
//!   first entries that the parent holds too (same parent, same content).
//! - Codex: `session_meta.forked_from_id` names the thread it was forked from
//!   (its rollout is `rollout-<time>-<id>.jsonl`, looked up in the ledger,
//!   then beside the child and under the sessions root). A fork written with
//!   `forked_from_ordinal_exclusive` holds only its own items: Codex builds
//!   its history from the parent's first that many rollout items, so the
//!   import copies the parent's branch up to the entry those items end at
//!   (as `cairn fork` copies it), and the child's items follow it. An older
//!   fork, which copied the history into its own file, is linked as pi's is.
//! - Claude Code: a subagent's transcript is
//!   `<session>/subagents/agent-<agentId>.jsonl` beside `<session>.jsonl`;
//!   the call that started it is the `toolUseId` of the `.meta.json` beside
//!   it, else the tool result whose `toolUseResult.agentId` names the agent.
//!
//! A parent that is not imported yet is imported first, and one that grew
//! since its import is brought up to date first (its report comes with the
//! child's either way): the child may have been forked from an entry the
//! parent gained since. One that cannot be found leaves the child unlinked,
//! with a note saying which source session it names.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use cairn::{
    Access, EntryBody, EntryId, MemoryBackend, NewSession, ReadError, Session, SessionId,
    SpawnOrigin, Store,
};
use serde_json::{Map, Value, json};

use crate::builder::{At, Builder, Item};
use crate::{Error, FileReport, Format, Ledger, Note, NoteKind, Options};

/// How deep parents are imported on the way (a parent of a parent …).
pub(crate) const MAX_DEPTH: u32 = 16;

/// The other source session a source names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Link {
    /// A fork of another session.
    Fork {
        /// Where the parent is.
        parent: ParentRef,
        /// Codex: the parent's first rollout items the fork's history is made
        /// of (it holds only its own).
        ordinal: Option<u64>,
    },
    /// A Claude Code subagent.
    Spawn {
        /// The parent's transcript.
        parent: PathBuf,
        /// The agent's id (`agent-<id>.jsonl`).
        agent_id: String,
        /// The tool call that started it, when its `.meta.json` says.
        call_id: Option<String>,
    },
}

/// How a source names its parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ParentRef {
    /// A session file's path (pi).
    Path(PathBuf),
    /// A Codex thread id.
    CodexThread(String),
}

impl Link {
    /// What the link names, for notes.
    pub(crate) fn describe(&self) -> String {
        match self {
            Link::Fork {
                parent: ParentRef::Path(p),
                ..
            } => format!("forked from {}", p.display()),
            Link::Fork {
                parent: ParentRef::CodexThread(id),
                ..
            } => format!("forked from Codex thread {id}"),
            Link::Spawn {
                parent, agent_id, ..
            } => format!("subagent {agent_id} of {}", parent.display()),
        }
    }
}

impl Link {
    /// How the ledger remembers the parent of a child left unlinked: its
    /// path as found, or a Codex thread id.
    pub(crate) fn reference(&self, child: &Path) -> String {
        let path = |p: &Path| {
            let p = child.parent().unwrap_or(Path::new(".")).join(p);
            std::fs::canonicalize(&p).unwrap_or(p).display().to_string()
        };
        match self {
            Link::Fork {
                parent: ParentRef::Path(p),
                ..
            }
            | Link::Spawn { parent: p, .. } => path(p),
            Link::Fork {
                parent: ParentRef::CodexThread(id),
                ..
            } => id.clone(),
        }
    }
}

/// A Claude Code subagent transcript's link, from its path:
/// `<dir>/<session>/subagents/agent-<id>.jsonl`.
pub(crate) fn claude_subagent(path: &Path) -> Option<Link> {
    let stem = path.file_stem()?.to_str()?;
    let agent_id = stem.strip_prefix("agent-")?.to_owned();
    let subagents = path.parent()?;
    if subagents.file_name()? != "subagents" {
        return None;
    }
    let session_dir = subagents.parent()?;
    let parent = session_dir.with_extension("jsonl");
    let meta = std::fs::read(path.with_extension("meta.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
    let call_id = meta
        .as_ref()
        .and_then(|m| m.get("toolUseId"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    Some(Link::Spawn {
        parent,
        agent_id,
        call_id,
    })
}

/// The parent's source file: the path it names (else the file of that name
/// beside the child), or a Codex thread's
/// rollout found in the ledger, beside the child, or under the sessions
/// root (`sessions/YYYY/MM/DD/`).
pub(crate) fn parent_file(parent: &ParentRef, child: &Path, ledger: &Ledger) -> Option<PathBuf> {
    match parent {
        ParentRef::Path(p) => {
            let dir = child.parent().unwrap_or(Path::new("."));
            let named = dir.join(p);
            // Sessions moved together (another machine, a backup) keep
            // their names: the parent beside the child.
            let beside = p.file_name().map(|n| dir.join(n));
            match beside {
                Some(b) if !named.is_file() && b.is_file() => Some(b),
                _ => Some(named),
            }
        }
        ParentRef::CodexThread(id) => {
            let suffix = format!("-{id}.jsonl");
            let named = |p: &Path| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.ends_with(&suffix))
            };
            if let Some(p) = ledger
                .sources()
                .map(|(p, _)| Path::new(p))
                .find(|&p| named(p))
            {
                return Some(p.to_owned());
            }
            // Beside the child, then the sessions root when the child is
            // where Codex keeps rollouts (`sessions/YYYY/MM/DD/`), and no
            // wider: a rollout elsewhere does not make its ancestors a tree
            // to search.
            let root = child
                .ancestors()
                .nth(4)
                .filter(|r| r.file_name().is_some_and(|n| n == "sessions"));
            let roots = [child.parent(), root];
            roots.into_iter().flatten().find_map(|dir| {
                crate::source_files(dir)
                    .ok()?
                    .into_iter()
                    .find(|p| named(p.as_path()))
            })
        }
    }
}

/// The call that started Claude Code agent `agent_id`: the tool result in
/// the parent's transcript whose `toolUseResult.agentId` names it.
pub(crate) fn claude_spawning_call(parent: &Path, agent_id: &str) -> Option<String> {
    let text = std::fs::read_to_string(parent).ok()?;
    text.lines().find_map(|l| {
        let v: Value = serde_json::from_str(l).ok()?;
        if v["toolUseResult"]["agentId"].as_str() != Some(agent_id) {
            return None;
        }
        v["message"]["content"]
            .as_array()?
            .iter()
            .find_map(|b| b["tool_use_id"].as_str().map(str::to_owned))
    })
}

/// The subagent origin of a child of `parent` started by `call_id`: one
/// level deeper than the parent.
pub(crate) fn spawn_origin(parent: &Session, call_id: String) -> SpawnOrigin {
    SpawnOrigin {
        session: parent.id().clone(),
        call_id,
        depth: parent
            .header()
            .lineage
            .parent
            .as_ref()
            .map_or(0, |p| p.depth)
            + 1,
    }
}

/// The session of the parent a link names; a parent not imported yet, or
/// changed since its import, is imported first (its report goes to
/// `also`). The error says why there is
/// none.
pub(crate) fn link_parent(
    store: &Store,
    ledger: &mut Ledger,
    link: &Link,
    child: &Path,
    opts: &Options,
    depth: u32,
    also: &mut Vec<FileReport>,
) -> Result<Session, String> {
    let file = match link {
        Link::Fork { parent, .. } => parent_file(parent, child, ledger),
        Link::Spawn { parent, .. } => Some(parent.clone()),
    }
    .ok_or("its session file was not found")?;
    let canonical = std::fs::canonicalize(&file).unwrap_or_else(|_| file.clone());
    if canonical == child {
        return Err("it names itself".into());
    }
    let imported = ledger
        .get(&canonical.display().to_string())
        .and_then(|s| SessionId::parse(&s.session).ok())
        .and_then(|id| store.open(&id, Access::Read).ok());
    if !canonical.is_file() {
        return imported.ok_or_else(|| format!("{} is neither imported nor found", file.display()));
    }
    if depth >= MAX_DEPTH {
        return imported
            .ok_or_else(|| format!("{} is {} parents up (a loop?)", file.display(), depth + 1));
    }
    // Imported already or not, the parent is brought up to date first: the
    // child may copy entries it gained since its import (the fork point).
    let parent_opts = Options {
        format: None,
        ..opts.clone()
    };
    let mut r = match (
        crate::plan::import_at(store, ledger, &canonical, &parent_opts, depth + 1),
        imported,
    ) {
        (Ok(r), _) => r,
        // As far as it was imported.
        (Err(_), Some(s)) => return Ok(s),
        (Err(e), None) => {
            return Err(format!(
                "importing {} failed: {}",
                file.display(),
                cairn::with_causes(&e)
            ));
        }
    };
    let id = SessionId::parse(&r.session).map_err(|e| e.to_string())?;
    if r.outcome != crate::Outcome::Unchanged {
        // Its own parents first, then it: one flat list, oldest ancestor
        // first.
        also.append(&mut r.also);
        also.push(r);
    }
    open_parent(store, &id).map_err(|e| cairn::with_causes(&e))
}

/// Notes for the sessions imported before the source at `key` that name it
/// as their parent and stay unlinked (a header is written once).
pub(crate) fn orphans(
    ledger: &Ledger,
    key: &str,
    format: Format,
    source_id: Option<&str>,
) -> Vec<Note> {
    ledger
        .sources()
        .filter(|(path, _)| *path != key)
        .filter(|(_, s)| {
            s.unlinked.as_deref().is_some_and(|u| {
                u == key || (format == Format::Codex && Some(u) == source_id)
            })
        })
        .map(|(path, s)| Note {
            line: None,
            kind: NoteKind::Kept,
            message: format!(
                "{path} (session {}), imported before this file, names it as its parent: that session stays unlinked (a session's header is written once)",
                s.session
            ),
        })
        .collect()
}

/// The entry a Codex rollout's first `items` lines end at, as their import
/// wrote it (an import depends only on the lines read so far), if the
/// parent's session holds it.
pub(crate) fn codex_fork_point(parent: &Session, items: u64) -> Option<EntryId> {
    let origin = parent.header().lineage.imported_from.as_ref()?;
    let bytes = std::fs::read(&origin.path).ok()?;
    let end = bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .nth(usize::try_from(items).ok()?.checked_sub(1)?)
        .map_or(bytes.len(), |(i, _)| i + 1);
    let lines = crate::parse_lines(&bytes[..end], 1).lines;
    let mut conv = crate::converter(Format::Codex);
    let start = conv.start(&lines[..lines.len().min(8)]).ok()?;
    let staging = MemoryBackend::new();
    let session = Session::create(
        &staging,
        NewSession {
            cwd: start.cwd,
            ..NewSession::default()
        },
    )
    .ok()?;
    let mut b = Builder::new(&session, "", false);
    let last = lines.last().map_or(0, |(l, _)| *l);
    for (line, v) in lines {
        conv.line(&mut b, line, v).ok()?;
    }
    conv.end_of_input(&mut b, last).ok()?;
    let leaf = b.leaf().cloned()?;
    parent.entry(&leaf).ok()?.map(|_| leaf)
}

/// Opens an imported parent for reading.
pub(crate) fn open_parent(store: &Store, id: &SessionId) -> Result<Session, Error> {
    Ok(store.open(id, Access::Read)?)
}

/// Where `child` (staged, entries written) was forked from `parent`: the
/// last of the child's first entries, in log order, that the parent holds
/// too — the same content under the entry the child's parent matched (an
/// entry of the same id first). pi copies the branch (`createBranchedSession`)
/// or every entry (`forkFrom`) with their ids; an older Codex fork, its
/// history without ids. `None` when not even the first entry is the
/// parent's.
pub(crate) fn fork_point(child: &Session, parent: &Session) -> Result<Option<EntryId>, ReadError> {
    let mut matched: HashMap<EntryId, EntryId> = HashMap::new();
    let mut last = None;
    for node in child.nodes() {
        let under = match &node.parent {
            None => None,
            Some(p) => match matched.get(p) {
                Some(m) => Some(m.clone()),
                None => break,
            },
        };
        let Some(entry) = child.entry(&node.id)? else {
            break;
        };
        let mut candidates = parent.children(under.as_ref());
        if let Some(i) = candidates.iter().position(|c| *c == node.id) {
            candidates.swap(0, i);
        }
        let mut found = None;
        for c in candidates {
            if parent.entry(&c)?.is_some_and(|e| e.body == entry.body) {
                found = Some(c);
                break;
            }
        }
        let Some(f) = found else { break };
        matched.insert(node.id, f.clone());
        last = Some(f);
    }
    Ok(last)
}

/// Copies `parent`'s branch up to `at` into the session `b` writes (same
/// ids, times and content; labels whose target is not copied are left out,
/// as `cairn fork` leaves them). The child's own entries follow it.
pub(crate) fn copy_branch(
    b: &mut Builder<'_>,
    parent: &Session,
    at: &EntryId,
) -> Result<(), Error> {
    let entries = parent.branch_entries(Some(at))?;
    let mut copied = HashSet::new();
    for (e, ts) in entries {
        if let EntryBody::Label(l) = &e.body
            && l.target.as_ref().is_some_and(|t| !copied.contains(t))
        {
            continue;
        }
        let mut source = Map::new();
        source.insert("copied_from".into(), json!(parent.id().to_string()));
        let id = b.entry(Item {
            line: 1,
            id: Some(e.id.to_string()),
            at: e
                .parent
                .as_ref()
                .map_or(At::Root, |p| At::Source(p.to_string())),
            body: e.body,
            ts: Some(ts),
            source,
        })?;
        copied.insert(id);
    }
    Ok(())
}
