//! The writer lease as every SQL backend stores it, and its takeover rule:
//! a lease *holds* — keeps every other writer out — while it has not
//! expired (where the database's leases expire: Postgres) and its holder
//! is not known to be dead ([`Holder::liveness`]). An opener for writing
//! is refused a lease that holds ([`Lease::in_use`]); an operator breaks
//! one by [`Takeover`]. Safety never rests on this rule: every append
//! carries the lease's fencing token, and a writer whose lease was broken
//! has its next append refused.

use cairn::{OpenError, SessionId};

use crate::holder::{Holder, Liveness};

/// A session's writer lease as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The fencing token: appends must carry it.
    pub token: i64,
    /// The holder.
    pub holder: Holder,
    /// When it was acquired (RFC 3339).
    pub acquired: String,
    /// When it expires unless renewed (RFC 3339, the database's clock), in
    /// a database whose leases expire (Postgres); `None` where a lease
    /// lasts until it is released or its holder dies (SQLite).
    pub expires: Option<String>,
    /// Whether it had expired when read (by the database's clock).
    pub expired: bool,
    /// When its holder last appended (RFC 3339), where the database keeps
    /// it (SQLite: to within 10 s); `None` elsewhere.
    pub heartbeat: Option<String>,
}

impl Lease {
    /// Whether it keeps other writers out: unexpired, and its holder not
    /// known to be dead.
    pub fn holds(&self) -> bool {
        !self.expired && self.holder.liveness() != Liveness::Dead
    }

    /// The error of an opener of session `id` refused by this lease.
    pub fn in_use(&self, id: &SessionId) -> OpenError {
        OpenError::InUse {
            session: id.to_string(),
            holder: Some(self.holder.pid),
        }
    }
}

/// When an operator's break of a lease (`break_lease` of each backend)
/// goes ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takeover {
    /// Only a lease that no longer holds (see [`Lease::holds`]: expired, or
    /// its holder known to be dead); one that holds is left alone and the
    /// break refused.
    IfAbandoned,
    /// Whatever the holder's state, on the operator's word: a holder that
    /// still runs is fenced (its next append fails).
    Force,
}

impl Takeover {
    /// Breaks `held` if this rule lets it, else the opener's refusal
    /// ([`Lease::in_use`]) for session `id`.
    ///
    /// # Errors
    ///
    /// [`OpenError::InUse`] when the rule is [`Takeover::IfAbandoned`] and
    /// `held` still holds.
    pub fn check(self, id: &SessionId, held: &Lease) -> Result<(), OpenError> {
        match self {
            Takeover::IfAbandoned if held.holds() => Err(held.in_use(id)),
            Takeover::IfAbandoned | Takeover::Force => Ok(()),
        }
    }
}
