//! Bearer tokens: every route but `/healthz`, `/readyz` and `/openapi.yaml` refuses a missing or wrong bearer token with 401
//! and the `WWW-Authenticate: Bearer` challenge and serves the right one (`--auth-token`, a
//! token with every role); with `--auth-token-file`, each route serves the tokens holding its
//! role and answers 403 to the others.

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
        (Method::POST, server.at("/admin/compact")),
        (Method::GET, server.at("/cluster")),
        (Method::POST, server.at("/admin/move?partition=0&to=n2")),
        (Method::GET, server.at("/admin/move/records?partition=0")),
        (Method::POST, server.at("/admin/adopt?partition=0&from=n1")),
        (Method::POST, server.at("/admin/takeover?partition=0&from=n1")),
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

/// One token per role, as a token file gives them.
const TOKEN_FILE: &str =
    "# one token per role\nread r-token\nwrite w-token\nadmin a-token\nmetrics m-token\nnode n-token\n";

#[tokio::test]
async fn each_route_serves_the_roles_it_needs_and_refuses_the_others_with_403() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    std::fs::write(&file, TOKEN_FILE).unwrap();
    let options = ServerOptions { auth_token_file: Some(file), ..ServerOptions::default() };
    let server = TestServer::start_with(config(), options).await;
    let kv = server.kv(&key(1));
    let batch = r#"{"ops":[{"op":"get","key":"6b31"}]}"#;
    // (method, url, body, the roles allowed)
    let requests: [(Method, String, &str, &[&str]); 17] = [
        (Method::GET, kv.clone(), "", &["read", "write"]),
        (Method::HEAD, kv.clone(), "", &["read", "write"]),
        (Method::PUT, kv.clone(), "v", &["write"]),
        (Method::DELETE, kv.clone(), "", &["write"]),
        (Method::POST, server.at("/batch"), batch, &["write"]),
        (Method::GET, server.at("/keys?partition=0"), "", &["read", "write"]),
        (Method::HEAD, server.at("/keys?partition=0"), "", &["read", "write"]),
        (Method::GET, server.at("/export?partition=0"), "", &["read", "write"]),
        (Method::GET, server.at("/admin/check"), "", &["admin"]),
        (Method::POST, server.at("/admin/compact"), "", &["admin"]),
        (Method::GET, server.at("/stats"), "", &["metrics"]),
        (Method::GET, server.at("/metrics"), "", &["metrics"]),
        // 404 here, as the moves below (no cluster): the role is checked first.
        (Method::GET, server.at("/cluster"), "", &["read", "write"]),
        (Method::POST, server.at("/admin/move?partition=0&to=n2"), "", &["admin"]),
        // Only another node of the cluster: no client token, admin's included.
        (Method::GET, server.at("/admin/move/records?partition=0"), "", &["node"]),
        (Method::POST, server.at("/admin/adopt?partition=0&from=n1"), "", &["node"]),
        (Method::POST, server.at("/admin/takeover?partition=0&from=n1"), "", &["node"]),
    ];
    for (method, url, body, allowed) in &requests {
        for role in ["read", "write", "admin", "metrics", "node"] {
            let resp = server
                .client
                .request(method.clone(), url)
                .bearer_auth(format!("{}-token", &role[..1]))
                .body(*body)
                .send()
                .await
                .unwrap();
            let status = resp.status();
            if allowed.contains(&role) {
                let served = [StatusCode::NOT_FOUND, StatusCode::NOT_IMPLEMENTED].contains(&status);
                assert!(status.is_success() || served, "{role} {method} {url}: {status}");
            } else {
                assert_eq!(status, StatusCode::FORBIDDEN, "{role} {method} {url}");
                if *method != Method::HEAD {
                    let (code, message) = error_of(resp).await;
                    assert_eq!(code, "forbidden");
                    assert!(message.contains('`'), "the message names the role: {message}");
                }
            }
        }
        let anonymous = server.client.request(method.clone(), url).body(*body).send().await.unwrap();
        assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED, "{method} {url}");
    }
    for role in ["r", "w", "a", "m", "n"] {
        for public in ["/healthz", "/openapi.yaml"] {
            let resp = server.client.get(server.at(public)).bearer_auth(format!("{role}-token")).send();
            assert_eq!(resp.await.unwrap().status(), StatusCode::OK, "{role} {public}");
        }
        let unknown = server.client.get(server.at("/nope")).bearer_auth(format!("{role}-token")).send();
        assert_eq!(unknown.await.unwrap().status(), StatusCode::NOT_FOUND, "a valid token learns the route is unknown");
    }
    for public in ["/healthz", "/readyz", "/openapi.yaml"] {
        assert_eq!(server.client.get(server.at(public)).send().await.unwrap().status(), StatusCode::OK, "{public}");
    }
    let stats = server.client.get(server.at("/stats")).bearer_auth("m-token").send().await.unwrap();
    let stats = stats.text().await.unwrap();
    assert!(!stats.contains("m-token") && !stats.contains("w-token"), "/stats must not reveal a token");
}
