//! Reading a request body: its content type checked (JSON only), then the
//! whole body, up to `--max-body-bytes`, into `Bytes`, or into the chunks it
//! arrived in ([`read_body_chunks`], for the memo of parsed requests, which
//! answers a repeated body without joining them). What goes wrong is a
//! [`BodyError`], mapped to a status in `error.rs`.
//!
//! Why JSON only: Envoy sends `Content-Type: application/json`, and a
//! browser cannot send it cross-origin without a CORS preflight (which this
//! server never grants), so a web page cannot make a visitor's browser poll
//! on its behalf. curl's `-d` sends `application/x-www-form-urlencoded`:
//! curl users add `-H 'Content-Type: application/json'` (or use `--json`).

use axum::body::Body;
use axum::http::{header, HeaderMap};
use bytes::{Buf, Bytes};
use http_body_util::BodyExt;

use crate::cache::BodyChunks;

/// Why a request body could not be had.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    #[error("request body is larger than the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("could not read the request body: {0}")]
    Unreadable(String),
    #[error("the request body did not arrive within {0:?} (--body-read-timeout)")]
    TimedOut(std::time::Duration),
    /// It was read, but is not the message the endpoint takes.
    #[error("{0}")]
    Invalid(String),
    #[error("Content-Type must be application/json (Envoy sends it; with curl add -H 'Content-Type: application/json'); got {0}")]
    NotJson(String),
}

/// Refuses a body that does not say it is JSON (parameters such as
/// `charset=utf-8` are fine).
pub(crate) fn check_json(headers: &HeaderMap) -> Result<(), BodyError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Err(BodyError::NotJson("no Content-Type".into()));
    };
    let text = value.to_str().unwrap_or_default();
    let essence = text.split(';').next().unwrap_or_default().trim();
    if essence.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else {
        Err(BodyError::NotJson(format!("{text:?}")))
    }
}

/// The whole body within `timeout` (a slow sender cannot hold a request
/// open for longer), or why not.
pub(crate) async fn read_body(
    body: Body,
    limit: usize,
    timeout: std::time::Duration,
) -> Result<Bytes, BodyError> {
    Ok(read_body_chunks(body, limit, timeout).await?.into_bytes())
}

/// [`read_body`], in the chunks the body arrived in (not joined: no copy).
pub(crate) async fn read_body_chunks(
    body: Body,
    limit: usize,
    timeout: std::time::Duration,
) -> Result<BodyChunks, BodyError> {
    // A Content-Length over the limit is refused before the body is
    // polled: polling it is what sends `100 Continue`, inviting a client
    // that asked (`Expect: 100-continue`) to send what will be refused.
    let announced = http_body::Body::size_hint(&body).lower();
    if usize::try_from(announced).map_or(true, |n| n > limit) {
        return Err(BodyError::TooLarge { limit });
    }
    // What `axum::body::to_bytes` does, but for the join.
    let read = async {
        http_body_util::Limited::new(body, limit)
            .collect()
            .await
            .map_err(axum::Error::new)
    };
    let read = tokio::time::timeout(timeout, read)
        .await
        .map_err(|_| BodyError::TimedOut(timeout))?;
    let read = read.map(|collected| {
        let mut all = collected.aggregate();
        let mut chunks = BodyChunks::default();
        while all.has_remaining() {
            let n = all.chunk().len();
            chunks.push(all.copy_to_bytes(n));
        }
        chunks
    });
    read.map_err(|err| {
        let too_large =
            std::iter::successors(Some(&err as &(dyn std::error::Error + 'static)), |e| {
                e.source()
            })
            .any(|e| e.is::<http_body_util::LengthLimitError>());
        if too_large {
            BodyError::TooLarge { limit }
        } else {
            BodyError::Unreadable(err.to_string())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn only_json_is_taken() {
        let with = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(v));
            check_json(&h)
        };
        assert!(with("application/json").is_ok());
        assert!(with("Application/JSON; charset=utf-8").is_ok());
        assert!(with("application/x-www-form-urlencoded").is_err());
        assert!(with("text/plain").is_err());
        assert!(with("application/jsonx").is_err());
        assert!(check_json(&HeaderMap::new()).is_err());
    }
}
