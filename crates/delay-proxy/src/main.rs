//! `delay-proxy --delay-ms N LISTEN=TARGET...`: forwards each LISTEN address to its TARGET, every
//! byte delayed N ms each way ([`shardlite_delay_proxy::serve`]), until killed.

use std::{net::SocketAddr, time::Duration};

use anyhow::Context;
use clap::Parser;

/// A TCP proxy that delays every byte it forwards, each way.
#[derive(Parser)]
struct Args {
    /// Milliseconds each chunk waits before it is forwarded, in each direction.
    #[arg(long)]
    delay_ms: u64,
    /// The addresses to listen on and where to forward each: LISTEN=TARGET (both host:port).
    #[arg(required = true, value_parser = pair)]
    pairs: Vec<(SocketAddr, SocketAddr)>,
}

fn pair(text: &str) -> anyhow::Result<(SocketAddr, SocketAddr)> {
    let (listen, target) = text.split_once('=').context("LISTEN=TARGET")?;
    Ok((listen.parse().context("LISTEN: host:port")?, target.parse().context("TARGET: host:port")?))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let delay = Duration::from_millis(args.delay_ms);
    let mut proxies = tokio::task::JoinSet::new();
    for (listen, target) in args.pairs {
        let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("listening on {listen}"))?;
        proxies.spawn(shardlite_delay_proxy::serve(listener, target, delay));
    }
    while let Some(ended) = proxies.join_next().await {
        ended??;
    }
    Ok(())
}
