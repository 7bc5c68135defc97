//! The index file reader against damage, as a property test (the stable-toolchain stand-in for a
//! fuzz target): a valid index file with random bytes flipped, or cut short, either fails to open
//! with a typed error, or opens and then answers every lookup with the right ids or a `Corrupt`
//! error — never a wrong answer, never a panic. A scan likewise yields the entries in order or
//! an error.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use shardlite_engine::{
    index::{entry, entry_id, format, MainIndex},
    Error,
};

/// A valid file's entries: spread fingerprints, a crowded one (overflow), ids in order.
fn entries() -> Vec<u64> {
    let mut entries: Vec<u64> = (0..3_000u32).map(|i| entry(i.wrapping_mul(2_654_435_761), i)).collect();
    entries.extend((3_000..3_600u32).map(|i| entry(0x1234_5678, i)));
    entries.sort_unstable();
    entries
}

fn valid_file(dir: &std::path::Path) -> (std::path::PathBuf, Vec<u8>) {
    let path = dir.join("p0000.idx");
    let entries = entries();
    format::write(&path, entries.len() as u64, 3_600, 32, entries.iter().map(|e| Ok(*e))).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    (path, bytes)
}

fn check_damaged(path: &std::path::Path) {
    let index = match MainIndex::open(path) {
        Ok(index) => index,
        Err(Error::Corrupt { .. }) => return,
        Err(other) => panic!("opening a damaged file gave {other:?}"),
    };
    let mut ids = Vec::new();
    for e in entries() {
        ids.clear();
        match index.lookup((e >> 32) as u32, &mut ids) {
            Ok(()) => assert!(ids.contains(&entry_id(e)), "a lookup lost entry {e:#x}"),
            Err(Error::Corrupt { .. }) => {}
            Err(other) => panic!("a lookup gave {other:?}"),
        }
    }
    let mut last = None;
    for e in index.scan().unwrap() {
        match e {
            Ok(e) => {
                assert!(last < Some(e), "a scan went out of order");
                last = Some(e);
            }
            Err(Error::Corrupt { .. }) => break,
            Err(other) => panic!("a scan gave {other:?}"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn flipped_bytes_are_detected_or_harmless(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..8)
    ) {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut bytes) = valid_file(dir.path());
        for (at, mask) in flips {
            let i = at.index(bytes.len());
            bytes[i] ^= mask;
        }
        std::fs::write(&path, &bytes).unwrap();
        check_damaged(&path);
    }

    #[test]
    fn a_file_cut_short_is_detected(keep in any::<prop::sample::Index>()) {
        let dir = tempfile::tempdir().unwrap();
        let (path, bytes) = valid_file(dir.path());
        let keep = keep.index(bytes.len());
        std::fs::write(&path, &bytes[..keep]).unwrap();
        let opened = MainIndex::open(&path);
        prop_assert!(matches!(opened, Err(Error::Corrupt { .. })), "opened a file cut to {} bytes", keep);
    }
}
