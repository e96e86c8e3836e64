//! String and bytes rules: lengths (characters for strings, bytes for
//! bytes), pattern, prefix/suffix/contains, in/not_in, and the well-known
//! formats Envoy's protos use (IP addresses, hostnames, URIs, HTTP header
//! names and values, strict or not).

use std::net::IpAddr;

use prost_reflect::DynamicMessage;
use regex::Regex;

use super::broken::{broken, Broken};
use super::fields::{bytes_of, field, flag, list, uint};

/// What a string (or bytes) value must be.
#[derive(Debug, Clone, Default)]
pub(crate) struct TextRules {
    constant: Option<Vec<u8>>,
    len: Option<u64>,
    min_len: Option<u64>,
    max_len: Option<u64>,
    len_bytes: Option<u64>,
    min_bytes: Option<u64>,
    max_bytes: Option<u64>,
    pattern: Option<Regex>,
    prefix: Option<Vec<u8>>,
    suffix: Option<Vec<u8>>,
    contains: Option<Vec<u8>>,
    not_contains: Option<Vec<u8>>,
    within: Vec<Vec<u8>>,
    not_in: Vec<Vec<u8>>,
    well_known: Option<WellKnown>,
    ignore_empty: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WellKnown {
    Ip,
    Ipv4,
    Ipv6,
    Hostname,
    Uri,
    HeaderName { strict: bool },
    HeaderValue { strict: bool },
}

impl TextRules {
    pub(super) fn read(r: &DynamicMessage) -> TextRules {
        let text = |name: &str| field(r, name).as_ref().and_then(bytes_of);
        let texts = |name: &str| list(r, name).iter().filter_map(bytes_of).collect();
        let strict = field(r, "strict").and_then(|v| v.as_bool()).unwrap_or(true);
        let flagged = [
            ("ip", WellKnown::Ip),
            ("ipv4", WellKnown::Ipv4),
            ("ipv6", WellKnown::Ipv6),
            ("hostname", WellKnown::Hostname),
            ("uri", WellKnown::Uri),
        ];
        let well_known = flagged
            .into_iter()
            .find(|(name, _)| flag(r, name))
            .map_or_else(
                || match field(r, "well_known_regex").and_then(|v| v.as_enum_number()) {
                    Some(1) => Some(WellKnown::HeaderName { strict }),
                    Some(2) => Some(WellKnown::HeaderValue { strict }),
                    _ => None,
                },
                |(_, known)| Some(known),
            );
        TextRules {
            constant: text("const"),
            len: uint(r, "len"),
            min_len: uint(r, "min_len"),
            max_len: uint(r, "max_len"),
            len_bytes: uint(r, "len_bytes"),
            min_bytes: uint(r, "min_bytes"),
            max_bytes: uint(r, "max_bytes"),
            // An annotation whose pattern does not compile checks nothing
            // (Envoy's protos compile; an extra descriptor set may not).
            pattern: field(r, "pattern")
                .and_then(|v| v.as_str().map(str::to_owned))
                .and_then(|p| Regex::new(&p).ok()),
            prefix: text("prefix"),
            suffix: text("suffix"),
            contains: text("contains"),
            not_contains: text("not_contains"),
            within: texts("in"),
            not_in: texts("not_in"),
            well_known,
            ignore_empty: flag(r, "ignore_empty"),
        }
    }

    pub(super) fn check(&self, kind: &str, value: &[u8], is_string: bool) -> Result<(), Broken> {
        let rule = |name: &str| format!("{kind}.{name}");
        if self.ignore_empty && value.is_empty() {
            return Ok(());
        }
        let text = String::from_utf8_lossy(value);
        // Lengths count characters for strings, bytes for bytes.
        let chars = if is_string {
            text.chars().count() as u64
        } else {
            value.len() as u64
        };
        let bytes = value.len() as u64;
        let unit = if is_string { "characters" } else { "bytes" };
        if let Some(c) = self.constant.as_ref().filter(|c| c.as_slice() != value) {
            return broken(
                &rule("const"),
                format!("value must equal {:?}", String::from_utf8_lossy(c)),
            );
        }
        // The words say which way a bound is broken: `at least`, `at most`, or exactly.
        for (name, bound, n, words, unit) in [
            ("len", self.len, chars, "", unit),
            ("min_len", self.min_len, chars, "at least ", unit),
            ("max_len", self.max_len, chars, "at most ", unit),
            ("len_bytes", self.len_bytes, bytes, "", "bytes"),
            ("min_bytes", self.min_bytes, bytes, "at least ", "bytes"),
            ("max_bytes", self.max_bytes, bytes, "at most ", "bytes"),
        ] {
            let wrong = |b: &u64| match words {
                "at least " => n < *b,
                "at most " => n > *b,
                _ => n != *b,
            };
            if let Some(b) = bound.filter(wrong) {
                return broken(
                    &rule(name),
                    format!("value length must be {words}{b} {unit}"),
                );
            }
        }
        if let Some(p) = self.pattern.as_ref().filter(|p| !p.is_match(&text)) {
            return broken(
                &rule("pattern"),
                format!("value does not match regex pattern {:?}", p.as_str()),
            );
        }
        let has = |n: &[u8]| n.is_empty() || value.windows(n.len()).any(|w| w == n);
        for (name, wanted, says) in [
            ("prefix", &self.prefix, "does not have prefix"),
            ("suffix", &self.suffix, "does not have suffix"),
            ("contains", &self.contains, "does not contain"),
            ("not_contains", &self.not_contains, "contains"),
        ] {
            let holds = |w: &[u8]| match name {
                "prefix" => value.starts_with(w),
                "suffix" => value.ends_with(w),
                "contains" => has(w),
                _ => !has(w),
            };
            if let Some(w) = wanted.as_ref().filter(|w| !holds(w)) {
                let w = String::from_utf8_lossy(w);
                return broken(&rule(name), format!("value {says} {w:?}"));
            }
        }
        if !self.within.is_empty() && !self.within.iter().any(|w| w == value) {
            return broken(&rule("in"), "value must be in the allowed list");
        }
        if self.not_in.iter().any(|w| w == value) {
            return broken(&rule("not_in"), "value must not be in the forbidden list");
        }
        match self.well_known {
            Some(known) if !known.matches(&text, value) => {
                let (name, message) = known.rule();
                broken(&rule(name), message)
            }
            _ => Ok(()),
        }
    }
}

impl WellKnown {
    /// Its rule, and what a value breaking it is told.
    fn rule(self) -> (&'static str, &'static str) {
        match self {
            WellKnown::Ip => ("ip", "value must be a valid IP address"),
            WellKnown::Ipv4 => ("ipv4", "value must be a valid IPv4 address"),
            WellKnown::Ipv6 => ("ipv6", "value must be a valid IPv6 address"),
            WellKnown::Hostname => ("hostname", "value must be a valid hostname"),
            WellKnown::Uri => ("uri", "value must be a valid URI"),
            WellKnown::HeaderName { .. } => (
                "well_known_regex",
                "value does not match the HTTP header name pattern",
            ),
            WellKnown::HeaderValue { .. } => (
                "well_known_regex",
                "value does not match the HTTP header value pattern",
            ),
        }
    }

    /// protoc-gen-validate's definitions (its C++ validator, which Envoy runs).
    fn matches(self, text: &str, bytes: &[u8]) -> bool {
        match self {
            WellKnown::Ip => text.parse::<IpAddr>().is_ok(),
            WellKnown::Ipv4 => text.parse::<std::net::Ipv4Addr>().is_ok(),
            WellKnown::Ipv6 => text.parse::<std::net::Ipv6Addr>().is_ok(),
            WellKnown::Hostname => is_hostname(text),
            WellKnown::Uri => is_uri(text),
            // protoc-gen-validate's pattern, `^:?[0-9a-zA-Z!#$%&'*+-.^_|~\x60]+$`:
            // an RFC 7230 token with an optional leading ':' (HTTP/2
            // pseudo-headers), and ',' too, which the pattern's range `+-.` holds.
            WellKnown::HeaderName { strict: true } => {
                let name = text.strip_prefix(':').unwrap_or(text);
                !name.is_empty() && name.bytes().all(is_token_byte)
            }
            WellKnown::HeaderValue { strict: true } => {
                bytes.iter().all(|b| !matches!(b, 0..=8 | 10..=31 | 127))
            }
            // Not strict: no NUL, CR or LF.
            WellKnown::HeaderName { strict: false } | WellKnown::HeaderValue { strict: false } => {
                !bytes.iter().any(|b| matches!(b, 0 | b'\r' | b'\n'))
            }
        }
    }
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+,-.^_`|~".contains(&b)
}

fn is_hostname(text: &str) -> bool {
    let text = text.strip_suffix('.').unwrap_or(text);
    !text.is_empty()
        && text.len() <= 253
        && text.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// An absolute URI: a scheme, ':', and no whitespace.
fn is_uri(text: &str) -> bool {
    let Some((scheme, _)) = text.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        && !text.chars().any(char::is_whitespace)
}
