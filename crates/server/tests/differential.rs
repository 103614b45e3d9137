//! Differential test: random, seeded command sequences in the text, meta and
//! binary protocols go to memcached 1.6 (the oracle) and to cachalot, started
//! here with the same flags, and every reply must match byte for byte (CAS
//! uniques compared through a one-to-one mapping, see `diff/exec.rs`). A
//! failure prints the seed and the shortest sequence that reproduces it.
//!
//! ```text
//! cargo build --release -p cachalot
//! cargo test --release -p cachalot-server --test differential
//! DIFF_SEQUENCES=33000 DIFF_SEED=10000000 cargo test --release -p cachalot-server --test differential -- --nocapture
//! ```
//!
//! `DIFF_SEQUENCES` sequences run (2400 by default), from seed `DIFF_SEED`
//! on (default 1); a seed also picks the family: text, meta, binary for
//! seed % 3 = 0, 1, 2. `DIFF_WORKERS` server pairs run them (default 2).
//! memcached is `$MEMCACHED_BIN` or /usr/bin/memcached; without it the test
//! fails.

mod common;
mod diff;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

/// Two workers, each with its own server pair, take seeds from a shared
/// counter; the first difference stops both and is shrunk and reported.
#[test]
fn random_sequences_match_memcached() {
    common::memcached_bin();
    let count = env_u64("DIFF_SEQUENCES", 2400);
    let first = env_u64("DIFF_SEED", 1);
    let next = AtomicU64::new(first);
    let commands = AtomicUsize::new(0);
    let started = Instant::now();
    let failure = std::thread::scope(|sc| {
        let workers: Vec<_> = (0..env_u64("DIFF_WORKERS", 2))
            .map(|_| {
                sc.spawn(|| {
                    let pair = diff::Pair::start();
                    loop {
                        let seed = next.fetch_add(1, Ordering::Relaxed);
                        if seed >= first + count {
                            // What each server kept and let go of, for
                            // long runs (`--nocapture`).
                            eprintln!(
                                "memcached: {}\ncachalot:  {}",
                                diff::memory_stats(pair.memcached.addr()),
                                diff::memory_stats(pair.cachalot.addr())
                            );
                            return None;
                        }
                        let seq = diff::gen::sequence(seed);
                        commands.fetch_add(seq.steps.len(), Ordering::Relaxed);
                        if let Some(d) = pair.run(&seq, &seq.steps) {
                            next.store(u64::MAX / 2, Ordering::Relaxed);
                            return Some(diff::report(&pair, &seq, &d));
                        }
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .filter_map(|w| w.join().expect("worker panicked"))
            .next()
    });
    if let Some(report) = failure {
        panic!("{report}");
    }
    eprintln!(
        "differential: {count} sequences (seeds {first}..{}), {} commands, no difference, {:.1} s",
        first + count,
        commands.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64()
    );
}

/// Short TTLs and a delayed flush, each family on its own server pair (a
/// delayed flush is global), run in parallel.
#[test]
fn timed_sequences_match_memcached() {
    common::memcached_bin();
    let failures: Vec<String> = std::thread::scope(|sc| {
        let runs: Vec<_> = diff::timed::sequences()
            .into_iter()
            .map(|seq| {
                sc.spawn(move || {
                    let pair = diff::Pair::start();
                    pair.run(&seq, &seq.steps)
                        .map(|d| diff::report(&pair, &seq, &d))
                })
            })
            .collect();
        runs.into_iter()
            .filter_map(|r| r.join().expect("timed run panicked"))
            .collect()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
