//! `GET /openapi.yaml`: the API's OpenAPI 3.1 description, `docs/openapi.yaml`, built into the
//! binary, so a client or a tester (`scripts/schemathesis.sh`) reads the description of exactly
//! the server it talks to. Its tests keep the description in step with the code: every route
//! and method the router serves, the role each needs, and every error code the server answers.

use hyper::{header::HeaderValue, StatusCode};

use crate::http::response::{self, Response};

/// The description, as served.
pub const DESCRIPTION: &str = include_str!("../../../../docs/openapi.yaml");

/// Serves `/openapi.yaml` (HEAD too: hyper leaves the body out).
pub fn handle() -> Response {
    response::with_body(StatusCode::OK, HeaderValue::from_static("application/yaml"), DESCRIPTION)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use hyper::Method;
    use serde_yaml_ng::Value;

    use super::*;
    use crate::http::routes::Route;

    /// Methods a route could serve.
    const METHODS: [Method; 7] =
        [Method::GET, Method::HEAD, Method::PUT, Method::DELETE, Method::POST, Method::PATCH, Method::OPTIONS];

    fn description() -> Value {
        serde_yaml_ng::from_str(DESCRIPTION).expect("docs/openapi.yaml is YAML")
    }

    #[test]
    fn every_route_and_method_is_described_with_its_role() {
        let doc = description();
        assert_eq!(doc["openapi"].as_str(), Some("3.1.0"));
        let paths = doc["paths"].as_mapping().expect("paths");
        let served: BTreeSet<&str> = Route::SERVED.iter().map(|r| r.as_str()).collect();
        let described: BTreeSet<&str> = paths.keys().filter_map(Value::as_str).collect();
        assert_eq!(described, served, "the description's paths are the router's");
        for route in Route::SERVED {
            let path = route.as_str();
            for method in METHODS {
                let operation = &paths[path][method.as_str().to_lowercase().as_str()];
                let allowed = route.allow(&method, path).is_ok();
                assert_eq!(operation.is_mapping(), allowed, "{method} {path}: described iff served");
                if !allowed {
                    continue;
                }
                let role = operation["x-shardlite-role"].as_str();
                assert_eq!(role, route.role(&method).map(|r| r.as_str()), "{method} {path}: x-shardlite-role");
                let public = operation["security"].as_sequence().is_some_and(Vec::is_empty);
                assert_eq!(public, route.is_public(), "{method} {path}: `security: []` iff no token is needed");
            }
        }
    }

    /// The error codes the server's code answers with: string literals given as an error's code
    /// (`ApiError::new(StatusCode::X, "code", ..)`, `code: "code"`, `bad_item("code", ..)`,
    /// `unavailable("code", ..)`) outside the files' tests, in `src` and its folders.
    fn codes_in_the_code() -> BTreeSet<String> {
        let mut dirs = vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
        let mut files = Vec::new();
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    files.push(path);
                }
            }
        }
        let mut codes = BTreeSet::new();
        for file in files {
            let text = std::fs::read_to_string(file).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            for (at, _) in code.match_indices('"') {
                let before = code[..at].trim_end();
                let is_code = ["code:", "bad_item(", "unavailable("].iter().any(|call| before.ends_with(call))
                    || before.strip_suffix(',').is_some_and(ends_with_a_status);
                let literal = code[at + 1..].split('"').next().unwrap_or_default();
                if is_code && !literal.is_empty() && literal.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                    codes.insert(literal.to_owned());
                }
            }
        }
        codes
    }

    /// Whether `text` ends with a status constant, `StatusCode::NAME` (maybe with a path before it).
    fn ends_with_a_status(text: &str) -> bool {
        let word = text.rsplit(|c: char| c.is_whitespace() || c == '(').next().unwrap_or_default();
        word.rsplit_once("StatusCode::")
            .is_some_and(|(_, name)| !name.is_empty() && name.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
    }

    #[test]
    fn every_error_code_is_described() {
        let doc = description();
        let described: BTreeSet<String> = doc["components"]["schemas"]["ErrorCode"]["enum"]
            .as_sequence()
            .expect("ErrorCode's enum")
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
        let answered = codes_in_the_code();
        for code in ["bad_key", "not_found", "unauthorized", "too_many_ops", "value_too_large", "not_ready"] {
            assert!(answered.contains(code), "the scan of the code misses {code}: {answered:?}");
        }
        let missing: Vec<_> = answered.difference(&described).collect();
        assert!(missing.is_empty(), "error codes missing from docs/openapi.yaml's ErrorCode: {missing:?}");
        let stale: Vec<_> = described.difference(&answered).collect();
        assert!(stale.is_empty(), "ErrorCode lists codes the server never answers: {stale:?}");
    }
}
