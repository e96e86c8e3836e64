//! Answering a connection over the listener's limit: a JSON 503 with
//! `Connection: close` (over TLS too), written out before the socket closes.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::error_body::{self, code, RETRY_AFTER_SECS};
use crate::tls::ServerTls;

/// Answers a connection over the limit with a 503 and closes it.
pub(super) async fn refuse(stream: TcpStream, tls: Option<Arc<ServerTls>>, max: usize) {
    let body = error_body::body(
        code::UNAVAILABLE,
        &format!("too many connections to this listener (at most {max}); try again later"),
    );
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: {RETRY_AFTER_SECS}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    match tls {
        None => write_and_close(stream, response.as_bytes()).await,
        Some(tls) => {
            if let Ok(stream) = tls.acceptor().accept(stream).await {
                write_and_close(stream, response.as_bytes()).await;
            }
        }
    }
}

async fn write_and_close<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, bytes: &[u8]) {
    if stream.write_all(bytes).await.is_ok() {
        let _ = stream.shutdown().await;
        // Read what the client sent, so closing does not reset the
        // connection before it has read the answer.
        let mut sink = [0u8; 4096];
        while let Ok(n) = tokio::io::AsyncReadExt::read(&mut stream, &mut sink).await {
            if n == 0 {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    #[tokio::test]
    async fn a_refused_client_reads_a_json_503_then_the_close() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let refusal = tokio::spawn(refuse(server, None, 7));
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut answer = String::new();
        client.read_to_string(&mut answer).await.unwrap();
        // The refusal reads until the client closes, so that closing does
        // not reset the connection before the answer is read.
        drop(client);
        refusal.await.unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "), "{head}");
        assert!(head.contains("\r\nconnection: close"), "{head}");
        assert!(
            head.contains(&format!("\r\nretry-after: {RETRY_AFTER_SECS}")),
            "{head}"
        );
        assert!(
            head.contains(&format!("\r\ncontent-length: {}", body.len())),
            "{head}"
        );
        let status: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(status["code"], 14);
        assert!(
            status["message"].as_str().unwrap().contains("at most 7"),
            "{body}"
        );
    }
}
