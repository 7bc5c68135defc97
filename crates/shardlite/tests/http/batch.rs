//! `POST /batch`: the documented JSON format, per-item results (and per-item errors) in the
//! request's order, hundreds of operations at once (on both backends), and the batch limits.

use reqwest::StatusCode;
use serde_json::{json, Value};
use shardlite_engine::Config;
use shardlite_server::ServerOptions;

use crate::common::{config, error_of, key, on_both_backends, Kind, TestServer};

on_both_backends!(
    every_operation_gets_its_own_result_in_order,
    hundreds_of_operations_in_one_request,
    an_empty_batch_is_an_empty_answer,
    if_match_and_if_none_match_on_one_item_never_hold
);

async fn batch(server: &TestServer, body: &Value) -> Vec<Value> {
    let resp = server.client.post(server.at("/batch")).body(body.to_string()).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let body: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    body["results"].as_array().unwrap().clone()
}

async fn every_operation_gets_its_own_result_in_order(kind: Kind) {
    let server = TestServer::on(kind, Config { max_value: 8, ..config() }).await;
    let (a, b, missing) = (hex::encode(key(1)), hex::encode(key(2)), hex::encode(key(3)));
    let resp = server.client.put(server.kv(&key(2))).body("old").send().await.unwrap();
    let old = resp.headers()["etag"].to_str().unwrap().to_owned();

    let results = batch(
        &server,
        &json!({"ops": [
            {"op": "put", "key": a, "value": "6869"},
            {"op": "put", "key": a, "value": "686921"},
            {"op": "get", "key": a},
            {"op": "get", "key": missing},
            {"op": "put", "key": b, "value": "00", "if_none_match": "*"},
            {"op": "put", "key": b, "value": "01", "if_match": "\"7\""},
            {"op": "put", "key": b, "value": "02", "if_match": old},
            {"op": "delete", "key": b, "if_match": "*"},
            {"op": "delete", "key": missing},
            {"op": "get", "key": "XYZ"},
            {"op": "put", "key": a, "value": "000102030405060708"},
            {"op": "put", "key": a, "value": "0g"},
            {"op": "put", "key": missing, "value": "", "if_match": "*"},
        ]}),
    )
    .await;
    let status: Vec<u64> = results.iter().map(|r| r["status"].as_u64().unwrap()).collect();
    assert_eq!(status, [201, 200, 200, 404, 412, 412, 200, 204, 404, 400, 413, 400, 412]);
    let tag = |i: usize| results[i]["etag"].as_str().unwrap_or_else(|| panic!("result {i} has a tag")).to_owned();
    assert_eq!(results[0], json!({"status": 201, "counter": 1, "etag": tag(0)}));
    assert_eq!(results[1], json!({"status": 200, "counter": 2, "etag": tag(1)}));
    assert_ne!(tag(0), tag(1));
    assert_eq!(
        results[2],
        json!({"status": 200, "counter": 2, "etag": tag(1), "value": "686921"}),
        "a get sees earlier puts of its batch"
    );
    assert_eq!(results[3]["error"], "not_found");
    assert_eq!((tag(4), &results[4]["counter"]), (old.clone(), &json!(1)), "a failed condition names the current tag");
    assert_eq!(results[4]["error"], "precondition_failed");
    assert_eq!(tag(5), old, "a tag this server never issued matches nothing");
    assert_eq!(results[7], json!({"status": 204, "counter": 2, "etag": tag(6)}));
    assert!(results[12].get("etag").is_none(), "If-Match on a missing key: 412, no current tag");
    assert_eq!(results[9]["error"], "bad_key");
    assert_eq!(results[10]["error"], "value_too_large");
    assert_eq!(results[11]["error"], "bad_value");

    // The batch's writes are there for single-key reads too.
    let resp = server.client.get(server.kv(&key(1))).send().await.unwrap();
    assert_eq!(resp.bytes().await.unwrap(), "hi!");
    assert_eq!(server.client.get(server.kv(&key(2))).send().await.unwrap().status(), StatusCode::NOT_FOUND);
}

/// `if_match` with `if_none_match: "*"` on one put item was refused with 400 while the same pair
/// of headers on a PUT answers 412: like the headers, they never both hold (RFC 9110 §13.2.2),
/// so 412 with the current tag if the key exists, and nothing is written.
async fn if_match_and_if_none_match_on_one_item_never_hold(kind: Kind) {
    let server = TestServer::on(kind, config()).await;
    let k = hex::encode(key(4));
    let both =
        |if_match: &str| json!({"op": "put", "key": k, "value": "62", "if_match": if_match, "if_none_match": "*"});
    let results = batch(&server, &json!({"ops": [both("*")]})).await;
    assert_eq!((&results[0]["status"], &results[0]["error"]), (&json!(412), &json!("precondition_failed")), "absent");
    assert!(results[0].get("etag").is_none(), "no current tag for an absent key");
    let resp = server.client.put(server.kv(&key(4))).body("v").send().await.unwrap();
    let tag = resp.headers()["etag"].to_str().unwrap().to_owned();
    for results in
        [batch(&server, &json!({"ops": [both("*")]})).await, batch(&server, &json!({"ops": [both(&tag)]})).await]
    {
        assert_eq!((&results[0]["status"], &results[0]["etag"]), (&json!(412), &json!(tag)));
    }
    assert_eq!(server.client.get(server.kv(&key(4))).send().await.unwrap().text().await.unwrap(), "v");
}

async fn hundreds_of_operations_in_one_request(kind: Kind) {
    let server = TestServer::on(kind, config()).await;
    let puts: Vec<Value> = (0..500)
        .map(|i| json!({"op": "put", "key": hex::encode(key(i)), "value": hex::encode(format!("value {i}"))}))
        .collect();
    let results = batch(&server, &json!({ "ops": puts })).await;
    assert_eq!(results.len(), 500);
    assert!(results.iter().all(|r| r["status"] == 201), "{results:?}");

    let gets: Vec<Value> = (0..500).map(|i| json!({"op": "get", "key": hex::encode(key(i))})).collect();
    let results = batch(&server, &json!({ "ops": gets })).await;
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["value"], hex::encode(format!("value {i}")));
    }
}

async fn an_empty_batch_is_an_empty_answer(kind: Kind) {
    let server = TestServer::on(kind, config()).await;
    assert!(batch(&server, &json!({"ops": []})).await.is_empty());
}

#[tokio::test]
async fn malformed_and_oversized_batches_are_refused_whole() {
    let options = ServerOptions { batch_max_ops: 10, batch_max_bytes: 2000, ..ServerOptions::default() };
    let server = TestServer::start_with(config(), options).await;
    let post = |body: String| server.client.post(server.at("/batch")).body(body).send();

    let ops: Vec<Value> = (0..11).map(|i| json!({"op": "get", "key": hex::encode(key(i))})).collect();
    let resp = post(json!({ "ops": ops }).to_string()).await.unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(error_of(resp).await.0, "too_many_ops");

    let big = json!({"ops": [{"op": "put", "key": "00", "value": "ab".repeat(1000)}]});
    let resp = post(big.to_string()).await.unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(error_of(resp).await.0, "batch_too_large");

    for bad in [
        "",
        "not json",
        "[]",
        r#"{"ops": {}}"#,
        r#"{"ops": [{"op": "scan", "key": "00"}]}"#,
        r#"{"ops": [{"op": "get"}]}"#,
        r#"{"ops": [{"op": "get", "key": "00", "extra": 1}]}"#,
        r#"{"ops": [{"op": "put", "key": "00", "value": 5}]}"#,
    ] {
        let resp = post(bad.to_owned()).await.unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{bad}");
        let (code, message) = error_of(resp).await;
        assert_eq!(code, "bad_batch");
        assert!(!message.is_empty());
    }
}
