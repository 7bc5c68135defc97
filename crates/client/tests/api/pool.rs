//! The client's connections: shared by the tasks of one client's clones, reused while idle,
//! closed after the idle timeout, and replaced when the server closed them meanwhile.

use std::time::Duration;

use shardlite_client::Client;
use shardlite_server::ServerOptions;

use crate::common::{fast, TestServer};

#[tokio::test]
async fn tasks_share_a_connection_each_at_most() {
    let server = TestServer::start().await;
    let client = server.client();
    client.put(b"k", "v").await.unwrap();
    for _ in 0..20 {
        client.get(b"k").await.unwrap().unwrap();
    }
    assert_eq!(server.connections_open().await, 1, "one task, one request at a time: one connection");
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                for _ in 0..50 {
                    client.get(b"k").await.unwrap().unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let open = server.connections_open().await;
    assert!((1..=8).contains(&open), "8 tasks opened {open} connections for 400 requests");
}

#[tokio::test]
async fn idle_connections_close_after_the_idle_timeout() {
    let server = TestServer::start().await;
    let client = Client::builder(&server.url).idle_timeout(Duration::from_millis(200)).build().unwrap();
    client.put(b"k", "v").await.unwrap();
    assert_eq!(server.connections_open().await, 1);
    // Nothing asks the client for a connection meanwhile: the pool closes it by itself.
    server.until_connections_open(0).await;
    assert_eq!(client.get(b"k").await.unwrap().unwrap().value, "v", "and opens a new one");
}

#[tokio::test]
async fn a_connection_the_server_closed_while_idle_is_not_used() {
    // The server closes a keep-alive connection that sends nothing for 200 ms.
    let options = ServerOptions { header_timeout_ms: Duration::from_millis(200), ..ServerOptions::default() };
    let (create, config) = fast();
    let server = TestServer::with(create, config, options).await;
    let client = server.client();
    client.put(b"k", "v").await.unwrap();
    server.until_connections_open(0).await;
    for _ in 0..3 {
        assert_eq!(client.get(b"k").await.unwrap().unwrap().value, "v");
    }
}
