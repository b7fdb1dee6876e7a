//! Values between Python and the core: JSON values both ways (through
//! `pythonize`), a stored record as the dict of its frame, and the core's
//! typed inputs (messages, tool output, effect classes, outcomes) decoded
//! by the core's own rules.

use cairn::{Block, EffectClass, Message, Outcome, Payload, Role, ToolOutput, decode_data};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};
use pythonize::{depythonize, pythonize};
use serde::Serialize;
use serde_json::Value;

use crate::errors::{PyResultExt as _, bad_input};

/// A Python value as JSON (dicts, lists, str, int, float, bool, None).
pub(crate) fn to_json(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    depythonize::<Value>(obj).map_err(|e| {
        bad_input(format!(
            "cannot store {}: {e} (cairn stores JSON: dict, list, str, int, float, bool, None)",
            obj.get_type()
                .name()
                .map_or_else(|_| "this value".to_owned(), |n| n.to_string())
        ))
    })
}

/// Any serializable core value as a Python object.
pub(crate) fn to_py<'py, T: Serialize + ?Sized>(
    py: Python<'py>,
    v: &T,
) -> PyResult<Bound<'py, PyAny>> {
    Ok(pythonize(py, v)?)
}

/// A stored line as `{seq, ts, kind, [ignorable], [id, parent], data}`:
/// the frame's members as written, less the checksum.
pub(crate) fn record_value(line: &[u8]) -> Result<Value, String> {
    let mut v: serde_json::Map<String, Value> =
        serde_json::from_slice(line).map_err(|e| format!("stored line does not parse: {e}"))?;
    v.remove("crc");
    Ok(Value::Object(v))
}

/// A name the core spells in snake case (effect classes, outcomes), read by
/// the core's own serde rule.
fn named<T: serde::de::DeserializeOwned>(what: &str, name: &str, choices: &str) -> PyResult<T> {
    serde_json::from_value(Value::String(name.to_owned()))
        .map_err(|_| bad_input(format!("unknown {what} {name:?}: use one of {choices}")))
}

pub(crate) fn effect(name: &str) -> PyResult<EffectClass> {
    named(
        "effect class",
        name,
        "\"read_only\", \"idempotent\", \"side_effect\"",
    )
}

pub(crate) fn outcome(name: &str) -> PyResult<Outcome> {
    named(
        "outcome",
        name,
        "\"completed\", \"failed\", \"aborted\", \"max_steps\"",
    )
}

pub(crate) fn effect_name(e: EffectClass) -> &'static str {
    match e {
        EffectClass::ReadOnly => "read_only",
        EffectClass::Idempotent => "idempotent",
        EffectClass::SideEffect => "side_effect",
    }
}

/// A message: a `str` is a user message of one text block; a dict is
/// message data as `docs/FORMAT.md` §4 writes it, decoded by the core.
pub(crate) fn message(obj: &Bound<'_, PyAny>, default_role: Role) -> PyResult<Message> {
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Message::text(default_role, s.to_cow()?.into_owned()));
    }
    let data = to_json(obj)?;
    let bytes = serde_json::to_vec(&data).map_err(|e| bad_input(e.to_string()))?;
    match decode_data("message", false, &bytes).py()? {
        Payload::Entry(cairn::EntryBody::Message(m)) => Ok(m),
        _ => Err(bad_input("a message must be message data")),
    }
}

/// A tool's output: a `str` (one text block), a list of blocks, or a dict
/// `{"content": [blocks], "is_error": bool, "code": str}`.
pub(crate) fn tool_output(obj: &Bound<'_, PyAny>, is_error: bool) -> PyResult<ToolOutput> {
    if let Ok(s) = obj.cast::<PyString>() {
        let text = s.to_cow()?.into_owned();
        return Ok(if is_error {
            ToolOutput::error(text)
        } else {
            ToolOutput::text(text)
        });
    }
    let blocks = |v: Value| -> PyResult<Vec<Block>> {
        serde_json::from_value(v).map_err(|e| {
            bad_input(format!(
                "tool output blocks: {e} (use {{\"type\": \"text\", \"text\": ...}}, image or blob blocks)"
            ))
        })
    };
    if obj.cast::<PyList>().is_ok() {
        return Ok(ToolOutput {
            content: blocks(to_json(obj)?)?,
            is_error,
            code: None,
        });
    }
    let mut v = to_json(obj)?;
    let Some(map) = v.as_object_mut() else {
        return Err(bad_input(
            "tool output must be a str, a list of blocks, or {\"content\": [...], \"is_error\": bool, \"code\": str}",
        ));
    };
    let content = blocks(map.remove("content").unwrap_or(Value::Array(Vec::new())))?;
    let is_error = match map.remove("is_error") {
        None | Some(Value::Null) => is_error,
        Some(Value::Bool(b)) => b,
        Some(other) => return Err(bad_input(format!("is_error must be a bool, not {other}"))),
    };
    let code = match map.remove("code") {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) => Some(c),
        Some(other) => return Err(bad_input(format!("code must be a str, not {other}"))),
    };
    if let Some(k) = map.keys().next() {
        return Err(bad_input(format!(
            "tool output has an unknown member {k:?}: use content, is_error, code"
        )));
    }
    Ok(ToolOutput {
        content,
        is_error,
        code,
    })
}
