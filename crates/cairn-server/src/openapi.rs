//! The OpenAPI 3.1 document of the API, served at `/openapi.json`.

use serde_json::{Value, json};

/// The document.
pub fn document() -> Value {
    json!({"openapi": "3.1.0", "info": {"title": "cairn", "version": env!("CARGO_PKG_VERSION")}, "paths": {}})
}
