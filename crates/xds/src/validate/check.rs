//! Checking one field's value against its rules: scalars, strings, enums,
//! durations through [`Rules::check`]; lists, maps, wrappers and `Any`
//! fields here; and the [`Violation`] that names the path and the rule.

use prost_reflect::{DynamicMessage, FieldDescriptor, Kind, MapKey, ReflectMessage, Value};

use super::rules::{FieldRules, Rules};
use super::{Validator, Violation};

impl Validator {
    /// Rules on a list, a map, or a message-typed field (wrapper, `Any`,
    /// `Duration`, `Timestamp`).
    pub(super) fn check_container(
        &self,
        field: &FieldDescriptor,
        value: &Value,
        rules: &FieldRules,
        path: &mut Vec<String>,
    ) -> Result<(), Violation> {
        match (&rules.rules, value) {
            (
                Rules::Repeated {
                    min,
                    max,
                    unique,
                    items,
                    ignore_empty,
                },
                Value::List(list),
            ) => {
                let counted = Counted {
                    kind: "repeated",
                    least: "min_items",
                    most: "max_items",
                    unit: "item",
                };
                if !counted.check(list.len(), *min, *max, *ignore_empty, path)? {
                    return Ok(());
                }
                if *unique && list.iter().enumerate().any(|(i, v)| list[..i].contains(v)) {
                    return Err(violation(
                        path,
                        "repeated.unique",
                        "repeated value must contain unique items",
                    ));
                }
                if let Some(items) = items {
                    for (i, item) in list.iter().enumerate() {
                        path.push(format!("[{i}]"));
                        check_element(field, item, items, path)?;
                        path.pop();
                    }
                }
                Ok(())
            }
            (
                Rules::Map {
                    min,
                    max,
                    keys,
                    values,
                    ignore_empty,
                },
                Value::Map(map),
            ) => {
                let counted = Counted {
                    kind: "map",
                    least: "min_pairs",
                    most: "max_pairs",
                    unit: "pair",
                };
                if !counted.check(map.len(), *min, *max, *ignore_empty, path)? {
                    return Ok(());
                }
                let entry = map_entry(field);
                for (key, item) in map {
                    path.push(format!("[{}]", show_key(key)));
                    if let (Some(keys), Some((key_field, _))) = (keys, &entry) {
                        check(&keys.rules, &key_value(key), key_field, path)?;
                    }
                    if let (Some(values), Some((_, value_field))) = (values, &entry) {
                        check_element(value_field, item, values, path)?;
                    }
                    path.pop();
                }
                Ok(())
            }
            (Rules::Any { within, not_in, .. }, Value::Message(any)) => {
                let type_url = any_type_url(any);
                if !within.is_empty() && !within.contains(&type_url) {
                    return Err(violation(
                        path,
                        "any.in",
                        &format!("type URL {type_url:?} must be in the allowed list"),
                    ));
                }
                if not_in.contains(&type_url) {
                    return Err(violation(
                        path,
                        "any.not_in",
                        &format!("type URL {type_url:?} must not be in the forbidden list"),
                    ));
                }
                Ok(())
            }
            (rules, Value::Message(inner)) => match unwrap_wrapper(inner) {
                // A wrapper (google.protobuf.UInt32Value, ...): the rules apply to its value.
                Some(wrapped) => check(rules, &wrapped, field, path),
                None => check(rules, value, field, path),
            },
            _ => Ok(()),
        }
    }
}

/// The count rules of a list (items) or a map (pairs).
struct Counted {
    kind: &'static str,
    least: &'static str,
    most: &'static str,
    unit: &'static str,
}

impl Counted {
    /// Checks `n` against `min`/`max`; false when the rest of the rules are
    /// skipped (`ignore_empty` and nothing there).
    fn check(
        &self,
        n: usize,
        min: Option<u64>,
        max: Option<u64>,
        ignore_empty: bool,
        path: &[String],
    ) -> Result<bool, Violation> {
        let n = n as u64;
        if ignore_empty && n == 0 {
            return Ok(false);
        }
        if let Some(min) = min.filter(|m| n < *m) {
            let message = format!("value must contain at least {min} {}(s)", self.unit);
            return Err(violation(
                path,
                &format!("{}.{}", self.kind, self.least),
                &message,
            ));
        }
        if let Some(max) = max.filter(|m| n > *m) {
            let message = format!("value must contain no more than {max} {}(s)", self.unit);
            return Err(violation(
                path,
                &format!("{}.{}", self.kind, self.most),
                &message,
            ));
        }
        Ok(true)
    }
}

/// One list item or map value under `rules` (items of a list field, or
/// the value field of a map entry).
pub(super) fn check_element(
    field: &FieldDescriptor,
    value: &Value,
    rules: &FieldRules,
    path: &[String],
) -> Result<(), Violation> {
    match value {
        Value::Message(inner) => match unwrap_wrapper(inner) {
            Some(wrapped) => check(&rules.rules, &wrapped, field, path),
            None => check(&rules.rules, value, field, path),
        },
        _ => check(&rules.rules, value, field, path),
    }
}

pub(super) fn check(
    rules: &Rules,
    value: &Value,
    field: &FieldDescriptor,
    path: &[String],
) -> Result<(), Violation> {
    let defined = |n: i32| match field.kind() {
        Kind::Enum(e) => e.get_value(n).is_some(),
        _ => true,
    };
    rules
        .check(value, defined)
        .map_err(|b| violation(path, &b.rule, &b.message))
}

pub(super) fn violation(path: &[String], rule: &str, message: &str) -> Violation {
    let mut joined = String::new();
    for segment in path {
        if !joined.is_empty() && !segment.starts_with('[') {
            joined.push('.');
        }
        joined.push_str(segment);
    }
    Violation {
        path: joined,
        rule: rule.to_owned(),
        message: message.to_owned(),
    }
}

pub(super) fn is_message(field: &FieldDescriptor) -> bool {
    matches!(field.kind(), Kind::Message(_))
}

/// Whether a field can hold messages with rules of their own.
pub(super) fn holds_messages(field: &FieldDescriptor) -> bool {
    match field.kind() {
        Kind::Message(m) if field.is_map() => {
            matches!(m.map_entry_value_field().kind(), Kind::Message(_))
        }
        Kind::Message(m) => {
            !m.full_name().starts_with("google.protobuf.") || m.full_name() == "google.protobuf.Any"
        }
        _ => false,
    }
}

pub(super) fn map_entry(field: &FieldDescriptor) -> Option<(FieldDescriptor, FieldDescriptor)> {
    match field.kind() {
        Kind::Message(m) if field.is_map() => {
            Some((m.map_entry_key_field(), m.map_entry_value_field()))
        }
        _ => None,
    }
}

/// The value inside a `google.protobuf.*Value` wrapper, if `message` is one.
pub(super) fn unwrap_wrapper(message: &DynamicMessage) -> Option<Value> {
    let name = message.descriptor().full_name().to_owned();
    let wrapper = name.starts_with("google.protobuf.")
        && name.ends_with("Value")
        && name != "google.protobuf.Value";
    wrapper.then(|| message.get_field_by_name("value").map(|v| v.into_owned()))?
}

pub(super) fn any_type_url(any: &DynamicMessage) -> String {
    match any.get_field_by_name("type_url").as_deref() {
        Some(Value::String(s)) => s.clone(),
        _ => String::new(),
    }
}

pub(super) fn key_value(key: &MapKey) -> Value {
    match key {
        MapKey::Bool(v) => Value::Bool(*v),
        MapKey::I32(v) => Value::I32(*v),
        MapKey::I64(v) => Value::I64(*v),
        MapKey::U32(v) => Value::U32(*v),
        MapKey::U64(v) => Value::U64(*v),
        MapKey::String(v) => Value::String(v.clone()),
    }
}

pub(super) fn show_key(key: &MapKey) -> String {
    match key {
        MapKey::String(s) => format!("{s:?}"),
        other => format!("{other:?}"),
    }
}
