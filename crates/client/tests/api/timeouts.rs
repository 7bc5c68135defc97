//! A server that never answers is a timeout; no server at all a transport error.

use std::time::Duration;

use shardlite_client::{Client, Error};

#[tokio::test]
async fn a_server_that_does_not_answer_times_out() {
    // Bound and listening, never accepting: the kernel completes the connection, nobody answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let client = Client::builder(url).timeout(Duration::from_millis(200)).build().unwrap();
    let err = client.get(b"k").await.unwrap_err();
    assert!(matches!(err, Error::Timeout(d) if d == Duration::from_millis(200)), "{err:?}");
}

#[tokio::test]
async fn no_server_is_a_transport_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    // Released again at once: nothing listens there.
    let client = Client::new(format!("http://127.0.0.1:{port}")).unwrap();
    let err = client.put(b"k", "v").await.unwrap_err();
    assert!(matches!(err, Error::Transport(_)), "{err:?}");
}
