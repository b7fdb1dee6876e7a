//! Every JSON answer the tests get is checked against the schema the
//! served OpenAPI document gives for its route and status: a handler that
//! answers a shape its type does not describe fails whichever test made
//! the request.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

/// The served document and the validators built from it.
pub struct Conformance {
    doc: Value,
    validators: Mutex<HashMap<String, Arc<jsonschema::Validator>>>,
    /// The operations (`METHOD template`) whose success answers were checked.
    answered: Mutex<BTreeSet<String>>,
}

impl Conformance {
    /// Checks against `doc`.
    pub fn new(doc: Value) -> Conformance {
        Conformance {
            doc,
            validators: Mutex::new(HashMap::new()),
            answered: Mutex::new(BTreeSet::new()),
        }
    }

    /// The document.
    pub fn doc(&self) -> &Value {
        &self.doc
    }

    /// The operations (`METHOD template`) a success answer of was checked.
    pub fn checked(&self) -> BTreeSet<String> {
        self.answered.lock().unwrap().clone()
    }

    /// Whether the answer `body` with `status` to `method path` is what the
    /// document says: `Ok` too for a path the document does not describe
    /// (the web view, routes tests add).
    ///
    /// # Errors
    ///
    /// What is wrong, naming the route, the status and the schema.
    pub fn check(&self, method: &str, path: &str, status: u16, body: &Value) -> Result<(), String> {
        let path = path.split('?').next().unwrap_or(path);
        let Some(template) = self.template(path) else {
            return Ok(());
        };
        let Some(op) = self.doc["paths"][&template].get(method.to_lowercase()) else {
            return Ok(());
        };
        let responses = &op["responses"];
        let code = status.to_string();
        let response = match responses.get(&code) {
            Some(r) => r,
            None => responses.get("default").ok_or_else(|| {
                format!("{method} {template} has no {status} answer in the document")
            })?,
        };
        let response = self.resolve(response);
        let Some(schema) = response
            .get("content")
            .and_then(|c| c.get("application/json"))
            .and_then(|c| c.get("schema"))
        else {
            return if body.is_null() {
                self.answered(method, &template, status);
                Ok(())
            } else {
                Err(format!(
                    "{method} {template} answered {status} with a body the document gives none: {body}"
                ))
            };
        };
        let key = format!("{method} {template} {code}");
        let validator = self.validator(&key, schema)?;
        validator.validate(body).map_err(|e| {
            format!(
                "{method} {template} answered {status} with a shape its schema does not describe: {e} (at {}); schema {schema}; body {body}",
                e.instance_path()
            )
        })?;
        self.answered(method, &template, status);
        Ok(())
    }

    fn answered(&self, method: &str, template: &str, status: u16) {
        if (200..300).contains(&status) {
            self.answered
                .lock()
                .unwrap()
                .insert(format!("{method} {template}"));
        }
    }

    /// The document's path template `path` matches, literal segments
    /// preferred over parameters.
    fn template(&self, path: &str) -> Option<String> {
        let segs: Vec<&str> = path.split('/').collect();
        let paths = self.doc["paths"].as_object()?;
        paths
            .keys()
            .filter_map(|t| {
                let ts: Vec<&str> = t.split('/').collect();
                if ts.len() != segs.len() {
                    return None;
                }
                let mut literal = 0;
                for (a, b) in ts.iter().zip(&segs) {
                    if a.starts_with('{') {
                        if b.is_empty() {
                            return None;
                        }
                    } else if a == b {
                        literal += 1;
                    } else {
                        return None;
                    }
                }
                Some((literal, t.clone()))
            })
            .max_by_key(|(n, _)| *n)
            .map(|(_, t)| t)
    }

    /// `v`, or what its `$ref` (within the document) points at.
    fn resolve<'a>(&'a self, v: &'a Value) -> &'a Value {
        match v.get("$ref").and_then(Value::as_str) {
            Some(r) => self
                .doc
                .pointer(r.trim_start_matches('#'))
                .unwrap_or(&Value::Null),
            None => v,
        }
    }

    fn validator(&self, key: &str, schema: &Value) -> Result<Arc<jsonschema::Validator>, String> {
        let mut cache = self.validators.lock().unwrap();
        if let Some(v) = cache.get(key) {
            return Ok(Arc::clone(v));
        }
        // The schema as the root, the document's components beside it so
        // that its `#/components/...` references resolve.
        let mut root = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "components": self.doc["components"].clone(),
        });
        if let (Some(r), Some(s)) = (root.as_object_mut(), schema.as_object()) {
            for (k, v) in s {
                r.insert(k.clone(), v.clone());
            }
        }
        let v = Arc::new(
            jsonschema::validator_for(&root)
                .map_err(|e| format!("the schema of {key} does not compile: {e}"))?,
        );
        cache.insert(key.to_owned(), Arc::clone(&v));
        Ok(v)
    }
}
