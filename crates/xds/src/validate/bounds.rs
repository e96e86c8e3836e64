//! Ordered rules (`const`, `lt`, `lte`, `gt`, `gte`, `in`, `not_in`) over
//! numbers of any protobuf numeric type, and over durations and timestamps
//! (as nanoseconds), with protoc-gen-validate's exclusive-range reading of a
//! lower bound above the upper one.

use prost_reflect::{DynamicMessage, Value};

use super::broken::{broken, Broken};
use super::fields::{field, list};

/// A number of any protobuf numeric type, as compared by the rules.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub(crate) enum Num {
    Int(i128),
    Float(f64),
}

impl Num {
    pub(super) fn of(value: &Value) -> Option<Num> {
        Some(match value {
            Value::I32(v) => Num::Int(i128::from(*v)),
            Value::I64(v) => Num::Int(i128::from(*v)),
            Value::U32(v) => Num::Int(i128::from(*v)),
            Value::U64(v) => Num::Int(i128::from(*v)),
            Value::F32(v) => Num::Float(f64::from(*v)),
            Value::F64(v) => Num::Float(*v),
            Value::EnumNumber(v) => Num::Int(i128::from(*v)),
            _ => return None,
        })
    }

    pub(super) fn is_zero(self) -> bool {
        matches!(self, Num::Int(0)) || matches!(self, Num::Float(f) if f == 0.0)
    }
}

impl std::fmt::Display for Num {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Num::Int(v) => write!(f, "{v}"),
            Num::Float(v) => write!(f, "{v}"),
        }
    }
}

/// const / lt / lte / gt / gte / in / not_in over ordered values: numbers,
/// durations and timestamps (as nanoseconds).
#[derive(Debug, Clone, Default)]
pub(crate) struct Bounds<T> {
    constant: Option<T>,
    lt: Option<T>,
    lte: Option<T>,
    gt: Option<T>,
    gte: Option<T>,
    within: Vec<T>,
    not_in: Vec<T>,
}

impl<T: PartialOrd + Copy + std::fmt::Display> Bounds<T> {
    pub(super) fn read(rules: &DynamicMessage, get: impl Fn(&Value) -> Option<T>) -> Bounds<T> {
        let one = |name: &str| field(rules, name).and_then(|v| get(&v));
        let many = |name: &str| list(rules, name).iter().filter_map(&get).collect();
        Bounds {
            constant: one("const"),
            lt: one("lt"),
            lte: one("lte"),
            gt: one("gt"),
            gte: one("gte"),
            within: many("in"),
            not_in: many("not_in"),
        }
    }

    pub(super) fn check(
        &self,
        kind: &str,
        value: T,
        show: impl Fn(T) -> String,
    ) -> Result<(), Broken> {
        let rule = |name: &str| format!("{kind}.{name}");
        if let Some(c) = self.constant.filter(|c| *c != value) {
            return broken(&rule("const"), format!("value must equal {}", show(c)));
        }
        let upper = self.lt.map(|v| (v, false)).or(self.lte.map(|v| (v, true)));
        let lower = self.gt.map(|v| (v, false)).or(self.gte.map(|v| (v, true)));
        // NaN is within no bound. protoc-gen-validate's own comparisons let
        // it through, but Envoy refuses it where it reads the value (a
        // `Percent` of NaN is "not in the range of 0..100").
        let below = |(u, inclusive): (T, bool)| value < u || (inclusive && value == u);
        let above = |(l, inclusive): (T, bool)| value > l || (inclusive && value == l);
        match (lower, upper) {
            // A lower bound above the upper one: the range is exclusive.
            (Some(l), Some(u)) if l.0 > u.0 => {
                if !(below(u) || above(l)) {
                    return broken(
                        &rule(["gt", "gte"][usize::from(l.1)]),
                        format!("value must be outside range ({}, {})", show(u.0), show(l.0)),
                    );
                }
            }
            _ => {
                if let Some((l, inclusive)) = lower.filter(|l| !above(*l)) {
                    let (name, words) =
                        [("gt", ""), ("gte", " or equal to")][usize::from(inclusive)];
                    let message = format!("value must be greater than{words} {}", show(l));
                    return broken(&rule(name), message);
                }
                if let Some((u, inclusive)) = upper.filter(|u| !below(*u)) {
                    let (name, words) =
                        [("lt", ""), ("lte", " or equal to")][usize::from(inclusive)];
                    let message = format!("value must be less than{words} {}", show(u));
                    return broken(&rule(name), message);
                }
            }
        }
        if !self.within.is_empty() && !self.within.contains(&value) {
            return broken(&rule("in"), "value must be in the allowed list");
        }
        if self.not_in.contains(&value) {
            return broken(
                &rule("not_in"),
                format!("value must not be {}", show(value)),
            );
        }
        Ok(())
    }
}
