//! The memory limit (`-m`): what counts against it, the pages a class may
//! hold beyond it (its floor), and giving pages back when over it.

use std::sync::atomic::Ordering;

use super::Engine;
use crate::chain;
use crate::cost::Learner;
use crate::slab::PageId;

/// See [`Engine::page_headroom`].
const ZONE_PAGE_HEADROOM: usize = 64 << 10;

impl Engine {
    /// The pages a class in use may hold even beyond `-m`: one, or for the
    /// last class, what one item of `-I` bytes takes (its head and segments
    /// are all chunks of that class). memcached grants a class its first
    /// page beyond `-m` (`do_slabs_newslab`), so that a small cache stores
    /// every size it is sent, with fewer pages than classes in use, and a
    /// class that appears once memory is full does not take a page from the
    /// others; so does `chunk_of_class`, and the limit grows by the pages so
    /// granted (`allowance`), at most the classes' floors.
    pub(super) fn floor_pages(&self, class: usize) -> usize {
        let c = &self.slabs.classes[class];
        if class + 1 < self.slabs.classes.len() {
            return 1;
        }
        let chunks = 1 + chain::segments(self.config.item_size_max, c.chunk_size as usize);
        chunks.div_ceil(c.per_page.max(1) as usize)
    }

    /// The bytes granted beyond `-m` (`floor_pages`): the pages granted,
    /// at most the floors of the classes now in use.
    pub(super) fn allowance(&self) -> usize {
        if self.granted == 0 {
            return 0;
        }
        self.granted.min(self.floor_pages_held()) * self.slabs.page_size
    }

    /// Pages the classes hold within their floors.
    pub(super) fn floor_pages_held(&self) -> usize {
        (0..self.slabs.classes.len())
            .map(|c| self.slabs.classes[c].pages.len().min(self.floor_pages(c)))
            .sum()
    }

    /// Pages adopted from a warm restart file: those over `-m` that are
    /// classes' floors are granted again, as the last run had them.
    pub(super) fn regrant_floors(&mut self) {
        let used = self.slabs.pages_allocated() * self.slabs.page_size + self.aux_bytes();
        let over = used
            .saturating_sub(self.memory_limit)
            .div_ceil(self.slabs.page_size);
        self.granted = over.min(self.floor_pages_held());
    }

    /// Whether every page is within its class's floor: memory may then be
    /// over `-m` (`floor_pages`).
    #[cfg(any(test, feature = "testing"))]
    pub(super) fn at_floors(&self) -> bool {
        self.slabs.pages_allocated() == self.floor_pages_held()
    }

    pub(super) fn can_add_page(&self) -> bool {
        self.can_add_page_with(0)
    }

    /// Whether a new page and `extra` bytes more fit in the memory limit.
    /// The N-zone leaves the pages of free memory the Z-zone needs now
    /// (`zone_pressed`).
    pub(super) fn can_add_page_with(&self, extra: usize) -> bool {
        self.pages_fit(1 + self.zone_pressed(), extra)
    }

    /// Whether `pages` more pages and `extra` bytes fit in the memory
    /// limit, with [`Engine::page_headroom`] to spare.
    pub(super) fn pages_fit(&self, pages: usize, extra: usize) -> bool {
        (self.slabs.pages_allocated() + pages) * self.slabs.page_size
            + self.aux_bytes()
            + extra
            + self.page_headroom()
            <= self.memory_limit + self.allowance()
    }

    /// Room left beyond a new page. The Z-zone's metadata (descriptors,
    /// pending removals) grows a few bytes at a time: a page that fitted
    /// exactly was over the limit a store later, `enforce_budget` emptied an
    /// N-zone page for it, and the next store took a page again, round and
    /// round (1,468 pages emptied in 1.5 M YCSB-B requests). Without the
    /// zone, aux memory moves only in steps `enforce_budget` handles.
    pub(super) fn page_headroom(&self) -> usize {
        if self.zone.is_some() {
            ZONE_PAGE_HEADROOM
        } else {
            0
        }
    }

    /// The items emptying a page of `class` lost since the reassign
    /// evictions were `moved_before` are evictions for lack of memory, as
    /// memcached counts them (curr_items + evictions stays equal to
    /// total_items when nothing is deleted), not reassign evictions.
    pub(super) fn count_as_evictions(&mut self, moved_before: u64, class: usize) {
        let lost = self.counters.reassign_evictions - moved_before;
        self.counters.reassign_evictions = moved_before;
        self.counters.evictions += lost;
        self.slabs.classes[class].stats.evicted += lost;
    }

    /// [`Engine::start_drain`] of a page of `class` to the pool, whose
    /// memory then goes back (the next [`Engine::enforce_budget`]).
    fn start_budget_drain(&mut self, class: usize) -> bool {
        if !self.start_drain(class, None) {
            return false;
        }
        if let Some(d) = self.drain.as_mut() {
            d.nomem = true;
        }
        true
    }

    /// How far memory may be over `-m` now: by a page while one drains
    /// (see [`Engine::enforce_budget`]).
    #[cfg(any(test, feature = "testing"))]
    pub(super) fn drain_slack(&self) -> usize {
        match self.drain {
            Some(_) => self.slabs.page_size,
            None => 0,
        }
    }

    /// Memory counted in `-m` besides the pages: the index, the eviction
    /// policy's structures, the learned-cost table.
    pub(super) fn aux_bytes(&self) -> usize {
        self.index_bytes
            + self.index_grown.load(Ordering::Relaxed)
            + self.policy.memory_bytes()
            + self.learner.as_ref().map_or(0, Learner::memory_bytes)
            + self.rebal.memory_bytes()
            + self.zone_memory()
            + self.flash.as_ref().map_or(0, |f| f.memory_bytes())
            + self.config.observer_bytes
    }

    /// An insert without the engine lock grew the index: count it, and
    /// keep to the memory limit.
    pub(crate) fn settle(&mut self) {
        self.fold_index_grown();
        self.enforce_budget(None);
    }

    /// Give pages back until items + index fit in the memory limit again.
    pub(super) fn enforce_budget(&mut self, mut protect: Option<u64>) {
        // No rescues after a store: a rescue evicts the class's next
        // victim, which may be the item just stored, or moves that item.
        let rescue = protect.is_none();
        loop {
            let used = self.slabs.pages_allocated() * self.slabs.page_size + self.aux_bytes();
            // `allowance` walks the classes: only when over `-m` itself
            // (this runs after every store).
            if used <= self.memory_limit || used <= self.memory_limit + self.allowance() {
                return;
            }
            if let Some(p) = self.slabs.spare.pop() {
                self.slabs.release_page(p);
                continue;
            }
            // The largest class gives a page, one that does not hold the
            // item just stored if any can; else the Z-zone gives one; else
            // that item goes too (the memory limit comes first: a GD-Wheel
            // side array or the index may have just grown past it).
            let keep = protect.map_or_else(Vec::new, |l| self.pages_of_item(l));
            // A class keeps its floor, granted even beyond `-m`.
            let largest = |e: &Engine, keep: &[PageId]| {
                (0..e.slabs.classes.len())
                    .filter(|&c| e.slabs.classes[c].pages.len() > e.floor_pages(c))
                    .filter_map(|c| e.pick_page(c, keep).map(|p| (c, p)))
                    .max_by_key(|&(c, _)| e.slabs.classes[c].pages.len())
            };
            let mut pick = largest(self, &keep);
            // Over by less than a page: a page drains a slice at a time
            // (with each store, and the maintainer's steps) rather than
            // being emptied here at once, thousands of items in 4-11 ms
            // under the engine lock, when the index or the Z-zone's
            // metadata had grown by a few bytes (issue 34). Meanwhile
            // memory is over `-m` by less than that page.
            if used < self.memory_limit + self.allowance() + self.slabs.page_size {
                let draining =
                    self.drain.is_some() || pick.is_some_and(|(c, _)| self.start_budget_drain(c));
                if draining {
                    return;
                }
            }
            if pick.is_none() {
                if self.zone_yield_page() {
                    continue;
                }
                pick = largest(self, &[]);
            }
            let Some((donor, page)) = pick else { return };
            if keep.contains(&page) {
                // The item just stored goes with its page.
                protect = None;
            }
            // Items that find no other chunk are evictions for lack of
            // memory.
            let moved_before = self.counters.reassign_evictions;
            let paused = self.pause_demotions(true);
            self.empty_page(page, rescue);
            self.pause_demotions(paused);
            self.count_as_evictions(moved_before, donor);
            self.slabs.unassign(page);
            self.slabs.release_page(page);
            self.slabs.classes[donor].stats.pages_out += 1;
        }
    }
}
