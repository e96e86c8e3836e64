//! One field's protoc-gen-validate rules (`validate.FieldRules`), read once
//! from the field's options into plain values ([`Rules::read`]), and checked
//! against one value ([`Rules::check`]). Messages say what was expected the
//! way protoc-gen-validate's do ("value must be greater than 0s").

use prost_reflect::{DynamicMessage, ReflectMessage, Value};

use super::bounds::{Bounds, Num};
use super::broken::{broken, Broken};
use super::fields::{bytes_of, field, flag, list, uint};
use super::text::TextRules;

/// Every rule of one field.
#[derive(Debug, Clone)]
pub(crate) enum Rules {
    Number {
        kind: &'static str,
        bounds: Bounds<Num>,
        ignore_empty: bool,
    },
    Bool(Option<bool>),
    Text {
        kind: &'static str,
        rules: Box<TextRules>,
    },
    Enum {
        constant: Option<i32>,
        defined_only: bool,
        within: Vec<i32>,
        not_in: Vec<i32>,
    },
    Repeated {
        min: Option<u64>,
        max: Option<u64>,
        unique: bool,
        items: Option<Box<FieldRules>>,
        ignore_empty: bool,
    },
    Map {
        min: Option<u64>,
        max: Option<u64>,
        keys: Option<Box<FieldRules>>,
        values: Option<Box<FieldRules>>,
        ignore_empty: bool,
    },
    Any {
        required: bool,
        within: Vec<String>,
        not_in: Vec<String>,
    },
    Time {
        kind: &'static str,
        required: bool,
        bounds: Bounds<i128>,
    },
    None,
}

/// A field's rules and its message rules (`required`, `skip`).
#[derive(Debug, Clone)]
pub(crate) struct FieldRules {
    pub(crate) rules: Rules,
    pub(crate) required: bool,
    pub(crate) skip: bool,
}

/// Nanoseconds of a `google.protobuf.Duration` or `Timestamp` message.
pub(super) fn nanos(value: &Value) -> Option<i128> {
    let message = value.as_message()?;
    let seconds = field(message, "seconds").and_then(|v| v.as_i64());
    let nanos = field(message, "nanos").and_then(|v| v.as_i32());
    Some(i128::from(seconds.unwrap_or(0)) * 1_000_000_000 + i128::from(nanos.unwrap_or(0)))
}

impl FieldRules {
    /// The rules in a `validate.FieldRules` message.
    pub(crate) fn read(rules: &DynamicMessage) -> FieldRules {
        let message = field(rules, "message");
        let message = message.as_ref().and_then(Value::as_message);
        let (required, skip) =
            message.map_or((false, false), |m| (flag(m, "required"), flag(m, "skip")));
        let kind = rules
            .descriptor()
            .oneofs()
            .find(|o| o.name() == "type")
            .and_then(|o| o.fields().find(|f| rules.has_field(f)));
        let rules = kind
            .and_then(|desc| {
                Some(Rules::read(
                    desc.name(),
                    rules.get_field(&desc).as_message()?,
                ))
            })
            .unwrap_or(Rules::None);
        let required = required
            || matches!(
                rules,
                Rules::Any { required: true, .. } | Rules::Time { required: true, .. }
            );
        FieldRules {
            rules,
            required,
            skip,
        }
    }
}

impl Rules {
    fn read(kind: &str, r: &DynamicMessage) -> Rules {
        // Rules name themselves `{kind}.{rule}`: the kind, as `'static`.
        const KINDS: &str = "float double int32 int64 uint32 uint64 sint32 sint64 fixed32 \
                             fixed64 sfixed32 sfixed64 bool string bytes enum repeated map any \
                             duration timestamp";
        let Some(kind) = KINDS.split(' ').find(|k| *k == kind) else {
            return Rules::None;
        };
        match kind {
            "string" | "bytes" => Rules::Text {
                kind,
                rules: Box::new(TextRules::read(r)),
            },
            "enum" => Rules::Enum {
                constant: field(r, "const").and_then(|v| v.as_i32()),
                defined_only: flag(r, "defined_only"),
                within: list(r, "in").iter().filter_map(Value::as_i32).collect(),
                not_in: list(r, "not_in").iter().filter_map(Value::as_i32).collect(),
            },
            "repeated" => Rules::Repeated {
                min: uint(r, "min_items"),
                max: uint(r, "max_items"),
                unique: flag(r, "unique"),
                items: nested(r, "items"),
                ignore_empty: flag(r, "ignore_empty"),
            },
            "map" => Rules::Map {
                min: uint(r, "min_pairs"),
                max: uint(r, "max_pairs"),
                keys: nested(r, "keys"),
                values: nested(r, "values"),
                ignore_empty: flag(r, "ignore_empty"),
            },
            "any" => {
                let urls = |name| {
                    list(r, name)
                        .iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                };
                Rules::Any {
                    required: flag(r, "required"),
                    within: urls("in"),
                    not_in: urls("not_in"),
                }
            }
            "duration" | "timestamp" => Rules::Time {
                kind,
                required: flag(r, "required"),
                bounds: Bounds::read(r, nanos),
            },
            "bool" => Rules::Bool(field(r, "const").and_then(|v| v.as_bool())),
            _ => Rules::Number {
                kind,
                bounds: Bounds::read(r, Num::of),
                ignore_empty: flag(r, "ignore_empty"),
            },
        }
    }

    /// Checks a scalar, string, bytes, enum, duration or timestamp value
    /// (lists, maps and messages are walked by the caller). `enum_defined`
    /// says whether an enum number is a defined value of its enum.
    pub fn check(&self, value: &Value, enum_defined: impl Fn(i32) -> bool) -> Result<(), Broken> {
        match self {
            Rules::Number {
                kind,
                bounds,
                ignore_empty,
            } => match Num::of(value) {
                Some(n) if !(*ignore_empty && n.is_zero()) => {
                    bounds.check(kind, n, |n| n.to_string())
                }
                _ => Ok(()),
            },
            Rules::Bool(Some(c)) if value.as_bool() != Some(*c) => {
                broken("bool.const", format!("value must equal {c}"))
            }
            Rules::Text { kind, rules } => match bytes_of(value) {
                Some(bytes) => rules.check(kind, &bytes, matches!(value, Value::String(_))),
                None => Ok(()),
            },
            Rules::Enum {
                constant,
                defined_only,
                within,
                not_in,
            } => {
                let Some(n) = value.as_enum_number() else {
                    return Ok(());
                };
                if constant.is_some_and(|c| c != n) {
                    return broken("enum.const", "value must equal the required enum value");
                }
                if *defined_only && !enum_defined(n) {
                    return broken(
                        "enum.defined_only",
                        format!("value must be one of the defined enum values (got {n})"),
                    );
                }
                if !within.is_empty() && !within.contains(&n) {
                    return broken("enum.in", "value must be in the allowed list");
                }
                if not_in.contains(&n) {
                    return broken("enum.not_in", format!("value must not be {n}"));
                }
                Ok(())
            }
            Rules::Time { kind, bounds, .. } => match nanos(value) {
                Some(n) => bounds.check(kind, n, |n| format!("{}s", n as f64 / 1e9)),
                None => Ok(()),
            },
            // Lists, maps and `Any`s are the caller's.
            Rules::Bool(_)
            | Rules::Repeated { .. }
            | Rules::Map { .. }
            | Rules::Any { .. }
            | Rules::None => Ok(()),
        }
    }
}

fn nested(rules: &DynamicMessage, name: &str) -> Option<Box<FieldRules>> {
    let value = field(rules, name)?;
    Some(Box::new(FieldRules::read(value.as_message()?)))
}
