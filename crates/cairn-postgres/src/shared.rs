//! What a Postgres backend and its open logs share: the store's URL, the
//! connection pool and the statements of the hot paths with the schema's
//! name filled in.

use crate::config::PgUrl;
use crate::lease;
use crate::pool::Pool;

/// The statements used on hot paths, with the schema's name filled in.
#[derive(Debug)]
pub(crate) struct Sql {
    pub append: String,
    pub append_one: String,
    pub read_ahead: String,
    pub scan: String,
    pub scan_from: String,
    pub row: String,
    pub renew: String,
    pub release: String,
    pub lease_of: String,
    pub sid: String,
    pub summary: String,
}

impl Sql {
    pub(crate) fn new(s: &str) -> Sql {
        Sql {
            // The schema's append function (migration 2): the fence and the
            // summary update lock the session's row; the records are
            // inserted only if it was updated. One call: one round trip, one
            // transaction.
            append: format!(
                "SELECT {s}.append($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14,
                                   $15, $16, $17, $18)"
            ),
            // The same for a single record, with plain parameters (migration 3).
            append_one: format!(
                "SELECT {s}.append_one($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,
                                       $14, $15, $16, $17, $18)"
            ),
            // Records $2 ≤ seq < $3, stopping after the one that reaches $4
            // bytes (at least one).
            read_ahead: format!(
                "SELECT seq, payload FROM (
                    SELECT seq, payload,
                           sum(octet_length(payload)) OVER (ORDER BY seq)
                               - octet_length(payload) AS before
                      FROM {s}.records WHERE session = $1 AND seq >= $2 AND seq < $3
                 ) w WHERE before < $4 ORDER BY seq"
            ),
            scan: format!("SELECT seq, payload FROM {s}.records WHERE session = $1 ORDER BY seq"),
            scan_from: format!(
                "SELECT seq, payload FROM {s}.records WHERE session = $1 AND seq >= $2
                  ORDER BY seq"
            ),
            row: format!("SELECT payload FROM {s}.records WHERE session = $1 AND seq = $2"),
            renew: lease::renew_sql(s),
            release: lease::release_sql(s),
            lease_of: format!(
                "SELECT {}, records FROM {s}.sessions WHERE sid = $1",
                lease::COLUMNS
            ),
            sid: format!("SELECT sid FROM {s}.sessions WHERE id = $1"),
            summary: format!(
                "SELECT updated, title, first_message, op_state, entries, records, bytes
                   FROM {s}.sessions WHERE sid = $1"
            ),
        }
    }
}

/// What the backend and its open logs share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub url: PgUrl,
    pub pool: Pool,
    pub sql: Sql,
}
