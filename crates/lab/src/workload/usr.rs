//! Facebook's USR pool (Atikoglu, Xu, Frachtenberg, Jiang, Paleczny,
//! "Workload analysis of a large-scale key-value store", SIGMETRICS'12), the
//! pool of user-account status information, as zExpander (Wu et al.,
//! EuroSys'16, sections 2 and 4.3, Figs. 1, 2, 5, 6) replayed it beside ETC
//! and APP. The paper models only ETC statistically (section 6); USR is
//! built here from the figures quoted about it:
//! - key size: 16 or 21 bytes, nothing else (the SIGMETRICS'12 authors'
//!   description of USR's keys, which docs/lab.md's ETC notes quote too).
//!   The paper's text was not available to us for the mix of the two, so
//!   `long_keys` (the share of 21-byte keys, fixed per key by hash) is 0.5;
//! - value size: "virtually only one value size, which is 2 bytes"
//!   (zExpander section 2.2, quoting the SIGMETRICS'12 paper): every value
//!   is `value_size` = 2 bytes;
//! - GET:SET: GETs are 99.8% of USR's requests (SIGMETRICS'12's request
//!   composition, section 3.1, as it is quoted; not checked against the
//!   paper's text, which was not available here): `set` = 0.002, `delete` 0;
//! - popularity: a plain Zipf law over the keys (rejection-inversion, as
//!   ETC's), `alpha` = 0.91, calibrated on zExpander's Fig. 1: USR's 17.0%
//!   most accessed items receive 80% of the accesses (ETC's 3.6%, APP's
//!   6.9%: USR is the flattest of the three). Over 1 M keys Zipf(0.91) puts
//!   80.0% of the requests on the top 17%; the calibration depends on the
//!   key count (0.935 would be needed over 100 k keys);
//! - arrivals: no model in either paper; requests are `rate` (100 000) per
//!   second apart, as the other models without an arrival process.

use super::dist::{unit_hash, Rng};
use super::{request, Pacer, Params, ZipfMix, MAX_VALUE};
use crate::trace::Request;

/// The two key lengths of USR.
pub const KEY_SIZES: (u16, u16) = (16, 21);
/// zExpander Fig. 1: the most accessed 17.0% of USR's items take 80%.
pub const TOP_KEYS: f64 = 0.170;
pub const ALPHA: f64 = 0.91;

/// Stream of [`unit_hash`] for the per-key length.
const KEY_SIZE_STREAM: u64 = 0x05e1;

pub struct Usr {
    rng: Rng,
    mix: ZipfMix,
    long_keys: f64,
    value_size: u32,
    pacer: Pacer,
    i: u64,
}

impl Usr {
    pub fn new(p: &mut Params, seed: u64) -> anyhow::Result<Usr> {
        let (mix, _) = ZipfMix::from_params(p, ALPHA, "set", 0.002)?;
        let long_keys = p.prob("long_keys", 0.5)?;
        let value_size = p.u64("value_size", 2)?.min(MAX_VALUE) as u32;
        let pacer = Pacer::from_params(p, 100_000.0)?;
        Ok(Usr {
            rng: Rng::new(seed, 0x05e),
            mix,
            long_keys,
            value_size,
            pacer,
            i: 0,
        })
    }

    /// The fixed key length of `key`: 16 or 21 bytes (either renders any
    /// 64-bit id distinctly in hex).
    pub fn key_size(&self, key: u64) -> u16 {
        if unit_hash(key, KEY_SIZE_STREAM) < self.long_keys {
            KEY_SIZES.1
        } else {
            KEY_SIZES.0
        }
    }
}

impl Iterator for Usr {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        let (key, op) = self.mix.next(&mut self.rng);
        let time_us = self.pacer.tick(&mut self.i);
        let (key_size, value_size) = (self.key_size(key), self.value_size);
        Some(request(time_us, key, key_size, value_size, op, 0))
    }
}

#[cfg(test)]
mod tests {
    use super::super::dist::zeta;
    use super::super::{assert_top_share, test_model};
    use super::*;
    use crate::trace::Op;

    fn model(params: &[(&str, &str)], seed: u64) -> Usr {
        test_model("usr", params, |p| Usr::new(p, seed))
    }

    #[test]
    fn sizes_and_mix_follow_the_pool() {
        let reqs: Vec<Request> = model(&[("keys", "100000")], 1).take(500_000).collect();
        // Keys are 16 or 21 bytes, about half of the keys each; values 2 B.
        assert!(reqs.iter().all(|r| [16, 21].contains(&r.key_size)));
        assert!(reqs.iter().all(|r| r.value_size == 2));
        let m = model(&[], 1);
        let long = (0..100_000u64).filter(|&k| m.key_size(k) == 21).count() as f64 / 1e5;
        assert!((long - 0.5).abs() < 0.01, "{long}");
        // GETs are 99.8% of the requests.
        let gets = reqs.iter().filter(|r| r.op == Op::Get).count() as f64 / 5e5;
        assert!((gets - 0.998).abs() < 0.0005, "{gets}");
        assert!(reqs.iter().all(|r| r.op != Op::Delete));
        // A key keeps its length.
        let k0: Vec<&Request> = reqs.iter().filter(|r| r.key == 7).collect();
        assert!(k0.len() > 1 && k0.iter().all(|r| r.key_size == k0[0].key_size));
        // 100 000 requests per second.
        assert_eq!(reqs[100_000].time_us, 1_000_000);
    }

    #[test]
    fn popularity_matches_zexpanders_fig_1() {
        // The law: over the default 1 M keys, the top 17.0% of keys take 80%.
        // And the generator draws from it.
        assert_top_share(model(&[], 2), TOP_KEYS, ALPHA, 0.80);
        let n = 1_000_000u64;
        // The flattest of the three pools: with ETC's calibration target
        // (3.6% of keys) it takes far less than ETC's 80%.
        assert!(zeta(36_000, ALPHA) / zeta(n, ALPHA) < 0.72);
    }

    #[test]
    fn parameters_change_what_they_say() {
        let m = model(
            &[("long_keys", "0"), ("value_size", "100"), ("set", "0.5")],
            3,
        );
        let reqs: Vec<Request> = m.take(20_000).collect();
        assert!(reqs.iter().all(|r| r.key_size == 16 && r.value_size == 100));
        let sets = reqs.iter().filter(|r| r.op == Op::Set).count() as f64 / 2e4;
        assert!((sets - 0.5).abs() < 0.02, "{sets}");
    }
}
