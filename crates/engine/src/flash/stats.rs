//! What the tier reports (`stats flash`).

use std::sync::atomic::{AtomicU64, Ordering};

use super::stage::Area;
use super::tier::Flash;

/// The tier's part of `stats` (`stats flash`).
#[derive(Clone, Copy, Debug, Default)]
pub struct FlashStats {
    pub items: u64,
    pub staged: u64,
    pub slabs: u64,
    pub free_slabs: u64,
    pub hot_slabs: u64,
    pub cold_slabs: u64,
    /// Slabs the hot area may hold, and how often the split moved.
    pub hot_target: u64,
    pub split_moves: u64,
    /// Items read on flash a second time and put back in memory.
    pub recached: u64,
    /// DRAM the tier takes (index, stage, slab table, buffers).
    pub memory_bytes: u64,
    /// The containers' dictionary (or the samples it is trained on).
    pub dictionary_bytes: u64,
    pub index_bytes: u64,
    /// Item bytes admitted and written (their images), and what the
    /// containers holding them took.
    pub admitted: u64,
    /// Items taken into the stage (on their way to flash; only a GET finds
    /// them from then on), and items refused there.
    pub staged_total: u64,
    pub admit_refused: u64,
    pub raw_bytes: u64,
    pub stored_bytes: u64,
    /// Bytes written to the file, in all (slabs), and of items moved by
    /// the garbage collector.
    pub device_bytes: u64,
    pub moved_bytes: u64,
    pub containers_raw: u64,
    pub containers_compressed: u64,
    pub gc_recycled: u64,
    pub gc_evicted: u64,
    pub gc_promoted: u64,
    pub gc_demoted: u64,
    /// Items dropped: by the garbage collector, or pushed out of a full
    /// index bucket.
    pub evictions: u64,
    pub lookups: u64,
    pub hits: u64,
    pub stage_hits: u64,
    pub false_reads: u64,
    pub reads: u64,
    pub read_bytes: u64,
    pub read_errors: u64,
    pub io_errors: u64,
    pub write_errors: u64,
    /// How the last start found the file (`recover`).
    pub recovered_clean: bool,
    pub recovered_items: u64,
    pub recovery_us: u64,
    /// Read latency percentiles, microseconds.
    pub read_p50_us: u64,
    pub read_p90_us: u64,
    pub read_p99_us: u64,
}

impl Flash {
    pub fn stats(&self) -> FlashStats {
        let recovery = self.recovery();
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (staged, log) = {
            let stage = self.stage.lock();
            let log = self.log.lock();
            (
                stage.len() as u64,
                (
                    log.slabs.len() as u64,
                    log.free.len() as u64,
                    log.sealed(Area::Hot) as u64,
                    log.sealed(Area::Cold) as u64,
                ),
            )
        };
        let lat: Vec<u64> = c.latency.iter().map(get).collect();
        let pct = |p: f64| -> u64 {
            let total: u64 = lat.iter().sum();
            let want = (total as f64 * p).ceil() as u64;
            let mut seen = 0;
            for (i, n) in lat.iter().enumerate() {
                seen += n;
                if seen >= want && total > 0 {
                    return 1 << i;
                }
            }
            0
        };
        FlashStats {
            items: self.index.len() as u64,
            staged,
            slabs: log.0,
            free_slabs: log.1,
            hot_slabs: log.2,
            cold_slabs: log.3,
            hot_target: self.hot_target.load(Ordering::Relaxed) as u64,
            split_moves: get(&c.split_moves),
            recached: get(&c.recached),
            memory_bytes: self.memory_bytes() as u64,
            dictionary_bytes: self.dictionary_bytes() as u64,
            index_bytes: self.index_bytes.load(Ordering::Relaxed) as u64,
            admitted: get(&c.admitted),
            staged_total: get(&c.staged_total),
            admit_refused: get(&c.admit_refused),
            raw_bytes: get(&c.raw_bytes),
            stored_bytes: get(&c.stored_bytes),
            device_bytes: get(&c.device_bytes),
            moved_bytes: get(&c.moved_bytes),
            containers_raw: get(&c.containers_raw),
            containers_compressed: get(&c.containers_compressed),
            gc_recycled: get(&c.gc_recycled),
            gc_evicted: get(&c.gc_evicted),
            gc_promoted: get(&c.gc_promoted),
            gc_demoted: get(&c.gc_demoted),
            evictions: get(&c.evictions),
            lookups: get(&c.lookups),
            hits: get(&c.hits),
            stage_hits: get(&c.stage_hits),
            false_reads: get(&c.false_reads),
            reads: get(&c.reads),
            read_bytes: get(&c.read_bytes),
            read_errors: get(&c.read_errors),
            io_errors: get(&c.io_errors),
            write_errors: get(&c.write_errors),
            recovered_clean: recovery.clean,
            recovered_items: recovery.items,
            recovery_us: recovery.micros,
            read_p50_us: pct(0.5),
            read_p90_us: pct(0.9),
            read_p99_us: pct(0.99),
        }
    }
}
