//! Who is asking, and may they ask for this node: the one check every route
//! that serves a node's config calls (POST, GET, long polls, pass-through;
//! a future watch stream calls [`Caller::may_fetch`] the same way).
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
//! Without a policy everyone is let through (today's behaviour). Tokens
//! are never logged; messages name the principal, never the credential.

use std::sync::Arc;

use axum::http::{header, HeaderMap};

use super::Gateway;
use crate::auth::{Identity, Policy};
use crate::tls::PeerIdentity;
use crate::xds::ResourceType;

/// Why a request was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AuthError {
    /// No credentials, or credentials no principal holds: 401.
    #[error("{0}")]
    Unauthenticated(String),
    /// A known principal asking for what it may not have: 403.
    #[error("{0}")]
    Forbidden(String),
}

/// Who sent a request.
#[derive(Debug, Clone)]
pub(crate) enum Caller {
    /// No policy: anyone may fetch anything.
    Anyone,
    /// A principal of the policy in service when the request arrived.
    Principal {
        policy: Arc<Policy>,
        index: usize,
        name: String,
        by: String,
    },
}

/// Step 1: who the request is, from its headers and connection.
pub(super) fn authenticate(
    gateway: &Gateway,
    headers: &HeaderMap,
    peer: Option<&PeerIdentity>,
) -> Result<Caller, AuthError> {
    let Some(auth) = &gateway.auth else {
        return Ok(Caller::Anyone);
    };
    let policy = auth.current();
    let token = bearer_token(headers)?;
    match policy.identify(token, peer) {
        Identity::Principal { index, name, by } => Ok(Caller::Principal {
            policy,
            index,
            name,
            by,
        }),
        Identity::UnknownToken => Err(AuthError::Unauthenticated(
            "the bearer token is not one the gateway's auth policy knows".into(),
        )),
        Identity::UnknownCertificate(what) => Err(AuthError::Unauthenticated(format!(
            "{what} is not a principal of the gateway's auth policy"
        ))),
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
    let (scheme, token) = text.trim().split_once(' ').ok_or_else(malformed)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(malformed());
    }
    Ok(Some(token))
}

impl Caller {
    /// The principal's name (`None`: no policy).
    pub(crate) fn principal(&self) -> Option<&str> {
        match self {
            Caller::Anyone => None,
            Caller::Principal { name, .. } => Some(name),
        }
    }

    /// Step 2: whether this caller may fetch `kind` for node `id` of `cluster`.
    pub(crate) fn may_fetch(
        &self,
        kind: ResourceType,
        id: &str,
        cluster: &str,
    ) -> Result<(), AuthError> {
        match self {
            Caller::Anyone => Ok(()),
            Caller::Principal {
                policy,
                index,
                name,
                by,
            } => {
                if policy.allows(*index, kind, id, cluster) {
                    return Ok(());
                }
                Err(AuthError::Forbidden(format!(
                    "principal {name:?} ({by}) may not fetch {} for node {id:?} (cluster {cluster:?})",
                    kind.short_name()
                )))
            }
        }
    }

    /// Whether this caller may use the HDS/CSDS pass-through.
    pub(crate) fn may_pass_through(&self, what: &str) -> Result<(), AuthError> {
        match self {
            Caller::Anyone => Ok(()),
            Caller::Principal {
                policy,
                index,
                name,
                by,
            } => {
                if policy.allows_pass_through(*index) {
                    return Ok(());
                }
                Err(AuthError::Forbidden(format!(
                    "principal {name:?} ({by}) may not use {what} (pass-through = true in its policy entry)"
                )))
            }
        }
    }
}
