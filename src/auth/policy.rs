//! The policy file's model, its loading and validation, and the decisions:
//! who a request is ([`Policy::identify_digest`]) and whether that principal may
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
//! something narrower than "anything" (a pattern pinned by a literal
//! character at its start or end: [`pinned`]), and a principal whose SANs name
//! many certificates (a glob, a template) gets secrets only by a rule that
//! ties the node to the certificate ([`binding`]: `uri-san =
//! ["spiffe://td/ns/{namespace}/sa/{sa}"]`, `nodes = ["{sa}"]`), so one
//! certificate of many cannot read every node's secrets.
//!
//! Patterns are globs (`*` any run of characters, `/` included; `?` one
//! character; `[...]` a class); a pattern without those is an exact name.
//! A token's digest is SHA-256 of the token's bytes, in hex.

use std::path::{Path, PathBuf};

use binding::{has_wildcard, Captures, NamePattern, SanTemplate};
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
    /// `uri-san` entries that capture (`.../sa/{sa}`).
    templates: Vec<SanTemplate>,
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
    nodes: Vec<NamePattern>,
    clusters: Vec<NamePattern>,
    types: Vec<ResourceType>,
    /// The `nodes` entries as written.
    raw_nodes: Vec<String>,
    /// Whether a pattern names a capture: the rule then binds only a
    /// request whose certificate's URI SAN a template of the principal
    /// captured, with those values.
    bound: bool,
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

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
struct File {
    admin: AdminFile,
    principal: Vec<PrincipalFile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
struct AdminFile {
    token_sha256: Vec<String>,
    uri_san: Vec<String>,
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
    /// A switch the policy does not take: refused with a pointer to its
    /// successors.
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
    /// Reads and validates the policy at `path`, for sessions keyed by
    /// cluster if `cluster_sessions` ([`Policy::check_cluster_sessions`]).
    pub(crate) fn load(path: &Path, cluster_sessions: bool) -> Result<Policy, PolicyError> {
        let fail = |reason: String| PolicyError {
            path: path.to_owned(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        let policy = Policy::parse(&text).map_err(fail)?;
        if cluster_sessions {
            policy.check_cluster_sessions().map_err(fail)?;
        }
        Ok(policy)
    }

    /// With `--session-key cluster` every node of a cluster shares one
    /// upstream session, and the upstream sees the id of the node that
    /// opened it: a rule's node half would bind nothing (a principal
    /// allowed edge-2 gets what was made for edge-1). So every rule says
    /// `nodes = ["*"]` there, and only the cluster binds.
    pub(crate) fn check_cluster_sessions(&self) -> Result<(), String> {
        for p in &self.principals {
            for raw in p.grants.iter().flat_map(|g| &g.raw_nodes) {
                if raw != "*" {
                    return Err(format!(
                        "principal {:?}: an allow rule names nodes = [{raw:?}], but with --session-key cluster \
                         all nodes of a cluster share one upstream session, which the upstream keys on the \
                         first node's id: the node half binds nothing. Write nodes = [\"*\"] and bind \
                         clusters, or use --session-key node",
                        p.name
                    ));
                }
            }
        }
        Ok(())
    }

    /// Parses and validates a policy's TOML text.
    pub(crate) fn parse(text: &str) -> Result<Policy, String> {
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        let admin_tokens = digests(&file.admin.token_sha256, "[admin] token-sha256")?;
        let admin_sans = Sans::parse(&file.admin.uri_san, &file.admin.dns_san, "[admin]")?;
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
            let sans = Sans::parse(&p.uri_san, &p.dns_san, &what)?;
            let grants = p
                .allow
                .iter()
                .map(|g| grant(g, &what, &sans, !p.token_sha256.is_empty()))
                .collect::<Result<Vec<_>, _>>()?;
            principals.push(Principal {
                sans,
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

    /// Who presents the bearer token whose `digest` is given (if any; the
    /// digest is all a request keeps of it, to be identified again after a
    /// reload) over a connection whose client certificate says `peer`. A
    /// token decides when there is one (a wrong token is refused even with
    /// a good certificate); otherwise the first principal, in file order,
    /// one of whose SAN patterns matches one of the certificate's SANs.
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
            if let Some(by) = p.sans.matching(peer) {
                let name = p.name.clone();
                return Identity::Principal { index, name, by };
            }
        }
        Identity::UnknownCertificate(certificate_names(peer))
    }

    /// Whether principal `index`, over a connection whose client
    /// certificate is `peer`, may fetch `kind` for the node `id` of
    /// `cluster`. A rule bound to the certificate ([`binding`]) binds only
    /// with what `peer`'s URI SANs capture.
    pub(crate) fn allows(
        &self,
        index: usize,
        peer: Option<&PeerIdentity>,
        kind: ResourceType,
        id: &str,
        cluster: &str,
    ) -> bool {
        self.binds(index, peer, Some(kind), id, Some(cluster))
    }

    /// Whether principal `index` may use HDS as the node `id` of `cluster`:
    /// `hds = true`, and a rule of its binds that node (of any type).
    pub(crate) fn allows_hds(
        &self,
        index: usize,
        peer: Option<&PeerIdentity>,
        id: &str,
        cluster: &str,
    ) -> bool {
        self.passes_through(index, peer, |p| p.hds, id, Some(cluster))
    }

    /// Whether principal `index` may ask the upstream's CSDS about the node
    /// `id`: `csds = true`, and a rule of its names that node. CSDS selects
    /// nodes by id alone, so the rule's clusters cannot be checked here:
    /// a principal sees the status of the nodes its rules name.
    pub(crate) fn allows_csds(&self, index: usize, peer: Option<&PeerIdentity>, id: &str) -> bool {
        self.passes_through(index, peer, |p| p.csds, id, None)
    }

    /// Whether CSDS's answer about the node `id` of `cluster` may reach
    /// principal `index`: `csds = true`, and a rule of its binds both (the
    /// question was asked by id alone; the answer says each node's cluster,
    /// and a node of a cluster the rules do not name is not the caller's
    /// to see).
    pub(crate) fn allows_csds_answer(
        &self,
        index: usize,
        peer: Option<&PeerIdentity>,
        id: &str,
        cluster: &str,
    ) -> bool {
        self.passes_through(index, peer, |p| p.csds, id, Some(cluster))
    }

    /// Whether principal `index` has the pass-through `allowed` says, and a
    /// rule of its binds the node `id` (of `cluster`, when given).
    fn passes_through(
        &self,
        index: usize,
        peer: Option<&PeerIdentity>,
        allowed: impl Fn(&Principal) -> bool,
        id: &str,
        cluster: Option<&str>,
    ) -> bool {
        self.principals.get(index).is_some_and(allowed)
            && self.binds(index, peer, None, id, cluster)
    }

    /// Whether a rule of principal `index` (for `kind`, when given) binds
    /// the node `id` (of `cluster`, when given; else of some cluster, what a
    /// view selecting nodes by id checks before it looks), a rule bound to
    /// the certificate with what `peer`'s URI SANs capture by its templates.
    pub(crate) fn binds(
        &self,
        index: usize,
        peer: Option<&PeerIdentity>,
        kind: Option<ResourceType>,
        id: &str,
        cluster: Option<&str>,
    ) -> bool {
        let Some(p) = self.principals.get(index) else {
            return false;
        };
        let captures: Vec<Captures> = match peer {
            Some(peer) => p
                .sans
                .templates
                .iter()
                .flat_map(|t| peer.uris.iter().filter_map(|u| t.capture(u)))
                .collect(),
            None => Vec::new(),
        };
        p.grants
            .iter()
            .filter(|g| kind.is_none_or(|k| g.types.contains(&k)))
            .any(|g| g.binds(id, cluster, &captures))
    }

    pub(crate) fn csds_enabled(&self, index: usize) -> bool {
        self.principals.get(index).is_some_and(|p| p.csds)
    }

    pub(crate) fn admin_needs_token(&self) -> bool {
        !self.admin_tokens.is_empty()
    }

    /// Whether `token` opens the admin listener's details.
    pub(crate) fn admin_token_ok(&self, token: Option<&str>) -> bool {
        token.is_some_and(|t| self.admin_tokens.contains(&sha256(t)))
    }

    /// Whether `[admin]` names the SANs of admin client certificates.
    pub(crate) fn admin_names_certificates(&self) -> bool {
        !self.admin_sans.uri.is_empty()
            || !self.admin_sans.templates.is_empty()
            || !self.admin_sans.dns.is_empty()
    }

    /// Whether the client certificate `peer` (one the admin listener's
    /// client CA verified) opens its details: any such certificate when
    /// `[admin]` names no SAN, else one with a SAN it names (matched as a
    /// principal's are). `Err` says what the certificate names, for the 401.
    pub(crate) fn admin_certificate(&self, peer: &PeerIdentity) -> Result<(), String> {
        if !self.admin_names_certificates() {
            return Ok(());
        }
        self.admin_sans
            .matching(peer)
            .map(drop)
            .ok_or_else(|| certificate_names(peer))
    }
}

impl Sans {
    /// `uri-san` (patterns or templates) and `dns-san` of `what`.
    fn parse(uri: &[String], dns: &[String], what: &str) -> Result<Sans, String> {
        let mut sans = Sans {
            dns: patterns(dns, &format!("{what} dns-san"))?,
            ..Sans::default()
        };
        for raw in uri {
            match SanTemplate::parse(raw).map_err(|e| format!("{what} uri-san: {e}"))? {
                Some(template) => sans.templates.push(template),
                None => sans.uri.extend(patterns(
                    std::slice::from_ref(raw),
                    &format!("{what} uri-san"),
                )?),
            }
        }
        Ok(sans)
    }

    /// Whether these SANs can name more than one certificate: a glob or
    /// a template.
    fn name_many(&self) -> bool {
        !self.templates.is_empty()
            || self
                .uri
                .iter()
                .chain(&self.dns)
                .any(|p| has_wildcard(p.as_str()))
    }

    /// How `peer` matches these patterns ("client certificate URI SAN
    /// ..."): the first URI SAN that matches, else the first DNS SAN.
    fn matching(&self, peer: &PeerIdentity) -> Option<String> {
        let uri = peer.uris.iter().find(|u| {
            self.uri.iter().any(|pat| pat.matches(u))
                || self.templates.iter().any(|t| t.capture(u).is_some())
        });
        let dns = peer
            .dns
            .iter()
            .find(|d| self.dns.iter().any(|pat| pat.matches(d)));
        uri.map(|uri| format!("client certificate URI SAN {uri}"))
            .or_else(|| dns.map(|dns| format!("client certificate DNS SAN {dns}")))
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
    /// Whether this rule binds the node `id` of `cluster` (both must
    /// match; `None` is not checked), a bound rule with one of `captures`.
    fn binds(&self, id: &str, cluster: Option<&str>, captures: &[Captures]) -> bool {
        let with = |c: Option<&Captures>| {
            self.nodes.iter().any(|pat| pat.matches(id, c))
                && cluster.is_none_or(|cl| self.clusters.iter().any(|pat| pat.matches(cl, c)))
        };
        match self.bound {
            false => with(None),
            true => captures.iter().any(|c| with(Some(c))),
        }
    }
}

fn grant(g: &GrantFile, what: &str, sans: &Sans, tokens: bool) -> Result<Grant, String> {
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
        None => ResourceType::all()
            .into_iter()
            .filter(|t| *t != ResourceType::Secrets)
            .collect(),
        Some(names) => names
            .iter()
            .map(|name| {
                short_type(name)
                    .map_err(|known| format!("{what}: unknown type {name:?} (known: {known})"))
            })
            .collect::<Result<Vec<_>, _>>()?,
    };
    let node_patterns = name_patterns(nodes, &format!("{what} nodes"))?;
    let cluster_patterns = name_patterns(clusters, &format!("{what} clusters"))?;
    let used: Vec<&str> = node_patterns
        .iter()
        .chain(&cluster_patterns)
        .flat_map(NamePattern::names)
        .collect();
    let bound = !used.is_empty();
    if bound {
        check_captures(&used, sans, tokens, what)?;
    }
    if types.contains(&ResourceType::Secrets) {
        if bound {
            if let Some(loose) = nodes
                .iter()
                .zip(&node_patterns)
                .find(|(_, p)| !p.is_pinned_template())
            {
                return Err(format!(
                    "{what}: an allow rule grants secrets bound to the certificate, but nodes = [{:?}] is not \
                     tied to it: every node pattern of such a rule is a template of captures without wildcards \
                     (nodes = [\"{{sa}}\"]), so each certificate reads its own node's secrets only",
                    loose.0
                ));
            }
        } else if sans.name_many() {
            return Err(format!(
                "{what}: an allow rule grants secrets for nodes = {nodes:?} to a principal whose uri-san or \
                 dns-san names many certificates: any one of them (one stolen certificate) could read every \
                 node the rule names; tie the node to the certificate by capture instead: \
                 uri-san = [\"spiffe://trust-domain/ns/{{namespace}}/sa/{{sa}}\"] and nodes = [\"{{sa}}\"]"
            ));
        }
        for (list, patterns, half) in [
            (nodes, &node_patterns, "nodes"),
            (clusters, &cluster_patterns, "clusters"),
        ] {
            // A template is pinned by what the certificate captured.
            let open = list
                .iter()
                .zip(patterns)
                .find(|(raw, p)| matches!(p, NamePattern::Glob(_)) && !pinned::is_pinned(raw));
            if let Some((open, _)) = open {
                return Err(format!(
                    "{what}: an allow rule grants secrets with {half} = [{open:?}], which neither begins nor \
                     ends with a literal character: it matches values a client chooses (\"*\", \"[!~]*\" and \
                     \"*edge*\" alike), and the client would read the secrets they select (a snapshot's \
                     per-node or per-cluster layer, a control plane's per-identity secrets); name the {half} \
                     the principal is, or pin the pattern (\"edge-*\")"
                ));
            }
        }
    }
    Ok(Grant {
        nodes: node_patterns,
        clusters: cluster_patterns,
        types,
        raw_nodes: nodes.clone(),
        bound,
    })
}

/// A rule naming captures `used` must belong to a principal identified by
/// its uri-san templates alone, each defining them all: a token or a
/// plain SAN captures nothing to bind with.
fn check_captures(used: &[&str], sans: &Sans, tokens: bool, what: &str) -> Result<(), String> {
    let first = used.first().copied().unwrap_or_default();
    if sans.templates.is_empty() {
        return Err(format!(
            "{what}: an allow rule names the capture {{{first}}}, but no uri-san of the principal captures \
             (uri-san = [\"spiffe://trust-domain/ns/{{namespace}}/sa/{{sa}}\"])"
        ));
    }
    if tokens || !sans.uri.is_empty() || !sans.dns.is_empty() {
        return Err(format!(
            "{what}: an allow rule bound by captures needs a principal identified by uri-san templates \
             alone: a token, a dns-san or a uri-san without captures would present no value for {{{first}}}"
        ));
    }
    for template in &sans.templates {
        if let Some(missing) = used.iter().find(|u| !template.names().any(|n| n == **u)) {
            return Err(format!(
                "{what}: an allow rule names the capture {{{missing}}}, which uri-san {:?} does not capture",
                template.as_str()
            ));
        }
    }
    Ok(())
}

fn name_patterns(raw: &[String], what: &str) -> Result<Vec<NamePattern>, String> {
    raw.iter()
        .map(|p| NamePattern::parse(p).map_err(|e| format!("{what}: {e}")))
        .collect()
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

/// The type a short name (`clusters`) names; `Err` lists the names there are.
pub(crate) fn short_type(name: &str) -> Result<ResourceType, String> {
    let all = ResourceType::all();
    all.iter()
        .copied()
        .find(|t| t.short_name() == name)
        .ok_or_else(|| {
            let known: Vec<&str> = all.iter().map(|t| t.short_name()).collect();
            known.join(", ")
        })
}

/// The SHA-256 of a bearer token, which is all that is kept of it.
pub(crate) fn sha256(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

mod binding;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod fuzz;
mod pinned;
#[cfg(test)]
mod tests;
