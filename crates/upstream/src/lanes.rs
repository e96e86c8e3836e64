//! Which of a session's upstream streams carries each of its types, and
//! the task that hands the session's commands to them: [`aggregated`] or
//! [`per_type`]. The streams are driven elsewhere (`stream.rs`), each
//! spawned through the function a dispatcher is handed; this module names
//! nothing of that driver.
//!
//! With one aggregated (ADS) stream per session, the stream every type of
//! the node shares carries only types its upstream serves
//! ([`ServedTypes`](super::connection::ServedTypes): the four an Envoy
//! needs, presumed; any other once answered on any session's stream). A control plane may end a whole ADS stream asked for a type it
//! lacks (java-control-plane) or will not give the gateway (Istio,
//! UNAUTHENTICATED), and does not say which type it was; guessing it blamed
//! the wrong type and reset every client's stream. So:
//!
//! - a type not seen served yet is probed: asked on an ADS stream of its
//!   own, carrying it alone ([`Carrier::Probe`]). Its first answer proves
//!   it for the upstream; the probe then ends and the type moves to the
//!   shared stream (one stream per session once proven, not one per type);
//!   a probe ended before answering is evidence against that type alone,
//!   which is set aside there, the shared stream untouched;
//! - when the shared stream itself ends with the upstream's own error after
//!   answering something (a type served before and refused now, or a name
//!   the upstream refuses), the types it was still waiting on are moved off
//!   it onto probes of their own ([`LaneOf::demote`]): the one the upstream
//!   refuses keeps failing there alone, the others are answered and move
//!   back.
//!
//! With `--upstream-streams per-type` every type has a stream of its own on
//! its own service ([`Carrier::Own`]) from the start.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::store::Command;
use crate::sync::lock;
use crate::xds::ResourceType;

/// What one stream of a session carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Carrier {
    /// The aggregated stream the session's proven types share.
    Aggregated,
    /// An aggregated-method stream asking one type until it is answered.
    Probe(ResourceType),
    /// The type's own service (`--upstream-streams per-type`).
    Own(ResourceType),
}

impl Carrier {
    /// The session's name for the stream (its down streams, placements):
    /// `None` for the aggregated one, else its type.
    pub(super) fn lane(self) -> Option<ResourceType> {
        match self {
            Carrier::Aggregated => None,
            Carrier::Probe(kind) | Carrier::Own(kind) => Some(kind),
        }
    }
}

/// Where a type of the session is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Shared,
    Probed,
}

/// Which of the session's types the shared stream carries (the others are
/// probed), as the dispatcher and the shared stream's driver both see it.
#[derive(Debug, Default)]
pub(super) struct Placed(Mutex<BTreeMap<ResourceType, Place>>);

/// What a stream tells its session's dispatcher.
#[derive(Debug)]
enum LaneEvent {
    /// A probe's type was answered: it moves to the shared stream.
    Proven(ResourceType),
    /// The shared stream gave up these types: each goes on a probe.
    Demoted(Vec<ResourceType>),
}

/// One stream of a session: what it carries, and how it tells the
/// session's dispatcher what it learnt.
#[derive(Debug)]
pub(super) struct LaneOf {
    pub(super) carrier: Carrier,
    placed: Arc<Placed>,
    events: mpsc::UnboundedSender<LaneEvent>,
}

impl LaneOf {
    /// Whether the stream asks for `kind`.
    pub(super) fn carries(&self, kind: ResourceType) -> bool {
        match self.carrier {
            Carrier::Aggregated => lock(&self.placed.0).get(&kind) == Some(&Place::Shared),
            Carrier::Probe(only) | Carrier::Own(only) => only == kind,
        }
    }

    /// Whether it is a probe (answered once, it is done).
    pub(super) fn is_probe(&self) -> bool {
        matches!(self.carrier, Carrier::Probe(_))
    }

    /// A probe's type was answered: the shared stream takes it.
    pub(super) fn proven(&self) {
        if let Carrier::Probe(kind) = self.carrier {
            // Dropped only once the session closed.
            let _ = self.events.send(LaneEvent::Proven(kind));
        }
    }

    /// The shared stream gives `kinds` up: its next stream does not ask
    /// for them; each is asked on a probe of its own.
    pub(super) fn demote(&self, kinds: Vec<ResourceType>) {
        if self.carrier != Carrier::Aggregated || kinds.is_empty() {
            return;
        }
        lock(&self.placed.0).extend(kinds.iter().map(|kind| (*kind, Place::Probed)));
        let _ = self.events.send(LaneEvent::Demoted(kinds));
    }
}

/// A stream's command channel and task.
struct Running {
    commands: mpsc::UnboundedSender<Command>,
    task: JoinHandle<()>,
}

impl Running {
    fn send(&self, command: Command) {
        // A stream's task ends only when its sender is dropped, or a probe
        // once proven (the dispatcher then hands its type on).
        let _ = self.commands.send(command);
    }
}

/// Starts one stream's task for a lane, fed the commands it is handed.
pub(super) trait Spawn:
    Fn(LaneOf, mpsc::UnboundedReceiver<Command>) -> JoinHandle<()>
{
}

impl<F: Fn(LaneOf, mpsc::UnboundedReceiver<Command>) -> JoinHandle<()>> Spawn for F {}

/// A session's streams, started as they are needed.
struct Lanes<S> {
    spawn: S,
    placed: Arc<Placed>,
    events: mpsc::UnboundedSender<LaneEvent>,
    shared: Option<Running>,
    probes: BTreeMap<ResourceType, Running>,
    /// Tasks of probes that are done, awaited when the session closes.
    done: Vec<JoinHandle<()>>,
}

impl<S: Spawn> Lanes<S> {
    fn send_shared(&mut self, command: Command) {
        let (spawn, placed, events) = (&self.spawn, &self.placed, &self.events);
        let open = || open(spawn, Carrier::Aggregated, placed, events);
        self.shared.get_or_insert_with(open).send(command);
    }

    fn send_probe(&mut self, kind: ResourceType, command: Command) {
        let (spawn, placed, events) = (&self.spawn, &self.placed, &self.events);
        let open = || open(spawn, Carrier::Probe(kind), placed, events);
        self.probes.entry(kind).or_insert_with(open).send(command);
    }

    /// Hands `command` to the stream that asks for its type: the shared
    /// one if the type is placed there or the upstream serves it, else the
    /// type's probe.
    fn route(&mut self, command: Command, served: &impl Fn(ResourceType) -> bool) {
        let kind = command.kind();
        let place = *lock(&self.placed.0)
            .entry(kind)
            .or_insert_with(|| match served(kind) {
                true => Place::Shared,
                false => Place::Probed,
            });
        match place {
            Place::Shared => self.send_shared(command),
            Place::Probed => self.send_probe(kind, command),
        }
    }

    fn event(&mut self, event: LaneEvent) {
        match event {
            LaneEvent::Proven(kind) => {
                if let Some(probe) = self.probes.remove(&kind) {
                    self.done.push(probe.task);
                }
                lock(&self.placed.0).insert(kind, Place::Shared);
                self.send_shared(Command::Resubscribe(kind));
            }
            LaneEvent::Demoted(kinds) => {
                for kind in kinds {
                    self.send_probe(kind, Command::Resubscribe(kind));
                }
            }
        }
    }
}

/// Starts a stream that carries `carrier` through `spawn`.
fn open(
    spawn: &impl Spawn,
    carrier: Carrier,
    placed: &Arc<Placed>,
    events: &mpsc::UnboundedSender<LaneEvent>,
) -> Running {
    let (commands, rx) = mpsc::unbounded_channel();
    let lane = LaneOf {
        carrier,
        placed: placed.clone(),
        events: events.clone(),
    };
    Running {
        commands,
        task: spawn(lane, rx),
    }
}

/// Waits for `tasks` (their command channels closed) to end.
async fn join(tasks: impl Iterator<Item = JoinHandle<()>>) {
    for task in tasks.collect::<Vec<_>>() {
        let _ = task.await;
    }
}

/// The aggregated streams of one session: the shared stream for the types
/// its upstream `served` (or that a probe of this session proved), a probe
/// for each other type, each started when a command for it first comes.
/// Ends, with every stream, when the session closes.
pub(super) async fn aggregated(
    mut commands: mpsc::UnboundedReceiver<Command>,
    served: impl Fn(ResourceType) -> bool,
    spawn: impl Spawn,
) {
    let (events, mut learnt) = mpsc::unbounded_channel();
    let mut lanes = Lanes {
        spawn,
        placed: Arc::default(),
        events,
        shared: None,
        probes: BTreeMap::new(),
        done: Vec::new(),
    };
    loop {
        tokio::select! {
            command = commands.recv() => match command {
                Some(command) => lanes.route(command, &served),
                None => break,
            },
            // Never `None`: `lanes` holds a sender.
            Some(event) = learnt.recv() => lanes.event(event),
        }
    }
    let running = lanes.shared.into_iter().chain(lanes.probes.into_values());
    join(running.map(|Running { task, .. }| task).chain(lanes.done)).await;
}

/// Per-type streams: one stream of its own per type the session subscribes
/// to, on the type's own service, started when the first command for the
/// type arrives. Ends, with every stream, when the session closes.
pub(super) async fn per_type(mut commands: mpsc::UnboundedReceiver<Command>, spawn: impl Spawn) {
    // Nothing moves between per-type streams: what they would learn goes
    // nowhere.
    let (placed, (events, _)) = (Arc::default(), mpsc::unbounded_channel());
    let mut own: BTreeMap<ResourceType, Running> = BTreeMap::new();
    while let Some(command) = commands.recv().await {
        let kind = command.kind();
        let lane = own
            .entry(kind)
            .or_insert_with(|| open(&spawn, Carrier::Own(kind), &placed, &events));
        lane.send(command);
    }
    join(own.into_values().map(|Running { task, .. }| task)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    const CDS: ResourceType = ResourceType::Clusters;
    const RTDS: ResourceType = ResourceType::Runtime;

    /// What each stream the dispatcher started was handed, by carrier.
    type Seen = Arc<Mutex<Vec<(Carrier, Command)>>>;

    /// A spawner whose streams record what they are handed; a probe of
    /// `proves` is proven by its first command.
    fn recording(seen: Seen, proves: Option<ResourceType>) -> impl Spawn {
        move |lane: LaneOf, mut rx: mpsc::UnboundedReceiver<Command>| {
            let seen = seen.clone();
            tokio::spawn(async move {
                while let Some(command) = rx.recv().await {
                    lock(&seen).push((lane.carrier, command));
                    if lane.is_probe() && lane.carrier.lane() == proves {
                        lane.proven();
                        return;
                    }
                }
            })
        }
    }

    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_type_the_upstream_serves_shares_the_stream_and_another_is_probed_until_answered() {
        let seen = Seen::default();
        let (tx, rx) = mpsc::unbounded_channel();
        let dispatcher = tokio::spawn(aggregated(
            rx,
            |kind| kind == CDS,
            recording(seen.clone(), Some(RTDS)),
        ));
        for kind in [CDS, RTDS, ResourceType::Endpoints] {
            tx.send(Command::Resubscribe(kind))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        settle().await;
        drop(tx);
        dispatcher.await.unwrap_or_else(|e| panic!("{e}"));
        let seen = lock(&seen).clone();
        assert_eq!(
            seen,
            [
                (Carrier::Aggregated, Command::Resubscribe(CDS)),
                (Carrier::Probe(RTDS), Command::Resubscribe(RTDS)),
                (
                    Carrier::Probe(ResourceType::Endpoints),
                    Command::Resubscribe(ResourceType::Endpoints)
                ),
                // Answered on its probe: the shared stream takes it.
                (Carrier::Aggregated, Command::Resubscribe(RTDS)),
            ]
        );
    }

    #[tokio::test]
    async fn demoted_types_are_probed_and_come_back_when_answered() {
        let seen = Seen::default();
        let (tx, rx) = mpsc::unbounded_channel();
        let shared: Arc<Mutex<Option<LaneOf>>> = Arc::default();
        let spawn = {
            let (seen, shared) = (seen.clone(), shared.clone());
            let inner = recording(seen, Some(CDS));
            move |lane: LaneOf, rx| {
                if lane.carrier == Carrier::Aggregated {
                    *lock(&shared) = Some(LaneOf {
                        carrier: lane.carrier,
                        placed: lane.placed.clone(),
                        events: lane.events.clone(),
                    });
                }
                inner(lane, rx)
            }
        };
        let dispatcher = tokio::spawn(aggregated(rx, |_| true, spawn));
        tx.send(Command::Resubscribe(CDS))
            .unwrap_or_else(|e| panic!("{e}"));
        settle().await;
        let lane = lock(&shared).take().expect("the shared stream started");
        assert!(lane.carries(CDS));
        lane.demote(vec![CDS]);
        assert!(!lane.carries(CDS), "its next stream does not ask for it");
        settle().await;
        assert!(lane.carries(CDS), "answered on its probe, it is back");
        drop(tx);
        dispatcher.await.unwrap_or_else(|e| panic!("{e}"));
        let carriers: Vec<Carrier> = lock(&seen).iter().map(|(c, _)| *c).collect();
        assert_eq!(
            carriers,
            [
                Carrier::Aggregated,
                Carrier::Probe(CDS),
                Carrier::Aggregated
            ]
        );
    }
}
