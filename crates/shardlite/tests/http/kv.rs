//! `/kv/{key}`: every row of `docs/http-api.md`'s Routes for GET, HEAD, PUT and DELETE, with their headers and
//! bodies, and the conditional requests. The storage semantics run on both backends.

use reqwest::{header, StatusCode};
use shardlite_engine::{Config, CreateOptions, IndexMode};

use crate::common::{config, directory, error_of, key, on_both_backends, Kind, TestServer};

fn etag(resp: &reqwest::Response) -> Option<&str> {
    resp.headers().get(header::ETAG).map(|v| v.to_str().unwrap())
}

/// The `ETag` of a response that must have one.
fn tag_of(resp: &reqwest::Response) -> String {
    etag(resp).expect("an ETag").to_owned()
}

on_both_backends!(
    put_creates_then_updates_and_get_reads_back_with_the_version_as_etag,
    get_of_a_missing_key_is_404_with_a_json_error,
    head_answers_like_get_without_a_body,
    an_empty_value_is_a_value,
    if_none_match_star_inserts_only,
    if_match_is_update_only_compare_and_set,
    delete_is_204_then_404_and_honours_if_match,
    conditional_gets_answer_304_and_412,
    a_value_of_exactly_max_value_bytes_is_stored,
    concurrent_compare_and_sets_let_exactly_one_win,
    if_match_and_if_none_match_on_one_put_never_hold
);

async fn put_creates_then_updates_and_get_reads_back_with_the_version_as_etag(kind: Kind) {
    let server = TestServer::on(kind, config()).await;
    let url = server.kv(&key(1));

    let resp = server.client.put(&url).body("first").send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let first = tag_of(&resp);
    assert!(first.starts_with('"') && first.ends_with('"') && first.len() > 2, "a strong tag: {first}");
    assert!(resp.bytes().await.unwrap().is_empty());

    let resp = server.client.get(&url).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(tag_of(&resp), first);
    assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/octet-stream");
    assert_eq!(resp.bytes().await.unwrap(), "first");

    let resp = server.client.put(&url).body(vec![0u8, 255, 7]).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let second = tag_of(&resp);
    assert_ne!(second, first);
    let resp = server.client.get(&url).send().await.unwrap();
    assert_eq!(tag_of(&resp), second);
    assert_eq!(resp.bytes().await.unwrap().as_ref(), [0u8, 255, 7]);
}

async fn get_of_a_missing_key_is_404_with_a_json_error(kind: Kind) {
    let server = TestServer::on(kind, config()).await;
    let resp = server.client.get(server.kv(&key(9))).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    assert!(etag(&resp).is_none());
    assert_eq!(error_of(resp).await.0, "not_found");
}

async fn head_answers_like_get_without_a_body(kind: Kind) {
    let server = TestServer::on(kind, config()).await;
    let url = server.kv(&key(2));
    let written = tag_of(&server.client.put(&url).body("twelve bytes").send().await.unwrap());

    let resp = server.client.head(&url).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(tag_of(&resp), written);
    assert_eq!(resp.headers()[header::CONTENT_LENGTH], "12");
    assert!(resp.bytes().await.unwrap().is_empty());

    let resp = server.client.head(server.kv(&key(3))).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    assert!(resp.bytes().await.unwrap().is_empty());
}

async fn an_empty_value_is_a_value(kind: Kind) {
    let server = TestServer::on(kind, config()).await;
    let url = server.kv(&key(4));
    assert_eq!(server.client.put(&url).body("").send().await.unwrap().status(), StatusCode::CREATED);
    let resp = server.client.get(&url).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.bytes().await.unwrap().is_empty());
}

async fn if_none_match_star_inserts_only(kind: Kind) {
    let server = TestServer::on(kind, config()).await;
    let url = server.kv(&key(5));
    let put = |body: &'static str| server.client.put(&url).header(header::IF_NONE_MATCH, "*").body(body).send();

    let resp = put("one").await.unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let one = tag_of(&resp);
    let resp = put("two").await.unwrap();
    assert_eq!(resp.status(), StatusCode::PRECONDITION_FAILED);
    assert_eq!(tag_of(&resp), one, "a failed condition names the current tag");
    assert_eq!(error_of(resp).await.0, "precondition_failed");
    assert_eq!(server.client.get(&url).send().await.unwrap().bytes().await.unwrap(), "one");
}

async fn if_match_is_update_only_compare_and_set(kind: Kind) {
    let server = TestServer::on(kind, config()).await;
    let url = server.kv(&key(6));
    let put = |tag: &str, body: &'static str| server.client.put(&url).header(header::IF_MATCH, tag).body(body).send();

    // Absent: update-only writes fail their condition (412, RFC 9110) and create nothing.
    assert_eq!(put("*", "x").await.unwrap().status(), StatusCode::PRECONDITION_FAILED);
    assert_eq!(put("\"1\"", "x").await.unwrap().status(), StatusCode::PRECONDITION_FAILED);
    assert_eq!(server.client.get(&url).send().await.unwrap().status(), StatusCode::NOT_FOUND);

    let v1 = tag_of(&server.client.put(&url).body("v1").send().await.unwrap());
    let resp = put(&v1, "v2").await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let v2 = tag_of(&resp);
    assert_ne!(v2, v1);
    let resp = put(&v1, "lost").await.unwrap();
    assert_eq!((resp.status(), tag_of(&resp)), (StatusCode::PRECONDITION_FAILED, v2.clone()));
    let resp = put("*", "v3").await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(![v1, v2].contains(&tag_of(&resp)));
    assert_eq!(server.client.get(&url).send().await.unwrap().bytes().await.unwrap(), "v3");
}

#[tokio::test]
async fn malformed_conditional_headers_are_400() {
    let server = TestServer::start(config()).await;
    let url = server.kv(&key(7));
    // Not entity tags at all, a list where one tag is allowed, or If-None-Match with tags on
    // a PUT: 400. (A well-formed tag this server never issued is a 412: tests/http/versions.rs.)
    for (name, value) in [
        (header::IF_MATCH, "1"),
        (header::IF_MATCH, "abc"),
        (header::IF_MATCH, "\"unterminated"),
        (header::IF_MATCH, "\"1\", \"2\""),
        (header::IF_NONE_MATCH, "\"1\""),
    ] {
        let resp = server.client.put(&url).header(name.clone(), value).body("v").send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{name}: {value}");
        assert_eq!(error_of(resp).await.0, "bad_header");
    }
    let resp = server.client.delete(&url).header(header::IF_NONE_MATCH, "*").send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    // Who may answer a read: `owner` or `copy` (a single server is its own owner), nothing else.
    for (value, status) in
        [("owner", StatusCode::NOT_FOUND), ("COPY", StatusCode::NOT_FOUND), ("{}", StatusCode::BAD_REQUEST)]
    {
        let resp = server.client.get(&url).header("shardlite-read-from", value).send().await.unwrap();
        assert_eq!(resp.status(), status, "Shardlite-Read-From: {value}");
    }
}

/// Found by Schemathesis: `If-Match` and `If-None-Match: *` on one PUT, both well-formed, were
/// refused with 400. They can never hold together (RFC 9110 §13.2.2): 412, with the current tag
/// if the key exists, and nothing is written.
async fn if_match_and_if_none_match_on_one_put_never_hold(kind: Kind) {
    let server = TestServer::on(kind, config()).await;
    let url = server.kv(&key(13));
    let put = |if_match: &str| {
        let put = server.client.put(&url).header(header::IF_MATCH, if_match.to_owned());
        put.header(header::IF_NONE_MATCH, "*").body("both").send()
    };
    let resp = put("*").await.unwrap();
    assert_eq!((resp.status(), etag(&resp)), (StatusCode::PRECONDITION_FAILED, None), "absent");
    assert_eq!(error_of(resp).await.0, "precondition_failed");
    let tag = tag_of(&server.client.put(&url).body("v").send().await.unwrap());
    for if_match in ["*".to_owned(), tag.clone()] {
        let resp = put(&if_match).await.unwrap();
        assert_eq!((resp.status(), tag_of(&resp)), (StatusCode::PRECONDITION_FAILED, tag.clone()), "{if_match}");
    }
    assert_eq!(server.client.get(&url).send().await.unwrap().text().await.unwrap(), "v");
}

/// Found by Schemathesis: a GET whose `If-Match` failed answered 412 without looking at a
/// malformed `If-None-Match` beside it. Both are parsed first: a malformed one is 400 whatever
/// the other says.
#[tokio::test]
async fn a_malformed_header_beside_a_failing_condition_is_400() {
    let server = TestServer::start(config()).await;
    let url = server.kv(&key(11));
    for present in [false, true] {
        if present {
            server.client.put(&url).body("v").send().await.unwrap();
        }
        for method in [reqwest::Method::GET, reqwest::Method::HEAD] {
            let resp = server.client.request(method.clone(), &url).header(header::IF_MATCH, "\"no\"");
            let resp = resp.header(header::IF_NONE_MATCH, "&/Y").send().await.unwrap();
            assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{method}, key present: {present}");
        }
    }
}

async fn delete_is_204_then_404_and_honours_if_match(kind: Kind) {
    let server = TestServer::on(kind, config()).await;
    let url = server.kv(&key(8));
    let first = tag_of(&server.client.put(&url).body("v").send().await.unwrap());
    let second = tag_of(&server.client.put(&url).body("v").send().await.unwrap());

    let resp = server.client.delete(&url).header(header::IF_MATCH, &first).send().await.unwrap();
    assert_eq!((resp.status(), tag_of(&resp)), (StatusCode::PRECONDITION_FAILED, second.clone()));
    let resp = server.client.delete(&url).header(header::IF_MATCH, &second).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::NO_CONTENT);
    assert!(resp.bytes().await.unwrap().is_empty());
    assert_eq!(server.client.get(&url).send().await.unwrap().status(), StatusCode::NOT_FOUND);

    let resp = server.client.delete(&url).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    assert_eq!(error_of(resp).await.0, "not_found");
    let resp = server.client.delete(&url).header(header::IF_MATCH, "*").send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::PRECONDITION_FAILED, "If-Match on an absent key (RFC 9110)");
}

async fn conditional_gets_answer_304_and_412(kind: Kind) {
    let server = TestServer::on(kind, config()).await;
    let url = server.kv(&key(10));
    let tag = tag_of(&server.client.put(&url).body("v").send().await.unwrap());

    let resp = server.client.get(&url).header(header::IF_NONE_MATCH, &tag).send().await.unwrap();
    assert_eq!((resp.status(), tag_of(&resp)), (StatusCode::NOT_MODIFIED, tag.clone()));
    assert!(resp.bytes().await.unwrap().is_empty());
    let resp = server.client.get(&url).header(header::IF_NONE_MATCH, "\"7\"").send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let resp = server.client.get(&url).header(header::IF_MATCH, "\"7\"").send().await.unwrap();
    assert_eq!((resp.status(), tag_of(&resp)), (StatusCode::PRECONDITION_FAILED, tag));
    assert!(resp.text().await.unwrap().contains("\"error\":\"precondition_failed\""), "a JSON error body");
    let missing = server.kv(&key(12));
    let resp = server.client.get(&missing).header(header::IF_MATCH, "*").send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::PRECONDITION_FAILED);
    assert!(resp.text().await.unwrap().contains("\"error\":"), "a JSON error body");
}

async fn a_value_of_exactly_max_value_bytes_is_stored(kind: Kind) {
    let server = TestServer::on(kind, Config { max_value: 1000, ..config() }).await;
    let url = server.kv(&key(11));
    let value = vec![0xa5u8; 1000];
    assert_eq!(server.client.put(&url).body(value.clone()).send().await.unwrap().status(), StatusCode::CREATED);
    assert_eq!(server.client.get(&url).send().await.unwrap().bytes().await.unwrap().as_ref(), value);
}

async fn concurrent_compare_and_sets_let_exactly_one_win(kind: Kind) {
    let server = TestServer::on(kind, config()).await;
    let url = server.kv(&key(14));
    let read = tag_of(&server.client.put(&url).body("v1").send().await.unwrap());
    let attempts =
        (0..16).map(|i| server.client.put(&url).header(header::IF_MATCH, &read).body(format!("w{i}")).send());
    let answers: Vec<(StatusCode, String)> =
        futures_join_all(attempts).await.into_iter().map(|r| r.unwrap()).map(|r| (r.status(), tag_of(&r))).collect();
    let won: Vec<&String> = answers.iter().filter(|(s, _)| *s == StatusCode::OK).map(|(_, tag)| tag).collect();
    assert_eq!(won.len(), 1, "{answers:?}");
    assert!(answers
        .iter()
        .all(|(s, tag)| *s == StatusCode::OK || (*s == StatusCode::PRECONDITION_FAILED && tag == won[0])));
    let resp = server.client.get(&url).send().await.unwrap();
    assert_eq!(&tag_of(&resp), won[0]);
}

/// Runs the futures concurrently, each on its own task; their outputs in order.
async fn futures_join_all<F>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for handle in handles {
        out.push(handle.await.unwrap());
    }
    out
}

#[tokio::test]
async fn index_mode_none_accepts_only_unconditional_puts() {
    let none = CreateOptions { index: Some(IndexMode::None), ..directory() };
    let server = TestServer::start_created(none, config()).await;
    let url = server.kv(&key(12));
    assert_eq!(server.client.put(&url).body("v").send().await.unwrap().status(), StatusCode::CREATED);
    for req in [
        server.client.get(&url),
        server.client.delete(&url),
        server.client.put(&url).header(header::IF_NONE_MATCH, "*").body("v"),
    ] {
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(resp.headers()[header::ALLOW], "PUT");
        assert_eq!(error_of(resp).await.0, "unsupported");
    }
}

#[tokio::test]
async fn http2_with_prior_knowledge_serves_the_same_api() {
    let server = TestServer::start(config()).await;
    crate::common::tls_provider();
    let client = reqwest::Client::builder().no_proxy().http2_prior_knowledge().build().unwrap();
    let url = server.kv(&key(13));
    let resp = client.put(&url).body("h2").send().await.unwrap();
    assert_eq!((resp.version(), resp.status()), (reqwest::Version::HTTP_2, StatusCode::CREATED));
    let resp = client.get(&url).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.bytes().await.unwrap(), "h2");
}
