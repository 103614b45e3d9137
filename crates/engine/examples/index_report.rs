//! Reports on the hash index (`cachalot_engine::index`), measurements
//! rather than tests (the bounds they support are tested in the module:
//! `density_stays_under_ten_and_a_half_bytes`, `lookups_read_few_lines`,
//! `churn_does_not_grow_the_index`):
//!
//! ```sh
//! cargo run --release -p cachalot-engine --example index_report density
//! cargo run --release -p cachalot-engine --example index_report timing
//! ```
//!
//! `density`: bytes per item and 64-byte lines read per lookup, a row at
//! each listed size, then the range seen at every 1% step from 100k to 5M
//! items (all phases of the growth cycle, resizes in progress included),
//! and a churn of 1M items (the table in the module doc). `timing`: rough
//! per-operation times at 2M items.

use std::time::Instant;

use cachalot_engine::index::{Index, Loc};

/// splitmix64: deterministic pseudo-random hashes without a dependency.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("density") => density(),
        Some("timing") => timing(),
        _ => {
            eprintln!("usage: index_report density|timing");
            std::process::exit(2);
        }
    }
}

fn density() {
    let rows = [
        100_000, 200_000, 300_000, 500_000, 1_000_000, 2_000_000, 3_000_000, 5_000_000,
    ];
    let total = 5_000_000usize;
    let hashes: Vec<u64> = (0..total as u64).map(|i| mix(i ^ 0xC0FFEE)).collect();
    let hash_of = |l: Loc| hashes[l as usize];
    let mut index = Index::with_capacity(0);
    let lines = |index: &Index, n: usize| {
        let sample = 20_000;
        let hit: usize = (0..sample)
            .map(|k| {
                let l = (mix(k as u64) % n as u64) as usize;
                index.probe_lines(hashes[l], Some(l as Loc))
            })
            .sum();
        let miss: usize = (0..sample)
            .map(|k| index.probe_lines(mix(!(k as u64)), None))
            .sum();
        (hit as f64 / sample as f64, miss as f64 / sample as f64)
    };
    let mut sizes: Vec<usize> = std::iter::successors(Some(100_000usize), |&n| Some(n + n / 100))
        .take_while(|&n| n <= total)
        .collect();
    sizes.extend(rows);
    sizes.sort_unstable();
    sizes.dedup();
    let mut next = 0;
    let (mut lo, mut hi, mut sum, mut count) = (f64::MAX, 0f64, 0f64, 0);
    let (mut worst_hit, mut worst_miss) = (0f64, 0f64);
    println!("| items | bytes/item | buckets | sub-buckets | lines/hit | lines/miss |");
    for at in sizes {
        while next < at {
            index.insert(hashes[next], next as Loc, &hash_of);
            next += 1;
        }
        let per = index.memory_bytes() as f64 / at as f64;
        let (hit, miss) = lines(&index, at);
        (lo, hi, sum, count) = (lo.min(per), hi.max(per), sum + per, count + 1);
        (worst_hit, worst_miss) = (worst_hit.max(hit), worst_miss.max(miss));
        if rows.contains(&at) {
            println!(
                "| {at} | {per:.2} | {} | {} | {hit:.3} | {miss:.3} |",
                index.bucket_count(),
                index.sub_buckets(),
            );
        }
    }
    // A full cache: the item count stays put while evictions replace
    // items. Churn 1M items (remove the oldest, insert a new one) 3 times
    // over and see that pools and filters do not degrade.
    let mut index = Index::with_capacity(0);
    let churn = 1_000_000;
    for (l, &h) in hashes.iter().enumerate().take(churn) {
        index.insert(h, l as Loc, &hash_of);
    }
    let before = index.memory_bytes() as f64 / churn as f64;
    let nodes_before = index.sub_buckets();
    let mut hashes = hashes;
    for l in churn..4 * churn {
        let old = l - churn;
        assert!(index.remove(hashes[old % churn], (old % churn) as Loc));
        hashes[old % churn] = mix(l as u64 ^ 0xC0FFEE);
        let hash_of = |x: Loc| hashes[x as usize % churn];
        index.insert(hashes[old % churn], (l % churn) as Loc, &hash_of);
    }
    println!(
        "churn at 1M items: {before:.2} bytes/item and {nodes_before} sub-buckets after filling, \
         {:.2} and {} after replacing every item 3 times",
        index.memory_bytes() as f64 / churn as f64,
        index.sub_buckets(),
    );
    println!(
        "{count} sizes from 100k to 5M: bytes/item min {lo:.2} mean {:.2} max {hi:.2}; worst lines/hit {worst_hit:.3}, lines/miss {worst_miss:.3}",
        sum / count as f64
    );
}

fn timing() {
    let n = 2_000_000usize;
    let hashes: Vec<u64> = (0..n as u64).map(mix).collect();
    let hash_of = |l: Loc| hashes[l as usize];
    let mut index = Index::with_capacity(0);
    let t = Instant::now();
    for (i, &h) in hashes.iter().enumerate() {
        index.insert(h, i as Loc, &hash_of);
    }
    let insert = t.elapsed().as_nanos() as f64 / n as f64;
    // Random-order hits; is_match compares the full hash (the engine would
    // compare the key, one more cache miss not measured here).
    let order: Vec<usize> = (0..n as u64)
        .map(|k| (mix(k ^ 77) % n as u64) as usize)
        .collect();
    let t = Instant::now();
    let mut found = 0;
    for &l in &order {
        let h = hashes[l];
        found += index.find(h, |x| hashes[x as usize] == h).is_some() as usize;
    }
    let hit = t.elapsed().as_nanos() as f64 / n as f64;
    assert_eq!(found, n);
    let t = Instant::now();
    let mut found = 0;
    for k in 0..n as u64 {
        let h = mix(!k);
        found += index.find(h, |x| hashes[x as usize] == h).is_some() as usize;
    }
    let miss = t.elapsed().as_nanos() as f64 / n as f64;
    assert_eq!(found, 0);
    let t = Instant::now();
    for (i, &h) in hashes.iter().enumerate().step_by(2) {
        assert!(index.remove(h, i as Loc));
    }
    let remove = t.elapsed().as_nanos() as f64 / (n / 2) as f64;
    // Put them back: inserts into a table that is already big enough.
    let t = Instant::now();
    for (i, &h) in hashes.iter().enumerate().step_by(2) {
        index.insert(h, i as Loc, &hash_of);
    }
    let reinsert = t.elapsed().as_nanos() as f64 / (n / 2) as f64;
    println!(
        "{n} items: insert {insert:.0} ns (with growth) / {reinsert:.0} ns (without), \
         hit {hit:.0} ns, miss {miss:.0} ns, remove {remove:.0} ns; {:.2} bytes/item",
        index.memory_bytes() as f64 / index.len() as f64
    );
}
