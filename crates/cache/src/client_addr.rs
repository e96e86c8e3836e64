//! Where a poll came from, as far as the gateway can tell its clients
//! apart: what rejection bookkeeping keys clients on (with node id and
//! names) and what the client views show.

use std::net::IpAddr;

/// A poll's client address, and whether it is the client's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAddr {
    /// No address (a request that did not come over a socket: in-process
    /// tests). Clients are told apart by node id and names alone.
    Unknown,
    /// The client's address: the connection's peer, or the one a trusted
    /// proxy reported.
    Client(IpAddr),
    /// A trusted proxy's address, which did not say whose request this is:
    /// every client behind it shares it, so none can be told apart.
    Proxy(IpAddr),
}

impl ClientAddr {
    /// The address, the client's or its proxy's.
    pub fn ip(self) -> Option<IpAddr> {
        match self {
            ClientAddr::Unknown => None,
            ClientAddr::Client(ip) | ClientAddr::Proxy(ip) => Some(ip),
        }
    }

    /// Whether polls from here are one client's (as far as node id and
    /// names tell): false behind a proxy that named no client.
    pub fn is_one_client(self) -> bool {
        !matches!(self, ClientAddr::Proxy(_))
    }
}
