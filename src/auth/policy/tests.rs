//! The policy's file format, validation and decisions.

use super::*;

const EDGE_TOKEN: &str = "edge-token-0123456789";
const CI_TOKEN: &str = "ci-token-abcdef";

impl Policy {
    /// Who presents `token` over a connection whose certificate says `peer`.
    fn identify(&self, token: Option<&str>, peer: Option<&PeerIdentity>) -> Identity {
        self.identify_digest(token.map(sha256).as_ref(), peer)
    }
}

fn hex_sha256(token: &str) -> String {
    hex::encode(sha256(token))
}

fn example() -> Policy {
    Policy::parse(&format!(
        r#"
[admin]
token-sha256 = ["{admin}"]

[[principal]]
name = "edge"
uri-san = ["spiffe://mesh.example/ns/edge/sa/envoy"]
token-sha256 = ["{edge}"]
hds = true
[[principal.allow]]
nodes = ["edge-*"]
clusters = ["edge"]
[[principal.allow]]
nodes = ["edge-1"]
clusters = ["edge", "edge-canary"]
types = ["secrets"]

[[principal.allow]]
nodes = ["*"]
clusters = ["shared"]
types = ["clusters"]

[[principal]]
name = "ci"
dns-san = ["ci-*.example"]
token-sha256 = ["{ci}"]
csds = true
[[principal.allow]]
nodes = ["*"]
clusters = ["*"]
types = ["listeners"]
"#,
        admin = hex_sha256("admin-token"),
        edge = hex_sha256(EDGE_TOKEN),
        ci = hex_sha256(CI_TOKEN),
    ))
    .unwrap()
}

fn peer(uris: &[&str], dns: &[&str]) -> PeerIdentity {
    PeerIdentity {
        uris: uris.iter().map(|s| s.to_string()).collect(),
        dns: dns.iter().map(|s| s.to_string()).collect(),
        chain: Vec::new(),
    }
}

fn index(identity: &Identity) -> usize {
    match identity {
        Identity::Principal { index, .. } => *index,
        other => panic!("not a principal: {other:?}"),
    }
}

#[test]
fn identities_come_from_tokens_then_certificates() {
    let p = example();
    let edge_cert = peer(&["spiffe://mesh.example/ns/edge/sa/envoy"], &[]);
    let id = p.identify(None, Some(&edge_cert));
    assert_eq!(
        id,
        Identity::Principal {
            index: 0,
            name: "edge".into(),
            by: "client certificate URI SAN spiffe://mesh.example/ns/edge/sa/envoy".into()
        }
    );
    assert_eq!(
        index(&p.identify(None, Some(&peer(&[], &["ci-7.example"])))),
        1
    );
    assert_eq!(index(&p.identify(Some(CI_TOKEN), None)), 1);
    // A token decides, even over a certificate of another principal.
    assert_eq!(index(&p.identify(Some(CI_TOKEN), Some(&edge_cert))), 1);
    assert_eq!(
        p.identify(Some("wrong"), Some(&edge_cert)),
        Identity::UnknownToken
    );
    assert_eq!(p.identify(None, None), Identity::Anonymous);
    assert!(matches!(
        p.identify(None, Some(&peer(&["spiffe://other/x"], &[]))),
        Identity::UnknownCertificate(m) if m.contains("spiffe://other/x")
    ));
}

#[test]
fn grants_bind_nodes_clusters_and_types() {
    let p = example();
    let eds = ResourceType::Endpoints;
    assert!(p.allows(0, None, eds, "edge-1", "edge"));
    assert!(
        !p.allows(0, None, eds, "edge-1", "other"),
        "both node and cluster must match"
    );
    assert!(!p.allows(0, None, eds, "core-1", "edge"));
    assert!(p.allows(0, None, ResourceType::Clusters, "anyone", "shared"));
    assert!(
        !p.allows(0, None, eds, "anyone", "shared"),
        "only the types named"
    );
    // Secrets only where a rule names them, for the clusters it names:
    // the client does not choose the half of its identity a rule binds.
    assert!(p.allows(0, None, ResourceType::Secrets, "edge-1", "edge-canary"));
    assert!(!p.allows(0, None, ResourceType::Secrets, "edge-1", "payments"));
    assert!(!p.allows(0, None, ResourceType::Secrets, "edge-2", "edge"));
    assert!(p.allows(1, None, ResourceType::Listeners, "x", "y"));
    assert!(!p.allows(1, None, ResourceType::Secrets, "x", "y"));
    assert!(!p.allows(7, None, ResourceType::Listeners, "x", "y"));
}

#[test]
fn hds_and_csds_are_separate_switches_bound_to_the_rules() {
    let p = example();
    // HDS: the switch, and a rule binding the node (of any type).
    assert!(p.allows_hds(0, None, "edge-3", "edge"));
    assert!(p.allows_hds(0, None, "anyone", "shared"));
    assert!(!p.allows_hds(0, None, "edge-3", "core"));
    assert!(!p.allows_hds(1, None, "x", "y"), "ci has csds, not hds");
    // CSDS: the switch, and a rule naming the node id.
    assert!(p.csds_enabled(1) && !p.csds_enabled(0));
    assert!(p.allows_csds(1, None, "any-node"));
    assert!(!p.allows_csds(0, None, "edge-1"), "edge has hds, not csds");
    assert!(!p.allows_csds(7, None, "x"));
}

#[test]
fn admin_tokens() {
    let p = example();
    assert!(p.admin_needs_token());
    assert!(p.admin_token_ok(Some("admin-token")));
    assert!(!p.admin_token_ok(Some(EDGE_TOKEN)));
    assert!(!p.admin_token_ok(None));
    assert!(!Policy::default().admin_needs_token());
}

#[test]
fn bad_policies_say_what_is_wrong_without_echoing_tokens() {
    let principal = |body: &str| format!("[[principal]]\nname = \"p\"\n{body}");
    for (text, needle) in [
        (
            principal("uri-san = [\"x\"]\n[[principal.allow]]\ntypes = [\"clusters\"]"),
            "names no nodes",
        ),
        (
            principal(
                "uri-san = [\"x\"]\n[[principal.allow]]\nnodes = [\"*\"]\nclusters = [\"*\"]\ntypes = [\"cluster\"]",
            ),
            "unknown type",
        ),
        // A rule binds both halves of the identity: the one left out
        // would be the client's to choose.
        (
            principal("uri-san = [\"x\"]\n[[principal.allow]]\nnodes = [\"edge-2\"]"),
            "names no clusters",
        ),
        (
            principal("uri-san = [\"x\"]\n[[principal.allow]]\nclusters = [\"edge\"]"),
            "names no nodes",
        ),
        (
            principal("uri-san = [\"x\"]\n[[principal.allow]]\nnodes = []\nclusters = [\"edge\"]"),
            "matches nothing",
        ),
        // Secrets for a half open to anything: refused.
        (
            principal(
                "uri-san = [\"x\"]\n[[principal.allow]]\nnodes = [\"edge-2\"]\nclusters = [\"*\"]\ntypes = [\"secrets\"]",
            ),
            "grants secrets with clusters = [\"*\"]",
        ),
        (
            principal(
                "uri-san = [\"x\"]\n[[principal.allow]]\nnodes = [\"**\"]\nclusters = [\"edge\"]\ntypes = [\"secrets\"]",
            ),
            "grants secrets with nodes = [\"**\"]",
        ),
        // Found by the auth_policy fuzz target's property (a hand-built
        // input; fuzz/corpus/auth_policy/regress-secrets-any-node): `?*`
        // matches every node id a client can send, as `*` does.
        (
            principal(
                "uri-san = [\"x\"]\n[[principal.allow]]\nnodes = [\"?*\"]\nclusters = [\"edge\"]\ntypes = [\"secrets\"]",
            ),
            "grants secrets with nodes = [\"?*\"]",
        ),
        (
            principal(
                "uri-san = [\"x\"]\n[[principal.allow]]\nnodes = [\"edge-1\"]\nclusters = [\"??\", \"edge\"]\ntypes = [\"secrets\"]",
            ),
            "grants secrets with clusters = [\"??\"]",
        ),
        (
            principal("uri-san = [\"x\"]\npass-through = true"),
            "hds = true",
        ),
        (principal("uri-san = [\"[\"]"), "bad pattern"),
        (principal(""), "nothing could ever be it"),
        (
            principal("token-sha256 = [\"my-secret-token\"]"),
            "not a SHA-256",
        ),
        (principal("uri-san = [\"x\"]\nsurprise = 1"), "surprise"),
        (
            format!(
                "{}\n{}",
                principal("uri-san = [\"x\"]"),
                principal("uri-san = [\"y\"]")
            ),
            "defined twice",
        ),
    ] {
        let err = Policy::parse(&text).unwrap_err();
        assert!(err.contains(needle), "{text}\n=> {err}");
        assert!(!err.contains("my-secret-token"), "{err}");
    }
    let token = hex_sha256("t");
    let twice = format!(
        "[[principal]]\nname = \"a\"\ntoken-sha256 = [\"{token}\"]\n[[principal]]\nname = \"b\"\ntoken-sha256 = [\"{token}\"]\n"
    );
    assert!(Policy::parse(&twice)
        .unwrap_err()
        .contains("another principal"));
}

#[test]
fn the_example_policy_loads_and_means_what_its_comments_say() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/auth-policy.toml");
    let policy = Policy::load(&path, false).unwrap();
    assert!(policy.admin_needs_token());
    assert!(policy.admin_token_ok(Some("example-admin-token")));

    // A workload's certificate is its node: id = service account,
    // cluster = namespace, and no other.
    let edge_1 = peer(&["spiffe://mesh.example/ns/edge/sa/edge-1"], &[]);
    let edge_2 = peer(&["spiffe://mesh.example/ns/edge/sa/edge-2"], &[]);
    let workloads = index(&policy.identify(None, Some(&edge_1)));
    assert_eq!(index(&policy.identify(None, Some(&edge_2))), workloads);
    for kind in [ResourceType::Clusters, ResourceType::Secrets] {
        assert!(policy.allows(workloads, Some(&edge_1), kind, "edge-1", "edge"));
        assert!(!policy.allows(workloads, Some(&edge_2), kind, "edge-1", "edge"));
        assert!(!policy.allows(workloads, Some(&edge_1), kind, "edge-1", "core"));
        assert!(!policy.allows(workloads, None, kind, "edge-1", "edge"));
    }

    let ci = index(&policy.identify(Some("example-ci-token"), None));
    assert!(policy.allows(ci, None, ResourceType::Listeners, "any-node", "any"));
    assert!(!policy.allows(ci, None, ResourceType::Endpoints, "any-node", "any"));
    assert!(!policy.allows(ci, None, ResourceType::Secrets, "any-node", "any"));
    assert!(!policy.allows_hds(ci, None, "any-node", "any"));
    assert!(!policy.csds_enabled(ci));
    assert!(matches!(
        policy.identify(Some("example-admin-token"), None),
        Identity::UnknownToken
    ));
    let ops = peer(&["spiffe://mesh.example/ns/ops/sa/oncall"], &[]);
    assert_eq!(policy.admin_certificate(&ops), Ok(()));
    let edge_cert = peer(&["spiffe://mesh.example/ns/edge/sa/envoy"], &[]);
    assert!(policy.admin_certificate(&edge_cert).is_err());
}

#[test]
fn admin_certificates_are_named_as_principals_are() {
    let named = Policy::parse(
        "[admin]\nuri-san = [\"spiffe://mesh.example/ns/ops/*\"]\ndns-san = [\"ops-?.example\"]\n",
    )
    .unwrap();
    assert!(!named.admin_needs_token(), "SANs alone are not tokens");
    for ok in [
        peer(&["spiffe://mesh.example/ns/ops/sa/oncall"], &[]),
        peer(&[], &["ops-1.example"]),
        peer(&["spiffe://elsewhere/x"], &["ops-2.example"]),
    ] {
        assert_eq!(named.admin_certificate(&ok), Ok(()), "{ok:?}");
    }
    let refused = named
        .admin_certificate(&peer(
            &["spiffe://mesh.example/ns/edge/sa/envoy"],
            &["ops-10.example"],
        ))
        .unwrap_err();
    assert_eq!(
        refused,
        "a client certificate naming spiffe://mesh.example/ns/edge/sa/envoy, ops-10.example"
    );
    assert!(named.admin_certificate(&peer(&[], &[])).is_err());
    // No SAN named: any certificate the admin client CA verified.
    assert_eq!(Policy::default().admin_certificate(&peer(&[], &[])), Ok(()));
    let bad = Policy::parse("[admin]\nuri-san = [\"[\"]\n").unwrap_err();
    assert!(bad.contains("[admin] uri-san"), "{bad}");
}

#[test]
fn secrets_for_patterns_that_name_something_are_fine() {
    let policy = Policy::parse(
        "[[principal]]\nname = \"p\"\nuri-san = [\"x\"]\n[[principal.allow]]\nnodes = [\"edge-?\"]\nclusters = [\"edge*\"]\ntypes = [\"secrets\"]\n",
    )
    .unwrap();
    assert!(policy.allows(0, None, ResourceType::Secrets, "edge-1", "edge"));
    assert!(!policy.allows(0, None, ResourceType::Secrets, "core-1", "edge"));
}

/// A principal of many certificates is granted a
/// node's secrets only by a rule that ties the node to the certificate.
#[test]
fn secrets_of_many_certificates_are_bound_to_each_certificate() {
    let bound = Policy::parse(
        r#"
[[principal]]
name = "mesh"
uri-san = ["spiffe://cluster.local/ns/{namespace}/sa/{sa}"]
[[principal.allow]]
nodes = ["{sa}"]
clusters = ["{namespace}"]
types = ["secrets"]
[[principal.allow]]
nodes = ["{sa}-*"]
clusters = ["{namespace}"]
types = ["clusters"]
"#,
    )
    .unwrap();
    let cert =
        |ns: &str, sa: &str| peer(&[&format!("spiffe://cluster.local/ns/{ns}/sa/{sa}")], &[]);
    let secrets = ResourceType::Secrets;
    assert!(bound.allows(0, Some(&cert("edge", "edge-2")), secrets, "edge-2", "edge"));
    assert!(!bound.allows(0, Some(&cert("edge", "edge-2")), secrets, "edge-1", "edge"));
    assert!(!bound.allows(0, Some(&cert("edge", "edge-2")), secrets, "edge-2", "core"));
    assert!(!bound.allows(0, Some(&cert("edge", "edge-2")), secrets, "edge-*", "edge"));
    assert!(bound.allows(
        0,
        Some(&cert("edge", "edge-2")),
        ResourceType::Clusters,
        "edge-2-canary",
        "edge"
    ));
    // Two SANs: each binds as a whole, never one's namespace with the
    // other's service account.
    let two = peer(
        &[
            "spiffe://cluster.local/ns/a/sa/x",
            "spiffe://cluster.local/ns/b/sa/y",
        ],
        &[],
    );
    assert!(bound.allows(0, Some(&two), secrets, "x", "a"));
    assert!(bound.allows(0, Some(&two), secrets, "y", "b"));
    assert!(!bound.allows(0, Some(&two), secrets, "x", "b"));
    assert!(bound.binds(0, Some(&two), Some(secrets), "y", None));
    assert!(!bound.binds(0, Some(&two), Some(secrets), "z", None));

    let principal = |sans: &str, nodes: &str| {
        format!("[[principal]]\nname = \"p\"\n{sans}\n[[principal.allow]]\nnodes = [{nodes}]\nclusters = [\"edge\"]\ntypes = [\"secrets\"]\n")
    };
    for (text, needle) in [
        // The shape the example taught before: any edge certificate read
        // every edge node's secrets.
        (
            principal("uri-san = [\"spiffe://mesh.example/ns/edge/sa/*\"]", "\"edge-*\""),
            "names many certificates",
        ),
        (
            principal("dns-san = [\"*.edge.example\"]", "\"edge-1\""),
            "names many certificates",
        ),
        (
            principal("uri-san = [\"spiffe://td/ns/edge/sa/{sa}\"]", "\"edge-1\""),
            "names many certificates",
        ),
        (
            principal("uri-san = [\"spiffe://td/ns/edge/sa/{sa}\"]", "\"{sa}*\""),
            "not tied to it",
        ),
        (
            principal("uri-san = [\"spiffe://td/ns/edge/sa/{sa}\"]", "\"{sa}\", \"edge-1\""),
            "not tied to it",
        ),
        (
            principal("uri-san = [\"spiffe://td/ns/edge/sa/{sa}\"]", "\"{pod}\""),
            "does not capture",
        ),
        (
            principal("uri-san = [\"spiffe://td/ns/edge/sa/x\"]", "\"{sa}\""),
            "no uri-san of the principal captures",
        ),
        (
            principal(
                "uri-san = [\"spiffe://td/ns/edge/sa/{sa}\"]\ntoken-sha256 = [\"0000000000000000000000000000000000000000000000000000000000000000\"]",
                "\"{sa}\"",
            ),
            "uri-san templates alone",
        ),
        (
            principal("uri-san = [\"spiffe://td/ns/edge/sa/{sa}*\"]", "\"{sa}\""),
            "no wildcards",
        ),
    ] {
        let err = Policy::parse(&text).unwrap_err();
        assert!(err.contains(needle), "{text}\n=> {err}");
    }
    // One certificate (an exact SAN) or a token may still be granted the
    // nodes named for it.
    Policy::parse(&principal(
        "uri-san = [\"spiffe://td/ns/edge/sa/edge-1\"]",
        "\"edge-1\"",
    ))
    .unwrap();
}

/// With `--session-key cluster` the upstream sees the
/// first node's id for every node of a cluster, so a rule's node half
/// would bind nothing: a policy naming nodes is refused (at start and on
/// reload), one binding clusters alone loads.
#[test]
fn cluster_sessions_refuse_rules_that_name_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.toml");
    let rule = |nodes: &str| {
        format!("[[principal]]\nname = \"p\"\ntoken-sha256 = [\"{}\"]\n[[principal.allow]]\nnodes = [{nodes}]\nclusters = [\"edge\"]\n", hex_sha256("t"))
    };
    for nodes in ["\"edge-2\"", "\"edge-*\"", "\"*\", \"edge-2\""] {
        std::fs::write(&path, rule(nodes)).unwrap();
        assert!(Policy::load(&path, false).is_ok(), "{nodes}");
        let err = Policy::load(&path, true).unwrap_err().to_string();
        assert!(err.contains("--session-key cluster"), "{nodes}: {err}");
        assert!(err.contains("nodes = [\"*\"]"), "{nodes}: {err}");
    }
    std::fs::write(&path, rule("\"*\"")).unwrap();
    assert!(Policy::load(&path, true).is_ok());
}

/// "no match-all for secrets" goes by what a pattern
/// can match: one that neither begins nor ends with a literal character
/// is refused, however it is spelled. `"[!~]*"` read three nodes' keys.
#[test]
fn secrets_patterns_are_pinned_by_meaning_not_spelling() {
    let rule = |nodes: &str, clusters: &str| {
        format!("[[principal]]\nname = \"p\"\nuri-san = [\"x\"]\n[[principal.allow]]\nnodes = [{nodes:?}]\nclusters = [{clusters:?}]\ntypes = [\"secrets\"]\n")
    };
    for open in ["[!~]*", "*[!~]", "[[:alnum:]]*", "*edge*", "?*?", "[a-z]*"] {
        for (text, half) in [
            (rule(open, "edge"), "nodes"),
            (rule("edge-1", open), "clusters"),
        ] {
            let err = Policy::parse(&text).unwrap_err();
            assert!(
                err.contains(&format!("grants secrets with {half} = [{open:?}]")),
                "{text}\n=> {err}"
            );
        }
        // The same pattern for other types is the operator's to write.
        let other = rule(open, open).replace("\"secrets\"", "\"clusters\"");
        Policy::parse(&other).unwrap();
    }
    for pinned in ["edge-*", "*-edge", "edge-[0-9]"] {
        Policy::parse(&rule(pinned, pinned)).unwrap();
    }
}

/// CSDS is asked by node id, but its answer names
/// each node's cluster too: an entry is the caller's only if a rule allows
/// both (edge-2 of cluster payments is not edge-2 of cluster edge).
#[test]
fn csds_answers_are_bound_by_id_and_cluster() {
    let p = Policy::parse(&format!(
        "[[principal]]\nname = \"ops\"\ntoken-sha256 = [\"{}\"]\ncsds = true\n[[principal.allow]]\nnodes = [\"edge-*\"]\nclusters = [\"edge\"]\ntypes = [\"clusters\"]\n",
        hex_sha256("t")
    ))
    .unwrap();
    assert!(p.allows_csds(0, None, "edge-2"), "asked by id");
    assert!(p.allows_csds_answer(0, None, "edge-2", "edge"));
    assert!(!p.allows_csds_answer(0, None, "edge-2", "payments"));
    assert!(!p.allows_csds_answer(0, None, "core-1", "edge"));
}

/// An extra type is granted by its REST name like Envoy's own, and a rule
/// naming no types grants it too (it holds no secrets).
#[test]
fn extra_types_are_granted_by_name() {
    let things = ResourceType::register(&crate::xds::extra_types::Definition {
        name: "policy-things",
        type_url: "type.googleapis.com/acme.policy.v1.Thing",
        service: None,
        stem: None,
        complete_state: true,
        wildcard_when_unnamed: true,
        name_fields: &[1],
    })
    .unwrap();
    let p = Policy::parse(
        r#"
[[principal]]
name = "tools"
dns-san = ["tools.example"]
[[principal.allow]]
nodes = ["*"]
clusters = ["*"]
types = ["policy-things"]

[[principal]]
name = "all"
dns-san = ["all.example"]
[[principal.allow]]
nodes = ["*"]
clusters = ["*"]
"#,
    )
    .unwrap();
    assert!(p.allows(0, None, things, "n", "c"));
    assert!(
        !p.allows(0, None, ResourceType::Clusters, "n", "c"),
        "only the type named"
    );
    assert!(
        p.allows(1, None, things, "n", "c"),
        "no types named: every type but secrets"
    );
}
