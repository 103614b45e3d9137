//! The GD-Wheel cost workloads (Conglong Li, "GD-Wheel: a cost-aware
//! replacement policy for key-value stores", Rice MS thesis 2014, section 6.4,
//! Tables 6.1 and 6.2; ../shared/seeds/001_*).
//!
//! All use 16-byte keys and YCSB (section 6.3): requests are GETs with YCSB's
//! (scrambled) zipfian key choice; the look-aside driver SETs each miss with
//! the key's cost. Each key belongs to one cost group, chosen by a hash of
//! the key with the table's proportions, and has a fixed cost drawn uniformly
//! (by another hash) from its group's range. In the multi-size workloads
//! (Table 6.2) the group also fixes the value size (192/256/320 B) so that
//! the groups land in different slab classes.
//!
//! | # | name | value | cost groups (proportion) |
//! |---|---|---|---|
//! | 1 | baseline | 256 | 10-30 (80%), 120-180 (15%), 350-450 (5%) |
//! | 2 | rubis | 256 | 10-30 (20%), 120-180 (75%), 350-450 (5%) |
//! | 3 | tpcw | 256 | 10-30 (50%), 120-180 (25%), 350-450 (25%) |
//! | 4 | same | 256 | 10 (100%) |
//! | 5 | random | 256 | 20-400 (100%) |
//! | 6 | small1 | 64 | as baseline |
//! | 7 | small2 | 128 | as baseline |
//! | 8 | big1 | 2048 | as baseline |
//! | 9 | big2 | 4096 | as baseline |
//! | 10 | multi-baseline | 192/256/320 | as baseline |
//! | 11 | multi-rubis | 192/256/320 | as rubis |
//! | 12 | multi-tpcw | 192/256/320 | as tpcw |
//!
//! The thesis sizes the YCSB warm-up (load) so that LRU hits about 95% in the
//! measurement phase; here the cache size is the knob instead (see docs/lab.md),
//! and `load=N` optionally prepends YCSB's load phase (N SETs of keys 0..N).

use super::dist::{pick_weighted, unit_hash, Rng, ScrambledZipfian};
use super::{Pacer, Params};
use crate::trace::{Op, Request};

const GROUP_STREAM: u64 = 0x6d01;
const COST_STREAM: u64 = 0x6d02;

/// One cost group: cost range (inclusive), share of keys, value size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Group {
    pub lo: u32,
    pub hi: u32,
    pub share: f64,
    pub value_size: u32,
}

const fn g(lo: u32, hi: u32, share: f64, value_size: u32) -> Group {
    Group {
        lo,
        hi,
        share,
        value_size,
    }
}

/// Canonical names, in table order (index + 1 = workload number).
pub const NAMES: [&str; 12] = [
    "baseline",
    "rubis",
    "tpcw",
    "same",
    "random",
    "small1",
    "small2",
    "big1",
    "big2",
    "multi-baseline",
    "multi-rubis",
    "multi-tpcw",
];

/// The cost groups of workload `n` (1..=12), from Tables 6.1 and 6.2.
pub fn groups(n: usize) -> Option<Vec<Group>> {
    let three = |a: f64, b: f64, c: f64, sizes: [u32; 3]| {
        vec![
            g(10, 30, a, sizes[0]),
            g(120, 180, b, sizes[1]),
            g(350, 450, c, sizes[2]),
        ]
    };
    Some(match n {
        1 => three(0.80, 0.15, 0.05, [256; 3]),
        2 => three(0.20, 0.75, 0.05, [256; 3]),
        3 => three(0.50, 0.25, 0.25, [256; 3]),
        4 => vec![g(10, 10, 1.0, 256)],
        5 => vec![g(20, 400, 1.0, 256)],
        6 => three(0.80, 0.15, 0.05, [64; 3]),
        7 => three(0.80, 0.15, 0.05, [128; 3]),
        8 => three(0.80, 0.15, 0.05, [2048; 3]),
        9 => three(0.80, 0.15, 0.05, [4096; 3]),
        10 => three(0.80, 0.15, 0.05, [192, 256, 320]),
        11 => three(0.20, 0.75, 0.05, [192, 256, 320]),
        12 => three(0.50, 0.25, 0.25, [192, 256, 320]),
        _ => return None,
    })
}

/// Workload number for a name ("3", "tpcw", "small_1", "multi-rubis", ...).
pub fn number(name: &str) -> Option<usize> {
    if let Ok(n) = name.parse::<usize>() {
        return (1..=12).contains(&n).then_some(n);
    }
    let canon = name.replace('_', "").replace("tpc-w", "tpcw");
    NAMES.iter().position(|&n| n == canon).map(|i| i + 1)
}

pub struct GdWheel {
    rng: Rng,
    chooser: ScrambledZipfian,
    keys: u64,
    groups: Vec<Group>,
    load_left: u64,
    next_load: u64,
    pacer: Pacer,
    i: u64,
}

impl GdWheel {
    pub fn new(which: &str, p: &mut Params, _requests: u64, seed: u64) -> anyhow::Result<GdWheel> {
        let n = number(which).ok_or_else(|| {
            anyhow::anyhow!(
                "unknown GD-Wheel workload {which:?}: 1..12 or {}",
                NAMES.join(", ")
            )
        })?;
        let keys = p.u64("keys", 1_000_000)?.max(1);
        let theta = p.f64("theta", 0.99)?;
        anyhow::ensure!(theta > 0.0 && theta < 1.0, "theta must be in (0, 1)");
        let load = p.u64("load", 0)?;
        let pacer = Pacer::from_params(p, 100_000.0)?;
        Ok(GdWheel {
            rng: Rng::new(seed, 0x6d00 + n as u64),
            // YCSB workload C's key chooser over `keys` records.
            chooser: ScrambledZipfian::new(0, keys, theta),
            keys,
            groups: groups(n).unwrap_or_default(),
            load_left: load,
            next_load: 0,
            pacer,
            i: 0,
        })
    }

    /// The key's cost group.
    pub fn group(&self, key: u64) -> Group {
        let shares: Vec<(usize, f64)> = self
            .groups
            .iter()
            .enumerate()
            .map(|(i, g)| (i, g.share))
            .collect();
        let i = pick_weighted(&shares, unit_hash(key, GROUP_STREAM)).unwrap_or(0);
        self.groups[i]
    }

    /// The key's cost: uniform over its group's range, fixed per key.
    pub fn cost(&self, key: u64) -> u32 {
        let g = self.group(key);
        let span = (g.hi - g.lo + 1) as f64;
        g.lo + ((unit_hash(key, COST_STREAM) * span) as u32).min(g.hi - g.lo)
    }

    fn request(&self, key: u64, op: Op) -> Request {
        Request {
            time_us: self.pacer.time_us(self.i),
            key,
            key_size: 16,
            value_size: self.group(key).value_size,
            cost: self.cost(key),
            op,
            ttl: 0,
        }
    }
}

impl Iterator for GdWheel {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        let r = if self.load_left > 0 {
            self.load_left -= 1;
            let k = self.next_load % self.keys;
            self.next_load += 1;
            self.request(k, Op::Set)
        } else {
            // YCSB rejects the one extra id of its [0, keys] chooser.
            let k = loop {
                let k = self.chooser.next(&mut self.rng);
                if k < self.keys {
                    break k;
                }
            };
            self.request(k, Op::Get)
        };
        self.i += 1;
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_model;
    use super::*;

    fn model(which: &str) -> GdWheel {
        test_model("gdwheel", &[("keys", "100000")], |p| {
            GdWheel::new(which, p, 0, 1)
        })
    }

    #[test]
    fn names_and_numbers() {
        assert_eq!(number("1"), Some(1));
        assert_eq!(number("baseline"), Some(1));
        assert_eq!(number("tpc-w"), Some(3));
        assert_eq!(number("small_1"), Some(6));
        assert_eq!(number("multi-tpcw"), Some(12));
        assert_eq!(number("13"), None);
        assert_eq!(number("nope"), None);
        for (i, n) in NAMES.iter().enumerate() {
            assert_eq!(number(n), Some(i + 1));
            let sum: f64 = groups(i + 1).unwrap().iter().map(|g| g.share).sum();
            assert!((sum - 1.0).abs() < 1e-12);
        }
    }

    #[test]
    fn cost_groups_follow_the_table_proportions() {
        for (which, shares) in [
            ("baseline", [0.80, 0.15, 0.05]),
            ("rubis", [0.20, 0.75, 0.05]),
            ("tpcw", [0.50, 0.25, 0.25]),
        ] {
            let m = model(which);
            let mut c = [0u32; 3];
            for k in 0..100_000 {
                let cost = m.cost(k);
                let i = match cost {
                    10..=30 => 0,
                    120..=180 => 1,
                    350..=450 => 2,
                    _ => panic!("cost {cost} outside the groups"),
                };
                c[i] += 1;
            }
            for i in 0..3 {
                let f = c[i] as f64 / 1e5;
                assert!((f - shares[i]).abs() < 0.01, "{which} group {i}: {f}");
            }
        }
        let same = model("same");
        assert!((0..1000).all(|k| same.cost(k) == 10));
        let random = model("random");
        let costs: Vec<u32> = (0..100_000).map(|k| random.cost(k)).collect();
        assert!(costs.iter().all(|c| (20..=400).contains(c)));
        let mean = costs.iter().map(|&c| c as f64).sum::<f64>() / 1e5;
        assert!((mean - 210.0).abs() < 2.0, "{mean}");
        assert!(costs.contains(&20) && costs.contains(&400));
    }

    #[test]
    fn sizes_and_requests() {
        let big = model("big2");
        assert!(big
            .take(1000)
            .all(|r| r.value_size == 4096 && r.key_size == 16));
        let multi = model("multi-baseline");
        for r in multi.take(20_000) {
            let want = match r.cost {
                10..=30 => 192,
                120..=180 => 256,
                _ => 320,
            };
            assert_eq!(r.value_size, want);
            assert_eq!(r.op, Op::Get);
            assert!(r.key < 100_000);
        }
    }
}
