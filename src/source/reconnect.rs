//! What the upstream stream tasks (SotW [`super::ads`], incremental
//! [`super::delta`]) share: the reconnect backoff, the stream error, the
//! open-streams gauge guard, and the protocol constants of their requests.

use std::time::Duration;

use rand::Rng;

use super::UpstreamContext;

/// First reconnect delay; doubles per consecutive failure up to [`BACKOFF_MAX`].
pub const BACKOFF_BASE: Duration = Duration::from_millis(250);
/// Longest reconnect delay: also how stale a state can get after the upstream
/// returns, so it is short.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Each delay is scaled by a random factor in [1 - JITTER, 1 + JITTER].
pub const BACKOFF_JITTER: f64 = 0.5;
/// Requests queued toward one stream before the sender waits.
pub const OUTBOUND_QUEUE: usize = 64;
/// gRPC code INVALID_ARGUMENT, used in NACK `error_detail`s.
pub const INVALID_ARGUMENT: i32 = 3;

/// Why one stream ended.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("upstream stream failed: {0}")]
    Status(#[from] tonic::Status),
    #[error("upstream closed the stream")]
    Closed,
}

/// Jittered exponential backoff for the `failures`-th consecutive failure.
pub fn backoff(failures: u32) -> Duration {
    let exp = BACKOFF_BASE.saturating_mul(1u32 << failures.saturating_sub(1).min(16));
    let capped = exp.min(BACKOFF_MAX);
    let factor = rand::rng().random_range((1.0 - BACKOFF_JITTER)..=(1.0 + BACKOFF_JITTER));
    capped.mul_f64(factor)
}

/// Keeps the open-streams gauge right however the stream ends.
pub struct StreamGuard<'a>(&'a UpstreamContext);

impl<'a> StreamGuard<'a> {
    /// Counts a stream as open until the guard drops.
    pub fn open(ctx: &'a UpstreamContext) -> StreamGuard<'a> {
        ctx.metrics.stream_opened();
        StreamGuard(ctx)
    }
}

impl Drop for StreamGuard<'_> {
    fn drop(&mut self) {
        self.0.metrics.stream_closed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_capped_and_jittered() {
        for failures in 1..40 {
            let d = backoff(failures);
            assert!(d <= BACKOFF_MAX.mul_f64(1.0 + BACKOFF_JITTER), "{d:?}");
            assert!(d >= BACKOFF_BASE.mul_f64(1.0 - BACKOFF_JITTER), "{d:?}");
        }
        assert!(backoff(30) > backoff(1));
    }
}
