//! TLS and mTLS to the control plane, with certificates generated here
//! (rcgen): the gateway verifies the server against `--upstream-ca`,
//! presents `--upstream-cert`/`--upstream-key` when the server requires a
//! client certificate, sends `--upstream-header` metadata on its streams,
//! and does not talk to a server whose certificate its CA did not sign.
//! The control plane is the in-process scripted fake (`support/fake_ads.rs`).

#[path = "support/fake_ads.rs"]
mod fake_ads;
#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/process.rs"]
mod process;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

use gateway::Gateway;
use process::http_get;

const CDS: &str = xds_gateway::xds::ResourceType::Clusters.type_url();

struct Pki {
    ca: String,
    server_cert: String,
    server_key: String,
    client_cert: String,
    client_key: String,
}

fn pki() -> Pki {
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "xds-gateway test CA");
    let ca = ca_params.self_signed(&ca_key).expect("CA cert");
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf = |names: Vec<String>| {
        let key = KeyPair::generate().expect("leaf key");
        let cert = CertificateParams::new(names)
            .expect("leaf params")
            .signed_by(&key, &issuer)
            .expect("leaf cert");
        (cert.pem(), key.serialize_pem())
    };
    let (server_cert, server_key) = leaf(vec!["localhost".into(), "127.0.0.1".into()]);
    let (client_cert, client_key) = leaf(vec!["xds-gateway".into()]);
    Pki {
        ca: ca.pem(),
        server_cert,
        server_key,
        client_cert,
        client_key,
    }
}

fn cluster_any() -> envoy_types::pb::google::protobuf::Any {
    let codec = xds_gateway::xds::Codec::embedded();
    let any = codec
        .parse_any(
            format!(r#"{{"@type":"{CDS}","name":"tls-cluster","connect_timeout":"1s"}}"#)
                .as_bytes(),
        )
        .expect("fixture");
    envoy_types::pb::google::protobuf::Any {
        type_url: any.type_url,
        value: any.value,
    }
}

/// GETs CDS once (a first request waits up to the gateway's
/// first-response timeout for the upstream).
async fn poll_clusters(gw: &Gateway) -> (u16, String) {
    http_get(gw.port, "/v3/discovery:clusters?node=tls-node")
        .await
        .unwrap_or((0, String::new()))
}

async fn start_gateway(upstream: &str, extra: &[String]) -> Gateway {
    let mut args: Vec<&str> = vec!["--first-response-timeout", "2s"];
    args.extend(extra.iter().map(String::as_str));
    Gateway::start(upstream, &args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_upstream_with_metadata() {
    let pki = pki();
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, text) in [
        ("ca.pem", &pki.ca),
        ("client.pem", &pki.client_cert),
        ("client.key", &pki.client_key),
    ] {
        std::fs::write(dir.path().join(name), text).expect("write pem");
    }
    let tls = ServerTlsConfig::new()
        .identity(Identity::from_pem(&pki.server_cert, &pki.server_key))
        .client_ca_root(Certificate::from_pem(&pki.ca));
    let upstream = fake_ads::FakeAds::start_tls(tls).await;
    upstream.set(CDS, "t1", vec![cluster_any()]);
    let uri = format!("grpcs://localhost:{}", upstream.addr().port());
    let path = |n: &str| dir.path().join(n).display().to_string();

    // With the CA, the client certificate and a metadata header: served.
    let args = vec![
        "--upstream-ca".to_string(),
        path("ca.pem"),
        "--upstream-cert".into(),
        path("client.pem"),
        "--upstream-key".into(),
        path("client.key"),
        "--upstream-header".into(),
        "x-acl-token: s3cret".into(),
    ];
    let gw = start_gateway(&uri, &args).await;
    let (status, body) = poll_clusters(&gw).await;
    assert_eq!(status, 200, "{body}\n{}", gw.log_text());
    assert!(body.contains("tls-cluster"), "{body}");
    let metadata = upstream.stream_metadata();
    assert!(
        metadata
            .iter()
            .any(|m| m.contains(&("x-acl-token".to_string(), "s3cret".to_string()))),
        "{metadata:?}"
    );
    drop(gw);

    // Without the client certificate the server refuses the handshake: 503.
    let gw = start_gateway(&uri, &["--upstream-ca".to_string(), path("ca.pem")]).await;
    let (status, body) = poll_clusters(&gw).await;
    assert_eq!(status, 503, "{body}\n{}", gw.log_text());
    drop(gw);

    // A CA that did not sign the server's certificate: no connection, 503.
    let other = pki_other_ca();
    std::fs::write(dir.path().join("other-ca.pem"), other).expect("write pem");
    let args = vec![
        "--upstream-ca".to_string(),
        path("other-ca.pem"),
        "--upstream-cert".into(),
        path("client.pem"),
        "--upstream-key".into(),
        path("client.key"),
    ];
    let gw = start_gateway(&uri, &args).await;
    let (status, body) = poll_clusters(&gw).await;
    assert_eq!(status, 503, "{body}\n{}", gw.log_text());
}

fn pki_other_ca() -> String {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.self_signed(&key).expect("cert").pem()
}
