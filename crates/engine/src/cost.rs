//! Learned recomputation costs (`-o learn_costs=1`).
//!
//! GreedyDual needs each item's cost of recomputation (GD-Wheel thesis,
//! chapter 2.2: costs vary with the query behind a key). Clients can send it
//! (meta `w`, text `cost=`); most will not. A look-aside client shows it
//! anyway: it GETs a key, misses, recomputes the value from the backend and
//! SETs it. The time between the miss and the SET is the recomputation time,
//! so the cache can measure it without the client's help.
//!
//! This table remembers recent misses: key hash -> time of the miss in
//! microseconds (`Clock::now_us`). A SET without an explicit cost looks its
//! key up; if the key missed at most `MAX_AGE_US` ago, the gap is the cost
//! (at least 1 us) and the entry is consumed. The table is bounded and
//! reserved up front out of the memory limit: buckets of 4 entries of 16
//! bytes (one cache line) indexed by the hash, a new miss taking an empty,
//! expired or else the oldest entry of its bucket, so an unanswered miss
//! (a key nobody sets) only lives until it is pushed out or too old. A
//! second miss on a key already waiting keeps the first time: the SET that
//! follows answers the first miss.
//!
//! A SET that learns nothing (no recent miss) keeps the cost of the item it
//! replaces, or else gets the running average of learned costs (an
//! exponentially weighted mean) and is marked GUESSED (`item::GUESSED`): at
//! every hit the engine gives it the average again. Items stored ahead of
//! any miss (a bulk load, a warm-up) are so treated as average rather than
//! free to lose, while the average is still being learned; a guessed item
//! that misses later learns its own cost.

/// A miss older than this teaches nothing (the SET is not its answer).
pub const MAX_AGE_US: u64 = 10_000_000;
const WAYS: usize = 4;
/// Table size: 1/512 of the memory limit, within these bounds.
const MIN_BYTES: usize = 4 << 10;
const MAX_BYTES: usize = 1 << 20;

#[derive(Clone, Copy, Default)]
struct Entry {
    /// Key hash with bit 0 set (0 = empty).
    tag: u64,
    at_us: u64,
}

#[derive(Clone, Copy, Default)]
#[repr(align(64))]
struct Bucket([Entry; WAYS]);

pub struct Learner {
    buckets: Box<[Bucket]>,
    mask: usize,
    /// Mean of learned costs (us), weight 1/64 per new value; 0 = none yet.
    mean: f64,
    /// `item::quantize_cost(default_cost())`, kept for the hit path.
    default_code: u8,
    /// Costs learned so far (`stats` `learned_costs`).
    pub learned: u64,
}

impl Learner {
    /// A table sized for `memory_limit` (see `MIN_BYTES`/`MAX_BYTES`).
    pub fn new(memory_limit: usize) -> Learner {
        let bytes = (memory_limit / 512).clamp(MIN_BYTES, MAX_BYTES);
        let n = (bytes / std::mem::size_of::<Bucket>())
            .next_power_of_two()
            .max(1);
        // next_power_of_two may round up: stay within the bound.
        let n = if n * std::mem::size_of::<Bucket>() > bytes {
            (n / 2).max(1)
        } else {
            n
        };
        Learner {
            buckets: vec![Bucket::default(); n].into_boxed_slice(),
            mask: n - 1,
            mean: 0.0,
            default_code: crate::item::quantize_cost(1),
            learned: 0,
        }
    }

    /// Bytes reserved (counted in `-m`).
    pub fn memory_bytes(&self) -> usize {
        self.buckets.len() * std::mem::size_of::<Bucket>() + std::mem::size_of::<Learner>()
    }

    #[inline]
    fn bucket(&mut self, hash: u64) -> &mut Bucket {
        // The low bits pick index buckets; use high ones here.
        &mut self.buckets[(hash >> 40) as usize & self.mask]
    }

    /// A GET of the key (by hash) missed at `now_us`.
    pub fn miss(&mut self, hash: u64, now_us: u64) {
        let tag = hash | 1;
        let b = &mut self.bucket(hash).0;
        if let Some(e) = b.iter_mut().find(|e| e.tag == tag) {
            if now_us.saturating_sub(e.at_us) > MAX_AGE_US {
                e.at_us = now_us;
            }
            return;
        }
        // An empty or expired entry, else the oldest.
        let slot = b
            .iter_mut()
            .min_by_key(|e| {
                if e.tag == 0 || now_us.saturating_sub(e.at_us) > MAX_AGE_US {
                    0
                } else {
                    e.at_us.max(1)
                }
            })
            .expect("buckets have entries");
        *slot = Entry { tag, at_us: now_us };
    }

    /// A SET of the key at `now_us` with no cost from the client: the time
    /// since its miss, if it missed recently. Consumes the miss.
    pub fn learn(&mut self, hash: u64, now_us: u64) -> Option<u32> {
        let tag = hash | 1;
        let b = &mut self.bucket(hash).0;
        let e = b.iter_mut().find(|e| e.tag == tag)?;
        let gap = now_us.checked_sub(e.at_us);
        *e = Entry::default();
        let gap = gap.filter(|&g| g <= MAX_AGE_US)?.max(1);
        let cost = gap.min(u32::MAX as u64) as u32;
        self.learned += 1;
        self.mean = if self.mean == 0.0 {
            cost as f64
        } else {
            self.mean + (cost as f64 - self.mean) / 64.0
        };
        self.default_code = crate::item::quantize_cost(self.default_cost());
        Some(cost)
    }

    /// Whether some miss may be waiting for its SET (cheap pre-check so a
    /// SET reads the clock only when it could learn something).
    #[inline]
    pub fn waiting(&self, hash: u64) -> bool {
        let tag = hash | 1;
        self.buckets[(hash >> 40) as usize & self.mask]
            .0
            .iter()
            .any(|e| e.tag == tag)
    }

    /// `default_cost` quantised (`item::quantize_cost`).
    #[inline]
    pub fn default_code(&self) -> u8 {
        self.default_code
    }

    /// The cost for an item nothing was learned about: the running mean of
    /// learned costs (1 before anything was learned).
    pub fn default_cost(&self) -> u32 {
        if self.mean >= 1.0 {
            self.mean.round().min(u32::MAX as f64) as u32
        } else {
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_after_a_miss_learns_the_gap() {
        let mut l = Learner::new(64 << 20);
        l.miss(0xdead_beef_0000_1234, 1_000);
        assert_eq!(l.learn(0xdead_beef_0000_1234, 1_250), Some(250));
        // Consumed: a second SET learns nothing.
        assert_eq!(l.learn(0xdead_beef_0000_1234, 1_300), None);
        assert_eq!(l.learned, 1);
        assert_eq!(l.default_cost(), 250);
        // A key that never missed learns nothing.
        assert_eq!(l.learn(42, 2_000), None);
    }

    #[test]
    fn old_misses_teach_nothing_and_first_miss_wins() {
        let mut l = Learner::new(64 << 20);
        l.miss(7 << 40, 0);
        assert_eq!(l.learn(7 << 40, MAX_AGE_US + 1), None);
        l.miss(8 << 40, 100);
        l.miss(8 << 40, 400);
        assert_eq!(l.learn(8 << 40, 500), Some(400));
        // A SET at the very time of the miss costs at least 1 us.
        l.miss(9 << 40, 500);
        assert_eq!(l.learn(9 << 40, 500), Some(1));
        // A clock that went backwards teaches nothing.
        l.miss(10 << 40, 500);
        assert_eq!(l.learn(10 << 40, 400), None);
    }

    #[test]
    fn bounded_buckets_push_out_the_oldest() {
        let mut l = Learner::new(0);
        assert!(l.memory_bytes() <= MIN_BYTES + 64);
        // WAYS + 1 keys in one bucket: the oldest is forgotten.
        let keys: Vec<u64> = (0..=WAYS as u64).map(|i| (5 << 40) | (i << 1)).collect();
        for (t, &k) in keys.iter().enumerate() {
            l.miss(k, 10 + t as u64);
        }
        assert!(!l.waiting(keys[0]));
        assert_eq!(l.learn(keys[0], 100), None);
        for &k in &keys[1..] {
            assert!(l.waiting(k));
            assert!(l.learn(k, 100).is_some());
        }
        assert!(Learner::new(usize::MAX).memory_bytes() <= MAX_BYTES + 64);
    }

    #[test]
    fn the_mean_follows_learned_costs() {
        let mut l = Learner::new(1 << 20);
        assert_eq!(l.default_cost(), 1);
        for i in 0..1000u64 {
            l.miss(i << 41, i * 1000);
            l.learn(i << 41, i * 1000 + 300);
        }
        assert_eq!(l.default_cost(), 300);
        assert_eq!(l.default_code(), crate::item::quantize_cost(300));
    }
}
