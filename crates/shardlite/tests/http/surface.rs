//! Bad input over the whole HTTP surface, as a property test (`docs/reliability.md`, "Bad input"): random
//! methods, paths (well-formed and malformed keys, known and unknown routes), conditional headers
//! (valid, malformed, odd), declared lengths that match, are missing, or promise more than is sent,
//! and bodies (random bytes, random JSON batches), each on a fresh connection to one server.
//! Every request must get a well-formed HTTP response with a status the API documents and never
//! a 5xx; error answers carry a JSON body; the server is still healthy after all cases and stops
//! cleanly.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    time::Duration,
};

use proptest::prelude::*;
use shardlite_engine::Config;
use shardlite_server::ServerOptions;

use crate::common::{config, TestServer};

fn method() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["GET", "HEAD", "PUT", "DELETE", "POST", "PATCH", "OPTIONS", "BREW"])
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[0-9a-f]{2,64}",
        1 => "[0-9a-f]{1,5}",
        1 => "[0-9A-F]{2,8}",
        1 => "[g-z%~.\\-_0-9]{1,12}",
        1 => Just(String::new()),
        1 => "[0-9a-f]{2050,2060}",
    ]
}

fn path() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => key().prop_map(|k| format!("/kv/{k}")),
        2 => Just("/batch".to_owned()),
        1 => prop::sample::select(vec!["/healthz", "/stats", "/metrics", "/", "/kv", "/kv/", "/nope", "/kv/ab/cd"])
            .prop_map(str::to_owned),
    ]
}

fn condition() -> impl Strategy<Value = Option<(&'static str, String)>> {
    let value = prop_oneof![
        Just("*".to_owned()),
        (0u64..5).prop_map(|n| format!("\"{n}\"")),
        Just("W/\"1\"".to_owned()),
        Just("\"1\", \"2\"".to_owned()),
        Just("nonsense".to_owned()),
        Just("\"18446744073709551616\"".to_owned()),
        Just(String::new()),
    ];
    proptest::option::of((prop::sample::select(vec!["If-Match", "If-None-Match"]), value))
}

fn batch_body() -> impl Strategy<Value = Vec<u8>> {
    let op = (prop::sample::select(vec!["get", "put", "delete", "jump"]), key(), "[0-9a-f]{0,16}", any::<bool>())
        .prop_map(|(op, key, value, with_value)| {
            if with_value {
                format!(r#"{{"op":"{op}","key":"{key}","value":"{value}"}}"#)
            } else {
                format!(r#"{{"op":"{op}","key":"{key}"}}"#)
            }
        });
    prop_oneof![
        3 => proptest::collection::vec(op, 0..6).prop_map(|ops| format!(r#"{{"ops":[{}]}}"#, ops.join(",")).into_bytes()),
        1 => proptest::collection::vec(any::<u8>(), 0..64),
        1 => Just(b"{\"ops\": 7}".to_vec()),
    ]
}

/// How the body's length is declared.
#[derive(Debug, Clone, Copy)]
enum Length {
    Exact,
    Missing,
    Promised(usize),
}

fn length() -> impl Strategy<Value = Length> {
    prop_oneof![6 => Just(Length::Exact), 1 => Just(Length::Missing), 1 => (1usize..64).prop_map(Length::Promised)]
}

/// Sends one request on a fresh connection; returns the status and the rest of the response.
fn send(server: SocketAddr, request: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(server).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream.write_all(request).unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP response to\n{}\n---\ngot: {text:?}", String::from_utf8_lossy(request)));
    (status, text)
}

const DOCUMENTED: [u16; 14] = [200, 201, 204, 304, 400, 401, 404, 405, 408, 411, 412, 413, 503, 507];

/// One generated request.
type Case = (&'static str, String, Option<(&'static str, String)>, Vec<u8>, Vec<u8>, Length);

fn request(case: &Case) -> Vec<u8> {
    let (method, path, condition, value, batch, length) = case;
    let body = if path == "/batch" { batch } else { value };
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    if let Some((name, value)) = condition {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let sent_body: &[u8] = match length {
        Length::Exact => {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
            body
        }
        Length::Missing => &[],
        Length::Promised(extra) => {
            head.push_str(&format!("Content-Length: {}\r\n", body.len() + extra));
            body
        }
    };
    let mut request = head.into_bytes();
    request.extend_from_slice(b"\r\n");
    request.extend_from_slice(sent_body);
    request
}

#[test]
fn every_request_gets_a_documented_answer_and_the_server_stays_healthy() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let options = ServerOptions { body_timeout_ms: Duration::from_millis(200), ..ServerOptions::default() };
    let mut server = runtime.block_on(TestServer::start_with(Config { max_value: 4096, ..config() }, options));
    let cases =
        (method(), path(), condition(), proptest::collection::vec(any::<u8>(), 0..5000), batch_body(), length());
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig { cases: 300, ..ProptestConfig::default() });
    let result = runner.run(&cases, |case| {
        let (status, text) = send(server.addr, &request(&case));
        let (method, path) = (case.0, &case.1);
        prop_assert!(DOCUMENTED.contains(&status), "status {} for {} {}:\n{}", status, method, path, text);
        if status >= 400 && method != "HEAD" {
            prop_assert!(text.contains("\"error\":"), "an error without a JSON body:\n{}", text);
        }
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
    let (status, _) = send(server.addr, b"GET /healthz HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    assert_eq!(status, 200, "the server is healthy after the bad input");
    runtime.block_on(server.stop());
}
