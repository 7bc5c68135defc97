//! `--auth-token`: every route but `/healthz` refuses a missing or wrong bearer token with 401
//! and the `WWW-Authenticate: Bearer` challenge, and serves the right one.

use reqwest::{header, Method, StatusCode};
use shardlite_server::ServerOptions;

use crate::common::{config, error_of, key, TestServer};

const TOKEN: &str = "correct horse battery staple";

#[tokio::test]
async fn every_route_but_healthz_needs_the_token() {
    let options = ServerOptions { auth_token: Some(TOKEN.into()), ..ServerOptions::default() };
    let server = TestServer::start_with(config(), options).await;
    let kv = server.kv(&key(1));
    let requests = [
        (Method::GET, kv.clone()),
        (Method::HEAD, kv.clone()),
        (Method::PUT, kv.clone()),
        (Method::DELETE, kv.clone()),
        (Method::POST, server.at("/batch")),
        (Method::GET, server.at("/stats")),
        (Method::GET, server.at("/metrics")),
        (Method::GET, server.at("/keys?partition=0")),
        (Method::POST, server.at("/admin/backup")),
        (Method::GET, server.at("/admin/backup")),
        (Method::GET, server.at("/no/such/route")),
    ];
    for (method, url) in &requests {
        let missing = server.client.request(method.clone(), url).body("").send().await.unwrap();
        assert_eq!(missing.status(), StatusCode::UNAUTHORIZED, "{method} {url}");
        assert_eq!(missing.headers()[header::WWW_AUTHENTICATE], "Bearer");
        if *method != Method::HEAD {
            assert_eq!(error_of(missing).await.0, "unauthorized");
        }
        for wrong in ["Bearer wrong", "Bearer correct horse battery stapl", "Basic Zm9vOmJhcg==", "Bearer"] {
            let resp = server.client.request(method.clone(), url).header(header::AUTHORIZATION, wrong).body("").send();
            let resp = resp.await.unwrap();
            assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{method} {url} {wrong}");
            assert!(resp.headers()[header::WWW_AUTHENTICATE].to_str().unwrap().starts_with("Bearer"));
        }
    }

    let authed = |method: Method, url: &str| {
        server.client.request(method, url).header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
    };
    assert_eq!(authed(Method::PUT, &kv).body("v").send().await.unwrap().status(), StatusCode::CREATED);
    assert_eq!(authed(Method::GET, &kv).send().await.unwrap().status(), StatusCode::OK);
    assert_eq!(authed(Method::GET, &server.at("/stats")).send().await.unwrap().status(), StatusCode::OK);
    let stats = authed(Method::GET, &server.at("/stats")).send().await.unwrap().text().await.unwrap();
    assert!(!stats.contains(TOKEN), "/stats must not reveal the token");
    assert!(stats.contains("\"auth\": true"));

    let health = server.client.get(server.at("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK, "/healthz needs no token");
}
