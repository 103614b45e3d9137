//! The live curve's index of its sampled keys: key hash -> the key's
//! number in the sample and its slot in the whole cache's stack, in one
//! open-addressed table (linear probing, deletion by backward shift) that
//! never moves.
//!
//! Why not a `HashMap`: a sampled request is one in dozens, so the index
//! is cold by the time one comes, and a map's control bytes, its entry,
//! then the stack's slot array were three cache misses in a row, most of
//! the curve's cost on a pipelined load. Here the entry holds the slot
//! itself, and its line can be prefetched ([`Home::prefetch`]) as soon as
//! a request's key is hashed, before the engine's lookup, without the
//! curve's lock: the table is allocated once, at its largest.

use crate::hash::prefetch;

/// An entry no key holds.
const VACANT: u32 = u32::MAX;
/// A key with no slot in a stack (yet).
pub const NO_SLOT: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub h: u64,
    /// The key's number in the sample ([`VACANT`]: no key).
    pub obj: u32,
    /// Its slot in the whole cache's stack ([`NO_SLOT`] until it has one).
    pub slot: u32,
}

const NONE: Entry = Entry {
    h: 0,
    obj: VACANT,
    slot: NO_SLOT,
};

/// Where a key's entry is, for prefetching it outside the curve's lock.
#[derive(Clone, Copy, Debug)]
pub struct Home {
    base: usize,
    mask: usize,
}

impl Home {
    /// Start loading the line the entry of hash `h` is probed from first.
    #[inline]
    pub fn prefetch(self, h: u64) {
        let at = self.base + (h as usize & self.mask) * std::mem::size_of::<Entry>();
        prefetch(at as *const u8);
    }
}

#[derive(Clone)]
pub struct SampleIndex {
    entries: Box<[Entry]>,
    mask: usize,
    len: usize,
}

impl SampleIndex {
    /// An index for at most `max` keys, at most two thirds full.
    pub fn new(max: usize) -> SampleIndex {
        let cap = Self::capacity(max);
        SampleIndex {
            entries: vec![NONE; cap].into_boxed_slice(),
            mask: cap - 1,
            len: 0,
        }
    }

    /// Entries of an index for `max` keys.
    pub fn capacity(max: usize) -> usize {
        ((max + 1) * 3 / 2 + 1).next_power_of_two()
    }

    /// Bytes of an index for `max` keys.
    pub fn memory_bytes(max: usize) -> usize {
        Self::capacity(max) * std::mem::size_of::<Entry>()
    }

    pub fn home(&self) -> Home {
        Home {
            base: self.entries.as_ptr() as usize,
            mask: self.mask,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The position of the entry of hash `h`.
    #[inline]
    pub fn find(&self, h: u64) -> Option<usize> {
        let mut i = h as usize & self.mask;
        loop {
            let e = &self.entries[i];
            if e.obj == VACANT {
                return None;
            }
            if e.h == h {
                return Some(i);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Add hash `h` (not in the index) as key `obj` with no slot yet;
    /// returns its position. The caller keeps the index under `max` keys.
    pub fn insert(&mut self, h: u64, obj: u32) -> usize {
        assert!(self.len < self.mask, "sample index full");
        let mut i = h as usize & self.mask;
        while self.entries[i].obj != VACANT {
            i = (i + 1) & self.mask;
        }
        self.entries[i] = Entry {
            h,
            obj,
            slot: NO_SLOT,
        };
        self.len += 1;
        i
    }

    pub fn get(&self, pos: usize) -> Entry {
        self.entries[pos]
    }

    pub fn set_slot(&mut self, pos: usize, slot: u32) {
        self.entries[pos].slot = slot;
    }

    /// Take out the entry at `pos`: the entries after it in its run move
    /// back where their probe would find them (Knuth's Algorithm R), so
    /// no tombstones pile up under a churning sample.
    pub fn remove_at(&mut self, pos: usize) {
        let mut hole = pos;
        let mut i = pos;
        loop {
            i = (i + 1) & self.mask;
            let e = self.entries[i];
            if e.obj == VACANT {
                break;
            }
            let home = e.h as usize & self.mask;
            // Move e into the hole unless its home lies cyclically in
            // (hole, i]: then the hole is not on its probe path.
            let stays = if hole <= i {
                hole < home && home <= i
            } else {
                hole < home || home <= i
            };
            if !stays {
                self.entries[hole] = e;
                hole = i;
            }
        }
        self.entries[hole] = NONE;
        self.len -= 1;
    }

    /// Every entry that holds a key.
    pub fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| e.obj != VACANT)
    }

    /// Check the invariants: every key is found from its home by probing
    /// with no vacant entry in between, once, and `len` counts them.
    #[cfg(test)]
    pub fn validate(&self) {
        let mut n = 0;
        for (i, e) in self.entries.iter().enumerate() {
            if e.obj == VACANT {
                continue;
            }
            n += 1;
            let mut j = e.h as usize & self.mask;
            while j != i {
                assert_ne!(self.entries[j].obj, VACANT, "a gap before entry {i}");
                assert_ne!(self.entries[j].h, e.h, "hash {:x} twice", e.h);
                j = (j + 1) & self.mask;
            }
        }
        assert_eq!(n, self.len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u64),
        Remove(u64),
        Slot(u64, u32),
    }

    /// Hashes from a few home buckets, so that runs wrap and collide.
    fn op() -> impl Strategy<Value = Op> {
        let h = (0u64..40, 0u64..4).prop_map(|(k, hi)| k.wrapping_mul(0x9e37) ^ (hi << 62) | 0x3f);
        prop_oneof![
            h.clone().prop_map(Op::Insert),
            h.clone().prop_map(Op::Remove),
            (h, any::<u32>()).prop_map(|(h, s)| Op::Slot(h, s)),
        ]
    }

    proptest! {
        /// Against a HashMap: after every operation each key is found with
        /// its number and slot, and no other is.
        #[test]
        fn matches_a_map(ops in proptest::collection::vec(op(), 1..400)) {
            let mut idx = SampleIndex::new(20);
            let mut model: HashMap<u64, (u32, u32)> = HashMap::new();
            let mut next = 0u32;
            for o in ops {
                match o {
                    Op::Insert(h) => {
                        if !model.contains_key(&h) && model.len() < 20 {
                            idx.insert(h, next);
                            model.insert(h, (next, NO_SLOT));
                            next += 1;
                        }
                    }
                    Op::Remove(h) => {
                        if let Some(p) = idx.find(h) {
                            idx.remove_at(p);
                        }
                        model.remove(&h);
                    }
                    Op::Slot(h, s) => {
                        if let Some(p) = idx.find(h) {
                            idx.set_slot(p, s);
                        }
                        if let Some(v) = model.get_mut(&h) {
                            v.1 = s;
                        }
                    }
                }
                idx.validate();
                prop_assert_eq!(idx.len(), model.len());
                for (&h, &(obj, slot)) in &model {
                    let e = idx.get(idx.find(h).expect("a key is found"));
                    prop_assert_eq!((e.h, e.obj, e.slot), (h, obj, slot));
                }
                prop_assert_eq!(idx.iter().count(), model.len());
            }
        }
    }

    #[test]
    fn sized_two_thirds_full_at_most() {
        for max in [16, 1000, 1024, 4096, 5461, 65_536] {
            let cap = SampleIndex::capacity(max);
            assert!(cap.is_power_of_two());
            assert!((max + 1) * 3 <= cap * 2, "{max} -> {cap}");
        }
    }
}
