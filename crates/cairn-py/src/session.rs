//! `cairn.Session`: one open session — appends (decoded by the core's one
//! input decoder), the derived reads (context, app state, tree, labels,
//! steps, memory, verdict, status), checkout, recovery and operations.

use std::sync::{Arc, PoisonError, RwLock};

use cairn::memory::MemoryConfig;
use cairn::{
    Durability, EffectClass, Policy, Role, Session, Source, ToolOutput, ToolRunner, decode_input,
};
use pyo3::prelude::*;
use serde_json::{Map, Value, json};

use crate::convert::{effect, message, record_value, to_json, to_py, tool_output};
use crate::errors::{PyResultExt as _, ToPy as _, bad_input, closed};
use crate::operation::PyOperation;

/// What an append wrote: the record's `seq`, and the entry's `id` (`None`
/// for an operation record).
#[pyclass(module = "cairn", name = "Appended", frozen, get_all)]
#[derive(Clone)]
pub struct PyAppended {
    /// The record's position in the session.
    pub seq: u64,
    /// The entry's id.
    pub id: Option<String>,
}

#[pymethods]
impl PyAppended {
    fn __repr__(&self) -> String {
        match &self.id {
            Some(id) => format!("Appended(seq={}, id={id:?})", self.seq),
            None => format!("Appended(seq={}, id=None)", self.seq),
        }
    }
}

impl From<cairn::Appended> for PyAppended {
    fn from(a: cairn::Appended) -> PyAppended {
        PyAppended {
            seq: a.seq,
            id: a.id.map(|i| i.to_string()),
        }
    }
}

/// An open session. Thread-safe: appends from several threads are
/// serialized by the session; reads never wait for a sync.
#[pyclass(module = "cairn", name = "Session", frozen)]
pub struct PySession {
    inner: RwLock<Option<Arc<Session>>>,
    id: String,
}

impl PySession {
    pub(crate) fn new(s: Session) -> PySession {
        PySession {
            id: s.id().to_string(),
            inner: RwLock::new(Some(Arc::new(s))),
        }
    }

    pub(crate) fn inner(&self) -> PyResult<Arc<Session>> {
        self.inner
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(closed)
    }

    /// Appends one input record `{kind, data, id?, parent?}` through the
    /// core's decoder, as `cairn append` does.
    fn append_value(&self, py: Python<'_>, line: &Value) -> PyResult<PyAppended> {
        let s = self.inner()?;
        let text = line.to_string();
        let appended = py.detach(|| -> PyResult<cairn::Appended> {
            s.append_input(decode_input(&text).py()?).py()
        })?;
        Ok(appended.into())
    }
}

/// A Python object with `effect(tool) -> str` and
/// `run(call_id, tool, arguments, key) -> output` run by recovery.
struct PyRunner {
    runner: Py<PyAny>,
}

impl ToolRunner for PyRunner {
    fn effect(&self, tool: &str) -> EffectClass {
        Python::attach(|py| {
            self.runner
                .call_method1(py, "effect", (tool,))
                .and_then(|e| effect(&e.extract::<String>(py)?))
                // A runner that cannot say is treated as the unsafe class:
                // recovery never re-runs it without a person.
                .unwrap_or(EffectClass::SideEffect)
        })
    }

    fn run(&mut self, call_id: &str, tool: &str, arguments: &Value, key: &str) -> ToolOutput {
        Python::attach(|py| {
            let out = to_py(py, arguments).and_then(|args| {
                self.runner
                    .call_method1(py, "run", (call_id, tool, args, key))
            });
            match out.and_then(|o| tool_output(o.bind(py), false)) {
                Ok(o) => o,
                Err(e) => ToolOutput::error(format!("the tool failed: {e}")),
            }
        })
    }
}

#[pymethods]
impl PySession {
    /// The session's id (also once closed).
    #[getter]
    fn id(&self) -> &str {
        &self.id
    }

    /// Where the session is stored (its file, or its database row).
    #[getter]
    fn location(&self) -> PyResult<String> {
        Ok(self.inner()?.location().to_owned())
    }

    /// Whether this handle is the session's writer.
    #[getter]
    fn is_writer(&self) -> PyResult<bool> {
        Ok(self.inner()?.is_writer())
    }

    /// The header record's data.
    #[getter]
    fn header<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, self.inner()?.header())
    }

    /// The title (the last `session_info` title, else the header's).
    #[getter]
    fn title(&self) -> PyResult<Option<String>> {
        Ok(self.inner()?.title())
    }

    /// The leaf entry's id (`None` before the first entry).
    #[getter]
    fn leaf(&self) -> PyResult<Option<String>> {
        Ok(self.inner()?.leaf().map(|i| i.to_string()))
    }

    /// The number of records (the header included).
    fn __len__(&self) -> PyResult<usize> {
        Ok(usize::try_from(self.inner()?.len()).unwrap_or(usize::MAX))
    }

    /// `"sync"` (every append fsynced: the default), `"group"` (group
    /// commit, same guarantee) or `"buffered"` (survives a process crash,
    /// not a power loss, until `sync()`).
    #[getter]
    fn get_durability(&self) -> PyResult<String> {
        Ok(self.inner()?.durability().as_str().to_owned())
    }

    #[setter]
    fn set_durability(&self, value: &str) -> PyResult<()> {
        let d: Durability = value.parse().map_err(bad_input)?;
        self.inner()?.set_durability(d);
        Ok(())
    }

    /// Appends a record of `kind` with `data` (as `docs/FORMAT.md` writes
    /// it). Entries go at the leaf, or under `parent` (an entry id, unique
    /// prefix or label), or start a new root (`root=True`); `id` chooses the
    /// entry's id. Returns what was written; nothing is written when the
    /// record is refused (`InputError`, `InvalidEntry`).
    #[pyo3(signature = (kind, data, *, id=None, parent=None, root=false))]
    fn append(
        &self,
        py: Python<'_>,
        kind: &str,
        data: &Bound<'_, PyAny>,
        id: Option<&str>,
        parent: Option<&str>,
        root: bool,
    ) -> PyResult<PyAppended> {
        if root && parent.is_some() {
            return Err(bad_input("give parent or root=True, not both"));
        }
        let mut line = Map::new();
        line.insert("kind".into(), Value::from(kind));
        line.insert("data".into(), to_json(data)?);
        if let Some(id) = id {
            line.insert("id".into(), Value::from(id));
        }
        if let Some(p) = parent {
            line.insert("parent".into(), Value::from(p));
        } else if root {
            line.insert("parent".into(), Value::Null);
        }
        self.append_value(py, &Value::Object(line))
    }

    /// Appends a message: a `str` is one text block of `role`; a dict is
    /// message data.
    #[pyo3(signature = (message, role="user"))]
    fn add_message(
        &self,
        py: Python<'_>,
        message: &Bound<'_, PyAny>,
        role: &str,
    ) -> PyResult<PyAppended> {
        let role: Role = serde_json::from_value(Value::from(role)).map_err(|_| {
            bad_input(format!(
                "unknown role {role:?}: use user, assistant, tool, system or developer"
            ))
        })?;
        let m = crate::convert::message(message, role)?;
        let data = serde_json::to_value(m).map_err(|e| bad_input(e.to_string()))?;
        self.append_value(py, &json!({"kind": "message", "data": data}))
    }

    /// Replaces the application state.
    fn set_state(&self, py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<PyAppended> {
        let v = to_json(value)?;
        self.append_value(py, &json!({"kind": "app_state", "data": {"set": v}}))
    }

    /// Applies a JSON merge patch (RFC 7386) to the application state.
    fn patch_state(&self, py: Python<'_>, patch: &Bound<'_, PyAny>) -> PyResult<PyAppended> {
        let v = to_json(patch)?;
        self.append_value(py, &json!({"kind": "app_state", "data": {"patch": v}}))
    }

    /// Appends a `custom` entry owned by `namespace`; `visible=True` shows
    /// its content to the model as a user message.
    #[pyo3(signature = (namespace, content, *, visible=false))]
    fn add_custom(
        &self,
        py: Python<'_>,
        namespace: &str,
        content: &Bound<'_, PyAny>,
        visible: bool,
    ) -> PyResult<PyAppended> {
        let c = to_json(content)?;
        let data = json!({"namespace": namespace, "visible": visible, "content": c});
        self.append_value(py, &json!({"kind": "custom", "data": data}))
    }

    /// The context at the leaf: `{leaf, messages: [{entry, source,
    /// message}], app_state, settings, labels, compaction}`. Raises
    /// `ReadError` when a message the open left unread cannot be read back
    /// (the file changed or was damaged since).
    fn context<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let ctx = self.inner()?.context();
        let mut messages: Vec<Value> = Vec::with_capacity(ctx.messages().len());
        for m in ctx.messages() {
            let source = match m.source() {
                Source::Message => "message".to_owned(),
                Source::CompactionSummary => "compaction_summary".to_owned(),
                Source::CheckoutSummary => "checkout_summary".to_owned(),
                Source::Custom(ns) => format!("custom:{ns}"),
                _ => "other".to_owned(),
            };
            let message = m.message().py()?;
            messages
                .push(json!({"entry": m.entry().as_str(), "source": source, "message": message}));
        }
        let compaction = ctx
            .compaction()
            .map(|c| json!({"entry": c.entry.as_str(), "summary": c.summary}));
        let v = json!({
            "leaf": ctx.leaf().map(|l| l.as_str()),
            "messages": messages,
            "app_state": ctx.app_state(),
            "settings": ctx.settings(),
            "labels": ctx.labels(),
            "compaction": compaction,
        });
        to_py(py, &v)
    }

    /// The application state at the leaf.
    #[getter]
    fn app_state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, self.inner()?.context().app_state())
    }

    /// The labels: `{name: entry id}`.
    #[getter]
    fn labels<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.inner()?.labels())
    }

    /// Every entry of the tree, in `seq` order: `[{id, parent, seq, kind}]`.
    fn tree<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let nodes: Vec<Value> = self
            .inner()?
            .nodes()
            .into_iter()
            .map(|n| {
                json!({"id": n.id.as_str(), "parent": n.parent.as_ref().map(|p| p.as_str()),
                       "seq": n.seq, "kind": n.kind})
            })
            .collect();
        to_py(py, &nodes)
    }

    /// The ids of the branch, root first.
    fn branch(&self) -> PyResult<Vec<String>> {
        Ok(self
            .inner()?
            .branch()
            .iter()
            .map(ToString::to_string)
            .collect())
    }

    /// The children of an entry (of the roots when `None`).
    #[pyo3(signature = (of=None))]
    fn children(&self, of: Option<&str>) -> PyResult<Vec<String>> {
        let s = self.inner()?;
        let of = of.map(|q| s.resolve(q)).transpose().py()?;
        Ok(s.children(of.as_ref())
            .iter()
            .map(ToString::to_string)
            .collect())
    }

    /// The entry id an id, unique prefix or label names.
    fn resolve(&self, query: &str) -> PyResult<String> {
        Ok(self.inner()?.resolve(query).py()?.to_string())
    }

    /// Record `seq` as stored: `{seq, ts, kind, [id, parent], data}`.
    fn record<'py>(&self, py: Python<'py>, seq: u64) -> PyResult<Bound<'py, PyAny>> {
        let s = self.inner()?;
        let line = py.detach(|| s.raw_record(seq)).py()?;
        let v = record_value(&line).map_err(crate::errors::ReadError::new_err)?;
        to_py(py, &v)
    }

    /// Every record from `start` on, as `record()` gives them.
    #[pyo3(signature = (start=0))]
    fn records<'py>(&self, py: Python<'py>, start: u64) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let s = self.inner()?;
        let lines = py
            .detach(|| {
                (start..s.len())
                    .map(|q| s.raw_record(q))
                    .collect::<Result<Vec<_>, _>>()
            })
            .py()?;
        lines
            .iter()
            .map(|l| {
                let v = record_value(l).map_err(crate::errors::ReadError::new_err)?;
                to_py(py, &v)
            })
            .collect()
    }

    /// The entry an id, prefix or label names, as `record()` gives it.
    fn entry<'py>(&self, py: Python<'py>, query: &str) -> PyResult<Bound<'py, PyAny>> {
        let s = self.inner()?;
        let id = s.resolve(query).py()?;
        let seq = s
            .nodes()
            .into_iter()
            .find(|n| n.id == id)
            .map(|n| n.seq)
            .ok_or_else(|| crate::errors::EntryNotFound::new_err(format!("no entry {id}")))?;
        self.record(py, seq)
    }

    /// Moves the leaf to `target` (an id, prefix or label; `None`: before
    /// the first entry), recording a `checkout` entry with an optional
    /// summary of the branch left.
    #[pyo3(signature = (target, summary=None))]
    fn checkout(
        &self,
        py: Python<'_>,
        target: Option<&str>,
        summary: Option<String>,
    ) -> PyResult<Option<PyAppended>> {
        let s = self.inner()?;
        let target = target.map(|q| s.resolve(q)).transpose().py()?;
        let out = py.detach(|| s.checkout(target.as_ref(), summary)).py()?;
        Ok(out.map(Into::into))
    }

    /// Points label `name` at `target` (an id, prefix or label), or removes
    /// it (`None`).
    #[pyo3(signature = (name, target))]
    fn label(&self, py: Python<'_>, name: &str, target: Option<&str>) -> PyResult<PyAppended> {
        let s = self.inner()?;
        let target = target.map(|q| s.resolve(q)).transpose().py()?;
        Ok(py.detach(|| s.label(name, target.as_ref())).py()?.into())
    }

    /// The numbered steps of the session's operations (dicts).
    fn steps<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let s = self.inner()?;
        let steps = py.detach(|| s.steps()).py()?;
        to_py(py, &steps)
    }

    /// The session memory derived from the branch: its sections and its
    /// rendering (`text`). Enabling memory reads the branch once.
    fn memory<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let s = self.inner()?;
        let mem = py.detach(|| -> PyResult<_> {
            if s.memory().is_none() {
                s.enable_memory(MemoryConfig::default()).py()?;
            }
            Ok(s.memory().unwrap_or_default())
        })?;
        let mut v = serde_json::to_value(&mem).map_err(|e| bad_input(e.to_string()))?;
        if let Some(o) = v.as_object_mut() {
            o.insert("text".into(), Value::from(mem.render()));
        }
        to_py(py, &v)
    }

    /// The recovery verdict: `{"verdict": name, "op": ..., ...}`. Raises
    /// `ReadError` when a message of the context cannot be read back.
    fn verdict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.inner()?.verdict().py()?)
    }

    /// The status as this handle sees it (see `Store.status` for other
    /// processes).
    fn status(&self) -> PyResult<&'static str> {
        Ok(self.inner()?.status().as_str())
    }

    /// Resolves the verdict with the core's recovery loop: re-runs safe
    /// calls (with `runner`), records unknown outcomes of side effects,
    /// closes calls that never started, denies interrupted approvals.
    /// `policy="close_all"` runs nothing. `runner` is an object with
    /// `effect(tool) -> str` and `run(call_id, tool, arguments, key)`.
    #[pyo3(signature = (*, policy="default", runner=None))]
    fn recover<'py>(
        &self,
        py: Python<'py>,
        policy: &str,
        runner: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let policy = match policy {
            "default" => Policy::default(),
            "close_all" => Policy::close_all(),
            other => {
                return Err(bad_input(format!(
                    "unknown policy {other:?}: use \"default\" or \"close_all\""
                )));
            }
        };
        let s = self.inner()?;
        let mut runner = runner.map(|runner| PyRunner { runner });
        let report = py
            .detach(|| {
                cairn::recover(
                    &s,
                    policy,
                    runner.as_mut().map(|r| r as &mut dyn ToolRunner),
                )
            })
            .map_err(|e| e.to_py())?;
        let v = json!({
            "before": report.before,
            "actions": report.actions,
            "after": report.after,
        });
        to_py(py, &v)
    }

    /// Starts an operation for `input` (a `str` user message, or message
    /// data), appended at the leaf first.
    fn start_operation(slf: &Bound<'_, Self>, input: &Bound<'_, PyAny>) -> PyResult<PyOperation> {
        let py = slf.py();
        let m = message(input, Role::User)?;
        let s = slf.get().inner()?;
        let id = py
            .detach(|| s.start_operation(m).map(|op| op.id().to_owned()))
            .py()?;
        Ok(PyOperation::new(slf.clone().unbind(), id))
    }

    /// The open operation, to continue it (resolve the verdict first), or
    /// `None`.
    fn resume_operation(slf: &Bound<'_, Self>) -> PyResult<Option<PyOperation>> {
        let s = slf.get().inner()?;
        let id = s.resume_operation().map(|op| op.id().to_owned());
        Ok(id.map(|id| PyOperation::new(slf.clone().unbind(), id)))
    }

    /// Makes every appended record durable (for `"buffered"`).
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        let s = self.inner()?;
        py.detach(|| s.sync()).py()
    }

    /// Closes the handle (a writer releases the session). Later calls, and
    /// calls on its operations and tickets, raise `ClosedError`. A call
    /// running in another thread finishes first.
    fn close(&self) {
        self.inner
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close();
        false
    }

    fn __repr__(&self) -> String {
        match self.inner() {
            Ok(s) => format!(
                "cairn.Session({:?}, writer={})",
                s.id().as_str(),
                if s.is_writer() { "True" } else { "False" }
            ),
            Err(_) => "cairn.Session(closed)".to_owned(),
        }
    }
}
