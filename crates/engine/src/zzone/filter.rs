//! Bloom filters of a Z-zone block (zExpander §3.2): the *content* filter
//! answers most misses without decompressing the block; the *access*
//! filter records the keys read since the replacement sweep last passed,
//! whose absence marks eviction candidates.
//!
//! Three bits per key, taken from the key hash's low bits: the trie routes
//! by the high bits, so within one block those are independent. zExpander's
//! 16 bytes suit its ~20 items per 2 KB block (about 8% of absent keys
//! pass); our 4 KB blocks hold ~60 items of 100 bytes compressed 3 ×, and
//! in 16 bytes a third of the absent keys passed, each a block decoded for
//! nothing (YCSB-B: 215,000 of 444,000 decodes). The content filter is
//! therefore a cache line, 512 bits (2.4% pass at 60 items); the access
//! filter, which holds only the keys read since the sweep, keeps 16 bytes.

/// A Bloom filter of `64 × W` bits over key hashes, kept as words so that
/// it aligns to 8 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Filter<const W: usize>([u64; W]);

/// A block's content filter: one cache line.
pub type Content = Filter<8>;
/// A block's access filter.
pub type Access = Filter<2>;

impl<const W: usize> Default for Filter<W> {
    fn default() -> Self {
        Filter([0; W])
    }
}

impl<const W: usize> Filter<W> {
    /// Bits of the hash per probe: log2 of the filter's bits (a power
    /// of two, checked where the filter is used).
    const PROBE_BITS: u32 = {
        assert!(W.is_power_of_two());
        (64 * W).trailing_zeros()
    };

    /// The three bits of `h`: (word, bit) each.
    #[inline]
    fn probes(h: u64) -> [(usize, u64); 3] {
        let mask = (64 * W - 1) as u64;
        std::array::from_fn(|i| {
            let b = (h >> (i as u32 * Self::PROBE_BITS)) & mask;
            ((b >> 6) as usize, 1u64 << (b & 63))
        })
    }

    #[inline]
    pub fn insert(&mut self, h: u64) {
        for (w, bit) in Self::probes(h) {
            self.0[w] |= bit;
        }
    }

    /// False means certainly absent.
    #[inline]
    pub fn may_contain(&self, h: u64) -> bool {
        Self::probes(h).iter().all(|&(w, bit)| self.0[w] & bit != 0)
    }

    pub fn clear(&mut self) {
        self.0 = [0; W];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::hash;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn no_false_negatives(keys in proptest::collection::vec(any::<u64>(), 0..64)) {
            let (mut c, mut a) = (Content::default(), Access::default());
            for &k in &keys {
                c.insert(hash(&k.to_le_bytes()));
                a.insert(hash(&k.to_le_bytes()));
            }
            for &k in &keys {
                prop_assert!(c.may_contain(hash(&k.to_le_bytes())));
                prop_assert!(a.may_contain(hash(&k.to_le_bytes())));
            }
            c.clear();
            prop_assert_eq!(c, Content::default());
        }
    }

    /// The share of absent keys that pass filters of `n` keys each.
    fn pass_rate<const W: usize>(n: u64) -> f64 {
        let (mut passed, mut tried) = (0u32, 0u32);
        for b in 0..1000u64 {
            let mut f = Filter::<W>::default();
            for i in 0..n {
                f.insert(hash(&(b << 32 | i).to_le_bytes()));
            }
            for i in 1000..1100u64 {
                tried += 1;
                passed += u32::from(f.may_contain(hash(&(b << 32 | i).to_le_bytes())));
            }
        }
        passed as f64 / tried as f64
    }

    #[test]
    fn false_positives_near_the_estimate_for_a_block() {
        // (1 - e^(-3n/m))^3: 8% for 20 keys in 128 bits; 2.4% for 60 keys
        // and 12% for 120 in 512 bits.
        let rate = pass_rate::<2>(20);
        assert!((0.04..0.13).contains(&rate), "{rate}");
        let rate = pass_rate::<8>(60);
        assert!((0.012..0.04).contains(&rate), "{rate}");
        let rate = pass_rate::<8>(120);
        assert!((0.08..0.17).contains(&rate), "{rate}");
    }
}
