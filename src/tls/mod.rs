//! TLS on the gateway's own listeners (rustls, ring): the server
//! certificate and key, and for mTLS the client CA, loaded from PEM files
//! and reloaded when they change on disk (no restart). A reload that fails
//! (a key that does not match its certificate, a half-written file) keeps
//! the configuration in service and is logged; the next change is tried
//! again. Every new connection takes the configuration current at its
//! handshake. An established connection keeps its session, but every
//! reload is announced with the client CA then in service
//! ([`ServerTls::client_trust`]) so that a long poll or watch the
//! connection holds open verifies its certificate again and ends if the
//! new CA no longer trusts it.
//!
//! What a client certificate says about its owner is [`PeerIdentity`];
//! whether that owner may fetch a node's config is `auth`'s business.

mod peer;

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::UnixTime;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;
use tracing::{info, warn};

pub(crate) use peer::PeerIdentity;

use crate::config::{ClientAuth, ServerTlsFiles};
use crate::metrics::Metrics;

/// Why a TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },
    #[error("{0}")]
    Rustls(#[from] rustls::Error),
    #[error("client CA {path}: {reason}")]
    ClientCa { path: PathBuf, reason: String },
}

/// A listener's TLS configuration, reloaded when its files change.
#[derive(Debug)]
pub(crate) struct ServerTls {
    /// The `file` label of its reloads in `/metrics` (`tls`, `admin-tls`).
    label: &'static str,
    files: ServerTlsFiles,
    current: RwLock<Arc<ServerConfig>>,
    /// The client CA in service, sent again at every reload.
    trust: tokio::sync::watch::Sender<Arc<ClientTrust>>,
    metrics: Arc<Metrics>,
    watcher: std::sync::Mutex<Option<crate::reload::Watcher>>,
}

impl ServerTls {
    /// Loads `files` (an error names the file) and starts watching them;
    /// reloads are counted under `label`.
    pub(crate) fn start(
        label: &'static str,
        files: ServerTlsFiles,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<ServerTls>, TlsError> {
        let (config, trust) = build(&files)?;
        let tls = Arc::new(ServerTls {
            label,
            current: RwLock::new(Arc::new(config)),
            trust: tokio::sync::watch::Sender::new(Arc::new(trust)),
            metrics,
            watcher: std::sync::Mutex::default(),
            files,
        });
        let watcher =
            crate::reload::watch(tls.files.paths(), Arc::downgrade(&tls), ServerTls::reload);
        *crate::sync::lock(&tls.watcher) = Some(watcher);
        Ok(tls)
    }

    /// An acceptor with the configuration current now.
    pub(crate) fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(crate::sync::read(&self.current).clone())
    }

    /// The client CA in service now and at every reload from now on.
    pub(crate) fn client_trust(&self) -> tokio::sync::watch::Receiver<Arc<ClientTrust>> {
        self.trust.subscribe()
    }

    pub(crate) fn asks_for_client_certificates(&self) -> bool {
        self.files.client_ca.is_some()
    }

    /// Whether `peer`'s chain verifies against the client CA in service now.
    pub(crate) fn trusts(&self, peer: &PeerIdentity) -> bool {
        self.trust.borrow().trusts(peer)
    }

    fn reload(&self) {
        match build(&self.files) {
            Ok((config, trust)) => {
                *crate::sync::write(&self.current) = Arc::new(config);
                self.trust.send_replace(Arc::new(trust));
                info!(cert = %self.files.cert.display(), "TLS certificate reloaded");
                self.metrics.reloaded(self.label, true);
            }
            Err(e) => {
                warn!(error = %e, "TLS files changed but do not load; the previous certificate stays in service");
                self.metrics.reloaded(self.label, false);
            }
        }
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The client CA a listener trusts (none: it asks for no certificate).
#[derive(Debug)]
pub(crate) struct ClientTrust {
    verifier: Option<Arc<dyn ClientCertVerifier>>,
}

impl ClientTrust {
    /// Whether `peer`'s chain verifies against this CA now.
    pub(crate) fn trusts(&self, peer: &PeerIdentity) -> bool {
        let Some(verifier) = &self.verifier else {
            return false;
        };
        let Some((end_entity, intermediates)) = peer.chain.split_first() else {
            return false;
        };
        verifier
            .verify_client_cert(end_entity, intermediates, UnixTime::now())
            .is_ok()
    }
}

/// The rustls server configuration `files` describe, and its client CA.
fn build(files: &ServerTlsFiles) -> Result<(ServerConfig, ClientTrust), TlsError> {
    let certs = certificates(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| file_error(&files.key, e))?;
    let builder =
        ServerConfig::builder_with_provider(provider()).with_safe_default_protocol_versions()?;
    let mut trust = ClientTrust { verifier: None };
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let ca_error = |e: &dyn std::fmt::Display| TlsError::ClientCa {
                path: ca.clone(),
                reason: e.to_string(),
            };
            let mut roots = RootCertStore::empty();
            for cert in certificates(ca)? {
                roots.add(cert).map_err(|e| ca_error(&e))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
            let verifier = match files.client_auth {
                ClientAuth::Required => verifier,
                ClientAuth::Optional => verifier.allow_unauthenticated(),
            };
            let verifier = verifier.build().map_err(|e| ca_error(&e))?;
            trust.verifier = Some(verifier.clone());
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::File {
            path: files.key.clone(),
            reason: format!("does not go with {}: {e}", files.cert.display()),
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((config, trust))
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, e))?;
    if certs.is_empty() {
        return Err(TlsError::File {
            path: path.to_owned(),
            reason: "holds no PEM certificate".into(),
        });
    }
    Ok(certs)
}

fn file_error(path: &Path, e: rustls::pki_types::pem::Error) -> TlsError {
    TlsError::File {
        path: path.to_owned(),
        reason: e.to_string(),
    }
}
