//! Importing users' own records: all or nothing, through the bulk loader's path (grouped by
//! partition, one index merge per partition at the end, a durable checkpoint).
//!
//! ```text
//!  add(key, value, counter?) ──hash──> DIR/import.staging.tmp/pNNNN.run   (parse: DIR untouched)
//!  apply ── write import.toml, open DIR; --on-duplicate error: resolve it all first, read-only
//!        ── syncfs, rename .tmp -> DIR/import.staging, fsync DIR            (the commit point)
//!        ── per partition, per bucket of its share: one transaction, checkpoint; index merge
//!           (a partition that never held a record: built anew, crate::partition::fresh)
//!        ── syncfs, rename DIR/import.staging -> .tmp, fsync DIR, remove it (done)
//! ```
//!
//! Before the commit point an interruption leaves the directory's records as they were; after
//! it, each partition's `meta` says how far it got and [`resume`] applies the rest. A share is
//! applied a bucket at a time ([`bucket_bytes`]), so memory stays bounded. Duplicates, in input
//! order, are replaced (`last-wins`), kept (`keep`) or refused (`error`).

use std::{
    collections::HashMap,
    fs::{self, File},
    io::{BufWriter, Write},
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        Mutex,
    },
    time::Instant,
};

use rusqlite::Connection;
use serde::{Deserialize, Serialize};

pub use crate::import_runs::Origin;
use crate::{
    bulk::{bulk_config, open_manifest, parallel},
    dirlock::{DirLock, Shown},
    import_runs::{record_at, run_records, write_record, RunRecord, Runs},
    index::entry,
    layout::{self, Layout},
    manifest::Manifest,
    opening::{open_directory, Opened},
    partition::{
        fresh::{self, Build},
        recovery::{recover, Recovered},
        sql, wal,
    },
    Config, CreateOptions, Error, IndexMode, JournalMode, KeyHasher, Result, Synchronous, MAX_KEY_LEN,
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
    /// Threads that applied it ([`apply_threads`]).
    pub threads: usize,
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
    /// Sub-runs each partition's share was staged in (1, in plans written before sub-runs:
    /// `pNNNN.run` alone).
    #[serde(default = "one")]
    subruns: u32,
}

fn one() -> u32 {
    1
}

impl Plan {
    /// The runs the import was staged in.
    fn runs(&self, manifest: &Manifest) -> Runs {
        Runs::new(manifest.hasher(), self.subruns)
    }
}

/// The name of the `meta` row saying which import a partition has applied.
const IMPORT_ID: &str = "import_id";
/// The name of the `meta` row naming the import a partition has applied part of.
const IMPORT_PARTIAL: &str = "import_partial";
/// The name of the `meta` row counting the buckets of `import_partial` applied.
const IMPORT_BUCKETS: &str = "import_buckets";

/// An import being staged: records are hashed to their partitions and appended to run files;
/// nothing in the directory changes until [`Importer::apply`]. Dropped without `apply`, it
/// removes what it staged (and the directory, if it created it).
pub struct Importer {
    layout: Layout,
    config: Config,
    create: CreateOptions,
    /// Where each record is staged.
    staged: Runs,
    sources: Vec<Source>,
    /// The sub-runs' writers, partition-major.
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
        let staged = Runs::new(manifest.hasher(), Runs::subruns_for(manifest.partitions));
        let mut importer = Self {
            bucket_bytes,
            staged,
            runs: (0..manifest.partitions * staged.subruns()).map(|_| None).collect(),
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
        let (p, s) = self.staged.locate(key);
        let path = || self.staged.path(&self.layout.import_staging_tmp(), p, s);
        let run = match &mut self.runs[(p * self.staged.subruns() + s) as usize] {
            Some(run) => run,
            slot => {
                let file = File::create(path()).map_err(|e| Error::io(path(), &e))?;
                slot.insert(BufWriter::with_capacity(64 << 10, file))
            }
        };
        write_record(run, key, value, counter, origin).map_err(|e| Error::io(path(), &e))?;
        self.records += 1;
        Ok(())
    }

    /// Records staged so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Applies the staged records to the directory (creating it if new): all of them, or with
    /// `policy` `error` and a duplicate, none. `progress(done, total)` hears of each partition
    /// applied, in records, and says whether to go on: once it says no, the import stops after
    /// the partitions under way ([`Error::Stopped`]), pending until [`resume`]d.
    pub fn apply(mut self, policy: OnDuplicate, progress: &Progress<'_>) -> Result<ImportSummary> {
        let parse_seconds = self.started.elapsed().as_secs_f64();
        let tmp = self.layout.import_staging_tmp();
        let subruns = self.staged.subruns();
        for (q, run) in (0u32..).zip(self.runs.iter_mut()) {
            if let Some(mut run) = run.take() {
                let path = || self.staged.path(&tmp, q / subruns, q % subruns);
                run.flush().map_err(|e| Error::io(path(), &e))?;
            }
        }
        let plan = Plan {
            id: import_id(),
            policy,
            records: self.records,
            sources: std::mem::take(&mut self.sources),
            bucket_bytes: self.bucket_bytes,
            subruns,
        };
        let text = toml::to_string(&plan).map_err(|e| Error::Import(e.to_string()))?;
        layout::replace_file(&Layout::import_plan(&tmp), |f| f.write_all(text.as_bytes()))?;
        // The device writes the runs back while the directory opens (on one core, creating
        // its partitions if new); what the open writes is flushed after.
        let dir = self.layout.dir().to_owned();
        let flushing = std::thread::spawn(move || layout::sync_filesystem_of(&dir));
        self.lock = None; // open_directory takes it again
        let mut manifest = open_manifest(&self.layout, &self.create, &self.config)?;
        let opened = open_parts(&self.layout, &self.config, &mut manifest)?;
        let parts = &opened.parts;
        if policy == OnDuplicate::Error {
            // Every partition is checked, so the error names the first duplicate of the input.
            let found = Mutex::new(Vec::new());
            parallel(apply_threads(), parts.len(), |p| {
                let part = lock(&parts[p]);
                self.staged.for_each_bucket(&tmp, p as u32, plan.bucket_bytes, 0, |_, _, buf| {
                    if let Err(duplicate) = resolve(&buf, plan.policy, &mut lookup(&part, &manifest))? {
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
        // The runs, the plan and (in a new directory) the manifest and the partitions: all
        // durable before the rename makes them the import's.
        flushing.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
        layout::sync_filesystem_of(self.layout.dir())?;
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
pub fn resume(dir: &Path, config: &Config, progress: &Progress<'_>) -> Result<Option<ImportSummary>> {
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
    // A partition not in WAL mode (one this import creates, or left by one that did) stays in
    // rollback-journal mode: it is built anew, and so has no WAL to leave and nothing to sync
    // when the build begins (crate::partition::fresh).
    let rollback = Config { journal: JournalMode::Delete, ..bulk.clone() };
    let opened = open_directory(layout, &bulk, manifest, false, 1, |p, log| {
        let db = layout.db(p);
        let config = match wal::in_wal_mode(&db)? {
            true => &bulk,
            false => &rollback,
        };
        let conn = sql::open_writer(&db, config, created.index)?;
        let state = recover(&conn, layout, p, &bulk, &created, log)?;
        let (durable, lost) = (state.durable(), state.lost);
        Ok((Mutex::new(Part { id: p, conn, state, build: None }), durable, lost))
    })?;
    // As the bulk loader: nothing is shown while the import runs.
    opened.lock.opened(Shown::OnlyDurable)?;
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
    progress: &Progress<'_>,
) -> Result<ImportSummary> {
    let staging = layout.import_staging();
    let bulk = bulk_config(config);
    let parts = &opened.parts;
    // Plans from before buckets: the whole share in one transaction, as then.
    let bucket = match plan.bucket_bytes {
        0 => u64::MAX,
        bytes => bytes,
    };
    let runs = plan.runs(manifest);
    let total: u64 = (0..parts.len() as u32).map(|p| runs.share_bytes(&staging, p)).sum();
    let counts = Mutex::new(Counts::default());
    let (done, applied) = (AtomicU64::new(0), AtomicU64::new(0));
    parallel(apply_threads(), parts.len(), |p| {
        if !progress(done.load(Ordering::Relaxed), total) {
            return Err(Error::Stopped);
        }
        let mut part = lock(&parts[p]);
        let bytes = runs.share_bytes(&staging, p as u32);
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
    // One flush of the file system for every partition's database, rename and index, before
    // the import counts as done.
    layout::sync_filesystem_of(layout.dir())?;
    // Renamed back to the name of an uncommitted staging before it is removed: a kill during
    // the removal then leaves what the next import removes, never a staging without its plan
    // that would look pending.
    let done = layout.import_staging_tmp();
    fs::rename(&staging, &done).and_then(|()| layout::sync_dir(&done)).map_err(|e| Error::io(&staging, &e))?;
    remove_dir_if_present(&done)?;
    let Counts { inserted, updated, kept, buckets, rebuilt } = counts.into_inner().unwrap_or_else(|e| e.into_inner());
    Ok(ImportSummary {
        records: plan.records,
        inserted,
        updated,
        kept,
        partitions: applied.into_inner() as u32,
        rebuilt,
        buckets,
        threads: apply_threads(),
        ..ImportSummary::default()
    })
}

/// Hears `(done, total)` of an import's apply, in bytes of staged records, and says whether to go
/// on.
pub type Progress<'a> = dyn Fn(u64, u64) -> bool + Sync + 'a;

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
    let runs = plan.runs(manifest);
    let mut write = |part: &mut Part, ready: Ready| -> Result<()> {
        let (b, buckets) = (ready.bucket, ready.buckets);
        counts.add(&write_bucket(part, manifest, ready, plan, &mut entries)?);
        if b + 1 < buckets && part.build.is_none() {
            // Each bucket's pages leave the WAL before the next: it never holds the whole share.
            sql::checkpoint_truncate(&part.conn)?;
        }
        bucket_done(b + 1, buckets);
        Ok(())
    };
    if part.build.is_some() {
        // Nothing to look up in a partition built anew: each bucket is read and resolved on a
        // thread of its own while the one before it is written (handed over, not queued: two
        // buckets in memory at most). A share staged in sub-runs (few partitions) is cut into a
        // sub-run a bucket (or a few small ones), so that this overlaps and each bucket's map of
        // keys stays small enough for the processor's cache; the cut depends on the share
        // alone, so a resume cuts it alike.
        let bucket = bucket.min(runs.largest_subrun(&staging, part.id).max(1 << 20));
        let (ready, written) = std::sync::mpsc::sync_channel::<Ready>(0);
        std::thread::scope(|scope| {
            let (staging, id) = (&staging, part.id);
            let reader = scope.spawn(move || {
                runs.for_each_bucket(staging, id, bucket, applied, |b, buckets, buf| {
                    let resolved = Ready::resolve(buf, (b, buckets), plan, &mut |_| Ok(None))?;
                    ready.send(resolved).map_err(|_| Error::Import("the import stopped".to_owned()))
                })
            });
            let wrote = written.iter().try_for_each(|bucket| write(part, bucket));
            drop(written); // a reader still sending stops
            let read = reader.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            wrote.and(read)
        })?;
    } else {
        runs.for_each_bucket(&staging, part.id, bucket, applied, |b, buckets, buf| {
            let resolved = Ready::resolve(buf, (b, buckets), plan, &mut lookup(part, manifest))?;
            write(part, resolved)
        })?;
    }
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

/// Threads applying partitions: two per CPU the loader uses ([`crate::bulk::threads`]). Each
/// partition's apply waits on the disk (fsyncs of its files and its directory, file creations:
/// several per partition), and the other threads' inserts fill those waits.
pub fn apply_threads() -> usize {
    2 * crate::bulk::threads()
}

/// Bytes of a partition's share applied in one transaction at most: a quarter of the memory
/// budget (less what it sets aside for the process's mapped files) over the buckets held at
/// once (a bucket's records, its map of keys and its index entries; two for each applying
/// thread, one written while the next is read, and never more threads than partitions), at
/// least 1 MiB.
pub fn bucket_bytes(config: &Config, partitions: u32) -> Result<u64> {
    let plan = crate::memory::MemoryPlan::new(config, partitions)?;
    let budget = plan.budget - plan.mapped_files;
    let held = 2 * apply_threads().min(partitions as usize) as u64;
    Ok((budget / 4 / held).max(1 << 20))
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

/// The writes a bucket of a partition's share comes to: each key's final state.
struct Resolution {
    writes: Vec<KeyWrite>,
    counts: Counts,
}

/// A key the import writes: its final state.
struct KeyWrite {
    /// Its id if it was present before the import (an update), else `None` (an insert).
    present: Option<u32>,
    counter: u64,
    /// The offsets in the bucket's bytes of the record that first named the key and of the one
    /// that set its value.
    key_at: usize,
    value_at: usize,
    /// Where in the input the record that set it was (inserts get ids in this order).
    order: (u32, u64),
}

/// A bucket read and resolved, ready to be written.
struct Ready {
    bucket: u32,
    buckets: u32,
    buf: Vec<u8>,
    resolution: Resolution,
}

impl Ready {
    /// Resolves bucket `bucket` of `buckets` (its records `buf`) under the plan's policy, with
    /// `lookup` finding keys already in the partition; a duplicate under `error` refuses.
    fn resolve(buf: Vec<u8>, (bucket, buckets): (u32, u32), plan: &Plan, lookup: &mut Lookup<'_>) -> Result<Self> {
        let resolution = resolve(&buf, plan.policy, lookup)?.map_err(|d| d.error(&plan.sources))?;
        Ok(Self { bucket, buckets, buf, resolution })
    }
}

/// Finds a key in a partition: `(id, counter)` if present.
type Lookup<'a> = dyn FnMut(&[u8]) -> Result<Option<(u32, u64)>> + 'a;

/// [`find`] in `part`.
fn lookup<'p>(part: &'p Part, manifest: &'p Manifest) -> impl FnMut(&[u8]) -> Result<Option<(u32, u64)>> + 'p {
    let hasher = manifest.hasher();
    let mut candidates = Vec::new();
    move |key| find(part, manifest.index, &hasher, key, &mut candidates)
}

/// Writes a bucket of a partition's share in one transaction that also records how far the
/// partition got (the last bucket records the import's id); adds the index entries of the
/// records it inserts to `entries`.
fn write_bucket(
    part: &mut Part,
    manifest: &Manifest,
    ready: Ready,
    plan: &Plan,
    entries: &mut Vec<u64>,
) -> Result<Counts> {
    let Ready { bucket, buckets, buf, resolution: Resolution { writes, counts } } = ready;
    let done = bucket + 1;
    let hasher = manifest.hasher();
    let mut id = part.state.next_id;
    sql::begin(&part.conn, crate::TxMode::Immediate)?;
    let result = (|| {
        let mut insert = sql::Appender::new(&part.conn)?;
        for &KeyWrite { present, counter, key_at, value_at, .. } in &writes {
            let (key, value) = (record_at(&buf, key_at)?.0.key, record_at(&buf, value_at)?.0.value);
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
        insert.finish()?;
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

/// Decides, in input order, what each record of a bucket does under `policy` (`lookup` finds
/// the keys already in the partition); under `error`, the bucket's first duplicate instead.
fn resolve(
    buf: &[u8],
    policy: OnDuplicate,
    lookup: &mut Lookup<'_>,
) -> Result<std::result::Result<Resolution, Duplicate>> {
    /// A key's state as the input is read: where its key is, its present id and counter (0:
    /// absent), where its value is and where it was last set.
    struct Slot {
        key_at: usize,
        present: Option<u32>,
        counter: u64,
        write: Option<usize>,
        set_by: Option<Origin>,
    }
    // Slots in the order their keys first appear, found through a map of the keys to their
    // place: a small map, and writes that come out in input order unless a key is set again.
    // Keys are the user's, so the map's hash is seeded (foldhash's `RandomState`), and sized
    // for the whole bucket at once.
    let records = run_records(buf).count();
    let mut slots: Vec<Slot> = Vec::with_capacity(records);
    let mut places: HashMap<&[u8], u32, foldhash::fast::RandomState> =
        HashMap::with_capacity_and_hasher(records, foldhash::fast::RandomState::default());
    let mut counts = Counts::default();
    let mut duplicate: Option<Duplicate> = None;
    for record in run_records(buf) {
        let RunRecord { key, counter, origin, at, .. } = record?;
        let place = match places.entry(key) {
            std::collections::hash_map::Entry::Occupied(place) => *place.get() as usize,
            std::collections::hash_map::Entry::Vacant(vacant) => {
                let (present, counter) = match lookup(key)? {
                    Some((id, counter)) => (Some(id), counter),
                    None => (None, 0),
                };
                vacant.insert(slots.len() as u32);
                slots.push(Slot { key_at: at, present, counter, write: None, set_by: None });
                slots.len() - 1
            }
        };
        let slot = &mut slots[place];
        let exists = slot.counter > 0;
        match policy {
            OnDuplicate::Keep if exists => counts.kept += 1,
            OnDuplicate::Error if exists => {
                // Sub-runs grouped in one bucket are not in input order: the earliest counts.
                if duplicate.as_ref().is_none_or(|d| origin.order() < d.at.order()) {
                    duplicate = Some(Duplicate { at: origin, first: slot.set_by });
                }
            }
            _ => {
                slot.counter = match exists {
                    true => (slot.counter + 1).max(counter.unwrap_or(0)),
                    false => counter.unwrap_or(1),
                };
                if exists {
                    counts.updated += 1;
                }
                slot.write = Some(at);
                slot.set_by = Some(origin);
            }
        }
    }
    if let Some(duplicate) = duplicate {
        return Ok(Err(duplicate));
    }
    drop(places);
    let mut writes: Vec<_> = slots
        .into_iter()
        .filter_map(|slot| {
            Some(KeyWrite {
                present: slot.present,
                counter: slot.counter,
                key_at: slot.key_at,
                value_at: slot.write?,
                order: slot.set_by?.order(),
            })
        })
        .collect();
    // In input order already unless a key was set again or sub-runs were grouped.
    writes.sort_unstable_by_key(|w| w.order);
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

/// `NAME: line N` or `NAME: byte N`.
pub fn render(sources: &[Source], at: Origin) -> String {
    match sources.get(at.source as usize) {
        Some(Source { name, unit }) => format!("{name}: {unit} {}", at.position),
        None => format!("input {}: position {}", at.source, at.position),
    }
}

/// Removes a staging directory (files only) if present: its files from several threads (an
/// unlink frees the file's blocks, and one after another they took twice as long here).
fn remove_dir_if_present(dir: &PathBuf) -> Result<()> {
    let not_found = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    let files: Vec<PathBuf> = match fs::read_dir(dir) {
        Ok(entries) => entries.map(|e| e.map(|e| e.path())).collect::<std::io::Result<_>>(),
        Err(e) if not_found(&e) => return Ok(()),
        Err(e) => Err(e),
    }
    .map_err(|e| Error::io(dir, &e))?;
    parallel(apply_threads(), files.len(), |i| match fs::remove_file(&files[i]) {
        Err(e) if !not_found(&e) => Err(Error::io(&files[i], &e)),
        _ => Ok(()),
    })?;
    match fs::remove_dir_all(dir) {
        Err(e) if !not_found(&e) => Err(Error::io(dir, &e)),
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
