//! Hot/cold re-partitioning within pages (Cavast, section 4.1 and the
//! memcached case study of section 6.1, Algorithm 1), with the expiry
//! reclaimer folded in (section 4.4). `-o repartition=1`.
//!
//! Each page is cut into [`crate::columns::COLUMNS`] columns of equal
//! chunk counts, hottest first. A pass over a page reads the access time
//! of every live item (the page's own LRU order, as Cavast keeps an LRU
//! list per slab), ranks them, and gives the hottest the first column's
//! chunks, the next the second's, and so on. Cavast's rules keep the moves few:
//! - no movement within a column: an item moves only if its rank puts it in
//!   another column, and items of equal temperature keep their order;
//! - lazy: one page at a time, in the maintainer's bounded slices;
//! - point to point: two items trade chunks (`swap_items`), so a move never
//!   chains into another.
//!
//! Temperature is the item's last access time (seconds), in powers of two
//! of its age, so that a page does not reshuffle every second.
//!
//! The scan that reads access times also reclaims expired items, so with
//! re-partitioning on, the reclaimer's separate walk (which loads every item
//! once more and pollutes the CPU cache, section 4.4) is not needed.
//!
//! Only CLOCK keeps nothing per chunk outside the chunk, so only CLOCK pages
//! are re-partitioned (GD-Wheel links its queues through item locations).
//! The largest class, where chained items live, is left alone.

use super::Engine;
use crate::columns::{
    column_start, temperature, Phase, Placing, Repartition, Work, COLUMNS, NOWHERE,
};
use crate::hash::hash;
use crate::item;
use crate::slab::PageId;

/// Budget units a swap costs (two chunk copies, two index updates, two
/// stripes taken and let go), against one per chunk scanned.
const SWAP_COST: usize = 16;

/// Maintainer slices per period while re-partitioning is under way; once
/// a sweep found little to trade, the reclaimer's pace.
const EAGER_SLICES: usize = 256;
const SETTLED_SLICES: usize = super::RECLAIM_SLICES;

impl Engine {
    /// Whether pages are re-partitioned (`-o repartition=1` under CLOCK).
    pub(super) fn repartitions(&self) -> bool {
        self.repartition.is_some()
    }

    /// How many `maintain` slices a maintainer runs per period (see
    /// `Engine::maintain_slices`).
    pub(super) fn repartition_slices(&self) -> Option<usize> {
        let r = self.repartition.as_ref()?;
        Some(if r.settled {
            SETTLED_SLICES
        } else {
            EAGER_SLICES
        })
    }

    /// Whether a page's temperatures are read and its items are being
    /// traded (for tests that race GETs with the trades only).
    #[cfg(any(test, feature = "testing"))]
    pub fn repartition_is_placing(&self) -> bool {
        self.repartition.as_ref().is_some_and(|r| {
            matches!(
                r.work,
                Some(Work {
                    phase: Phase::Place(_),
                    ..
                })
            )
        })
    }

    /// One slice of re-partitioning: scan or rearrange the current page,
    /// or start on the next. Returns the budget used.
    pub(super) fn repartition_step(&mut self, budget: usize) -> usize {
        let Some(mut r) = self.repartition.take() else {
            return 0;
        };
        let mut used = 0;
        let mut pages_seen = 0;
        let npages = self.slabs.pages.len();
        while used < budget && pages_seen <= npages {
            let Some(mut w) = r.work.take() else {
                if r.next_page >= npages {
                    // A sweep is over: go on at full pace only if it traded
                    // at least once per 16 pages.
                    let swaps = r.stats.swaps.saturating_sub(r.sweep_began_at);
                    r.settled = swaps * 16 < r.sweep_pages;
                    r.sweep_began_at = r.stats.swaps;
                    r.sweep_pages = 0;
                }
                pages_seen += 1;
                r.work = self.begin_page(&mut r.next_page);
                if r.work.is_none() {
                    // No page to work on.
                    used += 1;
                    break;
                }
                continue;
            };
            if !self.still_ours(&w) {
                continue;
            }
            let (page, nchunks) = (w.page, w.nchunks);
            let done = match &mut w.phase {
                Phase::Scan { at, seen } => {
                    let now = self.now();
                    let bump = self.slabs.pages[page as usize]
                        .as_ref()
                        .map_or(0, |p| p.bump);
                    while *at < bump && used < budget {
                        let loc = self.slabs.loc(page, *at);
                        *at += 1;
                        used += 1;
                        r.stats.scanned += 1;
                        if self.slabs.is_live(loc) && !self.reclaim_or_age(loc, now) {
                            let age = item::atime_age(self.slabs.atime(loc), now);
                            seen.push((temperature(age), *at - 1));
                        }
                    }
                    if *at < bump {
                        false
                    } else if !w.arrange || seen.len() < 2 {
                        true
                    } else {
                        w.phase = Phase::Place(Placing::new(seen, nchunks));
                        false
                    }
                }
                Phase::Place(p) => self.place_some(&mut r, page, nchunks, p, budget, &mut used),
            };
            if done {
                r.stats.pages += 1;
                r.sweep_pages += 1;
            } else {
                r.work = Some(w);
            }
        }
        self.repartition = Some(r);
        used
    }

    /// The next page to re-partition from `next` on (wrapping once), if any.
    fn begin_page(&mut self, next: &mut usize) -> Option<Work> {
        let npages = self.slabs.pages.len();
        let last_class = self.slabs.classes.len() - 1;
        for _ in 0..npages {
            let p = *next % npages;
            *next = p + 1;
            let Some(page) = &self.slabs.pages[p] else {
                continue;
            };
            if page.class == 0 {
                continue;
            }
            let w = Work {
                page: p as PageId,
                class: page.class as usize - 1,
                chunk_size: page.chunk_size,
                nchunks: page.nchunks,
                arrange: page.class as usize - 1 != last_class && page.nchunks >= COLUMNS,
                phase: Phase::Scan {
                    at: 0,
                    seen: Vec::new(),
                },
            };
            if self.still_ours(&w) {
                return Some(w);
            }
        }
        None
    }

    /// Whether the page is still in the class it was in, and not leaving it.
    fn still_ours(&self, w: &Work) -> bool {
        matches!(&self.slabs.pages[w.page as usize],
            Some(p) if p.class as usize == w.class + 1 && p.chunk_size == w.chunk_size)
            && self.page_in_transit().is_none_or(|(p, ..)| p != w.page)
    }

    /// Trade chunks until every column is settled or the budget is spent.
    /// Returns whether the page is done.
    fn place_some(
        &mut self,
        r: &mut Repartition,
        page: PageId,
        n: u32,
        p: &mut Placing,
        budget: usize,
        used: &mut usize,
    ) -> bool {
        let Placing {
            want,
            temp,
            column,
            resident,
            incomer,
        } = p;
        while *column + 1 < COLUMNS {
            let end = column_start(*column + 1, n);
            // The next item in this column that belongs further down.
            while *resident < end
                && (want[*resident as usize] == NOWHERE
                    || want[*resident as usize] as u32 == *column)
            {
                *resident += 1;
            }
            // The next item further down that belongs in this column.
            while *incomer < n && want[*incomer as usize] as u32 != *column {
                *incomer += 1;
            }
            if *resident >= end || *incomer >= n {
                // Settled (or the counts changed since the scan): next column.
                *column += 1;
                *resident = end;
                *incomer = column_start(*column + 1, n);
                continue;
            }
            let (i, j) = (*incomer as usize, *resident as usize);
            // Items of one temperature are as good as each other: then the
            // resident takes the incomer's place in the order and stays
            // (no chain of moves after one hot item, Cavast's rule 3).
            let trade = temp[i] < temp[j];
            let cost = if trade { SWAP_COST } else { 1 };
            if *used > 0 && *used + cost > budget {
                // Not enough left: the slice is over.
                *used = budget;
                return false;
            }
            *used += cost;
            if trade {
                let (a, b) = (
                    self.slabs.loc(page, *incomer),
                    self.slabs.loc(page, *resident),
                );
                if self.slabs.is_live(a) && self.slabs.is_live(b) {
                    self.swap_items(r, a, b);
                    r.stats.swaps += 1;
                    // GETs of these keys waited for the swap only.
                    self.release_stripes();
                }
                temp.swap(i, j);
            }
            want[i] = want[j];
            want[j] = *column as u8;
        }
        true
    }

    /// Trade the chunks of the live items at `a` and `b` (same page): copy
    /// each into the other's chunk and point the index at the new places.
    fn swap_items(&mut self, r: &mut Repartition, a: u64, b: u64) {
        self.hold_item(a);
        self.hold_item(b);
        let mut ta = std::mem::take(&mut self.scratch);
        let mut tb = std::mem::take(&mut r.scratch);
        ta.clear();
        ta.extend_from_slice(self.slabs.chunk(a));
        tb.clear();
        tb.extend_from_slice(self.slabs.chunk(b));
        self.slabs.chunk_mut(a).copy_from_slice(&tb);
        self.slabs.chunk_mut(b).copy_from_slice(&ta);
        let (ha, hb) = (hash(item::key(&ta)), hash(item::key(&tb)));
        // If both keys share a bucket and a tag, the second relocation may
        // take the first one's slot: the two slots are then the same.
        let moved = self.index_mut(ha, |ix, _| ix.relocate(ha, a, b))
            && self.index_mut(hb, |ix, _| ix.relocate(hb, b, a));
        debug_assert!(moved, "swapped items were indexed");
        self.scratch = ta;
        r.scratch = tb;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::columns::column_of;
    use crate::engine::Store;
    use crate::{Clock, Config, Expiry, RebalancePolicy};
    use std::sync::Arc;
    use std::time::Duration;

    fn engine(repartition: bool) -> (Engine, Arc<Clock>) {
        let config = Config {
            memory_limit: 8 << 20,
            rebalance: RebalancePolicy::Off,
            repartition,
            ..Config::default()
        };
        let clock = Arc::new(Clock::new());
        (Engine::new(config, clock.clone()).unwrap(), clock)
    }

    fn key(k: u32) -> Vec<u8> {
        format!("key:{k:06}").into_bytes()
    }

    fn value(k: u32) -> Vec<u8> {
        format!("{k:0100}").into_bytes()
    }

    /// (page, chunk) of `k`'s item.
    fn place(e: &mut Engine, k: u32) -> (PageId, u32) {
        let loc = e.get(&key(k)).expect("stored").id.0;
        e.release_stripes();
        e.slabs.split(loc)
    }

    #[test]
    fn a_pass_moves_the_hottest_items_to_the_first_column() {
        let (mut e, clock) = engine(true);
        for k in 0..3000 {
            e.store(&Store::set(&key(k), &value(k)));
        }
        let (page, _) = place(&mut e, 0);
        let n = e.slabs.pages[page as usize].as_ref().unwrap().nchunks;
        assert!(n > 3000, "one page holds them all ({n} chunks)");
        // The last 100 keys stored (columns 2..) become the hot ones.
        clock.advance(Duration::from_secs(100));
        let hot = 2900..3000;
        for k in hot.clone() {
            // The first fetch only marks an item fetched (memcached's
            // bump rule); the second refreshes its access time.
            for _ in 0..2 {
                assert!(e.get(&key(k)).is_some());
            }
        }
        e.release_stripes();
        assert!(hot.clone().all(|k| column_of(place(&mut e, k).1, n) >= 2));
        while e.repartition.as_ref().unwrap().stats.pages == 0 {
            e.maintain(1000);
            e.release_stripes();
        }
        let stats = e.repartition.as_ref().unwrap().stats;
        assert_eq!(stats.swaps, 100, "each hot item traded with a cold one");
        for k in hot {
            assert_eq!(column_of(place(&mut e, k).1, n), 0, "key {k}");
        }
        for k in 0..3000 {
            let v = e.get(&key(k)).expect("kept").value.to_vec();
            assert_eq!(v, value(k));
        }
        e.release_stripes();
        e.validate();
        // A second pass finds the page in order.
        while e.repartition.as_ref().unwrap().stats.pages < 2 {
            e.maintain(1000);
            e.release_stripes();
        }
        assert_eq!(e.repartition.as_ref().unwrap().stats.swaps, 100);
    }

    #[test]
    fn a_sweep_with_little_to_trade_slows_down() {
        let (mut e, clock) = engine(true);
        for k in 0..3000 {
            e.store(&Store::set(&key(k), &value(k)));
        }
        assert_eq!(e.maintain_slices(), EAGER_SLICES);
        let sweeps = |e: &mut Engine, n: u64| {
            let start = e.repartition.as_ref().unwrap().stats.pages;
            let pages = e.slabs.pages.len() as u64;
            while e.repartition.as_ref().unwrap().stats.pages < start + n * pages + 1 {
                e.maintain(1000);
                e.release_stripes();
            }
        };
        // All equally cold: nothing to trade.
        sweeps(&mut e, 2);
        assert_eq!(e.maintain_slices(), SETTLED_SLICES);
        // A hot key on every 10th: trades again, at full pace.
        clock.advance(Duration::from_secs(100));
        for k in (0..3000).step_by(10) {
            e.get(&key(k));
            e.get(&key(k));
        }
        e.release_stripes();
        sweeps(&mut e, 1);
        assert!(e.repartition.as_ref().unwrap().stats.swaps > 0);
        assert_eq!(e.maintain_slices(), EAGER_SLICES);
    }

    #[test]
    fn the_pass_reclaims_expired_items() {
        for repartition in [false, true] {
            let (mut e, clock) = engine(repartition);
            for k in 0..1000 {
                let (kb, v) = (key(k), value(k));
                let mut s = Store::set(&kb, &v);
                if k % 2 == 0 {
                    s.expiry = Expiry::At(clock.now() + 5);
                }
                e.store(&s);
            }
            clock.advance(Duration::from_secs(10));
            for _ in 0..100 {
                e.maintain(1000);
                e.release_stripes();
            }
            let s = e.stats();
            assert_eq!(s.crawler_reclaimed, 500, "repartition={repartition}");
            assert_eq!(s.curr_items, 500);
            assert_eq!(s.repartition.is_some(), repartition);
            e.validate();
        }
    }

    #[test]
    fn gdwheel_pages_are_left_alone() {
        let config = Config {
            eviction: crate::config::EvictionPolicy::GdWheel,
            repartition: true,
            ..Config::default()
        };
        let e = Engine::new(config, Arc::new(Clock::new())).unwrap();
        assert!(!e.repartitions());
    }
}
