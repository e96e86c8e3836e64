//! DNS rebinding (issue 38, finding 9), against the gateway run in process
//! on loopback without an auth policy and with `--allow-secrets` (which
//! start-up allows there): a web page at `evil.example` whose name the
//! browser has been made to resolve to 127.0.0.1 reads the gateway as
//! same-origin, but its requests still say `Host: evil.example`. Neither
//! listener answers such a host without authentication (403, `code` 7);
//! loopback addresses, `localhost`, a name without a dot (Envoy's xDS
//! cluster name) and `--allowed-hosts` are answered. Two `Host` headers
//! are a 400 on both listeners. Raw requests, so the test writes `Host`.

#[path = "support/inproc.rs"]
mod inproc;

use std::time::Duration;

use inproc::{connect, read_until_closed, send, InProcess};
use xds_gateway::config::Config;

const SECRETS: &str = "/v3/discovery:secrets?node=demo&names=demo_tls";

/// The status and body of one `GET path` with these `Host` headers.
async fn get(port: u16, path: &str, hosts: &[&str]) -> (u16, String) {
    let mut stream = connect(port).await;
    let mut request = format!("GET {path} HTTP/1.1\r\n");
    for host in hosts {
        request.push_str(&format!("Host: {host}\r\n"));
    }
    request.push_str("Connection: close\r\n\r\n");
    send(&mut stream, request.as_bytes()).await;
    let text = read_until_closed(&mut stream, Duration::from_secs(10))
        .await
        .expect("the gateway closed the connection");
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test]
async fn open_listeners_answer_only_hosts_a_rebinding_page_cannot_be() {
    let gw = InProcess::start(Config {
        allow_secrets: true,
        allowed_hosts: vec!["gateway.internal.example".into()],
        ..Config::default()
    })
    .await;
    for (port, path) in [
        (gw.rest_port, SECRETS),
        (gw.admin_port, "/debug/config?node=demo"),
    ] {
        for host in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
        ] {
            let (status, body) = get(port, path, &[host]).await;
            assert_eq!(status, 403, "{path} as {host}: {body}");
            let error: serde_json::Value = serde_json::from_str(body.trim()).expect(&body);
            assert_eq!(error["code"], 7, "{body}");
            assert!(
                error["message"]
                    .as_str()
                    .unwrap()
                    .contains("--allowed-hosts"),
                "{body}"
            );
            assert!(!body.contains("inlineString"), "{body}");
        }
        let (status, body) = get(port, path, &["localhost", "evil.example"]).await;
        assert_eq!(status, 400, "two Host headers: {body}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(body.trim()).expect(&body)["code"],
            3
        );
        for host in [
            "127.0.0.1:8080",
            "[::1]:8080",
            "localhost:8080",
            "xds_cluster",
            "Gateway.Internal.Example:8080",
        ] {
            let (status, body) = get(port, path, &[host]).await;
            assert_ne!(status, 403, "{path} as {host}: {body}");
            assert_ne!(status, 400, "{path} as {host}: {body}");
        }
    }
    let (status, body) = get(
        gw.rest_port,
        "/v3/discovery:clusters?node=demo",
        &["127.0.0.1"],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    gw.stop().await;
}

/// The status of one HTTP/2 (prior knowledge) `GET` of `uri`, whose
/// authority hyper sends as `:authority`, with no `Host` header.
async fn get_h2(port: u16, uri: &str) -> u16 {
    use http_body_util::Empty;
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .expect("an HTTP/2 handshake");
    let conn = tokio::spawn(conn);
    let request = http::Request::get(uri)
        .body(Empty::<bytes::Bytes>::new())
        .expect("a request");
    let response = tokio::time::timeout(Duration::from_secs(10), sender.send_request(request))
        .await
        .expect("an answer in time")
        .expect("an answer");
    conn.abort();
    response.status().as_u16()
}

/// Both listeners read HTTP/2's `:authority` as the host (issue 54): the
/// admin listener read only `Host`, so an HTTP/2 request naming
/// `evil.example` there was answered; an HTTP/1.1 absolute-form target
/// naming it is refused too, whatever its `Host` says.
#[tokio::test]
async fn both_listeners_check_the_http2_authority_as_a_host() {
    let gw = InProcess::start(Config {
        allow_secrets: true,
        ..Config::default()
    })
    .await;
    for (port, path) in [
        (gw.rest_port, SECRETS),
        (gw.admin_port, "/debug/config?node=demo"),
    ] {
        let status = get_h2(port, &format!("http://evil.example:{port}{path}")).await;
        assert_eq!(status, 403, "HTTP/2 as evil.example: {path}");
        let status = get_h2(port, &format!("http://localhost:{port}{path}")).await;
        assert_ne!(status, 403, "HTTP/2 as localhost: {path}");
        let (status, body) = get(port, &format!("http://evil.example{path}"), &["localhost"]).await;
        assert_eq!(status, 403, "absolute-form evil.example: {path}: {body}");
    }
    gw.stop().await;
}
