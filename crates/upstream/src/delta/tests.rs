//! Unit tests of delta mode's pure parts: digests, diffs, decoding and coverage.

use super::state::*;
use super::update::*;
use super::*;
use crate::cache::{Intake, Resource};
use crate::held::{digest, Edit, HeldResource, HeldSets, VERSION_HEX_DIGITS};
use crate::xds::dynamic_parameters::Parameters;
use envoy_types::pb::envoy::service::discovery::v3::{Resource as DeltaResource, ResourceName};
use envoy_types::pb::google::protobuf::Any;
use std::sync::Arc;
use std::time::Duration;

const KIND: ResourceType = ResourceType::Endpoints;

fn cov(wildcard: bool, names: &[&str]) -> Coverage {
    Coverage {
        wildcard,
        names: names.iter().map(|n| n.to_string()).collect(),
    }
}

fn strings(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

fn resource(name: &str, content: u8) -> Arc<Resource> {
    resource_of(KIND, name, &[], content)
}

fn resource_of(kind: ResourceType, name: &str, aliases: &[&str], content: u8) -> Arc<Resource> {
    Arc::new(Resource {
        kind,
        name: name.to_owned(),
        aliases: strings(aliases),
        digest: [content; 32],
        payload: Default::default(),
        json: Default::default(),
        opaque: Default::default(),
        holds_keys: false,
        variant: None,
    })
}

/// Nothing known yet, with held sets of its own.
fn tracked() -> Tracked {
    Tracked::new(Arc::new(HeldSets::new(Arc::default())))
}

fn held(name: &str, version: &str) -> (String, HeldResource) {
    (
        name.to_owned(),
        HeldResource {
            version: version.to_owned(),
            resource: resource(name, 1),
        },
    )
}

#[test]
fn digest_is_deterministic_and_order_free() {
    let a: BTreeMap<String, HeldResource> = [held("a", "1"), held("b", "2")].into_iter().collect();
    let b: Vec<(String, HeldResource)> = vec![held("b", "2"), held("a", "1")];
    let d = digest(&a);
    assert_eq!(d.len(), VERSION_HEX_DIGITS);
    assert!(d.bytes().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(d, digest(b.iter().map(|(n, h)| (n, h))));
    assert_eq!(d, digest(&a), "stable across calls");
    // Any change of a version, a name, or the set changes it.
    let changed: BTreeMap<String, HeldResource> =
        [held("a", "1"), held("b", "3")].into_iter().collect();
    assert_ne!(d, digest(&changed));
    let fewer: BTreeMap<String, HeldResource> = [held("a", "1")].into_iter().collect();
    assert_ne!(d, digest(&fewer));
    // No ambiguity from concatenation.
    let x: BTreeMap<String, HeldResource> = [held("ab", "c")].into_iter().collect();
    let y: BTreeMap<String, HeldResource> = [held("a", "bc")].into_iter().collect();
    assert_ne!(digest(&x), digest(&y));
    // Empty versions are digested by content.
    let mut e1: BTreeMap<String, HeldResource> = [held("a", "")].into_iter().collect();
    let before = digest(&e1);
    e1.get_mut("a").unwrap().resource = resource("a", 2);
    assert_ne!(before, digest(&e1));
    assert_eq!(digest(&BTreeMap::new()), digest(&BTreeMap::new()));
}

#[test]
fn subscription_diffs() {
    let none = Coverage::default();
    assert_eq!(
        diff(&none, &cov(false, &["a", "b"])),
        Diff {
            subscribe: strings(&["a", "b"]),
            unsubscribe: vec![]
        }
    );
    assert_eq!(
        diff(&none, &cov(true, &["a"])),
        Diff {
            subscribe: strings(&["*", "a"]),
            unsubscribe: vec![]
        }
    );
    assert_eq!(
        diff(&cov(false, &["a", "b"]), &cov(false, &["b", "c"])),
        Diff {
            subscribe: strings(&["c"]),
            unsubscribe: strings(&["a"])
        }
    );
    assert_eq!(
        diff(&cov(true, &["a"]), &cov(false, &["a"])),
        Diff {
            subscribe: vec![],
            unsubscribe: strings(&["*"])
        }
    );
    // No interest: everything goes.
    assert_eq!(
        diff(&cov(true, &["a", "b"]), &none),
        Diff {
            subscribe: vec![],
            unsubscribe: strings(&["*", "a", "b"])
        }
    );
    assert!(diff(&cov(true, &["a"]), &cov(true, &["a"])).is_empty());
}

fn wire_after(subs: &[Coverage], now: Instant) -> Wire {
    let mut wire = Wire::default();
    for want in subs {
        let sent = wire.sent.clone().unwrap_or_default();
        wire.record(&sent, want, now);
    }
    wire
}

fn update(added: &[(&str, &str)], name_only: &[(&str, &str)], removed: &[&str]) -> Update {
    Update {
        added: added.iter().map(|(n, v)| held(n, v)).collect(),
        name_only: name_only
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
        removed: strings(removed),
        ttls: Vec::new(),
        errors: Vec::new(),
        uncacheable: Default::default(),
    }
}

#[test]
fn first_response_answers_the_first_subscription() {
    let now = Instant::now();
    let mut t = tracked();
    let mut wire = wire_after(&[cov(false, &["a", "missing"])], now);
    t.apply(KIND, &mut wire, update(&[("a", "1")], &[], &[]), now);
    assert_eq!(t.coverage(), cov(false, &["a", "missing"]));
    assert!(wire.pending.is_empty());
    // A later name is answered only by data or an absence signal.
    let sent = wire.sent.clone().unwrap();
    wire.record(&sent, &cov(false, &["a", "b", "c", "missing"]), now);
    t.apply(KIND, &mut wire, update(&[("a", "2")], &[], &[]), now);
    assert_eq!(t.coverage(), cov(false, &["a", "missing"]));
    t.apply(
        KIND,
        &mut wire,
        update(&[("b", "1")], &[("c", "")], &[]),
        now,
    );
    assert_eq!(t.coverage(), cov(false, &["a", "b", "c", "missing"]));
    assert_eq!(t.held.keys().collect::<Vec<_>>(), ["a", "b"]);
}

#[test]
fn wildcard_coverage_needs_proof() {
    let now = Instant::now();
    // Wildcard in the first subscription: the first response proves it.
    let mut t = tracked();
    let mut wire = wire_after(&[cov(true, &[])], now);
    t.apply(KIND, &mut wire, update(&[], &[], &[]), now);
    assert!(t.coverage().wildcard);

    // Wildcard added later: a response with only known names proves nothing.
    let mut t = tracked();
    let mut wire = wire_after(&[cov(false, &["a"]), cov(true, &["a"])], now);
    t.apply(KIND, &mut wire, update(&[("a", "1")], &[], &[]), now);
    assert!(!t.coverage().wildcard);
    assert!(wire.pending_wildcard.is_some());
    // A name never subscribed explicitly does.
    t.apply(KIND, &mut wire, update(&[("x", "1")], &[], &[]), now);
    assert!(t.coverage().wildcard);
    assert!(wire.pending_wildcard.is_none());

    // Not after the wildcard was dropped on the same stream.
    let mut t = tracked();
    let mut wire = wire_after(
        &[cov(false, &["a"]), cov(true, &["a"]), cov(false, &["a"])],
        now,
    );
    t.apply(KIND, &mut wire, update(&[("a", "1")], &[], &[]), now);
    let sent = wire.sent.clone().unwrap();
    wire.record(&sent, &cov(true, &["a"]), now);
    t.apply(KIND, &mut wire, update(&[("y", "1")], &[], &[]), now);
    assert!(!t.coverage().wildcard);
}

#[test]
fn removals_heartbeats_and_absence() {
    let now = Instant::now();
    let mut t = tracked();
    let mut wire = wire_after(&[cov(true, &["a"])], now);
    t.apply(
        KIND,
        &mut wire,
        update(&[("a", "1"), ("b", "1")], &[], &[]),
        now,
    );
    let v1 = t.held.version.clone();
    // A heartbeat (name, same version, no payload) keeps the resource.
    t.apply(KIND, &mut wire, update(&[], &[("a", "1")], &[]), now);
    assert!(t.held.contains_key("a"));
    assert_eq!(t.held.version, v1);
    // Name-only at another version: it does not exist any more.
    t.apply(KIND, &mut wire, update(&[], &[("a", "2")], &[]), now);
    assert!(!t.held.contains_key("a"));
    // removed_resources.
    t.apply(KIND, &mut wire, update(&[], &[], &["b"]), now);
    assert!(t.held.is_empty());
    assert_ne!(t.held.version, v1);
    assert_eq!(t.coverage(), cov(true, &["a"]));
}

#[test]
fn unwanted_resources_are_not_held_and_narrowing_forgets() {
    let now = Instant::now();
    let mut t = tracked();
    let mut wire = wire_after(&[cov(false, &["a", "b"])], now);
    t.apply(
        KIND,
        &mut wire,
        update(&[("a", "1"), ("zz", "1")], &[], &[]),
        now,
    );
    assert_eq!(t.held.keys().collect::<Vec<_>>(), ["a"]);
    assert!(t.narrow(KIND, &cov(false, &["b"])));
    assert!(t.held.is_empty());
    assert_eq!(t.coverage(), cov(false, &["b"]));
    assert!(!t.narrow(KIND, &cov(false, &["b"])));
    assert!(t.narrow(KIND, &Coverage::default()));
    assert_eq!(t.coverage(), Coverage::default());
}

#[test]
fn unanswered_subscriptions_settle_only_on_an_answering_stream() {
    let start = Instant::now();
    let mut t = tracked();
    let mut wire = wire_after(&[cov(false, &["a"])], start);
    // Nothing answered yet on the stream: never settles.
    assert_eq!(wire.next_settle(), None);
    assert!(!t.settle(&mut wire, start + SETTLE * 10));
    t.apply(KIND, &mut wire, update(&[("a", "1")], &[], &[]), start);
    let later = start + Duration::from_millis(100);
    let sent = wire.sent.clone().unwrap();
    wire.record(&sent, &cov(true, &["a", "ghost"]), later);
    assert_eq!(wire.next_settle(), Some(later + SETTLE));
    assert!(!t.settle(&mut wire, later + SETTLE / 2));
    assert!(t.settle(&mut wire, later + SETTLE));
    assert_eq!(t.coverage(), cov(true, &["a", "ghost"]));
    assert_eq!(wire.next_settle(), None);
}

fn any_cla(name: &str) -> Any {
    // ClusterLoadAssignment { cluster_name (1) = name }.
    let mut value = vec![0x0a, name.len() as u8];
    value.extend_from_slice(name.as_bytes());
    Any {
        type_url: ResourceType::Endpoints.type_url().to_owned(),
        value,
    }
}

/// Of the variants of a name, the one whose constraints match the
/// session's parameters is kept; the same variant twice is a duplicate; a
/// removal naming a variant that does not match is not this session's.
#[test]
fn variants_are_chosen_by_the_session_parameters() {
    use envoy_types::pb::envoy::service::discovery::v3::dynamic_parameter_constraints::{
        single_constraint::ConstraintType, SingleConstraint, Type,
    };
    use envoy_types::pb::envoy::service::discovery::v3::DynamicParameterConstraints;
    let intake = Intake::new(crate::xds::Codec::embedded());
    let kind = ResourceType::Endpoints;
    let env = |value: &str| DynamicParameterConstraints {
        r#type: Some(Type::Constraint(SingleConstraint {
            key: "env".into(),
            constraint_type: Some(ConstraintType::Value(value.into())),
        })),
    };
    let variant = |value: &str| DeltaResource {
        resource_name: Some(ResourceName {
            name: "a".into(),
            dynamic_parameter_constraints: Some(env(value)),
        }),
        version: value.into(),
        resource: Some(any_cla("a")),
        ..Default::default()
    };
    let response = |resources, removed: Vec<ResourceName>| DeltaDiscoveryResponse {
        resources,
        removed_resource_names: removed,
        type_url: kind.type_url().into(),
        nonce: "n1".into(),
        ..Default::default()
    };
    let prod: Parameters = [("env".to_owned(), "prod".to_owned())].into();
    let both = response(vec![variant("test"), variant("prod")], Vec::new());
    let update = decode_update(&intake, kind, both.clone(), &prod).unwrap();
    assert_eq!(update.added.len(), 1);
    let kept = &update.added[0].1;
    assert_eq!(kept.version, "prod");
    let json: serde_json::Value = serde_json::from_slice(&kept.resource.json).unwrap();
    assert_eq!(
        json["resourceName"]["dynamicParameterConstraints"]["constraint"]["value"],
        "prod"
    );
    // Without parameters, neither matches.
    let update = decode_update(&intake, kind, both, &Parameters::new()).unwrap();
    assert!(update.added.is_empty());

    let twice = response(vec![variant("prod"), variant("prod")], Vec::new());
    let err = decode_update(&intake, kind, twice, &prod).unwrap_err();
    assert!(err.to_string().contains("twice"), "{err}");

    let removal = |value: &str| ResourceName {
        name: "a".into(),
        dynamic_parameter_constraints: Some(env(value)),
    };
    let other = response(Vec::new(), vec![removal("test")]);
    assert!(decode_update(&intake, kind, other, &prod)
        .unwrap()
        .removed
        .is_empty());
    let own = response(Vec::new(), vec![removal("prod")]);
    assert_eq!(
        decode_update(&intake, kind, own, &prod).unwrap().removed,
        ["a"]
    );
}

#[test]
fn responses_are_decoded_and_checked_as_a_whole() {
    let intake = Intake::new(crate::xds::Codec::embedded());
    let kind = ResourceType::Endpoints;
    let with = |name: &str, version: &str, any: Option<Any>| DeltaResource {
        name: name.to_owned(),
        version: version.to_owned(),
        resource: any,
        ..Default::default()
    };
    let ok = DeltaDiscoveryResponse {
        resources: vec![with("a", "1", Some(any_cla("a"))), with("gone", "", None)],
        removed_resources: vec!["b".into()],
        removed_resource_names: vec![ResourceName {
            name: "b".into(),
            ..Default::default()
        }],
        type_url: kind.type_url().into(),
        nonce: "n1".into(),
        ..Default::default()
    };
    let update = decode_update(&intake, kind, ok.clone(), &Parameters::new()).unwrap();
    assert_eq!(update.added.len(), 1);
    assert_eq!(update.added[0].0, "a");
    assert_eq!(update.added[0].1.version, "1");
    assert_eq!(update.name_only, [("gone".to_string(), String::new())]);
    assert_eq!(update.removed, ["b"]);

    let mut bad = ok.clone();
    bad.resources.push(with("c", "1", Some(any_cla("not-c"))));
    assert!(decode_update(&intake, kind, bad, &Parameters::new())
        .unwrap_err()
        .to_string()
        .contains("not-c"));
    let mut bad = ok.clone();
    bad.resources.push(with(
        "c",
        "1",
        Some(Any {
            type_url: kind.type_url().into(),
            value: vec![0x0a, 0xff, 0xff, 0xff],
        }),
    ));
    assert!(decode_update(&intake, kind, bad, &Parameters::new()).is_err());
    let mut bad = ok.clone();
    bad.removed_resources.push("a".into());
    assert!(decode_update(&intake, kind, bad, &Parameters::new())
        .unwrap_err()
        .to_string()
        .contains("both"));
    let mut bad = ok;
    bad.resources.push(with("a", "2", Some(any_cla("a"))));
    assert!(decode_update(&intake, kind, bad, &Parameters::new())
        .unwrap_err()
        .to_string()
        .contains("twice"));
}

#[test]
fn a_glob_collection_holds_its_members_and_is_answered_by_them() {
    let now = Instant::now();
    let glob = "xdstp://cp/T/prod/*";
    let (member, stranger) = ("xdstp://cp/T/prod/a", "xdstp://cp/T/other/b");
    let mut t = tracked();
    let mut wire = wire_after(&[cov(false, &["x"])], now);
    t.apply(KIND, &mut wire, update(&[("x", "1")], &[], &[]), now);
    let sent = wire.sent.clone().unwrap();
    wire.record(&sent, &cov(false, &["x", glob]), now);
    t.apply(
        KIND,
        &mut wire,
        update(&[(member, "1"), (stranger, "1")], &[], &[]),
        now,
    );
    assert_eq!(t.held.keys().collect::<Vec<_>>(), ["x", member]);
    assert_eq!(t.coverage(), cov(false, &["x", glob]));
    // Dropping "x" keeps the members of the glob still wanted.
    assert!(t.narrow(KIND, &cov(false, &[glob])));
    assert_eq!(t.held.keys().collect::<Vec<_>>(), [member]);
}

#[test]
fn a_vhds_namespace_holds_its_virtual_hosts_and_an_alias_its_resolution() {
    let now = Instant::now();
    let vh = ResourceType::VirtualHosts;
    let host = |name: &str, aliases: &[&str]| {
        (
            name.to_owned(),
            HeldResource {
                version: "1".into(),
                resource: resource_of(vh, name, aliases, 1),
            },
        )
    };
    let mut t = tracked();
    let mut wire = wire_after(&[cov(false, &["rc"])], now);
    let first = Update {
        added: vec![host("rc/a", &[]), host("other/b", &[])],
        ..Update::default()
    };
    t.apply(vh, &mut wire, first, now);
    assert_eq!(t.held.keys().collect::<Vec<_>>(), ["rc/a"]);
    assert_eq!(t.coverage(), cov(false, &["rc"]));
    // An on-demand alias is answered by the virtual host it resolves to.
    let sent = wire.sent.clone().unwrap();
    wire.record(&sent, &cov(false, &["rc", "rc2/foo.example"]), now);
    let resolved = Update {
        added: vec![host("rc2/vh", &["rc2/foo.example"])],
        ..Update::default()
    };
    t.apply(vh, &mut wire, resolved, now);
    assert_eq!(t.coverage(), cov(false, &["rc", "rc2/foo.example"]));
    assert!(wire.pending.is_empty());
    // Dropping the namespace keeps what the alias still holds.
    assert!(t.narrow(vh, &cov(false, &["rc2/foo.example"])));
    assert_eq!(t.held.keys().collect::<Vec<_>>(), ["rc2/vh"]);
}

#[test]
fn delta_only_resources_are_named_by_their_wrapper_and_checked() {
    let intake = Intake::new(crate::xds::Codec::embedded());
    let kind = ResourceType::LbEndpoints;
    let endpoint = |port: u32| {
        Any {
        type_url: kind.type_url().into(),
        value: intake
            .codec()
            .parse_any(
                format!(
                    r#"{{"@type":"{}","endpoint":{{"address":{{"socket_address":{{"address":"127.0.0.1","port_value":{port}}}}}}}}}"#,
                    kind.type_url()
                )
                .as_bytes(),
            )
            .unwrap()
            .value,
    }
    };
    let with = |name: &str, any: Any| DeltaResource {
        name: name.to_owned(),
        version: "1".into(),
        resource: Some(any),
        ..Default::default()
    };
    let response = |resources| DeltaDiscoveryResponse {
        resources,
        type_url: kind.type_url().into(),
        nonce: "n1".into(),
        ..Default::default()
    };
    // The same body under two names: two resources, two digests.
    let twins = response(vec![with("x/a", endpoint(80)), with("x/b", endpoint(80))]);
    let update = decode_update(&intake, kind, twins, &Parameters::new()).unwrap();
    let (a, b) = (&update.added[0].1.resource, &update.added[1].1.resource);
    assert_eq!((a.name.as_str(), b.name.as_str()), ("x/a", "x/b"));
    assert_ne!(a.digest, b.digest);
    let json: serde_json::Value = serde_json::from_slice(&a.json).unwrap();
    assert_eq!(json["@type"], crate::cache::RESOURCE_WRAPPER);
    assert_eq!(json["name"], "x/a");
    assert_eq!(json["resource"]["@type"], kind.type_url());

    // A nameless one cannot be told apart: the response is rejected.
    let nameless = response(vec![with("", endpoint(80))]);
    let err = decode_update(&intake, kind, nameless, &Parameters::new()).unwrap_err();
    assert!(err.to_string().contains("has no name"), "{err}");
    // Envoy's rules hold for them too (port_value <= 65535).
    let invalid = response(vec![with("x/c", endpoint(70_000))]);
    assert!(decode_update(&intake, kind, invalid, &Parameters::new())
        .unwrap_err()
        .breaks_rules());
}

/// After a failover (or back), the next upstream is told of no resource
/// versions the last one issued (a reconnect to the same one is), so that
/// it sends all it has; its first answer then replaces what is held.
#[tokio::test]
async fn a_new_upstream_is_told_no_versions_of_the_last_one() {
    let (session, _commands) = crate::store::Publisher::new(crate::store::SessionNode::default());
    session
        .subscribe(KIND, &crate::cache::Names::Wildcard, 10)
        .unwrap();
    let namespace = crate::store::Namespace::new(BTreeMap::new(), "test", "test");
    let ctx = crate::connection::unused_context();
    let mut delta = Delta::new(ctx, session, namespace);
    let (name, kept) = held("a", "7");
    let t = super::tracked(&mut delta.tracked, &delta.ctx, KIND);
    let mut edit = Edit::default();
    edit.put(&t.held, name, kept);
    t.edit(KIND, edit);
    delta.reset_stream();
    let resumed = delta.subscribe(KIND).unwrap();
    assert_eq!(
        resumed
            .request()
            .initial_resource_versions
            .get("a")
            .map(String::as_str),
        Some("7")
    );
    delta.switch_upstream();
    delta.reset_stream();
    let fresh = delta.subscribe(KIND).unwrap();
    assert!(
        fresh.request().initial_resource_versions.is_empty(),
        "{fresh:?}"
    );
    assert!(
        delta.replacing.contains(&KIND),
        "the next answer replaces what is held"
    );
}

/// The published version is what clients present back (in their served
/// versions): the digest's bytes are pinned to the (name, `v:`version or
/// `sha256:`content) pairs it always hashed, so a new build serves the same
/// versions as the one it replaces.
#[test]
fn digest_hashes_the_same_bytes_as_ever() {
    use sha2::{Digest as _, Sha256};
    let held: BTreeMap<String, HeldResource> = [held("a", "1"), held("b", ""), held("c", "7")]
        .into_iter()
        .collect();
    let mut hasher = Sha256::new();
    for (name, h) in &held {
        let version = if h.version.is_empty() {
            format!("sha256:{}", hex::encode(h.resource.digest))
        } else {
            format!("v:{}", h.version)
        };
        hasher.update((name.len() as u64).to_be_bytes());
        hasher.update(name.as_bytes());
        hasher.update((version.len() as u64).to_be_bytes());
        hasher.update(version.as_bytes());
    }
    let mut expected = hex::encode(hasher.finalize());
    expected.truncate(VERSION_HEX_DIGITS);
    assert_eq!(digest(&held), expected);
}

/// `removed_resource_names` is read on its own, not only beside
/// `removed_resources` (discovery.proto: the `ResourceName` form of it).
#[test]
fn removed_resource_names_alone_remove() {
    let intake = Intake::new(crate::xds::Codec::embedded());
    let kind = ResourceType::Endpoints;
    let response = DeltaDiscoveryResponse {
        removed_resource_names: vec![
            ResourceName {
                name: "b".into(),
                ..Default::default()
            },
            ResourceName {
                name: "c".into(),
                ..Default::default()
            },
        ],
        type_url: kind.type_url().into(),
        nonce: "n1".into(),
        ..Default::default()
    };
    let update = decode_update(&intake, kind, response, &Parameters::new()).unwrap();
    assert!(update.added.is_empty());
    assert_eq!(update.removed, ["b", "c"]);
}

/// A spontaneous delta request (a subscription change) carries no nonce:
/// "response_nonce must be omitted"; an ACK carries the one it answers.
#[tokio::test]
async fn a_subscription_change_carries_no_nonce() {
    use crate::cache::Names;
    use crate::store::Publisher;
    let (session, _commands) = Publisher::new(crate::store::SessionNode::default());
    let names = |list: &[&str]| Names::from_request(list.iter().map(|n| n.to_string()).collect());
    session.subscribe(KIND, &names(&["a"]), 10).unwrap();
    let namespace = crate::store::Namespace::new(BTreeMap::new(), "test", "test");
    let ctx = crate::connection::unused_context();
    let mut delta = Delta::new(ctx, session.clone(), namespace);
    delta.reset_stream();
    let first = delta.subscribe(KIND).expect("the first request");
    assert!(first.request().response_nonce.is_empty(), "{first:?}");
    let response = DeltaDiscoveryResponse {
        resources: vec![DeltaResource {
            name: "a".into(),
            version: "1".into(),
            resource: Some(any_cla("a")),
            ..Default::default()
        }],
        type_url: KIND.type_url().into(),
        nonce: "n1".into(),
        ..Default::default()
    };
    let ack = delta.response(KIND, response).await.expect("an ACK");
    assert_eq!(ack.request().response_nonce, "n1", "{ack:?}");
    session.subscribe(KIND, &names(&["a", "b"]), 10).unwrap();
    let change = delta.subscribe(KIND).expect("the change");
    assert_eq!(
        change.request().resource_names_subscribe,
        ["b"],
        "{change:?}"
    );
    assert!(change.request().response_nonce.is_empty(), "{change:?}");
}

/// A wildcard and a specific name, the name unsubscribed: "the server must
/// send a response that includes the specific resource in either the
/// removed_resources field ... or in the resources field". While the
/// wildcard is wanted, unsubscribing the name drops nothing held: the
/// server's answer decides.
#[tokio::test]
async fn a_name_unsubscribed_under_a_wildcard_drops_nothing_held() {
    use crate::cache::Names;
    use crate::store::Publisher;
    use prost::Message as _;
    let kind = ResourceType::Clusters;
    let (session, _commands) = Publisher::new(crate::store::SessionNode::default());
    session.subscribe(kind, &Names::Wildcard, 10).unwrap();
    session
        .subscribe(kind, &Names::from_request(vec!["x".into()]), 10)
        .unwrap();
    let namespace = crate::store::Namespace::new(BTreeMap::new(), "test", "test");
    let ctx = crate::connection::unused_context();
    let mut delta = Delta::new(ctx, session.clone(), namespace);
    delta.reset_stream();
    let first = delta.subscribe(kind).expect("the first request");
    let mut asked = first.request().resource_names_subscribe.clone();
    asked.sort();
    assert_eq!(asked, ["*", "x"], "{first:?}");
    let cluster = |name: &str| Any {
        type_url: kind.type_url().into(),
        value: envoy_types::pb::envoy::config::cluster::v3::Cluster {
            name: name.into(),
            connect_timeout: Some(envoy_types::pb::google::protobuf::Duration {
                seconds: 1,
                nanos: 0,
            }),
            ..Default::default()
        }
        .encode_to_vec(),
    };
    let response = DeltaDiscoveryResponse {
        resources: ["a", "x"]
            .map(|name| DeltaResource {
                name: name.into(),
                version: "1".into(),
                resource: Some(cluster(name)),
                ..Default::default()
            })
            .to_vec(),
        type_url: kind.type_url().into(),
        nonce: "n1".into(),
        ..Default::default()
    };
    delta.response(kind, response).await.expect("an ACK");
    let held = |session: &Publisher| -> Vec<String> {
        session
            .state(kind)
            .map(|s| s.resources.keys().cloned().collect())
            .unwrap_or_default()
    };
    assert_eq!(held(&session), ["a", "x"]);
    // Only the wildcard is wanted now: x is unsubscribed, and still held.
    session.sweep_names(
        tokio::time::Instant::now() + Duration::from_secs(10),
        Duration::from_secs(5),
    );
    session.subscribe(kind, &Names::Wildcard, 10).unwrap();
    let change = delta.subscribe(kind).expect("the change");
    assert_eq!(
        change.request().resource_names_unsubscribe,
        ["x"],
        "{change:?}"
    );
    assert_eq!(
        held(&session),
        ["a", "x"],
        "nothing dropped before the server says"
    );
}
