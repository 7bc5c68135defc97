//! `shardlite restore --from-litestream CONFIG --data NEWDIR [--timestamp T]`: a data
//! directory from Litestream's replicas.
//!
//! 1. CONFIG (written by `shardlite litestream-config`) gives the manifest (checksum verified)
//!    and every partition's database path and replica; NEWDIR must be empty or new.
//! 2. `litestream restore` for every partition into `NEWDIR/pNNNN.db` (at T if given), a few at
//!    a time. Any failure (a replica with no backup, Litestream missing) names the partition and
//!    removes what was restored, leaving NEWDIR as empty as it was found.
//! 3. The manifest, at a new epoch: versions (`ETag`s) shown by the lost directory after the
//!    replica's last transaction must never be shown again for other values, and a new epoch is
//!    later than any the lost directory could have reached (docs/design.md, "Versions").
//! 4. Open the directory, write every partition's index (the replicas hold databases only) and
//!    run the check: the directory `serve` then opens is one `check` passes.

use std::{
    path::Path,
    sync::{
        atomic::{AtomicBool, AtomicU32, Ordering},
        Mutex,
    },
    time::Instant,
};

use anyhow::{ensure, Context};
use indicatif::{ProgressBar, ProgressStyle};
use shardlite_engine::{layout::Layout, Config, Store};

use crate::litestream::{config, text, Litestream};

/// `litestream restore` processes run at once (each mostly waits on reads and writes).
const PARALLEL_RESTORES: usize = 4;

/// Runs the restore of `config`'s replicas into `data`, at `timestamp` if given, with the
/// Litestream binary `bin`.
pub fn run(config_path: &Path, data: &Path, timestamp: Option<&str>, bin: &Path) -> anyhow::Result<()> {
    let replicated = config::read(config_path)?;
    let (litestream, version) = Litestream::find(bin)?;
    ensure_empty(data)?;
    let started = Instant::now();
    let config_arg = config_path.to_string_lossy().into_owned();
    if let Err(err) = restore_databases(&litestream, &config_arg, &replicated, data, timestamp) {
        remove_contents(data);
        return Err(err);
    }
    let restored = started.elapsed();

    let mut manifest = replicated.manifest.clone();
    manifest.start_epoch();
    let layout = Layout::new(data);
    manifest.write(&layout.manifest())?;

    let indexing = Instant::now();
    let store = Store::open(data, Config::inspection()).with_context(|| format!("opening {}", data.display()))?;
    store.merge_indexes().context("writing the indexes")?;
    let indexed = indexing.elapsed();
    let checking = Instant::now();
    let reports = store.check().context("checking the restored directory")?;
    let records: u64 = reports.iter().map(|r| r.records).sum();
    drop(store);
    let bad: Vec<_> = reports.iter().filter(|r| !r.is_ok()).cloned().collect();
    eprint!("{}", crate::check::findings(&bad));
    ensure!(bad.is_empty(), "{} of {} restored partitions failed the check", bad.len(), reports.len());
    println!(
        "restored {} partitions, {records} records, from {} ({version}) into {} at epoch {}: \
         litestream restore {:.1} s, indexes {:.1} s, check {:.1} s",
        reports.len(),
        config_path.display(),
        data.display(),
        manifest.epoch,
        restored.as_secs_f64(),
        indexed.as_secs_f64(),
        checking.elapsed().as_secs_f64(),
    );
    Ok(())
}

/// Creates `data`, or accepts it if it is an empty directory.
fn ensure_empty(data: &Path) -> anyhow::Result<()> {
    match std::fs::read_dir(data) {
        Ok(mut entries) => {
            ensure!(entries.next().is_none(), "{} is not empty: restore into a new or empty directory", data.display());
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(data).with_context(|| format!("creating {}", data.display()))
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", data.display())),
    }
}

/// Removes what a failed restore left in `data` (empty when it began).
fn remove_contents(data: &Path) {
    for entry in std::fs::read_dir(data).into_iter().flatten().flatten() {
        let path = entry.path();
        let removed = if path.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
        if let Err(err) = removed {
            tracing::warn!(path = %path.display(), %err, "could not remove what the failed restore left");
        }
    }
}

/// `litestream restore` of every partition into `data`, [`PARALLEL_RESTORES`] at a time; the
/// first failure (in partition order) stops the rest.
fn restore_databases(
    litestream: &Litestream,
    config_arg: &str,
    replicated: &config::Replicated,
    data: &Path,
    timestamp: Option<&str>,
) -> anyhow::Result<()> {
    let layout = Layout::new(data);
    let partitions = replicated.partitions.len() as u32;
    let bar = ProgressBar::new(u64::from(partitions)).with_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} partitions restored, eta {eta}").expect("a valid template"),
    );
    let (next, failed, errors) = (AtomicU32::new(0), AtomicBool::new(false), Mutex::new(Vec::new()));
    std::thread::scope(|scope| {
        for _ in 0..PARALLEL_RESTORES.min(partitions as usize) {
            scope.spawn(|| loop {
                let p = next.fetch_add(1, Ordering::Relaxed);
                if p >= partitions || failed.load(Ordering::Relaxed) {
                    break;
                }
                let (db, replica) = &replicated.partitions[p as usize];
                let source = Source::Config { config: config_arg, db };
                match restore_one(litestream, &source, &layout.db(p), timestamp) {
                    Ok(_) => bar.inc(1),
                    Err(err) => {
                        failed.store(true, Ordering::Relaxed);
                        let err = err.context(format!("partition {p} (replica {replica})"));
                        errors.lock().unwrap_or_else(|e| e.into_inner()).push((p, err));
                    }
                }
            });
        }
    });
    bar.finish_and_clear();
    let mut errors = errors.into_inner().unwrap_or_else(|e| e.into_inner());
    errors.sort_by_key(|(p, _)| *p);
    errors.into_iter().next().map_or(Ok(()), |(_, err)| Err(err))
}

/// What one `litestream restore` restores.
enum Source<'a> {
    /// A database of a Litestream config, from the replica the config gives it.
    Config { config: &'a str, db: &'a Path },
    /// A replica named by its URL.
    Replica(&'a str),
}

/// Restores the replica at `url` (one partition's: `<replica>/pNNNN`) into the new file `out`:
/// the replica's last transaction id restored.
pub fn restore_replica(litestream: &Litestream, url: &str, out: &Path) -> anyhow::Result<String> {
    restore_one(litestream, &Source::Replica(url), out, None)
}

/// `litestream restore -json [-config CONFIG] -o OUT [-timestamp T] DB|URL`: the replica's
/// transaction id restored.
fn restore_one(
    litestream: &Litestream,
    source: &Source,
    out: &Path,
    timestamp: Option<&str>,
) -> anyhow::Result<String> {
    let mut args = vec!["restore".to_owned(), "-json".into(), "-o".into(), out.to_string_lossy().into_owned()];
    if let Some(t) = timestamp {
        args.extend(["-timestamp".into(), t.to_owned()]);
    }
    let named = match source {
        Source::Config { config, db } => {
            args.extend(["-config".into(), (*config).to_owned()]);
            db.to_string_lossy().into_owned()
        }
        Source::Replica(url) => (*url).to_owned(),
    };
    args.push(named.clone());
    let output = litestream.run(&args)?;
    let said = text(&output);
    if said.contains("no matching backup files available") {
        let when = timestamp.map_or(String::new(), |t| format!(" at or before {t}"));
        anyhow::bail!("the replica holds no backup of {named}{when} (Litestream: {said})");
    }
    ensure!(output.status.success(), "`litestream restore` failed: {said}");
    ensure!(out.exists(), "`litestream restore` wrote no {}: {said}", out.display());
    #[derive(serde::Deserialize)]
    struct Summary {
        txid: String,
    }
    let summary: Summary = serde_json::from_slice(&output.stdout)
        .with_context(|| format!("`litestream restore -json` printed no summary: {said}"))?;
    Ok(summary.txid)
}
