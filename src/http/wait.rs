//! `?wait=DURATION`: how long a long poll may be held, read with exactly the
//! grammar `openapi/xds-gateway.yaml` documents, so that the document and
//! the server agree on every value:
//!
//! `0`, or one to three terms `<1-6 digits>[ ]<unit>[ ]`, units `ns us ms s
//! sec secs m min mins h hr hrs` (e.g. `25s`, `500ms`, `1m 30s`).
//!
//! Anything else is a 400 that says so (a general duration parser would take
//! days, years and unit spellings the document does not list).
//!
//! `?fetch-timeout=DURATION` is the same wait as Kuma's REST servers read it
//! (Prometheus's and Grafana Alloy's `kuma_sd_configs` send it on every
//! poll): Go's duration syntax (`2m0s`, `1.5s`, `300ms`), and the days,
//! weeks and years Prometheus writes a long one with (`1d`). Where a request
//! gives both, `wait` is the one read.

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Duration;

use regex::Regex;

use crate::face::ApiError;

/// The whole value (the OpenAPI `wait` pattern).
static WAIT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:0|(?:[0-9]{1,6} ?(?:ns|us|ms|s|sec|secs|m|min|mins|h|hr|hrs) ?){1,3})$")
        .expect("a valid regex")
});
/// One term; longer unit spellings first, so `secs` is not read as `s`.
static TERM: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"([0-9]{1,6}) ?(ns|us|ms|secs|sec|s|mins|min|m|hrs|hr|h)").expect("a valid regex")
});

/// Kuma's `fetch-timeout`: Go's duration syntax, and Prometheus's units of
/// a day and more.
static FETCH_TIMEOUT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:0|(?:[0-9]{1,9}(?:\.[0-9]{1,9})?(?:ns|us|µs|ms|s|m|h|d|w|y)){1,8})$")
        .expect("a valid regex")
});
static FETCH_TERM: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"([0-9]{1,9})(?:\.([0-9]{1,9}))?(ns|us|µs|ms|s|m|h|d|w|y)").expect("a valid regex")
});

/// `?wait=` or `?fetch-timeout=` (or the configured default), capped by
/// `max`.
pub(super) fn requested_wait(
    query: &HashMap<String, String>,
    default: Duration,
    max: Duration,
) -> Result<Duration, ApiError> {
    let fetch_timeout = match query.get("fetch-timeout") {
        None => None,
        Some(text) => Some(parse_fetch_timeout(text).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "fetch-timeout={text:?} is not a duration like 2m0s, 30s or 1.5s \
                 (Go's syntax; units ns, us, ms, s, m, h, d, w, y)"
            ))
        })?),
    };
    let wait = match (query.get("wait"), fetch_timeout) {
        (None, None) => default,
        (None, Some(fetch_timeout)) => fetch_timeout,
        (Some(text), _) => parse(text).ok_or_else(|| {
            ApiError::BadRequest(format!(
                "wait={text:?} is not a duration like 25s, 500ms or 1m 30s \
                 (units ns, us, ms, s, m, h; at most three terms of at most six digits)"
            ))
        })?,
    };
    Ok(wait.min(max))
}

/// A `fetch-timeout` value; saturates rather than overflows (it is capped
/// by `--max-wait` anyway).
fn parse_fetch_timeout(text: &str) -> Option<Duration> {
    if !FETCH_TIMEOUT.is_match(text) {
        return None;
    }
    let mut total = Duration::ZERO;
    for term in FETCH_TERM.captures_iter(text) {
        let whole: u64 = term[1].parse().ok()?;
        let fraction = term.get(2).map_or("", |m| m.as_str());
        let nanos_per_unit: u128 = match &term[3] {
            "ns" => 1,
            "us" | "µs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "d" => 86_400_000_000_000,
            "w" => 604_800_000_000_000,
            _ => 31_536_000_000_000_000,
        };
        let scale = 10u128.pow(u32::try_from(fraction.len()).ok()?);
        let fraction: u128 = if fraction.is_empty() {
            0
        } else {
            fraction.parse().ok()?
        };
        let nanos = u128::from(whole) * nanos_per_unit + fraction * nanos_per_unit / scale;
        let term = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
        total = total.saturating_add(term);
    }
    Some(total)
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
    fn fetch_timeout_is_kumas_long_poll_in_gos_syntax() {
        let q = |v: &str| HashMap::from([("fetch-timeout".to_string(), v.to_string())]);
        let max = Duration::from_secs(300);
        for (text, expected) in [
            ("2m0s", Duration::from_secs(120)),
            ("2m", Duration::from_secs(120)),
            ("1m30s", Duration::from_secs(90)),
            ("1.5s", Duration::from_millis(1500)),
            ("300ms", Duration::from_millis(300)),
            ("1µs", Duration::from_micros(1)),
            ("0", Duration::ZERO),
            ("1d", max),
            ("999999999y", max),
        ] {
            assert_eq!(
                requested_wait(&q(text), Duration::ZERO, max).unwrap(),
                expected,
                "{text}"
            );
        }
        for text in ["", "2 m", "-1s", "1.s", "soon", "1m 30s", "5S"] {
            assert!(
                requested_wait(&q(text), Duration::ZERO, max).is_err(),
                "{text:?}"
            );
        }
        let both = HashMap::from([
            ("fetch-timeout".to_string(), "1s".to_string()),
            ("wait".to_string(), "2s".to_string()),
        ]);
        assert_eq!(
            requested_wait(&both, Duration::ZERO, max).unwrap(),
            Duration::from_secs(2),
            "wait is read"
        );
        let bad_beside_wait = HashMap::from([
            ("fetch-timeout".to_string(), "soon".to_string()),
            ("wait".to_string(), "2s".to_string()),
        ]);
        assert!(requested_wait(&bad_beside_wait, Duration::ZERO, max).is_err());
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
