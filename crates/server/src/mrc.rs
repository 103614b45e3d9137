//! The live miss-ratio curve on the server (issue 36; the curve itself is
//! `cachalot_engine::mrc`): requests of sampled keys are recorded under
//! one lock, shared by the workers, that a request outside the sample
//! never takes (one relaxed load of the threshold decides); the
//! maintainer tells the curve how many GETs the whole cache served and
//! missed, which sets the level its predictions are scaled to; `stats mrc`
//! and `/metrics` read it.

use std::sync::atomic::{AtomicU64, Ordering};

use cachalot_engine::mrc::{sampled, Access, Held, LiveMrc};
use cachalot_engine::Cache;
use parking_lot::Mutex;

/// The curve, and what the maintainer last told it.
pub struct Curve {
    /// The curve's sampling threshold, read without its lock.
    gate: AtomicU64,
    inner: Mutex<LiveMrc>,
    /// GETs and misses of the whole cache at the last count.
    counted: Mutex<(u64, u64)>,
}

impl std::fmt::Debug for Curve {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Curve").finish_non_exhaustive()
    }
}

impl Curve {
    /// The curve of a cache of `memory_limit` bytes.
    pub fn new(memory_limit: usize, now: u32) -> Curve {
        let m = LiveMrc::for_memory(memory_limit, now);
        Curve {
            gate: AtomicU64::new(m.threshold()),
            inner: Mutex::new(m),
            counted: Mutex::new((0, 0)),
        }
    }

    /// Bytes of `-m` it takes at most.
    pub fn memory_bytes(memory_limit: usize) -> usize {
        LiveMrc::memory_bytes(LiveMrc::keys_for(memory_limit))
    }

    /// One request for the key of hash `h`.
    #[inline]
    pub fn record(&self, h: u64, access: Access, now: u32) {
        if !sampled(h, self.gate.load(Ordering::Relaxed)) {
            return;
        }
        let mut m = self.inner.lock();
        m.record(h, access, now);
        self.gate.store(m.threshold(), Ordering::Relaxed);
    }

    /// The whole cache has served `gets` GETs and missed `misses` of them
    /// so far (counters that `stats reset` may clear).
    pub fn count_totals(&self, gets: u64, misses: u64, now: u32) {
        let mut last = self.counted.lock();
        let (dg, dm) = match gets >= last.0 && misses >= last.1 {
            true => (gets - last.0, misses - last.1),
            false => (gets, misses),
        };
        *last = (gets, misses);
        drop(last);
        self.inner.lock().count_gets(dg as f64, dm as f64, now);
    }

    /// `stats mrc`'s pairs, with what the engine holds now.
    pub fn report(&self, cache: &Cache) -> Vec<(String, String)> {
        let held = Held::of(&cache.stats());
        let mut m = self.inner.lock();
        m.advance(cache.clock().now());
        m.report(held)
    }
}
