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
//! again), the class and engine counters. The rebalancer starts from
//! nothing, as at any start: its profile of SETs and GETs is not fed the
//! loaded items (in page order they are no reference stream; feeding them
//! cost a cache miss each, a fifth of the load). A
//! chained item (a head and its segments, all in the last class) is freed
//! here and stored again from its own record (`warm.rs`): its segments name
//! their chunks by location, which a page loaded elsewhere would not keep.

use std::io::{self, Read};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};

use super::Engine;
use crate::api::{Adopted, ItemRef, PageLayout, PageSource, SavedClock, SavedPage};
use crate::arena::Arena;
use crate::chain;
use crate::clock::RelTime;
use crate::hash::hash;
use crate::index::Index;
use crate::item;
use crate::slab::{PageId, NONE};
use crate::stripe::Stripes;
use crate::zzone::Refill;

/// Items sent to the index thread at a time.
const INDEX_BATCH: usize = 16 << 10;
/// How far ahead in a batch the index thread prefetches buckets.
const PREFETCH_AHEAD: usize = 24;
/// Index bytes an item is assumed to take when deciding whether saved pages
/// fit a memory limit (measured: 9.05-9.76, `index.rs`).
const INDEX_BYTES_PER_ITEM: usize = 12;

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
        let need = pages
            .saturating_mul(self.slabs.page_size)
            .saturating_add(items.saturating_mul(INDEX_BYTES_PER_ITEM));
        let room = saved_limit <= self.memory_limit || need <= self.memory_limit;
        *layout == self.page_layout()
            && self.zone.is_none()
            && self.counters.curr_items == 0
            && self.class_pages() == 0
            && room
    }

    /// Bring back saved `pages` (as `warm::save` wrote them, from a clock
    /// `saved`, `items` items in all): each page's bytes from its source
    /// into a new page, checked against its CRC-32, then its items, their
    /// times moved to this clock. A page that fails its check, or of a
    /// class or cursor this engine has not, loads nothing (counted in
    /// `bad_pages`). An error of a source stops the load there, what was
    /// loaded kept, and is returned.
    ///
    /// Two threads: this one maps or reads, checks and walks the pages and
    /// links their items in the policy; a helper builds the index from the
    /// (hash, location) pairs it is sent, a batch at a time, prefetching
    /// buckets ahead (the index's random writes are half the work).
    pub fn adopt_pages<'a>(
        &mut self,
        saved: SavedClock,
        items: usize,
        pages: impl Iterator<Item = SavedPage<'a>>,
    ) -> (Adopted, io::Result<()>) {
        self.hold_all();
        let n = self.stripes.len();
        for s in 0..n {
            // SAFETY: as in `Engine::stripe`: `&mut self` is the engine
            // lock's holder, stripe `s` is acquired (`hold_all`), and no
            // other reference into it is alive.
            let stripe = unsafe { self.stripes.stripe_mut(s) };
            // Sized for its share, so that no index grows while pages load
            // (a growth reads every indexed item's key again).
            if stripe.index.is_empty() {
                stripe.index = Index::with_capacity(items.div_ceil(n));
            }
        }
        let stripes = Arc::clone(&self.stripes);
        let arena = Arc::clone(&self.slabs.arena);
        let chunk_bits = self.slabs.chunk_bits;
        let mut out = Adopted::default();
        let mut result = Ok(());
        std::thread::scope(|scope| {
            let (full, to_index) = mpsc::sync_channel::<Vec<(u64, u64)>>(4);
            let (emptied, reuse) = mpsc::channel();
            scope.spawn(move || index_batches(&stripes, &arena, chunk_bits, to_index, emptied));
            let mut live = Vec::new();
            let mut batch = Vec::with_capacity(INDEX_BATCH);
            for page in pages {
                if let Err(e) = self.adopt_page(page, saved, &mut out, &mut live, &mut batch) {
                    result = Err(e);
                    break;
                }
                if batch.len() >= INDEX_BATCH {
                    let next = reuse
                        .try_recv()
                        .unwrap_or_else(|_| Vec::with_capacity(INDEX_BATCH));
                    if full.send(std::mem::replace(&mut batch, next)).is_err() {
                        break;
                    }
                }
            }
            let _ = full.send(batch);
        });
        self.index_bytes = self.index_memory();
        self.index_shape = (0..n).map(|s| self.shape_of(s)).collect();
        self.raise_cas(out.max_cas);
        // Pages the last run held beyond `-m` as classes' floors are
        // granted again; what the index and the policy grew to fits the
        // rest (else pages go).
        self.regrant_floors();
        self.enforce_budget(None);
        (out, result)
    }

    /// One page of [`Engine::adopt_pages`]; its items' (hash, location)
    /// pairs are appended to `batch` for the index.
    fn adopt_page(
        &mut self,
        page: SavedPage<'_>,
        saved: SavedClock,
        out: &mut Adopted,
        live: &mut Vec<Live>,
        batch: &mut Vec<(u64, u64)>,
    ) -> io::Result<()> {
        let Some(id) = self.slabs.new_page() else {
            return Err(io::Error::other("no address space for a saved page"));
        };
        let got = match page.source {
            PageSource::Read(mut file) => file.read_exact(self.slabs.classless_page_mut(id)),
            PageSource::Map(file, offset) => self.slabs.arena.map_file(id, file, offset),
        };
        let class = page.class;
        let geometry = self
            .slabs
            .classes
            .get(class)
            .map(|c| (c.chunk_size as usize, c.per_page))
            .filter(|&(_, per)| page.bump <= per);
        let cs = match (got, geometry) {
            (Ok(()), Some((cs, _)))
                if crc32fast::hash(self.slabs.classless_page_mut(id)) == page.crc =>
            {
                cs
            }
            (got, _) => {
                // Zeros again (and a mapped file's memory freed).
                self.slabs.arena.release(id);
                self.slabs.spare.push(id);
                out.bad_pages += u64::from(got.is_ok());
                return got;
            }
        };
        let (now, shift) = (self.now(), saved.started_unix - self.clock.started_unix());
        let bytes = self.slabs.classless_page_mut(id);
        let (mut free_head, mut free_count) = (NONE, 0);
        live.clear();
        // Backwards, so that the free list hands out chunks in order.
        for c in (0..page.bump).rev() {
            let at = c as usize * cs;
            let chunk = &mut bytes[at..at + cs];
            match revive(chunk, saved.now, shift, now) {
                Chunk::Live { kv, total } => {
                    let h = item::Header::read(chunk);
                    live.push(Live {
                        chunk: c,
                        total: total as u32,
                        hash: hash(item::key(chunk)),
                        cost: item::dequantize_cost(h.cost),
                    });
                    out.items += 1;
                    out.bytes += kv as u64;
                    out.max_cas = out.max_cas.max(h.cas);
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
        self.slabs
            .adopt(id, class, page.bump, free_head, free_count);
        // CLOCK keeps nothing outside the chunk but the class's cost sum.
        let clock = self.policy.kind() == crate::config::EvictionPolicy::Lru;
        if clock {
            let cost: u64 = live.iter().map(|it| u64::from(it.cost)).sum();
            self.policy.add_live_cost(class, cost);
        }
        for it in live.iter().rev() {
            let loc = self.slabs.loc(id, it.chunk);
            if !clock {
                self.policy.link(&mut self.slabs, class, loc);
            }
            let c = &mut self.slabs.classes[class];
            c.used += 1;
            c.requested += u64::from(it.total);
            self.counters.curr_items += 1;
            self.counters.total_items += 1;
            self.counters.bytes += u64::from(it.total);
            if self.flash.is_some() {
                // Older copies on flash are shadowed, as by a store.
                self.tiers_forget(it.hash, false);
            }
            batch.push((it.hash, loc));
        }
        Ok(())
    }
}

/// The Z-zone's side of a warm restart (`crate::zzone::Refill`).
impl Engine {
    /// Put back the Z-zone's saved items (`images`: whole items back to
    /// back, in key-hash order), in bulk, before anything else is stored
    /// (`Zone::refill`). The zone is granted a page of free memory each
    /// time it needs one to take them without sweeping, up to the split's
    /// most; without one it makes room as at any demotion. Items it does
    /// not take (too large for it) are appended to `rejected`, for the
    /// store path. Returns the items taken.
    pub fn refill_zone(&mut self, r: &mut Refill, images: &[u8], rejected: &mut Vec<u8>) -> u64 {
        let now = self.now();
        let Some(cell) = self.zone.as_ref().map(|z| z.zone.clone()) else {
            rejected.extend_from_slice(images);
            return 0;
        };
        let most = self.zone_pages_most();
        let before = r.taken();
        let mut zone = cell.lock();
        for image in crate::zzone::export::images(images) {
            if zone.refill_wants_page(image.len()) && zone.pages() < most {
                // The budget reads the zone's memory as of its last
                // release.
                drop(zone);
                if self.pages_fit(1, 0) {
                    let mut z = cell.lock();
                    let pages = z.pages();
                    z.set_target_pages(pages + 1);
                    z.grant_page();
                    zone = z;
                } else {
                    zone = cell.lock();
                }
            }
            if !zone.refill(r, image, now) {
                rejected.extend_from_slice(image);
            }
        }
        drop(zone);
        let taken = r.taken() - before;
        self.counters.total_items += taken;
        taken
    }

    /// The refill is over ([`Engine::refill_zone`]): the zone's last block
    /// is written, and the split gives it at least the pages it holds, so
    /// that it is not shrunk (swept) for them.
    pub fn refill_zone_done(&mut self, r: &mut Refill) {
        let now = self.now();
        let available = self.zone_available();
        let Some(z) = self.zone.as_mut() else {
            return;
        };
        let (pages, page) = {
            let mut zone = z.zone.lock();
            zone.refill_done(r, now);
            (zone.pages(), zone.config().page_size)
        };
        let held = (pages as f64 + 0.5) * page as f64 / available.max(1) as f64;
        z.set_share(z.share().max(held));
        z.retarget(available);
    }

    /// The Z-zone's share of memory is at least `share` (a warm restart's:
    /// the last run's), its pages to come from the N-zone as the split
    /// feeds it.
    pub fn raise_zone_share(&mut self, share: f64) {
        let available = self.zone_available();
        if let Some(z) = self.zone.as_mut() {
            z.set_share(z.share().max(share));
            z.retarget(available);
        }
    }
}

/// A live item of the page being adopted.
struct Live {
    chunk: u32,
    total: u32,
    hash: u64,
    /// Dequantised.
    cost: u32,
}

/// Index the (hash, location) pairs of each batch `adopt_pages` sends,
/// then send the emptied batch back.
fn index_batches(
    stripes: &Stripes,
    arena: &Arena,
    chunk_bits: u32,
    batches: mpsc::Receiver<Vec<(u64, u64)>>,
    emptied: mpsc::Sender<Vec<(u64, u64)>>,
) {
    // Only a growing index asks (`Index::insert`), and these are sized
    // not to grow: the key of an item already indexed.
    let hash_of = |loc: u64| hash(&key_at(arena, chunk_bits, loc));
    for mut batch in batches {
        for i in 0..batch.len() {
            if let Some(&(h, _)) = batch.get(i + PREFETCH_AHEAD) {
                // SAFETY: see below; a shared reference, dropped at once.
                unsafe { stripes.stripe_ref(stripes.of(h)) }
                    .index
                    .prefetch(h);
            }
            let (h, loc) = batch[i];
            // SAFETY: `adopt_pages` holds the engine lock and has acquired
            // every stripe for the whole time this thread runs (it joins
            // it before returning), and meanwhile only this thread touches
            // any index; this reference is the only one and is dropped
            // before the next is made.
            let stripe = unsafe { stripes.stripe_mut(stripes.of(h)) };
            stripe.index.insert(h, loc, &hash_of);
        }
        batch.clear();
        let _ = emptied.send(batch);
    }
}

/// The key of the adopted item at `loc`, copied out: its key bytes and the
/// header bytes that say where they are are never written once the page
/// is adopted (the adopting thread goes on writing other chunks' bytes).
fn key_at(arena: &Arena, chunk_bits: u32, loc: u64) -> Vec<u8> {
    let (page, chunk) = crate::slab::split_loc(loc, chunk_bits);
    let Some((_, cs)) = arena.geometry(page) else {
        return Vec::new();
    };
    let start = chunk as usize * cs as usize;
    let klen = usize::from(arena.atomic(page, start + 12).load(Ordering::Relaxed));
    let long = arena.load_u16(page, start + 14) == item::LONG_VALUE as u16;
    let width = item::code_width(arena.atomic(page, start + 7).load(Ordering::Relaxed));
    let at = start + item::HEADER_LEN + if long { 4 } else { 0 } + width;
    // SAFETY: the key bytes of an adopted item are written by nobody
    // while the load runs (above), and lie inside its chunk.
    unsafe { arena.bytes(page, at, klen) }.to_vec()
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
