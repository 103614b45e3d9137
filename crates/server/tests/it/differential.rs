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
//! cargo test --release -p cachalot-server --test differential random_sequences_through_the_zone -- --nocapture
//! ```
//!
//! `DIFF_SEQUENCES` sequences run (2400 by default), from seed `DIFF_SEED`
//! on (default 1); a seed also picks the family: text, meta, binary for
//! seed % 3 = 0, 1, 2. `DIFF_WORKERS` server pairs run them (default 2).
//! `random_sequences_through_the_zone` runs `DIFF_ZONE_SEQUENCES` more
//! (800 by default, from `DIFF_ZONE_SEED`, default 1,000,000) on pairs
//! whose cachalot demotes every item to its Z-zone after every command
//! (`diff::ZONE_FLAGS`); the timed sequences run on such pairs too.
//! memcached is `$MEMCACHED_BIN` or /usr/bin/memcached; without it the test
//! fails.

use crate::common;
use crate::diff;

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
    let count = env_u64("DIFF_SEQUENCES", 2400);
    let first = env_u64("DIFF_SEED", 1);
    run_random(count, first, false);
}

/// The same, through the Z-zone: cachalot demotes every item after every
/// command (`diff::ZONE_FLAGS`), so each command finds its item in a
/// compressed block, and the sequences' values compress. Its own seeds
/// (from 1,000,000), so it is not the run above again.
#[test]
fn random_sequences_through_the_zone() {
    let count = env_u64("DIFF_ZONE_SEQUENCES", 800);
    let first = env_u64("DIFF_ZONE_SEED", 1_000_000);
    let z = run_random(count, first, true)
        .into_iter()
        .fold(diff::ZoneFigures::default(), |a, b| a.add(b));
    // The run must have read blocks, or it tested nothing new; and its
    // values over half a block (a few in a hundred) were stored apart.
    assert!(
        count == 0 || (z.hits + z.promotions > count && z.flushed > count),
        "the Z-zone pair hardly used the Z-zone: {z:?}"
    );
    assert!(
        count < 100 || z.large_written > 0,
        "no item stored apart: {z:?}"
    );
    eprintln!("Z-zone pair: {z:?}");
}

/// `count` sequences from seed `first` on `DIFF_WORKERS` server pairs (the
/// Z-zone pair if `zone`); panics with the report of the first difference.
/// Returns what each pair's cachalot did in its Z-zone.
fn run_random(count: u64, first: u64, zone: bool) -> Vec<diff::ZoneFigures> {
    common::memcached_bin();
    let next = AtomicU64::new(first);
    let commands = AtomicUsize::new(0);
    let started = Instant::now();
    let outcome: Vec<Result<diff::ZoneFigures, String>> = std::thread::scope(|sc| {
        let workers: Vec<_> = (0..env_u64("DIFF_WORKERS", 2))
            .map(|_| {
                sc.spawn(|| {
                    let pair = diff::Pair::start_for(zone);
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
                            // (`stats zzone` without a zone is an `ERROR`.)
                            return Ok(match zone {
                                true => diff::zone_figures(pair.cachalot.addr()),
                                false => diff::ZoneFigures::default(),
                            });
                        }
                        let seq = diff::gen::sequence_for(seed, zone);
                        commands.fetch_add(seq.steps.len(), Ordering::Relaxed);
                        if let Some(d) = pair.run(&seq, &seq.steps) {
                            next.store(u64::MAX / 2, Ordering::Relaxed);
                            return Err(diff::report(&pair, &seq, &d));
                        }
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("worker panicked"))
            .collect()
    });
    if let Some(Err(report)) = outcome.iter().find(|r| r.is_err()) {
        panic!("{report}");
    }
    eprintln!(
        "differential{}: {count} sequences (seeds {first}..{}), {} commands, no difference, {:.1} s",
        if zone { " (Z-zone)" } else { "" },
        first + count,
        commands.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64()
    );
    outcome.into_iter().filter_map(Result::ok).collect()
}

/// Short TTLs and a delayed flush, each family on its own server pair (a
/// delayed flush is global), and again on a Z-zone pair each (TTLs, touch
/// and gat of items read from blocks), all run in parallel.
#[test]
fn timed_sequences_match_memcached() {
    common::memcached_bin();
    let failures: Vec<String> = std::thread::scope(|sc| {
        let runs: Vec<_> = [false, true]
            .into_iter()
            .flat_map(|zone| {
                diff::timed::sequences().into_iter().map(move |mut seq| {
                    seq.zone = zone;
                    seq
                })
            })
            .map(|seq| {
                sc.spawn(move || {
                    let pair = diff::Pair::start_for(seq.zone);
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
