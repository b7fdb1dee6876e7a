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
use serde_json::{Value, json};

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

/// The demo's script for the scripted provider: the storyboard model's
/// replies, turn by turn.
pub fn script() -> Value {
    json!({
        "model": "storyboard-model",
        "chunk_chars": 24,
        "turns": [
            {"match": "letterer", "replies": [
                {"text": "Asking a letterer, a subagent, for panel 3's speech balloon.",
                 "tool_calls": [
                    {"name": "delegate", "arguments": {"task": "Letter panel 3: add the hero's battle cry to balloons.txt.", "title": "letterer for panel 3"}}]},
                {"text": "Panel 3 has its balloon: the hero shouts \"HI-YAH!\"."}]},
            {"match": "letter panel 3", "replies": [
                {"text": "Writing the balloon.",
                 "tool_calls": [
                    {"name": "bash", "arguments": {"command": "echo 'panel 3: HI-YAH!' >> balloons.txt && echo lettered"}}]},
                {"text": "Panel 3 is lettered: the hero shouts \"HI-YAH!\" (in balloons.txt)."}]},
            {"match": "panel 1", "replies": [
                {"text": "The hero swallows the power-up candy. I will record the new state, then render panel 1.",
                 "tool_calls": [
                    {"name": "set_state", "arguments": {"patch": {"buff": "power-up", "skill": "ten-palm strike"}}},
                    {"name": "render_panel", "arguments": {"panel": 1, "scene": "At the tournament ring the hero swallows a glowing power-up candy; the rival glares."}}]},
                {"text": "Panel 1 is done: the hero glows with the power-up, ten-palm strike at the ready."}]},
            {"match": "panel 2", "replies": [
                {"text": "A comic side plot: the teacher mixes up the pills. Updating the state, then rendering panel 2.",
                 "tool_calls": [
                    {"name": "set_state", "arguments": {"patch": {"buff": "exhausted", "skill": null}}},
                    {"name": "render_panel", "arguments": {"panel": 2, "scene": "The teacher hands over the wrong pill; the hero doubles over in a cold sweat."}}]},
                {"text": "Panel 2 is done: the hero is exhausted and has no skill left."}]},
            {"match": "print shop", "replies": [
                {"text": "Sending panel 3 to the print shop.",
                 "tool_calls": [
                    {"name": "bash", "arguments": {"command": "echo panel-3.svg >> print-queue.txt && echo queued panel-3.svg"}}]},
                {"text": "I cannot tell whether the print job went out, so I will not send it again blindly: please check print-queue.txt first."}]},
            {"match": "panel 3", "replies": [
                {"text": "The hero is at full power: rendering the ten-palm strike.",
                 "tool_calls": [
                    {"name": "render_panel", "arguments": {"panel": 3, "scene": "Powered up, the hero lands the ten-palm strike and the rival flies out of the ring."}}]},
                {"text": "Panel 3 is rendered: the rival flies out of the ring."}]},
            {"replies": [{"text": "That is not part of the storyboard script."}]}
        ]
    })
}
