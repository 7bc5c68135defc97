//! `shardlite serve`: resolve the settings, bind, open (or create) the data directory — or
//! connect to PostgreSQL (`--backend postgres://...`) — run the HTTP server on a tokio runtime
//! until SIGTERM or Ctrl-C, and return once the backend is closed.

mod settings;

use std::sync::Arc;

use anyhow::Context;
use shardlite_engine::Store;
#[cfg(feature = "postgres")]
use shardlite_postgres::{PgBackend, PgOptions};
use shardlite_server::{Backend, SqliteBackend};

pub use settings::ServeArgs;
use settings::{Settings, Storage};

/// Runs the server until a shutdown signal; `Ok` after an orderly shutdown.
pub fn run(args: &ServeArgs) -> anyhow::Result<()> {
    let settings = settings::resolve(args)?;
    // Bind before the (possibly long) store open, so a taken port fails at once.
    let listener = std::net::TcpListener::bind(settings.serve.listen)
        .with_context(|| format!("listening on {}", settings.serve.listen))?;
    listener.set_nonblocking(true)?;
    // The bound address on stdout (also with `--listen 127.0.0.1:0`), for scripts and the bench.
    println!("listening on http://{}", listener.local_addr()?);
    let opened = match &settings.storage {
        Storage::Data(dir) => Opened::Store(Arc::new(open_store(dir, &settings)?)),
        #[cfg(feature = "postgres")]
        Storage::Postgres { url, table, partitions, pool_size } => {
            let defaults = PgOptions::new(url.clone());
            Opened::Postgres(PgOptions {
                table: table.clone().unwrap_or_else(|| defaults.table.clone()),
                partitions: *partitions,
                pool_size: pool_size.unwrap_or(defaults.pool_size),
                max_value: settings.engine.max_value,
                ..defaults
            })
        }
    };
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all().thread_name("shardlite-http");
    if let Some(n) = settings.runtime.worker_threads {
        runtime.worker_threads(n);
    }
    runtime.build()?.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let backend: Arc<dyn Backend> = match opened {
            Opened::Store(store) => Arc::new(SqliteBackend::new(store)),
            #[cfg(feature = "postgres")]
            Opened::Postgres(options) => Arc::new(PgBackend::connect(options).await?),
        };
        shardlite_server::run(listener, backend, settings.server, shutdown_signal()).await?;
        anyhow::Ok(())
    })
}

/// What will serve the records: an open store, or what to connect to (inside the runtime).
enum Opened {
    Store(Arc<Store>),
    #[cfg(feature = "postgres")]
    Postgres(PgOptions),
}

/// Opens the data directory, creating it on first start. An existing directory keeps the
/// partitions, index mode and seed its manifest records; one of them given and different is
/// refused instead of guessed.
fn open_store(dir: &std::path::Path, settings: &Settings) -> anyhow::Result<Store> {
    Store::open_or_create(dir, settings.create, settings.engine.clone())
        .with_context(|| format!("opening {}", dir.display()))
}

/// Resolves on SIGTERM or Ctrl-C (SIGINT).
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::error!(%err, "cannot listen for Ctrl-C; only SIGTERM stops the server");
            std::future::pending::<()>().await;
        }
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(err) => {
                tracing::error!(%err, "cannot listen for SIGTERM; only Ctrl-C stops the server");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = ctrl_c => tracing::info!("Ctrl-C: shutting down"),
        () = term => tracing::info!("SIGTERM: shutting down"),
    }
}
