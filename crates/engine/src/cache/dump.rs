//! Walks over every tier a bounded batch at a time (issue 34): `lru_crawler
//! metadump` (both memory zones together in key-hash order, then the flash
//! tier) and the Z-zone's items a warm restart saves. Each step copies a
//! batch under the locks and hands it on without them, so no lock is held
//! for longer than a few hundred items or a few blocks however large the
//! dump.

use crate::api::{MetaItem, Tier};
use crate::cache::Cache;
use crate::flash::dump::FlashAt;
use crate::zzone::Refill;

/// Item bytes copied from the Z-zone per hold of its lock by a metadump
/// (a few decoded blocks: about what a GET's block copy holds it for,
/// times five; the engine's lock is held too).
const ZONE_DUMP_BYTES: usize = 8 << 10;

/// Container bytes a metadump reads from flash per step (four flash
/// pages: a few compressed containers, at least one), and staged item
/// bytes it copies per hold of the stage's lock.
const FLASH_DUMP_BYTES: usize = 16 << 10;

/// Where a metadump goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DumpAt {
    /// The next key hash of the memory tiers (both zones).
    Memory(u64),
    /// The next flash container, or staged item.
    Flash(FlashAt),
}

impl DumpAt {
    /// Where a dump starts.
    pub const START: DumpAt = DumpAt::Memory(0);
}

impl Cache {
    /// One step of `lru_crawler metadump` from `at`: the live items of a
    /// hash range of both memory zones, or of a few flash containers (or
    /// staged items), whose class `wanted` accepts (ids from 1), appended
    /// to `out`; returns where to go on, None once every tier is done.
    /// Each item is listed once: the memory zones are walked together by
    /// key hash ([`crate::Engine::metadump_range`]), and an item memory
    /// holds that flash holds too is listed from memory
    /// (`Engine::metadump_images`). Only an item that moves between
    /// memory and flash while the dump runs may, like one memcached's
    /// crawler passes as it moves, be listed twice or not at all. A
    /// flash step reads the device, holding no lock
    /// (`crate::flash::dump`).
    pub fn metadump_step(
        &self,
        at: DumpAt,
        wanted: impl Fn(u32) -> bool,
        out: &mut Vec<MetaItem>,
    ) -> Option<DumpAt> {
        match at {
            DumpAt::Memory(h) => {
                let next = self.lock().metadump_range(h, ZONE_DUMP_BYTES, wanted, out);
                match next {
                    Some(h) => Some(DumpAt::Memory(h)),
                    None if self.shared.flash.is_some() => Some(DumpAt::Flash(FlashAt::START)),
                    None => None,
                }
            }
            DumpAt::Flash(f) => {
                let flash = self.shared.flash.as_ref()?;
                let mut images = Vec::new();
                let next = flash.dump_step(f, FLASH_DUMP_BYTES, &mut images);
                if !images.is_empty() {
                    self.lock()
                        .metadump_images(&images, Tier::Flash, wanted, out);
                }
                next.map(DumpAt::Flash)
            }
        }
    }

    /// The Z-zone's live items with key hashes in `from..=to`, copied into
    /// `out` (item images back to back, `zzone::export::images` walks
    /// them) under one hold of the zone's lock, a leaf at a time until
    /// `budget` bytes; the hash to go on from, None once done (or without
    /// a Z-zone). See [`crate::zzone::Zone::export`].
    pub fn export_zone(&self, from: u64, to: u64, budget: usize, out: &mut Vec<u8>) -> Option<u64> {
        let zone = self.shared.zone.as_ref()?;
        let now = self.clock().now();
        zone.lock().export(from, to, now, budget, out)
    }

    /// Warm restart: put back the Z-zone's saved items in bulk
    /// ([`crate::Engine::refill_zone`]); the items it does not take are
    /// appended to `rejected`. Returns the items taken.
    pub fn refill_zone(&self, r: &mut Refill, images: &[u8], rejected: &mut Vec<u8>) -> u64 {
        self.lock().refill_zone(r, images, rejected)
    }

    /// The refill is over ([`crate::Engine::refill_zone_done`]).
    pub fn refill_zone_done(&self, r: &mut Refill) {
        self.lock().refill_zone_done(r);
    }

    /// The Z-zone's share of memory is at least `share`
    /// ([`crate::Engine::raise_zone_share`]).
    pub fn raise_zone_share(&self, share: f64) {
        self.lock().raise_zone_share(share);
    }

    /// Warm restart: offer an item to put back as a dictionary training
    /// sample, before the refill ([`Cache::train_zone`] trains them);
    /// false once there are enough (or without a Z-zone).
    pub fn zone_sample(&self, image: &[u8]) -> bool {
        let Some(zone) = self.shared.zone.as_ref() else {
            return false;
        };
        zone.lock().refill_sample(image)
    }

    /// The Z-zone's share of memory (None without one).
    pub fn zone_share(&self) -> Option<f64> {
        self.lock().zone_share()
    }

    /// The Z-zone's leaf blocks (0 without one).
    pub fn zone_blocks(&self) -> usize {
        self.shared
            .zone
            .as_ref()
            .map_or(0, |z| z.lock().stats().blocks as usize)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use proptest::prelude::*;

    use super::*;
    use crate::api::{Lookup, Store};
    use crate::clock::{Clock, Expiry};
    use crate::config::Config;

    /// What a dump lists of a key: its lines, tier, CAS and expiry.
    type Listed = (usize, Tier, u64, u32);

    /// Every item a whole metadump lists, and the steps it took.
    fn dump(c: &Cache) -> (HashMap<Vec<u8>, Listed>, usize) {
        let (mut seen, mut steps) = (HashMap::new(), 0);
        let mut at = Some(DumpAt::START);
        let mut items = Vec::new();
        while let Some(here) = at {
            items.clear();
            at = c.metadump_step(here, |_| true, &mut items);
            steps += 1;
            for it in &items {
                let e = seen
                    .entry(it.key.clone())
                    .or_insert((0, it.tier, it.cas, it.exptime));
                e.0 += 1;
            }
        }
        (seen, steps)
    }

    /// The bytes a metadump lists add up, per tier, to the engine's own
    /// counters (`stats prefixes` sums them by prefix): `bytes` for the
    /// N-zone exactly, the zone's decoded bytes within 1%.
    #[test]
    fn listed_bytes_add_up_to_the_counters() {
        let config = Config {
            memory_limit: 8 << 20,
            zzone: true,
            ..Config::default()
        };
        let c = Cache::new(config, Arc::new(crate::clock::Clock::new())).unwrap();
        let value = |i: u32| format!("{{\"id\":{i},\"bio\":\"{}\"}}", "lorem ipsum ".repeat(80));
        for i in 0..20_000u32 {
            c.store(&Store::set(format!("k{i}").as_bytes(), value(i).as_bytes()));
        }
        c.flush_zone(usize::MAX);
        let mut at = Some(DumpAt::START);
        let (mut items, mut sums) = (Vec::new(), [0u64; 3]);
        let mut counts = [0u64; 3];
        while let Some(here) = at {
            items.clear();
            at = c.metadump_step(here, |_| true, &mut items);
            for it in &items {
                let t = it.tier as usize;
                sums[t] += it.stored as u64;
                counts[t] += 1;
            }
        }
        let s = c.stats();
        let z = s.zzone.expect("zone").zone;
        assert!(z.items > 1000, "{z:?}");
        assert_eq!((counts[0] + counts[1], counts[1]), (s.curr_items, z.items));
        assert_eq!(sums[0], s.bytes, "N-zone");
        // The zone's count keeps the bytes of removals it has not matched
        // to their items yet, and of the frames' own headers.
        assert!(
            sums[1] <= z.raw_bytes && (z.raw_bytes - sums[1]) * 100 <= z.raw_bytes,
            "Z-zone: {} listed, {} counted",
            sums[1],
            z.raw_bytes
        );
    }

    /// An item memory holds that flash holds too is listed once, from
    /// memory (the tiers never keep both: a key written to memory leaves
    /// flash, `Engine::tiers_forget`; the copy here is forced in).
    #[test]
    fn a_key_in_memory_and_on_flash_is_listed_once_from_memory() {
        let path = std::env::temp_dir().join(format!("cachalot-dump-{}", std::process::id()));
        let config = Config {
            memory_limit: 8 << 20,
            flash: Some(crate::flash::FlashConfig::new(path.clone(), 8 << 20)),
            zzone: false,
            ..Config::default()
        };
        let c = Cache::new(config, Arc::new(Clock::new())).expect("cache");
        c.store(&Store::set(b"both", b"in memory"));
        c.store(&Store::set(b"memory", b"only"));
        let flash = c.shared.flash.as_ref().expect("flash is on");
        for (cas, key, value) in [
            (100, &b"both"[..], &b"on flash"[..]),
            (101, b"flash", b"only"),
        ] {
            let mut image = vec![0u8; crate::item::total_len(key.len(), value.len(), 0)];
            crate::item::write(
                &mut image,
                cas,
                0,
                1,
                crate::item::LIVE,
                0,
                0,
                key,
                &[value],
            );
            assert!(flash.admit(crate::hash::hash(key), &image));
        }
        // Both staged, then both written and indexed.
        for synced in [false, true] {
            if synced {
                assert!(c.flash_sync());
            }
            let (seen, _) = dump(&c);
            let tier = |k: &[u8]| seen.get(k).map(|s| (s.0, s.1));
            assert_eq!(tier(b"both"), Some((1, Tier::Memory)), "synced: {synced}");
            assert_eq!(tier(b"memory"), Some((1, Tier::Memory)));
            assert_eq!(tier(b"flash"), Some((1, Tier::Flash)), "synced: {synced}");
            assert_eq!(seen.len(), 3);
        }
        drop(c);
        for side in ["", ".index", ".journal", ".dict"] {
            let mut p = path.clone().into_os_string();
            p.push(side);
            let _ = std::fs::remove_file(p);
        }
    }

    /// A 16 MB cache with a Z-zone.
    fn zone_cache() -> Cache {
        let config = Config {
            memory_limit: 16 << 20,
            zzone: true,
            ..Config::default()
        };
        Cache::new(config, Arc::new(Clock::new())).expect("cache")
    }

    /// A dump that runs while items move both ways between the zones
    /// (demoted by other keys' SETs, promoted by reads) lists each of them
    /// once: every key still there when the dump ends was there all along
    /// (nothing sets it again), so it is listed exactly once; none twice.
    #[test]
    fn a_dump_during_moves_lists_each_item_once() {
        let c = Arc::new(zone_cache());
        let key = |i: u64| format!("stable:{i:08}").into_bytes();
        let value = |i: u64| {
            format!(
                "{{\"id\":{i},\"v\":\"{}\"}}",
                "ab".repeat((i % 150) as usize)
            )
        };
        let n = 80_000u64;
        for i in 0..n {
            c.store(&Store::set(&key(i), value(i).as_bytes()));
            if i % 1000 == 999 {
                c.maintain(512);
            }
        }
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let churn = {
            let (c, stop) = (c.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let k = format!("churn:{i:08}");
                    c.store(&Store::set(k.as_bytes(), value(i).as_bytes()));
                    // Reads bring stable keys back from the Z-zone.
                    c.get(&key(i.wrapping_mul(7919) % n), Lookup::GET, |_| ());
                    if i % 500 == 499 {
                        c.maintain(512);
                    }
                    i += 1;
                }
                i
            })
        };
        let mut moved = 0;
        let mut listed: HashMap<Vec<u8>, usize> = HashMap::new();
        for _ in 0..3 {
            listed.clear();
            let before = c.lock().stats().zzone.expect("zone").zone.demotions;
            let (seen, _) = dump(&c);
            moved += c.lock().stats().zzone.expect("zone").zone.demotions - before;
            for (k, s) in seen.into_iter().filter(|(k, _)| k.starts_with(b"stable:")) {
                listed.insert(k, s.0);
            }
            for i in 0..n {
                let times = listed.get(&key(i)).copied().unwrap_or(0);
                let there = c.get(&key(i), Lookup::PEEK, |it| it.is_some());
                assert!(times <= 1, "{i} listed {times} times");
                assert!(!there || times == 1, "{i} is there but was not listed");
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let sets = churn.join().expect("churn");
        assert!(
            moved > 1000,
            "{moved} demotions during the dumps ({sets} sets)"
        );
        assert!(
            listed.len() as u64 > n / 4,
            "{} stable keys listed",
            listed.len()
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(6))]

        /// With the Z-zone holding items, `lru_crawler metadump` lists
        /// every live key once, whichever tier holds it, with the CAS and
        /// expiry a GET sees; deleted, replaced and promoted keys too.
        #[test]
        fn metadump_lists_each_live_key_once_across_tiers(
            n in 60_000u32..100_000,
            seed in any::<u64>(),
            deletes in 0u32..8,
            reads in 0u32..8,
        ) {
            let c = zone_cache();
            let mut x = seed | 1;
            let mut next = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let key = |i: u64| format!("dump:{i:08}").into_bytes();
            for i in 0..u64::from(n) {
                let r = next();
                let value = format!("{{\"id\":{i},\"v\":\"{}\"}}", "ab".repeat((r % 200) as usize));
                let expiry = match r % 5 {
                    0 => c.clock().expiry(600),
                    _ => Expiry::Never,
                };
                c.store(&Store { expiry, ..Store::set(&key(i), value.as_bytes()) });
                // Now and then: delete, re-set or read (a promotion) an
                // older key.
                let old = key(next() % (i + 1));
                match next() % 100 {
                    d if d < u64::from(deletes) => {
                        c.delete(&old, 0);
                    }
                    d if d < u64::from(deletes + reads) => {
                        c.get(&old, Lookup::GET, |_| ());
                    }
                    d if d < u64::from(deletes + reads + 3) => {
                        c.store(&Store::set(&old, b"replaced"));
                    }
                    _ => {}
                }
                if i % 1000 == 999 {
                    c.maintain(512);
                }
            }
            let zs = c.lock().stats().zzone.expect("zone").zone;
            let zone = zs.items;
            prop_assert!(zone > 1000, "the zone holds {zone}");
            let (seen, steps) = dump(&c);
            let mut live = 0;
            for i in 0..u64::from(n) {
                let k = key(i);
                let got = c.get(&k, Lookup::PEEK, |it| it.map(|it| (it.cas, it.expiry)));
                let listed = seen.get(&k);
                match (got, listed) {
                    (None, None) => {}
                    (Some((cas, expiry)), Some(&(lines, _, listed_cas, exptime))) => {
                        live += 1;
                        prop_assert_eq!(lines, 1, "{} listed {} times", i, lines);
                        prop_assert_eq!(cas, listed_cas);
                        let want = match expiry {
                            Expiry::At(t) => t,
                            _ => 0,
                        };
                        prop_assert_eq!(want, exptime);
                    }
                    (got, listed) => prop_assert!(false, "{i}: {got:?} but listed {listed:?}"),
                }
            }
            prop_assert_eq!(live, seen.len(), "no key listed that is not there");
            let in_zone = seen.values().filter(|s| s.1 == Tier::Zzone).count() as u64;
            // The zone counts a removal it has not matched to its item yet
            // (a SET over a key it holds) only once the block is rewritten.
            prop_assert!(
                in_zone <= zone && zone - in_zone <= zs.pending,
                "{in_zone} listed in the zone, which counts {zone} ({} pending)",
                zs.pending
            );
            prop_assert!(seen.values().any(|s| s.1 == Tier::Memory));
            // A page, or 16 KB of the zone's items, a step.
            prop_assert!(steps as u64 > 1 + zone / 200, "{steps} steps");
        }
    }
}
