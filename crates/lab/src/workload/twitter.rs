//! A Twitter-cluster-like workload (Yang, Yue, Rashmi, "A large scale
//! analysis of hundreds of in-memory cache clusters at Twitter", OSDI'20),
//! parameterised by the quantities the paper characterises per cluster: Zipf
//! alpha of key popularity, value-size mix, write ratio and TTL mix.
//!
//! Defaults are those of cluster29 in the per-cluster statistics published
//! with the paper's traces (twitter/cache-trace, stat/2020Mar.md), a typical
//! cluster in the paper's sense: a read-mostly but not read-only mix (get 0.86,
//! set 0.13), Zipf alpha 1.2323 (the paper finds most clusters' alpha above 1),
//! short TTLs (1 h for 67% of keys, 2 h for 33%; the paper stresses short
//! TTLs), 36-byte keys and a mean value of 799 bytes; its 10.73 kQPS request
//! rate gives the timestamps.
//!
//! A key's value size and TTL are fixed per key (drawn by hash of the key),
//! since the paper finds both are properties of the key's use case; each size
//! in the mix is spread uniformly over +-`jitter` of itself so that a size
//! class maps to a few slab classes rather than to one chunk size.

use super::dist::{pick_weighted, unit_hash, Rng};
use super::{min_key_len, request, Pacer, Params, ZipfMix, MAX_VALUE};
use crate::trace::Request;

const SIZE_STREAM: u64 = 0x7717;
const JITTER_STREAM: u64 = 0x7718;
const TTL_STREAM: u64 = 0x7719;

pub struct Twitter {
    rng: Rng,
    mix: ZipfMix,
    key_size: u16,
    sizes: Vec<(u64, f64)>,
    jitter: f64,
    ttls: Vec<(u64, f64)>,
    pacer: Pacer,
    i: u64,
}

impl Twitter {
    pub fn new(p: &mut Params, seed: u64) -> anyhow::Result<Twitter> {
        let (mix, keys) = ZipfMix::from_params(p, 1.2323, "write", 0.13)?;
        let key_size = p.u64("key_size", 36)?.clamp(min_key_len(keys) as u64, 250) as u16;
        let sizes = p.mix("sizes", "799:1")?;
        let jitter = p.prob("jitter", 0.5)?;
        let ttls = p.mix("ttl", "3600:0.67,7200:0.33")?;
        let pacer = Pacer::from_params(p, 10_730.0)?;
        Ok(Twitter {
            rng: Rng::new(seed, 0x7717),
            mix,
            key_size,
            sizes,
            jitter,
            ttls,
            pacer,
            i: 0,
        })
    }

    pub fn value_size(&self, key: u64) -> u32 {
        let base = pick_weighted(&self.sizes, unit_hash(key, SIZE_STREAM)).unwrap_or(1) as f64;
        let j = (2.0 * unit_hash(key, JITTER_STREAM) - 1.0) * self.jitter;
        ((base * (1.0 + j)).round() as u64).clamp(1, MAX_VALUE) as u32
    }

    pub fn ttl(&self, key: u64) -> u32 {
        pick_weighted(&self.ttls, unit_hash(key, TTL_STREAM)).unwrap_or(0) as u32
    }
}

impl Iterator for Twitter {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        let (key, op) = self.mix.next(&mut self.rng);
        let time_us = self.pacer.tick(&mut self.i);
        let ttl = self.ttl(key);
        Some(request(
            time_us,
            key,
            self.key_size,
            self.value_size(key),
            op,
            ttl,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_model;
    use super::*;
    use crate::trace::Op;

    fn model(params: &[(&str, &str)]) -> Twitter {
        test_model("twitter", params, |p| Twitter::new(p, 1))
    }

    #[test]
    fn defaults_reproduce_cluster29() {
        let reqs: Vec<Request> = model(&[("keys", "100000")]).take(200_000).collect();
        let sets = reqs.iter().filter(|r| r.op == Op::Set).count() as f64 / 2e5;
        assert!((sets - 0.13).abs() < 0.005, "{sets}");
        let mean_v = reqs.iter().map(|r| r.value_size as f64).sum::<f64>() / 2e5;
        // Popular keys dominate requests, so compare per-key means instead.
        let t = model(&[("keys", "100000")]);
        let per_key = (0..100_000).map(|k| t.value_size(k) as f64).sum::<f64>() / 1e5;
        assert!((per_key - 799.0).abs() < 5.0, "{per_key}");
        assert!(mean_v > 399.0 && mean_v < 1199.0);
        let hour = (0..100_000).filter(|&k| t.ttl(k) == 3600).count() as f64 / 1e5;
        assert!((hour - 0.67).abs() < 0.01, "{hour}");
        assert!((0..1000).all(|k| [3600, 7200].contains(&t.ttl(k))));
        assert!(reqs.iter().all(|r| r.key_size == 36));
        // Rank 1 (key 0) has probability 1/H(n, alpha).
        let h: f64 = (1..=100_000).map(|k| (k as f64).powf(-1.2323)).sum();
        let k0 = reqs.iter().filter(|r| r.key == 0).count() as f64 / 2e5;
        assert!((k0 - 1.0 / h).abs() < 0.01, "{k0} vs {}", 1.0 / h);
        // 10.73 kQPS.
        let secs = reqs.last().map(|r| r.time_us).unwrap_or(0) as f64 / 1e6;
        assert!((secs - 2e5 / 10_730.0).abs() < 0.01);
    }

    #[test]
    fn mixes_are_parameters() {
        let t = model(&[
            ("sizes", "100:1,10000:1"),
            ("jitter", "0"),
            ("ttl", "0:1"),
            ("write", "0.5"),
        ]);
        let big = (0..10_000).filter(|&k| t.value_size(k) == 10_000).count() as f64 / 1e4;
        assert!((big - 0.5).abs() < 0.02, "{big}");
        assert!((0..10_000).all(|k| [100, 10_000].contains(&t.value_size(k))));
        assert!((0..100).all(|k| t.ttl(k) == 0));
        let reqs: Vec<Request> = t.take(20_000).collect();
        let w = reqs.iter().filter(|r| r.op == Op::Set).count() as f64 / 2e4;
        assert!((w - 0.5).abs() < 0.02);
    }
}
