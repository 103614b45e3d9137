//! The LRU stack of Mattson et al. ("Evaluation techniques for storage
//! hierarchies", IBM Syst. J. 1970) kept as Olken's counting tree, which is
//! what Carra & Michiardi (IEEE TSC, `../shared/seeds/003_*`, section 3.1 and
//! footnote 4) used behind their Algorithm 1.
//!
//! Instead of a linked stack, every object remembers the "slot" (a logical
//! timestamp) of its last access, and a counting tree over slots marks which
//! slots are some object's most recent access. An object's stack position is
//! then the number of marked slots at or after its own: O(log n) per access.
//! The same tree weighs each mark by the object's size, so the same walk
//! gives the *byte* stack distance: the sizes of the distinct objects above
//! it plus its own, which is exactly the cache size (in bytes) from which an
//! LRU that evicts until the newcomer fits would hit it.
//!
//! The tree is 8-ary, stored level by level, and a node's eight children
//! lie together in one cache line (two for the byte sums): the sum below a
//! slot adds, at each level, the siblings left of the slot's ancestor, and
//! an update adds to that ancestor, in the same lines. An access touches
//! about `log8(slots)` groups, each loaded at once by [`Stack::prefetch`]
//! (the slot's ancestors are known from the slot alone). The two Fenwick
//! trees this replaced touched two lines at each of `log2(slots)` levels
//! for the walk down and as many for the update: for the live curve's few
//! thousand sampled keys, some 50 lines a sampled request, cold each time
//! and each taking an engine line's place in the core's cache. The server
//! went 0.9% faster with all observers on, and the lab's exact curves
//! took 0.83 x the time (docs/benchmarks.md, issue 36).
//!
//! Slots are handed out in order and never reused, so when they run out the
//! live ones are renumbered in order (compaction, O(live)); capacity stays
//! within a small factor of the number of distinct objects, not the trace
//! length, so 10 M requests over 1 M objects need a few tens of MB.

/// A slot no object owns.
const EMPTY: u32 = u32::MAX;
/// The fewest slots a stack is renumbered into.
const MIN_SLOTS: usize = 1024;
/// Children per node, and slots per leaf group.
const FAN: usize = 8;

/// Eight slots: their owners and sizes, one cache line.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Leaf {
    owner: [u32; FAN],
    size: [u32; FAN],
}

const EMPTY_LEAF: Leaf = Leaf {
    owner: [EMPTY; FAN],
    size: [0; FAN],
};

/// Eight nodes' object counts (half a cache line).
#[derive(Clone, Copy, Default)]
#[repr(C, align(32))]
struct Counts([u32; FAN]);

/// Eight nodes' byte sums (one cache line).
#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
struct Sums([u64; FAN]);

/// One level of inner nodes: node `j` sums the slots
/// `j * 8^k .. (j + 1) * 8^k` at level `k` (1 = the leaves' parents).
#[derive(Clone, Default)]
struct Level {
    count: Vec<Counts>,
    /// Empty when byte distances are not wanted.
    bytes: Vec<Sums>,
}

/// One LRU stack. Objects are named by the caller's dense index (`u32`); the
/// caller keeps each object's slot in `slots[obj]` and passes that array in,
/// so one array can serve several stacks whose object sets are disjoint (the
/// per-slab-class stacks).
#[derive(Clone)]
pub struct Stack {
    leaves: Vec<Leaf>,
    /// Inner levels, the leaves' parents first, up to one of at most
    /// [`FAN`] nodes (whose left siblings are the whole level).
    levels: Vec<Level>,
    /// Slots (a multiple of [`FAN`]).
    cap: usize,
    next: usize,
    /// No object owns a slot below this (where [`Stack::oldest`] looks).
    low: usize,
    live: usize,
    total_bytes: u64,
    with_bytes: bool,
}

/// Where an accessed object was in the stack before the access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Distance {
    /// 1-based position: 1 = the most recently used object.
    pub items: u64,
    /// Sum of the sizes of the objects at positions 1..=items.
    pub bytes: u64,
}

impl Stack {
    pub fn new(with_bytes: bool) -> Stack {
        let mut s = Stack {
            leaves: Vec::new(),
            levels: Vec::new(),
            cap: 0,
            next: 0,
            low: 0,
            live: 0,
            total_bytes: 0,
            with_bytes,
        };
        s.rebuild(Stack::slots_for(0), |_, _| {});
        s
    }

    /// The slots a stack of `live` objects is renumbered into: twice its
    /// objects, so that the O(capacity) rebuild comes once per `live`
    /// pushes at the earliest (O(1) amortised) and memory stays ~2x the
    /// objects, or [`MIN_SLOTS`].
    fn slots_for(live: usize) -> usize {
        (2 * live).max(MIN_SLOTS)
    }

    /// The most bytes a stack of at most `objects` objects takes: its
    /// renumbered slots ([`Stack::slots_for`]) and up to a leaf more.
    pub fn memory_bytes_for(objects: usize, with_bytes: bool) -> usize {
        Stack::memory_bytes(Stack::slots_for(objects) + FAN, with_bytes)
    }

    /// The bytes a stack of `slots` slots takes: its leaves and levels.
    pub fn memory_bytes(slots: usize, with_bytes: bool) -> usize {
        let mut nodes = slots.div_ceil(FAN);
        let mut total = nodes * size_of::<Leaf>();
        let per_group = size_of::<Counts>() + if with_bytes { size_of::<Sums>() } else { 0 };
        loop {
            total += nodes.div_ceil(FAN) * per_group;
            if nodes <= FAN {
                return total;
            }
            nodes = nodes.div_ceil(FAN);
        }
    }

    /// Number of objects in the stack.
    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The object in `slot` (EMPTY if none).
    #[inline]
    fn owner_at(&self, slot: usize) -> u32 {
        self.leaves[slot / FAN].owner[slot % FAN]
    }

    /// The object in `slot`, if one is.
    #[cfg(test)]
    pub fn owner(&self, slot: u32) -> Option<u32> {
        let slot = slot as usize;
        (slot < self.cap)
            .then(|| self.owner_at(slot))
            .filter(|&o| o != EMPTY)
    }

    /// Sum of the sizes of the objects in the stack (0 without byte tracking).
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Marks and sizes in the slots before `slot`: those left of it in its
    /// leaf, then at each level the nodes left of its ancestor in their
    /// group (the top level is one group).
    fn below(&self, slot: usize) -> (u64, u64) {
        let leaf = &self.leaves[slot / FAN];
        let i = slot % FAN;
        let mut count = leaf.owner[..i].iter().filter(|&&o| o != EMPTY).count() as u64;
        let mut bytes: u64 = leaf.size[..i].iter().map(|&s| s as u64).sum();
        let mut node = slot / FAN;
        for level in &self.levels {
            let (g, i) = (node / FAN, node % FAN);
            count += level.count[g].0[..i].iter().map(|&c| c as u64).sum::<u64>();
            if self.with_bytes {
                bytes += level.bytes[g].0[..i].iter().sum::<u64>();
            }
            node = g;
        }
        (count, bytes)
    }

    /// Add to the sums of `slot`'s ancestors (the lines [`Stack::below`]
    /// read).
    fn add(&mut self, slot: usize, count: i32, bytes: i64) {
        let mut node = slot / FAN;
        for level in &mut self.levels {
            let (g, i) = (node / FAN, node % FAN);
            let c = &mut level.count[g].0[i];
            *c = c.wrapping_add_signed(count);
            if self.with_bytes {
                let b = &mut level.bytes[g].0[i];
                *b = b.wrapping_add_signed(bytes);
            }
            node = g;
        }
    }

    /// Start loading every line an access of `slot` reads or writes, before
    /// it reads any (they are known from the slot alone, so their misses
    /// overlap rather than follow one another).
    #[inline]
    fn prefetch(&self, slot: usize) {
        let mut node = slot / FAN;
        crate::hash::prefetch((&self.leaves[node] as *const Leaf).cast());
        for level in &self.levels {
            let g = node / FAN;
            crate::hash::prefetch((&level.count[g] as *const Counts).cast());
            if let Some(b) = level.bytes.get(g) {
                crate::hash::prefetch((b as *const Sums).cast());
            }
            node = g;
        }
    }

    /// Start loading the lines the next [`Stack::push_with`] writes (its
    /// slot is known before the pushed object is).
    #[inline]
    pub fn prefetch_top(&self) {
        if self.next < self.cap {
            self.prefetch(self.next);
        }
    }

    /// Distance of the object in `slot` (which it must own).
    fn distance_at(&self, slot: usize) -> Distance {
        // Marks strictly before the slot are less recent objects.
        let (below, below_bytes) = self.below(slot);
        let items = self.live as u64 - below;
        let bytes = if self.with_bytes {
            self.total_bytes - below_bytes
        } else {
            0
        };
        Distance { items, bytes }
    }

    /// Access `obj` with size `size`: returns its distance before the access
    /// (None if it was not in the stack) and moves it to the top with the new
    /// size.
    pub fn access(&mut self, obj: u32, size: u32, slots: &mut Vec<u32>) -> Option<Distance> {
        let found = self.remove(obj, slots);
        self.push(obj, size, slots);
        found
    }

    /// The least recently used object and its distance (the whole stack).
    pub fn oldest(&mut self) -> Option<(u32, Distance)> {
        let from = self.low.min(self.next);
        let slot = (from..self.next).find(|&s| self.owner_at(s) != EMPTY)?;
        self.low = slot;
        Some((self.owner_at(slot), self.distance_at(slot)))
    }

    /// Take `obj` out of the stack (a delete, or a move to another stack);
    /// returns where it was.
    pub fn remove(&mut self, obj: u32, slots: &mut [u32]) -> Option<Distance> {
        let slot = *slots.get(obj as usize)?;
        if slot == EMPTY || slot as usize >= self.cap || self.owner_at(slot as usize) != obj {
            return None;
        }
        slots[obj as usize] = EMPTY;
        Some(self.remove_at(slot).0)
    }

    /// Take the object in `slot` (which one must own) out of the stack;
    /// returns where it was and its size. For a caller that keeps the
    /// slots itself ([`Stack::push_with`]).
    pub fn remove_at(&mut self, slot: u32) -> (Distance, u32) {
        let slot = slot as usize;
        debug_assert_ne!(self.owner_at(slot), EMPTY, "slot {slot} is free");
        self.prefetch(slot);
        let d = self.distance_at(slot);
        let leaf = &mut self.leaves[slot / FAN];
        let sz = std::mem::take(&mut leaf.size[slot % FAN]);
        leaf.owner[slot % FAN] = EMPTY;
        self.add(slot, -1, -(sz as i64));
        self.live -= 1;
        self.total_bytes -= sz as u64;
        (d, sz)
    }

    /// Put `obj` (not in the stack) on top.
    fn push(&mut self, obj: u32, size: u32, slots: &mut Vec<u32>) {
        let o = obj as usize;
        if slots.len() <= o {
            slots.resize(o + 1, EMPTY);
        }
        let slot = self.push_with(obj, size, |o, s| {
            if let Some(slot) = slots.get_mut(o as usize) {
                *slot = s;
            }
        });
        slots[o] = slot;
    }

    /// Put `obj` (not in the stack) on top; returns its slot. When the
    /// slots are renumbered first, `moved(obj, slot)` is told each live
    /// object's new slot.
    pub fn push_with(&mut self, obj: u32, size: u32, moved: impl FnMut(u32, u32)) -> u32 {
        if self.next >= self.cap {
            self.rebuild(Stack::slots_for(self.live), moved);
        }
        let slot = self.next;
        self.next += 1;
        let size = if self.with_bytes { size } else { 0 };
        self.prefetch(slot);
        let leaf = &mut self.leaves[slot / FAN];
        leaf.owner[slot % FAN] = obj;
        leaf.size[slot % FAN] = size;
        self.add(slot, 1, size as i64);
        self.live += 1;
        self.total_bytes += size as u64;
        slot as u32
    }

    /// Renumber live slots 0.. in order into `cap` slots (rounded up to
    /// whole leaves); rebuild the levels in O(cap).
    fn rebuild(&mut self, cap: usize, mut moved: impl FnMut(u32, u32)) {
        let cap = cap.div_ceil(FAN).max(1) * FAN;
        let mut leaves = vec![EMPTY_LEAF; cap / FAN];
        let mut n = 0;
        for s in 0..self.next {
            let (o, size) = (self.owner_at(s), self.leaves[s / FAN].size[s % FAN]);
            if o != EMPTY {
                leaves[n / FAN].owner[n % FAN] = o;
                leaves[n / FAN].size[n % FAN] = size;
                moved(o, n as u32);
                n += 1;
            }
        }
        // Each level's nodes, from the leaves up to a single group.
        let mut counts: Vec<u32> = leaves
            .iter()
            .map(|l| l.owner.iter().filter(|&&o| o != EMPTY).count() as u32)
            .collect();
        let mut sums: Vec<u64> = match self.with_bytes {
            true => leaves
                .iter()
                .map(|l| l.size.iter().map(|&s| s as u64).sum())
                .collect(),
            false => Vec::new(),
        };
        let mut levels = Vec::new();
        loop {
            let groups = counts.len().div_ceil(FAN);
            let mut level = Level {
                count: vec![Counts::default(); groups],
                bytes: vec![Sums::default(); if self.with_bytes { groups } else { 0 }],
            };
            for (j, &c) in counts.iter().enumerate() {
                level.count[j / FAN].0[j % FAN] = c;
            }
            for (j, &b) in sums.iter().enumerate() {
                level.bytes[j / FAN].0[j % FAN] = b;
            }
            levels.push(level);
            if counts.len() <= FAN {
                break;
            }
            counts = counts.chunks(FAN).map(|c| c.iter().sum()).collect();
            sums = sums.chunks(FAN).map(|c| c.iter().sum()).collect();
        }
        self.leaves = leaves;
        self.levels = levels;
        self.cap = cap;
        self.next = n;
        self.low = 0;
    }

    /// Check the levels against the leaves (tests).
    #[cfg(test)]
    fn validate(&self) {
        let mut counts: Vec<u64> = self
            .leaves
            .iter()
            .map(|l| l.owner.iter().filter(|&&o| o != EMPTY).count() as u64)
            .collect();
        let mut sums: Vec<u64> = self
            .leaves
            .iter()
            .map(|l| l.size.iter().map(|&s| s as u64).sum())
            .collect();
        assert_eq!(counts.iter().sum::<u64>(), self.live as u64);
        assert!((self.next..self.cap).all(|s| self.owner_at(s) == EMPTY));
        for level in &self.levels {
            for (j, &c) in counts.iter().enumerate() {
                assert_eq!(
                    level.count[j / FAN].0[j % FAN] as u64,
                    c,
                    "count of node {j}"
                );
                if self.with_bytes {
                    assert_eq!(
                        level.bytes[j / FAN].0[j % FAN],
                        sums[j],
                        "bytes of node {j}"
                    );
                }
            }
            counts = counts.chunks(FAN).map(|c| c.iter().sum()).collect();
            sums = sums.chunks(FAN).map(|c| c.iter().sum()).collect();
        }
        assert_eq!(counts.len(), 1, "the top level is one group");
        if self.with_bytes {
            assert_eq!(sums[0], self.total_bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// xorshift64: a seeded stream for the random walk below.
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u32) -> u32 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as u32
        }
    }

    /// The textbook stack: a Vec with the most recent object first.
    fn naive(stack: &mut Vec<(u32, u32)>, obj: u32, size: u32) -> Option<Distance> {
        let pos = stack.iter().position(|&(o, _)| o == obj);
        let d = pos.map(|p| Distance {
            items: p as u64 + 1,
            bytes: stack[..=p].iter().map(|&(_, s)| s as u64).sum(),
        });
        if let Some(p) = pos {
            stack.remove(p);
        }
        stack.insert(0, (obj, size));
        d
    }

    #[test]
    fn small_example_by_hand() {
        let mut s = Stack::new(true);
        let mut slots = Vec::new();
        assert_eq!(s.access(1, 100, &mut slots), None);
        assert_eq!(s.access(2, 200, &mut slots), None);
        // 1 is below 2: two objects, 300 bytes including itself.
        assert_eq!(
            s.access(1, 100, &mut slots),
            Some(Distance {
                items: 2,
                bytes: 300
            })
        );
        assert_eq!(s.access(3, 50, &mut slots), None);
        // Stack is 3, 1, 2.
        assert_eq!(
            s.access(2, 200, &mut slots),
            Some(Distance {
                items: 3,
                bytes: 350
            })
        );
        assert_eq!(
            s.remove(1, &mut slots),
            Some(Distance {
                items: 3,
                bytes: 350
            })
        );
        assert_eq!(s.len(), 2);
        assert_eq!(s.total_bytes(), 250);
        assert_eq!(s.remove(1, &mut slots), None);
        // Stack is 2, 3: 3 is the oldest, under 250 bytes.
        assert_eq!(
            s.oldest(),
            Some((
                3,
                Distance {
                    items: 2,
                    bytes: 250
                }
            ))
        );
    }

    #[test]
    fn matches_naive_stack_through_many_compactions() {
        let mut rng = Rng(7);
        let mut s = Stack::new(true);
        let mut slots = Vec::new();
        let mut reference = Vec::new();
        for step in 0..60_000u32 {
            // A skewed object choice so both near and far distances occur.
            let obj = if rng.below(2) == 0 {
                rng.below(20)
            } else {
                rng.below(3000)
            };
            let size = 1 + rng.below(999);
            if step % 97 == 0 {
                let want = reference.iter().position(|&(o, _)| o == obj).map(|p| {
                    let d = Distance {
                        items: p as u64 + 1,
                        bytes: reference[..=p]
                            .iter()
                            .map(|&(_, s): &(u32, u32)| s as u64)
                            .sum(),
                    };
                    reference.remove(p);
                    d
                });
                assert_eq!(s.remove(obj, &mut slots), want, "delete at step {step}");
                continue;
            }
            let want = naive(&mut reference, obj, size);
            assert_eq!(s.access(obj, size, &mut slots), want, "step {step}");
            if step % 4999 == 0 {
                s.validate();
            }
        }
        s.validate();
        assert_eq!(s.len(), reference.len());
        assert_eq!(
            s.total_bytes(),
            reference.iter().map(|&(_, s)| s as u64).sum::<u64>()
        );
        // Trim from the bottom: the oldest is the reference's last.
        while let Some((obj, d)) = s.oldest() {
            let &(want, _) = reference.last().expect("as many objects");
            assert_eq!((obj, d.items), (want, reference.len() as u64));
            assert_eq!(s.remove(obj, &mut slots), Some(d));
            reference.pop();
        }
        assert!(reference.is_empty());
    }

    proptest::proptest! {
        /// Accesses and removals of a few objects, in either mode, give
        /// the textbook stack's distances, and the levels stay the sums of
        /// the leaves (through renumbering: 300 accesses pass 1,024 slots
        /// only with repeats, so the objects are few and the steps many).
        #[test]
        fn matches_the_textbook_stack(
            with_bytes: bool,
            ops in proptest::collection::vec((0u32..40, 1u32..5000, proptest::bool::weighted(0.1)), 1..1500),
        ) {
            let mut s = Stack::new(with_bytes);
            let mut slots = Vec::new();
            let mut reference = Vec::new();
            for (obj, size, delete) in ops {
                let was = reference.iter().position(|&(o, _)| o == obj);
                let want = was.map(|p| Distance {
                    items: p as u64 + 1,
                    bytes: match with_bytes {
                        true => reference[..=p].iter().map(|&(_, s): &(u32, u32)| s as u64).sum(),
                        false => 0,
                    },
                });
                if delete {
                    if let Some(p) = was {
                        reference.remove(p);
                    }
                    proptest::prop_assert_eq!(s.remove(obj, &mut slots), want);
                } else {
                    naive(&mut reference, obj, size);
                    proptest::prop_assert_eq!(s.access(obj, size, &mut slots), want);
                }
                s.validate();
            }
            proptest::prop_assert_eq!(s.len(), reference.len());
        }
    }

    #[test]
    fn count_only_stack_reports_no_bytes() {
        let mut s = Stack::new(false);
        let mut slots = Vec::new();
        s.access(5, 1000, &mut slots);
        s.access(6, 1000, &mut slots);
        assert_eq!(
            s.access(5, 1000, &mut slots),
            Some(Distance { items: 2, bytes: 0 })
        );
        assert_eq!(s.total_bytes(), 0);
    }
}
