//! The router as the hyper service of one connection: it records each
//! request's activity, hands handlers the TLS peer's identity and the
//! remote address (as request extensions), and keeps a streaming
//! response's request in flight until its body ends.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::Router;
use hyper::body::Incoming;
use tower::ServiceExt;

use super::activity::{Activity, RequestInFlight, StreamOpen};
use crate::tls::PeerIdentity;

/// The router as a hyper service that records activity and hands the TLS
/// peer's identity to handlers (as a request extension).
#[derive(Clone)]
pub(super) struct TrackedService {
    pub(super) router: Router,
    pub(super) activity: Arc<Activity>,
    pub(super) identity: Option<Arc<PeerIdentity>>,
    pub(super) remote: RemoteAddr,
}

/// The TLS client certificate a request's connection presented, if any, as
/// a handler extracts it (the extension this service puts on the request).
pub(crate) type Peer = Option<axum::Extension<Arc<PeerIdentity>>>;

/// The address a request's connection came from (a request extension).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RemoteAddr(pub(crate) SocketAddr);

impl hyper::service::Service<hyper::Request<Incoming>> for TrackedService {
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn call(&self, request: hyper::Request<Incoming>) -> Self::Future {
        let in_flight = self.activity.begin();
        let mut request = request.map(Body::new);
        if let Some(identity) = &self.identity {
            request.extensions_mut().insert(identity.clone());
        }
        request.extensions_mut().insert(self.remote);
        let router = self.router.clone();
        let activity = self.activity.clone();
        Box::pin(async move {
            let response = router.oneshot(request).await.map(|mut r| {
                // Holding a connection takes a credential: after a 401 it
                // closes, so requests without one cannot keep connections
                // open for themselves.
                if r.status() == axum::http::StatusCode::UNAUTHORIZED {
                    activity.request_close();
                    r.headers_mut().insert(
                        axum::http::header::CONNECTION,
                        axum::http::HeaderValue::from_static("close"),
                    );
                }
                r
            });
            // A stream (a watch) is in flight for as long as it is open;
            // any other request until its head is ready, so a client that
            // does not read a response is still closed as idle.
            response.map(|r| {
                if r.extensions().get::<Streaming>().is_none() {
                    drop(in_flight);
                    return unsent(r, &activity);
                }
                let activity = in_flight.0.clone();
                r.map(|body| Tracked::body(body, activity, 0, Some(in_flight)))
            })
        })
    }
}

/// Bytes of rendered answers one connection may hold unsent (its client has not
/// read them) before further answers on it are refused (one HTTP/2 connection
/// that never read took gigabytes with 600 `?pretty` answers in flight).
pub(crate) const MAX_UNSENT_PER_CONNECTION: usize = 64 << 20;

/// `response` counted in its connection's unsent bytes until its body is
/// sent, and open for the stall check meanwhile (a client that never
/// reads is closed after `write_stall_timeout`); or, when the connection
/// already holds [`MAX_UNSENT_PER_CONNECTION`], a JSON 503 in its place,
/// the connection asked to close, and the rendered answer dropped.
fn unsent(
    response: axum::response::Response,
    activity: &Arc<Activity>,
) -> axum::response::Response {
    use hyper::body::Body as _;
    let Some(size) = response
        .body()
        .size_hint()
        .exact()
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| *n > 0)
    else {
        return response;
    };
    if !activity.hold_unsent(size, MAX_UNSENT_PER_CONNECTION) {
        activity.request_close();
        let mut refused = crate::error_body::response(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            crate::error_body::code::UNAVAILABLE,
            &format!(
                "this connection already holds {MAX_UNSENT_PER_CONNECTION} bytes of \
                 answers its client has not read; read them, or use another connection"
            ),
        );
        let headers = refused.headers_mut();
        headers.insert(
            axum::http::header::RETRY_AFTER,
            axum::http::HeaderValue::from(crate::error_body::RETRY_AFTER_SECS),
        );
        headers.insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
        return refused;
    }
    response.map(|body| Tracked::body(body, activity.clone(), size, None))
}

/// A response body open for the stall check, and either counted in its
/// connection's unsent bytes until sent (`left`) or keeping its request in
/// flight until it is dropped (a stream: written out, or the connection
/// gone). Size and end are the body's own.
struct Tracked {
    body: Body,
    activity: Arc<Activity>,
    left: usize,
    _in_flight: Option<RequestInFlight>,
    _open: StreamOpen,
}

impl Tracked {
    fn body(
        body: Body,
        activity: Arc<Activity>,
        left: usize,
        in_flight: Option<RequestInFlight>,
    ) -> Body {
        let _open = StreamOpen::new(activity.clone());
        Body::new(Tracked {
            body,
            activity,
            left,
            _in_flight: in_flight,
            _open,
        })
    }
}

impl hyper::body::Body for Tracked {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let polled = std::pin::Pin::new(&mut self.body).poll_frame(cx);
        if let std::task::Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref().filter(|_| self.left > 0) {
                let n = data.len().min(self.left);
                self.left -= n;
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        // What was never handed to the connection will never be written.
        if self.left > 0 {
            self.activity.dropped(self.left);
        }
    }
}

/// Put on a response (as an extension) whose body is a long-lived stream:
/// its request counts as in flight until the body ends, so the connection
/// is not closed as idle meanwhile.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Streaming;
