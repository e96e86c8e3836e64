//! Admission of what the gateway holds open for a client: long polls
//! (`--max-long-polls`) and watches (`--max-watches`), by one rule. Nothing
//! new is held while the gateway drains; then the principal's share of the
//! limit is taken (over it, it takes no global place); then a global place.
//! Each refusal is a 503 with `Retry-After` saying what to do instead.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::drain::Drain;
use crate::face::ApiError;
use crate::shares::{Share, SharePlace, Tenant};

/// What a request asks the gateway to hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Hold {
    /// A 304 held until the state changes (`?wait=`).
    LongPoll,
    /// A stream of every new version (`?watch`).
    Watch,
}

impl Hold {
    /// The flag of its limit, what that counts, why it is refused while
    /// the gateway drains, and (with every place taken) what is too many
    /// and what to do instead.
    fn words(self) -> [&'static str; 5] {
        match self {
            Hold::LongPoll => [
                "max-long-polls",
                "long polls",
                "this gateway is shutting down and holds no new long polls; poll again (another replica answers)",
                "long polls held",
                "poll again later or without ?wait=",
            ],
            Hold::Watch => [
                "max-watches",
                "watches",
                "this gateway is shutting down and opens no new watches; reconnect (another replica answers)",
                "watches open",
                "reconnect later, or poll",
            ],
        }
    }
}

/// A held request's place, and its place in its principal's share: both
/// given back when it drops (the long poll answered, the watch ended).
pub(super) type Place = (OwnedSemaphorePermit, Option<SharePlace>);

/// The places of one kind of held request: the global ones and each
/// principal's share of them.
#[derive(Debug)]
pub(super) struct Places {
    held: Hold,
    max: usize,
    permits: Arc<Semaphore>,
    share: Share,
}

impl Places {
    /// `max` places of `held`, a principal taking at most `principal_share`
    /// percent of them.
    pub(super) fn new(held: Hold, max: usize, principal_share: u8) -> Places {
        Places {
            held,
            max,
            permits: Arc::new(Semaphore::new(max)),
            share: Share::new(held.words()[0], held.words()[1], max, principal_share),
        }
    }

    /// A place on behalf of `tenant`, or the 503 saying why not.
    pub(super) fn admit(&self, drain: &Drain, tenant: Option<&Tenant>) -> Result<Place, ApiError> {
        let [limit, _, draining, too_many, instead] = self.held.words();
        if drain.is_draining() {
            return Err(ApiError::unavailable(draining.to_owned()));
        }
        let share = self.share.take(tenant)?;
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            let max = self.max;
            return Err(ApiError::unavailable(format!(
                "too many {too_many} now (at most {max}, --{limit}); {instead}"
            )));
        };
        Ok((permit, share))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(result: Result<Place, ApiError>) -> String {
        match result {
            Err(err @ ApiError::Unavailable { .. }) => err.to_string(),
            Err(other) => panic!("not a 503: {other}"),
            Ok(_) => panic!("admitted"),
        }
    }

    #[test]
    fn places_are_given_back() {
        let drain = Drain::default();
        let long_polls = Places::new(Hold::LongPoll, 2, 50);
        let held = [
            long_polls.admit(&drain, None).unwrap(),
            long_polls.admit(&drain, None).unwrap(),
        ];
        let why = refusal(long_polls.admit(&drain, None));
        assert!(why.contains("at most 2, --max-long-polls"), "{why}");
        drop(held);
        let _again = long_polls.admit(&drain, None).unwrap();
    }

    #[test]
    fn a_principal_takes_its_share_and_no_more() {
        let drain = Drain::default();
        let watches = Places::new(Hold::Watch, 4, 50);
        let tenant = Tenant::of(Some("team-a"), 2);
        let _held = [
            watches.admit(&drain, tenant.as_ref()).unwrap(),
            watches.admit(&drain, tenant.as_ref()).unwrap(),
        ];
        let why = refusal(watches.admit(&drain, tenant.as_ref()));
        assert!(why.contains("max-watches"), "{why}");
        // Others still find places.
        let _other = watches.admit(&drain, None).unwrap();
    }

    #[test]
    fn nothing_new_is_held_while_draining() {
        let drain = Drain::default();
        drain.begin();
        for held in [Hold::LongPoll, Hold::Watch] {
            let why = refusal(Places::new(held, 10, 50).admit(&drain, None));
            assert!(why.contains("shutting down"), "{held:?}: {why}");
        }
    }
}
