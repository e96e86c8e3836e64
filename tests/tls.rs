//! TLS and mTLS on the REST listener (issue 10, finding 1), with
//! certificates made here (rcgen), against the gateway run in process:
//! curl with and without a client certificate, with good and bad tokens;
//! a certificate its CA did not sign; plaintext on the TLS port; the
//! server certificate rotated on disk and picked up without a restart; and
//! a real Envoy 1.40 polling over TLS with a client certificate, allowed for
//! its node and refused for another.

#[path = "support/envoy.rs"]
mod envoy;
#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/pki.rs"]
mod pki;
#[path = "support/process.rs"]
mod process;

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use inproc::InProcess;
use pki::{write_whole, Ca, PkiDir};
use process::{eventually, http_get};
use sha2::{Digest, Sha256};
use xds_gateway::config::{ClientAuth, Config, ServerTlsFiles};

const EDGE_SPIFFE: &str = "spiffe://mesh.test/ns/edge/sa/envoy";
const CI_TOKEN: &str = "ci-token-9d2f11";
const WITHIN: Duration = Duration::from_secs(15);

/// The PKI of one test, written into its directory (and its policy).
fn files() -> PkiDir {
    let files = PkiDir::new("xds-gateway test CA", "one");
    files.client("edge", &[EDGE_SPIFFE], &[]);
    files.client(
        "stranger",
        &["spiffe://mesh.test/ns/other/sa/x"],
        &["stranger.test"],
    );
    files.forged_client("forged", &[EDGE_SPIFFE]);
    std::fs::write(files.path("policy.toml"), policy()).expect("write the policy");
    files
}

fn policy() -> String {
    format!(
        r#"[[principal]]
name = "edge"
uri-san = ["spiffe://mesh.test/ns/edge/*"]
[[principal.allow]]
nodes = ["edge-*"]
clusters = ["*"]

[[principal]]
name = "ci"
token-sha256 = ["{}"]
[[principal.allow]]
nodes = ["ci-*"]
clusters = ["*"]
"#,
        hex::encode(Sha256::digest(CI_TOKEN.as_bytes()))
    )
}

/// What curl got: its exit code, the HTTP status (0: none) and the body.
#[derive(Debug)]
struct Curl {
    exit: i32,
    status: u16,
    body: String,
}

async fn curl(args: &[&str]) -> Curl {
    let mut command = tokio::process::Command::new("curl");
    command
        .args(["-s", "-o", "-", "-w", "\n%{http_code}", "--max-time", "10"])
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(WITHIN, command.output())
        .await
        .expect("curl did not finish")
        .unwrap_or_else(|e| panic!("cannot run curl ({e}); install it: apt-get install curl"));
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
    Curl {
        exit: output.status.code().unwrap_or(-1),
        status: status.trim().parse().unwrap_or(0),
        body: body.to_owned(),
    }
}

/// curl arguments for `path` on the TLS port, trusting the test CA.
fn https(files: &PkiDir, port: u16, path: &str) -> Vec<String> {
    vec![
        "--cacert".into(),
        files.path("ca.pem").display().to_string(),
        format!("https://localhost:{port}{path}"),
    ]
}

fn with_cert(files: &PkiDir, name: &str, mut args: Vec<String>) -> Vec<String> {
    args.extend([
        "--cert".into(),
        files.path(&format!("{name}.pem")).display().to_string(),
        "--key".into(),
        files.path(&format!("{name}-key.pem")).display().to_string(),
    ]);
    args
}

async fn run(args: Vec<String>) -> Curl {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    curl(&args).await
}

async fn start(files: &PkiDir, client_auth: ClientAuth, policy: bool) -> InProcess {
    InProcess::start(Config {
        tls: Some(files.server_tls(client_auth)),
        auth_policy: policy.then(|| files.path("policy.toml")),
        ..Config::default()
    })
    .await
}

#[tokio::test]
async fn curl_with_and_without_certificates_and_tokens() {
    let files = files();
    let gw = start(&files, ClientAuth::Optional, true).await;
    let port = gw.rest_port;
    let get = |node: &str| https(&files, port, &format!("/v3/discovery:clusters?node={node}"));

    // The edge certificate: its nodes, not another.
    let ok = run(with_cert(&files, "edge", get("edge-1"))).await;
    assert_eq!(ok.status, 200, "{ok:?}");
    let refused = run(with_cert(&files, "edge", get("core-1"))).await;
    assert_eq!(refused.status, 403, "{refused:?}");
    assert!(
        refused.body.contains(EDGE_SPIFFE) && refused.body.contains("core-1"),
        "{refused:?}"
    );
    // No certificate: a token, a wrong token, nothing.
    let mut token = get("ci-1");
    token.extend(["-H".into(), format!("Authorization: Bearer {CI_TOKEN}")]);
    assert_eq!(run(token).await.status, 200);
    let mut wrong = get("ci-1");
    wrong.extend(["-H".into(), "Authorization: Bearer nope".into()]);
    assert_eq!(run(wrong).await.status, 401);
    let anonymous = run(get("edge-1")).await;
    assert_eq!(anonymous.status, 401, "{anonymous:?}");
    // A certificate the CA signed but no principal names: 401.
    let stranger = run(with_cert(&files, "stranger", get("edge-1"))).await;
    assert_eq!(stranger.status, 401, "{stranger:?}");
    assert!(stranger.body.contains("stranger.test"), "{stranger:?}");
    // A certificate another CA signed: no TLS session at all.
    let forged = run(with_cert(&files, "forged", get("edge-1"))).await;
    assert_eq!(forged.status, 0, "{forged:?}");
    assert_ne!(forged.exit, 0);
    // Plaintext on the TLS port: no HTTP answer.
    let plain = curl(&[&format!("http://127.0.0.1:{port}/")]).await;
    assert_ne!(plain.status, 200, "{plain:?}");
    gw.stop().await;
}

#[tokio::test]
async fn required_client_certificates_without_a_policy() {
    let files = files();
    let gw = start(&files, ClientAuth::Required, false).await;
    let path = https(&files, gw.rest_port, "/v3/discovery:clusters?node=anyone");
    let without = run(path.clone()).await;
    assert_eq!(
        without.status, 0,
        "a handshake without a certificate: {without:?}"
    );
    // With a certificate and no policy, any node (mTLS authenticates only).
    let with = run(with_cert(&files, "stranger", path)).await;
    assert_eq!(with.status, 200, "{with:?}");
    // Admin stays plaintext on loopback.
    assert_eq!(http_get(gw.admin_port, "/healthz").await.unwrap().0, 200);
    gw.stop().await;
}

#[tokio::test]
async fn the_admin_listener_serves_tls_of_its_own() {
    let files = files();
    let gw = InProcess::start(Config {
        admin_tls: Some(ServerTlsFiles {
            client_ca: None,
            ..files.server_tls(ClientAuth::Required)
        }),
        ..Config::default()
    })
    .await;
    for path in ["/healthz", "/readyz", "/metrics"] {
        let got = run(https(&files, gw.admin_port, path)).await;
        assert_eq!(got.status, 200, "{path} over TLS: {got:?}");
    }
    // No client certificate is asked for, and plaintext gets no answer.
    let plain = curl(&[&format!("http://127.0.0.1:{}/healthz", gw.admin_port)]).await;
    assert_ne!(plain.status, 200, "{plain:?}");
    // The REST listener keeps its own setting: plaintext here.
    let rest = http_get(gw.rest_port, "/v3/discovery:clusters?node=n").await;
    assert_eq!(rest.expect("REST answers").0, 200);
    gw.stop().await;
}

/// The server's end-entity certificate, as a TLS client sees it.
async fn served_certificate(files: &PkiDir, port: u16) -> Option<Vec<u8>> {
    let mut roots = rustls::RootCertStore::empty();
    let ca = rustls::pki_types::CertificateDer::from_pem_file(files.path("ca.pem")).ok()?;
    roots.add(ca).ok()?;
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .ok()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let name = rustls::pki_types::ServerName::try_from("localhost").ok()?;
    let tls = connector.connect(name, tcp).await.ok()?;
    Some(tls.get_ref().1.peer_certificates()?.first()?.to_vec())
}

use rustls::pki_types::pem::PemObject;

#[tokio::test]
async fn a_rotated_certificate_is_served_without_a_restart() {
    let files = files();
    let gw = start(&files, ClientAuth::Optional, false).await;
    let port = gw.rest_port;
    let first = served_certificate(&files, port)
        .await
        .expect("a TLS session");
    let next = files.ca.server("two");
    next.write(files.dir.path(), "server");
    let rotated = eventually(WITHIN, Duration::from_millis(100), || async {
        (served_certificate(&files, port).await? == next.der).then_some(())
    })
    .await;
    assert!(rotated.is_some(), "the new certificate was never served");
    assert_ne!(first, next.der);
    let ok = run(https(&files, port, "/v3/discovery:clusters?node=n")).await;
    assert_eq!(ok.status, 200, "{ok:?}");

    // A key that does not match: the rotated certificate stays in service.
    write_whole(&files.path("server-key.pem"), &files.ca.server("three").key);
    let admin = gw.admin_port;
    let failed = eventually(WITHIN, Duration::from_millis(100), || async move {
        let (_, metrics) = http_get(admin, "/metrics").await.ok()?;
        metrics
            .contains("xds_gateway_reloads_total{file=\"tls\",result=\"error\"} 1")
            .then_some(())
    })
    .await;
    assert!(failed.is_some(), "the mismatched key was never tried");
    assert_eq!(
        served_certificate(&files, port).await,
        Some(next.der.clone())
    );
    gw.stop().await;
}

/// A client CA rotated on disk revokes what a certificate it no longer
/// trusts holds open: curl's watch over mTLS ends, saying why, instead of
/// streaming on (issue 20, finding 2).
#[tokio::test]
async fn a_rotated_client_ca_ends_watches_it_no_longer_trusts() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let files = files();
    // curl keeps verifying the server with the CA that signed it.
    std::fs::copy(files.path("ca.pem"), files.path("server-ca.pem")).unwrap();
    let gw = start(&files, ClientAuth::Required, false).await;
    let mut args = with_cert(
        &files,
        "edge",
        vec![
            "--cacert".into(),
            files.path("server-ca.pem").display().to_string(),
            format!(
                "https://localhost:{}/v3/discovery:clusters?node=n&watch&format=sse",
                gw.rest_port
            ),
        ],
    );
    args.splice(0..0, ["-sN".to_owned(), "--max-time".into(), "60".into()]);
    let mut child = tokio::process::Command::new("curl")
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("curl runs (apt-get install curl)");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = String::new();
    let opened = tokio::time::timeout(WITHIN, async {
        while let Ok(Some(line)) = lines.next_line().await {
            seen.push_str(&line);
            seen.push('\n');
            if line.starts_with("event:") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(
        opened,
        Ok(true),
        "the watch never sent its first event:\n{seen}"
    );

    // Another CA replaces the one that signed curl's certificate.
    write_whole(&files.path("ca.pem"), &Ca::new("the next CA").pem);
    let ended = tokio::time::timeout(WITHIN, async {
        while let Ok(Some(line)) = lines.next_line().await {
            seen.push_str(&line);
            seen.push('\n');
        }
        child.wait().await
    })
    .await;
    assert!(
        ended.is_ok(),
        "the watch outlived the CA that trusted it:\n{seen}"
    );
    assert!(
        seen.contains("no longer authorized: the client CA was reloaded"),
        "{seen}"
    );
    gw.stop().await;
}

// ---------------------------------------------------------------------------
// A real Envoy over mTLS
// ---------------------------------------------------------------------------

const STATIC_CLUSTER: &str = "'@type': type.googleapis.com/envoy.config.cluster.v3.Cluster
name: over_tls
type: STATIC
connect_timeout: 1s
load_assignment:
  cluster_name: over_tls
  endpoints:
  - lb_endpoints:
    - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 9}}}
";

/// An Envoy polling CDS over REST from the gateway at 127.0.0.1:`port` over
/// TLS, presenting the `edge` client certificate, as node `node`.
fn tls_bootstrap(files: &PkiDir, node: &str, admin: u16, port: u16) -> String {
    let path = |name: &str| files.path(name).display().to_string();
    format!(
        r#"node: {{id: {node}, cluster: {cluster}}}
admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: {admin}}}}}
dynamic_resources:
  cds_config:
    resource_api_version: V3
    api_config_source: {{api_type: REST, transport_api_version: V3, cluster_names: [xds_cluster], refresh_delay: 0.2s}}
static_resources:
  clusters:
  - name: xds_cluster
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: xds_cluster
      endpoints:
      - lb_endpoints:
        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}}}
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        sni: localhost
        common_tls_context:
          tls_certificates:
          - certificate_chain: {{filename: {cert}}}
            private_key: {{filename: {key}}}
          validation_context:
            trusted_ca: {{filename: {ca}}}
            match_typed_subject_alt_names:
            - san_type: DNS
              matcher: {{exact: localhost}}
"#,
        cluster = envoy::NODE_CLUSTER,
        cert = path("edge.pem"),
        key = path("edge-key.pem"),
        ca = path("ca.pem"),
    )
}

async fn envoy_stats(admin: u16) -> std::collections::BTreeMap<String, u64> {
    match http_get(admin, "/stats?filter=cluster_manager.cds").await {
        Ok((200, text)) => envoy::parse_stats(&text),
        _ => Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_polls_over_mtls_for_its_own_node_only() {
    envoy::run_bounded(
        "envoy_polls_over_mtls_for_its_own_node_only",
        |bin, dir| async move {
            let files = files();
            let snapshot = dir.join("snapshot");
            std::fs::create_dir(&snapshot).unwrap();
            std::fs::write(snapshot.join("cluster.yaml"), STATIC_CLUSTER).unwrap();
            let gw = InProcess::start(Config {
                tls: Some(files.server_tls(ClientAuth::Required)),
                auth_policy: Some(files.path("policy.toml")),
                snapshot: Some(snapshot),
                ..Config::default()
            })
            .await;

            let allowed_dir = dir.join("allowed");
            let refused_dir = dir.join("refused");
            let (allowed_admin, refused_admin) = (process::free_port(), process::free_port());
            for d in [&allowed_dir, &refused_dir] {
                std::fs::create_dir(d).unwrap();
            }
            let mut allowed = envoy::Envoy::start(
                &bin,
                &allowed_dir,
                &tls_bootstrap(&files, "edge-1", allowed_admin, gw.rest_port),
            );
            let mut refused = envoy::Envoy::start(
                &bin,
                &refused_dir,
                &tls_bootstrap(&files, "core-1", refused_admin, gw.rest_port),
            );
            // The allowed Envoy applies the cluster served over mTLS.
            let applied = envoy::wait_for_updates(
                allowed_admin,
                &[("cds", "cluster_manager.cds")],
                1,
                envoy::CONVERGE_TIMEOUT,
                || allowed.assert_running(),
                || true,
            )
            .await
            .unwrap_or_else(|last| panic!("the allowed Envoy never applied CDS: {last}"));
            assert_eq!(applied.get("cluster_manager.cds.update_rejected"), Some(&0));
            let (_, clusters) = http_get(allowed_admin, "/clusters").await.unwrap();
            assert!(clusters.contains("over_tls::"), "{clusters}");

            // The other node's Envoy, with the same certificate: every fetch fails.
            let failing = eventually(envoy::CONVERGE_TIMEOUT, envoy::POLL_INTERVAL, || {
                refused.assert_running();
                async move {
                    let stats = envoy_stats(refused_admin).await;
                    (stats
                        .get("cluster_manager.cds.update_failure")
                        .copied()
                        .unwrap_or(0)
                        >= 3)
                        .then_some(stats)
                }
            })
            .await
            .expect("the refused Envoy never counted failed CDS fetches");
            assert_eq!(
                failing.get("cluster_manager.cds.update_success"),
                Some(&0),
                "{failing:?}"
            );
            let (_, clusters) = http_get(refused_admin, "/clusters").await.unwrap();
            assert!(!clusters.contains("over_tls::"), "{clusters}");
            let (_, metrics) = http_get(gw.admin_port, "/metrics").await.unwrap();
            assert!(
                metrics.contains("xds_gateway_requests_total{type=\"clusters\",status=\"403\"}"),
                "{metrics}"
            );
            drop((allowed, refused));
            gw.stop().await;
        },
    )
    .await;
}
