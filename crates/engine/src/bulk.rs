//! The offline bulk loader: appends records `i = start..end` of a deterministic data set to a
//! data directory at full machine speed, with no server running.
//!
//! Records are generated in chunks (by the caller's generator, on all cores), grouped by
//! partition, and appended by rowid in one transaction per partition and chunk with
//! `synchronous = off` (a crash of the loader loses at most uncommitted chunks; every committed
//! one is a consistent SQLite state). No index lookups: the keys of a data set are distinct by
//! construction. Each partition's compact index is written once at the end, in one sequential
//! merge of its old file, its recent tail and the new entries (sorted in RAM, 8 bytes each).
//! Finally each partition is checkpointed with `synchronous = full`, which makes the load durable.
//!
//! Each partition records in its `meta` table, in the same transaction as the data, the data
//! set it holds (`dataset_seed`, `dataset_key_size`, `dataset_value_size`) and how far it has
//! loaded it (`dataset_next`). So a load continues where the data set ends, and an interrupted
//! load resumes without duplicates: a partition skips the records it already has.

use std::{
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Mutex,
    },
    time::Instant,
};

use rusqlite::Connection;
use serde::Serialize;

use crate::{
    commitlog::Durable,
    dirlock::Shown,
    index::{entry, HashIndex},
    keyhash::KeyHasher,
    layout::Layout,
    manifest::Manifest,
    opening::{open_directory, Opened},
    partition::{
        recovery::{recover, PartitionLog, Recovered},
        sql,
    },
    Config, CreateOptions, Error, Result, Synchronous,
};

/// Which data set is loaded: records are `generate(i)` for `i` in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Dataset {
    /// Seed of the key space.
    pub seed: u64,
    /// Key length, bytes.
    pub key_size: usize,
    /// Value length, bytes.
    pub value_size: usize,
}

/// What a load did.
#[derive(Debug, Clone, Serialize)]
pub struct LoadSummary {
    /// The data set.
    pub dataset: Dataset,
    /// First record index loaded.
    pub start: u64,
    /// One past the last record index loaded.
    pub end: u64,
    /// Records appended by this run (fewer than `end - start` when resuming).
    pub appended: u64,
    /// Records in the directory afterwards.
    pub records: u64,
    /// Seconds spent appending.
    pub append_seconds: f64,
    /// Seconds spent writing indexes and checkpointing.
    pub finish_seconds: f64,
    /// Appended records per second, over the whole run.
    pub records_per_sec: f64,
    /// Threads that generated and committed ([`threads`]).
    pub threads: usize,
}

/// Fills `key` and `value` (cleared by the caller) with record `i`.
pub type Generator<'a> = dyn Fn(u64, &mut Vec<u8>, &mut Vec<u8>) + Sync + 'a;

/// What to load.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// The data set.
    pub dataset: Dataset,
    /// Records to add after those the directory already holds.
    pub count: u64,
    /// Records generated, grouped and committed at a time (RAM: ~`chunk` records).
    pub chunk: u64,
}

impl Plan {
    /// Adds `count` records of `dataset`, a million at a time.
    pub fn new(dataset: Dataset, count: u64) -> Self {
        Self { dataset, count, chunk: 1 << 20 }
    }
}
/// Threads generating and committing: one per CPU the process may use ([`crate::config::cpus`]).
pub fn threads() -> usize {
    crate::config::cpus()
}

/// One partition during a load.
struct Part {
    id: u32,
    conn: Connection,
    index: Option<HashIndex>,
    next_id: u64,
    records: u64,
    /// Records of the data set below this index are already here.
    loaded_to: u64,
    /// Index entries of the records appended, in id order.
    entries: Vec<u64>,
    /// How far into the commit log the database has applied (unchanged by loading).
    applied: u64,
    /// Recovery accepted a loss of durable commits.
    lost: bool,
}

/// Appends records `next..next + plan.count` of the plan's data set (where `next` is where the
/// data set held by `dir` ends; 0 for a new directory), creating the directory with `create` if
/// needed (an existing one created with other settings than those given is refused).
/// `progress(done, total)` hears of every committed chunk.
pub fn load(
    dir: &std::path::Path,
    create: &CreateOptions,
    config: &Config,
    plan: &Plan,
    generate: &Generator<'_>,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<LoadSummary> {
    let Plan { dataset, count, chunk } = *plan;
    let layout = Layout::new(dir);
    if layout.import_staging().exists() {
        return Err(Error::ImportPending { dir: dir.to_owned() });
    }
    let mut manifest = open_manifest(&layout, create, config)?;
    let hasher = manifest.hasher();
    let created = manifest.clone();
    let bulk = bulk_config(config);
    // The lock is declared before the partitions, so dropped after them: on success and on
    // failure alike. The loader writes no commit log (its own final checkpoint is durable).
    let Opened { lock, parts, .. } = open_directory(&layout, &bulk, &mut manifest, false, 1, |p, log| {
        let part = open_part(&layout, p, &bulk, &created, dataset, log)?;
        let (durable, lost) = (Durable { applied: part.applied, next_id: part.next_id }, part.lost);
        Ok((Mutex::new(part), durable, lost))
    })?;
    // The loader shows no record while it runs (the directory is its alone); what it leaves
    // unsynced, the next open after a crash syncs before anything is shown.
    lock.opened(Shown::OnlyDurable)?;
    let start = parts.iter().map(|p| p.lock().expect("fresh lock").loaded_to).min().unwrap_or(0);
    let end = start + count;
    let started = Instant::now();
    let appended = AtomicU64::new(0);
    let mut chunk_start = start;
    while chunk_start < end {
        let chunk_end = (chunk_start + chunk.max(1)).min(end);
        let chunk = generate_chunk(chunk_start..chunk_end, &hasher, generate, dataset);
        let n = commit_chunk(&parts, &chunk, chunk_end, dataset)?;
        appended.fetch_add(n, Ordering::Relaxed);
        progress(chunk_end - start, count);
        chunk_start = chunk_end;
    }
    let append_seconds = started.elapsed().as_secs_f64();
    let finishing = Instant::now();
    parallel(threads(), parts.len(), |p| finish_part(&mut parts[p].lock().unwrap_or_else(|e| e.into_inner())))?;
    let appended = appended.into_inner();
    let records = parts.iter().map(|p| p.lock().unwrap_or_else(|e| e.into_inner()).records).sum();
    Ok(LoadSummary {
        dataset,
        start,
        end,
        appended,
        records,
        append_seconds,
        finish_seconds: finishing.elapsed().as_secs_f64(),
        records_per_sec: appended as f64 / started.elapsed().as_secs_f64(),
        threads: threads(),
    })
}

/// `config` as a bulk writer runs it: no sync until each partition's final checkpoint, big
/// checkpoints and caches.
pub(crate) fn bulk_config(config: &Config) -> Config {
    Config { synchronous: Synchronous::Off, checkpoint_pages: 16_384, cache_size_kib: 16_384, ..config.clone() }
}

/// Checks the manifest against `create`, or creates it.
pub(crate) fn open_manifest(layout: &Layout, create: &CreateOptions, config: &Config) -> Result<Manifest> {
    create.validate()?;
    config.validate()?;
    if layout.exists() {
        let manifest = Manifest::read(&layout.manifest())?;
        manifest.check_matches(create, &layout.manifest())?;
        return Ok(manifest);
    }
    std::fs::create_dir_all(layout.dir()).map_err(|e| Error::io(layout.dir(), &e))?;
    let manifest = Manifest::new(create);
    manifest.write(&layout.manifest())?;
    Ok(manifest)
}

fn open_part(
    layout: &Layout,
    p: u32,
    config: &Config,
    manifest: &Manifest,
    dataset: Dataset,
    log: PartitionLog<'_>,
) -> Result<Part> {
    let conn = sql::open_writer(&layout.db(p), config, manifest.index)?;
    let loaded_to = check_dataset(&conn, dataset, &layout.db(p))?;
    let Recovered { next_id, records, index, applied, lost } = recover(&conn, layout, p, config, manifest, log)?;
    Ok(Part { id: p, conn, index, next_id, records, loaded_to, entries: Vec::new(), applied, lost })
}

/// How far this partition has loaded `dataset`; refuses a partition holding another data set.
fn check_dataset(conn: &Connection, dataset: Dataset, path: &std::path::Path) -> Result<u64> {
    let stored = (
        sql::meta_value(conn, "dataset_seed")?,
        sql::meta_value(conn, "dataset_key_size")?,
        sql::meta_value(conn, "dataset_value_size")?,
    );
    let wanted = (dataset.seed as i64, dataset.key_size as i64, dataset.value_size as i64);
    match stored {
        (None, _, _) => Ok(0),
        (Some(seed), Some(k), Some(v)) if (seed, k, v) == wanted => {
            Ok(sql::meta_value(conn, "dataset_next")?.unwrap_or(0) as u64)
        }
        (seed, k, v) => Err(Error::Config(format!(
            "{} holds the data set with seed {}, key size {}, value size {}; load that one, or use a new directory",
            path.display(),
            seed.unwrap_or_default() as u64,
            k.unwrap_or_default(),
            v.unwrap_or_default()
        ))),
    }
}

/// One thread's records of one partition in a chunk, in `i` order: `(i, fingerprint)` and the
/// fixed-size `key ‖ value` bytes of each, concatenated (one allocation, not one per record).
#[derive(Default)]
struct Share {
    records: Vec<(u64, u32)>,
    bytes: Vec<u8>,
}

/// A chunk's records: for each generating thread (in `i` order), each partition's share.
type Chunk = Vec<Vec<Share>>;

fn generate_chunk(
    range: std::ops::Range<u64>,
    hasher: &KeyHasher,
    generate: &Generator<'_>,
    dataset: Dataset,
) -> Chunk {
    let partitions = hasher.partitions() as usize;
    let len = range.end - range.start;
    let record_len = dataset.key_size + dataset.value_size;
    std::thread::scope(|s| {
        let threads = threads() as u64;
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let from = range.start + len * t / threads;
                let to = range.start + len * (t + 1) / threads;
                s.spawn(move || {
                    let expected = ((to - from) as usize / partitions) * 9 / 8 + 16;
                    let mut shares: Vec<Share> = (0..partitions)
                        .map(|_| Share {
                            records: Vec::with_capacity(expected),
                            bytes: Vec::with_capacity(expected * record_len),
                        })
                        .collect();
                    let (mut key, mut value) = (Vec::new(), Vec::new());
                    for i in from..to {
                        key.clear();
                        value.clear();
                        generate(i, &mut key, &mut value);
                        assert_eq!((key.len(), value.len()), (dataset.key_size, dataset.value_size), "record {i}");
                        let at = hasher.locate(&key);
                        let share = &mut shares[at.partition as usize];
                        share.records.push((i, at.fingerprint));
                        share.bytes.extend_from_slice(&key);
                        share.bytes.extend_from_slice(&value);
                    }
                    shares
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("generator thread panicked")).collect()
    })
}

/// Appends each partition's share of a chunk in one transaction; returns the records appended.
fn commit_chunk(parts: &[Mutex<Part>], chunk: &Chunk, chunk_end: u64, dataset: Dataset) -> Result<u64> {
    let appended = AtomicU64::new(0);
    parallel(threads(), parts.len(), |p| {
        let mut part = parts[p].lock().unwrap_or_else(|e| e.into_inner());
        let shares = chunk.iter().map(|thread| &thread[p]);
        let n = append(&mut part, shares, chunk_end, dataset)?;
        appended.fetch_add(n, Ordering::Relaxed);
        Ok(())
    })?;
    Ok(appended.into_inner())
}

fn append<'a>(
    part: &mut Part,
    shares: impl Iterator<Item = &'a Share>,
    chunk_end: u64,
    dataset: Dataset,
) -> Result<u64> {
    let Part { id: partition, conn, index, next_id, records: count, loaded_to, entries, .. } = part;
    let record_len = dataset.key_size + dataset.value_size;
    let mut id = *next_id;
    sql::begin(conn, crate::TxMode::Immediate)?;
    let result = (|| {
        let mut insert = sql::Appender::new(conn)?;
        for share in shares {
            for (n, (i, fp)) in share.records.iter().enumerate() {
                if *i < *loaded_to {
                    continue;
                }
                let id32 = u32::try_from(id).map_err(|_| Error::PartitionFull { partition: *partition })?;
                let record = &share.bytes[n * record_len..(n + 1) * record_len];
                let (key, value) = record.split_at(dataset.key_size);
                insert.append(id32, key, 1, value)?;
                if index.is_some() {
                    entries.push(entry(*fp, id32));
                }
                id += 1;
            }
        }
        insert.finish()?;
        let appended = id - *next_id;
        sql::write_meta(conn, id, *count + appended, None)?;
        sql::set_meta_value(conn, "dataset_seed", dataset.seed as i64)?;
        sql::set_meta_value(conn, "dataset_key_size", dataset.key_size as i64)?;
        sql::set_meta_value(conn, "dataset_value_size", dataset.value_size as i64)?;
        sql::set_meta_value(conn, "dataset_next", chunk_end.max(*loaded_to) as i64)?;
        sql::commit(conn)?;
        Ok(appended)
    })();
    match result {
        Ok(appended) => {
            *count += appended;
            *next_id = id;
            *loaded_to = chunk_end.max(*loaded_to);
            Ok(appended)
        }
        Err(e) => {
            sql::rollback(conn);
            let keep = entries.len() - (id - *next_id) as usize;
            entries.truncate(keep);
            Err(e)
        }
    }
}

/// Writes the partition's index in one sequential merge, then makes everything durable.
fn finish_part(part: &mut Part) -> Result<()> {
    if let Some(index) = &part.index {
        let mut entries = std::mem::take(&mut part.entries);
        entries.sort_unstable();
        index.bulk_merge(entries, part.next_id - 1)?;
    }
    sql::set_synchronous(&part.conn, Synchronous::Full)?;
    sql::checkpoint_truncate(&part.conn)
}

/// Runs `f(0..n)` on `threads` threads; the first error wins.
pub(crate) fn parallel(threads: usize, n: usize, f: impl Fn(usize) -> Result<()> + Sync) -> Result<()> {
    let next = AtomicUsize::new(0);
    let failure = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..threads.min(n) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n || failure.lock().map(|f| f.is_some()).unwrap_or(true) {
                    return;
                }
                if let Err(e) = f(i) {
                    failure.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e);
                }
            });
        }
    });
    failure.into_inner().unwrap_or_else(|e| e.into_inner()).map_or(Ok(()), Err)
}
