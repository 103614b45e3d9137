//! `flush_all` and the background work of the server's maintainer: the
//! expiry reclaimer, aging items to flash, and `cache_memlimit`.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{Engine, RECLAIM_SLICES};
use crate::clock::RelTime;
use crate::config::ConfigError;
use crate::hash::hash;
use crate::rebalance::Plan;
use crate::slab::PageId;
use crate::{chain, item};

/// The work of one of the maintainer's holds of the engine lock: its
/// chunk budget alone let a hold reach 16-40 µs (20 demotions of a page
/// in transit, a reclaimer's walk over cold memory; issue 34 wants 99.9%
/// of the background's holds under 20 µs). Debug builds are some ten
/// times slower: the same work, not a tenth of it.
pub const MAINTAIN_SLICE: Duration = Duration::from_micros(match cfg!(debug_assertions) {
    true => 80,
    false => 8,
});

impl Engine {
    /// `flush_all [delay]`: drop everything now, or when the clock reaches `at`.
    pub fn flush_all(&mut self, at: Option<RelTime>) {
        // A delayed flush that is due happens first: a new delay must not
        // cancel it.
        self.check_flush();
        match at {
            Some(t) if t > self.now() => {
                self.pending_flush = Some(t);
                self.flush_at.store(t, Ordering::Release);
            }
            _ => {
                self.pending_flush = None;
                self.flush_at.store(0, Ordering::Release);
                self.flush_now();
            }
        }
    }

    pub(super) fn check_flush(&mut self) {
        if let Some(t) = self.pending_flush {
            if t <= self.now() {
                self.pending_flush = None;
                self.flush_at.store(0, Ordering::Release);
                self.flush_now();
            }
        }
    }

    /// O(pages): every chunk becomes free by resetting the pages' cursors.
    pub(super) fn flush_now(&mut self) {
        self.hold_all();
        self.take_back_reserved();
        for s in 0..self.stripes.len() {
            // SAFETY: as in `stripe`: every stripe is acquired.
            unsafe { self.stripes.stripe_mut(s) }.index.clear();
            self.index_shape[s] = self.shape_of(s);
        }
        self.index_grown.store(0, Ordering::Relaxed);
        self.index_bytes = self.index_memory();
        self.slabs.clear_items();
        self.policy.clear();
        self.counters.curr_items = 0;
        self.counters.bytes = 0;
        self.rebal.flushed();
        self.drain_after_flush();
        // The page in transit may have become a spare one, over `-m`.
        self.enforce_budget(None);
        if let Some(z) = self.zone.as_mut() {
            z.zone.lock().clear();
        }
        if let Some(f) = &self.flash {
            f.clear();
        }
    }

    /// Background work: pending delayed flush, reclaiming expired items (at most
    /// `budget` chunks visited), rebalancing (deciding a page move, draining
    /// at most `budget` chunks of the page in transit). Returns the chunks
    /// visited and drained.
    pub fn maintain(&mut self, budget: usize) -> usize {
        let (done, plan) = self.maintain_step(budget, None);
        if let Some(plan) = plan {
            self.queue_moves(plan.moves());
        }
        done
    }

    /// [`Engine::maintain`] but for the rebalancing rule's arithmetic: a
    /// decision it began is returned, for the caller to finish without
    /// the engine lock ([`Plan::moves`]) and queue
    /// ([`Engine::queue_moves`]). `slice`: the time it may take (the
    /// server's maintainer: [`MAINTAIN_SLICE`]); past it, it stops as if
    /// its budget were spent.
    pub fn maintain_step(
        &mut self,
        budget: usize,
        slice: Option<Duration>,
    ) -> (usize, Option<Plan>) {
        self.slice_end = slice.map(|s| Instant::now() + s);
        self.check_flush();
        let visited = match self.repartitions() {
            true => self.repartition_step(budget),
            false => self.reclaim_step(budget),
        };
        let (drained, plan) = self.rebalance_step(budget);
        let done = visited + drained + self.zone_step(budget);
        self.slice_end = None;
        (done, plan)
    }

    /// Whether the maintainer's step has had its time: its loops stop and
    /// say there is more (the whole budget done), so the maintainer lets
    /// the lock go and comes back.
    pub(super) fn slice_over(&self) -> bool {
        self.slice_end.is_some_and(|end| Instant::now() >= end)
    }

    /// How many `maintain` slices of 512 chunks a maintainer runs per
    /// period (200 ms in the server) while each finds work: the reclaimer's walk needs few;
    /// re-partitioning gets more until a sweep over all pages finds little
    /// to trade (docs/benchmarks-history.md, "Cavast's layout").
    pub fn maintain_slices(&self) -> usize {
        self.repartition_slices().unwrap_or(RECLAIM_SLICES)
    }

    /// The expiry reclaimer: walk `budget` chunks on from where it stopped.
    pub(super) fn reclaim_step(&mut self, budget: usize) -> usize {
        let now = self.now();
        let mut visited = 0;
        let npages = self.slabs.pages.len();
        let mut pages_seen = 0;
        while visited < budget && pages_seen <= npages && npages > 0 {
            let (p, c) = self.reclaim_at;
            if p >= npages {
                self.reclaim_at = (0, 0);
                pages_seen += 1;
                continue;
            }
            let bump = match &self.slabs.pages[p] {
                Some(page) if page.class != 0 => page.bump,
                _ => 0,
            };
            if c >= bump {
                self.reclaim_at = (p + 1, 0);
                pages_seen += 1;
                continue;
            }
            // The clock every 16 chunks: a chunk is some 0.3 µs.
            if visited % 16 == 15 && self.slice_over() {
                return budget;
            }
            self.reclaim_at = (p, c + 1);
            visited += 1;
            let loc = self.slabs.loc(p as PageId, c);
            if self.slabs.bits(loc) & item::LIVE != 0 {
                self.reclaim_or_age(loc, now);
            }
        }
        visited
    }

    /// The reclaimer's work on the live item at `loc`: remove it if it
    /// expired (returns true), else keep its access time from wrapping.
    pub(super) fn reclaim_or_age(&mut self, loc: u64, now: RelTime) -> bool {
        let exp = self.slabs.exptime(loc);
        if exp != 0 && exp <= now && self.still_expired(loc, now) {
            self.counters.crawler_reclaimed += 1;
            let class = self.slabs.class_of(loc);
            self.slabs.classes[class].stats.crawler_reclaimed += 1;
            self.remove(loc);
            return true;
        }
        if self.age_to_flash(loc, now) {
            return true;
        }
        // Keep the 16-bit access time from wrapping around.
        if item::atime_age(self.slabs.atime(loc), now) > item::ATIME_SATURATE {
            self.hold_item(loc);
            let code = item::atime_code(now).wrapping_sub(item::ATIME_SATURATE as u16);
            item::set_atime(self.slabs.chunk_mut(loc), code);
        }
        false
    }

    /// memcached's `ext_item_age`: the live item at `loc`, idle longer than
    /// it, goes to flash ahead of eviction, and memory keeps nothing of it
    /// but the tier's index entry (memcached keeps its header). False if
    /// it stays: fresher, chained, too small, or the tier's stage is full
    /// (the reclaimer's next pass tries again).
    pub(super) fn age_to_flash(&mut self, loc: u64, now: RelTime) -> bool {
        let Some(age) = self.flash.as_ref().and_then(|f| f.config().item_age) else {
            return false;
        };
        if item::atime_age(self.slabs.atime(loc), now) <= age {
            return false;
        }
        self.hold_item(loc);
        let chunk = self.slabs.chunk(loc);
        if chain::is_head(chunk) {
            return false;
        }
        let image = &chunk[..item::stored_len(chunk)];
        let h = hash(item::key(image));
        if !self.flash.as_ref().is_some_and(|f| f.admit(h, image)) {
            return false;
        }
        self.unlink(loc);
        self.slabs.free(loc);
        true
    }

    /// `cache_memlimit`: change `-m` at run time. Shrinking frees pages.
    pub fn set_memory_limit(&mut self, bytes: usize) -> Result<(), ConfigError> {
        if bytes < self.slabs.page_size {
            return Err(ConfigError::MemoryLimit(bytes));
        }
        Self::check_addressable(&self.slabs, bytes)?;
        self.memory_limit = bytes;
        self.config.memory_limit = bytes;
        self.enforce_budget(None);
        Ok(())
    }
}
