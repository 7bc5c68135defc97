//! The JSON schema of `shardlite bench --json` ([`SCHEMA`], `report.schema.json`, JSON Schema
//! 2020-12) and a validator for the part of JSON Schema it uses (`type`, `enum`, `properties`,
//! `required`, `additionalProperties`, `items`, `anyOf`, local `$ref`), so the tests check real
//! reports against the published schema without another dependency.

use serde_json::Value;

/// The schema of the JSON report.
pub const SCHEMA: &str = include_str!("report.schema.json");

/// Every way `doc` breaks [`SCHEMA`], as `path: problem` lines; empty if it conforms.
pub fn validate(doc: &Value) -> Vec<String> {
    let schema: Value = serde_json::from_str(SCHEMA).unwrap_or(Value::Null);
    let mut problems = Vec::new();
    check(&schema, &schema, doc, "$", &mut problems);
    problems
}

fn type_matches(name: &str, v: &Value) -> bool {
    match name {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.is_u64() || v.is_i64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        _ => false,
    }
}

fn check(root: &Value, schema: &Value, v: &Value, path: &str, problems: &mut Vec<String>) {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        match r.strip_prefix("#/").map(|p| p.split('/').try_fold(root, |s, k| s.get(k))) {
            Some(Some(target)) => check(root, target, v, path, problems),
            _ => problems.push(format!("{path}: unresolved $ref {r}")),
        }
        return;
    }
    if let Some(any) = schema.get("anyOf").and_then(Value::as_array) {
        let fits = any.iter().any(|s| {
            let mut p = Vec::new();
            check(root, s, v, path, &mut p);
            p.is_empty()
        });
        if !fits {
            problems.push(format!("{path}: matches none of anyOf"));
        }
    }
    if let Some(t) = schema.get("type") {
        let names: Vec<&str> = match t {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !names.iter().any(|n| type_matches(n, v)) {
            problems.push(format!("{path}: expected {names:?}, found {v}"));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        if !allowed.contains(v) {
            problems.push(format!("{path}: {v} is not one of {allowed:?}"));
        }
    }
    if let Value::Object(fields) = v {
        let props = schema.get("properties").and_then(Value::as_object);
        for name in schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
            if !fields.contains_key(name) {
                problems.push(format!("{path}: missing field `{name}`"));
            }
        }
        for (name, value) in fields {
            let sub = format!("{path}.{name}");
            match (props.and_then(|p| p.get(name)), schema.get("additionalProperties")) {
                (Some(s), _) => check(root, s, value, &sub, problems),
                (None, Some(Value::Bool(false))) => problems.push(format!("{sub}: field not in the schema")),
                (None, Some(extra @ Value::Object(_))) => check(root, extra, value, &sub, problems),
                (None, _) => {}
            }
        }
    }
    if let (Value::Array(items), Some(item_schema)) = (v, schema.get("items")) {
        for (i, item) in items.iter().enumerate() {
            check(root, item_schema, item, &format!("{path}[{i}]"), problems);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_schema_parses_and_rejects_what_it_should() {
        let schema: Value = serde_json::from_str(SCHEMA).unwrap();
        assert_eq!(schema["properties"]["schema_version"]["enum"][0], crate::report::SCHEMA_VERSION);
        assert!(validate(
            &json!({"schema_version": 1, "generator": {"version": "x", "threads": 2, "cores": 2}, "runs": []})
        )
        .is_empty());
        let matrix = json!({"workloads": ["insert"], "configurations": [
            {"key": "wal", "label": "WAL", "index": "hash", "serve_args": ["--journal", "wal"], "runs": []}
        ]});
        let generator = json!({"version": "x", "threads": 2, "cores": 2});
        assert!(
            validate(&json!({"schema_version": 1, "generator": generator, "runs": [], "matrix": matrix})).is_empty()
        );
        let bad_matrix = json!({"workloads": ["scan"], "configurations": [{"key": "wal", "index": "lsm"}]});
        let text = validate(&json!({"schema_version": 1, "generator": generator, "runs": [], "matrix": bad_matrix}))
            .join("\n");
        for expected in
            ["$.matrix.workloads[0]: \"scan\" is not one of", "$.matrix.configurations[0]: missing field `runs`"]
        {
            assert!(text.contains(expected), "{expected} not in\n{text}");
        }
        assert!(text.contains("$.matrix.configurations[0].index: \"lsm\" is not one of"), "{text}");
        let bad =
            validate(&json!({"schema_version": 2, "generator": {"version": 1, "threads": 2}, "runs": [{}], "x": 0}));
        let text = bad.join("\n");
        for expected in [
            "$.schema_version: 2 is not one of",
            "$.generator.version: expected",
            "missing field `cores`",
            "$.runs[0]: missing field `name`",
            "$.x: field not in the schema",
        ] {
            assert!(text.contains(expected), "{expected} not in\n{text}");
        }
    }
}
