//! Workloads whose popularity changes over the trace.
//!
//! **Calcification** (Carra & Michiardi, "Memory partitioning and management
//! in Memcached", IEEE TSC; ../shared/seeds/003_*, section 5.1): two object
//! sets of Q1 = Q2 = 7 M objects; set 1 sizes GPD(location 0, scale 214.476,
//! shape 0.348238) (the ETC fit of Atikoglu et al.), set 2 sizes GPD(0,
//! 312.6175, 0.05); R = 200 M requests in three phases: phase 1 requests set 1
//! only, in phase 2 "random objects of the second set are increasingly
//! requested", phase 3 requests set 2 only. Popularity is "a truncated Normal
//! distribution that shifts over the object identifiers as the experiment
//! progresses" (footnote 6). The paper gives neither the phase lengths nor the
//! normal's spread; we use three equal phases (`phase1`, `phase2` fractions)
//! and a standard deviation of `sd` = 1/8 of a set: set 1's objects are ids
//! 0..Q1, set 2's are Q1..Q1+Q2; the mean sits at the middle of set 1 in
//! phase 1, moves linearly to the middle of set 2 during phase 2 (truncated
//! to both sets), and stays there in phase 3 (truncated to set 2). Costs are
//! 1, as in the paper. All requests are GETs (the application SETs misses).
//!
//! **zExpander pattern switch** (Wu et al., EuroSys'16; ../shared/seeds/000_*,
//! section 4.6, Figs. 15-16): 95% GET / 5% SET, keys first uniform, then (at
//! about the 480th second) YCSB's zipfian, i.e. the scrambled zipfian with
//! theta 0.99. The paper's run shows the switch at ~480 s and ~900 s of
//! re-allocation afterwards, so by default the switch comes at `switch` =
//! 0.25 of the requests. Values are the paper's "Places" records: each key's
//! size is that of its protobuf-like record ([`crate::values`], 2..327 B,
//! mean ~101 B); keys are 23 bytes as YCSB's.

use super::dist::{gpd, unit_hash, Rng, ScrambledZipfian};
use super::{min_key_len, request, Pacer, Params, MAX_VALUE};
use crate::trace::{Op, Request};
use crate::values::{natural_size, ValueKind};

const SIZE_STREAM: u64 = 0xca1c;

pub struct Calcification {
    rng: Rng,
    q: u64,
    sd: f64,
    p1_end: u64,
    p2_end: u64,
    key_size: u16,
    pacer: Pacer,
    i: u64,
}

impl Calcification {
    pub fn new(p: &mut Params, requests: u64, seed: u64) -> anyhow::Result<Calcification> {
        let q = p.u64("keys", 7_000_000)?.max(1);
        let sd = p.f64("sd", 0.125)?;
        anyhow::ensure!(sd > 0.0, "sd must be positive (a fraction of a set)");
        let phase1 = p.prob("phase1", 1.0 / 3.0)?;
        let phase2 = p.prob("phase2", 1.0 / 3.0)?;
        anyhow::ensure!(phase1 + phase2 <= 1.0, "phase1 + phase2 must be <= 1");
        let key_size = p.u64("key_size", 16)?.clamp(min_key_len(2 * q) as u64, 250) as u16;
        let pacer = Pacer::from_params(p, 100_000.0)?;
        let p1_end = (requests as f64 * phase1) as u64;
        let p2_end = (requests as f64 * (phase1 + phase2)) as u64;
        Ok(Calcification {
            rng: Rng::new(seed, 0xca1c),
            q,
            sd: sd * q as f64,
            p1_end,
            p2_end,
            key_size,
            pacer,
            i: 0,
        })
    }

    /// The object's size: GPD per set, fixed per object, at least 1 byte.
    pub fn value_size(&self, key: u64) -> u32 {
        let u = unit_hash(key, SIZE_STREAM);
        let s = if key < self.q {
            gpd(u, 0.0, 214.476, 0.348238)
        } else {
            gpd(u, 0.0, 312.6175, 0.05)
        };
        (s.round() as u64).clamp(1, MAX_VALUE) as u32
    }

    /// Mean and truncation bounds of the popularity at request `i`.
    fn popularity(&self, i: u64) -> (f64, f64, f64) {
        let q = self.q as f64;
        let (c1, c2) = (q / 2.0, q + q / 2.0);
        if i < self.p1_end {
            (c1, 0.0, q)
        } else if i < self.p2_end {
            let t = (i - self.p1_end) as f64 / (self.p2_end - self.p1_end).max(1) as f64;
            (c1 + t * (c2 - c1), 0.0, 2.0 * q)
        } else {
            (c2, q, 2.0 * q)
        }
    }
}

impl Iterator for Calcification {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        let (mean, lo, hi) = self.popularity(self.i);
        // Rejection from the normal: the bounds are at least 4 sd apart from
        // the mean's side, so few draws are rejected.
        let key = loop {
            let x = mean + self.sd * self.rng.normal();
            if x >= lo && x < hi {
                break (x as u64).min(2 * self.q - 1);
            }
        };
        let time_us = self.pacer.tick(&mut self.i);
        Some(request(
            time_us,
            key,
            self.key_size,
            self.value_size(key),
            Op::Get,
            0,
        ))
    }
}

/// Where the pattern switches by default, as a share of the requests (the
/// paper's switch at ~480 s before ~900 s of re-allocation, section 4.6).
pub const SWITCH: f64 = 0.25;

/// The request at which `zexpander-switch` goes from uniform to zipfian.
pub fn switch_request(requests: u64, switch: f64) -> u64 {
    (requests as f64 * switch) as u64
}

pub struct ZexpanderSwitch {
    rng: Rng,
    keys: u64,
    zipf: ScrambledZipfian,
    switch_at: u64,
    set: f64,
    key_size: u16,
    pacer: Pacer,
    i: u64,
}

impl ZexpanderSwitch {
    pub fn new(p: &mut Params, requests: u64, seed: u64) -> anyhow::Result<ZexpanderSwitch> {
        let keys = p.u64("keys", 1_000_000)?.max(1);
        let switch = p.prob("switch", SWITCH)?;
        let set = p.prob("set", 0.05)?;
        let theta = p.f64("theta", 0.99)?;
        anyhow::ensure!(theta > 0.0 && theta < 1.0, "theta must be in (0, 1)");
        let key_size = p.u64("key_size", 23)?.clamp(min_key_len(keys) as u64, 250) as u16;
        let pacer = Pacer::from_params(p, 100_000.0)?;
        Ok(ZexpanderSwitch {
            rng: Rng::new(seed, 0x2e8),
            keys,
            zipf: ScrambledZipfian::new(0, keys - 1, theta),
            switch_at: switch_request(requests, switch),
            set,
            key_size,
            pacer,
            i: 0,
        })
    }

    pub fn value_size(key: u64) -> u32 {
        natural_size(ValueKind::Proto, key) as u32
    }
}

impl Iterator for ZexpanderSwitch {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        let key = if self.i < self.switch_at {
            self.rng.below(self.keys)
        } else {
            self.zipf.next(&mut self.rng)
        };
        let op = Op::pick(self.rng.f64(), self.set, 0.0);
        let time_us = self.pacer.tick(&mut self.i);
        Some(request(
            time_us,
            key,
            self.key_size,
            Self::value_size(key),
            op,
            0,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_model;
    use super::*;

    #[test]
    fn calcification_phases_move_from_set_one_to_set_two() {
        let q = 100_000u64;
        let n = 300_000u64;
        let c = test_model("calcification", &[("keys", "100000")], |p| {
            Calcification::new(p, n, 1)
        });
        let reqs: Vec<Request> = c.take(n as usize).collect();
        let in2 =
            |rs: &[Request]| rs.iter().filter(|r| r.key >= q).count() as f64 / rs.len() as f64;
        assert_eq!(in2(&reqs[..100_000]), 0.0);
        assert_eq!(in2(&reqs[200_000..]), 1.0);
        // Phase 2: set 2's share grows from ~0 to ~1.
        let early = in2(&reqs[100_000..110_000]);
        let mid = in2(&reqs[145_000..155_000]);
        let late = in2(&reqs[190_000..200_000]);
        assert!(early < 0.05 && late > 0.95, "{early} {late}");
        assert!((mid - 0.5).abs() < 0.1, "{mid}");
        // Phase 1 is centred on set 1 with sd q/8.
        let keys: Vec<f64> = reqs[..100_000].iter().map(|r| r.key as f64).collect();
        let mean = keys.iter().sum::<f64>() / keys.len() as f64;
        let sd = (keys.iter().map(|k| (k - mean).powi(2)).sum::<f64>() / keys.len() as f64).sqrt();
        assert!((mean - 50_000.0).abs() < 300.0, "{mean}");
        assert!((sd - 12_500.0).abs() < 300.0, "{sd}");
        assert!(reqs.iter().all(|r| r.op == Op::Get && r.cost == 1));
    }

    #[test]
    fn calcification_sizes_follow_the_two_gpds() {
        let c = test_model("calcification", &[("keys", "100000")], |p| {
            Calcification::new(p, 10, 1)
        });
        let mut s1: Vec<u32> = (0..100_000).map(|k| c.value_size(k)).collect();
        let mut s2: Vec<u32> = (100_000..200_000).map(|k| c.value_size(k)).collect();
        s1.sort_unstable();
        s2.sort_unstable();
        // GPD(0, s, k) median s(2^k - 1)/k: 214.476 -> 167.9, 312.6175 -> 221.9.
        assert!((s1[50_000] as f64 - 167.9).abs() < 4.0, "{}", s1[50_000]);
        assert!((s2[50_000] as f64 - 221.9).abs() < 4.0, "{}", s2[50_000]);
        // Set 1's tail is heavier: its 99.9th percentile is well above set 2's.
        assert!(s1[99_900] > s2[99_900]);
    }

    #[test]
    fn zexpander_switches_from_uniform_to_zipfian() {
        let n = 200_000u64;
        let z = test_model("zexpander-switch", &[("keys", "100000")], |p| {
            ZexpanderSwitch::new(p, n, 1)
        });
        let reqs: Vec<Request> = z.take(n as usize).collect();
        let hot = super::super::dist::fnv64(0) % 100_000;
        let share =
            |rs: &[Request]| rs.iter().filter(|r| r.key == hot).count() as f64 / rs.len() as f64;
        assert!(share(&reqs[..50_000]) < 0.001);
        let after = share(&reqs[50_000..]);
        assert!(
            (after - 1.0 / super::super::dist::SCRAMBLED_ZETAN).abs() < 0.003,
            "{after}"
        );
        let sets = reqs.iter().filter(|r| r.op == Op::Set).count() as f64 / n as f64;
        assert!((sets - 0.05).abs() < 0.003);
        assert!(reqs.iter().all(|r| (2..=327).contains(&r.value_size)));
    }
}
