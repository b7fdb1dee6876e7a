//! Scratch stores for tests and benchmarks: a schema of its own in a real
//! database, dropped when done, so that many tests share one server in
//! parallel without seeing each other.
//!
//! The server is named by `CAIRN_TEST_POSTGRES_URL` (default
//! [`DEFAULT_TEST_URL`]). When it cannot be reached, [`Scratch::new`]
//! returns `None` so a test can skip — except under CI (`CI` set), where an
//! unreachable server is a failure, not a skip.

use std::sync::atomic::{AtomicU64, Ordering};

use postgres::NoTls;

use crate::config::PgUrl;

/// The server tests use unless `CAIRN_TEST_POSTGRES_URL` says otherwise.
pub const DEFAULT_TEST_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The test server's URL.
pub fn test_url() -> String {
    std::env::var("CAIRN_TEST_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_TEST_URL.to_owned())
}

/// A schema of its own on the test server, dropped (with everything in it)
/// when this is dropped.
#[derive(Debug)]
pub struct Scratch {
    /// The store URL naming the schema (`cairn_schema=…`).
    pub url: String,
    /// The schema.
    pub schema: String,
    /// The server's URL, without cairn's parameters.
    pub server: String,
}

impl Scratch {
    /// A new scratch schema named after `tag` (not created yet: opening a
    /// backend on [`Scratch::url`] creates it). `None` when the server
    /// cannot be reached outside CI.
    ///
    /// # Panics
    ///
    /// Under CI (`CI` set) when the server cannot be reached.
    pub fn new(tag: &str) -> Option<Scratch> {
        static N: AtomicU64 = AtomicU64::new(0);
        let server = test_url();
        if let Err(e) = postgres::Client::connect(&server, NoTls) {
            assert!(
                std::env::var_os("CI").is_none(),
                "the test Postgres server at {server} cannot be reached under CI: {e}"
            );
            eprintln!("skipped: the test Postgres server at {server} cannot be reached: {e}");
            return None;
        }
        let tag: String = tag
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .take(20)
            .collect::<String>()
            .to_ascii_lowercase();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let schema = format!(
            "t_{tag}_{}_{}_{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let sep = if server.contains('?') { '&' } else { '?' };
        Some(Scratch {
            url: format!("{server}{sep}cairn_schema={schema}"),
            schema,
            server,
        })
    }

    /// A plain connection to the server, as another program would have.
    ///
    /// # Panics
    ///
    /// When the server cannot be reached (it could a moment ago).
    #[allow(clippy::expect_used)]
    pub fn raw(&self) -> postgres::Client {
        let url = PgUrl::parse(&self.server).expect("the test server URL parses");
        url.config()
            .expect("the test server URL is valid")
            .connect(NoTls)
            .expect("the test server answers")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Ok(url) = PgUrl::parse(&self.server)
            && let Ok(config) = url.config()
            && let Ok(mut c) = config.connect(NoTls)
        {
            let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema));
        }
    }
}

/// Restarts the local Postgres cluster (`pg_ctlcluster
/// --skip-systemctl-redirect VERSION main restart`, VERSION from
/// `/etc/postgresql`): for the fault tests, which run it only where the
/// server is the local one and this process may manage it (root, or the
/// postgres user).
///
/// # Errors
///
/// Why it could not restart the server.
pub fn restart_local_server() -> Result<(), String> {
    let version = std::fs::read_dir("/etc/postgresql")
        .map_err(|e| format!("no local cluster (/etc/postgresql: {e})"))?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .max()
        .ok_or("no cluster under /etc/postgresql")?;
    let out = std::process::Command::new("pg_ctlcluster")
        .args(["--skip-systemctl-redirect", &version, "main", "restart"])
        .output()
        .map_err(|e| format!("cannot run pg_ctlcluster: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "pg_ctlcluster {version} main restart failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
