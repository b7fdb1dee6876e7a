//! The storyboard agent of `cairn demo`, shared by the demo and the child
//! processes it kills: its system prompt, its configuration and its tools
//! (`set_state`, the paid `render_panel`, `bash`, and `delegate`).

use std::path::Path;
use std::sync::Arc;

use crate::agent::{AgentConfig, OnUnknown};
use crate::compaction::CompactionPolicy;
use crate::delegate::{Delegate, Make, SharedAfterToolEffect, Subagents};
use crate::observer::Observer;
use crate::prompt::Batch;
use crate::tools::render::{Ledger, RenderPanel};
use crate::tools::{Registry, ToolEnv, bash::Bash, state::SetState};

/// The storyboard agent's system prompt.
pub const SYSTEM_PROMPT: &str = "You draw a comic storyboard panel by panel. Keep the hero's state (buff, skill) in the app state with set_state, and render each panel with render_panel.";

/// How the storyboard agent runs, here and in its child processes: the
/// storyboard prompt, side effects approved, unknown outcomes marked, no
/// compaction.
pub(crate) fn config() -> AgentConfig {
    AgentConfig {
        system_prompt: Some(SYSTEM_PROMPT.to_owned()),
        auto_approve: true,
        on_unknown: OnUnknown::Mark,
        compaction: CompactionPolicy {
            budget_tokens: None,
            keep_recent_tokens: 0,
        },
        ..AgentConfig::default()
    }
}

/// The storyboard's tools: `set_state`, `render_panel` (when a ledger is
/// given, 10 credits a panel) and `bash`.
pub fn tools(ledger: Option<&Path>, workdir: &Path) -> Registry {
    let mut r = Registry::new().with(SetState);
    if let Some(l) = ledger {
        r = r.with(RenderPanel::new(Ledger::at(l), 10, workdir.join("panels")));
    }
    r.with(Bash)
}

/// The storyboard's tools and `delegate`, whose subagents have the
/// storyboard's tools, report to `observer` and share the crash point.
pub(crate) fn delegating(
    tools: Registry,
    store: &cairn::Store,
    provider: &Arc<dyn crate::provider::Provider>,
    env: &ToolEnv,
    observer: Make<Box<dyn Observer>>,
    after_tool_effect: Option<SharedAfterToolEffect>,
) -> Registry {
    let sub = Subagents {
        store: store.clone(),
        provider: Arc::clone(provider),
        tools: tools.clone(),
        env: env.clone(),
        config: AgentConfig {
            system_prompt: Some(crate::delegate::SUBAGENT_PROMPT.to_owned()),
            ..config()
        },
        max_depth: crate::delegate::DEFAULT_MAX_DEPTH,
        observer,
        prompter: Arc::new(|| Box::new(Batch)),
        after_tool_effect,
    };
    tools.with(Delegate::new(sub))
}
