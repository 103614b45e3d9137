//! Micro-benchmark of the eviction policies' per-request cost in the engine
//! alone (no network): `cargo run --release -p cachalot-engine --example
//! evict_bench [seconds-per-run]`.
//!
//! Issue 4 asks that get/set throughput with GD-Wheel stay within 5% of the
//! LRU (CLOCK) build on a uniform-cost workload. The server's throughput is
//! dominated by system calls, so this measures where the policies differ:
//! the engine call itself, under the same 90% GET / 10% SET mix of 20-byte
//! keys and 32-byte values as benches/throughput.sh, uniform over the keys,
//! no cost sent (all equal). Two key spaces: one that fits in 64 MB (every
//! GET hits: GD-Wheel's hit moves the item to the back of its queue where
//! CLOCK sets a bit), and one four times too large (look-aside fills and
//! evictions on top). Runs alternate policies and the median of 5 is shown.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cachalot_engine::{Clock, Config, Engine, EvictionPolicy, Store};

fn key(k: u64, buf: &mut Vec<u8>) {
    buf.clear();
    buf.extend_from_slice(format!("key:{k:016}").as_bytes());
}

/// Requests per second over `secs` seconds after filling the cache.
fn run(eviction: EvictionPolicy, keys: u64, secs: f64) -> f64 {
    let clock = Arc::new(Clock::new());
    let mut e = Engine::new(
        Config {
            memory_limit: 64 << 20,
            eviction,
            ..Config::default()
        },
        clock,
    )
    .expect("config");
    let value = [b'v'; 32];
    let mut k = Vec::with_capacity(32);
    for i in 0..keys.min(3_000_000) {
        key(i, &mut k);
        e.store(&Store::set(&k, &value));
    }
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut n = 0u64;
    let start = Instant::now();
    let limit = Duration::from_secs_f64(secs);
    loop {
        for _ in 0..4096 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            key(x % keys, &mut k);
            // 10% SETs; GETs fill their misses (look-aside).
            if x.is_multiple_of(10) || e.get(&k).is_none() {
                e.store(&Store::set(&k, &value));
            }
        }
        n += 4096;
        if start.elapsed() >= limit {
            break;
        }
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    println!("| keys | lru req/s | gdwheel req/s | gdwheel / lru |");
    println!("|---|---|---|---|");
    for keys in [500_000u64, 4_000_000] {
        let mut lru = Vec::new();
        let mut gd = Vec::new();
        for _ in 0..5 {
            lru.push(run(EvictionPolicy::Lru, keys, secs));
            gd.push(run(EvictionPolicy::GdWheel, keys, secs));
        }
        lru.sort_by(f64::total_cmp);
        gd.sort_by(f64::total_cmp);
        let (l, g) = (lru[2], gd[2]);
        println!("| {keys} | {l:.0} | {g:.0} | {:.3} |", g / l);
    }
}
