//! What the agent reports as it works: [`Event`]s sent to an [`Observer`].
//! [`Printer`] shows them to a person (all untrusted text neutralised);
//! [`Acks`] prints one machine-readable line per acknowledged record, for
//! crash tests that check every acknowledged record survived.

use std::io::Write;
use std::time::Duration;

use cairn::{Block, EntryId, Message, Outcome, SessionId, ToolOutput, Verdict};

use crate::provider::{ProviderError, StreamEvent, result_text};
use cairn_view::term::{clean, excerpt};

/// Something the agent did or saw.
#[derive(Debug)]
#[non_exhaustive]
pub enum Event<'a> {
    /// The session in use.
    Session {
        /// Its id.
        id: &'a SessionId,
        /// Whether it was created now.
        created: bool,
    },
    /// The recovery verdict found on opening (not shown when there is nothing to do).
    Verdict(&'a Verdict),
    /// A recovery action, in words.
    Recovery(&'a str),
    /// An operation started with this input entry.
    OpStarted {
        /// The operation.
        op: &'a str,
        /// The input entry.
        input: Option<&'a EntryId>,
    },
    /// A model request is about to be sent (its `model_attempted` is recorded).
    ModelRequest {
        /// The attempt number within the operation.
        attempt: u32,
    },
    /// A piece of a streaming reply.
    Delta(&'a StreamEvent),
    /// The reply was recorded.
    Assistant {
        /// Its entry.
        entry: &'a EntryId,
        /// The message.
        message: &'a Message,
    },
    /// A transient provider error; another attempt follows.
    Retry {
        /// The error.
        error: &'a ProviderError,
        /// The wait before the next attempt.
        delay: Duration,
        /// The retry number (from 1).
        retry: u32,
    },
    /// A tool call is about to be handled (approval, dispatch).
    ToolCall {
        /// The call.
        call_id: &'a str,
        /// A one-line description.
        summary: &'a str,
    },
    /// T1 is durable: the tool may run.
    Dispatched {
        /// The call.
        call_id: &'a str,
        /// The tool.
        tool: &'a str,
        /// The idempotency key.
        key: &'a str,
    },
    /// T2: the tool's result was recorded.
    ToolResult {
        /// The call.
        call_id: &'a str,
        /// The tool.
        tool: &'a str,
        /// The result entry.
        entry: &'a EntryId,
        /// What it returned.
        output: &'a ToolOutput,
    },
    /// A call was answered without running (denied, invalid, not started).
    Denied {
        /// The call.
        call_id: &'a str,
        /// The tool.
        tool: &'a str,
        /// Why.
        reason: &'a str,
        /// The result entry.
        entry: Option<&'a EntryId>,
    },
    /// The context was compacted.
    Compacted {
        /// The compaction entry.
        entry: &'a EntryId,
        /// Tokens before.
        tokens_before: usize,
        /// The first entry kept.
        first_kept: &'a EntryId,
    },
    /// The operation ended.
    Finished {
        /// The operation.
        op: &'a str,
        /// How.
        outcome: Outcome,
        /// The error, if any.
        error: Option<&'a str>,
    },
    /// Anything else worth saying.
    Notice(&'a str),
}

/// Receives events.
pub trait Observer {
    /// One event.
    fn event(&mut self, event: &Event<'_>);
}

/// Ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct Silent;

impl Observer for Silent {
    fn event(&mut self, _: &Event<'_>) {}
}

/// Sends each event to several observers.
#[derive(Default)]
pub struct Tee(pub Vec<Box<dyn Observer>>);

impl Observer for Tee {
    fn event(&mut self, event: &Event<'_>) {
        for o in &mut self.0 {
            o.event(event);
        }
    }
}

/// Prints events for a person: the reply as it streams, tool calls and
/// their results in one line each, recovery in words.
pub struct Printer {
    out: Box<dyn Write + Send>,
    indent: String,
    mid_line: bool,
    streamed: bool,
}

impl Printer {
    /// A printer to `out`, each line starting with `indent`.
    pub fn new(out: Box<dyn Write + Send>, indent: &str) -> Printer {
        Printer {
            out,
            indent: indent.to_owned(),
            mid_line: false,
            streamed: false,
        }
    }

    /// A printer to stdout.
    pub fn stdout() -> Printer {
        Printer::new(Box::new(std::io::stdout()), "")
    }

    fn line(&mut self, text: &str) {
        if self.mid_line {
            let _ = writeln!(self.out);
            self.mid_line = false;
        }
        let _ = writeln!(self.out, "{}{text}", self.indent);
        let _ = self.out.flush();
    }

    fn stream(&mut self, text: &str) {
        let text = clean(text);
        for (i, piece) in text.split('\n').enumerate() {
            if i > 0 {
                let _ = writeln!(self.out);
                self.mid_line = false;
            }
            if piece.is_empty() {
                continue;
            }
            if !self.mid_line {
                let _ = write!(self.out, "{}", self.indent);
                self.mid_line = true;
            }
            let _ = write!(self.out, "{piece}");
        }
        let _ = self.out.flush();
        self.streamed = true;
    }
}

fn output_line(output: &ToolOutput) -> String {
    let text = result_text(&output.content);
    let lines = text.lines().count();
    let first = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("(no output)");
    let more = if lines > 1 {
        format!(" (+{} lines)", lines - 1)
    } else {
        String::new()
    };
    let blob = if let Some(child) = output.content.iter().find_map(cairn::referenced_session) {
        format!(" [subagent session {child}]")
    } else if output
        .content
        .iter()
        .any(|b| matches!(b, Block::Blob { .. }))
    {
        " [full output kept as a blob]".to_owned()
    } else {
        String::new()
    };
    format!("{}{more}{blob}", excerpt(first, 100))
}

impl Observer for Printer {
    fn event(&mut self, event: &Event<'_>) {
        match event {
            Event::Session { id, created } => {
                let how = if *created { "new session" } else { "session" };
                self.line(&format!("{how} {id}"));
            }
            Event::Verdict(v) => self.line(&format!("recovery verdict: {}", v.name())),
            Event::Recovery(what) => self.line(&format!("recovery: {}", clean(what))),
            Event::OpStarted { .. } | Event::ModelRequest { .. } | Event::Dispatched { .. } => {}
            Event::Delta(StreamEvent::Text(t)) => self.stream(t),
            Event::Delta(StreamEvent::Thinking(_) | StreamEvent::ToolCall { .. }) => {}
            Event::Assistant { entry, message } => {
                if !self.streamed && !message.plain_text().is_empty() {
                    self.stream(&message.plain_text());
                }
                self.streamed = false;
                let usage = message.usage.as_ref().map(|u| format!(", {} in / {} out tokens", u.input, u.output)).unwrap_or_default();
                let stop = match message.stop_reason.as_deref() {
                    Some("interrupted") => " — interrupted",
                    Some("max_tokens") => " — cut at max tokens",
                    _ => "",
                };
                self.line(&format!("  [reply {entry}{usage}{stop}]"));
            }
            Event::Retry { error, delay, retry } => {
                self.line(&format!("! {}; retry {retry} in {:.1}s", clean(&error.to_string()), delay.as_secs_f64()));
            }
            Event::ToolCall { summary, .. } => self.line(&format!("→ {}", clean(summary))),
            Event::ToolResult { tool, entry, output, .. } => {
                let status = match (output.is_error, output.code.as_deref()) {
                    (false, _) => "ok".to_owned(),
                    (true, Some(code)) => format!("error {code}"),
                    (true, None) => "error".to_owned(),
                };
                self.line(&format!("← {tool} {status}: {} [{entry}]", output_line(output)));
            }
            Event::Denied { tool, reason, .. } => self.line(&format!("✗ {tool} not run: {}", excerpt(reason, 160))),
            Event::Compacted { entry, tokens_before, first_kept } => self.line(&format!(
                "… the context (~{tokens_before} tokens) was compacted: a summary replaces what came before entry {first_kept} [{entry}]"
            )),
            Event::Finished { op, outcome, error } => match outcome {
                Outcome::Completed => {}
                other => {
                    let why = error.map(|e| format!(": {}", clean(e))).unwrap_or_default();
                    self.line(&format!("operation {op} ended {}{why}", outcome_name(*other)));
                }
            },
            Event::Notice(text) => self.line(&clean(text)),
        }
    }
}

/// An outcome in words.
pub fn outcome_name(o: Outcome) -> &'static str {
    match o {
        Outcome::Completed => "completed",
        Outcome::Failed => "failed",
        Outcome::Aborted => "aborted",
        Outcome::MaxSteps => "at the step limit",
    }
}

/// Prints `@ack KIND ID` to stdout, flushed, after each acknowledged
/// record: `session`, `entry` (input, reply, tool result, compaction),
/// `t1` (a durable `tool_dispatched`, by call id), `finished` (by op).
#[derive(Debug, Default, Clone, Copy)]
pub struct Acks;

impl Acks {
    fn say(kind: &str, id: &str) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "@ack {kind} {id}");
        let _ = out.flush();
    }
}

impl Observer for Acks {
    fn event(&mut self, event: &Event<'_>) {
        match event {
            Event::Session { id, .. } => Acks::say("session", id.as_str()),
            Event::OpStarted { input: Some(e), .. } => Acks::say("entry", e.as_str()),
            Event::Assistant { entry, .. }
            | Event::ToolResult { entry, .. }
            | Event::Compacted { entry, .. } => {
                Acks::say("entry", entry.as_str());
            }
            Event::Denied { entry: Some(e), .. } => Acks::say("entry", e.as_str()),
            Event::Dispatched { call_id, .. } => Acks::say("t1", call_id),
            Event::Finished { op, .. } => Acks::say("finished", op),
            _ => {}
        }
    }
}
