//! `delegate`: hands a task to a subagent — a child agent working in a
//! child session of its own (its own operation journal, its own tools),
//! linked to the call that spawned it ([`cairn::Store::spawn_child`]). The
//! call's result names the child session (a `cairn:session/<id>` blob) and
//! carries the child's final answer.
//!
//! The tool is `Idempotent`: a call finds the child its call id already
//! spawned, if any, and continues it instead of starting another. That is
//! how recovery goes from the outside in: resuming the parent re-runs an
//! indeterminate `delegate` call through cairn's one recovery loop, the
//! re-run resumes the child (its own verdict resolved first, by the same
//! loop, then its open operation carried on) and only then answers the
//! parent's call — with the child's answer, or `TOOL_OUTCOME_UNKNOWN` when
//! the outcome of one of the child's own calls is unknown. A child that
//! finished is never run again: its recorded answer is the result.

use std::sync::Arc;

use cairn::TOOL_OUTCOME_UNKNOWN;
use cairn::{
    Access, Block, EffectClass, EntryBody, Outcome, Role, Session, Settings, Store, ToolOutput,
    Verdict,
};
use serde_json::{Value, json};

use crate::agent::{Agent, AgentConfig, Runtime};
use crate::interrupt::Interrupt;
use crate::observer::Observer;
use crate::prompt::Prompter;
use crate::provider::Provider;
use crate::tools::{Registry, Tool, ToolCall, ToolEnv};

/// How deep subagents may nest by default: a top-level agent's children
/// (depth 1) may delegate once more (depth 2).
pub const DEFAULT_MAX_DEPTH: u32 = 2;

/// The system prompt of a subagent.
pub const SUBAGENT_PROMPT: &str = "You are a subagent: another agent delegated one task to you. \
Do it with your tools, then answer with what you did and found, briefly: your answer is all the other agent sees.";

/// Builds a part of a child's runtime that cannot be shared (it is owned).
pub type Make<T> = Arc<dyn Fn() -> T + Send + Sync>;

/// The crash point of tests and the demo (tool name, call id), shared with
/// children; see [`crate::agent::AfterToolEffect`].
pub type SharedAfterToolEffect = Arc<dyn Fn(&str, &str) + Send + Sync>;

/// What subagents are made of, shared down the delegation tree.
#[derive(Clone)]
pub struct Subagents {
    /// The store the child sessions are created in.
    pub store: Store,
    /// Where the children's replies come from.
    pub provider: Arc<dyn Provider>,
    /// The children's tools (`delegate` is added to them, the depth limit
    /// permitting).
    pub tools: Registry,
    /// Where the children's tools work.
    pub env: ToolEnv,
    /// How the children's loops behave (the system prompt is
    /// [`SUBAGENT_PROMPT`] unless set otherwise).
    pub config: AgentConfig,
    /// The deepest delegation allowed.
    pub max_depth: u32,
    /// Who hears about a child's work.
    pub observer: Make<Box<dyn Observer>>,
    /// Who a child asks.
    pub prompter: Make<Box<dyn Prompter>>,
    /// The crash point of tests and the demo, passed on to children.
    pub after_tool_effect: Option<SharedAfterToolEffect>,
}

/// The `delegate` tool.
#[derive(Clone)]
pub struct Delegate {
    sub: Subagents,
}

impl Delegate {
    /// A `delegate` tool making children of `sub`.
    pub fn new(sub: Subagents) -> Delegate {
        Delegate { sub }
    }

    fn runtime(&self, interrupt: &Interrupt) -> Runtime {
        let sub = &self.sub;
        Runtime {
            provider: Arc::clone(&sub.provider),
            tools: sub.tools.clone().with(self.clone()),
            env: sub.env.clone(),
            config: sub.config.clone(),
            observer: (sub.observer)(),
            prompter: (sub.prompter)(),
            interrupt: interrupt.clone(),
            after_tool_effect: sub.after_tool_effect.as_ref().map(|f| {
                let f = Arc::clone(f);
                Box::new(move |tool: &str, call: &str| f(tool, call))
                    as crate::agent::AfterToolEffect
            }),
        }
    }

    /// The child `call` spawned earlier, if any; else a new one. `Err` is
    /// the result to give the model.
    fn child(&self, call: &ToolCall<'_>, task: &str) -> Result<(Session, bool), ToolOutput> {
        let store = &self.sub.store;
        let parent = call.session;
        let earlier = store
            .children(parent.id())
            .map_err(|e| {
                ToolOutput::error(format!(
                    "Not run: listing the subagent sessions failed: {}",
                    cairn::with_causes(&e)
                ))
            })?
            .into_iter()
            .find(|(_, origin)| origin.call_id == call.call_id);
        if let Some((summary, _)) = earlier {
            let child = store.open(&summary.id, Access::Write).map_err(|e| {
                ToolOutput::error(format!(
                    "The subagent session {} this call started cannot be opened: {}",
                    summary.id,
                    cairn::with_causes(&e)
                ))
            })?;
            return Ok((child, false));
        }
        let title = call
            .str("title")
            .map_or_else(|| cairn::excerpt(task, 60), str::to_owned);
        match store.spawn_child(parent, call.call_id, Some(title), self.sub.max_depth) {
            Ok(child) => {
                // The parent's settings (provider, model, script, working
                // directory), so `cairn agent --resume CHILD` talks to the
                // same model in the same place.
                let settings = parent.context().settings().clone();
                if !settings.is_empty() {
                    child
                        .append(EntryBody::Settings(Settings { values: settings }))
                        .map_err(|e| {
                            ToolOutput::error(format!(
                                "Not run: the subagent session could not be set up: {}",
                                cairn::with_causes(&e)
                            ))
                        })?;
                }
                Ok((child, true))
            }
            Err(cairn::StoreError::Append(cairn::AppendError::Invalid(
                cairn::Invalid::TooDeep { depth, max, .. },
            ))) => Err(ToolOutput::error(format!(
                "Not run: a subagent here would be at delegation depth {depth}, beyond the limit of {max}. \
                 Do this task yourself with your own tools."
            ))),
            Err(e) => Err(ToolOutput::error(format!(
                "Not run: the subagent session could not be created: {}",
                cairn::with_causes(&e)
            ))),
        }
    }
}

impl Tool for Delegate {
    fn name(&self) -> &str {
        "delegate"
    }

    fn description(&self) -> &str {
        "Delegate a self-contained task to a subagent, which works in its own session with its own tools \
         and answers with what it did. Use it for a side task whose details the conversation does not need."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "task": {"type": "string", "description": "The task, complete: the subagent sees nothing else."},
                "title": {"type": "string", "description": "A short title for the subagent's session."}
            },
            "required": ["task"],
            "additionalProperties": false
        })
    }

    fn effect(&self) -> EffectClass {
        // A re-run continues the child this call spawned: never a second one.
        EffectClass::Idempotent
    }

    fn run(&self, call: &ToolCall<'_>) -> ToolOutput {
        let Some(task) = call.str("task") else {
            return ToolOutput::error("Not run: `task` is required.");
        };
        let (child, new) = match self.child(call, task) {
            Ok(c) => c,
            Err(out) => return out,
        };
        let id = child.id().clone();
        let fail = |what: &str, e: anyhow::Error| {
            let mut out = ToolOutput::error(format!(
                "The subagent (session {id}) stopped: {what}: {e:#}. Its session keeps what it did."
            ));
            out.content.push(cairn::child_reference(&id));
            out
        };
        let mut agent =
            match Agent::new(self.sub.store.clone(), child, self.runtime(call.interrupt)) {
                Ok(a) => a,
                Err(e) => return fail("it could not start", e),
            };
        agent
            .runtime()
            .observer
            .event(&crate::observer::Event::Session {
                id: &id,
                created: new,
            });
        // Outside in: the child's own verdict is resolved and its open
        // operation carried on before this call is answered.
        let ran = if agent.session().op_records().is_empty() {
            agent.prompt(task).map(drop)
        } else {
            agent.resume().map(drop)
        };
        if let Err(e) = ran {
            return fail("resuming or running it failed", e);
        }
        match answer(agent.session()) {
            Ok(out) => out,
            Err(e) => fail("its session could not be read", e.into()),
        }
    }

    fn summary(&self, arguments: &Value) -> String {
        let task = arguments.get("task").and_then(Value::as_str).unwrap_or("");
        format!("delegate: {}", cairn_view::term::excerpt(task, 100))
    }
}

/// The parent's result, from the child's session as it stands: its final
/// answer and how its last operation ended; `TOOL_OUTCOME_UNKNOWN` when one
/// of its calls on its branch has an unknown outcome.
fn answer(child: &Session) -> Result<ToolOutput, cairn::ReadError> {
    let id = child.id();
    let ctx = child.context();
    let mut messages = Vec::with_capacity(ctx.messages().len());
    for m in ctx.messages() {
        messages.push(m.message()?);
    }
    let reply = messages
        .iter()
        .rev()
        .find(|m| m.role == Role::Assistant)
        .map(|m| m.plain_text())
        .filter(|t| !t.trim().is_empty());
    let unknown: Vec<String> = messages
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|b| match b {
            Block::ToolResult { call_id, code, .. }
                if code.as_deref() == Some(TOOL_OUTCOME_UNKNOWN) =>
            {
                Some(call_id.clone())
            }
            _ => None,
        })
        .collect();
    let ended = match child.verdict()? {
        Verdict::Finished { outcome, .. } => Some(outcome),
        _ => None,
    };
    let reply = reply.unwrap_or_else(|| "(it gave no answer)".to_owned());
    let mut out = match ended {
        Some(Outcome::Completed) if unknown.is_empty() => ToolOutput::text(format!(
            "The subagent (session {id}) finished. Its answer:\n{reply}"
        )),
        Some(Outcome::Completed) => ToolOutput {
            content: vec![Block::Text {
                text: format!(
                    "The subagent (session {id}) finished, but the outcome of its calls {} is unknown \
                     (they may or may not have run), so what it did is uncertain. Its answer:\n{reply}",
                    unknown.join(", ")
                ),
            }],
            is_error: true,
            code: Some(TOOL_OUTCOME_UNKNOWN.to_owned()),
        },
        other => {
            let how = other.map_or_else(
                || "did not finish".to_owned(),
                |o| format!("ended {}", outcome_name(o)),
            );
            ToolOutput::error(format!(
                "The subagent (session {id}) {how}. Its last answer:\n{reply}"
            ))
        }
    };
    out.content.push(cairn::child_reference(id));
    Ok(out)
}

fn outcome_name(o: Outcome) -> &'static str {
    match o {
        Outcome::Completed => "completed",
        Outcome::Failed => "failed",
        Outcome::Aborted => "aborted (interrupted)",
        Outcome::MaxSteps => "at its step limit",
    }
}
