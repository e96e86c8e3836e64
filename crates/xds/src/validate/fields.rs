//! Reading a rules message (`validate.StringRules`, `validate.Int32Rules`,
//! ...) into plain values: a set field, a list, a flag, an unsigned number,
//! string or bytes. What `rules.rs`, `bounds.rs` and `text.rs` each read
//! their rules with.

use prost_reflect::{DynamicMessage, ReflectMessage, Value};

/// The value of the field `name` of `message`, if it is set.
pub(super) fn field(message: &DynamicMessage, name: &str) -> Option<Value> {
    let desc = message.descriptor().get_field_by_name(name)?;
    message
        .has_field(&desc)
        .then(|| message.get_field(&desc).into_owned())
}

/// The items of the repeated field `name` (none if it is unset).
pub(super) fn list(message: &DynamicMessage, name: &str) -> Vec<Value> {
    match field(message, name) {
        Some(Value::List(values)) => values,
        _ => Vec::new(),
    }
}

pub(super) fn flag(message: &DynamicMessage, name: &str) -> bool {
    matches!(field(message, name), Some(Value::Bool(true)))
}

pub(super) fn uint(message: &DynamicMessage, name: &str) -> Option<u64> {
    field(message, name)?.as_u64()
}

pub(super) fn bytes_of(value: &Value) -> Option<Vec<u8>> {
    match value {
        Value::String(s) => Some(s.as_bytes().to_vec()),
        Value::Bytes(b) => Some(b.to_vec()),
        _ => None,
    }
}
