//! Finding the store, the session and the entry a command names.
//!
//! A session is named by full id, unique id prefix, path to a `.jsonl` file,
//! or `--last` (the newest that is not a subagent's; `--last --all`: of
//! any kind); an entry by id, unique id prefix, label, or `root`/`none`.
//! Read commands open with [`Access::Read`] (no lock, no repair); write
//! commands with [`Access::Write`], reporting a torn tail they cut.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, anyhow, bail};
use cairn::{Access, EntryId, Session, SessionId, Store};
use cairn_agent::OpenedStore;
use cairn_blobs::BlobStore;
use cairn_stores::{blob_dir, files_dir};

use crate::args::SessionArg;
use crate::term::{Lines, Look, Out, clean};

/// What every command gets: where the store is and how output looks.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// `--store` (or `$CAIRN_HOME`), if given.
    pub store_dir: Option<PathBuf>,
    /// Colour and width of human output.
    pub look: Look,
}

impl Ctx {
    /// The store's home directory.
    ///
    /// # Errors
    ///
    /// When no home can be found (no `--store`, `$CAIRN_HOME` or `$HOME`).
    pub fn home(&self) -> Result<PathBuf> {
        self.store_dir
            .clone()
            .or_else(Store::default_home)
            .ok_or_else(|| anyhow!("cannot find a store: pass --store DIR or set CAIRN_HOME"))
    }

    /// The store.
    ///
    /// # Errors
    ///
    /// As [`Ctx::home`].
    pub fn store(&self) -> Result<Store> {
        Ok(open_store(&self.home()?)?)
    }

    /// The store's blob store (in `cairn_stores::blob_dir` of its location).
    ///
    /// # Errors
    ///
    /// As [`Ctx::home`].
    pub fn blobs(&self) -> Result<BlobStore> {
        Ok(BlobStore::new(blob_dir(&self.home()?)))
    }

    /// The store opened for the agent, with the directories beside it.
    ///
    /// # Errors
    ///
    /// As [`Ctx::store`].
    pub fn opened(&self) -> Result<OpenedStore> {
        open_for_agent(&self.home()?)
    }

    /// Human or JSON output to stdout.
    pub fn out(&self) -> Out<'static> {
        Out::new(std::io::stdout().lock(), self.look)
    }
}

pub use cairn_stores::open_store;

/// Opens the store at `location` for the agent: the store, its tools'
/// files directory and its blob directory (`cairn_stores`' rules). The
/// demo's child processes open their store with it too.
///
/// # Errors
///
/// When the SQLite database or the Postgres store cannot be opened.
pub fn open_for_agent(location: &Path) -> Result<OpenedStore> {
    Ok(OpenedStore {
        store: open_store(location)?,
        files: files_dir(location),
        blobs: blob_dir(location),
        location: location.to_owned(),
    })
}

/// How a session was named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spec {
    /// An id or unique id prefix.
    Query(String),
    /// A path to a session file.
    Path(PathBuf),
    /// The most recently updated session that is not a subagent's.
    Last,
    /// The most recently updated session of any kind (`--last --all`).
    LastOfAny,
}

impl Spec {
    fn of(text: &str) -> Spec {
        if text.contains(std::path::MAIN_SEPARATOR)
            || text.contains('/')
            || text.ends_with(".jsonl")
        {
            Spec::Path(PathBuf::from(text))
        } else {
            Spec::Query(text.to_owned())
        }
    }
}

/// The session of a command whose only positional is SESSION.
///
/// # Errors
///
/// A usage error when neither or both of SESSION and `--last` are given.
pub fn spec(arg: &SessionArg) -> Result<Spec> {
    let (spec, rest) = split(arg, &[], 0)?;
    debug_assert!(rest.is_empty());
    Ok(spec)
}

/// The session and the `want` other positionals of a command like
/// `checkout [SESSION] ENTRY`: with `--last`, every positional is one of the others.
///
/// # Errors
///
/// A usage error naming what is missing or extra.
pub fn split(arg: &SessionArg, rest: &[String], want: usize) -> Result<(Spec, Vec<String>)> {
    let mut all: Vec<String> = arg.session.iter().cloned().collect();
    all.extend(rest.iter().cloned());
    let spec = if arg.last {
        if arg.all { Spec::LastOfAny } else { Spec::Last }
    } else if arg.all {
        bail!("--all goes with --last here (the newest session, subagents' included)");
    } else if all.is_empty() {
        bail!(
            "no session given: name one (id, unique id prefix or path to a .jsonl file) or use --last"
        );
    } else {
        Spec::of(&all.remove(0))
    };
    if all.len() != want {
        let extra = if arg.last && all.len() > want {
            " (with --last, leave out SESSION)"
        } else {
            ""
        };
        bail!(
            "expected {want} argument(s) after the session, got {}{extra}; see --help",
            all.len()
        );
    }
    Ok((spec, all))
}

/// Finds the store and id of a named session.
///
/// # Errors
///
/// Unknown session, ambiguous prefix, empty store, a path that is not a
/// session file.
pub fn locate(ctx: &Ctx, spec: &Spec) -> Result<(Store, SessionId)> {
    match spec {
        Spec::Path(p) => Ok(cairn::locate_path(p)?),
        Spec::Query(q) => {
            let store = ctx.store()?;
            let id = store.resolve(q)?;
            Ok((store, id))
        }
        Spec::Last => {
            let store = ctx.store()?;
            let id = cairn_agent::store::newest_top_level(&store)?;
            Ok((store, id))
        }
        Spec::LastOfAny => {
            let store = ctx.store()?;
            let id = store.latest()?;
            Ok((store, id))
        }
    }
}

/// Opens a named session; a writer reports a torn tail it cut on stderr.
///
/// # Errors
///
/// As [`locate`] and [`Session::open`] (in use, damaged, newer format, …).
pub fn open(ctx: &Ctx, spec: &Spec, access: Access) -> Result<(Store, Session)> {
    let (store, id) = locate(ctx, spec)?;
    let session = store.open(&id, access)?;
    if access == Access::Write
        && let Some(t) = &session.open_report().torn
    {
        let mut err = std::io::stderr().lock();
        let _ = writeln!(
            err,
            "note: cut an incomplete last record ({} bytes at offset {}: {}), left by a write that never \
             finished; saved to {}",
            t.len,
            t.offset,
            clean(&t.problem, Lines::Flatten),
            t.saved_to.as_deref().unwrap_or("nowhere"),
        );
    }
    Ok((store, session))
}

/// An entry reference resolved: `None` means before the first entry; a step
/// label (`s0005`) names the entry its step produced.
///
/// # Errors
///
/// No such entry or step, or an ambiguous prefix.
pub fn entry(session: &Session, query: &str) -> Result<Option<EntryId>> {
    if matches!(query, "root" | "none") {
        return Ok(None);
    }
    let id = cairn::steps::resolve(session, query)
        .with_context(|| format!("in session {}", session.id()))?;
    Ok(Some(id))
}

/// The short form of an entry id for display (entry ids are short already;
/// long host-chosen ids are cut).
pub fn short_entry(id: &EntryId) -> String {
    crate::term::fit(id.as_str(), 12).into_owned()
}

/// The torn tails a writer cut from a session file and saved beside it
/// (`<file>.torn-<time>`), oldest first; none for other backends.
pub fn torn_files(location: &str) -> Vec<PathBuf> {
    let path = Path::new(location);
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Vec::new();
    };
    let prefix = format!("{name}.torn-");
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}
