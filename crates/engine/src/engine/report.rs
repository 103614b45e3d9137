//! What `stats` and the dumps report: the engine's counters, per-class
//! figures, `stats cachedump`, `lru_crawler metadump`, `stats sizes`, and
//! the page export of warm restart.

use std::sync::atomic::Ordering;

use super::Engine;
use crate::api::{ItemRef, MetaItem, Tier};
use crate::clock::{Expiry, RelTime};
use crate::cost::Learner;
use crate::item;
use crate::slab::PageId;
use crate::slab::SlabClassStats;
use crate::stats::EngineStats;
use crate::stripe::Counts;

impl Engine {
    pub fn stats(&self) -> EngineStats {
        let (mut buckets, mut expanding) = (0usize, false);
        for &(n, growing) in &self.index_shape {
            buckets += 1 << n.ilog2();
            expanding |= growing;
        }
        let c = &self.counters;
        let zs = self.zone_stats();
        let fs = self.flash.as_ref().map(|f| f.stats());
        // SETs made without the engine lock that it has not counted yet.
        let mut p = Counts::default();
        for n in self.stripes.pending_sum(self.slabs.classes.len()) {
            p.add(&n);
        }
        EngineStats {
            curr_items: c.curr_items
                + p.items
                + zs.map_or(0, |z| z.zone.items)
                + fs.map_or(0, |f| f.items + f.staged),
            total_items: c.total_items + p.sets,
            bytes: c.bytes.wrapping_add(p.requested),
            evictions: c.evictions
                + zs.map_or(0, |z| z.zone.evictions)
                + fs.map_or(0, |f| f.evictions),
            reclaimed: c.reclaimed,
            expired_unfetched: c.expired_unfetched,
            evicted_unfetched: c.evicted_unfetched,
            get_expired: c.get_expired,
            get_flushed: 0,
            crawler_reclaimed: c.crawler_reclaimed,
            limit_maxbytes: self.memory_limit as u64,
            total_malloced: (self.slabs.pages_allocated() * self.slabs.page_size) as u64,
            hash_bytes: (self.index_bytes + self.index_grown.load(Ordering::Relaxed)) as u64,
            hash_power_level: buckets.max(1).ilog2(),
            hash_is_expanding: expanding,
            slabs_moved: c.slabs_moved,
            slab_reassign_rescues: c.rescues,
            slab_reassign_evictions: c.reassign_evictions,
            slab_reassign_running: self.drain.is_some(),
            free_pages: self.slabs.spare.len() as u64,
            outofmemory: c.outofmemory,
            evicted_cost: self
                .slabs
                .classes
                .iter()
                .map(|c| c.stats.evicted_cost)
                .sum(),
            learned_costs: self.learner.as_ref().map_or(0, |l| l.learned),
            learn_table_bytes: self.learner.as_ref().map_or(0, Learner::memory_bytes) as u64,
            eviction_bytes: self.policy.memory_bytes() as u64,
            rebalance: self.rebal.policy().name(),
            capacity_misses: self.rebal.totals().capacity_misses,
            cost_capacity_misses: self.rebal.totals().cost_capacity_misses,
            rebalance_decisions: self.rebal.decisions,
            rebalance_bytes: self.rebal.memory_bytes() as u64,
            ghost_capacity: self.rebal.ghost_capacity() as u64,
            repartition: self.repartition.as_ref().map(|r| r.stats),
            zzone: zs,
            flash: fs,
        }
    }

    /// One entry per slab class that has ever held a page.
    pub fn slab_stats(&self) -> Vec<SlabClassStats> {
        let now = self.now();
        let pending = self.stripes.pending_sum(self.slabs.classes.len());
        (0..self.slabs.classes.len())
            .filter(|&c| {
                let cl = &self.slabs.classes[c];
                !cl.pages.is_empty() || cl.stats.pages_out > 0 || cl.stats.evicted > 0
            })
            .map(|c| {
                let mut s = self.slabs.class_stats(c);
                let p = &pending[c];
                s.cmd_set += p.sets;
                s.mem_requested = s.mem_requested.wrapping_add(p.requested);
                s.number += p.items;
                s.used_chunks += p.items;
                // Reserved chunks are free chunks a thread holds: neither
                // counted used nor on a free list (`magazine`).
                let reserved = self.magazines.count(self.stripes.slots_taken(), c);
                s.free_chunks += reserved;
                s.get_hits = self.counters.get_hits[c] + self.stripes.reader_hits(c);
                s.age = self.hand_age(c, now) as u64;
                s.avg_cost = match s.number {
                    0 => 0,
                    n => (self.policy.live_cost(c) + p.cost + n / 2) / n,
                };
                let rc = self.rebal.counts(c);
                s.capacity_misses = rc.capacity_misses;
                s.cost_capacity_misses = rc.cost_capacity_misses;
                s
            })
            .collect()
    }

    /// Age of the item under the class's CLOCK hand (memcached's items:age).
    pub(super) fn hand_age(&self, class: usize, now: RelTime) -> u32 {
        if let Some(loc) = self.policy.peek(class) {
            return item::atime_age(self.slabs.atime(loc), now);
        }
        let c = &self.slabs.classes[class];
        if c.pages.is_empty() {
            return 0;
        }
        let page = c.pages[c.hand_page.min(c.pages.len() - 1)];
        let loc = self.slabs.loc(page, c.hand_chunk);
        if !self.slabs.is_live(loc) {
            return 0;
        }
        item::atime_age(self.slabs.atime(loc), now)
    }

    /// `stats cachedump <class> <limit>`: up to `limit` (0 = all) live items
    /// of a class as (key, value length, expiry), at most `max_bytes` of keys.
    pub fn cachedump(
        &mut self,
        class_id: u32,
        limit: usize,
        max_bytes: usize,
    ) -> Vec<(Vec<u8>, usize, Expiry)> {
        let mut out = Vec::new();
        self.hold_all();
        let Some(class) = (class_id as usize)
            .checked_sub(1)
            .and_then(|c| self.slabs.classes.get(c))
        else {
            return out;
        };
        let now = self.now();
        let mut bytes = 0;
        for &page in &class.pages {
            for loc in self.slabs.live_in_page(page) {
                let chunk = self.slabs.chunk(loc);
                let (h, key) = (item::Header::read(chunk), item::key(chunk));
                let exp = h.exptime;
                if exp != 0 && exp <= now {
                    continue;
                }
                if (limit != 0 && out.len() >= limit) || bytes + key.len() > max_bytes {
                    return out;
                }
                bytes += key.len() + 32;
                let expiry = if exp == 0 {
                    Expiry::Never
                } else {
                    Expiry::At(exp)
                };
                out.push((key.to_vec(), h.value_len as usize, expiry));
            }
        }
        out
    }

    /// `lru_crawler metadump` of the memory tiers, a hash range at a time:
    /// the live items with key hashes from `from` on that the N-zone or
    /// the Z-zone holds and whose class `wanted` accepts (ids from 1),
    /// appended to `out`. The range ends where `zone_budget` bytes of the
    /// Z-zone's items are copied, or where the N-zone's part reaches
    /// about `STEP_ITEMS`; returns the hash to go on from, None once the
    /// last hash is done.
    ///
    /// Both zones are read in one hold of the engine's lock (and every
    /// stripe), which every move between them takes: an item is in one
    /// zone when its range is walked, and its hash never changes, so a
    /// dump lists each item once however busy the tiers are (issue 34).
    /// A promotion's copy left in the zone is skipped, as memory holds
    /// the key.
    pub fn metadump_range(
        &mut self,
        from: u64,
        zone_budget: usize,
        wanted: impl Fn(u32) -> bool,
        out: &mut Vec<MetaItem>,
    ) -> Option<u64> {
        /// N-zone items listed per hold, about: a few tens of µs.
        const STEP_ITEMS: u64 = 256;
        self.hold_all();
        let (now, cas) = (self.now(), self.config.cas_enabled);
        let stripes = self.stripes.len();
        let items: u64 = (0..stripes)
            .map(|s| self.stripe_ref(s).index.len() as u64)
            .sum();
        let span = u64::MAX / (items / STEP_ITEMS).max(1);
        let mut to = from.saturating_add(span);
        let mut images = Vec::new();
        if let Some(z) = self.zone.as_ref() {
            if let Some(next) = z
                .zone
                .lock()
                .export(from, to, now, zone_budget, &mut images)
            {
                to = next.saturating_sub(1).max(from);
            }
        }
        let mut locs = Vec::new();
        for s in 0..stripes {
            self.stripe_ref(s)
                .index
                .for_range(from, to, |l| locs.push(l));
        }
        for loc in locs {
            let chunk = self.slabs.chunk(loc);
            let h = item::Header::read(chunk);
            let class = self.slabs.class_of(loc) as u32 + 1;
            if !(from..=to).contains(&crate::hash::hash(item::key(chunk)))
                || (h.exptime != 0 && h.exptime <= now)
                || !wanted(class)
            {
                continue;
            }
            let accessed = now.saturating_sub(item::atime_age(self.slabs.atime(loc), now));
            out.push(meta_item(chunk, &h, accessed, class, cas, Tier::Memory));
        }
        self.metadump_images(&images, Tier::Zzone, wanted, out);
        to.checked_add(1)
    }

    /// `lru_crawler metadump` of items held outside the slabs (the
    /// Z-zone's or the flash tier's, `tier`): the live ones of the item
    /// images `images` (back to back, as [`crate::zzone::Zone::export`]
    /// copies them) whose class `wanted` accepts, appended to `out`. Their
    /// class is the N-zone class each image would take (the largest class
    /// for an image larger than every chunk). An image of a key the slabs
    /// hold is left out: memory's copy is the newer, and is listed from
    /// the slabs.
    pub fn metadump_images(
        &mut self,
        images: &[u8],
        tier: Tier,
        wanted: impl Fn(u32) -> bool,
        out: &mut Vec<MetaItem>,
    ) {
        let now = self.now();
        let cas = self.config.cas_enabled;
        let last = self.slabs.classes.len().max(1) - 1;
        for image in crate::zzone::export::images(images) {
            let h = item::Header::read(image);
            if h.exptime != 0 && h.exptime <= now {
                continue;
            }
            let key = item::key(image);
            if self.find(key, crate::hash::hash(key)).is_some() {
                continue;
            }
            let class = self.slabs.class_for(image.len()).unwrap_or(last) as u32 + 1;
            if !wanted(class) {
                continue;
            }
            let accessed = now.saturating_sub(item::atime_age(h.atime, now));
            out.push(meta_item(image, &h, accessed, class, cas, tier));
        }
    }

    /// Warm restart (`warm::save`): call `f` with each live item of the
    /// first page at or after `from` whose last access is at least
    /// `min_age` and less than `max_age` seconds ago; returns the page to
    /// go on from, or None once every page has been visited. One page per
    /// call, so the engine lock is held for a page at a time.
    pub fn export_page(
        &mut self,
        from: usize,
        min_age: u32,
        max_age: u32,
        mut f: impl FnMut(&ItemRef<'_>),
    ) -> Option<usize> {
        self.hold_all();
        let now = self.now();
        for p in from..self.slabs.pages.len() {
            match &self.slabs.pages[p] {
                Some(pg) if pg.class != 0 => {}
                _ => continue,
            }
            for loc in self.slabs.live_in_page(p as PageId) {
                let h = item::Header::read(self.slabs.chunk(loc));
                let age = item::atime_age(self.slabs.atime(loc), now);
                if (h.exptime != 0 && h.exptime <= now) || age < min_age || age >= max_age {
                    continue;
                }
                f(&self.view(loc));
            }
            return Some(p + 1);
        }
        None
    }

    /// `stats sizes`: (size rounded up to 32 bytes, item count), ascending.
    pub fn size_histogram(&mut self) -> Vec<(u32, u64)> {
        self.hold_all();
        let mut hist = std::collections::BTreeMap::new();
        for (p, page) in self.slabs.pages.iter().enumerate() {
            let Some(page) = page else { continue };
            if page.class == 0 {
                continue;
            }
            for loc in self.slabs.live_in_page(p as PageId) {
                let size = item::Header::read(self.slabs.chunk(loc)).total_len() as u32;
                *hist.entry(size.div_ceil(32) * 32).or_insert(0u64) += 1;
            }
        }
        hist.into_iter().collect()
    }

    /// `stats reset`: clear the resettable counters.
    pub fn reset_stats(&mut self) {
        if let Some(z) = self.zone.as_mut() {
            z.reset_stats();
        }
        // First count what in-place SETs left in the stripes.
        self.hold_all();
        let c = &mut self.counters;
        c.total_items = 0;
        c.evictions = 0;
        c.reclaimed = 0;
        c.expired_unfetched = 0;
        c.evicted_unfetched = 0;
        c.get_expired = 0;
        c.crawler_reclaimed = 0;
        c.outofmemory = 0;
        if let Some(r) = &mut self.repartition {
            r.stats = Default::default();
        }
        c.get_hits.fill(0);
        self.stripes.reset_reader_hits();
        for class in &mut self.slabs.classes {
            let s = &mut class.stats;
            *s = SlabClassStats {
                id: s.id,
                chunk_size: s.chunk_size,
                chunks_per_page: s.chunks_per_page,
                total_pages: s.total_pages,
                ..Default::default()
            };
        }
        self.rebal.reset_stats();
    }
}

/// A metadump line's fields for the item whose image (header, flags,
/// key, value) starts `image`, its header `h` read from it.
fn meta_item(
    image: &[u8],
    h: &item::Header,
    accessed: u32,
    class: u32,
    cas: bool,
    tier: Tier,
) -> MetaItem {
    MetaItem {
        key: item::key(image).to_vec(),
        exptime: h.exptime,
        accessed,
        cas: if cas { h.cas } else { 0 },
        fetched: h.bits & item::FETCHED != 0,
        class,
        size: item::memcached_size(
            h.key_len as usize,
            h.value_len as usize,
            item::flags(image),
            cas,
        ),
        stored: h.total_len(),
        tier,
    }
}
