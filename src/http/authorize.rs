//! Who is asking, and may they ask for this node: the one check every route
//! that serves a node's config calls (POST, GET, long polls, watches, and
//! the HDS/CSDS pass-through, each with its own switch).
//!
//! Two steps, so a request is refused as early as possible:
//! 1. [`authenticate`] before the body is read: the bearer token
//!    (`Authorization: Bearer`) or the TLS client certificate the
//!    connection presented ([`PeerIdentity`], put on every request by
//!    `serve`) must name a principal of the policy, else 401;
//! 2. [`Caller::may_fetch`] once the node is known (parsed from the body or
//!    the query) and before the source is asked anything, so no upstream
//!    session is ever opened for a refused node: else 403, naming the
//!    principal and the node but nothing of what is configured.
//!
//! What a request holds open (a long poll, a watch) waits on
//! [`Caller::revoked`] beside its change: after a reload of the policy
//! the same credential is identified and authorized again, and after a
//! reload of the client CA the same certificate is verified again; the
//! request ends with the 401/403 it would now get if it no longer passes.
//!
//! Without a policy everyone is let through (today's behaviour). Tokens
//! are never logged; messages name the principal, never the credential.

use std::future::Future;
use std::sync::Arc;

use axum::http::{header, HeaderMap};
use tokio::sync::watch;

use super::Gateway;
use crate::auth::{sha256, AuthError, Identity, Policy};
use crate::face::credential::{self, Credential};
use crate::tls::{ClientTrust, PeerIdentity};
use crate::xds::ResourceType;

/// Who sent a request: the principal of the policy, if there is one, and
/// the TLS client certificate it came with, if any. Both are kept so that
/// a request still open after a reload can be checked again.
#[derive(Debug, Clone, Default)]
pub(crate) struct Caller {
    /// `None` without a policy: anyone may fetch anything.
    principal: Option<Principal>,
    /// The connection's verified client certificate, and the listener's
    /// client CA as it is reloaded.
    certificate: Option<Certified>,
}

/// A request's principal, and what it proved itself with (the token only
/// as its digest).
#[derive(Debug, Clone)]
struct Principal {
    policy: Arc<Policy>,
    index: usize,
    name: String,
    by: String,
    token_digest: Option<[u8; 32]>,
    peer: Option<Arc<PeerIdentity>>,
    reloads: watch::Receiver<Arc<Policy>>,
}

/// A client certificate, and the client CA reloads it is verified against.
#[derive(Debug, Clone)]
struct Certified {
    peer: Arc<PeerIdentity>,
    trust: watch::Receiver<Arc<ClientTrust>>,
}

/// Step 1: who the request is, from its headers and connection.
pub(super) fn authenticate(
    gateway: &Gateway,
    headers: &HeaderMap,
    peer: Option<&Arc<PeerIdentity>>,
) -> Result<Caller, AuthError> {
    let certificate = peer
        .zip(gateway.client_trust.as_ref())
        .map(|(peer, tls)| Certified {
            peer: peer.clone(),
            trust: tls.client_trust(),
        });
    let Some(auth) = &gateway.auth else {
        return Ok(Caller {
            principal: None,
            certificate,
        });
    };
    // Subscribed before the policy is read: a reload from here on is seen.
    let reloads = auth.subscribe();
    let policy = auth.current();
    let token_digest = bearer_token(headers)?.map(sha256);
    match policy.identify_digest(token_digest.as_ref(), peer.map(|p| &**p)) {
        Identity::Principal { index, name, by } => Ok(Caller {
            principal: Some(Principal {
                policy,
                index,
                name,
                by,
                token_digest,
                peer: peer.cloned(),
                reloads,
            }),
            certificate,
        }),
        // The 401 for a request the policy does not know.
        Identity::UnknownCertificate(what) => Err(AuthError::Unauthenticated(format!(
            "{what} is not a principal of the gateway's auth policy"
        ))),
        Identity::UnknownToken => Err(AuthError::Unauthenticated(
            "the bearer token is not one the gateway's auth policy knows".into(),
        )),
        Identity::Anonymous => Err(AuthError::Unauthenticated(
            "this gateway needs a client certificate or an `Authorization: Bearer` token".into(),
        )),
    }
}

/// The token of an `Authorization: Bearer <token>` header, if any; any
/// other authorization scheme is refused (never silently ignored).
fn bearer_token(headers: &HeaderMap) -> Result<Option<&str>, AuthError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let malformed =
        || AuthError::Unauthenticated("the Authorization header must be `Bearer <token>`".into());
    let text = value.to_str().map_err(|_| malformed())?;
    match credential::of(text) {
        Some(Credential::Bearer(token)) if !token.is_empty() => Ok(Some(token)),
        _ => Err(malformed()),
    }
}

impl Caller {
    /// The principal's name (`None`: no policy).
    pub(crate) fn principal(&self) -> Option<&str> {
        self.principal.as_ref().map(|p| p.name.as_str())
    }

    /// Step 2: whether this caller may fetch `kind` for node `id` of `cluster`.
    pub(crate) fn may_fetch(
        &self,
        kind: ResourceType,
        id: &str,
        cluster: &str,
    ) -> Result<(), AuthError> {
        match &self.principal {
            None => Ok(()),
            Some(p) => p.may_fetch(&p.policy, p.index, kind, id, cluster),
        }
    }

    /// Resolves, with the error to answer, once a reload no longer lets
    /// this caller fetch `kind` for node `id` of `cluster`: a reload of
    /// the policy that drops its credential or no longer binds the node to
    /// it, or of the client CA that no longer trusts its certificate.
    /// Never without either. For what a request holds open: a long poll,
    /// a watch.
    pub(crate) fn revoked(
        &self,
        kind: ResourceType,
        id: &str,
        cluster: &str,
    ) -> impl Future<Output = AuthError> + Send + 'static {
        let mut caller = self.clone();
        let (id, cluster) = (id.to_owned(), cluster.to_owned());
        async move {
            loop {
                let Caller {
                    principal,
                    certificate,
                } = &mut caller;
                tokio::select! {
                    () = changed(principal.as_mut().map(|p| &mut p.reloads)) => {}
                    () = changed(certificate.as_mut().map(|c| &mut c.trust)) => {}
                }
                if let Err(err) = caller.recheck(kind, &id, &cluster) {
                    return err;
                }
            }
        }
    }

    /// The same credentials against the policy and client CA in service now.
    fn recheck(&mut self, kind: ResourceType, id: &str, cluster: &str) -> Result<(), AuthError> {
        if let Some(c) = &mut self.certificate {
            if !c.trust.borrow_and_update().trusts(&c.peer) {
                return Err(AuthError::Unauthenticated(
                    "the client CA was reloaded and no longer trusts this connection's certificate"
                        .into(),
                ));
            }
        }
        let Some(p) = &mut self.principal else {
            return Ok(());
        };
        let policy = p.reloads.borrow_and_update().clone();
        match policy.identify_digest(p.token_digest.as_ref(), p.peer.as_deref()) {
            Identity::Principal { index, .. } => {
                p.may_fetch(&policy, index, kind, id, cluster).map_err(|err| {
                    AuthError::Forbidden(format!("the auth policy was reloaded: {err}"))
                })
            }
            _ => Err(AuthError::Unauthenticated(format!(
                "the auth policy was reloaded and no longer knows the credential principal {:?} was \
                 recognised by ({})",
                p.name, p.by
            ))),
        }
    }

    /// Whether this caller may use HDS as `node` (id, cluster); a request
    /// that names no node cannot be checked, so a principal is refused it.
    pub(crate) fn may_use_hds(&self, node: Option<(&str, &str)>) -> Result<(), AuthError> {
        let Some(p) = &self.principal else {
            return Ok(());
        };
        match node {
            Some((id, cluster)) if p.policy.allows_hds(p.index, p.peer.as_deref(), id, cluster) => {
                Ok(())
            }
            Some((id, cluster)) => Err(AuthError::Forbidden(format!(
                "principal {:?} ({}) may not use HDS as node {id:?} (cluster {cluster:?}): it needs hds = true \
                 and an allow rule that binds the node",
                p.name, p.by
            ))),
            None => Err(AuthError::Forbidden(format!(
                "principal {:?} ({}): under the gateway's auth policy an HDS request is a health_check_request \
                 with the node it speaks for",
                p.name, p.by
            ))),
        }
    }

    /// Whether this caller may ask the upstream's CSDS about each of `ids`
    /// (exact node ids). A principal must name the nodes it asks about:
    /// no ids (every node) is refused.
    pub(crate) fn may_ask_csds_about(&self, ids: &[&str]) -> Result<(), AuthError> {
        let Some(p) = &self.principal else {
            return Ok(());
        };
        let refuse =
            |why: String| AuthError::Forbidden(format!("principal {:?} ({}) {why}", p.name, p.by));
        if !p.policy.csds_enabled(p.index) {
            return Err(refuse(
                "may not use CSDS (csds = true in its policy entry)".into(),
            ));
        }
        if ids.is_empty() {
            return Err(refuse(
                "must name the nodes it asks CSDS about: one exact node_id matcher per node its rules allow".into(),
            ));
        }
        let refused = ids
            .iter()
            .find(|id| !p.policy.allows_csds(p.index, p.peer.as_deref(), id));
        refused.map_or(Ok(()), |id| {
            Err(refuse(format!("may not ask CSDS about node {id:?}")))
        })
    }

    /// Whether CSDS's answer about node `id` of `cluster` may reach this
    /// caller: a rule must allow both.
    pub(crate) fn may_see_csds_of(&self, id: &str, cluster: &str) -> bool {
        self.principal.as_ref().is_none_or(|p| {
            p.policy
                .allows_csds_answer(p.index, p.peer.as_deref(), id, cluster)
        })
    }
}

/// Resolves at the next value `receiver` sees; never without one, or
/// once its sender is gone (the gateway with it).
async fn changed<T>(receiver: Option<&mut watch::Receiver<T>>) {
    if let Some(receiver) = receiver {
        if receiver.changed().await.is_ok() {
            return;
        }
    }
    std::future::pending().await
}

impl Principal {
    fn may_fetch(
        &self,
        policy: &Policy,
        index: usize,
        kind: ResourceType,
        id: &str,
        cluster: &str,
    ) -> Result<(), AuthError> {
        if policy.allows(index, self.peer.as_deref(), kind, id, cluster) {
            return Ok(());
        }
        Err(AuthError::Forbidden(format!(
            "principal {:?} ({}) may not fetch {} for node {id:?} (cluster {cluster:?})",
            self.name,
            self.by,
            kind.short_name()
        )))
    }
}
