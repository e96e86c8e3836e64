//! The control plane behind the identities bench: the scripted ADS server
//! of the tests (`tests/support/fake_ads.rs`, in the bench's own process),
//! or go-control-plane (`tests/peers/go-control-plane`: its gRPC server over
//! its `SnapshotCache`, a process of its own, started `--record=false`).
//! `IDENTITIES_UPSTREAM=scripted` (the default) or `go-control-plane`.
//!
//! go-control-plane keys snapshots by node id, so each of the bench's
//! identities has a snapshot of its own: a change is one `PUT /snapshot`
//! for every node (`node=*`), and go-control-plane answers each node's
//! watches from its snapshot, as a control plane that computes config per
//! node does.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Instant;

use envoy_types::pb::google::protobuf::Any as PbAny;
use serde_json::Value;
use xds_gateway::xds::Codec;

use crate::{fake_ads, go_peer};

/// Which control plane the bench runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Scripted,
    GoControlPlane,
}

impl Kind {
    /// `IDENTITIES_UPSTREAM`, `scripted` when unset.
    pub fn from_env() -> Kind {
        match std::env::var("IDENTITIES_UPSTREAM").as_deref() {
            Err(_) | Ok("") | Ok("scripted") => Kind::Scripted,
            Ok("go-control-plane") => Kind::GoControlPlane,
            Ok(other) => {
                panic!("IDENTITIES_UPSTREAM={other:?}: expected `scripted` or `go-control-plane`")
            }
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Kind::Scripted => "scripted",
            Kind::GoControlPlane => "go-control-plane",
        }
    }
}

/// A running control plane, serving SotW and delta streams.
pub enum Upstream {
    Scripted(fake_ads::FakeAds),
    GoControlPlane {
        peer: go_peer::GoControlPlane,
        /// Every type's resources as `Any` JSON: a snapshot holds every type,
        /// so each change puts them all.
        resources: Mutex<BTreeMap<String, Vec<Value>>>,
        codec: Codec,
    },
}

impl Upstream {
    /// Starts `kind`; the scripted server serves delta streams when `delta`
    /// (go-control-plane always does).
    pub async fn start(kind: Kind, delta: bool) -> Upstream {
        match kind {
            Kind::Scripted if delta => Upstream::Scripted(fake_ads::FakeAds::start_delta().await),
            Kind::Scripted => Upstream::Scripted(fake_ads::FakeAds::start().await),
            Kind::GoControlPlane => Upstream::GoControlPlane {
                peer: go_peer::GoControlPlane::start_with("identities bench", &["--record=false"]),
                resources: Mutex::default(),
                codec: Codec::embedded(),
            },
        }
    }

    /// The gateway's `--upstream`.
    pub fn url(&self) -> String {
        match self {
            Upstream::Scripted(ads) => ads.url(),
            Upstream::GoControlPlane { peer, .. } => peer.upstream(),
        }
    }

    /// Whether a stream gets its next response only after it ACKed the
    /// last (go-control-plane: yes; the scripted server pushes regardless).
    pub fn needs_acks(&self) -> bool {
        matches!(self, Upstream::GoControlPlane { .. })
    }

    /// The requests the upstream received (the scripted server records
    /// them; go-control-plane's peer runs with recording off).
    pub fn requests(&self) -> Option<Vec<fake_ads::Recorded>> {
        match self {
            Upstream::Scripted(ads) => Some(ads.requests()),
            Upstream::GoControlPlane { .. } => None,
        }
    }

    /// When the upstream last handed a response to each node's stream, by
    /// node id (the scripted server notes it; go-control-plane does not).
    pub fn last_sent(&self) -> Option<HashMap<String, Instant>> {
        match self {
            Upstream::Scripted(ads) => Some(ads.last_sent()),
            Upstream::GoControlPlane { .. } => None,
        }
    }

    /// The upstream's process id, when it is a process of its own.
    pub fn pid(&self) -> Option<u32> {
        match self {
            Upstream::Scripted(_) => None,
            Upstream::GoControlPlane { peer, .. } => Some(peer.pid()),
        }
    }

    /// Serves `resources` as `type_url` at `version` to every identity,
    /// pushed to every stream subscribed to it.
    pub async fn set(&self, type_url: &str, version: &str, resources: Vec<PbAny>) {
        match self {
            Upstream::Scripted(ads) => ads.set(type_url, version, resources),
            Upstream::GoControlPlane {
                peer,
                resources: all,
                codec,
            } => {
                let json: Vec<Value> = resources
                    .iter()
                    .map(|any| {
                        let rendered = codec
                            .render_any(&any.type_url, &any.value)
                            .expect("a fixture renders");
                        serde_json::from_slice(&rendered).expect("rendered JSON")
                    })
                    .collect();
                let (types, lists): (Vec<String>, Vec<Vec<Value>>) = {
                    let mut all = all.lock().unwrap_or_else(|p| p.into_inner());
                    all.insert(type_url.to_owned(), json);
                    all.iter().map(|(t, r)| (t.clone(), r.clone())).unzip()
                };
                let snapshot: Vec<(&str, Vec<Value>)> =
                    types.iter().map(String::as_str).zip(lists).collect();
                peer.set_snapshot("*", version, &snapshot).await;
            }
        }
    }
}
