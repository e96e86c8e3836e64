//! The policy file's model, its loading and validation, and the decisions:
//! who a request is ([`Policy::identify`]) and whether that principal may
//! fetch a type for a node ([`Policy::allows`]), use HDS for a node
//! ([`Policy::allows_hds`]) or ask the upstream's CSDS about one
//! ([`Policy::allows_csds`]).
//!
//! A rule binds the whole identity that selects config: a node's config is
//! keyed on its id *and* its cluster (the snapshot's `nodes/` and
//! `clusters/` layers, and every control plane), so a rule names both, and
//! `"*"` is written where any value is meant. A rule that left one out
//! would let the client choose it, and so choose config meant for others.
//! Secrets are stricter: a rule that grants them must bind both halves to
//! something narrower than "anything".
//!
//! Patterns are globs (`*` any run of characters, `/` included; `?` one
//! character; `[...]` a class); a pattern without those is an exact name.
//! A token's digest is SHA-256 of the token's bytes, in hex.

use std::path::{Path, PathBuf};

use glob::Pattern;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::tls::PeerIdentity;
use crate::xds::ResourceType;

/// Why a policy file could not be used.
#[derive(Debug, thiserror::Error)]
#[error("auth policy {path}: {reason}")]
pub struct PolicyError {
    path: PathBuf,
    reason: String,
}

/// A loaded, validated policy.
#[derive(Debug, Default)]
pub(crate) struct Policy {
    principals: Vec<Principal>,
    admin_tokens: Vec<[u8; 32]>,
    /// Which client certificates of the admin listener open its details
    /// (none named: any its client CA verified).
    admin_sans: Sans,
}

/// The SAN patterns that name a certificate's owner: a principal's, or the
/// admin's.
#[derive(Debug, Default)]
struct Sans {
    uri: Vec<Pattern>,
    dns: Vec<Pattern>,
}

#[derive(Debug)]
struct Principal {
    name: String,
    sans: Sans,
    tokens: Vec<[u8; 32]>,
    hds: bool,
    csds: bool,
    grants: Vec<Grant>,
}

#[derive(Debug)]
struct Grant {
    nodes: Vec<Pattern>,
    clusters: Vec<Pattern>,
    types: Vec<ResourceType>,
}

/// Who a request is, as the policy sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Identity {
    /// A principal of the policy (its index), and how it was recognised.
    Principal {
        index: usize,
        name: String,
        by: String,
    },
    /// A verified client certificate that no principal names.
    UnknownCertificate(String),
    /// A bearer token no principal holds.
    UnknownToken,
    /// Neither a certificate nor a token.
    Anonymous,
}

// --- the file ---------------------------------------------------------------

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct File {
    #[serde(default)]
    admin: AdminFile,
    #[serde(default)]
    principal: Vec<PrincipalFile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct AdminFile {
    #[serde(default)]
    token_sha256: Vec<String>,
    #[serde(default)]
    uri_san: Vec<String>,
    #[serde(default)]
    dns_san: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct PrincipalFile {
    name: String,
    #[serde(default)]
    uri_san: Vec<String>,
    #[serde(default)]
    dns_san: Vec<String>,
    #[serde(default)]
    token_sha256: Vec<String>,
    /// The old single switch, now refused with a pointer to its successors.
    pass_through: Option<bool>,
    #[serde(default)]
    hds: bool,
    #[serde(default)]
    csds: bool,
    #[serde(default)]
    allow: Vec<GrantFile>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct GrantFile {
    nodes: Option<Vec<String>>,
    clusters: Option<Vec<String>>,
    types: Option<Vec<String>>,
}

impl Policy {
    /// Reads and validates the policy at `path`.
    pub(crate) fn load(path: &Path) -> Result<Policy, PolicyError> {
        let fail = |reason: String| PolicyError {
            path: path.to_owned(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        Policy::parse(&text).map_err(fail)
    }

    /// Parses and validates a policy's TOML text.
    pub(crate) fn parse(text: &str) -> Result<Policy, String> {
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        let admin_tokens = digests(&file.admin.token_sha256, "[admin] token-sha256")?;
        let admin_sans = Sans {
            uri: patterns(&file.admin.uri_san, "[admin] uri-san")?,
            dns: patterns(&file.admin.dns_san, "[admin] dns-san")?,
        };
        let mut principals = Vec::new();
        for p in file.principal {
            let what = format!("principal {:?}", p.name);
            if p.name.is_empty() {
                return Err("a principal without a name".into());
            }
            if principals.iter().any(|q: &Principal| q.name == p.name) {
                return Err(format!("{what} is defined twice"));
            }
            if p.uri_san.is_empty() && p.dns_san.is_empty() && p.token_sha256.is_empty() {
                return Err(format!(
                    "{what} has no uri-san, dns-san or token-sha256: nothing could ever be it"
                ));
            }
            if p.pass_through.is_some() {
                return Err(format!(
                    "{what}: pass-through is split in two: hds = true lets it use HDS for the nodes its rules allow, \
                     csds = true lets it ask the control plane's CSDS about those nodes"
                ));
            }
            let grants = p
                .allow
                .iter()
                .map(|g| grant(g, &what))
                .collect::<Result<Vec<_>, _>>()?;
            principals.push(Principal {
                sans: Sans {
                    uri: patterns(&p.uri_san, &format!("{what} uri-san"))?,
                    dns: patterns(&p.dns_san, &format!("{what} dns-san"))?,
                },
                tokens: digests(&p.token_sha256, &format!("{what} token-sha256"))?,
                hds: p.hds,
                csds: p.csds,
                grants,
                name: p.name,
            });
        }
        let policy = Policy {
            principals,
            admin_tokens,
            admin_sans,
        };
        policy.check_tokens_are_unique()?;
        Ok(policy)
    }

    fn check_tokens_are_unique(&self) -> Result<(), String> {
        let mut seen = std::collections::HashSet::new();
        for p in &self.principals {
            for t in &p.tokens {
                if !seen.insert(t) {
                    return Err(format!(
                        "a token-sha256 of principal {:?} belongs to another principal too",
                        p.name
                    ));
                }
            }
        }
        Ok(())
    }

    pub(crate) fn principal_count(&self) -> usize {
        self.principals.len()
    }

    /// Who presents `token` (a bearer token, if any) over a connection whose
    /// client certificate says `peer`. A token decides when there is one
    /// (a wrong token is refused even with a good certificate); otherwise
    /// the first principal, in file order, one of whose SAN patterns
    /// matches one of the certificate's SANs.
    #[cfg(test)]
    pub(crate) fn identify(&self, token: Option<&str>, peer: Option<&PeerIdentity>) -> Identity {
        self.identify_digest(token.map(sha256).as_ref(), peer)
    }

    /// [`Policy::identify`] from the token's digest, which is all a request
    /// keeps of it (to be identified again after a reload).
    pub(crate) fn identify_digest(
        &self,
        digest: Option<&[u8; 32]>,
        peer: Option<&PeerIdentity>,
    ) -> Identity {
        if let Some(digest) = digest {
            return self
                .principals
                .iter()
                .position(|p| p.tokens.contains(digest))
                .map_or(Identity::UnknownToken, |index| Identity::Principal {
                    index,
                    name: self.principals[index].name.clone(),
                    by: "bearer token".into(),
                });
        }
        let Some(peer) = peer else {
            return Identity::Anonymous;
        };
        for (index, p) in self.principals.iter().enumerate() {
            let Some(by) = p.sans.matching(peer) else {
                continue;
            };
            return Identity::Principal {
                index,
                name: p.name.clone(),
                by,
            };
        }
        Identity::UnknownCertificate(certificate_names(peer))
    }

    /// Whether principal `index` may fetch `kind` for the node `id` of
    /// `cluster`.
    pub(crate) fn allows(&self, index: usize, kind: ResourceType, id: &str, cluster: &str) -> bool {
        self.grants_of(index)
            .any(|g| g.binds(id, cluster) && g.types.contains(&kind))
    }

    /// Whether a rule of principal `index` names the node `id` for `kind`,
    /// of some cluster (what a view selecting nodes by id checks before it
    /// looks; [`Policy::allows`] then decides each cluster it shows).
    pub(crate) fn names_node(&self, index: usize, kind: ResourceType, id: &str) -> bool {
        self.grants_of(index)
            .any(|g| g.types.contains(&kind) && g.nodes.iter().any(|pat| pat.matches(id)))
    }

    /// Whether principal `index` may use HDS as the node `id` of `cluster`:
    /// `hds = true`, and a rule of its binds that node (of any type).
    pub(crate) fn allows_hds(&self, index: usize, id: &str, cluster: &str) -> bool {
        self.principals.get(index).is_some_and(|p| p.hds)
            && self.grants_of(index).any(|g| g.binds(id, cluster))
    }

    /// Whether principal `index` may ask the upstream's CSDS about the node
    /// `id`: `csds = true`, and a rule of its names that node. CSDS selects
    /// nodes by id alone, so the rule's clusters cannot be checked here:
    /// a principal sees the status of the nodes its rules name.
    pub(crate) fn allows_csds(&self, index: usize, id: &str) -> bool {
        self.principals.get(index).is_some_and(|p| p.csds)
            && self
                .grants_of(index)
                .any(|g| g.nodes.iter().any(|pat| pat.matches(id)))
    }

    /// Whether principal `index` may use CSDS at all.
    pub(crate) fn csds_enabled(&self, index: usize) -> bool {
        self.principals.get(index).is_some_and(|p| p.csds)
    }

    fn grants_of(&self, index: usize) -> impl Iterator<Item = &Grant> {
        self.principals
            .get(index)
            .into_iter()
            .flat_map(|p| &p.grants)
    }

    /// Whether the admin listener's details need a token.
    pub(crate) fn admin_needs_token(&self) -> bool {
        !self.admin_tokens.is_empty()
    }

    /// Whether `token` opens the admin listener's details.
    pub(crate) fn admin_token_ok(&self, token: Option<&str>) -> bool {
        token.is_some_and(|t| self.admin_tokens.contains(&sha256(t)))
    }

    /// Whether `[admin]` names the SANs of admin client certificates.
    pub(crate) fn admin_names_certificates(&self) -> bool {
        !self.admin_sans.uri.is_empty() || !self.admin_sans.dns.is_empty()
    }

    /// Whether the client certificate `peer` (one the admin listener's
    /// client CA verified) opens its details: any such certificate when
    /// `[admin]` names no SAN, else one with a SAN it names (matched as a
    /// principal's are). `Err` says what the certificate names, for the 401.
    pub(crate) fn admin_certificate(&self, peer: &PeerIdentity) -> Result<(), String> {
        if !self.admin_names_certificates() {
            return Ok(());
        }
        match self.admin_sans.matching(peer) {
            Some(_) => Ok(()),
            None => Err(certificate_names(peer)),
        }
    }
}

impl Sans {
    /// How `peer` matches these patterns ("client certificate URI SAN
    /// ..."): the first URI SAN that matches, else the first DNS SAN.
    fn matching(&self, peer: &PeerIdentity) -> Option<String> {
        let uri = peer
            .uris
            .iter()
            .find(|u| self.uri.iter().any(|pat| pat.matches(u)));
        let dns = peer
            .dns
            .iter()
            .find(|d| self.dns.iter().any(|pat| pat.matches(d)));
        match (uri, dns) {
            (Some(uri), _) => Some(format!("client certificate URI SAN {uri}")),
            (None, Some(dns)) => Some(format!("client certificate DNS SAN {dns}")),
            (None, None) => None,
        }
    }
}

/// What a certificate no pattern matched names, for a message.
fn certificate_names(peer: &PeerIdentity) -> String {
    let names: Vec<&str> = peer
        .uris
        .iter()
        .chain(&peer.dns)
        .map(String::as_str)
        .collect();
    if names.is_empty() {
        "a client certificate without URI or DNS SANs".into()
    } else {
        format!("a client certificate naming {}", names.join(", "))
    }
}

impl Grant {
    /// Whether this rule binds the node `id` of `cluster` (both must match).
    fn binds(&self, id: &str, cluster: &str) -> bool {
        self.nodes.iter().any(|pat| pat.matches(id))
            && self.clusters.iter().any(|pat| pat.matches(cluster))
    }
}

fn grant(g: &GrantFile, what: &str) -> Result<Grant, String> {
    let (Some(nodes), Some(clusters)) = (&g.nodes, &g.clusters) else {
        let (missing, example) = match g.nodes {
            None => ("nodes", "nodes = [\"*\"] for any node id"),
            Some(_) => ("clusters", "clusters = [\"*\"] for any node cluster"),
        };
        return Err(format!(
            "{what}: an allow rule names no {missing}: a node's config is selected by its id and its cluster, \
             so the half left out would be the client's to choose; name it ({example})"
        ));
    };
    for (list, half) in [(nodes, "nodes"), (clusters, "clusters")] {
        if list.is_empty() {
            return Err(format!(
                "{what}: an allow rule with {half} = [] matches nothing; name some, or \"*\" for any"
            ));
        }
    }
    let types = match &g.types {
        None => ResourceType::ALL
            .into_iter()
            .filter(|t| *t != ResourceType::Secrets)
            .collect(),
        Some(names) => names
            .iter()
            .map(|name| {
                ResourceType::ALL
                    .into_iter()
                    .find(|t| t.short_name() == name)
                    .ok_or_else(|| {
                        let known: Vec<&str> =
                            ResourceType::ALL.iter().map(|t| t.short_name()).collect();
                        format!(
                            "{what}: unknown type {name:?} (known: {})",
                            known.join(", ")
                        )
                    })
            })
            .collect::<Result<Vec<_>, _>>()?,
    };
    if types.contains(&ResourceType::Secrets) {
        for (list, half) in [(nodes, "nodes"), (clusters, "clusters")] {
            if let Some(open) = list.iter().find(|p| matches_anything(p)) {
                return Err(format!(
                    "{what}: an allow rule grants secrets with {half} = [{open:?}]: a client could claim any \
                     value there and read the secrets it selects (a snapshot's per-node or per-cluster layer, \
                     a control plane's per-identity secrets); name the {half} the principal is"
                ));
            }
        }
    }
    Ok(Grant {
        nodes: patterns(nodes, &format!("{what} nodes"))?,
        clusters: patterns(clusters, &format!("{what} clusters"))?,
        types,
    })
}

/// Whether a pattern names no character of the value, only wildcards
/// (`*`, `**`, `?*`, `??`, ...): it matches every value at least as long as
/// its `?`s, and a client chooses its value.
fn matches_anything(pattern: &str) -> bool {
    !pattern.is_empty() && pattern.chars().all(|c| c == '*' || c == '?')
}

fn patterns(raw: &[String], what: &str) -> Result<Vec<Pattern>, String> {
    raw.iter()
        .map(|p| Pattern::new(p).map_err(|e| format!("{what}: bad pattern {p:?}: {e}")))
        .collect()
}

fn digests(raw: &[String], what: &str) -> Result<Vec<[u8; 32]>, String> {
    // The value is never echoed: it might be a token pasted by mistake.
    raw.iter()
        .enumerate()
        .map(|(i, hex_digest)| {
            let mut digest = [0u8; 32];
            hex::decode_to_slice(hex_digest.trim(), &mut digest).map_err(|_| {
                format!("{what}: entry {} is not a SHA-256 in hex (64 hex digits); store the output of `printf %s \"$TOKEN\" | sha256sum`, never the token", i + 1)
            })?;
            Ok(digest)
        })
        .collect()
}

/// The SHA-256 of a bearer token, which is all that is kept of it.
pub(crate) fn sha256(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod fuzz;
#[cfg(test)]
mod tests;
