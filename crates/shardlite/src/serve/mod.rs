//! `shardlite serve`: resolve the settings, bind, open (or create) the data directory, run the
//! HTTP server on a tokio runtime until SIGTERM or Ctrl-C, and return once the store is closed.

mod settings;

use std::sync::Arc;

use anyhow::Context;
use shardlite_engine::{layout::Layout, Store};

pub use settings::ServeArgs;
use settings::Settings;

/// Runs the server until a shutdown signal; `Ok` after an orderly shutdown.
pub fn run(args: &ServeArgs) -> anyhow::Result<()> {
    let settings = settings::resolve(args)?;
    // Bind before the (possibly long) store open, so a taken port fails at once.
    let listener =
        std::net::TcpListener::bind(settings.listen).with_context(|| format!("listening on {}", settings.listen))?;
    listener.set_nonblocking(true)?;
    // The bound address on stdout (also with `--listen 127.0.0.1:0`), for scripts and the bench.
    println!("listening on http://{}", listener.local_addr()?);
    let store = Arc::new(open_store(&settings)?);
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all().thread_name("shardlite-http");
    if let Some(n) = settings.worker_threads {
        runtime.worker_threads(n);
    }
    runtime.build()?.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        shardlite_server::run(listener, store, settings.server, shutdown_signal()).await
    })?;
    Ok(())
}

/// Opens the data directory, creating it on first start. An existing directory keeps the
/// partitions, index mode and seed its manifest records unless the user gave one of them, in
/// which case the engine refuses a mismatch instead of guessing.
fn open_store(settings: &Settings) -> anyhow::Result<Store> {
    let dir = &settings.data;
    let exists = Layout::new(dir).manifest().exists();
    let store = if exists && !settings.fixed_given {
        Store::open_existing(dir, settings.engine.clone())
    } else {
        Store::open_or_create(dir, settings.engine.clone())
    };
    store.with_context(|| format!("opening {}", dir.display()))
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
