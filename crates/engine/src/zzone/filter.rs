//! 16-byte Bloom filters of a Z-zone block (zExpander §3.2): the *content*
//! filter answers most misses without decompressing the block; the
//! *access* filter records the keys read since the replacement sweep last
//! passed, whose absence marks eviction candidates.
//!
//! Three bits per key, taken from the key hash's low 21 bits: the trie
//! routes by the high bits, so within one block those are independent.
//! With zExpander's ~20 items per block, about 8% of absent keys pass
//! (`(1 - e^(-3 * 20 / 128))^3`).

/// A 128-bit Bloom filter over key hashes, kept as two words so that it
/// aligns to 8 bytes, not 16: block descriptors pack to 48 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Filter([u64; 2]);

impl Filter {
    #[inline]
    fn bits(&self) -> u128 {
        u128::from(self.0[0]) | (u128::from(self.0[1]) << 64)
    }

    #[inline]
    fn set_bits(&mut self, b: u128) {
        self.0 = [b as u64, (b >> 64) as u64];
    }

    #[inline]
    fn mask(h: u64) -> u128 {
        (1u128 << (h & 127)) | (1u128 << ((h >> 7) & 127)) | (1u128 << ((h >> 14) & 127))
    }

    #[inline]
    pub fn insert(&mut self, h: u64) {
        self.set_bits(self.bits() | Self::mask(h));
    }

    /// False means certainly absent.
    #[inline]
    pub fn may_contain(&self, h: u64) -> bool {
        let m = Self::mask(h);
        self.bits() & m == m
    }

    pub fn clear(&mut self) {
        self.0 = [0; 2];
    }

    pub fn to_bytes(self) -> [u8; 16] {
        self.bits().to_le_bytes()
    }

    pub fn from_bytes(b: [u8; 16]) -> Filter {
        let mut f = Filter::default();
        f.set_bits(u128::from_le_bytes(b));
        f
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
            let mut f = Filter::default();
            for &k in &keys {
                f.insert(hash(&k.to_le_bytes()));
            }
            for &k in &keys {
                prop_assert!(f.may_contain(hash(&k.to_le_bytes())));
            }
            prop_assert_eq!(Filter::from_bytes(f.to_bytes()), f);
        }
    }

    #[test]
    fn false_positives_near_the_estimate_for_a_block() {
        // 20 keys per filter, 1000 filters, 100 absent keys each.
        let (mut passed, mut tried) = (0u32, 0u32);
        for b in 0..1000u64 {
            let mut f = Filter::default();
            for i in 0..20u64 {
                f.insert(hash(&(b << 32 | i).to_le_bytes()));
            }
            for i in 1000..1100u64 {
                tried += 1;
                passed += u32::from(f.may_contain(hash(&(b << 32 | i).to_le_bytes())));
            }
            f.clear();
            assert!(!f.may_contain(hash(b"anything")));
        }
        let rate = passed as f64 / tried as f64;
        assert!((0.04..0.13).contains(&rate), "{rate}");
    }
}
