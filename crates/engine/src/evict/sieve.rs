//! SIEVE per slab class (`-o eviction=sieve`).
//!
//! Zhang, Yang, Yue, Vigfusson and Rashmi, "SIEVE is Simpler than LRU: an
//! Efficient Turn-Key Eviction Algorithm for Web Caches" (NSDI'24), section
//! 3.1 and Algorithm 1: one FIFO queue per cache, a "visited" bit per object
//! and a hand. New objects go to the head (the newest end); the hand moves
//! from the tail (the oldest end) towards the head, clearing the visited
//! bits it meets, and evicts the first object whose bit is clear; when it
//! reaches the head it starts again at the tail. A visited object stays
//! where it is instead of moving to the head (lazy promotion, section 3.2),
//! so objects inserted after it reach the hand first, and a new object that
//! is not read before the hand gets to it is evicted quickly (quick
//! demotion): what makes SIEVE miss less than LRU on skewed web workloads
//! (section 4, Fig. 6 and 7).
//!
//! The difference from CLOCK (`clock`), which walks the chunks in page
//! order: there a new item takes the chunk of the item just evicted, so it
//! sits right behind the hand and survives a whole revolution; here it waits
//! at the head, behind only the items inserted before it and not yet passed.
//! That order is the insertion order, which chunks do not have, so SIEVE
//! keeps a doubly linked queue per class in the same 12-byte trailers as
//! GD-Wheel (`gdwheel`: in the chunk's slack, or a per-page side array
//! for items that fill their chunk; their memory is counted in `-m`). Only
//! the links are used; the trailer's priority bits stay 0.
//!
//! The visited bit is the item header's REF bit, which the engine sets on
//! every access that counts, without its lock on the GET path (as under
//! CLOCK), so a hit costs SIEVE nothing: `touch` is empty. The hand clears
//! REF atomically, as CLOCK's does. Link, unlink and relocate are O(1);
//! `victim` is O(1) amortised (every step past the first clears a REF bit
//! that an access had set). Expired items met by the hand are taken first.
//!
//! What it gives up: the engine's SETs without its lock (`-o in_place_sets`,
//! `-o lockfree_inserts`) link nothing, so they stay CLOCK-only and every
//! SET under SIEVE takes the engine lock (docs/benchmarks.md, "N-zone
//! eviction policy", has the throughput this costs).

use super::gdwheel::{read, Mem, Side, Trailer, LOC_MASK, NIL};
use super::policy::{Eviction, Victim};
use crate::config::EvictionPolicy;
use crate::item;
use crate::slab::Slabs;

/// One class's queue. `prev` links point towards the oldest item, `next`
/// towards the newest.
#[derive(Clone, Copy, Debug)]
struct Queue {
    oldest: u64,
    newest: u64,
    /// The next item the hand looks at; NIL = the oldest (the hand wrapped).
    hand: u64,
    len: u64,
}

impl Queue {
    const EMPTY: Queue = Queue {
        oldest: NIL,
        newest: NIL,
        hand: NIL,
        len: 0,
    };
}

/// SIEVE state for every slab class.
pub struct Sieve {
    classes: Vec<Queue>,
    side: Side,
}

impl Sieve {
    pub fn new(nclasses: usize) -> Sieve {
        Sieve {
            classes: vec![Queue::EMPTY; nclasses],
            side: Side::default(),
        }
    }

    /// Items queued in `class`.
    pub fn len(&self, class: usize) -> u64 {
        self.classes.get(class).map_or(0, |q| q.len)
    }
}

/// Take `loc` (trailer `t`) out of `q`; a hand on it moves to the next
/// newer item (the paper's `hand <- obj.prev` after an eviction).
#[inline]
fn remove(q: &mut Queue, m: &mut Mem, loc: u64, t: Trailer) {
    if t.prev == NIL {
        q.oldest = t.next;
    } else {
        m.set_next(t.prev, t.next);
    }
    if t.next == NIL {
        q.newest = t.prev;
    } else {
        m.set_prev(t.next, t.prev);
    }
    if q.hand == loc {
        q.hand = t.next;
    }
    q.len -= 1;
}

impl Eviction for Sieve {
    fn kind(&self) -> EvictionPolicy {
        EvictionPolicy::Sieve
    }

    /// The queues (allocated up front, 32 bytes per class) and the side
    /// arrays allocated so far.
    fn memory_bytes(&self) -> usize {
        self.classes.capacity() * std::mem::size_of::<Queue>()
            + self.side.bytes
            + self.side.pages.capacity() * std::mem::size_of::<Option<Box<[u8]>>>()
    }

    fn first_item_bytes(&self, _class: usize) -> usize {
        0
    }

    /// A new item: the newest of its class. Its REF bit is its visited bit
    /// as the engine wrote it: clear for a new key, set for an overwrite (an
    /// access, `engine/write.rs`).
    fn link(&mut self, slabs: &mut Slabs, class: usize, loc: u64) {
        debug_assert!(loc != NIL && loc <= LOC_MASK);
        let q = &mut self.classes[class];
        let mut m = Mem {
            slabs,
            side: &mut self.side,
        };
        m.prepare(loc);
        m.put(
            loc,
            Trailer {
                prev: q.newest,
                next: NIL,
                h24: 0,
            },
        );
        if q.newest == NIL {
            q.oldest = loc;
        } else {
            m.set_next(q.newest, loc);
        }
        q.newest = loc;
        q.len += 1;
    }

    fn unlink(&mut self, slabs: &mut Slabs, class: usize, loc: u64) {
        let q = &mut self.classes[class];
        let mut m = Mem {
            slabs,
            side: &mut self.side,
        };
        let t = m.get(loc);
        remove(q, &mut m, loc, t);
    }

    /// Nothing: the engine sets the item's REF bit, SIEVE's visited bit.
    #[inline]
    fn touch(&mut self, _slabs: &mut Slabs, _class: usize, _loc: u64) {}

    /// Same place in the queue, new chunk: move the trailer if it lives
    /// aside, point the neighbours (and the hand) at `to`.
    fn relocate(&mut self, slabs: &mut Slabs, class: usize, from: u64, to: u64) {
        let q = &mut self.classes[class];
        let mut m = Mem {
            slabs,
            side: &mut self.side,
        };
        let t = m.get(from);
        m.prepare(to);
        m.put(to, t);
        if t.prev == NIL {
            q.oldest = to;
        } else {
            m.set_next(t.prev, to);
        }
        if t.next == NIL {
            q.newest = to;
        } else {
            m.set_prev(t.next, to);
        }
        if q.hand == from {
            q.hand = to;
        }
    }

    fn clear(&mut self) {
        self.classes.fill(Queue::EMPTY);
    }

    /// Algorithm 1's `Evict`: from the hand towards the newest item, clear
    /// visited bits and stop at the first item without one (or an expired
    /// one), wrapping to the oldest. The hand stays on the victim until the
    /// engine unlinks it. `protect` is passed over with its bit untouched.
    fn victim(
        &mut self,
        slabs: &mut Slabs,
        class: usize,
        now: u32,
        protect: Option<u64>,
    ) -> Option<Victim> {
        let q = &mut self.classes[class];
        // Each item once to clear its bit, once more to find it clear, and
        // the protected one.
        let limit = 2 * q.len + 2;
        let mut cur = q.hand;
        for _ in 0..limit {
            if cur == NIL {
                cur = q.oldest;
                if cur == NIL {
                    break;
                }
            }
            let next = read(slabs, &self.side, cur).next;
            if Some(cur) != protect {
                let exp = slabs.exptime(cur);
                if exp != 0 && exp <= now {
                    q.hand = cur;
                    return Some(Victim::Expired(cur));
                }
                // GETs set REF without the engine lock: clear it atomically
                // and look at what it was (CLOCK does the same).
                let bits = slabs.bits(cur);
                if bits & item::REF == 0 || slabs.clear_bits(cur, item::REF) & item::REF == 0 {
                    q.hand = cur;
                    return Some(Victim::Evicted(cur));
                }
            }
            cur = next;
        }
        q.hand = cur;
        None
    }

    /// The item the hand is on (it is the victim unless visited).
    fn peek(&self, class: usize) -> Option<u64> {
        let q = self.classes.get(class)?;
        match q.hand {
            NIL if q.oldest == NIL => None,
            NIL => Some(q.oldest),
            h => Some(h),
        }
    }

    fn credit(&self, _slabs: &Slabs, _class: usize, _loc: u64) -> Option<u64> {
        None
    }
}

#[cfg(any(test, feature = "testing"))]
impl Sieve {
    /// Check the queues (tests and fuzzing): links agree both ways, every
    /// live item of a class is queued once, in its class, the count is
    /// right, the hand is NIL or on a queued item, and every item that
    /// fills its chunk has its trailer in a side array of its page.
    pub fn validate(&self, slabs: &Slabs) {
        let mut seen = std::collections::HashSet::new();
        for (class, q) in self.classes.iter().enumerate() {
            let mut n = 0u64;
            let mut prev = NIL;
            let mut cur = q.oldest;
            let mut hand_found = q.hand == NIL;
            while cur != NIL {
                assert!(slabs.is_live(cur), "queued item {cur} is live");
                assert_eq!(
                    slabs.class_of(cur),
                    class,
                    "item {cur} in its class's queue"
                );
                assert!(seen.insert(cur), "item {cur} queued twice");
                let (page, c) = slabs.split(cur);
                match self.side.array(page) {
                    Some(a) => assert!(a.len() >= (c as usize + 1) * super::gdwheel::TRAILER_LEN),
                    None => assert!(
                        super::gdwheel::fits_in_chunk(slabs.chunk(cur)),
                        "item {cur} fills its chunk but has no side array"
                    ),
                }
                let t = read(slabs, &self.side, cur);
                assert_eq!(t.prev, prev, "prev link of {cur}");
                hand_found |= q.hand == cur;
                n += 1;
                prev = cur;
                cur = t.next;
            }
            assert_eq!(q.newest, prev, "newest of class {class}");
            assert!(hand_found, "hand of class {class} on a queued item");
            assert_eq!(n, q.len, "len of class {class}");
            assert_eq!(
                n, slabs.classes[class].used,
                "every live item of {class} is queued"
            );
        }
        let bytes: usize = self.side.pages.iter().flatten().map(|a| a.len()).sum();
        assert_eq!(bytes, self.side.bytes, "side array bytes");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slab::{class_sizes, Slabs};

    /// One page of 64-byte chunks, `n` items linked in order; odd ones fill
    /// their chunk (trailer aside), even ones leave room.
    fn setup(n: usize) -> (Slabs, Sieve, Vec<u64>) {
        let mut s = Slabs::new(1 << 12, &class_sizes(64, 1.25, 1 << 12), 1 << 16, false);
        let p = s.new_page().unwrap();
        s.assign(p, 0);
        let mut v = Sieve::new(s.classes.len());
        let mut locs = Vec::new();
        for i in 0..n {
            let l = s.take_free(0).unwrap();
            let value = vec![b'v'; if i % 2 == 1 { 64 - 17 } else { 10 }];
            item::write(s.chunk_mut(l), 1, 0, 0, item::LIVE, 0, 0, b"k", &[&value]);
            s.classes[0].used += 1;
            v.link(&mut s, 0, l);
            locs.push(l);
        }
        v.validate(&s);
        (s, v, locs)
    }

    fn visit(s: &mut Slabs, l: u64) {
        let c = s.chunk_mut(l);
        item::set_bits(c, item::bits(c) | item::REF);
    }

    fn evict(s: &mut Slabs, v: &mut Sieve, protect: Option<u64>) -> u64 {
        let Some(Victim::Evicted(l)) = v.victim(s, 0, 10, protect) else {
            panic!("no victim");
        };
        v.unlink(s, 0, l);
        s.classes[0].used -= 1;
        item::set_bits(s.chunk_mut(l), 0);
        s.free(l);
        v.validate(s);
        l
    }

    fn relink(s: &mut Slabs, v: &mut Sieve) -> u64 {
        let l = s.take_free(0).unwrap();
        item::write(s.chunk_mut(l), 1, 0, 0, item::LIVE, 0, 0, b"k", &[b"x"]);
        s.classes[0].used += 1;
        v.link(s, 0, l);
        v.validate(s);
        l
    }

    #[test]
    fn fifo_without_visits() {
        let (mut s, mut v, locs) = setup(6);
        assert_eq!(evict(&mut s, &mut v, None), locs[0]);
        assert_eq!(evict(&mut s, &mut v, None), locs[1]);
    }

    /// The paper's Fig. 3 in small: visited items stay in place, the hand
    /// goes on from where it stopped, and a new item (at the head) is
    /// reached before the visited items behind the hand come round again.
    #[test]
    fn visited_stay_and_new_items_go_first() {
        let (mut s, mut v, locs) = setup(5);
        visit(&mut s, locs[0]);
        visit(&mut s, locs[2]);
        // Hand: 0 (visited, cleared), 1 evicted.
        assert_eq!(evict(&mut s, &mut v, None), locs[1]);
        let new = relink(&mut s, &mut v);
        // Hand on 2 (visited, cleared), 3 evicted; then 4, then the new one,
        // and only then 0 and 2, whose bits were cleared.
        assert_eq!(evict(&mut s, &mut v, None), locs[3]);
        assert_eq!(evict(&mut s, &mut v, None), locs[4]);
        assert_eq!(evict(&mut s, &mut v, None), new);
        assert_eq!(evict(&mut s, &mut v, None), locs[0]);
        assert_eq!(evict(&mut s, &mut v, None), locs[2]);
        assert_eq!(v.len(0), 0);
        assert_eq!(v.victim(&mut s, 0, 10, None), None);
    }

    #[test]
    fn protect_is_passed_over_and_expired_taken() {
        let (mut s, mut v, locs) = setup(4);
        visit(&mut s, locs[0]);
        visit(&mut s, locs[1]);
        // 0's bit is cleared, 1 is passed over with its bit kept.
        assert_eq!(evict(&mut s, &mut v, Some(locs[1])), locs[2]);
        item::set_exptime(s.chunk_mut(locs[3]), 5);
        assert_eq!(
            v.victim(&mut s, 0, 10, None),
            Some(Victim::Expired(locs[3]))
        );
        v.unlink(&mut s, 0, locs[3]);
        s.classes[0].used -= 1;
        item::set_bits(s.chunk_mut(locs[3]), 0);
        v.validate(&s);
        // Wrapped: 0 (cleared before) goes, then 1 (its bit cleared now).
        assert_eq!(evict(&mut s, &mut v, None), locs[0]);
        assert_eq!(evict(&mut s, &mut v, None), locs[1]);
    }

    #[test]
    fn all_visited_still_finds_a_victim() {
        let (mut s, mut v, locs) = setup(6);
        for &l in &locs {
            visit(&mut s, l);
        }
        assert_eq!(evict(&mut s, &mut v, None), locs[0]);
    }

    #[test]
    fn relocate_keeps_the_place_and_the_hand() {
        let (mut s, mut v, locs) = setup(4);
        visit(&mut s, locs[0]);
        // The hand stops on 1 (0 passed): move 1 elsewhere, then evict.
        let Some(Victim::Evicted(l)) = v.victim(&mut s, 0, 10, None) else {
            panic!("no victim");
        };
        assert_eq!(l, locs[1]);
        let to = s.take_free(0).unwrap();
        let bytes = s.chunk(l).to_vec();
        s.chunk_mut(to).copy_from_slice(&bytes);
        v.relocate(&mut s, 0, l, to);
        item::set_bits(s.chunk_mut(l), 0);
        s.free(l);
        v.validate(&s);
        assert_eq!(v.peek(0), Some(to));
        assert_eq!(evict(&mut s, &mut v, None), to);
        assert_eq!(evict(&mut s, &mut v, None), locs[2]);
    }
}
