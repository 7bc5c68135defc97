//! TLS with rustls (ring; no OpenSSL): the server's certificate chain and key from PEM files
//! (`--tls-cert`, `--tls-key`), HTTP/2 and HTTP/1.1 offered through ALPN, and optionally client
//! certificates signed by `--tls-client-ca` required (mutual TLS). [`Tls::reload`] re-reads the
//! files (SIGHUP in `shardlite serve`): each handshake takes the configuration in force when it
//! starts, so connections already open keep theirs and none is dropped. And the client side a
//! node speaks to the other nodes with (`node_client`: the system's roots and `--node-ca`).

use std::{
    fmt,
    path::{Path, PathBuf},
    sync::{Arc, RwLock},
};

use rustls::{
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer},
    server::WebPkiClientVerifier,
    RootCertStore, ServerConfig,
};
use tokio_rustls::TlsAcceptor;

/// The files TLS is configured from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, PEM, the server's own certificate first.
    pub cert: PathBuf,
    /// The private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// The CAs whose client certificates are accepted; `None`: no client certificate asked.
    pub client_ca: Option<PathBuf>,
}

/// The acceptor in force, swapped whole when the files are re-read.
pub struct Tls {
    files: TlsFiles,
    acceptor: RwLock<TlsAcceptor>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls").field("files", &self.files).finish()
    }
}

impl Tls {
    /// Reads the files; the error names the file and what is wrong with it.
    pub fn load(files: TlsFiles) -> Result<Self, String> {
        let acceptor = RwLock::new(acceptor(&files)?);
        Ok(Self { files, acceptor })
    }

    /// Re-reads the files. Files that do not load leave the configuration in force as it was.
    pub fn reload(&self) -> Result<(), String> {
        let acceptor = acceptor(&self.files)?;
        *self.acceptor.write().unwrap_or_else(|p| p.into_inner()) = acceptor;
        Ok(())
    }

    /// The acceptor for the next handshake.
    pub fn acceptor(&self) -> TlsAcceptor {
        self.acceptor.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// A TLS acceptor of `files`, offering HTTP/2 and HTTP/1.1.
fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let mut roots = RootCertStore::empty();
            for cert in certificates(path)? {
                roots.add(cert).map_err(|e| format!("{}: {e}", path.display()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| format!("{}: {e}", path.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| format!("{}: no private key read: {e}", files.key.display()))?;
    let mut config = builder
        .with_single_cert(certificates(&files.cert)?, key)
        .map_err(|e| format!("{} and {}: {e}", files.cert.display(), files.key.display()))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The TLS a node speaks to the other nodes of its cluster with (the forwarding client's): the
/// system's roots and the certificates of `node_ca`, the cluster's own CA.
pub(super) fn node_client(node_ca: Option<&Path>) -> Result<rustls::ClientConfig, String> {
    let mut roots = RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    for cert in node_ca.map(certificates).transpose()?.into_iter().flatten() {
        roots.add(cert).map_err(|e| format!("--node-ca: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

/// Every certificate of the PEM file at `path` (at least one).
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate in the file", path.display()));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn bad_files_are_refused_naming_them_and_a_failed_reload_keeps_the_config() {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap().self_signed(&key).unwrap();
        let files = TlsFiles {
            cert: write(dir.path(), "cert.pem", &cert.pem()),
            key: write(dir.path(), "key.pem", &key.serialize_pem()),
            client_ca: None,
        };
        let tls = Tls::load(files.clone()).unwrap();
        std::fs::write(&files.cert, "not a certificate").unwrap();
        let err = tls.reload().unwrap_err();
        assert!(err.contains("cert.pem"), "{err}");
        let err = Tls::load(files.clone()).unwrap_err();
        assert!(err.contains("cert.pem") && err.contains("no certificate"), "{err}");
        let missing = TlsFiles { key: dir.path().join("nope.pem"), ..files };
        assert!(Tls::load(missing).unwrap_err().contains("nope.pem"));
    }
}
