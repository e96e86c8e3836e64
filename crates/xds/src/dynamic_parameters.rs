//! Dynamic parameters and the constraints that select by them (xDS TP2):
//! a subscription's [`Parameters`], whether a variant's constraints match
//! them ([`matches()`]), and a variant of a resource as the gateway keeps
//! and serves it ([`Variant`]).
//!
//! A single constraint holds when the key is present with that value (or
//! at all, for `exists`); an OR list when any member holds (an empty one
//! never), an AND list when every member does (an empty one always), NOT
//! inverts. Constraints that set nothing match everything, and parameters no
//! constraint names do not stop a match ("unconstrained parameters").

use std::collections::BTreeMap;

use bytes::Bytes;
use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::{
    single_constraint::ConstraintType, SingleConstraint, Type,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DynamicParameterConstraints, ResourceLocator, ResourceName,
};
use prost::Message;

use super::{Codec, JsonError};

/// A subscription's dynamic parameters: key to value, sorted.
pub type Parameters = BTreeMap<String, String>;

/// Type URL of the wrapper a variant is served in.
const WRAPPER_TYPE_URL: &str = "type.googleapis.com/envoy.service.discovery.v3.Resource";

/// `names` as resource locators carrying `parameters`: how a subscription
/// with parameters names what it wants (`resource_locators`, and in delta
/// `resource_locators_subscribe` and `_unsubscribe`).
pub fn locators(names: Vec<String>, parameters: &Parameters) -> Vec<ResourceLocator> {
    names
        .into_iter()
        .map(|name| ResourceLocator {
            name,
            dynamic_parameters: parameters.clone().into_iter().collect(),
        })
        .collect()
}

/// `names` as a request carries them: as names without `parameters`, else
/// as locators carrying them (no names then). The request's names and its
/// locators, in that order.
pub fn names_or_locators(
    names: Vec<String>,
    parameters: &Parameters,
) -> (Vec<String>, Vec<ResourceLocator>) {
    match parameters.is_empty() {
        true => (names, Vec::new()),
        false => (Vec::new(), locators(names, parameters)),
    }
}

/// Why a variant's constraints cannot be taken.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ConstraintsError {
    /// A single constraint says neither a value nor `exists`: Envoy's API
    /// requires one (`validate.required`), so a validating client refuses it.
    #[error("a dynamic parameter constraint on key {key:?} says neither a value nor exists")]
    NoConstraintType { key: String },
}

pub fn matches(constraints: &DynamicParameterConstraints, parameters: &Parameters) -> bool {
    match &constraints.r#type {
        None => true,
        Some(Type::Constraint(single)) => single_matches(single, parameters),
        Some(Type::OrConstraints(list)) => list.constraints.iter().any(|c| matches(c, parameters)),
        Some(Type::AndConstraints(list)) => list.constraints.iter().all(|c| matches(c, parameters)),
        Some(Type::NotConstraints(inner)) => !matches(inner, parameters),
    }
}

fn single_matches(single: &SingleConstraint, parameters: &Parameters) -> bool {
    let present = parameters.get(&single.key);
    match &single.constraint_type {
        Some(ConstraintType::Value(value)) => present == Some(value),
        Some(ConstraintType::Exists(_)) => present.is_some(),
        None => false,
    }
}

/// The first single constraint in `constraints` that says neither a value
/// nor `exists`, as an error.
fn check(constraints: &DynamicParameterConstraints) -> Result<(), ConstraintsError> {
    match &constraints.r#type {
        Some(Type::Constraint(single)) if single.constraint_type.is_none() => {
            Err(ConstraintsError::NoConstraintType {
                key: single.key.clone(),
            })
        }
        None | Some(Type::Constraint(_)) => Ok(()),
        Some(Type::OrConstraints(list) | Type::AndConstraints(list)) => {
            list.constraints.iter().try_for_each(check)
        }
        Some(Type::NotConstraints(inner)) => check(inner),
    }
}

/// One variant of a named resource: the constraints the upstream sent it
/// under (a `Resource` wrapper's `resource_name`), which select the
/// subscriptions it answers and go with it to every client it is served to.
#[derive(Debug, Clone, PartialEq)]
pub struct Variant {
    constraints: DynamicParameterConstraints,
    /// The constraints encoded: what tells two variants of a name apart.
    encoded: Bytes,
    /// `{"@type":"...Resource","resourceName":{...},"resource":` : the
    /// opening of the wrapper, up to the resource's own JSON.
    head: Bytes,
}

impl Variant {
    /// The variant of `name` under `constraints`; `None` when they set
    /// nothing (a plain resource, matching every subscription).
    pub fn of(
        codec: &Codec,
        name: &str,
        constraints: DynamicParameterConstraints,
    ) -> Result<Option<Variant>, VariantError> {
        if constraints.r#type.is_none() {
            return Ok(None);
        }
        check(&constraints)?;
        let encoded = Bytes::from(constraints.encode_to_vec());
        let resource_name = ResourceName {
            name: name.to_owned(),
            dynamic_parameter_constraints: Some(constraints.clone()),
        };
        let name_json =
            codec.render_prost("envoy.service.discovery.v3.ResourceName", &resource_name)?;
        let head = [
            &b"{\"@type\":\""[..],
            WRAPPER_TYPE_URL.as_bytes(),
            b"\",\"resourceName\":",
            &name_json,
            b",\"resource\":",
        ]
        .concat();
        Ok(Some(Variant {
            constraints,
            encoded,
            head: head.into(),
        }))
    }

    /// Whether this variant answers a subscription with `parameters`.
    pub fn matches(&self, parameters: &Parameters) -> bool {
        matches(&self.constraints, parameters)
    }

    /// The constraints, encoded (equal bytes: the same variant).
    pub fn encoded(&self) -> &[u8] {
        &self.encoded
    }

    pub fn constraints(&self) -> &DynamicParameterConstraints {
        &self.constraints
    }

    /// `resource`'s JSON (an `Any`'s) inside the `Resource` wrapper that
    /// carries this variant's name and constraints.
    pub fn wrap(&self, resource: &[u8]) -> Bytes {
        [&self.head[..], resource, b"}"].concat().into()
    }
}

/// Why a variant could not be made.
#[derive(Debug, Clone, thiserror::Error)]
pub enum VariantError {
    #[error(transparent)]
    Constraints(#[from] ConstraintsError),
    #[error(transparent)]
    Json(#[from] JsonError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::{
        single_constraint::Exists, ConstraintList,
    };

    fn value(key: &str, value: &str) -> DynamicParameterConstraints {
        DynamicParameterConstraints {
            r#type: Some(Type::Constraint(SingleConstraint {
                key: key.into(),
                constraint_type: Some(ConstraintType::Value(value.into())),
            })),
        }
    }

    fn exists(key: &str) -> DynamicParameterConstraints {
        DynamicParameterConstraints {
            r#type: Some(Type::Constraint(SingleConstraint {
                key: key.into(),
                constraint_type: Some(ConstraintType::Exists(Exists {})),
            })),
        }
    }

    fn and(list: Vec<DynamicParameterConstraints>) -> DynamicParameterConstraints {
        DynamicParameterConstraints {
            r#type: Some(Type::AndConstraints(ConstraintList { constraints: list })),
        }
    }

    fn or(list: Vec<DynamicParameterConstraints>) -> DynamicParameterConstraints {
        DynamicParameterConstraints {
            r#type: Some(Type::OrConstraints(ConstraintList { constraints: list })),
        }
    }

    fn not(inner: DynamicParameterConstraints) -> DynamicParameterConstraints {
        DynamicParameterConstraints {
            r#type: Some(Type::NotConstraints(Box::new(inner))),
        }
    }

    fn params(pairs: &[(&str, &str)]) -> Parameters {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// TP2's "basic" and "transition" examples: a key the constraints do
    /// not name does not stop a match.
    #[test]
    fn a_value_matches_that_value_whatever_else_the_client_sends() {
        let prod = value("env", "prod");
        assert!(matches(&prod, &params(&[("env", "prod")])));
        assert!(matches(
            &prod,
            &params(&[("env", "prod"), ("version", "v1")])
        ));
        assert!(!matches(&prod, &params(&[("env", "test")])));
        assert!(!matches(&prod, &params(&[])));
        let nothing = DynamicParameterConstraints::default();
        assert!(matches(&nothing, &params(&[])));
        assert!(matches(&nothing, &params(&[("env", "test")])));
    }

    /// TP2's "adding a new key on the server first": `not exists` is the
    /// default for clients that do not send the key yet.
    #[test]
    fn not_exists_is_the_default_for_clients_without_the_key() {
        let old = and(vec![value("env", "prod"), not(exists("version"))]);
        let new = and(vec![value("env", "prod"), value("version", "v1")]);
        let older = params(&[("env", "prod")]);
        let newer = params(&[("env", "prod"), ("version", "v1")]);
        assert!(matches(&old, &older) && !matches(&new, &older));
        assert!(!matches(&old, &newer) && matches(&new, &newer));
        assert!(matches(&exists("version"), &params(&[("version", "")])));
    }

    #[test]
    fn empty_lists_are_or_false_and_and_true() {
        assert!(!matches(&or(vec![]), &params(&[("a", "b")])));
        assert!(matches(&and(vec![]), &params(&[])));
        let either = or(vec![value("env", "qa"), value("env", "test")]);
        assert!(matches(&either, &params(&[("env", "test")])));
        assert!(!matches(&either, &params(&[("env", "prod")])));
    }

    #[test]
    fn a_constraint_without_a_type_is_refused_and_matches_nothing() {
        let bare = DynamicParameterConstraints {
            r#type: Some(Type::Constraint(SingleConstraint {
                key: "env".into(),
                constraint_type: None,
            })),
        };
        assert!(!matches(&bare, &params(&[("env", "x")])));
        let nested = and(vec![value("a", "b"), not(bare)]);
        let made = Variant::of(&Codec::embedded(), "r", nested);
        assert!(matches!(
            made,
            Err(VariantError::Constraints(ConstraintsError::NoConstraintType { ref key })) if key == "env"
        ));
    }

    #[test]
    fn a_variant_wraps_its_resource_with_its_name_and_constraints() {
        let codec = Codec::embedded();
        assert_eq!(
            Variant::of(&codec, "r", DynamicParameterConstraints::default()).unwrap(),
            None
        );
        let variant = Variant::of(&codec, "r", value("env", "prod"))
            .unwrap()
            .unwrap();
        let json = variant.wrap(br#"{"@type":"t","name":"r"}"#);
        let parsed: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(
            parsed,
            serde_json::json!({
                "@type": WRAPPER_TYPE_URL,
                "resourceName": {
                    "name": "r",
                    "dynamicParameterConstraints": {"constraint": {"key": "env", "value": "prod"}}
                },
                "resource": {"@type": "t", "name": "r"}
            })
        );
        let other = Variant::of(&codec, "r", value("env", "test"))
            .unwrap()
            .unwrap();
        assert_ne!(variant.encoded(), other.encoded());
    }
}
