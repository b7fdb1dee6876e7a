//! Live tails over Server-Sent Events.
//!
//! `GET /sessions/{id}/stream` sends every record from a seq on, each as an
//! event whose `id:` is the record's seq: a client that reconnects with
//! `Last-Event-ID: N` gets exactly the records after N, none twice and none
//! skipped, because the log is the order. Records written through this
//! server wake the tail at once; records written by another process are
//! found by polling the backend's stamp. `GET /streams/sessions` sends the
//! listing (one `session` event per summary) and then every change to it.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use cairn::{SessionId, SessionSummary, Stamp};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use utoipa::IntoParams;

use crate::api::{SessionPath, record_json};
use crate::error::{ApiError, ErrorCode};
use crate::extract::{AppState, Path, Query, blocking};
use crate::hub::Hub;

/// Most records sent per wake-up (the rest follow at once).
const BATCH: u64 = 512;

/// The streams' routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/sessions/{id}/stream", get(tail))
        .route("/streams/sessions", get(listing))
}

/// Where a live tail starts.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct TailQuery {
    /// First seq to send (0 when left out). A Last-Event-ID header wins over
    /// it.
    #[param(minimum = 0, maximum = 9007199254740991_u64)]
    from: Option<u64>,
}

type Tx = mpsc::Sender<Result<Event, Infallible>>;

/// Live tail of a session's records.
///
/// Every record from `from` on, then each new one as it is written: `event:
/// record`, `id:` the record's seq, `data:` the record (as in history).
/// Reconnecting with `Last-Event-ID: N` resumes exactly after N. `event:
/// removed` when the session is deleted.
#[utoipa::path(get, path = "/sessions/{id}/stream", params(SessionPath, TailQuery),
    responses((status = 200, description = "An event stream.", content_type = "text/event-stream", body = String)))]
async fn tail(
    State(st): State<AppState>,
    Path(SessionPath { id }): Path<SessionPath>,
    Query(q): Query<TailQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let resume = match headers.get("last-event-id") {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or_else(|| {
                    ApiError::bad_request(
                        "Last-Event-ID is not a record seq",
                        "send back the id of the last event received (a seq), or leave the header out",
                    )
                })?,
        ),
    };
    crate::api::bounded("from", q.from)?;
    // Last-Event-ID wins over ?from: it is where the client really stopped.
    let from = resume.map_or(q.from.unwrap_or(0), |n| n.saturating_add(1));
    let hub = Arc::clone(&st.hub);
    let sid = blocking(move || {
        let sid = hub.resolve(&id)?;
        hub.reader(&sid)?; // refuse a session that cannot be opened now
        Ok(sid)
    })
    .await?;
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(follow(Arc::clone(&st.hub), sid, from, st.poll, tx));
    Ok(sse(rx))
}

fn sse(rx: mpsc::Receiver<Result<Event, Infallible>>) -> Response {
    Sse::new(ReceiverStream::new(rx))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// What one look at the session found.
enum Found {
    Records(Vec<(u64, String)>, Option<Stamp>),
    Unchanged,
    Gone,
}

/// Sends the records of `id` from `next` on, for as long as the client
/// listens.
async fn follow(hub: Arc<Hub>, id: SessionId, mut next: u64, poll: Duration, tx: Tx) {
    let mut changes = hub.subscribe();
    let mut seen: Option<Stamp> = None;
    loop {
        let (h, i, s) = (Arc::clone(&hub), id.clone(), seen);
        let found = blocking(move || Ok(look(&h, &i, next, s))).await;
        let more = match found {
            Ok(Found::Records(records, stamp)) => {
                seen = stamp;
                let full = records.len() as u64 == BATCH;
                for (seq, data) in records {
                    let ev = Event::default()
                        .id(seq.to_string())
                        .event("record")
                        .data(data);
                    if tx.send(Ok(ev)).await.is_err() {
                        return;
                    }
                    next = seq + 1;
                }
                full
            }
            Ok(Found::Unchanged) => false,
            Ok(Found::Gone) => {
                let _ = tx
                    .send(Ok(Event::default().event("removed").data("{}")))
                    .await;
                return;
            }
            Err(e) => {
                let ev = Event::default().event("error").data(encode(&e.body("")));
                let _ = tx.send(Ok(ev)).await;
                return;
            }
        };
        if more {
            continue;
        }
        tokio::select! {
            _ = changes.changed() => {}
            () = tokio::time::sleep(poll) => {}
            () = tx.closed() => return,
        }
    }
}

/// Reads the records from `next` on: from the writer this server holds,
/// or, when the backend's stamp moved since `seen`, from a fresh read-only
/// open (another process may be the writer).
fn look(hub: &Hub, id: &SessionId, next: u64, seen: Option<Stamp>) -> Found {
    // The stamp is taken before the open, so a record written meanwhile
    // moves the next stamp and is read on the next look.
    let (handle, stamp) = match hub.held(id) {
        Some(h) => (h, None),
        None => {
            let Some(stamp) = hub.stamp(id) else {
                return Found::Gone;
            };
            if seen.as_ref() == Some(&stamp) {
                return Found::Unchanged;
            }
            match hub.reader(id) {
                Ok(h) => (h, Some(stamp)),
                Err(e) if e.code == ErrorCode::NotFound => return Found::Gone,
                // Momentarily unreadable (a write in progress): look again.
                Err(_) => return Found::Unchanged,
            }
        }
    };
    let s = &handle.session;
    let stop = s.len().min(next.saturating_add(BATCH));
    let mut out = Vec::new();
    for seq in next..stop {
        match record_json(s, seq) {
            Ok(v) => out.push((seq, v.to_string())),
            Err(_) => return Found::Records(out, None),
        }
    }
    // The stamp counts as seen only once every record it covers was sent.
    Found::Records(out, stamp.filter(|_| stop == s.len()))
}

/// The data of a listing's `removed` event.
#[derive(Serialize)]
struct Removed<'a> {
    id: &'a SessionId,
}

/// `v` as an event's data. One that cannot be serialized is sent as the
/// body of an internal error saying so, never as an empty event.
fn encode<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|e| {
        let err = ApiError::internal(
            format!("cannot serialize the event: {e}"),
            "this is a bug in cairn; report it",
        );
        serde_json::to_string(&err.body(""))
            .unwrap_or_else(|_| String::from(r#"{"error":{"code":"internal"}}"#))
    })
}

/// Live listing.
///
/// One `event: session` per session (its summary), `event: ready`, then a
/// `session` event for each session created or changed and `removed` for
/// each deleted.
#[utoipa::path(get, path = "/streams/sessions",
    responses((status = 200, description = "An event stream.", content_type = "text/event-stream", body = String)))]
async fn listing(State(st): State<AppState>) -> Response {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(watch_listing(Arc::clone(&st.hub), st.poll, tx));
    sse(rx)
}

/// Sends the whole listing, a `ready` event, then every change.
async fn watch_listing(hub: Arc<Hub>, poll: Duration, tx: Tx) {
    let mut changes = hub.subscribe();
    let mut known: BTreeMap<SessionId, SessionSummary> = BTreeMap::new();
    let mut first = true;
    let mut n: u64 = 0;
    loop {
        let h = Arc::clone(&hub);
        let Ok(list) = blocking(move || Ok(h.store().list()?)).await else {
            tokio::time::sleep(poll).await;
            continue;
        };
        let mut fresh = BTreeMap::new();
        let mut events = Vec::new();
        for s in list {
            if known.get(&s.id) != Some(&s) {
                events.push(("session", encode(&s)));
            }
            fresh.insert(s.id.clone(), s);
        }
        for gone in known.keys().filter(|k| !fresh.contains_key(*k)) {
            events.push(("removed", encode(&Removed { id: gone })));
        }
        if first {
            events.push(("ready", "{}".to_owned()));
            first = false;
        }
        known = fresh;
        for (kind, data) in events {
            n += 1;
            let ev = Event::default().id(n.to_string()).event(kind).data(data);
            if tx.send(Ok(ev)).await.is_err() {
                return;
            }
        }
        tokio::select! {
            _ = changes.changed() => {}
            () = tokio::time::sleep(poll) => {}
            () = tx.closed() => return,
        }
    }
}
