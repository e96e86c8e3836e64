//! The REST clients seen recently, and where each stands: for `/debug/clients`.
//!
//! A client is what one REST poller looks like from here: its node id and
//! cluster, its user agent and the address it polls from. Per client, every
//! subscription (a type and a set of names, e.g. one EDS cluster) keeps the
//! version it last presented, the version it was answered at, and its
//! [`Standing`] (in step, catching up, behind, a suspected rejection) with
//! since when it has not been in step. Nothing here decides anything: the
//! standing comes from the source's rejection bookkeeping.
//!
//! Bounded: clients idle for the book's time-to-idle are forgotten, and so
//! are a client's subscriptions not polled for as long; at most
//! [`MAX_CLIENTS`] clients are kept (least recently used go first).

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use super::rejection::Standing;
use super::request::ParsedRequest;
use super::state::{upstream_version, Names};
use crate::xds::ResourceType;

/// Clients kept at most.
pub(crate) const MAX_CLIENTS: u64 = 100_000;
/// Names listed per subscription in a view (the count is always given).
const NAMES_SHOWN: usize = 8;
/// Subscriptions listed per type and client when they are not in step.
const LAGGING_SHOWN: usize = 20;

/// One poll, as answered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Poll<'a> {
    pub(crate) request: &'a ParsedRequest,
    pub(crate) kind: ResourceType,
    /// Where the connection came from (none in in-process tests).
    pub(crate) remote: Option<IpAddr>,
    /// The version it was answered at (a 304 or a body).
    pub(crate) current: &'a str,
    /// Whether a body went out (else a 304).
    pub(crate) body: bool,
    pub(crate) standing: Standing,
    /// Where its ADS config sources were pointed (the `Host` it sent), if
    /// they were rewritten for it.
    pub(crate) rewritten_for: Option<&'a str>,
}

/// One subscription of a node's clients, for CSDS.
#[derive(Debug, Clone)]
pub(crate) struct SubscriptionStatus {
    pub(crate) kind: ResourceType,
    /// `None`: wildcard.
    pub(crate) names: Option<Vec<String>>,
    /// The version it was last answered at.
    pub(crate) current: String,
    pub(crate) standing: Standing,
    pub(crate) last_poll: SystemTime,
    /// When a body last went out to it.
    pub(crate) last_body: Option<SystemTime>,
}

/// The clients of one node id, for CSDS.
#[derive(Debug, Clone)]
pub(crate) struct NodeClients {
    pub(crate) node_id: String,
    pub(crate) cluster: String,
    pub(crate) user_agent: String,
    pub(crate) subscriptions: Vec<SubscriptionStatus>,
}

/// Every REST client seen within the time-to-idle.
#[derive(Debug)]
pub(crate) struct ClientBook {
    clients: moka::sync::Cache<u64, Arc<Mutex<Client>>>,
    ttl: Duration,
}

#[derive(Debug)]
struct Client {
    node_id: String,
    cluster: String,
    user_agent: String,
    remote: Option<IpAddr>,
    rewritten_for: Option<String>,
    first_seen: SystemTime,
    last_poll: SystemTime,
    subscriptions: HashMap<(ResourceType, u64), Subscription>,
}

#[derive(Debug)]
struct Subscription {
    names: Vec<String>,
    wildcard: bool,
    presented: String,
    current: String,
    standing: Standing,
    body: bool,
    last_body: Option<SystemTime>,
    polls: u64,
    last_poll: SystemTime,
    /// Since when it has not been in step (none while in step).
    out_of_step_since: Option<SystemTime>,
}

impl ClientBook {
    /// A book forgetting clients (and subscriptions) idle for `ttl`.
    pub(crate) fn new(ttl: Duration) -> ClientBook {
        ClientBook {
            clients: moka::sync::Cache::builder()
                .max_capacity(MAX_CLIENTS)
                .time_to_idle(ttl)
                .build(),
            ttl,
        }
    }

    /// Records one answered poll.
    pub(crate) fn record(&self, poll: Poll<'_>) {
        let request = poll.request;
        let key = client_key(request, poll.remote);
        let now = SystemTime::now();
        let client = self.clients.get_with(key, || {
            Arc::new(Mutex::new(Client {
                node_id: request.node_id().to_owned(),
                cluster: request.node_cluster().to_owned(),
                user_agent: request.user_agent_name().to_owned(),
                remote: poll.remote,
                rewritten_for: None,
                first_seen: now,
                last_poll: now,
                subscriptions: HashMap::new(),
            }))
        });
        let mut client = client.lock().unwrap_or_else(|p| p.into_inner());
        client.last_poll = now;
        if client.rewritten_for.as_deref() != poll.rewritten_for {
            client.rewritten_for = poll.rewritten_for.map(str::to_owned);
        }
        let entry = client
            .subscriptions
            .entry((poll.kind, request.subscription()))
            .or_insert_with(|| Subscription {
                names: match request.names() {
                    Names::Wildcard => Vec::new(),
                    Names::Named(names) => names.iter().cloned().collect(),
                },
                wildcard: matches!(request.names(), Names::Wildcard),
                presented: String::new(),
                current: String::new(),
                standing: Standing::InStep,
                body: false,
                last_body: None,
                polls: 0,
                last_poll: now,
                out_of_step_since: None,
            });
        entry.presented.clear();
        entry.presented.push_str(request.version_info());
        entry.current.clear();
        entry.current.push_str(poll.current);
        entry.body = poll.body;
        if poll.body {
            entry.last_body = Some(now);
        }
        entry.polls += 1;
        entry.last_poll = now;
        entry.standing = poll.standing;
        if poll.standing == Standing::InStep {
            entry.out_of_step_since = None;
        } else {
            entry.out_of_step_since.get_or_insert(now);
        }
        if entry.polls == 1 && client.subscriptions.len().is_multiple_of(1024) {
            let ttl = self.ttl;
            client
                .subscriptions
                .retain(|_, s| now.duration_since(s.last_poll).unwrap_or_default() < ttl);
        }
    }

    /// Where the config sources of `node_id`'s most recent client were
    /// rewritten to, if they were (what `/debug/config` shows it as).
    pub(crate) fn rewritten_for(&self, node_id: &str) -> Option<String> {
        self.clients
            .iter()
            .filter_map(|(_, client)| {
                let client = client.lock().unwrap_or_else(|p| p.into_inner());
                (client.node_id == node_id)
                    .then(|| (client.last_poll, client.rewritten_for.clone()))
            })
            .max_by_key(|(last, _)| *last)
            .and_then(|(_, host)| host)
    }

    /// The clients of each node id (clients of one node merged), sorted by
    /// node id, with the subscriptions polled within the time-to-idle.
    pub(crate) fn nodes(&self) -> Vec<NodeClients> {
        let now = SystemTime::now();
        let mut nodes: BTreeMap<String, NodeClients> = BTreeMap::new();
        for (_, client) in self.clients.iter() {
            let client = client.lock().unwrap_or_else(|p| p.into_inner());
            let node = nodes
                .entry(client.node_id.clone())
                .or_insert_with(|| NodeClients {
                    node_id: client.node_id.clone(),
                    cluster: client.cluster.clone(),
                    user_agent: client.user_agent.clone(),
                    subscriptions: Vec::new(),
                });
            let live = client
                .subscriptions
                .iter()
                .filter(|(_, s)| now.duration_since(s.last_poll).unwrap_or_default() < self.ttl);
            node.subscriptions
                .extend(live.map(|((kind, _), s)| SubscriptionStatus {
                    kind: *kind,
                    names: (!s.wildcard).then(|| s.names.clone()),
                    current: s.current.clone(),
                    standing: s.standing,
                    last_poll: s.last_poll,
                    last_body: s.last_body,
                }));
        }
        nodes.into_values().collect()
    }

    /// How many clients were seen per (node id, cluster).
    pub(crate) fn per_node(&self) -> HashMap<(String, String), usize> {
        let mut counts = HashMap::new();
        for (_, client) in self.clients.iter() {
            let client = client.lock().unwrap_or_else(|p| p.into_inner());
            *counts
                .entry((client.node_id.clone(), client.cluster.clone()))
                .or_default() += 1;
        }
        counts
    }

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

/// A client: node id, cluster, user agent, remote address.
fn client_key(request: &ParsedRequest, remote: Option<IpAddr>) -> u64 {
    let mut hasher = xxhash_rust::xxh3::Xxh3::default();
    request.node_id().hash(&mut hasher);
    request.node_cluster().hash(&mut hasher);
    request.user_agent_name().hash(&mut hasher);
    remote.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::ParsedRequests;
    use crate::config::SessionKey;

    fn request(version: &str, names: &[&str]) -> Arc<ParsedRequest> {
        let body = json!({
            "version_info": version,
            "node": {"id": "edge-1", "cluster": "edge", "user_agent_name": "envoy"},
            "resource_names": names,
        });
        ParsedRequests::new(SessionKey::Node)
            .parse(body.to_string().into())
            .unwrap()
    }

    fn record(book: &ClientBook, request: &ParsedRequest, current: &str, standing: Standing) {
        book.record(Poll {
            request,
            kind: ResourceType::Endpoints,
            remote: Some(IpAddr::from([127, 0, 0, 1])),
            current,
            body: request.version_info() != current,
            standing,
            rewritten_for: Some("xds_cluster"),
        });
    }

    #[test]
    fn a_client_shows_each_subscription_that_is_not_in_step() {
        let book = ClientBook::new(Duration::from_secs(60));
        let a = request("1~aaaaaaaaaaaa", &["a"]);
        let b = request("1~bbbbbbbbbbbb", &["b"]);
        record(&book, &a, "1~aaaaaaaaaaaa", Standing::InStep);
        record(
            &book,
            &b,
            "2~cccccccccccc",
            Standing::Suspected { polls: 3 },
        );
        let view = book.view();
        let clients = view["clients"].as_array().unwrap();
        assert_eq!(clients.len(), 1, "{view}");
        let client = &clients[0];
        assert_eq!(client["node_id"], "edge-1");
        assert_eq!(client["remote"], "127.0.0.1");
        assert_eq!(book.rewritten_for("edge-1").as_deref(), Some("xds_cluster"));
        assert_eq!(book.rewritten_for("nobody"), None);
        let eds = &client["types"]["endpoints"];
        assert_eq!(eds["subscriptions"], 2, "{eds}");
        assert_eq!(eds["in_step"], 1);
        assert_eq!(eds["suspected_rejections"], 1);
        let detail = eds["detail"].as_array().unwrap();
        assert_eq!(detail.len(), 1, "only the one not in step: {eds}");
        assert_eq!(detail[0]["names"], json!(["b"]));
        assert_eq!(detail[0]["state"], "suspected rejection");
        assert_eq!(detail[0]["upstream_version"], "2");
        assert!(detail[0]["why"].as_str().unwrap().contains("rejected"));

        // Back in step: nothing to detail, the out-of-step time is gone.
        record(
            &book,
            &request("2~cccccccccccc", &["b"]),
            "2~cccccccccccc",
            Standing::InStep,
        );
        let view = book.view();
        let eds = &view["clients"][0]["types"]["endpoints"];
        assert_eq!(eds["in_step"], 2, "{eds}");
        assert_eq!(eds["detail"], json!([]));
    }

    #[test]
    fn another_address_is_another_client() {
        let book = ClientBook::new(Duration::from_secs(60));
        let a = request("", &[]);
        for ip in [[127, 0, 0, 1], [127, 0, 0, 2]] {
            book.record(Poll {
                request: &a,
                kind: ResourceType::Clusters,
                remote: Some(IpAddr::from(ip)),
                current: "1~aaaaaaaaaaaa",
                body: true,
                standing: Standing::CatchingUp,
                rewritten_for: None,
            });
        }
        let view = book.view();
        assert_eq!(view["clients"].as_array().unwrap().len(), 2, "{view}");
        let cds = &view["clients"][0]["types"]["clusters"];
        assert_eq!(cds["detail"][0]["state"], "catching up", "{cds}");
        assert_eq!(cds["detail"][0]["wildcard"], true);
    }
}
