//! The admin listener is fenced by default: off loopback with no admin
//! credential (no `[admin]` token in an auth policy, no admin client
//! certificates), its details (`/metrics`, the `/readyz` details, the
//! debug views, the status page) answer 401 naming what opens them, while
//! `/healthz` and `/readyz` (what probes read) stay open; with
//! `--allow-insecure-admin` (a network that fences the port itself) they
//! open; on loopback they are open as ever.
//!
//! The gateway runs in process, its admin socket on 127.0.0.1: what the
//! rule reads is the `--admin` address it was configured with, which the
//! test sets to `0.0.0.0:9901`. What it leaves out: a real off-loopback
//! socket (the container run binds one) and credentials (`tests/admin_mtls.rs`,
//! `tests/auth_policy.rs`).

#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/process.rs"]
mod process;

use std::net::SocketAddr;

use inproc::InProcess;
use process::http_get;
use xds_gateway::config::Config;

const DETAILS: [&str; 4] = ["/metrics", "/debug/sessions", "/debug/clients", "/"];

async fn gateway(admin: &str, allow_insecure_admin: bool) -> InProcess {
    let admin: SocketAddr = admin.parse().expect("an address");
    InProcess::start(Config {
        admin,
        allow_insecure_admin,
        ..Config::default()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_loopback_without_a_credential_the_details_are_closed_and_the_probes_open() {
    let gw = gateway("0.0.0.0:9901", false).await;
    for path in DETAILS {
        let (status, body) = http_get(gw.admin_port, path).await.expect("an answer");
        assert_eq!(status, 401, "{path}: {body}");
        assert!(body.contains("--allow-insecure-admin"), "{path}: {body}");
    }
    for path in ["/healthz", "/readyz"] {
        let (status, body) = http_get(gw.admin_port, path).await.expect("an answer");
        assert_eq!(status, 200, "{path}: {body}");
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_insecure_admin_opens_them_and_loopback_needs_nothing() {
    for (admin, allow) in [("0.0.0.0:9901", true), ("127.0.0.1:9901", false)] {
        let gw = gateway(admin, allow).await;
        for path in DETAILS {
            let (status, body) = http_get(gw.admin_port, path).await.expect("an answer");
            assert_eq!(status, 200, "{admin} {allow}: {path}: {body}");
        }
        gw.stop().await;
    }
}
