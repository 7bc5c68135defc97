//! Entity tags never repeat: a key deleted and created again gets a tag its earlier life never
//! had, so a compare-and-set or a cache revalidation built on a tag of the earlier life fails
//! instead of overwriting (or hiding) the newer value. Tags are opaque: a well-formed tag this
//! server never issued, and a weak tag in `If-Match`, simply do not match (412), and `If-Match`
//! on an absent key is 412 (RFC 9110 §13.1.1). On both backends, single requests and batches.

use reqwest::{header, StatusCode};
use serde_json::{json, Value};

use crate::common::{config, error_of, key, on_both_backends, Kind, TestServer};

fn etag(resp: &reqwest::Response) -> String {
    resp.headers().get(header::ETAG).expect("an ETag").to_str().unwrap().to_owned()
}

on_both_backends!(
    a_stale_if_match_after_delete_and_create_again_is_412,
    a_stale_if_none_match_after_delete_and_create_again_reads_the_new_value,
    every_write_gets_a_tag_never_seen_before,
    if_match_on_an_absent_key_is_412,
    tags_this_server_never_issued_do_not_match,
    a_stale_tag_inside_a_batch_is_412_too
);

/// The sequence of the bug: A reads "hello", B deletes, C creates "bye", A's compare-and-set
/// with the tag it read must fail and leave C's value.
async fn a_stale_if_match_after_delete_and_create_again_is_412(kind: Kind) {
    let server = TestServer::on(kind, config()).await;
    let url = server.kv(&key(1));
    let first = server.client.put(&url).body("hello").send().await.unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    let read_by_a = etag(&first);
    assert_eq!(server.client.delete(&url).send().await.unwrap().status(), StatusCode::NO_CONTENT);
    let by_c = server.client.put(&url).body("bye").send().await.unwrap();
    assert_eq!(by_c.status(), StatusCode::CREATED);
    assert_ne!(etag(&by_c), read_by_a, "a new life of the key has a new tag");

    let stale = server.client.put(&url).header(header::IF_MATCH, &read_by_a).body("hello-edited").send().await.unwrap();
    assert_eq!(stale.status(), StatusCode::PRECONDITION_FAILED);
    assert_eq!(etag(&stale), etag(&by_c), "the 412 names the current tag");
    let stale_delete = server.client.delete(&url).header(header::IF_MATCH, &read_by_a).send().await.unwrap();
    assert_eq!(stale_delete.status(), StatusCode::PRECONDITION_FAILED);
    assert_eq!(server.client.get(&url).send().await.unwrap().bytes().await.unwrap(), "bye");
}

/// A cache holding "hello" revalidates with the tag it has: it must get the new value, not 304.
async fn a_stale_if_none_match_after_delete_and_create_again_reads_the_new_value(kind: Kind) {
    let server = TestServer::on(kind, config()).await;
    let url = server.kv(&key(2));
    let cached = etag(&server.client.put(&url).body("hello").send().await.unwrap());
    server.client.delete(&url).send().await.unwrap();
    server.client.put(&url).body("bye").send().await.unwrap();

    let resp = server.client.get(&url).header(header::IF_NONE_MATCH, &cached).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.bytes().await.unwrap(), "bye");
    let resp = server.client.get(&url).header(header::IF_MATCH, &cached).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::PRECONDITION_FAILED);
}

/// Creates, updates, deletes and creates again, many times: every tag a write answers is new
/// for the key, and a read answers the tag of the last write.
async fn every_write_gets_a_tag_never_seen_before(kind: Kind) {
    let server = TestServer::on(kind, config()).await;
    let url = server.kv(&key(3));
    let mut seen = std::collections::HashSet::new();
    for round in 0..6 {
        for update in 0..3 {
            let resp = server.client.put(&url).body(format!("{round}.{update}")).send().await.unwrap();
            assert!(resp.status().is_success());
            let tag = etag(&resp);
            assert!(seen.insert(tag.clone()), "tag {tag} was given twice");
            assert_eq!(etag(&server.client.get(&url).send().await.unwrap()), tag);
        }
        assert_eq!(server.client.delete(&url).send().await.unwrap().status(), StatusCode::NO_CONTENT);
    }
}

async fn if_match_on_an_absent_key_is_412(kind: Kind) {
    let server = TestServer::on(kind, config()).await;
    let url = server.kv(&key(4));
    let tag = etag(&server.client.put(&url).body("v").send().await.unwrap());
    server.client.delete(&url).send().await.unwrap();
    for condition in ["*", tag.as_str()] {
        let put = server.client.put(&url).header(header::IF_MATCH, condition).body("x").send().await.unwrap();
        assert_eq!(put.status(), StatusCode::PRECONDITION_FAILED, "PUT If-Match: {condition}");
        assert!(put.headers().get(header::ETAG).is_none(), "no current record, no tag");
        assert_eq!(error_of(put).await.0, "precondition_failed");
        let delete = server.client.delete(&url).header(header::IF_MATCH, condition).send().await.unwrap();
        assert_eq!(delete.status(), StatusCode::PRECONDITION_FAILED, "DELETE If-Match: {condition}");
    }
    // Without a condition, deleting what is not there is still 404.
    assert_eq!(server.client.delete(&url).send().await.unwrap().status(), StatusCode::NOT_FOUND);
    assert_eq!(server.client.get(&url).send().await.unwrap().status(), StatusCode::NOT_FOUND);
}

/// Tags are opaque: one this server never issued, or a weak one in `If-Match` (which uses the
/// strong comparison), is not a bad request; it just does not match.
async fn tags_this_server_never_issued_do_not_match(kind: Kind) {
    let server = TestServer::on(kind, config()).await;
    let url = server.kv(&key(5));
    let tag = etag(&server.client.put(&url).body("v").send().await.unwrap());
    let weak = format!("W/{tag}");
    for foreign in ["\"0\"", "\"1\"", "\"hello\"", "\"\"", "\"9.9.9\"", "\"99999999999999999999999\"", weak.as_str()] {
        let resp = server.client.put(&url).header(header::IF_MATCH, foreign).body("x").send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::PRECONDITION_FAILED, "If-Match: {foreign}");
        assert_eq!(etag(&resp), tag);
        let message = error_of(resp).await.1;
        assert!(!message.contains("Some("), "a message for people, not debug output: {message}");
        let resp = server.client.get(&url).header(header::IF_MATCH, foreign).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::PRECONDITION_FAILED, "GET If-Match: {foreign}");
    }
    // The weak comparison of If-None-Match does match a weak form of the current tag.
    let resp = server.client.get(&url).header(header::IF_NONE_MATCH, &weak).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(server.client.get(&url).send().await.unwrap().bytes().await.unwrap(), "v");
}

async fn batch(server: &TestServer, ops: Value) -> Value {
    let resp = server.client.post(server.at("/batch")).body(json!({ "ops": ops }).to_string()).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap()
}

/// The same sequence inside one `POST /batch`: its `if_match` takes the tags the headers take.
async fn a_stale_tag_inside_a_batch_is_412_too(kind: Kind) {
    let server = TestServer::on(kind, config()).await;
    let k = hex::encode(key(6));
    let resp = batch(
        &server,
        json!([
            {"op": "put", "key": k, "value": hex::encode("hello")},
            {"op": "get", "key": k},
        ]),
    )
    .await;
    let read_by_a = resp["results"][1]["etag"].as_str().expect("a get's result has the tag").to_owned();
    assert_eq!(resp["results"][0]["etag"].as_str(), Some(read_by_a.as_str()));

    let resp = batch(
        &server,
        json!([
            {"op": "delete", "key": k},
            {"op": "put", "key": k, "value": hex::encode("bye")},
            {"op": "put", "key": k, "value": hex::encode("hello-edited"), "if_match": read_by_a},
            {"op": "get", "key": k},
        ]),
    )
    .await;
    let results = resp["results"].as_array().unwrap();
    let status: Vec<u64> = results.iter().map(|r| r["status"].as_u64().unwrap()).collect();
    assert_eq!(status, [204, 201, 412, 200]);
    assert_ne!(results[1]["etag"], json!(read_by_a));
    assert_eq!(results[2]["etag"], results[1]["etag"], "the 412 names the current tag");
    assert_eq!(results[3]["value"], json!(hex::encode("bye")));
    assert_eq!(results[1]["counter"], json!(1), "the update counter of a new record is 1");
}
