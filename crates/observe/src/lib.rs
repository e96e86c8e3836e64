//! What was served to whom, and what changed: the ledgers the serving path
//! reports into and the admin face reads. Nothing here decides what a
//! client is served.
//!
//! - [`ClientBook`] (`clients.rs`): the one ledger of what was served to
//!   whom: the REST clients seen recently and, per subscription, where each
//!   stands and its `RejectionLog` (`rejection.rs`: the versions served, and
//!   a run of polls presenting an older one, a suspected rejection), read by
//!   `/debug/clients`, CSDS and `?changes`;
//! - [`AnswerLog`] (`changes.rs`): the answers served recently, by version,
//!   so `?changes` can answer relative to what a client holds;
//! - [`ConfigHistory`] (`config_history.rs`): every session's config
//!   changes over time (`/debug/history`, `/debug/diff`), and its JSON-lines
//!   file (`history_file.rs`).
//!
//! The client book and the answer log key a client by `cache::ClientKey`;
//! the config history keys its timelines by a digest of the node's
//! `IdentityKey` (a node that goes and comes back finds its history). All
//! read states and requests from `cache`; `cache` names nothing here.

#![warn(unreachable_pub)]

// The crates below, under the names the modules use.
use xds_gateway_base::{log_escape, sync};
use xds_gateway_cache as cache;
#[cfg(any(test, feature = "test-support"))]
use xds_gateway_config as config;
use xds_gateway_xds as xds;

mod changes;
mod clients;
mod config_history;
pub mod history_file;
mod rejection;

pub use changes::{AnswerLog, ServedAnswer};
pub use clients::{
    AnsweredPoll, ClientBook, ClientRole, ClientView, ClientsView, NodeClients, SubscriptionState,
    SubscriptionStatus, SubscriptionView,
};
pub use config_history::{
    covered_names, ConfigHistory, EventView, HistoryLine, HistorySink, Recorder, TimelineView,
};
pub use rejection::{Standing, Suspicion};
