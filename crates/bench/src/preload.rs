//! Loading the deterministic data set through a server's `POST /batch` (docs/http-api.md), for
//! backends `shardlite load` cannot write (PostgreSQL): records `0..n` of [`keyspace`] — the
//! same keys and values `shardlite load --seed S` writes — in batches of [`BATCH`] puts, a few
//! batches in flight at once. Every put must answer 201 or 200.

use bytes::Bytes;
use hyper::Method;
use serde::Deserialize;

use crate::{http::Target, keyspace};

/// Puts per `POST /batch` (the server's default `--batch-max-ops`).
pub const BATCH: u64 = 1000;

/// Batches in flight at once: enough to keep a two-core server busy.
const CONNECTIONS: u64 = 4;

/// What is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataSet {
    /// Records `0..records`.
    pub records: u64,
    /// Seed of the key space.
    pub seed: u64,
    /// Key bytes.
    pub key_size: usize,
    /// Value bytes.
    pub value_size: usize,
}

/// The answer of `POST /batch`: one status per put.
#[derive(Debug, Deserialize)]
struct BatchAnswer {
    results: Vec<ItemStatus>,
}

#[derive(Debug, Deserialize)]
struct ItemStatus {
    status: u16,
}

/// Loads `data` into the server at `target`.
pub async fn load(target: &Target, data: DataSet) -> anyhow::Result<()> {
    let mut workers = tokio::task::JoinSet::new();
    for worker in 0..CONNECTIONS {
        let target = target.clone();
        workers.spawn(async move {
            let (mut conn, driver) = target.connect().await?;
            let driving = tokio::spawn(driver);
            let mut first = worker * BATCH;
            while first < data.records {
                let end = (first + BATCH).min(data.records);
                let req = target.request(Method::POST, "/batch", Bytes::from(batch_body(data, first..end)))?;
                let (status, body) = conn.send(req).await?;
                check_answer(status, &body, end - first)?;
                first += CONNECTIONS * BATCH;
            }
            driving.abort();
            anyhow::Ok(())
        });
    }
    while let Some(done) = workers.join_next().await {
        done??;
    }
    Ok(())
}

/// The JSON body putting records `range` of `data`.
fn batch_body(data: DataSet, range: std::ops::Range<u64>) -> String {
    let ops: Vec<serde_json::Value> = range
        .map(|i| {
            let key = hex::encode(keyspace::key(data.seed, i, data.key_size));
            let value = hex::encode(keyspace::value(data.seed, i, data.value_size));
            serde_json::json!({"op": "put", "key": key, "value": value})
        })
        .collect();
    serde_json::json!({ "ops": ops }).to_string()
}

/// An error unless the answer is 200 with `puts` results, each 201 or 200.
fn check_answer(status: u16, body: &[u8], puts: u64) -> anyhow::Result<()> {
    let text = || String::from_utf8_lossy(body).chars().take(300).collect::<String>();
    anyhow::ensure!(status == 200, "POST /batch answered {status}: {}", text());
    let answer: BatchAnswer = serde_json::from_slice(body)?;
    anyhow::ensure!(
        answer.results.len() as u64 == puts,
        "POST /batch: {} results for {puts} puts",
        answer.results.len()
    );
    if let Some(bad) = answer.results.iter().find(|r| r.status != 201 && r.status != 200) {
        anyhow::bail!("POST /batch: a put answered {}: {}", bad.status, text());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_carry_the_loaders_records() {
        let data = DataSet { records: 10, seed: 1, key_size: 32, value_size: 5 };
        let body: serde_json::Value = serde_json::from_str(&batch_body(data, 3..5)).unwrap();
        let ops = body["ops"].as_array().unwrap();
        assert_eq!(ops.len(), 2);
        assert_eq!(ops[0]["op"], "put");
        assert_eq!(ops[0]["key"], hex::encode(keyspace::key(1, 3, 32)));
        assert_eq!(ops[1]["value"], hex::encode(keyspace::value(1, 4, 5)));
        assert_eq!(ops[0].as_object().unwrap().len(), 3, "unconditional puts");
    }

    #[test]
    fn every_put_must_succeed() {
        assert!(check_answer(200, br#"{"results":[{"status":201,"counter":1},{"status":200}]}"#, 2).is_ok());
        let err = check_answer(200, br#"{"results":[{"status":201},{"status":503}]}"#, 2).unwrap_err();
        assert!(err.to_string().contains("503"), "{err}");
        assert!(check_answer(200, br#"{"results":[{"status":201}]}"#, 2).is_err());
        assert!(check_answer(413, br#"{"error":"too_many_ops"}"#, 2).unwrap_err().to_string().contains("413"));
    }
}
