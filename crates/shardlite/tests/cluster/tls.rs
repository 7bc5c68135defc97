//! Nodes that serve TLS and speak it to each other: their addresses in the map are `https://`,
//! each trusts the cluster's CA (`--node-ca`) for the others' certificates, and tokens are
//! required. A request for another node's partition is forwarded over TLS (a client's token
//! never crosses between nodes in clear), and a move runs node to node over TLS with the node
//! token, asked over TLS (`--tls-ca`) with the admin's.

use super::*;
use crate::certs::Ca;

#[tokio::test]
async fn nodes_forward_and_move_over_tls() {
    let Some(bin) = etcd::binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("cluster CA");
    let (cert, key) = ca.issue();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let (cert, key, ca_file) = (write("node.pem", &cert), write("node.key", &key), write("ca.pem", &ca.pem()));
    let tokens = write("tokens", "admin admin-91c4\nwrite write-3fe8\nnode node-5ab2\n");
    let flags = ["--tls-cert", &cert, "--tls-key", &key, "--node-ca", &ca_file, "--auth-token-file", &tokens];
    let etcd = etcd::Etcd::start(&bin, dir.path()).await;
    let mut nodes = Nodes::init_as(&etcd, &["n1", "n2", "n3"], &[], "https");
    for id in ["n1", "n2", "n3"] {
        nodes.start(&etcd, id, dir.path(), &flags).await;
    }
    common::tls_provider();
    let trusted = reqwest::Certificate::from_der(&ca.der()).unwrap();
    let http = reqwest::Client::builder().no_proxy().add_root_certificate(trusted).build().unwrap();

    // Partition 0 is n1's: written through n2 and read through n3, each forwarding over TLS.
    let record = (0..).map(|i| format!("tls-{i}").into_bytes()).find(|k| nodes.partition(k) == 0).unwrap();
    let put = http.put(nodes.server("n2").kv(&record)).bearer_auth("write-3fe8").body("over tls").send().await;
    assert_eq!(put.unwrap().status(), 201, "written through n2");
    let got = http.get(nodes.server("n3").kv(&record)).bearer_auth("write-3fe8").send().await.unwrap();
    assert_eq!(got.text().await.unwrap(), "over tls", "read through n3");

    let endpoints = etcd.endpoints.clone();
    let moved = tokio::task::spawn_blocking(move || {
        let args = ["cluster", "move", "0", "n3", "--etcd", &endpoints, "--tls-ca", &ca_file, "--json"];
        Command::new(EXE).args(args).env("SHARDLITE_AUTH_TOKEN", "admin-91c4").output().unwrap()
    });
    let moved = moved.await.unwrap();
    assert!(moved.status.success(), "cluster move: {}", String::from_utf8_lossy(&moved.stderr));
    let summary: Value = serde_json::from_slice(&moved.stdout).unwrap();
    assert_eq!((summary["map_version"].as_u64(), summary["records"].as_u64()), (Some(2), Some(1)), "{summary}");
    let got = http.get(nodes.server("n1").kv(&record)).bearer_auth("write-3fe8").send().await.unwrap();
    assert_eq!(got.text().await.unwrap(), "over tls", "n1 forwards to the new owner");
}
