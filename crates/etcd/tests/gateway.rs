//! The client against a real etcd (one member on loopback, its data in a temporary directory):
//! keys, prefixes, transactions, leases and a watch, as the cluster uses them. etcd comes from
//! `SHARDLITE_TEST_ETCD`, else `etcd` on `PATH`; without one the test says so and passes.
#![allow(clippy::unwrap_used)]

use std::{
    net::TcpListener,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use shardlite_etcd::{Client, Compare, TxnOp};

struct Member(Child);

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One etcd member and a client of it, once it answers; `None` without an etcd binary.
async fn etcd(dir: &std::path::Path) -> Option<(Member, Client)> {
    let bin = std::env::var_os("SHARDLITE_TEST_ETCD").unwrap_or_else(|| "etcd".into());
    if Command::new(&bin).arg("--version").output().is_err() {
        println!("skipped: no etcd (set SHARDLITE_TEST_ETCD)");
        return None;
    }
    let (client_url, peer_url) =
        (format!("http://127.0.0.1:{}", free_port()), format!("http://127.0.0.1:{}", free_port()));
    let member = Command::new(bin)
        .arg("--data-dir")
        .arg(dir.join("etcd"))
        .args(["--listen-client-urls", &client_url, "--advertise-client-urls", &client_url])
        .args(["--listen-peer-urls", &peer_url, "--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", &format!("default={peer_url}"), "--log-level", "error"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let member = Member(member);
    // A first endpoint nobody listens on: requests move on to the live one.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let client = Client::new(&[dead.as_str(), client_url.as_str()]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.put("/probe", "1", None).await.is_err() {
        assert!(Instant::now() < deadline, "etcd did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Some((member, client))
}

#[tokio::test]
async fn keys_transactions_leases_and_a_watch_work_against_a_real_etcd() {
    let dir = tempfile::tempdir().unwrap();
    let Some((_member, etcd)) = etcd(dir.path()).await else { return };

    // Keys and a prefix read at one revision.
    etcd.put("/c/a", "1", None).await.unwrap();
    etcd.put("/c/b", "2", None).await.unwrap();
    etcd.put("/d", "3", None).await.unwrap();
    let under: Vec<(String, String)> = etcd
        .get_prefix("/c/")
        .await
        .unwrap()
        .iter()
        .map(|kv| (kv.key_str().unwrap().to_owned(), kv.value_str().unwrap().to_owned()))
        .collect();
    assert_eq!(under, [("/c/a".into(), "1".into()), ("/c/b".into(), "2".into())]);
    assert!(etcd.delete("/c/b").await.unwrap());
    assert!(!etcd.delete("/c/b").await.unwrap());
    assert_eq!(etcd.get("/c/b").await.unwrap(), None);

    // A transaction holds only on the revision it read.
    let read = etcd.get("/c/a").await.unwrap().unwrap();
    let put = [TxnOp::put("/c/a", "changed")];
    assert!(etcd.txn(&[Compare::ModRevision("/c/a".into(), read.mod_revision)], &put).await.unwrap());
    assert!(!etcd.txn(&[Compare::ModRevision("/c/a".into(), read.mod_revision)], &put).await.unwrap());
    assert!(!etcd.txn(&[Compare::CreateRevision("/c/a".into(), 0)], &put).await.unwrap(), "it exists");
    assert!(etcd.txn(&[Compare::CreateRevision("/c/new".into(), 0)], &put).await.unwrap());

    // A lease: its key lives while it is renewed, and goes with it.
    let lease = etcd.lease_grant(2).await.unwrap();
    etcd.put("/alive", "here", Some(lease)).await.unwrap();
    assert!(etcd.lease_keep_alive(lease).await.unwrap() > 0);
    assert_eq!(etcd.get("/alive").await.unwrap().unwrap().lease, lease);
    etcd.lease_revoke(lease).await.unwrap();
    assert_eq!(etcd.get("/alive").await.unwrap(), None);
    assert_eq!(etcd.lease_keep_alive(lease).await.unwrap(), 0, "a lease that ended renews to 0");

    // A watch hears of a change under its prefix, and not of one outside it.
    let mut watch = etcd.watch_prefix("/w/").await.unwrap();
    etcd.put("/x", "outside", None).await.unwrap();
    etcd.put("/w/1", "inside", None).await.unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(10), watch.next()).await.unwrap().unwrap();
    assert_eq!(heard, Some(1));
}
