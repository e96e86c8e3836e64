//! Finding which names of a type the upstream refuses, so that one name
//! cannot keep ending the stream every other name of the node rides on.
//!
//! A stream that answered something and then ended with the upstream's
//! own refusal while names of a type still waited for their first answer
//! (a client had just asked for them) holds those names apart: the
//! session's subscription leaves them out, so its streams come back with
//! the names the upstream did answer, and a poll naming one waits for the
//! check as for a first answer. It then asks whether the upstream refuses
//! the type itself: a request for a name no control plane has
//! ([`CONTROL_NAME`]) alone. Refused too, the type is at fault: the names
//! are let go, and the stream deals with it as a type. The held names are then
//! checked on streams of their own: one request asking for them alone,
//! the node's, and the first thing the upstream does with it. An answer,
//! or silence for [`CHECK_WAIT`] (a server need not answer a name it does
//! not know), clears them; a refusal of several is split in halves, each
//! checked again, down to the names refused alone, which are set aside as
//! a type is (`store/unserved.rs`). The cleared names are subscribed
//! again.
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
use super::frame_codec::{FromFrame, ToFrame};
use crate::log_escape::Escaped;
use crate::store::{Publisher, Refused};
use crate::xds::ResourceType;

/// How long a check waits for the upstream to answer or refuse.
const CHECK_WAIT: Duration = Duration::from_secs(5);

/// The name the check of a type asks for: one no control plane serves, so
/// that only a refusal of the type itself refuses it.
const CONTROL_NAME: &str = "xds-gateway.invalid/name-check";

/// What a check needs of a protocol: the first request of a stream that
/// asks for some names of a type alone.
pub(crate) trait AskingAlone {
    type Ask: ToFrame;
    type Answer: FromFrame;

    /// The request asking for `names` of `kind` alone (their locators
    /// carrying `parameters`, if any), with `node`.
    fn asking_only(
        kind: ResourceType,
        names: Vec<String>,
        parameters: &crate::xds::dynamic_parameters::Parameters,
        node: crate::store::NodeBytes,
    ) -> Self::Ask;
}

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
/// docs). Returns whether any were held: if none were (none waited, or
/// the upstream refuses the type itself), the type is what it refused.
pub(super) async fn hold_and_check<P: AskingAlone + 'static>(
    ctx: &Arc<UpstreamContext>,
    session: &Publisher,
    kind: ResourceType,
    path: String,
) -> bool {
    let waiting = session.unanswered_names(kind);
    if waiting.is_empty() {
        return false;
    }
    // Held from the start: a poll naming one waits for the outcome rather
    // than taking the state without it (`Unserved::checking_any`).
    let held = session.unserved().check_names(kind, waiting);
    if held.is_empty() {
        return false;
    }
    let control = BTreeSet::from([CONTROL_NAME.to_owned()]);
    if let Outcome::Refused(status) = ask::<P>(ctx, session, kind, &path, &control).await {
        info!(%kind, status = %Escaped(&status), "the upstream refuses the type itself, not a name of it");
        session.unserved().names_served(kind, &held);
        return false;
    }
    info!(%kind, names = held.len(), first = %Escaped(held.first().map_or("", String::as_str)), "the upstream ended the stream while names of the type waited for their first answer: they are checked apart");
    let (ctx, session) = (ctx.clone(), session.clone());
    tokio::spawn(async move { check::<P>(&ctx, &session, kind, &path, held).await });
    true
}

/// Checks `names`, halving a refused set down to the names refused alone
/// (set aside); clears the rest.
async fn check<P: AskingAlone>(
    ctx: &UpstreamContext,
    session: &Publisher,
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
                    .unserved()
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
async fn ask<P: AskingAlone>(
    ctx: &UpstreamContext,
    session: &Publisher,
    kind: ResourceType,
    path: &str,
    names: &BTreeSet<String>,
) -> Outcome {
    let first = P::asking_only(
        kind,
        names.iter().cloned().collect(),
        session.node().parameters(),
        session.node().bytes(),
    );
    // The request side stays open: a stream half-closed by its client may
    // be ended by the server for that alone.
    let requests = tokio_stream::once(first).chain(tokio_stream::pending());
    let exchange = async {
        let mut inbound = ctx.streaming::<P::Ask, P::Answer>(path, requests).await?;
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

/// How the upstream refused what a stream asked, if `status` is its own
/// application error and not a transport failure: UNIMPLEMENTED, or a
/// status java-control-plane (UNKNOWN) or Istio (UNAUTHENTICATED: "the api
/// generator requires an authenticated control-plane identity") ends a
/// stream with when asked for what it will not serve.
pub(super) fn status_refusal(status: &tonic::Status) -> Option<(Refused, tonic::Code)> {
    use tonic::Code;
    // A status the client made of a transport failure ("transport error",
    // often UNKNOWN) carries its cause: only what the upstream itself said
    // can refuse anything.
    if std::error::Error::source(status).is_some() {
        return None;
    }
    let text = format!("{:?}: {}", status.code(), status.message());
    match status.code() {
        Code::Unimplemented => Some((Refused::Unimplemented(text), status.code())),
        Code::Unknown
        | Code::Internal
        | Code::InvalidArgument
        | Code::FailedPrecondition
        | Code::NotFound
        | Code::Unauthenticated
        | Code::PermissionDenied => Some((Refused::EndedTheStream(text), status.code())),
        _ => None,
    }
}
