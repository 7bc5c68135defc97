//! The file formats of `import` and `export` (docs/import-export.md, byte by byte): which format
//! and encoding, the compression a file's name asks for, and the readers ([`read`]) and
//! writers ([`write`]) of each.

pub mod read;
pub mod write;

use std::{
    fs::File,
    io::{BufRead, BufReader, Read},
    path::Path,
};

use anyhow::Context;

/// A record file's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// `key,value[,counter]` lines.
    Csv,
    /// `key<TAB>value[<TAB>counter]` lines.
    Tsv,
    /// `{"key": ..., "value": ..., "counter": N}` lines (counter optional).
    Jsonl,
    /// shardlite's length-prefixed binary stream (the fastest).
    Bin,
}

impl Format {
    /// The format a file's name says (`x.bin`, `x.csv.zst`, ...), if it says one.
    pub fn of_name(path: &Path) -> Option<Self> {
        let name = path.file_name()?.to_str()?;
        let name = name.strip_suffix(".zst").or_else(|| name.strip_suffix(".gz")).unwrap_or(name);
        match name.rsplit_once('.')?.1 {
            "csv" => Some(Self::Csv),
            "tsv" => Some(Self::Tsv),
            "jsonl" => Some(Self::Jsonl),
            "bin" => Some(Self::Bin),
            _ => None,
        }
    }

    /// The format of `path`: `given`, else the one its name says, else csv.
    pub fn choose(given: Option<Self>, path: &Path) -> Self {
        given.or_else(|| Self::of_name(path)).unwrap_or(Self::Csv)
    }
}

/// How keys and values are written in the text formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Encoding {
    /// Lowercase hexadecimal (any case read).
    #[default]
    Hex,
    /// Standard base64 with padding (RFC 4648 section 4).
    Base64,
}

/// Compression, by file name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// None.
    None,
    /// Zstandard (`.zst`).
    Zstd,
    /// gzip (`.gz`).
    Gzip,
}

impl Compression {
    /// The compression a file's name asks for.
    pub fn of_name(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some("zst") => Self::Zstd,
            Some("gz") => Self::Gzip,
            _ => Self::None,
        }
    }
}

/// Opens an input (`-`: standard input), decompressing as its name says, counting the raw
/// bytes read into `raw` (for progress).
pub fn open_input(path: &Path, raw: std::sync::Arc<std::sync::atomic::AtomicU64>) -> anyhow::Result<Box<dyn BufRead>> {
    const BUFFER: usize = 256 << 10;
    let source: Box<dyn Read> = if path == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(File::open(path).with_context(|| format!("opening {}", path.display()))?)
    };
    let counted = Counting { inner: source, raw };
    Ok(match Compression::of_name(path) {
        Compression::None => Box::new(BufReader::with_capacity(BUFFER, counted)),
        Compression::Zstd => Box::new(BufReader::with_capacity(BUFFER, zstd::Decoder::new(counted)?)),
        Compression::Gzip => {
            Box::new(BufReader::with_capacity(BUFFER, flate2::read::MultiGzDecoder::new(BufReader::new(counted))))
        }
    })
}

/// A reader that adds the bytes it reads to a shared counter.
struct Counting {
    inner: Box<dyn Read>,
    raw: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Read for Counting {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.raw.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }
}
