//! What a connection has going on: requests in flight and when the last
//! one ended (the idle check), streaming bodies open and when the
//! connection last wrote (the stall check).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// Requests in flight on one connection and when the last one ended;
/// streams open on it and when it last wrote.
#[derive(Debug)]
pub(super) struct Activity {
    in_flight: AtomicUsize,
    started_any: AtomicBool,
    /// A request was answered 401: the connection is closed after it.
    close_requested: AtomicBool,
    last: Mutex<Instant>,
    /// Streaming bodies open.
    streams: AtomicUsize,
    /// When the connection was opened: what `last_write_ms` counts from.
    opened: Instant,
    /// Milliseconds from `opened` to the last write that moved bytes, or
    /// to the opening of a stream, whichever is later.
    last_write_ms: AtomicU64,
    /// Bytes of answer bodies rendered on this connection; with `written` and
    /// `dropped`, what is held unsent.
    produced: AtomicUsize,
    /// Bytes the connection wrote to its transport (framing included).
    written: AtomicUsize,
    /// Bytes of answer bodies dropped without being handed to the
    /// connection (a stream reset).
    dropped: AtomicUsize,
}

impl Activity {
    pub(super) fn new() -> Activity {
        let now = Instant::now();
        Activity {
            in_flight: AtomicUsize::new(0),
            started_any: AtomicBool::new(false),
            close_requested: AtomicBool::new(false),
            last: Mutex::new(now),
            streams: AtomicUsize::new(0),
            opened: now,
            last_write_ms: AtomicU64::new(0),
            produced: AtomicUsize::new(0),
            written: AtomicUsize::new(0),
            dropped: AtomicUsize::new(0),
        }
    }

    /// Counts `bytes` more of answers not yet sent, unless that would
    /// take the connection past `max` (then `false`, nothing counted). A
    /// connection holding nothing unsent takes any one answer, however
    /// large.
    /// (Answer bodies are counted as rendered, and as the connection
    /// writes to its transport: what an HTTP/2 connection has taken into
    /// its own buffers but not written still counts.)
    pub(super) fn hold_unsent(&self, bytes: usize, max: usize) -> bool {
        let held = self.unsent();
        if held != 0 && held.saturating_add(bytes) > max {
            return false;
        }
        self.produced.fetch_add(bytes, Ordering::AcqRel);
        true
    }

    /// Bytes of answers rendered and not yet written.
    pub(super) fn unsent(&self) -> usize {
        let produced = self.produced.load(Ordering::Acquire);
        let gone = self
            .written
            .load(Ordering::Acquire)
            .saturating_add(self.dropped.load(Ordering::Acquire));
        produced.saturating_sub(gone)
    }

    /// `bytes` of an answer body were dropped, never handed over.
    pub(super) fn dropped(&self, bytes: usize) {
        self.dropped.fetch_add(bytes, Ordering::AcqRel);
    }

    /// The connection moved `bytes` out now.
    pub(super) fn wrote(&self, bytes: usize) {
        self.written.fetch_add(bytes, Ordering::AcqRel);
        self.moved();
    }

    /// The connection moved bytes out now (or a stream opened).
    fn moved(&self) {
        let ms = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_write_ms.store(ms, Ordering::Release);
    }

    /// How long a connection with a stream open, or with answer bytes it
    /// has not written, has written nothing (zero with neither). An HTTP/2
    /// answer's body ends as soon as the connection has taken it into its
    /// own send buffer, however little of it the client has let it write:
    /// what is unsent then is the only sign that the client stopped
    /// reading.
    pub(super) fn stalled_for(&self, now: Instant) -> Duration {
        if self.streams.load(Ordering::Acquire) == 0 && self.unsent() == 0 {
            return Duration::ZERO;
        }
        let last = self.opened + Duration::from_millis(self.last_write_ms.load(Ordering::Acquire));
        now.saturating_duration_since(last)
    }

    /// Asks for the connection to be closed once what is in flight ends.
    pub(super) fn request_close(&self) {
        self.close_requested.store(true, Ordering::Relaxed);
    }

    pub(super) fn close_requested(&self) -> bool {
        self.close_requested.load(Ordering::Relaxed)
    }

    pub(super) fn started_any(&self) -> bool {
        self.started_any.load(Ordering::Acquire)
    }

    /// Zero while a request is in flight.
    pub(super) fn idle_for(&self, now: Instant) -> Duration {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return Duration::ZERO;
        }
        now.saturating_duration_since(*crate::sync::lock(&self.last))
    }

    pub(super) fn begin(self: &Arc<Self>) -> RequestInFlight {
        self.started_any.store(true, Ordering::Release);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        RequestInFlight(self.clone())
    }
}

/// A request in flight; its end is the connection's latest activity.
pub(super) struct RequestInFlight(pub(super) Arc<Activity>);

impl Drop for RequestInFlight {
    fn drop(&mut self) {
        *crate::sync::lock(&self.0.last) = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A streaming body open on a connection (it counts toward stall checks).
pub(super) struct StreamOpen(Arc<Activity>);

impl StreamOpen {
    pub(super) fn new(activity: Arc<Activity>) -> StreamOpen {
        // A new stream has not stalled yet: it counts from now.
        activity.moved();
        activity.streams.fetch_add(1, Ordering::AcqRel);
        StreamOpen(activity)
    }
}

impl Drop for StreamOpen {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_connection_is_idle_only_with_no_request_in_flight() {
        let activity = Arc::new(Activity::new());
        assert!(!activity.started_any());
        let request = activity.begin();
        assert!(activity.started_any());
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(activity.idle_for(Instant::now()), Duration::ZERO);
        drop(request);
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(activity.idle_for(Instant::now()), Duration::from_secs(3));
    }

    /// Answers count as unsent until the connection
    /// writes as many bytes (or drops them); past the bound, no more, but
    /// a connection holding nothing takes any one answer.
    #[test]
    fn unsent_answers_are_bounded_per_connection() {
        let activity = Activity::new();
        assert!(activity.hold_unsent(100, 10), "the first, however large");
        assert!(!activity.hold_unsent(1, 10));
        activity.wrote(60);
        activity.dropped(40);
        assert_eq!(activity.unsent(), 0);
        assert!(activity.hold_unsent(6, 10));
        assert!(activity.hold_unsent(4, 10));
        assert!(!activity.hold_unsent(1, 10));
        activity.wrote(10);
        assert!(activity.hold_unsent(10, 10));
    }

    #[tokio::test(start_paused = true)]
    async fn only_an_open_stream_that_writes_nothing_stalls() {
        let activity = Arc::new(Activity::new());
        tokio::time::advance(Duration::from_secs(10)).await;
        // No stream open: never stalled, however quiet.
        assert_eq!(activity.stalled_for(Instant::now()), Duration::ZERO);
        let stream = StreamOpen::new(activity.clone());
        tokio::time::advance(Duration::from_secs(4)).await;
        assert_eq!(activity.stalled_for(Instant::now()), Duration::from_secs(4));
        activity.wrote(1);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(activity.stalled_for(Instant::now()), Duration::from_secs(1));
        drop(stream);
        assert_eq!(activity.stalled_for(Instant::now()), Duration::ZERO);
        // An answer taken whole into the connection's buffer and not yet
        // written: pending, though no stream is open.
        assert!(activity.hold_unsent(100, 1000));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(activity.stalled_for(Instant::now()), Duration::from_secs(3));
        activity.wrote(100);
        assert_eq!(activity.stalled_for(Instant::now()), Duration::ZERO);
    }
}
