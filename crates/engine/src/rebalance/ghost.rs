//! The ghost set: which keys were evicted recently, and from which class.
//!
//! Carra & Michiardi (`../shared/seeds/003_*`, section 3.3) tell capacity
//! misses (the key was cached and evicted: more memory for its class would
//! have turned the miss into a hit) from compulsory ones (first request, or
//! a request so long after the last one that no realistic cache keeps it)
//! with a Decaying Bloom Filter of the keys requested over a sliding window
//! of 100 000 requests. We keep the keys *evicted* over a sliding window
//! instead, which answers the same question more directly (a miss on a key
//! the cache never held is never counted) and, unlike a Bloom filter, can
//! say which class the key was evicted from: the class that would have
//! needed the memory, so a GET miss is attributed to its class at once,
//! without waiting for the SET that follows (whose class is the same unless
//! the value's size changed).
//!
//! Structure: a bucketised fingerprint table, 16 slots of 4 bytes per
//! bucket (one cache line). A slot holds a 16-bit fingerprint of the key
//! hash, the class and an 8-bit epoch; 0 is an empty slot. The window is
//! counted in evictions: the epoch advances every `window / EPOCHS`
//! insertions and a slot is live while its epoch is at most `EPOCHS`
//! behind, so the set holds the last `window` evicted keys (up to 1/16 more)
//! and forgets older ones without any sweep: the "decay" of the paper's filter
//! is the epoch arithmetic. An insertion takes an empty or dead slot of its
//! bucket, else the oldest; a lookup that finds its key consumes the slot (the
//! key is being fetched again and will be cached). False positives: a miss
//! compares against at most 16 live fingerprints of 16 bits, so at most
//! 16/65535 = 0.02% of compulsory misses are counted as capacity misses.
//!
//! Memory: 4 bytes per slot, reserved up front and counted in `-m` by the
//! engine; the table is only built when a rebalancing policy uses it.

/// Epochs in a window: the window slides in steps of 1/EPOCHS of itself.
pub const EPOCHS: u32 = 16;
const SLOTS: usize = 16;
/// Slots per remembered key: the table holds `window` keys at 3/4 load.
const SLACK_NUM: usize = 4;
const SLACK_DEN: usize = 3;

#[derive(Clone, Copy, Default)]
#[repr(align(64))]
struct Bucket([u32; SLOTS]);

/// What the ghost remembers of an evicted key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ghost {
    pub class: usize,
    /// How long ago it was evicted, in epochs (0 = the current one).
    pub age: u32,
}

pub struct GhostSet {
    buckets: Box<[Bucket]>,
    mask: usize,
    epoch: u8,
    /// Insertions in the current epoch, and per epoch.
    inserted: u32,
    per_epoch: u32,
}

#[inline]
fn fingerprint(h: u64) -> u32 {
    // Low 16 bits (the bucket comes from the high bits); never 0.
    ((h & 0xffff) as u32).max(1)
}

#[inline]
fn slot(fp: u32, class: usize, epoch: u8) -> u32 {
    fp << 16 | (class as u32 & 0xff) << 8 | epoch as u32
}

impl GhostSet {
    /// A set remembering the last `window` evicted keys (at least one bucket).
    /// Classes are stored on 8 bits: the engine has at most 200.
    pub fn new(window: usize) -> GhostSet {
        let slots = (window.max(1) * SLACK_NUM).div_ceil(SLACK_DEN);
        let n = slots.div_ceil(SLOTS).next_power_of_two();
        GhostSet {
            buckets: vec![Bucket::default(); n].into_boxed_slice(),
            mask: n - 1,
            epoch: 0,
            inserted: 0,
            per_epoch: (window / EPOCHS as usize).clamp(1, u32::MAX as usize) as u32,
        }
    }

    /// The table size for a memory budget, in keys remembered.
    pub fn window_for_bytes(bytes: usize) -> usize {
        let buckets = (bytes / std::mem::size_of::<Bucket>()).max(1);
        // Round down to a power of two so the table never exceeds `bytes`.
        let buckets = 1usize << (usize::BITS - 1 - buckets.leading_zeros());
        buckets * SLOTS * SLACK_DEN / SLACK_NUM
    }

    pub fn memory_bytes(&self) -> usize {
        self.buckets.len() * std::mem::size_of::<Bucket>()
    }

    /// Keys the window holds.
    pub fn window(&self) -> usize {
        self.per_epoch as usize * EPOCHS as usize
    }

    #[inline]
    fn bucket(&self, h: u64) -> usize {
        (h >> 32) as usize & self.mask
    }

    #[inline]
    fn age(&self, s: u32) -> u32 {
        self.epoch.wrapping_sub(s as u8) as u32
    }

    /// Remember that the key with hash `h` was evicted from `class`.
    pub fn insert(&mut self, h: u64, class: usize) {
        let fp = fingerprint(h);
        let b = self.bucket(h);
        let epoch = self.epoch;
        // Pick: the key's own slot if it is still there, else an empty or
        // dead slot, else the oldest.
        let mut pick = 0;
        let mut best = 0;
        for (i, &s) in self.buckets[b].0.iter().enumerate() {
            let age = self.age(s);
            let rank = if s == 0 {
                u32::MAX
            } else if age > EPOCHS {
                u32::MAX - 1
            } else if s >> 16 == fp {
                pick = i;
                break;
            } else {
                age
            };
            if rank > best {
                pick = i;
                best = rank;
            }
        }
        self.buckets[b].0[pick] = slot(fp, class, epoch);
        self.inserted += 1;
        if self.inserted >= self.per_epoch {
            self.inserted = 0;
            self.epoch = self.epoch.wrapping_add(1);
        }
    }

    /// If the key with hash `h` was evicted within the window, forget it
    /// and say from which class and how long ago.
    #[inline]
    pub fn take(&mut self, h: u64) -> Option<Ghost> {
        let fp = fingerprint(h);
        let b = self.bucket(h);
        for i in 0..SLOTS {
            let s = self.buckets[b].0[i];
            if s >> 16 == fp {
                let age = self.age(s);
                if age <= EPOCHS {
                    self.buckets[b].0[i] = 0;
                    return Some(Ghost {
                        class: (s >> 8 & 0xff) as usize,
                        age,
                    });
                }
            }
        }
        None
    }

    /// Forget everything (`flush_all`: later misses are not the cache's fault).
    pub fn clear(&mut self) {
        self.buckets.fill(Bucket::default());
        self.inserted = 0;
    }

    /// Live entries (tests and stats; O(table)).
    pub fn len(&self) -> usize {
        self.buckets
            .iter()
            .flat_map(|b| b.0.iter())
            .filter(|&&s| s != 0 && self.age(s) <= EPOCHS)
            .count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(i: u64) -> u64 {
        xxhash_rust::xxh3::xxh3_64(&i.to_le_bytes())
    }

    #[test]
    fn remembers_class_and_consumes_on_take() {
        let mut g = GhostSet::new(1000);
        g.insert(h(1), 7);
        g.insert(h(2), 3);
        assert_eq!(g.take(h(1)), Some(Ghost { class: 7, age: 0 }));
        assert_eq!(g.take(h(1)), None, "a take consumes the entry");
        assert_eq!(g.take(h(2)).map(|x| x.class), Some(3));
        assert_eq!(g.take(h(3)), None);
    }

    #[test]
    fn reinserting_a_key_keeps_one_entry_with_the_newest_class() {
        let mut g = GhostSet::new(1000);
        g.insert(h(5), 1);
        g.insert(h(5), 2);
        assert_eq!(g.len(), 1);
        assert_eq!(g.take(h(5)).map(|x| x.class), Some(2));
    }

    #[test]
    fn window_slides_over_evictions() {
        let window = 16_000;
        let mut g = GhostSet::new(window);
        assert_eq!(g.window(), window);
        for i in 0..window as u64 {
            g.insert(h(i), (i % 40) as usize);
        }
        // Everything of the last window is still there (no bucket overflows
        // at 3/4 load with 16 slots, except with negligible probability).
        let kept = (0..window as u64)
            .filter(|&i| g.take(h(i)).is_some())
            .count();
        assert!(kept as f64 > 0.99 * window as f64, "{kept}");
        // Two windows later the first keys have aged out.
        let mut g = GhostSet::new(window);
        for i in 0..3 * window as u64 {
            g.insert(h(i), 1);
        }
        let old = (0..window as u64)
            .filter(|&i| g.take(h(i)).is_some())
            .count();
        assert_eq!(old, 0);
        let recent = (2 * window as u64..3 * window as u64)
            .filter(|&i| g.take(h(i)).is_some())
            .count();
        assert!(recent as f64 > 0.99 * window as f64, "{recent}");
    }

    #[test]
    fn ages_count_epochs() {
        let mut g = GhostSet::new(EPOCHS as usize * 10);
        g.insert(h(0), 4);
        for i in 1..=25u64 {
            g.insert(h(1000 + i), 0);
        }
        // 26 insertions, 10 per epoch: key 0 is two epochs old.
        assert_eq!(g.take(h(0)), Some(Ghost { class: 4, age: 2 }));
    }

    #[test]
    fn false_positives_are_rare() {
        let mut g = GhostSet::new(50_000);
        for i in 0..50_000u64 {
            g.insert(h(i), 2);
        }
        let fp = (1_000_000..1_200_000u64)
            .filter(|&i| g.take(h(i)).is_some())
            .count();
        // 16 live slots of 16-bit fingerprints at most per lookup: < 0.025%.
        assert!(fp < 50, "{fp} false positives in 200000");
    }

    #[test]
    fn sized_by_memory() {
        let w = GhostSet::window_for_bytes(256 << 10);
        let g = GhostSet::new(w);
        assert!(g.memory_bytes() <= 256 << 10, "{}", g.memory_bytes());
        assert!(g.memory_bytes() >= 128 << 10);
        let tiny = GhostSet::new(GhostSet::window_for_bytes(10));
        assert_eq!(tiny.memory_bytes(), 64);
        assert!(g.is_empty());
    }
}
