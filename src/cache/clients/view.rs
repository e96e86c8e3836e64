//! The JSON view of the client book (`/debug/clients`): per client and
//! type, counts over its subscriptions and the ones not in step in detail.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use super::{upstream_version, Client, ClientBook, Standing, Subscription};

/// Names listed per subscription in a view (the count is always given).
const NAMES_SHOWN: usize = 8;
/// Subscriptions listed per type and client when they are not in step.
const LAGGING_SHOWN: usize = 20;

impl ClientBook {
    /// Every client, as JSON, sorted by node id then address.
    pub(crate) fn view(&self) -> Value {
        let now = SystemTime::now();
        let mut clients: Vec<Value> = self
            .clients
            .iter()
            .map(|(_, client)| {
                let client = client.lock().unwrap_or_else(|p| p.into_inner());
                client.view(now, self.ttl)
            })
            .collect();
        clients.sort_by(|a, b| {
            let key = |v: &Value| (v["node_id"].to_string(), v["remote"].to_string());
            key(a).cmp(&key(b))
        });
        json!({ "clients": clients })
    }
}

impl Client {
    fn view(&self, now: SystemTime, ttl: Duration) -> Value {
        let mut types: BTreeMap<&'static str, Vec<&Subscription>> = BTreeMap::new();
        for ((kind, _), sub) in &self.subscriptions {
            if now.duration_since(sub.last_poll).unwrap_or_default() < ttl {
                types.entry(kind.short_name()).or_default().push(sub);
            }
        }
        let types: serde_json::Map<String, Value> = types
            .into_iter()
            .map(|(kind, subs)| (kind.to_owned(), type_view(subs, now)))
            .collect();
        json!({
            "node_id": self.node_id,
            "cluster": self.cluster,
            "user_agent": self.user_agent,
            "remote": self.remote.map(|ip| ip.to_string()),
            "config_sources_rewritten_for": self.rewritten_for,
            "first_seen": stamp(self.first_seen),
            "last_poll": stamp(self.last_poll),
            "types": types,
        })
    }
}

/// One type of one client: counts over its subscriptions, and the ones not
/// in step in detail (all of them when it has a single one, as LDS and CDS do).
fn type_view(mut subs: Vec<&Subscription>, now: SystemTime) -> Value {
    subs.sort_by(|a, b| a.names.cmp(&b.names));
    let count = |f: fn(&Standing) -> bool| subs.iter().filter(|s| f(&s.standing)).count();
    let in_step = count(|s| *s == Standing::InStep);
    let suspected = count(|s| matches!(s, Standing::Suspected { .. }));
    let last_poll = subs.iter().map(|s| s.last_poll).max().map(stamp);
    let shown: Vec<Value> = subs
        .iter()
        .filter(|s| subs.len() == 1 || s.standing != Standing::InStep)
        .take(LAGGING_SHOWN)
        .map(|s| subscription_view(s, now))
        .collect();
    json!({
        "subscriptions": subs.len(),
        "in_step": in_step,
        "suspected_rejections": suspected,
        "last_poll": last_poll,
        "detail": shown,
    })
}

fn subscription_view(sub: &Subscription, now: SystemTime) -> Value {
    let (state, why) = match sub.standing {
        Standing::InStep => ("in step", None),
        Standing::CatchingUp => ("catching up", None),
        Standing::Behind { polls } => (
            "behind",
            Some(format!(
                "presented {:?} {polls} polls in a row after {:?} was served to it",
                sub.presented, sub.current
            )),
        ),
        Standing::Suspected { polls } => (
            "suspected rejection",
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
    };
    let behind_for = sub.out_of_step_since.map(|since| {
        humantime::format_duration(secs(now.duration_since(since).unwrap_or_default())).to_string()
    });
    json!({
        "names": sub.names.iter().take(NAMES_SHOWN).collect::<Vec<_>>(),
        "name_count": sub.names.len(),
        "wildcard": sub.wildcard,
        "presented": sub.presented,
        "current": sub.current,
        "upstream_version": upstream_version(&sub.current),
        "state": state,
        "why": why,
        "out_of_step_for": behind_for,
        "last_answer": if sub.body { 200 } else { 304 },
        "polls": sub.polls,
        "last_poll": stamp(sub.last_poll),
    })
}

/// Whole seconds (a view has no use for nanoseconds).
fn secs(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs())
}

fn stamp(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}
