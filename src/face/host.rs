//! Which `Host` values a listener answers when nobody has to authenticate
//! (DNS rebinding). A web page at `evil.example` can
//! make the browser resolve its own name to 127.0.0.1 and then read a
//! loopback gateway as same-origin; the one thing that betrays it is the
//! `Host` header, which still says `evil.example`. So a listener without a
//! credential to ask for answers only:
//!
//! - an IP address (`127.0.0.1:8080`, `[::1]`, `10.0.0.5`): a page served
//!   from an address is that address, never a rebound name;
//! - `localhost` and `*.localhost` (browsers resolve them to loopback
//!   themselves, never by DNS);
//! - a name of one label (no dot): Envoy's REST client sends its xDS
//!   cluster's name (`xds_cluster`), and a rebinding page must be served
//!   from a name public DNS answers, which has a dot;
//! - the names of `--allowed-hosts`;
//! - no `Host` at all (HTTP/1.0; a browser always sends one).
//!
//! HTTP/2 carries the host in `:authority` (hyper keeps it in the URI),
//! and an HTTP/1.1 request may name one in an absolute-form target: both
//! listeners read the request with [`authority_as_host`] first, and an
//! authority is checked as a `Host` is, so neither listener can be reached
//! under a name the other refuses.
//!
//! Anything else is a 403 (`code` 7) naming the host and how to allow it.
//! Two `Host` headers are a 400 on every listener, authenticated or not: a
//! proxy and the gateway could each read another.
//! The port is ignored; names compare case-insensitively, a trailing dot
//! aside.

use axum::http::{header, HeaderMap};

/// The refusal, for the listener to answer.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum HostError {
    /// More than one `Host` header: 400.
    #[error("a request carries one Host header; this one has {0}")]
    Repeated(usize),
    /// A name not answered without authentication: 403.
    #[error(
        "Host {0:?} is not answered by this listener without authentication: a web page could \
         reach it under that name by DNS rebinding. It answers IP addresses, localhost, names \
         without a dot, and the names of --allowed-hosts (XDS_GATEWAY_ALLOWED_HOSTS); add it \
         there, or give the listener credentials to ask for (an auth policy)"
    )]
    NotAllowed(String),
}

/// `request` with its URI's authority (HTTP/2's `:authority`) copied into
/// `Host` when it has none: every handler then reads the client's host
/// one way (Envoy's REST client sets it to its xDS cluster's name, which
/// is where rewritten config sources point).
pub(crate) fn authority_as_host(mut request: axum::extract::Request) -> axum::extract::Request {
    if !request.headers().contains_key(header::HOST) {
        let authority = request.uri().authority().map(|a| a.as_str().to_owned());
        if let Some(value) = authority.and_then(|a| axum::http::HeaderValue::from_str(&a).ok()) {
            request.headers_mut().insert(header::HOST, value);
        }
    }
    request
}

/// Whether `request` may be answered: its `Host` ([`check`]), and the
/// authority of its URI where it names one (HTTP/2's `:authority`, an
/// absolute-form target) as well.
pub(crate) fn check_request(
    request: &axum::extract::Request,
    open: bool,
    allowed: &[String],
) -> Result<(), HostError> {
    check(request.headers(), open, allowed)?;
    match request.uri().authority() {
        Some(authority) if open && !answered(authority.as_str(), allowed) => Err(
            HostError::NotAllowed(authority.as_str().chars().take(256).collect()),
        ),
        _ => Ok(()),
    }
}

/// Whether `headers` may be answered: `open` says the listener asks for no
/// credential (then only the hosts above), `allowed` is `--allowed-hosts`.
pub(crate) fn check(headers: &HeaderMap, open: bool, allowed: &[String]) -> Result<(), HostError> {
    let mut hosts = headers.get_all(header::HOST).iter();
    let Some(host) = hosts.next() else {
        return Ok(());
    };
    let more = hosts.count();
    if more > 0 {
        return Err(HostError::Repeated(more + 1));
    }
    if !open {
        return Ok(());
    }
    let text = String::from_utf8_lossy(host.as_bytes());
    if answered(&text, allowed) {
        Ok(())
    } else {
        Err(HostError::NotAllowed(text.chars().take(256).collect()))
    }
}

/// Whether `host` (`name[:port]`, `[v6][:port]`) is answered unauthenticated.
fn answered(host: &str, allowed: &[String]) -> bool {
    let name = name_of(host);
    if name.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    if name.is_empty() {
        return false;
    }
    name == "localhost"
        || name.ends_with(".localhost")
        || !name.contains('.')
        || allowed.iter().any(|a| {
            let a = name_of(a);
            a.strip_suffix('.').unwrap_or(a).eq_ignore_ascii_case(&name)
        })
}

/// The name of `host`, without its port or an IPv6 literal's brackets.
fn name_of(host: &str) -> &str {
    let host = host.trim();
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split_once(']').map_or(rest, |(v6, _)| v6);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_hosts(hosts: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for h in hosts {
            headers.append(header::HOST, h.parse().unwrap());
        }
        headers
    }

    #[test]
    fn unauthenticated_listeners_answer_addresses_localhost_and_allowed_names() {
        let allowed = vec!["gateway.internal.example".to_owned()];
        for ok in [
            "127.0.0.1:8080",
            "127.0.0.1",
            "[::1]:8080",
            "10.0.0.5:8080",
            "localhost:8080",
            "LOCALHOST",
            "localhost.",
            "app.localhost:9901",
            "xds_cluster",
            "gateway:8080",
            "Gateway.Internal.Example:8443",
        ] {
            assert_eq!(check(&with_hosts(&[ok]), true, &allowed), Ok(()), "{ok}");
        }
        for refused in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "gateway.internal.example.evil",
            ":8080",
        ] {
            assert!(
                matches!(
                    check(&with_hosts(&[refused]), true, &allowed),
                    Err(HostError::NotAllowed(_))
                ),
                "{refused}"
            );
            assert_eq!(check(&with_hosts(&[refused]), false, &allowed), Ok(()));
        }
        assert_eq!(check(&HeaderMap::new(), true, &[]), Ok(()));
    }

    #[test]
    fn two_host_headers_are_refused_everywhere() {
        for open in [true, false] {
            assert_eq!(
                check(&with_hosts(&["localhost", "evil.example"]), open, &[]),
                Err(HostError::Repeated(2))
            );
        }
    }
}
