//! The manifest `shardlite.toml`: what a data directory is, fixed when it is created.
//!
//! A TOML file whose last line is `checksum = "<crc32c of every byte before that line>"`, so a
//! torn or hand-edited manifest is caught. Opening refuses a directory whose manifest is from a
//! newer format or disagrees with what the caller asked for.

use serde::{Deserialize, Serialize};

use crate::{config::IndexMode, layout, Config, Error, Result};

/// The manifest format this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

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
}

const CHECKSUM_PREFIX: &str = "checksum = \"";

impl Manifest {
    /// The manifest a new directory created with `config` gets.
    pub fn for_config(config: &Config) -> Self {
        Self {
            format_version: FORMAT_VERSION,
            partitions: config.partitions,
            hash_seed: config.hash_seed,
            index: config.index,
            fingerprint_bits: config.fingerprint_bits,
        }
    }

    /// Writes the manifest atomically.
    pub fn write(&self, path: &std::path::Path) -> Result<()> {
        let body = toml::to_string(self).map_err(|e| Error::Config(e.to_string()))?;
        let text = format!("{body}{CHECKSUM_PREFIX}{:08x}\"\n", crc32c::crc32c(body.as_bytes()));
        layout::replace_file(path, |f| std::io::Write::write_all(f, text.as_bytes()))
    }

    /// Reads and verifies a manifest.
    pub fn read(path: &std::path::Path) -> Result<Self> {
        let bad = |message: String| Error::Manifest { path: path.to_owned(), message };
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, &e))?;
        let split = text
            .rfind(CHECKSUM_PREFIX)
            .ok_or_else(|| bad("no checksum line: not a shardlite manifest, or truncated".into()))?;
        let (body, tail) = text.split_at(split);
        let stored = tail[CHECKSUM_PREFIX.len()..].trim_end().trim_end_matches('"');
        let actual = format!("{:08x}", crc32c::crc32c(body.as_bytes()));
        if stored != actual {
            return Err(bad(format!("checksum mismatch (stored {stored}, computed {actual}): the file is damaged")));
        }
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

    /// Refuses to serve `config` from a directory made with different fixed settings.
    pub fn check_matches(&self, config: &Config, path: &std::path::Path) -> Result<()> {
        let mismatch = |field: &str, stored: String, asked: String| Error::Manifest {
            path: path.to_owned(),
            message: format!(
                "the data directory was created with {field} = {stored}, but {asked} was asked for; \
                 use a new directory or omit the setting"
            ),
        };
        if self.partitions != config.partitions {
            return Err(mismatch("partitions", self.partitions.to_string(), config.partitions.to_string()));
        }
        if self.index != config.index {
            return Err(mismatch("index", self.index.to_string(), config.index.to_string()));
        }
        if self.hash_seed != config.hash_seed {
            return Err(mismatch("hash_seed", self.hash_seed.to_string(), config.hash_seed.to_string()));
        }
        if self.fingerprint_bits != config.fingerprint_bits {
            return Err(mismatch(
                "fingerprint_bits",
                self.fingerprint_bits.to_string(),
                config.fingerprint_bits.to_string(),
            ));
        }
        Ok(())
    }

    /// Copies the fixed settings into `config`, for callers that open whatever is there.
    pub fn apply_to(&self, config: &mut Config) {
        config.partitions = self.partitions;
        config.index = self.index;
        config.hash_seed = self.hash_seed;
        config.fingerprint_bits = self.fingerprint_bits;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_detects_damage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shardlite.toml");
        let m = Manifest::for_config(&Config::default());
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
    fn refuses_a_newer_format_and_a_mismatch() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shardlite.toml");
        let newer = Manifest { format_version: FORMAT_VERSION + 1, ..Manifest::for_config(&Config::default()) };
        newer.write(&path).unwrap();
        let err = Manifest::read(&path).unwrap_err().to_string();
        assert!(err.contains("newer than this build"), "{err}");

        let m = Manifest::for_config(&Config::default());
        let asked = Config { partitions: 16, ..Config::default() };
        let err = m.check_matches(&asked, &path).unwrap_err().to_string();
        assert!(err.contains("partitions = 256") && err.contains("16"), "{err}");
    }
}
