//! `shardlite import`: users' own records into a data directory, all or nothing, through the
//! engine's import (the bulk loader's path), with progress bars and a one-line JSON summary.

use std::{
    fs::File,
    io::{BufWriter, Write},
    ops::Range,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        mpsc, Arc,
    },
};

use anyhow::Context;
use shardlite_engine::{
    import::{self, ImportSummary, Importer, OnDuplicate, Origin, Source},
    Config, CreateOptions, Error, IndexMode,
};

use crate::{
    interrupt, progress,
    records::{
        self,
        read::{self, Bad},
        Encoding, Format,
    },
};

/// Flags of `shardlite import`.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// The data directory (created if missing).
    #[arg(long)]
    pub data: PathBuf,
    /// Input files (`-`: standard input); `.zst` and `.gz` are decompressed.
    #[arg(required_unless_present = "resume")]
    pub files: Vec<PathBuf>,
    /// Format of every input (default: the one each file's name says, else csv).
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Encoding of keys and values in csv, tsv and jsonl.
    #[arg(long, value_enum, default_value = "hex")]
    pub encoding: Encoding,
    /// A key already in the directory or earlier in the input: replace it (an update), keep
    /// what is there, or refuse the whole import.
    #[arg(long, value_enum, default_value = "last-wins")]
    pub on_duplicate: OnDuplicate,
    /// Skip up to this many bad records (listed in the reject file) instead of refusing.
    #[arg(long, default_value_t = 0)]
    pub max_errors: u64,
    /// Where skipped records are listed, one `FILE: line N: what` line each.
    #[arg(long, default_value = "import-rejects.txt")]
    pub rejects: PathBuf,
    /// Finish an interrupted import of the directory instead.
    #[arg(long, conflicts_with = "files")]
    pub resume: bool,
    /// Partitions of a new directory (default 256; an existing one keeps its own).
    #[arg(long)]
    pub partitions: Option<u32>,
    /// Index mode of a new directory (default hash; an existing one keeps its own).
    #[arg(long)]
    pub index: Option<IndexMode>,
    /// Memory the import may use, MiB (default: as `serve`'s: a quarter of the RAM, or 7/8 of
    /// a container's smaller limit): a partition's share is applied in buckets of a quarter of it over
    /// the import's two threads.
    #[arg(long)]
    pub memory_budget_mib: Option<u64>,
    /// Print a one-line JSON summary instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `shardlite import`. Interrupted while it reads its input, it leaves the directory as it
/// was; once it applies (the import is committed), it stops after the partitions under way and
/// leaves the import pending, to be finished with `--resume`.
pub fn run(args: ImportArgs) -> anyhow::Result<()> {
    let applying = progress::bytes("applied", 0);
    let config = Config { memory_budget_mib: args.memory_budget_mib, ..Config::default() };
    let progress = |done: u64, total: u64| {
        applying.set_length(total);
        applying.set_position(done);
        interrupt::check().is_ok()
    };
    let dir = args.data.display();
    let resume = format!("the import is pending: finish it with `shardlite import --data {dir} --resume`");
    let summary = if args.resume {
        interrupt::note(&resume);
        import::resume(&args.data, &config, &progress)
            .map_err(|e| stopped(e, &resume))?
            .with_context(|| format!("no interrupted import is pending in {dir}"))?
    } else {
        let create = CreateOptions { partitions: args.partitions, index: args.index, ..CreateOptions::default() };
        let mut importer =
            Importer::begin(&args.data, &create, &config).with_context(|| format!("importing into {dir}"))?;
        interrupt::note(format!("{dir} may hold an unfinished import: run the import again, or with --resume"));
        stage(&args, &mut importer).map_err(|e| match interrupt::caused(&e) {
            true => e.context(format!(
                "the import stopped while reading its input: nothing was imported, {dir} is as it was"
            )),
            false => e,
        })?;
        interrupt::note(&resume);
        importer
            .apply(args.on_duplicate, &progress)
            .map_err(|e| stopped(e, &resume))
            .with_context(|| format!("importing into {dir}"))?
    };
    applying.finish_and_clear();
    report(&args, &summary)
}

/// The engine's error, or (once it stopped as asked) the interruption, saying what is left.
fn stopped(err: Error, resume: &str) -> anyhow::Error {
    match err {
        Error::Stopped => anyhow::Error::new(interrupt::Interrupted).context(format!("the import stopped: {resume}")),
        err => err.into(),
    }
}

/// Reads every input into the importer; refuses at the first bad record past `--max-errors`.
/// Each input is parsed on a thread of its own while this one stages what it parsed (hashing
/// keys to partitions and appending to their runs), in input order.
fn stage(args: &ImportArgs, importer: &mut Importer) -> anyhow::Result<()> {
    let total: u64 = args.files.iter().filter_map(|f| std::fs::metadata(f).ok()).map(|m| m.len()).sum();
    let raw = Arc::new(AtomicU64::new(0));
    let reading = progress::bytes("read", total);
    let mut rejects = Rejects { path: &args.rejects, file: None, count: 0, max: args.max_errors };
    for path in &args.files {
        let format = Format::choose(args.format, path);
        let source =
            importer.add_source(Source { name: path.display().to_string(), unit: read::unit(format).to_owned() });
        let (batches, parsed) = mpsc::sync_channel::<Batch>(PARSED_AHEAD);
        let staged = std::thread::scope(|scope| {
            let parser = scope.spawn(|| parse(path, format, args.encoding, Arc::clone(&raw), batches));
            let staged = parsed.iter().try_for_each(|batch| {
                interrupt::check()?;
                batch.items.iter().try_for_each(|item| {
                    stage_one(importer, &mut rejects, &batch.bytes, item, source)?;
                    if importer.records().is_multiple_of(65_536) {
                        reading.set_position(raw.load(Ordering::Relaxed));
                    }
                    Ok::<_, anyhow::Error>(())
                })
            });
            drop(parsed); // a parser still sending stops
            let read = parser.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            staged.and(read)
        });
        staged.with_context(|| format!("reading {}", path.display()))?;
    }
    reading.finish_and_clear();
    rejects.finish()
}

/// Batches of parsed records queued between the parser and the stager.
const PARSED_AHEAD: usize = 8;
/// Records in a batch.
const BATCH_RECORDS: usize = 4096;

/// Parsed records, their keys and values in one buffer.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    items: Vec<Item>,
}

/// A parsed record (its key and value as ranges of its batch's bytes), or a bad one.
enum Item {
    Record { key: Range<usize>, value: Range<usize>, counter: Option<u64>, position: u64 },
    Bad(Bad),
}

/// Parses the input at `path`, sending its records in batches, in order.
fn parse(
    path: &Path,
    format: Format,
    encoding: Encoding,
    raw: Arc<AtomicU64>,
    batches: mpsc::SyncSender<Batch>,
) -> anyhow::Result<()> {
    let mut input = records::open_input(path, raw)?;
    let mut batch = Batch::default();
    let stopped = || anyhow::anyhow!("the import stopped");
    read::read(format, encoding, &mut input, &mut |parsed| {
        batch.items.push(match parsed {
            Ok(r) => {
                let key = batch.bytes.len()..batch.bytes.len() + r.key.len();
                batch.bytes.extend_from_slice(r.key);
                let value = key.end..key.end + r.value.len();
                batch.bytes.extend_from_slice(r.value);
                Item::Record { key, value, counter: r.counter, position: r.position }
            }
            Err(bad) => Item::Bad(bad),
        });
        if batch.items.len() == BATCH_RECORDS {
            batches.send(std::mem::take(&mut batch)).map_err(|_| stopped())?;
        }
        Ok(())
    })?;
    batches.send(batch).map_err(|_| stopped())
}

/// Stages one parsed record, or lists a bad one in the rejects.
fn stage_one(
    importer: &mut Importer,
    rejects: &mut Rejects<'_>,
    bytes: &[u8],
    item: &Item,
    source: u32,
) -> anyhow::Result<()> {
    let (position, what) = match item {
        Item::Record { key, value, counter, position } => {
            let at = Origin { source, position: *position };
            match importer.add(&bytes[key.clone()], &bytes[value.clone()], *counter, at) {
                Ok(()) => return Ok(()),
                Err(e @ (Error::InvalidKey { .. } | Error::ValueTooLarge { .. } | Error::Import(_))) => {
                    (*position, e.to_string())
                }
                Err(e) => return Err(e.into()),
            }
        }
        Item::Bad(bad) => (bad.position, bad.what.clone()),
    };
    rejects.add(&importer.locate(Origin { source, position }), &what)
}

/// The bad records skipped so far, and the file listing them.
struct Rejects<'a> {
    path: &'a Path,
    file: Option<BufWriter<File>>,
    count: u64,
    max: u64,
}

impl Rejects<'_> {
    /// Lists a bad record, or refuses the import if it is one too many.
    fn add(&mut self, at: &str, what: &str) -> anyhow::Result<()> {
        self.count += 1;
        anyhow::ensure!(
            self.count <= self.max,
            "{at}: {what}{}",
            if self.max > 0 { format!(" (bad record {} of at most {})", self.count, self.max) } else { String::new() }
        );
        let file = match &mut self.file {
            Some(file) => file,
            slot => slot.insert(BufWriter::new(
                File::create(self.path).with_context(|| format!("creating {}", self.path.display()))?,
            )),
        };
        writeln!(file, "{at}: {what}")?;
        Ok(())
    }

    fn finish(self) -> anyhow::Result<()> {
        if let Some(mut file) = self.file {
            file.flush()?;
            eprintln!("skipped {} bad records, listed in {}", self.count, self.path.display());
        }
        Ok(())
    }
}

fn report(args: &ImportArgs, summary: &ImportSummary) -> anyhow::Result<()> {
    if args.json {
        println!("{}", serde_json::to_string(summary)?);
    } else {
        println!(
            "imported {} records into {}: {} inserted, {} updated, {} kept; {:.0} records/s \
             ({:.1} s reading, {:.1} s applying to {} partitions)",
            summary.records,
            args.data.display(),
            summary.inserted,
            summary.updated,
            summary.kept,
            summary.records_per_sec,
            summary.parse_seconds,
            summary.apply_seconds,
            summary.partitions
        );
    }
    Ok(())
}
