//! Reading record files: each record, or what is wrong with it and where.

use std::io::BufRead;

use base64::Engine;

use super::{Encoding, Format};

use shardlite_engine::bin_format::{END as BIN_END, HEADER as BIN_HEADER, MAGIC as BIN_MAGIC};

/// One record read.
#[derive(Debug)]
pub struct Parsed<'a> {
    /// The key.
    pub key: &'a [u8],
    /// The value.
    pub value: &'a [u8],
    /// The counter the input gives, if it gives one.
    pub counter: Option<u64>,
    /// Its line (text formats) or byte offset (`bin`).
    pub position: u64,
}

/// A record that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bad {
    /// Its line or byte offset.
    pub position: u64,
    /// What is wrong.
    pub what: String,
    /// Nothing after it can be read (a truncated or foreign binary stream, a wrong header).
    pub fatal: bool,
}

/// What a position in a file of `format` counts.
pub fn unit(format: Format) -> &'static str {
    match format {
        Format::Bin => "byte",
        _ => "line",
    }
}

/// Reads every record of `input`, handing each (or what is wrong with it) to `each`; stops
/// after a fatal one, or at `each`'s first error.
pub fn read(
    format: Format,
    encoding: Encoding,
    input: &mut dyn BufRead,
    each: &mut dyn FnMut(Result<Parsed<'_>, Bad>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    match format {
        Format::Csv => read_lines(input, |line, k, v| fields(line, b',', encoding, k, v), each),
        Format::Tsv => read_lines(input, |line, k, v| fields(line, b'\t', encoding, k, v), each),
        Format::Jsonl => read_lines(input, |line, k, v| json(line, encoding, k, v), each),
        Format::Bin => read_bin(input, each),
    }
}

/// Reads a line-per-record format; `parse` fills the key and value buffers from a line (its end
/// of line removed) and returns the counter it gives.
fn read_lines(
    input: &mut dyn BufRead,
    parse: impl Fn(&[u8], &mut Vec<u8>, &mut Vec<u8>) -> Result<Option<u64>, String>,
    each: &mut dyn FnMut(Result<Parsed<'_>, Bad>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let (mut line, mut key, mut value) = (Vec::new(), Vec::new(), Vec::new());
    let mut position = 0;
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            return Ok(());
        }
        position += 1;
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if position == 1 {
            match header(text) {
                Some(Ok(())) => continue,
                Some(Err(what)) => return each(Err(Bad { position, what, fatal: true })),
                None => {}
            }
        }
        match parse(text, &mut key, &mut value) {
            Ok(counter) => each(Ok(Parsed { key: &key, value: &value, counter, position }))?,
            Err(what) => each(Err(Bad { position, what, fatal: false }))?,
        }
    }
}

/// `Some` if the first line is a header (its first field is `key`): `Ok` if it is one of ours.
fn header(line: &[u8]) -> Option<Result<(), String>> {
    let first = line.split(|&b| b == b',' || b == b'\t').next()?;
    if first != b"key" {
        return None;
    }
    let known = [&b"key,value"[..], b"key,value,counter", b"key\tvalue", b"key\tvalue\tcounter"];
    Some(match known.contains(&line) {
        true => Ok(()),
        false => Err(format!(
            "wrong header `{}`: expected `key,value` or `key,value,counter` (tabs in tsv)",
            String::from_utf8_lossy(line)
        )),
    })
}

/// `key SEP value [SEP counter]`.
fn fields(
    line: &[u8],
    sep: u8,
    encoding: Encoding,
    key: &mut Vec<u8>,
    value: &mut Vec<u8>,
) -> Result<Option<u64>, String> {
    let mut parts = line.splitn(4, |&b| b == sep);
    let found: [Option<&[u8]>; 4] = std::array::from_fn(|_| parts.next());
    let [Some(key_field), Some(value_field), counter_field, None] = found else {
        let count = found.iter().flatten().count();
        return Err(format!("expected 2 or 3 fields (key, value, counter), found {count}"));
    };
    decode(key_field, encoding, key).map_err(|e| format!("key: {e}"))?;
    decode(value_field, encoding, value).map_err(|e| format!("value: {e}"))?;
    counter_field.map(counter).transpose()
}

fn counter(field: &[u8]) -> Result<u64, String> {
    std::str::from_utf8(field)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| format!("counter `{}` is not a whole number", String::from_utf8_lossy(field)))
}

/// A JSON line: `{"key": ENC, "value": ENC, "counter": N}` (counter optional).
fn json(line: &[u8], encoding: Encoding, key: &mut Vec<u8>, value: &mut Vec<u8>) -> Result<Option<u64>, String> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Line<'a> {
        #[serde(borrow)]
        key: std::borrow::Cow<'a, str>,
        #[serde(borrow)]
        value: std::borrow::Cow<'a, str>,
        counter: Option<u64>,
    }
    let parsed: Line<'_> = serde_json::from_slice(line).map_err(|e| format!("not a JSON record: {e}"))?;
    decode(parsed.key.as_bytes(), encoding, key).map_err(|e| format!("key: {e}"))?;
    decode(parsed.value.as_bytes(), encoding, value).map_err(|e| format!("value: {e}"))?;
    Ok(parsed.counter)
}

/// Decodes a field into `out`.
fn decode(field: &[u8], encoding: Encoding, out: &mut Vec<u8>) -> Result<(), String> {
    match encoding {
        Encoding::Hex => {
            if field.len() % 2 == 1 {
                return Err(format!("bad hex: an odd number of digits ({})", field.len()));
            }
            out.resize(field.len() / 2, 0);
            const_hex::decode_to_slice(field, out).map_err(|e| format!("bad hex: {e}"))
        }
        Encoding::Base64 => {
            out.clear();
            base64::engine::general_purpose::STANDARD.decode_vec(field, out).map_err(|e| format!("bad base64: {e}"))
        }
    }
}

/// The `bin` stream: magic, records, end marker with the record count.
fn read_bin(
    input: &mut dyn BufRead,
    each: &mut dyn FnMut(Result<Parsed<'_>, Bad>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let fatal = |position: u64, what: String| Err(Bad { position, what, fatal: true });
    let mut magic = [0u8; 8];
    let got = read_full(input, &mut magic)?;
    if got < magic.len() || &magic != BIN_MAGIC {
        return each(fatal(0, "not a shardlite bin stream: it does not start with `SHLTKV1\\n`".to_owned()));
    }
    let (mut position, mut records) = (8u64, 0u64);
    let mut body = Vec::new();
    loop {
        let mut header = [0u8; BIN_HEADER];
        let got = read_full(input, &mut header[..4])?;
        if got == 0 {
            return each(fatal(position, format!("the stream ends without its end marker after {records} records")));
        }
        let key_len = u32::from_le_bytes(header[..4].try_into()?);
        if key_len == BIN_END {
            return end_marker(input, position, records).or_else(|bad| each(Err(bad)));
        }
        let got = got + read_full(input, &mut header[4..])?;
        if got < BIN_HEADER {
            return each(fatal(position, format!("truncated record: {got} of its {BIN_HEADER} header bytes")));
        }
        let value_len = u32::from_le_bytes(header[4..8].try_into()?) as usize;
        let counter = u64::from_le_bytes(header[8..16].try_into()?);
        let key_len = key_len as usize;
        if key_len == 0 || key_len > shardlite_engine::MAX_KEY_LEN || value_len > shardlite_engine::MAX_VALUE_LIMIT {
            let what = format!("key length {key_len} or value length {value_len} out of bounds (a corrupt stream?)");
            return each(fatal(position, what));
        }
        body.resize(key_len + value_len, 0);
        let got = read_full(input, &mut body)?;
        if got < body.len() {
            let what = format!("truncated record: {got} of its {} key and value bytes", body.len());
            return each(fatal(position, what));
        }
        let (key, value) = body.split_at(key_len);
        each(Ok(Parsed { key, value, counter: (counter > 0).then_some(counter), position }))?;
        position += (BIN_HEADER + body.len()) as u64;
        records += 1;
    }
}

/// Checks the end marker's record count and that nothing follows it.
fn end_marker(input: &mut dyn BufRead, position: u64, records: u64) -> Result<(), Bad> {
    let fatal = |what: String| Err(Bad { position, what, fatal: true });
    let mut count = [0u8; 8];
    match read_full(input, &mut count) {
        Ok(8) => {}
        _ => return fatal("truncated end marker".to_owned()),
    }
    let count = u64::from_le_bytes(count);
    if count != records {
        return fatal(format!("the end marker counts {count} records, the stream held {records}"));
    }
    match input.fill_buf() {
        Ok([]) => Ok(()),
        _ => fatal("data after the end marker".to_owned()),
    }
}

/// Reads until `buf` is full or the input ends; the bytes read.
fn read_full(input: &mut dyn BufRead, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}
