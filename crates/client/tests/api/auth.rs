//! The bearer token, and the roles of a token file: 401 and 403 as typed errors.

use shardlite_client::{Client, ErrorCode};
use shardlite_server::ServerOptions;

use crate::common::{fast, TestServer};

#[tokio::test]
async fn tokens_and_roles() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    std::fs::write(&file, "read reader-token\nwrite writer-token\n").unwrap();
    let (create, config) = fast();
    let options = ServerOptions { auth_token_file: Some(file), ..ServerOptions::default() };
    let server = TestServer::with(create, config, options).await;
    let with = |token: Option<&str>| {
        let builder = Client::builder(&server.url);
        token.map_or(builder.clone(), |t| builder.token(t)).build().unwrap()
    };
    assert_eq!(with(None).get(b"k").await.unwrap_err().code(), Some(&ErrorCode::Unauthorized));
    assert_eq!(with(Some("wrong")).get(b"k").await.unwrap_err().code(), Some(&ErrorCode::Unauthorized));
    let reader = with(Some("reader-token"));
    assert_eq!(reader.get(b"k").await.unwrap(), None);
    assert_eq!(reader.put(b"k", "v").await.unwrap_err().code(), Some(&ErrorCode::Forbidden));
    assert!(with(Some("writer-token")).put(b"k", "v").await.unwrap().created);
}
