//! Sampled per-class LRU stack distances: the hit-ratio curves that the
//! `mrc` rule ([`super::mrc`]) allocates pages by.
//!
//! Carra & Michiardi's offline optimum (`../shared/seeds/003_*`, section
//! 3.2, Algorithms 1-2) needs every class's hit curve: the (cost of the)
//! requests that would hit if the class had `p` pages, from the LRU stack
//! distances of its requests (Mattson). A full stack per class would cost as
//! much as the cache's index, so we keep the stacks of a spatial sample of
//! the keys (SHARDS, Waldspurger et al., FAST'15): a key is tracked iff the
//! top 24 bits of its hash fall under a threshold (rate `R`), and the number
//! of distinct sampled keys of its class referenced between two references
//! to it, divided by `R`, estimates its stack distance in items. Unlike the
//! ghost set (which sees one page past the current allocation), the curve
//! covers every allocation: a class that has one page and would use twenty
//! shows it at once, which is what lets pages follow a shifting workload.
//!
//! Structure: an open-addressing table of the sampled keys (13 bytes a
//! slot: the key's hash, its class and per-class timestamp, the cost of its
//! last reference), and per class a Fenwick tree over its timestamps that
//! counts the keys referenced since any timestamp in O(log n). Timestamps
//! are renumbered into arrays twice the class's live keys when it runs out
//! of them, or when its arrays hold three times what is live (amortised
//! O(1); the arrays never exceed three times the live keys, which is what
//! the memory bound counts). The sample
//! stays bounded: a class forgets keys deeper than the whole cache could
//! hold, and when the table is full anyway the rate halves and the keys
//! above the new threshold leave (SHARDS's fixed-size variant). Distances
//! are histogrammed per class in pages, weighted by cost; the counts decay
//! by half at every decision of the rule, so the curves describe the recent
//! past (the workload may be shifting).
//!
//! Memory is fixed when the profile is built (the table, the largest
//! timestamp arrays the bound allows, the histograms) and counted in `-m`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Top hash bits that decide sampling.
const KEY_BITS: u32 = 24;
const FULL_RATE: u64 = 1 << KEY_BITS;
const EMPTY: u64 = 0;
const TOMB: u64 = 1;
const TS_BITS: u32 = 23;
const TS_MASK: u32 = (1 << TS_BITS) - 1;
const NONE: u32 = u32::MAX;
/// Smallest timestamp array of a class.
const MIN_CAP: usize = 64;
/// Most sampled keys (timestamps must fit in 23 bits with room to renumber).
pub const MAX_KEYS: usize = 1 << 21;
/// Bytes a table slot takes: the key's hash, class and timestamp, cost.
const SLOT_BYTES: usize = 8 + 4 + 1;

/// Whether the key of hash `h` is in the sample at this threshold.
#[inline]
pub fn is_sampled(h: u64, threshold: u64) -> bool {
    h >> (64 - KEY_BITS) < threshold
}

/// A key's hash as stored: never EMPTY or TOMB.
#[inline]
fn stored(h: u64) -> u64 {
    h.max(2)
}

#[inline]
fn meta(class: usize, ts: u32) -> u32 {
    (class as u32 & 0xff) << TS_BITS | ts
}

#[inline]
fn meta_class(m: u32) -> usize {
    (m >> TS_BITS) as usize
}

#[inline]
fn meta_ts(m: u32) -> u32 {
    m & TS_MASK
}

/// One class's sampled LRU stack, as timestamps of last references.
struct Stack {
    /// Fenwick tree over timestamps (1-based): 1 where a live key's last
    /// reference is.
    tree: Vec<u32>,
    /// Timestamp -> table slot of the key referenced then, or NONE.
    owner: Vec<u32>,
    next: u32,
    /// No live timestamp below this.
    oldest: u32,
    live: u32,
    /// Cost of GETs per distance bin (pages / bin width), and of all GETs.
    hist: Vec<f64>,
    gets: f64,
    /// Cost of the GETs with a distance that hit and missed in the cache.
    hits: f64,
    misses: f64,
}

impl Stack {
    fn new(bins: usize) -> Stack {
        Stack {
            tree: vec![0; MIN_CAP + 1],
            owner: vec![NONE; MIN_CAP],
            next: 0,
            oldest: 0,
            live: 0,
            hist: vec![0.0; bins],
            gets: 0.0,
            hits: 0.0,
            misses: 0.0,
        }
    }

    fn add(&mut self, ts: u32, d: i32) {
        let mut i = ts as usize + 1;
        while i < self.tree.len() {
            self.tree[i] = self.tree[i].wrapping_add_signed(d);
            i += i & i.wrapping_neg();
        }
    }

    /// Live keys with a timestamp at most `ts`.
    fn prefix(&self, ts: u32) -> u32 {
        let mut i = ts as usize + 1;
        let mut s = 0u32;
        while i > 0 {
            s = s.wrapping_add(self.tree[i]);
            i &= i - 1;
        }
        s
    }

    /// Keys referenced after `ts` (its stack distance, in sampled keys).
    fn above(&self, ts: u32) -> u32 {
        self.live - self.prefix(ts)
    }

    fn remove(&mut self, ts: u32) {
        self.owner[ts as usize] = NONE;
        self.add(ts, -1);
        self.live -= 1;
    }

    /// Its arrays hold three times what is live: renumber into smaller ones
    /// (keeps the reserved memory a bound when keys change class).
    fn oversized(&self) -> bool {
        self.owner.len() > MIN_CAP && (self.live as usize + 1) * 3 < self.owner.len()
    }
}

/// A class's hit curve as sampled.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Curve {
    /// `hits_at[b]`: cost of the GETs that would have hit with `b` bins of
    /// pages (distances scaled by the sampling rate).
    pub hits_at: Vec<f64>,
    /// Cost of all its GETs (keys never seen, or forgotten, excepted).
    pub gets: f64,
    /// Of the GETs with a distance, the cost of those that hit and missed
    /// in the real cache: where the curve should cross the class's current
    /// size.
    pub hits: f64,
    pub misses: f64,
    /// Sampled keys in its stack.
    pub keys: u32,
}

pub struct Profile {
    /// Sampled iff the top 24 bits of the key's hash are below this.
    threshold: u64,
    /// `threshold`, for the GET path outside the engine lock
    /// (`crate::Cache::get`): keys it says are sampled go through the lock.
    published: Arc<AtomicU64>,
    /// Open addressing by the hash's low bits: the key's hash (EMPTY,
    /// TOMB), its class and timestamp, the cost of its last reference.
    hashes: Box<[u64]>,
    metas: Box<[u32]>,
    costs: Box<[u8]>,
    mask: usize,
    live: usize,
    tombs: usize,
    max_keys: usize,
    stacks: Vec<Stack>,
    per_page: Vec<u32>,
    /// Pages of memory in all (a class never needs more).
    total_pages: u32,
    bin_pages: u32,
    /// Sampled GETs since the last `decay`.
    pub gets_since: u64,
}

/// Bytes a profile of `max_keys` keys takes for `nclasses` classes and
/// `bins` histogram bins (see [`Profile::new`]).
fn footprint(max_keys: usize, nclasses: usize, bins: usize) -> usize {
    let slots = (max_keys * 4 / 3).next_power_of_two();
    // Timestamp arrays (tree + owner, 8 bytes) at most three times a
    // class's live keys (plus one), or its minimum; histograms 8 bytes a bin.
    slots * SLOT_BYTES + (3 * max_keys + nclasses * (MIN_CAP + 3)) * 8 + nclasses * bins * 8
}

impl Profile {
    /// A profile of at most `bytes` (at least 256 keys) for classes of
    /// `per_page` items per page, with `total_pages` pages of memory.
    pub fn new(per_page: &[u32], total_pages: u32, bytes: usize) -> Profile {
        let n = per_page.len();
        // Bins of a page, or of a few pages when memory is large.
        let bin_pages = total_pages.div_ceil(512).max(1);
        let bins = total_pages.div_ceil(bin_pages) as usize;
        let mut max_keys = MAX_KEYS;
        while max_keys > 256 && footprint(max_keys, n, bins) > bytes {
            max_keys /= 2;
        }
        let slots = (max_keys * 4 / 3).next_power_of_two();
        Profile {
            threshold: FULL_RATE,
            published: Arc::new(AtomicU64::new(FULL_RATE)),
            hashes: vec![EMPTY; slots].into_boxed_slice(),
            metas: vec![0; slots].into_boxed_slice(),
            costs: vec![0; slots].into_boxed_slice(),
            mask: slots - 1,
            live: 0,
            tombs: 0,
            max_keys,
            stacks: (0..n).map(|_| Stack::new(bins)).collect(),
            per_page: per_page.to_vec(),
            total_pages: total_pages.max(1),
            bin_pages,
            gets_since: 0,
        }
    }

    /// Memory reserved for the profile (the most it can grow to).
    pub fn memory_bytes(&self) -> usize {
        footprint(self.max_keys, self.stacks.len(), self.bins())
    }

    pub fn bins(&self) -> usize {
        self.stacks.first().map_or(0, |s| s.hist.len())
    }

    /// Pages per histogram bin.
    pub fn bin_pages(&self) -> u32 {
        self.bin_pages
    }

    /// The sampling rate.
    pub fn rate(&self) -> f64 {
        self.threshold as f64 / FULL_RATE as f64
    }

    pub fn sampled_keys(&self) -> usize {
        self.live
    }

    #[inline]
    fn sampled(&self, h: u64) -> bool {
        is_sampled(h, self.threshold)
    }

    /// The sampling threshold as the GET path reads it ([`is_sampled`]).
    pub fn published_threshold(&self) -> Arc<AtomicU64> {
        self.published.clone()
    }

    fn find(&self, h: u64) -> Option<usize> {
        let mut i = h as usize & self.mask;
        loop {
            match self.hashes[i] {
                EMPTY => return None,
                x if x == h => return Some(i),
                _ => i = (i + 1) & self.mask,
            }
        }
    }

    /// A GET of `h`; `hit`: the class and cost of the item found. A miss
    /// on a key sampled before counts in the class it was in then, and is a
    /// capacity miss (memory for its class would have kept it): its class,
    /// the number of misses it stands for (1 / rate) and their cost are
    /// returned.
    #[inline]
    pub fn get(
        &mut self,
        h: u64,
        hit: Option<(usize, u8)>,
        costs: &[u32; 256],
    ) -> Option<(usize, u64, u64)> {
        if !self.sampled(h) {
            return None;
        }
        let h = stored(h);
        self.gets_since += 1;
        let found = self.find(h);
        let (class, cost_q) = match (hit, found) {
            (Some(c), _) => c,
            (None, Some(i)) => (meta_class(self.metas[i]), self.costs[i]),
            // Never seen (or forgotten): a miss for any allocation, and
            // nothing to attribute it to until the SET says its class.
            (None, None) => return None,
        };
        let weight = FULL_RATE / self.threshold;
        let st = self.stacks.get_mut(class)?;
        let cost = costs[cost_q as usize] as f64;
        st.gets += cost;
        if let Some(i) = found {
            let m = self.metas[i];
            if meta_class(m) == class {
                // Distance in items: sampled keys above it over the rate.
                let d = st.above(meta_ts(m)) as f64 * FULL_RATE as f64 / self.threshold as f64;
                let pages = d / self.per_page[class].max(1) as f64;
                let bin = (pages / self.bin_pages as f64) as usize;
                if let Some(b) = st.hist.get_mut(bin) {
                    *b += cost;
                }
                if hit.is_some() {
                    st.hits += cost;
                } else {
                    st.misses += cost;
                }
            }
        }
        self.touch(h, found, class, cost_q);
        (hit.is_none() && found.is_some()).then_some((class, weight, weight * cost as u64))
    }

    /// A SET of `h` into `class` (a reference: the key goes on top).
    #[inline]
    pub fn set(&mut self, h: u64, class: usize, cost_q: u8) {
        if !self.sampled(h) || class >= self.stacks.len() {
            return;
        }
        let h = stored(h);
        let found = self.find(h);
        self.touch(h, found, class, cost_q);
    }

    /// Put the key on top of `class`'s stack.
    fn touch(&mut self, h: u64, found: Option<usize>, class: usize, cost_q: u8) {
        let slot = match found {
            Some(i) => {
                self.remove_key(i);
                i
            }
            None => {
                if self.live >= self.max_keys {
                    self.halve_rate();
                    if !self.sampled(h) {
                        return;
                    }
                }
                if (self.live + self.tombs + 1) * 4 > self.hashes.len() * 3 {
                    self.rehash();
                }
                let mut i = h as usize & self.mask;
                while self.hashes[i] > TOMB {
                    i = (i + 1) & self.mask;
                }
                if self.hashes[i] == TOMB {
                    self.tombs -= 1;
                }
                self.hashes[i] = h;
                self.live += 1;
                i
            }
        };
        let ts = self.next_ts(class);
        let st = &mut self.stacks[class];
        st.owner[ts as usize] = slot as u32;
        st.add(ts, 1);
        st.live += 1;
        self.metas[slot] = meta(class, ts);
        self.costs[slot] = cost_q;
        self.trim(class);
    }

    /// Take the key in `slot` off its class's stack (the slot stays).
    fn remove_key(&mut self, slot: usize) {
        let m = self.metas[slot];
        let class = meta_class(m);
        self.stacks[class].remove(meta_ts(m));
        if self.stacks[class].oversized() {
            self.renumber(class);
        }
    }

    /// The next timestamp of `class`.
    fn next_ts(&mut self, class: usize) -> u32 {
        let st = &mut self.stacks[class];
        if (st.next as usize) >= st.owner.len() {
            self.renumber(class);
        }
        let st = &mut self.stacks[class];
        st.next += 1;
        st.next - 1
    }

    /// Renumber `class`'s live keys 0..live, in order, into arrays twice
    /// their number.
    fn renumber(&mut self, class: usize) {
        let st = &mut self.stacks[class];
        let cap = (2 * (st.live as usize + 1)).max(MIN_CAP);
        let mut owner = vec![NONE; cap];
        let mut tree = vec![0u32; cap + 1];
        let mut n = 0usize;
        for &o in &st.owner[st.oldest as usize..] {
            if o != NONE {
                owner[n] = o;
                self.metas[o as usize] = meta(class, n as u32);
                tree[n + 1] = 1;
                n += 1;
            }
        }
        // O(n) Fenwick build from the ones.
        for i in 1..=cap {
            let j = i + (i & i.wrapping_neg());
            if j <= cap {
                tree[j] += tree[i];
            }
        }
        st.owner = owner;
        st.tree = tree;
        st.oldest = 0;
        st.next = n as u32;
    }

    /// Forget `class`'s keys deeper than all the memory could hold.
    fn trim(&mut self, class: usize) {
        let limit =
            (self.total_pages as f64 * self.per_page[class] as f64 * self.rate()) as u32 + 1;
        while self.stacks[class].live > limit {
            let st = &mut self.stacks[class];
            while st.owner[st.oldest as usize] == NONE {
                st.oldest += 1;
            }
            let slot = st.owner[st.oldest as usize] as usize;
            self.remove_key(slot);
            self.hashes[slot] = TOMB;
            self.live -= 1;
            self.tombs += 1;
        }
    }

    /// Sample half as many keys: those above the new threshold leave.
    fn halve_rate(&mut self) {
        self.threshold = (self.threshold / 2).max(1);
        self.published.store(self.threshold, Ordering::Relaxed);
        for i in 0..self.hashes.len() {
            let h = self.hashes[i];
            if h > TOMB && !self.sampled(h) {
                self.remove_key(i);
                self.hashes[i] = TOMB;
                self.live -= 1;
                self.tombs += 1;
            }
        }
        self.rehash();
    }

    /// Rebuild the table without tombstones.
    fn rehash(&mut self) {
        let hashes = std::mem::replace(
            &mut self.hashes,
            vec![EMPTY; self.mask + 1].into_boxed_slice(),
        );
        let metas = std::mem::replace(&mut self.metas, vec![0; self.mask + 1].into_boxed_slice());
        let costs = std::mem::replace(&mut self.costs, vec![0; self.mask + 1].into_boxed_slice());
        self.tombs = 0;
        for (j, &h) in hashes.iter().enumerate() {
            if h <= TOMB {
                continue;
            }
            let mut i = h as usize & self.mask;
            while self.hashes[i] != EMPTY {
                i = (i + 1) & self.mask;
            }
            self.hashes[i] = h;
            self.metas[i] = metas[j];
            self.costs[i] = costs[j];
            let m = metas[j];
            self.stacks[meta_class(m)].owner[meta_ts(m) as usize] = i as u32;
        }
    }

    /// Per class, what the GETs of the recent past say (see [`Curve`]).
    pub fn curves(&self) -> Vec<Curve> {
        self.stacks
            .iter()
            .map(|st| {
                let mut hits_at = Vec::with_capacity(st.hist.len() + 1);
                let mut sum = 0.0;
                hits_at.push(0.0);
                for &h in &st.hist {
                    sum += h;
                    hits_at.push(sum);
                }
                Curve {
                    hits_at,
                    gets: st.gets,
                    hits: st.hits,
                    misses: st.misses,
                    keys: st.live,
                }
            })
            .collect()
    }

    /// Age the counts by `keep` (the rule's decisions do, so the curves
    /// describe the recent past).
    pub fn decay(&mut self, keep: f64) {
        for st in &mut self.stacks {
            st.hist.iter_mut().for_each(|h| *h *= keep);
            st.gets *= keep;
            st.hits *= keep;
            st.misses *= keep;
        }
        self.gets_since = 0;
    }

    /// Forget every key (flush_all: nothing is cached any more).
    pub fn clear(&mut self) {
        self.hashes.fill(EMPTY);
        self.live = 0;
        self.tombs = 0;
        for st in &mut self.stacks {
            st.owner = vec![NONE; MIN_CAP];
            st.tree = vec![0; MIN_CAP + 1];
            st.next = 0;
            st.oldest = 0;
            st.live = 0;
        }
    }
}

#[cfg(any(test, feature = "testing"))]
impl Profile {
    /// Check the sample (tests and fuzzing): the open-addressing table
    /// (counts of live and tombstone slots, load, every key sampled and
    /// found from its home slot), each key on its class's stack at its
    /// timestamp and each stack entry pointing back, the Fenwick trees
    /// against their entries, timestamps within [oldest, next), arrays
    /// within three times the live keys (what `footprint` counts), and the
    /// histograms: non-negative, and no more than the GETs they count.
    pub fn validate(&self) {
        let n = self.hashes.len();
        assert!(n.is_power_of_two() && self.mask == n - 1);
        assert_eq!(self.metas.len(), n);
        assert_eq!(self.costs.len(), n);
        let live = self.hashes.iter().filter(|&&h| h > TOMB).count();
        let tombs = self.hashes.iter().filter(|&&h| h == TOMB).count();
        assert_eq!(live, self.live, "live keys");
        assert_eq!(tombs, self.tombs, "tombstones");
        assert!(live <= self.max_keys, "sample bound");
        assert!((live + tombs) * 4 <= n * 3, "table load");
        for (i, &h) in self.hashes.iter().enumerate() {
            if h <= TOMB {
                continue;
            }
            assert!(self.sampled(h), "key above the sampling threshold");
            assert_eq!(self.find(h), Some(i), "key found at its slot");
            let m = self.metas[i];
            let st = &self.stacks[meta_class(m)];
            assert_eq!(st.owner[meta_ts(m) as usize], i as u32, "stack points back");
        }
        let mut total = 0;
        for (c, st) in self.stacks.iter().enumerate() {
            assert_eq!(st.tree.len(), st.owner.len() + 1, "class {c} tree size");
            assert!(st.oldest <= st.next && st.next as usize <= st.owner.len());
            assert!(
                st.owner.len() <= MIN_CAP.max(3 * (st.live as usize + 1)),
                "class {c} arrays over three times its keys"
            );
            let mut count = 0u32;
            for (ts, &o) in st.owner.iter().enumerate() {
                if o != NONE {
                    assert!(ts >= st.oldest as usize && ts < st.next as usize);
                    assert_eq!(self.metas[o as usize], meta(c, ts as u32), "owner's meta");
                    assert!(self.hashes[o as usize] > TOMB, "owner is a live key");
                    count += 1;
                }
                assert_eq!(
                    st.prefix(ts as u32),
                    count,
                    "class {c} Fenwick prefix at {ts}"
                );
            }
            assert_eq!(count, st.live, "class {c} live");
            total += count as usize;
            let hist: f64 = st.hist.iter().sum();
            assert!(st.hist.iter().all(|&h| h >= 0.0 && h.is_finite()));
            let slack = 1e-9 * st.gets.max(1.0);
            assert!(st.hits >= 0.0 && st.misses >= 0.0);
            assert!(hist <= st.hits + st.misses + slack, "class {c} histogram");
            assert!(st.hits + st.misses <= st.gets + slack, "class {c} GETs");
        }
        assert_eq!(total, self.live, "keys on stacks");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn costs() -> Box<[u32; 256]> {
        let mut c = Box::new([0u32; 256]);
        for (q, v) in c.iter_mut().enumerate() {
            *v = crate::item::dequantize_cost(q as u8);
        }
        c
    }

    fn h(k: u64) -> u64 {
        xxhash_rust::xxh3::xxh3_64(&k.to_le_bytes())
    }

    /// Exact per-class LRU stacks: the distance histogram a profile with
    /// rate 1 and one item per page must reproduce.
    struct Model {
        stacks: Vec<Vec<u64>>,
        hist: Vec<Vec<f64>>,
        gets: Vec<f64>,
    }

    impl Model {
        fn find(&self, k: u64) -> Option<(usize, usize)> {
            self.stacks
                .iter()
                .enumerate()
                .find_map(|(c, s)| s.iter().position(|&x| x == k).map(|i| (c, i)))
        }

        fn get(&mut self, k: u64, hit: Option<usize>, cost: f64) {
            let found = self.find(k);
            let class = match (hit, found) {
                (Some(c), _) => c,
                (None, Some((c, _))) => c,
                (None, None) => return,
            };
            self.gets[class] += cost;
            if let Some((c, i)) = found {
                if c == class {
                    let d = self.stacks[c].len() - 1 - i;
                    if let Some(b) = self.hist[c].get_mut(d) {
                        *b += cost;
                    }
                }
            }
            self.set(k, class);
        }

        fn set(&mut self, k: u64, class: usize) {
            if let Some((c, i)) = self.find(k) {
                self.stacks[c].remove(i);
            }
            self.stacks[class].push(k);
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        /// GET of a key; Some(class): it hit an item of that class.
        Get(u64, Option<usize>),
        Set(u64, usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u64..300, proptest::option::of(0usize..3)).prop_map(|(k, c)| Op::Get(k, c)),
            (0u64..300, 0usize..3).prop_map(|(k, c)| Op::Set(k, c)),
        ]
    }

    proptest! {
        /// With every key sampled, distances are exact LRU stack distances
        /// per class (bins of one item here), including keys that change
        /// class and arrays renumbered many times.
        #[test]
        fn distances_match_exact_lru_stacks(ops in proptest::collection::vec(op(), 1..2000)) {
            let costs = costs();
            // 512 pages of one item: single-item bins, and no key of the 300
            // is ever deeper than memory (none is forgotten).
            let bins = 512;
            let mut p = Profile::new(&[1, 1, 1], bins, 64 << 10);
            prop_assert_eq!(p.bins(), bins as usize);
            let mut m = Model {
                stacks: vec![Vec::new(); 3],
                hist: vec![vec![0.0; bins as usize]; 3],
                gets: vec![0.0; 3],
            };
            let q = crate::item::quantize_cost(7);
            let cost = costs[q as usize] as f64;
            for o in ops {
                match o {
                    Op::Get(k, c) => {
                        p.get(h(k), c.map(|c| (c, q)), &costs);
                        m.get(k, c, cost);
                    }
                    Op::Set(k, c) => {
                        p.set(h(k), c, q);
                        m.set(k, c);
                    }
                }
                p.validate();
            }
            prop_assert!((p.rate() - 1.0).abs() < 1e-12);
            let curves = p.curves();
            for (c, curve) in curves.iter().enumerate() {
                let mut cum = vec![0.0];
                for &x in &m.hist[c] {
                    cum.push(cum.last().unwrap() + x);
                }
                prop_assert_eq!(&curve.hits_at, &cum, "class {}", c);
                prop_assert_eq!(curve.gets, m.gets[c]);
            }
            prop_assert_eq!(p.sampled_keys(), m.stacks.iter().map(Vec::len).sum::<usize>());
            // What the memory bound counts on: a class's arrays never hold
            // more than three times its live keys (or the minimum).
            for st in &p.stacks {
                prop_assert!(st.owner.len() <= MIN_CAP.max(3 * (st.live as usize + 1)));
            }
        }
    }

    #[test]
    fn a_full_table_halves_the_rate_and_stays_within_its_memory() {
        let costs = costs();
        let mut p = Profile::new(&[100, 10], 1000, 64 << 10);
        let bytes = p.memory_bytes();
        assert!(bytes <= 64 << 10, "{bytes}");
        let max = p.max_keys;
        for k in 0..200_000u64 {
            p.set(h(k), (k % 2) as usize, 1);
            assert!(p.sampled_keys() <= max);
        }
        assert!(p.rate() < 1.0 && p.rate() > 0.0);
        // Roughly max/2..max keys stay sampled (the rate halves when full).
        assert!(p.sampled_keys() * 4 > max, "{} of {max}", p.sampled_keys());
        // Every sampled key is found again and gives a distance.
        for k in 0..200_000u64 {
            p.get(h(k), Some(((k % 2) as usize, 1)), &costs);
        }
        let curves = p.curves();
        assert!(curves
            .iter()
            .all(|c| *c.hits_at.last().unwrap() <= c.gets + 1e-9));
        assert!(curves[0].gets > 0.0 && curves[1].gets > 0.0);
        let arrays: usize = p.stacks.iter().map(|s| s.owner.len()).sum();
        assert!(arrays <= 3 * max + 2 * (MIN_CAP + 3), "{arrays}");
    }

    #[test]
    fn sampled_distances_estimate_the_stack_distance() {
        // A loop over 20 000 keys of one class: every re-reference is at
        // distance 19 999. With 1 000 items a page that is page 19.
        let costs = costs();
        let mut p = Profile::new(&[1000], 64, 256 << 10);
        for round in 0..3 {
            for k in 0..20_000u64 {
                if round == 0 {
                    p.set(h(k), 0, 1);
                } else {
                    p.get(h(k), Some((0, 1)), &costs);
                }
            }
        }
        assert!(p.rate() < 1.0);
        let curve = &p.curves()[0];
        let (c, gets) = (&curve.hits_at, &curve.gets);
        // (Distances scale by 1/rate: the sample's spread puts most in
        // pages 18-21.)
        let near = c[22] - c[18];
        assert!(near > 0.9 * gets, "{near} of {gets}: {c:?}");
        assert!(c[18] < 0.05 * gets);
    }

    #[test]
    fn keys_deeper_than_all_memory_are_forgotten() {
        let costs = costs();
        // 8 pages of one item: a class never holds more than 8 (+1) keys.
        let mut p = Profile::new(&[1, 1], 8, 64 << 10);
        for k in 0..20u64 {
            p.set(h(k), 0, 1);
        }
        assert_eq!(p.sampled_keys(), 9);
        // The oldest keys are gone: a miss on one is nobody's.
        assert_eq!(p.get(h(0), None, &costs), None);
        assert!(p.get(h(19), None, &costs).is_some());
        // The other class is not touched.
        p.set(h(100), 1, 1);
        assert_eq!(p.sampled_keys(), 10);
    }

    #[test]
    fn decay_and_clear() {
        let costs = costs();
        let mut p = Profile::new(&[1], 8, 64 << 10);
        p.set(h(1), 0, 1);
        p.get(h(1), Some((0, 1)), &costs);
        assert_eq!(p.gets_since, 1);
        let before = p.curves()[0].hits_at[1];
        assert!(before > 0.0);
        p.decay(0.5);
        assert_eq!(p.gets_since, 0);
        assert_eq!(p.curves()[0].hits_at[1], before / 2.0);
        assert_eq!(p.curves()[0].hits, before / 2.0);
        // A miss on a key referenced before: a capacity miss of its class
        // (rate 1: it stands for one miss), at its last cost.
        assert_eq!(p.get(h(1), None, &costs), Some((0, 1, 1)));
        p.clear();
        assert_eq!(p.sampled_keys(), 0);
        // A miss on a forgotten key is attributed to nothing.
        assert_eq!(p.get(h(1), None, &costs), None);
        assert_eq!(p.curves()[0].gets, 1.5);
    }
}
