//! Keys (and batch values) on the wire: lowercase hex. A key is 1..=1024 bytes, so 2..=2048
//! hex characters; anything else is refused here, before the engine sees it, with a message
//! that says what is wrong. Decoding is done here in one pass over the bytes (the `hex` crate
//! also accepts uppercase, and validating first would cost a second pass on every request).

use shardlite_engine::MAX_KEY_LEN;

use super::error::ApiError;

/// Decodes a key from lowercase hex: 400 if malformed, 413 if longer than the engine allows.
pub fn parse_key(hex: &str) -> Result<Vec<u8>, ApiError> {
    if hex.is_empty() {
        return Err(ApiError::bad_key("the key is empty: keys are 2..=2048 lowercase hex characters"));
    }
    if hex.len() > 2 * MAX_KEY_LEN {
        return Err(ApiError::new(
            hyper::StatusCode::PAYLOAD_TOO_LARGE,
            "key_too_large",
            format!("the key has {} hex characters; the most is {}", hex.len(), 2 * MAX_KEY_LEN),
        ));
    }
    decode(hex).map_err(|why| ApiError::bad_key(format!("the key {why}")))
}

/// Decodes lowercase hex, saying what is wrong in words that follow "the key" or "the value".
pub fn decode(hex: &str) -> Result<Vec<u8>, String> {
    let digits = hex.as_bytes();
    if let Some(at) = digits.iter().position(|&b| nibble(b).is_none()) {
        // Everything before `at` is ASCII, so `at` starts a character: report all of it.
        let c = hex.get(at..).and_then(|rest| rest.chars().next()).unwrap_or('?');
        let hint = if c.is_ascii_hexdigit() { " (hex must be lowercase)" } else { "" };
        return Err(format!("has {c:?} at offset {at}: not a lowercase hex digit{hint}"));
    }
    if digits.len() % 2 == 1 {
        return Err(format!("has an odd number of hex characters ({})", digits.len()));
    }
    // Every byte was checked above, so the fallback never applies.
    Ok(digits.chunks_exact(2).map(|pair| nibble(pair[0]).unwrap_or(0) << 4 | nibble(pair[1]).unwrap_or(0)).collect())
}

/// The value of one lowercase hex digit.
fn nibble(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_lowercase_hex_of_the_allowed_lengths() {
        assert_eq!(parse_key("00ff"), Ok(vec![0, 255]));
        assert_eq!(parse_key(&"ab".repeat(MAX_KEY_LEN)).map(|k| k.len()), Ok(MAX_KEY_LEN));
    }

    #[test]
    fn refuses_malformed_keys_with_a_reason() {
        let msg = |s: &str| parse_key(s).unwrap_err();
        assert_eq!(msg("").status, 400);
        assert_eq!(msg("abc").status, 400);
        assert!(msg("abc").message.contains("odd"), "{}", msg("abc").message);
        assert!(msg("AB").message.contains("lowercase"));
        assert!(msg("zz").message.contains("'z'"));
        assert!(msg("ab/cd").message.contains("'/'"));
        assert_eq!(msg(&"ab".repeat(MAX_KEY_LEN + 1)).status, 413);
        assert_eq!(msg(&"ab".repeat(MAX_KEY_LEN + 1)).code, "key_too_large");
    }
}
