//! How subscription changes reach the upstream: REST clients ask for EDS
//! names one poll at a time, and a burst of them (an Envoy starting with
//! many EDS clusters) must reach the control plane as a few requests, not
//! one per name: each request is answered with the whole named set, so one
//! request per name is O(names²) work on both sides. The control plane is
//! the in-process scripted fake, which records every request. The last
//! test checks that fake's delta server itself (what the identities bench
//! pushes through): it sends each stream exactly what changed.

#[path = "support/fake_ads.rs"]
mod fake_ads;
#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/process.rs"]
mod process;

use std::time::Duration;

use inproc::InProcess;
use process::http_get;
use xds_gateway::config::Config;
use xds_gateway::xds::{Codec, ResourceType};

const EDS: &str = ResourceType::Endpoints.type_url();
const CDS: &str = ResourceType::Clusters.type_url();
const CLUSTERS: usize = 200;

fn endpoints() -> Vec<envoy_types::pb::google::protobuf::Any> {
    (0..CLUSTERS)
        .map(|i| assignment(&format!("cluster-{i}"), 10_000 + i as u32))
        .collect()
}

/// One `ClusterLoadAssignment` named `name`, its endpoint's port telling
/// its versions apart.
fn assignment(name: &str, port: u32) -> envoy_types::pb::google::protobuf::Any {
    static CODEC: std::sync::OnceLock<Codec> = std::sync::OnceLock::new();
    let json = format!(
        r#"{{"@type":"{EDS}","cluster_name":"{name}","endpoints":[{{"lb_endpoints":[
        {{"endpoint":{{"address":{{"socket_address":{{"address":"127.0.0.1","port_value":{port}}}}}}}}}]}}]}}"#
    );
    let any = CODEC
        .get_or_init(Codec::embedded)
        .parse_any(json.as_bytes())
        .expect("fixture");
    envoy_types::pb::google::protobuf::Any {
        type_url: any.type_url,
        value: any.value,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_new_names_reaches_the_upstream_in_a_few_requests() {
    let upstream = fake_ads::FakeAds::start().await;
    upstream.set(EDS, "e1", endpoints());
    let gw = InProcess::start(Config {
        upstream: Some(upstream.url()),
        ..Config::default()
    })
    .await;
    let port = gw.rest_port;
    // Every cluster's first poll at once, as a starting Envoy sends them.
    let polls: Vec<_> = (0..CLUSTERS)
        .map(|i| {
            tokio::spawn(async move {
                let path = format!("/v3/discovery:endpoints?node=burst&names=cluster-{i}");
                http_get(port, &path).await
            })
        })
        .collect();
    for (i, poll) in polls.into_iter().enumerate() {
        let (status, body) = tokio::time::timeout(Duration::from_secs(30), poll)
            .await
            .expect("every poll is answered")
            .expect("poll task")
            .expect("an HTTP answer");
        assert_eq!(status, 200, "cluster-{i}: {body}");
        assert!(
            body.contains(&format!("\"cluster-{i}\"")),
            "cluster-{i}: {body}"
        );
    }
    let eds_requests: Vec<_> = upstream
        .requests()
        .into_iter()
        .filter(|r| r.type_url == EDS)
        .collect();
    // Without coalescing this was one request per name (about 200).
    assert!(
        eds_requests.len() <= 40,
        "{} EDS requests upstream for {CLUSTERS} names: {:?}",
        eds_requests.len(),
        eds_requests
            .iter()
            .map(|r| r.names.len())
            .collect::<Vec<_>>()
    );
    let last = eds_requests.last().expect("at least one EDS request");
    assert_eq!(
        last.names.len(),
        CLUSTERS,
        "the last request names them all"
    );
    gw.stop().await;
}

/// The scripted delta server (what the identities bench pushes through)
/// sends a stream exactly what changed since what it sent that stream:
/// changed or added resources it subscribes to, and the names gone, whether
/// the stream is up to date with the entry before (only the change is
/// looked at) or behind (every resource is compared).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scripted_delta_server_sends_what_changed_and_what_is_gone() {
    use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
    use envoy_types::pb::envoy::service::discovery::v3::{
        DeltaDiscoveryRequest, DeltaDiscoveryResponse,
    };
    use std::collections::BTreeMap;

    type Seen = (BTreeMap<String, Vec<u8>>, Vec<String>);
    /// The resources (name → bytes) and removed names of one response.
    fn seen(response: &DeltaDiscoveryResponse) -> Seen {
        let resources = response
            .resources
            .iter()
            .map(|r| {
                let value = r.resource.as_ref().map(|a| a.value.clone());
                (r.name.clone(), value.unwrap_or_default())
            })
            .collect();
        let mut removed = response.removed_resources.clone();
        removed.sort();
        (resources, removed)
    }
    let bytes = |name: &str, port: u32| (name.to_owned(), assignment(name, port).value);

    let ads = fake_ads::FakeAds::start_delta().await;
    ads.set(
        EDS,
        "v1",
        vec![assignment("a", 1), assignment("b", 1), assignment("c", 1)],
    );
    let mut client = AggregatedDiscoveryServiceClient::connect(ads.url())
        .await
        .expect("the scripted server answers");
    let open = |names: Vec<String>| {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let first = DeltaDiscoveryRequest {
            node: Some(envoy_types::pb::envoy::config::core::v3::Node {
                id: "n".into(),
                ..Default::default()
            }),
            type_url: EDS.into(),
            resource_names_subscribe: names,
            ..Default::default()
        };
        tx.try_send(first).expect("room for the first request");
        (tx, tokio_stream::wrappers::ReceiverStream::new(rx))
    };
    let (_wildcard_tx, requests) = open(vec![]);
    let mut wildcard = client
        .delta_aggregated_resources(requests)
        .await
        .expect("a delta stream")
        .into_inner();
    let (_named_tx, requests) = open(vec!["b".into()]);
    let mut named = client
        .delta_aggregated_resources(requests)
        .await
        .expect("a delta stream")
        .into_inner();
    async fn next(stream: &mut tonic::Streaming<DeltaDiscoveryResponse>) -> Seen {
        let response = tokio::time::timeout(Duration::from_secs(10), stream.message())
            .await
            .expect("a response in time")
            .expect("no stream error")
            .expect("the stream goes on");
        seen(&response)
    }
    let all = |list: &[(&str, u32)]| -> BTreeMap<String, Vec<u8>> {
        list.iter().map(|(n, p)| bytes(n, *p)).collect()
    };
    assert_eq!(
        next(&mut wildcard).await,
        (all(&[("a", 1), ("b", 1), ("c", 1)]), vec![])
    );
    assert_eq!(next(&mut named).await, (all(&[("b", 1)]), vec![]));

    // b changed, c gone, d new: each stream was up to date with v1.
    ads.set(
        EDS,
        "v2",
        vec![assignment("a", 1), assignment("b", 2), assignment("d", 1)],
    );
    assert_eq!(
        next(&mut wildcard).await,
        (all(&[("b", 2), ("d", 1)]), vec!["c".into()])
    );
    assert_eq!(next(&mut named).await, (all(&[("b", 2)]), vec![]));

    // Two changes at once: a stream that takes both in one look compares
    // everything, one that takes each compares each change; either way the
    // sum is a's new version and b gone (and nothing about d).
    ads.set(
        EDS,
        "v3",
        vec![assignment("a", 2), assignment("b", 2), assignment("d", 1)],
    );
    ads.set(EDS, "v4", vec![assignment("a", 2), assignment("d", 1)]);
    let (mut resources, mut removed) = next(&mut wildcard).await;
    if resources.is_empty() || removed.is_empty() {
        let (more, gone) = next(&mut wildcard).await;
        resources.extend(more);
        removed.extend(gone);
    }
    assert_eq!((resources, removed), (all(&[("a", 2)]), vec!["b".into()]));
    assert_eq!(next(&mut named).await, (all(&[]), vec!["b".into()]));
}

/// The scripted SotW server sends each response as bytes it encoded itself
/// (an entry's resources once for every stream): prost reads them as the
/// response it would have encoded, for a wildcard stream and a named one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scripted_sotw_server_encodes_what_prost_reads() {
    use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
    use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};

    let ads = fake_ads::FakeAds::start().await;
    let all = vec![assignment("a", 1), assignment("b", 1), assignment("c", 1)];
    ads.set(EDS, "v1", all.clone());
    let mut client = AggregatedDiscoveryServiceClient::connect(ads.url())
        .await
        .expect("the scripted server answers");
    type Client = AggregatedDiscoveryServiceClient<tonic::transport::Channel>;
    type Open = tokio::sync::mpsc::Sender<DiscoveryRequest>;
    /// A stream's first response (and its request side, kept open).
    async fn first(client: &mut Client, names: &[&str]) -> (DiscoveryResponse, Open) {
        let request = DiscoveryRequest {
            type_url: EDS.into(),
            resource_names: names.iter().map(|n| (*n).to_owned()).collect(),
            ..Default::default()
        };
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tx.try_send(request).expect("room for the first request");
        let mut stream = client
            .stream_aggregated_resources(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .expect("a SotW stream")
            .into_inner();
        let response = tokio::time::timeout(Duration::from_secs(10), stream.message())
            .await
            .expect("a response in time")
            .expect("prost reads it")
            .expect("the stream goes on");
        (response, tx)
    }
    let expected =
        |resources: Vec<envoy_types::pb::google::protobuf::Any>, nonce: &str| DiscoveryResponse {
            version_info: "v1".into(),
            resources,
            type_url: EDS.into(),
            nonce: nonce.into(),
            ..Default::default()
        };
    let (wildcard, _open) = first(&mut client, &[]).await;
    assert_eq!(wildcard, expected(all.clone(), "1"));
    let (named, _open) = first(&mut client, &["c", "a"]).await;
    assert_eq!(named, expected(vec![all[0].clone(), all[2].clone()], "1"));
    let names: Vec<Vec<String>> = ads.responses().into_iter().map(|r| r.names).collect();
    assert_eq!(names, [vec!["a", "b", "c"], vec!["a", "c"]]);
}

/// Once a SotW stream named resources of a type, an empty list is an
/// unsubscription ("clearing the list of subscribed resources is
/// interpreted as an unsubscription"): when only wildcard clients are left
/// (the name idled out), the gateway asks for `*`, and a server that reads
/// the empty list as the text says keeps pushing to the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wildcard_left_after_names_is_asked_as_star_not_as_an_empty_list() {
    let upstream = fake_ads::FakeAds::start().await;
    upstream.empty_list_unsubscribes();
    upstream.set(EDS, "v1", vec![assignment("a", 1), assignment("b", 2)]);
    let gw = InProcess::start(Config {
        upstream: Some(upstream.url()),
        idle_timeout: Duration::from_secs(2),
        ..Config::default()
    })
    .await;
    let named = "/v3/discovery:endpoints?node=n&names=a";
    let wildcard = "/v3/discovery:endpoints?node=n";
    let (status, _) = http_get(gw.rest_port, named).await.expect("an answer");
    assert_eq!(status, 200);
    // The wildcard client keeps polling while the name idles out.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (status, _) = http_get(gw.rest_port, wildcard).await.expect("an answer");
        assert_eq!(status, 200);
        let last = upstream
            .requests()
            .into_iter()
            .rfind(|r| r.type_url == EDS)
            .expect("EDS requested");
        if !last.names.iter().any(|n| n == "a") && last.names.iter().any(|n| n == "*") {
            break;
        }
        assert!(
            last.names.iter().any(|n| n == "a") || !last.names.is_empty(),
            "a wildcard alone after names went out as an empty list: {:?}",
            upstream
                .requests()
                .iter()
                .map(|r| &r.names)
                .collect::<Vec<_>>()
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "the name never idled out"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The node still gets the type's updates.
    upstream.set(EDS, "v2", vec![assignment("a", 1), assignment("c", 3)]);
    let body = process::get_until(
        gw.rest_port,
        wildcard,
        Duration::from_secs(10),
        Duration::from_millis(100),
        || {},
        |body| body.contains("\"c\""),
    )
    .await
    .unwrap_or_else(|last| panic!("the update never reached the node: {last}"));
    assert!(body.contains("\"a\""), "{body}");
    gw.stop().await;
}

/// S6: when no REST client wants a type any more (its names idled out), a
/// SotW stream that named resources of it unsubscribes with the empty
/// list, so a server that reads the text stops pushing what nobody reads
/// (and the gateway stops ACKing it); a client that comes back
/// resubscribes and gets the type's current state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_nobody_wants_any_more_is_unsubscribed_and_a_returning_client_resubscribes() {
    let upstream = fake_ads::FakeAds::start().await;
    upstream.empty_list_unsubscribes();
    upstream.set(EDS, "v1", vec![assignment("a", 1)]);
    upstream.set(CDS, "c1", vec![fake_ads::named_cluster("keep")]);
    let gw = InProcess::start(Config {
        upstream: Some(upstream.url()),
        idle_timeout: Duration::from_secs(2),
        ..Config::default()
    })
    .await;
    let named = "/v3/discovery:endpoints?node=n&names=a";
    let other = "/v3/discovery:clusters?node=n";
    let (status, _) = http_get(gw.rest_port, named).await.expect("an answer");
    assert_eq!(status, 200);
    let eds_requests = || {
        upstream
            .requests()
            .into_iter()
            .filter(|r| r.type_url == EDS)
            .collect::<Vec<_>>()
    };
    // Only the clusters are polled while the name idles out.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (status, _) = http_get(gw.rest_port, other).await.expect("an answer");
        assert_eq!(status, 200);
        if eds_requests().last().is_some_and(|r| r.names.is_empty()) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "EDS was never unsubscribed: {:?}",
            eds_requests().iter().map(|r| &r.names).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The server then pushes nothing of it, and nothing is ACKed for it.
    let eds_sent = |upstream: &fake_ads::FakeAds| {
        upstream
            .responses()
            .iter()
            .filter(|r| r.type_url == EDS)
            .count()
    };
    let (sent, asked) = (eds_sent(&upstream), eds_requests().len());
    upstream.set(EDS, "v2", vec![assignment("a", 2)]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(eds_sent(&upstream), sent, "pushed after the unsubscription");
    assert_eq!(
        eds_requests().len(),
        asked,
        "ACKed after the unsubscription"
    );
    // A client that comes back is served the current state.
    let body = process::get_until(
        gw.rest_port,
        named,
        Duration::from_secs(10),
        Duration::from_millis(100),
        || {},
        |body| body.contains("\"portValue\": 2") || body.contains("\"portValue\":2"),
    )
    .await
    .unwrap_or_else(|last| panic!("the returning client never got v2: {last}"));
    assert!(body.contains("\"a\""), "{body}");
    assert_eq!(
        eds_requests().last().map(|r| r.names.clone()),
        Some(vec!["a".to_owned()]),
        "resubscribed by name"
    );
    gw.stop().await;
}

/// C3: `resource_errors`. The latest error per resource is remembered
/// across responses until a response carries the resource again; REST
/// clients are told the errors of what they asked (`resourceErrors`, a
/// new version when they change, 304 while they do not), `/debug/sessions`
/// shows them; NOT_FOUND is a removal. In SotW and in delta.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_errors_are_remembered_told_to_rest_clients_and_cleared() {
    use xds_gateway::config::UpstreamMode;
    for mode in [UpstreamMode::Sotw, UpstreamMode::Delta] {
        let upstream = fake_ads::FakeAds::start_delta().await;
        upstream.set_with_errors(
            EDS,
            "v1",
            vec![assignment("a", 1)],
            &[("b", 14, "b: backend \"down\"")],
        );
        let gw = InProcess::start(Config {
            upstream: Some(upstream.url()),
            upstream_mode: mode,
            ..Config::default()
        })
        .await;
        let path = "/v3/discovery:endpoints?node=n&names=a,b";
        let poll = |version: String| {
            let port = gw.rest_port;
            async move {
                let path = format!("{path}&version={version}");
                let (status, body) = http_get(port, &path).await.expect("an answer");
                let json: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                (status, json)
            }
        };
        let errors_of = |json: &serde_json::Value| -> Vec<(String, i64)> {
            json["resourceErrors"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| {
                    (
                        e["resourceName"]["name"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                        e["errorDetail"]["code"].as_i64().unwrap_or_default(),
                    )
                })
                .collect()
        };
        let (status, first) = poll(String::new()).await;
        assert_eq!(status, 200, "{mode:?}: {first}");
        assert_eq!(
            errors_of(&first),
            [("b".to_owned(), 14)],
            "{mode:?}: {first}"
        );
        assert!(
            first.to_string().contains("backend \\\"down\\\""),
            "{mode:?}: {first}"
        );
        let v1 = first["versionInfo"].as_str().unwrap_or_default().to_owned();
        assert_eq!(poll(v1.clone()).await.0, 304, "{mode:?}");
        let (_, sessions) = http_get(gw.admin_port, "/debug/sessions")
            .await
            .expect("sessions");
        assert!(
            sessions.contains("\"resource_error_count\":1") && sessions.contains("backend"),
            "{mode:?}: {sessions}"
        );

        // A response that neither carries b nor reports it: still told.
        upstream.set(EDS, "v2", vec![assignment("a", 2)]);
        let changed = eventually_changed(&poll, &v1).await;
        assert_eq!(
            errors_of(&changed),
            [("b".to_owned(), 14)],
            "{mode:?}: {changed}"
        );
        let v2 = changed["versionInfo"]
            .as_str()
            .unwrap_or_default()
            .to_owned();

        // Carried again: cleared.
        upstream.set(EDS, "v3", vec![assignment("a", 2), assignment("b", 3)]);
        let cleared = eventually_changed(&poll, &v2).await;
        assert!(errors_of(&cleared).is_empty(), "{mode:?}: {cleared}");
        assert_eq!(cleared["resources"].as_array().map(Vec::len), Some(2));
        let v3 = cleared["versionInfo"]
            .as_str()
            .unwrap_or_default()
            .to_owned();

        // NOT_FOUND: a removal, not an error to tell.
        upstream.set_with_errors(EDS, "v4", vec![assignment("a", 2)], &[("b", 5, "gone")]);
        let gone = eventually_changed(&poll, &v3).await;
        assert!(errors_of(&gone).is_empty(), "{mode:?}: {gone}");
        assert_eq!(
            gone["resources"].as_array().map(Vec::len),
            Some(1),
            "{mode:?}: {gone}"
        );
        gw.stop().await;
    }
}

/// Polls `poll` until it answers a version other than `old`; that body.
async fn eventually_changed<F, Fut>(poll: &F, old: &str) -> serde_json::Value
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = (u16, serde_json::Value)>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = poll(old.to_owned()).await;
        if status == 200 && body["versionInfo"].as_str() != Some(old) {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no new version after {old}: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// C1: a resource whose wrapper says `cache_control.do_not_cache` is served
/// to the session's clients, but every answer holding it says
/// `Cache-Control: no-store` (so no HTTP cache keeps it), a 304 too, and
/// the config history records the version without it; an answer without
/// it is cacheable as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_do_not_cache_resource_is_served_but_kept_by_no_cache() {
    do_not_cache_is_kept_by_no_cache(xds_gateway::config::UpstreamMode::Sotw).await;
}

/// A GET of `path`: its status, `Cache-Control` and body.
async fn get_with_cache_control(port: u16, path: String) -> (u16, String, String) {
    let (status, headers, body) =
        process::http_exchange(port, http::Method::GET, &path, &[], bytes::Bytes::new())
            .await
            .expect("an answer");
    let cache_control = headers
        .get("cache-control")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (
        status,
        cache_control,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

/// C1 in delta: the same, the upstream saying `do_not_cache` in the delta
/// `Resource` it sends the cluster in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_do_not_cache_delta_resource_is_served_but_kept_by_no_cache() {
    do_not_cache_is_kept_by_no_cache(xds_gateway::config::UpstreamMode::Delta).await;
}

async fn do_not_cache_is_kept_by_no_cache(mode: xds_gateway::config::UpstreamMode) {
    use envoy_types::pb::envoy::service::discovery::v3::{resource::CacheControl, Resource};
    let wrapped = {
        let inner = fake_ads::named_cluster("secret");
        let wrapper = Resource {
            name: "secret".into(),
            version: "1".into(),
            resource: Some(inner),
            cache_control: Some(CacheControl { do_not_cache: true }),
            ..Default::default()
        };
        envoy_types::pb::google::protobuf::Any {
            type_url: "type.googleapis.com/envoy.service.discovery.v3.Resource".into(),
            value: prost::Message::encode_to_vec(&wrapper),
        }
    };
    let upstream = match mode {
        xds_gateway::config::UpstreamMode::Delta => fake_ads::FakeAds::start_delta().await,
        _ => fake_ads::FakeAds::start().await,
    };
    upstream.set(CDS, "c1", vec![fake_ads::named_cluster("plain"), wrapped]);
    let gw = InProcess::start(Config {
        upstream: Some(upstream.url()),
        upstream_mode: mode,
        ..Config::default()
    })
    .await;
    let get = |path: String| get_with_cache_control(gw.rest_port, path);
    let (status, cache_control, body) = get("/v3/discovery:clusters?node=n".into()).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("\"secret\"") && body.contains("\"plain\""),
        "{body}"
    );
    assert_eq!(cache_control, "no-store");
    let json: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let version = json["versionInfo"].as_str().expect("a version").to_owned();
    let (status, cache_control, _) =
        get(format!("/v3/discovery:clusters?node=n&version={version}")).await;
    assert_eq!((status, cache_control.as_str()), (304, "no-store"));
    // Asked without it: cacheable as ever.
    let (status, cache_control, _) = get("/v3/discovery:clusters?node=n&names=plain".into()).await;
    assert_eq!(status, 200);
    assert_ne!(cache_control, "no-store");
    // The history holds the version, not the resource.
    let (status, history) = http_get(
        gw.admin_port,
        &format!("/debug/history?node=n&type=clusters&version={version}"),
    )
    .await
    .expect("history");
    assert_eq!(status, 200, "{history}");
    assert!(history.contains("plain"), "{history}");
    assert!(!history.contains("secret"), "{history}");
    gw.stop().await;
}

/// C1 in fetch mode: an answer holding a `do_not_cache` resource says
/// `no-store` and is not kept for `--fetch-cache-ttl`: two polls inside the
/// TTL make two fetches, where two polls of a cacheable answer make one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_do_not_cache_resource_is_not_kept_for_the_fetch_cache_ttl() {
    use envoy_types::pb::envoy::service::discovery::v3::{resource::CacheControl, Resource};
    let upstream = fake_ads::FakeAds::start().await;
    upstream.set(CDS, "c1", vec![fake_ads::named_cluster("plain")]);
    let gw = InProcess::start(Config {
        upstream: Some(upstream.url()),
        upstream_mode: xds_gateway::config::UpstreamMode::Fetch,
        fetch_cache_ttl: Duration::from_secs(60),
        ..Config::default()
    })
    .await;
    let get = |node: &str| {
        get_with_cache_control(gw.rest_port, format!("/v3/discovery:clusters?node={node}"))
    };
    for _ in 0..2 {
        let (status, cache_control, body) = get("n").await;
        assert_eq!(status, 200, "{body}");
        assert_ne!(cache_control, "no-store");
    }
    assert_eq!(
        upstream.fetches(),
        1,
        "a cacheable answer is kept for the TTL"
    );

    let wrapper = Resource {
        name: "secret".into(),
        version: "1".into(),
        resource: Some(fake_ads::named_cluster("secret")),
        cache_control: Some(CacheControl { do_not_cache: true }),
        ..Default::default()
    };
    let wrapped = envoy_types::pb::google::protobuf::Any {
        type_url: "type.googleapis.com/envoy.service.discovery.v3.Resource".into(),
        value: prost::Message::encode_to_vec(&wrapper),
    };
    upstream.set(CDS, "c2", vec![fake_ads::named_cluster("plain"), wrapped]);
    for _ in 0..2 {
        let (status, cache_control, body) = get("m").await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("\"secret\""), "{body}");
        assert_eq!(cache_control, "no-store");
    }
    assert_eq!(
        upstream.fetches(),
        3,
        "an answer holding it is fetched again"
    );
    gw.stop().await;
}

/// Issue 54, finding 3: a client opens a session with a node of ~600 KB,
/// nearly all of it `client_features` (outside the session key), then sends
/// tiny GETs, each naming one more endpoint. Every subscription change goes
/// upstream with the node (Envoy's default): what it carries beyond the
/// session key is bounded, so the bytes sent upstream per client request
/// stay near the request's own size, not the node's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_node_is_not_sent_upstream_with_every_request() {
    const GETS: usize = 40;
    let upstream = fake_ads::FakeAds::start().await;
    upstream.set(
        EDS,
        "v1",
        (0..GETS).map(|i| assignment(&format!("e{i}"), 1)).collect(),
    );
    let gw = InProcess::start(Config {
        upstream: Some(upstream.url()),
        ..Config::default()
    })
    .await;
    let features: Vec<String> = (0..14_000).map(|i| format!("padding.{i:032}")).collect();
    let body = serde_json::json!({
        "node": {"id": "n", "client_features": features},
        "resource_names": ["e0"],
    })
    .to_string();
    let node_bytes = body.len();
    let (status, _, _) = process::http_exchange(
        gw.rest_port,
        http::Method::POST,
        "/v3/discovery:endpoints",
        &[("content-type", "application/json")],
        bytes::Bytes::from(body),
    )
    .await
    .expect("an answer");
    assert_eq!(status, 200);
    let eds_bytes = || -> usize {
        upstream
            .requests()
            .iter()
            .filter(|r| r.type_url == EDS)
            .map(|r| r.bytes)
            .sum()
    };
    let before = eds_bytes();
    let mut sent_by_client = 0;
    for i in 1..GETS {
        let path = format!("/v3/discovery:endpoints?node=n&names=e{i}");
        sent_by_client += path.len() + 40;
        let (status, body) = http_get(gw.rest_port, &path).await.expect("an answer");
        assert_eq!(status, 200, "{body}");
    }
    let upstream_bytes = eds_bytes() - before;
    eprintln!(
        "node {node_bytes} B; {} GETs (~{sent_by_client} B) made {upstream_bytes} B upstream ({:.1}x)",
        GETS - 1,
        upstream_bytes as f64 / sent_by_client as f64
    );
    assert!(
        upstream_bytes < 64 * 1024,
        "{upstream_bytes} B upstream for {} tiny GETs with a {node_bytes} B node",
        GETS - 1
    );
    let (_, sessions) = http_get(gw.admin_port, "/debug/sessions")
        .await
        .expect("sessions");
    assert!(
        sessions.contains("\"left_out\":[\"client_features\"]"),
        "{sessions}"
    );
    gw.stop().await;
}

/// Issue 54, finding 8: a type the upstream served before and now refuses
/// by ending the stream (not set aside: it was answered) made the session
/// reconnect about five times a second, because any answer on a stream
/// reset the backoff. The backoff now resets only after a stream stayed up
/// a while, so such a loop slows to the backoff's cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_refused_after_it_was_served_does_not_loop_the_stream() {
    let upstream = fake_ads::FakeAds::start().await;
    upstream.set(CDS, "c1", vec![fake_ads::named_cluster("a")]);
    upstream.set(EDS, "v1", vec![assignment("a", 1)]);
    let gw = InProcess::start(Config {
        upstream: Some(upstream.url()),
        ..Config::default()
    })
    .await;
    for path in [
        "/v3/discovery:clusters?node=n",
        "/v3/discovery:endpoints?node=n&names=a",
    ] {
        let (status, body) = http_get(gw.rest_port, path).await.expect("an answer");
        assert_eq!(status, 200, "{path}: {body}");
    }
    // Served, now refused: every new stream answers clusters, then ends.
    upstream.end_streams_asked_for(EDS);
    upstream.break_streams();
    let before = upstream.streams_opened();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let opened = upstream.streams_opened() - before;
    eprintln!("{opened} streams in 6 s");
    assert!(
        opened <= 8,
        "{opened} streams in 6 s: the refusal loops the stream"
    );
    gw.stop().await;
}

/// C2: the node's `dynamic_parameters` key the session (two clients that
/// differ only there get a session, and a stream upstream, each); a
/// `resource_locators` entry without parameters is its name (not the
/// wildcard); names going with two sets of parameters are the gateway's
/// limit: a 501 in `google.rpc.Status` shape, not the wildcard (variants
/// themselves: `tests/dynamic_parameters.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_parameters_key_the_session_and_a_locator_is_its_name() {
    let upstream = fake_ads::FakeAds::start().await;
    upstream.set(
        CDS,
        "c1",
        vec![fake_ads::named_cluster("a"), fake_ads::named_cluster("b")],
    );
    let gw = InProcess::start(Config {
        upstream: Some(upstream.url()),
        ..Config::default()
    })
    .await;
    let post = |body: serde_json::Value| {
        let port = gw.rest_port;
        async move {
            let (status, _, body) = process::http_exchange(
                port,
                http::Method::POST,
                "/v3/discovery:clusters",
                &[("content-type", "application/json")],
                bytes::Bytes::from(body.to_string()),
            )
            .await
            .expect("an answer");
            let body: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
            (status, body)
        }
    };
    let node = |shard: &str| serde_json::json!({"id": "n", "dynamic_parameters": {CDS: {"params": {"shard": shard}}}});
    let names = |body: &serde_json::Value| -> Vec<String> {
        body["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["name"].as_str().map(str::to_owned))
            .collect()
    };
    let (status, body) = post(serde_json::json!({
        "node": node("1"),
        "resource_locators": [{"name": "a"}],
    }))
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(names(&body), ["a"], "{body}");
    assert_eq!(upstream.streams_opened(), 1);
    let (status, body) = post(serde_json::json!({"node": node("2")})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(names(&body), ["a", "b"], "{body}");
    assert_eq!(upstream.streams_opened(), 2, "a session of its own");
    // Each stream's node carries its own parameters upstream.
    let mut shards: Vec<String> = upstream
        .requests()
        .iter()
        .filter_map(|r| r.dynamic_parameters.get(CDS)?.get("shard").cloned())
        .collect();
    shards.sort();
    shards.dedup();
    assert_eq!(shards, ["1", "2"]);
    // Key order and spelling do not make another session.
    let (status, _) = post(serde_json::json!({
        "node": {"id": "n", "dynamicParameters": {CDS: {"params": {"shard": "2"}}}},
    }))
    .await;
    assert_eq!(status, 200);
    assert_eq!(upstream.streams_opened(), 2);
    // Unknown fields of a ContextParams are ignored, as proto3 JSON allows.
    let (status, body) = post(serde_json::json!({
        "node": {"id": "n", "dynamic_parameters": {CDS: {"params": {"shard": "3"}, "later": 1}}},
    }))
    .await;
    assert_eq!(status, 200, "{body}");

    let (status, body) = post(serde_json::json!({
        "node": node("1"),
        "resource_names": ["b"],
        "resource_locators": [{"name": "a", "dynamic_parameters": {"version": "canary"}}],
    }))
    .await;
    assert_eq!(status, 501, "{body}");
    assert_eq!(body["code"], 12, "{body}");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("resource_locators")),
        "{body}"
    );
    gw.stop().await;
}
