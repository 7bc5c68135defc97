//! Who may open a running server's partition databases: no other process by default (SQLite's
//! `unix-excl` locks, one lock for the whole server instead of one `fcntl` per lock step), and
//! any process with `--litestream`, whose replicator reads and writes them beside the server.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;

use common::{client, Server};

const KEYS: u32 = 32;

/// Writes `KEYS` keys through the server.
async fn put_keys(server: &Server) {
    let http = client();
    for i in 0..KEYS {
        let put = http.put(server.kv(&i.to_be_bytes())).body("value").send().await.unwrap();
        assert!(put.status().is_success(), "{}", put.status());
    }
}

/// The records of both partitions, counted by a connection of this process (not the server's).
fn count_from_outside(data: &Path) -> rusqlite::Result<u32> {
    let mut sum = 0;
    for partition in ["p0000.db", "p0001.db"] {
        let db = rusqlite::Connection::open(data.join(partition))?;
        sum += db.query_row("SELECT count(*) FROM records", [], |row| row.get::<_, u32>(0))?;
    }
    Ok(sum)
}

#[tokio::test]
async fn other_processes_cannot_open_a_running_servers_databases() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, &["--partitions", "2"]).await;
    put_keys(&server).await;
    let refused = count_from_outside(&data).unwrap_err();
    assert!(refused.to_string().contains("database is locked"), "{refused}");
    assert!(!data.join("p0000.db-shm").exists(), "the WAL index is in the server's memory");
    assert!(server.stop().success());
    assert_eq!(count_from_outside(&data).unwrap(), KEYS, "once the server is gone, all is there");
}

#[tokio::test]
async fn with_litestream_other_processes_read_what_the_server_committed() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, &["--partitions", "2", "--litestream"]).await;
    put_keys(&server).await;
    // Read through the shared WAL index, as Litestream reads: every acknowledged write is seen.
    assert_eq!(count_from_outside(&data).unwrap(), KEYS);
    assert!(server.stop().success());
}
