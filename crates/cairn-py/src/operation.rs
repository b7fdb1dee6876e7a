//! `cairn.Operation` and its tickets: the operation API with the core's
//! guarantees. A `ToolTicket` exists only once its `tool_dispatched` (T1)
//! is fsynced, and is also a context manager:
//!
//! ```python
//! with op.tool(call_id, effect="side_effect") as ticket:
//!     ticket.result(run_the_tool(ticket.key))
//! ```
//!
//! An exception in the block records it as the call's error result; a
//! block that records no result leaves the call dispatched without one,
//! which the verdict reports (`indeterminate_tool`), as a crash would.
//!
//! Operations and tickets hold their `Session` object, not its handle:
//! closing the session ends them too (they raise `ClosedError`).

use std::sync::{Arc, Mutex, PoisonError};

use cairn::{AppendError, Invalid, ModelTicket, Operation, Role, Session, ToolOutput, ToolTicket};
use pyo3::prelude::*;

use crate::convert::{effect_name, message, to_json, tool_output};
use crate::errors::{CairnError, PyResultExt as _, bad_input};
use crate::session::{PyAppended, PySession};
use crate::store::entry_id;

/// An open operation of a session.
#[pyclass(module = "cairn", name = "Operation", frozen)]
pub struct PyOperation {
    session: Py<PySession>,
    id: String,
}

impl PyOperation {
    pub(crate) fn new(session: Py<PySession>, id: String) -> PyOperation {
        PyOperation { session, id }
    }
}

/// Runs `f` on the session's open operation, if it is `id`, with the GIL
/// released.
fn with_op<T: Send>(
    py: Python<'_>,
    session: &Py<PySession>,
    id: &str,
    f: impl FnOnce(Operation<'_>) -> Result<T, AppendError> + Send,
) -> PyResult<T> {
    let session: Arc<Session> = session.get().inner()?;
    py.detach(|| {
        let op = session
            .resume_operation()
            .filter(|o| o.id() == id)
            .ok_or_else(|| AppendError::from(Invalid::NotTheOpenOperation(id.to_owned())))?;
        f(op)
    })
    .py()
}

fn take<T>(slot: &Mutex<Option<T>>, what: &str) -> PyResult<T> {
    slot.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
        .ok_or_else(|| {
            CairnError::new_err(format!(
                "this {what} was already used: one ticket, one record"
            ))
        })
}

/// The id an attempt's assistant reply must use.
#[pyclass(module = "cairn", name = "ModelTicket", frozen)]
pub struct PyModelTicket {
    ticket: Mutex<Option<ModelTicket>>,
    entry: String,
    attempt: u32,
}

#[pymethods]
impl PyModelTicket {
    /// The preallocated id of the assistant entry.
    #[getter]
    fn entry(&self) -> &str {
        &self.entry
    }
    /// The attempt number, from 1.
    #[getter]
    fn attempt(&self) -> u32 {
        self.attempt
    }
    fn __repr__(&self) -> String {
        format!(
            "ModelTicket(entry={:?}, attempt={})",
            self.entry, self.attempt
        )
    }
}

/// Permission to run one tool call: exists only once its T1 record is
/// durable. Use it as a context manager, recording the result with
/// `result()` inside the block.
#[pyclass(module = "cairn", name = "ToolTicket", frozen)]
pub struct PyToolTicket {
    session: Py<PySession>,
    op: String,
    ticket: Mutex<Option<ToolTicket>>,
    call_id: String,
    tool: String,
    key: String,
    effect: &'static str,
    result_entry: String,
}

impl PyToolTicket {
    fn record(&self, py: Python<'_>, output: ToolOutput) -> PyResult<PyAppended> {
        let ticket = take(&self.ticket, "tool ticket")?;
        let a = with_op(py, &self.session, &self.op, |op| {
            op.record_result(ticket, output)
        })?;
        Ok(a.into())
    }

    fn is_open(&self) -> bool {
        self.ticket
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }
}

#[pymethods]
impl PyToolTicket {
    /// The tool call's id.
    #[getter]
    fn call_id(&self) -> &str {
        &self.call_id
    }
    /// The tool's name.
    #[getter]
    fn tool(&self) -> &str {
        &self.tool
    }
    /// The idempotency key to pass to the tool's downstream service.
    #[getter]
    fn key(&self) -> &str {
        &self.key
    }
    /// The effect class the call was dispatched with.
    #[getter]
    fn effect(&self) -> &str {
        self.effect
    }
    /// The id the result entry will use.
    #[getter]
    fn result_entry(&self) -> &str {
        &self.result_entry
    }
    /// Whether the result is still to be recorded.
    #[getter]
    fn pending(&self) -> bool {
        self.is_open()
    }

    /// Records the tool's result (T2), fsynced before this returns: a
    /// `str`, a list of blocks, or `{"content": [...], "is_error": bool,
    /// "code": str}`.
    #[pyo3(signature = (output, *, is_error=false))]
    fn result(
        &self,
        py: Python<'_>,
        output: &Bound<'_, PyAny>,
        is_error: bool,
    ) -> PyResult<PyAppended> {
        let out = tool_output(output, is_error)?;
        self.record(py, out)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (exc_type, exc, _tb))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: &Bound<'_, PyAny>,
        exc: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        if !self.is_open() {
            return Ok(false);
        }
        if !exc_type.is_none() {
            let text = format!(
                "the tool raised {}: {}",
                exc_type
                    .getattr("__name__")
                    .and_then(|n| n.extract::<String>())
                    .unwrap_or_else(|_| "an exception".to_owned()),
                exc.str().map_or_else(|_| String::new(), |s| s.to_string())
            );
            self.record(py, ToolOutput::error(text))?;
            return Ok(false);
        }
        Err(CairnError::new_err(format!(
            "tool call {} ({}) left its block without a result: call ticket.result(...) inside \
             the `with` block (the call stays dispatched without a result, which recovery reports \
             as indeterminate)",
            self.call_id, self.tool
        )))
    }

    fn __repr__(&self) -> String {
        format!(
            "ToolTicket(call_id={:?}, tool={:?}, effect={:?}, pending={})",
            self.call_id,
            self.tool,
            self.effect,
            if self.is_open() { "True" } else { "False" }
        )
    }
}

#[pymethods]
impl PyOperation {
    /// The operation's id.
    #[getter]
    fn id(&self) -> &str {
        &self.id
    }

    /// Announces a model request (`model_attempted`); record its reply
    /// with `record_assistant` and the returned ticket.
    #[pyo3(signature = (provider=None, model=None))]
    fn model_attempt(
        &self,
        py: Python<'_>,
        provider: Option<&str>,
        model: Option<&str>,
    ) -> PyResult<PyModelTicket> {
        let t = with_op(py, &self.session, &self.id, |op| {
            op.model_attempt(provider, model)
        })?;
        Ok(PyModelTicket {
            entry: t.entry().to_string(),
            attempt: t.attempt(),
            ticket: Mutex::new(Some(t)),
        })
    }

    /// Records the assistant's reply (a `str`, or message data with role
    /// `assistant`) under the ticket's preallocated id.
    fn record_assistant(
        &self,
        py: Python<'_>,
        ticket: &PyModelTicket,
        reply: &Bound<'_, PyAny>,
    ) -> PyResult<PyAppended> {
        let m = message(reply, Role::Assistant)?;
        let t = take(&ticket.ticket, "model ticket")?;
        Ok(with_op(py, &self.session, &self.id, |op| op.record_assistant(t, m))?.into())
    }

    /// Records a model response's usage (`{"input", "output", "cached",
    /// "cost"}`).
    #[pyo3(signature = (entry, usage, latency_ms=None))]
    fn settle_usage(
        &self,
        py: Python<'_>,
        entry: &str,
        usage: &Bound<'_, PyAny>,
        latency_ms: Option<u64>,
    ) -> PyResult<()> {
        let entry = entry_id(entry)?;
        let usage: cairn::Usage = serde_json::from_value(to_json(usage)?)
            .map_err(|e| bad_input(format!("usage: {e}")))?;
        with_op(py, &self.session, &self.id, |op| {
            op.settle_usage(&entry, usage, latency_ms)
        })
    }

    /// Records that a person is asked to approve a tool call.
    fn request_approval(&self, py: Python<'_>, call_id: &str, tool: &str) -> PyResult<()> {
        with_op(py, &self.session, &self.id, |op| {
            op.request_approval(call_id, tool)
        })
    }

    /// Records the person's answer (a denied call still needs `deny`).
    #[pyo3(signature = (call_id, approved, by=None))]
    fn resolve_approval(
        &self,
        py: Python<'_>,
        call_id: &str,
        approved: bool,
        by: Option<&str>,
    ) -> PyResult<()> {
        with_op(py, &self.session, &self.id, |op| {
            op.resolve_approval(call_id, approved, by)
        })
    }

    /// Dispatches a tool call of the branch (T1) and returns its ticket
    /// only once `tool_dispatched` is fsynced. `effect` is `"read_only"`,
    /// `"idempotent"` or `"side_effect"` (the default: never re-run without
    /// a person).
    #[pyo3(signature = (call_id, *, effect="side_effect"))]
    fn tool(&self, py: Python<'_>, call_id: &str, effect: &str) -> PyResult<PyToolTicket> {
        let e = crate::convert::effect(effect)?;
        let t = with_op(py, &self.session, &self.id, |op| {
            op.dispatch_tool(call_id, e)
        })?;
        Ok(PyToolTicket {
            session: self.session.clone_ref(py),
            op: self.id.clone(),
            call_id: t.call_id().to_owned(),
            tool: t.tool().to_owned(),
            key: t.key().to_owned(),
            effect: effect_name(t.effect()),
            result_entry: t.result_entry().to_string(),
            ticket: Mutex::new(Some(t)),
        })
    }

    /// Answers a call that will not run (denied, or skipped) with an error
    /// result saying why.
    fn deny(&self, py: Python<'_>, call_id: &str, reason: &str) -> PyResult<PyAppended> {
        Ok(with_op(py, &self.session, &self.id, |op| op.deny(call_id, reason))?.into())
    }

    /// Records input that arrived while the operation ran.
    fn queue_input(&self, py: Python<'_>, text: &str) -> PyResult<()> {
        with_op(py, &self.session, &self.id, |op| op.queue_input(text))
    }

    /// Ends the operation: `"completed"`, `"failed"`, `"aborted"` or
    /// `"max_steps"`, with the error for a failure.
    #[pyo3(signature = (outcome="completed", error=None))]
    fn finish(&self, py: Python<'_>, outcome: &str, error: Option<String>) -> PyResult<()> {
        let o = crate::convert::outcome(outcome)?;
        with_op(py, &self.session, &self.id, |op| op.finish(o, error))
    }

    fn __repr__(&self) -> String {
        format!("cairn.Operation({:?})", self.id)
    }
}
