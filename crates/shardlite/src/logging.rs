//! The process's logs: to stderr, with ANSI colours only when stderr is a terminal (a file or
//! journald gets plain text), as text or JSON lines (`--log-format`); `RUST_LOG` overrides the
//! level. With an access log (`serve --access-log FILE`), the request lines (target
//! [`REQUESTS`]) go to that file instead, appended by a background thread so that no request
//! waits for the disk.

use std::{io::IsTerminal, path::Path};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use tracing_appender::non_blocking::WorkerGuard;
use tracing_subscriber::{
    filter::{filter_fn, EnvFilter},
    fmt,
    layer::SubscriberExt,
    util::SubscriberInitExt,
    Layer, Registry,
};

/// The target of the server's one line per request.
pub const REQUESTS: &str = "shardlite_server::request";

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One line of text per event.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields`.
    Json,
}

/// Keeps the access log's writer thread running; dropping it flushes what is buffered.
#[must_use = "dropping it stops the access log's writer"]
pub struct Guard {
    _worker: Option<WorkerGuard>,
}

/// Installs the logger: `default_level` unless `RUST_LOG` says otherwise, in `format`, and the
/// request lines to `access_log` if given.
pub fn init(default_level: &str, format: LogFormat, access_log: Option<&Path>) -> anyhow::Result<Guard> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| default_level.into());
    let to_file = access_log.is_some();
    let stderr = layer(format, std::io::stderr, std::io::stderr().is_terminal())
        .with_filter(filter)
        .with_filter(filter_fn(move |meta| !(to_file && meta.target() == REQUESTS)))
        .boxed();
    let mut layers = vec![stderr];
    let mut guard = None;
    if let Some(path) = access_log {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("opening the access log {}", path.display()))?;
        let (writer, worker) = tracing_appender::non_blocking(file);
        layers.push(layer(format, writer, false).with_filter(filter_fn(|meta| meta.target() == REQUESTS)).boxed());
        guard = Some(worker);
    }
    tracing_subscriber::registry().with(layers).try_init().context("installing the logger")?;
    Ok(Guard { _worker: guard })
}

/// A formatting layer writing to `writer`, coloured if `ansi`.
fn layer<W>(format: LogFormat, writer: W, ansi: bool) -> Box<dyn Layer<Registry> + Send + Sync>
where
    W: for<'w> fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let layer = fmt::layer().with_writer(writer).with_ansi(ansi);
    match format {
        LogFormat::Text => layer.boxed(),
        LogFormat::Json => layer.json().with_ansi(false).boxed(),
    }
}
