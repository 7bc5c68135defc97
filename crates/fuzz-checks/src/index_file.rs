//! The `index_file` target's property: any bytes, as an index file, open with `Corrupt` or open
//! with a header the file's length backs, then answer scans (strictly ascending, as merges need)
//! and lookups (through the partition's `HashIndex`, as the store does) with entries or
//! `Corrupt`: never a panic, an out-of-bounds read, another error, or an allocation the file's
//! size does not bound.

use std::path::Path;

use shardlite_engine::{
    index::{
        entry_fingerprint,
        format::{Header, PAGE},
        HashIndex, MainIndex,
    },
    Error,
};

/// Fingerprints looked up besides those a scan finds.
const FIXED_FINGERPRINTS: [u32; 3] = [0, 0x8000_0000, u32::MAX];
/// Most fingerprints taken from a scan to look up.
const SCANNED_FINGERPRINTS: usize = 32;

/// Checks `bytes` as an index file, then the same bytes with their checksums recomputed, so that
/// the fuzzer's mutations also reach what lies behind the checksums.
pub fn check_index_file(bytes: &[u8]) {
    check_file(bytes);
    if let Some(repaired) = with_checksums_repaired(bytes) {
        check_file(&repaired);
    }
}

fn check_file(bytes: &[u8]) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("p0000.idx");
    std::fs::write(&path, bytes).expect("writing the index file");
    let main = match MainIndex::open(&path) {
        Ok(main) => main,
        Err(err) => return assert_corrupt(&err, "open"),
    };
    check_header(main.header(), bytes.len());
    let mut fingerprints = FIXED_FINGERPRINTS.to_vec();
    let mut last = None;
    for entry in main.scan().expect("starting a scan") {
        if let Ok(e) = entry {
            assert!(last < Some(e), "a scan went from {last:?} to {e}: not strictly ascending");
            last = Some(e);
        }
        match entry {
            Ok(e) if fingerprints.len() < FIXED_FINGERPRINTS.len() + SCANNED_FINGERPRINTS => {
                fingerprints.push(entry_fingerprint(e))
            }
            Ok(_) => {}
            Err(err) => {
                assert_corrupt(&err, "scan");
                break;
            }
        }
    }
    check_lookups(&path, main.header().fingerprint_bits, &fingerprints);
}

/// What an opened file's header claims must be backed by the file's length.
fn check_header(header: &Header, len: usize) {
    let page = PAGE as u128;
    let implied = (1 + u128::from(header.buckets)) * page + u128::from(header.overflow) * 8 + 4;
    assert_eq!(implied, len as u128, "{header:?} opened from a file of {len} bytes");
    let most = u128::from(header.buckets) * header.capacity() as u128 + u128::from(header.overflow);
    let entries = u128::from(header.entries);
    assert!(u128::from(header.overflow) <= entries && entries <= most, "{header:?}: entries do not add up");
}

fn check_lookups(path: &Path, fingerprint_bits: u32, fingerprints: &[u32]) {
    let index = match HashIndex::open(path, fingerprint_bits) {
        Ok(index) => index,
        Err(err) => return assert_corrupt(&err, "open (HashIndex)"),
    };
    let mut ids = Vec::new();
    for &fp in fingerprints {
        if let Err(err) = index.candidates(fp, &mut ids) {
            assert_corrupt(&err, "lookup");
        }
    }
}

fn assert_corrupt(err: &Error, what: &str) {
    assert!(matches!(err, Error::Corrupt { .. }), "{what} gave {err:?}, not Corrupt");
}

/// `bytes` with the header's, every bucket page's and the overflow section's checksum
/// recomputed where the header's claims leave room for them (`format.rs` has the layout);
/// `None` if too short to hold a header.
fn with_checksums_repaired(bytes: &[u8]) -> Option<Vec<u8>> {
    if bytes.len() < PAGE {
        return None;
    }
    let mut b = bytes.to_vec();
    let version = u32::from_le_bytes(b[8..12].try_into().expect("4 bytes"));
    let crc_at = if version == 1 { 52 } else { 56 };
    let header_crc = crc32c::crc32c(&b[0..crc_at]);
    b[crc_at..crc_at + 4].copy_from_slice(&header_crc.to_le_bytes());
    let buckets = u64::from_le_bytes(b[16..24].try_into().expect("8 bytes"));
    let id_bits = if version == 1 { 32 } else { u32::from_le_bytes(b[52..56].try_into().expect("4 bytes")) };
    let width = entry_width(version, buckets, id_bits);
    let pages_end = buckets.saturating_add(1).saturating_mul(PAGE as u64).min(b.len() as u64) as usize;
    for page in b[PAGE..pages_end].chunks_exact_mut(PAGE) {
        let n = usize::from(u16::from_le_bytes([page[0], page[1]]));
        if let Some(bytes) = width.map(|w| (n * w).div_ceil(8)).filter(|bytes| *bytes <= PAGE - 8) {
            let crc = crc32c::crc32c_append(crc32c::crc32c(&page[0..4]), &page[8..8 + bytes]);
            page[4..8].copy_from_slice(&crc.to_le_bytes());
        }
    }
    if let Some(crc_at) = b.len().checked_sub(4).filter(|at| *at >= pages_end) {
        let crc = crc32c::crc32c(&b[pages_end..crc_at]);
        b[crc_at..].copy_from_slice(&crc.to_le_bytes());
    }
    Some(b)
}

/// Bits of one packed entry (`format.rs`): 64 in version 1; in version 2 the bits of a bucket's
/// fingerprint span plus the id bits. `None` where the header leaves no sane width.
fn entry_width(version: u32, buckets: u64, id_bits: u32) -> Option<usize> {
    if version == 1 {
        return Some(64);
    }
    if buckets == 0 || !(1..=32).contains(&id_bits) {
        return None;
    }
    let span = (1u64 << 32).div_ceil(buckets) - 1;
    Some((u64::BITS - span.leading_zeros() + id_bits) as usize)
}
