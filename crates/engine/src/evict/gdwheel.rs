//! GreedyDual with hierarchical cost wheels (GD-Wheel).
//!
//! The idea is Conglong Li's thesis "GD-Wheel: a cost-aware replacement
//! policy for key-value stores" (Rice, 2014; ../shared/seeds/001_*): chapter
//! 3.1 GreedyDual in Cao et al.'s form (every item has a priority H = L +
//! cost, set on insert and on every hit; evict the item with the smallest H,
//! the least recently used first among equals, and let L become its H),
//! chapter 3.2 the hierarchical cost wheels that replace GreedyDual's
//! priority queue by arrays of FIFO queues, and chapter 4.3 one set of wheels
//! per slab class. The layout of the wheels follows Varghese and Lauck's
//! hierarchical timing wheels (also the model of moka's timer wheel): H is an
//! integer, read as three base-256 digits relative to the hand L.
//!
//! - level 0 holds items whose H shares everything but its lowest digit with
//!   L: one queue per exact H;
//! - level 1 holds items in the same 2^16 block as L but a later 256-block:
//!   one queue per 256-block;
//! - level 2 is a ring of 256 queues of 2^16 blocks ahead of L's block.
//!
//! A victim is the oldest item of the first non-empty level-0 queue at or
//! after L, and L moves to its H. When level 0 has nothing left in L's
//! 256-block, L jumps to the next non-empty level-1 queue and that queue is
//! *cascaded* (the thesis' "migration"): its items, oldest first, move to
//! the level-0 queue of their exact H. Level 2 cascades into level 1 (or 0)
//! the same way. Cascaded queues land in empty queues and keep their order,
//! and items inserted directly into a queue after a cascade are younger than
//! the cascaded ones, so every level-0 queue is in access order: the wheels
//! evict exactly what GreedyDual with priority queues (GD-PQ) evicts, ties
//! broken least recently used first, for every integer cost below 2^24 - 2^16
//! (larger ones are capped; api_tests/gdwheel.rs checks this against a GD-PQ).
//! With equal costs H grows with the time of the last access, so GD-Wheel is
//! exactly LRU. Every operation is O(1): a hit is one unlink and one push
//! (the thesis' "reuse"), an eviction finds the next non-empty queue with a
//! 256-bit occupancy map per level, and an item is cascaded at most twice
//! between two operations on it (section 3.3's amortisation argument).
//!
//! The thesis uses two wheels of 256 queues (costs up to 65535); we use three
//! so that costs learned in microseconds (up to 16 s) keep their full
//! resolution. Costs come from the item header's one-byte log-quantised cost
//! (`item::quantize_cost`, steps of 9%), so the wheels see at most 256
//! distinct costs; the unit is whatever the client sends (or microseconds
//! when learned, see `cost`).
//!
//! Per-item state. The 16-byte header has no room for queue links, so every
//! item has a 12-byte trailer:
//!
//! ```text
//! byte 0..9    prev and next item locations in the queue, 36 bits each
//!              (index::LOC_BITS), NIL = all ones
//! byte 9..12   H modulo 2^24: with the hand L, H = L + ((h24 - L) mod 2^24),
//!              because H - L < 2^24 always holds (the cap above)
//! ```
//!
//! Storing H's low bits is what lets a level-1 or level-2 queue be cascaded
//! without knowing when each item was inserted, and what tells `unlink` which
//! queue an item is in.
//!
//! Where the trailer lives: items go to the same slab class as under LRU,
//! and a chunk is usually larger than its item (classes grow by `-f`, 25%), so
//! the trailer takes the chunk's last 12 bytes when the item leaves that much
//! room. Only an item that (nearly) fills its chunk keeps its trailer aside,
//! in a per-page side array of 12 bytes per chunk, allocated the first time
//! a page needs it and counted in the memory limit. Reserving 12 bytes in
//! every chunk instead would move exact fits up a whole class (GD-Wheel's
//! 4 KB workload: 4128-byte items in 4128-byte chunks would take 5160-byte
//! ones, 20% fewer items), and a side array for every page would cost 12
//! bytes per item even where the slack is free (3.4% of the memory of
//! 256-byte values in 348-byte chunks). So the memory cost of GD-Wheel is 0
//! for items with 12 bytes of slack, 12 bytes per chunk of pages where some
//! item has none, plus the wheels: 768 queues x 16 bytes (12 KB) per slab
//! class that holds items (`memory_bytes`; docs/cost.md has measurements).

use super::policy::{cost_table, Eviction, Victim};
use crate::config::EvictionPolicy;
use crate::item;
use crate::slab::Slabs;

/// Levels of wheels.
pub const LEVELS: usize = 3;
/// Queues per wheel.
pub const SLOTS: usize = 256;
/// Bytes at the end of every chunk under this policy.
pub const TRAILER_LEN: usize = 12;

const QUEUES: usize = LEVELS * SLOTS;
pub(super) const LOC_MASK: u64 = (1 << 36) - 1;
/// "No item". Item locations are below 2^LOC_BITS and the engine refuses a
/// memory limit whose last page number would reach the all-ones page
/// (`Engine::check_addressable`), so all ones is never a real location.
pub(super) const NIL: u64 = LOC_MASK;
const H_MASK: u64 = (1 << 24) - 1;

// The trailer packs locations in 36 bits.
const _: () = assert!(crate::index::LOC_BITS <= 36);

/// One class's wheels.
struct Wheels {
    /// GreedyDual's inflation value L: the H of the last victim.
    hand: u64,
    /// Oldest (next victim) and newest item of each queue; level * 256 + slot.
    head: Box<[u64]>,
    tail: Box<[u64]>,
    /// Non-empty queues, one bit per queue.
    occupied: [[u64; SLOTS / 64]; LEVELS],
    len: u64,
}

impl Wheels {
    fn new() -> Wheels {
        Wheels {
            hand: 0,
            head: vec![NIL; QUEUES].into_boxed_slice(),
            tail: vec![NIL; QUEUES].into_boxed_slice(),
            occupied: [[0; SLOTS / 64]; LEVELS],
            len: 0,
        }
    }

    const BYTES: usize = std::mem::size_of::<Wheels>() + 2 * QUEUES * 8;

    #[inline]
    fn mark(&mut self, q: usize, on: bool) {
        let word = &mut self.occupied[q / SLOTS][(q % SLOTS) / 64];
        let bit = 1u64 << (q % 64);
        if on {
            *word |= bit;
        } else {
            *word &= !bit;
        }
    }

    /// The largest H an insert may use now: the end of the last 2^16 block
    /// the level-2 ring can hold.
    #[inline]
    fn h_max(&self) -> u64 {
        (((self.hand >> 16) + 255) << 16) | 0xffff
    }

    /// Full H of an item from its stored low 24 bits.
    #[inline]
    fn h_of(&self, h24: u64) -> u64 {
        self.hand + (h24.wrapping_sub(self.hand) & H_MASK)
    }
}

/// The queue of priority `h` when the hand is at `hand` (h >= hand).
#[inline]
fn place(h: u64, hand: u64) -> usize {
    if h >> 8 == hand >> 8 {
        (h & 0xff) as usize
    } else if h >> 16 == hand >> 16 {
        SLOTS + ((h >> 8) & 0xff) as usize
    } else {
        2 * SLOTS + ((h >> 16) & 0xff) as usize
    }
}

/// First set bit at index >= from in a 256-bit map.
#[inline]
fn next_set(map: &[u64; SLOTS / 64], from: usize) -> Option<usize> {
    let mut w = from / 64;
    if w >= map.len() {
        return None;
    }
    let mut bits = map[w] & (u64::MAX << (from % 64));
    loop {
        if bits != 0 {
            return Some(w * 64 + bits.trailing_zeros() as usize);
        }
        w += 1;
        if w == map.len() {
            return None;
        }
        bits = map[w];
    }
}

// Trailer access.

/// An item's queue links and priority bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Trailer {
    pub(super) prev: u64,
    pub(super) next: u64,
    pub(super) h24: u64,
}

impl Trailer {
    /// Two loads: bytes 0..8 and 8..12 as little-endian words (the trailer
    /// is read on every hit, four times).
    #[inline]
    fn decode(t: &[u8]) -> Trailer {
        let mut lo = [0u8; 8];
        let mut hi = [0u8; 4];
        lo.copy_from_slice(&t[..8]);
        hi.copy_from_slice(&t[8..TRAILER_LEN]);
        let (lo, hi) = (u64::from_le_bytes(lo), u32::from_le_bytes(hi) as u64);
        Trailer {
            prev: lo & LOC_MASK,
            next: (lo >> 36) | ((hi & 0xff) << 28),
            h24: hi >> 8,
        }
    }

    #[inline]
    fn encode(&self, t: &mut [u8]) {
        let lo = self.prev | (self.next << 36);
        let hi = ((self.next >> 28) & 0xff) as u32 | (((self.h24 & H_MASK) as u32) << 8);
        t[..8].copy_from_slice(&lo.to_le_bytes());
        t[8..TRAILER_LEN].copy_from_slice(&hi.to_le_bytes());
    }
}

/// Whether the item in `chunk` leaves room for its trailer at the end.
#[inline]
pub(super) fn fits_in_chunk(chunk: &[u8]) -> bool {
    item::stored_len(chunk) + TRAILER_LEN <= chunk.len()
}

/// Side arrays: per page number, None while every item of the page keeps its
/// trailer at the end of its chunk, or TRAILER_LEN bytes per chunk for all
/// of the page's items once one of them filled its chunk. Deciding by page
/// rather than by item means finding a trailer never reads the item's
/// header: a hit reads and writes two neighbours' trailers, and each is one
/// cache line instead of two.
#[derive(Default)]
pub(super) struct Side {
    pub(super) pages: Vec<Option<Box<[u8]>>>,
    pub(super) bytes: usize,
}

impl Side {
    #[inline]
    pub(super) fn array(&self, page: u32) -> Option<&[u8]> {
        self.pages.get(page as usize).and_then(|a| a.as_deref())
    }
}

/// The trailer of the item at `loc`.
#[inline(always)]
pub(super) fn read(slabs: &Slabs, side: &Side, loc: u64) -> Trailer {
    let (page, c) = slabs.split(loc);
    if let Some(Some(arr)) = side.pages.get(page as usize) {
        let at = c as usize * TRAILER_LEN;
        return Trailer::decode(&arr[at..at + TRAILER_LEN]);
    }
    // The chunk's last bytes (a hit reads several trailers: this is the
    // hot path of GD-Wheel).
    Trailer::decode(slabs.tail(loc, TRAILER_LEN))
}

/// The chunks and the side arrays: where trailers are read and written.
pub(super) struct Mem<'a> {
    pub(super) slabs: &'a mut Slabs,
    pub(super) side: &'a mut Side,
}

impl Mem<'_> {
    #[inline]
    pub(super) fn get(&self, loc: u64) -> Trailer {
        read(self.slabs, self.side, loc)
    }

    /// The trailer bytes of the item at `loc`.
    #[inline(always)]
    fn slot(&mut self, loc: u64) -> &mut [u8] {
        let (page, c) = self.slabs.split(loc);
        if let Some(Some(arr)) = self.side.pages.get_mut(page as usize) {
            let at = c as usize * TRAILER_LEN;
            return &mut arr[at..at + TRAILER_LEN];
        }
        self.slabs.tail_mut(loc, TRAILER_LEN)
    }

    #[inline]
    pub(super) fn put(&mut self, loc: u64, t: Trailer) {
        t.encode(self.slot(loc));
    }

    /// Rewrite one link in place: a load and a store of the word holding it
    /// (a neighbour's trailer is touched twice per hit).
    #[inline]
    pub(super) fn set_prev(&mut self, loc: u64, prev: u64) {
        let t = self.slot(loc);
        let mut w = [0u8; 8];
        w.copy_from_slice(&t[..8]);
        let w = (u64::from_le_bytes(w) & !LOC_MASK) | prev;
        t[..8].copy_from_slice(&w.to_le_bytes());
    }

    #[inline]
    pub(super) fn set_next(&mut self, loc: u64, next: u64) {
        let t = self.slot(loc);
        let mut w = [0u8; 8];
        w.copy_from_slice(&t[..8]);
        let w = (u64::from_le_bytes(w) & LOC_MASK) | (next << 36);
        t[..8].copy_from_slice(&w.to_le_bytes());
        t[8] = (next >> 28) as u8;
    }

    /// Make `put(loc)` safe for the item just written at `loc` (not linked
    /// yet): if it fills its chunk, its page must have a side array of the
    /// page's current size. A page that gets one moves the trailers of its
    /// linked items (every other live item) there first. A page keeps its
    /// array when it changes class (it only grows), so its new items find
    /// their trailers aside too.
    pub(super) fn prepare(&mut self, loc: u64) {
        let (page, _) = self.slabs.split(loc);
        let Some(pg) = self.slabs.pages[page as usize].as_ref() else {
            return;
        };
        let need = pg.nchunks as usize * TRAILER_LEN;
        let have = self.side.array(page).map(|a| a.len());
        match have {
            Some(n) if n >= need => {}
            Some(n) => {
                // The page changed class to one with more chunks.
                let mut grown = vec![0u8; need].into_boxed_slice();
                if let Some(old) = self.side.array(page) {
                    grown[..n].copy_from_slice(old);
                }
                self.side.pages[page as usize] = Some(grown);
                self.side.bytes += need - n;
            }
            None if fits_in_chunk(self.slabs.chunk(loc)) => {}
            None => {
                let mut arr = vec![0u8; need].into_boxed_slice();
                for other in self.slabs.live_in_page(page) {
                    if other != loc {
                        let (_, c) = self.slabs.split(other);
                        let at = c as usize * TRAILER_LEN;
                        arr[at..at + TRAILER_LEN]
                            .copy_from_slice(self.slabs.tail(other, TRAILER_LEN));
                    }
                }
                if self.side.pages.len() <= page as usize {
                    self.side.pages.resize_with(page as usize + 1, || None);
                }
                self.side.pages[page as usize] = Some(arr);
                self.side.bytes += need;
            }
        }
    }
}

/// Append `loc` (priority `h`) as the newest item of queue `q`.
#[inline(always)]
fn push_back(w: &mut Wheels, m: &mut Mem, q: usize, loc: u64, h: u64) {
    let last = w.tail[q];
    m.put(
        loc,
        Trailer {
            prev: last,
            next: NIL,
            h24: h,
        },
    );
    if last == NIL {
        w.head[q] = loc;
        w.mark(q, true);
    } else {
        m.set_next(last, loc);
    }
    w.tail[q] = loc;
}

/// Put `loc` (priority `h`) before every item of queue `q` (the next victim
/// of its queue).
fn push_front(w: &mut Wheels, m: &mut Mem, q: usize, loc: u64, h: u64) {
    let first = w.head[q];
    m.put(
        loc,
        Trailer {
            prev: NIL,
            next: first,
            h24: h,
        },
    );
    if first == NIL {
        w.tail[q] = loc;
        w.mark(q, true);
    } else {
        m.set_prev(first, loc);
    }
    w.head[q] = loc;
}

/// Take `loc` (trailer `t`) out of queue `q`.
#[inline(always)]
fn remove(w: &mut Wheels, m: &mut Mem, q: usize, t: Trailer) {
    // The two neighbours' updates are independent loads and stores: their
    // cache misses (the cost of a hit) overlap.
    if t.prev == NIL {
        w.head[q] = t.next;
    } else {
        m.set_next(t.prev, t.next);
    }
    if t.next == NIL {
        w.tail[q] = t.prev;
    } else {
        m.set_prev(t.next, t.prev);
    }
    if w.head[q] == NIL {
        w.mark(q, false);
    }
}

/// Move every item of queue `q` (a level-1 or level-2 queue whose block the
/// hand just entered) to the queue of its H, oldest first.
fn cascade(w: &mut Wheels, m: &mut Mem, q: usize) {
    let mut cur = w.head[q];
    w.head[q] = NIL;
    w.tail[q] = NIL;
    w.mark(q, false);
    while cur != NIL {
        let t = m.get(cur);
        let h = w.h_of(t.h24);
        let to = place(h, w.hand);
        debug_assert!(to < q - q % SLOTS, "cascade goes down a level");
        push_back(w, m, to, cur, h);
        cur = t.next;
    }
}

/// GD-Wheel state for every slab class.
pub struct GdWheel {
    classes: Vec<Option<Box<Wheels>>>,
    /// Classes with wheels (so that `memory_bytes`, asked at every store,
    /// is O(1)).
    wheels: usize,
    side: Side,
    /// Dequantised costs by header byte (`item::dequantize_cost`), so that a
    /// hit costs a table lookup instead of a `powf`.
    costs: Box<[u32; 256]>,
    /// Deferred hits (`gdwheel-lazy`): `touch` does nothing; the item's REF
    /// bit, set by the engine on every hit, is looked at when the item
    /// reaches the front of the wheels, and a referenced item is re-queued
    /// at L + cost instead of evicted (GreedyDual with the hit's credit
    /// granted late: L at that moment is at least L at the hit, so the item
    /// gets at least the credit eager GreedyDual gave it).
    lazy: bool,
}

impl GdWheel {
    pub fn new(nclasses: usize, lazy: bool) -> GdWheel {
        GdWheel {
            classes: (0..nclasses).map(|_| None).collect(),
            wheels: 0,
            side: Side::default(),
            costs: cost_table(),
            lazy,
        }
    }

    /// Bytes of side arrays alone (trailers of items that fill their chunk).
    pub fn side_bytes(&self) -> usize {
        self.side.bytes
    }

    #[inline]
    fn cost(&self, chunk: &[u8]) -> u64 {
        self.costs[item::cost_code(chunk) as usize] as u64
    }

    /// The next victim: `advance`, and when lazy, every item found there
    /// with its REF bit set has the bit cleared and goes back in at L + cost
    /// (the deferred hit), until one without it comes up. Ends: each
    /// re-queued item has lost its bit.
    fn next_victim(w: &mut Wheels, m: &mut Mem, lazy: bool, costs: &[u32; 256]) -> Option<u64> {
        loop {
            let loc = Self::advance(w, m)?;
            // Atomically: a GET may be setting REF right now (`stripe`).
            if !lazy || m.slabs.clear_bits(loc, item::REF) & item::REF == 0 {
                return Some(loc);
            }
            let cost = costs[m.slabs.cost_code(loc) as usize] as u64;
            let t = m.get(loc);
            remove(w, m, place(w.h_of(t.h24), w.hand), t);
            let h = (w.hand + cost).min(w.h_max());
            push_back(w, m, place(h, w.hand), loc, h);
        }
    }

    /// Move the hand to the smallest H present and return that queue's
    /// oldest item.
    fn advance(w: &mut Wheels, m: &mut Mem) -> Option<u64> {
        loop {
            if let Some(s) = next_set(&w.occupied[0], (w.hand & 0xff) as usize) {
                w.hand = (w.hand & !0xff) | s as u64;
                return Some(w.head[s]);
            }
            // Nothing left in the hand's 256-block: the next one with items.
            if let Some(s) = next_set(&w.occupied[1], ((w.hand >> 8) & 0xff) as usize + 1) {
                w.hand = (w.hand & !0xffff) | ((s as u64) << 8);
                cascade(w, m, SLOTS + s);
                continue;
            }
            // Nothing left in the hand's 2^16 block: the next one on the ring.
            let start = ((w.hand >> 16) & 0xff) as usize;
            let s = next_set(&w.occupied[2], start + 1).or_else(|| next_set(&w.occupied[2], 0))?;
            let ahead = (s + SLOTS - start) % SLOTS;
            debug_assert!(ahead != 0, "the hand's own block is never on the ring");
            w.hand = ((w.hand >> 16) + ahead as u64) << 16;
            cascade(w, m, 2 * SLOTS + s);
        }
    }

    /// The hand (GreedyDual's L) of `class`.
    pub fn hand(&self, class: usize) -> u64 {
        self.classes
            .get(class)
            .and_then(|w| w.as_deref())
            .map_or(0, |w| w.hand)
    }

    /// A live item's priority H (its credit above the hand is H - hand).
    pub fn priority(&self, slabs: &Slabs, class: usize, loc: u64) -> Option<u64> {
        let w = self.classes.get(class)?.as_deref()?;
        Some(w.h_of(read(slabs, &self.side, loc).h24))
    }

    /// Items linked in `class`.
    pub fn len(&self, class: usize) -> u64 {
        self.classes
            .get(class)
            .and_then(|w| w.as_deref())
            .map_or(0, |w| w.len)
    }
}

impl Eviction for GdWheel {
    fn kind(&self) -> EvictionPolicy {
        if self.lazy {
            EvictionPolicy::GdWheelLazy
        } else {
            EvictionPolicy::GdWheel
        }
    }

    /// Bytes of wheels and side arrays allocated so far (the engine counts
    /// them in `-m`).
    fn memory_bytes(&self) -> usize {
        self.wheels * Wheels::BYTES
            + self.classes.capacity() * std::mem::size_of::<Option<Box<Wheels>>>()
            + self.side.bytes
            + self.side.pages.capacity() * std::mem::size_of::<Option<Box<[u8]>>>()
    }

    /// Bytes the first item of `class` will allocate (its wheels), so a
    /// page for a class without one can be refused in time.
    fn first_item_bytes(&self, class: usize) -> usize {
        match self.classes.get(class) {
            Some(Some(_)) => 0,
            _ => Wheels::BYTES,
        }
    }

    /// A new item: H = L + cost.
    fn link(&mut self, slabs: &mut Slabs, class: usize, loc: u64) {
        debug_assert!(loc != NIL && loc <= LOC_MASK);
        let cost = self.cost(slabs.chunk(loc));
        let w = match &mut self.classes[class] {
            Some(w) => w,
            slot => {
                self.wheels += 1;
                slot.insert(Box::new(Wheels::new()))
            }
        };
        let mut m = Mem {
            slabs,
            side: &mut self.side,
        };
        m.prepare(loc);
        let h = (w.hand + cost).min(w.h_max());
        push_back(w, &mut m, place(h, w.hand), loc, h);
        w.len += 1;
    }

    /// The item leaves the cache (evicted, deleted, expired, replaced).
    fn unlink(&mut self, slabs: &mut Slabs, class: usize, loc: u64) {
        let Some(w) = self.classes[class].as_deref_mut() else {
            debug_assert!(false, "unlink from a class without wheels");
            return;
        };
        let mut m = Mem {
            slabs,
            side: &mut self.side,
        };
        let t = m.get(loc);
        remove(w, &mut m, place(w.h_of(t.h24), w.hand), t);
        w.len -= 1;
    }

    /// A hit (the thesis' "reuse"): H = L + cost again, newest of its queue
    /// (deferred to `victim` when lazy).
    fn touch(&mut self, slabs: &mut Slabs, class: usize, loc: u64) {
        if self.lazy {
            return;
        }
        let cost = self.cost(slabs.chunk(loc));
        let Some(w) = self.classes[class].as_deref_mut() else {
            return;
        };
        let mut m = Mem {
            slabs,
            side: &mut self.side,
        };
        let t = m.get(loc);
        let old = w.h_of(t.h24);
        let h = (w.hand + cost).min(w.h_max());
        if h == old && t.next == NIL {
            // Already the newest item of the queue it would go to.
            return;
        }
        remove(w, &mut m, place(old, w.hand), t);
        push_back(w, &mut m, place(h, w.hand), loc, h);
    }

    /// The chunk at `from` was copied to `to` (same class) when its page was
    /// emptied; `from` is still intact. Move the trailer if it lives aside,
    /// and point the item's neighbours at the new place.
    fn relocate(&mut self, slabs: &mut Slabs, class: usize, from: u64, to: u64) {
        let Some(w) = self.classes[class].as_deref_mut() else {
            return;
        };
        let mut m = Mem {
            slabs,
            side: &mut self.side,
        };
        let t = m.get(from);
        m.prepare(to);
        m.put(to, t);
        let q = place(w.h_of(t.h24), w.hand);
        if t.prev == NIL {
            debug_assert_eq!(w.head[q], from);
            w.head[q] = to;
        } else {
            m.set_next(t.prev, to);
        }
        if t.next == NIL {
            debug_assert_eq!(w.tail[q], from);
            w.tail[q] = to;
        } else {
            m.set_prev(t.next, to);
        }
    }

    /// Every item was dropped at once (flush_all).
    fn clear(&mut self) {
        for w in self.classes.iter_mut().flatten() {
            w.head.fill(NIL);
            w.tail.fill(NIL);
            w.occupied = [[0; SLOTS / 64]; LEVELS];
            w.len = 0;
        }
    }

    /// GreedyDual's victim in `class`: the oldest item with the smallest H.
    /// The hand moves to its H (cascading on the way); the caller unlinks the
    /// item. `protect` (an item about to be replaced or moved) is never
    /// chosen.
    fn victim(
        &mut self,
        slabs: &mut Slabs,
        class: usize,
        now: u32,
        protect: Option<u64>,
    ) -> Option<Victim> {
        let w = self.classes[class].as_deref_mut()?;
        let protect = protect.filter(|&p| slabs.is_live(p) && slabs.class_of(p) == class);
        let (lazy, costs) = (self.lazy, &self.costs);
        let mut m = Mem {
            slabs,
            side: &mut self.side,
        };
        let mut found = Self::next_victim(w, &mut m, lazy, costs);
        if let (Some(p), Some(f)) = (protect, found) {
            if p == f {
                // The protected item (usually the one a SET replaces, about
                // to be unlinked) is next: the victim is the one after it,
                // of the same priority.
                let t = m.get(p);
                found = if t.next != NIL {
                    Some(t.next)
                } else {
                    // Alone in its queue: take it out while searching on,
                    // then back as the oldest of its priority (the hand
                    // may have passed its H: then it is the next victim).
                    let h = w.h_of(t.h24);
                    remove(w, &mut m, place(h, w.hand), t);
                    let next = Self::next_victim(w, &mut m, lazy, costs);
                    let h = h.max(w.hand);
                    push_front(w, &mut m, place(h, w.hand), p, h);
                    next
                };
            }
        }
        let loc = found?;
        let exp = m.slabs.exptime(loc);
        Some(if exp != 0 && exp <= now {
            Victim::Expired(loc)
        } else {
            Victim::Evicted(loc)
        })
    }

    /// The item `victim` would take next, without moving anything (for the
    /// `age` statistic). Exact unless the lowest items sit in a level-1 or
    /// level-2 queue not yet cascaded, where it is the oldest of that queue.
    fn peek(&self, class: usize) -> Option<u64> {
        let w = self.classes.get(class)?.as_deref()?;
        let s0 = next_set(&w.occupied[0], (w.hand & 0xff) as usize);
        let s1 = || next_set(&w.occupied[1], ((w.hand >> 8) & 0xff) as usize + 1);
        let s2 = || {
            let start = ((w.hand >> 16) & 0xff) as usize;
            next_set(&w.occupied[2], start + 1).or_else(|| next_set(&w.occupied[2], 0))
        };
        let q = s0
            .or_else(|| s1().map(|s| SLOTS + s))
            .or_else(|| s2().map(|s| 2 * SLOTS + s))?;
        Some(w.head[q])
    }

    /// GreedyDual's credit: H - L, what is left of the item's cost before
    /// it becomes the victim (0 = next in line).
    fn credit(&self, slabs: &Slabs, class: usize, loc: u64) -> Option<u64> {
        Some(
            self.priority(slabs, class, loc)?
                .saturating_sub(self.hand(class)),
        )
    }
}

#[cfg(any(test, feature = "testing"))]
impl GdWheel {
    /// Check the wheels (tests and fuzzing): links agree both ways, every
    /// item sits in the queue of its H and in one queue only, L <= H <=
    /// h_max (so H - L fits the 24 bits the trailer keeps), the occupancy
    /// maps and counts are right, every live item of a class is linked, an
    /// item whose trailer would overlap its bytes has it in a side array of
    /// its page, and the side arrays' byte count is right.
    pub fn validate(&self, slabs: &Slabs) {
        let mut seen = std::collections::HashSet::new();
        for (class, w) in self.classes.iter().enumerate() {
            let Some(w) = w.as_deref() else {
                assert_eq!(slabs.classes[class].used, 0, "class {class} has no wheels");
                continue;
            };
            let mut n = 0u64;
            for q in 0..QUEUES {
                let on = w.occupied[q / SLOTS][(q % SLOTS) / 64] & (1 << (q % 64)) != 0;
                assert_eq!(on, w.head[q] != NIL, "occupancy of queue {q}");
                let mut prev = NIL;
                let mut cur = w.head[q];
                while cur != NIL {
                    assert!(slabs.is_live(cur), "queued item is live");
                    assert_eq!(slabs.class_of(cur), class);
                    assert!(seen.insert(cur), "item {cur} in two queues or twice in one");
                    let (page, c) = slabs.split(cur);
                    match self.side.array(page) {
                        Some(a) => assert!(a.len() >= (c as usize + 1) * TRAILER_LEN),
                        None => assert!(
                            fits_in_chunk(slabs.chunk(cur)),
                            "item {cur} fills its chunk but has no side array"
                        ),
                    }
                    let t = read(slabs, &self.side, cur);
                    assert_eq!(t.prev, prev, "prev link");
                    let h = w.h_of(t.h24);
                    assert!(h >= w.hand && h <= w.h_max(), "L <= H <= h_max");
                    assert!(h - w.hand <= H_MASK, "H - L fits the trailer");
                    assert_eq!(place(h, w.hand), q, "item in the queue of its H");
                    n += 1;
                    prev = cur;
                    cur = t.next;
                }
                assert_eq!(w.tail[q], prev, "tail");
            }
            assert_eq!(n, w.len, "len");
            assert_eq!(n, slabs.classes[class].used, "every live item is queued");
        }
        let bytes: usize = self.side.pages.iter().flatten().map(|a| a.len()).sum();
        assert_eq!(bytes, self.side.bytes, "side array bytes");
        assert_eq!(self.classes.iter().flatten().count(), self.wheels);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slab::{class_sizes, Slabs};

    /// One page of 64-byte chunks holding items with the given cost bytes;
    /// odd ones fill their chunk (trailer in a side array), even ones leave
    /// room (trailer in the chunk).
    fn setup(costs: &[u8]) -> (Slabs, GdWheel, Vec<u64>) {
        setup_with(costs, false)
    }

    fn setup_with(costs: &[u8], lazy: bool) -> (Slabs, GdWheel, Vec<u64>) {
        let mut s = Slabs::new(1 << 12, &class_sizes(64, 1.25, 1 << 12), 1 << 16, false);
        let p = s.new_page().unwrap();
        s.assign(p, 0);
        let mut g = GdWheel::new(s.classes.len(), lazy);
        let mut locs = Vec::new();
        for (i, &c) in costs.iter().enumerate() {
            let l = s.take_free(0).unwrap();
            let value = vec![b'v'; if i % 2 == 1 { 64 - 17 } else { 10 }];
            item::write(s.chunk_mut(l), 1, 0, c, item::LIVE, 0, 0, b"k", &[&value]);
            assert_eq!(fits_in_chunk(s.chunk(l)), i % 2 == 0);
            s.classes[0].used += 1;
            g.link(&mut s, 0, l);
            locs.push(l);
        }
        g.validate(&s);
        (s, g, locs)
    }

    fn evict(s: &mut Slabs, g: &mut GdWheel) -> u64 {
        let Some(Victim::Evicted(l)) = g.victim(s, 0, 10, None) else {
            panic!("no victim");
        };
        g.unlink(s, 0, l);
        s.classes[0].used -= 1;
        item::set_bits(s.chunk_mut(l), 0);
        g.validate(s);
        l
    }

    #[test]
    fn trailer_round_trip() {
        let mut b = [0u8; TRAILER_LEN];
        for (prev, next) in [(0, NIL), (NIL, 0), (LOC_MASK - 1, 12345), (7, LOC_MASK - 3)] {
            let t = Trailer {
                prev,
                next,
                h24: 0xabcdef,
            };
            t.encode(&mut b);
            assert_eq!(Trailer::decode(&b), t);
        }
    }

    #[test]
    fn side_arrays_only_for_pages_that_need_them() {
        let (_, g, _) = setup(&[1, 1, 1]);
        // One 4 KB page of 64 chunks: 64 x 12 bytes aside.
        assert_eq!(g.side_bytes(), 64 * TRAILER_LEN);
        let (_, g, _) = setup(&[1]);
        assert_eq!(g.side_bytes(), 0);
    }

    #[test]
    fn next_set_finds_bits() {
        let mut m = [0u64; 4];
        assert_eq!(next_set(&m, 0), None);
        m[1] = 1 << 5;
        m[3] = 1 << 63;
        assert_eq!(next_set(&m, 0), Some(69));
        assert_eq!(next_set(&m, 69), Some(69));
        assert_eq!(next_set(&m, 70), Some(255));
        assert_eq!(next_set(&m, 256), None);
    }

    #[test]
    fn lazy_hits_are_applied_when_the_item_comes_up() {
        // Costs 1, 1, 2 (q=9): H = 1, 1, 2. Hit the first item: lazily,
        // nothing moves but its REF bit.
        let (mut s, mut g, l) = setup_with(&[1, 1, 9], true);
        let hit = |s: &mut Slabs, g: &mut GdWheel, x: u64| {
            let b = item::bits(s.chunk(x));
            item::set_bits(s.chunk_mut(x), b | item::REF);
            g.touch(s, 0, x);
        };
        hit(&mut s, &mut g, l[0]);
        assert_eq!(g.priority(&s, 0, l[0]), Some(1), "a lazy hit moves nothing");
        // The front item was hit: it goes back in at L + cost = 1 + 1 behind
        // l[1], and loses its bit; l[1] is the victim.
        assert_eq!(evict(&mut s, &mut g), l[1]);
        assert_eq!(g.priority(&s, 0, l[0]), Some(2));
        assert_eq!(item::bits(s.chunk(l[0])) & item::REF, 0);
        // Now H = 2 for both; l[2] was queued first.
        assert_eq!(evict(&mut s, &mut g), l[2]);
        assert_eq!(evict(&mut s, &mut g), l[0]);
        // Eagerly the same hit re-queues at once: l[0] gets H = 0 + 1 = 1,
        // behind l[1], which goes first.
        let (mut s, mut g, l) = setup_with(&[1, 1, 9], false);
        hit(&mut s, &mut g, l[0]);
        assert_eq!(evict(&mut s, &mut g), l[1]);
        assert_eq!(evict(&mut s, &mut g), l[0]);
        assert_eq!(evict(&mut s, &mut g), l[2]);
    }

    #[test]
    fn cheapest_first_then_lru_among_equals() {
        // Costs 1 (q=1), 2 (q=9), 1, 4 (q=17): H = 1, 2, 1, 4.
        let (mut s, mut g, l) = setup(&[1, 9, 1, 17]);
        assert_eq!(evict(&mut s, &mut g), l[0]);
        assert_eq!(g.hand(0), 1);
        // Credits above the hand: H - L = 0, 1, 3.
        let credit = |g: &GdWheel, s: &Slabs, x| g.priority(s, 0, x).unwrap() - g.hand(0);
        assert_eq!(
            [
                credit(&g, &s, l[2]),
                credit(&g, &s, l[1]),
                credit(&g, &s, l[3])
            ],
            [0, 1, 3]
        );
        assert_eq!(evict(&mut s, &mut g), l[2]);
        assert_eq!(evict(&mut s, &mut g), l[1]);
        assert_eq!(g.hand(0), 2);
        assert_eq!(evict(&mut s, &mut g), l[3]);
        assert_eq!(g.hand(0), 4);
        assert!(g.victim(&mut s, 0, 10, None).is_none());
    }

    #[test]
    fn a_hit_moves_an_item_behind_its_equals() {
        let (mut s, mut g, l) = setup(&[1, 1, 1, 1]);
        g.touch(&mut s, 0, l[0]);
        g.touch(&mut s, 0, l[1]);
        g.validate(&s);
        assert_eq!(evict(&mut s, &mut g), l[2]);
        assert_eq!(evict(&mut s, &mut g), l[3]);
        assert_eq!(evict(&mut s, &mut g), l[0]);
        assert_eq!(evict(&mut s, &mut g), l[1]);
    }

    #[test]
    fn large_costs_cascade_through_the_levels() {
        // q=200 is about 2^24.9: capped to the ring's end. q=120 ~ 30000
        // and q=80 ~ 940 (level 1), q=30 ~ 12 (level 0).
        let (mut s, mut g, l) = setup(&[200, 120, 80, 30, 120]);
        let hs: Vec<u64> = l.iter().map(|&x| g.priority(&s, 0, x).unwrap()).collect();
        assert_eq!(hs[0], g.classes[0].as_ref().unwrap().h_max());
        assert_eq!(evict(&mut s, &mut g), l[3]);
        assert_eq!(evict(&mut s, &mut g), l[2]);
        assert_eq!(g.hand(0), hs[2]);
        assert_eq!(evict(&mut s, &mut g), l[1]);
        assert_eq!(evict(&mut s, &mut g), l[4]);
        assert_eq!(evict(&mut s, &mut g), l[0]);
        assert_eq!(g.hand(0), hs[0]);
    }

    #[test]
    fn protect_is_skipped_and_kept() {
        let (mut s, mut g, l) = setup(&[1, 9]);
        assert_eq!(
            g.victim(&mut s, 0, 10, Some(l[0])),
            Some(Victim::Evicted(l[1]))
        );
        g.validate(&s);
        // The hand passed the protected item's H: it is the next victim.
        assert_eq!(g.victim(&mut s, 0, 10, None), Some(Victim::Evicted(l[0])));
        // Only the protected item left: nothing to evict.
        let (mut s, mut g, l) = setup(&[1]);
        assert_eq!(g.victim(&mut s, 0, 10, Some(l[0])), None);
        g.validate(&s);
    }

    #[test]
    fn expired_victims_are_reported_as_such() {
        let (mut s, mut g, l) = setup(&[1, 9]);
        item::set_exptime(s.chunk_mut(l[0]), 5);
        assert_eq!(g.victim(&mut s, 0, 10, None), Some(Victim::Expired(l[0])));
    }

    #[test]
    fn relocate_keeps_the_queue_order() {
        // Items 0 and 2 keep their trailer in the chunk, 1 and 3 aside.
        let (mut s, mut g, l) = setup(&[1, 1, 1, 1]);
        let spare = s.take_free(0).unwrap();
        let mut now = l.clone();
        for i in [1, 0, 3, 2] {
            let (from, to) = (now[i], spare);
            let tmp = s.chunk(from).to_vec();
            s.chunk_mut(to).copy_from_slice(&tmp);
            g.relocate(&mut s, 0, from, to);
            item::set_bits(s.chunk_mut(from), 0);
            g.validate(&s);
            // And back, so that the next round can use the spare chunk.
            let tmp = s.chunk(to).to_vec();
            s.chunk_mut(from).copy_from_slice(&tmp);
            g.relocate(&mut s, 0, to, from);
            item::set_bits(s.chunk_mut(to), 0);
            g.validate(&s);
            now[i] = from;
        }
        for &x in &l {
            assert_eq!(evict(&mut s, &mut g), x);
        }
    }
}
