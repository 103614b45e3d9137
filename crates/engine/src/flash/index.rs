//! The flash tier's DRAM index: where each flash-resident item is, in
//! 8 bytes, with no key (issue 12: at most 12 bytes of DRAM per item).
//!
//! An entry packs 26 bits of the key's hash (the *tag*), the slab and the
//! container the item was written to, and SlimCache's access bit (§3.4: a
//! one-bit access count is enough, §4.3.4). The key is checked after the
//! container is read, so a tag shared by two keys costs a read, never a
//! wrong answer; removals take every entry of a tag, so a stale copy
//! never survives.
//!
//! Buckets are one cache line of 8 entries, and an entry may live in either
//! of two buckets, both computed from its tag (so a shard can be resized
//! without the keys): with two choices, 8-way buckets fill past 95%. A
//! shard grows by a quarter when it is `MAX_LOAD` full, so it is always
//! between 74% and 93% full: 8.6 to 10.8 bytes an entry (doubling would
//! leave it 45% full after each growth, 17.8 bytes). The index is cut into
//! shards by the top bits of the hash, each under its own mutex and growing
//! on its own, so a growth moves 1/[`SHARDS`] of the entries and no reader
//! waits long.

use parking_lot::Mutex;

/// Shards, chosen by the hash's top bits.
const SHARD_BITS: u32 = 8;
pub const SHARDS: usize = 1 << SHARD_BITS;
const WAYS: usize = 8;
const TAG_BITS: u32 = 26;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;
/// Bits of a slab number.
pub const SLAB_BITS: u32 = 24;
/// Bits of a container number within its slab.
pub const CONTAINER_BITS: u32 = 12;
const USED: u64 = 1;
const ACCESSED: u64 = 2;
/// A shard grows past this share of its slots.
const MAX_LOAD: f64 = 0.93;
/// Buckets of a new shard.
const START_BUCKETS: usize = 4;

/// Where an item is on flash: its slab and the container within it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Loc {
    pub slab: u32,
    pub container: u16,
}

type Bucket = [u64; WAYS];

fn tag_of(h: u64) -> u64 {
    (h >> (64 - SHARD_BITS - TAG_BITS)) & TAG_MASK
}

/// The bits of a key hash an entry keeps (its shard and tag, the top 34):
/// all that is known of a key whose entry is dropped.
pub fn prefix_of(h: u64) -> u64 {
    h & !((1 << (64 - SHARD_BITS - TAG_BITS)) - 1)
}

/// [`prefix_of`] a key from its shard and its entry's tag.
fn prefix_from(shard: usize, tag: u64) -> u64 {
    (shard as u64) << (64 - SHARD_BITS) | tag << (64 - SHARD_BITS - TAG_BITS)
}

/// The shard of `h`: keys of different shards never share an entry, so
/// threads owning disjoint shards may fill the index at once.
pub(crate) fn shard_of(h: u64) -> usize {
    (h >> (64 - SHARD_BITS)) as usize
}

fn pack(tag: u64, loc: Loc) -> u64 {
    debug_assert!(u64::from(loc.slab) < 1 << SLAB_BITS);
    debug_assert!(u64::from(loc.container) < 1 << CONTAINER_BITS);
    tag << 38 | u64::from(loc.slab) << 14 | u64::from(loc.container) << 2 | USED
}

fn entry_tag(e: u64) -> u64 {
    e >> 38
}

fn entry_loc(e: u64) -> Loc {
    Loc {
        slab: ((e >> 14) & ((1 << SLAB_BITS) - 1)) as u32,
        container: ((e >> 2) & ((1 << CONTAINER_BITS) - 1)) as u16,
    }
}

/// An entry's location without its flag bits, for comparisons.
fn same_place(e: u64, tag: u64, loc: Loc) -> bool {
    e & !ACCESSED == pack(tag, loc)
}

struct Shard {
    buckets: Vec<Bucket>,
    items: usize,
}

impl Shard {
    fn new(buckets: usize) -> Shard {
        Shard {
            buckets: vec![[0; WAYS]; buckets.max(2)],
            items: 0,
        }
    }

    /// The two buckets of a tag: the tag scaled to the bucket count
    /// (Lemire's multiply-shift), and another at a distance a mix of the
    /// tag gives (never the same bucket).
    fn buckets_of(&self, tag: u64) -> [usize; 2] {
        let n = self.buckets.len() as u64;
        let b1 = (tag * n) >> TAG_BITS;
        let mix = tag.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        let b2 = (b1 + 1 + mix % (n - 1)) % n;
        [b1 as usize, b2 as usize]
    }

    fn capacity(&self) -> usize {
        self.buckets.len() * WAYS
    }

    /// Put `e` in the emptier of its buckets (the power of two choices:
    /// taking the first with room fills far less); false if both are full.
    fn place(&mut self, e: u64) -> bool {
        let [b1, b2] = self.buckets_of(entry_tag(e));
        let free = |b: &Bucket| b.iter().filter(|&&s| s == 0).count();
        let b = if free(&self.buckets[b2]) > free(&self.buckets[b1]) {
            b2
        } else {
            b1
        };
        match self.buckets[b].iter_mut().find(|s| **s == 0) {
            Some(slot) => {
                *slot = e;
                self.items += 1;
                true
            }
            None => self.kick(e, [b1, b2]),
        }
    }

    /// Both buckets of `e` are full: move one of their entries to its
    /// other bucket if that has room, and put `e` in its slot (one step
    /// of cuckoo hashing). Without it, removals and inserts churning at a
    /// steady item count made a full pair now and then, each one grew the
    /// shard, and the index crept to 13.4 bytes an item (a FIFO of 1.7 M
    /// entries, 27 K at a time).
    fn kick(&mut self, e: u64, buckets: [usize; 2]) -> bool {
        for b in buckets {
            for i in 0..WAYS {
                let other = self.buckets[b][i];
                let [o1, o2] = self.buckets_of(entry_tag(other));
                let alt = if o1 == b { o2 } else { o1 };
                if let Some(slot) = self.buckets[alt].iter_mut().find(|s| **s == 0) {
                    *slot = other;
                    self.buckets[b][i] = e;
                    self.items += 1;
                    return true;
                }
            }
        }
        false
    }

    /// Insert `e`: see [`FlashIndex::insert`].
    fn insert(&mut self, e: u64, may_grow: bool) -> Inserted {
        let mut done = Inserted::default();
        let before = self.capacity();
        if may_grow {
            if self.items + 1 > (self.capacity() as f64 * MAX_LOAD) as usize {
                self.grow();
            }
            while !self.place(e) {
                self.grow();
            }
        } else if !self.place(e) {
            // Both buckets full: the first bucket's last entry goes.
            let b = self.buckets_of(entry_tag(e))[0];
            let victim = std::mem::replace(&mut self.buckets[b][WAYS - 1], e);
            done.dropped.push((entry_tag(victim), entry_loc(victim)));
        }
        done.grew = (self.capacity() - before) * 8;
        done
    }

    /// Remove every entry of `tag`, calling `gone` with each location.
    fn remove_tag(&mut self, tag: u64, mut gone: impl FnMut(Loc)) {
        for b in self.buckets_of(tag) {
            for i in 0..WAYS {
                let e = self.buckets[b][i];
                if e != 0 && entry_tag(e) == tag {
                    self.buckets[b][i] = 0;
                    self.items -= 1;
                    gone(entry_loc(e));
                }
            }
        }
    }

    /// A quarter more buckets (more again in the rare case that some
    /// entry finds both of its buckets full at the new size).
    fn grow(&mut self) {
        self.grow_to(self.buckets.len() + self.buckets.len().div_ceil(4));
    }

    /// At least `n` buckets (a quarter more again until every entry
    /// finds room).
    fn grow_to(&mut self, mut n: usize) {
        loop {
            let mut bigger = Shard::new(n);
            let mut entries = self.buckets.iter().flatten().copied().filter(|&e| e != 0);
            if entries.all(|e| bigger.place(e)) {
                *self = bigger;
                return;
            }
            n += n.div_ceil(4);
        }
    }
}

/// The index. Methods take the key's 64-bit hash.
pub struct FlashIndex {
    shards: Box<[Mutex<Shard>]>,
}

impl Default for FlashIndex {
    fn default() -> Self {
        FlashIndex {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(Shard::new(START_BUCKETS)))
                .collect(),
        }
    }
}

/// What [`FlashIndex::insert`] did beside inserting.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Inserted {
    /// Bytes the index grew by.
    pub grew: usize,
    /// Entries dropped to make room (their items are lost from flash):
    /// the [`prefix_of`] their keys' hashes, and where they were.
    pub dropped: Vec<(u64, Loc)>,
}

impl FlashIndex {
    /// Every place an item of hash `h` may be (usually none or one).
    pub fn find(&self, h: u64, out: &mut Vec<Loc>) {
        out.clear();
        let tag = tag_of(h);
        let shard = self.shards[shard_of(h)].lock();
        for b in shard.buckets_of(tag) {
            for &e in &shard.buckets[b] {
                if e != 0 && entry_tag(e) == tag {
                    out.push(entry_loc(e));
                }
            }
        }
    }

    /// Record that the item of `h` is at `loc`. A full shard grows if
    /// `may_grow`, else the entry pushes out one of its buckets' entries
    /// (returned; its data stays on flash, unreachable, until its slab is
    /// recycled).
    pub fn insert(&self, h: u64, loc: Loc, may_grow: bool) -> Inserted {
        let mut shard = self.shards[shard_of(h)].lock();
        let mut r = shard.insert(pack(tag_of(h), loc), may_grow);
        for d in &mut r.dropped {
            d.0 = prefix_from(shard_of(h), d.0);
        }
        r
    }

    /// [`FlashIndex::remove`] then [`FlashIndex::insert`] (growing), under
    /// one lock and one visit of the buckets: a crash scan's step, where a
    /// newer copy replaces any older one.
    pub fn replace(&self, h: u64, loc: Loc) {
        let tag = tag_of(h);
        let mut shard = self.shards[shard_of(h)].lock();
        shard.remove_tag(tag, |_| {});
        shard.insert(pack(tag, loc), true);
    }

    /// Start loading the buckets of `h` into the CPU's cache (a crash scan
    /// does this a few items ahead: its inserts are otherwise one cache
    /// miss after another).
    pub fn prefetch(&self, h: u64) {
        let shard = self.shards[shard_of(h)].lock();
        for b in shard.buckets_of(tag_of(h)) {
            crate::hash::prefetch(shard.buckets[b].as_ptr().cast());
        }
    }

    /// Make room for `more` entries of these hashes at once (a crash
    /// scan's): each shard grows once, to the size its growth by quarters
    /// would reach at the lowest, rather than a step at a time, each step
    /// placing every entry again.
    pub fn reserve(&self, more: impl Iterator<Item = u64>) {
        let mut counts = vec![0usize; SHARDS];
        more.for_each(|h| counts[shard_of(h)] += 1);
        for (shard, n) in self.shards.iter().zip(counts) {
            let mut shard = shard.lock();
            let want = ((shard.items + n) as f64 / MAX_LOAD).ceil() as usize;
            let buckets = want.div_ceil(WAYS);
            if buckets > shard.buckets.len() {
                shard.grow_to(buckets);
            }
        }
    }

    /// Remove every entry of `h`'s tag (the item's, and any other key's
    /// that shares it: a removal must never leave a stale copy). Calls
    /// `gone` with each location removed.
    pub fn remove(&self, h: u64, gone: impl FnMut(Loc)) {
        self.shards[shard_of(h)].lock().remove_tag(tag_of(h), gone);
    }

    /// The entry of `h` at `loc`, if there is one: `f` gets it (to change
    /// it in place, 0 to remove it) and its result is returned.
    fn with_entry<R>(&self, h: u64, loc: Loc, f: impl FnOnce(&mut u64) -> R) -> Option<R> {
        let tag = tag_of(h);
        let mut shard = self.shards[shard_of(h)].lock();
        let shard = &mut *shard;
        for b in shard.buckets_of(tag) {
            if let Some(e) = shard.buckets[b]
                .iter_mut()
                .find(|e| **e != 0 && same_place(**e, tag, loc))
            {
                let r = f(e);
                if *e == 0 {
                    shard.items -= 1;
                }
                return Some(r);
            }
        }
        None
    }

    /// Remove the entry of `h` at `loc`, if there is one; returns whether
    /// it was there and whether it had been read since written.
    pub fn remove_at(&self, h: u64, loc: Loc) -> Option<bool> {
        self.with_entry(h, loc, |e| {
            let accessed = *e & ACCESSED != 0;
            *e = 0;
            accessed
        })
    }

    /// Whether the entry of `h` at `loc` exists and has been read.
    pub fn accessed(&self, h: u64, loc: Loc) -> Option<bool> {
        self.with_entry(h, loc, |e| *e & ACCESSED != 0)
    }

    /// Move the entry of `h` from `from` to `to` (a GC rewrite), clearing
    /// its access bit; false if it is gone (removed meanwhile).
    pub fn relocate(&self, h: u64, from: Loc, to: Loc) -> bool {
        self.with_entry(h, from, |e| *e = pack(tag_of(h), to))
            .is_some()
    }

    /// Set the access bit of the entry of `h` at `loc`; whether it was
    /// set already (None: no such entry).
    pub fn mark_accessed(&self, h: u64, loc: Loc) -> Option<bool> {
        self.with_entry(h, loc, |e| {
            let before = *e & ACCESSED != 0;
            *e |= ACCESSED;
            before
        })
    }

    /// Remove every entry in `slab` (when its contents could not be read
    /// to find them one by one). Returns how many.
    pub fn remove_slab(&self, slab: u32) -> usize {
        let mut n = 0;
        for s in self.shards.iter() {
            let mut shard = s.lock();
            let mut gone = 0;
            for e in shard.buckets.iter_mut().flatten() {
                if *e != 0 && entry_loc(*e).slab == slab {
                    *e = 0;
                    gone += 1;
                }
            }
            shard.items -= gone;
            n += gone;
        }
        n
    }

    /// Every shard's entries, for a snapshot (`recover`).
    pub fn export(&self) -> Vec<Vec<u64>> {
        self.shards
            .iter()
            .map(|s| {
                let shard = s.lock();
                shard
                    .buckets
                    .iter()
                    .flatten()
                    .copied()
                    .filter(|&e| e != 0)
                    .collect()
            })
            .collect()
    }

    /// Put back what [`FlashIndex::export`] saved (into an empty index).
    /// Entries of one shard go back to the same shard: an entry does not
    /// hold the hash bits that choose it.
    pub fn import(&self, shards: &[Vec<u64>]) {
        for (s, entries) in self.shards.iter().zip(shards) {
            let mut shard = s.lock();
            *shard = Shard::new((entries.len() as f64 / (WAYS as f64 * 0.8)) as usize + 1);
            for &e in entries.iter().filter(|&&e| e & USED != 0) {
                while !shard.place(e) {
                    shard.grow();
                }
            }
        }
    }

    /// Drop everything; the shards go back to their first size.
    pub fn clear(&self) {
        for s in self.shards.iter() {
            *s.lock() = Shard::new(START_BUCKETS);
        }
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().items).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of DRAM the buckets take.
    pub fn memory_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().capacity() * 8)
            .sum::<usize>()
            + std::mem::size_of::<Self>()
            + SHARDS * std::mem::size_of::<Mutex<Shard>>()
    }

    /// Every entry sits in one of its own buckets, in its own shard, and
    /// the counts agree.
    #[cfg(any(test, feature = "testing"))]
    pub fn validate(&self) {
        for (i, s) in self.shards.iter().enumerate() {
            let shard = s.lock();
            let mut n = 0;
            for (b, bucket) in shard.buckets.iter().enumerate() {
                for &e in bucket.iter().filter(|&&e| e != 0) {
                    assert!(e & USED != 0, "entry without its used bit");
                    assert!(
                        shard.buckets_of(entry_tag(e)).contains(&b),
                        "shard {i}: entry in bucket {b} is not one of its tag's"
                    );
                    n += 1;
                }
            }
            assert_eq!(n, shard.items, "shard {i} item count");
        }
    }

    /// Every entry, as (shard, tag, location): for the tests' models.
    #[cfg(test)]
    fn entries(&self) -> Vec<(usize, u64, Loc)> {
        let mut v = Vec::new();
        for (i, s) in self.shards.iter().enumerate() {
            for &e in s.lock().buckets.iter().flatten().filter(|&&e| e != 0) {
                v.push((i, entry_tag(e), entry_loc(e)));
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn h_of(k: u64) -> u64 {
        xxhash_rust::xxh3::xxh3_64(&k.to_le_bytes())
    }

    fn loc(k: u64) -> Loc {
        Loc {
            slab: (k % (1 << SLAB_BITS)) as u32,
            container: (k % 4096) as u16,
        }
    }

    #[test]
    fn a_million_entries_take_under_twelve_bytes_each() {
        let idx = FlashIndex::default();
        for k in 0..1_000_000u64 {
            let r = idx.insert(h_of(k), loc(k), true);
            assert!(r.dropped.is_empty(), "entry {k} dropped while growing");
            if k > 100_000 && k % 50_000 == 0 {
                let per = idx.memory_bytes() as f64 / (k + 1) as f64;
                assert!(per < 12.0, "{per} bytes per entry at {k} entries");
            }
        }
        idx.validate();
        assert_eq!(idx.len(), 1_000_000);
        // Checked at every size on the way, not only where a million falls.
        let per_item = idx.memory_bytes() as f64 / 1e6;
        assert!(per_item < 12.0, "{per_item} bytes per entry");
        let mut out = Vec::new();
        for k in (0..1_000_000u64).step_by(997) {
            idx.find(h_of(k), &mut out);
            assert!(out.contains(&loc(k)), "entry {k} not found");
        }
    }

    /// A FIFO of 1.7 M entries, 27 K in and 27 K out at a time (the flash
    /// recycling slabs at a steady item count): the index stays under 12
    /// bytes an item, not only while it grows.
    #[test]
    fn churn_at_a_steady_count_does_not_inflate_it() {
        let idx = FlashIndex::default();
        let slab = 27_000u64;
        for round in 0..80u64 {
            let at = |k: u64| Loc {
                slab: (k / slab % 64) as u32,
                container: 0,
            };
            for k in round * slab..(round + 1) * slab {
                assert!(idx.insert(h_of(k), at(k), true).dropped.is_empty());
            }
            if round >= 63 {
                for k in (round - 63) * slab..(round - 62) * slab {
                    assert_eq!(idx.remove_at(h_of(k), at(k)), Some(false));
                }
            }
        }
        idx.validate();
        let per = idx.memory_bytes() as f64 / idx.len() as f64;
        assert!(per < 12.0, "{per} bytes per entry after churn");
    }

    #[test]
    fn full_buckets_drop_an_entry_when_growth_is_refused() {
        let idx = FlashIndex::default();
        let mut dropped = 0;
        let n = SHARDS * START_BUCKETS * WAYS * 2;
        for k in 0..n as u64 {
            dropped += idx.insert(h_of(k), loc(k), false).dropped.len();
        }
        idx.validate();
        assert_eq!(idx.len() + dropped, n);
        assert!(idx.len() <= SHARDS * START_BUCKETS * WAYS);
        assert!(dropped >= n / 2);
    }

    /// After a reserve for a crash scan's keys, inserting them all grows
    /// nothing (one growth per shard, not one per quarter), and the index
    /// stays within 12 bytes an item.
    #[test]
    fn a_reserve_makes_room_for_the_keys_at_once() {
        let idx = FlashIndex::default();
        let n = 200_000u64;
        idx.reserve((0..n).map(h_of));
        let bytes = idx.memory_bytes();
        for i in 0..n {
            let loc = Loc {
                slab: (i % 4000) as u32,
                container: (i % 4096) as u16,
            };
            idx.replace(h_of(i), loc);
        }
        idx.validate();
        // A key replaces any other of its shard and tag (a handful here).
        let distinct: std::collections::HashSet<u64> = (0..n)
            .map(|i| h_of(i) >> (64 - SHARD_BITS - TAG_BITS))
            .collect();
        assert_eq!(idx.len(), distinct.len());
        assert_eq!(idx.memory_bytes(), bytes, "grew after the reserve");
        assert!(bytes as f64 / n as f64 <= 12.0, "{bytes} bytes");
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16, u32),
        Remove(u16),
        RemoveAt(u16, u32),
        Mark(u16, u32),
        Relocate(u16, u32, u32),
        RemoveSlab(u32),
        Replace(u16, u32),
        Reserve(Vec<u16>),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few keys and few slabs, so operations meet; some keys share tags
        // (the hash is narrowed below).
        let key = 0u16..300;
        let slab = 0u32..8;
        prop_oneof![
            4 => (key.clone(), slab.clone()).prop_map(|(k, s)| Op::Insert(k, s)),
            2 => key.clone().prop_map(Op::Remove),
            1 => (key.clone(), slab.clone()).prop_map(|(k, s)| Op::RemoveAt(k, s)),
            1 => (key.clone(), slab.clone()).prop_map(|(k, s)| Op::Mark(k, s)),
            1 => (key.clone(), slab.clone(), slab.clone()).prop_map(|(k, a, b)| Op::Relocate(k, a, b)),
            1 => slab.clone().prop_map(Op::RemoveSlab),
            1 => (key.clone(), slab).prop_map(|(k, s)| Op::Replace(k, s)),
            1 => proptest::collection::vec(key, 0..200).prop_map(Op::Reserve),
        ]
    }

    /// Keys 0..300 map to 150 distinct tags, all in two shards, so tag
    /// sharing and bucket overflow both happen.
    fn narrow(k: u16) -> u64 {
        let h = h_of(u64::from(k / 2));
        h & (TAG_MASK << (64 - SHARD_BITS - TAG_BITS)) | 1 << 63
    }

    proptest! {
        /// Against a model: a multiset of (tag, location, accessed). Every
        /// operation agrees with it, except that an insert into two full
        /// buckets drops one entry, which the model then drops too.
        #[test]
        fn agrees_with_a_model(ops in proptest::collection::vec(op(), 1..400)) {
            let idx = FlashIndex::default();
            let mut model: HashMap<(u64, Loc), bool> = HashMap::new();
            let l = |s: u32| Loc { slab: s, container: (s * 7) as u16 };
            let mut out = Vec::new();
            for op in ops {
                match op {
                    Op::Insert(k, s) => {
                        let h = narrow(k);
                        if model.contains_key(&(tag_of(h), l(s))) {
                            continue; // one entry per (tag, place), as the tier keeps it
                        }
                        let r = idx.insert(h, l(s), k % 3 != 0);
                        model.insert((tag_of(h), l(s)), false);
                        for (prefix, d) in r.dropped {
                            let key = model
                                .keys()
                                .find(|(t, lo)| *lo == d && idx.entries().iter().all(|e| (e.1, e.2) != (*t, *lo)))
                                .copied();
                            prop_assert!(key.is_some(), "dropped {d:?} not in the model");
                            prop_assert_eq!(
                                prefix,
                                prefix_of(h) & !(TAG_MASK << (64 - SHARD_BITS - TAG_BITS))
                                    | key.unwrap().0 << (64 - SHARD_BITS - TAG_BITS)
                            );
                            prop_assert_eq!(tag_of(prefix), key.unwrap().0);
                            model.remove(&key.unwrap());
                        }
                    }
                    Op::Remove(k) => {
                        let h = narrow(k);
                        let mut gone = Vec::new();
                        idx.remove(h, |lo| gone.push(lo));
                        let mut want: Vec<Loc> = model.keys().filter(|(t, _)| *t == tag_of(h)).map(|(_, lo)| *lo).collect();
                        model.retain(|(t, _), _| *t != tag_of(h));
                        gone.sort();
                        want.sort();
                        prop_assert_eq!(gone, want);
                    }
                    Op::RemoveAt(k, s) => {
                        let h = narrow(k);
                        prop_assert_eq!(idx.remove_at(h, l(s)), model.remove(&(tag_of(h), l(s))));
                    }
                    Op::Mark(k, s) => {
                        let h = narrow(k);
                        let before = idx.mark_accessed(h, l(s));
                        prop_assert_eq!(before, model.get(&(tag_of(h), l(s))).copied());
                        if let Some(a) = model.get_mut(&(tag_of(h), l(s))) {
                            *a = true;
                        }
                        prop_assert_eq!(idx.accessed(h, l(s)), model.get(&(tag_of(h), l(s))).copied());
                    }
                    Op::Relocate(k, a, b) => {
                        let h = narrow(k);
                        if a == b || model.contains_key(&(tag_of(h), l(b))) {
                            continue;
                        }
                        let moved = idx.relocate(h, l(a), l(b));
                        prop_assert_eq!(moved, model.remove(&(tag_of(h), l(a))).is_some());
                        if moved {
                            model.insert((tag_of(h), l(b)), false);
                        }
                    }
                    Op::Replace(k, s) => {
                        let h = narrow(k);
                        idx.replace(h, l(s));
                        model.retain(|(t, _), _| *t != tag_of(h));
                        model.insert((tag_of(h), l(s)), false);
                    }
                    Op::Reserve(keys) => {
                        // Growing keeps every entry.
                        idx.reserve(keys.iter().map(|&k| narrow(k)));
                    }
                    Op::RemoveSlab(s) => {
                        let n = idx.remove_slab(s);
                        let before = model.len();
                        model.retain(|(_, lo), _| lo.slab != s);
                        prop_assert_eq!(n, before - model.len());
                    }
                }
                idx.validate();
                prop_assert_eq!(idx.len(), model.len());
            }
            // Every model entry is found by its tag.
            for (t, lo) in model.keys() {
                let h = (*t << (64 - SHARD_BITS - TAG_BITS)) | 1 << 63;
                idx.find(h, &mut out);
                prop_assert!(out.contains(lo));
            }
        }
    }
}
