//! `cairn serve`: the HTTP API any language can use, and a live web view of
//! sessions.
//!
//! The server takes an opened [`cairn::Store`] (a directory, SQLite, any
//! backend) and answers JSON over HTTP, described by the OpenAPI 3.1
//! document at `/openapi.json`: sessions (list, create, get, delete),
//! records (batch append under a durability, `expected_seq`; the log by
//! seq range), the derived views (context and app state as of any entry,
//! tree, steps, memory, verdict), the tree actions (checkout, copy, labels),
//! the operation API (start, model attempts, T1 dispatch, T2 results,
//! approvals, finish) and recovery, live tails over Server-Sent Events
//! (`id:` = seq, so `Last-Event-ID` resumes exactly), and the web view at
//! `/`. The core is synchronous: every call into it runs on tokio's
//! blocking pool.
//!
//! Every request needs the server's bearer token; every error is a JSON body
//! with a code and a hint; a panicking handler answers 500 with the request
//! id and the server goes on.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let store = cairn::Store::open_dir("/tmp/cairn-home");
//! let options = cairn_server::Options::default();
//! let server = cairn_server::Server::bind(store, std::path::Path::new("/tmp/cairn-home"), options).await?;
//! println!("listening on http://{}", server.addr());
//! server.run().await?;
//! # Ok(()) }
//! ```

mod api;
mod app;
mod auth;
mod derived;
mod error;
mod extract;
mod hub;
mod openapi;
mod ops;
mod stream;
mod web;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;

pub use auth::{Auth, TOKEN_FILE};
pub use error::{ApiError, ErrorCode, ServerError};
pub use extract::AppState;
pub use openapi::document as openapi_document;

/// How the server runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where to listen (loopback by default).
    pub listen: SocketAddr,
    /// The token; generated and kept in the store's files directory when
    /// `None`.
    pub token: Option<String>,
    /// How long a writer handle is kept after its last use before the
    /// session's lock is given back.
    pub hold: Duration,
    /// The largest request body accepted, in bytes.
    pub max_body: usize,
    /// How often live tails look for records other processes wrote.
    pub poll: Duration,
}

/// The default address: loopback, port 7171.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7171";

impl Default for Options {
    fn default() -> Options {
        Options {
            listen: SocketAddr::from(([127, 0, 0, 1], 7171)),
            token: None,
            hold: Duration::from_millis(1000),
            max_body: 4 << 20,
            poll: Duration::from_millis(250),
        }
    }
}

/// A bound server, ready to run.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    app: Router,
    state: AppState,
    token_file: Option<PathBuf>,
}

impl Server {
    /// Binds the server to `options.listen` over `store`, whose tools' files
    /// (the generated token) are kept in `files_dir`.
    ///
    /// # Errors
    ///
    /// An invalid token, a token file that cannot be read or written, or an
    /// address that cannot be bound.
    pub async fn bind(
        store: cairn::Store,
        files_dir: &Path,
        options: Options,
    ) -> Result<Server, ServerError> {
        Server::bind_with(store, files_dir, options, Router::new()).await
    }

    /// [`Server::bind`] with `extra` routes behind the same guards (tests
    /// add a panicking handler this way).
    ///
    /// # Errors
    ///
    /// As [`Server::bind`].
    #[doc(hidden)]
    pub async fn bind_with(
        store: cairn::Store,
        files_dir: &Path,
        options: Options,
        extra: Router<AppState>,
    ) -> Result<Server, ServerError> {
        let (auth, token_file) = match options.token {
            Some(t) => (Auth::new(t)?, None),
            None => {
                let (a, p) = Auth::load_or_create(files_dir)?;
                (a, Some(p))
            }
        };
        let state = AppState {
            hub: Arc::new(hub::Hub::new(store, options.hold)),
            auth: Arc::new(auth),
            max_body: options.max_body,
            poll: options.poll,
        };
        let listener =
            TcpListener::bind(options.listen)
                .await
                .map_err(|source| ServerError::Listen {
                    addr: options.listen,
                    source,
                })?;
        let app = app::router(state.clone(), extra);
        Ok(Server {
            listener,
            app,
            state,
            token_file,
        })
    }

    /// The address bound (the port chosen, when 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    /// Where the generated token is kept (`None` when it was given).
    pub fn token_file(&self) -> Option<&Path> {
        self.token_file.as_deref()
    }

    /// The token clients must send.
    pub fn token(&self) -> &str {
        self.state.auth.token()
    }

    /// Serves until the process is stopped.
    ///
    /// # Errors
    ///
    /// When accepting connections fails for good.
    pub async fn run(self) -> Result<(), ServerError> {
        self.run_until(std::future::pending()).await
    }

    /// Serves until `stop` completes, then closes the held writers.
    ///
    /// # Errors
    ///
    /// When accepting connections fails for good.
    pub async fn run_until(
        self,
        stop: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        let hub = Arc::clone(&self.state.hub);
        let sweeper = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tick.tick().await;
                let h = Arc::clone(&hub);
                let _ = tokio::task::spawn_blocking(move || h.release_idle()).await;
            }
        });
        let served = axum::serve(self.listener, self.app)
            .with_graceful_shutdown(stop)
            .await
            .map_err(ServerError::Serve);
        sweeper.abort();
        served
    }
}
