//! Histograms of stack distances: how many requests (and how much of their
//! cost and bytes) would hit from each cache size on.
//!
//! Algorithm 1 of Carra & Michiardi (`../shared/seeds/003_*`) keeps one
//! counter per stack position; with byte distances into the gigabytes that
//! array would be huge, so [`LogHist`] keeps log-linear buckets (exact below
//! 256, then 128 buckets per power of two: under 0.8% wide) and reports the
//! curve only at bucket edges, where it is exact. Cache sizes the user asks for
//! by name are counted exactly in [`Thresholds`].

use serde::Serialize;

/// What hits at some cache size: request count, cost and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    pub count: u64,
    pub cost: u64,
    pub bytes: u64,
}

impl Tally {
    pub fn add(&mut self, cost: u32, bytes: u32) {
        self.count += 1;
        self.cost += cost as u64;
        self.bytes += bytes as u64;
    }
    pub fn plus(&self, o: &Tally) -> Tally {
        Tally {
            count: self.count + o.count,
            cost: self.cost + o.cost,
            bytes: self.bytes + o.bytes,
        }
    }
}

const SUB_BITS: u32 = 7;
const SUB: u64 = 1 << SUB_BITS;

/// Bucket index of distance `v`.
fn bucket(v: u64) -> usize {
    if v < 2 * SUB {
        v as usize
    } else {
        let shift = 63 - v.leading_zeros() - SUB_BITS;
        ((shift as u64) << SUB_BITS) as usize + (v >> shift) as usize
    }
}

/// Largest distance that falls in bucket `i`.
fn bucket_max(i: usize) -> u64 {
    let i = i as u64;
    if i < 2 * SUB {
        i
    } else {
        let shift = (i >> SUB_BITS) - 1;
        let mant = i - (shift << SUB_BITS);
        // u128: the last bucket's end is 2^64 - 1.
        (((mant as u128 + 1) << shift) - 1).min(u64::MAX as u128) as u64
    }
}

/// Log-linear histogram of distances.
#[derive(Clone, Debug, Default)]
pub struct LogHist {
    buckets: Vec<Tally>,
}

impl LogHist {
    pub fn record(&mut self, distance: u64, cost: u32, bytes: u32) {
        let b = bucket(distance);
        if self.buckets.len() <= b {
            self.buckets.resize(b + 1, Tally::default());
        }
        self.buckets[b].add(cost, bytes);
    }

    /// The largest bucket edge at or below `size`, and what hits from a cache
    /// of exactly that size (distance <= edge). Exact, since no bucket
    /// straddles the edge.
    pub fn hits_at_edge(&self, size: u64) -> (u64, Tally) {
        let mut b = bucket(size);
        if bucket_max(b) > size {
            if b == 0 {
                return (0, Tally::default());
            }
            b -= 1;
        }
        let edge = bucket_max(b);
        let upto = (b + 1).min(self.buckets.len());
        let t = self.buckets[..upto]
            .iter()
            .fold(Tally::default(), |a, t| a.plus(t));
        (edge, t)
    }
}

impl LogHist {
    /// The smallest bucket edge from which at least `hits` requests hit
    /// (None if the whole histogram has fewer).
    pub fn smallest_edge_with(&self, hits: u64) -> Option<u64> {
        let mut acc = 0;
        for (i, t) in self.buckets.iter().enumerate() {
            acc += t.count;
            if acc >= hits {
                return Some(bucket_max(i));
            }
        }
        None
    }
}

/// Exact hit tallies at a fixed, sorted list of cache sizes.
#[derive(Clone, Debug)]
pub struct Thresholds {
    sizes: Vec<u64>,
    /// `at[i]`: requests whose distance d satisfies sizes[i-1] < d <= sizes[i].
    at: Vec<Tally>,
}

impl Thresholds {
    pub fn new(mut sizes: Vec<u64>) -> Thresholds {
        sizes.sort_unstable();
        sizes.dedup();
        let at = vec![Tally::default(); sizes.len()];
        Thresholds { sizes, at }
    }

    pub fn record(&mut self, distance: u64, cost: u32, bytes: u32) {
        let i = self.sizes.partition_point(|&s| s < distance);
        if let Some(t) = self.at.get_mut(i) {
            t.add(cost, bytes);
        }
    }

    /// (size, hits from a cache of that size) for every size, ascending.
    pub fn cumulative(&self) -> Vec<(u64, Tally)> {
        let mut acc = Tally::default();
        self.sizes
            .iter()
            .zip(&self.at)
            .map(|(&s, t)| {
                acc = acc.plus(t);
                (s, acc)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_cover_their_edges() {
        let mut prev_max = None;
        for i in 0..(SUB as usize * 40) {
            let max = bucket_max(i);
            if let Some(p) = prev_max {
                assert_eq!(bucket(p + 1), i, "first value of bucket {i}");
                assert!(max > p);
            }
            assert_eq!(bucket(max), i, "edge of bucket {i}");
            prev_max = Some(max);
        }
        // Relative width stays under 1/128 above the exact range.
        for v in [300u64, 10_000, 123_456_789, 1 << 40] {
            let b = bucket(v);
            let lo = bucket_max(b - 1) + 1;
            let hi = bucket_max(b);
            assert!((hi - lo) as f64 / lo as f64 <= 1.0 / 128.0, "{v}");
        }
        assert_eq!(bucket(u64::MAX), bucket(bucket_max(bucket(u64::MAX))));
    }

    #[test]
    fn edge_counts_are_exact() {
        let mut h = LogHist::default();
        let mut all = Vec::new();
        let mut x = 1u64;
        for _ in 0..5000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let d = (x >> 40) % 1_000_000 + 1;
            h.record(d, 2, 3);
            all.push(d);
        }
        for size in [0u64, 1, 255, 256, 1000, 65_537, 500_000, 2_000_000] {
            let (edge, t) = h.hits_at_edge(size);
            assert!(edge <= size);
            let want = all.iter().filter(|&&d| d <= edge).count() as u64;
            assert_eq!(t.count, want, "size {size} edge {edge}");
            assert_eq!(t.cost, 2 * want);
            assert_eq!(t.bytes, 3 * want);
        }
    }

    #[test]
    fn smallest_edge_reaching_a_count() {
        let mut h = LogHist::default();
        for d in [3u64, 3, 10, 1000, 1000, 1000] {
            h.record(d, 1, 1);
        }
        assert_eq!(h.smallest_edge_with(0), Some(0));
        assert_eq!(h.smallest_edge_with(2), Some(3));
        assert_eq!(h.smallest_edge_with(3), Some(10));
        // 1000 lies in a bucket of width 4 (512..1024 in 128 steps).
        let e = h.smallest_edge_with(6).unwrap();
        assert!((1000..1004).contains(&e), "{e}");
        assert_eq!(h.hits_at_edge(e).1.count, 6);
        assert_eq!(h.hits_at_edge(e - 4).1.count, 3);
        assert_eq!(h.smallest_edge_with(7), None);
    }

    #[test]
    fn thresholds_count_at_or_below_each_size() {
        let mut t = Thresholds::new(vec![10, 5, 100]);
        for d in [1u64, 5, 6, 10, 11, 100, 101, 1000] {
            t.record(d, 1, 1);
        }
        let c: Vec<(u64, u64)> = t.cumulative().iter().map(|(s, t)| (*s, t.count)).collect();
        assert_eq!(c, vec![(5, 2), (10, 4), (100, 6)]);
    }
}
