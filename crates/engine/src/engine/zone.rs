//! The N-zone and the Z-zone as one cache (zExpander §3; issue 11).
//!
//! The slab engine is the N-zone. With `-o zzone=1`:
//! - an item the N-zone evicts (CLOCK's or GD-Wheel's victim, or an item
//!   of a page leaving its class) is *demoted*: its image goes into its
//!   key's Z-zone block, and only items the Z-zone itself lets go count as
//!   evictions;
//! - a GET that misses the N-zone looks in the Z-zone, and is served from
//!   the block without moving the item unless its reuse time beats the
//!   N-zone's locality benchmark (§3.3.2), when it is *promoted*;
//! - every other command (CAS, append, incr, touch, meta...) promotes the
//!   item first and then acts on it in the N-zone, so each behaves exactly
//!   as it does there;
//! - a key written to the N-zone has its Z-zone copy removed, deferred
//!   until the block is next rewritten (§3.3.2); `flush_all` empties both.
//!
//! The benchmark is how long an item that is not read again survives in
//! the N-zone, counted in demotions: the N-zone's item count (each item
//! stored or promoted pushes one out once it is full). zExpander measures
//! it in seconds with marker items it SETs and watches being evicted; the
//! engine knows its own item count, so it needs no markers.
//!
//! The split of memory between the zones (§3.3.1) is the controller of
//! `crate::zzone::split`.

use super::Engine;
use crate::api::DeleteOutcome;
use crate::chain;
use crate::codec::Dictionary;
use crate::hash::hash;
use crate::item;
use crate::zzone::split::{DrainPace, ZzoneStats};
use crate::zzone::Known;

/// Pages [`Engine::feed_zone`] grants the Z-zone at most per step.
const FEED_PAGES: usize = 2;

impl Engine {
    /// The item at `loc` (its stripe held) leaves the N-zone: demote it to
    /// the Z-zone, or, with none or one that does not take it (too large
    /// for it, not worth growing, paused), to flash. False if it is not
    /// kept (no tier below, or expired; chained and not taken by the
    /// Z-zone); kept by the Z-zone, it is staged, and its sweep sends it
    /// on to flash later (or evicts it, without flash).
    pub(super) fn demote(&mut self, loc: u64) -> bool {
        let now = self.now();
        if self.zone.is_none() && self.flash.is_none() {
            return false;
        }
        let chunk = self.slabs.chunk(loc);
        let exp = item::exptime(chunk);
        if exp != 0 && exp <= now {
            return false;
        }
        if chain::is_head(chunk) {
            // Over half a page, up to `-I`: the zone stores it apart
            // (zExpander §3.1, footnote 3), its image put together here.
            let Some(z) = self.zone.as_mut().filter(|z| !z.paused) else {
                return false;
            };
            let mut zone = z.zone.lock();
            if !zone.admits(item::stored_len(chunk)) {
                return false;
            }
            let image = &mut z.image;
            image.clear();
            image.extend_from_slice(&chunk[..item::value_start(chunk)]);
            chain::Value::of(&self.slabs, loc).copy_to(image);
            zone.push(hash(item::key(chunk)), image, now);
            self.counters.demotions += 1;
            return true;
        }
        let image = &chunk[..item::stored_len(chunk)];
        let h = hash(item::key(image));
        if let Some(z) = self.zone.as_mut().filter(|z| !z.paused) {
            let mut zone = z.zone.lock();
            if zone.admits(image.len()) {
                zone.push(h, image, now);
                self.counters.demotions += 1;
                return true;
            }
        }
        // No Z-zone, or one that does not take it: the next tier down.
        self.flash.as_ref().is_some_and(|f| f.admit(h, image))
    }

    /// Test knob (`-o zzone_demote_all`, the differential tester's): every
    /// item of the N-zone goes down the path an evicted one takes
    /// ([`Engine::demote`]), and the stage is packed (large items stored
    /// apart), so that the next command reads compressed blocks and
    /// records. An item the Z-zone does not take (over its largest,
    /// refused as incompressible, expired) stays where it is: the knob
    /// moves items, it never evicts them (a record with no room in the
    /// zone is one, as any block's items without room are).
    /// Returns the items moved. Costs a walk of the pages that hold items.
    pub fn demote_all(&mut self) -> usize {
        if self.zone.is_none() {
            return 0;
        }
        // Every stripe: their lock-free SETs' counts are folded in, and
        // most of their items leave.
        self.hold_all();
        // Pages for the zone now, not at the maintainer's next turn: a
        // block with no page to go to would drop its items. (The zone
        // asks for them as its stage fills: after each page below.)
        self.feed_zone(false);
        let mut left = self.counters.curr_items;
        let mut moved = 0;
        let pages: Vec<_> = self
            .slabs
            .classes
            .iter()
            .flat_map(|c| c.pages.iter().copied())
            .collect();
        for page in pages {
            if left == 0 {
                break;
            }
            if !self.slabs.may_hold_items(page) {
                continue;
            }
            for loc in self.slabs.live_in_page(page) {
                left = left.saturating_sub(1);
                if self.demote(loc) {
                    self.unlink(loc);
                    self.slabs.free(loc);
                    moved += 1;
                }
            }
            self.feed_zone(false);
        }
        if let Some(z) = self.zone.as_ref() {
            let now = self.now();
            z.zone.lock().flush_some(now, usize::MAX);
        }
        moved
    }

    /// The live item of `key` in either zone: the N-zone's, else the
    /// Z-zone's, promoted (for commands that act on the item).
    pub(super) fn find_any(&mut self, key: &[u8], h: u64) -> Option<u64> {
        self.find_any_known(key, h, None)
    }

    /// [`Engine::find_any`], given what a read without the lock decoded
    /// (`known`), which is used if the zone still holds what it was
    /// decoded from (`Zone::get_known`): nothing is decoded under the
    /// locks.
    fn find_any_known(&mut self, key: &[u8], h: u64, known: Option<Known<'_>>) -> Option<u64> {
        if let Some(loc) = self.find_live(key, h) {
            return Some(loc);
        }
        let now = self.now();
        let z = self.zone.as_mut()?;
        {
            let mut zone = z.zone.lock();
            match known {
                Some(k) => zone.get_known(h, key, now, k),
                None => zone.get(h, key, now, 0, false),
            }?;
            z.image.clear();
            z.image.extend_from_slice(zone.found());
        }
        self.promote(h)
    }

    /// The live item of `key` for a command that changes it (a store with
    /// a mode or a CAS, touch, incr/decr): as [`Engine::find_any`]. With
    /// none, a copy on flash goes: those commands treat an item only on
    /// flash as evicted (docs/protocol.md, "The flash tier"), so a later
    /// GET must not find what they answered was not there.
    pub(super) fn find_to_change(&mut self, key: &[u8], h: u64) -> Option<u64> {
        let found = self.find_any(key, h);
        if found.is_none() {
            if let Some(f) = &self.flash {
                f.forget(h);
            }
        }
        found
    }

    /// Move the item a zone lookup just copied to `image` into the
    /// N-zone, with its header unchanged (CAS, expiry, flags, cost); its
    /// Z-zone copy goes.
    fn promote(&mut self, h: u64) -> Option<u64> {
        let z = self.zone.as_mut()?;
        let image = std::mem::take(&mut z.image);
        {
            // Removed first, so a sweep that runs while the N-zone makes
            // room for it cannot count it gone twice.
            let mut zone = z.zone.lock();
            zone.remove(h, true);
            zone.note_promotion();
        }
        let loc = match self.write_image(h, &image) {
            Ok(loc) => Some(loc),
            Err(_) => {
                // No chunk for it: it leaves the cache.
                self.counters.evictions += 1;
                if let Some(tap) = &self.tap {
                    tap.evicted(item::key(&image));
                }
                None
            }
        };
        if let Some(z) = self.zone.as_mut() {
            z.image = image;
        }
        loc
    }

    /// A read without the engine lock found `key` in the Z-zone and its
    /// reuse time beats the benchmark, or it was the item's first fetch
    /// (`fetched`: then it is marked fetched, as the N-zone marks an item
    /// its GET finds): promote it, unless the N-zone has the key again or
    /// the Z-zone no longer does (or has rewritten its block since).
    /// `known`: what the read decoded, which is not decoded again here.
    pub fn promote_read(&mut self, key: &[u8], fetched: bool, known: Known<'_>) {
        let h = hash(key);
        // A newer item of the key: the read was not of it.
        if self.find_live(key, h).is_some() {
            return;
        }
        if let Some(loc) = self.find_any_known(key, h, Some(known)) {
            if fetched {
                let chunk = self.slabs.chunk_mut(loc);
                item::set_bits(chunk, item::bits(chunk) | item::FETCHED);
            }
        }
    }

    /// A key was written to the N-zone: its Z-zone copy, if any, is stale.
    /// A new key (hash `h`) was written to the N-zone, or a SET failed:
    /// its copies in the Z-zone and on flash go.
    pub(super) fn tiers_forget(&mut self, h: u64, known: bool) {
        if let Some(z) = self.zone.as_mut() {
            z.zone.lock().remove(h, known);
        }
        if let Some(f) = &self.flash {
            f.forget(h);
        }
    }

    /// Put an item read from flash back in memory if it was read again
    /// within a reuse distance memory would have kept it for (fewer items
    /// admitted to flash, that is evicted from memory, than memory holds:
    /// the test zExpander's promotion makes, §3.3.2), unless memory has the
    /// key already or its flash copy is gone (a SET, DELETE or `flush_all`
    /// since the read: then the image is stale). The flash copy is removed
    /// as the item is written (`write_new`). True if it was put back.
    /// Without the distance, a uniform scan of more keys than memory holds
    /// recached every key on its second read and churned memory.
    pub(crate) fn recache(&mut self, h: u64, image: &[u8], read: crate::flash::Read) -> bool {
        let key = item::key(image);
        if read
            .distance
            .is_none_or(|d| d >= self.counters.curr_items.max(1))
        {
            return false;
        }
        if self.find_live(key, h).is_some() {
            return false;
        }
        if !self.flash.as_ref().is_some_and(|f| f.holds(h, read.loc)) {
            return false;
        }
        self.write_image(h, image).is_ok()
    }

    /// Write an item image from another tier into the N-zone as a new
    /// item, keeping its CAS, flags, expiry, cost and last access (its
    /// copies in the tiers go: `write_new`).
    fn write_image(&mut self, h: u64, image: &[u8]) -> Result<u64, super::StoreOutcome> {
        let hdr = item::Header::read(image);
        let flags = item::flags(image);
        let value = &image[item::value_start(image)..];
        let bits = (hdr.bits & !item::FLAGS_WIDTH_MASK) | item::LIVE | item::REF;
        let loc = self.write_new(
            h,
            item::key(image),
            &[value],
            flags,
            hdr.exptime,
            hdr.cas,
            hdr.cost,
            bits,
            None,
        )?;
        // `write_new` stamps a new item with now: a promotion is no access
        // (meta `l` after a promotion answered 0).
        item::set_atime(self.slabs.chunk_mut(loc), hdr.atime);
        // Nor is it a store: `total_items` and a class's `cmd_set` count
        // the clients' (curr_items + evictions = total_items holds across
        // the tiers when nothing is deleted), and the split counts stores
        // as the N-zone's requests.
        self.counters.total_items -= 1;
        let class = self.slabs.class_of(loc);
        self.slabs.classes[class].stats.cmd_set -= 1;
        Ok(loc)
    }

    /// Background work: adapt the split once per window, and shrink the
    /// Z-zone towards its target by up to `budget` steps.
    pub(super) fn zone_step(&mut self, budget: usize) -> usize {
        let now = self.now();
        // GET hits in the N-zone (the engine's and the readers'), and stores.
        let classes = self.slabs.classes.len();
        let at_n_zone = self.counters.get_hits.iter().sum::<u64>()
            + (0..classes)
                .map(|c| self.stripes.reader_hits(c))
                .sum::<u64>()
            + self.counters.total_items;
        let available = self.zone_available();
        let target = self.config.zzone_target;
        let bench = self.counters.curr_items.min(u32::MAX as u64) as u32;
        let Some(z) = self.zone.as_mut() else {
            return 0;
        };
        let writer = z.writer;
        let mut steps = 0;
        let stepped = z.try_step(at_n_zone, target, available, |zone| {
            zone.bench = bench;
            if !writer {
                steps = zone.shrink(now, budget);
            }
        });
        if stepped {
            self.feed_zone(true);
        }
        self.enforce_budget(None);
        steps
    }

    /// The Z-zone is below its target: grant it the pages of free memory it
    /// needs now ([`crate::zzone::Zone::pressed_pages`]: free memory is
    /// the N-zone's too, and holds its items uncompressed at no cost in
    /// hits), or one the N-zone has given up; else, once the N-zone holds
    /// all the memory, start draining one of its pages towards the
    /// zone's target (the drain demotes its items a few per store; the
    /// page is granted once it is free, at a later step). At most
    /// [`FEED_PAGES`] pages a step, and none while the zone's writer holds
    /// its lock: this runs under the engine's lock (issue 34: a zone
    /// starting up took 31 pages in one 330 µs hold). `drain`: false to
    /// grant free memory only.
    pub(super) fn feed_zone(&mut self, drain: bool) {
        for _ in 0..FEED_PAGES {
            let Some(z) = self.zone.as_ref() else {
                return;
            };
            let (wanted, pressed) = (z.zone.wanted_pages(), z.zone.pressed_pages());
            if wanted == 0 {
                return;
            }
            let free = self.pages_fit(1, 0);
            let over_budget = if free || !self.slabs.spare.is_empty() {
                if pressed == 0 {
                    return;
                }
                if let Some(p) = self.slabs.spare.pop() {
                    self.slabs.release_page(p);
                }
                false
            } else if !drain || self.drain.is_some() || !z.zone.judged() {
                // A drain goes one at a time (the rebalancer's, or ours),
                // and only once the zone knows its values compress
                // (`Zone::judged`).
                return;
            } else {
                // Not the last class: it holds the segments of items over
                // a chunk, which the zone does not take, and a drain for
                // it would evict them (a 32 MB item stored at `-I 32m`
                // was gone a moment later).
                let classes = self.slabs.classes.len();
                let largest = (0..classes.saturating_sub(1))
                    .filter(|&c| self.slabs.classes[c].pages.len() > 1)
                    .max_by_key(|&c| self.slabs.classes[c].pages.len());
                if let Some(c) = largest.filter(|&c| self.start_drain(c, None)) {
                    let page = self.drain.as_ref().map(|d| d.page);
                    debug_assert!(page.is_some(), "class {c} drains");
                    if let Some(z) = self.zone.as_mut() {
                        z.drain = page;
                    }
                    return;
                }
                // No page can drain. If the classes hold floor pages within
                // `-m`, one of them counts as granted beyond it, as it
                // would have been had the zone taken its memory before
                // they came (`Engine::allowance`: floors may be beyond
                // `-m`, as memcached's first pages are); else one over the
                // budget, which enforce_budget then takes from the N-zone
                // at once.
                if self.granted < self.floor_pages_held() {
                    self.granted += 1;
                    false
                } else {
                    true
                }
            };
            // A page released above and not granted is free memory, which
            // the next step grants.
            match self.zone.as_ref().and_then(|z| z.zone.try_lock()) {
                Some(mut zone) => zone.grant_page(),
                None => return,
            }
            if over_budget {
                return;
            }
        }
    }

    /// A drained page goes to the zone if it was drained for it (see
    /// [`Engine::feed_zone`]). False if it was not.
    pub(super) fn page_for_zone(&mut self, page: crate::slab::PageId) -> bool {
        let Some(z) = self.zone.as_mut().filter(|z| z.drain == Some(page)) else {
            return false;
        };
        z.drain = None;
        let zone = z.zone.clone();
        self.slabs.release_page(page);
        // If the writer holds the zone, the page is free memory that the
        // maintainer's next step grants ([`Engine::feed_zone`]).
        if let Some(mut zone) = zone.try_lock() {
            zone.grant_page();
        }
        // The next drain at once, not at the maintainer's next turn: a
        // zone growing into a full cache a page per turn took some 100 s
        // to reach its share of a gigabyte.
        self.feed_zone(true);
        true
    }

    /// How a page drain goes on while its items would be demoted (see
    /// [`crate::zzone::split::Zzone::pace`]): at once without a Z-zone.
    pub(super) fn drain_pace(&self) -> DrainPace {
        self.zone.as_ref().map_or(DrainPace::Go, |z| z.pace())
    }

    /// While on, evicted items are not demoted (see
    /// [`crate::zzone::split::Zzone::paused`]).
    /// Returns what it was.
    pub(super) fn pause_demotions(&mut self, on: bool) -> bool {
        match self.zone.as_mut() {
            Some(z) => std::mem::replace(&mut z.paused, on),
            None => false,
        }
    }

    /// Tell `tap` the key of each item that leaves the cache for room, from
    /// now on ([`crate::api::EvictionTap`]).
    pub fn set_eviction_tap(&mut self, tap: std::sync::Arc<dyn crate::api::EvictionTap>) {
        if let Some(z) = self.zone.as_mut() {
            z.zone.lock().set_tap(tap.clone());
        }
        self.tap = Some(tap);
    }

    /// A thread packs the Z-zone's stage and shrinks it from now on
    /// ([`crate::Cache::flush_zone`]). False if there is no Z-zone.
    pub fn zone_has_writer(&mut self) -> bool {
        match self.zone.as_mut() {
            Some(z) => {
                z.writer = true;
                z.zone.lock().defer_frees();
                true
            }
            None => false,
        }
    }

    /// The N-zone needs a page it cannot find: the Z-zone gives one back.
    /// Its share stays: it grows back as it demotes, the N-zone giving
    /// pages back as usual. False if it has none.
    pub(super) fn zone_yield_page(&mut self) -> bool {
        let now = self.now();
        let Some(z) = self.zone.as_mut() else {
            return false;
        };
        let mut zone = z.zone.lock();
        let pages = zone.pages();
        // First the pages it is still to be granted (the N-zone leaves
        // them free, see `can_add_page_with`).
        if zone.target_pages() > pages {
            zone.set_target_pages(pages);
            return true;
        }
        if pages == 0 {
            return false;
        }
        zone.set_target_pages(pages - 1);
        zone.shrink(now, usize::MAX);
        zone.pages() < pages
    }

    /// Memory the zones share: `-m` less what the rest of the engine
    /// (index, policy, rebalancer) holds.
    pub(super) fn zone_available(&self) -> usize {
        self.memory_limit
            .saturating_sub(self.aux_bytes() - self.zone_memory())
    }

    /// The most pages the split lets the Z-zone hold (0 without one).
    pub(super) fn zone_pages_most(&self) -> usize {
        let available = self.zone_available();
        self.zone.as_ref().map_or(0, |z| z.most_pages(available))
    }

    /// The Z-zone's share of memory now (None without one).
    pub fn zone_share(&self) -> Option<f64> {
        self.zone.as_ref().map(|z| z.share())
    }

    /// Pages of free memory the Z-zone needs ([`crate::zzone::Zone::pressed_pages`]).
    /// (Read without the zone's lock: see [`crate::zzone::ZoneCell`].)
    pub(super) fn zone_pressed(&self) -> usize {
        self.zone.as_ref().map_or(0, |z| z.zone.pressed_pages())
    }

    pub(super) fn zone_memory(&self) -> usize {
        self.zone.as_ref().map_or(0, |z| z.zone.memory_bytes())
    }

    pub(super) fn zone_stats(&self) -> Option<ZzoneStats> {
        let z = self.zone.as_ref()?;
        Some(z.stats(self.counters.curr_items))
    }
}

impl Engine {
    /// Samples to train a Z-zone dictionary on, when one is due: train them
    /// outside the engine lock, then [`Engine::zone_install_dictionary`]
    /// (as [`crate::Cache::train_zone`] does).
    pub fn zone_samples(&mut self) -> Option<Vec<Vec<u8>>> {
        self.zone.as_mut()?.zone.lock().take_samples()
    }

    /// New Z-zone blocks use this dictionary (its memory counts in `-m`).
    pub fn zone_install_dictionary(&mut self, dict: Dictionary) {
        if let Some(z) = self.zone.as_mut() {
            z.zone.lock().install_dictionary(dict);
            self.enforce_budget(None);
        }
    }

    /// Train and install a dictionary if one is due, all under this
    /// `&mut` (for single-threaded users: the lab's simulator).
    pub fn train_zone_now(&mut self) {
        if let Some(samples) = self.zone_samples() {
            if let Some(d) = crate::codec::train_dictionary(&samples, crate::zzone::DICT_BYTES) {
                self.zone_install_dictionary(Dictionary::new(1, d));
            }
        }
    }

    /// `delete` of a key the N-zone does not hold: its Z-zone copy, if any,
    /// is removed (deferred), after the CAS check.
    pub(super) fn delete_in_zone(&mut self, key: &[u8], h: u64, cas: u64) -> DeleteOutcome {
        let now = self.now();
        let Some(z) = self.zone.as_mut() else {
            return DeleteOutcome::NotFound;
        };
        let mut zone = z.zone.lock();
        let Some(held) = zone.cas_of(h, key, now) else {
            return DeleteOutcome::NotFound;
        };
        if cas != 0 && held != cas {
            return DeleteOutcome::Exists;
        }
        zone.remove(h, true);
        DeleteOutcome::Deleted
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::clock::Clock;
    use crate::{Config, Engine, Store};

    /// Store `n` items of 100-byte values, random or JSON-like.
    fn fill(e: &mut Engine, from: u32, n: u32, random: bool) {
        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(from);
        for i in from..from + n {
            let key = format!("key:{i:09}");
            let value: Vec<u8> = if random {
                (0..100)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect()
            } else {
                format!(
                    "{{\"id\":{i},\"name\":\"user{}\",\"active\":true,\"score\":{:05}}}      ",
                    i % 977,
                    i % 1000
                )
                .into_bytes()
            };
            e.store(&Store::set(key.as_bytes(), &value));
            if i % 1000 == 0 {
                e.maintain(64);
            }
        }
        e.maintain(64);
    }

    /// An engine of 16 MB with the Z-zone on.
    fn zone_engine() -> Engine {
        let config = Config {
            memory_limit: 16 << 20,
            zzone: true,
            ..Config::default()
        };
        Engine::new(config, Arc::new(Clock::new())).unwrap()
    }

    /// A promotion moves an item between tiers: not a store, so
    /// `total_items` stays what the clients stored and `curr_items` +
    /// `evictions` still equals it.
    #[test]
    fn promotions_are_not_counted_as_stores() {
        let mut e = zone_engine();
        fill(&mut e, 0, 1000, false);
        assert!(e.demote_all() > 0);
        for i in 0..1000u32 {
            let key = format!("key:{i:09}");
            assert!(
                e.touch(key.as_bytes(), crate::Expiry::Never).is_some(),
                "{key}"
            );
        }
        let s = e.stats();
        let z = s.zzone.expect("zone on").zone;
        assert!(z.promotions >= 900, "{z:?}");
        assert_eq!(s.total_items, 1000);
        assert_eq!(s.curr_items + s.evictions, s.total_items);
        e.validate();
    }

    /// Free memory goes to the N-zone first: a cache its items fit in
    /// uncompressed demotes none of them, whatever the split's target.
    /// Once it is full, the zone grows towards its target, its pages
    /// mostly live (a zone given its target at once held them a third
    /// live during a fill, and the N-zone evicted before the cache was
    /// full), and nothing is lost but what is counted evicted.
    #[test]
    fn free_memory_goes_to_the_n_zone_first() {
        let mut e = zone_engine();
        fill(&mut e, 0, 40_000, false);
        let s = e.stats();
        let z = s.zzone.expect("zone on");
        assert!(z.target_pages > 4, "{z:?}");
        assert_eq!((s.curr_items, s.evictions), (40_000, 0), "{z:?}");
        assert!(z.zone.pages <= 1 && z.zone.demotions == 0, "{z:?}");
        e.validate();
        fill(&mut e, 40_000, 260_000, false);
        let s = e.stats();
        let z = s.zzone.expect("zone on");
        assert!(z.zone.pages * 2 >= z.target_pages, "{z:?}");
        let held = z.zone.pages * crate::config::DEFAULT_PAGE_SIZE as u64;
        assert!(z.zone.stored_bytes * 2 >= held, "{z:?}");
        assert!(s.curr_items > 100_000, "{s:?}");
        assert_eq!(s.curr_items + s.evictions, s.total_items);
        e.validate();
    }

    fn target_pages(e: &Engine) -> u64 {
        e.stats().zzone.expect("zone on").target_pages
    }

    /// Incompressible values leave the zone no page, so it takes nothing
    /// from the N-zone; once values compress again it grows.
    #[test]
    fn a_zone_that_does_not_compress_keeps_no_page() {
        let config = Config {
            memory_limit: 16 << 20,
            zzone: true,
            zzone_target: 0,
            ..Config::default()
        };
        let mut e = Engine::new(config, Arc::new(Clock::new())).unwrap();
        fill(&mut e, 0, 200_000, true);
        let z = e.stats().zzone.expect("zone");
        assert_eq!(z.target_pages, 0, "{z:?}");
        assert_eq!(z.zone.pages, 0, "{z:?}");
        // It samples one demotion in PROBE_EVERY, and stages little: its
        // memory is its stage and metadata.
        let s = &z.zone;
        assert!(s.skipped > s.demotions * 8, "{z:?}");
        let most = crate::zzone::PROBE_STAGE + s.metadata_bytes as usize;
        assert!(s.memory_bytes as usize <= most, "{z:?}");
        e.validate();
        fill(&mut e, 200_000, 200_000, false);
        assert!(target_pages(&e) > 4, "{:?}", e.stats().zzone);
        e.validate();
    }
}
