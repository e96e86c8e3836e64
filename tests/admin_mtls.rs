//! mTLS on the admin listener (issue 23, small ones), with certificates made
//! here (rcgen) against the gateway run in process: a client certificate
//! its CA signed opens the details as an admin token does (only one the
//! policy's `[admin]` SANs name, when it names some); tokens still work; a
//! certificate another CA signed gets no TLS session; required certificates
//! without a policy; and the CA or the policy reloaded on disk closing the
//! details to a certificate they no longer accept, on a connection opened
//! before the reload too. CSDS over gRPC takes the certificate as well.

#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/pki.rs"]
mod pki;
#[path = "support/process.rs"]
mod process;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use inproc::InProcess;
use pki::{write_whole, Ca, PkiDir};
use process::eventually;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use sha2::{Digest, Sha256};
use xds_gateway::config::{ClientAuth, Config};

const OPS_SPIFFE: &str = "spiffe://mesh.test/ns/ops/sa/oncall";
const EDGE_SPIFFE: &str = "spiffe://mesh.test/ns/edge/sa/envoy";
const ADMIN_TOKEN: &str = "admin-token-7f3a91";
const WITHIN: Duration = Duration::from_secs(15);

/// The PKI of one test: the CA that signs the server and the admin
/// clients, and certificates written into its directory.
fn files() -> PkiDir {
    let files = PkiDir::new("xds-gateway admin test CA", "admin");
    // The client verifies the server with a copy, so that the client
    // CA can be rotated on its own.
    write_whole(&files.path("server-ca.pem"), &files.ca.pem);
    files.client("ops", &[OPS_SPIFFE], &[]);
    files.client("edge", &[EDGE_SPIFFE], &[]);
    files.forged_client("forged", &[OPS_SPIFFE]);
    files
}

/// An auth policy with the admin token and `[admin]` naming `sans`.
fn write_policy(files: &PkiDir, sans: &[&str]) -> PathBuf {
    let sans: Vec<String> = sans.iter().map(|s| format!("{s:?}")).collect();
    let text = format!(
        "[admin]\ntoken-sha256 = [\"{}\"]\nuri-san = [{}]\n",
        hex::encode(Sha256::digest(ADMIN_TOKEN.as_bytes())),
        sans.join(", ")
    );
    let path = files.path("policy.toml");
    write_whole(&path, &text);
    path
}

/// One HTTP/1.1 connection over TLS to the admin listener, kept open.
struct Connection {
    sender: hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
}

/// What a request got: the status and the body.
#[derive(Debug)]
struct Answer {
    status: u16,
    body: String,
}

impl Connection {
    /// Connects to 127.0.0.1:`port`, trusting the server's CA and, with
    /// `client`, presenting `<client>.pem`; `Err` if no TLS session.
    async fn open(files: &PkiDir, port: u16, client: Option<&str>) -> Result<Connection, String> {
        let mut roots = rustls::RootCertStore::empty();
        let ca = CertificateDer::from_pem_file(files.path("server-ca.pem")).map_err(e)?;
        roots.add(ca).map_err(e)?;
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(e)?
        .with_root_certificates(roots);
        let config = match client {
            None => builder.with_no_client_auth(),
            Some(name) => {
                let chain = CertificateDer::pem_file_iter(files.path(&format!("{name}.pem")))
                    .map_err(e)?
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(e)?;
                let key = PrivateKeyDer::from_pem_file(files.path(&format!("{name}-key.pem")))
                    .map_err(e)?;
                builder.with_client_auth_cert(chain, key).map_err(e)?
            }
        };
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(e)?;
        let name = ServerName::try_from("localhost").map_err(e)?;
        let tls = tokio::time::timeout(WITHIN, connector.connect(name, tcp))
            .await
            .map_err(e)?
            .map_err(e)?;
        let (sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
                .await
                .map_err(e)?;
        tokio::spawn(conn);
        Ok(Connection { sender })
    }

    /// `GET path` on this connection, with `authorization` if given.
    async fn get(&mut self, path: &str, authorization: Option<&str>) -> Result<Answer, String> {
        let mut request = http::Request::get(path).header(http::header::HOST, "localhost");
        if let Some(value) = authorization {
            request = request.header(http::header::AUTHORIZATION, value);
        }
        let exchange = async {
            self.sender.ready().await.map_err(e)?;
            let response = self
                .sender
                .send_request(request.body(Empty::new()).map_err(e)?)
                .await
                .map_err(e)?;
            let status = response.status().as_u16();
            let body = response.into_body().collect().await.map_err(e)?.to_bytes();
            Ok(Answer {
                status,
                body: String::from_utf8_lossy(&body).into_owned(),
            })
        };
        tokio::time::timeout(WITHIN, exchange).await.map_err(e)?
    }
}

fn e(error: impl std::fmt::Display) -> String {
    error.to_string()
}

/// `GET path` over a connection of its own presenting `client`.
async fn get(
    files: &PkiDir,
    port: u16,
    client: Option<&str>,
    path: &str,
    authorization: Option<&str>,
) -> Result<Answer, String> {
    Connection::open(files, port, client)
        .await?
        .get(path, authorization)
        .await
}

const BEARER: &str = "Bearer admin-token-7f3a91";

#[tokio::test]
async fn admin_client_certificates_open_the_details_beside_tokens() {
    let files = files();
    let policy = write_policy(&files, &["spiffe://mesh.test/ns/ops/*"]);
    let gw = InProcess::start(Config {
        admin_tls: Some(files.server_tls(ClientAuth::Optional)),
        auth_policy: Some(policy),
        ..Config::default()
    })
    .await;
    let port = gw.admin_port;

    // The certificate [admin] names: every detail, JSON and page alike.
    let mut ops = Connection::open(&files, port, Some("ops"))
        .await
        .expect("a TLS session with the ops certificate");
    for path in [
        "/metrics",
        "/debug/clients",
        "/debug/sessions",
        "/debug/client_status",
        "/",
    ] {
        let got = ops.get(path, None).await.unwrap();
        assert_eq!(got.status, 200, "{path} with the ops certificate: {got:?}");
    }
    let ready = ops.get("/readyz", None).await.unwrap();
    assert!(ready.body.contains("\"source\""), "details: {ready:?}");

    // No credential: health only, the rest a JSON 401 saying what opens it.
    assert_eq!(
        get(&files, port, None, "/healthz", None)
            .await
            .unwrap()
            .status,
        200
    );
    let bare = get(&files, port, None, "/metrics", None).await.unwrap();
    assert_eq!(bare.status, 401, "{bare:?}");
    let error: serde_json::Value = serde_json::from_str(&bare.body).expect("a JSON error");
    assert_eq!(error["code"], 16, "{bare:?}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("client certificate") && message.contains("admin token"),
        "{message}"
    );
    let readyz = get(&files, port, None, "/readyz", None).await.unwrap();
    assert_eq!(readyz.body.trim(), r#"{"ready":true}"#, "{readyz:?}");

    // The token still opens them, without a certificate.
    let token = get(&files, port, None, "/metrics", Some(BEARER))
        .await
        .unwrap();
    assert_eq!(token.status, 200, "{token:?}");

    // A certificate the CA signed that [admin] does not name: 401, naming it.
    let edge = get(&files, port, Some("edge"), "/metrics", None)
        .await
        .unwrap();
    assert_eq!(edge.status, 401, "{edge:?}");
    assert!(edge.body.contains(EDGE_SPIFFE), "{edge:?}");
    // A token sent decides, as on the REST listener: a wrong one is refused
    // even with the good certificate. (On a connection of its own: a 401
    // closes its connection, issue 38.)
    let wrong = get(&files, port, Some("ops"), "/metrics", Some("Bearer nope"))
        .await
        .unwrap();
    assert_eq!(wrong.status, 401, "{wrong:?}");
    // A certificate another CA signed: no TLS session at all.
    let forged = get(&files, port, Some("forged"), "/healthz", None).await;
    assert!(forged.is_err(), "{forged:?}");

    // The policy reloaded without the ops SANs: the open connection's next
    // request is refused.
    write_policy(&files, &["spiffe://mesh.test/ns/elsewhere/*"]);
    let deadline = tokio::time::Instant::now() + WITHIN;
    let refused = loop {
        let got = ops.get("/metrics", None).await.unwrap();
        if got.status == 401 {
            break got;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the ops certificate still opened /metrics after the policy dropped it: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(refused.body.contains(OPS_SPIFFE), "{refused:?}");
    gw.stop().await;
}

#[tokio::test]
async fn required_admin_client_certificates_without_a_policy() {
    let files = files();
    let gw = InProcess::start(Config {
        admin_tls: Some(files.server_tls(ClientAuth::Required)),
        ..Config::default()
    })
    .await;
    let port = gw.admin_port;
    // Without a certificate no request gets through, /healthz included.
    let without = get(&files, port, None, "/healthz", None).await;
    assert!(without.is_err(), "{without:?}");
    // Without a policy, any certificate the CA signed opens the details.
    for client in ["ops", "edge"] {
        let got = get(&files, port, Some(client), "/metrics", None)
            .await
            .unwrap();
        assert_eq!(got.status, 200, "{client}: {got:?}");
    }
    let forged = get(&files, port, Some("forged"), "/metrics", None).await;
    assert!(forged.is_err(), "{forged:?}");
    gw.stop().await;
}

#[tokio::test]
async fn a_rotated_admin_client_ca_revokes_what_it_no_longer_trusts() {
    let files = files();
    let policy = write_policy(&files, &[]);
    let gw = InProcess::start(Config {
        admin_tls: Some(files.server_tls(ClientAuth::Optional)),
        auth_policy: Some(policy),
        ..Config::default()
    })
    .await;
    let port = gw.admin_port;
    // [admin] names no SAN: any certificate the CA signed.
    let mut edge = Connection::open(&files, port, Some("edge")).await.unwrap();
    assert_eq!(edge.get("/metrics", None).await.unwrap().status, 200);

    // The next CA replaces the one that signed every client certificate.
    let next = Ca::new("the next admin CA");
    next.client(&[OPS_SPIFFE], &[])
        .write(files.dir.path(), "next");
    write_whole(&files.path("ca.pem"), &next.pem);
    let reloaded = eventually(WITHIN, Duration::from_millis(100), || async {
        let metrics = get(&files, port, None, "/metrics", Some(BEARER))
            .await
            .ok()?;
        metrics
            .body
            .contains("xds_gateway_reloads_total{file=\"admin-tls\",result=\"ok\"}")
            .then_some(())
    })
    .await;
    assert!(reloaded.is_some(), "the admin client CA was never reloaded");
    // The connection opened under the old CA: refused, saying why.
    let revoked = edge.get("/metrics", None).await.unwrap();
    assert_eq!(revoked.status, 401, "{revoked:?}");
    assert!(revoked.body.contains("no longer trusts"), "{revoked:?}");
    // A new connection with the old certificate: no TLS session; the new
    // CA's certificate opens the details.
    assert!(get(&files, port, Some("edge"), "/healthz", None)
        .await
        .is_err());
    let fresh = get(&files, port, Some("next"), "/metrics", None)
        .await
        .unwrap();
    assert_eq!(fresh.status, 200, "{fresh:?}");
    gw.stop().await;
}

#[tokio::test]
async fn admin_csds_over_grpc_takes_the_client_certificate() {
    use envoy_types::pb::envoy::service::status::v3::client_status_discovery_service_client::ClientStatusDiscoveryServiceClient;
    use envoy_types::pb::envoy::service::status::v3::ClientStatusRequest;
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

    let files = files();
    let policy = write_policy(&files, &["spiffe://mesh.test/ns/ops/*"]);
    let gw = InProcess::start(Config {
        admin_tls: Some(files.server_tls(ClientAuth::Optional)),
        auth_policy: Some(policy),
        ..Config::default()
    })
    .await;
    let read = |name: &str| std::fs::read_to_string(files.path(name)).unwrap();
    let fetch = |client: Option<&'static str>| {
        let mut tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(read("server-ca.pem")))
            .domain_name("localhost");
        if let Some(name) = client {
            tls = tls.identity(Identity::from_pem(
                read(&format!("{name}.pem")),
                read(&format!("{name}-key.pem")),
            ));
        }
        let uri = format!("https://127.0.0.1:{}", gw.admin_port);
        async move {
            let channel = Endpoint::from_shared(uri)
                .unwrap()
                .tls_config(tls)
                .unwrap()
                .connect()
                .await
                .expect("a TLS session with the admin listener");
            ClientStatusDiscoveryServiceClient::new(channel)
                .fetch_client_status(ClientStatusRequest::default())
                .await
        }
    };
    let ops = fetch(Some("ops")).await;
    assert!(ops.is_ok(), "{ops:?}");
    for client in [None, Some("edge")] {
        let refused = fetch(client)
            .await
            .expect_err("CSDS without an admin credential");
        assert_eq!(
            refused.code(),
            tonic::Code::Unauthenticated,
            "{client:?}: {refused:?}"
        );
    }
    gw.stop().await;
}
