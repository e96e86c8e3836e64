//! The YAML and indented-JSON renditions of answer bodies, and those with
//! proto field names (`?field-names=proto`), rendered once per body and
//! shared by every request that asks for the same one (600 `?pretty`
//! streams each holding a rendering of its own took 1.2 GB; they hold
//! one).
//!
//! A body is known by its pieces ([`JsonBody`]): the resources piece is
//! shared by every answer of the same resources, so it is compared by
//! identity (its address and length, kept alive by the entry that names
//! it, so the address cannot be reused while the entry exists); the
//! opening and closing, a few dozen bytes, by content. Concurrent requests
//! for a rendition not yet made wait for the one rendering. Entries are
//! weighed by what they keep alive, rendition and resources, and the least
//! used go first past its bound (its share of the memory budget,
//! `config::MemoryShares`).

use bytes::Bytes;
use moka::sync::Cache;

use crate::cache::JsonBody;
use crate::xds::Codec;

/// A text rendition of a `DiscoveryResponse`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Rendition {
    pub(crate) form: Form,
    /// Proto field names (`version_info`) instead of lowerCamelCase ones.
    pub(crate) proto_names: bool,
    /// The body is in the `?changes` form (a `DeltaDiscoveryResponse` and
    /// its `fullState`), not a `DiscoveryResponse`.
    pub(crate) changes: bool,
}

/// How a rendition is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Form {
    /// One line, as the canonical body.
    Compact,
    /// `?pretty`: indented JSON and a newline.
    Pretty,
    /// `?format=yaml`.
    Yaml,
}

const DISCOVERY_RESPONSE: &str = "envoy.service.discovery.v3.DiscoveryResponse";
const DELTA_RESPONSE: &str = "envoy.service.discovery.v3.DeltaDiscoveryResponse";
/// The one key of the `?changes` form that `DeltaDiscoveryResponse` lacks.
const FULL_STATE: (&str, &str) = ("fullState", "full_state");

/// Why a body could not be rendered (the gateway's fault: the body is its
/// own canonical JSON).
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum RenditionError {
    #[error("response is not JSON: {0}")]
    NotJson(String),
    #[error("YAML rendering failed: {0}")]
    Yaml(String),
    #[error("JSON rendering failed: {0}")]
    Json(String),
    #[error(transparent)]
    Names(#[from] crate::xds::JsonError),
}

/// Renditions made recently, shared.
pub(crate) struct Renditions {
    made: Cache<Key, Made>,
}

impl std::fmt::Debug for Renditions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Renditions")
            .field("entries", &self.made.entry_count())
            .finish()
    }
}

impl Default for Renditions {
    fn default() -> Renditions {
        Renditions::with_capacity(crate::config::MemoryShares::default().renditions)
    }
}

impl Renditions {
    /// A memo keeping at most `bytes` alive.
    pub(crate) fn with_capacity(bytes: u64) -> Renditions {
        Renditions {
            made: Cache::builder()
                .max_capacity(bytes)
                .weigher(|_: &Key, made: &Made| {
                    u32::try_from(made.text.len() + made.resources.len()).unwrap_or(u32::MAX)
                })
                .build(),
        }
    }

    /// `json` rendered as `rendition`: the shared rendering when one is
    /// held, else made now (once, however many ask at the same time).
    pub(crate) fn render(
        &self,
        json: &JsonBody,
        rendition: Rendition,
        codec: &Codec,
    ) -> Result<Bytes, RenditionError> {
        let [head, resources, tail] = json.clone().into_pieces();
        let key = Key {
            resources: resources.as_ptr() as usize,
            resources_len: resources.len(),
            head,
            tail,
            rendition,
        };
        self.made
            .try_get_with(key, || {
                render(json, rendition, codec).map(|text| Made { text, resources })
            })
            .map(|made| made.text)
            .map_err(|e| (*e).clone())
    }
}

/// A body as the memo knows it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    /// The resources piece's address: the entry keeps it alive.
    resources: usize,
    resources_len: usize,
    head: Bytes,
    tail: Bytes,
    rendition: Rendition,
}

/// A rendition, and the resources piece its key names (kept alive so that
/// its address names nothing else while the entry exists).
#[derive(Clone)]
struct Made {
    text: Bytes,
    resources: Bytes,
}

/// `json` with proto field names: a `DiscoveryResponse` written again, or
/// a `?changes` body, a `DeltaDiscoveryResponse` and its `fullState`
/// (written `full_state`). The lists the canonical body always has stay
/// when empty: proto3 JSON leaves an empty repeated field out, and a plain
/// decoder may require it.
fn with_proto_names(codec: &Codec, json: &[u8], changes: bool) -> Result<Bytes, RenditionError> {
    let not_json = |e: serde_json::Error| RenditionError::NotJson(e.to_string());
    let (renamed, lists, full_state): (Bytes, &[&str], _) = if changes {
        let mut value = crate::xds::plain_json::from_slice(json).map_err(not_json)?;
        let full_state = value
            .as_object_mut()
            .and_then(|map| map.remove(FULL_STATE.0));
        let delta = serde_json::to_vec(&value).map_err(not_json)?;
        let renamed = codec.with_proto_names(DELTA_RESPONSE, &delta)?;
        (renamed, &["resources", "removed_resources"], full_state)
    } else {
        let renamed = codec.with_proto_names(DISCOVERY_RESPONSE, json)?;
        (renamed, &["resources"], None)
    };
    let complete = lists
        .iter()
        .all(|list| memchr::memmem::find(&renamed, format!("\"{list}\":").as_bytes()).is_some());
    if complete && full_state.is_none() {
        return Ok(renamed);
    }
    let mut value = crate::xds::plain_json::from_slice(&renamed).map_err(not_json)?;
    if let serde_json::Value::Object(map) = &mut value {
        if let Some(full_state) = full_state {
            map.insert(FULL_STATE.1.into(), full_state);
        }
        for list in lists {
            map.entry(*list)
                .or_insert_with(|| serde_json::Value::Array(Vec::new()));
        }
    }
    Ok(serde_json::to_vec(&value).map_err(not_json)?.into())
}

fn render(json: &JsonBody, rendition: Rendition, codec: &Codec) -> Result<Bytes, RenditionError> {
    let mut json = json.to_bytes();
    if rendition.proto_names {
        json = with_proto_names(codec, &json, rendition.changes)?;
    }
    // Transcoded as it is read: no tree of the body is built (a tree of a
    // megabyte of JSON is ten times that), and keys keep their order.
    let mut text = Vec::with_capacity(json.len() + json.len() / 2);
    let mut read = serde_json::Deserializer::from_slice(&json);
    let transcoded = match rendition.form {
        Form::Compact => return Ok(json),
        Form::Yaml => {
            let mut yaml = serde_yaml_ng::Serializer::new(&mut text);
            serde_transcode::transcode(&mut read, &mut yaml).map_err(|e| e.to_string())
        }
        Form::Pretty => {
            let mut pretty = serde_json::Serializer::pretty(&mut text);
            serde_transcode::transcode(&mut read, &mut pretty).map_err(|e| e.to_string())
        }
    };
    let not_json = |e: serde_json::Error| RenditionError::NotJson(e.to_string());
    if let Err(reason) = transcoded {
        // The reader's error surfaces through the writer: tell them apart.
        serde_json::from_slice::<serde::de::IgnoredAny>(&json).map_err(not_json)?;
        return Err(match rendition.form {
            Form::Yaml => RenditionError::Yaml(reason),
            _ => RenditionError::Json(reason),
        });
    }
    read.end().map_err(not_json)?;
    if rendition.form == Form::Pretty {
        text.push(b'\n');
    }
    Ok(Bytes::from(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Renditions `renditions` holds now.
    fn held(renditions: &Renditions) -> u64 {
        renditions.made.run_pending_tasks();
        renditions.made.entry_count()
    }

    const YAML: Rendition = Rendition {
        form: Form::Yaml,
        proto_names: false,
        changes: false,
    };
    const PRETTY: Rendition = Rendition {
        form: Form::Pretty,
        proto_names: false,
        changes: false,
    };

    fn body(head: &'static [u8], resources: &Bytes, tail: &'static [u8]) -> JsonBody {
        JsonBody::new(
            Bytes::from_static(head),
            resources.clone(),
            Bytes::from_static(tail),
        )
    }

    /// Proto field names, and `resources` kept when empty (a plain decoder
    /// may require it).
    #[test]
    fn proto_names_keep_an_empty_resources_list() {
        let renditions = Renditions::default();
        let resources = Bytes::new();
        let json = body(
            b"{\"versionInfo\":\"1\",\"resources\":[",
            &resources,
            b"],\"typeUrl\":\"t\"}",
        );
        let compact = Rendition {
            form: Form::Compact,
            proto_names: true,
            changes: false,
        };
        let text = renditions
            .render(&json, compact, &Codec::embedded())
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"version_info": "1", "resources": [], "type_url": "t"})
        );
    }

    /// The `?changes` form with proto names, `fullState` included.
    #[test]
    fn the_changes_form_gets_proto_names_too() {
        let renditions = Renditions::default();
        let resources = Bytes::new();
        let json = body(
            b"{\"systemVersionInfo\":\"2~x\",\"resources\":[",
            &resources,
            b"],\"removedResources\":[\"b\"],\"typeUrl\":\"t\",\"fullState\":false}",
        );
        let changes = Rendition {
            form: Form::Compact,
            proto_names: true,
            changes: true,
        };
        let text = renditions
            .render(&json, changes, &Codec::embedded())
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"system_version_info": "2~x", "resources": [], "removed_resources": ["b"],
                "type_url": "t", "full_state": false})
        );
    }

    #[test]
    fn one_rendering_per_body_shared_by_every_request() {
        let renditions = Renditions::default();
        let resources = Bytes::from_static(b"{\"a\":1},{\"b\":2}");
        let json = body(
            b"{\"version_info\":\"1\",\"resources\":[",
            &resources,
            b"]}",
        );
        let first = renditions.render(&json, YAML, &Codec::embedded()).unwrap();
        let again = renditions.render(&json, YAML, &Codec::embedded()).unwrap();
        assert_eq!(first.as_ptr(), again.as_ptr(), "the same bytes, shared");
        assert_eq!(
            std::str::from_utf8(&first).unwrap(),
            "version_info: '1'\nresources:\n- a: 1\n- b: 2\n"
        );
        let pretty = renditions
            .render(&json, PRETTY, &Codec::embedded())
            .unwrap();
        assert!(pretty.ends_with(b"}\n") && pretty.starts_with(b"{\n  \""));
        assert_eq!(held(&renditions), 2);
    }

    /// The memo never answers one body with another's rendering: equal
    /// resources bytes in another buffer, or another opening or closing,
    /// are rendered afresh, and each rendering is what its body says.
    #[test]
    fn another_body_is_rendered_afresh() {
        let renditions = Renditions::default();
        let resources = Bytes::from_static(b"{\"a\":1}");
        let copy = Bytes::copy_from_slice(&resources);
        let v1 = body(
            b"{\"version_info\":\"1\",\"resources\":[",
            &resources,
            b"]}",
        );
        let v2 = body(
            b"{\"version_info\":\"2\",\"resources\":[",
            &resources,
            b"]}",
        );
        let nonce = body(
            b"{\"version_info\":\"1\",\"resources\":[",
            &resources,
            b"],\"nonce\":\"n\"}",
        );
        let copied = body(b"{\"version_info\":\"1\",\"resources\":[", &copy, b"]}");
        let text = |json: &JsonBody| renditions.render(json, PRETTY, &Codec::embedded()).unwrap();
        let (a, b, c, d) = (text(&v1), text(&v2), text(&nonce), text(&copied));
        assert!(a.windows(3).any(|w| w == b"\"1\"") && b.windows(3).any(|w| w == b"\"2\""));
        assert!(c.windows(7).any(|w| w == b"\"nonce\""));
        assert_eq!(a, d, "the same text");
        assert_ne!(a.as_ptr(), d.as_ptr(), "from a rendering of its own");
        assert_eq!(held(&renditions), 4);
    }

    #[test]
    fn what_is_not_json_is_the_gateways_error() {
        let renditions = Renditions::default();
        let json = JsonBody::from(Bytes::from_static(b"{not json"));
        let err = renditions
            .render(&json, YAML, &Codec::embedded())
            .unwrap_err();
        assert!(matches!(err, RenditionError::NotJson(_)), "{err}");
    }
}
