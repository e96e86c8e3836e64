//! A 304 held as a long poll (`?wait=`): admitted like every held request
//! (`admission`), then held until the state changes or the wait runs out.
//! At shutdown a held poll is answered at once (304 unless the state moved
//! meanwhile), so the connection can close; a reload of the auth policy that
//! no longer allows the request ends it with the new policy's answer.

use std::time::Duration;

use super::asked::Asked;
use super::Gateway;
use crate::face::ApiError;
use crate::store::Polled;

/// Holds `asked`'s 304 for up to `wait`; whether to answer again (the
/// state changed, the gateway is draining, or `recheck` passed: what the
/// answer depends on besides the state may have changed), or why it is
/// refused or ended.
pub(super) async fn hold(
    gateway: &Gateway,
    asked: &Asked<'_>,
    polled: &mut Polled,
    wait: Duration,
    recheck: Option<Duration>,
) -> Result<bool, ApiError> {
    let tenant = asked.tenant.as_ref();
    let _slot = gateway.long_polls.admit(&gateway.drain, tenant)?;
    let _held = gateway.metrics.long_poll_held();
    let revoked = asked.revoked();
    tokio::select! {
        changed = polled.next_change(wait) => Ok(changed),
        () = sleep_or_never(recheck.filter(|r| *r < wait)) => Ok(true),
        () = gateway.drain.started() => Ok(true),
        err = revoked => Err(err.into()),
    }
}

/// Sleeps for `duration`; with none, never resolves.
async fn sleep_or_never(duration: Option<Duration>) {
    match duration {
        Some(duration) => tokio::time::sleep(duration).await,
        None => std::future::pending().await,
    }
}
