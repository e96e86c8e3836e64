//! The `auth_policy` fuzz target (`crate::fuzz` lists them all): an
//! `--auth-policy` TOML file, parsed and validated; what is accepted then
//! answers every decision on probe identities.
//!
//! Properties, each a panic when broken: nothing panics; an identified
//! principal is one of the policy's; a rule that grants secrets binds
//! neither half to everything (some probe value is outside its patterns),
//! as the file format promises.

use super::*;

impl NamePattern {
    /// The glob, for a plain pattern.
    pub(super) fn glob(&self) -> Option<&Pattern> {
        match self {
            NamePattern::Glob(p) => Some(p),
            NamePattern::Template(_) => None,
        }
    }
}

/// Node ids and clusters a client could claim (all non-empty: an empty one
/// is a value of its own, which a pattern may fairly leave out).
const PROBES: &[&str] = &[
    "x",
    "edge-1",
    "*",
    "[",
    "a/b",
    "ns/edge/sa/x",
    "\u{0}",
    "ü",
    "spiffe://mesh.example/ns/edge/sa/x",
    "a-much-longer-node-id-than-any-pattern-would-spell-out-0123456789",
];

/// Parses `data` as a policy; on success asks it every decision.
/// Accepted: a valid policy.
pub(crate) fn policy(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    let Ok(policy) = Policy::parse(text) else {
        return false;
    };
    let count = policy.principal_count();
    let digests = [None, Some([0u8; 32]), Some(sha256("x"))];
    let peers = [
        None,
        Some(PeerIdentity {
            uris: PROBES.iter().map(|s| s.to_string()).collect(),
            dns: PROBES.iter().map(|s| s.to_string()).collect(),
            chain: Vec::new(),
        }),
        Some(PeerIdentity {
            uris: Vec::new(),
            dns: Vec::new(),
            chain: Vec::new(),
        }),
    ];
    for digest in &digests {
        for peer in &peers {
            if let Identity::Principal { index, .. } =
                policy.identify_digest(digest.as_ref(), peer.as_ref())
            {
                assert!(index < count, "principal {index} of {count}");
            }
        }
    }
    for index in 0..=count {
        let _ = policy.csds_enabled(index);
        for peer in &peers {
            let peer = peer.as_ref();
            for id in PROBES {
                let _ = policy.allows_csds(index, peer, id);
                for cluster in PROBES {
                    let _ = policy.allows_hds(index, peer, id, cluster);
                    for kind in ResourceType::BUILT_IN {
                        let _ = policy.allows(index, peer, kind, id, cluster);
                    }
                }
            }
        }
    }
    let _ = policy.admin_needs_token();
    let _ = policy.admin_token_ok(Some("x"));
    for principal in &policy.principals {
        for grant in &principal.grants {
            if !grant.types.contains(&ResourceType::Secrets) {
                continue;
            }
            for (half, patterns) in [("nodes", &grant.nodes), ("clusters", &grant.clusters)] {
                // A template is tied to the certificate: what it matches is
                // the certificate's, not the client's choice.
                let globs: Vec<&Pattern> = patterns.iter().filter_map(|p| p.glob()).collect();
                if globs.len() < patterns.len() {
                    continue;
                }
                let open = PROBES
                    .iter()
                    .all(|probe| globs.iter().any(|p| p.matches(probe)));
                assert!(
                    !open,
                    "principal {:?} is granted secrets for any {half}: {:?}",
                    principal.name,
                    globs.iter().map(|p| p.as_str()).collect::<Vec<_>>()
                );
            }
        }
    }
    true
}
