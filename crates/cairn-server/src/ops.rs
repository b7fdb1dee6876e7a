//! The operation API over HTTP, so a harness in another language gets the
//! guarantees the Rust one gets: every call is the library's [`Operation`]
//! method of the same name, made on the server's writer handle, and answers
//! only once its record is as durable as the library promises (a dispatch
//! returns its ticket and idempotency key only once T1 is synced; a result
//! is synced before it is acknowledged). The operation a path names must be
//! the open one, as a ticket must be in the library. Recovery runs the
//! core's one recovery loop under a [`Policy`] (no tools run here: what the
//! policy would run is closed instead).

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::post;
use cairn::{
    Block, EffectClass, EntryBody, EntryId, Message, NewEntry, Operation, Outcome, Parent, Payload,
    Policy, Role, Session, ToolDispatched, ToolOutput, Usage, Verdict,
};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::api::{view, write};
use crate::app::{AppState, Json, Path, json};
use crate::error::ApiError;
use crate::hub::Hub;

/// The operation API's routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/sessions/{id}/operations", post(start))
        .route("/sessions/{id}/operations/current", view(current))
        .merge(on_op("attempts", StatusCode::CREATED, attempt))
        .route("/sessions/{id}/operations/{op}/replies", post(reply))
        .merge(on_op("dispatches", StatusCode::CREATED, dispatch))
        .merge(on_op("results", StatusCode::CREATED, result))
        .merge(on_op("reruns", StatusCode::CREATED, rerun))
        .merge(on_op("approvals", StatusCode::CREATED, request_approval))
        .route(
            "/sessions/{id}/operations/{op}/approvals/{call_id}",
            post(resolve_approval),
        )
        .merge(on_op("denials", StatusCode::CREATED, deny))
        .merge(on_op("inputs", StatusCode::CREATED, queue_input))
        .merge(on_op("finish", StatusCode::OK, finish))
        .route("/sessions/{id}/recover", post(recover))
}

/// What to do next about a verdict, in one sentence.
pub fn next_action(v: &Verdict) -> &'static str {
    match v {
        Verdict::IndeterminateTool { .. } => {
            "tools started and have no result: re-run read-only and idempotent ones with their key, decide side effects, or record them unknown (POST /sessions/{id}/recover)"
        }
        Verdict::Finished { .. } => "nothing to do: the operation finished",
        Verdict::AwaitingApproval { .. } => {
            "a person was asked and never answered: ask again, or deny (POST /sessions/{id}/recover)"
        }
        Verdict::ProviderInterrupted { .. } => {
            "a model request got no reply; nothing external happened: retry the attempt"
        }
        Verdict::ToolsNotStarted { .. } => {
            "the model asked for tools that never started: run them, or close them as not started (POST /sessions/{id}/recover)"
        }
        Verdict::Ready { .. } => "nothing pending: continue",
        _ => "see docs/DESIGN.md §4 for this verdict",
    }
}

/// Runs `f` with the session's open operation, which must be `op`.
async fn with_op<T: Send + 'static>(
    st: &AppState,
    id: String,
    op: String,
    f: impl FnOnce(&Session, Operation<'_>) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    write(st, id, move |_, h| {
        let s = &h.session;
        let Some(open) = s.resume_operation() else {
            return Err(ApiError::conflict(
                "no_open_operation",
                format!("session {} has no open operation", s.id()),
                "start one with POST /sessions/{id}/operations",
            ));
        };
        if open.id() != op {
            return Err(ApiError::conflict(
                "wrong_operation",
                format!("operation {op} is not the open one ({})", open.id()),
                "use the operation id that POST /sessions/{id}/operations returned",
            ));
        }
        f(s, open)
    })
    .await
}

/// The route `POST /sessions/{id}/operations/{op}/<call>`, a call on the
/// open operation with a JSON body `B`: `f` runs on the writer handle once
/// `{op}` is checked to be the open operation ([`with_op`]), and what it
/// returns is the answer, with `status`.
fn on_op<B: DeserializeOwned + Send + 'static>(
    call: &str,
    status: StatusCode,
    f: fn(&Session, Operation<'_>, B) -> Result<Value, ApiError>,
) -> Router<AppState> {
    let handler = move |State(st): State<AppState>,
                        Path((id, op)): Path<(String, String)>,
                        Json(b): Json<B>| async move {
        let v = with_op(&st, id, op, move |s, open| f(s, open, b)).await?;
        Ok::<_, ApiError>(json(status, &v))
    };
    Router::new().route(
        &format!("/sessions/{{id}}/operations/{{op}}/{call}"),
        post(handler),
    )
}

/// A message decoded by the library's decoder (the JSON rule included).
fn message(v: &Value) -> Result<Message, ApiError> {
    let bad = |why: String| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_record",
            format!("not a message: {why}"),
            "a message is {\"role\": R, \"content\": [blocks]} as docs/FORMAT.md §4 writes it",
        )
    };
    match cairn::decode_data("message", false, v.to_string().as_bytes()) {
        Ok(Payload::Entry(EntryBody::Message(m))) => Ok(m),
        Ok(_) => Err(bad("not a message".into())),
        Err(e) => Err(bad(cairn::with_causes(&e))),
    }
}

fn ack(a: &cairn::Appended) -> Value {
    json!({"seq": a.seq, "id": a.id})
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StartBody {
    input: Value,
}

async fn start(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Json(b): Json<StartBody>,
) -> Result<Response, ApiError> {
    let input = message(&b.input)?;
    let v = write(&st, id, move |_, h| {
        let op = h.session.start_operation(input)?;
        Ok(json!({"op": op.id(), "input": h.session.leaf(), "next_seq": h.session.len()}))
    })
    .await?;
    Ok(json(StatusCode::CREATED, &v))
}

fn current(_: &Hub, s: &Session) -> Result<Value, ApiError> {
    let op = s.resume_operation().map(|o| o.id().to_owned());
    Ok(json!({"op": op, "phase": s.phase(), "verdict": s.verdict()?}))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AttemptBody {
    provider: Option<String>,
    model: Option<String>,
}

fn attempt(_: &Session, op: Operation<'_>, b: AttemptBody) -> Result<Value, ApiError> {
    let t = op.model_attempt(b.provider.as_deref(), b.model.as_deref())?;
    Ok(json!({"attempt": t.attempt(), "entry": t.entry()}))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplyBody {
    entry: EntryId,
    message: Value,
    usage: Option<Usage>,
    latency_ms: Option<u64>,
}

async fn reply(
    State(st): State<AppState>,
    Path((id, op)): Path<(String, String)>,
    Json(b): Json<ReplyBody>,
) -> Result<Response, ApiError> {
    crate::api::bounded("latency_ms", b.latency_ms)?;
    let m = message(&b.message)?;
    if m.role != Role::Assistant {
        return Err(ApiError::bad_request(
            "a reply is an assistant message",
            "send the model's reply with \"role\": \"assistant\"",
        ));
    }
    let v = with_op(&st, id, op, move |s, op| {
        // The library refuses an assistant entry under any id but the open
        // attempt's preallocated one, exactly as with a ModelTicket.
        let a = s.append_entry(NewEntry {
            id: Some(b.entry.clone()),
            parent: Parent::Leaf,
            body: EntryBody::Message(m),
        })?;
        if let Some(usage) = b.usage {
            op.settle_usage(&b.entry, usage, b.latency_ms)?;
        }
        Ok(ack(&a))
    })
    .await?;
    Ok(json(StatusCode::CREATED, &v))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DispatchBody {
    call_id: String,
    effect: EffectClass,
}

fn dispatch(_: &Session, op: Operation<'_>, b: DispatchBody) -> Result<Value, ApiError> {
    Ok(ticket(&op.dispatch_tool(&b.call_id, b.effect)?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResultBody {
    call_id: String,
    content: Vec<Block>,
    #[serde(default)]
    is_error: bool,
    code: Option<String>,
}

/// The ticket a dispatch or a re-run answers with.
fn ticket(t: &cairn::ToolTicket) -> Value {
    json!({
        "call_id": t.call_id(),
        "tool": t.tool(),
        "key": t.key(),
        "effect": t.effect(),
        "result_entry": t.result_entry(),
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RerunBody {
    call_id: String,
    /// Who decided to run a side effect again (required for one).
    decided_by: Option<String>,
}

/// Re-runs a call that was dispatched and has no result (after a crash):
/// T1 again with the recorded idempotency key and result id. A side effect
/// needs a person's decision, recorded as an approval.
fn rerun(s: &Session, op: Operation<'_>, b: RerunBody) -> Result<Value, ApiError> {
    let call = dispatched(s, &b.call_id)?;
    let t = match (call.effect, b.decided_by.as_deref()) {
        (EffectClass::SideEffect, Some(by)) => op.rerun_side_effect(&call, by)?,
        _ => op.rerun(&call)?,
    };
    Ok(ticket(&t))
}

fn result(s: &Session, op: Operation<'_>, b: ResultBody) -> Result<Value, ApiError> {
    let call = dispatched(s, &b.call_id)?;
    let out = ToolOutput {
        content: b.content,
        is_error: b.is_error,
        code: b.code,
    };
    // T2 under the result id T1 preallocated, synced before the answer.
    Ok(ack(&op.provide_outcome(&call, out)?))
}

/// The call `call_id` names among those dispatched with no result yet.
fn dispatched(s: &Session, call_id: &str) -> Result<ToolDispatched, ApiError> {
    if let Verdict::IndeterminateTool { calls, .. } = s.verdict()?
        && let Some(call) = calls.into_iter().find(|c| c.call_id == call_id)
    {
        return Ok(call);
    }
    Err(ApiError::conflict(
        "not_dispatched",
        format!("tool call {call_id:?} was not dispatched, or already has its result"),
        "dispatch it first (POST …/dispatches): its result is accepted only after T1",
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ApprovalBody {
    call_id: String,
    tool: String,
}

fn request_approval(_: &Session, op: Operation<'_>, b: ApprovalBody) -> Result<Value, ApiError> {
    op.request_approval(&b.call_id, &b.tool)?;
    Ok(json!({"requested": true}))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResolutionBody {
    approved: bool,
    by: Option<String>,
}

async fn resolve_approval(
    State(st): State<AppState>,
    Path((id, op, call_id)): Path<(String, String, String)>,
    Json(b): Json<ResolutionBody>,
) -> Result<Response, ApiError> {
    with_op(&st, id, op, move |_, op| {
        Ok(op.resolve_approval(&call_id, b.approved, b.by.as_deref())?)
    })
    .await?;
    Ok(json(StatusCode::OK, &json!({"approved": b.approved})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DenyBody {
    call_id: String,
    reason: String,
}

fn deny(_: &Session, op: Operation<'_>, b: DenyBody) -> Result<Value, ApiError> {
    Ok(ack(&op.deny(&b.call_id, &b.reason)?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InputBody {
    text: String,
}

fn queue_input(_: &Session, op: Operation<'_>, b: InputBody) -> Result<Value, ApiError> {
    op.queue_input(&b.text)?;
    Ok(json!({"queued": true}))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FinishBody {
    outcome: Outcome,
    error: Option<String>,
}

fn finish(s: &Session, op: Operation<'_>, b: FinishBody) -> Result<Value, ApiError> {
    op.finish(b.outcome, b.error)?;
    Ok(json!({"status": s.status(), "verdict": s.verdict()?}))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecoverBody {
    /// `close_all` (the default) or `leave_approvals`.
    policy: Option<String>,
}

async fn recover(
    State(st): State<AppState>,
    Path(id): Path<String>,
    Json(b): Json<RecoverBody>,
) -> Result<Response, ApiError> {
    let policy = match b.policy.as_deref() {
        None | Some("close_all") => Policy::close_all(),
        Some("leave_approvals") => Policy {
            deny_pending_approvals: false,
            ..Policy::close_all()
        },
        Some(p) => {
            return Err(ApiError::bad_request(
                format!("unknown policy {p:?}"),
                "policy is close_all (unknown outcomes recorded, unstarted calls closed, unanswered approvals denied) or leave_approvals",
            ));
        }
    };
    let v = write(&st, id, move |_, h| {
        let report = cairn::recover(&h.session, policy, None).map_err(|e| match e {
            cairn::RecoveryError::Append(a) => ApiError::from(a),
            other => ApiError::internal(cairn::with_causes(&other), "report this as a bug"),
        })?;
        Ok(json!({
            "before": report.before,
            "actions": report.actions,
            "after": report.after,
        }))
    })
    .await?;
    Ok(json(StatusCode::OK, &v))
}
