//! Who may see the admin listener's details (`/metrics`, the `/readyz`
//! details, the debug views, the page, CSDS): the one decision, from a
//! request's `Authorization` value and the TLS client certificate its
//! connection presented.
//!
//! Two credentials open them, as the gateway is set up:
//! - an admin token of the auth policy (`[admin] token-sha256`), as a
//!   bearer token or as the password of HTTP Basic;
//! - with mTLS on the admin listener (`--admin-client-ca`), a client
//!   certificate that CA signed; if the policy's `[admin]` names SANs
//!   (`uri-san`, `dns-san`, matched as a principal's are), one they name.
//!   It is verified again against the CA in service at every request, so
//!   a reloaded CA that no longer trusts it closes the details to it at
//!   once, on connections opened before the reload too; a reloaded policy
//!   likewise.
//!
//! A request that sends an `Authorization` value is judged by it alone, as
//! on the REST listener (a wrong token is refused even with a good
//! certificate). With neither kind of credential set up, the details are
//! open on loopback (the admin listener's default place), and off loopback
//! only with `--allow-insecure-admin` (a network that fences the port).
//! Refusals are 401s whose message says what would have opened them, never
//! what the configured credentials are.

use std::sync::Arc;

use crate::auth::{Identity, Policy};
use crate::face::ApiError;
use crate::tls::PeerIdentity;
use crate::xds::ResourceType;

use super::{admin_token, Admin};

impl Admin {
    /// Whether a request sending `authorization` over a connection whose
    /// verified client certificate is `peer` may see `what` (a path, or
    /// "CSDS"); `Err` is the 401's message.
    pub(super) fn authorize_details(
        &self,
        what: &str,
        authorization: Option<&str>,
        peer: Option<&PeerIdentity>,
    ) -> Result<(), String> {
        let policy = self.auth.as_ref().map(|auth| auth.current());
        let policy = policy.as_deref();
        let tokens = policy.is_some_and(Policy::admin_needs_token);
        let certificates = self.client_trust.as_ref();
        if !tokens && certificates.is_none() {
            if !self.config.needs_credential {
                return Ok(());
            }
            // With secrets, start-up refuses this; a reloaded policy without
            // admin tokens must not open secrets off loopback either.
            let why = if self.config.allow_secrets {
                "serves secrets (--allow-secrets), but the auth policy in service has no admin token"
            } else {
                "none is set up; give the auth policy an [admin] token, or the admin listener client \
                 certificates (--admin-client-ca), or start the gateway with \
                 --allow-insecure-admin if the network fences the admin port"
            };
            return Err(format!(
                "{what} needs an admin credential: the admin listener is off loopback and {why}"
            ));
        }
        let refuse = |why: Option<String>| {
            let needed = self.needed(policy, tokens);
            Err(match why {
                Some(why) => format!("{what} needs {needed}; {why}"),
                None => format!("{what} needs {needed}"),
            })
        };
        if let Some(value) = authorization {
            let token = admin_token(value);
            if tokens && policy.is_some_and(|p| p.admin_token_ok(token.as_deref())) {
                return Ok(());
            }
            return refuse(Some(
                "the Authorization value is not an admin token of the auth policy".into(),
            ));
        }
        let (Some(tls), Some(peer)) = (certificates, peer) else {
            return refuse(None);
        };
        if !tls.trusts(peer) {
            return refuse(Some(
                "the admin client CA was reloaded and no longer trusts this connection's certificate"
                    .into(),
            ));
        }
        match policy.map_or(Ok(()), |p| p.admin_certificate(peer)) {
            Ok(()) => Ok(()),
            Err(names) => refuse(Some(format!(
                "{names}, which the auth policy's [admin] uri-san and dns-san do not name"
            ))),
        }
    }

    /// Whether the details ask for a credential (admin tokens in the
    /// policy in service, or admin client certificates).
    pub(super) fn asks_for_credentials(&self) -> bool {
        self.client_trust.is_some()
            || self
                .auth
                .as_ref()
                .is_some_and(|auth| auth.current().admin_needs_token())
    }

    /// Which nodes a request may see the history and diffs of; `Err` is
    /// the 401's message (neither what opens the details nor a principal's
    /// token).
    pub(super) fn sight(
        &self,
        what: &str,
        authorization: Option<&str>,
        peer: Option<&PeerIdentity>,
    ) -> Result<Sight, String> {
        let Err(refusal) = self.authorize_details(what, authorization, peer) else {
            return Ok(Sight::All);
        };
        let policy = self.auth.as_ref().map(|auth| auth.current());
        let token = authorization.and_then(admin_token);
        let (Some(policy), Some(token)) = (policy, token) else {
            return Err(refusal);
        };
        let digest = crate::auth::sha256(&token);
        match policy.identify_digest(Some(&digest), None) {
            Identity::Principal { index, name, .. } => Ok(Sight::Principal {
                index,
                name,
                policy,
            }),
            _ => Err(format!(
                "{refusal}, or a bearer token of a principal of the auth policy"
            )),
        }
    }

    /// What opens the details, in words.
    fn needed(&self, policy: Option<&Policy>, tokens: bool) -> String {
        let token = "`Authorization: Bearer <token>` with an admin token of the auth policy";
        if self.client_trust.is_none() {
            return token.into();
        }
        let named = policy.is_some_and(Policy::admin_names_certificates);
        let certificate = format!(
            "a client certificate signed by the admin listener's client CA (--admin-client-ca){}",
            if named {
                " with a SAN the auth policy's [admin] uri-san or dns-san names"
            } else {
                ""
            }
        );
        match tokens {
            true => format!("{certificate}, or {token}"),
            false => certificate,
        }
    }
}

/// Which nodes a request may see the history and diffs of.
#[derive(Debug)]
pub(super) enum Sight {
    /// Every node: the request may see the details.
    All,
    /// The nodes principal `index` (of `policy`, the one in service when the
    /// request came) may fetch.
    Principal {
        index: usize,
        name: String,
        policy: Arc<Policy>,
    },
}

impl Sight {
    /// Whether it may see `kind` of the node `id` of `cluster`, or of some
    /// cluster (checked before looking, so a refusal says nothing of what
    /// is held); `Err` is the 403.
    pub(super) fn check(
        &self,
        kind: ResourceType,
        id: &str,
        cluster: Option<&str>,
    ) -> Result<(), ApiError> {
        let (index, name, policy) = match self {
            Sight::All => return Ok(()),
            Sight::Principal {
                index,
                name,
                policy,
            } => (*index, name, policy),
        };
        if policy.binds(index, None, Some(kind), id, cluster) {
            return Ok(());
        }
        let of_cluster = cluster.map(|c| format!(" of cluster {c:?}"));
        Err(ApiError::Forbidden(format!(
            "principal {name:?} may not see {} of node {id:?}{} (the auth policy's rules decide, as \
             for a fetch)",
            kind.short_name(),
            of_cluster.unwrap_or_default()
        )))
    }
}
