//! The LRU stack of Mattson et al. ("Evaluation techniques for storage
//! hierarchies", IBM Syst. J. 1970) kept as Olken's counting tree, which is
//! what Carra & Michiardi (IEEE TSC, `../shared/seeds/003_*`, section 3.1 and
//! footnote 4) used behind their Algorithm 1.
//!
//! Instead of a linked stack, every object remembers the "slot" (a logical
//! timestamp) of its last access, and a Fenwick tree over slots marks which
//! slots are some object's most recent access. An object's stack position is
//! then the number of marked slots at or after its own: O(log n) per access.
//! A second Fenwick tree weighs each mark by the object's size, so the same
//! walk gives the *byte* stack distance: the sizes of the distinct objects
//! above it plus its own, which is exactly the cache size (in bytes) from which
//! an LRU that evicts until the newcomer fits would hit it.
//!
//! Slots are handed out in order and never reused, so when they run out the
//! live ones are renumbered in order (compaction, O(live)); capacity stays
//! within a small factor of the number of distinct objects, not the trace
//! length, so 10 M requests over 1 M objects need a few tens of MB.

/// A slot no object owns.
const EMPTY: u32 = u32::MAX;

/// One LRU stack. Objects are named by the caller's dense index (`u32`); the
/// caller keeps each object's slot in `slots[obj]` and passes that array in,
/// so one array can serve several stacks whose object sets are disjoint (the
/// per-slab-class stacks).
#[derive(Clone)]
pub struct Stack {
    /// Fenwick tree (1-based inside, slot s at index s + 1) of marks.
    count: Vec<u32>,
    /// Fenwick tree of sizes; empty when byte distances are not wanted.
    bytes: Vec<u64>,
    /// Which object holds each slot (EMPTY if none).
    owner: Vec<u32>,
    /// Size recorded for each slot (only when `bytes` is kept).
    size: Vec<u32>,
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
            count: Vec::new(),
            bytes: Vec::new(),
            owner: Vec::new(),
            size: Vec::new(),
            next: 0,
            low: 0,
            live: 0,
            total_bytes: 0,
            with_bytes,
        };
        s.rebuild(1024, |_, _| {});
        s
    }

    /// Number of objects in the stack.
    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The object in `slot`, if one is.
    #[cfg(test)]
    pub fn owner(&self, slot: u32) -> Option<u32> {
        self.owner
            .get(slot as usize)
            .copied()
            .filter(|&o| o != EMPTY)
    }

    /// Sum of the sizes of the objects in the stack (0 without byte tracking).
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Marks and sizes in slots 0..=slot, in one walk down the tree (both
    /// arrays are read at the same indices, so their cache misses overlap).
    fn prefix(&self, slot: usize) -> (u64, u64) {
        self.prefetch_walk(slot + 1, |i| i & (i - 1));
        let mut i = slot + 1;
        let (mut count, mut bytes) = (0u64, 0u64);
        if self.with_bytes {
            while i > 0 {
                count += self.count[i] as u64;
                bytes += self.bytes[i];
                i &= i - 1;
            }
        } else {
            while i > 0 {
                count += self.count[i] as u64;
                i &= i - 1;
            }
        }
        (count, bytes)
    }

    /// Add to the sums of the nodes above `slot` (its callers started
    /// loading them: [`Stack::prefetch_up`]).
    fn add(&mut self, slot: usize, count: i32, bytes: i64) {
        let n = self.count.len();
        let mut i = slot + 1;
        while i < n {
            self.count[i] = self.count[i].wrapping_add_signed(count);
            if self.with_bytes {
                self.bytes[i] = self.bytes[i].wrapping_add_signed(bytes);
            }
            i += i & i.wrapping_neg();
        }
    }

    /// Start loading the nodes [`Stack::add`] of `slot` writes.
    fn prefetch_up(&self, slot: usize) {
        self.prefetch_walk(slot + 1, |i| i + (i & i.wrapping_neg()));
    }

    /// Start loading every node a walk from `i` (by `next`, until 0 or the
    /// tree's end) reads, before it reads any: a stack of a few thousand
    /// sampled keys is cold in the cache between a server's sampled
    /// requests, and the dozen nodes of a walk then miss one after another
    /// (the live curve's stack updates were most of its cost on a
    /// pipelined load).
    #[inline]
    fn prefetch_walk(&self, mut i: usize, next: impl Fn(usize) -> usize) {
        while let (true, Some(c)) = (i > 0, self.count.get(i)) {
            crate::hash::prefetch((c as *const u32).cast());
            if let Some(b) = self.bytes.get(i) {
                crate::hash::prefetch((b as *const u64).cast());
            }
            i = next(i);
        }
    }

    /// Distance of the object in `slot` (which it must own).
    fn distance_at(&self, slot: usize) -> Distance {
        // Marks strictly before the slot are less recent objects.
        let (below, below_bytes) = if slot == 0 {
            (0, 0)
        } else {
            self.prefix(slot - 1)
        };
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
        let slot = from
            + self.owner[from..self.next]
                .iter()
                .position(|&o| o != EMPTY)?;
        self.low = slot;
        Some((self.owner[slot], self.distance_at(slot)))
    }

    /// Take `obj` out of the stack (a delete, or a move to another stack);
    /// returns where it was.
    pub fn remove(&mut self, obj: u32, slots: &mut [u32]) -> Option<Distance> {
        let slot = *slots.get(obj as usize)?;
        if slot == EMPTY || self.owner.get(slot as usize) != Some(&obj) {
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
        debug_assert_ne!(self.owner[slot], EMPTY, "slot {slot} is free");
        // Both walks' nodes start loading at once: the distance reads the
        // tree below the slot, the update writes it above.
        self.prefetch_up(slot);
        let d = self.distance_at(slot);
        let sz = self.size[slot];
        self.add(slot, -1, -(sz as i64));
        self.owner[slot] = EMPTY;
        self.size[slot] = 0;
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
        if self.next >= self.owner.len() {
            // Renumber into twice as many slots as there are live objects:
            // the O(capacity) rebuild then comes once per `live` pushes at
            // the earliest, O(1) amortised, and memory stays ~2x the objects.
            let cap = (self.live * 2).max(1024);
            self.rebuild(cap, moved);
        }
        let slot = self.next;
        self.next += 1;
        let size = if self.with_bytes { size } else { 0 };
        self.prefetch_up(slot);
        self.owner[slot] = obj;
        self.size[slot] = size;
        self.add(slot, 1, size as i64);
        self.live += 1;
        self.total_bytes += size as u64;
        slot as u32
    }

    /// Renumber live slots 0.. in order into `cap` slots; rebuild the trees
    /// in O(cap) (each node adds itself to its parent).
    fn rebuild(&mut self, cap: usize, mut moved: impl FnMut(u32, u32)) {
        let mut owner = vec![EMPTY; cap];
        let mut size = vec![0u32; cap];
        let mut n = 0;
        for (o, s) in self.owner.iter().zip(&self.size) {
            if *o != EMPTY {
                owner[n] = *o;
                size[n] = *s;
                moved(*o, n as u32);
                n += 1;
            }
        }
        let mut count = vec![0u32; cap + 1];
        let mut bytes = if self.with_bytes {
            vec![0u64; cap + 1]
        } else {
            Vec::new()
        };
        for i in 0..n {
            count[i + 1] = 1;
            if self.with_bytes {
                bytes[i + 1] = size[i] as u64;
            }
        }
        for i in 1..=cap {
            let parent = i + (i & i.wrapping_neg());
            if parent <= cap {
                count[parent] += count[i];
                if self.with_bytes {
                    bytes[parent] += bytes[i];
                }
            }
        }
        self.count = count;
        self.bytes = bytes;
        self.owner = owner;
        self.size = size;
        self.next = n;
        self.low = 0;
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
        }
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
