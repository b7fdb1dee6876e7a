//! The session API: list, create, get and delete sessions; append records
//! (a batch, under a chosen durability, with `expected_seq`) and read the
//! log by seq range ("history"); and the tree actions (checkout, copy = fork, labels). Paths follow the Agent
//! Protocol's threads where the concepts match: a session is a thread, its
//! log the history, a fork a copy.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{MethodRouter, get, post};
use cairn::{Durability, EntryId, NewSession, Session, SessionId, SessionSummary, Status};
use cairn_view::schema;
use cairn_view::shapes::{self, Ack, SessionJson};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiError, BatchFailure, ErrorCode, ErrorDetail};
use crate::extract::{AppState, Json, Path, Query, Reply, blocking, no_content};
use crate::hub::{Handle, Hub};

/// The session API's routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/sessions", get(list).post(create))
        .route("/sessions/{id}", view(get_session).delete(remove))
        .route("/sessions/{id}/records", post(append))
        .route("/sessions/{id}/history", get(history))
        .route("/sessions/{id}/checkout", change(checkout))
        .route("/sessions/{id}/copy", post(copy))
        .route("/sessions/{id}/labels", change(label))
}

/// The path of every route under one session.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct SessionPath {
    /// The session: its id or a unique prefix of it.
    #[param(pattern = "^[0-9A-Za-z]{1,64}$")]
    pub id: String,
}

/// The route of a view of the session `{id}`: `f` runs on it, opened for
/// reading ([`read`]), and what it returns is the answer.
pub fn view<T: Serialize + Send + 'static>(
    f: fn(&Hub, &Session) -> Result<T, ApiError>,
) -> MethodRouter<AppState> {
    get(
        move |State(st): State<AppState>, Path(p): Path<SessionPath>| async move {
            Ok::<_, ApiError>(Reply(StatusCode::OK, read(&st, p.id, f).await?))
        },
    )
}

/// The route of a change to the session `{id}` with a JSON body `B`: `f`
/// runs on the session held for writing ([`write`]), and what it returns
/// is the answer.
fn change<B: DeserializeOwned + Send + 'static, T: Serialize + Send + 'static>(
    f: fn(&Session, B) -> Result<T, ApiError>,
) -> MethodRouter<AppState> {
    post(
        move |State(st): State<AppState>, Path(p): Path<SessionPath>, Json(b): Json<B>| async move {
            let v = write(&st, p.id, move |_, h| f(&h.session, b)).await?;
            Ok::<_, ApiError>(Reply(StatusCode::OK, v))
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
    matches!(r, Err(e) if e.code == ErrorCode::WriteFailed)
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

/// `GET /sessions`'s filters and page.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    /// Only sessions of this status.
    #[param(value_type = Option<cairn::Status>)]
    status: Option<String>,
    /// Only sessions whose title or first message contains this
    /// (case-insensitive).
    title: Option<String>,
    /// Only sessions updated after this RFC 3339 time.
    updated_after: Option<String>,
    /// Only sessions updated before this RFC 3339 time.
    updated_before: Option<String>,
    /// Page size.
    #[param(minimum = 1, maximum = 1000, default = 50)]
    limit: Option<usize>,
    /// Sessions to skip.
    #[param(minimum = 0, maximum = 9007199254740991_u64, default = 0)]
    offset: Option<usize>,
}

/// A page of the listing.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionList {
    /// The sessions of the page, newest first.
    sessions: Vec<SessionSummary>,
    /// How many sessions match.
    total: usize,
    /// Sessions skipped.
    offset: usize,
    /// Page size.
    #[schema(minimum = 1)]
    limit: usize,
}

/// List sessions, newest first.
#[utoipa::path(get, path = "/sessions", params(ListQuery),
    responses((status = 200, description = "A page of the listing.", body = SessionList)))]
async fn list(
    State(st): State<AppState>,
    Query(q): Query<ListQuery>,
) -> Result<Reply<SessionList>, ApiError> {
    let status = match &q.status {
        None => None,
        Some(s) => Some(
            serde_json::from_value::<Status>(Value::String(s.clone())).map_err(|_| {
                ApiError::bad_request(
                    format!("unknown status {s:?}"),
                    "status is one of init, running, interrupted, paused, succeeded, failed",
                )
            })?,
        ),
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
    let matching: Vec<SessionSummary> = all
        .into_iter()
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
    let total = matching.len();
    let sessions = matching.into_iter().skip(offset).take(limit).collect();
    Ok(Reply(
        StatusCode::OK,
        SessionList {
            sessions,
            total,
            offset,
            limit,
        },
    ))
}

/// A new session.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    /// Its title.
    title: Option<String>,
    /// The initial application state (`{}` when left out).
    #[schema(value_type = Option<Object>)]
    app_state: Option<Value>,
    /// The working directory it belongs to.
    cwd: Option<String>,
}

/// Create a session.
#[utoipa::path(post, path = "/sessions", request_body = CreateBody,
    responses((status = 201, description = "Created.", body = SessionInfo)))]
async fn create(
    State(st): State<AppState>,
    Json(b): Json<CreateBody>,
) -> Result<Reply<SessionInfo>, ApiError> {
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
        Ok(SessionInfo::of(&hub, &h.session))
    })
    .await?;
    Ok(Reply(StatusCode::CREATED, body))
}

/// A session as the API shows it: the CLI's shape, with its status.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Session)]
pub struct SessionInfo {
    /// The session's metadata, as `cairn show --json` prints it.
    #[serde(flatten)]
    session: SessionJson,
    /// Its status.
    status: Status,
}

impl SessionInfo {
    fn of(hub: &Hub, s: &Session) -> SessionInfo {
        SessionInfo {
            session: shapes::session(hub.store(), s),
            status: hub.status(s),
        }
    }
}

/// Get a session.
#[utoipa::path(get, path = "/sessions/{id}", params(SessionPath),
    responses((status = 200, description = "The session.", body = SessionInfo)))]
fn get_session(hub: &Hub, s: &Session) -> Result<SessionInfo, ApiError> {
    Ok(SessionInfo::of(hub, s))
}

/// `DELETE /sessions/{id}`'s confirmation.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct DeleteQuery {
    /// The session's full id, again.
    #[param(required = true, value_type = String)]
    confirm: Option<String>,
}

/// Delete a session (guarded: repeat its full id in confirm; refused while
/// an operation is open or another process writes it).
#[utoipa::path(delete, path = "/sessions/{id}", params(SessionPath, DeleteQuery),
    responses((status = 204, description = "Deleted.")))]
async fn remove(
    State(st): State<AppState>,
    Path(p): Path<SessionPath>,
    Query(q): Query<DeleteQuery>,
) -> Result<axum::response::Response, ApiError> {
    let hub = Arc::clone(&st.hub);
    blocking(move || {
        let id = hub.resolve(&p.id)?;
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
                ErrorCode::OperationOpen,
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

/// A batch of records to append.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct AppendBody {
    /// The records, in order.
    #[schema(value_type = Vec<schema::InputRecord>, min_items = 1)]
    records: Vec<Value>,
    /// sync (the default), group or buffered (docs/DESIGN.md §3.1).
    #[schema(value_type = Option<schema::Durability>)]
    durability: Option<String>,
    /// Refuse the batch (409 seq_mismatch) unless the first record would get
    /// this seq.
    #[schema(minimum = 0, maximum = 9007199254740991_u64)]
    expected_seq: Option<u64>,
}

/// A batch appended.
#[derive(Debug, Serialize, ToSchema)]
pub struct Appended {
    /// Each record's acknowledgement, in order.
    appended: Vec<Ack>,
    /// The seq the next record will get.
    next_seq: u64,
}

/// Append a batch of records; each is acknowledged with its seq and id once
/// durable under the durability asked for.
#[utoipa::path(post, path = "/sessions/{id}/records", params(SessionPath), request_body = AppendBody,
    responses((status = 200, description = "Appended.", body = Appended)))]
async fn append(
    State(st): State<AppState>,
    Path(p): Path<SessionPath>,
    Json(b): Json<AppendBody>,
) -> Result<Reply<Appended>, ApiError> {
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
    let v = write(&st, p.id, move |_, h| {
        let s = &h.session;
        bounded("expected_seq", b.expected_seq)?;
        if let Some(expected) = b.expected_seq
            && expected != s.len()
        {
            return Err(ApiError::conflict(
                ErrorCode::SeqMismatch,
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
    Ok(Reply(StatusCode::OK, v))
}

/// Appends every record in order; the acknowledgements of those written
/// before a refused one travel with its error.
fn append_all(s: &Session, records: &[Value]) -> Result<Appended, ApiError> {
    let mut acks = Vec::with_capacity(records.len());
    for (i, r) in records.iter().enumerate() {
        let done = cairn::decode_input(&r.to_string())
            .map_err(ApiError::from)
            .and_then(|input| Ok(s.append_input(input)?));
        match done {
            Ok(a) => acks.push(Ack::of(&a)),
            Err(mut e) => {
                e.message = format!("record {i}: {}", e.message);
                return Err(e.with_detail(ErrorDetail::Batch(BatchFailure {
                    appended: acks,
                    failed_index: i,
                })));
            }
        }
    }
    Ok(Appended {
        appended: acks,
        next_seq: s.len(),
    })
}

/// `GET /sessions/{id}/history`'s range.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct HistoryQuery {
    /// First seq.
    #[param(minimum = 0, maximum = 9007199254740991_u64)]
    from: Option<u64>,
    /// Last seq (inclusive).
    #[param(minimum = 0, maximum = 9007199254740991_u64)]
    to: Option<u64>,
    /// Most records.
    #[param(minimum = 1, maximum = 10000, default = 1000)]
    limit: Option<u64>,
}

/// A page of the log.
#[derive(Debug, Serialize, ToSchema)]
pub struct History {
    /// The records, as stored (without `crc`).
    #[schema(value_type = Vec<schema::Record>)]
    records: Vec<Value>,
    /// The seq to continue from, when the page is cut.
    next: Option<u64>,
    /// The number of records in the log.
    len: u64,
}

/// Read the log by seq range.
#[utoipa::path(get, path = "/sessions/{id}/history", params(SessionPath, HistoryQuery),
    responses((status = 200, description = "A page of the log.", body = History)))]
async fn history(
    State(st): State<AppState>,
    Path(p): Path<SessionPath>,
    Query(q): Query<HistoryQuery>,
) -> Result<Reply<History>, ApiError> {
    bounded("from", q.from)?;
    bounded("to", q.to)?;
    let limit = q.limit.unwrap_or(1000);
    if !(1..=10_000).contains(&limit) {
        return Err(ApiError::bad_request(
            format!("limit {limit} is out of range"),
            "limit is from 1 to 10000 (default 1000); page with from",
        ));
    }
    let v = read(&st, p.id, move |_, s| {
        let from = q.from.unwrap_or(0);
        let end = q.to.map_or(s.len(), |t| t.saturating_add(1).min(s.len()));
        let stop = end.min(from.saturating_add(limit));
        let mut records = Vec::new();
        for seq in from..stop {
            records.push(record_json(s, seq)?);
        }
        let next = (stop < end).then_some(stop);
        Ok(History {
            records,
            next,
            len: s.len(),
        })
    })
    .await?;
    Ok(Reply(StatusCode::OK, v))
}

/// A stored record as JSON (`shapes::record`).
pub fn record_json(s: &Session, seq: u64) -> Result<Value, ApiError> {
    let raw = s.raw_record(seq)?;
    Ok(shapes::record(&raw)?)
}

/// Where to move the leaf.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct CheckoutBody {
    /// An entry (id, prefix or label); null starts over before the first
    /// entry.
    target: Option<String>,
    /// A summary of the branch left, shown to the model.
    summary: Option<String>,
}

/// The leaf moved.
#[derive(Debug, Serialize, ToSchema)]
pub struct CheckedOut {
    /// The checkout entry (null when the leaf was there already).
    appended: Option<Ack>,
    /// The new leaf.
    #[schema(value_type = Option<String>)]
    leaf: Option<EntryId>,
}

/// Move the leaf (rewind): appends a checkout entry.
#[utoipa::path(post, path = "/sessions/{id}/checkout", params(SessionPath), request_body = CheckoutBody,
    responses((status = 200, description = "Moved.", body = CheckedOut)))]
fn checkout(s: &Session, b: CheckoutBody) -> Result<CheckedOut, ApiError> {
    let target = b.target.as_deref().map(|t| s.resolve(t)).transpose()?;
    let done = s.checkout(target.as_ref(), b.summary)?;
    Ok(CheckedOut {
        appended: done.as_ref().map(Ack::of),
        leaf: s.leaf(),
    })
}

/// What to copy.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct CopyBody {
    /// The entry the copy holds the branch up to (the leaf when left out).
    at: Option<String>,
    /// The copy's title.
    title: Option<String>,
}

/// Fork: a new session holding the branch up to an entry.
#[utoipa::path(post, path = "/sessions/{id}/copy", params(SessionPath), request_body = CopyBody,
    responses((status = 201, description = "The copy.", body = SessionInfo)))]
async fn copy(
    State(st): State<AppState>,
    Path(p): Path<SessionPath>,
    Json(b): Json<CopyBody>,
) -> Result<Reply<SessionInfo>, ApiError> {
    let hub = Arc::clone(&st.hub);
    let v = blocking(move || {
        let id: SessionId = hub.resolve(&p.id)?;
        let src = hub.reader(&id)?;
        let at =
            b.at.as_deref()
                .map(|a| src.session.resolve(a))
                .transpose()?;
        let fork = hub.store().fork(&src.session, at.as_ref(), b.title)?;
        let v = SessionInfo::of(&hub, &fork);
        drop(fork);
        hub.changed();
        Ok(v)
    })
    .await?;
    Ok(Reply(StatusCode::CREATED, v))
}

/// A label to set or remove.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct LabelBody {
    /// The label's name.
    #[schema(value_type = cairn::EntryId)]
    name: String,
    /// The entry it points at; null removes it.
    target: Option<String>,
}

/// A label set or removed.
#[derive(Debug, Serialize, ToSchema)]
pub struct Labeled {
    /// The label entry.
    appended: Ack,
    /// Every label now: name → entry.
    #[schema(value_type = BTreeMap<String, String>)]
    labels: BTreeMap<String, EntryId>,
}

/// Set a label on an entry, or remove it (target null).
#[utoipa::path(post, path = "/sessions/{id}/labels", params(SessionPath), request_body = LabelBody,
    responses((status = 200, description = "Labeled.", body = Labeled)))]
fn label(s: &Session, b: LabelBody) -> Result<Labeled, ApiError> {
    let target = b.target.as_deref().map(|t| s.resolve(t)).transpose()?;
    let a = s.label(&b.name, target.as_ref())?;
    Ok(Labeled {
        appended: Ack::of(&a),
        labels: s.labels(),
    })
}
