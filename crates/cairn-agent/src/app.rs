//! `cairn agent`: options, opening or resuming a session, choosing the
//! provider, and running a prompt or the REPL. [`AgentArgs`] is the
//! command line (a `clap::Args` the CLI flattens); [`AgentOptions`] is the
//! same as a plain struct; [`run`] does the work.
//!
//! What a resume must reproduce is recorded in the session as `settings`
//! (keys [`SETTING_WORKDIR`], [`SETTING_TOOLS`], `provider`, `model`,
//! `base_url` or `script`), and the header's `cwd` is the working directory
//! at creation: a resumed session runs its tools where they first ran and
//! talks to the same provider, unless a flag says otherwise, and a change is
//! recorded.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use cairn::{Access, EntryBody, NewSession, Outcome, Session, Settings, Store};
use serde_json::{Map, Value};

use crate::agent::{Agent, AgentConfig, OnRunning, OnUnknown, Runtime};
use crate::compaction::CompactionPolicy;
use crate::delegate::{Delegate, SUBAGENT_PROMPT, Subagents};
use crate::interrupt::Interrupt;
use crate::observer::{Acks, Event, Observer, Printer, Tee};
use crate::prompt::{Batch, Console, Prompter};
use crate::provider::Provider;
use crate::provider::openai::{DEFAULT_BASE_URL, OpenAiConfig, OpenAiProvider};
use crate::provider::scripted::ScriptedProvider;
use crate::repl::TreePrinter;
use crate::store::OpenedStore;
use crate::tools::{Registry, ToolEnv};
use cairn_view::term::clean_line;

/// Set to `1` to print `@ack` lines for every acknowledged record (crash tests).
pub const ACKS_ENV: &str = "CAIRN_AGENT_ACKS";

/// The default model when neither `--model`, `CAIRN_MODEL` nor the session says.
pub const DEFAULT_MODEL: &str = "gpt-4o-mini";

/// The settings key of the tools' working directory (an absolute path).
pub const SETTING_WORKDIR: &str = "workdir";

/// The settings key of the tool set offered to the model (an array of names).
pub const SETTING_TOOLS: &str = "tools";

/// The command line of `cairn agent`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AgentArgs {
    /// Resume this session (id or unique prefix): act on its recovery verdict first.
    #[arg(long, value_name = "SESSION", conflicts_with = "continue_latest")]
    pub resume: Option<String>,
    /// Resume the most recently updated session (not a subagent's: those
    /// resume through their parent).
    #[arg(long = "continue", short = 'c')]
    pub continue_latest: bool,
    /// OpenAI-compatible API base URL (default `https://api.openai.com/v1`;
    /// Ollama: `http://localhost:11434/v1`). The key comes from CAIRN_API_KEY or OPENAI_API_KEY.
    #[arg(long, env = "CAIRN_BASE_URL", value_name = "URL")]
    pub base_url: Option<String>,
    /// Model name as the server knows it.
    #[arg(long, env = "CAIRN_MODEL", value_name = "MODEL")]
    pub model: Option<String>,
    /// Run side-effect tools (write_file, edit_file, bash) without asking.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Replay model replies from a JSON script instead of calling a server (offline).
    #[arg(long, value_name = "FILE")]
    pub script: Option<PathBuf>,
    /// Run this one request and exit (no REPL).
    #[arg(long, short = 'p', value_name = "TEXT")]
    pub prompt: Option<String>,
    /// On resume, what to do with a side effect that may or may not have run.
    #[arg(long, value_enum, value_name = "POLICY", default_value = "ask")]
    pub on_unknown: OnUnknown,
    /// On resume, what to do with a tool process of an interrupted call that
    /// still runs: wait for it to end, or stop it (a re-run never starts beside it).
    #[arg(long, value_enum, value_name = "POLICY", default_value = "wait")]
    pub on_running: OnRunning,
    /// Model calls per request before the agent stops.
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub max_steps: u32,
    /// Compact the context when it passes this many (estimated) tokens; 0 turns compaction off.
    #[arg(long, value_name = "TOKENS", default_value_t = 100_000)]
    pub compact_at: usize,
    /// Longest a bash command may run, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub tool_timeout: u64,
    /// Longest the model server may stay silent (before the reply starts, or between pieces), in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub read_timeout: u64,
    /// Directory the tools work in (default: a resumed session's own, else the
    /// current directory). Recorded in the session.
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<PathBuf>,
    /// A file holding the system prompt to use instead of the default.
    #[arg(long, value_name = "FILE")]
    pub system_prompt: Option<PathBuf>,
    /// Do not inject session memory into the model's view.
    #[arg(long)]
    pub no_memory: bool,
    /// Record each exchange with the model server (request and response
    /// bodies, headers, timings, retries) in the session as log-only trace
    /// records, which never enter the context; keys and credential headers
    /// are redacted. `cairn log --trace` shows them.
    #[arg(long)]
    pub trace: bool,
    /// With --trace, bytes of a body kept in a trace record; a longer body is
    /// cut there and kept whole as a blob.
    #[arg(long, value_name = "BYTES", default_value_t = crate::trace::DEFAULT_BODY_LIMIT, requires = "trace")]
    pub trace_body_limit: usize,
    /// How deep subagents (the `delegate` tool) may nest; 0 offers no `delegate` tool.
    #[arg(long, value_name = "N", default_value_t = crate::delegate::DEFAULT_MAX_DEPTH)]
    pub max_depth: u32,
}

impl AgentArgs {
    /// The options, with sessions in `store`.
    pub fn into_options(self, store: OpenedStore) -> AgentOptions {
        AgentOptions {
            store,
            resume: self.resume,
            continue_latest: self.continue_latest,
            base_url: self.base_url,
            model: self.model,
            api_key: None,
            yes: self.yes,
            script: self.script,
            prompt: self.prompt,
            on_unknown: self.on_unknown,
            on_running: self.on_running,
            max_steps: self.max_steps,
            compact_at: (self.compact_at > 0).then_some(self.compact_at),
            tool_timeout: Duration::from_secs(self.tool_timeout.max(1)),
            read_timeout: Duration::from_secs(self.read_timeout.max(1)),
            workdir: self.workdir,
            system_prompt: self.system_prompt,
            memory: !self.no_memory,
            max_depth: self.max_depth,
            trace: self.trace.then_some(crate::trace::TraceConfig {
                body_limit: self.trace_body_limit,
            }),
            tree_printer: None,
        }
    }
}

/// Everything `cairn agent` needs.
#[derive(Clone)]
pub struct AgentOptions {
    /// The store, opened by the caller, and the directories beside it
    /// ([`crate::store`]).
    pub store: OpenedStore,
    /// A session to resume.
    pub resume: Option<String>,
    /// Resume the latest session.
    pub continue_latest: bool,
    /// The API base URL.
    pub base_url: Option<String>,
    /// The model.
    pub model: Option<String>,
    /// The API key (`None`: from the environment).
    pub api_key: Option<String>,
    /// Approve side effects without asking.
    pub yes: bool,
    /// A script for the scripted provider.
    pub script: Option<PathBuf>,
    /// One request to run, then exit.
    pub prompt: Option<String>,
    /// Side effects of unknown outcome, on resume.
    pub on_unknown: OnUnknown,
    /// Tool processes still running, on resume.
    pub on_running: OnRunning,
    /// Step limit.
    pub max_steps: u32,
    /// Compaction budget (`None`: off).
    pub compact_at: Option<usize>,
    /// Bash timeout.
    pub tool_timeout: Duration,
    /// The model server's longest silence.
    pub read_timeout: Duration,
    /// Working directory of the tools.
    pub workdir: Option<PathBuf>,
    /// A system prompt file.
    pub system_prompt: Option<PathBuf>,
    /// Inject session memory.
    pub memory: bool,
    /// How deep subagents may nest (0: no `delegate` tool).
    pub max_depth: u32,
    /// Trace the exchanges with the model server (`None`: off).
    pub trace: Option<crate::trace::TraceConfig>,
    /// Draws `/tree` (the built-in drawing when `None`).
    pub tree_printer: Option<TreePrinter>,
}

impl std::fmt::Debug for AgentOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentOptions")
            .field("store", &self.store.location)
            .field("resume", &self.resume)
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("script", &self.script)
            .finish_non_exhaustive()
    }
}

impl AgentOptions {
    /// Defaults (as the command line's) with sessions in `store`.
    pub fn new(store: OpenedStore) -> AgentOptions {
        AgentArgs {
            on_unknown: OnUnknown::Ask,
            max_steps: 50,
            compact_at: 100_000,
            tool_timeout: 120,
            max_depth: crate::delegate::DEFAULT_MAX_DEPTH,
            trace_body_limit: crate::trace::DEFAULT_BODY_LIMIT,
            ..AgentArgs::default()
        }
        .into_options(store)
    }
}

/// Runs `cairn agent`: opens (or resumes) the session, acts on its
/// recovery verdict, then runs `--prompt` or the REPL.
///
/// # Errors
///
/// Store, session and provider set-up errors; a failed one-shot request;
/// `--on-unknown fail` with a side effect of unknown outcome; [`Terminated`](crate::interrupt::Terminated)
/// after SIGTERM or SIGHUP (what ran was interrupted and recorded first).
pub fn run(opts: AgentOptions) -> Result<()> {
    let store = opts.store.store.clone();
    let files = &opts.store.files;
    let existing = open_session(&store, &opts)?;
    // The provider first, so that a bad set-up creates no empty session.
    let (provider, mut settings) = provider_for(&opts, existing.as_ref())?;
    let workdir = workdir_for(&opts, existing.as_ref())?;
    let interactive = std::io::stdin().is_terminal();
    let mut env = ToolEnv::new(workdir.clone(), &opts.store.blobs);
    env.timeout = opts.tool_timeout;
    let system_prompt = match &opts.system_prompt {
        Some(p) => std::fs::read_to_string(p)
            .with_context(|| format!("reading the system prompt {}", p.display()))?,
        None => crate::agent::DEFAULT_SYSTEM_PROMPT.to_owned(),
    };
    let config = AgentConfig {
        system_prompt: Some(system_prompt),
        max_steps: opts.max_steps,
        auto_approve: opts.yes,
        on_unknown: opts.on_unknown,
        on_running: opts.on_running,
        compaction: CompactionPolicy {
            budget_tokens: opts.compact_at,
            keep_recent_tokens: opts.compact_at.map_or(20_000, |b| (b / 5).max(1)),
        },
        memory: opts.memory,
        trace: opts.trace,
        ..AgentConfig::default()
    };
    let acks = std::env::var(ACKS_ENV).is_ok_and(|v| v == "1");
    let mut tools = Registry::standard();
    if opts.max_depth > 0 {
        tools.add(Arc::new(Delegate::new(Subagents {
            store: store.clone(),
            provider: Arc::clone(&provider),
            tools: Registry::standard(),
            env: env.clone(),
            config: AgentConfig {
                system_prompt: Some(SUBAGENT_PROMPT.to_owned()),
                ..config.clone()
            },
            max_depth: opts.max_depth,
            observer: Arc::new(move || {
                let mut o: Vec<Box<dyn Observer>> =
                    vec![Box::new(Printer::new(Box::new(std::io::stdout()), "  │ "))];
                if acks {
                    o.push(Box::new(Acks));
                }
                Box::new(Tee(o))
            }),
            prompter: Arc::new(move || -> Box<dyn Prompter> {
                match interactive.then(|| Console::new(None)) {
                    Some(Ok(c)) => Box::new(c),
                    Some(Err(_)) | None => Box::new(Batch),
                }
            }),
            after_tool_effect: None,
        })));
    }
    settings.insert(
        SETTING_WORKDIR.into(),
        Value::from(workdir.display().to_string()),
    );
    if let Some(note) = existing
        .as_ref()
        .and_then(|s| tools_changed(s, &tools.names()))
    {
        println!("{note}");
    }
    settings.insert(SETTING_TOOLS.into(), Value::from(tools.names()));
    let (session, created) = match existing {
        Some(s) => (s, false),
        None => (
            store.create(NewSession {
                cwd: Some(workdir.display().to_string()),
                ..NewSession::default()
            })?,
            true,
        ),
    };
    // Settings wait while an operation is open (recovery closes it first).
    let record_settings = |session: &Session| -> Result<()> {
        if session.resume_operation().is_none() && changed(session, &settings) {
            session.append(EntryBody::Settings(Settings {
                values: settings.clone(),
            }))?;
        }
        Ok(())
    };
    record_settings(&session)?;
    let prompter: Box<dyn Prompter> = if interactive {
        Box::new(
            Console::new(Some(files.join("agent_history"))).context("setting up the terminal")?,
        )
    } else {
        Box::new(Batch)
    };
    let interrupt = Interrupt::new();
    // Handlers may already be installed in this process; then they own the signals.
    let _ = interrupt.install_signals();
    let mut observers: Vec<Box<dyn Observer>> = vec![Box::new(Printer::stdout())];
    if acks {
        observers.push(Box::new(Acks));
    }
    let rt = Runtime {
        provider: Arc::clone(&provider),
        tools,
        env,
        config,
        observer: Box::new(Tee(observers)),
        prompter,
        interrupt,
        after_tool_effect: None,
    };
    let mut agent = Agent::new(store, session, rt)?;
    let id = agent.session().id().clone();
    agent
        .runtime()
        .observer
        .event(&Event::Session { id: &id, created });
    let via = if provider.name() == "scripted" {
        "the scripted provider".to_owned()
    } else {
        provider.name().to_owned()
    };
    println!(
        "model {} via {via} · tools: {}",
        clean_line(provider.model()),
        agent.runtime().tools.names().join(", ")
    );
    agent.resume()?;
    agent.runtime().interrupt.check_terminated()?;
    agent.deliver_queued()?;
    agent.runtime().interrupt.check_terminated()?;
    record_settings(agent.session())?;
    if let Some(p) = &opts.prompt {
        let end = agent.prompt(p)?;
        agent.runtime().interrupt.check_terminated()?;
        println!("(resume this session with: cairn agent --resume {id})");
        if end.outcome == Outcome::Failed {
            bail!("the request failed: {}", end.error.unwrap_or_default());
        }
        return Ok(());
    }
    crate::repl::run(&mut agent, opts.tree_printer.as_ref())?;
    println!(
        "(resume this session with: cairn agent --resume {})",
        agent.session().id()
    );
    Ok(())
}

fn open_session(store: &Store, opts: &AgentOptions) -> Result<Option<Session>> {
    let id = if let Some(q) = &opts.resume {
        store.resolve(q)?
    } else if opts.continue_latest {
        crate::store::newest_top_level(store)?
    } else {
        return Ok(None);
    };
    let s = store
        .open(&id, Access::Write)
        .with_context(|| format!("opening session {id} to resume it"))?;
    if let Some(t) = &s.open_report().torn {
        let saved = t
            .saved_to
            .as_deref()
            .map(|p| format!("; the bytes were saved to {p}"))
            .unwrap_or_default();
        println!(
            "note: the last record was incomplete ({}: {} bytes at offset {}) and was cut off: the process died while writing it{saved}",
            t.problem, t.len, t.offset
        );
    }
    Ok(Some(s))
}

/// The provider for these options, falling back on the session's recorded settings.
fn provider_for(
    opts: &AgentOptions,
    session: Option<&Session>,
) -> Result<(Arc<dyn Provider>, Map<String, Value>)> {
    let ctx = session.map(Session::context);
    let empty = Map::new();
    let recorded = ctx.as_ref().map_or(&empty, |c| c.settings());
    let recorded_str = |k: &str| recorded.get(k).and_then(Value::as_str).map(str::to_owned);
    let mut settings = Map::new();
    let fresh_flags = opts.base_url.is_some() || opts.model.is_some();
    let script = match &opts.script {
        Some(p) => Some(
            std::path::absolute(p)
                .with_context(|| format!("finding the script {}", p.display()))?,
        ),
        None => (!fresh_flags && recorded_str("provider").as_deref() == Some("scripted"))
            .then(|| recorded_str("script"))
            .flatten()
            .map(|p| {
                // Sessions of older versions recorded the path as typed:
                // relative to where the session was created.
                let header_cwd = session.and_then(|s| s.header().cwd.clone());
                match header_cwd {
                    Some(cwd) => Path::new(&cwd).join(p),
                    None => PathBuf::from(p),
                }
            }),
    };
    if let Some(path) = script {
        let p = ScriptedProvider::load(&path)?;
        settings.insert("provider".into(), Value::from("scripted"));
        settings.insert("script".into(), Value::from(path.display().to_string()));
        settings.insert("model".into(), Value::from(p.model()));
        return Ok((Arc::new(p), settings));
    }
    let base_url = opts
        .base_url
        .clone()
        .or_else(|| recorded_str("base_url"))
        .unwrap_or_else(|| DEFAULT_BASE_URL.to_owned());
    let model = opts
        .model
        .clone()
        .or_else(|| recorded_str("model"))
        .unwrap_or_else(|| DEFAULT_MODEL.to_owned());
    let mut config = OpenAiConfig::new(base_url.clone(), model.clone());
    config.read_timeout = opts.read_timeout;
    if opts.api_key.is_some() {
        config.api_key = opts.api_key.clone();
    }
    if config.api_key.is_none() && base_url.contains("api.openai.com") {
        bail!(
            "no API key: set CAIRN_API_KEY or OPENAI_API_KEY, or point --base-url at a server that needs none (e.g. Ollama: http://localhost:11434/v1), or run offline with --script FILE"
        );
    }
    let p = OpenAiProvider::new(config)?;
    settings.insert("provider".into(), Value::from("openai-compatible"));
    settings.insert("base_url".into(), Value::from(base_url));
    settings.insert("model".into(), Value::from(model));
    Ok((Arc::new(p), settings))
}

/// The tools' working directory, absolute: `--workdir` (a change from the
/// session's is announced, and recorded by the caller), else the resumed
/// session's recorded one (its `workdir` setting, else its header's `cwd`),
/// else the current directory.
fn workdir_for(opts: &AgentOptions, session: Option<&Session>) -> Result<PathBuf> {
    let recorded = session.and_then(|s| {
        let ctx = s.context();
        ctx.settings()
            .get(SETTING_WORKDIR)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| s.header().cwd.clone())
            .map(PathBuf::from)
    });
    let dir = match (&opts.workdir, &recorded) {
        (Some(w), _) => {
            let w = std::path::absolute(w)
                .with_context(|| format!("finding the working directory {}", w.display()))?;
            if let Some(r) = recorded.as_ref().filter(|r| **r != w) {
                println!(
                    "note: the tools now work in {} (the session worked in {}); the change is recorded in the session",
                    clean_line(&w.display().to_string()),
                    clean_line(&r.display().to_string())
                );
            }
            w
        }
        (None, Some(r)) => {
            if !r.is_dir() {
                bail!(
                    "the session's working directory {} is gone: pass --workdir DIR to resume it in another directory (the change is recorded in the session)",
                    r.display()
                );
            }
            if std::env::current_dir().is_ok_and(|c| c != *r) {
                println!(
                    "note: the tools work in {}, where this session worked (--workdir DIR changes it)",
                    clean_line(&r.display().to_string())
                );
            }
            r.clone()
        }
        (None, None) => std::env::current_dir().context("finding the current directory")?,
    };
    if !dir.is_dir() {
        bail!(
            "the working directory {} is not a directory: create it, or pass --workdir DIR",
            dir.display()
        );
    }
    Ok(dir)
}

/// A note when the tools offered now differ from those the session recorded.
fn tools_changed(session: &Session, now: &[&str]) -> Option<String> {
    let ctx = session.context();
    let before: Vec<&str> = ctx
        .settings()
        .get(SETTING_TOOLS)?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let added: Vec<&str> = now
        .iter()
        .filter(|t| !before.contains(t))
        .copied()
        .collect();
    let gone: Vec<&str> = before
        .iter()
        .filter(|t| !now.contains(t))
        .copied()
        .collect();
    if added.is_empty() && gone.is_empty() {
        return None;
    }
    let list = |names: &[&str]| clean_line(&names.join(", "));
    Some(format!(
        "note: the tools differ from the session's (new: {}; no longer offered: {}); the new set is recorded",
        if added.is_empty() {
            "none".to_owned()
        } else {
            list(&added)
        },
        if gone.is_empty() {
            "none".to_owned()
        } else {
            list(&gone)
        },
    ))
}

fn changed(session: &Session, settings: &Map<String, Value>) -> bool {
    let ctx = session.context();
    settings
        .iter()
        .any(|(k, v)| ctx.settings().get(k) != Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        agent: AgentArgs,
    }

    #[test]
    fn the_command_line_is_well_formed_and_maps_to_options() {
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "cairn",
            "--continue",
            "--yes",
            "--on-unknown",
            "mark",
            "--compact-at",
            "0",
            "-p",
            "hi",
        ])
        .unwrap();
        let o = cli.agent.into_options(OpenedStore::dir("/h"));
        assert!(o.continue_latest && o.yes);
        assert_eq!(o.on_unknown, OnUnknown::Mark);
        assert_eq!(o.compact_at, None);
        assert_eq!(o.prompt.as_deref(), Some("hi"));
        assert_eq!(o.read_timeout, Duration::from_secs(300));
        assert!(Cli::try_parse_from(["cairn", "--resume", "x", "--continue"]).is_err());
        let d = AgentOptions::new(OpenedStore::dir("/h"));
        assert_eq!(
            (d.max_steps, d.compact_at, d.on_unknown),
            (50, Some(100_000), OnUnknown::Ask)
        );
    }
}
