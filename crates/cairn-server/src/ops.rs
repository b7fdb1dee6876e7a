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
use axum::routing::post;
use cairn::{
    Block, EffectClass, EntryBody, EntryId, Message, NewEntry, Operation, Outcome, Parent, Payload,
    Policy, Role, Session, Status, ToolDispatched, ToolOutput, Usage, Verdict,
};
use cairn_view::shapes::Ack;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::api::{SessionPath, view, write};
use crate::error::{ApiError, ErrorCode};
use crate::extract::{AppState, Json, Path, Reply};
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

/// The path of a call on an operation.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct OpPath {
    /// The session: its id or a unique prefix of it.
    #[param(pattern = "^[0-9A-Za-z]{1,64}$")]
    pub id: String,
    /// The open operation's id, as starting it returned.
    #[param(pattern = "^[!-~]{1,128}$")]
    pub op: String,
}

/// The path of a decision on one call's approval.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ApprovalPath {
    /// The session: its id or a unique prefix of it.
    #[param(pattern = "^[0-9A-Za-z]{1,64}$")]
    pub id: String,
    /// The open operation's id, as starting it returned.
    #[param(pattern = "^[!-~]{1,128}$")]
    pub op: String,
    /// The tool call's id.
    #[param(pattern = "^[!-~]{1,128}$")]
    pub call_id: String,
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
                ErrorCode::NoOpenOperation,
                format!("session {} has no open operation", s.id()),
                "start one with POST /sessions/{id}/operations",
            ));
        };
        if open.id() != op {
            return Err(ApiError::conflict(
                ErrorCode::WrongOperation,
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
fn on_op<B: DeserializeOwned + Send + 'static, T: Serialize + Send + 'static>(
    call: &str,
    status: StatusCode,
    f: fn(&Session, Operation<'_>, B) -> Result<T, ApiError>,
) -> Router<AppState> {
    let handler = move |State(st): State<AppState>, Path(p): Path<OpPath>, Json(b): Json<B>| async move {
        let v = with_op(&st, p.id, p.op, move |s, open| f(s, open, b)).await?;
        Ok::<_, ApiError>(Reply(status, v))
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
            ErrorCode::BadRecord,
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

/// An operation to start.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct StartBody {
    /// The input message.
    #[schema(value_type = cairn::Message)]
    input: Value,
}

/// An operation started.
#[derive(Debug, Serialize, ToSchema)]
pub struct Started {
    /// The operation's id (the `{op}` of its calls).
    op: String,
    /// The input's entry.
    #[schema(value_type = Option<String>)]
    input: Option<EntryId>,
    /// The seq the next record will get.
    next_seq: u64,
}

/// Start an operation with an input message.
#[utoipa::path(post, path = "/sessions/{id}/operations", params(SessionPath), request_body = StartBody,
    responses((status = 201, description = "Started.", body = Started)))]
async fn start(
    State(st): State<AppState>,
    Path(p): Path<SessionPath>,
    Json(b): Json<StartBody>,
) -> Result<Reply<Started>, ApiError> {
    let input = message(&b.input)?;
    let v = write(&st, p.id, move |_, h| {
        let op = h.session.start_operation(input)?;
        Ok(Started {
            op: op.id().to_owned(),
            input: h.session.leaf(),
            next_seq: h.session.len(),
        })
    })
    .await?;
    Ok(Reply(StatusCode::CREATED, v))
}

/// The open operation.
#[derive(Debug, Serialize, ToSchema)]
pub struct Current {
    /// The open operation's id (null when none is open).
    op: Option<String>,
    /// The last operation's phase.
    phase: cairn::OpPhase,
    /// The recovery verdict.
    verdict: Verdict,
}

/// The open operation (op is null when none is open).
#[utoipa::path(get, path = "/sessions/{id}/operations/current", params(SessionPath),
    responses((status = 200, description = "The open operation.", body = Current)))]
fn current(_: &Hub, s: &Session) -> Result<Current, ApiError> {
    Ok(Current {
        op: s.resume_operation().map(|o| o.id().to_owned()),
        phase: s.phase(),
        verdict: s.verdict()?,
    })
}

/// A model request to announce.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct AttemptBody {
    /// The provider asked.
    provider: Option<String>,
    /// The model asked.
    model: Option<String>,
}

/// A model request announced.
#[derive(Debug, Serialize, ToSchema)]
pub struct Attempt {
    /// Its number within the operation.
    attempt: u32,
    /// The id its reply must use.
    #[schema(value_type = String)]
    entry: EntryId,
}

/// Announce a model request: returns the id its reply must use.
#[utoipa::path(post, path = "/sessions/{id}/operations/{op}/attempts", params(OpPath), request_body = AttemptBody,
    responses((status = 201, description = "Announced.", body = Attempt)))]
fn attempt(_: &Session, op: Operation<'_>, b: AttemptBody) -> Result<Attempt, ApiError> {
    let t = op.model_attempt(b.provider.as_deref(), b.model.as_deref())?;
    Ok(Attempt {
        attempt: t.attempt(),
        entry: t.entry().clone(),
    })
}

/// The model's reply.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct ReplyBody {
    /// The id its attempt returned.
    entry: EntryId,
    /// The reply, an assistant message.
    #[schema(value_type = cairn::Message)]
    message: Value,
    /// The tokens it used.
    #[schema(value_type = Option<Object>)]
    usage: Option<Usage>,
    /// How long it took, in milliseconds.
    #[schema(minimum = 0, maximum = 9007199254740991_u64)]
    latency_ms: Option<u64>,
}

/// Record the model's reply under its attempt's id (and its usage).
#[utoipa::path(post, path = "/sessions/{id}/operations/{op}/replies", params(OpPath), request_body = ReplyBody,
    responses((status = 201, description = "Recorded.", body = Ack)))]
async fn reply(
    State(st): State<AppState>,
    Path(p): Path<OpPath>,
    Json(b): Json<ReplyBody>,
) -> Result<Reply<Ack>, ApiError> {
    crate::api::bounded("latency_ms", b.latency_ms)?;
    let m = message(&b.message)?;
    if m.role != Role::Assistant {
        return Err(ApiError::bad_request(
            "a reply is an assistant message",
            "send the model's reply with \"role\": \"assistant\"",
        ));
    }
    let v = with_op(&st, p.id, p.op, move |s, op| {
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
        Ok(Ack::of(&a))
    })
    .await?;
    Ok(Reply(StatusCode::CREATED, v))
}

/// A tool call to dispatch.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct DispatchBody {
    /// The call's id, as the model's reply gave it.
    call_id: String,
    /// How the tool affects the world.
    effect: EffectClass,
}

/// The ticket of a dispatched call: what the tool runs under.
#[derive(Debug, Serialize, ToSchema)]
pub struct Ticket {
    /// The call's id.
    call_id: String,
    /// The tool.
    tool: String,
    /// The idempotency key to run it with.
    key: String,
    /// How it affects the world.
    effect: EffectClass,
    /// The id its result must use.
    #[schema(value_type = String)]
    result_entry: EntryId,
}

impl Ticket {
    fn of(t: &cairn::ToolTicket) -> Ticket {
        Ticket {
            call_id: t.call_id().to_owned(),
            tool: t.tool().to_owned(),
            key: t.key().to_owned(),
            effect: t.effect(),
            result_entry: t.result_entry().clone(),
        }
    }
}

/// Dispatch a tool call (T1): answers with the ticket and the idempotency
/// key only once T1 is durable.
#[utoipa::path(post, path = "/sessions/{id}/operations/{op}/dispatches", params(OpPath), request_body = DispatchBody,
    responses((status = 201, description = "Dispatched.", body = Ticket)))]
fn dispatch(_: &Session, op: Operation<'_>, b: DispatchBody) -> Result<Ticket, ApiError> {
    Ok(Ticket::of(&op.dispatch_tool(&b.call_id, b.effect)?))
}

/// A dispatched call's result.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct ResultBody {
    /// The call's id.
    call_id: String,
    /// What the tool returned.
    content: Vec<Block>,
    /// Whether the tool failed.
    #[serde(default)]
    is_error: bool,
    /// A machine-readable outcome code.
    code: Option<String>,
}

/// A call to run again.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct RerunBody {
    /// The call's id.
    call_id: String,
    /// Who decided to run a side effect again (required for one).
    decided_by: Option<String>,
}

/// Re-run a dispatched call that has no result (after a crash): T1 again
/// with its recorded key and result id; a side effect needs decided_by.
#[utoipa::path(post, path = "/sessions/{id}/operations/{op}/reruns", params(OpPath), request_body = RerunBody,
    responses((status = 201, description = "Dispatched again.", body = Ticket)))]
fn rerun(s: &Session, op: Operation<'_>, b: RerunBody) -> Result<Ticket, ApiError> {
    let call = dispatched(s, &b.call_id)?;
    let t = match (call.effect, b.decided_by.as_deref()) {
        (EffectClass::SideEffect, Some(by)) => op.rerun_side_effect(&call, by)?,
        _ => op.rerun(&call)?,
    };
    Ok(Ticket::of(&t))
}

/// Record a dispatched call's result (T2), synced before the answer.
#[utoipa::path(post, path = "/sessions/{id}/operations/{op}/results", params(OpPath), request_body = ResultBody,
    responses((status = 201, description = "Recorded.", body = Ack)))]
fn result(s: &Session, op: Operation<'_>, b: ResultBody) -> Result<Ack, ApiError> {
    let call = dispatched(s, &b.call_id)?;
    let out = ToolOutput {
        content: b.content,
        is_error: b.is_error,
        code: b.code,
    };
    // T2 under the result id T1 preallocated, synced before the answer.
    Ok(Ack::of(&op.provide_outcome(&call, out)?))
}

/// The call `call_id` names among those dispatched with no result yet.
fn dispatched(s: &Session, call_id: &str) -> Result<ToolDispatched, ApiError> {
    if let Verdict::IndeterminateTool { calls, .. } = s.verdict()?
        && let Some(call) = calls.into_iter().find(|c| c.call_id == call_id)
    {
        return Ok(call);
    }
    Err(ApiError::conflict(
        ErrorCode::NotDispatched,
        format!("tool call {call_id:?} was not dispatched, or already has its result"),
        "dispatch it first (POST …/dispatches): its result is accepted only after T1",
    ))
}

/// A call a person is asked to approve.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct ApprovalBody {
    /// The call's id.
    call_id: String,
    /// The tool.
    tool: String,
}

/// An approval asked for.
#[derive(Debug, Serialize, ToSchema)]
pub struct Requested {
    /// Always true.
    requested: bool,
}

/// Record that a person is asked to approve a call.
#[utoipa::path(post, path = "/sessions/{id}/operations/{op}/approvals", params(OpPath), request_body = ApprovalBody,
    responses((status = 201, description = "Asked.", body = Requested)))]
fn request_approval(
    _: &Session,
    op: Operation<'_>,
    b: ApprovalBody,
) -> Result<Requested, ApiError> {
    op.request_approval(&b.call_id, &b.tool)?;
    Ok(Requested { requested: true })
}

/// A person's decision.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct ResolutionBody {
    /// Whether the call may run.
    approved: bool,
    /// Who decided.
    by: Option<String>,
}

/// A decision recorded.
#[derive(Debug, Serialize, ToSchema)]
pub struct Resolved {
    /// Whether the call may run.
    approved: bool,
}

/// Record the person's decision.
#[utoipa::path(post, path = "/sessions/{id}/operations/{op}/approvals/{call_id}", params(ApprovalPath), request_body = ResolutionBody,
    responses((status = 200, description = "Recorded.", body = Resolved)))]
async fn resolve_approval(
    State(st): State<AppState>,
    Path(p): Path<ApprovalPath>,
    Json(b): Json<ResolutionBody>,
) -> Result<Reply<Resolved>, ApiError> {
    let call_id = p.call_id;
    with_op(&st, p.id, p.op, move |_, op| {
        Ok(op.resolve_approval(&call_id, b.approved, b.by.as_deref())?)
    })
    .await?;
    Ok(Reply(
        StatusCode::OK,
        Resolved {
            approved: b.approved,
        },
    ))
}

/// A call that will not run.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct DenyBody {
    /// The call's id.
    call_id: String,
    /// Why, shown to the model.
    reason: String,
}

/// Answer a call that will not run with an error result.
#[utoipa::path(post, path = "/sessions/{id}/operations/{op}/denials", params(OpPath), request_body = DenyBody,
    responses((status = 201, description = "Denied.", body = Ack)))]
fn deny(_: &Session, op: Operation<'_>, b: DenyBody) -> Result<Ack, ApiError> {
    Ok(Ack::of(&op.deny(&b.call_id, &b.reason)?))
}

/// Input that arrived while the operation runs.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct InputBody {
    /// The person's text.
    text: String,
}

/// Input queued.
#[derive(Debug, Serialize, ToSchema)]
pub struct Queued {
    /// Always true.
    queued: bool,
}

/// Queue input that arrived while the operation runs.
#[utoipa::path(post, path = "/sessions/{id}/operations/{op}/inputs", params(OpPath), request_body = InputBody,
    responses((status = 201, description = "Queued.", body = Queued)))]
fn queue_input(_: &Session, op: Operation<'_>, b: InputBody) -> Result<Queued, ApiError> {
    op.queue_input(&b.text)?;
    Ok(Queued { queued: true })
}

/// How the operation ends.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct FinishBody {
    /// How it ended.
    outcome: Outcome,
    /// The error that ended it.
    error: Option<String>,
}

/// An operation finished.
#[derive(Debug, Serialize, ToSchema)]
pub struct Finished {
    /// The session's status now.
    status: Status,
    /// The recovery verdict now.
    verdict: Verdict,
}

/// Finish the operation.
#[utoipa::path(post, path = "/sessions/{id}/operations/{op}/finish", params(OpPath), request_body = FinishBody,
    responses((status = 200, description = "Finished.", body = Finished)))]
fn finish(s: &Session, op: Operation<'_>, b: FinishBody) -> Result<Finished, ApiError> {
    op.finish(b.outcome, b.error)?;
    Ok(Finished {
        status: s.status(),
        verdict: s.verdict()?,
    })
}

/// How recovery resolves the verdict.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
enum PolicyName {
    /// Unknown outcomes recorded, unstarted calls closed, unanswered
    /// approvals denied (the default).
    CloseAll,
    /// As close_all, but unanswered approvals are left to a person.
    LeaveApprovals,
}

/// The policy to recover under.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct RecoverBody {
    /// `close_all` (the default) or `leave_approvals`.
    #[schema(value_type = Option<PolicyName>)]
    policy: Option<String>,
}

/// What recovery did.
#[derive(Debug, Serialize, ToSchema)]
pub struct Recovered {
    /// The verdict before.
    before: Verdict,
    /// What was recorded, in order.
    #[schema(value_type = Vec<Object>)]
    actions: Vec<cairn::Action>,
    /// The verdict after.
    after: Verdict,
}

/// Resolve the verdict with the core's recovery loop under a policy (no tool
/// runs on the server).
#[utoipa::path(post, path = "/sessions/{id}/recover", params(SessionPath), request_body = RecoverBody,
    responses((status = 200, description = "Recovered.", body = Recovered)))]
async fn recover(
    State(st): State<AppState>,
    Path(p): Path<SessionPath>,
    Json(b): Json<RecoverBody>,
) -> Result<Reply<Recovered>, ApiError> {
    let name = match b.policy {
        None => PolicyName::CloseAll,
        Some(p) => serde_json::from_value(Value::String(p.clone())).map_err(|_| {
            ApiError::bad_request(
                format!("unknown policy {p:?}"),
                "policy is close_all (unknown outcomes recorded, unstarted calls closed, unanswered approvals denied) or leave_approvals",
            )
        })?,
    };
    let policy = match name {
        PolicyName::CloseAll => Policy::close_all(),
        PolicyName::LeaveApprovals => Policy {
            deny_pending_approvals: false,
            ..Policy::close_all()
        },
    };
    let v = write(&st, p.id, move |_, h| {
        let report = cairn::recover(&h.session, policy, None).map_err(|e| match e {
            cairn::RecoveryError::Append(a) => ApiError::from(a),
            other => ApiError::internal(cairn::with_causes(&other), "report this as a bug"),
        })?;
        Ok(Recovered {
            before: report.before,
            actions: report.actions,
            after: report.after,
        })
    })
    .await?;
    Ok(Reply(StatusCode::OK, v))
}
