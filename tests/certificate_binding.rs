//! Certificate binding (issue 38, finding 1), with real certificates
//! (rcgen) carrying SPIFFE URI SANs, against the gateway run in process
//! over mTLS: a principal whose `uri-san` is the template
//! `spiffe://cluster.local/ns/{namespace}/sa/{sa}` and whose rules say
//! `nodes = ["{sa}"]`, `clusters = ["{namespace}"]` gives each certificate
//! its own node's secrets and no other's: edge-2's certificate cannot read
//! edge-1's private key by claiming node edge-1.

#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/pki.rs"]
mod pki;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use inproc::InProcess;
use pki::PkiDir;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use xds_gateway::config::{ClientAuth, Config};

const WITHIN: Duration = Duration::from_secs(15);
const SECRET: &str = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret";

const POLICY: &str = r#"
[[principal]]
name = "mesh"
uri-san = ["spiffe://cluster.local/ns/{namespace}/sa/{sa}"]
[[principal.allow]]
nodes = ["{sa}"]
clusters = ["{namespace}"]
types = ["secrets"]
"#;

/// A snapshot whose `app_key` is each node's own.
fn write_snapshot(dir: &std::path::Path) {
    for (layer, value) in [
        ("", "base-key"),
        ("nodes/edge-1", "edge-1-private-key"),
        ("nodes/edge-2", "edge-2-private-key"),
    ] {
        let at = dir.join(layer);
        std::fs::create_dir_all(&at).unwrap();
        std::fs::write(
            at.join("secrets.yaml"),
            format!("- '@type': {SECRET}\n  name: app_key\n  generic_secret: {{secret: {{inline_string: {value}}}}}\n"),
        )
        .unwrap();
    }
}

/// `GET path` over mTLS presenting `<client>.pem`: the status and body.
async fn get(files: &PkiDir, port: u16, client: &str, path: &str) -> (u16, String) {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(files.path("ca.pem")).unwrap())
        .unwrap();
    let chain = CertificateDer::pem_file_iter(files.path(&format!("{client}.pem")))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(files.path(&format!("{client}-key.pem"))).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_client_auth_cert(chain, key)
    .unwrap();
    let exchange = async {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .unwrap();
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
                .await
                .unwrap();
        tokio::spawn(conn);
        let request = http::Request::get(path)
            .header(http::header::HOST, "localhost")
            .body(Empty::<Bytes>::new())
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    };
    tokio::time::timeout(WITHIN, exchange).await.unwrap()
}

/// The shape `examples/auth-policy.toml` taught before: every certificate
/// of the namespace, and secrets for every node `edge-*`.
const OLD_SHAPE: &str = r#"
[[principal]]
name = "edge"
uri-san = ["spiffe://cluster.local/ns/edge/sa/*"]
[[principal.allow]]
nodes = ["edge-*"]
clusters = ["edge"]
types = ["secrets"]
"#;

fn secrets_of(node: &str, cluster: &str) -> String {
    format!("/v3/discovery:secrets?node={node}&cluster={cluster}&names=app_key")
}

fn pki() -> PkiDir {
    let files = PkiDir::new("xds-gateway binding test CA", "binding");
    files.client("edge-1", &["spiffe://cluster.local/ns/edge/sa/edge-1"], &[]);
    files.client("edge-2", &["spiffe://cluster.local/ns/edge/sa/edge-2"], &[]);
    files.client("core-1", &["spiffe://cluster.local/ns/core/sa/edge-1"], &[]);
    write_snapshot(&files.path("snapshot"));
    files
}

fn config(files: &PkiDir, policy: &str) -> Config {
    std::fs::write(files.path("policy.toml"), policy).unwrap();
    Config {
        tls: Some(files.server_tls(ClientAuth::Required)),
        snapshot: Some(files.path("snapshot")),
        auth_policy: Some(files.path("policy.toml")),
        allow_secrets: true,
        ..Config::default()
    }
    .validate()
    .expect("a valid configuration")
}

#[tokio::test]
async fn a_certificate_reads_only_the_node_its_spiffe_id_names() {
    let files = pki();
    let gw = InProcess::start(config(&files, POLICY)).await;
    let port = gw.rest_port;

    // Each certificate reads its own node's key.
    for node in ["edge-1", "edge-2"] {
        let (status, body) = get(&files, port, node, &secrets_of(node, "edge")).await;
        assert_eq!(status, 200, "{node}: {body}");
        assert!(body.contains(&format!("{node}-private-key")), "{body}");
    }
    // edge-2's certificate claiming edge-1 (or another cluster, or a
    // glob-looking id) is refused, and learns no key.
    for (node, cluster) in [("edge-1", "edge"), ("edge-2", "core"), ("edge-*", "edge")] {
        let (status, body) = get(&files, port, "edge-2", &secrets_of(node, cluster)).await;
        assert_eq!(status, 403, "edge-2 as {node}/{cluster}: {body}");
        assert!(!body.contains("private-key"), "{body}");
        let error: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(error["code"], 7, "{body}");
    }
    // The same service account in another namespace is another identity.
    let (status, body) = get(&files, port, "core-1", &secrets_of("edge-1", "edge")).await;
    assert_eq!(status, 403, "{body}");
    gw.stop().await;
}

/// The old shape no longer starts a gateway: any certificate of the
/// namespace (one stolen one) read every `edge-*` node's private key.
#[tokio::test]
async fn a_secrets_rule_wider_than_the_certificate_does_not_load() {
    let files = pki();
    let rest = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = rest.local_addr().unwrap().port();
    let mut run = tokio::spawn(xds_gateway::app::run(
        config(&files, OLD_SHAPE),
        rest,
        admin,
        std::future::pending(),
    ));
    match tokio::time::timeout(Duration::from_secs(5), &mut run).await {
        Ok(result) => {
            let err = result
                .unwrap()
                .expect_err("the gateway started")
                .to_string();
            assert!(err.contains("names many certificates"), "{err}");
        }
        Err(_) => {
            let (status, body) = get(&files, port, "edge-2", &secrets_of("edge-1", "edge")).await;
            run.abort();
            panic!("the policy loaded, and edge-2's certificate as edge-1 got {status}: {body}");
        }
    }
}
