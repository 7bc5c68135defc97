//! `shardlite bench matrix`: for each configuration of [`CONFIGS`] (or those chosen),
//! `shardlite load` a fresh directory of its index mode, spawn a server with its settings, run
//! the workloads, stop it, remove the directory; then print one table ([`table`]) with a row per
//! configuration and connection count and a column per workload (docs/bench.md). With
//! `--with-postgres URL` or `--spawn-postgres` (a throwaway cluster), one more row
//! ([`postgres`]): `shardlite serve --backend` on a fresh table, loaded with the same records
//! through `POST /batch`, measured the same way.

mod configs;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod table;

use std::time::Duration;

use shardlite_engine::CreateOptions;

pub use configs::{find, Config, CONFIGS, POSTGRES, POSTGRES_STANDBY};

use crate::{
    measure::{new_report, runtime, spawned, write_html, Measure, Spawn},
    report::{Matrix, MatrixRow},
    workload::Workload,
};

/// Flags of `shardlite bench matrix`.
#[derive(Debug, clap::Args)]
pub struct MatrixArgs {
    /// Configurations, comma separated: rollback, wal, immediate, normal, mmap, no-group-commit,
    /// index-sqlite, index-none (inserts only).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "rollback,wal,immediate,normal,mmap,no-group-commit,index-sqlite,index-none"
    )]
    configs: Vec<String>,
    /// Workloads, comma separated: noop, select, update, insert, mix.
    #[arg(long, value_delimiter = ',', default_value = "select,update,insert,mix")]
    workloads: Vec<String>,
    /// Records loaded into each configuration's fresh directory.
    #[arg(long, default_value_t = 200_000)]
    records: u64,
    /// Partitions of each directory.
    #[arg(long, default_value_t = CreateOptions::DEFAULT_PARTITIONS)]
    partitions: u32,
    /// Connections; a list (`10,100`) runs every configuration at each (a table row each).
    #[arg(long, visible_alias = "connections", value_delimiter = ',', default_value = "64")]
    concurrency: Vec<usize>,
    /// PostgreSQL beside the configurations.
    #[cfg(feature = "postgres")]
    #[command(flatten)]
    postgres: postgres::PostgresArgs,
    /// Measured seconds per run.
    #[arg(long, default_value_t = Measure::default().duration.as_secs_f64())]
    duration: f64,
    /// Warm-up seconds before each run's measured window.
    #[arg(long, default_value_t = Measure::default().warmup.as_secs_f64())]
    warmup: f64,
    /// Threads of the generator.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Print the report as JSON (with a top-level `matrix`); the table goes to stderr.
    #[arg(long)]
    json: bool,
    /// Also write the report as a self-contained HTML page with charts to this file.
    #[arg(long)]
    html: Option<std::path::PathBuf>,
}

impl MatrixArgs {
    /// How every configuration is measured: these connections and durations, the rest as
    /// `shardlite bench` measures by default.
    fn measure(&self) -> Measure {
        Measure {
            concurrency: self.concurrency.clone(),
            warmup: Duration::from_secs_f64(self.warmup),
            duration: Duration::from_secs_f64(self.duration),
            ..Measure::default()
        }
    }
}

/// Runs `shardlite bench matrix`.
pub fn run(m: &MatrixArgs) -> anyhow::Result<()> {
    let configs: Vec<Config> =
        m.configs.iter().map(|c| find(c)).collect::<Result<_, _>>().map_err(anyhow::Error::msg)?;
    let workloads: Vec<Workload> =
        m.workloads.iter().map(|w| w.parse()).collect::<Result<_, _>>().map_err(anyhow::Error::msg)?;
    anyhow::ensure!(m.concurrency.iter().all(|&c| c > 0), "--concurrency must be positive");
    anyhow::ensure!(
        m.records > 0 || !workloads.iter().any(|w| w.reads_existing()),
        "{} read existing records: give --records > 0",
        m.workloads.join(",")
    );
    let measure = m.measure();
    // Started before anything is measured, stopped and removed when dropped (also on errors).
    #[cfg(feature = "postgres")]
    let postgres = m.postgres.prepare()?;
    let (runs, rows) = runtime(m.threads)?.block_on(async {
        let temp = tempfile::tempdir()?;
        let mut runs = Vec::new();
        let mut rows = Vec::new();
        for config in &configs {
            let chosen: Vec<Workload> =
                workloads.iter().copied().filter(|&w| !config.inserts_only || w == Workload::Insert).collect();
            let first = runs.len();
            if !chosen.is_empty() {
                let serve_args = config.serve_args();
                eprintln!("configuration {}: {}", config.label, serve_args.join(" "));
                let dir = temp.path().join(config.key);
                let spawn =
                    Spawn { dir: &dir, load: m.records, create: config.create(m.partitions), serve_args, cold: None };
                let suffix = format!(" [{}]", config.key);
                spawned(&measure, &spawn, &chosen, &suffix, &mut runs).await?;
                std::fs::remove_dir_all(&dir)?;
            }
            rows.push(MatrixRow::new(config, (first..runs.len()).collect()));
        }
        #[cfg(feature = "postgres")]
        if let Some(target) = &postgres {
            let first = runs.len();
            let serve_args = target.measure(&measure, m.records, m.partitions, &workloads, &mut runs).await?;
            rows.push(MatrixRow::postgres(target.name(), serve_args, (first..runs.len()).collect()));
        }
        anyhow::Ok((runs, rows))
    })?;
    #[cfg(feature = "postgres")]
    drop(postgres);
    let matrix = Matrix { workloads, concurrency: m.concurrency.clone(), configurations: rows };
    let mut report = new_report(m.threads, runs, None);
    let table = table::render_text(&report, &matrix);
    report.matrix = Some(matrix);
    if m.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        eprint!("{table}");
    } else {
        print!("{table}");
    }
    write_html(&report, m.html.as_deref())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        matrix: MatrixArgs,
    }

    pub(super) fn parse(argv: &[&str]) -> Result<MatrixArgs, clap::Error> {
        Cli::try_parse_from(["matrix"].iter().chain(argv)).map(|c| c.matrix)
    }

    #[test]
    fn every_configuration_is_measured_alike_at_serves_partition_count() {
        let m = parse(&[]).unwrap();
        assert_eq!((m.concurrency.as_slice(), m.partitions), (&[64][..], 256));
        assert_eq!(m.measure(), Measure::default());
        let m = parse(&["--connections", "4", "--duration", "2", "--partitions", "16"]).unwrap();
        assert_eq!(
            m.measure(),
            Measure { concurrency: vec![4], duration: Duration::from_secs(2), ..Measure::default() }
        );
        assert_eq!(m.partitions, 16);
    }
}
