//! What one sampled request costs the live miss-ratio curve
//! (`LiveMrc::record`), warm and with the CPU's L2 flushed between
//! sampled requests as a server's other requests flush it (issue 36's
//! cost criterion). A server at -m 64 over 100,000 keys samples 3.5% of
//! them; this replays uniform hits over such keys.
//!
//! Run: `cargo bench -p cachalot-engine --bench mrc_record` (pin it with
//! `taskset -c 0` for steadier figures; docs/benchmarks.md).

use std::hint::black_box;
use std::time::Instant;

use cachalot_engine::hash::hash;
use cachalot_engine::mrc::{sampled, Access, LiveMrc};

/// Bytes walked between sampled requests in the "cold" run: twice the L2.
const FLUSH: usize = 2 << 20;

fn run(flush: bool) -> (f64, usize) {
    let mut junk = vec![0u64; if flush { FLUSH / 8 } else { 0 }];
    let mut m = LiveMrc::for_memory(64 << 20, 0);
    let keys: Vec<u64> = (0..100_000u64)
        .map(|k| hash(format!("key:{k:016}").as_bytes()))
        .collect();
    let (mut x, mut n, mut ns, mut sum) = (1u64, 0u64, 0u128, 0u64);
    for _ in 0..if flush { 4_000_000 } else { 20_000_000 } {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let h = keys[(x % keys.len() as u64) as usize];
        if !sampled(h, m.threshold()) {
            continue;
        }
        // One write per line: the lines the curve had are gone from L2.
        for j in (0..junk.len()).step_by(8) {
            sum = sum.wrapping_add(junk[j]);
            junk[j] = sum;
        }
        let t = Instant::now();
        m.record(h, Access::Hit { size: 100 }, 0, || None);
        ns += t.elapsed().as_nanos();
        n += 1;
    }
    black_box(sum);
    (ns as f64 / n as f64, m.keys())
}

fn main() {
    for flush in [false, true] {
        let (ns, keys) = run(flush);
        let how = if flush { "L2 flushed" } else { "warm" };
        println!("mrc record, {keys} sampled keys, {how}: {ns:.0} ns per sampled request");
    }
}
