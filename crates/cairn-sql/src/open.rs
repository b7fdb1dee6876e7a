//! The open path of every SQL backend, written once over [`SqlStore`]
//! (what each backend does with its dialect and driver): for a writer, the
//! lease; the session's summary (its size, and the columns a writer
//! continues from); a persisted index's prefix checked against the rows
//! ([`crate::stale_prefix`]); the rows after it scanned in `seq` order; then
//! the log handle. A stale prefix or any failure after the lease was taken
//! gives the lease back, so an open that did not open holds nothing.

use std::io;

use cairn::{
    Access, Backend, IndexedOpen, IndexedPrefix, IoFailure, Log, OpenError, Opened, Opening,
    SessionId, Visitor,
};

use crate::log::Writer;
use crate::scan::{Scan, Scanned, opened_whole, scan_from};
use crate::summary::Summary;

/// What a SQL backend does for [`open_from`], in its dialect through its
/// driver. A session is known by its key (`sid`) in the database.
pub trait SqlStore: Backend {
    /// What one open works through: a connection of its own (handed to the
    /// log handle at the end), or nothing where the backend has a pool.
    type Conn;

    /// The connection of one open of the session at `location`.
    ///
    /// # Errors
    ///
    /// [`OpenError::Io`] when the database cannot be reached.
    fn connect(&self, location: &str) -> Result<Self::Conn, OpenError>;

    /// Takes session `id`'s writer lease for this process: its key and the
    /// new fencing token.
    ///
    /// # Errors
    ///
    /// [`OpenError::NotFound`], [`OpenError::InUse`] when a lease holds
    /// ([`crate::Lease::in_use`]), or the database's errors.
    fn take_lease(
        &self,
        conn: &mut Self::Conn,
        id: &SessionId,
        location: &str,
    ) -> Result<(i64, i64), OpenError>;

    /// The key of session `id`, for a reader.
    ///
    /// # Errors
    ///
    /// [`OpenError::NotFound`], or the database's errors.
    fn find(&self, conn: &Self::Conn, id: &SessionId, location: &str) -> Result<i64, OpenError>;

    /// The session's summary as stored (a writer continues from it).
    ///
    /// # Errors
    ///
    /// The database failed.
    fn load_summary(&self, conn: &Self::Conn, sid: i64) -> io::Result<Summary>;

    /// Record `seq` of the session, if there is one.
    ///
    /// # Errors
    ///
    /// The database failed.
    fn row(&self, conn: &Self::Conn, sid: i64, seq: u64) -> io::Result<Option<Vec<u8>>>;

    /// Hands each of the session's rows from [`Scan::next_index`] on, in
    /// `seq` order, to [`Scan::row`] (which passes it on to `visit`).
    ///
    /// # Errors
    ///
    /// [`Scan::row`]'s, or the database's ([`Scan::failed`]).
    fn scan(
        &self,
        conn: &Self::Conn,
        sid: i64,
        scan: &mut Scan<'_>,
        visit: &mut Visitor<'_>,
    ) -> Result<(), OpenError>;

    /// Gives back the lease `token` of session `id` (key `sid`), if it
    /// still carries that token (best effort: the open is failing).
    fn release(&self, conn: &Self::Conn, sid: i64, id: &SessionId, token: i64);

    /// The log handle of session `id` (key `sid`) over `conn`, as `scanned`
    /// found it; `writer` for a writer.
    fn log(
        &self,
        location: String,
        conn: Self::Conn,
        sid: i64,
        id: &SessionId,
        scanned: Scanned,
        writer: Option<Writer>,
    ) -> Box<dyn Log>;
}

/// Opens session `id` of `store`, from the end of `prefix` when given (the
/// core's `IndexStore::open_from`): the lease for a writer, the prefix
/// checked against the rows, then the rows after it scanned. A stale
/// prefix or a failure gives the lease back.
///
/// # Errors
///
/// [`SqlStore`]'s, the scan's ([`OpenError::Damaged`],
/// [`OpenError::NotASession`]) and the visitor's.
pub fn open_from<S: SqlStore + ?Sized>(
    store: &S,
    id: &SessionId,
    access: Access,
    prefix: Option<IndexedPrefix>,
    visit: &mut Visitor<'_>,
) -> Result<IndexedOpen, OpenError> {
    let location = store.location(id);
    let mut conn = store.connect(&location)?;
    let (sid, token) = match access {
        Access::Write => {
            let (sid, token) = store.take_lease(&mut conn, id, &location)?;
            (sid, Some(token))
        }
        Access::Read => (store.find(&conn, id, &location)?, None),
    };
    // From here on a failure must give the lease back.
    let scanned = (|| -> Result<Result<_, String>, OpenError> {
        let err = |source| OpenError::Io(IoFailure::new("read", location.clone(), source));
        let summary = store.load_summary(&conn, sid).map_err(err)?;
        let size = (summary.fold.records, summary.bytes);
        let last_row = |n| store.row(&conn, sid, n).map_err(err);
        let mut scan = match scan_from(&location, prefix, size, last_row)? {
            Ok(scan) => scan,
            Err(why) => return Ok(Err(why)),
        };
        store.scan(&conn, sid, &mut scan, visit)?;
        let writer = token.map(|token| Writer { token, summary });
        Ok(Ok((scan.finish()?, writer)))
    })();
    let give_back = || {
        if let Some(token) = token {
            store.release(&conn, sid, id, token);
        }
    };
    match scanned {
        Ok(Ok((scanned, writer))) => Ok(IndexedOpen::Opened(Opened {
            log: store.log(location, conn, sid, id, scanned, writer),
            torn: None,
        })),
        Ok(Err(why)) => {
            give_back();
            Ok(IndexedOpen::Stale(why))
        }
        Err(e) => {
            give_back();
            Err(e)
        }
    }
}

/// Opens the whole of session `id` of `store` (the core's `Backend::open`):
/// [`open_from`] with no prefix.
///
/// # Errors
///
/// As [`open_from`].
pub fn open<S: SqlStore + ?Sized>(
    store: &S,
    id: &SessionId,
    access: Access,
    visit: &mut Visitor<'_>,
) -> Opening {
    let found = open_from(store, id, access, None, visit)?;
    opened_whole(found, || store.location(id))
}
