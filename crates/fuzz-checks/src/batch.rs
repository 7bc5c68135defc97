//! The `batch_decode` target's property: any body fed to the server's `POST /batch` decoder
//! gives a 4xx error or operations within the documented limits (`docs/http-api.md`), never a
//! panic.

use shardlite_engine::{Config, Op, MAX_KEY_LEN};
use shardlite_server::{decode_batch, ApiError, ServerOptions};

/// Limits small enough for fuzzed inputs to reach them: (operations, value bytes).
const SMALL: (usize, usize) = (8, 16);

/// Decodes `body` under small limits and under the server's defaults, checking each answer.
pub fn check_batch(body: &[u8]) {
    let defaults = (ServerOptions::default().batch_max_ops, Config::default().max_value);
    for (max_ops, max_value) in [SMALL, defaults] {
        check_with(body, max_ops, max_value);
    }
}

fn check_with(body: &[u8], max_ops: usize, max_value: usize) {
    let items = match decode_batch(body, max_ops, max_value) {
        Ok(items) => items,
        Err(err) => return assert_client_error(&err),
    };
    assert!(items.len() <= max_ops, "{} operations decoded, the most is {max_ops}", items.len());
    for item in items {
        match item {
            Ok(op) => check_op(&op, max_value),
            Err(err) => assert_client_error(&err),
        }
    }
}

fn check_op(op: &Op, max_value: usize) {
    let key = op.key().len();
    assert!((1..=MAX_KEY_LEN).contains(&key), "a decoded key of {key} bytes");
    if let Op::Put { value, .. } = op {
        assert!(value.len() <= max_value, "a decoded value of {} bytes, the most is {max_value}", value.len());
    }
}

fn assert_client_error(err: &ApiError) {
    assert!(err.status.is_client_error(), "{} {}: {}", err.status, err.code, err.message);
}
