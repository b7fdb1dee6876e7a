//! A small connection pool on std: idle connections kept for reuse, a new
//! one made when none is idle, and a broken one never handed out again.
//!
//! Every statement cairn sends is either a simple query or an *unnamed*
//! statement (`query_typed`: parse, bind and execute in one round trip), and
//! no session state outlives a transaction except `synchronous_commit`, so
//! the pool works behind PgBouncer's transaction pooling too.
//!
//! A connection idle in the pool learns that the server restarted only when
//! it is next used. [`Pool::run`] therefore retries a failed *read* once on a
//! fresh connection when the failure was the connection's; writes are never
//! retried (their commit may or may not have happened: the handle is
//! poisoned instead, and the next open reads what is there).

use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, MutexGuard, PoisonError};

use postgres::{Client, NoTls};

/// How many idle connections are kept.
const MAX_IDLE: usize = 32;

/// How long [`Pool::live`] waits for a reused connection to answer.
const VALID_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Connections to one database.
pub(crate) struct Pool {
    config: postgres::Config,
    idle: Mutex<Vec<Client>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("idle", &lock(&self.idle).len())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether an error says the connection itself is gone (as opposed to an
/// error the server reported on a working connection).
pub(crate) fn connection_lost(e: &postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.as_db_error() {
        // admin_shutdown, crash_shutdown, cannot_connect_now: the server
        // is going away or not back yet.
        Some(db) => matches!(db.code().code(), "57P01" | "57P02" | "57P03"),
        // No server error: I/O on the socket, or the protocol broke.
        None => true,
    }
}

impl Pool {
    pub(crate) fn new(config: postgres::Config) -> Pool {
        Pool {
            config,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// A new connection with cairn's session settings.
    fn connect(&self) -> Result<Client, postgres::Error> {
        let mut client = self.config.connect(NoTls)?;
        // Overrides a server default of `off` for cairn's own connections
        // (see the crate docs on durability).
        client.batch_execute("SET synchronous_commit = on")?;
        Ok(client)
    }

    /// An idle connection, or a new one.
    pub(crate) fn get(&self) -> Result<Conn<'_>, postgres::Error> {
        let reused = loop {
            let Some(client) = lock(&self.idle).pop() else {
                break None;
            };
            if !client.is_closed() {
                break Some(client);
            }
        };
        let (client, fresh) = match reused {
            Some(c) => (c, false),
            None => (self.connect()?, true),
        };
        Ok(Conn {
            pool: self,
            client: Some(client),
            fresh,
        })
    }

    /// An idle connection, if one is: never a new one (for work that is
    /// worth doing only when it costs no connection of its own).
    pub(crate) fn idle(&self) -> Option<Conn<'_>> {
        let client = loop {
            let client = lock(&self.idle).pop()?;
            if !client.is_closed() {
                break client;
            }
        };
        Some(Conn {
            pool: self,
            client: Some(client),
            fresh: false,
        })
    }

    /// A connection known to be alive: a reused one is checked with an
    /// empty query first (one round trip) and replaced if it died while
    /// idle. For the transactions of open, create, claim and remove, which
    /// must not fail just because the server restarted since the pool's
    /// connections were made (appends are not retried: see the module docs).
    pub(crate) fn live(&self) -> Result<Conn<'_>, postgres::Error> {
        let mut conn = self.get()?;
        if conn.fresh || conn.is_valid(VALID_TIMEOUT).is_ok() {
            return Ok(conn);
        }
        conn.discard();
        lock(&self.idle).clear();
        self.get()
    }

    /// Runs a read (or an idempotent write) on a pooled connection, once
    /// more on a new connection if a reused one turned out to be dead.
    pub(crate) fn run<T>(
        &self,
        mut f: impl FnMut(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T, postgres::Error> {
        let mut conn = self.get()?;
        match f(&mut conn) {
            Ok(v) => Ok(v),
            Err(e) if connection_lost(&e) => {
                let was_fresh = conn.fresh;
                conn.discard();
                if was_fresh {
                    return Err(e);
                }
                // Every idle connection predates the same failure.
                lock(&self.idle).clear();
                let mut conn = self.get()?;
                f(&mut conn).inspect_err(|e| {
                    if connection_lost(e) {
                        conn.discard();
                    }
                })
            }
            Err(e) => Err(e),
        }
    }
}

/// A connection out of the pool; it goes back when dropped, unless it broke.
pub(crate) struct Conn<'p> {
    pool: &'p Pool,
    client: Option<Client>,
    /// Made for this use (a failure on it is not a stale connection's).
    fresh: bool,
}

impl Conn<'_> {
    /// Closes the connection instead of returning it to the pool.
    pub(crate) fn discard(&mut self) {
        self.client = None;
    }
}

impl Deref for Conn<'_> {
    type Target = Client;
    fn deref(&self) -> &Client {
        // Only `discard` empties it, and nothing uses a connection after that.
        self.client.as_ref().unwrap_or_else(|| unreachable!())
    }
}

impl DerefMut for Conn<'_> {
    fn deref_mut(&mut self) -> &mut Client {
        self.client.as_mut().unwrap_or_else(|| unreachable!())
    }
}

impl Drop for Conn<'_> {
    fn drop(&mut self) {
        if let Some(client) = self.client.take()
            && !client.is_closed()
        {
            let mut idle = lock(&self.pool.idle);
            if idle.len() < MAX_IDLE {
                idle.push(client);
            }
        }
    }
}
