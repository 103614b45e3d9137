//! One 64-byte index bucket: a cache line of ten 48-bit slots (12-bit key tag +
//! 36-bit item location) and 32 bits of expansion metadata.
//!
//! This is Cavast's "pointer set" bucket (section 4.3, "Cacheline-based hash
//! bucket" and "Tagging pointers"), shrunk from 6 slots of 10 bytes (16-bit tag +
//! 64-bit pointer) to 10 slots of 6 bytes: locations are slab coordinates, not
//! pointers, so 36 bits are plenty, and two thirds more slots per line is what
//! brings the index under 10 bytes per item. The slots are stored
//! structure-of-arrays so the ten tags sit in the first 20 bytes and a tag match
//! over the whole bucket compiles to a couple of vector compares.

/// Location of an item: an opaque value below `1 << LOC_BITS` (page and chunk).
pub type Loc = u64;

/// Slots per bucket.
pub(super) const SLOTS: usize = 10;
/// Bits of key tag per slot.
pub(super) const TAG_BITS: u32 = 12;
/// Bits of location per slot (the engine keeps locations below `1 << LOC_BITS`).
pub(super) const LOC_BITS: u32 = 36;

/// A bucket line.
///
/// Slot `i` is `hi[i]` = `tag << 4 | loc >> 32` and `lo[i]` = `loc as u32`.
/// Tag 0 is never produced by [`tag_of`], so `hi[i] == 0` means "empty slot";
/// location 0 stays valid.
///
/// `meta` holds two 16-bit halves whose meaning depends on where the bucket
/// lives (see the module documentation of `index`):
/// - a *primary* bucket: low half = its overflow sub-bucket (pool index + 1, 0 =
///   none), high half = a 16-bit filter of the tags stored in its sub-buckets;
/// - a *sub-bucket* in a pool: low half = child for hash bit 0, high half =
///   child for hash bit 1 (pool index + 1, 0 = none). A free pool node keeps the
///   next free node in its low half.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(C, align(64))]
pub(super) struct Bucket {
    hi: [u16; SLOTS],
    lo: [u32; SLOTS],
    meta: u32,
}

// Cavast's point: one bucket is exactly one cache line.
const _: () = assert!(std::mem::size_of::<Bucket>() == 64);
const _: () = assert!(std::mem::align_of::<Bucket>() == 64);
const _: () = assert!(TAG_BITS + LOC_BITS == 48);

/// The tag of a key hash: its low 12 bits, with 0 (the empty marker) folded
/// onto 1. The bucket is chosen from the high 32 bits and the sub-bucket path
/// from bits 12..32, so the tag is independent of both.
#[inline]
pub(super) fn tag_of(hash: u64) -> u16 {
    let t = (hash as u16) & ((1 << TAG_BITS) - 1);
    t | (t == 0) as u16
}

/// The bit a tag sets in a primary bucket's 16-bit overflow filter.
#[inline]
pub(super) fn filter_bit(tag: u16) -> u16 {
    1 << (tag & 15)
}

impl Bucket {
    pub(super) const EMPTY: Bucket = Bucket {
        hi: [0; SLOTS],
        lo: [0; SLOTS],
        meta: 0,
    };

    /// Bit `i` set when slot `i` holds `tag`. Written as a branch-free loop over
    /// the 20 tag bytes so the compiler turns it into vector compares.
    #[inline]
    pub(super) fn tag_mask(&self, tag: u16) -> u32 {
        let mut m = 0u32;
        for (i, &h) in self.hi.iter().enumerate() {
            m |= ((h >> 4 == tag) as u32) << i;
        }
        m
    }

    /// Bit `i` set when slot `i` is occupied.
    #[inline]
    pub(super) fn occupied_mask(&self) -> u32 {
        let mut m = 0u32;
        for (i, &h) in self.hi.iter().enumerate() {
            m |= ((h != 0) as u32) << i;
        }
        m
    }

    #[inline]
    pub(super) fn first_free(&self) -> Option<usize> {
        let free = !self.occupied_mask() & ((1 << SLOTS) - 1);
        (free != 0).then(|| free.trailing_zeros() as usize)
    }

    #[cfg(any(test, feature = "testing"))]
    pub(super) fn is_full(&self) -> bool {
        self.occupied_mask() == (1 << SLOTS) - 1
    }

    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.occupied_mask() == 0
    }

    #[inline]
    pub(super) fn tag(&self, i: usize) -> u16 {
        self.hi[i] >> 4
    }

    #[inline]
    pub(super) fn loc(&self, i: usize) -> Loc {
        (((self.hi[i] & 0xF) as u64) << 32) | self.lo[i] as u64
    }

    #[inline]
    pub(super) fn set(&mut self, i: usize, tag: u16, loc: Loc) {
        debug_assert!(tag != 0 && tag < 1 << TAG_BITS);
        debug_assert!(loc < 1 << LOC_BITS);
        self.hi[i] = (tag << 4) | (loc >> 32) as u16;
        self.lo[i] = loc as u32;
    }

    #[inline]
    pub(super) fn set_loc(&mut self, i: usize, loc: Loc) {
        let tag = self.tag(i);
        self.set(i, tag, loc);
    }

    #[inline]
    pub(super) fn clear(&mut self, i: usize) {
        self.hi[i] = 0;
        self.lo[i] = 0;
    }

    /// The slot holding exactly (tag, loc).
    #[inline]
    pub(super) fn find_exact(&self, tag: u16, loc: Loc) -> Option<usize> {
        let hi = (tag << 4) | (loc >> 32) as u16;
        let lo = loc as u32;
        (0..SLOTS).find(|&i| self.hi[i] == hi && self.lo[i] == lo)
    }

    /// The two 16-bit halves of the metadata word (see the type's doc).
    #[inline]
    pub(super) fn half(&self, which: usize) -> u16 {
        (self.meta >> (16 * which)) as u16
    }

    #[inline]
    pub(super) fn set_half(&mut self, which: usize, v: u16) {
        let shift = 16 * which;
        self.meta = (self.meta & !(0xFFFF << shift)) | ((v as u32) << shift);
    }

    /// Take out every entry as (tag, loc), leaving the slots empty (metadata is
    /// left alone).
    /// The locations of the occupied slots.
    pub(super) fn locs(&self) -> impl Iterator<Item = Loc> + '_ {
        let mut m = self.occupied_mask();
        std::iter::from_fn(move || {
            let i = m.trailing_zeros() as usize;
            (m != 0).then(|| {
                m &= m - 1;
                self.loc(i)
            })
        })
    }

    pub(super) fn drain_into(&mut self, out: &mut Vec<(u16, Loc)>) {
        let mut m = self.occupied_mask();
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            out.push((self.tag(i), self.loc(i)));
            self.clear(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_round_trips_extreme_values() {
        let mut b = Bucket::EMPTY;
        let max_loc = (1u64 << LOC_BITS) - 1;
        b.set(0, 1, 0);
        b.set(9, (1 << TAG_BITS) - 1, max_loc);
        b.set(4, 0x5A5, 0x9_1234_5678);
        assert_eq!((b.tag(0), b.loc(0)), (1, 0));
        assert_eq!((b.tag(9), b.loc(9)), ((1 << TAG_BITS) - 1, max_loc));
        assert_eq!((b.tag(4), b.loc(4)), (0x5A5, 0x9_1234_5678));
        assert_eq!(b.occupied_mask(), 1 | 1 << 4 | 1 << 9);
        assert_eq!(b.tag_mask(0x5A5), 1 << 4);
        assert_eq!(b.find_exact(0x5A5, 0x9_1234_5678), Some(4));
        // Same low 32 bits, other high nibble: a different location.
        assert_eq!(b.find_exact(0x5A5, 0x1_1234_5678), None);
        assert_eq!(b.first_free(), Some(1));
        b.clear(0);
        assert_eq!(b.first_free(), Some(0));
        // Location 0 with the smallest tag is still an occupied slot.
        b.set(0, 1, 0);
        assert!(!b.is_empty());
    }

    #[test]
    fn full_and_empty() {
        let mut b = Bucket::EMPTY;
        assert!(b.is_empty() && !b.is_full());
        for i in 0..SLOTS {
            b.set(i, 7, i as u64);
        }
        assert!(b.is_full());
        assert_eq!(b.first_free(), None);
        assert_eq!(b.tag_mask(7), (1 << SLOTS) - 1);
        let mut out = Vec::new();
        b.drain_into(&mut out);
        assert!(b.is_empty());
        assert_eq!(out.len(), SLOTS);
        assert!(out
            .iter()
            .enumerate()
            .all(|(i, &(t, l))| t == 7 && l == i as u64));
    }

    #[test]
    fn meta_halves_are_independent_of_slots() {
        let mut b = Bucket::EMPTY;
        b.set_half(0, 0xBEEF);
        b.set_half(1, 0x1234);
        assert_eq!((b.half(0), b.half(1)), (0xBEEF, 0x1234));
        b.set_half(0, 0);
        assert_eq!((b.half(0), b.half(1)), (0, 0x1234));
        assert!(b.is_empty());
    }

    #[test]
    fn tags_are_never_zero_and_use_low_bits() {
        assert_eq!(tag_of(0), 1);
        assert_eq!(tag_of(0x1000), 1);
        assert_eq!(tag_of(0xFFF), 0xFFF);
        assert_eq!(tag_of(0xABCD_0000_0000_0123), 0x123);
        assert_eq!(filter_bit(0x123), 1 << 3);
    }
}
