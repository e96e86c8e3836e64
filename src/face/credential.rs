//! The credential an `Authorization` value carries: the one reading of its
//! scheme and credentials for both listeners. The REST face takes only
//! `Bearer <token>` (`authorize.rs`); the admin listener also takes the
//! password of HTTP Basic, which a browser sends once a person typed the
//! admin token (`admin/access.rs`). What a credential opens is the auth
//! policy's business, not this module's.

/// What one `Authorization` value presents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Credential<'a> {
    /// `Bearer <token>`: the token (trimmed; may be empty).
    Bearer(&'a str),
    /// `Basic base64(user:password)`: the password (the user is ignored);
    /// `None` when the credentials are not that.
    Basic(Option<String>),
    /// Any other scheme.
    Other,
}

/// The credential of an `Authorization` value (scheme matched without
/// regard to case, surrounding white space ignored); `None` when it is not
/// a scheme followed by credentials.
pub(crate) fn of(value: &str) -> Option<Credential<'_>> {
    let (scheme, credentials) = value.trim().split_once(' ')?;
    let credentials = credentials.trim();
    Some(if scheme.eq_ignore_ascii_case("bearer") {
        Credential::Bearer(credentials)
    } else if scheme.eq_ignore_ascii_case("basic") {
        Credential::Basic(basic_password(credentials))
    } else {
        Credential::Other
    })
}

/// The password of `base64(user:password)`.
fn basic_password(credentials: &str) -> Option<String> {
    use base64::Engine;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(credentials)
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (_user, password) = text.split_once(':')?;
    Some(password.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_are_told_apart_without_regard_to_case() {
        assert_eq!(of("  bEaReR  abc  "), Some(Credential::Bearer("abc")));
        // "user:secret"
        assert_eq!(
            of("Basic dXNlcjpzZWNyZXQ="),
            Some(Credential::Basic(Some("secret".into())))
        );
        assert_eq!(of("Basic !!"), Some(Credential::Basic(None)));
        assert_eq!(of("Digest x"), Some(Credential::Other));
        assert_eq!(of("Bearer"), None);
    }
}
