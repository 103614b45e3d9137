//! The `mrc` rule: Carra & Michiardi's offline optimum (Algorithm 2,
//! `../shared/seeds/003_*`, section 3.2) computed on-line, on the hit
//! curves of the recent past ([`super::profile`]), and pages moved towards
//! it.
//!
//! The paper's SAS (Algorithm 3) learns the optimum one page at a time from
//! capacity misses, and a class only shows what its *next* page is worth;
//! when the popular sizes shift, each class's need is learned a page after
//! the other (docs/cost.md, "Rebalancing": in the calcification experiment
//! SAS grew the classes of the departing sizes through the whole shift).
//! With every class's whole curve at hand the optimum is known at once:
//!
//! 1. every class requested recently keeps one page (the engine needs a
//!    page to store an item of the class), the rest is handed out greedily
//!    by marginal gain over the upper concave hull of each curve (the exact
//!    optimum for concave curves, Algorithm 2's assumption; the hull also
//!    lets a class past a knee of its curve win a run of pages at once);
//! 2. if that allocation is worth more than the current one by more than a
//!    small fraction of all requests (the curves are estimates: smaller
//!    differences are noise, and a move costs the donor a page of items),
//!    up to `MAX_MOVES` pages go from the classes above their target to
//!    those below, the most valuable first.
//!
//! Curves are in histogram bins of `bin` pages (one page up to 512 pages of
//! memory); between two bins a curve is linear.

use super::profile::Curve as Sampled;

/// A move must gain this fraction of the recent requests' cost.
const MIN_GAIN: f64 = 0.002;
/// Page moves one decision may queue.
const MAX_MOVES: usize = 16;
/// A class with less than this fraction of the requests' cost is idle: it
/// may give its last page.
const IDLE: f64 = 1e-6;
/// A class's curve is anchored on its real hits when at least this fraction
/// of its GETs missed (below, the crossing point is not measurable).
const ANCHOR_MISSES: f64 = 0.005;

/// A class's hit curve over real pages: `c[b]` = cost of the GETs that hit
/// with `b` bins of `bin` pages of sampled distance, and `scale` sampled
/// pages per real page.
pub struct Curve<'a> {
    c: &'a [f64],
    bin: u32,
    scale: f64,
    /// From this many pages on, the curve is at its top (a class that
    /// misses nothing gains nothing from more).
    full: u32,
}

impl<'a> Curve<'a> {
    /// The curve of `s` for a class that has `pages` now. The sample's
    /// distances are estimates: a class of n sampled keys is n/R items to
    /// about 1/sqrt(n), so a cliff in its curve (all its items fit) is
    /// placed within a few pages at best. Where the class has both hits
    /// and misses, the curve is stretched (within two standard deviations)
    /// to cross the cost of its real hits at its current size. Otherwise
    /// (everything it was asked for fits) it is at its top from its current
    /// size on, and below that shrunk by two standard deviations: a class
    /// is not squeezed below what its items need by sampling noise. A class
    /// that hit nothing has no point to anchor on.
    pub fn new(s: &'a Sampled, bin: u32, pages: u32) -> Curve<'a> {
        let mut curve = Curve {
            c: &s.hits_at,
            bin: bin.max(1),
            scale: 1.0,
            full: u32::MAX,
        };
        // Two standard deviations of the sample's size estimates.
        let noise = if s.keys > 0 {
            2.0 / (s.keys as f64).sqrt()
        } else {
            0.0
        };
        let asked = s.hits + s.misses;
        if pages > 0 && s.hits > 0.0 && s.misses >= ANCHOR_MISSES * asked {
            let x = curve.inverse(s.hits);
            curve.scale = (x / pages as f64).clamp(1.0 / (1.0 + noise), 1.0 + noise);
        } else if s.hits > 0.0 {
            curve.scale = 1.0 / (1.0 + noise);
            curve.full = pages;
        }
        curve
    }

    /// Hits with `p` real pages (linear between bins, flat past the last).
    pub fn at(&self, p: u32) -> f64 {
        if p >= self.full {
            return self.c.last().copied().unwrap_or(0.0);
        }
        let x = p as f64 * self.scale / self.bin as f64;
        let b = x as usize;
        if b + 1 >= self.c.len() {
            return self.c.last().copied().unwrap_or(0.0);
        }
        self.c[b] + (self.c[b + 1] - self.c[b]) * (x - b as f64)
    }

    /// The sampled pages where the curve first reaches `hits` (the end of
    /// the curve if it never does).
    fn inverse(&self, hits: f64) -> f64 {
        let b = self.c.partition_point(|&h| h < hits);
        if b == 0 {
            return 0.0;
        }
        if b >= self.c.len() {
            return ((self.c.len() - 1) * self.bin as usize) as f64;
        }
        let (lo, hi) = (self.c[b - 1], self.c[b]);
        (b as f64 - 1.0 + (hits - lo) / (hi - lo)) * self.bin as f64
    }

    /// Upper concave hull from `lo` pages to `hi`: (pages, hits) corners,
    /// looked at every bin's worth of pages.
    fn hull(&self, lo: u32, hi: u32) -> Vec<(u32, f64)> {
        let mut xs = vec![lo];
        xs.extend(
            (lo / self.bin + 1..)
                .map(|b| b * self.bin)
                .take_while(|&p| p < hi),
        );
        if hi > lo {
            xs.push(hi);
        }
        let mut h: Vec<(u32, f64)> = Vec::with_capacity(xs.len());
        for x in xs {
            let p = (x, self.at(x));
            while h.len() >= 2 {
                let (a, b) = (h[h.len() - 2], h[h.len() - 1]);
                // Drop b when it lies on or below the chord a -> p.
                let cross = (b.0 - a.0) as f64 * (p.1 - a.1) - (b.1 - a.1) * (p.0 - a.0) as f64;
                if cross >= 0.0 {
                    h.pop();
                } else {
                    break;
                }
            }
            h.push(p);
        }
        h
    }
}

/// The allocation of `total` pages that maximises the hits on the curves;
/// `gets[c]`: the cost of class c's requests (an idle class needs no page).
pub fn target(curves: &[Curve], gets: &[f64], total: u32, current: &[u32]) -> Vec<u32> {
    let n = curves.len().min(gets.len()).min(current.len());
    let all: f64 = gets.iter().sum();
    let floor: Vec<u32> = (0..n).map(|c| u32::from(gets[c] > IDLE * all)).collect();
    let mut target = floor.clone();
    let mut left = total.saturating_sub(floor.iter().sum());
    // Hull segments of every class: (slope, pages, class).
    let mut segs: Vec<(f64, u32, usize)> = Vec::new();
    for c in 0..n {
        let h = curves[c].hull(floor[c], total);
        for w in h.windows(2) {
            let len = w[1].0 - w[0].0;
            let slope = (w[1].1 - w[0].1) / len as f64;
            if slope > 0.0 {
                segs.push((slope, len, c));
            }
        }
    }
    // Hull slopes decrease along each class, so taking segments by slope
    // takes each class's in order.
    segs.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.2.cmp(&b.2)));
    for (_, len, c) in segs {
        if left == 0 {
            break;
        }
        let t = len.min(left);
        target[c] += t;
        left -= t;
    }
    // Pages that bring nothing anywhere stay where they are.
    for c in 0..n {
        if left == 0 {
            break;
        }
        let t = current[c].saturating_sub(target[c]).min(left);
        target[c] += t;
        left -= t;
    }
    target
}

/// The moves (from, to) towards the optimum of the sampled curves (`bin`
/// pages a bin), if it is worth it; `pages[c]`: the classes' pages now.
pub fn decide(sampled: &[Sampled], bin: u32, pages: &[u32]) -> Vec<(usize, usize)> {
    let n = sampled.len().min(pages.len());
    let total: u32 = pages[..n].iter().sum();
    let gets: Vec<f64> = sampled[..n].iter().map(|s| s.gets).collect();
    let all: f64 = gets.iter().sum();
    if all <= 0.0 {
        return Vec::new();
    }
    let curves: Vec<Curve> = (0..n)
        .map(|c| Curve::new(&sampled[c], bin, pages[c]))
        .collect();
    let tgt = target(&curves, &gets, total, pages);
    let value = |a: &[u32]| -> f64 { (0..n).map(|c| curves[c].at(a[c])).sum() };
    let mut cur = pages[..n].to_vec();
    if value(&tgt) - value(&cur) <= MIN_GAIN * all {
        return Vec::new();
    }
    let gain = |c: usize, a: u32| curves[c].at(a + 1) - curves[c].at(a);
    let loss = |c: usize, a: u32| curves[c].at(a) - curves[c].at(a - 1);
    let mut moves = Vec::new();
    while moves.len() < MAX_MOVES {
        // To the class below its target that gains most from one page,
        // from the class above its target that loses least.
        let to = (0..n)
            .filter(|&c| cur[c] < tgt[c])
            .max_by(|&a, &b| gain(a, cur[a]).total_cmp(&gain(b, cur[b])));
        let from = (0..n)
            .filter(|&c| cur[c] > tgt[c])
            .min_by(|&a, &b| loss(a, cur[a]).total_cmp(&loss(b, cur[b])));
        let (Some(from), Some(to)) = (from, to) else {
            break;
        };
        cur[from] -= 1;
        cur[to] += 1;
        moves.push((from, to));
    }
    moves
}

/// Check what the rule computes from the sampled curves (tests and
/// fuzzing): each curve starts at 0 and never decreases, within its GETs;
/// read over real pages it never decreases either; the target hands out
/// no more pages than there are (or than the floors need).
#[cfg(any(test, feature = "testing"))]
pub fn validate(sampled: &[Sampled], bin: u32, pages: &[u32]) {
    let n = sampled.len().min(pages.len());
    let total: u32 = pages[..n].iter().sum();
    for s in &sampled[..n] {
        assert_eq!(s.hits_at.first(), Some(&0.0), "a curve starts at 0");
        assert!(
            s.hits_at.windows(2).all(|w| w[0] <= w[1]),
            "curve decreases"
        );
        let top = s.hits_at.last().copied().unwrap_or(0.0);
        assert!(top <= s.gets * (1.0 + 1e-9) + 1e-9, "more hits than GETs");
    }
    let curves: Vec<Curve> = (0..n)
        .map(|c| Curve::new(&sampled[c], bin, pages[c]))
        .collect();
    for c in &curves {
        for p in 0..=total + 1 {
            assert!(c.at(p) <= c.at(p + 1) + 1e-9, "curve over pages decreases");
        }
    }
    let gets: Vec<f64> = sampled[..n].iter().map(|s| s.gets).collect();
    let t = target(&curves, &gets, total, &pages[..n]);
    assert!(
        t.iter().sum::<u32>() <= total.max(n as u32),
        "target over the pages"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `rate` hits per page up to `knee` pages, then flat: a concave curve.
    fn linear(rate: f64, knee: u32, bins: u32) -> Vec<f64> {
        (0..=bins).map(|b| rate * b.min(knee) as f64).collect()
    }

    /// A sampled curve with no anchor (scale 1).
    fn plain(hits_at: Vec<f64>, gets: f64) -> Sampled {
        Sampled {
            hits_at,
            gets,
            ..Sampled::default()
        }
    }

    fn targets(sampled: &[Sampled], total: u32, current: &[u32]) -> Vec<u32> {
        let curves: Vec<Curve> = sampled
            .iter()
            .zip(current)
            .map(|(s, &p)| Curve::new(s, 1, p))
            .collect();
        let gets: Vec<f64> = sampled.iter().map(|s| s.gets).collect();
        target(&curves, &gets, total, current)
    }

    #[test]
    fn target_gives_pages_by_marginal_value() {
        // Class 0: 10 hits a page for 5 pages; class 1: 4 a page for 20;
        // class 2: requested, never hits. 12 pages.
        let s = [
            plain(linear(10.0, 5, 12), 100.0),
            plain(linear(4.0, 20, 12), 100.0),
            plain(vec![0.0; 13], 50.0),
        ];
        let t = targets(&s, 12, &[4, 4, 4]);
        // Class 2 keeps its one page; class 0 is full at 5; the rest to 1.
        assert_eq!(t, vec![5, 6, 1]);
    }

    #[test]
    fn target_sees_past_a_knee() {
        // Class 0's curve is convex at first (nothing until 4 pages, then
        // 100): its hull is worth 25 a page, more than class 1's 10.
        let c0: Vec<f64> = (0..=8).map(|b| if b >= 4 { 100.0 } else { 0.0 }).collect();
        let s = [plain(c0, 100.0), plain(linear(10.0, 8, 8), 100.0)];
        assert_eq!(targets(&s, 8, &[1, 7]), vec![4, 4]);
    }

    #[test]
    fn idle_classes_give_everything_and_flat_pages_stay() {
        let s = [plain(vec![0.0; 9], 0.0), plain(linear(5.0, 3, 8), 10.0)];
        // Class 0 idle: its pages may go; class 1 needs 3, the other 5 bring
        // nothing anywhere and stay where they are.
        assert_eq!(targets(&s, 8, &[4, 4]), vec![4, 4]);
        assert_eq!(targets(&s, 8, &[0, 8]), vec![0, 8]);
    }

    #[test]
    fn curves_interpolate_and_anchor_on_real_hits() {
        let s = Sampled {
            keys: 4,
            ..plain(vec![0.0, 10.0, 15.0], 20.0)
        };
        let unsized_sample = Sampled {
            keys: 0,
            ..s.clone()
        };
        let c = Curve::new(&unsized_sample, 4, 3);
        assert_eq!(
            (c.at(0), c.at(2), c.at(6), c.at(100)),
            (0.0, 5.0, 12.5, 15.0)
        );
        assert_eq!(c.inverse(5.0), 2.0);
        assert_eq!(c.inverse(15.0), 8.0);
        // The sample says 10 hits need 4 pages; the class has 3 pages and
        // really hit 10 (and missed 10): the curve is stretched to cross
        // there.
        let s = Sampled {
            hits: 10.0,
            misses: 10.0,
            ..s
        };
        let c = Curve::new(&s, 4, 3);
        assert!((c.at(3) - 10.0).abs() < 1e-9, "{}", c.at(3));
        // Within two standard deviations of its 4 sampled keys only.
        let c = Curve::new(&s, 4, 1);
        assert!((c.scale - 2.0).abs() < 1e-9);
        // Nothing missed: the crossing is unknown; the curve is at its top
        // from the current size on, shrunk below by two standard
        // deviations of its 100 sampled keys.
        let s = Sampled {
            hits: 15.0,
            misses: 0.0,
            keys: 100,
            ..s
        };
        let c = Curve::new(&s, 4, 2);
        assert!((c.scale - 1.0 / 1.2).abs() < 1e-9);
        assert_eq!((c.at(2), c.at(3)), (15.0, 15.0));
        assert!((c.at(1) - 10.0 / 4.0 / 1.2).abs() < 1e-9);
    }

    #[test]
    fn a_class_that_holds_everything_is_not_squeezed_by_sampling_noise() {
        // Class 0's 300 sampled keys all fit in 13 pages by the sample, it
        // has 14 and never misses; class 1 would gain from a page. The
        // sample alone would move a page; two standard deviations say no.
        let c0: Vec<f64> = (0..=20)
            .map(|b| 100.0 * (b.min(13) as f64) / 13.0)
            .collect();
        let s0 = Sampled {
            hits: 100.0,
            keys: 300,
            ..plain(c0, 100.0)
        };
        let s1 = plain(linear(0.5, 20, 20), 100.0);
        assert_eq!(decide(&[s0.clone(), s1.clone()], 1, &[14, 6]), vec![]);
        let without = Sampled { keys: 0, ..s0 };
        assert_eq!(decide(&[without, s1], 1, &[14, 6]), vec![(0, 1)]);
    }

    #[test]
    fn decide_moves_towards_the_target_only_when_it_pays() {
        let s = [
            plain(linear(10.0, 5, 12), 100.0),
            plain(linear(4.0, 20, 12), 100.0),
            plain(vec![0.0; 13], 50.0),
        ];
        let m = decide(&s, 1, &[2, 2, 8]);
        // Class 2 gives 7 pages: 3 to class 0 first (10 a page), then 4 to
        // class 1.
        assert_eq!(m.len(), 7);
        assert!(m.iter().all(|&(from, _)| from == 2));
        assert_eq!(m[..3], [(2, 0), (2, 0), (2, 0)]);
        assert_eq!(m.iter().filter(|&&(_, to)| to == 1).count(), 4);
        // At the target: nothing.
        assert!(decide(&s, 1, &[5, 6, 1]).is_empty());
        // A gain below MIN_GAIN of the requests: nothing.
        let flat = [
            plain(linear(0.1, 12, 12), 1e4),
            plain(linear(0.1001, 12, 12), 1e4),
        ];
        assert!(decide(&flat, 1, &[6, 6]).is_empty());
    }
}
