//! The control plane dies and comes back under a steady poll load.
//!
//! Clients that had state must only ever see 200 or 304 (the last good state,
//! marked with `x-xds-gateway-stale-since` while the upstream is down), and
//! the new config must reach them once the control plane is back, within the
//! reconnect backoff's cap plus a poll. The control plane comes back with
//! different content at a different version, and it is as strict about
//! nonces as the strictest real server: it ignores a request carrying a
//! nonce it never sent on that stream, so a gateway that presented the dead
//! stream's nonce after reconnecting would never be answered. Uses the
//! Python reference control plane (`tests/support/ads_server.py`); bounded;
//! children killed on drop.

#[path = "support/process.rs"]
mod process;

#[path = "support/gateway.rs"]
mod gateway;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use gateway::{ControlPlane, Gateway};

const CDS: &str = xds_gateway::xds::ResourceType::Clusters.type_url();
const CLIENTS: usize = 8;
const POLL_EVERY: Duration = Duration::from_millis(50);
/// The gateway's reconnect backoff cap (crates/upstream/src/backoff.rs) with its jitter.
const RECONNECT_CAP: Duration = Duration::from_millis(7_500);

fn cluster(name: &str) -> Value {
    json!({"@type": CDS, "name": name, "type": "STATIC", "connect_timeout": "1s"})
}

#[derive(Default)]
struct Seen {
    statuses: BTreeMap<u16, usize>,
    stale_marked: usize,
    versions: Vec<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_with_state_never_see_errors_while_the_sotw_upstream_blinks() {
    blink("sotw").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_with_state_never_see_errors_while_the_delta_upstream_blinks() {
    blink("delta").await;
}

/// Kills the control plane under steady polls of a gateway in `mode` and
/// brings it back with new content.
async fn blink(mode: &str) {
    let name = format!("upstream blinks ({mode})");
    let test = name.clone();
    let cp = ControlPlane::start(&test);
    let outcome = tokio::time::timeout(Duration::from_secs(60), async move {
        cp.set(CDS, "v1", &[cluster("a")]).await;
        let gw = Arc::new(Gateway::start(&cp.upstream(), &["--upstream-mode", mode]).await);
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let mut clients = Vec::new();
        for i in 0..CLIENTS {
            let (gw, stop, seen) = (gw.clone(), stop.clone(), seen.clone());
            clients.push(tokio::spawn(async move {
                let node = json!({"id": format!("client-{}", i % 2), "cluster": "blink"});
                let mut version = String::new();
                while !stop.load(Ordering::Relaxed) {
                    let request = json!({"version_info": version, "node": node});
                    let reply = gw.discover("clusters", &request).await;
                    {
                        let mut seen = seen.lock().expect("lock");
                        *seen.statuses.entry(reply.status).or_default() += 1;
                        if reply.header("x-xds-gateway-stale-since").is_some() {
                            seen.stale_marked += 1;
                        }
                        if reply.status == 200 {
                            version = reply.json()["versionInfo"].as_str().unwrap_or_default().to_owned();
                            seen.versions.push(version.clone());
                        }
                    }
                    tokio::time::sleep(POLL_EVERY).await;
                }
            }));
        }
        // Every client has state before the upstream goes away.
        process::eventually(Duration::from_secs(10), Duration::from_millis(50), || {
            let seen = seen.clone();
            async move { (seen.lock().expect("lock").versions.len() >= CLIENTS).then_some(()) }
        })
        .await
        .expect("every client got v1");
        let port = cp.ads_port;
        drop(cp);
        let stale = process::eventually(Duration::from_secs(10), Duration::from_millis(50), || async {
            let readyz = gw.readyz().await.expect("readyz");
            (readyz.json()["stale_sessions"].as_u64() >= Some(1)).then_some(())
        })
        .await;
        assert!(stale.is_some(), "no session marked stale after the upstream went away");

        let cp = ControlPlane::start_on(&test, port, &[]);
        cp.set(CDS, "v2", &[cluster("a"), cluster("b")]).await;
        let back = Instant::now();
        // The served version's digest of what v2 holds (the same whichever
        // mode: it covers the content, not the upstream's version).
        let want = {
            let reply = gw.discover("clusters", &json!({"node": {"id": "probe"}})).await;
            reply.json()["versionInfo"].as_str().unwrap_or_default().rsplit('~').next().unwrap_or_default().to_owned()
        };
        let all_on_v2 = process::eventually(RECONNECT_CAP + Duration::from_secs(2), Duration::from_millis(20), || {
            let (seen, want) = (seen.clone(), &want);
            async move {
                let seen = seen.lock().expect("lock");
                let v2 = seen.versions.iter().filter(|v| v.ends_with(want.as_str())).count();
                (v2 >= CLIENTS).then_some(())
            }
        })
        .await;
        let took = back.elapsed();
        stop.store(true, Ordering::Relaxed);
        for client in clients {
            client.await.expect("client task");
        }
        let seen = seen.lock().expect("lock");
        println!(
            "statuses {:?}; {} answers marked stale; all clients on v2 {:?} after the control plane returned",
            seen.statuses, seen.stale_marked, took
        );
        assert!(all_on_v2.is_some(), "not every client got v2 within {took:?}\n{}", gw.log_text());
        let bad: Vec<_> = seen.statuses.keys().filter(|s| **s != 200 && **s != 304).collect();
        assert!(bad.is_empty(), "clients saw {:?}\n{}", seen.statuses, gw.log_text());
        assert!(seen.stale_marked > 0, "no answer was marked stale while the upstream was down");
        drop(cp);
    })
    .await;
    assert!(outcome.is_ok(), "{name} timed out");
}
