//! Finding which names of a type the upstream refuses, so that one name
//! cannot keep ending the stream every other name of the node rides on.
//!
//! A stream that answered a type and then ended with the upstream's own
//! refusal while names of the type still waited for their first answer
//! (a client had just asked for them) holds those names apart: the
//! session's subscription leaves them out, so its streams come back with
//! the names the upstream did answer. The held names are then checked on
//! streams of their own: one request asking for them alone, the node's,
//! and the first thing the upstream does with it. An answer, or silence
//! for [`CHECK_WAIT`] (a server need not answer a name it does not know),
//! clears them; a refusal of several is split in halves, each checked
//! again, down to the names refused alone, which are set aside as a type
//! is (`store/unserved.rs`). The cleared names are subscribed again.
//!
//! A check that cannot reach the upstream clears its names: the stream's
//! own retries decide then.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_stream::StreamExt as _;
use tracing::{info, warn};

use super::connection::UpstreamContext;
use super::stream::{status_refusal, Protocol};
use crate::log_escape::Escaped;
use crate::store::session::Session;
use crate::store::Refused;
use crate::xds::ResourceType;

/// How long a check waits for the upstream to answer or refuse.
const CHECK_WAIT: Duration = Duration::from_secs(5);

/// What the upstream did with a request asking for some names alone.
#[derive(Debug)]
enum Outcome {
    /// It answered, or kept the stream open without a word.
    Taken,
    /// It ended the stream with its own refusal.
    Refused(String),
}

/// Holds the names of `kind` that `session`'s stream was still waiting on
/// apart, and checks them on `path` in the background (see the module
/// docs). Returns whether any were held: if none were, the type itself
/// is what the upstream refused.
pub(super) fn hold_and_check<P: Protocol>(
    ctx: &Arc<UpstreamContext>,
    session: &Arc<Session>,
    kind: ResourceType,
    path: String,
) -> bool {
    let waiting = session.unanswered_names(kind);
    let held = session.unserved.check_names(kind, waiting);
    if held.is_empty() {
        return false;
    }
    info!(%kind, names = held.len(), first = %Escaped(held.first().map_or("", String::as_str)), "the upstream ended the stream while names of the type waited for their first answer: they are checked apart");
    let (ctx, session) = (ctx.clone(), session.clone());
    tokio::spawn(async move { check::<P>(&ctx, &session, kind, &path, held).await });
    true
}

/// Checks `names`, halving a refused set down to the names refused alone
/// (set aside); clears the rest.
async fn check<P: Protocol>(
    ctx: &UpstreamContext,
    session: &Session,
    kind: ResourceType,
    path: &str,
    names: BTreeSet<String>,
) {
    let mut sets = vec![names];
    while let Some(set) = sets.pop() {
        match ask::<P>(ctx, session, kind, path, &set).await {
            Outcome::Taken => session.names_cleared(kind, &set),
            Outcome::Refused(status) if set.len() == 1 => {
                let name = set.first().map_or("", String::as_str);
                warn!(%kind, name = %Escaped(name), status = %Escaped(&status), "the upstream refuses this name alone: set aside");
                let refused = Refused::EndedTheStream(status);
                session
                    .unserved
                    .set_name_aside(kind, name, refused, Instant::now());
            }
            Outcome::Refused(_) => {
                let half = set.len() / 2;
                let mut first = set;
                let second = first.split_off(&first.iter().nth(half).cloned().unwrap_or_default());
                sets.push(second);
                sets.push(first);
            }
        }
    }
}

/// Opens a stream on `path` whose one request asks for `names` of `kind`
/// alone, with the session's node, and waits for what the upstream does.
async fn ask<P: Protocol>(
    ctx: &UpstreamContext,
    session: &Session,
    kind: ResourceType,
    path: &str,
    names: &BTreeSet<String>,
) -> Outcome {
    let first = P::asking_only(
        kind,
        names.iter().cloned().collect(),
        session.node.parameters(),
        session.node.bytes(),
    );
    // The request side stays open: a stream half-closed by its client may
    // be ended by the server for that alone.
    let requests = tokio_stream::once(first).chain(tokio_stream::pending());
    let exchange = async {
        let mut inbound = ctx
            .streaming::<P::Request, P::Response>(path, requests)
            .await?;
        inbound.message().await.map(|_| ())
    };
    match tokio::time::timeout(CHECK_WAIT, exchange).await {
        Err(_) | Ok(Ok(())) => Outcome::Taken,
        // Only the upstream's own application error refuses names (an
        // UNIMPLEMENTED method would refuse every name alike).
        Ok(Err(status)) => match status_refusal(&status) {
            Some((Refused::EndedTheStream(text), _)) => Outcome::Refused(text),
            _ => Outcome::Taken,
        },
    }
}
