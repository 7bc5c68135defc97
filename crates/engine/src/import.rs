//! Importing users' own records: all or nothing, through the bulk loader's path (grouped by
//! partition, one index merge per partition at the end, a durable checkpoint).
//!
//! ```text
//!  add(key, value, counter?) ──hash──> DIR/import.staging.tmp/pNNNN.run   (parse: DIR untouched)
//!  apply ── fsync runs, write import.toml, open DIR (lock, recovery)
//!        ── --on-duplicate error: resolve every partition, read-only; a duplicate refuses all
//!        ── rename .tmp -> DIR/import.staging, fsync DIR                  (the commit point)
//!        ── per partition, on 2 threads, per bucket of its share: one transaction
//!           (records + meta progress), checkpoint; then index merge, checkpoint (full)
//!           (a partition that never held a record: every bucket into a new file without a
//!           WAL, renamed over pNNNN.db once whole: crate::partition::fresh)
//!        ── remove DIR/import.staging
//! ```
//!
//! A partition's share is applied a bucket at a time, so an import's memory stays bounded
//! whatever the share's size: a share bigger than [`bucket_bytes`] is split by a hash of the
//! key into buckets of about that size (every record of a key lands in the same bucket, so
//! duplicates are resolved within it), each applied in one transaction.
//!
//! Before the commit point an interruption leaves the directory's records as they were (a
//! leftover `.tmp` is removed by the next import). After it, each partition's `meta` says how far
//! it got: `import_id` once it holds all of its share, before that `import_partial` (the
//! import's id) and `import_buckets` (the buckets applied). [`resume`] applies the rest of the
//! staged import. Until then the directory opens and checks clean, holding part of the import.
//! A partition built anew has no progress of its own to record: it holds all of its share (the
//! rename happened) or none of it (a resume builds it again).
//!
//! Duplicates, in input order: a key already present (in the directory or earlier in the
//! input) is replaced (`last-wins`: an update, its counter `max(old + 1, given)`), kept
//! (`keep`), or refused (`error`). A new key gets the counter the input gives, else 1.
//! RAM: one bucket at a time per thread (a quarter of the memory budget over the threads).

use std::{
    collections::HashMap,
    fs::{self, File},
    io::{BufWriter, Read, Write},
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        Mutex,
    },
    time::Instant,
};

use rusqlite::Connection;
use serde::{Deserialize, Serialize};

use crate::{
    bulk::{bulk_config, open_manifest, parallel},
    dirlock::DirLock,
    index::entry,
    layout::{self, Layout},
    manifest::Manifest,
    opening::{open_directory, Opened},
    partition::{
        fresh::{self, Build},
        recovery::{recover, Recovered},
        sql,
    },
    Config, CreateOptions, Error, IndexMode, KeyHasher, Result, Synchronous, MAX_KEY_LEN,
};

/// What an import does with a key already present in the directory or earlier in the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum OnDuplicate {
    /// Replace it: an update, the counter becomes `max(old + 1, given)`.
    #[default]
    LastWins,
    /// Keep what is there; skip the record.
    Keep,
    /// Refuse the whole import.
    Error,
}

/// Where a record came from: an input and a position in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    /// The input, as numbered by [`Importer::add_source`].
    pub source: u32,
    /// The line (text formats) or byte offset (binary formats) of the record.
    pub position: u64,
}

/// What an import did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ImportSummary {
    /// Records read from the input and staged.
    pub records: u64,
    /// New keys written.
    pub inserted: u64,
    /// Records that replaced a present key's value.
    pub updated: u64,
    /// Records skipped because their key was present (`keep`).
    pub kept: u64,
    /// Partitions that applied the import in this run.
    pub partitions: u32,
    /// Of those, the ones that held no record before and were built anew in a new file (the
    /// fast path: no WAL, no checkpoint).
    pub rebuilt: u32,
    /// Transactions that applied it: a bucket of a partition's share each.
    pub buckets: u64,
    /// Seconds spent reading and staging the input.
    pub parse_seconds: f64,
    /// Seconds spent applying it (transactions, index merges, checkpoints).
    pub apply_seconds: f64,
    /// Records staged per second, over the whole run.
    pub records_per_sec: f64,
}

/// An input: its name and what its positions count (`line`, `byte`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    /// The file name, or `-` for standard input.
    pub name: String,
    /// What a position in it counts.
    pub unit: String,
}

/// The plan of a staged import (`import.toml`): what [`resume`] needs.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Plan {
    /// Written into each partition's `meta` as `import_id` with its share.
    id: i64,
    policy: OnDuplicate,
    records: u64,
    sources: Vec<Source>,
    /// [`bucket_bytes`] when the import was staged: a resumed import splits its runs into the
    /// same buckets, whatever its own memory budget (0, in plans written before buckets: one
    /// transaction a partition, which [`resume`] redoes whole).
    #[serde(default)]
    bucket_bytes: u64,
}

/// The name of the `meta` row saying which import a partition has applied.
const IMPORT_ID: &str = "import_id";
/// The name of the `meta` row naming the import a partition has applied part of.
const IMPORT_PARTIAL: &str = "import_partial";
/// The name of the `meta` row counting the buckets of `import_partial` applied.
const IMPORT_BUCKETS: &str = "import_buckets";
/// Bytes before a staged record's key: key length u16, value length u32, counter u64 (0:
/// none), source u32, position u64; all little-endian.
const RUN_HEADER: usize = 2 + 4 + 8 + 4 + 8;

/// An import being staged: records are hashed to their partitions and appended to run files;
/// nothing in the directory changes until [`Importer::apply`]. Dropped without `apply`, it
/// removes what it staged (and the directory, if it created it).
pub struct Importer {
    layout: Layout,
    config: Config,
    create: CreateOptions,
    hasher: KeyHasher,
    sources: Vec<Source>,
    runs: Vec<Option<BufWriter<File>>>,
    records: u64,
    /// [`bucket_bytes`] of this import.
    bucket_bytes: u64,
    created_dir: bool,
    committed: bool,
    started: Instant,
    /// Held while staging, so no server or other import starts meanwhile.
    lock: Option<DirLock>,
}

impl Importer {
    /// Starts an import into `dir`, created with `create` if it does not exist. Refused if an
    /// interrupted import is pending there ([`resume`] it first).
    pub fn begin(dir: &Path, create: &CreateOptions, config: &Config) -> Result<Self> {
        create.validate()?;
        config.validate()?;
        let layout = Layout::new(dir);
        let (manifest, created_dir) = if layout.exists() {
            let manifest = Manifest::read(&layout.manifest())?;
            manifest.check_matches(create, &layout.manifest())?;
            (manifest, false)
        } else {
            let created = !dir.exists();
            fs::create_dir_all(dir).map_err(|e| Error::io(dir, &e))?;
            (Manifest::new(create), created)
        };
        let bucket_bytes = bucket_bytes(config, manifest.partitions)?;
        let mut importer = Self {
            bucket_bytes,
            hasher: manifest.hasher(),
            runs: (0..manifest.partitions).map(|_| None).collect(),
            layout,
            config: config.clone(),
            create: *create,
            sources: Vec::new(),
            records: 0,
            created_dir,
            committed: false,
            started: Instant::now(),
            lock: None,
        };
        importer.lock = Some(DirLock::acquire(&importer.layout)?);
        let pending = importer.layout.import_staging();
        if pending.exists() {
            importer.committed = true; // not ours to remove
            return Err(Error::Import(format!(
                "an interrupted import is pending in {}: finish it with `shardlite import --data {} --resume`",
                pending.display(),
                dir.display()
            )));
        }
        let tmp = importer.layout.import_staging_tmp();
        remove_dir_if_present(&tmp)?;
        fs::create_dir(&tmp).map_err(|e| Error::io(&tmp, &e))?;
        Ok(importer)
    }

    /// Names an input; records from it carry the returned number in their [`Origin`].
    pub fn add_source(&mut self, source: Source) -> u32 {
        self.sources.push(source);
        (self.sources.len() - 1) as u32
    }

    /// `NAME: line N` (or `byte N`) of a record.
    pub fn locate(&self, at: Origin) -> String {
        render(&self.sources, at)
    }

    /// Whether a record could be imported: `Err` says what is wrong with it (a key length
    /// outside 1..=1024, a value over `max_value`, a counter of 0 or above 2^63 - 1).
    pub fn validate(&self, key: &[u8], value: &[u8], counter: Option<u64>) -> Result<()> {
        if key.is_empty() || key.len() > MAX_KEY_LEN {
            return Err(Error::InvalidKey { len: key.len(), max: MAX_KEY_LEN });
        }
        if value.len() > self.config.max_value {
            return Err(Error::ValueTooLarge { len: value.len(), max: self.config.max_value });
        }
        if counter.is_some_and(|c| c == 0 || c > i64::MAX as u64) {
            return Err(Error::Import(format!("counter {} is outside 1..=2^63-1", counter.unwrap_or_default())));
        }
        Ok(())
    }

    /// Stages one record (checked by [`Importer::validate`]).
    pub fn add(&mut self, key: &[u8], value: &[u8], counter: Option<u64>, origin: Origin) -> Result<()> {
        self.validate(key, value, counter)?;
        let p = self.hasher.locate(key).partition;
        let run = match &mut self.runs[p as usize] {
            Some(run) => run,
            slot => {
                let path = Layout::import_run(&self.layout.import_staging_tmp(), p);
                let file = File::create(&path).map_err(|e| Error::io(&path, &e))?;
                slot.insert(BufWriter::with_capacity(128 << 10, file))
            }
        };
        let mut header = [0u8; RUN_HEADER];
        header[0..2].copy_from_slice(&(key.len() as u16).to_le_bytes());
        header[2..6].copy_from_slice(&(value.len() as u32).to_le_bytes());
        header[6..14].copy_from_slice(&counter.unwrap_or(0).to_le_bytes());
        header[14..18].copy_from_slice(&origin.source.to_le_bytes());
        header[18..26].copy_from_slice(&origin.position.to_le_bytes());
        let written = run.write_all(&header).and_then(|()| run.write_all(key)).and_then(|()| run.write_all(value));
        written.map_err(|e| Error::io(Layout::import_run(&self.layout.import_staging_tmp(), p), &e))?;
        self.records += 1;
        Ok(())
    }

    /// Records staged so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Applies the staged records to the directory (creating it if new): all of them, or with
    /// `policy` `error` and a duplicate, none. `progress(done, total)` hears of each partition
    /// applied, in records.
    pub fn apply(mut self, policy: OnDuplicate, progress: &(dyn Fn(u64, u64) + Sync)) -> Result<ImportSummary> {
        let parse_seconds = self.started.elapsed().as_secs_f64();
        let tmp = self.layout.import_staging_tmp();
        for (p, run) in self.runs.iter_mut().enumerate() {
            if let Some(mut run) = run.take() {
                let path = Layout::import_run(&tmp, p as u32);
                let synced = run.flush().and_then(|()| run.get_ref().sync_all());
                synced.map_err(|e| Error::io(&path, &e))?;
            }
        }
        let plan = Plan {
            id: import_id(),
            policy,
            records: self.records,
            sources: std::mem::take(&mut self.sources),
            bucket_bytes: self.bucket_bytes,
        };
        let text = toml::to_string(&plan).map_err(|e| Error::Import(e.to_string()))?;
        layout::replace_file(&Layout::import_plan(&tmp), |f| f.write_all(text.as_bytes()))?;
        self.lock = None; // open_directory takes it again
        let mut manifest = open_manifest(&self.layout, &self.create, &self.config)?;
        let opened = open_parts(&self.layout, &self.config, &mut manifest)?;
        let parts = &opened.parts;
        if policy == OnDuplicate::Error {
            // Every partition is checked, so the error names the first duplicate of the input.
            let found = Mutex::new(Vec::new());
            parallel(parts.len(), |p| {
                let part = lock(&parts[p]);
                for_each_bucket(&tmp, p as u32, &manifest.hasher(), plan.bucket_bytes, 0, |_, _, buf| {
                    if let Err(duplicate) = resolve(&part, &manifest, buf, &plan)? {
                        found.lock().unwrap_or_else(|e| e.into_inner()).push(duplicate);
                    }
                    Ok(())
                })
            })?;
            let first = found.into_inner().unwrap_or_else(|e| e.into_inner()).into_iter().min_by_key(|d| d.at.order());
            if let Some(duplicate) = first {
                return Err(duplicate.error(&plan.sources));
            }
        }
        let staging = self.layout.import_staging();
        fs::rename(&tmp, &staging).and_then(|()| layout::sync_dir(&staging)).map_err(|e| Error::io(&staging, &e))?;
        self.committed = true;
        let started = Instant::now();
        let mut summary = apply_staged(&self.layout, &manifest, opened, &plan, &self.config, progress)?;
        summary.records = self.records;
        summary.parse_seconds = parse_seconds;
        summary.apply_seconds = started.elapsed().as_secs_f64();
        summary.records_per_sec = self.records as f64 / self.started.elapsed().as_secs_f64();
        Ok(summary)
    }
}

impl Drop for Importer {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        self.runs.clear();
        self.lock = None;
        let _ = fs::remove_dir_all(self.layout.import_staging_tmp());
        if self.created_dir {
            let _ = fs::remove_dir_all(self.layout.dir());
        }
    }
}

/// Finishes an interrupted import of `dir`: applies its staged records to every partition that
/// lacks them. `Ok(None)` if no import is pending.
pub fn resume(dir: &Path, config: &Config, progress: &(dyn Fn(u64, u64) + Sync)) -> Result<Option<ImportSummary>> {
    let layout = Layout::new(dir);
    let staging = layout.import_staging();
    if !staging.exists() {
        return Ok(None);
    }
    let path = Layout::import_plan(&staging);
    let text = fs::read_to_string(&path).map_err(|e| Error::io(&path, &e))?;
    let plan: Plan = toml::from_str(&text).map_err(|e| Error::Corrupt { path, what: e.to_string() })?;
    let mut manifest = Manifest::read(&layout.manifest())?;
    let started = Instant::now();
    let opened = open_parts(&layout, config, &mut manifest)?;
    let mut summary = apply_staged(&layout, &manifest, opened, &plan, config, progress)?;
    summary.apply_seconds = started.elapsed().as_secs_f64();
    Ok(Some(summary))
}

/// One partition during an import: its writer connection, and its id counter, record count
/// and index as recovery left them and the import moves them on.
struct Part {
    id: u32,
    conn: Connection,
    state: Recovered,
    /// While the partition is built anew ([`fresh`]): `conn` is the new file's.
    build: Option<Build>,
}

/// Opens every partition for the import, as the bulk loader does: no commit log, no sync
/// until each partition's final checkpoint.
fn open_parts(layout: &Layout, config: &Config, manifest: &mut Manifest) -> Result<Opened<Mutex<Part>>> {
    let bulk = bulk_config(config);
    let created = manifest.clone();
    let opened = open_directory(layout, &bulk, manifest, false, 1, |p, log| {
        let conn = sql::open_writer(&layout.db(p), &bulk, created.index)?;
        let state = recover(&conn, layout, p, &bulk, &created, log)?;
        let (applied, lost) = (state.applied, state.lost);
        Ok((Mutex::new(Part { id: p, conn, state, build: None }), applied, lost))
    })?;
    opened.lock.opened()?;
    Ok(opened)
}

/// Applies the staged import to each partition that has not yet, then removes the staging.
/// `progress(done, total)` hears of every bucket applied, in bytes of the staged runs.
fn apply_staged(
    layout: &Layout,
    manifest: &Manifest,
    opened: Opened<Mutex<Part>>,
    plan: &Plan,
    config: &Config,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<ImportSummary> {
    let staging = layout.import_staging();
    let bulk = bulk_config(config);
    let parts = &opened.parts;
    // Plans from before buckets: the whole share in one transaction, as then.
    let bucket = match plan.bucket_bytes {
        0 => u64::MAX,
        bytes => bytes,
    };
    let total: u64 = (0..parts.len() as u32).map(|p| run_bytes(&Layout::import_run(&staging, p))).sum();
    let counts = Mutex::new(Counts::default());
    let (done, applied) = (AtomicU64::new(0), AtomicU64::new(0));
    parallel(parts.len(), |p| {
        let mut part = lock(&parts[p]);
        let run = Layout::import_run(&staging, p as u32);
        let bytes = run_bytes(&run);
        if bytes > 0 && sql::meta_value(&part.conn, IMPORT_ID)? != Some(plan.id) {
            let share = apply_share(&mut part, layout, manifest, plan, bucket, &bulk, &|b, buckets| {
                progress(done.load(Ordering::Relaxed) + bytes * u64::from(b) / u64::from(buckets), total);
            })?;
            counts.lock().unwrap_or_else(|e| e.into_inner()).add(&share);
            applied.fetch_add(1, Ordering::Relaxed);
        }
        progress(done.fetch_add(bytes, Ordering::Relaxed) + bytes, total);
        Ok(())
    })?;
    drop(opened);
    remove_dir_if_present(&staging)?;
    layout::sync_dir(&staging).map_err(|e| Error::io(layout.dir(), &e))?;
    let Counts { inserted, updated, kept, buckets, rebuilt } = counts.into_inner().unwrap_or_else(|e| e.into_inner());
    Ok(ImportSummary {
        records: plan.records,
        inserted,
        updated,
        kept,
        partitions: applied.into_inner() as u32,
        rebuilt,
        buckets,
        ..ImportSummary::default()
    })
}

/// Applies the buckets of a partition's share it lacks, one transaction each, then merges its
/// index once and checkpoints durably. A partition that never held a record is built anew
/// instead ([`fresh`]): its buckets go into a new file, renamed into place once all are in.
/// `bucket_done(b, buckets)` hears of each bucket applied; `bulk` is the writer's settings.
fn apply_share(
    part: &mut Part,
    layout: &Layout,
    manifest: &Manifest,
    plan: &Plan,
    bucket: u64,
    bulk: &Config,
    bucket_done: &dyn Fn(u32, u32),
) -> Result<Counts> {
    let applied = match sql::meta_value(&part.conn, IMPORT_PARTIAL)? == Some(plan.id) {
        true => sql::meta_value(&part.conn, IMPORT_BUCKETS)?.unwrap_or(0) as u32,
        false => 0,
    };
    let staging = layout.import_staging();
    let mut counts = Counts::default();
    if applied == 0 && fresh::is_fresh(&part.state) {
        part.build = Some(Build::begin(&mut part.conn, (layout, part.id), &staging, bulk, manifest.index)?);
        counts.rebuilt = 1;
    }
    let mut entries = Vec::new();
    for_each_bucket(&staging, part.id, &manifest.hasher(), bucket, applied, |b, buckets, buf| {
        counts.add(&write_bucket(part, manifest, buf, plan, (b + 1, buckets), &mut entries)?);
        if b + 1 < buckets && part.build.is_none() {
            // Each bucket's pages leave the WAL before the next: it never holds the whole share.
            sql::checkpoint_truncate(&part.conn)?;
        }
        bucket_done(b + 1, buckets);
        Ok(())
    })?;
    if let Some(build) = part.build.take() {
        build.install(&mut part.conn, layout, bulk)?;
    }
    if let Some(index) = &part.state.index {
        entries.sort_unstable();
        index.bulk_merge(entries, part.state.next_id - 1)?;
    }
    sql::set_synchronous(&part.conn, Synchronous::Full)?;
    sql::checkpoint_truncate(&part.conn)?;
    Ok(counts)
}

/// Bytes of a partition's share applied in one transaction at most: a quarter of the memory
/// budget over the import's threads (a bucket's records, its map of keys and its index entries
/// are held at once), at least 1 MiB.
pub fn bucket_bytes(config: &Config, partitions: u32) -> Result<u64> {
    let budget = crate::memory::MemoryPlan::new(config, partitions)?.budget;
    Ok((budget / 4 / crate::bulk::THREADS as u64).max(1 << 20))
}

/// Calls `f(b, buckets, records)` with the staged records of partition `p`'s buckets from
/// `skip` on, in bucket order: the whole run as one bucket if it is at most `bucket` bytes,
/// else the run split by a hash of the key into buckets of about that size (scratch files in
/// `staging`, each removed once applied). Nothing if the partition got no records.
fn for_each_bucket(
    staging: &Path,
    p: u32,
    hasher: &KeyHasher,
    bucket: u64,
    skip: u32,
    mut f: impl FnMut(u32, u32, &[u8]) -> Result<()>,
) -> Result<()> {
    let run = Layout::import_run(staging, p);
    let bytes = run_bytes(&run);
    if bytes == 0 {
        return Ok(());
    }
    let buckets =
        u32::try_from(bytes.div_ceil(bucket)).map_err(|_| Error::Import("a staged run is too large".into()))?;
    if buckets == 1 {
        return f(0, 1, &read_run(&run)?);
    }
    split_run(&run, staging, p, hasher, buckets)?;
    for b in 0..buckets {
        let path = Layout::import_bucket(staging, p, b);
        if b >= skip {
            f(b, buckets, &read_run(&path)?)?;
        }
        fs::remove_file(&path).map_err(|e| Error::io(&path, &e))?;
    }
    Ok(())
}

/// Splits a run into `buckets` files by a hash of each record's key, in one sequential pass.
fn split_run(run: &Path, staging: &Path, p: u32, hasher: &KeyHasher, buckets: u32) -> Result<()> {
    let mut input = std::io::BufReader::with_capacity(1 << 20, File::open(run).map_err(|e| Error::io(run, &e))?);
    let mut outputs = (0..buckets)
        .map(|b| {
            let path = Layout::import_bucket(staging, p, b);
            File::create(&path).map(|f| BufWriter::with_capacity(256 << 10, f)).map_err(|e| Error::io(&path, &e))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut header = [0u8; RUN_HEADER];
    let mut body = Vec::new();
    loop {
        match input.read_exact(&mut header) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(Error::io(run, &e)),
        }
        let klen = u16::from_le_bytes([header[0], header[1]]) as usize;
        let vlen = u32::from_le_bytes([header[2], header[3], header[4], header[5]]) as usize;
        body.resize(klen + vlen, 0);
        input.read_exact(&mut body).map_err(|e| Error::io(run, &e))?;
        let b = hasher.locate(&body[..klen]).fingerprint % buckets;
        let out = &mut outputs[b as usize];
        out.write_all(&header).and_then(|()| out.write_all(&body)).map_err(|e| Error::io(run, &e))?;
    }
    for out in &mut outputs {
        out.flush().map_err(|e| Error::io(run, &e))?;
    }
    Ok(())
}

/// How a partition's share of the import changes it.
#[derive(Debug, Default)]
struct Counts {
    inserted: u64,
    updated: u64,
    kept: u64,
    buckets: u64,
    rebuilt: u32,
}

impl Counts {
    fn add(&mut self, other: &Counts) {
        self.inserted += other.inserted;
        self.updated += other.updated;
        self.kept += other.kept;
        self.buckets += other.buckets;
        self.rebuilt += other.rebuilt;
    }
}

/// The writes a partition's share comes to: each key's final state.
struct Resolution<'a> {
    writes: Vec<KeyWrite<'a>>,
    counts: Counts,
}

/// A key the import writes: its final state.
struct KeyWrite<'a> {
    /// Its id if it was present before the import (an update), else `None` (an insert).
    present: Option<u32>,
    counter: u64,
    key: &'a [u8],
    value: &'a [u8],
    /// The input order of the record that set it (inserts get ids in this order).
    order: usize,
}

/// A staged record.
struct RunRecord<'a> {
    key: &'a [u8],
    value: &'a [u8],
    counter: Option<u64>,
    origin: Origin,
}

/// Writes a bucket of a partition's share in one transaction that also records how far the
/// partition got (bucket `done` of `buckets`: the last one records the import's id); adds the
/// index entries of the records it inserts to `entries`.
fn write_bucket(
    part: &mut Part,
    manifest: &Manifest,
    buf: &[u8],
    plan: &Plan,
    (done, buckets): (u32, u32),
    entries: &mut Vec<u64>,
) -> Result<Counts> {
    let Resolution { mut writes, counts } = resolve(part, manifest, buf, plan)?.map_err(|d| d.error(&plan.sources))?;
    // In input order already unless a key was set again (then the sort has work to do).
    writes.sort_unstable_by_key(|w| w.order);
    let hasher = manifest.hasher();
    let mut id = part.state.next_id;
    sql::begin(&part.conn, crate::TxMode::Immediate)?;
    let result = (|| {
        let mut insert = sql::Appender::new(&part.conn)?;
        for &KeyWrite { present, counter, key, value, .. } in &writes {
            match present {
                Some(id) => sql::update(&part.conn, id, counter, value)?,
                None => {
                    let id32 = u32::try_from(id).map_err(|_| Error::PartitionFull { partition: part.id })?;
                    insert.append(id32, key, counter, value)?;
                    entries.push(entry(hasher.locate(key).fingerprint, id32));
                    id += 1;
                }
            }
        }
        sql::write_meta(&part.conn, id, part.state.records + counts.inserted, None)?;
        if done == buckets {
            sql::set_meta_value(&part.conn, IMPORT_ID, plan.id)?;
        } else {
            sql::set_meta_value(&part.conn, IMPORT_PARTIAL, plan.id)?;
            sql::set_meta_value(&part.conn, IMPORT_BUCKETS, i64::from(done))?;
        }
        sql::commit(&part.conn)
    })();
    if let Err(e) = result {
        sql::rollback(&part.conn);
        return Err(e);
    }
    part.state.next_id = id;
    part.state.records += counts.inserted;
    Ok(counts)
}

/// Decides, in input order, what each record of a partition's share does under the plan's
/// policy; under `error`, the partition's first duplicate instead.
fn resolve<'a>(
    part: &Part,
    manifest: &Manifest,
    buf: &'a [u8],
    plan: &Plan,
) -> Result<std::result::Result<Resolution<'a>, Duplicate>> {
    let hasher = manifest.hasher();
    /// A key's state as the input is read: the key, its present id and counter (0: absent),
    /// its value and where it was last set.
    struct Slot<'a> {
        key: &'a [u8],
        present: Option<u32>,
        counter: u64,
        write: Option<(&'a [u8], usize)>,
        set_by: Option<Origin>,
    }
    // Slots in the order their keys first appear, found through a map of the keys to their
    // place: a small map, and writes that come out in input order unless a key is set again.
    // Keys are the user's, so the map's hash is seeded (foldhash's `RandomState`), and sized
    // for the whole share at once.
    let records = run_records(buf).count();
    let mut slots: Vec<Slot<'a>> = Vec::with_capacity(records);
    let mut places: HashMap<&[u8], u32, foldhash::fast::RandomState> =
        HashMap::with_capacity_and_hasher(records, foldhash::fast::RandomState::default());
    let mut counts = Counts::default();
    let mut candidates = Vec::new();
    for (n, record) in run_records(buf).enumerate() {
        let RunRecord { key, value, counter, origin } = record?;
        let place = match places.entry(key) {
            std::collections::hash_map::Entry::Occupied(place) => *place.get() as usize,
            std::collections::hash_map::Entry::Vacant(vacant) => {
                let (present, counter) = match find(part, manifest.index, &hasher, key, &mut candidates)? {
                    Some((id, counter)) => (Some(id), counter),
                    None => (None, 0),
                };
                vacant.insert(slots.len() as u32);
                slots.push(Slot { key, present, counter, write: None, set_by: None });
                slots.len() - 1
            }
        };
        let slot = &mut slots[place];
        let exists = slot.counter > 0;
        match plan.policy {
            OnDuplicate::Keep if exists => counts.kept += 1,
            OnDuplicate::Error if exists => return Ok(Err(Duplicate { at: origin, first: slot.set_by })),
            _ => {
                slot.counter = match exists {
                    true => (slot.counter + 1).max(counter.unwrap_or(0)),
                    false => counter.unwrap_or(1),
                };
                if exists {
                    counts.updated += 1;
                }
                slot.write = Some((value, n));
                slot.set_by = Some(origin);
            }
        }
    }
    drop(places);
    let writes: Vec<_> = slots
        .into_iter()
        .filter_map(|slot| {
            slot.write.map(|(value, order)| KeyWrite {
                present: slot.present,
                counter: slot.counter,
                key: slot.key,
                value,
                order,
            })
        })
        .collect();
    counts.inserted = writes.iter().filter(|w| w.present.is_none()).count() as u64;
    counts.buckets = 1;
    Ok(Ok(Resolution { writes, counts }))
}

/// `(id, counter)` of the record with `key` in the partition, if there is one.
fn find(
    part: &Part,
    mode: IndexMode,
    hasher: &KeyHasher,
    key: &[u8],
    candidates: &mut Vec<u32>,
) -> Result<Option<(u32, u64)>> {
    // A partition built anew held no key before, and keys of other buckets of its share never
    // meet this one's (buckets split by key).
    if part.state.records == 0 || part.build.is_some() {
        return Ok(None);
    }
    match (mode, &part.state.index) {
        (IndexMode::Hash, Some(index)) => {
            index.candidates(hasher.locate(key).fingerprint, candidates)?;
            for &id in candidates.iter() {
                if let Some((found, counter)) = sql::key_counter_by_id(&part.conn, id)? {
                    if found == key {
                        return Ok(Some((id, counter)));
                    }
                }
            }
            Ok(None)
        }
        (IndexMode::Sqlite, _) => sql::id_counter_by_key(&part.conn, key),
        _ => Err(Error::Unsupported { operation: "import into a partition holding records" }),
    }
}

/// A key found again under `--on-duplicate error`.
struct Duplicate {
    at: Origin,
    /// Where the input set it first (`None`: it was in the directory before).
    first: Option<Origin>,
}

impl Duplicate {
    fn error(&self, sources: &[Source]) -> Error {
        let first = match self.first {
            Some(o) => format!("first at {}", render(sources, o)),
            None => "it is already in the directory".to_owned(),
        };
        Error::Import(format!("{}: duplicate key under --on-duplicate error ({first})", render(sources, self.at)))
    }
}

impl Origin {
    /// Its place in the whole input: by input, then position.
    fn order(self) -> (u32, u64) {
        (self.source, self.position)
    }
}

/// `NAME: line N` or `NAME: byte N`.
pub fn render(sources: &[Source], at: Origin) -> String {
    match sources.get(at.source as usize) {
        Some(Source { name, unit }) => format!("{name}: {unit} {}", at.position),
        None => format!("input {}: position {}", at.source, at.position),
    }
}

/// The staged records of a run file.
fn run_records(buf: &[u8]) -> impl Iterator<Item = Result<RunRecord<'_>>> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at == buf.len() {
            return None;
        }
        let header = buf.get(at..at + RUN_HEADER)?;
        let klen = u16::from_le_bytes([header[0], header[1]]) as usize;
        let vlen = u32::from_le_bytes(header[2..6].try_into().ok()?) as usize;
        let counter = u64::from_le_bytes(header[6..14].try_into().ok()?);
        let source = u32::from_le_bytes(header[14..18].try_into().ok()?);
        let position = u64::from_le_bytes(header[18..26].try_into().ok()?);
        let body = at + RUN_HEADER;
        let Some(key_value) = buf.get(body..body + klen + vlen) else {
            at = buf.len();
            return Some(Err(Error::Import("a staged run file is truncated".to_owned())));
        };
        at = body + klen + vlen;
        let (key, value) = key_value.split_at(klen);
        Some(Ok(RunRecord {
            key,
            value,
            counter: (counter > 0).then_some(counter),
            origin: Origin { source, position },
        }))
    })
}

/// A run file's size (0 if the partition got no records).
fn run_bytes(path: &Path) -> u64 {
    fs::metadata(path).map_or(0, |m| m.len())
}

/// A run file's bytes (empty if the partition got no records).
fn read_run(path: &Path) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    match File::open(path) {
        Ok(mut f) => f.read_to_end(&mut buf).map_err(|e| Error::io(path, &e))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(Error::io(path, &e)),
    };
    Ok(buf)
}

fn remove_dir_if_present(dir: &PathBuf) -> Result<()> {
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(dir, &e)),
        _ => Ok(()),
    }
}

/// A new import's id: the time in nanoseconds, mixed with the process id, positive.
fn import_id() -> i64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    ((nanos ^ (u64::from(std::process::id()) << 40)) >> 1) as i64
}

fn lock(part: &Mutex<Part>) -> std::sync::MutexGuard<'_, Part> {
    part.lock().unwrap_or_else(|e| e.into_inner())
}
