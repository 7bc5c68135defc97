//! `https://`: a server with a certificate of a CA made here (rcgen) is reached by a client
//! that trusts that CA, and refused by one that does not.

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use shardlite_client::{Client, Error};
use shardlite_engine::Store;
use shardlite_server::{ServerOptions, SqliteBackend};
use tokio::net::TcpListener;

use crate::common::fast;

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(rcgen::DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

#[tokio::test]
async fn https_with_a_trusted_ca() {
    let (dir, ca) = (tempfile::tempdir().unwrap(), ca("test CA"));
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".into()]).unwrap().signed_by(&key, &ca).unwrap();
    std::fs::write(dir.path().join("cert.pem"), cert.pem()).unwrap();
    std::fs::write(dir.path().join("key.pem"), key.serialize_pem()).unwrap();
    let options = ServerOptions {
        tls_cert: Some(dir.path().join("cert.pem")),
        tls_key: Some(dir.path().join("key.pem")),
        ..ServerOptions::default()
    };
    let (create, config) = fast();
    let store = Store::create(dir.path().join("data"), create, config).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://localhost:{}", listener.local_addr().unwrap().port());
    let backend = Arc::new(SqliteBackend::new(Arc::new(store)));
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(shardlite_server::run(listener, backend, options, async {
        let _ = stopped.await;
    }));

    let trusting = Client::builder(&url).add_root_certificates_pem(ca.pem()).build().unwrap();
    assert!(trusting.put(b"k", "over tls").await.unwrap().created);
    assert_eq!(trusting.get(b"k").await.unwrap().unwrap().value, "over tls");
    let stranger = Client::builder(&url).add_root_certificates_pem(self::ca("another CA").pem()).build().unwrap();
    assert!(matches!(stranger.get(b"k").await, Err(Error::Transport(_))), "an unknown CA is refused");
}
