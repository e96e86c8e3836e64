//! A response body sent as the pieces it was assembled from: the shared
//! resources piece goes out as it is held (no copy into a buffer of the
//! answer's own), with its exact length known, so the response carries a
//! `Content-Length` as a one-buffer body does.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};

use crate::cache::JsonBody;

/// The pieces of a body, sent in order.
#[derive(Debug)]
pub(super) struct Pieces {
    pieces: VecDeque<Bytes>,
    remaining: u64,
}

impl From<JsonBody> for Pieces {
    fn from(body: JsonBody) -> Pieces {
        let pieces: VecDeque<Bytes> = body
            .into_pieces()
            .into_iter()
            .filter(|p| !p.is_empty())
            .collect();
        let remaining = pieces.iter().map(|p| p.len() as u64).sum();
        Pieces { pieces, remaining }
    }
}

impl http_body::Body for Pieces {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.pieces.pop_front().map(|piece| {
            self.remaining -= piece.len() as u64;
            Ok(Frame::data(piece))
        }))
    }

    fn is_end_stream(&self) -> bool {
        self.pieces.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sends_every_piece_in_order_with_its_length() {
        let body = JsonBody::new(
            Bytes::from_static(b"{\"a\":["),
            Bytes::from_static(b"1,2"),
            Bytes::from_static(b"]}"),
        );
        let pieces = Pieces::from(body);
        assert_eq!(http_body::Body::size_hint(&pieces).exact(), Some(11));
        let bytes = axum::body::to_bytes(axum::body::Body::new(pieces), 1024)
            .await
            .unwrap();
        assert_eq!(&bytes[..], b"{\"a\":[1,2]}");
        // Empty pieces are not sent; nothing at all is the end at once.
        let empty = Pieces::from(JsonBody::from(Bytes::new()));
        assert!(http_body::Body::is_end_stream(&empty));
        assert_eq!(http_body::Body::size_hint(&empty).exact(), Some(0));
    }
}
