//! Presentation of a discovery answer: canonical compact JSON (what Envoy
//! gets), indented JSON (`?pretty`), or YAML (`?format=yaml` or
//! `Accept: application/yaml`), with lowerCamelCase field names or, for a
//! client decoding with a plain JSON decoder, proto field names
//! (`?field-names=proto`, or the default an extra type is configured
//! with), each with an `ETag` of the version so HTTP
//! caches and `If-None-Match` work; and, on a poll and a watch alike, the
//! [`STALE_HEADER`] while the state served is stale. Errors are always JSON.

use std::collections::HashMap;
use std::time::SystemTime;

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::pieces::Pieces;
use super::renditions::{Form, Rendition, Renditions};
use crate::cache::JsonBody;
use crate::face::ApiError;
use crate::xds::Codec;

/// How the client wants the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Presentation {
    pretty: bool,
    yaml: bool,
    proto_names: bool,
    /// The body is in the `?changes` form, not a DiscoveryResponse.
    pub(super) changes: bool,
}

impl Presentation {
    /// From `?pretty`, `?format=json|yaml`, `?field-names=json|proto` (by
    /// default proto names when `proto_names`, the type's default) and the
    /// `Accept` header.
    pub(super) fn from_request(
        query: &HashMap<String, String>,
        headers: &HeaderMap,
        proto_names: bool,
    ) -> Result<Presentation, ApiError> {
        let pretty = match query.get("pretty").map(String::as_str) {
            None | Some("false") | Some("0") => false,
            Some("" | "true" | "1") => true,
            Some(other) => {
                return Err(ApiError::BadRequest(format!(
                    "pretty={other:?}: use ?pretty or ?pretty=true"
                )))
            }
        };
        let accept_yaml = headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.contains("application/yaml")
                    || v.contains("application/x-yaml")
                    || v.contains("text/yaml")
            });
        let yaml = match query.get("format").map(String::as_str) {
            None => accept_yaml,
            Some("json") => false,
            Some("yaml") => true,
            Some(other) => {
                return Err(ApiError::BadRequest(format!(
                    "format={other:?}: use json or yaml (sse and ndjson go with ?watch)"
                )))
            }
        };
        let proto_names = match query.get("field-names").map(String::as_str) {
            None => proto_names,
            Some("json") => false,
            Some("proto") => true,
            Some(other) => {
                return Err(ApiError::BadRequest(format!(
                    "field-names={other:?}: use json (lowerCamelCase, the default) or proto (version_info)"
                )))
            }
        };
        Ok(Presentation {
            pretty,
            yaml,
            proto_names,
            changes: false,
        })
    }

    /// A 200 with `json` (a canonical DiscoveryResponse) presented as asked.
    /// The compact JSON goes out in the pieces it was assembled from; YAML
    /// and indented JSON are rendered once per body and shared
    /// ([`Renditions`]).
    pub(super) fn ok(
        self,
        json: JsonBody,
        version: &str,
        renditions: &Renditions,
        codec: &Codec,
    ) -> Result<Response, ApiError> {
        let (form, content_type) = match (self.yaml, self.pretty) {
            (true, _) => (Form::Yaml, "application/yaml"),
            (false, true) => (Form::Pretty, "application/json"),
            (false, false) => (Form::Compact, "application/json"),
        };
        let body = if form == Form::Compact && !self.proto_names {
            axum::body::Body::new(Pieces::from(json))
        } else {
            let rendition = Rendition {
                form,
                proto_names: self.proto_names,
                changes: self.changes,
            };
            let text = renditions
                .render(&json, rendition, codec)
                .map_err(|e| ApiError::Internal(e.to_string()))?;
            axum::body::Body::from(text)
        };
        let mut response = (StatusCode::OK, body).into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        set_etag(&mut response, version);
        Ok(response)
    }

    pub(super) fn not_modified(version: &str) -> Response {
        let mut response = StatusCode::NOT_MODIFIED.into_response();
        set_etag(&mut response, version);
        response
    }
}

/// Response header set while the session's upstream stream is down: the
/// RFC 3339 time since which the state served is stale.
pub(super) const STALE_HEADER: &str = "x-xds-gateway-stale-since";

/// Marks a response (a poll's, a watch's) as serving a state stale since
/// `since` (the upstream is down: the last good state, kept serving), if so.
pub(super) fn mark_stale(headers: &mut HeaderMap, since: Option<SystemTime>) {
    let Some(since) = since else {
        return;
    };
    let stamp = humantime::format_rfc3339_seconds(since).to_string();
    if let Ok(value) = HeaderValue::from_str(&stamp) {
        headers.insert(STALE_HEADER, value);
    }
}

/// Response header naming, comma-separated, the types of the `Any`s in the
/// answer the gateway has no descriptor for, served as
/// `xds_gateway.v1.OpaqueAny` (`docs/protocol.md`).
pub(super) const OPAQUE_HEADER: &str = "x-xds-gateway-opaque-types";

/// The most bytes of type URLs the opaque-types header carries.
const OPAQUE_HEADER_BYTES: usize = 4096;

/// Marks a response whose body holds `types` served opaque, if any.
pub(super) fn mark_opaque(headers: &mut HeaderMap, types: &[String]) {
    if types.is_empty() {
        return;
    }
    // Type URLs an upstream chose: only those a header can carry as they
    // are, and at most OPAQUE_HEADER_BYTES of them (a client's limit on
    // response headers, 60 KiB in Envoy, is no place for 3,000 of them);
    // the rest are counted.
    let mut value = String::new();
    let mut left_out = 0usize;
    for type_url in types {
        let carried = type_url.bytes().all(|b| b.is_ascii_graphic() && b != b',');
        if !carried || value.len() + type_url.len() + 1 > OPAQUE_HEADER_BYTES {
            left_out += 1;
            continue;
        }
        if !value.is_empty() {
            value.push(',');
        }
        value.push_str(type_url);
    }
    if left_out > 0 {
        if !value.is_empty() {
            value.push(',');
        }
        value.push_str(&format!("+{left_out}-more"));
    }
    if let Ok(value) = HeaderValue::from_str(&value) {
        headers.insert(OPAQUE_HEADER, value);
    }
}

/// `ETag: "<version>"` (a strong validator: the same version is the same bytes
/// for the same request).
fn set_etag(response: &mut Response, version: &str) {
    if let Some(value) = etag(version) {
        response.headers_mut().insert(header::ETAG, value);
    }
}

/// The entity tag of `version`: the version quoted, without any quote of its
/// own (an entity tag cannot hold one); none for a version a header cannot
/// carry. Built in one buffer the header value takes over: every answered poll
/// has one.
fn etag(version: &str) -> Option<HeaderValue> {
    let mut tag = Vec::with_capacity(version.len() + 2);
    tag.push(b'"');
    tag.extend(version.bytes().filter(|&b| b != b'"'));
    tag.push(b'"');
    HeaderValue::from_maybe_shared(bytes::Bytes::from(tag)).ok()
}

/// The version inside an `If-None-Match` value: one entity tag, `"v"` or
/// `W/"v"` (RFC 9110), or a bare `v` for people typing it. A list of tags,
/// `*`, unbalanced quotes or a value that is not ASCII are a 400 that says
/// so (never silently ignored: that would answer a full body to a client
/// that thinks it asked for a 304).
pub(super) fn version_from_if_none_match(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get(header::IF_NONE_MATCH) else {
        return Ok(None);
    };
    let malformed = |why: &str| {
        ApiError::BadRequest(format!(
            "malformed If-None-Match ({why}): send the ETag of the version you have, like \"v1\""
        ))
    };
    let raw = value
        .to_str()
        .map_err(|_| malformed("not ASCII text"))?
        .trim();
    let tag = raw.strip_prefix("W/").unwrap_or(raw);
    if tag == "*" {
        // `*` (and `W/*`, which is not an entity tag at all) would match
        // any version: never a 304 this client could mean.
        return Err(malformed("* is not supported"));
    }
    let opaque = match tag.strip_prefix('"') {
        Some(rest) => rest
            .strip_suffix('"')
            .ok_or_else(|| malformed("an opening quote without a closing one"))?,
        None if tag.contains(',') => return Err(malformed("several ETags; send one")),
        None => tag,
    };
    if opaque.contains('"') {
        return Err(malformed("several ETags or a stray quote; send one"));
    }
    if opaque
        .bytes()
        .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
    {
        return Err(malformed("spaces or control characters in the tag"));
    }
    Ok(Some(opaque.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    use crate::http::tests::query_of as q;

    /// However many types an upstream sends opaque, and however long their
    /// URLs, the header stays small and says how many it left out.
    #[test]
    fn the_opaque_types_header_is_bounded() {
        let mut types: Vec<String> = (0..3000)
            .map(|i| format!("type.googleapis.com/acme.v{i}.SomeLongEnoughName"))
            .collect();
        types.push(format!("type.googleapis.com/{}", "x".repeat(200_000)));
        let mut headers = HeaderMap::new();
        mark_opaque(&mut headers, &types);
        let value = headers[OPAQUE_HEADER].to_str().unwrap();
        assert!(value.len() <= OPAQUE_HEADER_BYTES + 32, "{}", value.len());
        assert!(value.starts_with("type.googleapis.com/acme.v0.SomeLongEnoughName,"));
        assert!(value.ends_with("-more"), "{value}");
        let mut few = HeaderMap::new();
        mark_opaque(&mut few, &types[..2]);
        assert_eq!(
            few[OPAQUE_HEADER],
            "type.googleapis.com/acme.v0.SomeLongEnoughName,type.googleapis.com/acme.v1.SomeLongEnoughName"
        );
    }

    #[test]
    fn choices() {
        let h = HeaderMap::new();
        assert_eq!(
            Presentation::from_request(&q(&[]), &h, false).unwrap(),
            Presentation::default()
        );
        assert!(
            Presentation::from_request(&q(&[("pretty", "")]), &h, false)
                .unwrap()
                .pretty
        );
        assert!(
            Presentation::from_request(&q(&[("format", "yaml")]), &h, false)
                .unwrap()
                .yaml
        );
        assert!(Presentation::from_request(&q(&[("format", "xml")]), &h, false).is_err());
        let mut accept = HeaderMap::new();
        accept.insert(header::ACCEPT, HeaderValue::from_static("application/yaml"));
        assert!(
            Presentation::from_request(&q(&[]), &accept, false)
                .unwrap()
                .yaml
        );
        let proto = |query: &[(&str, &str)], default| {
            Presentation::from_request(&q(query), &h, default).map(|p| p.proto_names)
        };
        assert!(proto(&[], true).unwrap(), "the type's default");
        assert!(!proto(&[("field-names", "json")], true).unwrap());
        assert!(proto(&[("field-names", "proto")], false).unwrap());
        assert!(proto(&[("field-names", "snake")], false).is_err());
    }

    #[test]
    fn stale_is_marked_with_the_time_since() {
        let mut headers = HeaderMap::new();
        mark_stale(&mut headers, None);
        assert!(headers.is_empty());
        let since = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(86_400);
        mark_stale(&mut headers, Some(since));
        assert_eq!(headers[STALE_HEADER], "1970-01-02T00:00:00Z");
    }

    fn if_none_match(v: &[u8]) -> Result<Option<String>, ApiError> {
        let mut h = HeaderMap::new();
        h.insert(header::IF_NONE_MATCH, HeaderValue::from_bytes(v).unwrap());
        version_from_if_none_match(&h)
    }

    #[test]
    fn if_none_match_forms() {
        for v in ["\"abc\"", "W/\"abc\"", "abc", " \"abc\" "] {
            assert_eq!(if_none_match(v.as_bytes()).unwrap().as_deref(), Some("abc"));
        }
        assert_eq!(if_none_match(b"\"a,b\"").unwrap().as_deref(), Some("a,b"));
        assert_eq!(if_none_match(b"\"\"").unwrap().as_deref(), Some(""));
        assert_eq!(version_from_if_none_match(&HeaderMap::new()).unwrap(), None);
    }

    #[test]
    fn malformed_if_none_match_is_a_400() {
        for v in [
            &b"\x80abc"[..],
            b"*",
            b"W/*",
            b"\"a\", \"b\"",
            b"a, b",
            b"\"abc",
            b"\"a\"b\"",
            b"W/abc def",
        ] {
            let err = if_none_match(v).unwrap_err();
            assert!(
                matches!(&err, ApiError::BadRequest(m) if m.contains("If-None-Match")),
                "{v:?}: {err}"
            );
        }
    }

    #[test]
    fn an_etag_is_the_version_quoted() {
        assert_eq!(etag("v1").unwrap(), "\"v1\"");
        assert_eq!(etag("").unwrap(), "\"\"");
        // A quote of the version's own would end the tag early.
        assert_eq!(etag("a\"b\"").unwrap(), "\"ab\"");
        // What a header cannot carry gets no tag at all, never a 500.
        assert!(etag("line\nbreak").is_none());
        assert!(etag("del\u{7f}").is_none());
        let r = Presentation::not_modified("a\"b");
        assert_eq!(r.headers()[header::ETAG], "\"ab\"");
    }

    #[tokio::test]
    async fn yaml_and_pretty_bodies() {
        let json = JsonBody::from(Bytes::from_static(
            br#"{"versionInfo":"1","resources":[{"@type":"t","name":"a"}]}"#,
        ));
        let codec = Codec::embedded();
        let r = Presentation {
            pretty: false,
            yaml: true,
            proto_names: false,
            changes: false,
        }
        .ok(json.clone(), "1", &Renditions::default(), &codec)
        .unwrap();
        assert_eq!(r.headers()[header::ETAG], "\"1\"");
        let body = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        let text = String::from_utf8(body.to_vec()).unwrap();
        assert!(
            text.contains("versionInfo: '1'") && text.contains("'@type': t"),
            "{text}"
        );
        let r = Presentation {
            pretty: true,
            yaml: false,
            proto_names: false,
            changes: false,
        }
        .ok(json, "1", &Renditions::default(), &codec)
        .unwrap();
        let body = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        assert!(body.starts_with(b"{\n  \""));
    }

    /// Proto field names for the envelope and inside resources; map keys
    /// (data) as they were.
    #[tokio::test]
    async fn proto_field_names_on_request() {
        let json = JsonBody::from(Bytes::from_static(
            br#"{"versionInfo":"1","typeUrl":"type.googleapis.com/envoy.config.cluster.v3.Cluster","resources":[{"@type":"type.googleapis.com/envoy.config.cluster.v3.Cluster","name":"a","connectTimeout":"1s","metadata":{"filterMetadata":{"someKey":{"innerKey":1}}}}]}"#,
        ));
        let r = Presentation {
            pretty: false,
            yaml: false,
            proto_names: true,
            changes: false,
        }
        .ok(json, "1", &Renditions::default(), &Codec::embedded())
        .unwrap();
        let body = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        let text = String::from_utf8(body.to_vec()).unwrap();
        for expected in [
            r#""version_info":"1""#,
            r#""type_url":"type.googleapis.com/envoy.config.cluster.v3.Cluster""#,
            r#""connect_timeout":"1s""#,
            r#""filter_metadata":{"someKey":{"innerKey":1.0}}"#,
        ] {
            assert!(text.contains(expected), "{expected} in {text}");
        }
    }
}
