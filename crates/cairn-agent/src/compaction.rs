//! Compaction: when the model view passes its token budget, the loop asks
//! the provider for a summary of the older part of the context and appends
//! a `compaction` entry; the context is then the summary followed by the
//! branch from `first_kept` on.
//!
//! `first_kept` is chosen so that no tool call is separated from its
//! result: a cut is allowed only where every call before it has its result
//! before it too. Among allowed cuts, the earliest that keeps at most
//! `keep_recent_tokens` is taken (or, if even the last exchange is larger,
//! the latest allowed cut). Summary requests are not model attempts of the
//! operation (they produce no assistant entry); a failed summary is
//! reported and the loop goes on uncompacted.

use std::collections::HashSet;

use anyhow::Result;
use cairn::view::{ViewBuilder, estimate_message};
use cairn::{
    Block, Compaction, ContextMessage, EntryBody, EntryId, Message, Messages, Role, Session, Source,
};

use crate::observer::Event;
use crate::provider::{ChatRequest, Purpose, result_text};
use crate::runtime::{Backoff, Runtime, backoff};
use crate::stream::{Streamed, stream_traced};

pub use crate::runtime::CompactionPolicy;

const SUMMARY_PROMPT: &str = "You summarise a conversation between a person and an AI agent so that the agent can continue without the full history. \
Keep the person's goals and requests, decisions, what was done (files changed, commands run, their results), what failed, the current state and the next steps. \
Be concise and factual; write plain prose or short lists.";

/// Compacts if the view is over budget.
///
/// # Errors
///
/// Append errors.
pub fn maybe_compact(session: &Session, rt: &mut Runtime) -> Result<Option<EntryId>> {
    let Some(budget) = rt.config.compaction.budget_tokens else {
        return Ok(None);
    };
    let ctx = session.context();
    let memory = if rt.config.memory {
        session.memory()
    } else {
        None
    };
    let mut over = false;
    ViewBuilder::new(rt.config.system_prompt.clone())
        .budget(budget)
        .on_over_budget(|_| over = true)
        .build(memory.as_ref(), &ctx)?;
    if !over {
        return Ok(None);
    }
    compact_keeping(session, rt, rt.config.compaction.keep_recent_tokens)
}

/// The index of the first context message to keep, or `None` when no cut
/// is possible (nothing before a valid cut point).
///
/// # Errors
///
/// [`cairn::ReadError`] when a message cannot be read from the session.
pub fn choose_first_kept(
    messages: &Messages,
    keep_recent_tokens: usize,
) -> Result<Option<usize>, cairn::ReadError> {
    let mut open: HashSet<&str> = HashSet::new();
    let mut valid = Vec::new();
    let mut tokens = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        if i > 0 && open.is_empty() && !matches!(m.source(), Source::CompactionSummary) {
            valid.push(i);
        }
        let message = m.message()?;
        for (id, _, _) in message.tool_calls() {
            open.insert(id);
        }
        for id in message.tool_results() {
            open.remove(id);
        }
        tokens.push(estimate_message(message));
    }
    let mut suffix = vec![0usize; messages.len() + 1];
    for i in (0..messages.len()).rev() {
        suffix[i] = suffix[i + 1] + tokens[i];
    }
    Ok(valid
        .iter()
        .copied()
        .find(|&i| suffix[i] <= keep_recent_tokens)
        .or_else(|| valid.last().copied()))
}

/// The estimated tokens of every message of `messages`.
fn tokens_of(messages: &Messages) -> Result<usize, cairn::ReadError> {
    let mut total = 0;
    for m in messages {
        total += estimate_message(m.message()?);
    }
    Ok(total)
}

/// Compacts now (`/compact`): summarises the older part of the context,
/// keeping at most half of it (and no more than the policy's recent part).
///
/// # Errors
///
/// Append errors.
pub fn compact(session: &Session, rt: &mut Runtime) -> Result<Option<EntryId>> {
    let total = tokens_of(session.context().messages())?;
    let keep = rt.config.compaction.keep_recent_tokens.min(total / 2);
    compact_keeping(session, rt, keep)
}

/// Summarises the context before the recent `keep` tokens and appends a compaction entry.
fn compact_keeping(session: &Session, rt: &mut Runtime, keep: usize) -> Result<Option<EntryId>> {
    let ctx = session.context();
    let messages = ctx.messages();
    let Some(cut) = choose_first_kept(messages, keep)? else {
        rt.observer.event(&Event::Notice("nothing to compact yet"));
        return Ok(None);
    };
    let tokens_before = tokens_of(messages)?;
    let transcript = transcript(messages.iter().take(cut))?;
    let request = ChatRequest {
        messages: vec![
            Message::text(Role::System, SUMMARY_PROMPT),
            Message::text(
                Role::User,
                format!("{transcript}\n\nWrite the summary of the conversation above now."),
            ),
        ],
        tools: Vec::new(),
        purpose: Purpose::Summary,
        reply_id: None,
    };
    let mut retry = 0u32;
    let summary = loop {
        let (streamed, exchange) = stream_traced(
            &rt.provider,
            request.clone(),
            &rt.interrupt,
            &mut |_| {},
            rt.config.trace.is_some(),
        );
        let op = session.resume_operation().map(|o| o.id().to_owned());
        let request = crate::trace::Request {
            op: op.as_deref(),
            purpose: Purpose::Summary,
            attempt: None,
            entry: None,
            retry,
        };
        crate::trace::record_streamed(
            session,
            rt.config.trace,
            &rt.env.blob_dir,
            request,
            &streamed,
            exchange.as_ref(),
        )?;
        match streamed {
            Streamed::Done(Ok(reply)) if !reply.text.trim().is_empty() => break reply.text,
            Streamed::Done(Ok(_)) => {
                rt.observer.event(&Event::Notice(
                    "compaction skipped: the summary came back empty",
                ));
                return Ok(None);
            }
            Streamed::Done(Err(e)) => match backoff(rt, &mut retry, &e) {
                Backoff::Retry => {}
                Backoff::Interrupted => return Ok(None),
                Backoff::GiveUp => {
                    rt.observer.event(&Event::Notice(&format!(
                        "compaction skipped: the summary request failed: {e}"
                    )));
                    return Ok(None);
                }
            },
            Streamed::Interrupted { .. } => return Ok(None),
        }
    };
    let first_kept = messages[cut].entry().clone();
    let appended = session.append(EntryBody::Compaction(Compaction {
        summary,
        first_kept: Some(first_kept.clone()),
        tokens_before: Some(tokens_before as u64),
    }))?;
    if let Some(entry) = &appended.id {
        rt.observer.event(&Event::Compacted {
            entry,
            tokens_before,
            first_kept: &first_kept,
        });
    }
    Ok(appended.id)
}

/// The messages as plain text for the summariser.
fn transcript<'a>(
    messages: impl Iterator<Item = &'a ContextMessage>,
) -> Result<String, cairn::ReadError> {
    let mut out = String::new();
    for m in messages {
        let msg = m.message()?;
        for b in &msg.content {
            let line = match b {
                Block::Text { text } => format!("{}: {text}", msg.role.as_str()),
                Block::ToolCall {
                    name, arguments, ..
                } => {
                    format!(
                        "assistant called {name} {}",
                        cairn::excerpt(&arguments.to_string(), 300)
                    )
                }
                Block::ToolResult {
                    content, is_error, ..
                } => {
                    let status = if *is_error { "error" } else { "result" };
                    format!(
                        "tool {status}: {}",
                        cairn::excerpt(&result_text(content), 600)
                    )
                }
                Block::Thinking { .. } | Block::Image { .. } | Block::Blob { .. } => continue,
            };
            out.push_str(&line);
            out.push('\n');
        }
    }
    Ok(out)
}
