//! Argument validation against a tool's JSON schema, before T1: a call with
//! invalid arguments is answered with an error and never dispatched.
//!
//! The subset of JSON Schema the tools use, checked by hand: `type` (one or
//! a list; `integer` is a number with no fraction), `properties`,
//! `required`, `additionalProperties: false`, `enum`, `minimum`/`maximum`,
//! `minLength`/`maxLength`, `items`, `minItems`/`maxItems`. Other keywords
//! are ignored.

use serde_json::Value;

/// Checks `value` against `schema`; the error names the path (`$.panel`)
/// and what was wrong, for the model to fix its call.
///
/// # Errors
///
/// A message describing the first problem found.
pub fn validate(schema: &Value, value: &Value) -> Result<(), String> {
    check(schema, value, "$")
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn has_type(v: &Value, t: &str) -> bool {
    match t {
        "integer" => v.as_f64().is_some_and(|f| f.fract() == 0.0),
        "number" => v.is_number(),
        other => type_name(v) == other,
    }
}

fn check(schema: &Value, v: &Value, path: &str) -> Result<(), String> {
    let Some(s) = schema.as_object() else {
        return Ok(());
    };
    match s.get("type") {
        Some(Value::String(t)) if !has_type(v, t) => {
            return Err(format!("{path}: expected {t}, got {}", describe(v)));
        }
        Some(Value::Array(ts)) if !ts.iter().filter_map(Value::as_str).any(|t| has_type(v, t)) => {
            let names: Vec<&str> = ts.iter().filter_map(Value::as_str).collect();
            return Err(format!(
                "{path}: expected {}, got {}",
                names.join(" or "),
                describe(v)
            ));
        }
        _ => {}
    }
    if let Some(Value::Array(options)) = s.get("enum")
        && !options.contains(v)
    {
        let names: Vec<String> = options.iter().map(Value::to_string).collect();
        return Err(format!(
            "{path}: must be one of {}, got {v}",
            names.join(", ")
        ));
    }
    match v {
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(0.0);
            if let Some(min) = s.get("minimum").and_then(Value::as_f64)
                && x < min
            {
                return Err(format!("{path}: must be at least {min}, got {n}"));
            }
            if let Some(max) = s.get("maximum").and_then(Value::as_f64)
                && x > max
            {
                return Err(format!("{path}: must be at most {max}, got {n}"));
            }
        }
        Value::String(text) => {
            let len = text.chars().count() as u64;
            if let Some(min) = s.get("minLength").and_then(Value::as_u64)
                && len < min
            {
                return Err(format!("{path}: must have at least {min} characters"));
            }
            if let Some(max) = s.get("maxLength").and_then(Value::as_u64)
                && len > max
            {
                return Err(format!("{path}: must have at most {max} characters"));
            }
        }
        Value::Array(items) => {
            if let Some(min) = s.get("minItems").and_then(Value::as_u64)
                && (items.len() as u64) < min
            {
                return Err(format!("{path}: must have at least {min} items"));
            }
            if let Some(max) = s.get("maxItems").and_then(Value::as_u64)
                && (items.len() as u64) > max
            {
                return Err(format!("{path}: must have at most {max} items"));
            }
            if let Some(item_schema) = s.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check(item_schema, item, &format!("{path}[{i}]"))?;
                }
            }
        }
        Value::Object(map) => {
            if let Some(Value::Array(required)) = s.get("required") {
                for r in required.iter().filter_map(Value::as_str) {
                    if !map.contains_key(r) {
                        return Err(format!("{path}: missing required property `{r}`"));
                    }
                }
            }
            let props = s.get("properties").and_then(Value::as_object);
            for (k, x) in map {
                match props.and_then(|p| p.get(k)) {
                    Some(ps) => check(ps, x, &format!("{path}.{k}"))?,
                    None if s.get("additionalProperties") == Some(&Value::Bool(false)) => {
                        let known: Vec<&str> = props
                            .map(|p| p.keys().map(String::as_str).collect())
                            .unwrap_or_default();
                        return Err(format!(
                            "{path}: unknown property `{k}` (expected: {})",
                            known.join(", ")
                        ));
                    }
                    None => {}
                }
            }
        }
        Value::Null | Value::Bool(_) => {}
    }
    Ok(())
}

fn describe(v: &Value) -> String {
    match v {
        Value::String(s) => format!(
            "a string ({})",
            crate::provider::sse::cut(&format!("{s:?}"))
        ),
        other => type_name(other).to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "panel": {"type": "integer", "minimum": 1},
                "scene": {"type": "string", "minLength": 1},
                "tags": {"type": "array", "items": {"type": "string"}},
                "mode": {"enum": ["draft", "final"]},
                "skill": {"type": ["string", "null"]}
            },
            "required": ["panel", "scene"],
            "additionalProperties": false
        })
    }

    #[test]
    fn valid_arguments_pass() {
        validate(
            &schema(),
            &json!({"panel": 2, "scene": "x", "tags": ["a"], "mode": "final", "skill": null}),
        )
        .unwrap();
        validate(&schema(), &json!({"panel": 2.0, "scene": "x"})).unwrap();
    }

    #[test]
    fn each_problem_is_named_with_its_path() {
        let s = schema();
        let err = |v: Value| validate(&s, &v).unwrap_err();
        assert_eq!(
            err(json!({"scene": "x"})),
            "$: missing required property `panel`"
        );
        assert_eq!(
            err(json!({"panel": "2", "scene": "x"})),
            "$.panel: expected integer, got a string (\"2\")"
        );
        assert_eq!(
            err(json!({"panel": 0, "scene": "x"})),
            "$.panel: must be at least 1, got 0"
        );
        assert_eq!(
            err(json!({"panel": 1.5, "scene": "x"})),
            "$.panel: expected integer, got number"
        );
        assert!(
            err(json!({"panel": 1, "scene": "x", "tags": [1]}))
                .starts_with("$.tags[0]: expected string")
        );
        assert!(
            err(json!({"panel": 1, "scene": "x", "mode": "sketch"}))
                .starts_with("$.mode: must be one of")
        );
        assert!(
            err(json!({"panel": 1, "scene": "x", "extra": 1}))
                .starts_with("$: unknown property `extra`")
        );
        assert_eq!(
            err(json!("{not json")),
            "$: expected object, got a string (\"{not json\")"
        );
        assert!(err(json!({"panel": 1, "scene": "x", "skill": 3})).contains("string or null"));
    }
}
