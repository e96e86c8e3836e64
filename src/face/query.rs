//! The query string of a REST request, read strictly: `name=value` pairs
//! (`+` is a space, `%XX` escapes), each name at most once, every name and
//! value valid UTF-8 once decoded. Anything else is a JSON 400 that says what
//! was wrong (axum's `Query` would answer a bare-text 400, take the last of
//! two values silently, and turn bad UTF-8 into replacement characters,
//! which would then name a different node).
//!
//! Which names an endpoint accepts is the endpoint's business.

use std::collections::HashMap;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use percent_encoding::percent_decode;

use crate::face::ApiError;

/// The decoded query parameters of a request.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Params(pub(crate) HashMap<String, String>);

impl Params {
    /// Parses a raw query string (without the `?`).
    pub(crate) fn parse(raw: &str) -> Result<Params, ApiError> {
        let mut params = HashMap::new();
        for pair in raw.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let name = decode(name, "a query parameter name")?;
            let value = decode(value, &format!("the value of query parameter {name:?}"))?;
            if params.contains_key(&name) {
                return Err(ApiError::BadRequest(format!(
                    "query parameter {name:?} is given twice; give it once"
                )));
            }
            params.insert(name, value);
        }
        Ok(Params(params))
    }
}

/// A switch parameter: absent, `false` or `0` is off; `?name`, `true` or
/// `1` is on; anything else is a 400 that says how to write it.
pub(crate) fn switch(query: &HashMap<String, String>, name: &str) -> Result<bool, ApiError> {
    match query.get(name).map(String::as_str) {
        None | Some("false" | "0") => Ok(false),
        Some("" | "true" | "1") => Ok(true),
        Some(other) => Err(ApiError::BadRequest(format!(
            "{name}={other:?}: use ?{name} (or {name}=true), or {name}=false"
        ))),
    }
}

fn decode(raw: &str, what: &str) -> Result<String, ApiError> {
    let spaced = raw.replace('+', " ");
    percent_decode(spaced.as_bytes())
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| ApiError::BadRequest(format!("{what} is not UTF-8 once %-decoded: {raw:?}")))
}

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Params, ApiError> {
        Params::parse(parts.uri.query().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_decoded() {
        let p = Params::parse("node=a%2Fb&names=x,y&pretty&cluster=c+d").unwrap();
        assert_eq!(p.0["node"], "a/b");
        assert_eq!(p.0["names"], "x,y");
        assert_eq!(p.0["pretty"], "");
        assert_eq!(p.0["cluster"], "c d");
        assert!(Params::parse("").unwrap().0.is_empty());
    }

    #[test]
    fn duplicates_and_bad_utf8_are_refused() {
        for raw in ["node=a&node=b", "node=%80", "%ff=1"] {
            let err = Params::parse(raw).unwrap_err();
            assert!(matches!(err, ApiError::BadRequest(_)), "{raw}: {err}");
        }
        // A stray % is kept as it is (as browsers do), not an error.
        assert_eq!(Params::parse("node=%ZZ").unwrap().0["node"], "%ZZ");
    }
}
