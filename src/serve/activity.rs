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
        }
    }

    /// The connection moved bytes out now.
    pub(super) fn wrote(&self) {
        let ms = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_write_ms.store(ms, Ordering::Release);
    }

    /// How long a connection with a stream open has written nothing (zero
    /// without one).
    pub(super) fn stalled_for(&self, now: Instant) -> Duration {
        if self.streams.load(Ordering::Acquire) == 0 {
            return Duration::ZERO;
        }
        let last = self.opened + Duration::from_millis(self.last_write_ms.load(Ordering::Acquire));
        now.saturating_duration_since(last)
    }

    /// Asks for the connection to be closed once what is in flight ends.
    pub(super) fn request_close(&self) {
        self.close_requested.store(true, Ordering::Relaxed);
    }

    /// Whether [`Activity::request_close`] was called.
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
        activity.wrote();
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

    #[tokio::test(start_paused = true)]
    async fn only_an_open_stream_that_writes_nothing_stalls() {
        let activity = Arc::new(Activity::new());
        tokio::time::advance(Duration::from_secs(10)).await;
        // No stream open: never stalled, however quiet.
        assert_eq!(activity.stalled_for(Instant::now()), Duration::ZERO);
        let stream = StreamOpen::new(activity.clone());
        tokio::time::advance(Duration::from_secs(4)).await;
        assert_eq!(activity.stalled_for(Instant::now()), Duration::from_secs(4));
        activity.wrote();
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(activity.stalled_for(Instant::now()), Duration::from_secs(1));
        drop(stream);
        assert_eq!(activity.stalled_for(Instant::now()), Duration::ZERO);
    }
}
