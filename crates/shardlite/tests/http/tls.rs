//! TLS with certificates generated here (rcgen): HTTPS over HTTP/1.1 and HTTP/2 (chosen through
//! ALPN), client certificates refused and accepted (`--tls-client-ca`), the certificate
//! re-read on reload while a connection made with the old one goes on, and `shardlite bench
//! --url https://...` and `stats --url https://...` against such a server.

use std::{path::Path, process::Command, sync::Arc, time::Duration};

use reqwest::{StatusCode, Version};
use shardlite_engine::Store;
use shardlite_server::{Reload, ServerOptions, SqliteBackend};
use tokio::{net::TcpListener, sync::oneshot};

use crate::{
    certs::Ca,
    common::{config, directory, key},
};

/// A client trusting `ca`, offering `alpn`, presenting `identity` (certificate and key PEM).
fn client(ca: &Ca, alpn: &[&[u8]], identity: Option<&(String, String)>) -> reqwest::Client {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            use rustls::pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer};
            let chain = vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()];
            builder.with_client_auth_cert(chain, PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap()).unwrap()
        }
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let builder = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(20));
    builder.use_preconfigured_tls(config).build().unwrap()
}

/// A TLS server over a new store: its `https://localhost:PORT` URL, its reload handle, the
/// handle to stop it and its task; the files in `dir`.
struct TlsServer {
    url: String,
    reload: Reload,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    _store: tempfile::TempDir,
}

impl TlsServer {
    async fn start(dir: &Path, (cert, key): &(String, String), client_ca: Option<&Ca>) -> Self {
        std::fs::write(dir.join("cert.pem"), cert).unwrap();
        std::fs::write(dir.join("key.pem"), key).unwrap();
        if let Some(ca) = client_ca {
            std::fs::write(dir.join("client-ca.pem"), ca.pem()).unwrap();
        }
        let options = ServerOptions {
            tls_cert: Some(dir.join("cert.pem")),
            tls_key: Some(dir.join("key.pem")),
            tls_client_ca: client_ca.map(|_| dir.join("client-ca.pem")),
            ..ServerOptions::default()
        };
        let store_dir = tempfile::tempdir().unwrap();
        let store = Store::create(store_dir.path(), directory(), config()).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://localhost:{}", listener.local_addr().unwrap().port());
        let (stop, stopped) = oneshot::channel::<()>();
        let reload = Reload::default();
        let backend = Arc::new(SqliteBackend::new(Arc::new(store)));
        let task =
            tokio::spawn(shardlite_server::run_reloading(listener, backend, options, reload.clone(), None, async {
                let _ = stopped.await;
            }));
        Self { url, reload, stop: Some(stop), task, _store: store_dir }
    }

    fn kv(&self, i: u32) -> String {
        format!("{}/kv/{}", self.url, hex::encode(key(i)))
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(30), self.task).await.unwrap().unwrap().unwrap();
    }
}

#[tokio::test]
async fn https_serves_http1_and_http2_chosen_through_alpn() {
    let (dir, ca) = (tempfile::tempdir().unwrap(), Ca::new("test CA"));
    let server = TlsServer::start(dir.path(), &ca.issue(), None).await;
    for (alpn, version) in [(&b"http/1.1"[..], Version::HTTP_11), (&b"h2"[..], Version::HTTP_2)] {
        let http = client(&ca, &[alpn], None);
        let put = http.put(server.kv(1)).body("over tls").send().await.unwrap();
        assert!(put.status().is_success() && put.version() == version, "{:?} {:?}", put.status(), put.version());
        let get = http.get(server.kv(1)).send().await.unwrap();
        assert_eq!((get.status(), get.version()), (StatusCode::OK, version));
        assert_eq!(get.text().await.unwrap(), "over tls");
    }
    let plain = crate::common::client();
    let status = plain.get(server.url.replace("https", "http") + "/healthz").send().await.map(|r| r.status());
    assert!(status.as_ref().map_or(true, |s| *s != StatusCode::OK), "plain HTTP is not served: {status:?}");
    let stranger = client(&Ca::new("another CA"), &[b"h2"], None);
    assert!(stranger.get(server.kv(1)).send().await.is_err(), "a client that does not trust the CA gives up");
    server.stop().await;
}

#[tokio::test]
async fn client_certificates_are_required_and_checked_against_the_client_ca() {
    let (dir, ca, clients) = (tempfile::tempdir().unwrap(), Ca::new("server CA"), Ca::new("client CA"));
    let server = TlsServer::start(dir.path(), &ca.issue(), Some(&clients)).await;
    let healthz = format!("{}/healthz", server.url);
    assert!(client(&ca, &[b"h2"], None).get(&healthz).send().await.is_err(), "no certificate: refused");
    let forged = Ca::new("client CA").issue();
    let refused = client(&ca, &[b"h2"], Some(&forged)).get(&healthz).send().await;
    assert!(refused.is_err(), "a certificate of another CA (same name): refused");
    for alpn in [&b"http/1.1"[..], &b"h2"[..]] {
        let accepted = client(&ca, &[alpn], Some(&clients.issue())).get(&healthz).send().await.unwrap();
        assert_eq!(accepted.status(), StatusCode::OK);
    }
    server.stop().await;
}

#[tokio::test]
async fn a_new_certificate_is_served_after_reload_and_open_connections_go_on() {
    let (dir, old_ca, new_ca) = (tempfile::tempdir().unwrap(), Ca::new("old CA"), Ca::new("new CA"));
    let server = TlsServer::start(dir.path(), &old_ca.issue(), None).await;
    // HTTP/2: one connection, kept open by the client's pool.
    let old_client = client(&old_ca, &[b"h2"], None);
    assert_eq!(old_client.put(server.kv(2)).body("v").send().await.unwrap().status(), StatusCode::CREATED);
    let new_client = client(&new_ca, &[b"h2"], None);
    assert!(new_client.get(server.kv(2)).send().await.is_err(), "the new certificate is not served yet");

    let (cert, key) = new_ca.issue();
    std::fs::write(dir.path().join("cert.pem"), cert).unwrap();
    std::fs::write(dir.path().join("key.pem"), key).unwrap();
    server.reload.request();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while new_client.get(server.kv(2)).send().await.is_err() {
        assert!(std::time::Instant::now() < deadline, "the new certificate was not served within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The old client cannot handshake with the new certificate: this answer came over the
    // connection it opened before the reload.
    let get = old_client.get(server.kv(2)).send().await.unwrap();
    assert_eq!((get.status(), get.version()), (StatusCode::OK, Version::HTTP_2));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_and_stats_speak_https() {
    let (dir, ca) = (tempfile::tempdir().unwrap(), Ca::new("test CA"));
    let server = TlsServer::start(dir.path(), &ca.issue(), None).await;
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let run = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || Command::new(env!("CARGO_BIN_EXE_shardlite")).args(args).output().unwrap())
    };
    let ca_arg = ca_file.display().to_string();
    let bench = [
        "bench",
        "--url",
        &server.url,
        "--tls-ca",
        &ca_arg,
        "--workloads",
        "noop,insert",
        "--concurrency",
        "2",
        "--duration",
        "0.5",
        "--warmup",
        "0",
        "--records",
        "10",
        "--json",
    ];
    let out = run(bench.iter().map(|s| s.to_string()).collect()).await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for run in report["runs"].as_array().unwrap() {
        assert!(run["ok"].as_u64().unwrap() > 0 && run["error_total"] == 0, "{run}");
    }
    let stats = ["stats", "--url", &server.url, "--tls-ca", &ca_arg, "--json"];
    let out = run(stats.iter().map(|s| s.to_string()).collect()).await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stats["manifest"]["partitions"], crate::common::PARTITIONS);
    let untrusted = run(vec!["stats".into(), "--url".into(), server.url.clone()]).await.unwrap();
    assert!(!untrusted.status.success(), "without the CA the certificate is not trusted");
    server.stop().await;
}
