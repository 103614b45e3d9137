//! What the Z-zone's evictions cost: a sampled ghost of the keys its
//! sweep evicted lately, so that the split (`split`) can tell a zone that
//! is larger than its workload needs from one whose evictions come back
//! as misses.
//!
//! zExpander (§3.3.1) moves memory to the N-zone whenever it serves less
//! than its target share of requests. That is a rule for speed, and it
//! costs hits whenever the zone is short of memory: reading back a fill
//! of `-m 64` (every GET a zone hit, so the N-zone's share fell to 10%)
//! shrank the zone from 90% of memory to 42% and evicted 600,000 items
//! the same read-back then missed. Here a GET miss that finds its key
//! among the keys the zone evicted within its last step of memory
//! (`split::STEP`, 3% of `-m`) is a hit that one step more of zone would
//! have kept, and one step less would lose again: the split gives the
//! zone's memory up for speed only while these are rare.
//!
//! One hash in [`SAMPLE`] is remembered (SHARDS-style spatial sampling,
//! on hash bits the ghost table does not use), so the table is small: at
//! most 1/512 of `-m`, counted in the zone's metadata. It is the
//! rebalancer's [`GhostSet`] with one class whose "page" is the window.
//!
//! The ghost is not aged when the zone grows (the rebalancer's is): at
//! 15% misses a window of evictions spans some 250,000 requests, longer
//! than the split's window, so a ghost emptied at each step never filled,
//! read low, and the split swung between growing and shrinking around its
//! start (YCSB-B, `sim`, 20 M requests: 50% of memory and 0.148 misses,
//! against 0.051 with the zone at its most). Not aging may grow the zone a
//! step too far, which costs speed, never hits.

use crate::rebalance::ghost::GhostSet;

/// One key hash in `SAMPLE` is remembered; hits count `SAMPLE` each.
pub const SAMPLE: u64 = 8;
/// Bits of the hash that choose the sample: above the ghost table's
/// 32-bit fingerprint, below its bucket bits (40 and up).
const SAMPLE_SHIFT: u32 = 32;

pub struct Regret {
    ghost: GhostSet,
    /// Sampled keys per window, as last set.
    window: u32,
}

#[inline]
fn sampled(h: u64) -> bool {
    (h >> SAMPLE_SHIFT).is_multiple_of(SAMPLE)
}

impl Regret {
    /// A ghost of at most `bytes`.
    pub fn new(bytes: usize) -> Regret {
        let window = 1024;
        Regret {
            ghost: GhostSet::new(&[window], 1, bytes),
            window,
        }
    }

    /// The window: the keys the zone holds in one step of memory
    /// (`items`, all of them, not only the sampled).
    pub fn set_window(&mut self, items: u64) {
        let w = (items / SAMPLE).clamp(8, u32::MAX as u64) as u32;
        if w != self.window {
            self.window = w;
            self.ghost.resize(0, w);
        }
    }

    /// The sweep evicted the key with hash `h`.
    #[inline]
    pub fn evicted(&mut self, h: u64) {
        if sampled(h) {
            self.ghost.insert(h, 0);
        }
    }

    /// A client's read of `h` missed: the hits (estimated, in whole keys)
    /// one more step of zone would have had.
    #[inline]
    pub fn missed(&mut self, h: u64) -> u64 {
        if sampled(h) && self.ghost.take(h).is_some() {
            SAMPLE
        } else {
            0
        }
    }

    pub fn memory_bytes(&self) -> usize {
        self.ghost.memory_bytes()
    }

    #[cfg(any(test, feature = "testing"))]
    pub fn validate(&self) {
        self.ghost.validate();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::hash;

    fn h(i: u64) -> u64 {
        hash(format!("key:{i}").as_bytes())
    }

    #[test]
    fn misses_on_recent_evictions_count_and_old_ones_do_not() {
        let mut r = Regret::new(64 << 10);
        r.set_window(16_000);
        // Evict 16,000 keys (one window), then miss on all of them: about
        // 16,000 estimated, within the sampling's error.
        for i in 0..16_000 {
            r.evicted(h(i));
        }
        let regret: u64 = (0..16_000).map(|i| r.missed(h(i))).sum();
        assert!((12_000..=20_000).contains(&regret), "{regret}");
        // A hit is consumed: a second miss on the same keys counts nothing.
        assert_eq!((0..16_000).map(|i| r.missed(h(i))).sum::<u64>(), 0);
        // Keys evicted more than a window ago are forgotten.
        for i in 100_000..100_000 + 64_000 {
            r.evicted(h(i));
        }
        let old: u64 = (100_000..116_000).map(|i| r.missed(h(i))).sum();
        assert_eq!(old, 0);
        let recent: u64 = (148_000..164_000).map(|i| r.missed(h(i))).sum();
        assert!(recent >= 8_000, "{recent}");
        r.validate();
    }

    #[test]
    fn misses_on_keys_never_evicted_count_nothing() {
        let mut r = Regret::new(64 << 10);
        r.set_window(4_000);
        for i in 0..4_000 {
            r.evicted(h(i));
        }
        assert_eq!((10_000..20_000).map(|i| r.missed(h(i))).sum::<u64>(), 0);
        r.validate();
    }
}
