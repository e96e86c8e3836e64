//! A request body apart from the values of its `version_info` and
//! `response_nonce`: the frame a poll after a version change shares with
//! the poll before it. Envoy writes `version_info` first and `response_nonce`
//! last, so after a change every poll is a new body that differs from its
//! previous one only there; [`Frame::of`] finds those two values without
//! parsing.
//!
//! Only what cannot change the parse elsewhere is cut out: a value is taken
//! only as a plain JSON string (no escape, no control character, valid
//! UTF-8), where it can only be a member of the top-level object:
//! - `version_info`: the body starts with `{"version_info":"`;
//! - `response_nonce`: the body ends with `,"response_nonce":"…"}` (an
//!   unescaped `"` cannot be inside a string, so `,"` opens a key there).
//!
//! Two bodies with equal frames are then the same JSON but for those two
//! strings: one parses if and only if the other does, to the same request
//! but for its version (the nonce is not kept).

use std::ops::Range;

const VERSION_OPENING: &[u8] = b"{\"version_info\":\"";
const NONCE_OPENING: &[u8] = b",\"response_nonce\":\"";
const CLOSING: &[u8] = b"\"}";
/// How far from the end a nonce is looked for.
const NONCE_SEARCH: usize = 4096;

/// Where a body's `version_info` and `response_nonce` values lie, where
/// found as plain strings (at least one is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Frame {
    version: Option<Range<usize>>,
    nonce: Option<Range<usize>>,
    len: usize,
}

impl Frame {
    /// The frame of `body`, if it has a plain `version_info` or
    /// `response_nonce` where only a top-level member can be.
    pub(super) fn of(body: &[u8]) -> Option<Frame> {
        let version = body
            .strip_prefix(VERSION_OPENING)
            .and_then(|rest| {
                let end = memchr::memchr(b'"', rest)?;
                Some(VERSION_OPENING.len()..VERSION_OPENING.len() + end)
            })
            .filter(|range| plain(&body[range.clone()]));
        let nonce = nonce_of(body).filter(|range| plain(&body[range.clone()]));
        let nonce = match (&version, nonce) {
            // The nonce's key must come after the version's value.
            (Some(v), Some(n)) if n.start < v.end + 1 + NONCE_OPENING.len() => None,
            (_, nonce) => nonce,
        };
        (version.is_some() || nonce.is_some()).then_some(Frame {
            version,
            nonce,
            len: body.len(),
        })
    }

    /// The version `body` (whose frame this is) presents, if it was cut out.
    pub(super) fn version<'a>(&self, body: &'a [u8]) -> Option<&'a str> {
        let range = self.version.clone()?;
        std::str::from_utf8(body.get(range)?).ok()
    }

    /// The pieces of a body outside its cut values, in order.
    pub(super) fn pieces(&self) -> Vec<Range<usize>> {
        let mut pieces = Vec::with_capacity(3);
        let mut at = 0;
        for cut in [&self.version, &self.nonce].into_iter().flatten() {
            pieces.push(at..cut.start);
            at = cut.end;
        }
        pieces.push(at..self.len);
        pieces
    }

    /// Whether `body` (of this frame) and `other` (of `theirs`) have the
    /// same frame: the same values cut out and the same bytes around them.
    /// `other` is read through `slice`, as the memo keeps it in pieces.
    pub(super) fn same_as<'b>(
        &self,
        body: &[u8],
        theirs: &Frame,
        slice: impl Fn(Range<usize>) -> Option<Vec<&'b [u8]>>,
    ) -> bool {
        if self.version.is_some() != theirs.version.is_some()
            || self.nonce.is_some() != theirs.nonce.is_some()
        {
            return false;
        }
        let (mine, others) = (self.pieces(), theirs.pieces());
        mine.len() == others.len()
            && mine.into_iter().zip(others).all(|(m, o)| {
                m.len() == o.len()
                    && slice(o).is_some_and(|parts| {
                        let mut at = m.start;
                        parts.into_iter().all(|part| {
                            let same = body.get(at..at + part.len()) == Some(part);
                            at += part.len();
                            same
                        })
                    })
            })
    }

    /// A key of the frame: its length and the bytes around the cut values,
    /// hashed as [`super::request`] hashes whole bodies (edges and samples).
    pub(super) fn key(&self, body: &[u8], hash: impl Fn(&[&[u8]]) -> u64) -> u64 {
        let pieces: Vec<&[u8]> = self
            .pieces()
            .into_iter()
            .filter_map(|r| body.get(r))
            .collect();
        hash(&pieces) ^ (u64::from(self.version.is_some()) << 1) ^ u64::from(self.nonce.is_some())
    }
}

/// The value of a final `,"response_nonce":"…"}`.
fn nonce_of(body: &[u8]) -> Option<Range<usize>> {
    let value_end = body.len().checked_sub(CLOSING.len())?;
    if !body.ends_with(CLOSING) {
        return None;
    }
    let from = value_end.saturating_sub(NONCE_SEARCH);
    let window = &body[from..value_end];
    // The value holds no `"`: the last quote before the end opens it.
    let quote = memchr::memrchr(b'"', window)?;
    let opening_end = from + quote + 1;
    let opening_start = opening_end.checked_sub(NONCE_OPENING.len())?;
    (body.get(opening_start..opening_end) == Some(NONCE_OPENING)).then_some(opening_end..value_end)
}

/// A JSON string's contents that are their own text: no escape, no quote,
/// no control character, valid UTF-8.
fn plain(value: &[u8]) -> bool {
    value.iter().all(|&b| b >= 0x20 && b != b'\\' && b != b'"')
        && std::str::from_utf8(value).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(body: &str) -> Option<(Option<&str>, Option<&str>)> {
        let frame = Frame::of(body.as_bytes())?;
        let text = |r: &Option<Range<usize>>| r.clone().map(|r| &body[r]);
        Some((text(&frame.version), text(&frame.nonce)))
    }

    #[test]
    fn the_version_first_and_the_nonce_last_are_cut_out() {
        assert_eq!(
            cut(r#"{"version_info":"v1","node":{"id":"n"},"response_nonce":"7"}"#),
            Some((Some("v1"), Some("7")))
        );
        assert_eq!(
            cut(r#"{"version_info":"","node":{"id":"n"}}"#),
            Some((Some(""), None))
        );
        assert_eq!(
            cut(r#"{"node":{"id":"n"},"response_nonce":"7"}"#),
            Some((None, Some("7")))
        );
        // Anywhere else, or not plain, it is not cut.
        assert_eq!(cut(r#"{"node":{"id":"n"},"version_info":"v1"}"#), None);
        assert_eq!(cut(r#" {"version_info":"v1"}"#), None);
        assert_eq!(cut(r#"{"version_info":"v\"1"}"#), None);
        assert_eq!(cut(r#"{"version_info":"v\u0031"}"#), None);
        assert_eq!(cut("{\"version_info\":\"v\t1\"}"), None);
        assert_eq!(
            cut(r#"{"node":{"id":"n","response_nonce":"7"}}"#),
            None,
            "not the last member of the top-level object"
        );
        assert_eq!(
            cut(r#"{"version_info":"1","response_nonce":"7"}"#),
            Some((Some("1"), Some("7")))
        );
        assert_eq!(cut(r#"{"version_info":"1"}"#), Some((Some("1"), None)));
    }

    #[test]
    fn frames_are_equal_only_around_the_cut_values() {
        let same = |a: &str, b: &str| {
            let (fa, fb) = (
                Frame::of(a.as_bytes()).unwrap(),
                Frame::of(b.as_bytes()).unwrap(),
            );
            fa.same_as(a.as_bytes(), &fb, |r| b.as_bytes().get(r).map(|s| vec![s]))
        };
        let a = r#"{"version_info":"1","node":{"id":"n"},"response_nonce":"a"}"#;
        assert!(same(
            a,
            r#"{"version_info":"22","node":{"id":"n"},"response_nonce":"bbb"}"#
        ));
        assert!(!same(
            a,
            r#"{"version_info":"1","node":{"id":"m"},"response_nonce":"a"}"#
        ));
        assert!(!same(a, r#"{"version_info":"1","node":{"id":"n"}}"#));
        assert!(!same(
            r#"{"version_info":"1","node":{"id":"n"}}"#,
            r#"{"version_info":"1","node":{"id":"n" }}"#
        ));
    }
}
