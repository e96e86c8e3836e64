//! The typed view of the client book (`/debug/clients`, and the status
//! page renders the same structs): per client its role (a subscriber, or a
//! one-shot reader), and per type counts over its subscriptions and the
//! ones not in step in detail.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::{upstream_version, Client, ClientBook, Standing, Subscription};

/// Names listed per subscription in a view (the count is always given).
const NAMES_SHOWN: usize = 8;
/// Subscriptions listed per type and client when they are not in step.
const LAGGING_SHOWN: usize = 20;

/// What `/debug/clients` shows: every client seen within the book's
/// time-to-idle.
#[derive(Debug, Clone, Serialize)]
pub struct ClientsView {
    /// Clients that follow changes (`role` `subscriber`).
    pub subscribers: usize,
    /// One-shot readers (`role` `reader`).
    pub readers: usize,
    /// Sorted by node id, then address (clients without one last).
    pub clients: Vec<ClientView>,
}

/// Whether a client follows changes or reads once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientRole {
    /// It presented a version (a polling Envoy, a long poll), watches, or
    /// POSTed as an Envoy (one that rejected its first version presents
    /// none): its sync state matters.
    Subscriber,
    /// It never presented a version, watched nor POSTed as an Envoy (curl,
    /// a script): every answer is a fresh read, never "in step", and that
    /// is no trouble.
    Reader,
}

/// One REST poller: node id, cluster, user agent, remote address.
#[derive(Debug, Clone, Serialize)]
pub struct ClientView {
    pub node_id: String,
    pub cluster: String,
    pub user_agent: String,
    pub role: ClientRole,
    /// The address it polls from (none in in-process tests).
    pub remote: Option<String>,
    /// Where its ADS config sources were pointed, if they were rewritten.
    pub config_sources_rewritten_for: Option<String>,
    /// RFC 3339.
    pub first_seen: String,
    /// RFC 3339.
    pub last_poll: String,
    /// Keyed by short type name.
    pub types: BTreeMap<&'static str, ClientTypeView>,
}

/// One type of one client: counts over its subscriptions, and the ones not
/// in step in detail (all of them when it has a single one, as LDS and CDS do).
#[derive(Debug, Clone, Serialize)]
pub struct ClientTypeView {
    pub subscriptions: usize,
    pub in_step: usize,
    pub suspected_rejections: usize,
    /// Subscriptions whose latest poll NACKed what they were served.
    pub rejections: usize,
    /// Its latest poll of the type (RFC 3339).
    pub last_poll: Option<String>,
    /// At most [`LAGGING_SHOWN`].
    pub detail: Vec<SubscriptionView>,
}

/// One subscription (a type and a set of names) of a client.
#[derive(Debug, Clone, Serialize)]
pub struct SubscriptionView {
    /// The first names (`name_count` counts them all).
    pub names: Vec<String>,
    pub name_count: usize,
    pub wildcard: bool,
    /// The version it last presented.
    pub presented: String,
    /// The version it was last answered at.
    pub current: String,
    /// The control plane's version within `current`.
    pub upstream_version: String,
    pub state: SubscriptionState,
    /// Why it is behind or suspected (none in step or catching up).
    pub why: Option<String>,
    /// How long it has not been in step (e.g. `1m 5s`).
    pub out_of_step_for: Option<String>,
    /// 200 (a body went out) or 304.
    pub last_answer: u16,
    pub polls: u64,
    /// RFC 3339.
    pub last_poll: String,
}

/// A subscription's [`Standing`], as the views name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum SubscriptionState {
    #[serde(rename = "in step")]
    InStep,
    #[serde(rename = "catching up")]
    CatchingUp,
    #[serde(rename = "behind")]
    Behind,
    #[serde(rename = "suspected rejection")]
    Suspected,
    /// The client NACKed it (REST clients other than Envoy may).
    #[serde(rename = "rejected")]
    Rejected,
}

impl SubscriptionState {
    /// Its name, as the views show it.
    pub fn name(self) -> &'static str {
        match self {
            SubscriptionState::InStep => "in step",
            SubscriptionState::CatchingUp => "catching up",
            SubscriptionState::Behind => "behind",
            SubscriptionState::Suspected => "suspected rejection",
            SubscriptionState::Rejected => "rejected",
        }
    }
}

impl ClientBook {
    /// Every client, sorted by node id then address.
    pub fn view(&self) -> ClientsView {
        let now = SystemTime::now();
        let mut clients: Vec<ClientView> = self
            .clients
            .iter()
            .map(|(_, client)| crate::sync::lock(&client).view(now, self.ttl))
            .collect();
        fn order(c: &ClientView) -> (&String, bool, &Option<String>) {
            (&c.node_id, c.remote.is_none(), &c.remote)
        }
        clients.sort_by(|a, b| order(a).cmp(&order(b)));
        let readers = clients
            .iter()
            .filter(|c| c.role == ClientRole::Reader)
            .count();
        ClientsView {
            subscribers: clients.len() - readers,
            readers,
            clients,
        }
    }
}

impl Client {
    fn view(&self, now: SystemTime, ttl: Duration) -> ClientView {
        let mut types: BTreeMap<&'static str, Vec<&Subscription>> = BTreeMap::new();
        for ((kind, _), sub) in &self.subscriptions {
            if now.duration_since(sub.last_poll).unwrap_or_default() < ttl {
                types.entry(kind.short_name()).or_default().push(sub);
            }
        }
        ClientView {
            node_id: self.node_id.clone(),
            cluster: self.cluster.clone(),
            user_agent: self.user_agent.clone(),
            role: if self.subscriber {
                ClientRole::Subscriber
            } else {
                ClientRole::Reader
            },
            remote: self.remote.map(|ip| ip.to_string()),
            config_sources_rewritten_for: self.rewritten_for.clone(),
            first_seen: stamp(self.first_seen),
            last_poll: stamp(self.last_poll),
            types: types
                .into_iter()
                .map(|(kind, subs)| (kind, type_view(subs, now)))
                .collect(),
        }
    }
}

fn type_view(mut subs: Vec<&Subscription>, now: SystemTime) -> ClientTypeView {
    subs.sort_by(|a, b| a.names.cmp(&b.names));
    let count = |f: fn(&Standing) -> bool| subs.iter().filter(|s| f(&s.standing)).count();
    ClientTypeView {
        subscriptions: subs.len(),
        in_step: count(|s| *s == Standing::InStep),
        suspected_rejections: count(|s| matches!(s, Standing::Suspected { .. })),
        rejections: count(|s| *s == Standing::Rejected),
        last_poll: subs.iter().map(|s| s.last_poll).max().map(stamp),
        detail: subs
            .iter()
            .filter(|s| subs.len() == 1 || s.standing != Standing::InStep)
            .take(LAGGING_SHOWN)
            .map(|s| subscription_view(s, now))
            .collect(),
    }
}

fn subscription_view(sub: &Subscription, now: SystemTime) -> SubscriptionView {
    let (state, why) = match sub.standing {
        Standing::InStep => (SubscriptionState::InStep, None),
        Standing::CatchingUp => (SubscriptionState::CatchingUp, None),
        Standing::Behind { polls } => (
            SubscriptionState::Behind,
            Some(format!(
                "presented {:?} {polls} polls in a row after {:?} was served to it",
                sub.presented, sub.current
            )),
        ),
        Standing::Suspected { polls } => (
            SubscriptionState::Suspected,
            Some(if sub.presented.is_empty() {
                format!(
                    "an Envoy still presents no version {polls} polls after {:?} was served to it: it rejected its first config",
                    sub.current
                )
            } else {
                format!(
                    "presents {:?} {polls} polls after {:?} was served to it: it rejected the newer one",
                    sub.presented, sub.current
                )
            }),
        ),
        Standing::Rejected => (
            SubscriptionState::Rejected,
            Some(format!(
                "it NACKed {:?} and holds {:?}: {}",
                sub.current,
                sub.presented,
                sub.nack.as_deref().unwrap_or_default()
            )),
        ),
    };
    // Whole seconds: a view has no use for nanoseconds.
    let behind_for = sub.out_of_step_since.map(|since| {
        let secs = now.duration_since(since).unwrap_or_default().as_secs();
        humantime::format_duration(Duration::from_secs(secs)).to_string()
    });
    SubscriptionView {
        names: sub.names.iter().take(NAMES_SHOWN).cloned().collect(),
        name_count: sub.names.len(),
        wildcard: sub.wildcard,
        presented: sub.presented.clone(),
        current: sub.current.clone(),
        upstream_version: upstream_version(&sub.current).to_owned(),
        state,
        why,
        out_of_step_for: behind_for,
        last_answer: if sub.body { 200 } else { 304 },
        polls: sub.polls,
        last_poll: stamp(sub.last_poll),
    }
}

fn stamp(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}
