//! `--trusted-proxies`: the addresses of the balancers, NATs and sidecars in
//! front of the REST listener, whose report of the client (`Forwarded`,
//! `X-Forwarded-For`) is believed (`http::client_addr` reads it). And the
//! rule that needs it: `--forward-rejections` off loopback, where clients
//! sharing an address could not be told apart, needs the operator to say
//! where the proxies are (or `none`).

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;
use serde::Deserialize;

use super::{invalid, ConfigError};

/// Which header the trusted proxies write the client into
/// (`--forwarded-header`): only that one is read.
/// A proxy passes the other one on as the client wrote it, so reading it
/// would let a client name itself someone else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ForwardedHeader {
    /// `X-Forwarded-For`, as nginx's `proxy_add_x_forwarded_for` and Envoy
    /// append it.
    XForwardedFor,
    /// `Forwarded: for=` (RFC 7239).
    Forwarded,
}

/// The networks whose connections are proxies' (may be empty: `none`, the
/// operator's word that every client connects directly).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    nets: Vec<IpNet>,
}

impl TrustedProxies {
    /// `CIDR` or bare addresses (`10.0.0.0/8`, `127.0.0.1`, `fd00::/8`), or
    /// the one word `none`; an empty list is `none` too (a TOML `[]`).
    pub fn parse(raw: &[String]) -> Result<TrustedProxies, ConfigError> {
        let entries: Vec<&str> = raw.iter().map(|s| s.trim()).collect();
        if entries == ["none"] {
            return Ok(TrustedProxies::default());
        }
        let nets = entries
            .iter()
            .map(|entry| parse_net(entry))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TrustedProxies { nets })
    }

    /// Whether `ip` is a trusted proxy's address.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.nets.iter().any(|net| net.contains(&ip))
    }

    /// Whether no proxy is trusted (`none`).
    pub fn is_empty(&self) -> bool {
        self.nets.is_empty()
    }
}

fn parse_net(entry: &str) -> Result<IpNet, ConfigError> {
    let why = |what: &str| {
        invalid(
            "trusted-proxies",
            &format!(
                "{entry:?} {what}; give CIDRs or addresses (10.0.0.0/8, 127.0.0.1), or `none`"
            ),
        )
    };
    if entry.is_empty() {
        return Err(why("is empty"));
    }
    if entry == "none" {
        return Err(why("cannot stand beside addresses"));
    }
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Ok(IpNet::from(ip.to_canonical()));
    }
    entry
        .parse::<IpNet>()
        .map(|net| net.trunc())
        .map_err(|_| why("is not a CIDR or an IP address"))
}

/// `--forward-rejections` NACKs upstream what it infers from clients told
/// apart by address; off loopback (`listen`), where a balancer, a NAT or a
/// sidecar may put many clients behind one address (and their catching up
/// after a change would look like one client rejecting it), the operator
/// must say where the proxies are (`trusted`, `--trusted-proxies`).
pub(super) fn check_forwarding(
    forward_rejections: bool,
    listen: SocketAddr,
    trusted: Option<&TrustedProxies>,
) -> Result<(), ConfigError> {
    if !forward_rejections || listen.ip().is_loopback() || trusted.is_some() {
        return Ok(());
    }
    Err(invalid(
        "forward-rejections",
        &format!(
            "--listen {listen} is not a loopback address, and without --trusted-proxies the gateway \
             cannot tell clients behind one balancer, NAT or sidecar apart: after a change, \
             each of them presenting the old version once until it polls again would look like \
             one client rejecting it, and be NACKed upstream. Say where the proxies in front \
             of the gateway are (--trusted-proxies 10.0.0.0/8,...: their Forwarded or \
             X-Forwarded-For names the client, and what comes through one without naming it \
             is never taken for a rejection), or --trusted-proxies none if every client \
             connects directly"
        ),
    ))
}
