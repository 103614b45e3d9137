//! Finding items and reading them: `lookup`, multi-get batches
//! (`lookup_batch`), the N-zone's part of a GET the cache does under the
//! lock (`read_n_zone`, `missed`), and what a hit does to the item
//! (`access`).

use std::ops::ControlFlow;

use super::Engine;
use crate::api::{item_view, ItemId, ItemRef, Lookup};
use crate::batch::batches;
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
        self.lookup_hashed(key, hash(key), how)
    }

    /// Look up several keys, as a multi-get does, with their memory loads
    /// overlapped (MICA's batching, on the engine's own structures): first
    /// every key's index bucket is prefetched, then the first item its tag
    /// points at, then the keys are looked up in order, each exactly as by
    /// [`Engine::lookup`], and handed to `f` with their position and hash.
    /// `f` may stop the batch before the next key (a full output buffer): keys not
    /// looked up are not counted or bumped. Batches of up to
    /// [`LOOKUP_BATCH`](crate::api::LOOKUP_BATCH) keys are prefetched at a time; a batch of one key is
    /// not (nothing to overlap).
    pub fn lookup_batch<'k>(
        &mut self,
        keys: &[&'k [u8]],
        how: Lookup,
        mut f: impl FnMut(usize, &'k [u8], u64, Option<ItemRef<'_>>) -> ControlFlow<()>,
    ) {
        let _ = batches(keys, |at, batch, hashes| {
            // One key (a plain `get`): nothing to overlap its loads with.
            if batch.len() > 1 {
                for &h in hashes {
                    self.stripe(h).index.prefetch(h);
                }
                for &h in hashes {
                    if let Some(loc) = self.stripe(h).index.find(h, |_| true) {
                        let (page, chunk) = self.slabs.split(loc);
                        self.slabs.arena.prefetch_chunk(page, chunk);
                    }
                }
            }
            for (i, (&key, &h)) in batch.iter().zip(hashes).enumerate() {
                let item = self.lookup_hashed(key, h, how);
                f(at + i, key, h, item)?;
            }
            ControlFlow::Continue(())
        });
    }

    fn lookup_hashed(&mut self, key: &[u8], h: u64, how: Lookup) -> Option<ItemRef<'_>> {
        let found = match self.zone.is_some() {
            true => self.find_any(key, h),
            false => self.find_live(key, h),
        };
        let Some(loc) = found else {
            self.missed(h, how);
            return None;
        };
        Some(self.hit(loc, h, how))
    }

    /// The N-zone's part of a GET the cache must do under the engine lock
    /// (`Cache::get`, which walks the tiers below): the live item of `key`
    /// there, accessed as a hit. A miss is not counted here: the caller
    /// calls [`Engine::missed`] once the other memory tier missed too.
    pub(crate) fn read_n_zone(&mut self, key: &[u8], h: u64, how: Lookup) -> Option<ItemRef<'_>> {
        let loc = self.find_live(key, h)?;
        Some(self.hit(loc, h, how))
    }

    /// A fetch that missed memory (both zones): learned costs time the
    /// refill that follows, and the rebalancer counts the miss. A Z-zone
    /// hit is no miss for either (it costs no recomputation).
    pub(crate) fn missed(&mut self, h: u64, how: Lookup) {
        if how.fetch {
            if let Some(l) = &mut self.learner {
                l.miss(h, self.clock.now_us());
            }
            self.rebal.miss(h);
        }
    }

    fn hit(&mut self, loc: u64, h: u64, how: Lookup) -> ItemRef<'_> {
        self.access(loc, how);
        if how.fetch && self.rebal.wants_hits() {
            let class = self.slabs.class_of(loc);
            let cost = item::Header::read(self.slabs.chunk(loc)).cost;
            self.rebal.hit(h, class, cost);
        }
        self.view(loc)
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

    /// View an item found earlier (valid until the next mutation).
    pub fn item(&self, id: ItemId) -> ItemRef<'_> {
        self.view(id.0)
    }
}
