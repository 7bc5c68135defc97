//! Writing record files in every format, compressed as the output's name says.

use std::{
    fs::File,
    io::{BufWriter, Write},
    path::Path,
};

use anyhow::Context;
use base64::Engine;

use super::{
    read::{BIN_END, BIN_MAGIC},
    Compression, Encoding, Format,
};

/// Where records go: a file (compressed by its name) or standard output.
enum Sink {
    Plain(BufWriter<Box<dyn Write>>),
    Zstd(zstd::Encoder<'static, BufWriter<Box<dyn Write>>>),
    Gzip(flate2::write::GzEncoder<BufWriter<Box<dyn Write>>>),
}

impl Sink {
    fn out(&mut self) -> &mut dyn Write {
        match self {
            Sink::Plain(w) => w,
            Sink::Zstd(w) => w,
            Sink::Gzip(w) => w,
        }
    }
}

/// A record file being written.
pub struct RecordWriter {
    format: Format,
    encoding: Encoding,
    sink: Sink,
    file: Option<File>,
    records: u64,
    line: Vec<u8>,
}

impl RecordWriter {
    /// Starts a file at `path` (`None`: standard output) and writes its header.
    pub fn create(path: Option<&Path>, format: Format, encoding: Encoding) -> anyhow::Result<Self> {
        let (raw, file): (Box<dyn Write>, _) = match path {
            Some(path) => {
                let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
                (Box::new(file.try_clone()?), Some(file))
            }
            None => (Box::new(std::io::stdout().lock()), None),
        };
        let buffered = BufWriter::with_capacity(256 << 10, raw);
        let sink = match path.map_or(Compression::None, Compression::of_name) {
            Compression::None => Sink::Plain(buffered),
            Compression::Zstd => Sink::Zstd(zstd::Encoder::new(buffered, 1)?),
            Compression::Gzip => Sink::Gzip(flate2::write::GzEncoder::new(buffered, flate2::Compression::fast())),
        };
        let mut writer = Self { format, encoding, sink, file, records: 0, line: Vec::new() };
        match format {
            Format::Csv => writer.sink.out().write_all(b"key,value,counter\n")?,
            Format::Tsv => writer.sink.out().write_all(b"key\tvalue\tcounter\n")?,
            Format::Jsonl => {}
            Format::Bin => writer.sink.out().write_all(BIN_MAGIC)?,
        }
        Ok(writer)
    }

    /// Writes one record.
    pub fn record(&mut self, key: &[u8], value: &[u8], counter: u64) -> anyhow::Result<()> {
        let line = &mut self.line;
        line.clear();
        match self.format {
            Format::Csv | Format::Tsv => {
                let sep = if self.format == Format::Csv { b',' } else { b'\t' };
                encode(key, self.encoding, line);
                line.push(sep);
                encode(value, self.encoding, line);
                line.push(sep);
                line.extend_from_slice(counter.to_string().as_bytes());
                line.push(b'\n');
            }
            Format::Jsonl => {
                line.extend_from_slice(b"{\"key\":\"");
                encode(key, self.encoding, line);
                line.extend_from_slice(b"\",\"value\":\"");
                encode(value, self.encoding, line);
                line.extend_from_slice(format!("\",\"counter\":{counter}}}\n").as_bytes());
            }
            Format::Bin => {
                line.extend_from_slice(&(key.len() as u32).to_le_bytes());
                line.extend_from_slice(&(value.len() as u32).to_le_bytes());
                line.extend_from_slice(&counter.to_le_bytes());
                line.extend_from_slice(key);
                line.extend_from_slice(value);
            }
        }
        self.sink.out().write_all(line)?;
        self.records += 1;
        Ok(())
    }

    /// Writes the end (the `bin` end marker), flushes, and syncs a file to disk.
    pub fn finish(mut self) -> anyhow::Result<u64> {
        if self.format == Format::Bin {
            let mut end = BIN_END.to_le_bytes().to_vec();
            end.extend_from_slice(&self.records.to_le_bytes());
            self.sink.out().write_all(&end)?;
        }
        let mut buffered = match self.sink {
            Sink::Plain(w) => w,
            Sink::Zstd(w) => w.finish()?,
            Sink::Gzip(w) => w.finish()?,
        };
        buffered.flush()?;
        drop(buffered);
        if let Some(file) = self.file {
            file.sync_all()?;
        }
        Ok(self.records)
    }
}

/// Appends `bytes` encoded to `out`.
fn encode(bytes: &[u8], encoding: Encoding, out: &mut Vec<u8>) {
    match encoding {
        Encoding::Hex => {
            let start = out.len();
            out.resize(start + bytes.len() * 2, 0);
            const_hex::encode_to_slice(bytes, &mut out[start..]).expect("the buffer is twice the input");
        }
        Encoding::Base64 => {
            let mut text = String::new();
            base64::engine::general_purpose::STANDARD.encode_string(bytes, &mut text);
            out.extend_from_slice(text.as_bytes());
        }
    }
}
