//! `pg-cluster`: a throwaway PostgreSQL cluster for the PostgreSQL backend's tests
//! (`shardlite_postgres::Cluster` with its test settings), as `.ci/postgres` runs it.
//!
//! ```text
//! pg-cluster start      starts one; prints two lines: its directory, then its URL
//!                       (postgres://shardlite@127.0.0.1:PORT/postgres, trust auth, loopback only)
//! pg-cluster stop DIR   stops the cluster in DIR and removes DIR
//! ```

use std::path::Path;

use shardlite_postgres::{cluster::TEST_SETTINGS, Cluster};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["start"] => {
            let cluster = Cluster::start(TEST_SETTINGS)?;
            let url = cluster.url.clone();
            println!("{}", cluster.keep().display());
            println!("{url}");
            Ok(())
        }
        ["stop", dir] => Cluster::stop_kept(Path::new(dir)),
        _ => anyhow::bail!("usage: pg-cluster start | stop DIR"),
    }
}
