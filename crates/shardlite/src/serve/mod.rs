//! `shardlite serve`: resolve the settings, bind, serve at once (`/healthz` live, `/readyz`
//! "opening") while the data directory opens (or is created) — or PostgreSQL is connected
//! (`--backend postgres://...`) — then serve the storage on a tokio runtime until SIGTERM or
//! Ctrl-C (re-reading the token file at SIGHUP), and return once the backend
//! is closed. With `--cluster`, the cluster map is read from etcd first (the data directory
//! must match it), and the node registers as alive once it serves (`crate::cluster::node`).

mod settings;

use std::sync::Arc;

use anyhow::Context;
use shardlite_engine::{Config, CreateOptions, Store};
#[cfg(feature = "postgres")]
use shardlite_postgres::{PgBackend, PgOptions};
use shardlite_server::{Backend, Reload, SqliteBackend, Starting};
use tokio::sync::Notify;

pub use settings::ServeArgs;
use settings::{Settings, Storage};

use crate::{cluster, logging};

/// Runs the server until a shutdown signal; `Ok` after an orderly shutdown.
pub fn run(args: &ServeArgs) -> anyhow::Result<()> {
    let settings = settings::resolve(args)?;
    let _logs = logging::init("info", settings.log.log_format, settings.log.access_log.as_deref())?;
    tracing::info!(version = env!("CARGO_PKG_VERSION"), "shardlite serve starting");
    if settings.token_on_command_line {
        tracing::warn!(
            "--auth-token on the command line is visible to every user of the machine (ps); \
             prefer --auth-token-file or SHARDLITE_AUTH_TOKEN"
        );
    }
    // Bind before the (possibly long) store open, so a taken port fails at once.
    let listener = std::net::TcpListener::bind(settings.serve.listen)
        .with_context(|| format!("listening on {}", settings.serve.listen))?;
    listener.set_nonblocking(true)?;
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all().thread_name("shardlite-http");
    if let Some(n) = settings.runtime.worker_threads {
        runtime.worker_threads(n);
    }
    runtime.build()?.block_on(serve(listener, settings))
}

/// Serves at once (`/healthz` answers, `/readyz` says "opening", storage requests 503) while
/// the storage opens, then the storage; until a shutdown signal, or until opening failed.
async fn serve(listener: std::net::TcpListener, mut settings: Settings) -> anyhow::Result<()> {
    let addr = listener.local_addr()?;
    let joined = match &settings.cluster {
        Some(node) => {
            let joined = cluster::node::join(node).await?;
            settings.create = joined.create_options(&settings.create)?;
            Some(joined)
        }
        None => None,
    };
    let cluster = joined.as_ref().map(|j| Arc::clone(&j.cluster));
    let scheme = if settings.server.tls_cert.is_some() { "https" } else { "http" };
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let starting = Starting::new(settings.engine.max_value);
    let (reload, failed) = (Reload::default(), Arc::new(Notify::new()));
    tokio::spawn(reload_on_hangup(reload.clone()));
    let stop = {
        let failed = Arc::clone(&failed);
        async move {
            tokio::select! {
                () = shutdown_signal() => {}
                () = failed.notified() => {}
            }
        }
    };
    let backend = Arc::clone(&starting) as Arc<dyn Backend>;
    let mut server = tokio::spawn(shardlite_server::run_reloading(
        listener,
        backend,
        settings.server.clone(),
        reload,
        cluster,
        stop,
    ));
    let opening = open(&settings);
    tokio::pin!(opening);
    let mut membership = None;
    tokio::select! {
        opened = &mut opening => match opened {
            Ok(backend) => {
                if let Some(joined) = &joined {
                    let policy = joined.replication();
                    match shardlite_server::replicate(&backend, &joined.cluster, &settings.server, policy) {
                        Ok(true) => {}
                        Ok(false) => shardlite_server::replicate_once_copied(
                            Arc::clone(&backend),
                            Arc::clone(&joined.cluster),
                            settings.server.clone(),
                            policy,
                        ),
                        Err(why) => {
                            failed.notify_one();
                            server.await??;
                            backend.close().await;
                            return Err(anyhow::anyhow!(why));
                        }
                    }
                }
                starting.ready(backend);
                if let Some(joined) = joined {
                    match joined.register(format!("{scheme}://{addr}")).await {
                        Ok(member) => membership = Some(member),
                        Err(err) => {
                            failed.notify_one();
                            server.await??;
                            return Err(err);
                        }
                    }
                }
                // The bound address on stdout (also with `--listen 127.0.0.1:0`), for scripts
                // and the bench: once the storage is open and requests are served.
                println!("listening on {scheme}://{addr}");
                tracing::info!(%addr, "ready: the storage is open");
            }
            Err(err) => {
                failed.notify_one();
                server.await??;
                return Err(match &settings.cluster {
                    Some(_) => err.context(format!(
                        "a node's data directory must have the cluster map's partitions = {} and hash_seed = {}",
                        settings.create.partitions.unwrap_or_default(),
                        settings.create.hash_seed.unwrap_or_default()
                    )),
                    None => err,
                });
            }
        },
        served = &mut server => {
            // Shut down before the storage was open: let it open, then close it in order.
            if let Ok(backend) = opening.await {
                backend.close().await;
            }
            return Ok(served??);
        }
    }
    server.await??;
    if let Some(member) = membership {
        member.leave().await;
    }
    Ok(())
}

/// Opens the storage: the data directory (created on first start), on a blocking thread, or a
/// pool of PostgreSQL connections.
async fn open(settings: &Settings) -> anyhow::Result<Arc<dyn Backend>> {
    match &settings.storage {
        Storage::Data(dir) => {
            let (dir, create, engine) = (dir.clone(), settings.create, settings.engine.clone());
            let store = tokio::task::spawn_blocking(move || open_store(&dir, create, engine)).await??;
            Ok(Arc::new(SqliteBackend::new(Arc::new(store))))
        }
        #[cfg(feature = "postgres")]
        Storage::Postgres { url, table, partitions, pool_size } => {
            let defaults = PgOptions::new(url.clone());
            let options = PgOptions {
                table: table.clone().unwrap_or_else(|| defaults.table.clone()),
                partitions: *partitions,
                pool_size: pool_size.unwrap_or(defaults.pool_size),
                max_value: settings.engine.max_value,
                ..defaults
            };
            Ok(Arc::new(PgBackend::connect(options).await?))
        }
    }
}

/// Opens the data directory, creating it on first start. An existing directory keeps the
/// partitions, index mode and seed its manifest records; one of them given and different is
/// refused instead of guessed.
fn open_store(dir: &std::path::Path, create: CreateOptions, engine: Config) -> anyhow::Result<Store> {
    Store::open_or_create(dir, create, engine).with_context(|| format!("opening {}", dir.display()))
}

/// Asks the server to re-read its token file at every SIGHUP.
async fn reload_on_hangup(reload: Reload) {
    let mut hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(hangup) => hangup,
        Err(err) => return tracing::error!(%err, "cannot listen for SIGHUP; the token file is read only at start"),
    };
    while hangup.recv().await.is_some() {
        tracing::info!("SIGHUP: reloading");
        reload.request();
    }
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
