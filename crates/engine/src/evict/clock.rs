//! Per-class CLOCK eviction, the baseline policy.
//!
//! memcached keeps a doubly linked LRU per class (16 bytes of links per item)
//! and segments it into hot/warm/cold. CLOCK approximates LRU with one
//! reference bit per item and no links: a hand walks the class's chunks in
//! page order; an item whose REF bit is set (it was read since the hand last
//! passed) gets a second chance, the first one without it is evicted.
//! Expired items met on the way are taken first. New items start with REF
//! clear, so a fill with no reads evicts oldest-first (FIFO), and an item read
//! once survives one more revolution.

use super::policy::{Eviction, Victim};
use crate::config::EvictionPolicy;
use crate::item;
use crate::slab::Slabs;

/// CLOCK as an [`Eviction`] policy (not the server clock, `crate::clock`). Its state is in the slabs (each class's
/// hand) and in every item's REF bit, which the engine sets on access, so it
/// has nothing to do when an item is linked, touched, moved or dropped.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClockPolicy;

impl Eviction for ClockPolicy {
    fn kind(&self) -> EvictionPolicy {
        EvictionPolicy::Lru
    }

    fn memory_bytes(&self) -> usize {
        0
    }

    fn first_item_bytes(&self, _class: usize) -> usize {
        0
    }

    #[inline]
    fn link(&mut self, _slabs: &mut Slabs, _class: usize, _loc: u64) {}

    #[inline]
    fn unlink(&mut self, _slabs: &mut Slabs, _class: usize, _loc: u64) {}

    #[inline]
    fn touch(&mut self, _slabs: &mut Slabs, _class: usize, _loc: u64) {}

    #[inline]
    fn relocate(&mut self, _slabs: &mut Slabs, _class: usize, _from: u64, _to: u64) {}

    fn clear(&mut self) {}

    #[inline]
    fn victim(
        &mut self,
        slabs: &mut Slabs,
        class: usize,
        now: u32,
        protect: Option<u64>,
    ) -> Option<Victim> {
        clock_victim(slabs, class, now, protect)
    }

    /// None: the engine reads the hand's position itself.
    fn peek(&self, _class: usize) -> Option<u64> {
        None
    }

    fn credit(&self, _slabs: &Slabs, _class: usize, _loc: u64) -> Option<u64> {
        None
    }
}

/// Advance `class`'s hand to the next victim. REF bits are cleared on the way.
/// `protect` (an item the caller still needs) is skipped. Returns None when the
/// class holds no evictable item.
pub fn clock_victim(
    slabs: &mut Slabs,
    class: usize,
    now: u32,
    protect: Option<u64>,
) -> Option<Victim> {
    let npages = slabs.classes[class].pages.len();
    if npages == 0 {
        return None;
    }
    let per_page = slabs.classes[class].per_page as u64;
    // Two revolutions: the first may only clear REF bits.
    let limit = 2 * npages as u64 * per_page + 1;
    let mut steps = 0u64;
    while steps < limit {
        let c = &mut slabs.classes[class];
        if c.hand_page >= c.pages.len() {
            c.hand_page = 0;
            c.hand_chunk = 0;
        }
        let page_id = c.pages[c.hand_page];
        let chunk_no = c.hand_chunk;
        // Advance the hand past this chunk before looking at it.
        c.hand_chunk += 1;
        if c.hand_chunk >= c.per_page {
            c.hand_chunk = 0;
            c.hand_page = (c.hand_page + 1) % c.pages.len();
        }
        steps += 1;
        let page = slabs.page_mut(page_id);
        if chunk_no >= page.bump {
            // Never handed out: skip the rest of this page quickly.
            let skip = (page.nchunks - chunk_no) as u64;
            let c = &mut slabs.classes[class];
            if c.hand_chunk != 0 {
                c.hand_chunk = 0;
                c.hand_page = (c.hand_page + 1) % c.pages.len();
            }
            steps += skip.saturating_sub(1);
            continue;
        }
        // The hand reads items without their stripes: the access byte
        // atomically, the expiry plainly (`crate::stripe`).
        let loc = slabs.loc(page_id, chunk_no);
        let bits = slabs.bits(loc);
        if bits & item::LIVE == 0 || Some(loc) == protect {
            continue;
        }
        let exp = slabs.exptime(loc);
        if exp != 0 && exp <= now {
            return Some(Victim::Expired(loc));
        }
        if bits & item::REF != 0 && slabs.clear_bits(loc, item::REF) & item::REF != 0 {
            continue;
        }
        return Some(Victim::Evicted(loc));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slab::{class_sizes, Slabs};

    fn fill(s: &mut Slabs, class: usize) -> Vec<u64> {
        let p = s.new_page().unwrap();
        s.assign(p, class);
        let mut locs = Vec::new();
        while let Some(l) = s.take_free(class) {
            item::write(s.chunk_mut(l), 1, 0, 0, item::LIVE, 0, 0, b"k", &[]);
            locs.push(l);
        }
        locs
    }

    #[test]
    fn fifo_without_references() {
        let mut s = Slabs::new(1 << 12, &class_sizes(32, 1.25, 1 << 12), 1 << 16, false);
        let locs = fill(&mut s, 0);
        assert_eq!(
            clock_victim(&mut s, 0, 10, None),
            Some(Victim::Evicted(locs[0]))
        );
        assert_eq!(
            clock_victim(&mut s, 0, 10, None),
            Some(Victim::Evicted(locs[1]))
        );
    }

    #[test]
    fn referenced_items_get_a_second_chance() {
        let mut s = Slabs::new(1 << 12, &class_sizes(32, 1.25, 1 << 12), 1 << 16, false);
        let locs = fill(&mut s, 0);
        for &l in &locs[..3] {
            let c = s.chunk_mut(l);
            item::set_bits(c, item::bits(c) | item::REF);
        }
        assert_eq!(
            clock_victim(&mut s, 0, 10, None),
            Some(Victim::Evicted(locs[3]))
        );
        // Protect skips, expired wins.
        item::set_exptime(s.chunk_mut(locs[5]), 5);
        assert_eq!(
            clock_victim(&mut s, 0, 10, Some(locs[4])),
            Some(Victim::Expired(locs[5]))
        );
    }

    #[test]
    fn all_referenced_still_finds_a_victim() {
        let mut s = Slabs::new(1 << 12, &class_sizes(32, 1.25, 1 << 12), 1 << 16, false);
        let locs = fill(&mut s, 0);
        for &l in &locs {
            let c = s.chunk_mut(l);
            item::set_bits(c, item::bits(c) | item::REF);
        }
        assert_eq!(
            clock_victim(&mut s, 0, 10, None),
            Some(Victim::Evicted(locs[0]))
        );
    }
}
