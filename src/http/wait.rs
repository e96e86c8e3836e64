//! `?wait=DURATION`: how long a long poll may be held, read with exactly the
//! grammar `openapi/xds-gateway.yaml` documents, so that the document and
//! the server agree on every value:
//!
//! `0`, or one to three terms `<1-6 digits>[ ]<unit>[ ]`, units `ns us ms s
//! sec secs m min mins h hr hrs` (e.g. `25s`, `500ms`, `1m 30s`).
//!
//! Anything else is a 400 that says so (a general duration parser would take
//! days, years and unit spellings the document does not list).

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Duration;

use regex::Regex;

use super::error::ApiError;

/// The whole value (the OpenAPI `wait` pattern).
static WAIT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:0|(?:[0-9]{1,6} ?(?:ns|us|ms|s|sec|secs|m|min|mins|h|hr|hrs) ?){1,3})$")
        .expect("a valid regex")
});
/// One term; longer unit spellings first, so `secs` is not read as `s`.
static TERM: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"([0-9]{1,6}) ?(ns|us|ms|secs|sec|s|mins|min|m|hrs|hr|h)").expect("a valid regex")
});

/// `?wait=` (or the configured default), capped by `max`.
pub(super) fn requested_wait(
    query: &HashMap<String, String>,
    default: Duration,
    max: Duration,
) -> Result<Duration, ApiError> {
    let wait = match query.get("wait") {
        None => default,
        Some(text) => parse(text).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "wait={text:?} is not a duration like 25s, 500ms or 1m 30s \
                 (units ns, us, ms, s, m, h; at most three terms of at most six digits)"
            ))
        })?,
    };
    Ok(wait.min(max))
}

fn parse(text: &str) -> Option<Duration> {
    if !WAIT.is_match(text) {
        return None;
    }
    let mut total = Duration::ZERO;
    for term in TERM.captures_iter(text) {
        let n: u64 = term[1].parse().ok()?;
        let unit = match &term[2] {
            "ns" => Duration::from_nanos(1),
            "us" => Duration::from_micros(1),
            "ms" => Duration::from_millis(1),
            "s" | "sec" | "secs" => Duration::from_secs(1),
            "m" | "min" | "mins" => Duration::from_secs(60),
            _ => Duration::from_secs(3600),
        };
        total = total.checked_add(unit.checked_mul(u32::try_from(n).ok()?)?)?;
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_is_parsed_and_capped() {
        let q = |v: &str| HashMap::from([("wait".to_string(), v.to_string())]);
        let max = Duration::from_secs(30);
        assert_eq!(
            requested_wait(&HashMap::new(), Duration::ZERO, max).unwrap(),
            Duration::ZERO
        );
        assert_eq!(
            requested_wait(&q("5s"), Duration::ZERO, max).unwrap(),
            Duration::from_secs(5)
        );
        assert_eq!(requested_wait(&q("5m"), Duration::ZERO, max).unwrap(), max);
        assert!(requested_wait(&q("soon"), Duration::ZERO, max).is_err());
    }

    #[test]
    fn exactly_the_documented_grammar() {
        for (text, expected) in [
            ("0", Duration::ZERO),
            ("25s", Duration::from_secs(25)),
            ("500ms", Duration::from_millis(500)),
            ("1m 30s", Duration::from_secs(90)),
            ("1 min 2 secs ", Duration::from_secs(62)),
            ("2hrs", Duration::from_secs(7200)),
            ("7us3ns", Duration::from_nanos(7003)),
            (
                "999999h999999h999999h",
                Duration::from_secs(3 * 999_999 * 3600),
            ),
        ] {
            assert_eq!(parse(text), Some(expected), "{text:?}");
        }
        for text in [
            "",
            " 5s",
            "5",
            "00",
            "1d",
            "1w",
            "1y",
            "5 s  ",
            "1234567s",
            "1s2s3s4s",
            "5S",
            "-1s",
            "1.5s",
            "5sec s",
            "1msec",
            "5 seconds",
        ] {
            assert_eq!(parse(text), None, "{text:?}");
        }
    }
}
