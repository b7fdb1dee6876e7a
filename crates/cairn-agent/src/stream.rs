//! Streaming a reply while staying responsive to Ctrl-C: the provider runs
//! on a worker thread and sends its events over a channel; the agent's
//! thread forwards them and checks the interrupt flag every few
//! milliseconds, so an interrupt is seen at once even while the server is
//! silent. An abandoned worker stops at its next event (its channel is
//! closed) or when its read times out.

use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use crate::interrupt::Interrupt;
use crate::provider::{ChatRequest, Exchange, Provider, ProviderError, Reply, StreamEvent};

/// How a stream ended.
#[derive(Debug)]
pub enum Streamed {
    /// The provider finished, with a reply or an error.
    Done(Result<Reply, ProviderError>),
    /// The person interrupted; what had arrived so far.
    Interrupted {
        /// Text received.
        text: String,
        /// Reasoning received.
        thinking: String,
    },
}

enum Msg {
    Event(StreamEvent),
    Done(Result<Reply, ProviderError>, Option<Box<Exchange>>),
}

/// Sends `request` to `provider` on a worker thread, passing events to `on_event`.
pub fn stream(
    provider: &Arc<dyn Provider>,
    request: ChatRequest,
    interrupt: &Interrupt,
    on_event: &mut dyn FnMut(&StreamEvent),
) -> Streamed {
    stream_traced(provider, request, interrupt, on_event, false).0
}

/// As [`stream`]; with `trace`, also what went over the wire, when the
/// provider makes an exchange and the request was not interrupted (an
/// abandoned request's exchange is not waited for).
pub fn stream_traced(
    provider: &Arc<dyn Provider>,
    request: ChatRequest,
    interrupt: &Interrupt,
    on_event: &mut dyn FnMut(&StreamEvent),
    trace: bool,
) -> (Streamed, Option<Exchange>) {
    let (tx, rx) = mpsc::channel();
    let p = Arc::clone(provider);
    let spawned = std::thread::Builder::new()
        .name("cairn-provider".into())
        .spawn(move || {
            let events = tx.clone();
            let mut on = |ev| events.send(Msg::Event(ev)).is_ok();
            let (result, exchange) = if trace {
                p.stream_traced(&request, &mut on)
            } else {
                (p.stream(&request, &mut on), None)
            };
            let _ = tx.send(Msg::Done(result, exchange.map(Box::new)));
        });
    if let Err(e) = spawned {
        return (
            Streamed::Done(Err(ProviderError::Connection(format!(
                "cannot start the request thread: {e}"
            )))),
            None,
        );
    }
    let mut text = String::new();
    let mut thinking = String::new();
    loop {
        if interrupt.is_set() {
            return (Streamed::Interrupted { text, thinking }, None);
        }
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(Msg::Event(ev)) => {
                match &ev {
                    StreamEvent::Text(t) => text.push_str(t),
                    StreamEvent::Thinking(t) => thinking.push_str(t),
                    StreamEvent::ToolCall { .. } => {}
                }
                on_event(&ev);
            }
            Ok(Msg::Done(result, exchange)) => {
                return (Streamed::Done(result), exchange.map(|e| *e));
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                return (
                    Streamed::Done(Err(ProviderError::Connection(
                        "the request thread ended without a reply".into(),
                    ))),
                    None,
                );
            }
        }
    }
}
