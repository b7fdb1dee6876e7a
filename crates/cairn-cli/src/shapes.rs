//! The JSON shapes printed by `--json` and `export --format json`: the same
//! shapes the HTTP API answers with, so they are defined once, in
//! `cairn_server::shapes`. They are part of the CLI's stable interface:
//! documented in the crate README, fields only ever added.

pub use cairn_server::shapes::{
    ContextShape, ContextStreamShape, TreeShape, context, record, session, source_name,
};
