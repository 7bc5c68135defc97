//! Writing record files in every format, compressed as the output's name says.

use std::{
    fs::File,
    io::{BufWriter, Write},
    path::{Path, PathBuf},
};

use anyhow::Context;
use base64::Engine;

use shardlite_engine::bin_format;

use super::{Compression, Encoding, Format};

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
    /// The file being written, its name while written (`NAME.partial`) and its name once done.
    file: Option<Output>,
    records: u64,
    line: Vec<u8>,
}

/// A file being written under a temporary name, renamed once complete: a failed or
/// interrupted export never leaves a file that looks whole.
struct Output {
    file: File,
    partial: PathBuf,
    done: PathBuf,
    renamed: bool,
}

impl RecordWriter {
    /// Starts a file at `path` (`None`: standard output) and writes its header; the file
    /// takes its name when [`RecordWriter::finish`] succeeds.
    pub fn create(path: Option<&Path>, format: Format, encoding: Encoding) -> anyhow::Result<Self> {
        let (raw, file): (Box<dyn Write>, _) = match path {
            Some(path) => {
                let mut partial = path.as_os_str().to_owned();
                partial.push(".partial");
                let partial = PathBuf::from(partial);
                let file = File::create(&partial).with_context(|| format!("creating {}", path.display()))?;
                (Box::new(file.try_clone()?), Some(Output { file, partial, done: path.to_owned(), renamed: false }))
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
            Format::Bin => writer.sink.out().write_all(bin_format::MAGIC)?,
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
            Format::Bin => bin_format::put_record(line, key, value, counter),
        }
        self.sink.out().write_all(line)?;
        self.records += 1;
        Ok(())
    }

    /// Writes the end (the `bin` end marker), flushes, syncs a file to disk and gives it its name.
    pub fn finish(mut self) -> anyhow::Result<u64> {
        if self.format == Format::Bin {
            let mut end = Vec::new();
            bin_format::put_end(&mut end, self.records);
            self.sink.out().write_all(&end)?;
        }
        let mut buffered = match self.sink {
            Sink::Plain(w) => w,
            Sink::Zstd(w) => w.finish()?,
            Sink::Gzip(w) => w.finish()?,
        };
        buffered.flush()?;
        drop(buffered);
        if let Some(mut output) = self.file.take() {
            output.file.sync_all()?;
            std::fs::rename(&output.partial, &output.done)
                .with_context(|| format!("renaming {} to {}", output.partial.display(), output.done.display()))?;
            output.renamed = true;
            shardlite_engine::layout::sync_dir(&output.done)?;
        }
        Ok(self.records)
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        if !self.renamed {
            let _ = std::fs::remove_file(&self.partial);
        }
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
