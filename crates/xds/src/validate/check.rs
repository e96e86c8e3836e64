//! Checking one field's value against its rules: scalars, strings, enums,
//! durations through [`Rules::check`]; lists, maps, wrappers and `Any`
//! fields here; and the [`Violation`] that names the path and the rule.

use std::borrow::Cow;

use prost_reflect::{FieldDescriptor, Kind, MapKey, ReflectMessage, Value};

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
                if !counted("repeated", list.len(), (*min, *max), *ignore_empty, path)? {
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
                        check(&items.rules, &unwrapped(item), field, path)?;
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
                if !counted("map", map.len(), (*min, *max), *ignore_empty, path)? {
                    return Ok(());
                }
                let Kind::Message(entry) = field.kind() else {
                    return Ok(());
                };
                let (key_field, value_field) =
                    (entry.map_entry_key_field(), entry.map_entry_value_field());
                for (key, item) in map {
                    path.push(format!("[{}]", show_key(key)));
                    if let Some(keys) = keys {
                        check(&keys.rules, &Value::from(key.clone()), &key_field, path)?;
                    }
                    if let Some(values) = values {
                        check(&values.rules, &unwrapped(item), &value_field, path)?;
                    }
                    path.pop();
                }
                Ok(())
            }
            (Rules::Any { within, not_in, .. }, Value::Message(any)) => {
                let type_url = crate::opaque::any_parts(any).unwrap_or_default().0;
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
            (rules, Value::Message(_)) => check(rules, &unwrapped(value), field, path),
            _ => Ok(()),
        }
    }
}

/// Checks the count `n` of a list's items or a map's pairs (`kind`); false
/// when the rest of the rules are skipped (`ignore_empty`, and none there).
fn counted(
    kind: &str,
    n: usize,
    (min, max): (Option<u64>, Option<u64>),
    ignore_empty: bool,
    path: &[String],
) -> Result<bool, Violation> {
    let (least, most, unit) = match kind {
        "map" => ("min_pairs", "max_pairs", "pair"),
        _ => ("min_items", "max_items", "item"),
    };
    let n = n as u64;
    if ignore_empty && n == 0 {
        return Ok(false);
    }
    if let Some(min) = min.filter(|m| n < *m) {
        let message = format!("value must contain at least {min} {unit}(s)");
        return Err(violation(path, &format!("{kind}.{least}"), &message));
    }
    if let Some(max) = max.filter(|m| n > *m) {
        let message = format!("value must contain no more than {max} {unit}(s)");
        return Err(violation(path, &format!("{kind}.{most}"), &message));
    }
    Ok(true)
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

/// `value`, or the value inside it if it is a `google.protobuf.*Value`
/// wrapper (the rules apply to what it wraps).
fn unwrapped(value: &Value) -> Cow<'_, Value> {
    let Value::Message(message) = value else {
        return Cow::Borrowed(value);
    };
    let desc = message.descriptor();
    let name = desc.full_name();
    let wrapper = name.starts_with("google.protobuf.")
        && name.ends_with("Value")
        && name != "google.protobuf.Value";
    let inner = wrapper
        .then(|| message.get_field_by_name("value"))
        .flatten();
    inner.map_or(Cow::Borrowed(value), |inner| Cow::Owned(inner.into_owned()))
}

pub(super) fn show_key(key: &MapKey) -> String {
    match key {
        MapKey::String(s) => format!("{s:?}"),
        other => format!("{other:?}"),
    }
}
