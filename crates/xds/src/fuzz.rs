//! Fuzz targets of the JSON codec, the config-source rewrite and xdstp
//! names (the gateway's `fuzz` module lists every target and its input
//! format, and runs the same bodies on mutated real inputs in its tests).
//!
//! Properties, each a panic when broken: every failure is a [`JsonError`];
//! what parses renders, and the render is a fixed point (parse it again,
//! render it again: the same bytes), from JSON and from protobuf bytes
//! alike; a DiscoveryRequest that protobuf's JSON mapping accepts, the
//! gateway's own request reader accepts too, and reads the same fields; a
//! rewrite leaves nothing to rewrite and is the same every time; glob
//! membership holds only between an xdstp name and a glob, and an xdstp
//! name belongs to its own directory's glob.

use std::sync::OnceLock;
use std::time::Duration;

use super::rewrite::{rewrite_config_sources, RestTarget};
use super::{xdstp, Codec, DiscoveryRequestView, JsonError, ResourceType};

/// The message a discovery request body is.
pub const DISCOVERY_REQUEST: &str = "envoy.service.discovery.v3.DiscoveryRequest";

/// The embedded codec, built once (decoding the descriptor pool is slow).
pub fn codec() -> &'static Codec {
    static CODEC: OnceLock<Codec> = OnceLock::new();
    CODEC.get_or_init(Codec::embedded)
}

/// The type URL a type byte picks: one of the ten resource types.
fn type_url_of(selector: u8) -> &'static str {
    ResourceType::BUILT_IN[usize::from(selector) % ResourceType::BUILT_IN.len()].type_url()
}

/// `json_to_proto`: a JSON `Any` parses (or fails with a parse or
/// unknown-type error), and what parses renders to a fixed point.
/// Accepted: parsed.
pub fn json_to_proto(json: &[u8]) -> bool {
    let codec = codec();
    match codec.parse_any(json) {
        Ok(any) => {
            render_fixed_point(codec, &any.type_url, &any.value);
            true
        }
        Err(JsonError::Parse { .. } | JsonError::UnknownType { .. }) => false,
        Err(e) => panic!("unexpected error: {e}"),
    }
}

/// `proto_to_json`: type byte, then protobuf bytes. What renders parses
/// back, and renders to the same JSON. Accepted: rendered.
pub fn proto_to_json(data: &[u8]) -> bool {
    let Some((&selector, value)) = data.split_first() else {
        return false;
    };
    let codec = codec();
    let type_url = type_url_of(selector);
    let Ok(first) = codec.render_any(type_url, value) else {
        return false;
    };
    let again = codec
        .parse_any(&first)
        .unwrap_or_else(|e| panic!("our own render does not parse: {e}\n{}", lossy(&first)));
    assert_eq!(again.type_url, type_url, "the render names another type");
    let second = codec
        .render_any(&again.type_url, &again.value)
        .unwrap_or_else(|e| panic!("the re-parse does not render: {e}\n{}", lossy(&first)));
    assert_eq!(lossy(&first), lossy(&second), "render is not a fixed point");
    true
}

/// A resource that parsed renders, and its render is a fixed point.
fn render_fixed_point(codec: &Codec, type_url: &str, value: &[u8]) {
    let first = codec
        .render_any(type_url, value)
        .unwrap_or_else(|e| panic!("a parsed {type_url} does not render: {e}"));
    let again = codec
        .parse_any(&first)
        .unwrap_or_else(|e| panic!("our own render does not parse: {e}\n{}", lossy(&first)));
    let second = codec
        .render_any(&again.type_url, &again.value)
        .unwrap_or_else(|e| panic!("the re-parse does not render: {e}\n{}", lossy(&first)));
    assert_eq!(lossy(&first), lossy(&second), "render is not a fixed point");
}

fn lossy(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(bytes)
}

/// A body protobuf's JSON mapping reads as a DiscoveryRequest: it renders
/// to a fixed point, and the gateway's own reader reads it too, with the
/// same version, type, names and node id. Only for UTF-8 bodies: JSON is
/// UTF-8, but serde_json does not check the bytes of a value it skips, so
/// prost-reflect "accepts" a body whose unknown field holds invalid UTF-8,
/// which the gateway's reader rightly refuses (a 400; found by the
/// `discovery_post` target, fuzz/corpus/discovery_post/regress-non-utf8-unknown-field).
///
/// Nor for a body with a key twice in one object: prost-reflect takes the
/// last, but Python's `json_format` (the reference mapping) refuses it
/// ("duplicate key"), and so does the gateway's reader (found by the
/// `discovery_post` target: `regress-duplicate-key`).
pub fn request_readers_agree(body: &[u8]) {
    let codec = codec();
    if std::str::from_utf8(body).is_err() || repeats_a_key(body) {
        return;
    }
    let Ok(msg) = codec.parse_message(DISCOVERY_REQUEST, body, true) else {
        return;
    };
    let json = codec
        .render_message(&msg, DISCOVERY_REQUEST)
        .unwrap_or_else(|e| panic!("does not render: {e}"));
    let again = codec
        .parse_message(DISCOVERY_REQUEST, &json, false)
        .unwrap_or_else(|e| panic!("render does not parse: {e}\n{}", lossy(&json)));
    let json_again = codec
        .render_message(&again, DISCOVERY_REQUEST)
        .unwrap_or_else(|e| panic!("does not render again: {e}"));
    assert_eq!(json, json_again, "render is not a fixed point");

    let view = DiscoveryRequestView::parse(body)
        .unwrap_or_else(|e| panic!("proto3 JSON accepts it, the reader refuses: {e}"));
    let field = |name: &str| msg.get_field_by_name(name).map(|v| v.into_owned());
    let string = |name: &str| field(name).and_then(|v| v.as_str().map(str::to_owned));
    assert_eq!(Some(view.version_info), string("version_info"));
    assert_eq!(Some(view.type_url), string("type_url"));
    let names = field("resource_names")
        .and_then(|v| v.as_list().map(<[_]>::to_vec))
        .unwrap_or_default();
    let names: Vec<String> = names
        .iter()
        .filter_map(|n| n.as_str().map(str::to_owned))
        .collect();
    assert_eq!(view.resource_names, names);
    if let Some(node) = view.node {
        let node_msg = field("node");
        let node_msg = node_msg.as_ref().and_then(|n| n.as_message());
        let id = node_msg.and_then(|n| n.get_field_by_name("id"));
        assert_eq!(
            Some(node.id.as_str()),
            id.as_deref().and_then(|v| v.as_str())
        );
    }
}

/// Whether an object of `body` (JSON) holds a key twice.
fn repeats_a_key(body: &[u8]) -> bool {
    super::plain_json::from_slice_unique_keys(body)
        .is_err_and(|e| e.to_string().contains("duplicate key"))
}

fn target() -> RestTarget {
    RestTarget {
        cluster_name: "xds_cluster".into(),
        refresh_delay: Duration::from_millis(1500),
        request_timeout: Duration::from_secs(10),
    }
}

/// `rewrite`: type byte, then protobuf bytes (any type's bytes under any
/// type: mismatches are inputs too). Accepted: rewritten.
pub fn rewrite(data: &[u8]) -> bool {
    let Some((&selector, value)) = data.split_first() else {
        return false;
    };
    check_rewrite(codec(), type_url_of(selector), value)
}

/// Rewrites `value` of `type_url`: an error is a decode error; a rewrite
/// decodes, leaves nothing to rewrite, and is the same the second time.
/// True if it rewrote anything.
pub fn check_rewrite(codec: &Codec, type_url: &str, value: &[u8]) -> bool {
    let out = match rewrite_config_sources(codec, type_url, value, &target()) {
        Ok(Some(out)) => out,
        Ok(None) => return false,
        // Bytes that are not a message of the type, at any depth.
        Err(
            JsonError::Decode { .. }
            | JsonError::UnknownType { .. }
            | JsonError::MalformedTypeUrl { .. },
        ) => return false,
        Err(e) => panic!("unexpected error: {e}"),
    };
    let left = rewrite_config_sources(codec, type_url, &out, &target())
        .unwrap_or_else(|e| panic!("a rewrite does not decode: {e}"));
    assert!(left.is_none(), "a rewrite left a config source to rewrite");
    let again = rewrite_config_sources(codec, type_url, value, &target())
        .unwrap_or_else(|e| panic!("the second rewrite failed: {e}"))
        .unwrap_or_else(|| panic!("the second rewrite changed nothing"));
    // Bytes may differ (protobuf maps encode in hash order): compare renders.
    if let (Ok(first), Ok(second)) = (
        codec.render_any(type_url, &out),
        codec.render_any(type_url, &again),
    ) {
        assert_eq!(first, second, "the rewrite is not deterministic");
    }
    true
}

/// `xdstp`: a resource name, `\n`, a glob collection name. Accepted: the
/// name belongs to the glob.
pub fn xdstp(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    let (name, glob) = text.split_once('\n').unwrap_or((text, ""));
    for s in [name, glob] {
        if xdstp::is_glob(s) {
            assert!(
                xdstp::is_xdstp(s),
                "{s:?}: a glob that is not an xdstp name"
            );
        }
    }
    let member = xdstp::in_collection(name, glob);
    if member {
        assert!(
            xdstp::is_glob(glob),
            "{name:?} belongs to a non-glob {glob:?}"
        );
        assert!(
            !xdstp::is_glob(name),
            "the glob {name:?} belongs to {glob:?}"
        );
        // Directives do not name the resource.
        assert!(xdstp::in_collection(&format!("{name}#entry=x"), glob));
    }
    if let Some(parent) = parent_glob(name) {
        assert!(
            xdstp::in_collection(name, &parent),
            "{name:?} is not in its own directory's glob {parent:?}"
        );
    }
    member
}

/// The glob collection of the directory `name` is in (`xdstp://a/T/dir/x?p`
/// → `xdstp://a/T/dir/*?p`), for an xdstp resource name that is not a glob
/// itself and has no `%` escape (a decoded `/` would move the directory).
/// For the fuzz target's property that a name belongs to that glob.
fn parent_glob(name: &str) -> Option<String> {
    let parsed = xdstp::Parsed::new(name)?;
    if name.contains('%') || parsed.id == "*" || parsed.id.ends_with("/*") {
        return None;
    }
    let rest = name.strip_prefix(xdstp::SCHEME)?;
    let rest = rest.split_once('#').map_or(rest, |(before, _)| before);
    let (path, query) = match rest.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (rest, None),
    };
    let dir = &path[..=path.rfind('/')?];
    Some(match query {
        Some(query) => format!("{}{dir}*?{query}", xdstp::SCHEME),
        None => format!("{}{dir}*", xdstp::SCHEME),
    })
}
