//! The hidden child-process entry: the demo (and crash tests) run one agent
//! step in a child process so it can be killed with SIGKILL at a chosen
//! moment. The parent re-executes its own executable with the environment
//! variable [`CHILD_ENV`] holding a JSON [`ChildSpec`]; the executable's
//! `main` must call [`run_if_requested`] first thing, with the way it opens
//! a store from its location, and exit with its code when it returns `Some`.
//!
//! The child runs the request with the scripted provider, approving
//! everything; when a tool named in `crash_after` has done its work (and
//! before its result is recorded), it prints [`CRASH_MARKER`] on stdout and
//! waits to be killed.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use cairn::Access;
use serde::{Deserialize, Serialize};

use crate::agent::{Agent, Runtime};
use crate::delegate::{Make, SharedAfterToolEffect};
use crate::interrupt::Interrupt;
use crate::observer::{Acks, Observer, Silent};
use crate::prompt::Batch;
use crate::provider::scripted::ScriptedProvider;
use crate::store::{OpenedStore, Opener};
use crate::storyboard::{config, delegating, tools};
use crate::tools::ToolEnv;

/// The environment variable that makes an executable run a [`ChildSpec`].
pub const CHILD_ENV: &str = "CAIRN_AGENT_CHILD";

/// The line a child prints at its crash point.
pub const CRASH_MARKER: &str = "@crash-point";

/// One agent step to run in a child process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildSpec {
    /// The store's location, as the command line names it.
    pub home: PathBuf,
    /// The session (full id).
    pub session: String,
    /// The request.
    pub prompt: String,
    /// The script of the scripted provider.
    pub script: PathBuf,
    /// Where the tools work.
    pub workdir: PathBuf,
    /// The storyboard ledger (`render_panel` is offered when set).
    pub ledger: Option<PathBuf>,
    /// Stop for good after this tool's effect, before its result is recorded.
    pub crash_after: Option<String>,
    /// Print `@ack` lines.
    pub acks: bool,
}

/// Runs the child step when [`CHILD_ENV`] is set, in the store `open`
/// opens at the spec's location: call first thing in `main`.
pub fn run_if_requested(open: Opener) -> Option<ExitCode> {
    let spec = std::env::var(CHILD_ENV).ok()?;
    Some(match run_spec(&spec, open) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cairn-agent child: {e:#}");
            ExitCode::from(2)
        }
    })
}

fn run_spec(text: &str, open: Opener) -> Result<()> {
    let spec: ChildSpec = serde_json::from_str(text).context("the child spec is not valid JSON")?;
    let OpenedStore { store, blobs, .. } = open(&spec.home)?;
    let id = store.resolve(&spec.session)?;
    let session = store.open(&id, Access::Write)?;
    let provider: Arc<dyn crate::provider::Provider> =
        Arc::new(ScriptedProvider::load(&spec.script)?);
    let crash_after = spec.crash_after.clone();
    let acks = spec.acks;
    let observer: Make<Box<dyn Observer>> = Arc::new(move || -> Box<dyn Observer> {
        if acks {
            Box::new(Acks)
        } else {
            Box::new(Silent)
        }
    });
    let crash: SharedAfterToolEffect = Arc::new(move |tool: &str, call_id: &str| {
        if crash_after.as_deref() == Some(tool) {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{CRASH_MARKER} {tool} {call_id}");
            let _ = out.flush();
            drop(out);
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
    });
    let env = ToolEnv::new(&spec.workdir, blobs);
    let tools = delegating(
        tools(spec.ledger.as_deref(), &spec.workdir),
        &store,
        &provider,
        &env,
        Arc::clone(&observer),
        Some(Arc::clone(&crash)),
    );
    let rt = Runtime {
        provider,
        tools,
        env,
        config: config(),
        observer: observer(),
        prompter: Box::new(Batch),
        interrupt: Interrupt::new(),
        after_tool_effect: Some(Box::new(move |tool, call_id| crash(tool, call_id))),
    };
    let mut agent = Agent::new(store, session, rt)?;
    agent.prompt(&spec.prompt)?;
    Ok(())
}
