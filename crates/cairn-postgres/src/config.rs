//! Where the store is: a `postgres://` or `postgresql://` URL, with cairn's
//! own query parameters taken out before the rest goes to the driver.
//!
//! cairn's parameters (all optional):
//!
//! - `cairn_schema=NAME` — the Postgres schema holding cairn's tables
//!   (default `cairn`), so several stores (or tests) share one database;
//! - `cairn_lease_secs=N` — how long a writer's lease lasts without a
//!   renewal (default 30; renewed every third of it);
//! - `cairn_files=DIR` — where tools keep their own files for this store
//!   (`cairn-stores` reads it; the backend ignores it).

use std::time::Duration;

use crate::error::PgError;

/// The default schema of cairn's tables.
pub const DEFAULT_SCHEMA: &str = "cairn";

/// The default lease: a writer that has not renewed its lease for this long
/// (paused, cut off, killed) may be taken over.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// A parsed store URL.
#[derive(Debug, Clone)]
pub struct PgUrl {
    /// The URL without cairn's parameters, as given to the driver.
    pub driver: String,
    /// The URL as written, with any password replaced by `***` (messages).
    pub shown: String,
    /// The schema of cairn's tables.
    pub schema: String,
    /// The lease duration.
    pub lease: Duration,
    /// `cairn_files`, if given.
    pub files: Option<String>,
}

/// Whether `spec` names a Postgres store.
pub fn is_postgres_url(spec: &str) -> bool {
    spec.starts_with("postgres://") || spec.starts_with("postgresql://")
}

fn bad(url: &str, problem: String) -> PgError {
    PgError::BadUrl {
        url: hide_password(url),
        problem,
    }
}

/// The URL with its password (if any) replaced by `***`.
pub fn hide_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

impl PgUrl {
    /// Reads a `postgres://` or `postgresql://` URL.
    ///
    /// # Errors
    ///
    /// [`PgError::BadUrl`] for another scheme, a malformed cairn parameter
    /// or a schema name that is not a plain identifier.
    pub fn parse(url: &str) -> Result<PgUrl, PgError> {
        if !is_postgres_url(url) {
            return Err(bad(
                url,
                "it must start with postgres:// or postgresql://".into(),
            ));
        }
        let (base, query) = match url.split_once('?') {
            Some((b, q)) => (b, q),
            None => (url, ""),
        };
        let mut kept = Vec::new();
        let mut schema = DEFAULT_SCHEMA.to_owned();
        let mut lease = DEFAULT_LEASE;
        let mut files = None;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "cairn_schema" => {
                    let ok = !value.is_empty()
                        && value.len() <= 63
                        && value
                            .bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
                        && !value.as_bytes()[0].is_ascii_digit();
                    if !ok {
                        return Err(bad(
                            url,
                            format!(
                                "cairn_schema={value:?} is not a plain schema name (lower-case \
                                 letters, digits and _, not starting with a digit, at most 63)"
                            ),
                        ));
                    }
                    value.clone_into(&mut schema);
                }
                "cairn_lease_secs" => {
                    let secs: u64 = value.parse().ok().filter(|s| *s > 0).ok_or_else(|| {
                        bad(
                            url,
                            format!("cairn_lease_secs={value:?} is not a positive whole number"),
                        )
                    })?;
                    lease = Duration::from_secs(secs);
                }
                "cairn_files" => files = Some(value.to_owned()),
                _ => kept.push(pair),
            }
        }
        let driver = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        Ok(PgUrl {
            shown: hide_password(url),
            driver,
            schema,
            lease,
            files,
        })
    }

    /// The driver's configuration.
    ///
    /// # Errors
    ///
    /// [`PgError::BadUrl`] when the driver cannot read the URL.
    pub fn config(&self) -> Result<postgres::Config, PgError> {
        let mut config: postgres::Config = self
            .driver
            .parse()
            .map_err(|e: postgres::Error| bad(&self.shown, e.to_string()))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        if config.get_application_name().is_none() {
            config.application_name("cairn");
        }
        // A peer that vanished (a cut cable, a paused VM) is noticed.
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(30));
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cairn_parameters_are_taken_out_of_the_driver_url() {
        let u = PgUrl::parse(
            "postgres://u:secret@h:5433/db?cairn_schema=t1&sslmode=disable&cairn_lease_secs=5&cairn_files=/x",
        )
        .unwrap();
        assert_eq!(u.driver, "postgres://u:secret@h:5433/db?sslmode=disable");
        assert_eq!(u.schema, "t1");
        assert_eq!(u.lease, Duration::from_secs(5));
        assert_eq!(u.files.as_deref(), Some("/x"));
        assert!(!u.shown.contains("secret"));
        assert!(u.config().is_ok());
    }

    #[test]
    fn a_schema_name_that_is_not_an_identifier_is_refused() {
        for bad in ["x;drop", "", "1a", "A"] {
            let e = PgUrl::parse(&format!("postgres://h/db?cairn_schema={bad}")).unwrap_err();
            assert!(e.to_string().contains("cairn_schema"), "{e}");
        }
        assert!(PgUrl::parse("mysql://h/db").is_err());
        assert!(PgUrl::parse("postgres://h/db?cairn_lease_secs=0").is_err());
    }

    #[test]
    fn passwords_are_hidden_in_messages() {
        assert_eq!(
            hide_password("postgres://u:pw@h/db"),
            "postgres://u:***@h/db"
        );
        assert_eq!(hide_password("postgres://h/db"), "postgres://h/db");
    }
}
