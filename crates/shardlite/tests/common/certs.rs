//! Certificates made for a test (rcgen): a certificate authority, and certificates it signs for
//! `localhost` and `127.0.0.1`.
#![allow(dead_code)] // each test binary uses a part of it

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

/// A certificate authority made for one test.
pub struct Ca(CertifiedIssuer<'static, KeyPair>);

impl Ca {
    /// A new authority named `name`.
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        Self(CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap())
    }

    /// A certificate for `localhost` and `127.0.0.1` signed by this CA: (certificate PEM, key PEM).
    pub fn issue(&self) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
        let cert = CertificateParams::new(names).unwrap().signed_by(&key, &self.0).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// The authority's certificate, PEM.
    pub fn pem(&self) -> String {
        self.0.pem()
    }

    /// The authority's certificate, DER.
    pub fn der(&self) -> rustls::pki_types::CertificateDer<'static> {
        self.0.der().clone()
    }
}
