//! The split of memory between the N-zone and the Z-zone (zExpander
//! §3.3.1; issue 11): the controller's state and its rules. The engine's
//! side of the Z-zone (demotion, promotion, feeding the zone pages) is
//! `engine/zone.rs`.
//!
//! The zones share `-m`, the Z-zone's pages counted beside the index.
//! Each window of [`WINDOW_OPS`] requests, the share served by the N-zone
//! is compared with the target (`-o zzone_target`, 90%): below it the
//! Z-zone gives up 3% of memory, above it takes 3% more.
//! As in zExpander, a request is served by the Z-zone when it has to read
//! a block (a hit there, or a false positive of its content filter), and
//! by the N-zone otherwise: a GET hit there, a GET miss the filter answers,
//! a store (stores always write the N-zone).
//! That rule is for speed, and alone it costs hits: a zone serving most
//! reads is shrunk however many of its evictions come back. So the split
//! also reads the zone's regret ([`super::regret`]): misses on keys the
//! zone evicted within its last step of memory. Above
//! [`REGRET_SHARE`] of a window's requests, one more step would have kept
//! them, and the zone grows whatever the N-zone's share; it gives memory
//! up for speed only while they are rare, so a smaller zone costs hardly
//! a hit (reading back a `-m 64` fill shrank it from 90% to 42% and lost
//! 600,000 of 1.1 M items before).
//! zExpander also counts demotions as Z-zone work; here they are not: each
//! follows a miss, which costs the client a backend fetch far longer than
//! a block rewrite, and counted they shrink the Z-zone in any workload
//! with more than a few percent of misses (to 2% of memory at 40% misses
//! in the lab, docs/benchmarks-history.md), exactly where it would help most.

use std::sync::Arc;

use super::cell::ZoneCell;
use super::config::{ZoneConfig, SAMPLE_SHARE};
use super::stats::ZoneStats;
use super::zone::Zone;
use crate::config::Config;
use crate::slab::PageId;

/// Requests per adaptation window (zExpander: one minute).
pub const WINDOW_OPS: u64 = 100_000;
/// The split moves by this share of memory per window (zExpander: 3%).
const STEP: f64 = 0.03;
/// Within this of the target, the split stays.
const SLACK: f64 = 0.02;
/// Regret (misses one more step of zone would have saved) above this share
/// of a window's requests grows the zone, and below it lets it shrink.
/// Each step the zone gives up costs at most about this much hit ratio,
/// and the steps cost more as the zone shrinks, so it stops early.
const REGRET_SHARE: f64 = 0.001;
/// The Z-zone's share of memory at start, and the most it may take.
const START_SHARE: f64 = 0.5;
const MAX_SHARE: f64 = 0.9;
/// Pages below its target the Z-zone may be while drains wait for its
/// writer.
const GROW_SLACK: usize = 4;
/// Demotions wait to be packed in a stage of up to 1/[`STAGE_SHARE`] of
/// `-m` ([`MAX_STAGE`] at most), so that the writer, not the request that
/// evicted, rewrites the blocks, and items of one block that wait together
/// go in one rewrite. What it saves grows with its items per block, so it
/// grows with `-m`: at 1/64, YCSB-B (`cachalot-lab sim`, 1 M keys, `-m
/// 64`) rewrote 290 K blocks for 579 K demotions where 1/256 rewrote 454 K
/// for 561 K, at the same hit ratio; at 1/32 the uncompressed items cost
/// hits when the zone is large (docs/benchmarks-history.md).
const STAGE_SHARE: usize = 64;
const MAX_STAGE: usize = 64 << 20;
/// The regret's ghost takes at most 1/[`GHOST_SHARE`] of `-m`: at `-m 64`
/// 16,384 sampled keys, 2.6 windows of 100-byte JSON items.
const GHOST_SHARE: usize = 512;
const MAX_GHOST: usize = 8 << 20;

pub(crate) struct Zzone {
    /// The zone, shared with GETs that read it without the engine lock
    /// (`crate::Cache::get`); the engine takes this lock inside its own.
    pub zone: Arc<ZoneCell>,
    /// Share of `-m` the Z-zone may hold.
    share: f64,
    /// N-served and Z-served requests, and the zone's regret, when the
    /// window began.
    window: (u64, u64, u64),
    /// Memory the zones share (the last [`Zzone::retarget`]).
    available: usize,
    /// A promoted item's image, copied out of the zone.
    pub(crate) image: Vec<u8>,
    /// A writer thread packs the stage and shrinks the zone
    /// ([`crate::Cache::flush_zone`]); without one, `maintain` shrinks it.
    pub(crate) writer: bool,
    /// Evictions are not demoted (the budget is being enforced: the items
    /// of a whole page go at once, and demoting them would be thousands of
    /// block rewrites under the engine lock).
    pub(crate) paused: bool,
    /// The N-zone page being drained for the zone, if any.
    pub(crate) drain: Option<PageId>,
}

/// See [`Zzone::pace`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum DrainPace {
    Go,
    Wait,
}

/// The Z-zone's part of `stats`.
#[derive(Clone, Copy, Debug, Default)]
pub struct ZzoneStats {
    pub zone: ZoneStats,
    /// The Z-zone's share of memory now (percent).
    pub share_percent: u32,
    pub target_pages: u64,
    /// Pages the zone needs now and has not been granted yet
    /// ([`crate::zzone::Zone::pressed_pages`]).
    pub pressed_pages: u64,
    /// The N-zone's locality benchmark, in demotions (its item count).
    pub benchmark: u64,
}

impl Zzone {
    pub(crate) fn new(config: &Config, page_size: usize) -> Option<Box<Zzone>> {
        if !config.zzone || !config.evict {
            return None;
        }
        let mut z = Box::new(Zzone {
            zone: Arc::new(ZoneCell::new(Zone::new(ZoneConfig {
                block_bytes: config.zzone_block,
                max_deltas: config.zzone_deltas.min(super::frames::MAX_DELTAS),
                codec: config.zzone_codec,
                page_size,
                dict_samples: config.zzone_dict_samples,
                sample_bytes: (config.memory_limit / SAMPLE_SHARE).max(64 << 10),
                stage_bytes: (config.memory_limit / STAGE_SHARE).clamp(4 << 10, MAX_STAGE),
                ghost_bytes: (config.memory_limit / GHOST_SHARE).clamp(8 << 10, MAX_GHOST),
                large_bytes: config.item_size_max.min(page_size),
            }))),
            share: if config.zzone_target == 0 {
                MAX_SHARE
            } else {
                START_SHARE
            },
            window: (0, 0, 0),
            available: config.memory_limit,
            image: Vec::new(),
            writer: false,
            paused: false,
            drain: None,
        });
        z.retarget(config.memory_limit);
        Some(z)
    }

    /// `stats reset`: the zone's counters, and a new window.
    pub(crate) fn reset_stats(&mut self) {
        self.zone.lock().reset_stats();
        self.window = (0, 0, 0);
    }

    /// Pages for the Z-zone: its share of the memory the rest of the engine
    /// (index, policy, rebalancer) leaves.
    pub(crate) fn retarget(&mut self, available: usize) {
        let cell = self.zone.clone();
        self.retarget_locked(&mut cell.lock(), available);
    }

    /// [`Zzone::retarget`] with the zone's lock held.
    fn retarget_locked(&mut self, zone: &mut Zone, available: usize) {
        self.available = available;
        let page = zone.config().page_size;
        let mut pages = (self.share * available as f64) as usize / page;
        // A zone whose blocks do not compress holds fewer items than the
        // N-zone would in its pages, for a block rewrite per demotion: it
        // holds none (`config::PROBE_EVERY`).
        if !zone.worth_growing() {
            pages = 0;
        }
        zone.set_target_pages(pages);
    }

    /// The share of memory the Z-zone may hold now.
    pub(crate) fn share(&self) -> f64 {
        self.share
    }

    /// Set that share (a warm restart's: the last run's, or what the
    /// items it put back take), within what it may be.
    pub(crate) fn set_share(&mut self, share: f64) {
        if share.is_finite() {
            self.share = share.clamp(0.0, MAX_SHARE);
        }
    }

    /// The most pages the zone may hold of `available` bytes.
    pub(crate) fn most_pages(&self, available: usize) -> usize {
        let page = self.zone.lock().config().page_size;
        (MAX_SHARE * available as f64) as usize / page
    }

    /// Once a window of [`WINDOW_OPS`] requests is over, move the share
    /// towards the target (`-o zzone_target`, percent; 0: the Z-zone takes
    /// all it may). `at_n_zone`: the requests the N-zone served (GET hits
    /// and stores); the zone's own figures add the misses its filter
    /// answered.
    fn adapt_locked(&mut self, zone: &mut Zone, at_n_zone: u64, target: u8) {
        let zs = zone.stats();
        let served_n = at_n_zone + zs.filtered;
        let served_z = zs.hits + zs.false_positives;
        let (n0, z0, r0) = self.window;
        let (dn, dz) = (served_n.saturating_sub(n0), served_z.saturating_sub(z0));
        if dn + dz >= WINDOW_OPS {
            self.window = (served_n, served_z, zs.ghost_hits);
            let regret = zs.ghost_hits.saturating_sub(r0) as f64 / (dn + dz) as f64;
            let at_n = dn as f64 / (dn + dz) as f64;
            let want = target as f64 / 100.0;
            if target == 0 || at_n > want + SLACK || regret > REGRET_SHARE {
                self.share = (self.share + STEP).min(MAX_SHARE);
            } else if at_n < want - SLACK {
                self.share = (self.share - STEP).max(0.0);
            }
            // The window of the regret: the items one step of memory holds
            // in the zone as it is now.
            let step_pages = STEP * self.available as f64 / zone.config().page_size as f64;
            let per_page = zs.items as f64 / zs.pages.max(1) as f64;
            zone.set_regret_window((step_pages * per_page) as u64);
        }
    }

    /// The maintainer's step (the split adapted once a window is over,
    /// then [`Zzone::retarget`]),
    /// with `f` run on the zone after them under the same hold; false,
    /// with nothing done, if the zone's writer holds the lock: the
    /// caller holds the engine's lock, which requests need, and rather
    /// than wait on the writer's block rewrite it comes back at its next
    /// step (issue 34).
    pub(crate) fn try_step(
        &mut self,
        at_n_zone: u64,
        target: u8,
        available: usize,
        f: impl FnOnce(&mut Zone),
    ) -> bool {
        let cell = self.zone.clone();
        let Some(mut zone) = cell.try_lock() else {
            return false;
        };
        self.adapt_locked(&mut zone, at_n_zone, target);
        // Every step, so that pages the zone gave the N-zone in a pinch
        // come back to it.
        self.retarget_locked(&mut zone, available);
        f(&mut zone);
        true
    }

    /// How a page drain goes on while its items would be demoted: at once
    /// while the Z-zone's writer keeps up; while its stage is over its
    /// limit, it waits for the writer, unless the zone is more than
    /// [`GROW_SLACK`] pages below its target (a cache just full, the split
    /// moving far): then it goes on, and the threads that release the
    /// engine lock pack the stage (`Cache::help_zone_writer`), since a zone
    /// that waited for a writer at `SCHED_IDLE` would not grow while the
    /// server is busy. (Shedding instead, the drained page's items evicted
    /// whole, cost YCSB-B 0.048 of hit ratio against `zzone=0` once the
    /// zone grew only into a full cache: docs/benchmarks-history.md.)
    /// Over its limit, not half full: the batched writer leaves the stage
    /// half full, and drains waiting on that kept a growing zone
    /// [`GROW_SLACK`] pages short of its target (YCSB-B proto, `-m 40`:
    /// 0.14-0.16 of misses against the lab's 0.12). That pace is safe for
    /// values that do not compress only because no drain starts before
    /// the zone has judged them (`Zone::judged`): drains sent a 4 MB scan
    /// of random values at `-m 8` into a zone that then kept none.
    pub(crate) fn pace(&self) -> DrainPace {
        let zone = self.zone.lock();
        let near_target = zone.pages() + GROW_SLACK >= zone.target_pages();
        match self.writer && zone.stage_over() && near_target {
            true => DrainPace::Wait,
            false => DrainPace::Go,
        }
    }

    /// The Z-zone's part of `stats`, with the N-zone's locality benchmark
    /// (its item count).
    pub(crate) fn stats(&self, benchmark: u64) -> ZzoneStats {
        let zone = self.zone.lock();
        ZzoneStats {
            zone: zone.stats(),
            share_percent: (self.share * 100.0).round() as u32,
            target_pages: zone.target_pages() as u64,
            pressed_pages: zone.pressed_pages() as u64,
            benchmark,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One window in which the N-zone served `at_n` of the requests and
    /// misses on keys the zone evicted lately were `regret` of them.
    fn window(z: &mut Zzone, served_n: &mut u64, at_n: f64, regret: f64) {
        let n = (at_n * WINDOW_OPS as f64) as u64;
        *served_n += n;
        {
            let mut zone = z.zone.lock();
            zone.stats.hits += WINDOW_OPS - n;
            zone.stats.ghost_hits += (regret * WINDOW_OPS as f64) as u64;
        }
        let available = z.available;
        assert!(z.try_step(*served_n, 90, available, |_| {}));
    }

    #[test]
    fn the_zone_gives_memory_up_for_speed_only_while_it_costs_no_hits() {
        let config = Config {
            memory_limit: 64 << 20,
            zzone: true,
            ..Config::default()
        };
        let mut z = Zzone::new(&config, 1 << 20).expect("zone on");
        let mut served_n = 0;
        // The N-zone serves more than its target: the zone grows to its
        // most.
        for _ in 0..20 {
            window(&mut z, &mut served_n, 0.99, 0.0);
        }
        assert!((z.share - MAX_SHARE).abs() < 1e-9, "{}", z.share);
        // A read-back: every request a zone hit or a miss, and misses on
        // keys the zone just evicted. The zone keeps its memory.
        for _ in 0..20 {
            window(&mut z, &mut served_n, 0.1, 0.02);
        }
        assert!((z.share - MAX_SHARE).abs() < 1e-9, "{}", z.share);
        // Its evictions stop coming back: it shrinks for speed, a step a
        // window.
        for _ in 0..5 {
            window(&mut z, &mut served_n, 0.1, REGRET_SHARE / 4.0);
        }
        assert!(
            (z.share - (MAX_SHARE - 5.0 * STEP)).abs() < 1e-9,
            "{}",
            z.share
        );
        // They come back: it grows again though the N-zone is still short
        // of its share.
        window(&mut z, &mut served_n, 0.5, REGRET_SHARE * 4.0);
        assert!(
            (z.share - (MAX_SHARE - 4.0 * STEP)).abs() < 1e-9,
            "{}",
            z.share
        );
    }
}
