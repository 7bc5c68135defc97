//! `GET /openapi.yaml`: the server serves the description of its API (`docs/openapi.yaml`), with
//! no token, and real answers of a real server match it: each status is one the description
//! lists for the operation, and each JSON body validates against the schema it gives. (That
//! every route, method and error code is described is tested beside the route, in
//! `crates/server/src/handlers/openapi.rs`; `scripts/schemathesis.sh` generates requests from it.)

use reqwest::{header, Method, Response, StatusCode};
use serde_json::{json, Value};
use shardlite_server::ServerOptions;

use crate::common::{config, key, TestServer};

/// The description as a JSON value, as the server serves it.
async fn description(server: &TestServer) -> Value {
    let resp = server.client.get(server.at("/openapi.yaml")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/yaml");
    let text = resp.text().await.unwrap();
    assert_eq!(text, include_str!("../../../../docs/openapi.yaml"), "the server serves docs/openapi.yaml");
    serde_yaml_ng::from_str(&text).unwrap()
}

/// Follows a `$ref` inside the description.
fn resolve<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    match value["$ref"].as_str() {
        Some(pointer) => doc.pointer(pointer.trim_start_matches('#')).unwrap_or_else(|| panic!("no {pointer}")),
        None => value,
    }
}

/// Checks an answer of `method path` (the description's path template) against the description:
/// its status is listed, and a JSON body validates against the listed schema. Returns the body.
async fn conforms(doc: &Value, method: &Method, path: &str, resp: Response) -> Value {
    let status = resp.status().as_u16().to_string();
    let operation = &doc["paths"][path][method.as_str().to_lowercase()];
    assert!(operation.is_object(), "{method} {path} is not described");
    let described = resolve(doc, &operation["responses"][&status]);
    assert!(described.is_object(), "{method} {path} answered {status}, which is not described");
    let content_type = resp.headers().get(header::CONTENT_TYPE).map(|v| v.to_str().unwrap().to_owned());
    let bytes = resp.bytes().await.unwrap();
    let Some(schema) = described["content"]["application/json"].get("schema") else {
        return Value::Null;
    };
    assert_eq!(content_type.as_deref(), Some("application/json"), "{method} {path} {status}");
    let body: Value = serde_json::from_slice(&bytes).unwrap();
    // The schema's references point into the description's components, so they go along.
    let mut root = schema.clone();
    root.as_object_mut().unwrap().insert("components".into(), doc["components"].clone());
    let validator = jsonschema::validator_for(&root).unwrap();
    let problems: Vec<String> = validator.iter_errors(&body).map(|e| format!("{}: {e}", e.instance_path())).collect();
    assert!(problems.is_empty(), "{method} {path} {status}: {body}\n{problems:#?}");
    body
}

#[tokio::test]
async fn the_description_is_served_without_a_token_and_real_answers_match_it() {
    let options = ServerOptions { auth_token: Some("t0ken".into()), ..ServerOptions::default() };
    let server = TestServer::start_with(config(), options).await;
    let doc = description(&server).await;
    let head = server.client.head(server.at("/openapi.yaml")).send().await.unwrap();
    assert_eq!(head.status(), StatusCode::OK);

    let send = |method: Method, path: &str| {
        server.client.request(method, server.at(path)).header(header::AUTHORIZATION, "Bearer t0ken")
    };
    let kv = format!("/kv/{}", hex::encode(key(1)));
    let cases: Vec<(Method, &str, reqwest::RequestBuilder)> = vec![
        (Method::GET, "/kv/{key}", server.client.get(server.at(&kv))),
        (Method::PUT, "/kv/{key}", send(Method::PUT, &kv).body("v")),
        (Method::PUT, "/kv/{key}", send(Method::PUT, &kv).header(header::IF_NONE_MATCH, "*").body("v")),
        (Method::PUT, "/kv/{key}", send(Method::PUT, &kv).header(header::IF_MATCH, "\"1.2\", \"3\"").body("v")),
        (Method::GET, "/kv/{key}", send(Method::GET, &kv)),
        (Method::GET, "/kv/{key}", send(Method::GET, "/kv/ABC")),
        (Method::GET, "/kv/{key}", send(Method::GET, &format!("/kv/{}", "ab".repeat(1025)))),
        (Method::DELETE, "/kv/{key}", send(Method::DELETE, &kv)),
        (Method::DELETE, "/kv/{key}", send(Method::DELETE, &kv)),
        (Method::POST, "/batch", send(Method::POST, "/batch").body("{")),
        (Method::GET, "/keys", send(Method::GET, "/keys?partition=0&limit=2")),
        (Method::GET, "/keys", send(Method::GET, "/keys?partition=99")),
        (Method::GET, "/export", send(Method::GET, "/export?partition=0")),
        (Method::GET, "/healthz", server.client.get(server.at("/healthz"))),
        (Method::GET, "/readyz", server.client.get(server.at("/readyz"))),
        (Method::GET, "/stats", send(Method::GET, "/stats")),
        (Method::GET, "/metrics", send(Method::GET, "/metrics")),
        (Method::GET, "/admin/check", send(Method::GET, "/admin/check")),
        (Method::GET, "/admin/backup", send(Method::GET, "/admin/backup")),
        (Method::POST, "/admin/backup", send(Method::POST, "/admin/backup").body(r#"{"to": "relative"}"#)),
    ];
    for (method, path, request) in cases {
        conforms(&doc, &method, path, request.send().await.unwrap()).await;
    }

    let batch = json!({"ops": [
        {"op": "put", "key": "6b31", "value": "76"},
        {"op": "put", "key": "6b31", "value": "", "if_match": "\"9.9.9\""},
        {"op": "put", "key": "zz", "value": "00"},
        {"op": "get", "key": "6b31"},
        {"op": "delete", "key": "6b32", "if_match": 3},
    ]});
    let resp = send(Method::POST, "/batch")
        .header(header::CONTENT_TYPE, "application/json")
        .body(batch.to_string())
        .send()
        .await
        .unwrap();
    let body = conforms(&doc, &Method::POST, "/batch", resp).await;
    let statuses: Vec<u64> =
        body["results"].as_array().unwrap().iter().map(|r| r["status"].as_u64().unwrap()).collect();
    assert_eq!(statuses, [201, 412, 400, 200, 400]);
}
