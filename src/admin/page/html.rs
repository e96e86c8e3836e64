//! Small pieces of HTML for the status page: escaping, links to
//! `/debug/config`. Everything that reaches the page from a
//! client or the upstream goes through [`escape`].

use std::fmt::Write as _;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// What a query value keeps unescaped: RFC 3986's unreserved characters.
const QUERY_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `/debug/config` of `node` (one type, or all), pretty, for an `href`.
pub(super) fn config_href(node: &str, kind: Option<&str>) -> String {
    let mut href = format!(
        "/debug/config?node={}",
        utf8_percent_encode(node, QUERY_VALUE)
    );
    if let Some(kind) = kind {
        let _ = write!(href, "&type={}", utf8_percent_encode(kind, QUERY_VALUE));
    }
    href.push_str("&pretty");
    escape(&href)
}

/// The escaped link to the config history of `kind` of `node` of `cluster`.
pub(super) fn history_href(node: &str, cluster: &str, kind: &str) -> String {
    let href = format!(
        "/debug/history?node={}&cluster={}&type={}&pretty",
        utf8_percent_encode(node, QUERY_VALUE),
        utf8_percent_encode(cluster, QUERY_VALUE),
        utf8_percent_encode(kind, QUERY_VALUE),
    );
    escape(&href)
}

/// [`escape`] of `s`, or nothing for `None` (a view's field that is unset).
pub(super) fn escape_opt(s: Option<&str>) -> String {
    s.map(escape).unwrap_or_default()
}

/// `s` safe in HTML text and in a quoted attribute.
pub(super) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
