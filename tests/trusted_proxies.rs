//! No false NACKs behind a balancer (issue 23), over real loopback
//! connections to the gateway run in process, in front of the scripted ADS
//! server (which records every NACK): twenty pollers of one node id, each
//! polling as a REST Envoy does (every refresh delay plus up to as much
//! again, its own keep-alive connection), all from 127.0.0.2, the address
//! of a balancer `--trusted-proxies` names, which does not say whose
//! request each is. A change is rolled out while five of them lag for a
//! few polls: no suspected rejection, no NACK upstream. Then a client the
//! balancer names (`X-Forwarded-For`) rejects the next change, re-presenting
//! the version it had: that is seen, and NACKed. A peer the gateway does
//! not trust (127.0.0.1) cannot name another client with the same header.
//! Each poller's timing is drawn from a fresh seed, printed.

#[path = "support/fake_ads.rs"]
mod fake_ads;
#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/process.rs"]
mod process;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use envoy_types::pb::google::protobuf::Any;
use fake_ads::FakeAds;
use http_body_util::{BodyExt, Full};
use inproc::InProcess;
use process::{eventually, http_get};
use rand::{Rng, SeedableRng};
use tokio::sync::watch;
use xds_gateway::config::{Config, TrustedProxies};
use xds_gateway::xds::{Codec, ResourceType};

const CDS: &str = ResourceType::Clusters.type_url();
const PODS: usize = 20;
const LAGGARDS: usize = 5;
/// Each poller polls this long after its last answer, plus up to as much again.
const REFRESH: Duration = Duration::from_millis(100);
/// How long a laggard holds back its first poll after the change: a few polls.
const LAG: Duration = Duration::from_millis(700);
/// The balancer's address; the test's other connections come from 127.0.0.1.
const BALANCER: [u8; 4] = [127, 0, 0, 2];
/// The client the balancer names, which rejects version 3.
const REJECTER: &str = "10.9.9.9";
const WITHIN: Duration = Duration::from_secs(20);
const SUSPECTED: &str = "xds_gateway_suspected_rejections_total";

/// `count` clusters (each version of CDS has one more).
fn clusters(count: usize) -> Vec<Any> {
    let codec = Codec::embedded();
    (0..count)
        .map(|i| {
            let json = format!(
                r#"{{"@type":"{CDS}","name":"svc-{i}","type":"STATIC","connect_timeout":"1s"}}"#
            );
            let any = codec.parse_any(json.as_bytes()).expect("fixture");
            Any {
                type_url: any.type_url,
                value: any.value,
            }
        })
        .collect()
}

/// One REST client's keep-alive connection from `from` to the gateway.
struct Connection {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    port: u16,
}

impl Connection {
    async fn open(from: [u8; 4], port: u16) -> Connection {
        let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
        socket
            .bind(SocketAddr::from((from, 0)))
            .expect("bind a loopback source address");
        let stream = socket
            .connect(SocketAddr::from(([127, 0, 0, 1], port)))
            .await
            .expect("connect to the gateway");
        let (sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .expect("HTTP/1.1");
        tokio::spawn(conn);
        Connection { sender, port }
    }

    /// POSTs a CDS poll of node `pods` presenting `version`, with
    /// `X-Forwarded-For: forwarded_for` if given; the status and the
    /// version a body carries.
    async fn poll(&mut self, forwarded_for: Option<&str>, version: &str) -> (u16, Option<String>) {
        let body = serde_json::json!({
            "node": {"id": "pods", "cluster": "edge", "user_agent_name": "envoy"},
            "version_info": version,
        });
        let mut request = http::Request::post("/v3/discovery:clusters")
            .header(http::header::HOST, format!("127.0.0.1:{}", self.port))
            .header(http::header::CONTENT_TYPE, "application/json");
        if let Some(client) = forwarded_for {
            request = request.header("x-forwarded-for", client);
        }
        let request = request
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        self.sender
            .ready()
            .await
            .expect("the connection stays open");
        let response = tokio::time::timeout(WITHIN, self.sender.send_request(request))
            .await
            .expect("a poll answered in time")
            .expect("a poll answered");
        let status = response.status().as_u16();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let version = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v["versionInfo"].as_str().map(str::to_owned));
        (status, version)
    }
}

/// The upstream version of a served one (`<upstream>~<digest>`).
fn upstream(version: &str) -> &str {
    version.split_once('~').map_or(version, |(u, _)| u)
}

/// A poller: how it behaves, and the version it holds (shared with the test).
#[derive(Clone)]
struct Poller {
    forwarded_for: Option<String>,
    /// It holds back its first poll after the change by [`LAG`].
    laggard: bool,
    /// The upstream version it rejects (keeps presenting what it had).
    rejects: Option<&'static str>,
    held: Arc<Mutex<String>>,
}

impl Poller {
    fn held(&self) -> String {
        self.held.lock().unwrap().clone()
    }

    /// Polls as a REST Envoy does until `stop`; `changed` says the change
    /// has been rolled out (a laggard then waits [`LAG`] once).
    async fn run(
        self,
        port: u16,
        seed: u64,
        changed: watch::Receiver<bool>,
        stop: watch::Receiver<bool>,
    ) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut connection = Connection::open(BALANCER, port).await;
        let mut lagged = false;
        while !*stop.borrow() {
            if self.laggard && !lagged && *changed.borrow() {
                tokio::time::sleep(LAG).await;
                lagged = true;
            }
            let held = self.held();
            let (status, version) = connection.poll(self.forwarded_for.as_deref(), &held).await;
            match (status, version) {
                (200, Some(version)) if Some(upstream(&version)) != self.rejects => {
                    *self.held.lock().unwrap() = version;
                }
                (200, Some(_)) | (304, _) => {}
                other => panic!("a poll answered {other:?}"),
            }
            let jitter = rng.random_range(0..=REFRESH.as_millis() as u64);
            tokio::time::sleep(REFRESH + Duration::from_millis(jitter)).await;
        }
    }
}

async fn suspected(admin: u16) -> f64 {
    let (_, metrics) = http_get(admin, "/metrics").await.expect("/metrics");
    metrics
        .lines()
        .filter(|l| l.starts_with(SUSPECTED))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits until every poller holds upstream `version`.
async fn converged(pollers: &[Poller], version: &str) {
    let all = eventually(WITHIN, Duration::from_millis(50), || async {
        pollers
            .iter()
            .all(|p| upstream(&p.held()) == version)
            .then_some(())
    })
    .await;
    let held: Vec<String> = pollers.iter().map(Poller::held).collect();
    assert!(
        all.is_some(),
        "not every poller applied {version}: {held:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_behind_one_balancer_roll_out_a_change_without_a_false_nack() {
    let seed: u64 = std::env::var("XDS_ROLLOUT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("poller timing seed: {seed} (XDS_ROLLOUT_SEED={seed} replays it)");
    let ads = FakeAds::start().await;
    ads.set(CDS, "1", clusters(1));
    let gw = InProcess::start(Config {
        upstream: Some(ads.url()),
        forward_rejections: true,
        rejection_threshold: 3,
        trusted_proxies: Some(TrustedProxies::parse(&["127.0.0.2".to_owned()]).unwrap()),
        ..Config::default()
    })
    .await;

    let mut pollers: Vec<Poller> = (0..PODS)
        .map(|i| Poller {
            forwarded_for: None,
            laggard: i < LAGGARDS,
            rejects: None,
            held: Arc::default(),
        })
        .collect();
    let rejecter = Poller {
        forwarded_for: Some(REJECTER.to_owned()),
        laggard: false,
        rejects: Some("3"),
        held: Arc::default(),
    };
    pollers.push(rejecter.clone());
    let (change, changed) = watch::channel(false);
    let (stop, stopped) = watch::channel(false);
    let tasks: Vec<_> = pollers
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let run = p.clone().run(
                gw.rest_port,
                seed.wrapping_add(i as u64),
                changed.clone(),
                stopped.clone(),
            );
            tokio::spawn(run)
        })
        .collect();
    converged(&pollers, "1").await;
    // In step for a few polls each.
    tokio::time::sleep(REFRESH * 6).await;

    // Version 2, five pods lagging.
    ads.set(CDS, "2", clusters(2));
    change.send_replace(true);
    converged(&pollers, "2").await;
    tokio::time::sleep(REFRESH * 6).await;
    assert_eq!(
        suspected(gw.admin_port).await,
        0.0,
        "a suspected rejection during the rollout"
    );
    let nacks: Vec<_> = ads
        .requests()
        .into_iter()
        .filter(|r| r.error_detail.is_some())
        .collect();
    assert!(
        nacks.is_empty(),
        "a NACK upstream during the rollout: {nacks:?}"
    );

    // Version 3, which the named client rejects.
    ads.set(CDS, "3", clusters(3));
    converged(&pollers[..PODS], "3").await;
    let nack = eventually(WITHIN, Duration::from_millis(50), || async {
        ads.requests()
            .into_iter()
            .find(|r| r.error_detail.is_some())
    })
    .await
    .expect("the rejection of version 3 was never NACKed upstream");
    assert_eq!(nack.version_info, "2", "{nack:?}");
    assert_eq!(upstream(&rejecter.held()), "2");
    assert_eq!(suspected(gw.admin_port).await, 1.0);
    let (_, clients) = http_get(gw.admin_port, "/debug/clients").await.unwrap();
    let view: serde_json::Value = serde_json::from_str(&clients).unwrap();
    let of = |remote: &str| {
        view["clients"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["remote"] == remote)
            .unwrap_or_else(|| panic!("no client at {remote}: {view}"))
            .clone()
    };
    assert_eq!(
        of(REJECTER)["types"]["clusters"]["suspected_rejections"],
        1,
        "{view}"
    );
    assert_eq!(
        of("127.0.0.2")["types"]["clusters"]["suspected_rejections"],
        0,
        "{view}"
    );

    // A peer that is not a trusted proxy cannot name another client.
    let mut direct = Connection::open([127, 0, 0, 1], gw.rest_port).await;
    assert_eq!(direct.poll(Some("10.6.6.6"), "").await.0, 200);
    let (_, clients) = http_get(gw.admin_port, "/debug/clients").await.unwrap();
    assert!(clients.contains("\"127.0.0.1\""), "{clients}");
    assert!(!clients.contains("10.6.6.6"), "{clients}");

    stop.send_replace(true);
    for task in tasks {
        tokio::time::timeout(WITHIN, task)
            .await
            .expect("a poller stops")
            .expect("a poller ran without panicking");
    }
    gw.stop().await;
}
