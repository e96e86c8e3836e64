//! Limits that hold under abuse (issue 10, finding 2), against the gateway
//! run in process on loopback: idle, half-sent and slow connections are
//! closed; slow bodies get a 408; connections and long polls are capped
//! with a clear 503; the admin listener answers `/healthz` while the REST
//! listener is saturated. Every load is bounded in count and time; the
//! timeouts are short so the tests are quick, and each bound asserted is
//! several times the configured timeout (these are not timing tests).

#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/inproc.rs"]
mod inproc;
#[path = "support/process.rs"]
mod process;

use std::time::Duration;

use inproc::{connect, read_until_closed, send, InProcess};
use process::{eventually, http_get};
use tokio::io::AsyncWriteExt;
use xds_gateway::config::Config;

/// Generous bound on anything that should happen within ~1 s.
const WITHIN: Duration = Duration::from_secs(10);

fn short_timeouts() -> Config {
    Config {
        header_read_timeout: Duration::from_millis(500),
        body_read_timeout: Duration::from_secs(1),
        keep_alive_timeout: Duration::from_secs(1),
        ..Config::default()
    }
}

#[tokio::test]
async fn idle_half_sent_and_kept_alive_connections_are_closed() {
    let gw = InProcess::start(short_timeouts()).await;
    let mut idle = connect(gw.rest_port).await;
    let mut half = connect(gw.rest_port).await;
    send(
        &mut half,
        b"GET /v3/discovery:clusters?node=demo HTTP/1.1\r\nHost: x\r\n",
    )
    .await;
    let mut kept = connect(gw.rest_port).await;
    send(
        &mut kept,
        b"GET /healthz-not-here HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await;
    for (what, stream) in [
        ("idle", &mut idle),
        ("half-sent", &mut half),
        ("kept alive", &mut kept),
    ] {
        let got = read_until_closed(stream, WITHIN).await;
        assert!(
            got.is_some(),
            "the {what} connection was still open after {WITHIN:?}"
        );
        if what == "kept alive" {
            assert!(
                got.unwrap().starts_with("HTTP/1.1 404"),
                "the request was answered first"
            );
        }
    }
    // The admin listener closes idle connections too.
    let mut admin_idle = connect(gw.admin_port).await;
    assert!(read_until_closed(&mut admin_idle, WITHIN).await.is_some());
    gw.stop().await;
}

#[tokio::test]
async fn many_slowloris_connections_are_all_closed() {
    let gw = InProcess::start(short_timeouts()).await;
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let port = gw.rest_port;
        tasks.push(tokio::spawn(async move {
            let stream = connect(port).await;
            let (mut read, mut write) = stream.into_split();
            // One header byte every 100 ms, for at most 10 s.
            let writer = tokio::spawn(async move {
                for byte in b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" {
                    if write.write_all(&[*byte]).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            });
            let mut sink = Vec::new();
            let closed = tokio::time::timeout(
                WITHIN,
                tokio::io::AsyncReadExt::read_to_end(&mut read, &mut sink),
            )
            .await
            .is_ok();
            writer.abort();
            closed
        }));
    }
    let mut open = 0;
    for task in tasks {
        if !task.await.unwrap() {
            open += 1;
        }
    }
    assert_eq!(open, 0, "slowloris connections still open after {WITHIN:?}");
    gw.stop().await;
}

#[tokio::test]
async fn a_slow_body_gets_a_408() {
    let gw = InProcess::start(short_timeouts()).await;
    let stream = connect(gw.rest_port).await;
    let (mut read, mut write) = stream.into_split();
    let writer = tokio::spawn(async move {
        let head = "POST /v3/discovery:clusters HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{";
        let _ = write.write_all(head.as_bytes()).await;
        for _ in 0..100 {
            if write.write_all(b" ").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let mut out = Vec::new();
    // A reset after the answer is fine: what was read is in `out`.
    let _ = tokio::time::timeout(
        WITHIN,
        tokio::io::AsyncReadExt::read_to_end(&mut read, &mut out),
    )
    .await
    .expect("the slow body's connection was still open");
    writer.abort();
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(
        text.contains("\"code\":4") && text.contains("--body-read-timeout"),
        "{text}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn an_idle_http2_connection_is_closed() {
    let gw = InProcess::start(short_timeouts()).await;
    let stream = connect(gw.rest_port).await;
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .expect("HTTP/2 handshake");
    let conn = tokio::spawn(conn);
    let request = http::Request::get(format!("http://127.0.0.1:{}/", gw.rest_port))
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.expect("GET / over h2");
    assert_eq!(response.status(), 200);
    drop(response);
    tokio::time::timeout(WITHIN, conn)
        .await
        .expect("the idle HTTP/2 connection was still open")
        .unwrap()
        .ok();
    gw.stop().await;
}

/// Connections over the cap get a JSON 503 and are closed, while the admin
/// listener (its own cap, its own accept loop) keeps answering.
#[tokio::test]
async fn connections_are_capped_and_admin_stays_responsive() {
    let gw = InProcess::start(Config {
        max_connections: 20,
        header_read_timeout: Duration::from_secs(30),
        keep_alive_timeout: Duration::from_secs(30),
        // Every connection here comes from 127.0.0.1: no per-source cap.
        source_connection_share: 100,
        ..Config::default()
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(connect(gw.rest_port).await);
    }
    // The 20 are accepted once a 21st is refused.
    let refused = eventually(WITHIN, Duration::from_millis(20), || async {
        let mut extra = connect(gw.rest_port).await;
        send(&mut extra, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
        let text = read_until_closed(&mut extra, WITHIN).await?;
        text.starts_with("HTTP/1.1 503").then_some(text)
    })
    .await
    .expect("a connection over the cap was not refused");
    assert!(refused.contains("too many connections"), "{refused}");
    assert!(refused.contains("\"code\":14"), "{refused}");

    // Saturated: 200 more attempts, bounded, while admin is asked 20 times.
    let hammer = {
        let port = gw.rest_port;
        tokio::spawn(async move {
            for _ in 0..200 {
                if let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
                    let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
                }
            }
        })
    };
    for _ in 0..20 {
        let (status, body) = http_get(gw.admin_port, "/healthz")
            .await
            .expect("admin /healthz");
        assert_eq!((status, body.as_str()), (200, "ok\n"));
    }
    hammer.await.unwrap();
    let (status, metrics) = http_get(gw.admin_port, "/metrics").await.unwrap();
    assert_eq!(status, 200);
    assert!(
        metrics.contains("xds_gateway_connections_refused_total{listener=\"rest\"}"),
        "{metrics}"
    );
    // Freed slots are taken again.
    drop(held);
    let answered = eventually(WITHIN, Duration::from_millis(50), || async {
        matches!(http_get(gw.rest_port, "/").await, Ok((200, _))).then_some(())
    })
    .await;
    assert!(answered.is_some(), "the REST listener did not recover");
    gw.stop().await;
}

#[tokio::test]
async fn long_polls_are_capped() {
    let gw = InProcess::start(Config {
        max_long_polls: 1,
        ..Config::default()
    })
    .await;
    let (status, body) = http_get(gw.rest_port, "/v3/discovery:clusters?node=demo")
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    let version = json["versionInfo"].as_str().unwrap().to_owned();
    let path = format!("/v3/discovery:clusters?node=demo&version={version}&wait=20s");
    let first = {
        let (port, path) = (gw.rest_port, path.clone());
        tokio::spawn(async move { http_get(port, &path).await })
    };
    let held_one = "xds_gateway_long_polls_held 1";
    gateway::wait_for_metric(gw.admin_port, held_one, WITHIN, "the first long poll").await;
    let (status, body) = http_get(gw.rest_port, &path).await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("--max-long-polls"), "{body}");
    first.abort();
    gw.stop().await;
}

/// A connection to 127.0.0.1:`port` from the loopback address `from`.
async fn connect_from(from: &str, port: u16) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(format!("{from}:0").parse().unwrap())
        .expect("bind a loopback source address");
    socket
        .connect(([127, 0, 0, 1], port).into())
        .await
        .expect("connect to the gateway")
}

/// Issue 38, finding 8: connections need a credential to be held. One
/// source address holds at most its share of --max-connections (here 5
/// of 20), so idle connections from it cannot keep a client with a token
/// (from another address) out; and a request answered 401 closes its
/// connection, so unauthenticated requests do not keep it alive.
#[tokio::test]
async fn connections_need_a_credential_to_be_held() {
    let dir = tempfile::tempdir().unwrap();
    let token = "holder-token-38";
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "[[principal]]\nname = \"edge\"\ntoken-sha256 = [\"{}\"]\n[[principal.allow]]\nnodes = [\"*\"]\nclusters = [\"*\"]\n",
            hex::encode(<sha2::Sha256 as sha2::Digest>::digest(token.as_bytes()))
        ),
    )
    .unwrap();
    let gw = InProcess::start(Config {
        auth_policy: Some(policy),
        max_connections: 20,
        header_read_timeout: Duration::from_secs(30),
        keep_alive_timeout: Duration::from_secs(30),
        ..Config::default()
    })
    .await;
    // 127.0.0.1 opens every slot it can and holds them, idle.
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(connect_from("127.0.0.1", gw.rest_port).await);
    }
    let refused = eventually(WITHIN, Duration::from_millis(20), || async {
        let mut extra = connect_from("127.0.0.1", gw.rest_port).await;
        send(&mut extra, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
        let text = read_until_closed(&mut extra, WITHIN).await?;
        text.starts_with("HTTP/1.1 503").then_some(text)
    })
    .await
    .expect("a sixth connection from one address was not refused");
    assert!(refused.contains("at most 5"), "{refused}");
    // A client with a token, from another address, is served.
    let mut client = connect_from("127.0.0.2", gw.rest_port).await;
    let request = format!(
        "GET /v3/discovery:clusters?node=edge-1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    send(&mut client, request.as_bytes()).await;
    let answer = read_until_closed(&mut client, WITHIN)
        .await
        .expect("an answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // A 401 closes its connection (which asked to be kept alive).
    let mut anonymous = connect_from("127.0.0.3", gw.rest_port).await;
    send(
        &mut anonymous,
        b"GET /v3/discovery:clusters?node=edge-1 HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n",
    )
    .await;
    let answer = read_until_closed(&mut anonymous, Duration::from_secs(5))
        .await
        .expect("the connection was kept open after its 401");
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    drop(held);
    gw.stop().await;
}

/// Issue 38 (smaller ones): a body announced over --max-body-bytes is a
/// 413 before `100 Continue` is sent, so a client that asked to wait is
/// not invited to send what will be refused.
#[tokio::test]
async fn an_oversized_content_length_gets_its_413_without_100_continue() {
    let gw = InProcess::start(Config::default()).await;
    let mut stream = connect(gw.rest_port).await;
    send(
        &mut stream,
        b"POST /v3/discovery:clusters HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
          Content-Length: 100000000\r\nExpect: 100-continue\r\n\r\n",
    )
    .await;
    let answer = read_until_closed(&mut stream, WITHIN)
        .await
        .expect("the connection was not closed after the 413");
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(!answer.contains("100 Continue"), "{answer}");
    gw.stop().await;
}
