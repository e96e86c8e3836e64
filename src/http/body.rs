//! Reading a request body: whole, up to `--max-body-bytes`, into `Bytes`.
//! What goes wrong is a [`BodyError`], mapped to a status in `error.rs`.

use axum::body::Body;
use bytes::Bytes;

/// Why a request body could not be had.
#[derive(Debug, thiserror::Error)]
pub(super) enum BodyError {
    #[error("request body is larger than the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("could not read the request body: {0}")]
    Unreadable(String),
    /// It was read, but is not the message the endpoint takes.
    #[error("{0}")]
    Invalid(String),
}

/// The whole body, or why not.
pub(super) async fn read_body(body: Body, limit: usize) -> Result<Bytes, BodyError> {
    axum::body::to_bytes(body, limit).await.map_err(|err| {
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
