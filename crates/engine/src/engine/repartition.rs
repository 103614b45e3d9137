//! Hot/cold re-partitioning within pages (Cavast, section 4.1 and the
//! memcached case study of section 6.1, Algorithm 1), with the expiry
//! reclaimer folded in (section 4.4). `-o repartition=1`.
//!
//! Each page is cut into [`ZONES`] columns of equal chunk counts, hottest
//! first. A pass over a page reads the access time of every live item (the
//! page's own LRU order, as Cavast keeps an LRU list per slab), ranks them,
//! and gives the hottest the first column's chunks, the next the second's,
//! and so on. Cavast's rules keep the moves few:
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
use crate::hash::hash;
use crate::item;
use crate::slab::PageId;

/// Columns per page (Cavast: 16 columns of 128 KB in a 2 MB page; our pages
/// are 1 MB, so a column is 64 KB).
pub const ZONES: u32 = 16;

/// Budget units a swap costs (two chunk copies, two index updates, two
/// stripes taken and let go), against one per chunk scanned.
const SWAP_COST: usize = 16;

/// Where the re-partitioner is.
#[derive(Default)]
pub(crate) struct Repartition {
    /// The next page to visit.
    next_page: usize,
    work: Option<Work>,
    /// Second copy buffer for swaps (the engine's `scratch` is the first).
    scratch: Vec<u8>,
    pub(crate) stats: RepartitionStats,
    /// `stats.swaps` when the current sweep over all pages began, and the
    /// pages it has done.
    sweep_began_at: u64,
    sweep_pages: u64,
    /// The last sweep found little to trade: sweep at the reclaimer's
    /// pace until one finds more (`Engine::maintain_slices`).
    settled: bool,
}

/// Maintainer slices per period while re-partitioning is under way; once
/// a sweep found little to trade, the reclaimer's pace.
const EAGER_SLICES: usize = 256;
const SETTLED_SLICES: usize = super::RECLAIM_SLICES;

/// Counters for `stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RepartitionStats {
    /// Pages passed over.
    pub pages: u64,
    /// Chunks whose temperature was read.
    pub scanned: u64,
    /// Pairs of items that traded chunks.
    pub swaps: u64,
}

/// The page being re-partitioned.
struct Work {
    page: PageId,
    class: usize,
    chunk_size: u32,
    nchunks: u32,
    /// Whether the page is re-partitioned after the scan, or only scanned
    /// for expired items (the largest class, and pages of few chunks).
    arrange: bool,
    phase: Phase,
}

enum Phase {
    /// Reading temperatures: the next chunk, and (temperature, chunk) of
    /// the live items so far, in chunk order.
    Scan {
        at: u32,
        seen: Vec<(u8, u32)>,
    },
    Place(Placing),
}

/// Trading chunks. `want[c]` is the column the item at chunk `c` should be
/// in and `temp[c]` its temperature (`NOWHERE` for no item); columns
/// before `zone` are settled; `resident` walks column `zone` for items that
/// belong further down, `incomer` walks the later columns for items that
/// belong in `zone`.
struct Placing {
    want: Vec<u8>,
    temp: Vec<u8>,
    zone: u32,
    resident: u32,
    incomer: u32,
}

const NOWHERE: u8 = u8::MAX;

impl Placing {
    /// From the scan's (temperature, chunk) of the live items, in chunk
    /// order, of a page of `n` chunks.
    fn new(seen: &[(u8, u32)], n: u32) -> Placing {
        let mut temp = vec![NOWHERE; n as usize];
        for &(t, c) in seen {
            temp[c as usize] = t;
        }
        Placing {
            want: targets(seen, n),
            temp,
            zone: 0,
            resident: 0,
            incomer: zone_start(1, n),
        }
    }
}

/// The column of chunk `c` in a page of `n` chunks.
#[inline]
fn zone_of(c: u32, n: u32) -> u32 {
    (c as u64 * ZONES as u64 / n as u64) as u32
}

/// First chunk of column `z`.
#[inline]
fn zone_start(z: u32, n: u32) -> u32 {
    // The smallest c with c * ZONES / n >= z.
    ((z as u64 * n as u64).div_ceil(ZONES as u64)) as u32
}

/// An item's temperature: 0 for an access this second, then one more for
/// each doubling of its age (lower is hotter).
#[inline]
fn temperature(age: u32) -> u8 {
    (u32::BITS - age.leading_zeros()) as u8
}

/// Which column each live item should be in: ranked by temperature (ties
/// in chunk order), the i-th hottest takes the i-th live chunk's column.
fn targets(seen: &[(u8, u32)], nchunks: u32) -> Vec<u8> {
    // A counting sort (temperatures are below 33): linear, so a page of
    // 32 768 items ranks within one bounded slice, and stable, so equal
    // temperatures keep their chunk order and stay put.
    let mut first = [0usize; 34];
    for &(t, _) in seen {
        first[t as usize + 1] += 1;
    }
    for t in 1..first.len() {
        first[t] += first[t - 1];
    }
    let mut want = vec![NOWHERE; nchunks as usize];
    for &(t, c) in seen {
        let rank = first[t as usize];
        first[t as usize] += 1;
        // `seen` is in chunk order: the rank-th live chunk's column.
        want[c as usize] = zone_of(seen[rank].1, nchunks) as u8;
    }
    want
}

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
                arrange: page.class as usize - 1 != last_class && page.nchunks >= ZONES,
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
            zone,
            resident,
            incomer,
        } = p;
        while *zone + 1 < ZONES {
            let end = zone_start(*zone + 1, n);
            // The next item in this column that belongs further down.
            while *resident < end
                && (want[*resident as usize] == NOWHERE || want[*resident as usize] as u32 == *zone)
            {
                *resident += 1;
            }
            // The next item further down that belongs in this column.
            while *incomer < n && want[*incomer as usize] as u32 != *zone {
                *incomer += 1;
            }
            if *resident >= end || *incomer >= n {
                // Settled (or the counts changed since the scan): next column.
                *zone += 1;
                *resident = end;
                *incomer = zone_start(*zone + 1, n);
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
            want[j] = *zone as u8;
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
        assert!(hot.clone().all(|k| zone_of(place(&mut e, k).1, n) >= 2));
        while e.repartition.as_ref().unwrap().stats.pages == 0 {
            e.maintain(1000);
            e.release_stripes();
        }
        let stats = e.repartition.as_ref().unwrap().stats;
        assert_eq!(stats.swaps, 100, "each hot item traded with a cold one");
        for k in hot {
            assert_eq!(zone_of(place(&mut e, k).1, n), 0, "key {k}");
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

    #[test]
    fn zones_cover_the_page_in_order() {
        for n in [16u32, 17, 31, 32, 100, 32768] {
            assert_eq!(zone_start(0, n), 0);
            for z in 0..ZONES {
                let (s, e) = (zone_start(z, n), zone_start(z + 1, n));
                assert!(s < e, "zone {z} of {n} chunks is empty");
                assert!((s..e).all(|c| zone_of(c, n) == z));
            }
            assert_eq!(zone_start(ZONES, n), n);
        }
    }

    #[test]
    fn temperature_doubles() {
        let t: Vec<u8> = [0, 1, 2, 3, 4, 7, 8, 1000].map(temperature).to_vec();
        assert_eq!(t, [0, 1, 2, 2, 3, 3, 4, 10]);
    }

    #[test]
    fn targets_rank_the_hottest_first_and_keep_ties_in_place() {
        // 32 chunks, 2 per column; live items at every chunk but 5.
        let seen: Vec<(u8, u32)> = (0..32u32)
            .filter(|&c| c != 5)
            .map(|c| (if c == 30 || c == 31 { 0 } else { 3 }, c))
            .collect();
        let want = targets(&seen, 32);
        assert_eq!(want[5], NOWHERE);
        // The two hot items take the first two live chunks (column 0).
        assert_eq!((want[30], want[31]), (0, 0));
        // The rest keep their order, each pushed two live chunks down.
        assert_eq!(want[0], 1);
        assert_eq!(want[29], 15);
        let per_zone = (0..ZONES as u8)
            .map(|z| want.iter().filter(|&&w| w == z).count())
            .collect::<Vec<_>>();
        // As many items want each column as it has live chunks.
        let live_in = |z: u32| seen.iter().filter(|s| zone_of(s.1, 32) == z).count();
        assert_eq!(per_zone, (0..ZONES).map(live_in).collect::<Vec<_>>());
    }
}
