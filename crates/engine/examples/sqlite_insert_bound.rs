//! What SQLite alone costs to take DB-A-shaped rows (id, 32-byte key, counter, 32-byte value),
//! the floor under `shardlite load` and `shardlite import`: N new databases filled on T threads,
//! each in one transaction through one prepared statement, then made durable as the loader makes
//! them (WAL: a TRUNCATE checkpoint at synchronous=FULL; no journal: an fsync). No index, no
//! input, no staging: compare its CPU time (`/usr/bin/time`) with theirs in the same sitting.
//!
//! ```text
//! cargo run --release -p shardlite-engine --example sqlite_insert_bound -- DIR PARTITIONS RECORDS wal|off [THREADS]
//! ```

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::Instant,
};

use rusqlite::{params, Connection};

fn main() -> rusqlite::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: sqlite_insert_bound DIR PARTITIONS RECORDS wal|off [THREADS]";
    let [dir, partitions, records, journal, rest @ ..] = args.as_slice() else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let number = |s: &str| s.parse::<usize>().unwrap_or_else(|_| panic!("{usage}: {s} is not a number"));
    let (partitions, records) = (number(partitions), number(records));
    let threads = rest.first().map_or(2, |t| number(t));
    assert!(journal == "wal" || journal == "off", "{usage}");
    std::fs::create_dir_all(dir).expect("creating DIR");
    let per_partition = records / partitions;
    let next = AtomicUsize::new(0);
    let started = Instant::now();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| -> rusqlite::Result<()> {
                    loop {
                        let p = next.fetch_add(1, Ordering::Relaxed);
                        if p >= partitions {
                            return Ok(());
                        }
                        fill(&format!("{dir}/bound{p:04}.db"), p as u64, per_partition, journal)?;
                    }
                })
            })
            .collect();
        workers.into_iter().try_for_each(|w| w.join().expect("a worker panicked"))
    })?;
    let (seconds, rows) = (started.elapsed().as_secs_f64(), per_partition * partitions);
    println!(
        "{partitions} partitions, {rows} rows, journal {journal}, {threads} threads: {seconds:.2} s, {:.0} rows/s",
        rows as f64 / seconds
    );
    Ok(())
}

/// Makes `path` anew with `rows` rows of pseudo-random keys (xorshift, seeded by `seed`).
fn fill(path: &str, seed: u64, rows: usize, journal: &str) -> rusqlite::Result<()> {
    let _ = std::fs::remove_file(path);
    let conn = Connection::open(path)?;
    conn.pragma_update(None, "journal_mode", journal)?;
    conn.pragma_update(None, "synchronous", "OFF")?;
    conn.pragma_update(None, "cache_size", -16384)?;
    conn.execute_batch(
        "CREATE TABLE records(id INTEGER PRIMARY KEY, key BLOB NOT NULL, counter INTEGER NOT NULL, value BLOB NOT NULL);
         BEGIN;",
    )?;
    {
        let mut insert = conn.prepare("INSERT INTO records VALUES (?1, ?2, ?3, ?4)")?;
        let (mut key, mut x) = ([0u8; 32], seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        for id in 1..=rows as i64 {
            for chunk in key.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                chunk.copy_from_slice(&x.to_le_bytes());
            }
            insert.execute(params![id, &key[..], 1i64, &key[..]])?;
        }
    }
    conn.execute_batch("COMMIT")?;
    if journal == "wal" {
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    } else {
        std::fs::File::open(path).and_then(|f| f.sync_all()).expect("syncing the database");
    }
    Ok(())
}
