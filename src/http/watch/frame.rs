//! How a watch stream writes what it sends, in one of two formats:
//!
//! - Server-Sent Events (`text/event-stream`): a `retry:` line first (how
//!   long an `EventSource` waits before reconnecting), then per version an
//!   event `id: <version>`, `event: <name>`, `data: <one line of JSON>`;
//!   heartbeats and the closing word are comments (`: ...`), which every SSE
//!   client ignores.
//! - NDJSON (`application/x-ndjson`): one JSON document per line; a
//!   heartbeat is an empty line (NDJSON parsers may skip empty lines; `jq`
//!   does).
//!
//! Only bytes here: no state, no I/O.

use bytes::{BufMut, Bytes, BytesMut};

/// How long an `EventSource` should wait before reconnecting (SSE `retry:`).
pub(super) const RECONNECT_MS: u32 = 1_000;

/// The wire format of one watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Sse,
    Ndjson,
}

impl Format {
    pub(super) fn content_type(self) -> &'static str {
        match self {
            Format::Sse => "text/event-stream",
            Format::Ndjson => "application/x-ndjson",
        }
    }

    /// What the stream starts with, before any event.
    pub(super) fn opening(self) -> Option<Bytes> {
        match self {
            Format::Sse => Some(Bytes::from(format!("retry: {RECONNECT_MS}\n\n"))),
            Format::Ndjson => None,
        }
    }

    /// One event: `json` (a JSON document) at `version`, named `name` (SSE).
    pub(super) fn event(self, name: &str, version: &str, json: &[u8]) -> Bytes {
        let json = one_line(json);
        match self {
            Format::Sse => {
                let mut out = BytesMut::with_capacity(json.len() + version.len() + 32);
                // An id with a line break or NUL would be cut or ignored by
                // clients: then none is sent, and a reconnecting client
                // presents the version before it (it gets this one again,
                // never misses it).
                if !version.contains(['\n', '\r', '\0']) {
                    out.put_slice(b"id: ");
                    out.put_slice(version.as_bytes());
                    out.put_u8(b'\n');
                }
                out.put_slice(b"event: ");
                out.put_slice(name.as_bytes());
                out.put_slice(b"\ndata: ");
                out.put_slice(&json);
                out.put_slice(b"\n\n");
                out.freeze()
            }
            Format::Ndjson => {
                let mut out = BytesMut::with_capacity(json.len() + 1);
                out.put_slice(&json);
                out.put_u8(b'\n');
                out.freeze()
            }
        }
    }

    /// Keeps an idle connection busy.
    pub(super) fn heartbeat(self) -> Bytes {
        match self {
            Format::Sse => Bytes::from_static(b": heartbeat\n\n"),
            Format::Ndjson => Bytes::from_static(b"\n"),
        }
    }

    /// Said before the stream ends (SSE only: NDJSON has no comments).
    pub(super) fn closing(self, why: &str) -> Option<Bytes> {
        match self {
            Format::Sse => Some(Bytes::from(format!(
                ": {}\n\n",
                one_line(why.as_bytes()).escape_ascii()
            ))),
            Format::Ndjson => None,
        }
    }
}

/// `json` on one line. A raw line break cannot occur inside a JSON string
/// (it must be escaped there), so in valid JSON every CR and LF is
/// whitespace between tokens, and dropping them keeps the document as it is.
fn one_line(json: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if json.iter().any(|b| matches!(b, b'\n' | b'\r')) {
        json.iter()
            .copied()
            .filter(|b| !matches!(b, b'\n' | b'\r'))
            .collect::<Vec<u8>>()
            .into()
    } else {
        json.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_event_has_id_name_and_one_data_line() {
        let event = Format::Sse.event("discovery_response", "v1~abc", b"{\"a\":\n 1}");
        assert_eq!(
            &event[..],
            b"id: v1~abc\nevent: discovery_response\ndata: {\"a\": 1}\n\n"
        );
        let no_id = Format::Sse.event("x", "bad\nversion", b"{}");
        assert_eq!(&no_id[..], b"event: x\ndata: {}\n\n");
    }

    #[test]
    fn ndjson_is_one_document_per_line() {
        assert_eq!(&Format::Ndjson.event("x", "v", b"{\r\n}")[..], b"{}\n");
        assert_eq!(&Format::Ndjson.heartbeat()[..], b"\n");
        assert!(Format::Ndjson.opening().is_none());
        assert!(Format::Ndjson.closing("bye").is_none());
    }

    #[test]
    fn sse_comments_cannot_break_out() {
        assert_eq!(&Format::Sse.heartbeat()[..], b": heartbeat\n\n");
        assert_eq!(&Format::Sse.closing("a\nb").unwrap()[..], b": ab\n\n");
        assert_eq!(&Format::Sse.opening().unwrap()[..], b"retry: 1000\n\n");
    }
}
