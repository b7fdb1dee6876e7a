//! The session API: list, create, get and delete sessions; append records
//! (a batch, under a chosen durability, with `expected_seq`) and read the
//! log by seq range ("history"); the derived views (context and app state,
//! as of any entry; the tree, steps, memory and recovery verdict); and the
//! tree actions (checkout, copy = fork, labels). Paths follow the Agent
//! Protocol's threads where the concepts match: a session is a thread, its
//! log the history, a fork a copy.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{MethodRouter, get, post};
use cairn::{Context, Durability, EntryId, NewSession, Session, SessionId, SessionSummary, Status};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::app::{AppState, Json, Path, Query, blocking, json, no_content};
use crate::error::ApiError;
use crate::hub::{Handle, Hub};
use crate::shapes;

/// The session API's routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/sessions", get(list).post(create))
        .route("/sessions/{id}", view(session_json).delete(remove))
        .route("/sessions/{id}/records", post(append))
        .route("/sessions/{id}/history", get(history))
        .route("/sessions/{id}/context", view_at(context))
        .route("/sessions/{id}/state", view_at(state))
        .route("/sessions/{id}/tree", view(tree))
        .route("/sessions/{id}/steps", view(steps))
        .route("/sessions/{id}/memory", view(memory))
        .route("/sessions/{id}/verdict", view(verdict))
        .route("/sessions/{id}/checkout", change(checkout))
        .route("/sessions/{id}/copy", post(copy))
        .route("/sessions/{id}/labels", change(label))
}

/// The route of a view of the session `{id}`: `f` runs on it, opened for
/// reading ([`read`]), and what it returns is the answer.
pub fn view(f: fn(&Hub, &Session) -> Result<Value, ApiError>) -> MethodRouter<AppState> {
    get(
        move |State(st): State<AppState>, Path(id): Path<String>| async move {
            Ok::<_, ApiError>(json(StatusCode::OK, &read(&st, id, f).await?))
        },
    )
}

/// The route of a view of the session `{id}` as of the entry `?at=` (the
/// leaf without it): `f` runs on the session and the context there.
fn view_at(f: fn(&Session, Arc<Context>) -> Result<Value, ApiError>) -> MethodRouter<AppState> {
    get(
        move |State(st): State<AppState>, Path(id): Path<String>, Query(q): Query<AtQuery>| async move {
            let v = read(&st, id, move |_, s| f(s, context_at(s, q.at.as_deref())?)).await?;
            Ok::<_, ApiError>(json(StatusCode::OK, &v))
        },
    )
}

/// The route of a change to the session `{id}` with a JSON body `B`: `f`
/// runs on the session held for writing ([`write`]), and what it returns
/// is the answer.
fn change<B: DeserializeOwned + Send + 'static>(
    f: fn(&Session, B) -> Result<Value, ApiError>,
) -> MethodRouter<AppState> {
    post(
        move |State(st): State<AppState>, Path(id): Path<String>, Json(b): Json<B>| async move {
            let v = write(&st, id, move |_, h| f(&h.session, b)).await?;
            Ok::<_, ApiError>(json(StatusCode::OK, &v))
        },
    )
}

/// Runs `f` on the session `id` names, opened for reading.
pub async fn read<T: Send + 'static>(
    st: &AppState,
    id: String,
    f: impl FnOnce(&Hub, &Session) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let hub = Arc::clone(&st.hub);
    blocking(move || {
        let id = hub.resolve(&id)?;
        let h = hub.reader(&id)?;
        f(&hub, &h.session)
    })
    .await
}

/// Runs `f` on the session `id` names, held for writing and for one batch;
/// tells the live tails afterwards. A failed write closes the handle so the
/// next request reopens the session.
pub async fn write<T: Send + 'static>(
    st: &AppState,
    id: String,
    f: impl FnOnce(&Hub, &Handle) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let hub = Arc::clone(&st.hub);
    blocking(move || {
        let id = hub.resolve(&id)?;
        let h = hub.writer(&id)?;
        let out = {
            let _batch = h.batch();
            f(&hub, &h)
        };
        if h.session.is_writer() && poisoned(&out) {
            hub.release(&id);
        }
        hub.changed();
        out
    })
    .await
}

fn poisoned<T>(r: &Result<T, ApiError>) -> bool {
    matches!(r, Err(e) if e.code == "write_failed")
}

/// The largest integer a JSON number holds exactly (2^53 - 1): the bound of
/// every seq, offset and count parameter.
pub const MAX_INT: u64 = (1 << 53) - 1;

/// Refuses a seq, offset or count parameter past [`MAX_INT`].
pub fn bounded(name: &str, v: Option<u64>) -> Result<(), ApiError> {
    match v {
        Some(n) if n > MAX_INT => Err(ApiError::bad_request(
            format!("{name} {n} is larger than 2^53 - 1"),
            format!("{name} is an integer from 0 to {MAX_INT}"),
        )),
        _ => Ok(()),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    status: Option<String>,
    title: Option<String>,
    updated_after: Option<String>,
    updated_before: Option<String>,
    limit: Option<usize>,
    offset: Option<usize>,
}

async fn list(
    State(st): State<AppState>,
    Query(q): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let status = match &q.status {
        None => None,
        Some(s) => Some(serde_json::from_value::<Status>(json!(s)).map_err(|_| {
            ApiError::bad_request(
                format!("unknown status {s:?}"),
                "status is one of init, running, interrupted, paused, succeeded, failed",
            )
        })?),
    };
    let limit = q.limit.unwrap_or(50);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request(
            format!("limit {limit} is out of range"),
            "limit is from 1 to 1000 (default 50); page with offset",
        ));
    }
    bounded("offset", q.offset.map(|n| n as u64))?;
    let offset = q.offset.unwrap_or(0);
    let hub = Arc::clone(&st.hub);
    let all = blocking(move || Ok(hub.store().list()?)).await?;
    let title = q.title.as_deref().map(str::to_lowercase);
    let matching: Vec<&SessionSummary> = all
        .iter()
        .filter(|s| status.is_none_or(|st| s.status == st))
        .filter(|s| {
            title.as_deref().is_none_or(|t| {
                s.title
                    .as_deref()
                    .is_some_and(|x| x.to_lowercase().contains(t))
                    || s.first_message
                        .as_deref()
                        .is_some_and(|x| x.to_lowercase().contains(t))
            })
        })
        .filter(|s| {
            q.updated_after
                .as_deref()
                .is_none_or(|a| s.updated.as_str() > a)
        })
        .filter(|s| {
            q.updated_before
                .as_deref()
                .is_none_or(|b| s.updated.as_str() < b)
        })
        .collect();
    let page: Vec<&&SessionSummary> = matching.iter().skip(offset).take(limit).collect();
    Ok(json(
        StatusCode::OK,
        &json!({
            "sessions": page,
            "total": matching.len(),
            "offset": offset,
            "limit": limit,
        }),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    title: Option<String>,
    app_state: Option<Value>,
    cwd: Option<String>,
}

async fn create(
    State(st): State<AppState>,
    Json(b): Json<CreateBody>,
) -> Result<Response, ApiError> {
    if b.app_state.as_ref().is_some_and(|v| !v.is_object()) {
        return Err(ApiError::bad_request(
            "app_state must be a JSON object",
            "give the initial application state as an object, or leave it out for {}",
        ));
    }
    let hub = Arc::clone(&st.hub);
    let body = blocking(move || {
        let s = hub.store().create(NewSession {
            title: b.title,
            app_state: b.app_state,
            cwd: b.cwd,
            ..NewSession::default()
        })?;
        let h = hub.adopt(s);
        hub.changed();
        session_json(&hub, &h.session)
    })
    .await?;
    Ok(json(StatusCode::CREATED, &body))
}

/// A session as the API shows it: the CLI's shape, with its status.
fn session_json(hub: &Hub, s: &Session) -> Result<Value, ApiError> {
    let mut v = shapes::session(hub.store(), s);
    if let Value::Object(m) = &mut v {
        let live = hub.store().backend().writer_active(s.id());
        m.insert("status".into(), json!(s.phase().status(live)));
    }
    Ok(v)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteQuery {
    confirm: Option<String>,
}

async fn remove(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<DeleteQuery>,
) -> Result<Response, ApiError> {
    let hub = Arc::clone(&st.hub);
    blocking(move || {
        let id = hub.resolve(&id)?;
        if q.confirm.as_deref() != Some(id.as_str()) {
            return Err(ApiError::bad_request(
                format!("deleting session {id} needs confirmation"),
                format!("repeat the full id: DELETE /sessions/{id}?confirm={id}"),
            ));
        }
        // Take the writer: a session another process is writing to, or
        // whose operation is open here, is not removed under it.
        let h = hub.writer(&id)?;
        if h.session.resume_operation().is_some() {
            return Err(ApiError::conflict(
                "operation_open",
                format!("session {id} has an open operation"),
                "finish the operation (or recover the session) before deleting it",
            ));
        }
        hub.release(&id);
        drop(h);
        hub.store().remove(&id)?;
        hub.changed();
        Ok(())
    })
    .await?;
    Ok(no_content())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AppendBody {
    records: Vec<Value>,
    durability: Option<String>,
    expected_seq: Option<u64>,
}

async fn append(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Json(b): Json<AppendBody>,
) -> Result<Response, ApiError> {
    let durability = match b.durability.as_deref() {
        None => Durability::Sync,
        Some(d) => d.parse().map_err(|_| {
            ApiError::bad_request(
                format!("unknown durability {d:?}"),
                "durability is sync (the default), group or buffered (docs/DESIGN.md §3.1)",
            )
        })?,
    };
    if b.records.is_empty() {
        return Err(ApiError::bad_request(
            "no records to append",
            "send {\"records\": [{\"kind\": K, \"data\": D}, …]}",
        ));
    }
    let v = write(&st, id, move |_, h| {
        let s = &h.session;
        bounded("expected_seq", b.expected_seq)?;
        if let Some(expected) = b.expected_seq
            && expected != s.len()
        {
            return Err(ApiError::conflict(
                "seq_mismatch",
                format!(
                    "expected the next record to be seq {expected}, but it is {}: someone else appended",
                    s.len()
                ),
                "read what was appended (GET /sessions/{id}/history?from=SEQ) and retry with the new expected_seq",
            ));
        }
        // A batch under Group is written and then synced once: every record
        // is covered by a sync that started after it was written, which is
        // what Group promises, and the acknowledgements wait for it.
        let before = s.durability();
        s.set_durability(match durability {
            Durability::Group => Durability::Buffered,
            other => other,
        });
        let result = append_all(s, &b.records);
        s.set_durability(before);
        if durability == Durability::Group {
            s.sync()?;
        }
        result
    })
    .await?;
    Ok(json(StatusCode::OK, &v))
}

/// Appends every record in order; the acknowledgements of those written
/// before a refused one travel with its error.
fn append_all(s: &Session, records: &[Value]) -> Result<Value, ApiError> {
    let mut acks = Vec::with_capacity(records.len());
    for (i, r) in records.iter().enumerate() {
        let done = cairn::decode_input(&r.to_string())
            .map_err(ApiError::from)
            .and_then(|input| Ok(s.append_input(input)?));
        match done {
            Ok(a) => acks.push(json!({"seq": a.seq, "id": a.id})),
            Err(mut e) => {
                e.message = format!("record {i}: {}", e.message);
                return Err(e.with_detail(json!({"appended": acks, "failed_index": i})));
            }
        }
    }
    Ok(json!({"appended": acks, "next_seq": s.len()}))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryQuery {
    from: Option<u64>,
    to: Option<u64>,
    limit: Option<u64>,
}

async fn history(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Query(q): Query<HistoryQuery>,
) -> Result<Response, ApiError> {
    bounded("from", q.from)?;
    bounded("to", q.to)?;
    let limit = q.limit.unwrap_or(1000);
    if !(1..=10_000).contains(&limit) {
        return Err(ApiError::bad_request(
            format!("limit {limit} is out of range"),
            "limit is from 1 to 10000 (default 1000); page with from",
        ));
    }
    let v = read(&st, id, move |_, s| {
        let from = q.from.unwrap_or(0);
        let end = q.to.map_or(s.len(), |t| t.saturating_add(1).min(s.len()));
        let stop = end.min(from.saturating_add(limit));
        let mut records = Vec::new();
        for seq in from..stop {
            records.push(record_json(s, seq)?);
        }
        let next = (stop < end).then_some(stop);
        Ok(json!({"records": records, "next": next, "len": s.len()}))
    })
    .await?;
    Ok(json(StatusCode::OK, &v))
}

/// A stored record as JSON (`shapes::record`).
pub fn record_json(s: &Session, seq: u64) -> Result<Value, ApiError> {
    let raw = s.raw_record(seq)?;
    shapes::record(&raw).map_err(|e| {
        ApiError::internal(
            format!("record {seq} is not JSON: {e}"),
            "the session changed underneath the server; run `cairn fsck` on it",
        )
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AtQuery {
    at: Option<String>,
}

/// The context as of entry `at` (the current one without it).
fn context_at(s: &Session, at: Option<&str>) -> Result<Arc<Context>, ApiError> {
    let Some(at) = at else {
        return Ok(s.context());
    };
    let at: EntryId = s.resolve(at)?;
    let entries: Vec<cairn::Entry> = s
        .branch_entries(Some(&at))?
        .into_iter()
        .map(|(e, _)| e)
        .collect();
    Ok(Arc::new(Context::fold(
        &s.header().app_state,
        &entries,
        Some(&at),
    )))
}

fn context(s: &Session, ctx: Arc<Context>) -> Result<Value, ApiError> {
    Ok(shapes::context(s, &ctx)?)
}

fn state(s: &Session, ctx: Arc<Context>) -> Result<Value, ApiError> {
    Ok(json!({
        "session": s.id(),
        "at": ctx.leaf(),
        "app_state": ctx.app_state(),
        "settings": ctx.settings(),
    }))
}

fn tree(_: &Hub, s: &Session) -> Result<Value, ApiError> {
    let view = cairn_agent::tree::TreeView::load(s);
    shapes::tree(s, &view)
        .map_err(|e| ApiError::internal(format!("{e:#}"), "run `cairn fsck` on the session"))
}

fn steps(_: &Hub, s: &Session) -> Result<Value, ApiError> {
    Ok(json!({"session": s.id(), "steps": s.steps()?}))
}

fn memory(_: &Hub, s: &Session) -> Result<Value, ApiError> {
    let entries: Vec<cairn::Entry> = s
        .branch_entries(None)?
        .into_iter()
        .map(|(e, _)| e)
        .collect();
    let config = cairn::memory::MemoryConfig::default();
    let memory = cairn::memory::SessionMemory::derive(&entries, &config);
    Ok(json!({
        "session": s.id(),
        "memory": memory,
        "text": memory.render(),
    }))
}

fn verdict(hub: &Hub, s: &Session) -> Result<Value, ApiError> {
    let live = hub.store().backend().writer_active(s.id());
    let verdict = s.verdict()?;
    Ok(json!({
        "session": s.id(),
        "status": s.phase().status(live),
        "action": crate::ops::next_action(&verdict),
        "verdict": verdict,
    }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckoutBody {
    target: Option<String>,
    summary: Option<String>,
}

fn checkout(s: &Session, b: CheckoutBody) -> Result<Value, ApiError> {
    let target = b.target.as_deref().map(|t| s.resolve(t)).transpose()?;
    let done = s.checkout(target.as_ref(), b.summary)?;
    Ok(json!({
        "appended": done.map(|a| json!({"seq": a.seq, "id": a.id})),
        "leaf": s.leaf(),
    }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CopyBody {
    at: Option<String>,
    title: Option<String>,
}

async fn copy(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Json(b): Json<CopyBody>,
) -> Result<Response, ApiError> {
    let hub = Arc::clone(&st.hub);
    let v = blocking(move || {
        let id: SessionId = hub.resolve(&id)?;
        let src = hub.reader(&id)?;
        let at =
            b.at.as_deref()
                .map(|a| src.session.resolve(a))
                .transpose()?;
        let fork = hub.store().fork(&src.session, at.as_ref(), b.title)?;
        let v = session_json(&hub, &fork)?;
        drop(fork);
        hub.changed();
        Ok(v)
    })
    .await?;
    Ok(json(StatusCode::CREATED, &v))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LabelBody {
    name: String,
    target: Option<String>,
}

fn label(s: &Session, b: LabelBody) -> Result<Value, ApiError> {
    let target = b.target.as_deref().map(|t| s.resolve(t)).transpose()?;
    let a = s.label(&b.name, target.as_ref())?;
    Ok(json!({"appended": {"seq": a.seq, "id": a.id}, "labels": s.labels()}))
}
