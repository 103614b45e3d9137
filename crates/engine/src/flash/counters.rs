//! The tier's counters, shared by its threads as relaxed atomics (read
//! together by `Flash::stats`).

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Default)]
pub(super) struct Counters {
    pub(super) admitted: AtomicU64,
    pub(super) staged_total: AtomicU64,
    pub(super) admit_refused: AtomicU64,
    pub(super) raw_bytes: AtomicU64,
    pub(super) stored_bytes: AtomicU64,
    pub(super) device_bytes: AtomicU64,
    pub(super) moved_bytes: AtomicU64,
    pub(super) containers_raw: AtomicU64,
    pub(super) containers_compressed: AtomicU64,
    pub(super) gc_recycled: AtomicU64,
    pub(super) gc_evicted: AtomicU64,
    pub(super) gc_promoted: AtomicU64,
    pub(super) gc_demoted: AtomicU64,
    pub(super) evictions: AtomicU64,
    pub(super) lookups: AtomicU64,
    pub(super) hits: AtomicU64,
    pub(super) stage_hits: AtomicU64,
    pub(super) false_reads: AtomicU64,
    pub(super) reads: AtomicU64,
    pub(super) read_bytes: AtomicU64,
    pub(super) read_errors: AtomicU64,
    pub(super) io_errors: AtomicU64,
    pub(super) write_errors: AtomicU64,
    /// Read latencies: bucket i counts reads of under 2^i microseconds.
    pub(super) latency: [AtomicU64; 24],
    /// The split's window (`split`): lookups, hits and their time per
    /// area, and the miss costs items carried.
    pub(super) win_lookups: AtomicU64,
    pub(super) win_hot_hits: AtomicU64,
    pub(super) win_cold_hits: AtomicU64,
    pub(super) win_hot_us: AtomicU64,
    pub(super) win_cold_us: AtomicU64,
    pub(super) win_cost_us: AtomicU64,
    pub(super) win_costs: AtomicU64,
    pub(super) split_moves: AtomicU64,
    pub(super) recached: AtomicU64,
    pub(super) hits_since_recache: AtomicU64,
}

/// One more on counter `c` (relaxed: statistics). Inline: every flash
/// lookup bumps two, from the modules that read.
#[inline]
pub(super) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}
