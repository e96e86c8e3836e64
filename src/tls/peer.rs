//! Who a TLS client is, as its verified certificate says: the URI SANs
//! (a SPIFFE id, for example) and DNS SANs of its end-entity certificate.
//! Nothing else of the certificate is trusted as a name (the subject's
//! common name is not: SANs are what verifiers and SPIFFE use).

use rustls::pki_types::CertificateDer;
use rustls::server::ServerConnection;
use x509_parser::extensions::GeneralName;

/// The names in a verified client certificate, and the chain it was
/// verified with (to verify it again when the client CA is reloaded).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PeerIdentity {
    pub(crate) uris: Vec<String>,
    pub(crate) dns: Vec<String>,
    /// End-entity certificate first, then the intermediates it sent.
    pub(crate) chain: Vec<CertificateDer<'static>>,
}

impl PeerIdentity {
    /// The identity of the client of `connection`, if it presented a
    /// certificate (rustls has verified it against the client CA).
    pub(crate) fn of(connection: &ServerConnection) -> Option<PeerIdentity> {
        let chain = connection.peer_certificates()?;
        let mut identity = PeerIdentity::from_der(chain.first()?.as_ref())?;
        identity.chain = chain.iter().map(|c| c.clone().into_owned()).collect();
        Some(identity)
    }

    /// The SANs of a DER certificate (`None` if it does not parse).
    pub(crate) fn from_der(der: &[u8]) -> Option<PeerIdentity> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let mut identity = PeerIdentity::default();
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    GeneralName::URI(uri) => identity.uris.push((*uri).to_owned()),
                    GeneralName::DNSName(dns) => identity.dns.push((*dns).to_owned()),
                    _ => {}
                }
            }
        }
        Some(identity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sans_are_read() {
        let mut params = rcgen::CertificateParams::new(vec!["edge.example".to_owned()]).unwrap();
        params.subject_alt_names.push(rcgen::SanType::URI(
            "spiffe://mesh.example/ns/edge/sa/envoy".try_into().unwrap(),
        ));
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let identity = PeerIdentity::from_der(cert.der()).unwrap();
        assert_eq!(identity.uris, ["spiffe://mesh.example/ns/edge/sa/envoy"]);
        assert_eq!(identity.dns, ["edge.example"]);
        assert!(PeerIdentity::from_der(b"not a certificate").is_none());
    }
}
