//! Python bindings for cairn: the extension module `cairn._native`, which
//! the `cairn` Python package re-exports (`python/cairn/__init__.py`).
//!
//! Every call that touches storage releases the GIL (`Python::detach`) for
//! its I/O, so other Python threads run while a record is fsynced. The
//! classes are `frozen` and `Sync`: a `Store`, a `Session` or an
//! `Operation` may be shared between Python threads; a session's appends
//! are serialized by the core's own lock, as in Rust.
//!
//! The Python-facing shapes (dicts of records, contexts, verdicts) are the
//! core's serde forms, converted with `pythonize`; data going in is decoded
//! by the core's one decoder (`cairn::decode_input`, `cairn::decode_data`),
//! so Python cannot write anything `cairn append` would refuse.

mod convert;
mod errors;
mod operation;
mod session;
mod store;

use pyo3::prelude::*;

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<store::PyStore>()?;
    m.add_class::<session::PySession>()?;
    m.add_class::<session::PyAppended>()?;
    m.add_class::<operation::PyOperation>()?;
    m.add_class::<operation::PyModelTicket>()?;
    m.add_class::<operation::PyToolTicket>()?;
    errors::register(m)?;
    m.add("WRITER", cairn::WRITER)?;
    m.add("FORMAT_VERSION", cairn::FORMAT_VERSION)?;
    Ok(())
}
