use super::*;
use crate::cache::Intake;
use crate::xds::Codec;

fn state(intake: &Intake, version: &str, clusters: &[(&str, &str)]) -> Arc<TypeState> {
    Arc::new(crate::cache::test_states::clusters(
        intake,
        version,
        &format!("n{version}"),
        clusters,
    ))
}

fn upstream_versions(history: &ConfigHistory, node: &str) -> Vec<String> {
    history
        .timelines(node, None, ResourceType::Clusters)
        .iter()
        .flat_map(|t| t.events.iter().map(|e| e.upstream_version.clone()))
        .collect()
}

/// What one version of a cluster named `only` costs, measured in an
/// unbounded store (a long name makes the resource outweigh the
/// bookkeeping by far).
fn one_version(intake: &Intake, only: &str) -> u64 {
    let probe = ConfigHistory::default();
    probe
        .recorder("p", "p", "c")
        .published(&state(intake, "0", &[(only, "9s")]));
    probe.held_bytes().0
}

#[test]
fn lists_each_version_with_its_changes_and_each_nack() {
    let intake = Intake::new(Codec::embedded());
    let history = ConfigHistory::default();
    let recorder = history.recorder("identity-a", "a", "c");
    recorder.published(&state(&intake, "1", &[("x", "1s"), ("y", "1s")]));
    recorder.nacked(ResourceType::Clusters, "2", "n2", "cluster y: bad");
    recorder.published(&state(
        &intake,
        "3",
        &[("x", "1s"), ("y", "2s"), ("z", "1s")],
    ));
    recorder.published(&state(&intake, "4", &[("y", "2s")]));

    let timelines = history.timelines("a", None, ResourceType::Clusters);
    assert_eq!(timelines.len(), 1);
    assert_eq!(timelines[0].cluster, "c");
    let events = &timelines[0].events;
    let kinds: Vec<EventKind> = events.iter().map(|e| e.event).collect();
    use EventKind::{Nack, Version};
    assert_eq!(kinds, [Version, Nack, Version, Version]);
    assert_eq!(
        events[0].added.as_deref(),
        Some(&["x".into(), "y".into()][..])
    );
    assert_eq!(events[0].since, None, "the first held: all added");
    assert_eq!(events[1].error_detail.as_deref(), Some("cluster y: bad"));
    assert_eq!(
        (
            events[1].upstream_version.as_str(),
            events[1].nonce.as_str()
        ),
        ("2", "n2")
    );
    assert_eq!(events[2].added.as_deref(), Some(&["z".into()][..]));
    assert_eq!(events[2].modified.as_deref(), Some(&["y".into()][..]));
    assert_eq!(events[2].removed.as_deref(), Some(&[][..]));
    assert_eq!(
        events[2].since, events[0].version,
        "compared with the last version"
    );
    assert_eq!(
        events[3].removed.as_deref(),
        Some(&["x".into(), "z".into()][..])
    );
    assert_eq!(events[3].modified.as_deref(), Some(&[][..]));
    let version = events[2].version.clone().unwrap();
    assert!(version.starts_with("3~"), "{version}");

    // A version is found by the gateway's version or the upstream's.
    let held = history
        .version("a", None, ResourceType::Clusters, &version)
        .unwrap();
    assert_eq!(held.state.version, "3");
    let by_upstream = history.version("a", Some("c"), ResourceType::Clusters, "4");
    assert_eq!(by_upstream.unwrap().event.version, events[3].version);
    assert!(history
        .version("a", Some("other"), ResourceType::Clusters, "4")
        .is_none());
    assert!(history
        .version("a", None, ResourceType::Listeners, "4")
        .is_none());
    assert!(history
        .version("b", None, ResourceType::Clusters, "4")
        .is_none());
    // Seqs rise.
    assert!(events.windows(2).all(|w| w[0].seq < w[1].seq));
}

#[test]
fn a_resource_shared_by_versions_is_counted_once() {
    let intake = Intake::new(Codec::embedded());
    let history = ConfigHistory::default();
    let recorder = history.recorder("identity-a", "a", "c");
    let long = "x".repeat(4000);
    let one = state(&intake, "1", &[(&long, "1s")]);
    recorder.published(&one);
    let after_one = history.held_bytes().0;
    let resource = resource_bytes(&one.resources[&long]);
    assert!(resource > 8000, "its JSON, payload and name: {resource}");
    // The same resource (the intake's memo gives the same Arc) in a
    // second version: only the second event's own bytes are added.
    let two = state(&intake, "2", &[(&long, "1s")]);
    assert!(Arc::ptr_eq(&one.resources[&long], &two.resources[&long]));
    recorder.published(&two);
    let after_two = history.held_bytes().0;
    assert!(
        after_two - after_one < resource / 2,
        "{after_one} {after_two} {resource}"
    );
    // A changed resource costs its bytes.
    let three = state(&intake, "3", &[(&long, "3s")]);
    recorder.published(&three);
    let after_three = history.held_bytes().0;
    assert!(
        after_three - after_two > resource_bytes(&three.resources[&long]),
        "{after_two} {after_three}"
    );
}

#[test]
fn the_bound_evicts_the_oldest_events_of_the_whole_store_first() {
    let intake = Intake::new(Codec::embedded());
    // Bound a store to about three and a half versions.
    let only = "o".repeat(4000);
    let only = only.as_str();
    let one = one_version(&intake, only);
    let history = ConfigHistory::with_max_bytes(one * 3 + one / 2);
    let (a, b) = (
        history.recorder("identity-a", "a", "c"),
        history.recorder("identity-b", "b", "c"),
    );
    // Interleaved: a1 b1 a2 b2 a3 b3 (each version holds its own resource).
    for i in 1..=3 {
        let (ta, tb) = (format!("{i}s"), format!("{}s", i + 10));
        a.published(&state(&intake, &format!("a{i}"), &[(only, &ta)]));
        b.published(&state(&intake, &format!("b{i}"), &[(only, &tb)]));
        let (held, max) = history.held_bytes();
        assert!(held <= max, "{held} > {max}");
    }
    // The oldest three went, whichever node they were of.
    assert_eq!(upstream_versions(&history, "a"), ["a3"]);
    assert_eq!(upstream_versions(&history, "b"), ["b2", "b3"]);
    // b2 was compared with b1 when it arrived: the record stays as it was.
    let b2 = &history.timelines("b", None, ResourceType::Clusters)[0].events[0];
    assert_eq!(b2.modified.as_deref(), Some(&[only.to_owned()][..]));

    // Evicting everything gives every byte back: the count is exact.
    let none = ConfigHistory::with_max_bytes(0);
    let r = none.recorder("identity-a", "a", "c");
    r.published(&state(&intake, "1", &[("x", "1s")]));
    r.nacked(ResourceType::Clusters, "2", "n", "bad");
    assert_eq!(none.held_bytes().0, 0);
    assert!(none.timelines("a", None, ResourceType::Clusters).is_empty());
    let all = ConfigHistory::with_max_bytes(one * 100);
    let r = all.recorder("identity-a", "a", "c");
    for i in 0..50 {
        r.published(&state(
            &intake,
            &i.to_string(),
            &[("x", &format!("{}s", i % 7 + 1))],
        ));
    }
    let before = all.held_bytes().0;
    assert!(before > 0);
    {
        let mut store = all.lock();
        while store.evict_oldest() {}
        assert!(
            store.resources.is_empty()
                && store.sets.is_empty()
                && store.changes.is_empty()
                && store.timelines.is_empty()
        );
        assert_eq!(store.bytes, 0, "every byte counted in was counted out");
    }
}

#[test]
fn a_timeline_whose_events_were_all_evicted_starts_again() {
    let intake = Intake::new(Codec::embedded());
    let history = ConfigHistory::with_max_bytes(0);
    let r = history.recorder("identity-a", "a", "c");
    r.published(&state(&intake, "1", &[("x", "1s")]));
    let bigger = ConfigHistory::default();
    let r2 = bigger.recorder("identity-a", "a", "c");
    r2.published(&state(&intake, "2", &[("x", "2s")]));
    let t = bigger.timelines("a", None, ResourceType::Clusters);
    assert_eq!(t[0].events[0].added.as_deref(), Some(&["x".into()][..]));
    assert_eq!(t[0].identity, IdentityDigest::of("identity-a").short());
}

/// Under a policy of several principals, one
/// principal's churn evicts its own oldest events once it holds its share,
/// never another principal's, however much older theirs are; every byte
/// charged is given back.
#[test]
fn a_principal_past_its_share_evicts_its_own_events_first() {
    let intake = Intake::new(Codec::embedded());
    let only = "o".repeat(4000);
    let only = only.as_str();
    let one = one_version(&intake, only);
    // Room for ten versions; a principal may hold half of it.
    let history = ConfigHistory::with_max_bytes(one * 10).with_principal_share(50);
    let quiet = history
        .recorder("identity-q", "quiet", "c")
        .owned_by(Some("quiet-team"));
    for i in 1..=3 {
        quiet.published(&state(
            &intake,
            &format!("q{i}"),
            &[(only, &format!("{i}s"))],
        ));
    }
    // The flooding principal: 40 nodes, a version each.
    for n in 0..40 {
        history
            .recorder(&format!("identity-f{n}"), &format!("f{n}"), "c")
            .owned_by(Some("flooder"))
            .published(&state(
                &intake,
                &format!("f{n}"),
                &[(only, &format!("{}s", n + 100))],
            ));
        let (held, max) = history.held_bytes();
        assert!(held <= max, "{held} > {max}");
    }
    assert_eq!(upstream_versions(&history, "quiet"), ["q1", "q2", "q3"]);
    let flooded: Vec<String> = (0..40)
        .flat_map(|n| upstream_versions(&history, &format!("f{n}")))
        .collect();
    assert!(
        (3..=5).contains(&flooded.len()) && flooded.last().map(String::as_str) == Some("f39"),
        "the flooder keeps its newest, within its share: {flooded:?}"
    );
    {
        let store = history.lock();
        let flooder = store.owners.get("flooder").map_or(0, |o| o.bytes);
        assert!(flooder <= one * 5, "{flooder} > {}", one * 5);
    }
    // Without a principal, nothing is charged: the store's oldest go first.
    let open = ConfigHistory::with_max_bytes(one * 10).with_principal_share(50);
    for n in 0..12 {
        open.recorder(&format!("identity-{n}"), &format!("n{n}"), "c")
            .published(&state(
                &intake,
                &format!("v{n}"),
                &[(only, &format!("{}s", n + 1))],
            ));
    }
    assert!(upstream_versions(&open, "n0").is_empty());
    assert_eq!(upstream_versions(&open, "n11"), ["v11"]);
    assert!(open.lock().owners.is_empty());
    // Evicting everything gives every principal's bytes back.
    let mut store = history.lock();
    while store.evict_oldest() {}
    assert_eq!(store.bytes, 0);
    assert!(store.owners.is_empty() && store.timelines.is_empty());
}

impl Shares {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
