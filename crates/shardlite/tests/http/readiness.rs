//! `/readyz` against `/healthz`: a server whose storage is still opening is live (`/healthz`
//! 200) but not ready (`/readyz` 503 `not_ready`, storage requests 503), ready once the storage
//! is handed over, and not ready again once shutdown began. (A poisoned partition: the
//! `io_error` tests, which need the fault shim.)

use std::{sync::Arc, time::Duration};

use reqwest::StatusCode;
use serde_json::Value;
use shardlite_engine::Store;
use shardlite_server::{Backend, ServerOptions, SqliteBackend, Starting};
use tokio::{
    io::AsyncWriteExt,
    net::{TcpListener, TcpStream},
    sync::oneshot,
};

use crate::common::{client, config, directory, error_of, key, read_to_close, status_of};

#[tokio::test]
async fn a_server_is_live_while_its_storage_opens_and_ready_once_it_is_open() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let starting = Starting::new(config().max_value);
    let (stop, stopped) = oneshot::channel::<()>();
    let backend = Arc::clone(&starting) as Arc<dyn Backend>;
    let server = tokio::spawn(shardlite_server::run(listener, backend, ServerOptions::default(), async {
        let _ = stopped.await;
    }));
    let http = client();
    let kv = format!("{url}/kv/{}", hex::encode(key(1)));

    assert_eq!(http.get(format!("{url}/healthz")).send().await.unwrap().status(), StatusCode::OK, "live");
    let resp = http.get(format!("{url}/readyz")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    let (code, message) = error_of(resp).await;
    assert!(code == "not_ready" && message.contains("opening"), "{code}: {message}");
    let resp = http.put(&kv).body("v").send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE, "storage requests wait for the storage");
    assert_eq!(error_of(resp).await.0, "unavailable");

    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path(), directory(), config()).unwrap();
    starting.ready(Arc::new(SqliteBackend::new(Arc::new(store))));
    let resp = http.get(format!("{url}/readyz")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let body: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    assert_eq!(body, serde_json::json!({"ready": true}));
    assert_eq!(http.put(&kv).body("v").send().await.unwrap().status(), StatusCode::CREATED);
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(30), server).await.unwrap().unwrap().unwrap();
}

#[tokio::test]
async fn readyz_answers_503_once_shutdown_began() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path(), directory(), config()).unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let backend = Arc::new(SqliteBackend::new(Arc::new(store)));
    let server = tokio::spawn(shardlite_server::run(listener, backend, ServerOptions::default(), async {
        let _ = stopped.await;
    }));
    // A probe in flight when shutdown begins: its headers half sent.
    let mut probe = TcpStream::connect(addr).await.unwrap();
    probe.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    let ready = client().get(format!("http://{addr}/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), StatusCode::OK);
    let _ = stop.send(());
    // The listener is closed after the server marked itself as shutting down.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).await.is_ok() {
        assert!(std::time::Instant::now() < deadline, "the server did not stop accepting");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    probe.write_all(b"Connection: close\r\n\r\n").await.unwrap();
    let answer = read_to_close(&mut probe).await;
    assert_eq!(status_of(&answer), 503, "{answer}");
    assert!(answer.contains("not_ready") && answer.contains("shutting down"), "{answer}");
    tokio::time::timeout(Duration::from_secs(30), server).await.unwrap().unwrap().unwrap();
}
