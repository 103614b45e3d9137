//! YCSB core workloads A, B, C, D and F (Cooper et al., "Benchmarking cloud
//! serving systems with YCSB", SoCC'10), reproducing YCSB's CoreWorkload and
//! its generators (site.ycsb.generator): the key chooser, the operation mix
//! and YCSB's rejection of not-yet-inserted keys. E (scans) has no cache
//! equivalent and is left out.
//!
//! | workload | mix | request distribution |
//! |---|---|---|
//! | A | 50% read, 50% update | zipfian (scrambled) |
//! | B | 95% read, 5% update | zipfian (scrambled) |
//! | C | 100% read | zipfian (scrambled) |
//! | D | 95% read, 5% insert | latest |
//! | F | 50% read, 50% read-modify-write (a GET then a SET) | zipfian (scrambled) |
//!
//! As in YCSB, `distribution=zipfian` is the *scrambled* zipfian
//! (ScrambledZipfianGenerator); `plain` is YCSB's ZipfianGenerator over the
//! keys themselves (key 0 the hottest), which is far more skewed.

use super::dist::{Rng, ScrambledZipfian, YcsbZipfian};
use super::{min_key_len, request, Pacer, Params, MAX_VALUE};
use crate::trace::{Op, Request};

#[derive(Clone, Debug)]
enum Chooser {
    Scrambled(ScrambledZipfian),
    Plain(YcsbZipfian, u64),
    Uniform(u64),
    /// YCSB's HotspotIntegerGenerator over [0, keys): hot set first.
    Hotspot {
        hot: u64,
        cold: u64,
        hot_ops: f64,
    },
    /// YCSB's SkewedLatestGenerator: the newest keys are the hottest.
    Latest(YcsbZipfian),
}

/// A YCSB core workload as a request stream.
pub struct Ycsb {
    rng: Rng,
    chooser: Chooser,
    /// Cumulative proportions: read, update, insert, read-modify-write.
    cum: [f64; 4],
    /// Keys inserted so far (YCSB's transactioninsertkeysequence): 0..inserted.
    inserted: u64,
    load_left: u64,
    next_load: u64,
    key_size: u16,
    value_size: u32,
    pacer: Pacer,
    i: u64,
    pending: Option<Request>,
}

impl Ycsb {
    pub fn new(workload: &str, p: &mut Params, requests: u64, seed: u64) -> anyhow::Result<Ycsb> {
        // YCSB's workloads/workload{a,b,c,d,f} files.
        let (read, update, insert, rmw, dist) = match workload {
            "a" => (0.5, 0.5, 0.0, 0.0, "zipfian"),
            "b" => (0.95, 0.05, 0.0, 0.0, "zipfian"),
            "c" => (1.0, 0.0, 0.0, 0.0, "zipfian"),
            "d" => (0.95, 0.0, 0.05, 0.0, "latest"),
            "f" => (0.5, 0.0, 0.0, 0.5, "zipfian"),
            _ => anyhow::bail!("unknown YCSB workload {workload:?} (a, b, c, d or f)"),
        };
        let keys = p.u64("keys", 1_000_000)?.max(1);
        // YCSB's default record is 10 fields of 100 bytes.
        let value_size = p.u64("value_size", 1000)?.min(MAX_VALUE) as u32;
        // "user" + up to 19 digits of the FNV-hashed key number: 23 bytes at most.
        let key_size = p.u64("key_size", 23)?.clamp(min_key_len(keys) as u64, 250) as u16;
        let read = p.prob("read", read)?;
        let update = p.prob("update", update)?;
        let insert = p.prob("insert", insert)?;
        let rmw = p.prob("rmw", rmw)?;
        let total = read + update + insert + rmw;
        anyhow::ensure!(total > 0.0, "read+update+insert+rmw proportions are all 0");
        let cum = [
            read / total,
            (read + update) / total,
            (read + update + insert) / total,
            1.0,
        ];
        let dist = p.str("distribution", dist);
        let theta = p.f64("theta", 0.99)?;
        anyhow::ensure!(
            theta > 0.0 && theta < 1.0,
            "theta must be in (0, 1) (Gray's zipfian formula)"
        );
        // YCSB sizes the zipfian key space for the inserts it expects (x2 "fudge
        // factor") so that inserting does not reshuffle popularity.
        let expected_new = (requests as f64 * (insert / total) * 2.0) as u64;
        let chooser = match dist.as_str() {
            "zipfian" | "scrambled" => {
                Chooser::Scrambled(ScrambledZipfian::new(0, keys + expected_new, theta))
            }
            "plain" => {
                let n = keys + expected_new + 1;
                Chooser::Plain(YcsbZipfian::new(n, theta), n)
            }
            "uniform" => Chooser::Uniform(keys),
            "hotspot" => {
                let data = p.prob("hotspot_data", 0.2)?;
                let hot_ops = p.prob("hotspot_ops", 0.8)?;
                let hot = (keys as f64 * data) as u64;
                Chooser::Hotspot {
                    hot,
                    cold: keys - hot,
                    hot_ops,
                }
            }
            "latest" => Chooser::Latest(YcsbZipfian::new(keys.saturating_sub(1).max(1), theta)),
            d => anyhow::bail!(
                "unknown distribution {d:?} (zipfian = scrambled, plain, uniform, hotspot, latest)"
            ),
        };
        let load = p.u64("load", 0)?;
        let pacer = Pacer::from_params(p, 100_000.0)?;
        Ok(Ycsb {
            rng: Rng::new(seed, 0x1c5b),
            chooser,
            cum,
            inserted: keys,
            load_left: load,
            next_load: 0,
            key_size,
            value_size,
            pacer,
            i: 0,
            pending: None,
        })
    }

    /// YCSB's CoreWorkload.nextKeynum: draw until the key exists.
    fn next_keynum(&mut self) -> u64 {
        let last = self.inserted - 1;
        loop {
            let k = match &mut self.chooser {
                Chooser::Scrambled(g) => g.next(&mut self.rng),
                Chooser::Plain(g, n) => g.next(&mut self.rng, *n),
                Chooser::Uniform(n) => self.rng.below(*n),
                Chooser::Hotspot { hot, cold, hot_ops } => {
                    if self.rng.f64() < *hot_ops && *hot > 0 {
                        self.rng.below(*hot)
                    } else if *cold > 0 {
                        *hot + self.rng.below(*cold)
                    } else {
                        self.rng.below(*hot)
                    }
                }
                Chooser::Latest(z) => {
                    let max = last;
                    max - z.next(&mut self.rng, max).min(max)
                }
            };
            if k <= last {
                return k;
            }
        }
    }

    fn req(&self, key: u64, op: Op) -> Request {
        request(
            self.pacer.time_us(self.i),
            key,
            self.key_size,
            self.value_size,
            op,
            0,
        )
    }
}

impl Iterator for Ycsb {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        let r = if let Some(mut r) = self.pending.take() {
            r.time_us = self.pacer.time_us(self.i);
            r
        } else if self.load_left > 0 {
            // YCSB's load phase: insert the records in order.
            self.load_left -= 1;
            let k = self.next_load % self.inserted.max(1);
            self.next_load += 1;
            self.req(k, Op::Set)
        } else {
            let u = self.rng.f64();
            if u < self.cum[0] {
                let k = self.next_keynum();
                self.req(k, Op::Get)
            } else if u < self.cum[1] {
                let k = self.next_keynum();
                self.req(k, Op::Set)
            } else if u < self.cum[2] {
                let k = self.inserted;
                self.inserted += 1;
                self.req(k, Op::Set)
            } else {
                let k = self.next_keynum();
                self.pending = Some(self.req(k, Op::Set));
                self.req(k, Op::Get)
            }
        };
        self.i += 1;
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::super::dist::{fnv64, SCRAMBLED_ZETAN};
    use super::super::test_model;
    use super::*;
    use std::collections::HashMap;

    fn gen(w: &str, params: &[(&str, &str)], n: u64, seed: u64) -> Vec<Request> {
        let y = test_model("ycsb", params, |p| Ycsb::new(w, p, n, seed));
        y.take(n as usize).collect()
    }

    fn share(reqs: &[Request], op: Op) -> f64 {
        reqs.iter().filter(|r| r.op == op).count() as f64 / reqs.len() as f64
    }

    #[test]
    fn operation_mixes_match_the_core_workloads() {
        let n = 100_000;
        let a = gen("a", &[("keys", "10000")], n, 1);
        assert!((share(&a, Op::Get) - 0.5).abs() < 0.01);
        let b = gen("b", &[("keys", "10000")], n, 1);
        assert!((share(&b, Op::Set) - 0.05).abs() < 0.005);
        let c = gen("c", &[("keys", "10000")], n, 1);
        assert_eq!(share(&c, Op::Get), 1.0);
        // F: half the operations are read-modify-write = GET + SET, so 1/3 of
        // the requests are SETs, each right after a GET of the same key.
        let f = gen("f", &[("keys", "10000")], n, 1);
        assert!((share(&f, Op::Set) - 1.0 / 3.0).abs() < 0.01);
        for w in f.windows(2) {
            if w[1].op == Op::Set {
                assert_eq!(w[0].op, Op::Get);
                assert_eq!(w[0].key, w[1].key);
            }
        }
        assert!(a
            .iter()
            .all(|r| r.key < 10_000 && r.value_size == 1000 && r.key_size == 23));
    }

    #[test]
    fn scrambled_zipfian_hottest_keys_are_fnv_of_the_first_ranks() {
        // Workload C reads with YCSB's scrambled zipfian over keys+1 items
        // (YCSB's max = insertstart + insertcount), rejecting the last one.
        let keys = 100_000u64;
        let reqs = gen("c", &[("keys", "100000")], 400_000, 4);
        let mut counts: HashMap<u64, u32> = HashMap::new();
        for r in &reqs {
            *counts.entry(r.key).or_default() += 1;
        }
        let mut top: Vec<(u64, u32)> = counts.into_iter().collect();
        top.sort_by_key(|e| std::cmp::Reverse(e.1));
        let itemcount = keys + 1;
        assert_eq!(top[0].0, fnv64(0) % itemcount);
        assert_eq!(top[1].0, fnv64(1) % itemcount);
        let f0 = top[0].1 as f64 / reqs.len() as f64;
        // Rejections of key == keys (probability ~1/keys) barely move this.
        assert!((f0 - 1.0 / SCRAMBLED_ZETAN).abs() < 0.002, "{f0}");
        let f1 = top[1].1 as f64 / reqs.len() as f64;
        assert!(
            (f1 - 0.5f64.powf(0.99) / SCRAMBLED_ZETAN).abs() < 0.002,
            "{f1}"
        );
    }

    #[test]
    fn scrambled_is_much_flatter_than_plain() {
        let top_share = |dist: &str| {
            let reqs = gen(
                "c",
                &[("keys", "100000"), ("distribution", dist)],
                200_000,
                2,
            );
            let mut counts: HashMap<u64, u32> = HashMap::new();
            for r in &reqs {
                *counts.entry(r.key).or_default() += 1;
            }
            let mut c: Vec<u32> = counts.into_values().collect();
            c.sort_unstable_by(|a, b| b.cmp(a));
            c.iter().take(1000).map(|&x| x as u64).sum::<u64>() as f64 / reqs.len() as f64
        };
        let plain = top_share("plain");
        let scrambled = top_share("zipfian");
        // Plain zipf(0.99) over 1e5 keys: the top 1% take ~0.62 of requests;
        // the scrambled one spreads the 10^10-rank tail over all keys.
        assert!(plain > 0.55, "{plain}");
        assert!(scrambled < plain - 0.1, "{scrambled} vs {plain}");
        // Plain's hottest key is key 0 itself.
        let reqs = gen(
            "c",
            &[("keys", "1000"), ("distribution", "plain")],
            50_000,
            2,
        );
        let zero = reqs.iter().filter(|r| r.key == 0).count() as f64 / 50_000.0;
        let z = super::super::dist::zeta(1001, 0.99);
        assert!((zero - 1.0 / z).abs() < 0.01, "{zero}");
    }

    #[test]
    fn workload_d_inserts_new_keys_and_reads_the_latest() {
        let keys = 10_000u64;
        let reqs = gen("d", &[("keys", "10000")], 100_000, 3);
        let inserts: Vec<&Request> = reqs.iter().filter(|r| r.op == Op::Set).collect();
        assert!((inserts.len() as f64 / 1e5 - 0.05).abs() < 0.005);
        // Inserts are consecutive new keys.
        for (i, r) in inserts.iter().enumerate() {
            assert_eq!(r.key, keys + i as u64);
        }
        // Reads never touch a key not yet inserted, and favour the newest.
        let mut inserted = keys;
        let mut near = 0;
        let mut gets = 0;
        for r in &reqs {
            match r.op {
                Op::Set => inserted += 1,
                _ => {
                    assert!(r.key < inserted);
                    gets += 1;
                    if inserted - r.key <= 10 {
                        near += 1;
                    }
                }
            }
        }
        // P(rank < 10) = zeta(10)/zeta(n) for YCSB's zipfian over the keys.
        let want = super::super::dist::zeta(10, 0.99) / super::super::dist::zeta(keys, 0.99);
        let got = near as f64 / gets as f64;
        assert!((got - want).abs() < 0.02, "{got} vs {want}");
    }

    #[test]
    fn hotspot_sends_80_percent_to_20_percent() {
        let reqs = gen(
            "c",
            &[("keys", "10000"), ("distribution", "hotspot")],
            100_000,
            5,
        );
        let hot = reqs.iter().filter(|r| r.key < 2000).count() as f64 / 1e5;
        assert!((hot - 0.8).abs() < 0.01, "{hot}");
        let uni = gen(
            "c",
            &[("keys", "10000"), ("distribution", "uniform")],
            100_000,
            5,
        );
        let low = uni.iter().filter(|r| r.key < 2000).count() as f64 / 1e5;
        assert!((low - 0.2).abs() < 0.01, "{low}");
    }

    #[test]
    fn load_phase_sets_the_records_in_order() {
        let reqs = gen("c", &[("keys", "100"), ("load", "150")], 200, 1);
        for (i, r) in reqs[..150].iter().enumerate() {
            assert_eq!((r.op, r.key), (Op::Set, i as u64 % 100));
        }
        assert!(reqs[150..].iter().all(|r| r.op == Op::Get));
    }
}
