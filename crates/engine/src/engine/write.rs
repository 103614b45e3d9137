//! Storing items: `store` (memcached's `do_store_item`), in place or as a
//! new item, the chunk it takes (`alloc`: a free chunk, a new page, an
//! eviction, a page from another class), and taking items out of the
//! index (`unlink`, `remove`).

use super::Engine;
use crate::api::{exptime_of, Evicted, Lookup, Store, StoreMode, StoreOutcome};
use crate::chain::Value;
use crate::clock::RelTime;
use crate::evict::Victim;
use crate::hash::hash;
use crate::inplace::{read_head, rewrite, Rewrite};
use crate::{chain, item};

/// Evictions kept for `watch` between two visits of the server's
/// maintainer; more are not recorded.
const EVICTION_LOG_MAX: usize = 4096;

impl Engine {
    pub fn store(&mut self, req: &Store<'_>) -> StoreOutcome {
        // A page in transit drains a little with every store, before this
        // one looks anything up (see `engine/pages.rs`).
        if self.drain.is_some() {
            self.drain_on_store();
        } else if self.counters.total_items.is_multiple_of(64) && self.zone_pressed() > 0 {
            // The Z-zone needs pages it is owed: grant them, or start the
            // drain that frees one, now rather than at the maintainer's
            // next turn (a drain for the zone then chains the next one:
            // `page_for_zone`). Left to a maintainer with no CPU, a
            // filling zone stayed at 1 of its 14 pages and evicted
            // items that fitted (api_tests/zone_help.rs). Every 64th store:
            // a step that finds no drain to start grants a page beyond
            // `-m`, which the N-zone then gives back.
            self.feed_zone(true);
        }
        let h = hash(req.key);
        // A plain SET needs nothing of a Z-zone copy: it is only removed.
        let plain = req.mode == StoreMode::Set && req.cas == 0;
        let old = match plain {
            true => self.find_live(req.key, h),
            false => self.find_to_change(req.key, h),
        };
        let mut stale = false;
        if let Some(loc) = old {
            let class = self.slabs.class_of(loc);
            let old_cas = item::Header::read(self.slabs.chunk(loc)).cas;
            if req.mode == StoreMode::Add {
                // memcached: a failed add still counts as an access.
                self.access(
                    loc,
                    Lookup {
                        bump: true,
                        fetch: false,
                    },
                );
                return StoreOutcome::NotStored;
            }
            if req.cas != 0 && req.cas != old_cas {
                if req.invalidate && req.cas < old_cas {
                    stale = true;
                } else {
                    self.slabs.classes[class].stats.cas_badval += 1;
                    return StoreOutcome::Exists;
                }
            } else if req.cas != 0 {
                self.slabs.classes[class].stats.cas_hits += 1;
            }
        } else if req.cas != 0 {
            return StoreOutcome::NotFound;
        } else if req.mode != StoreMode::Set && req.mode != StoreMode::Add {
            return StoreOutcome::NotStored;
        }

        // Append/prepend build the new value from the old one, keeping its
        // flags and expiry (memcached's do_store_item).
        let mut flags = req.flags;
        let mut exptime = exptime_of(req.expiry);
        let mut cost = req.cost;
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        if let (Some(loc), StoreMode::Append | StoreMode::Prepend) = (old, req.mode) {
            let chunk = self.slabs.chunk(loc);
            let h = item::Header::read(chunk);
            flags = item::flags(chunk);
            exptime = h.exptime;
            cost = cost.or(Some(item::dequantize_cost(h.cost)));
            let old_value = Value::of(&self.slabs, loc);
            if req.mode == StoreMode::Prepend {
                scratch.extend_from_slice(req.value);
            }
            for part in old_value.parts() {
                scratch.extend_from_slice(part);
            }
            if req.mode == StoreMode::Append {
                scratch.extend_from_slice(req.value);
            }
        }
        let value: &[u8] = match req.mode {
            StoreMode::Append | StoreMode::Prepend => &scratch,
            _ => req.value,
        };
        let outcome = if !self.fits(req.key.len(), value.len(), flags) {
            if req.mode == StoreMode::Set {
                self.drop_failed_set(h, old);
            }
            StoreOutcome::TooLarge
        } else {
            let cas = match req.new_cas {
                Some(c) => c & item::CAS_MASK,
                None => self.next_cas(),
            };
            let mut bits = item::LIVE | if stale { item::STALE } else { 0 };
            let cost = item::quantize_cost(match cost {
                Some(c) => c,
                None => {
                    let (c, guessed) = self.unknown_cost(h, old);
                    if guessed {
                        bits |= item::GUESSED;
                    }
                    c
                }
            });
            let rewritten = bits == item::LIVE
                && req.mode == StoreMode::Set
                && self.rewrites_in_place()
                && old.is_some_and(|loc| {
                    let new = Rewrite {
                        value,
                        flags,
                        exptime,
                        cost,
                    };
                    self.rewrite(h, loc, &new, cas)
                });
            // Under SIEVE an overwrite is an access, as a request for a
            // cached object is in the paper (and as a SET in place sets REF
            // under CLOCK): the new item starts visited, or every SET of a
            // hot key would make it a new, unvisited item, the first that
            // SIEVE's quick demotion takes.
            let bits = match old {
                Some(_) if self.policy.kind() == crate::config::EvictionPolicy::Sieve => {
                    bits | item::REF
                }
                _ => bits,
            };
            let written = match rewritten {
                true => Ok(0),
                false => self.write_new(h, req.key, &[value], flags, exptime, cas, cost, bits, old),
            };
            match written {
                Ok(_) => StoreOutcome::Stored {
                    cas: if self.config.cas_enabled { cas } else { 0 },
                },
                Err(e) => {
                    if req.mode == StoreMode::Set {
                        self.drop_failed_set(h, old);
                    }
                    e
                }
            }
        };
        // A chained value's copy is not kept around.
        if scratch.capacity() > self.slabs.page_size {
            scratch = Vec::new();
        }
        self.scratch = scratch;
        outcome
    }

    /// memcached drops the old item when a SET fails (for size or memory),
    /// so a stale value does not outlive the failed update: `old` if still
    /// live (eviction while allocating may have taken it), else the key's
    /// Z-zone copy (a plain SET did not look there).
    pub(super) fn drop_failed_set(&mut self, h: u64, old: Option<u64>) {
        match old {
            Some(loc) if self.slabs.is_live(loc) => self.remove(loc),
            Some(_) => {}
            None => {
                self.tiers_forget(h, false);
                self.enforce_budget(None);
            }
        }
    }

    /// Overwrite the live item at `loc` (key hash `h`, stripe held) in its
    /// chunk when the new one belongs to the same class: no allocation, no
    /// index change (`crate::inplace::rewrite`). False if it cannot be.
    pub(super) fn rewrite(&mut self, h: u64, loc: u64, new: &Rewrite<'_>, cas: u64) -> bool {
        debug_assert!(self.slabs.held[self.stripes.of(h)]);
        let Some(head) = read_head(&self.slabs.arena, self.slabs.chunk_bits, loc) else {
            return false;
        };
        let class = head.class;
        let prev = class
            .checked_sub(1)
            .map_or(0, |c| self.slabs.classes[c].chunk_size as usize);
        let Some(total) = head.rewritable(new, prev) else {
            return false;
        };
        // SAFETY: the engine holds the item's stripe (found through it).
        unsafe { rewrite(&self.slabs.arena, &head, new, cas, self.now()) };
        let old_total = head.header.total_len() as u64;
        self.rebal.stored(h, class, new.cost, false);
        let c = &mut self.slabs.classes[class];
        c.requested = c.requested + total as u64 - old_total;
        c.stats.cmd_set += 1;
        self.counters.total_items += 1;
        self.counters.bytes = self.counters.bytes + total as u64 - old_total;
        true
    }

    /// Allocate, write and link a new item, replacing `old` if still live;
    /// returns its location. A new key's Z-zone copy, if any, goes.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn write_new(
        &mut self,
        h: u64,
        key: &[u8],
        value: &[&[u8]],
        flags: u32,
        exptime: u32,
        cas: u64,
        cost: u8,
        bits: u8,
        old: Option<u64>,
    ) -> Result<u64, StoreOutcome> {
        let vlen: usize = value.iter().map(|v| v.len()).sum();
        let total = item::total_len(key.len(), vlen, flags);
        let largest = self.largest_chunk();
        let loc = self.alloc(total.min(largest), old)?;
        // A chained item's segments: chunks of the same (largest) class, so
        // no page of theirs is taken away while the others are found.
        let nseg = chain::segments(total, largest);
        let mut segs = Vec::with_capacity(nseg);
        // A chunk handed out is no item until written (`Slabs::take_free`
        // clears the bits of chunks it hands out for the first time).
        while segs.len() < nseg {
            match self.alloc(largest, old) {
                Ok(s) => segs.push(s),
                Err(e) => {
                    for l in segs.into_iter().chain([loc]) {
                        self.slabs.free(l);
                    }
                    return Err(e);
                }
            }
        }
        // Eviction while allocating may have taken the old item already.
        if let Some(o) = old.filter(|&o| o != loc && self.slabs.is_live(o)) {
            self.remove(o);
        }
        let now = self.now();
        item::write(
            self.slabs.chunk_mut(loc),
            cas,
            item::atime_code(now),
            cost,
            bits,
            exptime,
            flags,
            key,
            value,
        );
        if nseg > 0 {
            chain::write(&mut self.slabs, loc, &segs, value);
            let class = self.slabs.class_of(loc);
            self.slabs.classes[class].segments += nseg as u64;
        }
        self.index_mut(h, |ix, slabs| {
            ix.insert(h, loc, &|l| hash(item::key(slabs.chunk(l))))
        });
        let class = self.slabs.class_of(loc);
        self.policy.link(&mut self.slabs, class, loc);
        self.rebal.stored(h, class, cost, old.is_none());
        let c = &mut self.slabs.classes[class];
        c.used += 1;
        c.requested += total as u64;
        c.stats.cmd_set += 1;
        self.counters.curr_items += 1;
        self.counters.total_items += 1;
        self.counters.bytes += total as u64;
        if old.is_none() {
            self.tiers_forget(h, false);
        }
        self.enforce_budget(Some(loc));
        if self.slabs.is_live(loc) {
            return Ok(loc);
        }
        // Its page was the last one to give: the item was moved to a free
        // chunk of its class, or, with none, given up (the policy's tables
        // having grown for it): then the store failed for lack of memory.
        match self.find(key, h) {
            Some(moved) => Ok(moved),
            None => Err(self.out_of_memory(class)),
        }
    }

    /// The cost of an item stored without one, and whether it is a guess:
    /// learned from a recent miss of its key when learning is on, else the
    /// replaced item's, else the mean learned cost (a guess); 1 (all equal:
    /// LRU) when learning is off.
    pub(super) fn unknown_cost(&mut self, h: u64, old: Option<u64>) -> (u32, bool) {
        let Some(learner) = &mut self.learner else {
            return (1, false);
        };
        if learner.waiting(h) {
            if let Some(c) = learner.learn(h, self.clock.now_us()) {
                return (c, false);
            }
        }
        match old {
            Some(loc) => {
                let chunk = self.slabs.chunk(loc);
                let guessed = item::bits(chunk) & item::GUESSED != 0;
                (self.policy.cost_of(chunk), guessed)
            }
            None => (learner.default_cost(), true),
        }
    }

    /// A chunk for an item of `size` bytes: a free chunk, a new page, or an
    /// evicted item's chunk, else a page taken from another class.
    /// `protect` is never evicted.
    pub(super) fn alloc(
        &mut self,
        size: usize,
        mut protect: Option<u64>,
    ) -> Result<u64, StoreOutcome> {
        let class = self.slabs.class_for(size).ok_or(StoreOutcome::TooLarge)?;
        let mut took_back = false;
        loop {
            if let Some(loc) = self.chunk_of_class(class, protect) {
                return Ok(loc);
            }
            // A class with no page, or nothing to evict, takes a page from
            // the largest class instead of failing (memcached needs
            // slab_reassign for the first case).
            if !self.config.evict || !self.steal_page_for(class, protect) {
                // The Z-zone gives the N-zone a page before a store fails.
                if self.zone_yield_page() {
                    continue;
                }
                // The chunks threads reserved (`magazine`) may be the
                // class's last ones (a class of a few large chunks).
                if !took_back {
                    took_back = true;
                    self.take_back_reserved();
                    continue;
                }
                // A page in transit out of the class may be its last (an
                // idle class may give it): a store wants the class now.
                if self.call_off_drain(class) {
                    continue;
                }
                // Last, the item being replaced may go, as in memcached
                // (a class of one chunk at its floor holds only it). The
                // new value is never read from it: callers copied it.
                if protect.take().is_some() {
                    continue;
                }
                return Err(self.out_of_memory(class));
            }
        }
    }

    /// A chunk of `class` without taking a page from another class: a free
    /// chunk, a spare or new page (within `-m`), or the chunk of the
    /// eviction policy's victim (`protect` never is). None if none is left.
    pub(super) fn chunk_of_class(&mut self, class: usize, protect: Option<u64>) -> Option<u64> {
        loop {
            if let Some(loc) = self.slabs.take_free(class) {
                return Some(loc);
            }
            if let Some(p) = self.slabs.spare.pop() {
                self.slabs.assign(p, class);
                continue;
            }
            // The page and what the policy allocates for the class's first
            // item (GD-Wheel's wheels) must fit together in `-m`, unless
            // the class is below its floor: that page is granted beyond it.
            let fits = self.can_add_page_with(self.policy.first_item_bytes(class));
            if fits || self.slabs.classes[class].pages.len() < self.floor_pages(class) {
                if let Some(p) = self.slabs.new_page() {
                    self.granted += usize::from(!fits);
                    self.slabs.assign(p, class);
                    continue;
                }
            }
            if !self.config.evict {
                return None;
            }
            let now = self.now();
            return match self.policy.victim(&mut self.slabs, class, now, protect)? {
                // An in-place SET may have renewed it since the policy
                // looked: then it is an eviction.
                Victim::Expired(loc) if self.still_expired(loc, now) => {
                    self.unlink(loc);
                    self.counters.reclaimed += 1;
                    self.slabs.classes[class].stats.reclaimed += 1;
                    Some(loc)
                }
                Victim::Expired(loc) | Victim::Evicted(loc) => {
                    self.evict_victim(loc, class, now);
                    Some(loc)
                }
            };
        }
    }

    /// Whether the live item at `loc` is expired, read with its stripe.
    pub(super) fn still_expired(&mut self, loc: u64, now: RelTime) -> bool {
        self.hold_item(loc);
        let exp = item::exptime(self.slabs.chunk(loc));
        exp != 0 && exp <= now
    }

    pub(super) fn out_of_memory(&mut self, class: usize) -> StoreOutcome {
        self.counters.outofmemory += 1;
        self.slabs.classes[class].stats.outofmemory += 1;
        StoreOutcome::NoMemory
    }

    /// Evict the policy's victim at `loc` (class `class`): the eviction
    /// counters, the rebalancer's ghost set, then unlink. Its chunk is not
    /// freed (the caller reuses it).
    pub(super) fn evict_victim(&mut self, loc: u64, class: usize, now: RelTime) {
        self.hold_item(loc);
        let hdr = item::Header::read(self.slabs.chunk(loc));
        let cost = self.policy.cost_of(self.slabs.chunk(loc)) as u64;
        // Per class: items leaving the class's pages (demoted or not, what
        // the rebalancers compare); the totals: items leaving the cache.
        let demoted = self.note_evicted(loc, class);
        let s = &mut self.slabs.classes[class].stats;
        s.evicted += 1;
        s.evicted_cost += cost;
        if hdr.exptime != 0 {
            s.evicted_nonzero += 1;
        }
        s.evicted_time = item::atime_age(hdr.atime, now) as u64;
        if hdr.bits & item::FETCHED == 0 {
            s.evicted_unfetched += 1;
            if !demoted {
                self.counters.evicted_unfetched += 1;
            }
        }
        if !demoted {
            self.counters.evictions += 1;
            if let Some(log) = self
                .eviction_log
                .as_mut()
                .filter(|l| l.len() < EVICTION_LOG_MAX)
            {
                let ttl = match hdr.exptime {
                    0 => -1,
                    t => i64::from(t.saturating_sub(now)),
                };
                log.push(Evicted {
                    key: self.slabs.key_of(loc).to_vec(),
                    fetched: hdr.bits & item::FETCHED != 0,
                    ttl,
                    age: item::atime_age(hdr.atime, now),
                    class: class as u32 + 1,
                    size: hdr.value_len,
                });
            }
        }
        self.unlink(loc);
    }

    /// `watch evictions`: start or stop recording evictions.
    pub fn log_evictions(&mut self, on: bool) {
        match (on, self.eviction_log.is_some()) {
            (true, false) => self.eviction_log = Some(Vec::new()),
            (false, true) => self.eviction_log = None,
            _ => {}
        }
    }

    /// The evictions recorded since the last call.
    pub fn take_evictions(&mut self) -> Vec<Evicted> {
        self.eviction_log
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// The slab class (from 1) an item of these sizes goes to; the largest
    /// class for a chained one. For `watch`'s `clsid`.
    pub fn class_id(&self, key_len: usize, value_len: usize, flags: u32) -> u32 {
        let classes = self.slabs.classes.len();
        let c = self
            .slabs
            .class_for(item::total_len(key_len, value_len, flags))
            .unwrap_or(classes.saturating_sub(1));
        c as u32 + 1
    }

    /// Remove an item from the index and the counters; its chunk is not freed.
    pub(super) fn unlink(&mut self, loc: u64) {
        let h = hash(self.slabs.key_of(loc));
        let removed = self.index_mut(h, |ix, _| ix.remove(h, loc));
        let hdr = item::Header::read(self.slabs.chunk(loc));
        debug_assert!(removed, "unlinked item was indexed");
        let total = hdr.total_len() as u64;
        let class = self.slabs.class_of(loc);
        self.policy.unlink(&mut self.slabs, class, loc);
        if chain::is_head(self.slabs.chunk(loc)) {
            let segs = chain::segment_locs(&self.slabs, loc);
            self.slabs.classes[class].segments -= segs.len() as u64;
            for s in segs {
                self.slabs.free(s);
            }
        }
        let c = &mut self.slabs.classes[class];
        c.used -= 1;
        c.requested -= total;
        self.counters.curr_items -= 1;
        self.counters.bytes -= total;
        item::set_bits(self.slabs.chunk_mut(loc), 0);
    }

    /// Unlink and free an item.
    pub(super) fn remove(&mut self, loc: u64) {
        self.hold_item(loc);
        let bits = item::bits(self.slabs.chunk(loc));
        let exp = item::exptime(self.slabs.chunk(loc));
        if bits & item::FETCHED == 0 && exp != 0 && exp <= self.now() {
            self.counters.expired_unfetched += 1;
            let class = self.slabs.class_of(loc);
            self.slabs.classes[class].stats.expired_unfetched += 1;
        }
        self.unlink(loc);
        self.slabs.free(loc);
    }
}
