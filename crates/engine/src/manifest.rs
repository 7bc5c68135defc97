//! The manifest ([`layout::MANIFEST`]): what a data directory is, fixed when it is created, and its
//! epoch.
//!
//! A TOML file whose last line is `checksum = "<crc32c of every byte before that line>"`, so a
//! torn or hand-edited manifest is caught. Opening refuses a directory whose manifest is from a
//! newer format or disagrees with what the caller asked for.
//!
//! The epoch is part of every record's [`crate::Version`]. It changes only when an open finds that
//! the last session may have lost state it had already shown. A new epoch is later than every
//! earlier one: at least the Unix time in seconds, shifted past [`EPOCH_RANDOM_BITS`] random bits
//! that tell apart two directories whose epochs began in the same second.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{config::IndexMode, layout, CreateOptions, Error, KeyHasher, Result};

/// The manifest format this build writes (it reads this one and format 1, which had no epoch).
pub const FORMAT_VERSION: u32 = 2;

/// What a data directory is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Format of the directory's files.
    pub format_version: u32,
    /// Partition count.
    pub partitions: u32,
    /// Seed of the key hash.
    pub hash_seed: u64,
    /// Index mode.
    pub index: IndexMode,
    /// Fingerprint width (32 except in collision tests).
    pub fingerprint_bits: u8,
    /// The directory's epoch (0: none yet, a format 1 manifest).
    #[serde(default)]
    pub epoch: u64,
}

const CHECKSUM_PREFIX: &str = "checksum = \"";

impl Manifest {
    /// The manifest of a new directory created with `create` (defaults for what it leaves
    /// open), at a new epoch.
    pub fn new(create: &CreateOptions) -> Self {
        Self {
            format_version: FORMAT_VERSION,
            partitions: create.partitions.unwrap_or(CreateOptions::DEFAULT_PARTITIONS),
            hash_seed: create.hash_seed.unwrap_or(CreateOptions::DEFAULT_HASH_SEED),
            index: create.index.unwrap_or_default(),
            fingerprint_bits: create.fingerprint_bits.unwrap_or(CreateOptions::DEFAULT_FINGERPRINT_BITS),
            epoch: epoch_now(),
        }
    }

    /// What the directory was created with: every setting, as given.
    pub fn created_with(&self) -> CreateOptions {
        CreateOptions {
            partitions: Some(self.partitions),
            index: Some(self.index),
            hash_seed: Some(self.hash_seed),
            fingerprint_bits: Some(self.fingerprint_bits),
        }
    }

    /// The key hasher of the directory: its seed, partitions and fingerprint width.
    pub fn hasher(&self) -> KeyHasher {
        KeyHasher::with_fingerprint_bits(self.hash_seed, self.partitions, self.fingerprint_bits)
    }

    /// Whether the directory has no epoch yet (made by a build before epochs).
    pub fn needs_epoch(&self) -> bool {
        self.epoch == 0 || self.format_version < FORMAT_VERSION
    }

    /// Moves to a new epoch, later than the current one and at least [`epoch_now`]; the caller
    /// writes the manifest before anything of the new epoch is shown.
    pub fn start_epoch(&mut self) {
        self.epoch = (self.epoch + 1).max(epoch_now());
        self.format_version = FORMAT_VERSION;
    }

    /// Writes the manifest atomically.
    pub fn write(&self, path: &Path) -> Result<()> {
        write_checksummed(path, self)
    }

    /// Reads and verifies a manifest.
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, &e))?;
        Self::parse(&text, path)
    }

    /// The manifest's text, checksum line included, as [`Manifest::write`] writes it.
    pub fn to_text(&self) -> Result<String> {
        checksummed_text(self)
    }

    /// Verifies and reads a manifest's text (`path`: where it came from, for errors).
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let bad = |message: String| Error::Manifest { path: path.to_owned(), message };
        let body = checked_body(text).map_err(bad)?;
        #[derive(Deserialize)]
        struct Version {
            format_version: u32,
        }
        let version: Version = toml::from_str(body).map_err(|e| bad(e.to_string()))?;
        if version.format_version > FORMAT_VERSION {
            return Err(bad(format!(
                "format version {} is newer than this build understands ({FORMAT_VERSION}): upgrade shardlite",
                version.format_version
            )));
        }
        toml::from_str(body).map_err(|e| bad(e.to_string()))
    }

    /// Refuses a directory created with other settings than those `asked` gives (the settings
    /// it leaves open may be anything), naming the first that differs and both values.
    pub fn check_matches(&self, asked: &CreateOptions, path: &Path) -> Result<()> {
        fn check<T: PartialEq + std::fmt::Display>(
            field: &str,
            stored: T,
            asked: Option<T>,
            path: &Path,
        ) -> Result<()> {
            match asked {
                Some(asked) if asked != stored => Err(Error::Manifest {
                    path: path.to_owned(),
                    message: format!(
                        "the data directory was created with {field} = {stored}, but {asked} was asked for; \
                         use a new directory or omit the setting"
                    ),
                }),
                _ => Ok(()),
            }
        }
        check("partitions", self.partitions, asked.partitions, path)?;
        check("index", self.index, asked.index, path)?;
        check("hash_seed", self.hash_seed, asked.hash_seed, path)?;
        check("fingerprint_bits", self.fingerprint_bits, asked.fingerprint_bits, path)
    }
}

/// Writes `value` as TOML followed by the checksum line, atomically: the form of the manifest
/// and of a backup's manifest.
pub(crate) fn write_checksummed(path: &Path, value: &impl Serialize) -> Result<()> {
    let text = checksummed_text(value)?;
    layout::replace_file(path, |f| std::io::Write::write_all(f, text.as_bytes()))
}

/// `value` as TOML followed by the checksum line: the form of the manifest, a backup's
/// manifest and the cluster map.
pub fn checksummed_text(value: &impl Serialize) -> Result<String> {
    let body = toml::to_string(value).map_err(|e| Error::Config(e.to_string()))?;
    Ok(format!("{body}{CHECKSUM_PREFIX}{:08x}\"\n", crc32c::crc32c(body.as_bytes())))
}

/// The TOML before the checksum line of `text`, once the checksum matches; else what is wrong.
pub fn checked_body(text: &str) -> std::result::Result<&str, String> {
    let split = text
        .rfind(CHECKSUM_PREFIX)
        .ok_or_else(|| "no checksum line: not a shardlite manifest, or truncated".to_owned())?;
    let (body, tail) = text.split_at(split);
    let stored = tail[CHECKSUM_PREFIX.len()..].trim_end().trim_end_matches('"');
    let actual = format!("{:08x}", crc32c::crc32c(body.as_bytes()));
    if stored != actual {
        return Err(format!("checksum mismatch (stored {stored}, computed {actual}): the file is damaged"));
    }
    Ok(body)
}

/// Random low bits of an epoch begun now: two directories starting an epoch in the same second
/// share it once in 2^20. Below 2^53 until the year 2242, so JSON readers keep it exact.
pub const EPOCH_RANDOM_BITS: u32 = 20;

/// An epoch begun now: the Unix time in seconds above [`EPOCH_RANDOM_BITS`] random bits.
pub fn epoch_now() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
    (unix_seconds().max(1) << EPOCH_RANDOM_BITS) | (random & ((1 << EPOCH_RANDOM_BITS) - 1))
}

pub(crate) fn unix_seconds() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_detects_damage() {
        let dir = tempfile::tempdir().unwrap();
        let path = layout::Layout::new(dir.path()).manifest();
        let m = Manifest::new(&CreateOptions::default());
        m.write(&path).unwrap();
        assert_eq!(Manifest::read(&path).unwrap(), m);

        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("partitions = 256", "partitions = 255")).unwrap();
        let err = Manifest::read(&path).unwrap_err().to_string();
        assert!(err.contains("checksum mismatch"), "{err}");

        std::fs::write(&path, &text[..text.len() / 2]).unwrap();
        assert!(Manifest::read(&path).is_err());
    }

    #[test]
    fn a_format_1_manifest_reads_without_an_epoch_and_epochs_only_grow() {
        let dir = tempfile::tempdir().unwrap();
        let path = layout::Layout::new(dir.path()).manifest();
        let body = "format_version = 1\npartitions = 4\nhash_seed = 9\nindex = \"hash\"\nfingerprint_bits = 32\n";
        std::fs::write(&path, format!("{body}checksum = \"{:08x}\"\n", crc32c::crc32c(body.as_bytes()))).unwrap();
        let mut m = Manifest::read(&path).unwrap();
        assert_eq!((m.format_version, m.epoch), (1, 0));
        assert!(m.needs_epoch());
        m.start_epoch();
        assert!(m.epoch >> EPOCH_RANDOM_BITS >= unix_seconds() - 1 && !m.needs_epoch());
        let first = m.epoch;
        m.start_epoch();
        assert!(m.epoch > first, "a new epoch is later even within the same second");
        m.write(&path).unwrap();
        assert_eq!(Manifest::read(&path).unwrap(), m);
    }

    /// Directories created in the same second (nodes of a cluster started together) get
    /// different epochs, so a tag of one matches no state of the other.
    #[test]
    fn directories_created_in_the_same_second_get_different_epochs() {
        let epochs: std::collections::BTreeSet<u64> =
            (0..16).map(|_| Manifest::new(&CreateOptions::default()).epoch).collect();
        assert_eq!(epochs.len(), 16, "{epochs:?}");
        let seconds: std::collections::BTreeSet<u64> = epochs.iter().map(|e| e >> EPOCH_RANDOM_BITS).collect();
        assert!(seconds.len() <= 2 && seconds.iter().all(|&s| s + 1 >= unix_seconds()), "{seconds:?}");
    }

    #[test]
    fn refuses_a_newer_format_and_a_mismatch() {
        let dir = tempfile::tempdir().unwrap();
        let path = layout::Layout::new(dir.path()).manifest();
        let newer = Manifest { format_version: FORMAT_VERSION + 1, ..Manifest::new(&CreateOptions::default()) };
        newer.write(&path).unwrap();
        let err = Manifest::read(&path).unwrap_err().to_string();
        assert!(err.contains("newer than this build"), "{err}");

        let m = Manifest::new(&CreateOptions::default());
        let asked = CreateOptions { partitions: Some(16), ..CreateOptions::default() };
        let err = m.check_matches(&asked, &path).unwrap_err().to_string();
        assert!(err.contains("partitions = 256") && err.contains("16"), "{err}");
    }
}
