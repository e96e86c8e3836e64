//! What an HTTP cache (nginx, a CDN, a browser) may do with a discovery
//! answer: the `Vary` and `Cache-Control` of every 200 and 304 a poll gets
//! (a 304 carries exactly the headers of the 200 it stands for). This module
//! only chooses the headers; it reads no request and renders nothing.
//!
//! `Vary` names each request header that changes the body:
//! - `Accept`: JSON or YAML (and, on a watch, NDJSON or SSE);
//! - `Authorization` while an auth policy is in force (it gates the answer);
//! - `Host` where the config-source rewrite points sources at it (policy
//!   `always`, or `auto` for a request from Envoy: a GET never is one).
//!
//! `If-None-Match` is not named: it supplies the version for a GET without
//! `version=`, but the body of a 200 does not depend on it (every client
//! not holding the current version gets the same bytes), and a cache
//! handles it as a precondition. The one answer it shapes, `?changes`, is
//! `no-store`.
//!
//! `Cache-Control`:
//! - `no-store` for secrets (with or without a policy: a secret never goes
//!   into any cache), for `?changes` (a diff against the client's own
//!   version and the gateway's memory of answers), for long polls (`?wait=`
//!   or `--default-wait`: a cache holding its revalidation would hold every
//!   client behind it, and a fresh stored answer would turn the hold into a
//!   busy loop), and for watches (set by `watch`);
//! - `private` while an auth policy is in force: one principal's answer is
//!   never a shared cache's to give to another;
//! - else `no-cache` (store, revalidate every use: the gateway answers the
//!   revalidation with a 304 from its cached state, never rendering), or
//!   `max-age=N, stale-while-revalidate=N` with `--cache-max-age N`.
//!
//! Errors are `no-store` whatever the request (set in `error.rs`).

use std::time::Duration;

use axum::http::{header, HeaderValue};
use axum::response::Response;

/// What the request is, as far as caching goes.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Cacheability {
    /// An auth policy is in force (the answer is the principal's).
    pub(super) authenticated: bool,
    /// The answer holds secrets.
    pub(super) secrets: bool,
    /// The answer is in `?changes` form.
    pub(super) changes: bool,
    /// The request is a long poll (a non-zero wait).
    pub(super) long_poll: bool,
    /// `Host` selects where rewritten config sources point.
    pub(super) host_selects: bool,
}

/// The `Vary` and `Cache-Control` of one answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CacheHeaders {
    pub(super) vary: String,
    pub(super) cache_control: String,
}

impl Cacheability {
    /// The headers for this request, with `--cache-max-age` `max_age`
    /// (zero: revalidate every use).
    pub(super) fn headers(self, max_age: Duration) -> CacheHeaders {
        let mut vary = vec!["Accept"];
        if self.authenticated {
            vary.push("Authorization");
        }
        if self.host_selects {
            vary.push("Host");
        }
        let freshness = match max_age.as_secs() {
            0 => "no-cache".to_owned(),
            n => format!("max-age={n}, stale-while-revalidate={n}"),
        };
        let cache_control = if self.secrets || self.changes || self.long_poll {
            "no-store".to_owned()
        } else if self.authenticated {
            format!("private, {freshness}")
        } else {
            freshness
        };
        CacheHeaders {
            vary: vary.join(", "),
            cache_control,
        }
    }
}

impl CacheHeaders {
    /// Sets both on `response` (replacing what it had).
    pub(super) fn apply(&self, response: &mut Response) {
        let headers = response.headers_mut();
        for (name, value) in [
            (header::VARY, &self.vary),
            (header::CACHE_CONTROL, &self.cache_control),
        ] {
            if let Ok(value) = HeaderValue::from_str(value) {
                headers.insert(name, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OFF: Duration = Duration::ZERO;

    #[test]
    fn public_answers_revalidate_or_live_max_age() {
        let h = Cacheability::default().headers(OFF);
        assert_eq!(h.vary, "Accept");
        assert_eq!(h.cache_control, "no-cache");
        let h = Cacheability::default().headers(Duration::from_secs(5));
        assert_eq!(h.cache_control, "max-age=5, stale-while-revalidate=5");
        // Below a second rounds to off, never to max-age=0.
        let h = Cacheability::default().headers(Duration::from_millis(500));
        assert_eq!(h.cache_control, "no-cache");
    }

    #[test]
    fn authenticated_answers_are_private_and_vary_on_authorization() {
        let auth = Cacheability {
            authenticated: true,
            ..Cacheability::default()
        };
        let h = auth.headers(OFF);
        assert_eq!(h.vary, "Accept, Authorization");
        assert_eq!(h.cache_control, "private, no-cache");
        let h = auth.headers(Duration::from_secs(2));
        assert_eq!(
            h.cache_control,
            "private, max-age=2, stale-while-revalidate=2"
        );
    }

    #[test]
    fn secrets_changes_and_long_polls_are_never_stored() {
        for c in [
            Cacheability {
                secrets: true,
                ..Cacheability::default()
            },
            Cacheability {
                secrets: true,
                authenticated: true,
                ..Cacheability::default()
            },
            Cacheability {
                changes: true,
                ..Cacheability::default()
            },
            Cacheability {
                long_poll: true,
                ..Cacheability::default()
            },
        ] {
            for max_age in [OFF, Duration::from_secs(30)] {
                assert_eq!(c.headers(max_age).cache_control, "no-store", "{c:?}");
            }
        }
    }

    #[test]
    fn host_is_named_where_it_selects_the_rewrite() {
        let c = Cacheability {
            host_selects: true,
            authenticated: true,
            ..Cacheability::default()
        };
        assert_eq!(c.headers(OFF).vary, "Accept, Authorization, Host");
    }
}
