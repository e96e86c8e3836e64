//! The resource types an operator adds to Envoy's ([`ExtraType`]): a REST
//! name, a type URL, and optionally the type's own gRPC service, for types
//! no Envoy polls but other tools do (Kuma's monitoring assignments, which
//! Prometheus, Grafana Alloy and vmagent read over REST) or an in-house
//! control plane serves.
//!
//! Each is registered once ([`register`]) and lives for the process: a
//! [`ResourceType::Extra`] holds a `&'static` to it, so a resource type
//! stays a `Copy` value that every table keys by, the built-in eight and
//! the extras alike. Registration is idempotent and checked: a name or a
//! type URL is never given two meanings. No I/O.

use std::sync::RwLock;

use super::resource_type::{ResourceType, BUILT_IN_TYPES, TYPE_URL_PREFIX};

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
    /// The fully qualified message name.
    pub(crate) message: &'static str,
    /// Its own gRPC service, if it has one (the per-type transports and
    /// unary fetch use it; ADS needs none).
    pub(crate) service: Option<&'static str>,
    /// What its service's methods are named after: `Stream<X>`,
    /// `Delta<X>`, `Fetch<X>`.
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

/// An extra type as configured (`--extra-type`, `[[extra-type]]`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ExtraTypeSpec {
    /// The REST name (`/v3/discovery:<name>`): lowercase letters, digits,
    /// `-` and `_`.
    pub name: String,
    /// `type.googleapis.com/<fully qualified message name>`.
    pub type_url: String,
    /// The type's own gRPC service (fully qualified), for the per-type
    /// transports and fetch mode; without one it travels over ADS only.
    #[serde(default)]
    pub service: Option<String>,
    /// What the service's methods are named after [default: the message's
    /// short name and an `s`: `MonitoringAssignments`].
    #[serde(default)]
    pub stem: Option<String>,
    /// Whether each SotW response holds the type's whole state, so that a
    /// resource it leaves out is gone [default: true, as go-control-plane's
    /// and Kuma's servers send every type].
    #[serde(default = "yes")]
    pub complete_state: bool,
    /// Whether an empty name list asks for every resource [default: true].
    #[serde(default = "yes")]
    pub wildcard_when_unnamed: bool,
    /// The numbers of the string fields whose values, joined with `/`,
    /// name a resource (a SotW response names none but by its content)
    /// [default: `[1]`, the `name` of most xDS resources; Kuma's
    /// `MonitoringAssignment` is named by mesh and service, `[1, 2]`].
    #[serde(default = "first_field")]
    pub name_fields: Vec<u32>,
}

fn first_field() -> Vec<u32> {
    vec![1]
}

impl ExtraType {
    /// Its place among the extras, below [`MAX_EXTRA_TYPES`].
    pub(crate) fn index(&self) -> usize {
        self.index
    }
}

fn yes() -> bool {
    true
}

impl ExtraTypeSpec {
    /// `NAME=TYPE_URL` (the flag's form), with the defaults.
    pub fn parse_flag(text: &str) -> Result<ExtraTypeSpec, ExtraTypeError> {
        let (name, type_url) = text
            .split_once('=')
            .ok_or_else(|| ExtraTypeError(format!("{text:?} is not NAME=TYPE_URL")))?;
        Ok(ExtraTypeSpec {
            name: name.trim().to_owned(),
            type_url: type_url.trim().to_owned(),
            service: None,
            stem: None,
            complete_state: true,
            wildcard_when_unnamed: true,
            name_fields: first_field(),
        })
    }
}

/// Why an extra type cannot be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("extra type: {0}")]
pub struct ExtraTypeError(String);

static REGISTERED: RwLock<Vec<&'static ExtraType>> = RwLock::new(Vec::new());

/// Registers `spec` (or finds it registered the same way already): the
/// resource type that stands for it from now on.
pub fn register(spec: &ExtraTypeSpec) -> Result<ResourceType, ExtraTypeError> {
    let fail = |reason: String| Err(ExtraTypeError(reason));
    let name = spec.name.as_str();
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
    let taken = BUILT_IN_TYPES.iter().any(|t| t.short_name() == name)
        || ["health_check", "client_status"].contains(&name);
    if taken {
        return fail(format!("name {name:?} is one of Envoy's own endpoints"));
    }
    let Some(message) = spec.type_url.strip_prefix(TYPE_URL_PREFIX) else {
        return fail(format!(
            "type URL {:?} must be {TYPE_URL_PREFIX}<message name>",
            spec.type_url
        ));
    };
    if !is_full_name(message) {
        return fail(format!("{message:?} is not a fully qualified message name"));
    }
    if BUILT_IN_TYPES.iter().any(|t| t.type_url() == spec.type_url) {
        return fail(format!("{} is one of Envoy's own types", spec.type_url));
    }
    if let Some(service) = &spec.service {
        if !is_full_name(service) {
            return fail(format!("service {service:?} is not a fully qualified name"));
        }
    }
    let stem = match &spec.stem {
        Some(stem) => stem.clone(),
        None => format!("{}s", message.rsplit('.').next().unwrap_or(message)),
    };
    if stem.is_empty() || !stem.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return fail(format!("stem {stem:?} must be letters, digits or '_'"));
    }
    let fields_ok = !spec.name_fields.is_empty()
        && spec.name_fields.len() <= 8
        && spec
            .name_fields
            .iter()
            .all(|f| (1..=536_870_911).contains(f));
    if !fields_ok {
        return fail(format!(
            "name-fields {:?} must be one to eight field numbers",
            spec.name_fields
        ));
    }
    let mut registered = crate::sync::write(&REGISTERED);
    for known in registered.iter() {
        if known.name != name && known.type_url != spec.type_url {
            continue;
        }
        let same = known.name == name
            && known.type_url == spec.type_url
            && known.service == spec.service.as_deref()
            && known.stem == stem
            && known.complete_state == spec.complete_state
            && known.wildcard_when_unnamed == spec.wildcard_when_unnamed
            && known.name_fields == spec.name_fields.as_slice();
        if same {
            return Ok(ResourceType::Extra(known));
        }
        return fail(format!(
            "{name:?} ({}) is registered already as {:?} ({})",
            spec.type_url, known.name, known.type_url
        ));
    }
    if registered.len() >= MAX_EXTRA_TYPES {
        return fail(format!("at most {MAX_EXTRA_TYPES} extra types"));
    }
    let leak = |s: &str| -> &'static str { Box::leak(s.to_owned().into_boxed_str()) };
    let extra: &'static ExtraType = Box::leak(Box::new(ExtraType {
        index: registered.len(),
        name: leak(name),
        type_url: leak(&spec.type_url),
        message: leak(message),
        service: spec.service.as_deref().map(leak),
        stem: leak(&stem),
        fetch_method: spec.service.as_ref().map(|_| leak(&format!("Fetch{stem}"))),
        complete_state: spec.complete_state,
        wildcard_when_unnamed: spec.wildcard_when_unnamed,
        name_fields: Box::leak(spec.name_fields.clone().into_boxed_slice()),
    }));
    registered.push(extra);
    Ok(ResourceType::Extra(extra))
}

/// Every extra type registered so far, in registration order.
pub(crate) fn registered() -> Vec<ResourceType> {
    crate::sync::read(&REGISTERED)
        .iter()
        .map(|x| ResourceType::Extra(x))
        .collect()
}

/// The registered extra type whose type URL is `url`.
pub(crate) fn by_type_url(url: &str) -> Option<ResourceType> {
    crate::sync::read(&REGISTERED)
        .iter()
        .find(|x| x.type_url == url)
        .map(|x| ResourceType::Extra(x))
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

    fn spec(name: &str, type_url: &str) -> ExtraTypeSpec {
        ExtraTypeSpec::parse_flag(&format!("{name}={type_url}")).unwrap()
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
        assert!(ExtraTypeSpec::parse_flag("no-equals").is_err());
    }

    #[test]
    fn the_stem_defaults_to_the_message_and_an_s() {
        let t = register(&ExtraTypeSpec {
            service: Some("kuma.observability.v1.MonitoringAssignmentDiscoveryService".into()),
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
            crate::xds::Endpoint::Discovery(t).fetch_method(),
            Some("FetchMonitoringAssignments")
        );
    }
}
