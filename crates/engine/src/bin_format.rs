//! The `bin` record stream, byte by byte (docs/import-export.md, "bin"): what `shardlite
//! export` writes and `import` reads, and what `GET /export` sends for one partition.
//!
//! ```text
//! magic  "SHLTKV1\n"                                   8 bytes
//! record key length u32, value length u32, counter u64 (0: none), key, value   (little-endian)
//! ...
//! end    u32::MAX, then the number of records u64      (a stream without it is truncated)
//! ```

/// The stream's first 8 bytes.
pub const MAGIC: &[u8; 8] = b"SHLTKV1\n";
/// The key length that marks the end of a stream (a record count follows).
pub const END: u32 = u32::MAX;
/// Bytes of a record's header: key length u32, value length u32, counter u64.
pub const HEADER: usize = 16;

/// Appends one record to `out`.
pub fn put_record(out: &mut Vec<u8>, key: &[u8], value: &[u8], counter: u64) {
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(&counter.to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// Appends the end marker of a stream of `records` records to `out`.
pub fn put_end(out: &mut Vec<u8>, records: u64) {
    out.extend_from_slice(&END.to_le_bytes());
    out.extend_from_slice(&records.to_le_bytes());
}
