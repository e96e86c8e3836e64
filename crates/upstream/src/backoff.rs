//! Jittered exponential backoff over consecutive failures: how long the
//! upstream stream drivers, the reachability log and the auto-mode probe
//! wait before trying again. Owns no I/O; only the delays.

use std::time::Duration;

use rand::Rng;

/// First reconnect delay; doubles per consecutive failure up to [`BACKOFF_MAX`].
const BACKOFF_BASE: Duration = Duration::from_millis(250);
/// Longest reconnect delay: also how stale a state can get after the upstream
/// returns, so it is short.
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Each delay is scaled by a random factor in [1 - JITTER, 1 + JITTER].
const BACKOFF_JITTER: f64 = 0.5;

/// Jittered exponential backoff over consecutive failures, capped at
/// [`BACKOFF_MAX`]: stream reconnects and the auto-mode probe.
#[derive(Debug, Default)]
pub(super) struct Backoff {
    failures: u32,
}

impl Backoff {
    /// Counts a failure; the delay before the next attempt.
    pub(super) fn next_delay(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let factor = rand::rng().random_range((1.0 - BACKOFF_JITTER)..=(1.0 + BACKOFF_JITTER));
        delay(self.failures, factor)
    }

    /// An attempt succeeded: the next failure starts over.
    pub(super) fn reset(&mut self) {
        self.failures = 0;
    }
}

/// The delay after `failures` consecutive failures (at least 1), scaled by the
/// jitter `factor`: jitter first, then the cap, so no delay is ever longer
/// than [`BACKOFF_MAX`] (the other way round, a capped delay jittered up would
/// exceed it).
fn delay(failures: u32, factor: f64) -> Duration {
    let exp = BACKOFF_BASE.saturating_mul(1u32 << failures.saturating_sub(1).min(16));
    exp.min(BACKOFF_MAX).mul_f64(factor).min(BACKOFF_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_capped_jittered_and_resets() {
        let mut backoff = Backoff::default();
        let delays: Vec<Duration> = (0..40).map(|_| backoff.next_delay()).collect();
        for d in &delays {
            assert!(*d <= BACKOFF_MAX, "{d:?}");
            assert!(*d >= BACKOFF_BASE.mul_f64(1.0 - BACKOFF_JITTER), "{d:?}");
        }
        assert!(delays[30] > delays[0]);
        backoff.reset();
        assert!(backoff.next_delay() <= BACKOFF_BASE.mul_f64(1.0 + BACKOFF_JITTER));
    }

    /// The cap holds at the jitter's extremes, at every failure count.
    #[test]
    fn the_cap_holds_with_the_jitter_at_its_highest() {
        for failures in 1..=64 {
            let highest = delay(failures, 1.0 + BACKOFF_JITTER);
            assert!(highest <= BACKOFF_MAX, "{failures}: {highest:?}");
            let lowest = delay(failures, 1.0 - BACKOFF_JITTER);
            assert!(
                lowest >= BACKOFF_BASE.mul_f64(1.0 - BACKOFF_JITTER),
                "{failures}: {lowest:?}"
            );
        }
        assert_eq!(delay(40, 1.0 + BACKOFF_JITTER), BACKOFF_MAX);
        assert_eq!(
            delay(40, 1.0 - BACKOFF_JITTER),
            BACKOFF_MAX.mul_f64(0.5),
            "jitter below the cap stays"
        );
        assert_eq!(delay(1, 1.0), BACKOFF_BASE);
    }
}
