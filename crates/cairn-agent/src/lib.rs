//! cairn-agent: the reference agent on cairn.
//!
//! An agent loop that drives cairn's operation API ([`agent`]), providers
//! behind one trait ([`provider`]: OpenAI-compatible Chat Completions with
//! streaming, and a scripted provider for offline runs), tools with
//! declared effect classes ([`tools`]), recovery on resume ([`recovery`]),
//! compaction ([`compaction`]), Ctrl-C handling ([`interrupt`]), a REPL
//! ([`repl`]) and `cairn demo` ([`demo`]). The caller opens the store (a
//! directory, SQLite, Postgres) and hands it over as an [`OpenedStore`]
//! ([`store`]): the agent links no database driver.
//!
//! Entry points for the `cairn` binary:
//! - [`run`] with [`AgentOptions`] (or [`AgentArgs`], a `clap::Args`) for
//!   `cairn agent`;
//! - [`demo::run`] for `cairn demo`;
//! - [`child::run_if_requested`] with an [`Opener`], to be called first in
//!   `main`: the demo re-executes the binary to run its crash steps in a
//!   child process, which opens the demo's store again.

pub mod agent;
mod app;
pub mod child;
pub mod compaction;
pub mod delegate;
pub mod demo;
pub mod fence;
pub mod interrupt;
pub mod observer;
pub mod prompt;
pub mod provider;
pub mod recovery;
pub mod repl;
pub mod resumed;
pub mod running;
pub mod runtime;
mod snapshot;
pub mod store;
pub mod storyboard;
pub mod stream;
pub mod tools;
pub mod trace;

pub use agent::{Agent, Resumed, TurnEnd};
pub use app::{ACKS_ENV, AgentArgs, AgentOptions, DEFAULT_MODEL, run};
pub use demo::{DemoOptions, DemoReport};
pub use runtime::{AgentConfig, OnRunning, OnUnknown, Runtime};
pub use store::{OpenedStore, Opener};
