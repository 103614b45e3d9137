//! The tier's settings: `--flash-path`, `--flash-size` and the
//! `-o flash_*` / `ext_*` options.

use std::path::PathBuf;

use crate::codec::Codec;

/// Flash hits per recache at most by default (`Flash::recache_allowed`;
/// memcached's `ext_recache_rate` defaults to 2000, for a tier that keeps
/// every item's header in memory and recaches at no memory cost).
const RECACHE_EVERY: u64 = 8;

/// `--flash-path`, `--flash-size` and the `-o flash_*` / `ext_*` options.
#[derive(Clone, Debug)]
pub struct FlashConfig {
    pub path: PathBuf,
    pub size: u64,
    /// Bytes per second the writer may write (0: no limit). Items that
    /// arrive faster wait in the stage, and are not admitted when it is
    /// full: the admission policy that keeps the budget.
    pub write_rate: u64,
    /// The same budget as drive writes per day (0: none), for SSDs rated
    /// in them; the lower of the two applies.
    pub write_dwpd: f64,
    /// The hot area's share of the slabs, percent (SlimCache starts at 5).
    pub hot_percent: u8,
    /// Smallest item image admitted (memcached's `ext_item_size`).
    pub item_min: usize,
    /// memcached's `ext_item_age`: items idle longer than this many
    /// seconds go to flash ahead of eviction (None: only on eviction, as
    /// memcached's default, which is unlimited).
    pub item_age: Option<u32>,
    /// Flash hits per recache at most (memcached's `ext_recache_rate`:
    /// `Flash::recache_allowed`).
    pub recache_rate: u64,
    /// The cost of a miss, microseconds, for items that carry none
    /// (`split`).
    pub miss_cost_us: u64,
    /// Bytes the stage may hold (0: 1/32 of `-m`, within 2 MB..64 MB: an
    /// N-zone page emptied at once, 1 MB, must fit).
    pub stage_bytes: usize,
    /// Most DRAM the tier may take (0: half of `-m`): past it, the index
    /// stops growing and new entries push old ones out.
    pub memory_cap: usize,
    pub codec: Codec,
    /// zstd's level for containers, compressed on the writer's thread (the
    /// Z-zone compresses on the request path, at 1). 3 stores the lab's
    /// tweets 11% smaller than 1 for 14% more CPU; 6, 4% smaller again,
    /// for three times the CPU (docs/benchmarks-history.md).
    pub zstd_level: i32,
}

impl FlashConfig {
    /// The stage's size: as given, else 1/32 of `-m` within 2..64 MB.
    pub fn stage_bytes_for(&self, memory_limit: usize) -> usize {
        match self.stage_bytes {
            0 => (memory_limit / 32).clamp(2 << 20, 64 << 20),
            n => n,
        }
    }

    /// The write budget in bytes a second (0: none).
    pub fn effective_write_rate(&self) -> u64 {
        let dwpd = (self.write_dwpd * self.size as f64 / 86_400.0) as u64;
        match (self.write_rate, dwpd) {
            (0, d) => d,
            (r, 0) => r,
            (r, d) => r.min(d),
        }
    }

    pub fn new(path: PathBuf, size: u64) -> FlashConfig {
        FlashConfig {
            path,
            size,
            write_rate: 0,
            write_dwpd: 0.0,
            hot_percent: 5,
            miss_cost_us: 1000,
            item_min: 0,
            item_age: None,
            recache_rate: RECACHE_EVERY,
            // 0: the engine sizes these from `-m`.
            stage_bytes: 0,
            memory_cap: 0,
            codec: Codec::Zstd,
            zstd_level: 3,
        }
    }
}
