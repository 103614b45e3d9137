//! Micro-benchmark of the eviction policies' per-request cost in the engine
//! alone (no network): `cargo run --release -p cachalot-engine --example
//! evict_bench [seconds-per-run [lru|gdwheel keys [requests]]]` (with a
//! policy and a key count: that single run, for profiling).
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

/// Key number k as 20 bytes ("key:" and 16 digits), made up front so that
/// the timed loop is only engine calls.
fn keys(n: u64) -> Vec<[u8; 20]> {
    (0..n)
        .map(|k| {
            let mut key = [0u8; 20];
            key.copy_from_slice(format!("key:{k:016}").as_bytes());
            key
        })
        .collect()
}

/// Requests per second over `secs` seconds (or exactly `count` requests)
/// after filling the cache.
fn run(eviction: EvictionPolicy, keys: u64, secs: f64, count: Option<u64>) -> f64 {
    // VALUE (bytes, default 32) and SET_PCT (default 10) for other mixes,
    // e.g. benches/cost/throughput.sh's set90: VALUE=100 SET_PCT=90.
    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let (value_len, set_pct) = (env("VALUE", 32) as usize, env("SET_PCT", 10));
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
    let value = vec![b'v'; value_len];
    let all = self::keys(keys);
    for k in all.iter().take(3_000_000) {
        e.store(&Store::set(k, &value));
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
            let k = &all[(x % keys) as usize];
            // SET_PCT% SETs; GETs fill their misses (look-aside).
            if (x >> 32) % 100 < set_pct || e.get(k).is_none() {
                e.store(&Store::set(k, &value));
            }
        }
        n += 4096;
        if count.map_or(start.elapsed() >= limit, |c| n >= c) {
            break;
        }
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let secs: f64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    // `evict_bench SECS POLICY KEYS [REQUESTS]`: one run (for profiling;
    // with REQUESTS, exactly that many after the fill, whatever the time).
    if let (Some(policy), Some(keys)) = (args.get(2), args.get(3)) {
        let policy: EvictionPolicy = policy.parse().expect("lru or gdwheel");
        let keys: u64 = keys.parse().expect("a key count");
        let count = args.get(4).map(|c| c.parse().expect("a request count"));
        let rate = run(policy, keys, secs, count);
        println!("{policy:?} {keys} keys: {rate:.0} req/s");
        return;
    }
    println!("| keys | lru req/s | gdwheel req/s | gdwheel / lru |");
    println!("|---|---|---|---|");
    for keys in [500_000u64, 4_000_000] {
        let mut lru = Vec::new();
        let mut gd = Vec::new();
        for _ in 0..5 {
            lru.push(run(EvictionPolicy::Lru, keys, secs, None));
            gd.push(run(EvictionPolicy::GdWheel, keys, secs, None));
        }
        lru.sort_by(f64::total_cmp);
        gd.sort_by(f64::total_cmp);
        let (l, g) = (lru[2], gd[2]);
        println!("| {keys} | {l:.0} | {g:.0} | {:.3} |", g / l);
    }
}
