//! The derived views of a session, each a function of its log: the
//! context and the app state as of any entry (`?at=`), the tree, the steps,
//! the memory and the recovery verdict with what to do next.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{MethodRouter, get};
use cairn::{Context, EntryId, Session, SessionId, Status, Verdict};
use cairn_view::shapes::{self, ContextJson, TreeJson};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::{IntoParams, ToSchema};

use crate::api::{SessionPath, read, view};
use crate::error::ApiError;
use crate::extract::{AppState, Path, Query, Reply};
use crate::hub::Hub;

/// The derived views' routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/sessions/{id}/context", view_at(context))
        .route("/sessions/{id}/state", view_at(state))
        .route("/sessions/{id}/tree", view(tree))
        .route("/sessions/{id}/steps", view(steps))
        .route("/sessions/{id}/memory", view(memory))
        .route("/sessions/{id}/verdict", view(verdict))
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

/// The route of a view of the session `{id}` as of the entry `?at=` (the
/// leaf without it): `f` runs on the session and the context there.
fn view_at<T: Serialize + Send + 'static>(
    f: fn(&Session, Arc<Context>) -> Result<T, ApiError>,
) -> MethodRouter<AppState> {
    get(
        move |State(st): State<AppState>, Path(p): Path<SessionPath>, Query(q): Query<AtQuery>| async move {
            let v = read(&st, p.id, move |_, s| f(s, context_at(s, q.at.as_deref())?)).await?;
            Ok::<_, ApiError>(Reply(StatusCode::OK, v))
        },
    )
}

/// The entry a view is as of.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct AtQuery {
    /// An entry (id, unique prefix or label): the view as of it. The current
    /// leaf when left out.
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

/// The context the model sees, with the app state and settings, as of an
/// entry.
#[utoipa::path(get, path = "/sessions/{id}/context", params(SessionPath, AtQuery),
    responses((status = 200, description = "The context.", body = ContextJson)))]
fn context(s: &Session, ctx: Arc<Context>) -> Result<ContextJson<'static>, ApiError> {
    let shape = shapes::context(s, &ctx)?;
    Ok(ContextJson {
        messages: shape
            .messages
            .into_iter()
            .map(|m| shapes::ContextMessageJson {
                message: std::borrow::Cow::Owned(m.message.into_owned()),
                ..m
            })
            .collect(),
        ..shape
    })
}

/// The app state and settings as of an entry.
#[derive(Debug, Serialize, ToSchema)]
pub struct StateView {
    /// The session.
    #[schema(value_type = String)]
    session: SessionId,
    /// The entry it is as of.
    #[schema(value_type = Option<String>)]
    at: Option<EntryId>,
    /// The application state.
    app_state: Value,
    /// The settings.
    #[schema(value_type = Object)]
    settings: Map<String, Value>,
}

/// The app state and settings as of an entry.
#[utoipa::path(get, path = "/sessions/{id}/state", params(SessionPath, AtQuery),
    responses((status = 200, description = "The state.", body = StateView)))]
fn state(s: &Session, ctx: Arc<Context>) -> Result<StateView, ApiError> {
    Ok(StateView {
        session: s.id().clone(),
        at: ctx.leaf().cloned(),
        app_state: ctx.app_state().clone(),
        settings: ctx.settings().clone(),
    })
}

/// Every entry of the tree, the active branch, the leaf and the labels.
#[utoipa::path(get, path = "/sessions/{id}/tree", params(SessionPath),
    responses((status = 200, description = "The tree.", body = TreeJson)))]
fn tree(_: &Hub, s: &Session) -> Result<TreeJson, ApiError> {
    let view = cairn_view::tree::TreeView::load(s);
    Ok(shapes::tree(s, &view)?)
}

/// The numbered steps.
#[derive(Debug, Serialize, ToSchema)]
pub struct Steps {
    /// The session.
    #[schema(value_type = String)]
    session: SessionId,
    /// Its steps (`cairn steps --json` describes their members).
    #[schema(value_type = Vec<Object>)]
    steps: Vec<cairn::steps::Step>,
}

/// The numbered steps, with durations and tokens. Steps still running in
/// a session whose status is `interrupted` (an open operation no live
/// writer holds: its process died, which the records alone cannot tell)
/// are `interrupted`, as `cairn steps` shows them.
#[utoipa::path(get, path = "/sessions/{id}/steps", params(SessionPath),
    responses((status = 200, description = "The steps.", body = Steps)))]
fn steps(hub: &Hub, s: &Session) -> Result<Steps, ApiError> {
    let mut steps = s.steps()?;
    if hub.status(s) == Status::Interrupted {
        cairn::steps::interrupt_running(&mut steps);
    }
    Ok(Steps {
        session: s.id().clone(),
        steps,
    })
}

/// The session memory of the current branch.
#[derive(Debug, Serialize, ToSchema)]
pub struct MemoryView {
    /// The session.
    #[schema(value_type = String)]
    session: SessionId,
    /// The memory: goal, to-dos, work done, failures, decisions.
    #[schema(value_type = Object)]
    memory: cairn::memory::SessionMemory,
    /// The memory as the model is shown it.
    text: String,
}

/// The session memory of the current branch.
#[utoipa::path(get, path = "/sessions/{id}/memory", params(SessionPath),
    responses((status = 200, description = "The memory.", body = MemoryView)))]
fn memory(_: &Hub, s: &Session) -> Result<MemoryView, ApiError> {
    let entries: Vec<cairn::Entry> = s
        .branch_entries(None)?
        .into_iter()
        .map(|(e, _)| e)
        .collect();
    let config = cairn::memory::MemoryConfig::default();
    let memory = cairn::memory::SessionMemory::derive(&entries, &config);
    let text = memory.render();
    Ok(MemoryView {
        session: s.id().clone(),
        memory,
        text,
    })
}

/// The recovery verdict, the status and the next action.
#[derive(Debug, Serialize, ToSchema)]
pub struct VerdictView {
    /// The session.
    #[schema(value_type = String)]
    session: SessionId,
    /// Its status.
    status: Status,
    /// What to do next, in one sentence.
    action: &'static str,
    /// The verdict.
    verdict: Verdict,
}

/// The recovery verdict, the status and the next action.
#[utoipa::path(get, path = "/sessions/{id}/verdict", params(SessionPath),
    responses((status = 200, description = "The verdict.", body = VerdictView)))]
fn verdict(hub: &Hub, s: &Session) -> Result<VerdictView, ApiError> {
    let verdict = s.verdict()?;
    Ok(VerdictView {
        session: s.id().clone(),
        status: hub.status(s),
        action: next_action(&verdict),
        verdict,
    })
}
