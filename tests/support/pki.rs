//! Certificates made for a test (rcgen): a CA, server certificates it signs
//! (for `localhost` and `127.0.0.1`), client certificates with URI and DNS
//! SANs, written as PEM files into a directory.
//!
//! Include it with `#[path = "support/pki.rs"] mod pki;`.

#![allow(dead_code)] // each test crate uses its own subset of the helpers

use std::path::{Path, PathBuf};

#[path = "files.rs"]
mod files;
pub use files::write_whole;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};
use xds_gateway::config::{ClientAuth, ServerTlsFiles};

/// A certificate authority.
pub struct Ca {
    pub pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A leaf certificate and its key, as PEM.
pub struct Leaf {
    pub cert: String,
    pub key: String,
    pub der: Vec<u8>,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("CA certificate");
        Ca {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A server certificate for `localhost` and `127.0.0.1`; `tag` goes in
    /// its common name, so two of them differ.
    pub fn server(&self, tag: &str) -> Leaf {
        let mut params = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
            .expect("server params");
        params
            .distinguished_name
            .push(DnType::CommonName, format!("xds-gateway test server {tag}"));
        self.sign(params)
    }

    /// A client certificate with these URI SANs (e.g. SPIFFE ids) and DNS SANs.
    pub fn client(&self, uris: &[&str], dns: &[&str]) -> Leaf {
        let mut params =
            CertificateParams::new(dns.iter().map(|d| d.to_string()).collect::<Vec<_>>())
                .expect("client params");
        for uri in uris {
            params
                .subject_alt_names
                .push(SanType::URI((*uri).try_into().expect("a URI SAN")));
        }
        params
            .distinguished_name
            .push(DnType::CommonName, "xds-gateway test client");
        self.sign(params)
    }

    fn sign(&self, params: CertificateParams) -> Leaf {
        let key = KeyPair::generate().expect("leaf key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("leaf certificate");
        Leaf {
            cert: cert.pem(),
            key: key.serialize_pem(),
            der: cert.der().to_vec(),
        }
    }
}

impl Leaf {
    /// Writes `<name>.pem` and `<name>-key.pem` into `dir`; returns their paths.
    pub fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{name}.pem"));
        let key = dir.join(format!("{name}-key.pem"));
        write_whole(&cert, &self.cert);
        write_whole(&key, &self.key);
        (cert, key)
    }
}

/// A test's PKI in a directory of its own: a CA (as `ca.pem`), the server
/// certificate it signs (`server.pem`, `server-key.pem`), and the client
/// certificates a test adds.
pub struct PkiDir {
    pub dir: tempfile::TempDir,
    pub ca: Ca,
}

impl PkiDir {
    /// A CA named `ca_name` and a server certificate tagged `server_tag`.
    pub fn new(ca_name: &str, server_tag: &str) -> PkiDir {
        let pki = PkiDir {
            dir: tempfile::tempdir().expect("tempdir"),
            ca: Ca::new(ca_name),
        };
        write_whole(&pki.path("ca.pem"), &pki.ca.pem);
        pki.ca.server(server_tag).write(pki.dir.path(), "server");
        pki
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes a client certificate of this CA as `<name>.pem` and
    /// `<name>-key.pem`.
    pub fn client(&self, name: &str, uris: &[&str], dns: &[&str]) {
        self.ca.client(uris, dns).write(self.dir.path(), name);
    }

    /// Writes a client certificate of another CA (same SANs) as `<name>`.
    pub fn forged_client(&self, name: &str, uris: &[&str]) {
        Ca::new("another CA")
            .client(uris, &[])
            .write(self.dir.path(), name);
    }

    /// Server TLS with this server certificate, trusting clients of this CA.
    pub fn server_tls(&self, client_auth: ClientAuth) -> ServerTlsFiles {
        ServerTlsFiles {
            cert: self.path("server.pem"),
            key: self.path("server-key.pem"),
            client_ca: Some(self.path("ca.pem")),
            client_auth,
        }
    }
}
