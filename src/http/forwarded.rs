//! Which client a REST request comes from ([`client_addr`]): the
//! connection's peer, unless that peer is a proxy the operator trusts
//! (`--trusted-proxies`); then the client named by the one header those
//! proxies are configured to write (`--forwarded-header`: `X-Forwarded-For`
//! by default, or `Forwarded: for=`, RFC 7239). The other header is never
//! read: a proxy passes it on as the client wrote it (nginx's
//! `proxy_add_x_forwarded_for` and Envoy append to `X-Forwarded-For` and
//! leave `Forwarded` alone), so a client could name itself anyone there.
//! The list is walked from the right
//! (the entry the nearest proxy wrote) past trusted proxies to the first
//! address that is not one: entries further left were written by whoever
//! sent the request and prove nothing. A peer that is not trusted is the
//! client, whatever headers it sends, so a client cannot make itself
//! someone else by writing them.
//!
//! A trusted proxy that names no client (no header, or the walk ends at
//! `unknown`, an obfuscated name or a malformed entry) yields
//! [`ClientAddr::Proxy`]: every client behind it looks the same.

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use axum::http::header::HeaderName;
use axum::http::HeaderMap;

use std::sync::atomic::Ordering;

use tracing::warn;

use super::Gateway;
use crate::cache::ClientAddr;
use crate::config::{ForwardedHeader, TrustedProxies};
use crate::serve::RemoteAddr;

/// The standard header (RFC 7239).
const FORWARDED: &str = "forwarded";
/// The de facto one.
const X_FORWARDED_FOR: &str = "x-forwarded-for";

/// One node of a forwarding list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    Ip(IpAddr),
    /// `unknown`, an obfuscated name (`_hidden`), an element without
    /// `for=`, or text that is not an address: no client can be named.
    Unnamed,
}

impl Gateway {
    /// The client of a request from `remote` (the connection's address,
    /// none in in-process tests) with `headers`; the first time a trusted
    /// proxy names no client, says what that costs.
    pub(super) fn client_addr(
        &self,
        remote: Option<RemoteAddr>,
        headers: &HeaderMap,
    ) -> ClientAddr {
        let Some(RemoteAddr(peer)) = remote else {
            return ClientAddr::Unknown;
        };
        let client = client_addr(
            peer.ip(),
            headers,
            self.config.trusted_proxies.as_ref(),
            self.config.forwarded_header,
        );
        if let ClientAddr::Proxy(proxy) = client {
            if !self.unnamed_proxy_seen.swap(true, Ordering::Relaxed) {
                warn!(
                    %proxy,
                    header = ?self.config.forwarded_header,
                    "a request came through a trusted proxy that names no client (no --forwarded-header \
                     entry the gateway can read): the clients behind it cannot be told apart, so their \
                     polls are not counted toward suspected rejections; have it write that header, or \
                     set --forwarded-header to the one it writes (said once)"
                );
            }
        }
        client
    }
}

/// The client of a request whose connection came from `peer`, with
/// `headers`, given the trusted proxies (`None`: not configured, every peer
/// is a client) and the header they write.
pub(super) fn client_addr(
    peer: IpAddr,
    headers: &HeaderMap,
    trusted: Option<&TrustedProxies>,
    header: ForwardedHeader,
) -> ClientAddr {
    let peer = peer.to_canonical();
    let Some(trusted) = trusted.filter(|t| t.contains(peer)) else {
        return ClientAddr::Client(peer);
    };
    let nodes = match header {
        ForwardedHeader::XForwardedFor => x_forwarded_for(headers),
        ForwardedHeader::Forwarded => forwarded_for(headers).unwrap_or_default(),
    };
    let mut leftmost = None;
    for node in nodes.iter().rev() {
        match *node {
            Node::Ip(ip) if trusted.contains(ip) => leftmost = Some(ip),
            Node::Ip(ip) => return ClientAddr::Client(ip),
            Node::Unnamed => return ClientAddr::Proxy(peer),
        }
    }
    // Every hop is a trusted proxy: the first of them sent it.
    leftmost.map_or(ClientAddr::Proxy(peer), ClientAddr::Client)
}

/// The `for=` of every `Forwarded` element, in order (an element without
/// one is [`Node::Unnamed`]); `None` if no element names one.
fn forwarded_for(headers: &HeaderMap) -> Option<Vec<Node>> {
    let mut nodes = Vec::new();
    let mut named = false;
    for value in header_values(headers, FORWARDED) {
        for element in split_unquoted(value, ',') {
            if element.trim().is_empty() {
                continue;
            }
            let node = split_unquoted(element, ';').into_iter().find_map(|pair| {
                let (name, value) = pair.split_once('=')?;
                name.trim()
                    .eq_ignore_ascii_case("for")
                    .then(|| node(&unquote(value.trim())))
            });
            named |= node.is_some();
            nodes.push(node.unwrap_or(Node::Unnamed));
        }
    }
    named.then_some(nodes)
}

/// The entries of every `X-Forwarded-For`, in order.
fn x_forwarded_for(headers: &HeaderMap) -> Vec<Node> {
    header_values(headers, X_FORWARDED_FOR)
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(node)
        .collect()
}

/// The values of every `name` header, in order; one that is not text
/// counts as an unnamed node.
fn header_values<'a>(headers: &'a HeaderMap, name: &'static str) -> impl Iterator<Item = &'a str> {
    headers
        .get_all(HeaderName::from_static(name))
        .into_iter()
        .map(|value| value.to_str().unwrap_or("unknown"))
}

/// An address as proxies write it: `192.0.2.1`, `192.0.2.1:8080`,
/// `2001:db8::1`, `[2001:db8::1]`, `[2001:db8::1]:8080`.
fn node(text: &str) -> Node {
    let text = text.trim();
    let ip = IpAddr::from_str(text)
        .ok()
        .or_else(|| SocketAddr::from_str(text).ok().map(|a| a.ip()))
        .or_else(|| {
            let inner = text.strip_prefix('[')?.strip_suffix(']')?;
            IpAddr::from_str(inner).ok()
        });
    ip.map_or(Node::Unnamed, |ip| Node::Ip(ip.to_canonical()))
}

/// `text` split at `separator`s outside double quotes.
fn split_unquoted(text: &str, separator: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (at, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            c if c == separator && !quoted => {
                parts.push(&text[start..at]);
                start = at + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// A token or an RFC 7230 quoted-string, unquoted.
fn unquote(value: &str) -> String {
    let Some(inner) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) else {
        return value.to_owned();
    };
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trusted(nets: &[&str]) -> TrustedProxies {
        let raw: Vec<String> = nets.iter().map(|s| s.to_string()).collect();
        TrustedProxies::parse(&raw).unwrap()
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().unwrap());
        }
        map
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    const BALANCER: &str = "10.0.0.5";

    fn via_balancer(pairs: &[(&'static str, &str)]) -> ClientAddr {
        via_balancer_writing(ForwardedHeader::XForwardedFor, pairs)
    }

    fn via_balancer_writing(header: ForwardedHeader, pairs: &[(&'static str, &str)]) -> ClientAddr {
        client_addr(
            ip(BALANCER),
            &headers(pairs),
            Some(&trusted(&["10.0.0.0/24", "fd00::/8"])),
            header,
        )
    }

    #[test]
    fn a_peer_that_is_not_a_trusted_proxy_is_the_client_whatever_it_writes() {
        let spoofing = headers(&[
            ("x-forwarded-for", "203.0.113.9"),
            ("forwarded", "for=198.51.100.7"),
        ]);
        let peer = ip("192.0.2.44");
        for proxies in [
            None,
            Some(trusted(&["10.0.0.0/8"])),
            Some(trusted(&["none"])),
        ] {
            assert_eq!(
                client_addr(
                    peer,
                    &spoofing,
                    proxies.as_ref(),
                    ForwardedHeader::XForwardedFor
                ),
                ClientAddr::Client(peer),
                "{proxies:?}"
            );
        }
    }

    #[test]
    fn x_forwarded_for_is_read_from_the_right_past_trusted_proxies() {
        assert_eq!(
            via_balancer(&[("x-forwarded-for", "192.0.2.1")]),
            ClientAddr::Client(ip("192.0.2.1"))
        );
        // What the client wrote itself is left of what the balancer appended.
        assert_eq!(
            via_balancer(&[("x-forwarded-for", "203.0.113.9, 192.0.2.1")]),
            ClientAddr::Client(ip("192.0.2.1"))
        );
        // An inner trusted hop is skipped; lines are one list.
        assert_eq!(
            via_balancer(&[
                ("x-forwarded-for", "203.0.113.9, 192.0.2.1"),
                ("x-forwarded-for", "10.0.0.7")
            ]),
            ClientAddr::Client(ip("192.0.2.1"))
        );
        // Every hop trusted: the first sent it.
        assert_eq!(
            via_balancer(&[("x-forwarded-for", "10.0.0.9, 10.0.0.7")]),
            ClientAddr::Client(ip("10.0.0.9"))
        );
        // Ports and brackets, as some proxies write them.
        assert_eq!(
            via_balancer(&[("x-forwarded-for", "192.0.2.1:4711")]),
            ClientAddr::Client(ip("192.0.2.1"))
        );
        assert_eq!(
            via_balancer(&[("x-forwarded-for", "[2001:db8::1]:4711")]),
            ClientAddr::Client(ip("2001:db8::1"))
        );
    }

    #[test]
    fn a_trusted_proxy_that_names_no_client_is_a_proxy() {
        let proxy = ClientAddr::Proxy(ip(BALANCER));
        assert_eq!(via_balancer(&[]), proxy);
        for unnamed in ["unknown", "not an address", "", " , "] {
            assert_eq!(
                via_balancer(&[("x-forwarded-for", unnamed)]),
                proxy,
                "{unnamed:?}"
            );
        }
        // The walk stops at what it cannot read: it never skips to an
        // entry the client wrote further left.
        assert_eq!(
            via_balancer(&[("x-forwarded-for", "192.0.2.1, garbage")]),
            proxy
        );
        let forwarded =
            |value| via_balancer_writing(ForwardedHeader::Forwarded, &[("forwarded", value)]);
        assert_eq!(forwarded("for=unknown"), proxy);
        assert_eq!(forwarded("for=_hidden"), proxy);
    }

    /// A client-written `Forwarded` passes through
    /// nginx and Envoy untouched while they append to `X-Forwarded-For`;
    /// only the header the proxies are configured to write is read.
    #[test]
    fn only_the_header_the_proxies_write_is_read() {
        let spoofed = [
            ("forwarded", "for=192.0.2.60"),
            ("x-forwarded-for", "192.0.2.99"),
        ];
        assert_eq!(via_balancer(&spoofed), ClientAddr::Client(ip("192.0.2.99")));
        assert_eq!(
            via_balancer(&[("forwarded", "for=192.0.2.60")]),
            ClientAddr::Proxy(ip(BALANCER)),
            "a Forwarded alone names nobody when X-Forwarded-For is what the proxy writes"
        );
        assert_eq!(
            via_balancer_writing(ForwardedHeader::Forwarded, &spoofed),
            ClientAddr::Client(ip("192.0.2.60"))
        );
        assert_eq!(
            via_balancer_writing(
                ForwardedHeader::Forwarded,
                &[("x-forwarded-for", "192.0.2.99")]
            ),
            ClientAddr::Proxy(ip(BALANCER))
        );
    }

    #[test]
    fn forwarded_is_read_from_the_right_when_it_is_the_one_written() {
        let via_balancer = |pairs: &[(&'static str, &str)]| {
            via_balancer_writing(ForwardedHeader::Forwarded, pairs)
        };
        assert_eq!(
            via_balancer(&[("forwarded", "for=192.0.2.60;proto=http;by=10.0.0.5")]),
            ClientAddr::Client(ip("192.0.2.60"))
        );
        // Quoted IPv6 with a port, case-insensitive names, several elements.
        assert_eq!(
            via_balancer(&[(
                "forwarded",
                "For=\"[2001:db8:cafe::17]:4711\", for=10.0.0.7;proto=https"
            )]),
            ClientAddr::Client(ip("2001:db8:cafe::17"))
        );
        // Read from the right as X-Forwarded-For is: what the client wrote
        // first proves nothing.
        assert_eq!(
            via_balancer(&[("forwarded", "for=203.0.113.9, for=192.0.2.60")]),
            ClientAddr::Client(ip("192.0.2.60"))
        );
        // A comma inside quotes does not split elements.
        assert_eq!(
            via_balancer(&[("forwarded", "for=192.0.2.60;ext=\"a,b\"")]),
            ClientAddr::Client(ip("192.0.2.60"))
        );
        // The nearest proxy's element names nobody: no client.
        assert_eq!(
            via_balancer(&[("forwarded", "for=192.0.2.60, proto=https")]),
            ClientAddr::Proxy(ip(BALANCER))
        );
        // No element names anyone: no client (X-Forwarded-For is not read).
        assert_eq!(
            via_balancer(&[
                ("forwarded", "proto=https"),
                ("x-forwarded-for", "192.0.2.99")
            ]),
            ClientAddr::Proxy(ip(BALANCER))
        );
    }

    #[test]
    fn ipv4_mapped_peers_and_entries_are_ipv4() {
        let proxies = trusted(&["127.0.0.1"]);
        assert_eq!(
            client_addr(
                ip("::ffff:127.0.0.1"),
                &headers(&[("x-forwarded-for", "::ffff:192.0.2.1")]),
                Some(&proxies),
                ForwardedHeader::XForwardedFor
            ),
            ClientAddr::Client(ip("192.0.2.1"))
        );
    }
}
