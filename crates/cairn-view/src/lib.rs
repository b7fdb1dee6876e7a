//! cairn-view: how a cairn session is shown, shared by every surface that
//! shows one (the `cairn` CLI, the agent's REPL and demo, the HTTP server).
//!
//! - [`describe`]: one-line descriptions of entries, blocks and steps;
//! - [`tree`]: a session's tree ([`tree::TreeView`]) and its drawings;
//! - [`term`]: the terminal sanitiser (the one rule for untrusted text) and
//!   the styles of output;
//! - [`shapes`]: the JSON shapes of sessions, contexts, trees and records,
//!   what the CLI's `--json` prints and the HTTP API answers.
//!
//! It depends on the core and serde only: no database driver, no HTTP.

pub mod describe;
mod error;
pub mod schema;
pub mod shapes;
pub mod term;
pub mod tree;

pub use error::ViewError;
