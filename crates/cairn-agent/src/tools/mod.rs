//! Tools and their effect classes.
//!
//! A [`Tool`] declares its name, description, JSON schema and
//! [`EffectClass`]: `ReadOnly` (safe to re-run: `read_file`, `list_dir`,
//! `grep`), `Idempotent` (re-run with the same idempotency key has no
//! further effect: `set_state`, the demo's `render_panel`), `SideEffect`
//! (may repeat its effect: `write_file`, `edit_file`, `bash`; approval
//! prompt unless `--yes`; never re-run after a crash without a person).
//! The [`Registry`] validates arguments against the schema before anything
//! is dispatched.
//!
//! Large outputs are capped: the model sees the head and tail, and the full
//! output is kept in the store's content-addressed blob store
//! ([`cairn_blobs::BlobStore`]) and referenced by a [`Block::Blob`].

pub mod bash;
pub mod fs;
pub mod render;
pub mod replace;
pub mod schema;
pub mod state;

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cairn::{Block, EffectClass, Session, ToolOutput};
use cairn_blobs::{BlobError, BlobRef, BlobStore};
use cairn_workspace::{Limits, Snapshotter, Touches, Workspace, WorkspaceError};
use serde_json::Value;

use crate::interrupt::Interrupt;
use crate::provider::ToolSpec;

/// The code of a tool result cut short by Ctrl-C.
pub const CODE_INTERRUPTED: &str = "INTERRUPTED";

/// Where tools work and their limits.
#[derive(Debug, Clone)]
pub struct ToolEnv {
    /// Relative paths are resolved here; `bash` runs here.
    pub workdir: PathBuf,
    /// Where full outputs too large for the context are kept.
    pub blob_dir: PathBuf,
    /// The longest a command may run.
    pub timeout: Duration,
    /// Bytes of output shown to the model before capping.
    pub output_cap: usize,
    /// Workspace snapshots around the tools that touch files (`None`: off).
    pub snapshots: Option<Limits>,
    /// The snapshots' state for the session they were taken in.
    workspace: Option<(cairn::SessionId, Workspace)>,
}

impl ToolEnv {
    /// An environment in `workdir` keeping blobs in `blob_dir`, with a
    /// 120 s timeout, a 16 KiB output cap and workspace snapshots on.
    pub fn new(workdir: impl Into<PathBuf>, blob_dir: impl Into<PathBuf>) -> ToolEnv {
        ToolEnv {
            workdir: workdir.into(),
            blob_dir: blob_dir.into(),
            timeout: Duration::from_secs(120),
            output_cap: 16 << 10,
            snapshots: Some(Limits::default()),
            workspace: None,
        }
    }

    /// The workspace snapshots of `session` (read from its records the
    /// first time), or `None` when snapshots are off.
    ///
    /// # Errors
    ///
    /// When the session's workspace records cannot be read.
    pub fn workspace(
        &mut self,
        session: &Session,
    ) -> Result<Option<&mut Workspace>, WorkspaceError> {
        let Some(limits) = self.snapshots else {
            return Ok(None);
        };
        if self
            .workspace
            .as_ref()
            .is_none_or(|(id, w)| id != session.id() || !w.is_current(session))
        {
            let root = std::path::absolute(&self.workdir).map_err(|e| {
                WorkspaceError::Io(cairn::IoFailure::new(
                    "resolve",
                    self.workdir.display().to_string(),
                    e,
                ))
            })?;
            let mut snap = Snapshotter::new(&root, BlobStore::new(&self.blob_dir), limits);
            // A store kept inside the working directory is not part of it.
            if let Some(files) = std::path::absolute(&self.blob_dir)
                .ok()
                .and_then(|b| b.parent().map(Path::to_owned))
                && files.starts_with(&root)
                && files != root
            {
                snap = snap.excluding(files);
            }
            self.workspace = Some((session.id().clone(), Workspace::open(session, snap)?));
        }
        Ok(self.workspace.as_mut().map(|(_, w)| w))
    }

    /// `path` resolved against the working directory.
    pub fn resolve(&self, path: &str) -> PathBuf {
        let p = Path::new(path);
        if p.is_absolute() {
            p.to_owned()
        } else {
            self.workdir.join(p)
        }
    }
}

/// One call of a tool.
#[derive(Debug)]
pub struct ToolCall<'a> {
    /// The call id.
    pub call_id: &'a str,
    /// The (validated) arguments.
    pub arguments: &'a Value,
    /// The idempotency key to pass downstream.
    pub key: &'a str,
    /// The session (for tools that act on it, like `set_state`).
    pub session: &'a Session,
    /// Where to work.
    pub env: &'a ToolEnv,
    /// Set when the person pressed Ctrl-C: long tools stop.
    pub interrupt: &'a Interrupt,
}

impl ToolCall<'_> {
    /// A string argument.
    pub fn str(&self, name: &str) -> Option<&str> {
        self.arguments.get(name).and_then(Value::as_str)
    }
    /// An integer argument.
    pub fn int(&self, name: &str) -> Option<i64> {
        self.arguments
            .get(name)
            .and_then(|v| v.as_i64().or_else(|| v.as_f64().map(|f| f as i64)))
    }
    /// A boolean argument.
    pub fn bool(&self, name: &str) -> Option<bool> {
        self.arguments.get(name).and_then(Value::as_bool)
    }
}

/// A tool the model can call.
pub trait Tool: Send + Sync {
    /// Its name.
    fn name(&self) -> &str;
    /// What it does, for the model.
    fn description(&self) -> &str;
    /// The JSON schema of its arguments.
    fn parameters(&self) -> Value;
    /// How it affects the world.
    fn effect(&self) -> EffectClass;
    /// Runs it. Failures are error outputs, not panics.
    fn run(&self, call: &ToolCall<'_>) -> ToolOutput;
    /// What a call may change in the working directory, so the agent can
    /// snapshot it before and after (`None`: nothing there).
    fn touches(&self, _arguments: &Value, _env: &ToolEnv) -> Option<Touches> {
        None
    }
    /// A one-line description of a call, for prompts (`bash: rm -rf build`).
    fn summary(&self, arguments: &Value) -> String {
        format!(
            "{}: {}",
            self.name(),
            cairn_view::term::excerpt(&arguments.to_string(), 100)
        )
    }
}

/// The tools of an agent.
#[derive(Clone, Default)]
pub struct Registry {
    tools: Vec<Arc<dyn Tool>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.tools.iter().map(|t| t.name().to_owned()))
            .finish()
    }
}

impl Registry {
    /// No tools.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// The standard tools: `read_file`, `list_dir`, `grep`, `write_file`,
    /// `edit_file`, `bash`, `set_state`.
    pub fn standard() -> Registry {
        Registry::new()
            .with(fs::ReadFile)
            .with(fs::ListDir)
            .with(fs::Grep)
            .with(fs::WriteFile)
            .with(fs::EditFile)
            .with(bash::Bash)
            .with(state::SetState)
    }

    /// Adds a tool (replacing one of the same name).
    #[must_use]
    pub fn with(mut self, tool: impl Tool + 'static) -> Registry {
        self.add(Arc::new(tool));
        self
    }

    /// Adds a tool (replacing one of the same name).
    pub fn add(&mut self, tool: Arc<dyn Tool>) {
        self.tools.retain(|t| t.name() != tool.name());
        self.tools.push(tool);
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.iter().find(|t| t.name() == name)
    }

    /// The tools' names.
    pub fn names(&self) -> Vec<&str> {
        self.tools.iter().map(|t| t.name()).collect()
    }

    /// What the model is told.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .map(|t| ToolSpec {
                name: t.name().to_owned(),
                description: t.description().to_owned(),
                parameters: t.parameters(),
            })
            .collect()
    }

    /// The tool for a call, once its arguments are valid.
    ///
    /// # Errors
    ///
    /// A message for the model: unknown tool, or what is wrong with the arguments.
    pub fn check(&self, name: &str, arguments: &Value) -> Result<&Arc<dyn Tool>, String> {
        let tool = self.get(name).ok_or_else(|| {
            format!(
                "There is no tool named {name:?}. Available tools: {}.",
                self.names().join(", ")
            )
        })?;
        schema::validate(&tool.parameters(), arguments)
            .map_err(|e| format!("Invalid arguments for {name}: {e}. The call was not run; fix the arguments and call again."))?;
        Ok(tool)
    }
}

/// Stores `bytes` in the blob store in `dir` (content-addressed, durable
/// when this returns) and returns its reference.
///
/// # Errors
///
/// When the blob cannot be written.
pub fn store_blob(dir: &Path, bytes: &[u8], media_type: &str) -> Result<Block, BlobError> {
    let r = BlobStore::new(dir).put(bytes)?;
    Ok(blob_block(&r, media_type))
}

fn blob_block(r: &BlobRef, media_type: &str) -> Block {
    Block::Blob {
        uri: r.uri(),
        media_type: Some(media_type.to_owned()),
        size: Some(r.size),
        sha256: Some(r.sha256.clone()),
    }
}

/// Text output, capped: when longer than the cap, the head and tail with a
/// note, and the whole as a blob.
pub fn capped_text(env: &ToolEnv, text: &str) -> Vec<Block> {
    if text.len() <= env.output_cap {
        return vec![Block::Text {
            text: text.to_owned(),
        }];
    }
    let blob = store_blob(&env.blob_dir, text.as_bytes(), "text/plain; charset=utf-8");
    with_blob(
        head_tail(text.as_bytes(), env.output_cap, text.len() as u64),
        blob.ok(),
    )
}

/// The output held in file `path`, capped as [`capped_text`]; a large file
/// is streamed into the blob store rather than read into memory.
///
/// # Errors
///
/// I/O errors reading the file.
pub fn capped_file(env: &ToolEnv, path: &Path) -> std::io::Result<Vec<Block>> {
    let mut f = File::open(path)?;
    let size = f.metadata()?.len();
    if size <= env.output_cap as u64 {
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes)?;
        return Ok(vec![Block::Text {
            text: String::from_utf8_lossy(&bytes).into_owned(),
        }]);
    }
    let half = (env.output_cap / 2) as u64;
    let mut head = vec![0u8; half as usize];
    f.read_exact(&mut head)?;
    f.seek(SeekFrom::Start(size - half))?;
    let mut tail = Vec::new();
    f.read_to_end(&mut tail)?;
    let blob = BlobStore::new(&env.blob_dir)
        .put_file(path)
        .map_err(|e| std::io::Error::other(cairn::with_causes(&e)))?;
    let text = format!(
        "{}\n… [{} bytes omitted: the full output ({size} bytes) is kept in the blob below] …\n{}",
        String::from_utf8_lossy(&head),
        size - 2 * half,
        String::from_utf8_lossy(&tail)
    );
    Ok(with_blob(
        text,
        Some(blob_block(&blob, "text/plain; charset=utf-8")),
    ))
}

fn head_tail(bytes: &[u8], cap: usize, size: u64) -> String {
    let half = cap / 2;
    let head = String::from_utf8_lossy(&bytes[..half.min(bytes.len())]);
    let tail = String::from_utf8_lossy(&bytes[bytes.len().saturating_sub(half)..]);
    format!(
        "{head}\n… [{} bytes omitted: the full output ({size} bytes) is kept in the blob below] …\n{tail}",
        bytes.len().saturating_sub(2 * half)
    )
}

fn with_blob(text: String, blob: Option<Block>) -> Vec<Block> {
    let mut out = vec![Block::Text { text }];
    out.extend(blob);
    out
}
