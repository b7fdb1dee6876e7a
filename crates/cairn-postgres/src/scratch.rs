//! Scratch stores for tests and benchmarks: a schema of its own in a real
//! database, dropped when done, so that many tests share one server in
//! parallel without seeing each other.
//!
//! The server is named by `CAIRN_TEST_POSTGRES_URL` (default
//! [`DEFAULT_TEST_URL`]). A test that needs it fails when it cannot be
//! reached ([`Scratch::new`] panics), wherever it runs: a Postgres test
//! never passes without testing. Only `CAIRN_SKIP_POSTGRES=1` ([`SKIP_VAR`])
//! skips them: at build time it sets `cfg(skip_postgres)` (the crates'
//! `build.rs`), under which those tests are `#[ignore]`d by name; at run
//! time [`Scratch::new`] then writes `skipped: <test name>:
//! CAIRN_SKIP_POSTGRES=1` to the terminal's stderr (past the test harness's
//! capture) and returns `None`, for a test that covers other stores too.
//! Under CI (`CI` set) skipping is refused: CI runs them.

use std::io::Write;
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

/// The variable that skips the tests needing the test server, when `1`.
pub const SKIP_VAR: &str = "CAIRN_SKIP_POSTGRES";

/// Whether this run skips the tests needing the test server
/// (`CAIRN_SKIP_POSTGRES=1`).
///
/// # Panics
///
/// When it says so under CI (`CI` set): CI runs them.
pub fn skipping() -> bool {
    let skip = std::env::var_os(SKIP_VAR).is_some_and(|v| v == "1");
    assert!(
        !(skip && std::env::var_os("CI").is_some()),
        "{SKIP_VAR}=1 under CI: CI must run the Postgres tests (unset {SKIP_VAR})"
    );
    skip
}

/// The running test's name: the test harness names each test's thread
/// after it.
fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("a test on an unnamed thread")
        .to_owned()
}

impl Scratch {
    /// For a test: a new scratch schema named after `tag` (not created
    /// yet: opening a backend on [`Scratch::url`] creates it). `None` only
    /// when the run skips the Postgres tests ([`skipping`]), having written
    /// `skipped: <test name>: CAIRN_SKIP_POSTGRES=1` to stderr.
    ///
    /// # Panics
    ///
    /// When the server cannot be reached and the run does not skip (the
    /// test fails, naming the fix), or [`skipping`]'s.
    pub fn new(tag: &str) -> Option<Scratch> {
        if skipping() {
            // Straight to the process's stderr, not through `eprintln!`,
            // which the harness captures and shows only for a failed test.
            let _ = writeln!(std::io::stderr(), "skipped: {}: {SKIP_VAR}=1", test_name());
            return None;
        }
        match Scratch::connect(tag) {
            Ok(scratch) => Some(scratch),
            Err(why) => panic!(
                "{why}; start it, point CAIRN_TEST_POSTGRES_URL at one, or set {SKIP_VAR}=1 \
                 to skip the tests that need it"
            ),
        }
    }

    /// For a benchmark or a tool: a new scratch schema named after `tag`
    /// (not created yet), or why the test server cannot be reached.
    ///
    /// # Errors
    ///
    /// The server cannot be reached.
    pub fn connect(tag: &str) -> Result<Scratch, String> {
        static N: AtomicU64 = AtomicU64::new(0);
        let server = test_url();
        if let Err(e) = postgres::Client::connect(&server, NoTls) {
            return Err(format!(
                "the test Postgres server at {server} cannot be reached ({})",
                cairn::with_causes(&e)
            ));
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
        Ok(Scratch {
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
