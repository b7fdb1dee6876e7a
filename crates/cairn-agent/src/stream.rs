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
use crate::provider::{ChatRequest, Provider, ProviderError, Reply, StreamEvent};

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
    Done(Result<Reply, ProviderError>),
}

/// Sends `request` to `provider` on a worker thread, passing events to `on_event`.
pub fn stream(
    provider: &Arc<dyn Provider>,
    request: ChatRequest,
    interrupt: &Interrupt,
    on_event: &mut dyn FnMut(&StreamEvent),
) -> Streamed {
    let (tx, rx) = mpsc::channel();
    let p = Arc::clone(provider);
    let spawned = std::thread::Builder::new()
        .name("cairn-provider".into())
        .spawn(move || {
            let events = tx.clone();
            let result = p.stream(&request, &mut |ev| events.send(Msg::Event(ev)).is_ok());
            let _ = tx.send(Msg::Done(result));
        });
    if let Err(e) = spawned {
        return Streamed::Done(Err(ProviderError::Connection(format!(
            "cannot start the request thread: {e}"
        ))));
    }
    let mut text = String::new();
    let mut thinking = String::new();
    loop {
        if interrupt.is_set() {
            return Streamed::Interrupted { text, thinking };
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
            Ok(Msg::Done(result)) => return Streamed::Done(result),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                return Streamed::Done(Err(ProviderError::Connection(
                    "the request thread ended without a reply".into(),
                )));
            }
        }
    }
}
