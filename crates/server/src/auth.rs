//! Bearer-token authentication (`--auth-token`): every route but `/healthz` requires
//! `Authorization: Bearer <token>`. The token is compared in constant time so response timing
//! does not reveal how much of a guess was right (a wrong length is refused at once: the length
//! is not the secret).

use hyper::{header::AUTHORIZATION, HeaderMap};
use subtle::ConstantTimeEq;

use crate::error::ApiError;

/// The token the server expects, if any.
#[derive(Clone, Default)]
pub struct Auth {
    token: Option<Vec<u8>>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        f.debug_struct("Auth").field("enabled", &self.token.is_some()).finish()
    }
}

impl Auth {
    /// Requires `token` (if `Some`) on every request checked.
    pub fn new(token: Option<&str>) -> Self {
        Self { token: token.map(|t| t.as_bytes().to_vec()) }
    }

    /// Whether a token is required.
    pub fn enabled(&self) -> bool {
        self.token.is_some()
    }

    /// Admits the request, or answers 401 with the `WWW-Authenticate: Bearer` challenge.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let Some(expected) = &self.token else { return Ok(()) };
        let Some(given) = headers.get(AUTHORIZATION) else { return Err(ApiError::unauthorized(false)) };
        let given = given.as_bytes();
        // The scheme is case-insensitive (RFC 9110 §11.1); the token is not.
        let token = match given.get(..7) {
            Some(scheme) if scheme.eq_ignore_ascii_case(b"bearer ") => &given[7..],
            _ => return Err(ApiError::unauthorized(false)),
        };
        if bool::from(token.ct_eq(expected)) {
            Ok(())
        } else {
            Err(ApiError::unauthorized(true))
        }
    }
}

#[cfg(test)]
mod tests {
    use hyper::header::HeaderValue;

    use super::*;

    fn with(value: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, HeaderValue::from_static(value));
        h
    }

    #[test]
    fn admits_only_the_right_bearer_token() {
        let auth = Auth::new(Some("s3cret"));
        assert!(auth.check(&with("Bearer s3cret")).is_ok());
        assert!(auth.check(&with("bearer s3cret")).is_ok());
        assert!(auth.check(&with("Bearer s3cre")).is_err());
        assert!(auth.check(&with("Bearer s3cret ")).is_err());
        assert!(auth.check(&with("Basic s3cret")).is_err());
        assert!(auth.check(&HeaderMap::new()).is_err());
        assert!(Auth::new(None).check(&HeaderMap::new()).is_ok());
        assert_eq!(format!("{:?}", auth), "Auth { enabled: true }");
    }
}
