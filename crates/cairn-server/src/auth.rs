//! Who may use the server: one bearer token, required on every request (API,
//! streams and the web view alike). It is given by option or environment,
//! or generated on first start and kept, mode 0600, in the store's files
//! directory. A browser signs in once through the login form, which sets the
//! token as an `HttpOnly`, `SameSite=Strict` cookie; a write authenticated
//! by that cookie must also come from the server's own origin.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::{ApiError, ErrorCode, ServerError};

/// The file, in the store's files directory, that keeps a generated token.
pub const TOKEN_FILE: &str = "server-token";

/// The cookie the login form sets.
pub const COOKIE: &str = "cairn_token";

/// The server's token.
pub struct Auth {
    token: String,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Auth { token: <hidden> }")
    }
}

impl Auth {
    /// A server that accepts `token`.
    ///
    /// # Errors
    ///
    /// A token shorter than 16 characters, or with characters other than
    /// printable ASCII without spaces.
    pub fn new(token: String) -> Result<Auth, ServerError> {
        if !usable(&token) {
            return Err(ServerError::BadToken);
        }
        Ok(Auth { token })
    }

    /// The token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Whether `given` is the token (compared in constant time).
    pub fn accepts(&self, given: &str) -> bool {
        let (a, b) = (self.token.as_bytes(), given.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }

    /// The token kept in `dir`, generated (and written 0600) on first use.
    ///
    /// # Errors
    ///
    /// When the file cannot be read or created, or holds an unusable token.
    pub fn load_or_create(dir: &Path) -> Result<(Auth, PathBuf), ServerError> {
        let path = dir.join(TOKEN_FILE);
        let failed = |action: &'static str, path: &Path| {
            let path = path.to_owned();
            move |source| ServerError::TokenFile {
                action,
                path,
                source,
            }
        };
        match fs::read_to_string(&path) {
            Ok(t) => {
                let token = t.trim().to_owned();
                if !usable(&token) {
                    return Err(ServerError::BadTokenFile { path });
                }
                return Ok((Auth { token }, path));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(failed("read", &path)(e)),
        }
        fs::create_dir_all(dir).map_err(failed("create", dir))?;
        let mut bytes = [0u8; 24];
        getrandom::fill(&mut bytes).map_err(ServerError::Random)?;
        let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let mut opts = fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        let mut f = opts.open(&path).map_err(failed("create", &path))?;
        f.write_all(token.as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(failed("write", &path))?;
        Ok((Auth { token }, path))
    }
}

/// Whether `token` may be a token: 16 or more printable ASCII characters,
/// no space or `;` (it is also sent as a cookie).
fn usable(token: &str) -> bool {
    token.len() >= 16 && token.bytes().all(|b| b.is_ascii_graphic() && b != b';')
}

/// How a request proved who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proof {
    Bearer,
    Cookie,
}

fn proof(auth: &Auth, headers: &HeaderMap) -> Option<Proof> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if bearer.is_some_and(|t| auth.accepts(t.trim())) {
        return Some(Proof::Bearer);
    }
    cookie(headers)
        .filter(|t| auth.accepts(t))
        .map(|_| Proof::Cookie)
}

/// The token cookie of a request, if any.
fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| c.trim().strip_prefix(COOKIE)?.strip_prefix('='))
}

/// Whether the request was signed in (for the web page, which shows the
/// login form otherwise).
pub fn signed_in(auth: &Auth, headers: &HeaderMap) -> bool {
    proof(auth, headers).is_some()
}

/// Paths open without the token: the login form and the static assets it
/// needs (they hold no data).
fn public(path: &str) -> bool {
    path == "/" || path == "/login" || path.starts_with("/assets/")
}

/// The middleware: every other path needs the token.
pub async fn guard(State(auth): State<Arc<Auth>>, req: Request, next: Next) -> Response {
    if public(req.uri().path()) {
        return next.run(req).await;
    }
    match proof(&auth, req.headers()) {
        Some(Proof::Bearer) => next.run(req).await,
        Some(Proof::Cookie) if is_write(req.method()) && !same_origin(req.headers()) => {
            ApiError::new(
                StatusCode::FORBIDDEN,
                ErrorCode::CrossOrigin,
                "a write signed in by cookie must come from this server's own pages",
                "send the token as Authorization: Bearer TOKEN instead",
            )
            .into_response()
        }
        Some(Proof::Cookie) => next.run(req).await,
        None => {
            let mut res = ApiError::new(
                StatusCode::UNAUTHORIZED,
                ErrorCode::Unauthorized,
                "this server needs its token",
                "send Authorization: Bearer TOKEN; `cairn serve` printed where the token is kept",
            )
            .into_response();
            res.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"cairn\""),
            );
            res
        }
    }
}

/// Whether a request changes something (and so needs a same-origin check
/// when authenticated by cookie).
pub fn is_write(m: &Method) -> bool {
    !matches!(*m, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Whether a request's `Origin` (which browsers send on every write) is the
/// server's own host. A request without `Origin` is not from a page.
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    let origin_host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    matches!((origin_host, host), (Some(o), Some(h)) if o == h)
}

/// The `Set-Cookie` value that signs a browser in.
pub fn set_cookie(token: &str) -> String {
    format!("{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/")
}
