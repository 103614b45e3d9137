//! Warm restart by whole pages: the engine's side of `crate::warm`.
//!
//! At a clean stop `warm::save` writes every slab page as its bytes are
//! ([`Engine::save_pages`]). At the next start, if the engine cuts its
//! pages the same way ([`PageLayout`]), `warm::load` reads each saved page
//! straight into a new page of the arena and [`Engine::adopt_page`] brings
//! its items back where they lie: one pass over the page's chunks moves
//! each item's expiry and last access to this process's clock (dropping the
//! items that expired while the server was down), links the free chunks,
//! hands the page to its class, and then indexes the page's items with
//! their index buckets prefetched a batch at a time, as `lookup_batch`
//! does. No item is copied or allocated again: memcached's restart, which
//! re-links items in the memory it maps from its file, without the mapping.
//!
//! What the page does not carry is rebuilt from the items: the index, the
//! eviction policy's state beyond the item's own bits (CLOCK's REF bit is
//! in the header and comes back as it was; GD-Wheel's queues are linked
//! again), the class and engine counters, the rebalancer's profile. A
//! chained item (a head and its segments, all in the last class) is freed
//! here and stored again from its own record (`warm.rs`): its segments name
//! their chunks by location, which a page loaded elsewhere would not keep.

use std::io;

use super::{hash, Engine, ItemRef};
use crate::chain;
use crate::clock::RelTime;
use crate::index::Index;
use crate::item;
use crate::slab::{PageId, NONE};

/// Items indexed per batch, their buckets prefetched first.
const BATCH: usize = 16;
/// Index bytes an item is assumed to take when deciding whether saved pages
/// fit a memory limit (measured: 9.05-9.76, `index.rs`).
const INDEX_BYTES_PER_ITEM: usize = 12;

/// How an engine cuts its pages into chunks: saved pages load as they are
/// only into an engine with the same layout (the same `-n`, `-f`, `-I` and
/// `slab_chunk_max`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageLayout {
    pub page_size: u32,
    pub chunk_bits: u32,
    pub item_size_max: u64,
    /// Chunk size of each class.
    pub sizes: Vec<u32>,
}

/// The clock the saved items' times are relative to.
#[derive(Clone, Copy, Debug)]
pub struct SavedClock {
    /// Unix time of the saving process's relative time 0.
    pub started_unix: i64,
    /// Its relative time when it saved.
    pub now: RelTime,
}

/// What [`Engine::adopt_page`] brought back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Adopted {
    pub items: u64,
    /// Key and value bytes of those items.
    pub bytes: u64,
    /// Items whose TTL ran out while the server was down.
    pub expired: u64,
    pub max_cas: u64,
}

/// What a chunk of a saved page holds, once its times are moved.
enum Chunk {
    /// A live item of this many bytes: key and value bytes, and all.
    Live {
        kv: usize,
        total: usize,
    },
    Expired,
    /// Free, a segment or a head of a chained item, or not an item.
    Free,
}

impl Engine {
    /// This engine's [`PageLayout`].
    pub fn page_layout(&self) -> PageLayout {
        PageLayout {
            page_size: self.slabs.page_size as u32,
            chunk_bits: self.slabs.chunk_bits,
            item_size_max: self.config.item_size_max as u64,
            sizes: self.slabs.classes.iter().map(|c| c.chunk_size).collect(),
        }
    }

    /// Pages in a class (the pages [`Engine::save_pages`] writes).
    pub fn class_pages(&self) -> usize {
        self.slabs.classes.iter().map(|c| c.pages.len()).sum()
    }

    /// Call `f` with the class, the bump cursor and the bytes of every
    /// page in a class, in page order, holding every stripe. Returns the
    /// number of pages.
    pub fn save_pages(
        &mut self,
        mut f: impl FnMut(usize, u32, &[u8]) -> io::Result<()>,
    ) -> io::Result<u64> {
        self.hold_all();
        let mut n = 0;
        for p in 0..self.slabs.pages.len() {
            let (class, bump) = match &self.slabs.pages[p] {
                Some(pg) if pg.class != 0 => (pg.class as usize - 1, pg.bump),
                _ => continue,
            };
            f(class, bump, self.slabs.page_bytes(p as PageId))?;
            n += 1;
        }
        Ok(n)
    }

    /// Call `f` with every live chained item (whose pages `adopt_page`
    /// frees: they are saved one by one).
    pub fn export_chained(&mut self, mut f: impl FnMut(&ItemRef<'_>)) {
        self.hold_all();
        let now = self.now();
        let Some(last) = self.slabs.classes.len().checked_sub(1) else {
            return;
        };
        for i in 0..self.slabs.classes[last].pages.len() {
            let p = self.slabs.classes[last].pages[i];
            for loc in self.slabs.live_in_page(p) {
                let chunk = self.slabs.chunk(loc);
                let exp = item::exptime(chunk);
                if chain::is_head(chunk) && (exp == 0 || exp > now) {
                    f(&self.view(loc));
                }
            }
        }
    }

    /// Whether `pages` saved pages of `layout` holding `items` items,
    /// saved under a memory limit of `saved_limit`, can be adopted whole:
    /// the same layout, no Z-zone (it shares `-m` with the pages), nothing
    /// stored yet, and room for them and their index (else `warm::load`
    /// stores the items one by one, hottest last).
    pub fn can_adopt(
        &self,
        layout: &PageLayout,
        pages: usize,
        items: usize,
        saved_limit: usize,
    ) -> bool {
        let room = saved_limit <= self.memory_limit
            || pages * self.slabs.page_size + items * INDEX_BYTES_PER_ITEM <= self.memory_limit;
        *layout == self.page_layout()
            && self.zone.is_none()
            && self.counters.curr_items == 0
            && self.class_pages() == 0
            && room
    }

    /// Before the first [`Engine::adopt_page`]: size each stripe's index
    /// for its share of `items` (empty ones only), so that no index grows,
    /// which would read every indexed item's key again, while pages load.
    pub fn adopt_begin(&mut self, items: usize) {
        let n = self.stripes.len();
        for s in 0..n {
            self.hold(s);
            // SAFETY: as in `Engine::stripe`: `&mut self` is the engine
            // lock's holder, stripe `s` is acquired, and no other
            // reference into it is alive.
            let stripe = unsafe { self.stripes.stripe_mut(s) };
            if stripe.index.is_empty() {
                stripe.index = Index::with_capacity(items.div_ceil(n));
            }
        }
        self.index_bytes = self.index_memory();
        self.index_shape = (0..n).map(|s| self.shape_of(s)).collect();
    }

    /// Read a saved page of `class` whose first `bump` chunks were handed
    /// out into a new page with `fill` (false: the bytes are not the saved
    /// ones, e.g. a CRC mismatch; the page then loads nothing), and bring
    /// its items back, their times moved from `saved`'s clock to this one.
    /// `fill`'s error is returned as is, the page unused. A class or
    /// cursor this engine has not is a page that loads nothing.
    pub fn adopt_page(
        &mut self,
        class: usize,
        bump: u32,
        saved: SavedClock,
        out: &mut Adopted,
        live: &mut Vec<(u32, u32)>,
        fill: impl FnOnce(&mut [u8]) -> io::Result<bool>,
    ) -> io::Result<()> {
        let Some(id) = self.slabs.new_page() else {
            return Err(io::Error::other("no address space for a saved page"));
        };
        let geometry = self
            .slabs
            .classes
            .get(class)
            .map(|c| (c.chunk_size, c.per_page));
        let filled = fill(self.slabs.classless_page_mut(id));
        let Some((cs, _)) = geometry.filter(|&(_, per)| bump <= per) else {
            self.slabs.spare.push(id);
            return filled.map(|_| ());
        };
        if !filled? {
            self.slabs.spare.push(id);
            return Ok(());
        }
        let (now, shift) = (self.now(), saved.started_unix - self.clock.started_unix());
        let page = self.slabs.classless_page_mut(id);
        let (mut free_head, mut free_count) = (NONE, 0);
        live.clear();
        // Backwards, so that the free list hands out chunks in order.
        for c in (0..bump).rev() {
            let at = c as usize * cs as usize;
            let chunk = &mut page[at..at + cs as usize];
            match revive(chunk, saved.now, shift, now) {
                Chunk::Live { kv, total } => {
                    live.push((c, total as u32));
                    out.items += 1;
                    out.bytes += kv as u64;
                    continue;
                }
                Chunk::Expired => out.expired += 1,
                Chunk::Free => {}
            }
            item::set_bits(chunk, 0);
            chunk[8..12].copy_from_slice(&free_head.to_le_bytes());
            free_head = c;
            free_count += 1;
        }
        self.slabs.adopt(id, class, bump, free_head, free_count);
        self.hold_all();
        let mut batch = [(0u64, 0u64); BATCH];
        for group in live.chunks(BATCH) {
            for (slot, &(c, _)) in batch.iter_mut().zip(group) {
                let loc = self.slabs.loc(id, c);
                let h = hash(item::key(self.slabs.chunk(loc)));
                self.stripe_ref(self.stripes.of(h)).index.prefetch(h);
                *slot = (h, loc);
            }
            for (&(h, loc), &(_, total)) in batch.iter().zip(group) {
                self.index_mut(h, |ix, slabs| {
                    ix.insert(h, loc, &|l| hash(item::key(slabs.chunk(l))))
                });
                let chunk = self.slabs.chunk(loc);
                let (cas, cost) = (item::Header::read(chunk).cas, item::cost_code(chunk));
                out.max_cas = out.max_cas.max(cas);
                self.policy.link(&mut self.slabs, class, loc);
                self.rebal.stored(h, class, cost, true);
                let c = &mut self.slabs.classes[class];
                c.used += 1;
                c.requested += u64::from(total);
                self.counters.curr_items += 1;
                self.counters.total_items += 1;
                self.counters.bytes += u64::from(total);
                if self.flash.is_some() {
                    // Older copies on flash are shadowed, as by a store.
                    self.tiers_forget(h, false);
                }
            }
        }
        Ok(())
    }

    /// After the last [`Engine::adopt_page`]: CAS uniques from now on are
    /// above `max_cas`, and what the index and policy grew to fits `-m`.
    pub fn adopt_end(&mut self, max_cas: u64) {
        self.raise_cas(max_cas);
        self.fold_index_grown();
        self.enforce_budget(None);
    }
}

/// Classify the chunk of a saved page and, for a live item, move its
/// expiry and last access from the saving clock (`saved_now`, whose time
/// 0 is `shift` seconds after this clock's) to this one (`now`). The
/// chunk's bytes are only trusted once its header is checked against the
/// chunk: a chunk that is not one whole item is free.
fn revive(chunk: &mut [u8], saved_now: RelTime, shift: i64, now: RelTime) -> Chunk {
    if item::bits(chunk) & item::LIVE == 0 {
        return Chunk::Free;
    }
    // A chained item's head does not fit its chunk (`chain::is_head`).
    let total = match item::image_len(chunk) {
        Some(len) if len <= chunk.len() => len,
        _ => return Chunk::Free,
    };
    let exp = item::exptime(chunk);
    if exp != 0 {
        let t = i64::from(exp) + shift;
        if t <= i64::from(now) {
            return Chunk::Expired;
        }
        item::set_exptime(chunk, t.min(i64::from(u32::MAX)) as u32);
    }
    // Last access: the same moment, read on this clock (time spent down
    // counts), at most `ATIME_SATURATE` ago as everywhere.
    let code = u16::from_le_bytes([chunk[5], chunk[13]]);
    let age = item::atime_age(code, saved_now).min(item::ATIME_SATURATE);
    let at = i64::from(saved_now) - i64::from(age) + shift;
    let age = (i64::from(now) - at).clamp(0, i64::from(item::ATIME_SATURATE)) as u32;
    item::set_atime(chunk, item::atime_code(now.wrapping_sub(age)));
    let kv = usize::from(chunk[12]) + item::Header::read(chunk).value_len as usize;
    Chunk::Live { kv, total }
}
