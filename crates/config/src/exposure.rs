//! Who may reach what the gateway serves: the rules for listeners off
//! loopback. A REST listener there needs TLS or an auth policy (or the
//! operator's word that the network is trusted), and `--allow-secrets`
//! there needs callers told apart (a policy, or required mTLS). Secrets
//! are never served over sessions keyed by cluster, which give every node
//! of a cluster what the upstream made for the first. `--allow-secrets`
//! is what serves private keys wherever they sit: the secrets type, and
//! the key material inline in any other resource (without it, that is
//! taken out: `xds::keys`), so these rules cover both. Checked by
//! [`Config::validate`] before anything binds.

use super::{ClientAuth, Config, ConfigError, SessionKey};

impl Config {
    /// A REST listener off loopback must be protected (TLS or an auth
    /// policy) unless the operator says otherwise: anyone who reaches an
    /// unprotected one can name any node and get its config.
    pub(super) fn validate_exposure(&self) -> Result<(), ConfigError> {
        self.validate_session_key()?;
        self.validate_admin_exposure()?;
        if self.listen.ip().is_loopback() {
            return Ok(());
        }
        self.validate_secrets_exposure()?;
        let protected = self.tls.is_some() || self.auth_policy.is_some();
        if protected || self.allow_insecure_listen {
            return Ok(());
        }
        Err(ConfigError::Invalid {
            key: "listen",
            reason: format!(
                "{} is not a loopback address, and the REST listener has neither TLS (--tls-cert/--tls-key) \
                 nor an authorization policy (--auth-policy): anyone who reaches it could take any node's \
                 identity and read its config. Add one, or say --allow-insecure-listen if the network \
                 in front of it is trusted (a container whose port is published on loopback only)",
                self.listen
            ),
        })
    }

    /// `--allow-secrets` off loopback needs callers told apart: an auth
    /// policy (`--auth-policy`, which names who may have secrets) or mTLS
    /// with required client certificates (`--client-ca`, `--client-auth
    /// required`). Server-only TLS encrypts the connection but lets anyone
    /// who reaches the listener name any node and take its private keys;
    /// `--allow-insecure-listen` does not lift this rule.
    fn validate_secrets_exposure(&self) -> Result<(), ConfigError> {
        let mtls_required = self
            .tls
            .as_ref()
            .is_some_and(|t| t.client_ca.is_some() && t.client_auth == ClientAuth::Required);
        if !self.allow_secrets || self.auth_policy.is_some() || mtls_required {
            return Ok(());
        }
        Err(ConfigError::Invalid {
            key: "allow-secrets",
            reason: format!(
                "--listen {} is not a loopback address, and secrets (and the private keys inline in \
                 clusters and listeners) would be served to anyone who reaches it: server-only TLS does \
                 not say who the client is, so any client could name any node and take its private keys. Off loopback, --allow-secrets needs an \
                 authorization policy (--auth-policy) naming who may have secrets, or mTLS with \
                 required client certificates (--client-ca, --client-auth required)",
                self.listen
            ),
        })
    }

    /// The admin listener off loopback with `--allow-secrets` serves every
    /// node's private keys (`/debug/config`, CSDS: its secrets, and the
    /// keys inline in its clusters and listeners), so it needs a
    /// credential, as the REST listener does: admin
    /// client certificates (`--admin-client-ca`), or an auth policy (whose
    /// `[admin]` must then hold a token: checked when it is loaded).
    fn validate_admin_exposure(&self) -> Result<(), ConfigError> {
        let certificates = self
            .admin_tls
            .as_ref()
            .is_some_and(|t| t.client_ca.is_some());
        if !self.allow_secrets
            || self.admin.ip().is_loopback()
            || certificates
            || self.auth_policy.is_some()
        {
            return Ok(());
        }
        Err(ConfigError::Invalid {
            key: "admin",
            reason: format!(
                "--admin {} is not a loopback address, and with --allow-secrets its /debug/config and \
                 CSDS serve every node's private keys (its secrets, and the keys inline in its clusters \
                 and listeners) to anyone who reaches it. Off loopback, the admin \
                 listener needs a credential: an admin token in the auth policy (--auth-policy, \
                 [admin] token-sha256) or admin client certificates (--admin-client-ca)",
                self.admin
            ),
        })
    }

    /// `--session-key cluster` with `--allow-secrets` is refused: one upstream
    /// session serves every node of a cluster, opened with the first node's id,
    /// so each would get the secrets the control plane made for that first
    /// node, whatever the auth policy binds. (A policy whose rules name nodes
    /// is refused with it too, when the policy is loaded.)
    fn validate_session_key(&self) -> Result<(), ConfigError> {
        if self.session_key != SessionKey::Cluster || !self.allow_secrets {
            return Ok(());
        }
        Err(ConfigError::Invalid {
            key: "session-key",
            reason: "--session-key cluster cannot go with --allow-secrets: every node of a cluster \
                     shares one upstream session, opened with the first node's id, so each node would \
                     be served the secrets the control plane made for that first node (edge-2 gets \
                     edge-1's private key). Use --session-key node (the default) to serve secrets"
                .into(),
        })
    }
}
