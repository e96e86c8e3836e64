//! A scripted feeder for in-process tests of the poll path (test builds
//! only): the test sets each type's state (version, resources, what it
//! covers, whether it is stale) and every session that wants the type has it
//! published at once, as an upstream stream would; what sessions ask of their
//! feeder (resubscriptions, NACKs) is recorded for the test to read.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::feeder::Feeder;
use super::publisher::Publisher;
use super::session::Command;
use crate::cache::{Coverage, Intake, Resource, TypeState};
use crate::sync::lock;
use crate::xds::ResourceType;

/// One type's scripted state.
#[derive(Debug, Clone)]
struct Scripted {
    /// Bumped by every `set`: what feeds compare to decide a publish.
    generation: u64,
    version: String,
    resources: BTreeMap<String, Arc<Resource>>,
    coverage: Coverage,
}

#[derive(Debug, Clone, Default)]
struct Scene {
    states: BTreeMap<ResourceType, Scripted>,
    stale: bool,
    generations: u64,
}

/// What the test controls and reads.
#[derive(Debug)]
pub struct Script {
    intake: Intake,
    scene: watch::Sender<Scene>,
    commands: Mutex<Vec<Command>>,
    started: AtomicUsize,
    running: Arc<AtomicUsize>,
}

impl Script {
    pub fn new(intake: Intake) -> Arc<Script> {
        Arc::new(Script {
            intake,
            scene: watch::Sender::new(Scene::default()),
            commands: Mutex::default(),
            started: AtomicUsize::new(0),
            running: Arc::default(),
        })
    }

    /// The feeder to build `Sessions` on.
    pub fn feeder(self: &Arc<Self>) -> ScriptedFeeder {
        ScriptedFeeder(self.clone())
    }

    /// Sets `kind` to `resources` (JSON `Any`s with `@type`) at `version`,
    /// answering every name; returns once every feed has published it.
    pub async fn set(&self, kind: ResourceType, version: &str, resources: &[serde_json::Value]) {
        let coverage = Coverage {
            wildcard: true,
            names: Default::default(),
        };
        self.set_covering(kind, version, resources, coverage).await;
    }

    /// [`set`](Self::set), answering only what `coverage` says.
    pub async fn set_covering(
        &self,
        kind: ResourceType,
        version: &str,
        resources: &[serde_json::Value],
        coverage: Coverage,
    ) {
        let codec = self.intake.codec();
        let resources = resources
            .iter()
            .map(|json| {
                let any = codec
                    .parse_any(json.to_string().as_bytes())
                    .unwrap_or_else(|e| panic!("scripted resource {json}: {e}"));
                let resource = self
                    .intake
                    .resource(kind, any.value.into())
                    .unwrap_or_else(|e| panic!("scripted resource {json}: {e}"));
                (resource.name.clone(), resource)
            })
            .collect();
        self.scene.send_modify(|scene| {
            scene.generations += 1;
            let scripted = Scripted {
                generation: scene.generations,
                version: version.to_owned(),
                resources,
                coverage,
            };
            scene.states.insert(kind, scripted);
        });
        idle().await;
    }

    /// Marks every session stale (the upstream "broke") or fresh again;
    /// returns once every feed has done so.
    pub async fn set_stale(&self, stale: bool) {
        self.scene.send_modify(|scene| scene.stale = stale);
        idle().await;
    }

    /// Every command the sessions sent their feeder, in order.
    pub fn commands(&self) -> Vec<Command> {
        lock(&self.commands).clone()
    }

    /// How many sessions were started.
    pub fn sessions_started(&self) -> usize {
        self.started.load(Ordering::SeqCst)
    }

    /// How many session feeds are running now (closed sessions stop theirs).
    pub fn feeds_running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }
}

/// Returns once every other task is idle: under tokio's paused test clock
/// (which these tests use), the clock only moves when nothing can run, so a
/// 1 ms sleep ends after the feeds and sessions have done all they can.
pub async fn idle() {
    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
}

/// Feeds sessions from a [`Script`].
#[derive(Debug)]
pub struct ScriptedFeeder(Arc<Script>);

impl Feeder for ScriptedFeeder {
    fn start(
        &self,
        session: Publisher,
        commands: mpsc::UnboundedReceiver<Command>,
    ) -> JoinHandle<()> {
        self.0.started.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(run(self.0.clone(), session, commands))
    }

    fn is_ready(&self) -> bool {
        !self.0.scene.borrow().states.is_empty()
    }

    fn describe(&self) -> String {
        "scripted".to_owned()
    }
}

/// Counts a running feed until dropped (an aborted task drops it too).
struct Running(Arc<AtomicUsize>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn run(
    script: Arc<Script>,
    session: Publisher,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    script.running.fetch_add(1, Ordering::SeqCst);
    let _running = Running(script.running.clone());
    let mut scene = script.scene.subscribe();
    let mut published: BTreeMap<ResourceType, u64> = BTreeMap::new();
    loop {
        let now = scene.borrow_and_update().clone();
        if now.stale {
            session.stream_failed(None, "the script says the stream is down".into());
        } else {
            session.upstream().fresh(None);
        }
        for (kind, scripted) in &now.states {
            let generation = Some(&scripted.generation);
            if session.subscription(*kind).is_none() || published.get(kind) == generation {
                continue;
            }
            published.insert(*kind, scripted.generation);
            session.publish(TypeState::new(
                *kind,
                scripted.version.clone(),
                String::new(),
                scripted.resources.clone(),
                scripted.coverage.clone(),
            ));
        }
        tokio::select! {
            changed = scene.changed() => if changed.is_err() { return },
            command = commands.recv() => match command {
                Some(command) => lock(&script.commands).push(command),
                None => return,
            },
        }
    }
}
