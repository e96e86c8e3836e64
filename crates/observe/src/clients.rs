//! The REST clients seen recently, and where each stands: for `/debug/clients`.
//!
//! A client is one REST poller: its node id, cluster, user agent and
//! address. Per client, every subscription (a type and a set of names, e.g.
//! one EDS cluster) keeps the version it last presented, the version it was
//! answered at, its [`Standing`] (in step, catching up, behind, a suspected
//! rejection) and since when it has not been in step, and its
//! [`RejectionLog`] (the last versions a body went out at, its run of polls
//! presenting an older one). The book is the one ledger of what was served
//! to whom: each answer is written into it once ([`ClientBook::book`], which
//! judges where the poll stands and spots suspected rejections), and
//! `?changes` asks it whether a presented version went out to this client
//! ([`ClientBook::was_served`]). A client that never presented a version,
//! watched nor POSTed as an Envoy is a one-shot reader (curl, a script),
//! shown apart from the subscribers (an Envoy that rejected its first
//! version presents none, and is a subscriber all the same).
//!
//! Bounded: clients, and a client's subscriptions, idle for the book's
//! time-to-idle are forgotten. One client keeps at most
//! [`CLIENT_SUBSCRIPTIONS`] subscriptions and [`CLIENT_BYTES`] of them (least
//! recently polled go first), and the whole book at most its share of the
//! memory budget (`config::MemoryShares`; least recently used clients go
//! first): a client polling a new set of thousands of names each time cannot
//! grow it without bound.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use super::rejection::{Observation, RejectionLog, Standing, Suspicion};
use crate::cache::SubscriptionKey;
use crate::cache::{upstream_version, ClientKey, ParsedRequest, Resource, ResourceSet};
use crate::xds::ResourceType;

mod view;

pub use view::{ClientRole, ClientView, ClientsView, SubscriptionState, SubscriptionView};

/// Subscriptions one client keeps at most (an Envoy polling REST EDS has one
/// per cluster).
const CLIENT_SUBSCRIPTIONS: usize = 4096;
/// Bytes of subscriptions one client keeps at most.
const CLIENT_BYTES: usize = 4 * 1024 * 1024;
/// What a client weighs before its subscriptions (its strings, the map).
const CLIENT_BASE_BYTES: usize = 512;
/// What a subscription weighs besides its names and its rejection log's
/// versions (times, counts, its slot).
const SUBSCRIPTION_BASE_BYTES: usize = 256;

/// One poll as it was answered, for the book ([`ClientBook::book`]).
#[derive(Debug, Clone, Copy)]
pub struct AnsweredPoll<'a> {
    pub request: &'a ParsedRequest,
    pub kind: ResourceType,
    /// Where the connection came from (none in in-process tests).
    pub remote: Option<IpAddr>,
    /// The version it was answered at (a 304 or a body).
    pub current: &'a str,
    /// Whether a body went out (else a 304).
    pub body: bool,
    /// The version its standing is judged against: what the cache answered
    /// it at, before make-before-break held that back. `None`: not judged
    /// (a proxy's poll that named no client, or an answer holding a type
    /// served opaque); it is then in step after a 304, else catching up.
    pub judged: Option<&'a str>,
    /// Where its ADS config sources were pointed (the `Host` it sent), if
    /// they were rewritten for it.
    pub rewritten_for: Option<&'a str>,
    /// An event of a watch stream (`?watch`): the client follows changes,
    /// whatever version it presented.
    pub watch: bool,
    /// The resources the body was made from, when the book keeps what each
    /// client holds (`--make-before-break`; see [`ClientBook::holds`]).
    pub served: Option<&'a Arc<ResourceSet>>,
}

/// One subscription of a node's clients, for CSDS.
#[derive(Debug, Clone)]
pub struct SubscriptionStatus {
    pub kind: ResourceType,
    /// `None`: wildcard.
    pub names: Option<Vec<String>>,
    /// The version it was last answered at.
    pub current: String,
    pub standing: Standing,
    pub last_poll: SystemTime,
    /// When a body last went out to it.
    pub last_body: Option<SystemTime>,
    /// The message of the NACK its latest poll was, if it was one.
    pub nack: Option<String>,
}

/// The clients of one node id, for CSDS.
#[derive(Debug, Clone)]
pub struct NodeClients {
    pub node_id: String,
    pub cluster: String,
    pub user_agent: String,
    pub subscriptions: Vec<SubscriptionStatus>,
}

/// Every REST client seen within the time-to-idle.
#[derive(Debug)]
pub struct ClientBook {
    clients: moka::sync::Cache<ClientKey, Arc<Mutex<Client>>>,
    ttl: Duration,
    /// Polls presenting the same older version that make a suspicion
    /// (`--rejection-threshold`).
    threshold: u32,
}

#[derive(Debug)]
struct Client {
    node_id: String,
    cluster: String,
    user_agent: String,
    remote: Option<IpAddr>,
    rewritten_for: Option<String>,
    /// Whether it ever presented a version, watched or POSTed as an Envoy:
    /// it follows changes (else a one-shot reader, such as curl or a script).
    subscriber: bool,
    first_seen: SystemTime,
    last_poll: SystemTime,
    subscriptions: HashMap<(ResourceType, SubscriptionKey), Subscription>,
    /// What its subscriptions weigh (sum of [`Subscription::bytes`]).
    bytes: usize,
}

impl Client {
    /// What the book weighs it by.
    fn weight(&self) -> u32 {
        u32::try_from(self.bytes.saturating_add(CLIENT_BASE_BYTES)).unwrap_or(u32::MAX)
    }

    /// Forgets its least recently polled subscriptions (never `keep`, the
    /// one just polled) until it is within its bounds.
    fn shed(&mut self, keep: (ResourceType, SubscriptionKey)) {
        while self.subscriptions.len() > CLIENT_SUBSCRIPTIONS
            || (self.bytes > CLIENT_BYTES && self.subscriptions.len() > 1)
        {
            let oldest = self
                .subscriptions
                .iter()
                .filter(|(key, _)| **key != keep)
                .min_by_key(|(_, s)| s.last_poll)
                .map(|(key, _)| *key);
            let Some(dropped) = oldest.and_then(|key| self.subscriptions.remove(&key)) else {
                return;
            };
            self.bytes = self.bytes.saturating_sub(dropped.bytes);
        }
    }
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
    /// The versions served to it and its run of polls behind.
    rejection: RejectionLog,
    /// The message of the NACK its latest poll was, if it was one.
    nack: Option<String>,
    /// The resources its latest body was made from, when the poll said
    /// (shared with the states that hold them: a pointer's weight).
    served: Option<Arc<ResourceSet>>,
    /// What it weighs: its names, its log's versions and
    /// [`SUBSCRIPTION_BASE_BYTES`].
    bytes: usize,
}

impl Subscription {
    /// Runs `f` on its rejection log, keeping [`Self::bytes`] in step;
    /// what `f` answered, and the bytes the log grew by (below 0: shrank).
    fn with_log<R>(&mut self, f: impl FnOnce(&mut RejectionLog) -> R) -> (R, isize) {
        let held = self.rejection.bytes();
        let answer = f(&mut self.rejection);
        let grown = self.rejection.bytes() as isize - held as isize;
        self.bytes = self.bytes.saturating_add_signed(grown);
        (answer, grown)
    }
}

impl ClientBook {
    /// A book forgetting clients (and subscriptions) idle for `ttl`, which
    /// suspects a rejection after `threshold` polls presenting the same
    /// older version, holding at most its default bound of clients.
    #[cfg(any(test, feature = "test-support"))]
    pub fn new(ttl: Duration, threshold: u32) -> ClientBook {
        ClientBook::holding(ttl, threshold, crate::config::MemoryShares::default().book)
    }

    /// `new`, weighing at most `bytes` of clients.
    pub fn holding(ttl: Duration, threshold: u32, bytes: u64) -> ClientBook {
        ClientBook {
            clients: moka::sync::Cache::builder()
                .max_capacity(bytes)
                .weigher(|_, client: &Arc<Mutex<Client>>| crate::sync::lock(client).weight())
                .time_to_idle(ttl)
                .build(),
            ttl,
            threshold,
        }
    }

    /// Writes one answered poll into the book: where its subscription
    /// stands, judged against the version the cache answered (`poll.judged`),
    /// and what went out. A suspicion the first time the client has
    /// presented the same older version the book's threshold times after
    /// being served the judged one, or when its poll is a NACK (see
    /// `rejection.rs`).
    pub fn book(&self, poll: AnsweredPoll<'_>) -> Option<Suspicion> {
        let request = poll.request;
        let key = request.client(poll.remote);
        let now = SystemTime::now();
        let shared = self.clients.get_with(key, || {
            Arc::new(Mutex::new(Client {
                node_id: request.node_id().to_owned(),
                cluster: request.node_cluster().to_owned(),
                user_agent: request.user_agent_name().to_owned(),
                remote: poll.remote,
                rewritten_for: None,
                subscriber: false,
                first_seen: now,
                last_poll: now,
                subscriptions: HashMap::new(),
                bytes: 0,
            }))
        });
        let mut guard = crate::sync::lock(&shared);
        // Fields borrowed apart: a subscription and the client's bytes.
        let client = &mut *guard;
        let before = client.weight();
        client.last_poll = now;
        // An Envoy follows changes even while it presents no version (it
        // rejected its first one): that is the trouble the book is for.
        client.subscriber |=
            poll.watch || !request.version_info().is_empty() || request.may_be_envoy();
        if client.rewritten_for.as_deref() != poll.rewritten_for {
            client.rewritten_for = poll.rewritten_for.map(str::to_owned);
        }
        let subscription = (poll.kind, request.subscription(poll.remote));
        let entry = client
            .subscriptions
            .entry(subscription)
            .or_insert_with(|| Subscription {
                bytes: request.names().held_bytes() + SUBSCRIPTION_BASE_BYTES,
                names: request
                    .names()
                    .asked()
                    .into_iter()
                    .flatten()
                    .cloned()
                    .collect(),
                wildcard: request.names().asked().is_none(),
                presented: String::new(),
                current: String::new(),
                standing: Standing::InStep,
                body: false,
                last_body: None,
                polls: 0,
                last_poll: now,
                out_of_step_since: None,
                rejection: RejectionLog::default(),
                nack: None,
                served: None,
            });
        let nack = request.error_detail().map(|e| e.message.as_str());
        // Judged before a body at `current` counts as served to it.
        let threshold = self.threshold;
        let ((standing, suspicion), mut grown) = match poll.judged {
            None if poll.body => ((Standing::CatchingUp, None), 0),
            None => ((Standing::InStep, None), 0),
            Some(current) => entry.with_log(|log| {
                let seen = Observation {
                    presented: request.version_info(),
                    current,
                    envoy: request.may_be_envoy(),
                    nack,
                };
                let suspicion = log.observe(seen, threshold);
                (log.sync(seen, threshold), suspicion)
            }),
        };
        if entry.nack.as_deref() != nack {
            let held = entry.nack.as_ref().map_or(0, String::len);
            entry.nack = nack.map(str::to_owned);
            let nack_grown = nack.map_or(0, str::len) as isize - held as isize;
            entry.bytes = entry.bytes.saturating_add_signed(nack_grown);
            grown += nack_grown;
        }
        entry.presented.clear();
        entry.presented.push_str(request.version_info());
        entry.current.clear();
        entry.current.push_str(poll.current);
        entry.body = poll.body;
        if poll.body {
            entry.last_body = Some(now);
            entry.served = poll.served.cloned();
            grown += entry.with_log(|log| log.served(poll.current)).1;
        }
        // A new subscription's bytes are added whole below.
        if entry.polls > 0 {
            client.bytes = client.bytes.saturating_add_signed(grown);
        }
        entry.polls += 1;
        entry.last_poll = now;
        entry.standing = standing;
        entry.out_of_step_since =
            (standing != Standing::InStep).then(|| entry.out_of_step_since.unwrap_or(now));
        if entry.polls == 1 {
            client.bytes += entry.bytes;
            if client.subscriptions.len().is_multiple_of(1024) {
                let ttl = self.ttl;
                let mut freed = 0;
                client.subscriptions.retain(|_, s| {
                    let live = now.duration_since(s.last_poll).unwrap_or_default() < ttl;
                    freed += if live { 0 } else { s.bytes };
                    live
                });
                client.bytes = client.bytes.saturating_sub(freed);
            }
            client.shed(subscription);
        }
        let reweigh = before != client.weight();
        drop(guard);
        if reweigh {
            // Re-weighed by the book (the client's lock is not held here).
            self.clients.insert(key, shared);
        }
        suspicion
    }

    /// Whether a body at `version` went out to `request`'s client (from
    /// `remote`) for this subscription (its type and names) among its last
    /// `SERVED_VERSIONS`. Never for the empty version.
    pub fn was_served(
        &self,
        request: &ParsedRequest,
        kind: ResourceType,
        remote: Option<IpAddr>,
        version: &str,
    ) -> bool {
        if version.is_empty() {
            return false;
        }
        let Some(client) = self.clients.get(&request.client(remote)) else {
            return false;
        };
        let client = crate::sync::lock(&client);
        let key = (kind, request.subscription(remote));
        client
            .subscriptions
            .get(&key)
            .is_some_and(|s| s.rejection.has_served(version))
    }

    /// The resource `name` of `kind` as the latest body of one of
    /// `request`'s client's (from `remote`) subscriptions held it, if one
    /// did: what that client was served of it, as far as the book knows
    /// (only bodies recorded with their resources count).
    pub fn holds(
        &self,
        request: &ParsedRequest,
        remote: Option<IpAddr>,
        kind: ResourceType,
        name: &str,
    ) -> Option<Arc<Resource>> {
        let client = self.clients.get(&request.client(remote))?;
        let client = crate::sync::lock(&client);
        client
            .subscriptions
            .iter()
            .filter(|((of, _), s)| *of == kind && (s.wildcard || s.names.iter().any(|n| n == name)))
            .find_map(|(_, s)| s.served.as_ref()?.get(name).cloned())
    }

    /// What the clients of `node_id` hold now: their subscriptions, and the
    /// bytes those weigh.
    #[cfg(any(test, feature = "test-support"))]
    pub fn held_by(&self, node_id: &str) -> crate::cache::MemoSize {
        let (mut entries, mut bytes) = (0, 0);
        for (_, client) in self.clients.iter() {
            let client = crate::sync::lock(&client);
            if client.node_id == node_id {
                entries += client.subscriptions.len() as u64;
                bytes += client.bytes as u64;
            }
        }
        crate::cache::MemoSize { entries, bytes }
    }

    /// Where the config sources of `node_id`'s most recent client were
    /// rewritten to, if they were (what `/debug/config` shows it as).
    pub fn rewritten_for(&self, node_id: &str) -> Option<String> {
        self.clients
            .iter()
            .filter_map(|(_, client)| {
                let client = crate::sync::lock(&client);
                (client.node_id == node_id)
                    .then(|| (client.last_poll, client.rewritten_for.clone()))
            })
            .max_by_key(|(last, _)| *last)
            .and_then(|(_, host)| host)
    }

    /// The clients of each node id (clients of one node merged), sorted by
    /// node id, with the subscriptions polled within the time-to-idle.
    pub fn nodes(&self) -> Vec<NodeClients> {
        let now = SystemTime::now();
        let mut nodes: BTreeMap<String, NodeClients> = BTreeMap::new();
        for (_, client) in self.clients.iter() {
            let client = crate::sync::lock(&client);
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
                    nack: s.nack.clone(),
                }));
        }
        nodes.into_values().collect()
    }

    /// How many clients were seen per (node id, cluster).
    pub fn per_node(&self) -> HashMap<(String, String), usize> {
        let mut counts = HashMap::new();
        for (_, client) in self.clients.iter() {
            let client = crate::sync::lock(&client);
            *counts
                .entry((client.node_id.clone(), client.cluster.clone()))
                .or_default() += 1;
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::ParsedRequests;
    use crate::config::SessionKey;
    use serde_json::json;

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

    /// The book's view as `/debug/clients` serves it.
    fn served(book: &ClientBook) -> serde_json::Value {
        serde_json::to_value(book.view()).unwrap()
    }

    /// Books `request` answered at `current` and judged against it: a
    /// body unless it presents `current`.
    fn record(book: &ClientBook, request: &ParsedRequest, current: &str) -> Option<Suspicion> {
        book.book(AnsweredPoll {
            request,
            kind: ResourceType::Endpoints,
            remote: Some(IpAddr::from([127, 0, 0, 1])),
            current,
            body: request.version_info() != current,
            judged: Some(current),
            rewritten_for: Some("xds_cluster"),
            watch: false,
            served: None,
        })
    }

    /// Makes `request`'s subscription a suspected rejection of `current`
    /// in a book of threshold 3: a body at the version it presents went
    /// out, then one at `current`, and it kept presenting the older one.
    fn reject(book: &ClientBook, request: &ParsedRequest, current: &str) {
        let older = request.version_info();
        if !older.is_empty() {
            record(book, &request.presenting(""), older);
        }
        let suspicions: Vec<_> = (0..4)
            .filter_map(|_| record(book, request, current))
            .collect();
        assert_eq!(suspicions.len(), 1, "{suspicions:?}");
    }

    #[test]
    fn a_client_shows_each_subscription_that_is_not_in_step() {
        let book = ClientBook::new(Duration::from_secs(60), 3);
        let a = request("1~aaaaaaaaaaaa", &["a"]);
        let b = request("1~bbbbbbbbbbbb", &["b"]);
        record(&book, &a, "1~aaaaaaaaaaaa");
        reject(&book, &b, "2~cccccccccccc");
        let view = served(&book);
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
        record(&book, &request("2~cccccccccccc", &["b"]), "2~cccccccccccc");
        let view = served(&book);
        let eds = &view["clients"][0]["types"]["endpoints"];
        assert_eq!(eds["in_step"], 2, "{eds}");
        assert_eq!(eds["detail"], json!([]));
    }

    /// An Envoy that rejected its very first version keeps presenting no
    /// version, as curl does: it is a subscriber all the same, so its
    /// suspected rejection shows among the subscribers, never filed away
    /// among the one-shot readers.
    #[test]
    fn an_envoy_presenting_no_version_is_a_subscriber() {
        let book = ClientBook::new(Duration::from_secs(60), 3);
        let envoy = request("", &["a"]);
        assert!(envoy.may_be_envoy());
        reject(&book, &envoy, "1~aaaaaaaaaaaa");
        let view = served(&book);
        assert_eq!(view["clients"][0]["role"], "subscriber", "{view}");
        assert_eq!(
            (&view["subscribers"], &view["readers"]),
            (&json!(1), &json!(0))
        );
        // A curl presenting no version is a reader.
        let curl = ParsedRequests::new(SessionKey::Node)
            .parse(json!({"node": {"id": "curl-1"}}).to_string().into())
            .unwrap();
        record(&book, &curl, "1~aaaaaaaaaaaa");
        let view = served(&book);
        assert_eq!(
            (&view["subscribers"], &view["readers"]),
            (&json!(1), &json!(1)),
            "{view}"
        );
    }

    #[test]
    fn another_address_is_another_client() {
        let book = ClientBook::new(Duration::from_secs(60), 3);
        let a = request("", &[]);
        for ip in [[127, 0, 0, 1], [127, 0, 0, 2]] {
            book.book(AnsweredPoll {
                request: &a,
                kind: ResourceType::Clusters,
                remote: Some(IpAddr::from(ip)),
                current: "1~aaaaaaaaaaaa",
                body: true,
                judged: Some("1~aaaaaaaaaaaa"),
                rewritten_for: None,
                watch: false,
                served: None,
            });
        }
        let view = served(&book);
        assert_eq!(view["clients"].as_array().unwrap().len(), 2, "{view}");
        let cds = &view["clients"][0]["types"]["clusters"];
        assert_eq!(cds["detail"][0]["state"], "catching up", "{cds}");
        assert_eq!(cds["detail"][0]["wildcard"], true);
    }

    /// One client polling a new set of a thousand names
    /// each time, or thousands of single names, keeps what it is owed and no
    /// more: its least recently polled subscriptions go first.
    #[test]
    fn one_client_is_bounded_by_count_and_by_bytes() {
        let book = ClientBook::new(Duration::from_secs(60), 3);
        let memo = ParsedRequests::new(SessionKey::Node);
        for i in 0..100 {
            let names: Vec<String> = (0..1000).map(|n| format!("c{}", i * 1000 + n)).collect();
            let body = json!({"node": {"id": "edge-1"}, "resource_names": names});
            let request = memo.parse(body.to_string().into()).unwrap();
            record(&book, &request, "1~aaaaaaaaaaaa");
        }
        let held = book.held_by("edge-1");
        assert!(held.bytes <= CLIENT_BYTES as u64, "{held:?}");
        assert!(held.entries < 100 && held.entries > 50, "{held:?}");
        let newest = book.nodes()[0].subscriptions.iter().any(|s| {
            s.names
                .as_ref()
                .is_some_and(|n| n.contains(&"c99999".to_owned()))
        });
        assert!(newest, "the newest subscription is kept");

        let book = ClientBook::new(Duration::from_secs(60), 3);
        for i in 0..CLIENT_SUBSCRIPTIONS + 100 {
            let name = format!("c{i}");
            let request = request("", &[name.as_str()]);
            record(&book, &request, "1~aaaaaaaaaaaa");
        }
        let held = book.held_by("edge-1");
        assert_eq!(held.entries, CLIENT_SUBSCRIPTIONS as u64, "{held:?}");
    }

    fn parsed(key: SessionKey, body: &str) -> Arc<ParsedRequest> {
        ParsedRequests::new(key)
            .parse(bytes::Bytes::from(body.to_owned()))
            .unwrap()
    }

    /// A body at `version` went out to `request`'s client.
    fn served_at(book: &ClientBook, request: &ParsedRequest, version: &str) {
        book.book(AnsweredPoll {
            request,
            kind: ResourceType::Clusters,
            remote: None,
            current: version,
            body: true,
            judged: Some(version),
            rewritten_for: None,
            watch: false,
            served: None,
        });
    }

    fn was_served(book: &ClientBook, request: &ParsedRequest, version: &str) -> bool {
        book.was_served(request, ResourceType::Clusters, None, version)
    }

    /// A version is recalled only for the client it
    /// was served to, so presenting another node's version reveals nothing
    /// of what that node held.
    #[test]
    fn a_version_is_recalled_only_for_the_node_it_was_served_to() {
        let book = ClientBook::new(Duration::from_secs(60), 3);
        let a = parsed(
            SessionKey::Node,
            r#"{"version_info":"1~x","node":{"id":"a","cluster":"c"}}"#,
        );
        served_at(&book, &a, "1~x");
        assert!(was_served(&book, &a, "1~x"));
        assert!(!was_served(&book, &a, ""));
        assert!(!was_served(&book, &a, "0~y"));
        for other in [
            r#"{"node":{"id":"b","cluster":"c"}}"#,
            r#"{"node":{"id":"a","cluster":"other"}}"#,
            r#"{"node":{"id":"a","cluster":"c","metadata":{"k":"v"}}}"#,
            r#"{}"#,
        ] {
            assert!(
                !was_served(&book, &parsed(SessionKey::Node, other), "1~x"),
                "{other}"
            );
        }
        // Two nodes sharing one session (`--session-key cluster`) still keep
        // apart histories.
        let ca = parsed(SessionKey::Cluster, r#"{"node":{"id":"a","cluster":"c"}}"#);
        let cb = parsed(SessionKey::Cluster, r#"{"node":{"id":"b","cluster":"c"}}"#);
        assert_eq!(ca.identity(), cb.identity());
        served_at(&book, &ca, "2~x");
        assert!(was_served(&book, &ca, "2~x"));
        assert!(!was_served(&book, &cb, "2~x"));
        served_at(&book, &cb, "2~x");
        assert!(was_served(&book, &cb, "2~x"));
        // Other names, another type, another address: another subscription.
        let named = parsed(
            SessionKey::Cluster,
            r#"{"node":{"id":"a","cluster":"c"},"resource_names":["x"]}"#,
        );
        assert!(!was_served(&book, &named, "2~x"));
        assert!(!book.was_served(&ca, ResourceType::Endpoints, None, "2~x"));
        let elsewhere = Some(IpAddr::from([127, 0, 0, 2]));
        assert!(!book.was_served(&ca, ResourceType::Clusters, elsewhere, "2~x"));
    }

    /// The last [`SERVED_VERSIONS`] versions served are remembered, a 304
    /// adds none, and a version served again is not counted twice.
    #[test]
    fn the_last_versions_served_with_a_body_are_remembered() {
        let book = ClientBook::new(Duration::from_secs(60), 3);
        let a = parsed(SessionKey::Node, r#"{"node":{"id":"a","cluster":"c"}}"#);
        let versions: Vec<String> = (0..=super::super::rejection::SERVED_VERSIONS)
            .map(|i| format!("{i}~x"))
            .collect();
        for version in &versions {
            served_at(&book, &a, version);
            served_at(&book, &a, version);
        }
        assert!(!was_served(&book, &a, &versions[0]), "the oldest is gone");
        for version in &versions[1..] {
            assert!(was_served(&book, &a, version), "{version}");
        }
        book.book(AnsweredPoll {
            request: &a,
            kind: ResourceType::Clusters,
            remote: None,
            current: "304~x",
            body: false,
            judged: None,
            rewritten_for: None,
            watch: false,
            served: None,
        });
        assert!(!was_served(&book, &a, "304~x"));
        assert!(was_served(&book, &a, &versions[1]));
    }

    /// Rejections are counted per subscription: a sibling in step does not
    /// hide another's rejection, and a subscription the book never served
    /// is catching up and never suspected.
    #[test]
    fn rejections_are_counted_per_subscription() {
        let book = ClientBook::new(Duration::from_secs(60), 2);
        let body = |version: &str, names: &str| {
            format!(
                r#"{{"version_info":"{version}","node":{{"id":"a","cluster":"c","user_agent_name":"envoy"}},"resource_names":["{names}"]}}"#
            )
        };
        let (v1, v2) = ("1~aaaaaaaaaaaa", "2~bbbbbbbbbbbb");
        let at = |version: &str, names: &str| parsed(SessionKey::Node, &body(version, names));
        for names in ["x", "y"] {
            served_at(&book, &at("", names), v1);
            served_at(&book, &at(v1, names), v2);
        }
        // Answered at v2, and where its subscription stands then.
        let poll = |version: &str, name: &str| {
            let request = at(version, name);
            let suspicion = book.book(AnsweredPoll {
                request: &request,
                kind: ResourceType::Clusters,
                remote: None,
                current: v2,
                body: version != v2,
                judged: Some(v2),
                rewritten_for: None,
                watch: false,
                served: None,
            });
            let nodes = book.nodes();
            let subscription = nodes[0]
                .subscriptions
                .iter()
                .find(|s| s.names.as_deref() == Some(&[name.to_owned()][..]))
                .map(|s| s.standing);
            (subscription, suspicion)
        };
        assert_eq!(poll(v2, "y"), (Some(Standing::InStep), None));
        assert_eq!(poll(v1, "x").0, Some(Standing::Behind { polls: 1 }));
        let (standing, suspicion) = poll(v1, "x");
        assert_eq!(standing, Some(Standing::Suspected { polls: 2 }));
        assert_eq!(suspicion.map(|s| s.polls), Some(2));
        // Never served: catching up.
        for _ in 0..3 {
            assert_eq!(poll(v1, "z"), (Some(Standing::CatchingUp), None));
        }
    }

    /// Not judged (a proxy's poll naming no client, an answer served
    /// opaque): in step after a 304, catching up after a body, and never
    /// suspected, even presenting an older version again and again.
    #[test]
    fn a_poll_not_judged_is_never_suspected() {
        let book = ClientBook::new(Duration::from_secs(60), 2);
        let (v1, v2) = ("1~aaaaaaaaaaaa", "2~bbbbbbbbbbbb");
        let older = request(v1, &["a"]);
        served_at(&book, &older.presenting(""), v1);
        served_at(&book, &older, v2);
        for body in [true, false, true, true] {
            let suspicion = book.book(AnsweredPoll {
                request: &older,
                kind: ResourceType::Clusters,
                remote: None,
                current: v2,
                body,
                judged: None,
                rewritten_for: None,
                watch: false,
                served: None,
            });
            assert_eq!(suspicion, None);
            let standing = book.nodes()[0].subscriptions[0].standing;
            let expected = match body {
                true => Standing::CatchingUp,
                false => Standing::InStep,
            };
            assert_eq!(standing, expected);
        }
    }
}
