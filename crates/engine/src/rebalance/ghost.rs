//! The ghost set: which keys were evicted recently, and from which class.
//!
//! Carra & Michiardi (`../shared/seeds/003_*`, section 3.3) tell capacity
//! misses (the key was cached and evicted: more memory for its class would
//! have turned the miss into a hit) from compulsory ones (first request, or
//! a request so long after the last one that no realistic cache keeps it)
//! with a Decaying Bloom Filter of the keys requested over a sliding window
//! of 100 000 requests. We keep the keys *evicted* over a sliding window
//! instead, which answers the same question more directly (a miss on a key
//! the cache never held is never counted) and, unlike a Bloom filter, says
//! which class the key was evicted from: the class that would have needed
//! the memory, so a GET miss is attributed to its class at once, without
//! waiting for the SET that follows (whose class is the same unless the
//! value's size changed).
//!
//! The window is counted per class, in pages: a key is remembered while
//! fewer than `window_pages` pages' worth of its class's items have been
//! evicted after it (a class whose pages hold 26 214 items remembers
//! 26 214 keys per page of window, one whose pages hold 900 remembers 900).
//! So a ghost hit says "one more page (or `window_pages`) for this class
//! would have made this a hit", and the count of ghost hits of a class is
//! the marginal value of giving it memory: the difference of its miss-ratio
//! curve that the paper's offline Algorithm 2 compares between classes,
//! measured on-line. A single global window would instead credit classes
//! with many small evictions over classes with few large ones.
//!
//! Structure: a bucketised fingerprint table, 8 slots of 8 bytes per
//! bucket (one cache line). A slot holds a 32-bit fingerprint of the key
//! hash, the class and a 24-bit epoch of that class; 0 is an empty slot.
//! A class's epoch advances every 1/8 page of its evictions, and a slot is
//! live while its epoch is at most `8 x window_pages` behind its class's,
//! so old keys are forgotten without any sweep: the "decay" of the paper's
//! filter is the epoch arithmetic (24 bits: a class wraps around after two
//! million pages of evictions, never in practice). When a class receives a
//! page its epoch jumps by a page: the keys it evicted in its last page of
//! evictions would now be cached, so they no longer say anything about the
//! *next* page (without this, a class that grew keeps being credited for
//! misses on keys it lost when it was smaller). An insertion takes an empty
//! or dead slot of its bucket, else the oldest (ages in 1/8 pages compare
//! across classes), so when the table is too small for every class's
//! window, all windows shrink alike and the counts stay comparable. A
//! lookup that finds its key consumes the slot (the key is being fetched
//! again and will be cached). False positives: a miss compares against at
//! most 8 fingerprints of 32 bits: one in 500 million.
//!
//! Memory: 8 bytes per slot, reserved up front and counted in `-m` by the
//! engine; the table is only built when a rebalancing policy uses it.

/// Epochs per page of a class's evictions.
pub const EPOCHS_PER_PAGE: u32 = 8;
/// Longest window.
pub const MAX_WINDOW_PAGES: u32 = 1024;
const SLOTS: usize = 8;
const EPOCH_MASK: u64 = (1 << 24) - 1;

#[derive(Clone, Copy, Default)]
#[repr(align(64))]
struct Bucket([u64; SLOTS]);

/// What the ghost remembers of an evicted key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ghost {
    pub class: usize,
    /// Its class's evictions since, in 1/8 pages (0: within the last 1/8).
    pub age: u32,
}

/// A class's eviction clock.
#[derive(Clone, Copy, Debug, Default)]
struct ClassClock {
    epoch: u64,
    /// Insertions in the current epoch, and per epoch (1/8 page).
    inserted: u32,
    step: u32,
}

pub struct GhostSet {
    buckets: Box<[Bucket]>,
    mask: usize,
    clocks: Vec<ClassClock>,
    /// A slot is live while its age is at most this many epochs.
    live: u64,
}

#[inline]
fn fingerprint(h: u64) -> u64 {
    // Low 32 bits (the bucket comes from the high bits); never 0.
    (h & 0xffff_ffff).max(1)
}

#[inline]
fn slot(fp: u64, class: usize, epoch: u64) -> u64 {
    fp << 32 | (class as u64 & 0xff) << 24 | (epoch & EPOCH_MASK)
}

impl GhostSet {
    /// A set of at most `bytes` (at least one bucket) remembering, per
    /// class, the keys evicted within its last `window_pages` pages of
    /// evictions (`per_page[c]` items per page; at most 256 classes).
    pub fn new(per_page: &[u32], window_pages: u32, bytes: usize) -> GhostSet {
        let buckets = (bytes / std::mem::size_of::<Bucket>()).max(1);
        // Round down to a power of two so the table never exceeds `bytes`.
        let n = 1usize << (usize::BITS - 1 - buckets.leading_zeros());
        GhostSet {
            buckets: vec![Bucket::default(); n].into_boxed_slice(),
            mask: n - 1,
            clocks: per_page
                .iter()
                .map(|&p| ClassClock {
                    step: (p / EPOCHS_PER_PAGE).max(1),
                    ..ClassClock::default()
                })
                .collect(),
            live: (window_pages.clamp(1, MAX_WINDOW_PAGES) * EPOCHS_PER_PAGE) as u64,
        }
    }

    /// Bytes a table needs to hold `window_pages` pages of evictions of
    /// every class at 3/4 load (the most it could use).
    pub fn bytes_for(per_page: &[u32], window_pages: u32) -> usize {
        let keys: usize = per_page.iter().map(|&p| p as usize).sum::<usize>()
            * window_pages.clamp(1, MAX_WINDOW_PAGES) as usize;
        (keys * 8 * 4 / 3).next_power_of_two()
    }

    pub fn memory_bytes(&self) -> usize {
        self.buckets.len() * std::mem::size_of::<Bucket>()
    }

    /// Keys the table can hold.
    pub fn capacity(&self) -> usize {
        self.buckets.len() * SLOTS
    }

    #[inline]
    fn bucket(&self, h: u64) -> usize {
        (h >> 40) as usize & self.mask
    }

    /// Age of a (non-empty) slot in its class's epochs; classes the set
    /// does not know read as dead.
    #[inline]
    fn age(&self, s: u64) -> u64 {
        match self.clocks.get((s >> 24 & 0xff) as usize) {
            Some(c) => c.epoch.wrapping_sub(s) & EPOCH_MASK,
            None => u64::MAX,
        }
    }

    /// Remember that the key with hash `h` was evicted from `class`.
    pub fn insert(&mut self, h: u64, class: usize) {
        let Some(clock) = self.clocks.get_mut(class) else {
            return;
        };
        let epoch = clock.epoch;
        clock.inserted += 1;
        if clock.inserted >= clock.step {
            clock.inserted = 0;
            clock.epoch += 1;
        }
        let fp = fingerprint(h);
        let b = self.bucket(h);
        // Pick: the key's own slot if it is still there, else an empty or
        // dead slot, else the oldest.
        let mut pick = 0;
        let mut best = 0;
        for (i, &s) in self.buckets[b].0.iter().enumerate() {
            let rank = if s == 0 {
                u64::MAX
            } else {
                let age = self.age(s);
                if age > self.live {
                    u64::MAX - 1
                } else if s >> 32 == fp {
                    pick = i;
                    break;
                } else {
                    age
                }
            };
            if rank > best {
                pick = i;
                best = rank;
            }
        }
        self.buckets[b].0[pick] = slot(fp, class, epoch);
    }

    /// `class` now evicts `per_page` items per page (the window is
    /// counted in pages of the new size from now on).
    pub fn resize(&mut self, class: usize, per_page: u32) {
        if let Some(c) = self.clocks.get_mut(class) {
            c.step = (per_page / EPOCHS_PER_PAGE).max(1);
            c.inserted = 0;
        }
    }

    /// `class` got `pages` more pages: its last `pages` pages of evicted
    /// keys would be cached now; age them by that much.
    pub fn grew(&mut self, class: usize, pages: u32) {
        if let Some(c) = self.clocks.get_mut(class) {
            c.epoch += (pages * EPOCHS_PER_PAGE) as u64;
            c.inserted = 0;
        }
    }

    /// If the key with hash `h` was evicted within its class's window,
    /// forget it and say from which class and how long ago.
    #[inline]
    pub fn take(&mut self, h: u64) -> Option<Ghost> {
        let fp = fingerprint(h);
        let b = self.bucket(h);
        for i in 0..SLOTS {
            let s = self.buckets[b].0[i];
            if s >> 32 == fp && s != 0 {
                self.buckets[b].0[i] = 0;
                let age = self.age(s);
                return (age <= self.live).then_some(Ghost {
                    class: (s >> 24 & 0xff) as usize,
                    age: age as u32,
                });
            }
        }
        None
    }

    /// Forget everything (`flush_all`: later misses are not the cache's fault).
    pub fn clear(&mut self) {
        self.buckets.fill(Bucket::default());
    }

    /// Live entries (tests and stats; O(table)).
    pub fn len(&self) -> usize {
        self.buckets
            .iter()
            .flat_map(|b| b.0.iter())
            .filter(|&&s| s != 0 && self.age(s) <= self.live)
            .count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(any(test, feature = "testing"))]
impl GhostSet {
    /// Check the table (tests and fuzzing): a power of two of buckets, each
    /// class's clock inside its current epoch step, every slot of a class
    /// the set knows with a non-zero fingerprint, and no key live twice in
    /// its bucket (`insert` reuses a key's own live slot).
    pub fn validate(&self) {
        assert!(self.buckets.len().is_power_of_two());
        assert_eq!(self.mask, self.buckets.len() - 1);
        for c in &self.clocks {
            assert!(c.step >= 1 && c.inserted < c.step, "epoch step");
        }
        for b in self.buckets.iter() {
            for (i, &s) in b.0.iter().enumerate() {
                if s == 0 {
                    continue;
                }
                assert!(s >> 32 != 0, "zero fingerprint");
                assert!(
                    ((s >> 24 & 0xff) as usize) < self.clocks.len(),
                    "unknown class"
                );
                let live = |s: u64| self.age(s) <= self.live;
                if live(s) {
                    let twice = b.0[i + 1..]
                        .iter()
                        .any(|&o| o != 0 && o >> 32 == s >> 32 && live(o));
                    assert!(!twice, "a key live twice in its bucket");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(i: u64) -> u64 {
        xxhash_rust::xxh3::xxh3_64(&i.to_le_bytes())
    }

    fn set(per_page: &[u32], window: u32) -> GhostSet {
        GhostSet::new(per_page, window, GhostSet::bytes_for(per_page, window))
    }

    #[test]
    fn remembers_class_and_consumes_on_take() {
        let mut g = set(&[100; 8], 1);
        g.insert(h(1), 7);
        g.insert(h(2), 3);
        assert_eq!(g.take(h(1)), Some(Ghost { class: 7, age: 0 }));
        assert_eq!(g.take(h(1)), None, "a take consumes the entry");
        assert_eq!(g.take(h(2)).map(|x| x.class), Some(3));
        assert_eq!(g.take(h(3)), None);
        // Classes it does not know are ignored.
        g.insert(h(4), 8);
        assert_eq!(g.take(h(4)), None);
    }

    #[test]
    fn reinserting_a_key_keeps_one_entry_with_the_newest_class() {
        let mut g = set(&[100; 4], 1);
        g.insert(h(5), 1);
        g.insert(h(5), 2);
        assert_eq!(g.len(), 1);
        assert_eq!(g.take(h(5)).map(|x| x.class), Some(2));
    }

    #[test]
    fn windows_are_pages_of_each_class() {
        // Class 0: 8000 items per page, class 1: 800. Two pages of window.
        let per_page = [8000, 800];
        let mut g = set(&per_page, 2);
        for i in 0..16_000u64 {
            g.insert(h(i), 0);
        }
        for i in 0..1_600u64 {
            g.insert(h(1 << 40 | i), 1);
        }
        // Nearly everything of the last two pages is still there (a
        // bucket of 8 slots overflows now and then at 3/4 load).
        let kept = (0..16_000u64).filter(|&i| g.take(h(i)).is_some()).count();
        assert!(kept > 15_500, "{kept}");
        let kept = (0..1_600u64)
            .filter(|&i| g.take(h(1 << 40 | i)).is_some())
            .count();
        assert!(kept > 1_550, "{kept}");
        // Three more pages of class 1 evictions: its old keys age out,
        // class 0's are not affected by class 1's evictions.
        let mut g = set(&per_page, 2);
        for i in 0..800u64 {
            g.insert(h(i), 0);
            g.insert(h(1 << 40 | i), 1);
        }
        for i in 0..2_500u64 {
            g.insert(h(2 << 40 | i), 1);
        }
        let old1 = (0..800u64)
            .filter(|&i| g.take(h(1 << 40 | i)).is_some())
            .count();
        assert_eq!(old1, 0);
        let still0 = (0..800u64).filter(|&i| g.take(h(i)).is_some()).count();
        assert!(still0 > 770, "{still0}");
    }

    #[test]
    fn ages_count_eighths_of_a_page() {
        let mut g = set(&[80], 4);
        g.insert(h(0), 0);
        for i in 1..=25u64 {
            g.insert(h(1000 + i), 0);
        }
        // 26 insertions, 10 per epoch (80 / 8), the first one in epoch 0.
        assert_eq!(g.take(h(0)), Some(Ghost { class: 0, age: 2 }));
    }

    #[test]
    fn a_class_that_grows_forgets_a_page_of_its_ghosts() {
        let mut g = set(&[80, 80], 2);
        for i in 0..80u64 {
            g.insert(h(i), 0);
            g.insert(h(1000 + i), 1);
        }
        for i in 0..80u64 {
            g.insert(h(2000 + i), 0);
            g.insert(h(3000 + i), 1);
        }
        // Class 0 gets a page: its older page of ghosts is now 2 pages
        // old (still in the window), its newer one 1 page old.
        g.grew(0, 1);
        assert_eq!(g.take(h(2000)).map(|x| x.age), Some(8 + 8));
        g.grew(0, 1);
        // Two pages more: the first page of class 0's ghosts is beyond
        // the window; class 1 is unaffected.
        assert_eq!(g.take(h(0)), None);
        assert_eq!(g.take(h(1000)).map(|x| x.age), Some(16));
    }

    #[test]
    fn a_small_table_shrinks_every_window_alike() {
        // Room for about a quarter of the windows: both classes keep their
        // most recent evictions, in the same proportion of a page.
        let per_page = [4000, 1000];
        let mut g = GhostSet::new(&per_page, 4, GhostSet::bytes_for(&per_page, 4) / 8);
        for round in 0..4u64 {
            for i in 0..4000u64 {
                g.insert(h(round << 32 | i), 0);
                if i % 4 == 0 {
                    g.insert(h(1 << 40 | round << 32 | i), 1);
                }
            }
        }
        let last0 = (0..4000u64)
            .filter(|&i| g.take(h(3 << 32 | i)).is_some())
            .count() as f64
            / 4000.0;
        let last1 = (0..4000u64)
            .step_by(4)
            .filter(|&i| g.take(h(1 << 40 | 3 << 32 | i)).is_some())
            .count() as f64
            / 1000.0;
        assert!(last0 > 0.5 && last1 > 0.5, "{last0} {last1}");
        assert!((last0 - last1).abs() < 0.15, "{last0} {last1}");
        assert!(g.len() <= g.capacity());
    }

    #[test]
    fn false_positives_are_rare() {
        let mut g = set(&[50_000], 1);
        for i in 0..50_000u64 {
            g.insert(h(i), 0);
        }
        let fp = (1_000_000..1_200_000u64)
            .filter(|&i| g.take(h(i)).is_some())
            .count();
        // 8 slots of 32-bit fingerprints per lookup: about 4e-4 expected.
        assert!(fp <= 1, "{fp} false positives in 200000");
    }

    #[test]
    fn sized_by_memory() {
        let g = GhostSet::new(&[1000], 1, 256 << 10);
        assert_eq!(g.memory_bytes(), 256 << 10);
        let g = GhostSet::new(&[1000], 1, (256 << 10) - 1);
        assert_eq!(g.memory_bytes(), 128 << 10);
        assert_eq!(GhostSet::new(&[1000], 1, 10).memory_bytes(), 64);
        assert!(g.is_empty());
        // 1000 keys per page, 3/4 load: 10667 bytes, rounded up.
        assert_eq!(GhostSet::bytes_for(&[1000], 1), 16384);
    }
}
