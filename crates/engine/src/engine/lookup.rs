//! Finding items and reading them: `lookup`, `read`, multi-get batches
//! (`lookup_batch`), and what a hit does to the item (`access`).

use std::ops::ControlFlow;

use super::Engine;
use crate::api::{image_view, item_view, ItemId, ItemRef, Lookup, LOOKUP_BATCH};
use crate::chain::Value;
use crate::hash::hash;
use crate::item;

impl Engine {
    pub(super) fn find(&mut self, key: &[u8], h: u64) -> Option<u64> {
        let s = self.stripes.of(h);
        self.hold(s);
        let ix = &self.stripe_ref(s).index;
        ix.find(h, |loc| item::key(self.slabs.chunk(loc)) == key)
    }

    /// Find a live item, removing it if it expired.
    pub(super) fn find_live(&mut self, key: &[u8], h: u64) -> Option<u64> {
        self.check_flush();
        let loc = self.find(key, h)?;
        let exp = item::exptime(self.slabs.chunk(loc));
        if exp != 0 && exp <= self.now() {
            self.counters.get_expired += 1;
            self.remove(loc);
            return None;
        }
        Some(loc)
    }

    /// Find a live item (expired ones are removed on the way).
    /// An item found in the Z-zone is moved to the N-zone first, so the
    /// item's id can be used to change it.
    pub fn lookup(&mut self, key: &[u8], how: Lookup) -> Option<ItemRef<'_>> {
        self.lookup_hashed(key, hash(key), how, true)
    }

    /// [`Engine::lookup`] for a read that only copies the item out: one in
    /// the Z-zone may be served from there, its id then naming no item.
    pub fn read(&mut self, key: &[u8], how: Lookup) -> Option<ItemRef<'_>> {
        self.lookup_hashed(key, hash(key), how, false)
    }

    /// Look up several keys, as a multi-get does, with their memory loads
    /// overlapped (MICA's batching, on the engine's own structures): first
    /// every key's index bucket is prefetched, then the first item its tag
    /// points at, then the keys are looked up in order, each exactly as by
    /// [`Engine::lookup`], and handed to `f` with their position. `f` may
    /// stop the batch before the next key (a full output buffer): keys not
    /// looked up are not counted or bumped. Batches of up to
    /// [`LOOKUP_BATCH`] keys are prefetched at a time; a batch of one key is
    /// not (nothing to overlap).
    pub fn lookup_batch<'k>(
        &mut self,
        keys: &[&'k [u8]],
        how: Lookup,
        mut f: impl FnMut(usize, &'k [u8], Option<ItemRef<'_>>) -> ControlFlow<()>,
    ) {
        let mut hashes = [0u64; LOOKUP_BATCH];
        for (b, batch) in keys.chunks(LOOKUP_BATCH).enumerate() {
            for (h, key) in hashes.iter_mut().zip(batch) {
                *h = hash(key);
            }
            // One key (a plain `get`): nothing to overlap its loads with.
            if batch.len() > 1 {
                for &h in &hashes[..batch.len()] {
                    self.stripe(h).index.prefetch(h);
                }
                for &h in &hashes[..batch.len()] {
                    if let Some(loc) = self.stripe(h).index.find(h, |_| true) {
                        let (page, chunk) = self.slabs.split(loc);
                        self.slabs.arena.prefetch_chunk(page, chunk);
                    }
                }
            }
            for (i, (&key, &h)) in batch.iter().zip(&hashes).enumerate() {
                let item = self.lookup_hashed(key, h, how, false);
                if f(b * LOOKUP_BATCH + i, key, item).is_break() {
                    return;
                }
            }
        }
    }

    pub(super) fn lookup_hashed(
        &mut self,
        key: &[u8],
        h: u64,
        how: Lookup,
        promote: bool,
    ) -> Option<ItemRef<'_>> {
        let mut found = self.find_live(key, h);
        if found.is_none() && self.zone.is_some() {
            if promote {
                found = self.find_any(key, h);
            } else {
                match self.read_zone(key, h, how.bump && how.fetch) {
                    Some(Some(loc)) => found = Some(loc),
                    Some(None) => return Some(self.view_image()),
                    None => {}
                }
            }
        }
        let Some(loc) = found else {
            if how.fetch {
                if let Some(l) = &mut self.learner {
                    l.miss(h, self.clock.now_us());
                }
                self.rebal.miss(h);
            }
            return None;
        };
        self.access(loc, how);
        if how.fetch && self.rebal.wants_hits() {
            let class = self.slabs.class_of(loc);
            let cost = item::Header::read(self.slabs.chunk(loc)).cost;
            self.rebal.hit(h, class, cost);
        }
        Some(self.view(loc))
    }

    /// `get`: lookup that counts as an access.
    pub fn get(&mut self, key: &[u8]) -> Option<ItemRef<'_>> {
        self.lookup(key, Lookup::GET)
    }

    pub(super) fn access(&mut self, loc: u64, how: Lookup) {
        let now = self.now();
        let class = self.slabs.class_of(loc);
        let chunk = self.slabs.chunk_mut(loc);
        let mut bits = item::bits(chunk);
        if how.bump {
            // memcached's do_item_bump: the first fetch only marks the item
            // fetched, later ones refresh its access time (meta `l`); other
            // bumps (a failed add, an in-place incr) always refresh it.
            if !how.fetch || bits & item::FETCHED != 0 {
                item::set_atime(chunk, item::atime_code(now));
            }
            bits |= item::REF;
        }
        if how.fetch {
            bits |= item::FETCHED;
        }
        item::set_bits(chunk, bits);
        if how.bump {
            if bits & item::GUESSED != 0 {
                if let Some(l) = &self.learner {
                    // A guessed cost follows the mean learned so far.
                    let q = l.default_code();
                    self.policy.recost(&mut self.slabs, class, loc, q);
                }
            }
            self.policy.touch(&mut self.slabs, class, loc);
        }
        if how.fetch {
            self.counters.get_hits[class] += 1;
        }
    }

    pub(super) fn view(&self, loc: u64) -> ItemRef<'_> {
        let value = Value::of(&self.slabs, loc);
        let (cas_enabled, now) = (self.config.cas_enabled, self.now());
        item_view(self.slabs.chunk(loc), ItemId(loc), value, cas_enabled, now)
    }

    /// A view of the item a Z-zone read left in the zone (its id names no
    /// N-zone item).
    pub(super) fn view_image(&self) -> ItemRef<'_> {
        image_view(self.zone_found(), self.config.cas_enabled, self.now())
    }

    /// View an item found earlier (valid until the next mutation).
    pub fn item(&self, id: ItemId) -> ItemRef<'_> {
        self.view(id.0)
    }
}
