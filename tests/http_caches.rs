//! Config through a standard HTTP cache (issue 27): a real nginx (Debian's
//! package) runs `deploy/nginx/xds-gateway-cache.conf` in front of the
//! gateway run in process, all on loopback:
//! - a YAML client never gets the JSON body through the cache, or the
//!   reverse (`Vary: Accept`);
//! - an authenticated answer (`Cache-Control: private`) is never served
//!   from the cache to another principal or to an anonymous client;
//! - a change upstream (a snapshot file rewritten) is seen through the
//!   cache at its first revalidation;
//! - 200 client requests polling one URL through nginx cost the gateway one
//!   `If-None-Match` revalidation answered 304 per request nginx makes, and
//!   nginx serves every body (counted on the gateway's `/metrics`);
//! - and, without nginx, a 304 carries the 200's ETag, Vary and
//!   Cache-Control, and a long poll's answer says `no-store` (watches,
//!   secrets: `src/http/tests/`, `src/http/caching.rs`).

#[path = "support/files.rs"]
mod files;
#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/nginx.rs"]
mod nginx;
#[path = "support/process.rs"]
mod process;

use std::path::Path;
use std::time::Duration;

use gateway::{http_request, Reply};
use inproc::InProcess;
use nginx::Nginx;
use process::{eventually, http_get};
use sha2::{Digest, Sha256};
use xds_gateway::config::Config;

const TIMEOUT: Duration = Duration::from_secs(15);
const CLUSTER_TYPE: &str = xds_gateway::xds::ResourceType::Clusters.type_url();
const URL: &str = "/v3/discovery:clusters?node=n1&cluster=c1";

fn cluster_yaml(name: &str, connect_timeout: &str) -> String {
    format!("'@type': {CLUSTER_TYPE}\nname: {name}\nconnect_timeout: {connect_timeout}\n")
}

/// Writes `clusters.yaml` under `dir` whole.
fn write_clusters(dir: &Path, connect_timeout: &str) {
    files::write_whole(
        &dir.join("clusters.yaml"),
        &cluster_yaml("a", connect_timeout),
    );
}

/// A gateway on a snapshot directory `dir/snapshot` with `cache_max_age`.
async fn gateway_on(dir: &Path, cache_max_age: u64, config: Config) -> InProcess {
    let snapshot = dir.join("snapshot");
    std::fs::create_dir_all(&snapshot).expect("create snapshot/");
    write_clusters(&snapshot, "1s");
    InProcess::start(Config {
        snapshot: Some(snapshot),
        cache_max_age: Duration::from_secs(cache_max_age),
        ..config
    })
    .await
}

async fn get(port: u16, path: &str, headers: &[(&str, &str)]) -> Reply {
    http_request(port, http::Method::GET, path, headers, "", TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// How nginx answered: HIT, MISS, REVALIDATED, EXPIRED, STALE, UPDATING...
fn cache_status(reply: &Reply) -> &str {
    reply.header("x-cache-status").unwrap_or("(none)")
}

/// `xds_gateway_requests_total{type="clusters",status=S}` for each S.
async fn gateway_requests(admin: u16) -> (u64, u64) {
    let (status, text) = http_get(admin, "/metrics").await.expect("GET /metrics");
    assert_eq!(status, 200, "{text}");
    let count = |code: &str| {
        let prefix = format!("xds_gateway_requests_total{{type=\"clusters\",status=\"{code}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map_or(0, |v| v.trim().parse::<f64>().expect("a counter") as u64)
    };
    (count("200"), count("304"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yaml_and_json_clients_never_get_each_others_body() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = gateway_on(dir.path(), 30, Config::default()).await;
    let edge = Nginx::start(dir.path(), gw.rest_port).await;
    let yaml = [("accept", "application/yaml")];
    let json = [("accept", "application/json")];
    // Either order first, each on its own URL (its own cache key).
    for (url, first, second) in [
        (format!("{URL}&names=a"), &json, &yaml),
        (format!("{URL}&names=a&pretty=false"), &yaml, &json),
    ] {
        for headers in [first, second, first, second] {
            let reply = get(edge.port, &url, headers).await;
            assert_eq!(reply.status, 200, "{}", reply.text());
            assert_eq!(reply.header("vary"), Some("Accept"));
            assert_eq!(
                reply.header("cache-control"),
                Some("max-age=30, stale-while-revalidate=30")
            );
            let text = reply.text();
            if headers[0].1 == "application/yaml" {
                assert_eq!(reply.header("content-type"), Some("application/yaml"));
                assert!(
                    text.contains("versionInfo:") && !text.starts_with('{'),
                    "{text}"
                );
            } else {
                assert_eq!(reply.header("content-type"), Some("application/json"));
                assert!(text.starts_with('{'), "{text}");
            }
        }
        // The cache stored both variants (the test is not vacuous).
        for headers in [first, second] {
            let reply = get(edge.port, &url, headers).await;
            assert_eq!(cache_status(&reply), "HIT", "{:?}", reply.headers);
        }
    }
    gw.stop().await;
}

fn sha(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authenticated_answers_never_leave_their_principal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = format!(
        "[[principal]]\nname = \"edge\"\ntoken-sha256 = [\"{}\"]\n\
         [[principal.allow]]\nnodes = [\"n1\"]\nclusters = [\"*\"]\n\n\
         [[principal]]\nname = \"ci\"\ntoken-sha256 = [\"{}\"]\n\
         [[principal.allow]]\nnodes = [\"*\"]\nclusters = [\"ci\"]\n",
        sha("edge-token"),
        sha("ci-token"),
    );
    let policy_path = dir.path().join("policy.toml");
    std::fs::write(&policy_path, policy).expect("write the policy");
    let config = Config {
        auth_policy: Some(policy_path),
        ..Config::default()
    };
    // Even with a max-age, authenticated answers stay private.
    let gw = gateway_on(dir.path(), 30, config).await;
    let edge = Nginx::start(dir.path(), gw.rest_port).await;
    let as_edge = [("authorization", "Bearer edge-token")];
    let as_ci = [("authorization", "Bearer ci-token")];
    for _ in 0..2 {
        let reply = get(edge.port, URL, &as_edge).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(
            reply.header("cache-control"),
            Some("private, max-age=30, stale-while-revalidate=30")
        );
        assert_eq!(reply.header("vary"), Some("Accept, Authorization"));
        assert_eq!(cache_status(&reply), "MISS", "stored a private answer");
        // Another principal, not allowed this node, and nobody at all.
        let reply = get(edge.port, URL, &as_ci).await;
        assert_eq!(reply.status, 403, "{}", reply.text());
        assert_eq!(reply.header("cache-control"), Some("no-store"));
        let reply = get(edge.port, URL, &[]).await;
        assert_eq!(reply.status, 401, "{}", reply.text());
        assert_eq!(reply.header("cache-control"), Some("no-store"));
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_upstream_is_seen_at_the_first_revalidation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = gateway_on(dir.path(), 1, Config::default()).await;
    let edge = Nginx::start(dir.path(), gw.rest_port).await;
    let before = get(edge.port, URL, &[]).await;
    assert_eq!(before.status, 200, "{}", before.text());
    assert!(before.text().contains("\"1s\""), "{}", before.text());
    write_clusters(&dir.path().join("snapshot"), "7s");
    // The gateway itself has the change first (the source re-reads the file).
    let seen = eventually(TIMEOUT, Duration::from_millis(50), || async {
        let direct = get(gw.rest_port, URL, &[]).await;
        direct.text().contains("\"7s\"").then_some(())
    })
    .await;
    assert!(seen.is_some(), "the gateway never saw the rewritten file");
    // Through nginx: served from the cache until its entry is stale; the
    // first answer that went to the gateway again carries the change.
    let through = eventually(TIMEOUT, Duration::from_millis(50), || async {
        let reply = get(edge.port, URL, &[]).await;
        let status = cache_status(&reply).to_owned();
        match status.as_str() {
            "HIT" | "STALE" | "UPDATING" => None,
            _ => Some((status, reply.text())),
        }
    })
    .await;
    let (status, text) = through.expect("nginx never revalidated within 15 s");
    assert!(text.contains("\"7s\""), "{status}: {text}");
    assert_eq!(status, "EXPIRED", "the stored ETag is no longer current");
    gw.stop().await;
}

/// Client requests per batch (concurrent) in the fleet test.
const BATCH: usize = 20;
/// Client requests at least.
const CLIENTS: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polling_fleet_costs_one_304_per_request_nginx_makes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = gateway_on(dir.path(), 1, Config::default()).await;
    let edge = Nginx::start(dir.path(), gw.rest_port).await;
    let first = get(edge.port, URL, &[]).await;
    assert_eq!(first.status, 200, "{}", first.text());
    let body = first.body.clone();
    let (ok_before, nm_before) = gateway_requests(gw.admin_port).await;
    // Batches of concurrent clients until at least CLIENTS requests were
    // answered and nginx revalidated at least once (its entry lives 1 s).
    let answered = std::sync::atomic::AtomicUsize::new(0);
    let statuses = std::sync::Mutex::new(std::collections::BTreeMap::<String, usize>::new());
    let done = eventually(TIMEOUT, Duration::from_millis(20), || async {
        let replies = futures::future::join_all((0..BATCH).map(|_| get(edge.port, URL, &[]))).await;
        for reply in &replies {
            assert_eq!(reply.status, 200, "{}", reply.text());
            assert_eq!(reply.body, body, "a client got another body");
            *statuses
                .lock()
                .unwrap()
                .entry(cache_status(reply).to_owned())
                .or_default() += 1;
        }
        let total = answered.fetch_add(BATCH, std::sync::atomic::Ordering::SeqCst) + BATCH;
        let (_, nm) = gateway_requests(gw.admin_port).await;
        (total >= CLIENTS && nm > nm_before).then_some(total)
    })
    .await;
    let statuses = statuses.into_inner().unwrap();
    let clients = done.unwrap_or_else(|| panic!("nginx never revalidated: {statuses:?}"));
    let (ok_after, nm_after) = gateway_requests(gw.admin_port).await;
    let (bodies, revalidations) = (ok_after - ok_before, nm_after - nm_before);
    println!(
        "{clients} client requests through nginx: {revalidations} revalidations (304), \
         {bodies} bodies from the gateway; nginx: {statuses:?}"
    );
    assert_eq!(
        bodies, 0,
        "the gateway rendered a body for nginx: {statuses:?}"
    );
    assert!(revalidations >= 1);
    // One gateway request per request nginx made, each a revalidation.
    assert_eq!(
        revalidations as usize,
        statuses.get("REVALIDATED").copied().unwrap_or(0),
        "{statuses:?}"
    );
    assert!(
        (revalidations as usize) * 10 <= clients,
        "nginx served too few bodies itself: {statuses:?}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_304_carries_the_200s_validator_and_cache_headers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = gateway_on(dir.path(), 0, Config::default()).await;
    let ok = get(gw.rest_port, URL, &[("accept", "application/yaml")]).await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(ok.header("cache-control"), Some("no-cache"));
    let etag = ok.header("etag").expect("an ETag").to_owned();
    let not_modified = get(
        gw.rest_port,
        URL,
        &[("accept", "application/yaml"), ("if-none-match", &etag)],
    )
    .await;
    assert_eq!(not_modified.status, 304);
    for name in ["etag", "vary", "cache-control"] {
        assert_eq!(not_modified.header(name), ok.header(name), "{name}");
    }
    // A long poll's answer is never stored, even when it comes at once.
    let polled = get(gw.rest_port, &format!("{URL}&version=old&wait=5s"), &[]).await;
    assert_eq!(polled.status, 200, "{}", polled.text());
    assert_eq!(polled.header("cache-control"), Some("no-store"));
    gw.stop().await;
}
