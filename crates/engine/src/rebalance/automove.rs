//! memcached's slab automove (`-o slab_automove=1|2`, `rebalance=memcached`).
//!
//! memcached (`slab_automove.c`, and as Carra & Michiardi section 5 and the
//! GD-Wheel thesis section 5.1 describe its older form) looks at the
//! evictions of every class periodically and moves one page to the class
//! that evicts most from a class that evicted nothing and has a page's
//! worth of free chunks. It is deliberately conservative: in the
//! calcification experiment of Carra & Michiardi it never moves a page.
//! This is the rule cachalot had before issue 4, kept as the baseline:
//! every 10 s (1 s when aggressive), towards the class with the most
//! evictions since the last look, from the first class with none, at least
//! two pages and a page's worth of free chunks.

use crate::clock::RelTime;

/// What the rule looks at, per class.
#[derive(Clone, Copy, Debug, Default)]
pub struct AutomoveClass {
    /// Evictions so far (a running counter).
    pub evicted: u64,
    pub pages: u32,
    pub free_chunks: u64,
    pub per_page: u32,
}

pub struct Automove {
    at: RelTime,
    seen: Vec<u64>,
}

impl Automove {
    pub fn new(nclasses: usize) -> Automove {
        Automove {
            at: 0,
            seen: vec![0; nclasses],
        }
    }

    /// The period has passed (`aggressive`: slab_automove=2).
    pub fn due(&self, now: RelTime, aggressive: bool) -> bool {
        let period = if aggressive { 1 } else { 10 };
        now >= self.at + period
    }

    /// One look: the move (from, to), if any.
    pub fn decide(&mut self, now: RelTime, classes: &[AutomoveClass]) -> Option<(usize, usize)> {
        self.at = now;
        let delta: Vec<u64> = classes
            .iter()
            .zip(self.seen.iter().chain(std::iter::repeat(&0)))
            .map(|(c, seen)| c.evicted.saturating_sub(*seen))
            .collect();
        self.seen = classes.iter().map(|c| c.evicted).collect();
        let to = (0..delta.len())
            .filter(|&c| delta[c] > 0)
            .max_by_key(|&c| delta[c])?;
        let from = (0..delta.len()).find(|&c| {
            let s = &classes[c];
            c != to && delta[c] == 0 && s.pages >= 2 && s.free_chunks >= s.per_page as u64
        })?;
        Some((from, to))
    }

    /// Evictions were reset (`stats reset`): start counting afresh.
    pub fn clear(&mut self) {
        self.seen.fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cls(evicted: u64, pages: u32, free_chunks: u64) -> AutomoveClass {
        AutomoveClass {
            evicted,
            pages,
            free_chunks,
            per_page: 10,
        }
    }

    #[test]
    fn every_ten_seconds_from_an_idle_class_with_a_free_page() {
        let mut a = Automove::new(3);
        assert!(a.due(10, false));
        assert!(!a.due(9, false));
        assert!(a.due(1, true));
        // Class 1 evicts; class 0 has a free page and no evictions.
        let c = [cls(0, 3, 10), cls(5, 2, 0), cls(1, 4, 0)];
        assert_eq!(a.decide(10, &c), Some((0, 1)));
        assert!(!a.due(15, false));
        // Only changes since the last look count: class 2 now evicts most.
        let c = [cls(0, 3, 10), cls(6, 2, 0), cls(9, 4, 0)];
        assert_eq!(a.decide(20, &c), Some((0, 2)));
        // Nobody with a free page's worth: no move (memcached's caution).
        let c = [cls(0, 3, 9), cls(7, 2, 0), cls(10, 4, 0)];
        assert_eq!(a.decide(30, &c), None);
        // No evictions at all: nothing to do.
        assert_eq!(a.decide(40, &c), None);
    }
}
