//! The live miss-ratio curve on the server (issue 36; the curve itself is
//! `cachalot_engine::mrc`): requests of sampled keys are recorded under
//! one lock, shared by the workers, that a request outside the sample
//! never takes (one relaxed load of the threshold decides); the
//! maintainer tells the curve how many GETs the whole cache served and
//! missed, which sets the level its predictions are scaled to; `stats mrc`
//! and `/metrics` read it.

use std::sync::atomic::{AtomicU64, Ordering};

use cachalot_engine::mrc::{sampled, Access, Held, Home, LiveMrc};
use cachalot_engine::Cache;
use parking_lot::Mutex;

/// The curve, and what the maintainer last told it.
pub struct Curve {
    /// The curve's sampling threshold, read without its lock.
    gate: AtomicU64,
    /// Where the curve's index keeps a sampled key, read without its lock.
    home: Home,
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
            home: m.home(),
            inner: Mutex::new(m),
            counted: Mutex::new((0, 0)),
        }
    }

    /// Bytes of `-m` it takes at most.
    /// `parts`: with prefix stats on from the start (`-D`), and so the
    /// prefixes' own curves.
    pub fn memory_bytes(memory_limit: usize, parts: bool) -> usize {
        LiveMrc::memory_bytes(LiveMrc::keys_for(memory_limit), parts)
    }

    /// A request for the key of hash `h` comes soon: if the key is in the
    /// sample, start loading its entry (a sampled request's index line is
    /// cold, and the engine's lookup then hides its load).
    #[inline]
    pub fn prefetch(&self, h: u64) {
        if sampled(h, self.gate.load(Ordering::Relaxed)) {
            self.home.prefetch(h);
        }
    }

    /// One request for the key of hash `h`; `part` names its prefix, for
    /// the prefixes' own curves (asked only of a key new to the sample).
    #[inline]
    pub fn record(&self, h: u64, access: Access, now: u32, part: impl FnOnce() -> Option<u16>) {
        if !sampled(h, self.gate.load(Ordering::Relaxed)) {
            return;
        }
        let mut m = self.inner.lock();
        m.record(h, access, now, part);
        // Stored only when it moves: every worker reads the gate on every
        // request, and a store would take its line from their caches.
        let t = m.threshold();
        if self.gate.load(Ordering::Relaxed) != t {
            self.gate.store(t, Ordering::Relaxed);
        }
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

    /// `stats mrc`'s pairs, with what the engine holds now, then each
    /// prefix's own curve (`names`: the prefixes by id): its miss ratio
    /// in the sample, the LRU size it behaves as, and its miss ratio with
    /// half and twice that.
    pub fn report(&self, cache: &Cache, names: &[Box<[u8]>]) -> Vec<(String, String)> {
        let held = Held::of(&cache.stats());
        let (mut out, parts) = {
            let mut m = self.inner.lock();
            m.advance(cache.clock().now());
            (m.report(held), m.part_curves())
        };
        for (id, c) in parts {
            let Some(name) = names.get(id as usize) else {
                continue;
            };
            let mut escaped = Vec::new();
            crate::watchers::push_key(&mut escaped, name);
            let p = format!("mrc:prefix:{}", String::from_utf8_lossy(&escaped));
            let none = Held::default();
            let fig = |v: Option<f64>, digits: usize| format!("{:.*}", digits, v.unwrap_or(-1.0));
            out.push((format!("{p}:miss_ratio"), fig(c.observed(), 4)));
            out.push((format!("{p}:effective_bytes"), fig(c.capacity(none), 0)));
            out.push((
                format!("{p}:miss_ratio_50pct"),
                fig(c.predict(0.5, none), 4),
            ));
            out.push((
                format!("{p}:miss_ratio_200pct"),
                fig(c.predict(2.0, none), 4),
            ));
        }
        out
    }
}
