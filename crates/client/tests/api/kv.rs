//! Reads, upserts, deletes and conditional writes, and the typed refusals.

use shardlite_client::{Condition, Error, ErrorCode};

use crate::common::TestServer;

#[tokio::test]
async fn put_get_delete() {
    let server = TestServer::start().await;
    let client = server.client();
    assert_eq!(client.get(b"k").await.unwrap(), None);
    let first = client.put(b"k", "one").await.unwrap();
    assert!(first.created);
    let second = client.put(b"k", "two").await.unwrap();
    assert!(!second.created);
    assert_ne!(first.etag, second.etag);
    let record = client.get(b"k").await.unwrap().unwrap();
    assert_eq!((record.value.as_ref(), &record.etag), (&b"two"[..], &second.etag));
    assert!(client.delete(b"k").await.unwrap());
    assert!(!client.delete(b"k").await.unwrap(), "a second delete finds nothing");
    assert_eq!(client.get(b"k").await.unwrap(), None);
}

#[tokio::test]
async fn values_are_any_bytes_and_keys_any_bytes() {
    let server = TestServer::start().await;
    let client = server.client();
    let all_bytes: Vec<u8> = (0..=255).collect();
    for value in [Vec::new(), all_bytes.clone(), vec![7; 200_000]] {
        client.put(&all_bytes, value.clone()).await.unwrap();
        assert_eq!(client.get(&all_bytes).await.unwrap().unwrap().value, value);
    }
}

#[tokio::test]
async fn conditional_writes_hold_or_say_the_current_tag() {
    let server = TestServer::start().await;
    let client = server.client();
    let tag = client.create(b"k", "v1").await.unwrap();
    let exists = client.create(b"k", "again").await.unwrap_err();
    assert!(exists.is_precondition_failed());
    assert!(matches!(&exists, Error::Server(e) if e.status == 412 && e.etag.as_ref() == Some(&tag)), "{exists:?}");

    let written = client.put_if(b"k", "v2", &tag).await.unwrap();
    let stale = client.put_if(b"k", "v3", &tag).await.unwrap_err();
    assert!(
        matches!(&stale, Error::Server(e) if e.etag.as_ref() == Some(&written.etag)),
        "the 412 names the current tag"
    );
    let updated = client.put_with(b"k", "v3", Condition::Exists).await.unwrap();
    assert!(client.delete_if(b"k", &written.etag).await.unwrap_err().is_precondition_failed());
    client.delete_if(b"k", &updated.etag).await.unwrap();

    let absent = client.put_if(b"k", "v4", &tag).await.unwrap_err();
    assert!(matches!(&absent, Error::Server(e) if e.code == ErrorCode::PreconditionFailed && e.etag.is_none()));
    assert!(client.delete_if(b"k", &tag).await.unwrap_err().is_precondition_failed(), "absent: 412");
    let gone = client.delete_with(b"k", Condition::Always).await.unwrap_err();
    assert_eq!(gone.code(), Some(&ErrorCode::NotFound));
}

#[tokio::test]
async fn refusals_carry_their_codes() {
    let server = TestServer::start().await;
    let client = server.client();
    let long = client.get(vec![1; 1025]).await.unwrap_err();
    assert!(matches!(&long, Error::Server(e) if e.status == 413 && e.code == ErrorCode::KeyTooLarge), "{long:?}");
    assert_eq!(client.get(b"").await.unwrap_err().code(), Some(&ErrorCode::BadKey));
    let bad = client.delete_with(b"k", Condition::Absent).await.unwrap_err();
    assert_eq!(bad.code(), Some(&ErrorCode::BadHeader), "If-None-Match is refused on a delete");
    assert_eq!(client.keys(99, None, 10).await.unwrap_err().code(), Some(&ErrorCode::BadQuery));
}
