//! The floor under the held polls' latency on the REST side: a plain hyper
//! server (HTTP/1.1, 2 worker threads, as the gateway runs) that holds every
//! POST, its body read whole and not parsed, until its parent says
//! `release`; then it answers every held one at once with the same body (a
//! real CDS answer of the gateway, shared, as the gateway shares it). What
//! the identities bench measures against it, with the same 1,000 clients
//! and the same 77 KB requests, is the least time in which 1,000 held polls
//! can have that answer (382 KB for 1,000 clusters) on this machine when
//! nothing else has to happen: no upstream, no session, no decision.
//!
//! It runs as a child of the bench's binary (so its CPU is its own): with
//! `IDENTITIES_HELD_FLOOR=<body file> <polls>` set, `main` calls [`serve`].
//! It says `port <port>`, then `held` each time `<polls>` requests are held;
//! each `release` line on its stdin answers the held ones.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::AsyncBufReadExt;
use tokio::sync::{watch, Notify};

use crate::bench_child::{say, BenchChild};

/// Requests held now, and the round they wait for.
struct Held {
    body: Bytes,
    held: std::sync::atomic::AtomicUsize,
    polls: usize,
    all_held: Notify,
    /// Bumped by each `release`.
    round: watch::Sender<u64>,
}

async fn hold(held: Arc<Held>, request: Request<Incoming>) -> Response<Full<Bytes>> {
    use std::sync::atomic::Ordering;
    let mut round = held.round.subscribe();
    round.borrow_and_update();
    // Read whole, as a server must before it answers; not parsed.
    let _ = request.into_body().collect().await;
    if held.held.fetch_add(1, Ordering::SeqCst) + 1 == held.polls {
        held.held.store(0, Ordering::SeqCst);
        held.all_held.notify_one();
    }
    let _ = round.changed().await;
    Response::builder()
        .header("content-type", "application/json")
        .body(Full::new(held.body.clone()))
        .expect("a response")
}

/// Runs the floor server described in the module docs; `spec` is
/// `<body file> <polls>`.
pub fn serve(spec: &str) {
    // The path may hold spaces; the count is the last word.
    let (Some(file), Some(polls)) = spec.rsplit_once(' ').map_or((None, None), |(f, p)| {
        (Some(f.to_owned()), p.trim().parse::<usize>().ok())
    }) else {
        panic!("IDENTITIES_HELD_FLOOR: expected `<body file> <polls>`, got {spec:?}");
    };
    let body = Bytes::from(std::fs::read(&file).expect("the answer's body"));
    crate::bench_child::runtime().block_on(async move {
        // The gateway's own backlog: with tokio's default of 1,024 the
        // 1,000 clients' connections overflowed the queue, and the kernel
        // reset some of them.
        let listener =
            xds_gateway::app::bind_listener(([127, 0, 0, 1], 0).into()).expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local address").port();
        let held = Arc::new(Held {
            body,
            held: Default::default(),
            polls,
            all_held: Notify::new(),
            round: watch::channel(0).0,
        });
        say(&format!("port {port}"));
        let accepting = held.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let held = accepting.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let held = held.clone();
                        async move { Ok::<_, Infallible>(hold(held, request).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .http1_only()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        let announcing = held.clone();
        tokio::spawn(async move {
            loop {
                announcing.all_held.notified().await;
                say("held");
            }
        });
        let mut orders = tokio::io::BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = orders.next_line().await {
            if line.trim() == "release" {
                held.round.send_modify(|r| *r += 1);
            }
        }
    });
}

/// The floor server as its parent sees it: a child process of this
/// bench's binary, killed when dropped.
pub struct FloorServer {
    child: BenchChild,
    pub port: u16,
}

impl FloorServer {
    /// Starts it, answering with the bytes in `body_file`, a round of
    /// `polls` requests at a time; `None` if it never said its port.
    pub async fn start(
        body_file: &std::path::Path,
        polls: usize,
        within: std::time::Duration,
    ) -> Option<FloorServer> {
        let spec = format!("{} {polls}", body_file.display());
        let mut child = BenchChild::start("IDENTITIES_HELD_FLOOR", &spec, "floor server");
        let port = child.line("port", within).await?.parse().ok()?;
        Some(FloorServer { child, port })
    }

    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// Whether a round's requests were all held within `within`.
    pub async fn all_held(&mut self, within: std::time::Duration) -> bool {
        self.child.line("held", within).await.is_some()
    }

    /// Answers every held request.
    pub async fn release(&mut self) -> bool {
        self.child.tell("release").await
    }
}
