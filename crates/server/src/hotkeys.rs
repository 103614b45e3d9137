//! Hot keys (issue 36): which keys are asked for most, right now. Served
//! by `stats hotkeys [N]`, `watch hotkeys` and the metrics endpoint.
//!
//! Each worker counts its own requests in a [`Sketch`]: a count-min sketch
//! with conservative update (Estan & Varghese, SIGCOMM'02) of 4 rows of
//! 1024 16-bit counters, blocked: a key's counter in each row lies in one
//! 64-byte line, 8 KB in all. On a pipelined load most of the sketch's
//! cost was its counter loads, which missed the cache: two rows of 4096
//! (32 KB) cost two misses a request. One line a key costs one, and 8 KB
//! stays in the core's cache (docs/benchmarks.md). Blocking ties a key's
//! counters together: two keys of one line share each row's counter with
//! a chance of one in the row's counters in the line, so the rows must be
//! several. With two rows of eight, a tail key shared both its counters
//! with a given hot key once in 8,192 keys, and at 120,000 requests a
//! second over a million keys such keys came in with hot keys' counts and
//! crowded the true top out of the table; four rows of eight make it one
//! in 524,288 (`a_long_tail_does_not_crowd_out_the_top`). Sixteen bits are
//! enough where counts halve each second and at most [`COUNTED_PER_SEC`]
//! requests a second are counted. The sketch keeps the [`TRACKED`] keys
//! with the largest estimates. A
//! key whose estimate reaches the smallest tracked count takes that entry
//! (Space-Saving's replacement, Metwally et al., ICDT'05, fed by the
//! sketch's estimate rather than the evicted count); from then on its
//! count is exact, and so are its hits and misses. A request costs a hash,
//! four counter updates in one line and a compare; a key above the
//! smallest count adds a probe of the tracked keys' hash table. Nothing
//! allocates after start: a tracked key is copied into its entry's fixed
//! buffer.
//!
//! A worker that serves more than [`COUNTED_PER_SEC`] requests a second
//! counts one in 2^k of them, each with weight 2^k, k set each second from
//! the last one's rate: a hot key's share of a million requests a second
//! is as well known from a sixteenth of them, and the sketch's cost on a
//! pipelined load (where it was 3% of the server's throughput) falls with
//! them. Which requests are counted follows a Weyl sequence, so no request
//! pattern (a client that alternates two keys) hides from it.
//!
//! Counts decay by half at each second of the server clock, so they
//! describe the last two seconds or so: when the hot set changes, a new
//! key ten times colder than the old hottest passes it in about 3.5 s
//! (2^-3.4 = 1/10.6; a slower decay, 2^-1/2 a second, took 6-8 s). A rate
//! is a decayed count divided by the time its weights add up to
//! ([`window`]).
//!
//! `stats hotkeys` merges the workers' entries on demand, ranking keys by
//! their own requests: an entry's count less what the sketch credited it
//! with when it was admitted (Space-Saving's guaranteed count). A tail key
//! that shares both its counters with hot keys is admitted with their
//! count, and must not be ranked with it.

use cachalot_engine::clock::{Clock, RelTime};
use cachalot_engine::config::KEY_MAX_LEN;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Requests a second a worker's sketch counts at most (above it, it counts
/// one in 2^k): a top-ten key of a Zipf load keeps hundreds of counted
/// requests a second, a few percent of error in its rate.
const COUNTED_PER_SEC: u64 = 1 << 17;
/// The most a sketch thins its requests: one in 2^16.
const MAX_THIN: u32 = 16;
/// The Weyl sequence's step (2^64 / the golden ratio).
const WEYL: u64 = 0x9e37_79b9_7f4a_7c15;

/// Keys each worker tracks.
pub const TRACKED: usize = 64;
/// Counters per row of the sketch (a power of two).
const WIDTH: usize = 1024;
const ROWS: usize = 4;
/// Counters per cache line, and per row in a line: a hash picks a line,
/// then a counter of each row in it.
const LINE: usize = 32;
const PER_ROW: usize = LINE / ROWS;
const LINES: usize = ROWS * WIDTH / LINE;
/// A counter's largest value: 16 bits, enough where a sketch counts at
/// most [`COUNTED_PER_SEC`] requests a second into counts that halve each
/// second (only a key with a quarter of them all reaches it, and it is
/// tracked, its count exact, whatever its estimate).
const CELL_MAX: u32 = u16::MAX as u32;

/// One line of the sketch's counters, aligned to the cache's.
#[derive(Clone, Copy)]
#[repr(align(64))]
struct Line([u16; LINE]);
/// Counts are multiplied by `DECAY / 256` at each second (a half).
const DECAY: u64 = 128;
/// The decays' weights summed over all past seconds: `f / (1 - f)`.
const PAST_WEIGHT: f64 = (DECAY as f64 / 256.0) / (1.0 - DECAY as f64 / 256.0);

/// What a request did with its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// A retrieval that found the key (`size`: its value's length).
    Hit {
        size: u32,
    },
    Miss,
    /// A store of a `size`-byte value.
    Store {
        size: u32,
    },
    /// Anything else that names the key (delete, arithmetic).
    Other,
}

/// One tracked key.
#[derive(Clone)]
struct Entry {
    hash: u64,
    count: u32,
    /// The part of `count` that may be other keys' requests: the sketch's
    /// estimate before the request that admitted the key (Space-Saving's
    /// error). `count - err` is what the key itself was asked since.
    err: u32,
    hits: u32,
    misses: u32,
    /// The value's length when last seen (0: not seen).
    size: u32,
    len: u8,
    key: [u8; KEY_MAX_LEN],
}

impl Entry {
    const EMPTY: Entry = Entry {
        hash: 0,
        count: 0,
        err: 0,
        hits: 0,
        misses: 0,
        size: 0,
        len: 0,
        key: [0; KEY_MAX_LEN],
    };

    fn key(&self) -> &[u8] {
        &self.key[..self.len as usize]
    }

    /// Requests for the key since it was admitted (decayed): a lower
    /// bound of its count, with no other key's requests in it.
    fn own(&self) -> u32 {
        self.count.saturating_sub(self.err)
    }
}

struct Inner {
    /// `ROWS` rows of `WIDTH` counters, in [`LINES`] lines.
    cms: Box<[Line]>,
    top: Box<[Entry]>,
    /// The entries' hashes and counts again, packed: what a request scans
    /// (eight cache lines and four, where the entries are 280 bytes each).
    hashes: [u64; TRACKED],
    counts: [u32; TRACKED],
    /// The entries by hash, open addressing with linear probing
    /// ([`SLOTS`] slots of an entry's index, [`EMPTY`] or [`GONE`]): a
    /// probe or two finds a key's entry, or that it has none, where a scan
    /// of the 64 hashes was half the sketch's time on a uniform load.
    slots: [u8; SLOTS],
    /// Slots marked [`GONE`] since the last rebuild.
    gone: usize,
    /// Entries in use (the first `used`).
    used: usize,
    /// The smallest count among the entries, once all are in use (0
    /// before): a key whose estimate is below it is not tracked.
    min: u32,
    /// The server second the counts were last decayed at, and the
    /// monotonic time (µs) when that happened.
    epoch: RelTime,
    epoch_us: u64,
    /// Seconds decayed since the sketch started (a young sketch's counts
    /// stand for less time than the decay's whole past).
    age: u32,
    /// Requests counted since `epoch_us` (by weight), and the most a
    /// second before the sketch thins them ([`COUNTED_PER_SEC`]).
    counted: u64,
    counted_max: u64,
    /// Of each 2^`thin` requests, one is counted.
    thin: u32,
}

/// A cell of the sketch after `times` decays.
fn decay_cell(c: u16, times: u32) -> u16 {
    decay(u32::from(c), times) as u16
}

fn decay(c: u32, times: u32) -> u32 {
    if times >= 64 {
        return 0;
    }
    let mut c = c as u64;
    for _ in 0..times {
        c = (c * DECAY) >> 8;
        if c == 0 {
            break;
        }
    }
    c as u32
}

/// The estimate an untracked key needs to take the entry of count `least`.
#[inline]
fn margin(least: u32) -> u32 {
    least.saturating_add(least / 8)
}

/// Slots of `Inner::slots`: four per entry, so probes stay short.
const SLOTS: usize = 4 * TRACKED;
const EMPTY: u8 = u8::MAX;
/// An entry left the slot; probes go on past it.
const GONE: u8 = u8::MAX - 1;

/// The first slot of hash `h` (bits the sketch's rows do not use).
#[inline]
fn slot_of(h: u64) -> usize {
    (h >> 56) as usize & (SLOTS - 1)
}

/// The line of hash `h`'s counters, and its counter of row `r` in it:
/// bits of the hash that neither the other rows nor [`slot_of`] use.
#[inline]
fn line_of(h: u64) -> usize {
    h as usize & (LINES - 1)
}

#[inline]
fn cell(h: u64, r: usize) -> usize {
    r * PER_ROW + ((h >> (16 + r * 4)) as usize & (PER_ROW - 1))
}

impl Inner {
    fn new(now: RelTime, now_us: u64) -> Inner {
        Inner {
            cms: vec![Line([0; LINE]); LINES].into_boxed_slice(),
            top: vec![Entry::EMPTY; TRACKED].into_boxed_slice(),
            hashes: [0; TRACKED],
            counts: [0; TRACKED],
            slots: [EMPTY; SLOTS],
            gone: 0,
            used: 0,
            min: 0,
            epoch: now,
            epoch_us: now_us,
            age: 0,
            counted: 0,
            counted_max: COUNTED_PER_SEC,
            thin: 0,
        }
    }

    /// Decay to second `now`, which began at `began_us` (monotonic time):
    /// the window of the counts that follow starts there, not when the
    /// first of them came, so a worker whose first request of a second
    /// came late does not read its rates high by the time it had none.
    fn advance(&mut self, now: RelTime, began_us: u64) {
        if now <= self.epoch {
            return;
        }
        let times = now - self.epoch;
        for c in self.cms.iter_mut().flat_map(|l| l.0.iter_mut()) {
            *c = decay_cell(*c, times);
        }
        for (e, c) in self.top[..self.used].iter_mut().zip(&mut self.counts) {
            e.count = decay(e.count, times);
            *c = e.count;
            e.err = decay(e.err, times);
            e.hits = decay(e.hits, times);
            e.misses = decay(e.misses, times);
        }
        // The rate since the last decay sets how thinly the next second
        // is counted.
        let rate = self.counted / u64::from(times);
        self.thin = 0;
        while rate >> self.thin > self.counted_max && self.thin < MAX_THIN {
            self.thin += 1;
        }
        self.counted = 0;
        self.epoch = now;
        self.epoch_us = began_us;
        self.age = self.age.saturating_add(times);
        self.refresh_min();
        self.rebuild_slots();
    }

    fn refresh_min(&mut self) {
        self.min = if self.used < TRACKED {
            0
        } else {
            self.counts.iter().copied().min().unwrap_or(0)
        };
    }

    fn estimate(&self, h: u64) -> u32 {
        let line = &self.cms[line_of(h)].0;
        (0..ROWS)
            .map(|r| line[cell(h, r)])
            .min()
            .map_or(0, u32::from)
    }

    /// Count one request of weight `w` (it stands for `w` requests).
    fn record(&mut self, h: u64, key: &[u8], access: Access, w: u32) {
        self.counted += u64::from(w);
        // Conservative update: raise each counter only to the new estimate.
        let est = self.estimate(h).saturating_add(w);
        let line = &mut self.cms[line_of(h)].0;
        let cell_est = est.min(CELL_MAX) as u16;
        for r in 0..ROWS {
            let c = &mut line[cell(h, r)];
            *c = (*c).max(cell_est);
        }
        // A tracked key's estimate is at least its count (unless the
        // estimate is at the cells' ceiling), and `est` `w` more, so at or
        // below the smallest count the key is not tracked, and not admitted.
        if est <= self.min && est < CELL_MAX {
            return;
        }
        let found = self.find(h, key);
        let at = match found {
            Some(i) => {
                self.top[i].count = self.top[i].count.saturating_add(w);
                self.counts[i] = self.top[i].count;
                i
            }
            None if self.used < TRACKED => {
                self.used += 1;
                self.admit(self.used - 1, h, key, est, w, false)
            }
            // A key takes the smallest entry only with an estimate an
            // eighth above it: where no key is hot (uniform requests) the
            // estimates all sit near the smallest count, and admitting
            // each one that passes it churned the table on every request
            // (a third of the sketch's time on a pipelined uniform load)
            // for keys that are no hotter than those they replaced. A hot
            // key's estimate passes the margin within a few requests.
            None if est <= margin(self.min) => return,
            None => {
                // `min` is a lower bound (counts only grow between decays):
                // the smallest entry now decides.
                let (i, least) = self
                    .counts
                    .iter()
                    .copied()
                    .enumerate()
                    .min_by_key(|&(_, c)| c)
                    .unwrap_or((0, 0));
                self.min = least;
                if est <= margin(least) {
                    return;
                }
                self.admit(i, h, key, est, w, true)
            }
        };
        let e = &mut self.top[at];
        match access {
            Access::Hit { size } => {
                e.hits = e.hits.saturating_add(w);
                e.size = size;
            }
            Access::Miss => e.misses = e.misses.saturating_add(w),
            Access::Store { size } => e.size = size,
            Access::Other => {}
        }
    }

    /// The entry of `key` (hash `h`), if it is tracked.
    #[inline]
    fn find(&self, h: u64, key: &[u8]) -> Option<usize> {
        let mut s = slot_of(h);
        loop {
            match self.slots[s] {
                EMPTY => return None,
                GONE => {}
                i => {
                    let i = i as usize;
                    if self.hashes[i] == h && self.top[i].key() == key {
                        return Some(i);
                    }
                }
            }
            s = (s + 1) & (SLOTS - 1);
        }
    }

    /// Give entry `i` (its hash set) a slot: the first free one from its
    /// hash's. Rebuilt first once half the slots are taken or gone, so
    /// probes stay short and always end at an empty slot.
    fn slot(&mut self, i: usize) {
        if self.used + self.gone >= SLOTS / 2 {
            // Entry `i` (in use, its hash set) is slotted with the rest.
            return self.rebuild_slots();
        }
        let mut s = slot_of(self.hashes[i]);
        while !matches!(self.slots[s], EMPTY | GONE) {
            s = (s + 1) & (SLOTS - 1);
        }
        if self.slots[s] == GONE {
            self.gone -= 1;
        }
        self.slots[s] = i as u8;
    }

    /// Entry `i` leaves its slot (it is about to hold another key).
    fn unslot(&mut self, i: usize) {
        let mut s = slot_of(self.hashes[i]);
        for _ in 0..SLOTS {
            if self.slots[s] == i as u8 {
                self.slots[s] = GONE;
                self.gone += 1;
                return;
            }
            s = (s + 1) & (SLOTS - 1);
        }
    }

    /// Every entry in use slotted afresh, no slot marked gone.
    fn rebuild_slots(&mut self) {
        self.slots = [EMPTY; SLOTS];
        self.gone = 0;
        for i in 0..self.used {
            let mut s = slot_of(self.hashes[i]);
            while self.slots[s] != EMPTY {
                s = (s + 1) & (SLOTS - 1);
            }
            self.slots[s] = i as u8;
        }
    }

    /// Put `key` in entry `i` with count `est`, of which the request that
    /// admits it is `w`; `replacing`: the entry held another key (else it is
    /// the next one taken into use).
    fn admit(&mut self, i: usize, h: u64, key: &[u8], est: u32, w: u32, replacing: bool) -> usize {
        if replacing {
            self.unslot(i);
        }
        self.hashes[i] = h;
        self.counts[i] = est;
        self.slot(i);
        let e = &mut self.top[i];
        let len = key.len().min(KEY_MAX_LEN);
        e.hash = h;
        e.count = est;
        e.err = est - w;
        e.hits = 0;
        e.misses = 0;
        e.size = 0;
        e.len = len as u8;
        e.key[..len].copy_from_slice(&key[..len]);
        i
    }

    /// The invariants `record` relies on.
    #[cfg(test)]
    fn validate(&self) {
        assert!(self.used <= TRACKED);
        let live = &self.top[..self.used];
        if self.used == TRACKED {
            let least = live.iter().map(|e| e.count).min().unwrap_or(0);
            assert!(
                self.min <= least,
                "min {} above the least count {least}",
                self.min
            );
        } else {
            assert_eq!(self.min, 0);
        }
        for (i, e) in live.iter().enumerate() {
            assert_eq!((self.hashes[i], self.counts[i]), (e.hash, e.count));
            assert_eq!(
                self.find(e.hash, e.key()),
                Some(i),
                "an entry its slots miss"
            );
            assert!(
                self.estimate(e.hash) >= e.count.min(CELL_MAX),
                "a count above its estimate"
            );
            // (Decay rounds both down: a key may keep none of its own.)
            assert!(e.err <= e.count, "more credited than counted");
            assert!(e.hits as u64 + e.misses as u64 <= e.own() as u64);
            assert!(
                live[..i].iter().all(|o| o.key() != e.key()),
                "a key tracked twice"
            );
        }
    }
}

/// One worker's counts (off: nothing is kept or counted).
#[derive(Default)]
pub struct Sketch {
    inner: Option<Mutex<Inner>>,
    /// Where `Inner::cms` is (0: off), to prefetch a key's line without
    /// the lock: the box never moves while the sketch lives.
    lines: usize,
    /// `Inner::thin`, read without the lock.
    thin: AtomicU32,
    /// Requests seen, which picks those counted (only the worker writes it).
    seen: AtomicU64,
}

impl std::fmt::Debug for Sketch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sketch")
            .field("on", &self.inner.is_some())
            .finish()
    }
}

/// Bytes one worker's sketch holds (counted in `-m`: `Config::observer_bytes`).
pub const SKETCH_BYTES: usize = LINES * std::mem::size_of::<Line>()
    + TRACKED * std::mem::size_of::<Entry>()
    + std::mem::size_of::<Inner>();

impl Sketch {
    pub fn new(clock: &Clock) -> Sketch {
        let inner = Inner::new(clock.now(), clock.now_us());
        Sketch {
            lines: inner.cms.as_ptr() as usize,
            inner: Some(Mutex::new(inner)),
            ..Sketch::default()
        }
    }

    /// A request for the key of hash `h` comes soon: start loading its line
    /// of counters. Between a worker's counted requests its other requests
    /// push the sketch out of the core's cache, and the counters' load was
    /// half the sketch's time on a pipelined load (docs/benchmarks.md).
    #[inline]
    pub fn prefetch(&self, h: u64) {
        if self.lines != 0 {
            let at = self.lines + line_of(h) * std::mem::size_of::<Line>();
            cachalot_engine::hash::prefetch(at as *const u8);
        }
    }

    pub fn is_on(&self) -> bool {
        self.inner.is_some()
    }

    /// Count one request for `key` (its engine hash `h`), if it is one of
    /// those counted (the server picks, then counts, in `watch`).
    #[cfg(test)]
    pub fn record(&self, clock: &Clock, h: u64, key: &[u8], access: Access) {
        if let Some(w) = self.pick() {
            self.count(clock, h, key, access, w);
        }
    }

    /// Whether the next request is counted, and with what weight (None: off,
    /// or thinned out). Asked before the key is hashed: a request that is
    /// not counted costs no hash.
    #[inline]
    pub fn pick(&self) -> Option<u32> {
        self.inner.as_ref()?;
        let thin = self.thin.load(Ordering::Relaxed);
        if thin > 0 {
            let n = self.seen.load(Ordering::Relaxed).wrapping_add(1);
            self.seen.store(n, Ordering::Relaxed);
            if n.wrapping_mul(WEYL) >> (64 - thin) != 0 {
                return None;
            }
        }
        Some(1 << thin)
    }

    /// Count a request that [`Sketch::pick`] picked with weight `w`.
    pub fn count(&self, clock: &Clock, h: u64, key: &[u8], access: Access, w: u32) {
        let Some(inner) = &self.inner else {
            return;
        };
        let mut s = inner.lock();
        let now = clock.now();
        if now != s.epoch {
            s.advance(now, clock.ticked_us());
            self.thin.store(s.thin, Ordering::Relaxed);
        }
        s.record(h, key, access, w);
    }
}

/// A hot key, merged over the workers.
#[derive(Clone, Debug, PartialEq)]
pub struct Hot {
    pub key: Vec<u8>,
    /// Requests, hits and misses per second, over the last few seconds.
    pub rate: f64,
    pub hits: f64,
    pub misses: f64,
    /// The value's length when last seen (0: never seen by a hit or a store
    /// while tracked).
    pub size: u32,
}

/// Seconds the decayed counts of a sketch stand for, `since_us` after its
/// last decay and `age` seconds after it started: the time since, plus the
/// weights of the past seconds it has counted.
fn window(since_us: u64, age: u32) -> f64 {
    let f = DECAY as f64 / 256.0;
    let w = since_us as f64 / 1e6 + PAST_WEIGHT * (1.0 - f.powi(age.min(1000) as i32));
    w.max(1e-3)
}

/// A hot key as the operator sees it: its rates and last value size, and
/// the tier that holds it now (`memory`, `zzone`, `flash` or `none`).
#[derive(Debug)]
pub struct HotRow {
    pub hot: Hot,
    pub tier: &'static str,
}

/// The `n` hottest keys of all workers' sketches, hottest first. A key's
/// rate is the sum of its own requests (`Entry::own`) in the workers that
/// track it: a worker that does not track it adds nothing (its sketch's
/// estimate may be another key's count), and a key that is hot is tracked
/// by every worker its requests reach.
pub fn top<'a>(sketches: impl Iterator<Item = &'a Sketch>, clock: &Clock, n: usize) -> Vec<Hot> {
    let now = clock.now();
    let now_us = clock.now_us();
    let mut merged: std::collections::HashMap<Vec<u8>, Hot> = std::collections::HashMap::new();
    for sk in sketches {
        let Some(m) = &sk.inner else {
            continue;
        };
        let mut s = m.lock();
        s.advance(now, clock.ticked_us());
        sk.thin.store(s.thin, Ordering::Relaxed);
        let window = window(now_us.saturating_sub(s.epoch_us), s.age);
        for e in s.top[..s.used].iter().filter(|e| e.own() > 0) {
            let hot = merged.entry(e.key().to_vec()).or_insert_with(|| Hot {
                key: e.key().to_vec(),
                rate: 0.0,
                hits: 0.0,
                misses: 0.0,
                size: 0,
            });
            hot.rate += e.own() as f64 / window;
            hot.hits += e.hits as f64 / window;
            hot.misses += e.misses as f64 / window;
            hot.size = hot.size.max(e.size);
        }
    }
    let mut merged: Vec<Hot> = merged.into_values().collect();
    merged.sort_by(|a, b| b.rate.total_cmp(&a.rate).then_with(|| a.key.cmp(&b.key)));
    merged.truncate(n);
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use cachalot_engine::hash::hash;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn key(i: u64) -> Vec<u8> {
        format!("key:{i}").into_bytes()
    }

    /// A Zipf(0.99) rank drawn from `u` in [0, 1) by inverting the
    /// cumulative weights.
    fn zipf_table(n: usize, s: f64) -> Vec<f64> {
        let mut acc = 0.0;
        let mut cdf: Vec<f64> = (1..=n)
            .map(|i| {
                acc += 1.0 / (i as f64).powf(s);
                acc
            })
            .collect();
        for c in &mut cdf {
            *c /= acc;
        }
        cdf
    }

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// Zipf 0.99 over 200 000 keys, spread over two workers: the merged top
    /// 10 names at least 9 of the true top 10 and their rates within 10%.
    #[test]
    fn the_top_of_a_zipf_stream_is_named_with_its_rates() {
        zipf_top_is_named(200_000, 100_000, 12, 2, COUNTED_PER_SEC, 0);
    }

    /// The same where each worker counts a quarter of its requests.
    #[test]
    fn a_thinned_sketch_names_the_top_with_its_rates() {
        zipf_top_is_named(200_000, 400_000, 8, 2, 60_000, 2);
    }

    /// One worker counting 120,000 requests a second over a million keys:
    /// some 150,000 distinct keys in a two-second window. With two rows of
    /// eight counters in a line, a tail key shared both its counters with a
    /// hot key about once in 8,192 keys, so dozens a second were admitted
    /// with a hot key's count and pushed the true top out of the table
    /// (`cachalot-lab hotkeys --threads 1 --rate 120000`: a top-ten key at
    /// a twentieth of its rate); four rows make that one in 524,288.
    #[test]
    fn a_long_tail_does_not_crowd_out_the_top() {
        zipf_top_is_named(1_000_000, 120_000, 10, 1, COUNTED_PER_SEC, 0);
    }

    /// `per_sec` requests a second of Zipf(0.99) ranks over `keys` keys,
    /// dealt in turn to `workers` sketches, for `secs` seconds, each
    /// worker counting at most `counted_max` a second (by the end, one in
    /// 2^`thin`). From the fourth second on, at each quarter second, the
    /// merged top 10 names at least 9 of the 10 most likely keys, and each
    /// key's rate is within 10% of its expected rate.
    fn zipf_top_is_named(
        keys: usize,
        per_sec: u64,
        secs: u64,
        workers: usize,
        counted_max: u64,
        thin: u32,
    ) {
        let clock = Clock::new();
        clock.set_us(0);
        let sketches: Vec<Sketch> = (0..workers).map(|_| Sketch::new(&clock)).collect();
        for sk in &sketches {
            sk.inner.as_ref().unwrap().lock().counted_max = counted_max;
        }
        let cdf = zipf_table(keys, 0.99);
        let expected = |rank: usize| {
            let below = if rank == 0 { 0.0 } else { cdf[rank - 1] };
            (cdf[rank] - below) * per_sec as f64
        };
        let true_top: Vec<Vec<u8>> = (0..10).map(key).collect();
        let mut rng = Rng(0x9e3779b97f4a7c15);
        let quarter = per_sec / 4;
        for sec in 0..secs {
            for q in 0..4 {
                for i in 0..quarter {
                    clock.set_us(sec * 1_000_000 + (q * quarter + i) * 1_000_000 / per_sec);
                    let u = rng.next();
                    let rank = cdf.partition_point(|&c| c < u);
                    let k = key(rank as u64);
                    let w = (i as usize) % workers;
                    sketches[w].record(&clock, hash(&k), &k, Access::Hit { size: 10 });
                }
                if sec < 3 {
                    continue;
                }
                clock.set_us(sec * 1_000_000 + (q + 1) * 250_000);
                let got = top(sketches.iter(), &clock, 10);
                let named = got.iter().filter(|h| true_top.contains(&h.key)).count();
                assert!(
                    named >= 9,
                    "{sec}.{q}: named {named} of the top 10: {got:?}"
                );
                for h in &got {
                    let rank: usize = std::str::from_utf8(&h.key[4..]).unwrap().parse().unwrap();
                    let want = expected(rank);
                    assert!(
                        (h.rate - want).abs() <= 0.1 * want,
                        "{sec}.{q}: key {rank}: {} per second, {want} expected",
                        h.rate
                    );
                    assert!((h.hits - h.rate).abs() < 1e-9 * h.rate.max(1.0) + 1.0);
                    assert_eq!(h.size, 10);
                }
            }
            clock.advance(std::time::Duration::from_secs(1));
        }
        for sk in &sketches {
            assert_eq!(sk.thin.load(Ordering::Relaxed), thin);
            sk.inner.as_ref().unwrap().lock().validate();
        }
    }

    /// A second's counts are over the whole second, though its first
    /// request came late: a key asked 1,000 times in the second half of
    /// each second reads 1,000 a second at the second's end (it read up to
    /// a third more when the window began at the first request).
    #[test]
    fn a_late_first_request_does_not_shorten_the_second() {
        let clock = Clock::new();
        clock.set_us(0);
        let sk = Sketch::new(&clock);
        let k = key(1);
        for sec in 0..8u64 {
            for i in 0..1_000 {
                clock.set_us(sec * 1_000_000 + 500_000 + i * 500);
                sk.record(&clock, hash(&k), &k, Access::Miss);
            }
            clock.set_us((sec + 1) * 1_000_000 - 1);
            if sec >= 4 {
                let rate = top(std::iter::once(&sk), &clock, 1)[0].rate;
                assert!(
                    (rate - 1_000.0).abs() < 50.0,
                    "second {sec}: {rate} a second"
                );
            }
            clock.set_us((sec + 1) * 1_000_000);
            clock.advance(std::time::Duration::from_secs(1));
        }
    }

    /// The hot set moves: within 3 s the new hot keys lead.
    #[test]
    fn a_new_hot_set_takes_over_within_seconds() {
        let clock = Clock::new();
        clock.set_us(0);
        let sk = &Sketch::new(&clock);
        let mut rng = Rng(7);
        let run = |secs: u64, base: u64, rng: &mut Rng| {
            for _ in 0..secs {
                for _ in 0..20_000 {
                    let u = rng.next();
                    // Keys base..base+5 take half the requests.
                    let k = if u < 0.5 {
                        base + (u * 10.0) as u64
                    } else {
                        1_000 + (u * 100_000.0) as u64
                    };
                    sk.record(&clock, hash(&key(k)), &key(k), Access::Miss);
                }
                clock.advance(std::time::Duration::from_secs(1));
            }
        };
        run(30, 0, &mut rng);
        let before: Vec<_> = top(std::iter::once(sk), &clock, 5)
            .into_iter()
            .map(|h| h.key)
            .collect();
        assert_eq!(before.len(), 5);
        assert!(
            before.iter().all(|k| (0..5).any(|i| *k == key(i))),
            "{before:?}"
        );
        run(3, 100, &mut rng);
        let after = top(std::iter::once(sk), &clock, 5);
        assert!(
            after.iter().all(|h| (100..105).any(|i| h.key == key(i))),
            "{after:?}"
        );
        assert!(after.iter().all(|h| h.misses > 0.0 && h.hits == 0.0));
    }

    #[test]
    fn an_off_sketch_keeps_nothing() {
        let clock = Clock::new();
        let off = Sketch::default();
        off.record(&clock, hash(b"k"), b"k", Access::Other);
        assert!(!off.is_on());
        assert!(top(std::iter::once(&off), &clock, 10).is_empty());
    }

    proptest! {
        /// Against a model that counts exactly (the clock stands still, so
        /// nothing decays): the sketch's invariants hold after every
        /// request, no estimate is below the truth, a tracked key's count
        /// is at least its true count, and a heavy key is tracked.
        #[test]
        fn counts_bound_the_truth(
            reqs in proptest::collection::vec((0u64..400, 0u8..3), 1..3000),
        ) {
            let clock = Clock::new();
            let sk = Sketch::new(&clock);
            let mut model: HashMap<u64, u32> = HashMap::new();
            for &(k, what) in &reqs {
                let access = match what {
                    0 => Access::Hit { size: k as u32 },
                    1 => Access::Miss,
                    _ => Access::Store { size: k as u32 },
                };
                sk.record(&clock, hash(&key(k)), &key(k), access);
                *model.entry(k).or_default() += 1;
                sk.inner.as_ref().unwrap().lock().validate();
            }
            let s = sk.inner.as_ref().unwrap().lock();
            for e in &s.top[..s.used] {
                let k: u64 = std::str::from_utf8(&e.key()[4..]).unwrap().parse().unwrap();
                prop_assert!(e.count >= model[&k], "key {} count {} true {}", k, e.count, model[&k]);
                prop_assert!(e.own() <= model[&k], "key {} own {} true {}", k, e.own(), model[&k]);
                prop_assert!(e.size == 0 || e.size == k as u32);
            }
            let mut exact = true;
            for (&k, &c) in &model {
                let h = cachalot_engine::hash::hash(&key(k));
                prop_assert!(s.estimate(h) >= c);
                exact &= s.estimate(h) == c;
            }
            // Space-Saving's guarantee, which holds when the sketch counted
            // exactly (unless two of the keys share both their counters, a
            // chance of about 1 in 200 here): a key with more than 1/TRACKED
            // of the requests is tracked.
            if exact {
                for (&k, &c) in &model {
                    if c as usize * TRACKED > reqs.len() {
                        prop_assert!(
                            s.top[..s.used].iter().any(|e| e.key() == key(k)),
                            "key {} ({} of {}) not tracked", k, c, reqs.len()
                        );
                    }
                }
            }
        }
    }
}
