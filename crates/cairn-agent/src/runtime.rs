//! What the agent loop runs with: [`Runtime`] (provider, tools, observer,
//! prompter, interrupt flag), its [`AgentConfig`] and the resume policies
//! ([`OnUnknown`], [`OnRunning`]), and the one retry rule of every model
//! request (`backoff`). It sits below the loop ([`crate::agent`]), resume
//! ([`crate::recovery`]) and compaction, which all take a `Runtime`, so
//! none of them imports another to reach it.

use std::sync::Arc;

use crate::interrupt::Interrupt;
use crate::observer::{Event, Observer};
use crate::prompt::Prompter;
use crate::provider::retry::RetryPolicy;
use crate::provider::{Provider, ProviderError};
use crate::tools::{Registry, ToolEnv};

/// What to do, on resume, with a `SideEffect` call that may or may not have run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OnUnknown {
    /// Ask the person (without a terminal: mark).
    #[default]
    Ask,
    /// Record the outcome as unknown (`TOOL_OUTCOME_UNKNOWN`).
    Mark,
    /// Run it again.
    Rerun,
    /// Stop with an error, leaving the session as it is.
    Fail,
}

/// What to do, on resume, with a tool process of an interrupted call that
/// still runs ([`crate::fence`]): a re-run never starts beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OnRunning {
    /// Wait for it to end (stopping it at its own timeout); when it wrote
    /// its exit status, its output is the call's result.
    #[default]
    Wait,
    /// Stop its process group (SIGTERM, then SIGKILL after a grace period);
    /// the call is then decided as any call of unknown outcome.
    Stop,
}

impl OnRunning {
    /// The flag's value, for the records (`wait`, `stop`).
    pub fn name(self) -> &'static str {
        match self {
            OnRunning::Wait => "wait",
            OnRunning::Stop => "stop",
        }
    }
}

/// How the loop behaves.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The system prompt.
    pub system_prompt: Option<String>,
    /// Model calls per operation before it stops (`max_steps`).
    pub max_steps: u32,
    /// Run side-effect tools without asking.
    pub auto_approve: bool,
    /// Side effects of unknown outcome, on resume.
    pub on_unknown: OnUnknown,
    /// Tool processes of interrupted calls still running, on resume.
    pub on_running: OnRunning,
    /// Retries of transient provider errors.
    pub retry: RetryPolicy,
    /// When and how to compact.
    pub compaction: CompactionPolicy,
    /// Inject session memory after the system prompt.
    pub memory: bool,
    /// Record each exchange with the model server (`--trace`).
    pub trace: Option<crate::trace::TraceConfig>,
}

impl Default for AgentConfig {
    fn default() -> AgentConfig {
        AgentConfig {
            system_prompt: Some(DEFAULT_SYSTEM_PROMPT.to_owned()),
            max_steps: 50,
            auto_approve: false,
            on_unknown: OnUnknown::Ask,
            on_running: OnRunning::Wait,
            retry: RetryPolicy::default(),
            compaction: CompactionPolicy::default(),
            memory: true,
            trace: None,
        }
    }
}

/// The default system prompt.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are a careful software agent working in the person's project directory. \
Use the tools to read, search, edit files and run commands; prefer reading before changing. \
Tools that change things may need the person's approval. Keep answers short and say what you did.";

/// Called after a tool's effect and before its result is recorded: the
/// crash point of the demo and the crash tests. Receives the tool's name and the call id.
pub type AfterToolEffect = Box<dyn Fn(&str, &str) + Send + Sync>;

/// Everything the loop uses besides the session.
pub struct Runtime {
    /// Where replies come from.
    pub provider: Arc<dyn Provider>,
    /// The tools.
    pub tools: Registry,
    /// Where tools work.
    pub env: ToolEnv,
    /// How the loop behaves.
    pub config: AgentConfig,
    /// Who hears about it.
    pub observer: Box<dyn Observer>,
    /// Who is asked.
    pub prompter: Box<dyn Prompter>,
    /// Ctrl-C.
    pub interrupt: Interrupt,
    /// The crash point for tests and the demo.
    pub after_tool_effect: Option<AfterToolEffect>,
}

/// What follows a failed model request.
pub(crate) enum Backoff {
    /// The error is transient and the wait is over: ask again.
    Retry,
    /// The wait was interrupted.
    Interrupted,
    /// Not retried (not transient, or the retries are used up).
    GiveUp,
}

/// The one retry rule of every model request (replies and summaries): when
/// the policy retries `error` after `retry` retries, announce the retry and
/// wait its delay, awake to interrupts.
pub(crate) fn backoff(rt: &mut Runtime, retry: &mut u32, error: &ProviderError) -> Backoff {
    if !rt.config.retry.should_retry(*retry, error) {
        return Backoff::GiveUp;
    }
    let delay = rt.config.retry.delay(*retry, error);
    *retry += 1;
    rt.observer.event(&Event::Retry {
        error,
        delay,
        retry: *retry,
    });
    if rt.interrupt.sleep(delay) {
        Backoff::Interrupted
    } else {
        Backoff::Retry
    }
}

/// When and how much to compact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionPolicy {
    /// Compact when the view's estimated tokens pass this (`None`: never).
    pub budget_tokens: Option<usize>,
    /// Keep at most about this many tokens of recent context.
    pub keep_recent_tokens: usize,
}

impl Default for CompactionPolicy {
    /// Compact past 100 000 tokens, keeping about 20 000.
    fn default() -> CompactionPolicy {
        CompactionPolicy {
            budget_tokens: Some(100_000),
            keep_recent_tokens: 20_000,
        }
    }
}
