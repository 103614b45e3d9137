//! Walks over every tier a bounded batch at a time (issue 34): `lru_crawler
//! metadump` (the N-zone's pages, then the Z-zone's leaves, then the flash
//! tier) and the Z-zone's items a warm restart saves. Each step copies a
//! batch under a tier's lock and hands it on without it, so neither lock
//! is held for longer than a page or a few blocks however large the dump.

use crate::api::{MetaItem, Tier};
use crate::cache::Cache;

/// Item bytes copied from the Z-zone per hold of its lock by a metadump
/// (a few decoded blocks: about what a GET's block copy holds it for,
/// times ten).
const ZONE_DUMP_BYTES: usize = 16 << 10;

/// Where a metadump goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DumpAt {
    /// The next slab page.
    Pages(usize),
    /// The next Z-zone key hash.
    Zone(u64),
}

impl DumpAt {
    /// Where a dump starts.
    pub const START: DumpAt = DumpAt::Pages(0);
}

impl Cache {
    /// One step of `lru_crawler metadump` from `at`: the live items of a
    /// page, or of a few Z-zone blocks, whose class `wanted` accepts (ids
    /// from 1), appended to `out`; returns where to go on, None once every
    /// tier is done. Each item is listed once: an item is in one tier at
    /// a time (a dump that runs while items move between tiers may, like
    /// memcached's crawler, list a moving item twice or not at all).
    pub fn metadump_step(
        &self,
        at: DumpAt,
        wanted: impl Fn(u32) -> bool,
        out: &mut Vec<MetaItem>,
    ) -> Option<DumpAt> {
        match at {
            DumpAt::Pages(p) => Some(match self.lock().metadump_page(p, wanted, out) {
                Some(next) => DumpAt::Pages(next),
                None => DumpAt::Zone(0),
            }),
            DumpAt::Zone(h) => {
                let mut images = Vec::new();
                let next = self.export_zone(h, u64::MAX, ZONE_DUMP_BYTES, &mut images);
                // The class of each: the engine's lock, after the zone's.
                if !images.is_empty() {
                    self.lock()
                        .metadump_images(&images, Tier::Zzone, wanted, out);
                }
                next.map(DumpAt::Zone)
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

    /// The Z-zone's leaf blocks (0 without one).
    pub fn zone_blocks(&self) -> usize {
        self.shared
            .zone
            .as_ref()
            .map_or(0, |z| z.lock().stats().blocks as usize)
    }
}
