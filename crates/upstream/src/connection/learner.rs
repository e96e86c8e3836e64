//! Learning the types an upstream sends that the gateway has no descriptor
//! for ([`Learner`]): each is asked of that upstream by gRPC server
//! reflection ([`super::reflection`]) once, in the background, and the files
//! it answers join the codec's pool (`xds::learned` checks them). A type
//! that could not be learned is asked again after a backoff that doubles
//! from [`FIRST_RETRY`] up to [`LAST_RETRY`], never sooner. What happened is
//! noted in the intake's record of opaque types, which `/readyz` and the
//! status page show.
//!
//! Once the pool grows, the stream drivers render again what they hold
//! (`stream.rs`), so answers given opaque are given in full at a new
//! version.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tracing::{info, warn};

use super::reflection::{files_defining, ReflectionError};
use super::UpstreamContext;
use crate::cache::ResourceSet;
use crate::log_escape::Escaped;
use crate::xds::descriptors::message_name_of;

/// The wait before a type that could not be learned is asked again.
pub(crate) const FIRST_RETRY: Duration = Duration::from_secs(30);
/// The longest such wait.
pub(crate) const LAST_RETRY: Duration = Duration::from_secs(600);
/// The wait after the upstream could not be reached (no backoff: it is
/// not the upstream's answer).
pub(crate) const UNREACHED_RETRY: Duration = Duration::from_secs(1);

/// What one upstream was asked, per type URL.
#[derive(Debug)]
pub(crate) struct Learner {
    /// `--upstream-reflection` (or the table's `reflection`).
    on: bool,
    asked: Mutex<BTreeMap<String, Asked>>,
    /// How many asks are in flight.
    in_flight: tokio::sync::watch::Sender<usize>,
}

#[derive(Debug, Default)]
struct Asked {
    in_flight: bool,
    failures: u32,
    /// Not before then, after a failure.
    retry_at: Option<Instant>,
}

impl Learner {
    pub(crate) fn new(on: bool) -> Learner {
        Learner {
            on,
            asked: Mutex::default(),
            in_flight: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Marks `type_url` asked now, if it may be: not in flight, and past
    /// its backoff.
    fn start(&self, type_url: &str, now: Instant) -> bool {
        let mut asked = crate::sync::lock(&self.asked);
        let entry = asked.entry(type_url.to_owned()).or_default();
        if entry.in_flight || entry.retry_at.is_some_and(|at| now < at) {
            return false;
        }
        entry.in_flight = true;
        self.in_flight.send_modify(|n| *n += 1);
        true
    }

    /// Records how asking `type_url` ended; the delay before it may be
    /// asked again when it failed.
    fn finish(&self, type_url: &str, outcome: Outcome, now: Instant) -> Option<Duration> {
        let mut asked = crate::sync::lock(&self.asked);
        let entry = asked.entry(type_url.to_owned()).or_default();
        if std::mem::take(&mut entry.in_flight) {
            self.in_flight.send_modify(|n| *n = n.saturating_sub(1));
        }
        let delay = match outcome {
            Outcome::Learned => {
                *entry = Asked::default();
                return None;
            }
            Outcome::Unreached => UNREACHED_RETRY,
            Outcome::Refused => {
                let delay = retry_delay(entry.failures);
                entry.failures = entry.failures.saturating_add(1);
                delay
            }
        };
        entry.retry_at = Some(now + delay);
        Some(delay)
    }
}

/// How one ask ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Learned,
    /// The upstream was not reached, or did not answer in time.
    Unreached,
    /// It answered, without what defines the type.
    Refused,
}

/// The wait after `failures` earlier failures: 30 s, 60 s, ... 10 min.
fn retry_delay(failures: u32) -> Duration {
    FIRST_RETRY
        .saturating_mul(2u32.saturating_pow(failures.min(16)))
        .min(LAST_RETRY)
}

impl UpstreamContext {
    /// Returns once no type is being asked of this upstream (at most
    /// [`REFLECTION_WAIT`](super::reflection::REFLECTION_WAIT)): a stream
    /// opening while the added types' descriptors are asked for at start-up
    /// waits for them, so its first answers render in full.
    pub(crate) async fn reflection_settled(&self) {
        let mut in_flight = self.learner.in_flight.subscribe();
        let settled = in_flight.wait_for(|n| *n == 0);
        let _ = tokio::time::timeout(super::reflection::REFLECTION_WAIT, settled).await;
    }

    /// `set` as the pool renders it now (what was served opaque for a type
    /// learned since, rendered again), after asking for the types it still
    /// holds opaque: what every state published from this upstream holds.
    pub(crate) fn rendered_now(self: &Arc<Self>, set: Arc<ResourceSet>) -> Arc<ResourceSet> {
        if !set.has_opaque() {
            return set;
        }
        let set = self.intake.refreshed(set);
        let opaque: BTreeSet<&String> = set.values().flat_map(|r| r.opaque.iter()).collect();
        self.learn(opaque);
        set
    }

    /// Asks this upstream, in the background, for the descriptors of each
    /// of `type_urls` the pool still lacks (each at most once at a time,
    /// and not again before its backoff); notes why where it cannot.
    pub fn learn<'a>(self: &Arc<Self>, type_urls: impl IntoIterator<Item = &'a String>) {
        let descriptors = self.intake.codec().descriptors();
        for type_url in type_urls {
            if descriptors.knows(type_url) {
                continue;
            }
            if !self.learner.on {
                self.intake.opaque_types().explain(
                    type_url,
                    &self.name,
                    "reflection is off for this upstream (--upstream-reflection)",
                );
                continue;
            }
            if !self.learner.start(type_url, Instant::now()) {
                continue;
            }
            let ctx = Arc::clone(self);
            let type_url = type_url.clone();
            tokio::spawn(async move { ctx.ask(&type_url).await });
        }
    }

    /// Asks for `type_url`'s files and adds them to the pool.
    async fn ask(&self, type_url: &str) {
        let descriptors = self.intake.codec().descriptors().clone();
        let outcome = match message_name_of(type_url) {
            Err(e) => Err((Outcome::Refused, e.to_string())),
            Ok(symbol) => self.learn_symbol(symbol).await,
        };
        let now = Instant::now();
        match outcome {
            Ok(added) => {
                self.learner.finish(type_url, Outcome::Learned, now);
                self.intake.opaque_types().forget_known(&descriptors);
                info!(upstream = %self.name, type_url = %Escaped(type_url), files = added,
                    "learned a type by reflection: its resources render in full from now on");
            }
            Err((outcome, reason)) => {
                let retry_in = self.learner.finish(type_url, outcome, now);
                self.intake
                    .opaque_types()
                    .explain(type_url, &self.name, &reason);
                warn!(upstream = %self.name, type_url = %Escaped(type_url), reason = %Escaped(&reason), ?retry_in,
                    "no descriptors by reflection: the type is served opaque");
            }
        }
    }

    /// Asks this upstream by reflection for the files that define the
    /// message `symbol` and adds them to the codec's pool: how many files
    /// joined it, or how asking ended and why.
    async fn learn_symbol(&self, symbol: &str) -> Result<usize, (Outcome, String)> {
        let descriptors = self.intake.codec().descriptors();
        let pool = descriptors.pool();
        let known = |file: &str| pool.get_file_by_name(file).is_some();
        let files = match files_defining(self, symbol, known).await {
            Err(e @ (ReflectionError::Unreachable(_) | ReflectionError::TimedOut)) => {
                return Err((Outcome::Unreached, e.to_string()))
            }
            Err(e) => return Err((Outcome::Refused, e.to_string())),
            Ok(files) => files,
        };
        let refused = |reason: String| (Outcome::Refused, reason);
        let added = descriptors
            .learn(&files)
            .map_err(|e| refused(format!("its descriptors were refused: {e}")))?;
        if descriptors.descriptor(symbol).is_err() {
            return Err(refused("its descriptors do not define the type".to_owned()));
        }
        Ok(added)
    }
}

/// Why `xds-gateway descriptors` wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum DescriptorsError {
    #[error(transparent)]
    Start(#[from] super::StartError),
    #[error("{symbol}: {reason}")]
    Symbol { symbol: String, reason: String },
}

/// What `xds-gateway descriptors` writes: a serialized FileDescriptorSet of
/// the files that define `symbols` (message names or type URLs), as
/// `spec`'s upstream serves them by reflection, less those of Envoy's API
/// the gateway embeds; with how many files it holds. The files are checked
/// as those learned while serving are.
pub async fn descriptor_set(
    spec: &crate::config::UpstreamSpec,
    symbols: &[String],
) -> Result<(Vec<u8>, usize), DescriptorsError> {
    use prost::Message as _;
    let codec = crate::xds::Codec::embedded();
    let embedded = codec.pool();
    let intake = crate::cache::Intake::new(codec.clone());
    let metrics = Arc::new(crate::metrics::Metrics::new());
    let ctx = UpstreamContext::new(spec, 64 << 20, intake, metrics)?;
    for symbol in symbols {
        let name = message_name_of(symbol).unwrap_or(symbol);
        ctx.learn_symbol(name)
            .await
            .map_err(|(_, reason)| DescriptorsError::Symbol {
                symbol: symbol.clone(),
                reason,
            })?;
    }
    let descriptors = codec.descriptors();
    let learned: Vec<prost_types::FileDescriptorProto> = descriptors
        .pool()
        .files()
        .filter(|f| embedded.get_file_by_name(f.name()).is_none())
        .map(|f| f.file_descriptor_proto().clone())
        .collect();
    let count = learned.len();
    let set = prost_types::FileDescriptorSet { file: learned };
    Ok((set.encode_to_vec(), count))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_type_is_asked_once_at_a_time_and_not_again_before_its_backoff() {
        let learner = Learner::new(true);
        let t0 = Instant::now();
        assert!(learner.start("t", t0));
        assert!(!learner.start("t", t0), "in flight");
        assert_eq!(learner.finish("t", Outcome::Refused, t0), Some(FIRST_RETRY));
        assert!(!learner.start("t", t0 + FIRST_RETRY - Duration::from_millis(1)));
        assert!(learner.start("t", t0 + FIRST_RETRY));
        assert_eq!(
            learner.finish("t", Outcome::Refused, t0),
            Some(FIRST_RETRY * 2)
        );
        assert!(learner.start("other", t0), "each type has its own");
    }

    #[test]
    fn an_upstream_not_reached_is_asked_again_soon_without_backoff() {
        let learner = Learner::new(true);
        let t0 = Instant::now();
        assert!(learner.start("t", t0));
        assert_eq!(
            learner.finish("t", Outcome::Unreached, t0),
            Some(UNREACHED_RETRY)
        );
        assert!(!learner.start("t", t0));
        assert!(learner.start("t", t0 + UNREACHED_RETRY));
        assert_eq!(
            learner.finish("t", Outcome::Refused, t0),
            Some(FIRST_RETRY),
            "not counted"
        );
    }

    #[test]
    fn the_backoff_doubles_up_to_its_cap() {
        let delays: Vec<u64> = (0..8).map(|f| retry_delay(f).as_secs()).collect();
        assert_eq!(delays, [30, 60, 120, 240, 480, 600, 600, 600]);
        assert_eq!(retry_delay(u32::MAX), LAST_RETRY);
    }
}
