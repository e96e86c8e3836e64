//! The 304 rule, served versions and body assembly.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::xds::Codec;
use crate::{Assembler, Intake};

impl Bodies {
    /// How many resources pieces are held (tests of sharing).
    fn shared_pieces(&self) -> u64 {
        self.shared.run_pending_tasks();
        self.shared.entry_count()
    }
}

fn intake() -> Intake {
    Intake::new(Codec::embedded())
}

fn assembler() -> Assembler {
    Assembler::new(Codec::embedded())
}

fn state(r: &Intake, version: &str, clusters: &[(&str, &str)]) -> TypeState {
    crate::test_states::clusters(r, version, "n1", clusters)
}

fn named(names: &[&str]) -> Names {
    Names::from_request(names.iter().map(|s| s.to_string()).collect())
}

fn body_version(answer: &Answer) -> String {
    match answer {
        Answer::Body { version, .. } => version.clone(),
        other => panic!("expected a body, got {other:?}"),
    }
}

#[test]
fn not_modified_only_for_the_digest_of_what_the_client_would_get() {
    let (r, asm) = (intake(), assembler());
    let s = state(&r, "v1", &[("a", "1s"), ("b", "1s")]);
    let wild = Names::Wildcard;
    let v = body_version(&s.answer(&asm, &wild, "", None).unwrap());
    assert_eq!(upstream_version(&v), "v1");
    assert!(selection_digest(&v).is_some(), "{v}");
    assert_eq!(
        s.answer(&asm, &wild, &v, None).unwrap(),
        Answer::NotModified { version: v.clone() }
    );
    // The upstream's version alone is not the served version.
    assert!(matches!(
        s.answer(&asm, &wild, "v1", None).unwrap(),
        Answer::Body { cached: true, .. }
    ));
    // An empty version never gets 304.
    assert!(matches!(
        s.answer(&asm, &wild, "", None).unwrap(),
        Answer::Body { .. }
    ));
    // The same version presented for other names is a body.
    let a = s.answer(&asm, &named(&["a"]), &v, None).unwrap();
    assert_ne!(body_version(&a), v);
    // A client adding a name that does not exist still gets a body.
    let va = body_version(&a);
    assert!(matches!(
        s.answer(&asm, &named(&["a", "zz"]), &va, None).unwrap(),
        Answer::Body { .. }
    ));
    // Rewritten config sources are another selection.
    let target = RestTarget {
        cluster_name: "xds".into(),
        refresh_delay: Duration::from_secs(1),
        request_timeout: Duration::from_secs(10),
    };
    assert!(matches!(
        s.answer(&asm, &wild, &v, Some(&target)).unwrap(),
        Answer::Body { .. }
    ));
}

#[test]
fn the_decision_needs_no_memory_of_what_was_served() {
    let (r, asm) = (intake(), assembler());
    let here = state(&r, "v1", &[("a", "1s"), ("b", "2s")]);
    let v = body_version(&here.answer(&asm, &Names::Wildcard, "", None).unwrap());
    // Another process (another replica) with the same content, even under
    // another upstream version, and with an empty memo: 304.
    let there = state(&r, "v9", &[("b", "2s"), ("a", "1s")]);
    let fresh = Assembler::with_body_capacity(Codec::embedded(), 0);
    assert!(matches!(
        there.answer(&fresh, &Names::Wildcard, &v, None).unwrap(),
        Answer::NotModified { .. }
    ));
    // Different content: a body.
    let changed = state(&r, "v1", &[("a", "1s"), ("b", "3s")]);
    assert!(matches!(
        changed.answer(&fresh, &Names::Wildcard, &v, None).unwrap(),
        Answer::Body { .. }
    ));
}

#[test]
fn every_name_set_gets_its_304_however_many_there_are() {
    let clusters: Vec<(String, &str)> = (0..600).map(|i| (format!("c{i}"), "1s")).collect();
    let refs: Vec<(&str, &str)> = clusters.iter().map(|(n, t)| (n.as_str(), *t)).collect();
    // A memo far too small for 600 bodies: eviction must not cost a 304.
    let (r, asm) = (
        intake(),
        Assembler::with_body_capacity(Codec::embedded(), 16 * 1024),
    );
    let s = state(&r, "v1", &refs);
    let versions: Vec<String> = clusters
        .iter()
        .map(|(n, _)| body_version(&s.answer(&asm, &named(&[n]), "", None).unwrap()))
        .collect();
    for ((name, _), version) in clusters.iter().zip(&versions) {
        let answer = s.answer(&asm, &named(&[name]), version, None).unwrap();
        assert!(matches!(answer, Answer::NotModified { .. }), "{name}");
    }
}

#[test]
fn one_cluster_changing_leaves_the_others_at_304() {
    let (r, asm) = (intake(), assembler());
    let before = state(&r, "v1", &[("a", "1s"), ("b", "1s")]);
    let after = state(&r, "v2", &[("a", "1s"), ("b", "5s")]);
    let va = body_version(&before.answer(&asm, &named(&["a"]), "", None).unwrap());
    let vb = body_version(&before.answer(&asm, &named(&["b"]), "", None).unwrap());
    assert!(matches!(
        after.answer(&asm, &named(&["a"]), &va, None).unwrap(),
        Answer::NotModified { .. }
    ));
    assert!(matches!(
        after.answer(&asm, &named(&["b"]), &vb, None).unwrap(),
        Answer::Body { .. }
    ));
}

#[test]
fn body_is_a_discovery_response_with_requested_names_in_order() {
    let (r, asm) = (intake(), assembler());
    let s = state(&r, "7", &[("b", "1s"), ("a", "1s"), ("c", "1s")]);
    let Answer::Body { json, version, .. } = s
        .answer(&asm, &named(&["c", "a", "missing"]), "", None)
        .unwrap()
    else {
        panic!("expected a body")
    };
    let v: serde_json::Value = serde_json::from_slice(&json.to_bytes()).unwrap();
    assert_eq!(v["versionInfo"], version.as_str());
    assert_eq!(v["typeUrl"], ResourceType::Clusters.type_url());
    let names: Vec<_> = v["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "c"]);
}

#[test]
fn version_parts() {
    assert_eq!(
        upstream_version("2024-01-01T00:00:00Z/4~0123456789ab"),
        "2024-01-01T00:00:00Z/4"
    );
    assert_eq!(selection_digest("v~0123456789ab"), Some("0123456789ab"));
    assert_eq!(upstream_version("plain"), "plain");
    assert_eq!(selection_digest("v~short"), None);
    assert_eq!(selection_digest("v~0123456789ax"), None);
    assert!(same_selection("a~0123456789ab", "b~0123456789ab"));
    assert!(!same_selection("", ""));
    assert_eq!(selection_digest("~0123456789ab"), Some("0123456789ab"));
    assert_eq!(selection_digest("0123456789ab"), None);
    assert_eq!(
        selection_digest("é~0123456789ab~0123456789ab"),
        Some("0123456789ab")
    );
}

proptest::proptest! {
    /// The digest read from the end is the one the search for the last
    /// separator finds, whatever a client
    /// presents: multi-byte characters, separators, hex or not.
    #[test]
    fn the_digest_read_from_the_end_is_the_searched_one(
        version in "[a-f0-9~é]{0,6}(~[0-9a-fA-Fxé~]{10,14})?"
    ) {
        let searched = version.rsplit_once(DIGEST_SEPARATOR).and_then(|(_, d)| {
            (d.len() == DIGEST_HEX && d.bytes().all(|b| b.is_ascii_hexdigit())).then_some(d)
        });
        proptest::prop_assert_eq!(selection_digest(&version), searched);
    }
}

#[test]
fn coverage_rules() {
    let c = Coverage {
        wildcard: false,
        names: ["a".to_string(), "b".to_string()].into(),
    };
    assert!(c.covers(&named(&["a"])));
    assert!(!c.covers(&named(&["a", "z"])));
    assert!(!c.covers(&Names::Wildcard));
    assert_eq!(named(&[]), Names::Wildcard);
    assert_eq!(named(&["*"]), Names::Wildcard);
}

#[test]
fn a_glob_collection_selects_its_members_and_digests_them() {
    const T: &str = "envoy.config.cluster.v3.Cluster";
    let (r, asm) = (intake(), assembler());
    let member = format!("xdstp://cp.example/{T}/prod/c1");
    let member2 = format!("xdstp://cp.example/{T}/prod/c2");
    let deeper = format!("xdstp://cp.example/{T}/prod/eu/c3");
    let glob = format!("xdstp://cp.example/{T}/prod/*");
    let s = state(
        &r,
        "v1",
        &[
            (&member, "1s"),
            (&member2, "1s"),
            (&deeper, "1s"),
            ("plain", "1s"),
        ],
    );
    let names = named(&[&glob, &member]);
    let selected: Vec<&str> = s.select(&names).map(|r| r.name.as_str()).collect();
    assert_eq!(selected, [member.as_str(), member2.as_str()]);
    // 304 for the same members; a body once a member changes.
    let v = body_version(&s.answer(&asm, &names, "", None).unwrap());
    assert!(matches!(
        s.answer(&asm, &names, &v, None).unwrap(),
        Answer::NotModified { .. }
    ));
    let changed = state(
        &r,
        "v2",
        &[(&member, "1s"), (&member2, "2s"), ("plain", "1s")],
    );
    assert!(matches!(
        changed.answer(&asm, &names, &v, None).unwrap(),
        Answer::Body { .. }
    ));
    // Another member's arrival changes the selection too.
    let more = state(
        &r,
        "v2",
        &[
            (&member, "1s"),
            (&member2, "1s"),
            (&format!("xdstp://cp.example/{T}/prod/c9"), "1s"),
        ],
    );
    let v_more = body_version(&more.answer(&asm, &names, "", None).unwrap());
    assert!(!same_selection(&v, &v_more));
}

#[test]
fn a_subscribed_glob_wants_its_members_only() {
    let glob = "xdstp://cp/T/prod/*";
    let c = Coverage {
        wildcard: false,
        names: [glob.to_owned(), "plain".to_owned()].into(),
    };
    assert!(c.wants("xdstp://cp/T/prod/a"));
    assert!(c.wants("plain"));
    assert!(!c.wants("xdstp://cp/T/other/a"));
    assert!(!c.wants("other"));
    // A glob is covered once it was answered, like any name.
    assert!(c.covers(&named(&[glob])));
}

/// An answer for thousands of names that match
/// nothing is a tiny body; the memo keeps the digest of its names, not the
/// names (it kept ~55 KB of names per answer here, weighing ~200 bytes).
#[test]
fn memoised_answers_do_not_hold_their_names() {
    let (r, asm) = (intake(), assembler());
    let s = state(&r, "v1", &[("a", "1s")]);
    let set = |i: usize| Names::from_request((0..1000).map(|n| format!("c{i}-{n}")).collect());
    for i in 0..60 {
        body_version(&s.answer(&asm, &set(i), "", None).unwrap());
    }
    let memo = &asm.bodies().answers;
    memo.run_pending_tasks();
    assert_eq!(memo.entry_count(), 60);
    let pieces = &asm.bodies().shared;
    let held: usize = memo.iter().map(|(_, a)| a.held_bytes()).sum::<usize>()
        + pieces.iter().map(|(_, p)| p.len()).sum::<usize>();
    assert!(held < 60 * 1024, "{held} bytes for 60 answers");
    // A hit is still confirmed by its names: the same set is a hit, a set
    // differing in one name is not.
    match s.answer(&asm, &set(7), "", None).unwrap() {
        Answer::Body { cached, .. } => assert!(cached),
        other => panic!("{other:?}"),
    }
    let mut other: Vec<String> = (0..1000).map(|n| format!("c7-{n}")).collect();
    other[999] = "c7-x".into();
    match s
        .answer(&asm, &Names::from_request(other), "", None)
        .unwrap()
    {
        Answer::Body { cached, .. } => assert!(!cached),
        other => panic!("{other:?}"),
    }
}

/// Every node identity holds a state of its own, but identities
/// holding the same resources (every one of them after the same push) share
/// one assembled resources piece; each body keeps its own version (and the
/// nonce that version makes, whatever the upstream's was).
#[test]
fn states_holding_the_same_resources_share_one_assembled_piece() {
    let (r, asm) = (intake(), assembler());
    let clusters: Vec<(String, &str)> = (0..50).map(|i| (format!("c{i}"), "1s")).collect();
    let refs: Vec<(&str, &str)> = clusters.iter().map(|(n, t)| (n.as_str(), *t)).collect();
    let mut pieces = Vec::new();
    for identity in 0..20 {
        let mut s = state(&r, "v1", &refs);
        s.nonce = format!("nonce-{identity}");
        let Answer::Body {
            json,
            cached,
            version,
        } = s.answer(&asm, &Names::Wildcard, "", None).unwrap()
        else {
            panic!("expected a body")
        };
        assert!(
            !cached,
            "a state of its own is assembled for the first time"
        );
        let v: serde_json::Value = serde_json::from_slice(&json.to_bytes()).unwrap();
        assert_eq!(
            v["nonce"],
            format!("{NONCE_PREFIX}{}", selection_digest(&version).unwrap())
        );
        assert_eq!(v["resources"].as_array().unwrap().len(), 50);
        pieces.push(json.resources().clone());
    }
    assert!(
        pieces.iter().all(|p| p.as_ptr() == pieces[0].as_ptr()),
        "one piece for all"
    );
    assert_eq!(asm.bodies().shared_pieces(), 1);
    // Other content, other names or another target: pieces of their own.
    let changed = state(&r, "v2", &[("c0", "2s")]);
    let target = crate::xds::rewrite::RestTarget {
        cluster_name: "xds".into(),
        refresh_delay: Duration::from_secs(1),
        request_timeout: Duration::from_secs(1),
    };
    let same = state(&r, "v1", &refs);
    for (s, names, target) in [
        (&changed, Names::Wildcard, None),
        (&same, named(&["c1"]), None),
        (&same, Names::Wildcard, Some(&target)),
    ] {
        let Answer::Body { json, .. } = s.answer(&asm, &names, "", target).unwrap() else {
            panic!("expected a body")
        };
        assert_ne!(json.resources().as_ptr(), pieces[0].as_ptr());
    }
    assert_eq!(asm.bodies().shared_pieces(), 4);
}

/// A memoised answer whose shared piece was evicted is assembled again,
/// whole and right (answers hold their piece weakly).
#[test]
fn an_answer_whose_piece_was_evicted_is_assembled_again() {
    let (r, asm) = (intake(), assembler());
    let s = state(&r, "v1", &[("a", "1s"), ("b", "2s")]);
    let first = s.answer(&asm, &Names::Wildcard, "", None).unwrap();
    assert!(matches!(
        s.answer(&asm, &Names::Wildcard, "", None).unwrap(),
        Answer::Body { cached: true, .. }
    ));
    let shared = &asm.bodies().shared;
    let pieces: Vec<_> = shared
        .iter()
        .map(|(k, piece)| (*k, Arc::downgrade(&piece)))
        .collect();
    assert_eq!(pieces.len(), 1);
    let (key, piece) = &pieces[0];
    shared.invalidate(key);
    // moka drops an invalidated value once its housekeeping has run, which
    // under a loaded machine can take more than one call.
    let mut rounds = 0;
    while piece.upgrade().is_some() {
        rounds += 1;
        assert!(rounds < 200, "the memo never let the evicted piece go");
        shared.run_pending_tasks();
        std::thread::sleep(Duration::from_millis(10));
    }
    let again = s.answer(&asm, &Names::Wildcard, "", None).unwrap();
    assert!(matches!(again, Answer::Body { cached: false, .. }));
    assert_eq!(again, first);
}

/// `*` is xDS's explicit wildcard: a list naming it and other names asks
/// for everything, not for the other names alone.
#[test]
fn a_list_naming_the_wildcard_asks_for_everything() {
    assert_eq!(named(&["*", "a"]), Names::Wildcard);
    assert_eq!(named(&["*"]), Names::Wildcard);
    assert_eq!(named(&[]), Names::Wildcard);
    assert!(matches!(named(&["a"]), Names::Named(set) if set.len() == 1));
}

/// One version, one body: the same resources at the same upstream version
/// under two upstream nonces (Istio pushes a version again with a new
/// nonce when a subscription changes) give byte-equal bodies, whose nonce
/// is the version's digest.
#[test]
fn a_body_is_a_function_of_what_it_serves_not_of_the_upstream_nonce() {
    let r = intake();
    let clusters = [("a", "1s"), ("b", "2s")];
    let first = crate::test_states::clusters(&r, "7", "nonce-1", &clusters);
    let again = crate::test_states::clusters(&r, "7", "nonce-2", &clusters);
    let body = |s: &TypeState| match s.answer(&assembler(), &Names::Wildcard, "", None).unwrap() {
        Answer::Body { json, version, .. } => (json.to_bytes(), version),
        other => panic!("expected a body, got {other:?}"),
    };
    let ((one, version), (two, _)) = (body(&first), body(&again));
    assert_eq!(one, two, "one version, one body");
    let v: serde_json::Value = serde_json::from_slice(&one).unwrap();
    assert_eq!(
        v["nonce"],
        format!("{NONCE_PREFIX}{}", selection_digest(&version).unwrap()),
        "{v}"
    );
}

/// C1: an answer holding a `do_not_cache` resource is assembled for its
/// request alone (never answered from the body memo, `cached: false` every
/// time), at the same version it would have otherwise (304 still works);
/// an answer without one is memoised as before.
#[test]
fn an_answer_holding_a_do_not_cache_resource_is_never_memoised() {
    let (r, asm) = (intake(), assembler());
    let s = state(&r, "v1", &[("a", "1s"), ("secret", "1s")]);
    let plain_version = body_version(&s.answer(&asm, &Names::Wildcard, "", None).unwrap());
    let s = s.with_uncacheable(Arc::new(["secret".to_owned()].into()));
    let target = crate::xds::rewrite::RestTarget {
        cluster_name: "gw".into(),
        refresh_delay: Duration::from_secs(1),
        request_timeout: Duration::from_secs(1),
    };
    for target in [None, Some(&target)] {
        for _ in 0..2 {
            let answer = s.answer(&asm, &Names::Wildcard, "", target).unwrap();
            assert!(
                matches!(answer, Answer::Body { cached: false, .. }),
                "{answer:?}"
            );
        }
    }
    let version = body_version(&s.answer(&asm, &Names::Wildcard, "", None).unwrap());
    assert_eq!(version, plain_version);
    assert_eq!(
        s.answer(&asm, &Names::Wildcard, &version, None).unwrap(),
        Answer::NotModified { version }
    );
    assert!(s.holds_uncacheable(&named(&["secret"])));
    assert!(!s.holds_uncacheable(&named(&["a"])));
    // Without it, the answer is memoised.
    s.answer(&asm, &named(&["a"]), "", None).unwrap();
    assert!(matches!(
        s.answer(&asm, &named(&["a"]), "", None).unwrap(),
        Answer::Body { cached: true, .. }
    ));
    // The history's copy leaves it out.
    let recorded = s.without_uncacheable();
    assert!(recorded.resources.get("secret").is_none());
    assert!(recorded.resources.get("a").is_some());
}
