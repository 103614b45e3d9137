//! The whole cache's miss-ratio curve, live (issue 36): the miss ratio the
//! cache would have with a quarter, half, twice or four times its memory.
//!
//! A spatial sample of the keys (SHARDS, Waldspurger et al., FAST'15: a
//! key is in it iff the top 24 bits of its hash are under a threshold, the
//! rate `R`) goes through an LRU stack of bytes ([`crate::stack`], Mattson's
//! stack as Olken's counting tree), in the look-aside view the lab's `mrc`
//! takes: a GET is counted at its byte stack distance (divided by `R`) or
//! as cold, a SET moves its key to the top with its new size, a DELETE
//! takes it out. The sample is bounded: when it holds more keys than its
//! bound, the rate falls by a quarter and the keys above the new
//! threshold leave (SHARDS's fixed-size variant).
//!
//! An LRU stack is not cachalot: its CLOCK, its slab classes and its
//! compressed Z-zone hold more, or fewer, bytes of data than the same
//! memory under LRU. So the curve is placed on the cache by what the
//! cache really did: the sampled GETs' own hits and misses give the miss
//! ratio now, and the cache is taken to behave as an LRU of `C*` bytes,
//! where the curve crosses it ([`Curve::effective_bytes`]). With `x` times
//! the memory it would behave as one of `x * C*` bytes. On the lab's
//! traces this put the predictions at half and twice the memory within
//! 0.005 of re-runs of the engine on YCSB-B and the Twitter-like trace,
//! and within 0.03 on ETC at half (docs/benchmarks.md).
//!
//! Counts halve every [`HALF_LIFE`] seconds, so the curve follows a
//! changing workload.

use crate::stack::{Distance, Stack};

mod sample;
pub use sample::Home;
use sample::{SampleIndex, NO_SLOT};

/// Top hash bits that decide sampling.
const KEY_BITS: u32 = 24;
const FULL_RATE: u64 = 1 << KEY_BITS;
/// Distance bins per doubling, and the smallest binned distance (bytes).
const BINS_PER_OCTAVE: f64 = 16.0;
const MIN_DISTANCE: f64 = 1024.0;
/// Up to 2^44 bytes (16 TB).
const BINS: usize = 34 * 16;
/// Seconds for the counts to halve.
pub const HALF_LIFE: u32 = 300;
/// Data bytes per byte of `-m` a cache whose memory the Z-zone holds keeps,
/// per unit of the zone's codec ratio: blocks about two thirds to three
/// quarters full after their splits, the index, the zone's own metadata.
/// Measured: YCSB-B's protobuf-like values at -m 32 (nearly all of it in
/// the zone) held 2.15 bytes of data per byte of -m at a codec ratio of
/// 2.87.
const ZONE_FILL: f64 = 0.75;
/// A cache that misses at most this much more than the cold misses is at
/// its floor: the curve cannot say how far past its knee it is.
const FLOOR: f64 = 0.005;
/// The memory multiples `stats mrc` reports.
pub const MULTIPLES: [f64; 5] = [0.25, 0.5, 1.0, 2.0, 4.0];
/// Bytes an item takes besides its key and value (header, index share,
/// chunk slack): a sampled key's size is its key, value and this.
pub const ITEM_OVERHEAD: u32 = 48;

/// An item's size as the curve counts it: its key, value and
/// [`ITEM_OVERHEAD`].
#[inline]
pub fn item_size(key_len: usize, value_len: usize) -> u32 {
    (key_len + value_len + ITEM_OVERHEAD as usize).min(u32::MAX as usize) as u32
}

/// Whether the key of hash `h` is in a sample of threshold `t`
/// ([`LiveMrc::threshold`]): the one test a request outside it pays.
#[inline]
pub fn sampled(h: u64, t: u64) -> bool {
    h >> (64 - KEY_BITS) < t
}

/// The bin of a (scaled) byte distance.
fn bin_of(d: f64) -> usize {
    if d <= MIN_DISTANCE {
        return 0;
    }
    ((d / MIN_DISTANCE).log2() * BINS_PER_OCTAVE).min(BINS as f64 - 1.0) as usize
}

/// The largest distance in bin `b`.
fn bin_top(b: usize) -> f64 {
    MIN_DISTANCE * ((b + 1) as f64 / BINS_PER_OCTAVE).exp2()
}

/// What a request did, as the curve sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// A GET (or gets, mg, touch) that found a value of `size` bytes
    /// (key, value and [`ITEM_OVERHEAD`]).
    Hit {
        size: u32,
    },
    /// A GET that missed.
    Miss,
    /// A store of `size` bytes.
    Store {
        size: u32,
    },
    Delete,
}

/// One LRU stack over sampled keys and the distances of their GETs: the
/// whole cache's, or one prefix's alone ([`LiveMrc`]'s parts).
#[derive(Clone)]
struct Stacked {
    stack: Stack,
    /// Each sampled key's slot in `stack` (by the curve's key index).
    slots: Vec<u32>,
    /// Scaled GETs by distance bin, and those with no distance (cold).
    hist: Vec<f64>,
    cold: f64,
    gets: f64,
    /// Scaled GETs that missed in the cache itself.
    missed: f64,
}

impl Stacked {
    fn new() -> Stacked {
        Stacked {
            stack: Stack::new(true),
            slots: Vec::new(),
            hist: vec![0.0; BINS],
            cold: 0.0,
            gets: 0.0,
            missed: 0.0,
        }
    }

    /// Key `obj` was asked for (a GET when `get` is Some, its hit or miss)
    /// at `size` bytes, the sample's weight `scale`.
    fn access(&mut self, obj: u32, size: u32, get: Option<bool>, scale: f64) {
        let d = self.stack.access(obj, size, &mut self.slots);
        self.count(d, get, scale);
    }

    /// A GET (when `get` is Some, its hit or miss) at distance `d` (None:
    /// cold), the sample's weight `scale`.
    fn count(&mut self, d: Option<Distance>, get: Option<bool>, scale: f64) {
        if let Some(hit) = get {
            self.gets += scale;
            if !hit {
                self.missed += scale;
            }
            match d {
                Some(d) => self.hist[bin_of(d.bytes as f64 * scale)] += scale,
                None => self.cold += scale,
            }
        }
    }

    fn remove(&mut self, obj: u32) {
        self.stack.remove(obj, &mut self.slots);
    }

    fn decay(&mut self, f: f64) {
        for c in &mut self.hist {
            *c *= f;
        }
        self.cold *= f;
        self.gets *= f;
        self.missed *= f;
    }

    fn curve(&self, all_gets: f64, all_missed: f64) -> Curve {
        Curve {
            hist: self.hist.clone(),
            cold: self.cold,
            gets: self.gets,
            missed: self.missed,
            all_gets,
            all_missed,
        }
    }
}

/// Prefixes with a curve of their own, the first seen in the sample.
pub const MAX_PARTS: usize = 8;
/// A key in no part.
const NO_PART: u8 = u8::MAX;

/// A sampled LRU stack of the whole cache and the GETs' distances, and
/// one for each of the first [`MAX_PARTS`] key prefixes seen in the
/// sample, as if that prefix had an LRU of its own (what giving it less
/// memory, or more, would do to its misses).
pub struct LiveMrc {
    threshold: u64,
    max_keys: usize,
    /// Scaled distance beyond which a key is forgotten rather than the
    /// rate lowered: a GET that far misses in every cache predicted.
    horizon: f64,
    /// Sampled key hash -> its number and its slot in `whole`'s stack
    /// (whose `slots` stay empty).
    index: SampleIndex,
    free: Vec<u32>,
    /// Each key's hash and part, by its number.
    objs: Vec<(u64, u8)>,
    whole: Stacked,
    /// The prefixes' own stacks, by the caller's prefix id.
    parts: Vec<(u16, Stacked)>,
    /// While every key the sample has taken had this one prefix, its part
    /// is the whole stack, kept once (`parts` is empty; the keys' part is
    /// 0, where it will be): a cache whose keys share a prefix pays for
    /// one stack, not two. The first key of another prefix, or of none,
    /// copies the whole stack into the part ([`LiveMrc::split_solo`]).
    solo: Option<u16>,
    /// A key of a second prefix, or of none, was seen: no more `solo`.
    mixed: bool,
    /// All the cache's GETs and misses ([`LiveMrc::count_gets`]).
    all_gets: f64,
    all_missed: f64,
    /// Server second of the last decay.
    decayed_at: u32,
}

impl LiveMrc {
    /// The curve a cache of `memory_limit` bytes keeps (the server's, and
    /// the lab's `sim`): a key in sixteen at most (a small key space then
    /// costs a request in sixteen a lock and a stack update, not every
    /// one: at one in eight, the curve cost 3% of the server's CPU on a
    /// 90% GET load, 6% with the prefixes' curves), and at most one key
    /// per 16 KB of memory, between 1,024 and 65,536 (about 1% of the
    /// memory with its parts; SHARDS's error with 8,192 keys was under
    /// 0.01 on most of its traces).
    pub fn for_memory(memory_limit: usize, now: u32) -> LiveMrc {
        let mut m = LiveMrc::with_keys(Self::keys_for(memory_limit), now);
        m.threshold = FULL_RATE >> 4;
        // Four times the memory, holding four times its size in data
        // (compressed): keys deeper than that are as good as cold.
        m.horizon = 16.0 * memory_limit as f64;
        m
    }

    /// The most keys [`LiveMrc::for_memory`] samples.
    pub fn keys_for(memory_limit: usize) -> usize {
        (memory_limit / 16384).clamp(1024, 65_536)
    }

    /// A curve that samples at most `max_keys` keys (all of them, while
    /// there are fewer).
    pub fn with_keys(max_keys: usize, now: u32) -> LiveMrc {
        LiveMrc {
            threshold: FULL_RATE,
            max_keys: max_keys.max(16),
            horizon: f64::MAX,
            index: SampleIndex::new(max_keys.max(16)),
            free: Vec::new(),
            objs: Vec::new(),
            whole: Stacked::new(),
            parts: Vec::new(),
            solo: None,
            mixed: false,
            all_gets: 0.0,
            all_missed: 0.0,
            decayed_at: now,
        }
    }

    /// The bytes a curve of `max_keys` keys takes at most: its index, the
    /// stacks at twice the keys (the whole cache's and, with `parts`, the
    /// prefixes', which hold each key once between them, each at least
    /// its first 1,024 slots), the parts' slots, the bins. Without
    /// prefixes (no part id is ever given) no part's stack is made.
    pub fn memory_bytes(max_keys: usize, parts: bool) -> usize {
        // The index, and the keys' hash and part.
        let keys = max_keys.max(16) + 1;
        let stack = |objects: usize| Stack::memory_bytes_for(objects, true);
        let (part_stacks, part_slots) = match parts {
            true => (MAX_PARTS * stack(0) + stack(keys), MAX_PARTS * keys * 4),
            false => (0, 0),
        };
        let bins = (1 + if parts { MAX_PARTS } else { 0 }) * BINS * 8;
        SampleIndex::memory_bytes(max_keys.max(16))
            + keys * 16
            + stack(keys)
            + part_stacks
            + part_slots
            + bins
    }

    /// The sampling rate now.
    pub fn rate(&self) -> f64 {
        self.threshold as f64 / FULL_RATE as f64
    }

    /// Keys in the sample.
    pub fn keys(&self) -> usize {
        self.index.len()
    }

    /// The sampling threshold, for [`sampled`] outside the curve's lock.
    pub fn threshold(&self) -> u64 {
        self.threshold
    }

    /// Where a sampled key's entry is, to prefetch it outside the curve's
    /// lock (valid as long as the curve: its index never moves).
    pub fn home(&self) -> Home {
        self.index.home()
    }

    /// One request for the key of hash `h`, at server second `now`;
    /// `part` names the key's prefix (asked only of a sampled key that is
    /// new to the sample; None: it has none, or prefixes are not told).
    pub fn record(&mut self, h: u64, access: Access, now: u32, part: impl FnOnce() -> Option<u16>) {
        self.advance(now);
        if !sampled(h, self.threshold) {
            return;
        }
        let scale = 1.0 / self.rate();
        // The push's lines load while the index is probed.
        self.whole.stack.prefetch_top();
        let pos = match self.index.find(h) {
            Some(pos) => pos,
            None if access == Access::Delete => return,
            None => {
                let p = match part() {
                    Some(id) => self.part_index(id),
                    None => {
                        self.split_solo();
                        NO_PART
                    }
                };
                let o = self.free.pop().unwrap_or(self.objs.len() as u32);
                if o as usize == self.objs.len() {
                    self.objs.push((h, p));
                }
                self.objs[o as usize] = (h, p);
                self.index.insert(h, o)
            }
        };
        if access == Access::Delete {
            return self.forget_at(pos);
        }
        let e = self.index.get(pos);
        let was = (e.slot != NO_SLOT).then(|| self.whole.stack.remove_at(e.slot));
        let size = match access {
            Access::Hit { size } | Access::Store { size } => size,
            // A missed key keeps its old size until its SET.
            _ => was.map_or(0, |(_, size)| size),
        };
        let get = match access {
            Access::Hit { .. } => Some(true),
            Access::Miss => Some(false),
            _ => None,
        };
        self.whole.count(was.map(|(d, _)| d), get, scale);
        let (index, objs) = (&mut self.index, &self.objs);
        let slot = self.whole.stack.push_with(e.obj, size, |o, slot| {
            if let Some(p) = index.find(objs[o as usize].0) {
                index.set_slot(p, slot);
            }
        });
        self.index.set_slot(pos, slot);
        if !self.parts.is_empty() {
            let p = self.objs[e.obj as usize].1;
            if let Some((_, part)) = self.parts.get_mut(p as usize) {
                part.access(e.obj, size, get, scale);
            }
        }
        if self.index.len() > self.max_keys {
            self.forget_or_lower_rate(scale);
        }
    }

    /// Check that the index, the keys' numbers and the whole stack agree.
    #[cfg(test)]
    fn validate(&self) {
        self.index.validate();
        assert_eq!(self.index.len(), self.whole.stack.len());
        for e in self.index.iter() {
            assert_eq!(self.whole.stack.owner(e.slot), Some(e.obj));
            assert_eq!(self.objs[e.obj as usize].0, e.h);
        }
    }

    /// The part of prefix `id`, made while there is room (NO_PART after).
    fn part_index(&mut self, id: u16) -> u8 {
        if !self.mixed {
            match self.solo {
                None => {
                    self.solo = Some(id);
                    return 0;
                }
                Some(s) if s == id => return 0,
                Some(_) => self.split_solo(),
            }
        }
        if let Some(i) = self.parts.iter().position(|(p, _)| *p == id) {
            return i as u8;
        }
        if self.parts.len() == MAX_PARTS {
            return NO_PART;
        }
        self.parts.push((id, Stacked::new()));
        (self.parts.len() - 1) as u8
    }

    /// The sample no longer holds one prefix alone: the solo prefix's
    /// part, until now the whole stack, becomes a copy of it (exact: every
    /// key and GET so far was that prefix's).
    fn split_solo(&mut self) {
        self.mixed = true;
        if let Some(id) = self.solo.take() {
            let mut part = self.whole.clone();
            // The whole stack's slots are in the index; the part keeps its own.
            part.slots = vec![NO_SLOT; self.objs.len()];
            for e in self.index.iter() {
                part.slots[e.obj as usize] = e.slot;
            }
            self.parts.push((id, part));
        }
    }

    /// Take key `obj` out of the sample.
    fn forget(&mut self, obj: u32) {
        if let Some(pos) = self.index.find(self.objs[obj as usize].0) {
            self.forget_at(pos);
        }
    }

    /// Take the key whose entry is at `pos` out of the sample.
    fn forget_at(&mut self, pos: usize) {
        let e = self.index.get(pos);
        if e.slot != NO_SLOT {
            self.whole.stack.remove_at(e.slot);
        }
        let p = self.objs[e.obj as usize].1;
        if let Some((_, part)) = self.parts.get_mut(p as usize) {
            part.remove(e.obj);
        }
        self.index.remove_at(pos);
        self.free.push(e.obj);
    }

    /// Over the bound: forget the oldest key if it is beyond the horizon
    /// (one-hit keys of a long tail go this way, and the rate stays),
    /// else sample fewer keys.
    fn forget_or_lower_rate(&mut self, scale: f64) {
        if let Some((obj, d)) = self.whole.stack.oldest() {
            if d.bytes as f64 * scale > self.horizon {
                return self.forget(obj);
            }
        }
        self.lower_rate();
    }

    /// Sample a quarter fewer keys: those above the new threshold leave.
    fn lower_rate(&mut self) {
        self.threshold = (self.threshold * 3 / 4).max(1);
        let t = self.threshold;
        let gone: Vec<u32> = self
            .index
            .iter()
            .filter(|e| !sampled(e.h, t))
            .map(|e| e.obj)
            .collect();
        for o in gone {
            self.forget(o);
        }
    }

    /// Halve the counts once per [`HALF_LIFE`] passed by `now`.
    pub fn advance(&mut self, now: u32) {
        let halves = now.saturating_sub(self.decayed_at) / HALF_LIFE;
        if halves == 0 {
            return;
        }
        let f = 0.5f64.powi(halves.min(64) as i32);
        self.whole.decay(f);
        for (_, p) in &mut self.parts {
            p.decay(f);
        }
        self.all_gets *= f;
        self.all_missed *= f;
        self.decayed_at += halves * HALF_LIFE;
    }

    /// Count GETs of the whole cache, `missed` of them misses: the level
    /// the predictions are scaled to (the sample's own hits and misses
    /// place the curve, but a sample of a skewed workload may hold few of
    /// its hottest keys, and so miss more than the cache).
    pub fn count_gets(&mut self, gets: f64, missed: f64, now: u32) {
        self.advance(now);
        self.all_gets += gets;
        self.all_missed += missed;
    }

    /// The whole cache's curve as it stands.
    pub fn curve(&self) -> Curve {
        self.whole.curve(self.all_gets, self.all_missed)
    }

    /// Each part's curve, by prefix id: a prefix's own LRU, placed by the
    /// sampled GETs of its keys.
    pub fn part_curves(&self) -> Vec<(u16, Curve)> {
        let solo = self.solo.map(|id| (id, &self.whole));
        let parts = self.parts.iter().map(|(id, p)| (*id, p));
        solo.into_iter()
            .chain(parts)
            .map(|(id, p)| (id, p.curve(0.0, 0.0)))
            .collect()
    }

    /// `stats mrc`'s pairs: the sample, the miss ratios observed (the
    /// cache's and the sample's), the LRU size the cache behaves as, and
    /// the miss ratio predicted at each of [`MULTIPLES`] of the memory
    /// (`-1` where none can be yet).
    pub fn report(&self, held: Held) -> Vec<(String, String)> {
        let c = self.curve();
        let mut out = vec![
            ("mrc_sample_rate".to_string(), format!("{:.6}", self.rate())),
            ("mrc_sampled_keys".to_string(), self.keys().to_string()),
            ("mrc_gets".to_string(), format!("{:.0}", c.all_gets)),
            ("mrc_half_life_seconds".to_string(), HALF_LIFE.to_string()),
            (
                "mrc_miss_ratio".to_string(),
                format!("{:.4}", c.level().unwrap_or(-1.0)),
            ),
            (
                "mrc_sampled_miss_ratio".to_string(),
                format!("{:.4}", c.observed().unwrap_or(-1.0)),
            ),
            (
                "mrc_effective_bytes".to_string(),
                format!("{:.0}", c.capacity(held).unwrap_or(-1.0)),
            ),
        ];
        for x in MULTIPLES {
            out.push((
                format!("mrc_miss_ratio_{:.0}pct", x * 100.0),
                format!("{:.4}", c.predict(x, held).unwrap_or(-1.0)),
            ));
        }
        out
    }
}

/// What the cache holds: its memory limit, the memory its tiers have
/// taken (the N-zone's pages and the Z-zone's), and the bytes of the items
/// in them (the Z-zone's decoded).
#[derive(Clone, Copy, Debug, Default)]
pub struct Held {
    pub limit: u64,
    pub used: u64,
    pub data: u64,
    /// The Z-zone's codec ratio (decoded bytes per stored byte; 0 with no
    /// zone or nothing in it).
    pub zone_ratio: f64,
}

impl Held {
    /// What the engine's counters say it holds.
    pub fn of(e: &crate::stats::EngineStats) -> Held {
        let (zone_memory, zone_data, zone_stored) = e.zzone.as_ref().map_or((0, 0, 0), |z| {
            (z.zone.memory_bytes, z.zone.raw_bytes, z.zone.stored_bytes)
        });
        Held {
            limit: e.limit_maxbytes,
            used: e.total_malloced + zone_memory,
            data: e.bytes + zone_data,
            zone_ratio: match zone_stored {
                0 => 0.0,
                s => zone_data as f64 / s as f64,
            },
        }
    }

    /// The bytes of items the cache would hold when its memory is full: at
    /// the density it has now, or, if more, with its memory taken by the
    /// Z-zone at [`ZONE_FILL`] of its codec ratio (under pressure the split
    /// gives the zone nearly all of it). None while it holds nothing.
    pub fn when_full(&self) -> Option<f64> {
        if self.used == 0 || self.data == 0 {
            return None;
        }
        let now = self.limit as f64 * self.data as f64 / self.used as f64;
        Some(now.max(self.limit as f64 * ZONE_FILL * self.zone_ratio))
    }
}

/// A snapshot of the curve: the sampled GETs by distance.
#[derive(Clone, Debug)]
pub struct Curve {
    hist: Vec<f64>,
    cold: f64,
    gets: f64,
    missed: f64,
    all_gets: f64,
    all_missed: f64,
}

impl Curve {
    /// Sampled GETs the curve has seen (scaled to all keys, decayed).
    pub fn gets(&self) -> f64 {
        self.gets
    }

    /// The miss ratio the cache had on the sampled GETs.
    pub fn observed(&self) -> Option<f64> {
        (self.gets > 0.0).then(|| self.missed / self.gets)
    }

    /// The miss ratio the cache had on all GETs ([`LiveMrc::count_gets`]),
    /// or on the sample's when it was told of none.
    pub fn level(&self) -> Option<f64> {
        match self.all_gets > 0.0 {
            true => Some(self.all_missed / self.all_gets),
            false => self.observed(),
        }
    }

    /// The miss ratio of an LRU of `bytes` bytes (the GETs whose distance
    /// is above it, interpolated within a bin, and the cold ones).
    pub fn lru_miss_ratio(&self, bytes: f64) -> f64 {
        if self.gets <= 0.0 {
            return 0.0;
        }
        let mut missed = self.cold;
        for (b, &n) in self.hist.iter().enumerate() {
            let top = bin_top(b);
            let bottom = if b == 0 { 0.0 } else { bin_top(b - 1) };
            if bytes < bottom {
                missed += n;
            } else if bytes < top {
                missed += n * (top - bytes) / (top - bottom);
            }
        }
        (missed / self.gets).clamp(0.0, 1.0)
    }

    /// The LRU size whose miss ratio is the sample's observed one: the
    /// smallest where the curve is at or under it (None before any GET,
    /// or when the cache missed less than an LRU of any size would, as
    /// with the curve's sampling noise on a cache that holds everything).
    pub fn effective_bytes(&self) -> Option<f64> {
        let want = self.observed()?;
        if self.lru_miss_ratio(f64::MAX) > want {
            return None;
        }
        // The curve falls with size: bisect on a log scale.
        let (mut lo, mut hi) = (1.0f64, bin_top(BINS - 1));
        for _ in 0..100 {
            let mid = (lo * hi).sqrt();
            if self.lru_miss_ratio(mid) <= want {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Some(hi)
    }

    /// The LRU size the cache is taken for: [`Curve::effective_bytes`];
    /// or, where the cache misses hardly more than its cold misses (the
    /// curve is flat there, and crosses its miss ratio anywhere past its
    /// knee), the bytes it would hold when full ([`Held::when_full`]) if
    /// more. Floor or not is asked of the cache's miss ratio and of the
    /// sample's: a sample may hold more or fewer of the cold keys than
    /// its share, and either way reads as capacity misses (ETC at -m 96:
    /// the sample's said floor, the cache's did not; YCSB-B at -m 64 the
    /// other way round).
    pub fn capacity(&self, held: Held) -> Option<f64> {
        let c = self.effective_bytes();
        let cold = self.lru_miss_ratio(f64::MAX);
        let at_floor = [self.level(), self.observed()]
            .iter()
            .any(|m| m.is_some_and(|m| m <= cold + FLOOR));
        match (c, held.when_full()) {
            (Some(c), Some(full)) if at_floor => Some(c.max(full)),
            (None, full) => full,
            (c, _) => c,
        }
    }

    /// The miss ratio predicted with `x` times the memory: the curve's
    /// ratio between `x` times the capacity and the capacity, applied to
    /// the cache's own miss ratio. None before any GET.
    pub fn predict(&self, x: f64, held: Held) -> Option<f64> {
        let level = self.level()?;
        let Some(c) = self.capacity(held) else {
            return Some(level);
        };
        let (at, now) = (self.lru_miss_ratio(x * c), self.lru_miss_ratio(c));
        Some(match now > 0.0 {
            true => (level * at / now).min(1.0),
            false => (level + at).min(1.0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::hash;

    fn h(k: u64) -> u64 {
        hash(&k.to_le_bytes())
    }

    /// A cyclic scan over `n` keys of 100 bytes through an LRU of `cap`
    /// bytes: every GET misses below n * 100 bytes and hits above.
    #[test]
    fn a_scan_has_a_cliff_at_its_size() {
        let mut m = LiveMrc::with_keys(10_000, 0);
        for round in 0..5 {
            for k in 0..1000 {
                let hit = round > 0;
                let a = if hit {
                    Access::Hit { size: 100 }
                } else {
                    Access::Miss
                };
                m.record(h(k), a, 0, || None);
                if !hit {
                    m.record(h(k), Access::Store { size: 100 }, 0, || None);
                }
            }
        }
        let c = m.curve();
        assert!(
            (c.lru_miss_ratio(100_000.0 * 1.1) - 0.2).abs() < 0.01,
            "cold only"
        );
        assert!(
            (c.lru_miss_ratio(100_000.0 * 0.9) - 1.0).abs() < 0.01,
            "all miss"
        );
        // The cache hit every reuse: it is an LRU of at least the scan.
        assert!((c.observed().unwrap() - 0.2).abs() < 1e-9);
        let eff = c.effective_bytes().unwrap();
        assert!((95_000.0..=110_000.0).contains(&eff), "{eff}");
        assert!((c.predict(0.5, Held::default()).unwrap() - 1.0).abs() < 0.01);
        assert!((c.predict(2.0, Held::default()).unwrap() - 0.2).abs() < 0.01);
    }

    /// Against an exact LRU simulation at several sizes, on a skewed
    /// stream: the sampled curve (bounded to a few thousand keys, so the
    /// rate falls) is within 0.03 everywhere.
    #[test]
    fn the_sampled_curve_follows_an_exact_lru() {
        let keys = 50_000u64;
        let mut rng = 0x2545F4914F6CDD1Du64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        // Skewed: a key is min of two uniform draws' square.
        let stream: Vec<u64> = (0..400_000)
            .map(|_| {
                let u = (next() % 1_000_000) as f64 / 1e6;
                (u * u * u * keys as f64) as u64
            })
            .collect();
        let size = |k: u64| 50 + (k % 7) as u32 * 40;
        let mut m = LiveMrc::with_keys(4000, 0);
        for &k in &stream {
            m.record(h(k), Access::Miss, 0, || None);
            m.record(h(k), Access::Store { size: size(k) }, 0, || None);
        }
        assert!(m.rate() < 0.5, "the bound lowered the rate: {}", m.rate());
        assert!(m.keys() <= 4000);
        let c = m.curve();
        // The exact curve: every key through the same stack (`stack`'s
        // own tests hold it to a naive LRU list).
        let mut exact = Stack::new(true);
        let mut slots = Vec::new();
        let distances: Vec<Option<u64>> = stream
            .iter()
            .map(|&k| exact.access(k as u32, size(k), &mut slots).map(|d| d.bytes))
            .collect();
        for cap in [20_000u64, 100_000, 400_000, 1_600_000] {
            let misses = distances
                .iter()
                .filter(|d| d.is_none_or(|d| d > cap))
                .count();
            let exact = misses as f64 / stream.len() as f64;
            let got = c.lru_miss_ratio(cap as f64);
            assert!(
                (got - exact).abs() < 0.03,
                "{cap} bytes: {got} sampled, {exact} exact"
            );
        }
    }

    proptest::proptest! {
        /// With every key sampled, the curve's stack (its slots kept in the
        /// index) gives exactly the distances of a plain stack that keeps
        /// its slots in an array, through hits, misses, stores, deletes
        /// and the stack's renumbering.
        #[test]
        fn the_index_keeps_the_stack_exact(
            ops in proptest::collection::vec((0u64..300, 0u8..4, 1u32..5000), 1..3000)
        ) {
            let mut m = LiveMrc::with_keys(1000, 0);
            let mut model = Stacked::new();
            let mut sizes = std::collections::HashMap::new();
            for (k, op, size) in ops {
                let acc = [Access::Hit { size }, Access::Miss, Access::Store { size }, Access::Delete][op as usize];
                m.record(h(k), acc, 0, || None);
                match acc {
                    Access::Delete => {
                        if sizes.remove(&k).is_some() {
                            model.remove(k as u32);
                        }
                    }
                    Access::Miss => {
                        let size = *sizes.entry(k).or_insert(0);
                        model.access(k as u32, size, Some(false), 1.0);
                    }
                    Access::Hit { .. } | Access::Store { .. } => {
                        sizes.insert(k, size);
                        model.access(k as u32, size, (op == 0).then_some(true), 1.0);
                    }
                }
                m.validate();
                proptest::prop_assert_eq!(m.keys(), sizes.len());
            }
            let (c, e) = (m.curve(), model.curve(0.0, 0.0));
            proptest::prop_assert_eq!((c.hist, c.cold, c.gets, c.missed), (e.hist, e.cold, e.gets, e.missed));
        }
    }

    /// Two prefixes, interleaved: a scan of 1,000 keys and one of 100.
    /// Each part's curve has its own cliff, at its own data's size, as if
    /// it had an LRU of its own; the whole cache's is at their sum.
    #[test]
    fn each_prefix_has_its_own_curve() {
        let mut m = LiveMrc::with_keys(10_000, 0);
        for round in 0..4 {
            for k in 0..1000u64 {
                for (part, key) in [(1u16, k), (2, 5000 + k % 100)] {
                    let first = round == 0 && (part == 1 || k < 100);
                    let a = if first {
                        Access::Miss
                    } else {
                        Access::Hit { size: 100 }
                    };
                    m.record(h(key), a, 0, || Some(part));
                    if first {
                        m.record(h(key), Access::Store { size: 100 }, 0, || Some(part));
                    }
                }
            }
        }
        m.validate();
        let parts = m.part_curves();
        assert_eq!(parts.iter().map(|p| p.0).collect::<Vec<_>>(), [1, 2]);
        let (big, small) = (&parts[0].1, &parts[1].1);
        // Above its scan, only its cold misses; below, every GET misses.
        assert!(big.lru_miss_ratio(110_000.0) < 0.26 && big.lru_miss_ratio(90_000.0) > 0.99);
        assert!(small.lru_miss_ratio(11_000.0) < 0.03 && small.lru_miss_ratio(9_000.0) > 0.99);
        let whole = m.curve();
        assert!(whole.lru_miss_ratio(121_000.0) < 0.15 && whole.lru_miss_ratio(100_000.0) > 0.5);
        // A key deleted leaves its part too.
        m.record(h(5000), Access::Delete, 0, || unreachable!("known key"));
        assert_eq!(m.keys(), 1099);
        m.validate();
        // Parts are bounded: the first MAX_PARTS prefixes seen.
        for p in 3..20u16 {
            m.record(h(90_000 + p as u64), Access::Miss, 0, || Some(p));
        }
        assert_eq!(m.part_curves().len(), MAX_PARTS);
    }

    /// A prefix alone in the sample shares the whole stack; when a second
    /// prefix comes, its own curve goes on exactly as a curve fed its
    /// keys alone.
    #[test]
    fn a_lone_prefix_shares_the_whole_stack_until_a_second_comes() {
        let (mut m, mut alone) = (LiveMrc::with_keys(10_000, 0), LiveMrc::with_keys(10_000, 0));
        let mut rng = 7u64;
        let mut next = |n: u64| {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (rng >> 33) % n
        };
        let a = |m: &mut LiveMrc, alone: &mut LiveMrc, k: u64, acc: Access| {
            m.record(h(k), acc, 0, || Some(4));
            alone.record(h(k), acc, 0, || None);
        };
        for _ in 0..3000 {
            let k = next(500);
            a(
                &mut m,
                &mut alone,
                k,
                Access::Hit {
                    size: 50 + k as u32,
                },
            );
        }
        assert_eq!(m.parts.len(), 0, "one prefix: no stack of its own yet");
        let same = |c: &Curve, d: &Curve| c.hist == d.hist && c.cold == d.cold && c.gets == d.gets;
        assert!(same(&m.part_curves()[0].1, &alone.curve()));
        for i in 0..3000 {
            if i % 3 == 0 {
                m.record(h(10_000 + next(300)), Access::Miss, 0, || Some(9));
            }
            let k = next(500);
            a(
                &mut m,
                &mut alone,
                k,
                Access::Hit {
                    size: 50 + k as u32,
                },
            );
        }
        m.validate();
        let parts = m.part_curves();
        assert_eq!(parts.iter().map(|p| p.0).collect::<Vec<_>>(), [4, 9]);
        assert!(
            same(&parts[0].1, &alone.curve()),
            "the lone prefix's curve went on"
        );
        assert!(!same(&m.curve(), &alone.curve()));
        // A key with no prefix ends a lone prefix's sharing too.
        let mut m = LiveMrc::with_keys(100, 0);
        m.record(h(1), Access::Miss, 0, || Some(4));
        m.record(h(2), Access::Miss, 0, || None);
        m.record(h(1), Access::Hit { size: 5 }, 0, || {
            unreachable!("known key")
        });
        let parts = m.part_curves();
        assert_eq!(parts.len(), 1);
        assert_eq!((parts[0].1.gets(), m.curve().gets()), (2.0, 3.0));
    }

    #[test]
    fn deletes_leave_and_counts_decay() {
        let mut m = LiveMrc::with_keys(100, 0);
        m.record(h(1), Access::Store { size: 10 }, 0, || None);
        m.record(h(1), Access::Hit { size: 10 }, 0, || None);
        assert_eq!(m.keys(), 1);
        m.record(h(1), Access::Delete, 0, || None);
        m.record(h(2), Access::Delete, 0, || None);
        assert_eq!(m.keys(), 0);
        m.validate();
        let before = m.curve().gets();
        m.record(h(3), Access::Miss, HALF_LIFE, || None);
        let after = m.curve().gets();
        assert!(
            (after - (before / 2.0 + 1.0)).abs() < 1e-9,
            "{before} {after}"
        );
        assert!(m.curve().observed().is_some());
    }
}
