//! The resource types an operator adds to Envoy's ([`ExtraType`]): a REST
//! name, a type URL, and optionally the type's own gRPC service, for types
//! no Envoy polls but other tools do (Kuma's monitoring assignments, read
//! by Prometheus, Grafana Alloy and vmagent) or an in-house control plane
//! serves.
//!
//! Each is registered once ([`register`], through `ResourceType::register`,
//! which keeps Envoy's own names and type URLs out) and lives for the
//! process: `ResourceType::Extra` holds a `&'static` to it, so a resource
//! type stays a `Copy` value. Registration is idempotent, and a name or a
//! type URL never gets two meanings. No I/O.

use std::sync::{PoisonError, RwLock};

/// How many extra types a process may register.
pub const MAX_EXTRA_TYPES: usize = 32;

/// One type an operator added, as registered.
#[derive(Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExtraType {
    /// Its place among the extras (after the built-in types in tables).
    pub(crate) index: usize,
    /// The REST name: `/v3/discovery:<name>`.
    pub(crate) name: &'static str,
    /// `type.googleapis.com/<message>`.
    pub(crate) type_url: &'static str,
    pub(crate) message: &'static str,
    /// Its own gRPC service, if it has one (ADS needs none).
    pub(crate) service: Option<&'static str>,
    /// What `Stream<X>`, `Delta<X>` and `Fetch<X>` are named after.
    pub(crate) stem: &'static str,
    /// `Fetch<stem>`, when it has a service.
    pub(crate) fetch_method: Option<&'static str>,
    /// Whether a SotW response carries the type's whole state.
    pub(crate) complete_state: bool,
    /// Whether an empty name list means every resource.
    pub(crate) wildcard_when_unnamed: bool,
    /// The string fields whose values, joined with `/`, name a resource.
    pub(crate) name_fields: &'static [u32],
}

impl ExtraType {
    /// Its place among the extras, below [`MAX_EXTRA_TYPES`].
    pub fn index(&self) -> usize {
        self.index
    }
}

/// Why an extra type cannot be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("extra type: {0}")]
pub struct ExtraTypeError(pub String);

/// What an operator says of an extra type (`--extra-type`,
/// `[[extra-type]]`), borrowed: see `config::ExtraTypeSpec` for each
/// field's meaning and default.
#[derive(Debug, Clone, Copy)]
pub struct Definition<'a> {
    pub name: &'a str,
    pub type_url: &'a str,
    pub service: Option<&'a str>,
    pub stem: Option<&'a str>,
    pub complete_state: bool,
    pub wildcard_when_unnamed: bool,
    pub name_fields: &'a [u32],
}

static REGISTERED: RwLock<Vec<&'static ExtraType>> = RwLock::new(Vec::new());

/// Registers `def`, whose message is `message` (its type URL's), or finds
/// it registered the same way already. The caller has kept Envoy's own
/// names and type URLs out.
pub fn register(def: &Definition<'_>, message: &str) -> Result<&'static ExtraType, ExtraTypeError> {
    let fail = |reason: String| Err(ExtraTypeError(reason));
    let name = def.name;
    let name_ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if !name_ok {
        return fail(format!(
            "name {name:?} must be 1 to 64 lowercase letters, digits, '-' or '_'"
        ));
    }
    if !is_full_name(message) {
        return fail(format!("{message:?} is not a fully qualified message name"));
    }
    if let Some(service) = def.service {
        if !is_full_name(service) {
            return fail(format!("service {service:?} is not a fully qualified name"));
        }
    }
    let stem = match def.stem {
        Some(stem) => stem.to_owned(),
        None => format!("{}s", message.rsplit('.').next().unwrap_or(message)),
    };
    if stem.is_empty() || !stem.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return fail(format!("stem {stem:?} must be letters, digits or '_'"));
    }
    let fields_ok = !def.name_fields.is_empty()
        && def.name_fields.len() <= 8
        && def
            .name_fields
            .iter()
            .all(|f| (1..=536_870_911).contains(f));
    if !fields_ok {
        return fail(format!(
            "name-fields {:?} must be one to eight field numbers",
            def.name_fields
        ));
    }
    let mut registered = REGISTERED.write().unwrap_or_else(PoisonError::into_inner);
    for known in registered.iter() {
        if known.name != name && known.type_url != def.type_url {
            continue;
        }
        let same = known.name == name
            && known.type_url == def.type_url
            && known.service == def.service
            && known.stem == stem
            && known.complete_state == def.complete_state
            && known.wildcard_when_unnamed == def.wildcard_when_unnamed
            && known.name_fields == def.name_fields;
        if same {
            return Ok(known);
        }
        return fail(format!(
            "{name:?} ({}) is registered already as {:?} ({})",
            def.type_url, known.name, known.type_url
        ));
    }
    if registered.len() >= MAX_EXTRA_TYPES {
        return fail(format!("at most {MAX_EXTRA_TYPES} extra types"));
    }
    let leak = |s: &str| -> &'static str { Box::leak(s.to_owned().into_boxed_str()) };
    let extra: &'static ExtraType = Box::leak(Box::new(ExtraType {
        index: registered.len(),
        name: leak(name),
        type_url: leak(def.type_url),
        message: leak(message),
        service: def.service.map(leak),
        stem: leak(&stem),
        fetch_method: def.service.map(|_| leak(&format!("Fetch{stem}"))),
        complete_state: def.complete_state,
        wildcard_when_unnamed: def.wildcard_when_unnamed,
        name_fields: Box::leak(def.name_fields.to_vec().into_boxed_slice()),
    }));
    registered.push(extra);
    Ok(extra)
}

pub(crate) fn registered() -> Vec<&'static ExtraType> {
    REGISTERED
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

pub(crate) fn by_type_url(url: &str) -> Option<&'static ExtraType> {
    let registered = REGISTERED.read().unwrap_or_else(PoisonError::into_inner);
    registered.iter().find(|x| x.type_url == url).copied()
}

/// `a.b.C`: dot-separated identifiers.
fn is_full_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 512
        && name.split('.').all(|part| {
            part.chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ResourceType;

    fn spec<'a>(name: &'a str, type_url: &'a str) -> Definition<'a> {
        Definition {
            name,
            type_url,
            service: None,
            stem: None,
            complete_state: true,
            wildcard_when_unnamed: true,
            name_fields: &[1],
        }
    }

    fn register(def: &Definition<'_>) -> Result<ResourceType, ExtraTypeError> {
        ResourceType::register(def)
    }

    #[test]
    fn registering_twice_the_same_way_is_one_type() {
        let s = spec("things-a", "type.googleapis.com/acme.v1.Thing");
        let a = register(&s).unwrap();
        let b = register(&s).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.type_url(), "type.googleapis.com/acme.v1.Thing");
        assert_eq!(a.short_name(), "things-a");
        assert_eq!(ResourceType::from_type_url(a.type_url()), Some(a));
        assert!(ResourceType::all().contains(&a));
    }

    #[test]
    fn a_name_or_type_url_never_gets_two_meanings() {
        register(&spec("things-b", "type.googleapis.com/acme.v1.ThingB")).unwrap();
        assert!(register(&spec("things-b", "type.googleapis.com/acme.v1.Other")).is_err());
        assert!(register(&spec("others-b", "type.googleapis.com/acme.v1.ThingB")).is_err());
    }

    #[test]
    fn envoys_names_and_types_and_bad_spellings_are_refused() {
        for (name, url) in [
            ("clusters", "type.googleapis.com/acme.v1.C"),
            ("client_status", "type.googleapis.com/acme.v1.C"),
            ("mine", ResourceType::Clusters.type_url()),
            ("Upper", "type.googleapis.com/acme.v1.C"),
            ("", "type.googleapis.com/acme.v1.C"),
            ("mine", "acme.v1.C"),
            ("mine", "type.googleapis.com/acme..C"),
            ("mine", "type.googleapis.com/1acme.C"),
        ] {
            assert!(register(&spec(name, url)).is_err(), "{name} {url}");
        }
    }

    #[test]
    fn the_stem_defaults_to_the_message_and_an_s() {
        let t = register(&Definition {
            service: Some("kuma.observability.v1.MonitoringAssignmentDiscoveryService"),
            ..spec(
                "monitoringassignments",
                "type.googleapis.com/kuma.observability.v1.MonitoringAssignment",
            )
        })
        .unwrap();
        assert_eq!(
            t.stream_path(false).as_deref(),
            Some("/kuma.observability.v1.MonitoringAssignmentDiscoveryService/StreamMonitoringAssignments")
        );
        assert_eq!(
            crate::Endpoint::Discovery(t).fetch_method(),
            Some("FetchMonitoringAssignments")
        );
    }
}
