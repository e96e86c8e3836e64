//! Certificate binding: a principal's `uri-san` written as a template,
//! `spiffe://mesh.example/ns/{namespace}/sa/{sa}`, captures whole path
//! segments of the verified certificate's URI SAN, and its rules name the
//! captures (`nodes = ["{sa}"]`, `clusters = ["{namespace}"]`), so the node
//! a request presents is tied to the certificate it came with: edge-2's
//! certificate cannot claim node edge-1. This is the anchor Istio's pilot
//! has (`pilot/pkg/xds/auth.go`: the SPIFFE id's namespace and service
//! account must be the proxy's).
//!
//! A capture is a whole path segment (`/{name}/` or a trailing `/{name}`),
//! and it captures only what a SPIFFE path segment may hold (letters,
//! digits, `.`, `-`, `_`; not `.` or `..`), so a template matches a URI
//! one way only and a captured value is never a glob. A rule's pattern may
//! mix captures with glob text (`"{sa}-*"`); the captured value is
//! matched literally.

use glob::Pattern;

/// What one certificate URI SAN captured: (name, value) pairs.
pub(super) type Captures = Vec<(String, String)>;

/// A `uri-san` template: its path segments, each written out or captured.
#[derive(Debug)]
pub(super) struct SanTemplate {
    raw: String,
    segments: Vec<Part>,
}

/// A rule's `nodes` or `clusters` entry: a glob (an exact name when it has
/// no wildcard), or a template that names captures.
#[derive(Debug)]
pub(super) enum NamePattern {
    Glob(Pattern),
    Template(Vec<Part>),
}

#[derive(Debug)]
pub(super) enum Part {
    /// Text as written: glob text in a rule, a literal segment in a SAN
    /// template.
    Text(String),
    /// A capture's value, matched literally.
    Capture(String),
}

/// Whether `text` holds a glob wildcard (`*`, `?`, `[`).
pub(super) fn has_wildcard(text: &str) -> bool {
    text.contains(['*', '?', '['])
}

/// Splits `raw` into text and `{name}` captures; `Ok(None)` if it names no
/// capture.
fn parts(raw: &str) -> Result<Option<Vec<Part>>, String> {
    if !raw.contains(['{', '}']) {
        return Ok(None);
    }
    let mut out = Vec::new();
    let mut rest = raw;
    while let Some(open) = rest.find(['{', '}']) {
        if rest[open..].starts_with('}') {
            return Err(format!("{raw:?}: a `}}` without its `{{`"));
        }
        let after = &rest[open + 1..];
        let close = after
            .find('}')
            .ok_or_else(|| format!("{raw:?}: a `{{` without its `}}`"))?;
        let name = &after[..close];
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(format!(
                "{raw:?}: {{{name}}} is not a capture name (letters, digits, `_`, `-`)"
            ));
        }
        if open > 0 {
            out.push(Part::Text(rest[..open].to_owned()));
        }
        out.push(Part::Capture(name.to_owned()));
        rest = &after[close + 1..];
    }
    if !rest.is_empty() {
        out.push(Part::Text(rest.to_owned()));
    }
    Ok(Some(out))
}

impl SanTemplate {
    /// A template if `raw` names captures, `Ok(None)` if it is a plain
    /// pattern; `Err` says what is wrong with it.
    pub(super) fn parse(raw: &str) -> Result<Option<SanTemplate>, String> {
        if parts(raw)?.is_none() {
            return Ok(None);
        }
        if has_wildcard(raw) {
            return Err(format!(
                "{raw:?}: a template with captures has no wildcards (`*`, `?`, `[`): every segment is \
                 either written out or captured"
            ));
        }
        let mut segments = Vec::new();
        let mut names = Vec::new();
        for segment in raw.split('/') {
            match whole_capture(segment)? {
                Some(name) => {
                    if names.contains(&name) {
                        return Err(format!("{raw:?}: {{{name}}} is captured twice"));
                    }
                    names.push(name.clone());
                    segments.push(Part::Capture(name));
                }
                None => segments.push(Part::Text(segment.to_owned())),
            }
        }
        // The scheme and authority (`spiffe:`, ``, the trust domain) are
        // written out: the certificate's issuer decides them.
        if segments
            .iter()
            .take(3)
            .any(|s| matches!(s, Part::Capture(_)))
            || !raw.contains("://")
        {
            return Err(format!(
                "{raw:?}: captures are path segments after the scheme and authority \
                 (spiffe://trust-domain/ns/{{namespace}}/sa/{{sa}})"
            ));
        }
        Ok(Some(SanTemplate {
            raw: raw.to_owned(),
            segments,
        }))
    }

    pub(super) fn as_str(&self) -> &str {
        &self.raw
    }

    pub(super) fn names(&self) -> impl Iterator<Item = &str> {
        capture_names(&self.segments)
    }

    /// What `uri` captures, if it matches.
    pub(super) fn capture(&self, uri: &str) -> Option<Captures> {
        let mut captures = Vec::new();
        let mut got = uri.split('/');
        for segment in &self.segments {
            let value = got.next()?;
            match segment {
                Part::Text(text) if text == value => {}
                Part::Text(_) => return None,
                Part::Capture(name) if spiffe_segment(value) => {
                    captures.push((name.clone(), value.to_owned()));
                }
                Part::Capture(_) => return None,
            }
        }
        got.next().is_none().then_some(captures)
    }
}

fn capture_names(parts: &[Part]) -> impl Iterator<Item = &str> {
    parts.iter().filter_map(|p| match p {
        Part::Capture(name) => Some(name.as_str()),
        Part::Text(_) => None,
    })
}

/// Whether `segment` is one capture and nothing else (`Some(name)`), plain
/// text (`None`), or a capture beside text (`Err`).
fn whole_capture(segment: &str) -> Result<Option<String>, String> {
    match parts(segment)? {
        None => Ok(None),
        Some(parts) => match parts.as_slice() {
            [Part::Capture(name)] => Ok(Some(name.clone())),
            _ => Err(format!(
                "{segment:?}: a capture is a whole path segment (/{{name}}/), never part of one"
            )),
        },
    }
}

/// What a SPIFFE id's path segment may be (the SPIFFE-ID spec): letters,
/// digits, `.`, `-`, `_`, and not `.` or `..`.
fn spiffe_segment(value: &str) -> bool {
    !value.is_empty()
        && value != "."
        && value != ".."
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

impl NamePattern {
    pub(super) fn parse(raw: &str) -> Result<NamePattern, String> {
        match parts(raw)? {
            None => Pattern::new(raw)
                .map(NamePattern::Glob)
                .map_err(|e| format!("bad pattern {raw:?}: {e}")),
            Some(parts) => {
                // The glob text must compile with any value in the captures.
                let probe: String = parts
                    .iter()
                    .map(|p| match p {
                        Part::Text(text) => text.as_str(),
                        Part::Capture(_) => "x",
                    })
                    .collect();
                Pattern::new(&probe).map_err(|e| format!("bad pattern {raw:?}: {e}"))?;
                Ok(NamePattern::Template(parts))
            }
        }
    }

    pub(super) fn names(&self) -> impl Iterator<Item = &str> {
        capture_names(match self {
            NamePattern::Glob(_) => &[],
            NamePattern::Template(parts) => parts,
        })
    }

    /// Whether it matches `value`, a template with the values of
    /// `captures` (a template never matches without them).
    pub(super) fn matches(&self, value: &str, captures: Option<&Captures>) -> bool {
        match self {
            NamePattern::Glob(pattern) => pattern.matches(value),
            NamePattern::Template(parts) => {
                let Some(captures) = captures else {
                    return false;
                };
                let mut text = String::new();
                for part in parts {
                    match part {
                        Part::Text(t) => text.push_str(t),
                        Part::Capture(name) => {
                            let Some((_, v)) = captures.iter().find(|(n, _)| n == name) else {
                                return false;
                            };
                            text.push_str(&Pattern::escape(v));
                        }
                    }
                }
                Pattern::new(&text).is_ok_and(|p| p.matches(value))
            }
        }
    }

    /// Whether it ties a value to the certificate exactly: a template
    /// without wildcards.
    pub(super) fn is_pinned_template(&self) -> bool {
        match self {
            NamePattern::Glob(_) => false,
            NamePattern::Template(parts) => parts.iter().all(|p| match p {
                Part::Text(t) => !has_wildcard(t),
                Part::Capture(_) => true,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_capture_whole_spiffe_segments() {
        let t = SanTemplate::parse("spiffe://cluster.local/ns/{namespace}/sa/{sa}")
            .unwrap()
            .unwrap();
        assert_eq!(t.names().collect::<Vec<_>>(), ["namespace", "sa"]);
        assert_eq!(
            t.capture("spiffe://cluster.local/ns/edge/sa/edge-1"),
            Some(vec![
                ("namespace".into(), "edge".into()),
                ("sa".into(), "edge-1".into())
            ])
        );
        for other in [
            "spiffe://cluster.local/ns/edge/sa/edge-1/x",
            "spiffe://cluster.local/ns/edge/sa",
            "spiffe://other.local/ns/edge/sa/edge-1",
            "spiffe://cluster.local/ns/edge/sa/",
            "spiffe://cluster.local/ns/../sa/x",
            "spiffe://cluster.local/ns/edge/sa/e*",
            "spiffe://cluster.local/ns/edge/sa/e?x=1",
        ] {
            assert_eq!(t.capture(other), None, "{other}");
        }
        assert!(SanTemplate::parse("spiffe://x/ns/edge/sa/*")
            .unwrap()
            .is_none());
        for (bad, why) in [
            ("spiffe://x/ns/{ns}/sa/*", "no wildcards"),
            ("spiffe://x/ns/edge-{sa}", "whole path segment"),
            ("spiffe://{td}/ns/x", "after the scheme"),
            ("spiffe://x/{a}/{a}", "captured twice"),
            ("spiffe://x/{a b}", "capture name"),
            ("spiffe://x/{a", "without its"),
            ("{sa}", "after the scheme"),
        ] {
            let err = SanTemplate::parse(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn rule_templates_match_captured_values_literally() {
        let captures = vec![("sa".to_owned(), "edge-[1]".to_owned())];
        let p = NamePattern::parse("{sa}").unwrap();
        assert!(p.is_pinned_template());
        assert!(p.matches("edge-[1]", Some(&captures)));
        assert!(!p.matches("edge-1", Some(&captures)));
        assert!(!p.matches("edge-[1]", None));
        let p = NamePattern::parse("{sa}-*").unwrap();
        assert!(!p.is_pinned_template());
        assert!(p.matches("edge-[1]-canary", Some(&captures)));
        assert!(NamePattern::parse("edge-*").unwrap().glob().is_some());
        assert!(NamePattern::parse("{sa}-[").is_err());
    }
}
