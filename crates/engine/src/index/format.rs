//! The compact index file `pNNNN.idx`, byte by byte, and the code that reads and writes it.
//!
//! An entry is one `u64`, `fingerprint << 32 | record_id`, so sorting entries sorts them by
//! fingerprint, then id. Fingerprints are spread over `bucket_count` buckets by multiply-shift
//! (`fp * bucket_count >> 32`), which keeps buckets in fingerprint order: a file is one sorted run
//! cut into pages. Each bucket owns one page; the rare entries that do not fit their page go to a
//! small overflow section that is kept in RAM, so a lookup reads exactly one page.
//!
//! The layout, and how version 2 packs a page's entries: [`Header`].

use std::{
    fs::File,
    io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write},
    os::unix::fs::FileExt,
    path::{Path, PathBuf},
    sync::{Arc, OnceLock},
};

use super::resident::{IndexPages, Resident};
use crate::{layout, Error, Result};

/// Bytes in a page.
pub const PAGE: usize = 4096;
/// Bytes of a page that hold entries.
const ENTRY_BYTES: usize = PAGE - 8;
const MAGIC: &[u8; 8] = b"SHLTIDX\0";
/// The version every file is written in.
const VERSION: u32 = 2;
/// Average bucket fill a new file is sized for: 85% keeps overflow rare (a bucket of 661
/// expected entries overflows 778 at ~4.5 sigma) while costing 4096 / 661 = 6.2 bytes a record
/// (42-bit entries).
const TARGET_FILL: f64 = 0.85;

/// Packs a fingerprint and record id into one sortable entry.
pub fn entry(fingerprint: u32, id: u32) -> u64 {
    (u64::from(fingerprint) << 32) | u64::from(id)
}

/// The fingerprint of an entry.
pub fn entry_fingerprint(e: u64) -> u32 {
    (e >> 32) as u32
}

/// The record id of an entry.
pub fn entry_id(e: u64) -> u32 {
    e as u32
}

/// The range of entries with fingerprint `fp`.
pub fn fingerprint_range(fp: u32) -> std::ops::RangeInclusive<u64> {
    entry(fp, 0)..=entry(fp, u32::MAX)
}

fn bucket_of(fp: u32, buckets: u64) -> u64 {
    (u64::from(fp) * buckets) >> 32
}

/// The first fingerprint of bucket `b` of `buckets`: `ceil(b * 2^32 / buckets)`.
fn bucket_start(b: u64, buckets: u64) -> u64 {
    ((u128::from(b) << 32).div_ceil(u128::from(buckets))) as u64
}

/// Bits that hold any value up to `max`.
fn bits_for(max: u64) -> u32 {
    u64::BITS - max.leading_zeros()
}

/// Bits of a fingerprint's offset within its bucket: a bucket spans at most
/// `ceil(2^32 / buckets)` fingerprints.
fn offset_bits(buckets: u64) -> u32 {
    bits_for((1u64 << 32).div_ceil(buckets.max(1)) - 1)
}

/// Bits of record id a version-2 file of `watermark` packs.
fn id_bits_for(watermark: u64) -> u32 {
    bits_for(watermark).clamp(1, 32)
}

/// Entries a page of `width`-bit entries holds.
fn capacity(width: u32) -> usize {
    ENTRY_BYTES * 8 / width as usize
}

/// The bucket count a version-2 file of `entries` entries up to id `watermark` is written with:
/// the fewest buckets at which the average fill is at most [`TARGET_FILL`]. (More buckets mean
/// narrower offsets and so roomier pages: three rounds settle it, and the last round's count
/// is never below what its own entry width needs.)
pub fn buckets_for(entries: u64, watermark: u64) -> u64 {
    let id_bits = id_bits_for(watermark);
    let needed = |buckets: u64| {
        let width = offset_bits(buckets) + id_bits;
        ((entries as f64 / (capacity(width) as f64 * TARGET_FILL)).ceil() as u64).max(1)
    };
    needed(needed(needed(1)))
}

/// The fixed facts of a file, from its header.
///
/// Format version 2 packs a page's entries: each is `width` bits, the fingerprint's offset from
/// its bucket's first fingerprint above `id_bits` bits of record id. A bucket spans
/// `ceil(2^32 / bucket_count)` fingerprints, so the bucket itself says the fingerprint's top bits,
/// and `id_bits` is the width of the file's watermark: 42 bits an entry for a partition of 10^5
/// records instead of 64, 35% less of the index to hold in RAM. Packed values sort as their
/// entries do, so a page is still one sorted run. Version 1 (each entry whole, 64 bits) is read
/// as well; every file written is version 2.
///
/// ```text
/// page 0: header (4096 bytes)
///   0..8    magic  b"SHLTIDX\0"
///   8..12   format version (u32) = 2
///   12..16  page size (u32) = 4096
///   16..24  bucket count (u64)
///   24..32  watermark: every record id <= this is covered (u64)
///   32..40  entry count, pages + overflow (u64)
///   40..48  overflow entry count (u64)
///   48..52  fingerprint bits (u32)
///   52..56  id bits (u32, 1..=32)                    [version 1: crc32c of bytes 0..52]
///   56..60  crc32c of bytes 0..56
///   60..    zero
/// page 1 + b: bucket b (4096 bytes)
///   0..2    entry count n (u16, <= capacity = 4088 * 8 / width)
///   2..4    zero
///   4..8    crc32c of bytes 0..4 followed by bytes 8..8+ceil(n * width / 8)
///   8..     n packed entries, sorted, bit i of entry k at bit k * width + i (little-endian);
///           the rest zero
/// after the last page: overflow entries (whole u64 each, sorted), then crc32c of them (u32)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The format version the file was written in (1 or 2).
    pub version: u32,
    /// Bucket pages in the file.
    pub buckets: u64,
    /// Every record id up to this one is covered by the file.
    pub watermark: u64,
    /// Entries in pages plus overflow.
    pub entries: u64,
    /// Entries in the overflow section.
    pub overflow: u64,
    /// Fingerprint width of the entries.
    pub fingerprint_bits: u32,
    /// Bits of record id in a packed entry (32 in version 1).
    pub id_bits: u32,
}

impl Header {
    fn encode(&self) -> [u8; PAGE] {
        let mut page = [0u8; PAGE];
        page[0..8].copy_from_slice(MAGIC);
        page[8..12].copy_from_slice(&self.version.to_le_bytes());
        page[12..16].copy_from_slice(&(PAGE as u32).to_le_bytes());
        page[16..24].copy_from_slice(&self.buckets.to_le_bytes());
        page[24..32].copy_from_slice(&self.watermark.to_le_bytes());
        page[32..40].copy_from_slice(&self.entries.to_le_bytes());
        page[40..48].copy_from_slice(&self.overflow.to_le_bytes());
        page[48..52].copy_from_slice(&self.fingerprint_bits.to_le_bytes());
        let crc_at = if self.version == 1 {
            52
        } else {
            page[52..56].copy_from_slice(&self.id_bits.to_le_bytes());
            56
        };
        let crc = crc32c::crc32c(&page[0..crc_at]);
        page[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
        page
    }

    fn decode(page: &[u8; PAGE]) -> std::result::Result<Self, String> {
        if &page[0..8] != MAGIC {
            return Err("bad magic: not a shardlite index file".into());
        }
        let version = u32_at(page, 8);
        let crc_at = match version {
            1 => 52,
            2 => 56,
            _ => return Err(format!("format version {version}, this build reads 1 and {VERSION}")),
        };
        if u32_at(page, crc_at) != crc32c::crc32c(&page[0..crc_at]) {
            return Err("header checksum mismatch".into());
        }
        if u32_at(page, 12) as usize != PAGE {
            return Err(format!("page size {}, expected {PAGE}", u32_at(page, 12)));
        }
        let buckets = u64_at(page, 16);
        if buckets == 0 {
            // Files are written with at least one bucket page; a lookup would read past them.
            return Err("no bucket pages".into());
        }
        let id_bits = if version == 1 { 32 } else { u32_at(page, 52) };
        if !(1..=32).contains(&id_bits) {
            return Err(format!("{id_bits} id bits, expected 1..=32"));
        }
        Ok(Self {
            version,
            buckets,
            watermark: u64_at(page, 24),
            entries: u64_at(page, 32),
            overflow: u64_at(page, 40),
            fingerprint_bits: u32_at(page, 48),
            id_bits,
        })
    }

    /// The length the header implies; `None` if it does not fit a `u64` (a damaged header).
    fn file_len(&self) -> Option<u64> {
        let pages = self.buckets.checked_add(1)?.checked_mul(PAGE as u64)?;
        pages.checked_add(self.overflow.checked_mul(8)?)?.checked_add(4)
    }

    /// Bits of one packed entry.
    pub fn width(&self) -> u32 {
        if self.version == 1 {
            64
        } else {
            offset_bits(self.buckets) + self.id_bits
        }
    }

    /// Entries one bucket page holds.
    pub fn capacity(&self) -> usize {
        capacity(self.width())
    }

    /// `e` as bucket `bucket` packs it; `None` if its id does not fit the file's id bits.
    fn pack(&self, e: u64, bucket: u64) -> Option<u64> {
        if self.version == 1 {
            return Some(e);
        }
        let id = u64::from(entry_id(e));
        let offset = u64::from(entry_fingerprint(e)) - bucket_start(bucket, self.buckets);
        (id >> self.id_bits == 0).then_some((offset << self.id_bits) | id)
    }

    /// The entry packed as `v` in bucket `bucket`; `None` if it names a fingerprint past 32 bits
    /// (a page written wrong).
    fn unpack(&self, v: u64, bucket: u64) -> Option<u64> {
        if self.version == 1 {
            return Some(v);
        }
        let id = v & ((1u64 << self.id_bits) - 1);
        let fp = bucket_start(bucket, self.buckets) + (v >> self.id_bits);
        let fp = u32::try_from(fp).ok()?;
        Some(entry(fp, id as u32))
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The `width` bits (at most 64) at bit `at` of `bytes`, little-endian.
fn bits_at(bytes: &[u8], at: usize, width: u32) -> u64 {
    let start = at / 8;
    let end = (start + 9).min(bytes.len());
    let mut buf = [0u8; 16];
    buf[..end - start].copy_from_slice(&bytes[start..end]);
    let v = u128::from_le_bytes(buf) >> (at % 8);
    (v & ((1u128 << width) - 1)) as u64
}

/// Writes `v` as the `width` bits at bit `at` of `bytes` (which are zero there).
fn put_bits(bytes: &mut [u8], at: usize, width: u32, v: u64) {
    let shifted = u128::from(v) << (at % 8);
    let start = at / 8;
    let len = (at % 8 + width as usize).div_ceil(8);
    for (k, byte) in bytes[start..start + len].iter_mut().enumerate() {
        *byte |= (shifted >> (8 * k)) as u8;
    }
}

/// Bytes that `n` entries of `width` bits take.
fn packed_len(n: usize, width: u32) -> usize {
    (n * width as usize).div_ceil(8)
}

fn page_crc(page: &[u8; PAGE], n: usize, width: u32) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&page[0..4]), &page[8..8 + packed_len(n, width)])
}

/// A bucket page whose count and checksum were checked: its packed entries, in order.
struct Page<'a> {
    header: &'a Header,
    bucket: u64,
    bytes: &'a [u8],
    n: usize,
}

impl<'a> Page<'a> {
    fn check(header: &'a Header, bucket: u64, page: &'a [u8; PAGE]) -> std::result::Result<Self, String> {
        let checked = Self::counted(header, bucket, page)?;
        if u32_at(page, 4) != page_crc(page, checked.n, header.width()) {
            return Err("page checksum mismatch".into());
        }
        Ok(checked)
    }

    /// The page with only its count checked: for a page held in RAM, whose checksum was
    /// checked when it was read in.
    fn counted(header: &'a Header, bucket: u64, page: &'a [u8; PAGE]) -> std::result::Result<Self, String> {
        let n = usize::from(u16::from_le_bytes([page[0], page[1]]));
        let capacity = header.capacity();
        if n > capacity {
            return Err(format!("page entry count {n} exceeds {capacity}"));
        }
        Ok(Self { header, bucket, bytes: &page[8..], n })
    }

    fn packed(&self, k: usize) -> u64 {
        let width = self.header.width();
        bits_at(self.bytes, k * width as usize, width)
    }

    /// Ids of the entries with fingerprint `fp` (which must belong to this bucket), by binary
    /// search: packed values sort as entries do.
    fn ids_of(&self, fp: u32, out: &mut Vec<u32>) {
        let Some(low) = self.header.pack(entry(fp, 0), self.bucket) else { return };
        let high = self.header.pack(entry(fp, u32::MAX >> (32 - self.header.id_bits)), self.bucket).unwrap_or(low);
        let (mut lo, mut hi) = (0, self.n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.packed(mid) < low {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        out.extend(
            (lo..self.n)
                .map(|k| self.packed(k))
                .take_while(|v| *v <= high)
                .filter_map(|v| self.header.unpack(v, self.bucket))
                .map(entry_id),
        );
    }

    /// Every entry, unpacked; `None` for an entry whose fingerprint leaves 32 bits.
    fn entries(&self) -> impl Iterator<Item = Option<u64>> + '_ {
        (0..self.n).map(|k| self.header.unpack(self.packed(k), self.bucket))
    }
}

/// Whether `entries` are strictly ascending, as every part of a file must be (a checksum
/// proves a page is what was written, not that it was written right).
fn ascending(entries: &[u64]) -> bool {
    entries.windows(2).all(|w| w[0] < w[1])
}

/// An open index file (or the empty index of a partition that has none yet).
#[derive(Debug)]
pub struct MainIndex {
    path: PathBuf,
    file: Option<File>,
    header: Header,
    overflow: Vec<u64>,
    /// The bucket pages held in RAM, all or the first ones (or none).
    resident: OnceLock<Resident>,
}

impl MainIndex {
    /// The index of a partition with no file: covers nothing.
    pub fn empty(path: &Path, fingerprint_bits: u32) -> Self {
        let header = Header {
            version: VERSION,
            buckets: 0,
            watermark: 0,
            entries: 0,
            overflow: 0,
            fingerprint_bits,
            id_bits: 1,
        };
        Self { path: path.to_owned(), file: None, header, overflow: Vec::new(), resident: OnceLock::new() }
    }

    /// Opens a file, checking its header, length and overflow section (pages are checked as
    /// they are read). `Err(Corrupt)` means the file must be rebuilt.
    pub fn open(path: &Path) -> Result<Self> {
        let corrupt = |what: String| Error::Corrupt { path: path.to_owned(), what };
        let mut file = File::open(path).map_err(|e| Error::io(path, &e))?;
        let len = file.metadata().map_err(|e| Error::io(path, &e))?.len();
        let mut page = [0u8; PAGE];
        if len < PAGE as u64 {
            return Err(corrupt(format!("truncated: {len} bytes")));
        }
        file.read_exact(&mut page).map_err(|e| Error::io(path, &e))?;
        let header = Header::decode(&page).map_err(corrupt)?;
        if header.file_len() != Some(len) {
            return Err(corrupt(format!("length {len}, header implies {:?}", header.file_len())));
        }
        // Merges size the next file from the entry count: it must be what the file can hold.
        // (No overflow: the length check bounds both counts.)
        let most = header.buckets * header.capacity() as u64 + header.overflow;
        if header.entries > most || header.entries < header.overflow {
            return Err(corrupt(format!(
                "{} entries in a file that holds {}..={most}",
                header.entries, header.overflow
            )));
        }
        let mut raw = vec![0u8; header.overflow as usize * 8 + 4];
        file.seek(SeekFrom::Start((1 + header.buckets) * PAGE as u64))
            .and_then(|_| file.read_exact(&mut raw))
            .map_err(|e| Error::io(path, &e))?;
        let (body, crc) = raw.split_at(raw.len() - 4);
        if u32_at(crc, 0) != crc32c::crc32c(body) {
            return Err(corrupt("overflow checksum mismatch".into()));
        }
        let overflow: Vec<u64> =
            body.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
        // Lookups binary-search the overflow: out of order, they would miss entries.
        if !ascending(&overflow) {
            return Err(corrupt("overflow entries out of order".into()));
        }
        Ok(Self { path: path.to_owned(), file: Some(file), header, overflow, resident: OnceLock::new() })
    }

    /// The file's header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The path of the file (which may not exist for an empty index).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file as it was opened (`None` for an empty index without one): it never changes
    /// (a merge writes a new file), so it may be read whole at any time.
    pub fn open_file(&self) -> Option<&File> {
        self.file.as_ref()
    }

    /// Bytes the file takes on disk.
    pub fn file_bytes(&self) -> u64 {
        if self.file.is_some() {
            // Checked at open: the header's length is the file's.
            self.header.file_len().unwrap_or(0)
        } else {
            0
        }
    }

    /// Reads the file's bucket pages into RAM, as many as `part` has room for, unless they are
    /// already there. Lookups meanwhile read the file.
    /// Each page's checksum is checked as it comes in; a file with a damaged page is not held
    /// (its lookups read the file and report the damage).
    pub fn keep_in_ram(&self, part: &Arc<IndexPages>) {
        let Some(file) = &self.file else { return };
        if self.resident.get().is_none() {
            let Some(resident) = Resident::load(file, self.header.buckets, PAGE, part) else { return };
            let intact = (0..self.header.buckets)
                .map_while(|b| resident.page(b).map(|p| (b, p)))
                .all(|(b, p)| <&[u8; PAGE]>::try_from(p).is_ok_and(|page| Page::check(&self.header, b, page).is_ok()));
            if intact {
                // A concurrent caller's copy may have won: this one is dropped, its bytes given back.
                let _ = self.resident.set(resident);
            }
        }
    }

    /// Bytes of the file's pages held in RAM.
    pub fn resident_bytes(&self) -> u64 {
        self.resident.get().map_or(0, Resident::bytes)
    }

    /// Appends the ids of entries with fingerprint `fp` to `out`: one page, from RAM or read.
    pub fn lookup(&self, fp: u32, out: &mut Vec<u32>) -> Result<()> {
        let Some(file) = &self.file else { return Ok(()) };
        let bucket = bucket_of(fp, self.header.buckets);
        let mut read = [0u8; PAGE];
        let held = self.resident.get().and_then(|r| r.page(bucket)).and_then(|p| <&[u8; PAGE]>::try_from(p).ok());
        let page = match held {
            Some(page) => Page::counted(&self.header, bucket, page),
            None => {
                file.read_exact_at(&mut read, (1 + bucket) * PAGE as u64).map_err(|e| Error::io(&self.path, &e))?;
                Page::check(&self.header, bucket, &read)
            }
        };
        page.map_err(|what| Error::Corrupt { path: self.path.clone(), what: format!("bucket {bucket}: {what}") })?
            .ids_of(fp, out);
        let range = fingerprint_range(fp);
        let start = self.overflow.partition_point(|e| *e < *range.start());
        out.extend(self.overflow[start..].iter().take_while(|e| range.contains(e)).map(|e| entry_id(*e)));
        Ok(())
    }

    /// Asks the kernel to start reading the page of `fp` in the background, so that a later
    /// [`MainIndex::lookup`] finds it cached: the writer prefetches a whole batch's pages at
    /// once, turning serial random reads into parallel ones.
    pub fn prefetch(&self, fp: u32) {
        let Some(file) = &self.file else { return };
        let bucket = bucket_of(fp, self.header.buckets);
        if self.resident.get().and_then(|r| r.page(bucket)).is_some() {
            return;
        }
        let offset = (1 + bucket) * PAGE as u64;
        // Advice only: a failure costs the prefetch, never correctness.
        let _ = nix::fcntl::posix_fadvise(
            file,
            offset as i64,
            PAGE as i64,
            nix::fcntl::PosixFadviseAdvice::POSIX_FADV_WILLNEED,
        );
    }

    /// Every entry in sorted order, read sequentially; each page's checksum is checked.
    pub fn scan(&self) -> Result<Scan<'_>> {
        let reader = match &self.file {
            Some(file) => {
                let mut f = file.try_clone().map_err(|e| Error::io(&self.path, &e))?;
                f.seek(SeekFrom::Start(PAGE as u64)).map_err(|e| Error::io(&self.path, &e))?;
                Some(BufReader::with_capacity(1 << 20, f))
            }
            None => None,
        };
        Ok(Scan { index: self, reader, bucket: 0, page: Vec::new().into_iter(), overflow: 0 })
    }
}

/// A sequential pass over an index file's entries, in sorted order.
pub struct Scan<'a> {
    index: &'a MainIndex,
    reader: Option<BufReader<File>>,
    bucket: u64,
    page: std::vec::IntoIter<u64>,
    overflow: usize,
}

impl Scan<'_> {
    fn refill(&mut self) -> Result<bool> {
        let Some(reader) = &mut self.reader else { return Ok(false) };
        while self.bucket < self.index.header.buckets {
            let mut page = [0u8; PAGE];
            reader.read_exact(&mut page).map_err(|e| Error::io(&self.index.path, &e))?;
            let corrupt = |what: String| Error::Corrupt {
                path: self.index.path.clone(),
                what: format!("bucket {}: {what}", self.bucket),
            };
            let page = Page::check(&self.index.header, self.bucket, &page).map_err(corrupt)?;
            let entries: Option<Vec<u64>> = page.entries().collect();
            let entries = entries.ok_or_else(|| corrupt("a fingerprint beyond 32 bits".into()))?;
            let buckets = self.index.header.buckets;
            if !ascending(&entries) || entries.iter().any(|e| bucket_of(entry_fingerprint(*e), buckets) != self.bucket)
            {
                // A merge writing these would misplace them: refuse, so the index is rebuilt.
                return Err(Error::Corrupt {
                    path: self.index.path.clone(),
                    what: format!("bucket {}: entries out of order or in the wrong bucket", self.bucket),
                });
            }
            self.bucket += 1;
            if !entries.is_empty() {
                self.page = entries.into_iter();
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn next_from_pages(&mut self) -> Result<Option<u64>> {
        if let Some(e) = self.page.as_slice().first().copied() {
            return Ok(Some(e));
        }
        Ok(if self.refill()? { self.page.as_slice().first().copied() } else { None })
    }
}

impl Iterator for Scan<'_> {
    type Item = Result<u64>;

    fn next(&mut self) -> Option<Result<u64>> {
        let from_pages = match self.next_from_pages() {
            Ok(e) => e,
            Err(err) => {
                self.reader = None;
                self.page = Vec::new().into_iter();
                return Some(Err(err));
            }
        };
        let from_overflow = self.index.overflow.get(self.overflow).copied();
        match (from_pages, from_overflow) {
            (Some(p), Some(o)) if o < p => {
                self.overflow += 1;
                Some(Ok(o))
            }
            (Some(_), _) => self.page.next().map(Ok),
            (None, Some(o)) => {
                self.overflow += 1;
                Some(Ok(o))
            }
            (None, None) => None,
        }
    }
}

/// Writes a new index file at `path` (atomically) from `entries` in ascending order, every id
/// at most `watermark`. `expected` sizes the bucket count; the true count may be lower
/// (dropped entries).
pub fn write(
    path: &Path,
    expected: u64,
    watermark: u64,
    fingerprint_bits: u32,
    entries: impl Iterator<Item = Result<u64>>,
) -> Result<Header> {
    let header = Header {
        version: VERSION,
        buckets: buckets_for(expected, watermark),
        watermark,
        entries: 0,
        overflow: 0,
        fingerprint_bits,
        id_bits: id_bits_for(watermark),
    };
    write_as(path, header, entries)
}

/// Writes the file `header` describes (its counts filled in as the entries come).
fn write_as(path: &Path, mut header: Header, entries: impl Iterator<Item = Result<u64>>) -> Result<Header> {
    let mut failure = None;
    layout::replace_file(path, |file| {
        let out = BufWriter::with_capacity(1 << 20, &mut *file);
        let mut pages =
            PageWriter { out, header, bucket: 0, page: Vec::with_capacity(header.capacity()), overflow: Vec::new() };
        pages.out.write_all(&[0u8; PAGE])?;
        let mut last = None;
        for e in entries {
            let e = match e {
                Ok(e) => e,
                Err(err) => {
                    failure = Some(err);
                    return Err(std::io::Error::other("entry source failed"));
                }
            };
            debug_assert!(last < Some(e), "entries must be strictly ascending");
            last = Some(e);
            if u64::from(entry_id(e)) > header.watermark {
                failure = Some(Error::Corrupt {
                    path: path.to_owned(),
                    what: format!("entry id {} above the watermark {}", entry_id(e), header.watermark),
                });
                return Err(std::io::Error::other("entry above the watermark"));
            }
            pages.push(e)?;
            header.entries += 1;
        }
        pages.finish()?;
        header.overflow = pages.overflow.len() as u64;
        let mut body = Vec::with_capacity(pages.overflow.len() * 8);
        for e in &pages.overflow {
            body.extend_from_slice(&e.to_le_bytes());
        }
        pages.out.write_all(&body)?;
        pages.out.write_all(&crc32c::crc32c(&body).to_le_bytes())?;
        pages.out.flush()?;
        drop(pages);
        file.seek(SeekFrom::Start(0))?;
        file.write_all(&header.encode())
    })
    .map_err(|err| failure.take().unwrap_or(err))?;
    Ok(header)
}

struct PageWriter<W: Write> {
    out: W,
    header: Header,
    bucket: u64,
    page: Vec<u64>,
    overflow: Vec<u64>,
}

impl<W: Write> PageWriter<W> {
    fn push(&mut self, e: u64) -> std::io::Result<()> {
        let bucket = bucket_of(entry_fingerprint(e), self.header.buckets);
        while self.bucket < bucket {
            self.flush_page()?;
        }
        if self.page.len() < self.header.capacity() {
            self.page.push(e);
        } else {
            self.overflow.push(e);
        }
        Ok(())
    }

    fn flush_page(&mut self) -> std::io::Result<()> {
        let mut page = [0u8; PAGE];
        let n = self.page.len();
        page[0..2].copy_from_slice(&(n as u16).to_le_bytes());
        let width = self.header.width();
        for (k, e) in self.page.iter().enumerate() {
            // Ids were checked against the watermark, whose width the header packs.
            let v = self.header.pack(*e, self.bucket).expect("an id within the watermark");
            put_bits(&mut page[8..], k * width as usize, width, v);
        }
        let crc = page_crc(&page, n, width);
        page[4..8].copy_from_slice(&crc.to_le_bytes());
        self.page.clear();
        self.bucket += 1;
        self.out.write_all(&page)
    }

    fn finish(&mut self) -> std::io::Result<()> {
        while self.bucket < self.header.buckets {
            self.flush_page()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_entries(path: &Path, entries: &[u64], watermark: u64) -> Header {
        write(path, entries.len() as u64, watermark, 32, entries.iter().map(|e| Ok(*e))).unwrap()
    }

    #[test]
    fn lookups_and_scans_return_what_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.idx");
        let mut entries: Vec<u64> = (0..20_000u32).map(|i| entry(i.wrapping_mul(2_654_435_761), i)).collect();
        entries.push(entry(7, 100_000));
        entries.push(entry(7, 100_001));
        entries.sort_unstable();
        let header = write_entries(&path, &entries, 100_001);
        assert_eq!(header.entries, entries.len() as u64);

        let index = MainIndex::open(&path).unwrap();
        assert_eq!(index.header(), &header);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), index.file_bytes());
        let scanned: Vec<u64> = index.scan().unwrap().map(|e| e.unwrap()).collect();
        assert_eq!(scanned, entries);
        let mut ids = Vec::new();
        index.lookup(7, &mut ids).unwrap();
        assert!(ids.contains(&100_000) && ids.contains(&100_001), "{ids:?}");
        ids.clear();
        index.lookup(2_654_435_761u32.wrapping_mul(5), &mut ids).unwrap();
        assert_eq!(ids, vec![5]);
    }

    #[test]
    fn crowded_buckets_spill_to_the_overflow_section() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.idx");
        // 2,000 entries on one fingerprint: one bucket, most of them in overflow.
        let entries: Vec<u64> = (0..2_000u32).map(|i| entry(0xABCD_0000, i)).collect();
        let header = write_entries(&path, &entries, 2_000);
        assert_eq!(header.overflow, 2_000 - header.capacity() as u64);
        let index = MainIndex::open(&path).unwrap();
        let mut ids = Vec::new();
        index.lookup(0xABCD_0000, &mut ids).unwrap();
        ids.sort_unstable();
        assert_eq!(ids, (0..2_000).collect::<Vec<u32>>());
        let scanned: Vec<u64> = index.scan().unwrap().map(|e| e.unwrap()).collect();
        assert_eq!(scanned, entries);
    }

    #[test]
    fn bytes_per_entry_stay_under_six_and_a_half() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.idx");
        let n = 200_000u32;
        let mut entries: Vec<u64> =
            (0..n).map(|i| entry(xxhash_rust::xxh3::xxh3_64(&i.to_le_bytes()) as u32, i)).collect();
        entries.sort_unstable();
        write_entries(&path, &entries, u64::from(n));
        let bytes = std::fs::metadata(&path).unwrap().len() as f64;
        assert!(bytes / f64::from(n) <= 6.5, "{} bytes per entry", bytes / f64::from(n));
    }

    /// Files of format version 1 (whole 64-bit entries), as earlier builds wrote them, still
    /// answer lookups and scans.
    #[test]
    fn version_1_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.idx");
        let mut entries: Vec<u64> = (0..20_000u32).map(|i| entry(i.wrapping_mul(2_654_435_761), i)).collect();
        entries.extend((20_000..21_000u32).map(|i| entry(0x1234_5678, i)));
        entries.sort_unstable();
        let v1 = Header {
            version: 1,
            buckets: 47,
            watermark: 21_000,
            entries: 0,
            overflow: 0,
            fingerprint_bits: 32,
            id_bits: 32,
        };
        let header = write_as(&path, v1, entries.iter().map(|e| Ok(*e))).unwrap();
        assert_eq!(header.capacity(), 511);
        assert!(header.overflow > 0, "the crowded fingerprint spilled");
        let index = MainIndex::open(&path).unwrap();
        assert_eq!(index.header(), &header);
        let scanned: Vec<u64> = index.scan().unwrap().map(|e| e.unwrap()).collect();
        assert_eq!(scanned, entries);
        let mut ids = Vec::new();
        index.lookup(2_654_435_761u32.wrapping_mul(77), &mut ids).unwrap();
        assert_eq!(ids, vec![77]);
        ids.clear();
        index.lookup(0x1234_5678, &mut ids).unwrap();
        assert_eq!(ids.len(), 1_000);
    }

    /// Every width a file can pack: one bucket (32-bit offsets) with 32-bit ids is 64 bits an
    /// entry; many buckets and small ids are few; narrow fingerprints leave low bits zero.
    #[test]
    fn entries_round_trip_at_every_width() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.idx");
        for (count, watermark, mask) in
            [(3u32, u64::from(u32::MAX), u32::MAX), (5_000, 5_000, u32::MAX), (5_000, 5_000, 0xFFF0_0000)]
        {
            let mut entries: Vec<u64> = (0..count)
                .map(|i| {
                    let id = if watermark == u64::from(u32::MAX) { u32::MAX - i } else { i };
                    entry(xxhash_rust::xxh3::xxh3_64(&i.to_le_bytes()) as u32 & mask, id)
                })
                .collect();
            entries.extend([entry(0, 1), entry(mask, 2)]);
            entries.sort_unstable();
            entries.dedup();
            let header = write_entries(&path, &entries, watermark);
            let index = MainIndex::open(&path).unwrap();
            let scanned: Vec<u64> = index.scan().unwrap().map(|e| e.unwrap()).collect();
            assert_eq!(scanned, entries, "{header:?}");
            for e in &entries {
                let mut ids = Vec::new();
                index.lookup(entry_fingerprint(*e), &mut ids).unwrap();
                assert!(ids.contains(&entry_id(*e)), "{e:#x} lost in {header:?}");
                assert!(ids.iter().all(|id| entries.contains(&entry(entry_fingerprint(*e), *id))), "{ids:?}");
            }
        }
    }

    #[test]
    fn an_id_above_the_watermark_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.idx");
        let err = write(&path, 2, 10, 32, [Ok(entry(1, 3)), Ok(entry(2, 11))].into_iter()).unwrap_err();
        assert!(err.to_string().contains("above the watermark"), "{err}");
        assert!(!path.exists());
    }

    #[test]
    fn damage_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.idx");
        let entries: Vec<u64> = (0..1_000u32).map(|i| entry(i << 20, i)).collect();
        write_entries(&path, &entries, 1_000);
        let good = std::fs::read(&path).unwrap();

        std::fs::write(&path, &good[..good.len() - 100]).unwrap();
        assert!(matches!(MainIndex::open(&path), Err(Error::Corrupt { .. })));

        let mut bad = good.clone();
        bad[30] ^= 1;
        std::fs::write(&path, &bad).unwrap();
        assert!(matches!(MainIndex::open(&path), Err(Error::Corrupt { .. })));

        let mut bad = good.clone();
        bad[PAGE + 20] ^= 0x40;
        std::fs::write(&path, &bad).unwrap();
        let index = MainIndex::open(&path).unwrap();
        let mut ids = Vec::new();
        assert!(matches!(index.lookup(0, &mut ids), Err(Error::Corrupt { .. })));
        assert!(index.scan().unwrap().any(|e| e.is_err()));
    }

    /// Pages held in RAM are checked as they are read in: a damaged page keeps the file out of
    /// RAM, and its lookup reports the damage as a lookup from the file does.
    #[test]
    fn a_damaged_page_is_not_held_in_ram() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.idx");
        let entries: Vec<u64> = (0..1_000u32).map(|i| entry(i << 20, i)).collect();
        write_entries(&path, &entries, 1_000);
        let part = IndexPages::new(1 << 20);
        let index = MainIndex::open(&path).unwrap();
        index.keep_in_ram(&part);
        assert!(index.resident_bytes() > 0);
        let mut bad = std::fs::read(&path).unwrap();
        bad[PAGE + 20] ^= 0x40;
        std::fs::write(&path, &bad).unwrap();
        let damaged = MainIndex::open(&path).unwrap();
        damaged.keep_in_ram(&part);
        assert_eq!(damaged.resident_bytes(), 0);
        let mut ids = Vec::new();
        assert!(matches!(damaged.lookup(0, &mut ids), Err(Error::Corrupt { .. })));
    }

    /// Pages and overflow whose checksums hold but whose entries are out of order (a file
    /// written wrong, not damaged later) are refused: a scan, and so a merge, fails with
    /// `Corrupt` rather than write a file whose lookups miss entries.
    #[test]
    fn entries_out_of_order_are_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.idx");
        let entries: Vec<u64> = (0..1_000u32).map(|i| entry(i << 20, i)).collect();
        let header = write_entries(&path, &entries, 1_000);
        let good = std::fs::read(&path).unwrap();

        let mut bad = good.clone();
        let page: &mut [u8; PAGE] = (&mut bad[PAGE..2 * PAGE]).try_into().unwrap();
        let n = usize::from(u16::from_le_bytes([page[0], page[1]]));
        assert!(n >= 2, "the first bucket holds entries");
        let width = header.width();
        let mut packed: Vec<u64> = (0..n).map(|k| bits_at(&page[8..], k * width as usize, width)).collect();
        packed.swap(0, 1);
        page[8..].fill(0);
        for (k, v) in packed.into_iter().enumerate() {
            put_bits(&mut page[8..], k * width as usize, width, v);
        }
        let crc = page_crc(page, n, width);
        page[4..8].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&path, &bad).unwrap();
        let index = MainIndex::open(&path).unwrap();
        assert!(matches!(index.scan().unwrap().find(|e| e.is_err()), Some(Err(Error::Corrupt { .. }))));

        // An overflow section out of order: refused at open.
        let pages_end = (1 + usize::try_from(header.buckets).unwrap()) * PAGE;
        let mut overflow: Vec<u64> = good[pages_end..good.len() - 4]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert!(overflow.len() >= 2, "crowded buckets spilled");
        overflow.swap(0, 1);
        let body: Vec<u8> = overflow.iter().flat_map(|e| e.to_le_bytes()).collect();
        let mut bad = good[..pages_end].to_vec();
        bad.extend_from_slice(&body);
        bad.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        std::fs::write(&path, &bad).unwrap();
        let err = MainIndex::open(&path).unwrap_err();
        assert!(err.to_string().contains("out of order"), "{err}");
    }

    /// Found by the `index_file` fuzz target: sizes whose implied length overflowed a `u64`
    /// panicked (with overflow checks) or wrapped, instead of being refused.
    #[test]
    fn a_header_claiming_huge_sizes_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.idx");
        for (buckets, overflow) in [(u64::MAX, 0), (u64::MAX / PAGE as u64, 0), (0, u64::MAX / 8), (1, u64::MAX / 16)] {
            let header = Header {
                version: VERSION,
                buckets,
                watermark: 0,
                entries: overflow,
                overflow,
                fingerprint_bits: 32,
                id_bits: 32,
            };
            std::fs::write(&path, header.encode()).unwrap();
            assert!(matches!(MainIndex::open(&path), Err(Error::Corrupt { .. })), "{header:?}");
        }
    }

    /// Found by the `index_file` fuzz target: an entry count the file cannot hold was accepted,
    /// and the next merge would have sized its file (and its bucket count) from it.
    #[test]
    fn a_header_claiming_more_entries_than_fit_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.idx");
        let entries: Vec<u64> = (0..1_000u32).map(|i| entry(0xABCD_0000, i)).collect();
        let header = write_entries(&path, &entries, 1_000);
        let good = std::fs::read(&path).unwrap();
        let most = header.buckets * header.capacity() as u64 + header.overflow;
        for claimed in [most + 1, 26_388_279_067_624, header.overflow - 1] {
            let mut bad = good.clone();
            bad[..PAGE].copy_from_slice(&Header { entries: claimed, ..header }.encode());
            std::fs::write(&path, &bad).unwrap();
            assert!(matches!(MainIndex::open(&path), Err(Error::Corrupt { .. })), "{claimed} entries");
        }
    }

    /// Found while reviewing what the `index_file` fuzz target checks (which had not reached it):
    /// a header of zero buckets opened, and every lookup then read past the pages (an I/O error,
    /// not `Corrupt`).
    #[test]
    fn a_header_of_zero_buckets_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.idx");
        let header = *MainIndex::empty(&path, 32).header();
        let mut bytes = header.encode().to_vec();
        bytes.extend_from_slice(&crc32c::crc32c(&[]).to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(MainIndex::open(&path), Err(Error::Corrupt { .. })));
    }

    #[test]
    fn a_failing_source_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.idx");
        let source = [Ok(1u64), Err(Error::Sqlite("boom".into()))];
        let err = write(&path, 2, 2, 32, source.into_iter()).unwrap_err();
        assert_eq!(err, Error::Sqlite("boom".into()));
        assert!(!path.exists());
        assert!(!layout::tmp_path(&path).exists());
    }
}
