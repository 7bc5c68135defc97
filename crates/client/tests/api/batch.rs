//! `POST /batch` and `GET /keys`.

use std::collections::HashSet;

use shardlite_client::{Condition, ErrorCode, Op};

use crate::common::TestServer;

#[tokio::test]
async fn a_batch_answers_each_operation() {
    let server = TestServer::start().await;
    let client = server.client();
    let tag = client.put(b"a", "old").await.unwrap().etag;
    let results = client
        .batch(&[
            Op::put(&b"a"[..], &b"new"[..]).when(Condition::Matches(tag.clone())),
            Op::put(&b"b"[..], &b"v"[..]).when(Condition::Absent),
            Op::get(&b"a"[..]),
            Op::put(&b"b"[..], &b"w"[..]).when(Condition::Absent),
            Op::delete(&b"absent"[..]),
            Op::delete(&b"a"[..]).when(Condition::Matches(tag)),
        ])
        .await
        .unwrap();
    let updated = results[0].as_ref().unwrap();
    assert_eq!((updated.status, updated.counter), (200, Some(2)));
    assert_eq!(results[1].as_ref().unwrap().status, 201);
    let read = results[2].as_ref().unwrap();
    assert_eq!((read.value.as_deref(), &read.etag), (Some(&b"new"[..]), &updated.etag));
    let exists = results[3].as_ref().unwrap_err();
    assert_eq!((exists.status, &exists.code), (412, &ErrorCode::PreconditionFailed));
    assert_eq!(exists.etag, results[1].as_ref().unwrap().etag, "the current tag");
    assert_eq!(results[4].as_ref().unwrap_err().code, ErrorCode::NotFound);
    assert_eq!(results[5].as_ref().unwrap_err().code, ErrorCode::PreconditionFailed, "the tag is stale");
    let too_many = vec![Op::get(&b"a"[..]); 1001];
    assert_eq!(client.batch(&too_many).await.unwrap_err().code(), Some(&ErrorCode::TooManyOps));
    assert_eq!(client.batch(&[]).await.unwrap(), Vec::new(), "an empty batch does nothing");
}

#[tokio::test]
async fn pages_of_keys_list_every_key() {
    let server = TestServer::start().await;
    let client = server.client();
    let written: HashSet<Vec<u8>> = (0..30u8).map(|i| vec![i; 3]).collect();
    for key in &written {
        client.put(key, "v").await.unwrap();
    }
    let mut listed = HashSet::new();
    let partitions = client.keys(0, None, 1).await.unwrap().partitions;
    for partition in 0..partitions {
        let mut after = None;
        loop {
            let page = client.keys(partition, after.as_deref(), 4).await.unwrap();
            for (key, etag) in page.keys {
                assert_eq!(client.get(&key).await.unwrap().unwrap().etag, etag);
                assert!(listed.insert(key), "listed once");
            }
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
    }
    assert_eq!(listed, written);
}
