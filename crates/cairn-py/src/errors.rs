//! The Python exceptions, one per family of the core's errors (and a
//! subclass where a caller is expected to catch one case: a session held
//! by another writer, a refused entry, a missing session or entry). The
//! message is the core's with its causes (`cairn::with_causes`), which
//! already says what to do.

use cairn::{DecodeError, LookupError, StoreError, with_causes};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(cairn, CairnError, PyException, "Every error cairn raises.");
create_exception!(
    cairn,
    OpenError,
    CairnError,
    "A session could not be created or opened."
);
create_exception!(
    cairn,
    SessionNotFound,
    OpenError,
    "No session by that id or prefix."
);
create_exception!(
    cairn,
    SessionExists,
    OpenError,
    "A session with that id already exists."
);
create_exception!(
    cairn,
    SessionInUse,
    OpenError,
    "Another writer (another process, or another handle) holds the session."
);
create_exception!(
    cairn,
    DamagedError,
    OpenError,
    "The session is damaged somewhere other than a torn tail; nothing was changed."
);
create_exception!(
    cairn,
    NewerFormatError,
    OpenError,
    "The session was written by a newer cairn."
);
create_exception!(cairn, AppendError, CairnError, "An append was not written.");
create_exception!(
    cairn,
    InvalidEntry,
    AppendError,
    "The append breaks an invariant of the log; nothing was written."
);
create_exception!(
    cairn,
    ReadOnlyError,
    AppendError,
    "The session is open read-only."
);
create_exception!(
    cairn,
    PoisonedError,
    AppendError,
    "An earlier write or sync failed; reopen the session."
);
create_exception!(cairn, ReadError, CairnError, "A record could not be read.");
create_exception!(
    cairn,
    InputError,
    CairnError,
    "Data given to cairn does not fit its record kind; nothing was written."
);
create_exception!(
    cairn,
    EntryNotFound,
    CairnError,
    "No entry, label or unique id prefix matches."
);
create_exception!(cairn, RecoveryError, CairnError, "Recovery stopped.");
create_exception!(cairn, ClosedError, CairnError, "The session was closed.");

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("CairnError", py.get_type::<CairnError>())?;
    m.add("OpenError", py.get_type::<OpenError>())?;
    m.add("SessionNotFound", py.get_type::<SessionNotFound>())?;
    m.add("SessionExists", py.get_type::<SessionExists>())?;
    m.add("SessionInUse", py.get_type::<SessionInUse>())?;
    m.add("DamagedError", py.get_type::<DamagedError>())?;
    m.add("NewerFormatError", py.get_type::<NewerFormatError>())?;
    m.add("AppendError", py.get_type::<AppendError>())?;
    m.add("InvalidEntry", py.get_type::<InvalidEntry>())?;
    m.add("ReadOnlyError", py.get_type::<ReadOnlyError>())?;
    m.add("PoisonedError", py.get_type::<PoisonedError>())?;
    m.add("ReadError", py.get_type::<ReadError>())?;
    m.add("InputError", py.get_type::<InputError>())?;
    m.add("EntryNotFound", py.get_type::<EntryNotFound>())?;
    m.add("RecoveryError", py.get_type::<RecoveryError>())?;
    m.add("ClosedError", py.get_type::<ClosedError>())?;
    Ok(())
}

/// Conversion of a core error into the Python exception of its family.
pub(crate) trait ToPy {
    fn to_py(&self) -> PyErr;
}

fn msg(e: &dyn std::error::Error) -> String {
    with_causes(e)
}

/// Errors that are one Python exception whatever their variant.
macro_rules! one_class {
    ($($core:ty => $exc:ident),* $(,)?) => {$(
        impl ToPy for $core {
            fn to_py(&self) -> PyErr {
                $exc::new_err(msg(self))
            }
        }
    )*};
}

one_class! {
    cairn::ReadError => ReadError,
    LookupError => EntryNotFound,
    cairn::InputError => InputError,
    DecodeError => InputError,
    cairn::InvalidId => InputError,
}

impl ToPy for cairn::OpenError {
    fn to_py(&self) -> PyErr {
        let m = msg(self);
        match self {
            cairn::OpenError::NotFound { .. } => SessionNotFound::new_err(m),
            cairn::OpenError::AlreadyExists { .. } => SessionExists::new_err(m),
            cairn::OpenError::InUse { .. } => SessionInUse::new_err(m),
            cairn::OpenError::Damaged(_) => DamagedError::new_err(m),
            cairn::OpenError::NewerFormat { .. } => NewerFormatError::new_err(m),
            _ => OpenError::new_err(m),
        }
    }
}

impl ToPy for cairn::AppendError {
    fn to_py(&self) -> PyErr {
        let m = msg(self);
        match self {
            cairn::AppendError::Invalid(_) => InvalidEntry::new_err(m),
            cairn::AppendError::ReadOnly { .. } => ReadOnlyError::new_err(m),
            cairn::AppendError::Poisoned { .. } => PoisonedError::new_err(m),
            cairn::AppendError::Read(r) => r.to_py(),
            _ => AppendError::new_err(m),
        }
    }
}

impl ToPy for StoreError {
    fn to_py(&self) -> PyErr {
        match self {
            StoreError::NoSuchSession { .. }
            | StoreError::Ambiguous { .. }
            | StoreError::Empty(_) => SessionNotFound::new_err(msg(self)),
            StoreError::Open(e) => e.to_py(),
            StoreError::Append(e) => e.to_py(),
            StoreError::Read(e) => e.to_py(),
            StoreError::Lookup(e) => e.to_py(),
            _ => CairnError::new_err(msg(self)),
        }
    }
}

impl ToPy for cairn::RecoveryError {
    fn to_py(&self) -> PyErr {
        match self {
            cairn::RecoveryError::Append(e) => e.to_py(),
            _ => RecoveryError::new_err(msg(self)),
        }
    }
}

/// `result.map_err(ToPy::to_py)`, shorter.
pub(crate) trait PyResultExt<T> {
    fn py(self) -> PyResult<T>;
}

impl<T, E: ToPy> PyResultExt<T> for Result<T, E> {
    fn py(self) -> PyResult<T> {
        self.map_err(|e| e.to_py())
    }
}

/// An input error of the bindings' own (a value Python passed that no
/// record can hold), with what to pass instead.
pub(crate) fn bad_input(m: impl Into<String>) -> PyErr {
    InputError::new_err(m.into())
}

pub(crate) fn closed() -> PyErr {
    ClosedError::new_err("the session was closed; open it again with Store.open")
}
