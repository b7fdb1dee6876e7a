//! The model view: what a provider receives — the system prompt, the session
//! memory (as a developer message right after it), then the context — with a
//! token estimate per part and a hook that tells the host when the view
//! passes its budget (the agent compacts then).
//!
//! Token estimates are a heuristic, not a tokenizer: one token per 4
//! characters of text (rounded up), plus 4 per message for the framing,
//! with tool arguments counted as their JSON text. Good enough to decide when
//! to compact; use the provider's reported usage for billing.
//!
//! A view never holds a tool call without its result: a provider would
//! refuse it (an OpenAI-compatible endpoint answers HTTP 400). The builder
//! refuses such a context with [`ViewError::UnansweredCalls`]; recovery
//! (`cairn::recover_with`) answers the calls first.

use serde::Serialize;

use crate::error::ReadError;
use crate::journal::unanswered_calls;
use crate::memory::SessionMemory;
use crate::projection::Context;
use crate::record::{Block, Message, Role};

/// Which part of the view a message belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Part {
    /// The host's system prompt.
    System,
    /// The session memory.
    Memory,
    /// The context (the branch's messages).
    Context,
}

/// The assembled view.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelView {
    /// Messages in the order the provider receives them, with their part.
    pub messages: Vec<(Part, Message)>,
    /// Estimated tokens per part: system, memory, context.
    pub tokens: PartTokens,
    /// The budget the view was built against, if any.
    pub budget: Option<usize>,
}

/// Token estimates of each part.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PartTokens {
    /// The system prompt.
    pub system: usize,
    /// The memory.
    pub memory: usize,
    /// The context.
    pub context: usize,
}

impl PartTokens {
    /// All parts.
    pub fn total(&self) -> usize {
        self.system + self.memory + self.context
    }
}

impl ModelView {
    /// Whether the view is over its budget.
    pub fn over_budget(&self) -> bool {
        self.budget.is_some_and(|b| self.tokens.total() > b)
    }
}

/// Estimated tokens of a text.
pub fn estimate_text(text: &str) -> usize {
    text.chars().count().div_ceil(4)
}

/// Estimated tokens of a message.
pub fn estimate_message(m: &Message) -> usize {
    4 + m.content.iter().map(estimate_block).sum::<usize>()
}

fn estimate_block(b: &Block) -> usize {
    match b {
        Block::Text { text } => estimate_text(text),
        Block::Thinking { thinking, .. } => estimate_text(thinking),
        Block::ToolCall {
            name, arguments, ..
        } => estimate_text(name) + estimate_text(&arguments.to_string()),
        Block::ToolResult { content, .. } => 2 + content.iter().map(estimate_block).sum::<usize>(),
        // Providers bill images by size; a flat estimate keeps the heuristic simple.
        Block::Image { .. } => 1000,
        Block::Blob { uri, .. } => estimate_text(uri),
    }
}

/// Why a view cannot be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ViewError {
    /// The context holds tool calls without a result.
    #[error(
        "the context holds tool call(s) {} without a result, which a provider refuses; recover the session first (`cairn recover`, or resume the agent)",
        calls.join(", ")
    )]
    UnansweredCalls {
        /// The calls, as `id (tool)`.
        calls: Vec<String>,
    },
    /// A message of the context could not be read from the session's log.
    #[error(transparent)]
    Read(#[from] ReadError),
}

/// The over-budget hook.
type Hook<'h> = Box<dyn FnMut(&ModelView) + 'h>;

/// Builds views; calls the over-budget hook when a view passes the budget.
pub struct ViewBuilder<'h> {
    system: Option<String>,
    budget: Option<usize>,
    memory_role: Role,
    on_over_budget: Option<Hook<'h>>,
}

impl std::fmt::Debug for ViewBuilder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ViewBuilder")
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl<'h> ViewBuilder<'h> {
    /// A builder with a system prompt (or none).
    pub fn new(system: Option<String>) -> ViewBuilder<'h> {
        ViewBuilder {
            system,
            budget: None,
            memory_role: Role::Developer,
            on_over_budget: None,
        }
    }

    /// The token budget.
    #[must_use]
    pub fn budget(mut self, tokens: usize) -> Self {
        self.budget = Some(tokens);
        self
    }

    /// The role of the memory message (`developer` by default; use `system`
    /// for providers without developer messages).
    #[must_use]
    pub fn memory_role(mut self, role: Role) -> Self {
        self.memory_role = role;
        self
    }

    /// Called with the view whenever one is built over budget.
    #[must_use]
    pub fn on_over_budget(mut self, hook: impl FnMut(&ModelView) + 'h) -> Self {
        self.on_over_budget = Some(Box::new(hook));
        self
    }

    /// Assembles the view.
    ///
    /// # Errors
    ///
    /// [`ViewError::UnansweredCalls`] when the context holds a tool call
    /// without a result; [`ViewError::Read`] when one of its messages
    /// cannot be read.
    pub fn build(
        &mut self,
        memory: Option<&SessionMemory>,
        context: &Context,
    ) -> Result<ModelView, ViewError> {
        let open = unanswered_calls(context)?;
        if !open.is_empty() {
            return Err(ViewError::UnansweredCalls {
                calls: open
                    .iter()
                    .map(|c| format!("{:?} ({})", c.call_id, c.tool))
                    .collect(),
            });
        }
        let mut messages = Vec::new();
        let mut tokens = PartTokens::default();
        if let Some(s) = &self.system {
            let m = Message::text(Role::System, s.clone());
            tokens.system = estimate_message(&m);
            messages.push((Part::System, m));
        }
        if let Some(mem) = memory.filter(|m| !m.is_empty()) {
            let m = Message::text(self.memory_role, mem.render());
            tokens.memory = estimate_message(&m);
            messages.push((Part::Memory, m));
        }
        for cm in context.messages() {
            let m = cm.message()?;
            tokens.context += estimate_message(m);
            messages.push((Part::Context, m.clone()));
        }
        let view = ModelView {
            messages,
            tokens,
            budget: self.budget,
        };
        if view.over_budget()
            && let Some(hook) = self.on_over_budget.as_mut()
        {
            hook(&view);
        }
        Ok(view)
    }
}
