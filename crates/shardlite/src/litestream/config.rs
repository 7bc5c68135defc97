//! The Litestream configuration of a data directory, as `shardlite litestream-config` writes it
//! and `shardlite restore --from-litestream` reads it back.
//!
//! One entry per partition (`dbs:` in Litestream's YAML, each `pNNNN.db` by its absolute path)
//! with its own replica, `<replica URL>/pNNNN`: every partition is listed, so a restore knows
//! exactly which replicas must exist. Litestream replicates databases, not the directory's
//! manifest (partitions, hash seed, index mode), which a restore needs too; it is written
//! into the config file itself, checksum line included, as comment lines starting with
//! [`MANIFEST_PREFIX`] (Litestream reads past comments), so the one file an operator keeps to
//! restore holds all of it, and a damaged copy is refused.
//!
//! Settings are passed through as `KEY=VALUE` at three levels (the top of the file, each
//! database, each replica); a dotted key nests (`logging.level=debug`), a value is read as YAML
//! (`1s`, `1000`, `true`). Unless given, each database is watched every
//! [`DEFAULT_MONITOR_INTERVAL`] and each replica synced every [`DEFAULT_SYNC_INTERVAL`]:
//! Litestream's defaults (1 s each) put up to 2 s between a commit and its replica.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use anyhow::{bail, ensure, Context};
use serde::Deserialize;
use serde_yaml_ng::{Mapping, Value};
use shardlite_engine::{layout::Layout, Manifest};

/// How the manifest's lines start in the config file.
pub const MANIFEST_PREFIX: &str = "#shardlite-manifest ";
/// How often Litestream looks at each database's WAL, unless given (`monitor-interval`).
pub const DEFAULT_MONITOR_INTERVAL: &str = "250ms";
/// How often Litestream uploads each database's new transactions, unless given
/// (`sync-interval`).
pub const DEFAULT_SYNC_INTERVAL: &str = "250ms";

/// Settings passed through to Litestream, each `KEY=VALUE`.
#[derive(Debug, Clone, Default)]
pub struct Passthrough {
    /// At the top of the file.
    pub global: Vec<String>,
    /// In each database's entry.
    pub db: Vec<String>,
    /// In each replica's entry.
    pub replica: Vec<String>,
}

/// The config file's text for the data directory `dir` (absolute) whose manifest is
/// `manifest`, replicating partition `p` to `<replica>/pNNNN`.
pub fn render(dir: &Path, manifest: &Manifest, replica: &str, settings: &Passthrough) -> anyhow::Result<String> {
    let layout = Layout::new(dir);
    let mut top = Mapping::new();
    set_all(&mut top, &settings.global)?;
    let mut dbs = Vec::with_capacity(manifest.partitions as usize);
    for p in 0..manifest.partitions {
        let mut replica_entry = Mapping::new();
        replica_entry.insert("url".into(), partition_url(replica, p).into());
        replica_entry.insert("sync-interval".into(), DEFAULT_SYNC_INTERVAL.into());
        set_all(&mut replica_entry, &settings.replica)?;
        let mut db = Mapping::new();
        db.insert("path".into(), layout.db(p).to_string_lossy().into_owned().into());
        db.insert("monitor-interval".into(), DEFAULT_MONITOR_INTERVAL.into());
        set_all(&mut db, &settings.db)?;
        db.insert("replica".into(), Value::Mapping(replica_entry));
        dbs.push(Value::Mapping(db));
    }
    top.insert("dbs".into(), Value::Sequence(dbs));
    let yaml = serde_yaml_ng::to_string(&top)?;
    let manifest_lines: String = manifest.to_text()?.lines().map(|line| format!("{MANIFEST_PREFIX}{line}\n")).collect();
    Ok(format!(
        "# Litestream configuration of the shardlite data directory {}, written by\n\
         # `shardlite litestream-config`. `shardlite restore --from-litestream` reads the directory's\n\
         # manifest from the lines below (checksummed): keep them.\n\
         {manifest_lines}{yaml}",
        dir.display()
    ))
}

/// The replica URL of partition `p`: `<replica>/pNNNN`, before any query string.
pub fn partition_url(replica: &str, p: u32) -> String {
    let (base, query) = replica.split_once('?').map_or((replica, None), |(b, q)| (b, Some(q)));
    let url = format!("{}/p{p:04}", base.trim_end_matches('/'));
    query.map_or(url.clone(), |q| format!("{url}?{q}"))
}

/// A replica given as a URL (`s3://bucket/prefix`, `file:///dir`, any scheme Litestream knows)
/// or as a local directory (made absolute, as a `file://` URL).
pub fn replica_url(given: &str) -> anyhow::Result<String> {
    if given.contains("://") {
        return Ok(given.to_owned());
    }
    let path = std::path::absolute(given).with_context(|| format!("the replica directory {given}"))?;
    Ok(format!("file://{}", path.display()))
}

/// Sets each `KEY=VALUE` of `settings` in `map` (a dotted key nests; the value is YAML).
fn set_all(map: &mut Mapping, settings: &[String]) -> anyhow::Result<()> {
    for setting in settings {
        let (key, value) = setting.split_once('=').with_context(|| format!("`{setting}`: a setting is KEY=VALUE"))?;
        let value: Value = serde_yaml_ng::from_str(value).with_context(|| format!("`{setting}`: not a YAML value"))?;
        let mut parts: Vec<&str> = key.split('.').collect();
        let last = parts.pop().filter(|k| !k.is_empty()).with_context(|| format!("`{setting}`: no key"))?;
        let mut at = &mut *map;
        for part in parts {
            let entry = at.entry(part.into()).or_insert_with(|| Value::Mapping(Mapping::new()));
            at = match entry {
                Value::Mapping(inner) => inner,
                _ => bail!("`{setting}`: `{part}` is already set to a value"),
            };
        }
        at.insert(last.into(), value);
    }
    Ok(())
}

/// A config file read back: the manifest it carries and, for each partition in order, the
/// database path Litestream knows it by and its replica.
#[derive(Debug)]
pub struct Replicated {
    /// The data directory's manifest when the config was written.
    pub manifest: Manifest,
    /// Partition `p`'s database path (as replicated) and replica URL.
    pub partitions: Vec<(PathBuf, String)>,
}

/// What of Litestream's YAML a restore reads (everything else is Litestream's).
#[derive(Deserialize)]
struct File {
    dbs: Vec<Db>,
}

#[derive(Deserialize)]
struct Db {
    path: PathBuf,
    replica: Option<ReplicaEntry>,
}

#[derive(Deserialize)]
struct ReplicaEntry {
    url: Option<String>,
    path: Option<String>,
}

/// Reads the config file at `path`: its manifest (checksum verified) and an entry with a
/// replica for every partition, each once.
pub fn read(path: &Path) -> anyhow::Result<Replicated> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let manifest_text: String =
        text.lines().filter_map(|line| line.strip_prefix(MANIFEST_PREFIX)).map(|line| format!("{line}\n")).collect();
    ensure!(
        !manifest_text.is_empty(),
        "{} carries no shardlite manifest (lines starting `{}`): write it with `shardlite litestream-config`",
        path.display(),
        MANIFEST_PREFIX.trim_end()
    );
    let manifest = Manifest::parse(&manifest_text, path)?;
    let file: File =
        serde_yaml_ng::from_str(&text).with_context(|| format!("{}: not a Litestream config", path.display()))?;
    let mut found: BTreeMap<u32, (PathBuf, String)> = BTreeMap::new();
    for db in file.dbs {
        let Some(p) = partition_of(&db.path).filter(|p| *p < manifest.partitions) else {
            bail!("{}: {} is not a partition of this directory", path.display(), db.path.display());
        };
        let replica = db.replica.and_then(|r| r.url.or(r.path));
        let replica = replica.with_context(|| format!("{}: partition {p} has no replica", path.display()))?;
        ensure!(found.insert(p, (db.path, replica)).is_none(), "{}: partition {p} is listed twice", path.display());
    }
    let missing: Vec<u32> = (0..manifest.partitions).filter(|p| !found.contains_key(p)).collect();
    ensure!(
        missing.is_empty(),
        "{}: partitions {missing:?} are not replicated (the directory has {}); write the config again with \
         `shardlite litestream-config`",
        path.display(),
        manifest.partitions
    );
    Ok(Replicated { manifest, partitions: found.into_values().collect() })
}

/// The partition number of a database named `pNNNN.db`.
fn partition_of(db: &Path) -> Option<u32> {
    let name = db.file_name()?.to_str()?;
    let digits = name.strip_prefix('p')?.strip_suffix(".db")?;
    (digits.len() == 4 && digits.bytes().all(|b| b.is_ascii_digit())).then(|| digits.parse().ok())?
}

#[cfg(test)]
mod tests {
    use shardlite_engine::CreateOptions;

    use super::*;

    fn manifest(partitions: u32) -> Manifest {
        Manifest::new(&CreateOptions { partitions: Some(partitions), hash_seed: Some(7), ..CreateOptions::default() })
    }

    #[test]
    fn every_partition_round_trips_with_its_replica_and_the_manifest() {
        let settings = Passthrough {
            global: vec!["logging.level=debug".into()],
            db: vec!["checkpoint-interval=30s".into()],
            replica: vec!["sync-interval=1s".into(), "force-path-style=true".into()],
        };
        let m = manifest(3);
        let text =
            render(Path::new("/data"), &m, "s3://bucket/prefix?endpoint=http://127.0.0.1:9000", &settings).unwrap();
        assert!(text.contains("url: s3://bucket/prefix/p0002?endpoint=http://127.0.0.1:9000"), "{text}");
        assert!(text.contains("sync-interval: 1s") && !text.contains("sync-interval: 250ms"), "given wins: {text}");
        assert!(text.contains("force-path-style: true") && text.contains("level: debug"), "{text}");
        assert!(text.contains("monitor-interval: 250ms"), "{text}");
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), &text).unwrap();
        let read = read(file.path()).unwrap();
        assert_eq!(read.manifest, m);
        assert_eq!(
            read.partitions[1],
            (PathBuf::from("/data/p0001.db"), "s3://bucket/prefix/p0001?endpoint=http://127.0.0.1:9000".into())
        );
    }

    #[test]
    fn a_damaged_manifest_or_a_missing_partition_is_refused() {
        let text = render(Path::new("/data"), &manifest(2), "file:///replica", &Passthrough::default()).unwrap();
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), text.replace("hash_seed = 7", "hash_seed = 8")).unwrap();
        let err = format!("{:#}", read(file.path()).unwrap_err());
        assert!(err.contains("checksum mismatch"), "{err}");

        let only_p0: String = text.lines().take_while(|l| !l.contains("p0001")).map(|l| format!("{l}\n")).collect();
        std::fs::write(file.path(), only_p0).unwrap();
        let err = format!("{:#}", read(file.path()).unwrap_err());
        assert!(err.contains("partitions [1] are not replicated"), "{err}");

        std::fs::write(file.path(), "dbs: []\n").unwrap();
        let err = format!("{:#}", read(file.path()).unwrap_err());
        assert!(err.contains("carries no shardlite manifest"), "{err}");
    }

    #[test]
    fn settings_must_be_key_value_and_a_local_replica_becomes_a_file_url() {
        let mut map = Mapping::new();
        assert!(set_all(&mut map, &["novalue".into()]).is_err());
        assert!(set_all(&mut map, &["a=1".into(), "a.b=2".into()]).is_err(), "a is a value, not a table");
        assert!(replica_url("/tmp/r").unwrap() == "file:///tmp/r");
        assert_eq!(replica_url("s3://b/p").unwrap(), "s3://b/p");
        assert_eq!(partition_of(Path::new("/d/p0042.db")), Some(42));
        assert_eq!(partition_of(Path::new("/d/p42.db")), None);
    }
}
