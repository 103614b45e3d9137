//! The offline optimal slab assignment: Carra & Michiardi's Algorithm 2
//! (`../shared/seeds/003_*`, section 3.2), after Thiébaut, Stone & Wolf's
//! partitioning by miss-ratio derivatives.
//!
//! Input: for every slab class w, `gain[w][k]` = cost of the hits class w gets
//! with k pages (the cumulative, cost-weighted hit curve of its own LRU stack:
//! HRC^w(k) times the total cost). Output: pages per class maximising the sum.
//! The paper's greedy hands out one page at a time to the class whose curve
//! rises most with one more page; it is optimal when every curve is concave
//! (the paper's assumption, checked on its traces). Real curves have flat
//! starts (a class whose hot set needs 3 pages gains little from the first),
//! so [`exact`] also solves the knapsack exactly by dynamic programming
//! (O(classes x pages^2), like Hu et al.'s LAMA), for small enough memories,
//! and the report shows both.

use std::collections::BinaryHeap;

/// Pages per class and the total gain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    pub pages: Vec<usize>,
    pub gain: u64,
}

fn gain_at(curve: &[u64], k: usize) -> u64 {
    // Past the end the class holds all its objects: the curve is flat.
    match curve.get(k) {
        Some(&g) => g,
        None => curve.last().copied().unwrap_or(0),
    }
}

/// Algorithm 2: repeatedly give a page to the class with the largest
/// difference `gain(k+1) - gain(k)`. Ties go to the lower class. Pages nobody
/// gains from stay unassigned (they would change nothing).
pub fn greedy(curves: &[Vec<u64>], total_pages: usize) -> Assignment {
    let mut pages = vec![0usize; curves.len()];
    // Max-heap on (difference, lower class first).
    let mut heap: BinaryHeap<(u64, std::cmp::Reverse<usize>)> = curves
        .iter()
        .enumerate()
        .map(|(w, c)| (gain_at(c, 1) - gain_at(c, 0), std::cmp::Reverse(w)))
        .collect();
    let mut left = total_pages;
    while left > 0 {
        let Some((diff, std::cmp::Reverse(w))) = heap.pop() else {
            break;
        };
        if diff == 0 {
            break;
        }
        pages[w] += 1;
        left -= 1;
        let c = &curves[w];
        heap.push((
            gain_at(c, pages[w] + 1) - gain_at(c, pages[w]),
            std::cmp::Reverse(w),
        ));
    }
    let gain = curves.iter().zip(&pages).map(|(c, &k)| gain_at(c, k)).sum();
    Assignment { pages, gain }
}

/// Work bound for [`exact`]: classes x pages x useful pages per class.
pub const EXACT_MAX_WORK: u64 = 300_000_000;

/// The exact optimum by dynamic programming over classes, or None when that
/// would take more than [`EXACT_MAX_WORK`] steps.
pub fn exact(curves: &[Vec<u64>], total_pages: usize) -> Option<Assignment> {
    // A class never needs more pages than its curve has points.
    let useful: Vec<usize> = curves.iter().map(|c| c.len().saturating_sub(1)).collect();
    let work: u64 = useful
        .iter()
        .map(|&u| (u.min(total_pages) as u64 + 1) * (total_pages as u64 + 1))
        .sum();
    if work > EXACT_MAX_WORK {
        return None;
    }
    let p = total_pages;
    // best[j] = best gain of the classes so far with at most j pages.
    let mut best = vec![0u64; p + 1];
    // choice[w][j] = pages given to class w in the optimum for j pages.
    let mut choice: Vec<Vec<u32>> = Vec::with_capacity(curves.len());
    for (w, c) in curves.iter().enumerate() {
        let mut next = best.clone();
        let mut pick = vec![0u32; p + 1];
        for j in 0..=p {
            for k in 1..=useful[w].min(j) {
                let v = best[j - k] + gain_at(c, k);
                if v > next[j] {
                    next[j] = v;
                    pick[j] = k as u32;
                }
            }
        }
        best = next;
        choice.push(pick);
    }
    let mut pages = vec![0usize; curves.len()];
    let mut j = p;
    for w in (0..curves.len()).rev() {
        let k = choice[w][j] as usize;
        pages[w] = k;
        j -= k;
    }
    Some(Assignment {
        pages,
        gain: best[p],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::SmallRng, Rng, SeedableRng};

    /// Every way to split `p` pages among the classes.
    fn brute(curves: &[Vec<u64>], p: usize) -> u64 {
        fn go(curves: &[Vec<u64>], p: usize) -> u64 {
            match curves.split_first() {
                None => 0,
                Some((c, rest)) => (0..=p)
                    .map(|k| gain_at(c, k) + go(rest, p - k))
                    .max()
                    .unwrap_or(0),
            }
        }
        go(curves, p)
    }

    fn concave(rng: &mut SmallRng, len: usize) -> Vec<u64> {
        let mut c = vec![0u64];
        let mut step = rng.gen_range(50..200u64);
        for _ in 0..len {
            let last = *c.last().unwrap();
            c.push(last + step);
            step = step * rng.gen_range(40..100u64) / 100;
        }
        c
    }

    #[test]
    fn greedy_is_optimal_on_concave_curves() {
        let mut rng = SmallRng::seed_from_u64(3);
        for _ in 0..200 {
            let n = rng.gen_range(1..5);
            let curves: Vec<Vec<u64>> = (0..n)
                .map(|_| {
                    let len = rng.gen_range(0..8);
                    concave(&mut rng, len)
                })
                .collect();
            let p = rng.gen_range(0..12);
            let g = greedy(&curves, p);
            let want = brute(&curves, p);
            assert_eq!(g.gain, want, "{curves:?} with {p} pages");
            assert!(g.pages.iter().sum::<usize>() <= p);
            assert_eq!(exact(&curves, p).unwrap().gain, want);
        }
    }

    #[test]
    fn exact_beats_greedy_on_a_flat_start() {
        // Class 0 gains nothing until its 2-page hot set fits; class 1 is
        // concave. With 2 pages greedy follows class 1's first page.
        let curves = vec![vec![0, 0, 100], vec![0, 30, 40]];
        let g = greedy(&curves, 2);
        assert_eq!(g.pages, vec![0, 2]);
        assert_eq!(g.gain, 40);
        let e = exact(&curves, 2).unwrap();
        assert_eq!(e.pages, vec![2, 0]);
        assert_eq!(e.gain, 100);
        assert_eq!(brute(&curves, 2), 100);
    }

    #[test]
    fn exact_matches_brute_force_on_arbitrary_curves() {
        let mut rng = SmallRng::seed_from_u64(11);
        for _ in 0..200 {
            let n = rng.gen_range(1..4);
            let curves: Vec<Vec<u64>> = (0..n)
                .map(|_| {
                    let len = rng.gen_range(0..6);
                    let mut c = vec![0u64];
                    for _ in 0..len {
                        let last = *c.last().unwrap();
                        c.push(last + rng.gen_range(0..50));
                    }
                    c
                })
                .collect();
            let p = rng.gen_range(0..10);
            let e = exact(&curves, p).unwrap();
            assert_eq!(e.gain, brute(&curves, p));
            assert!(e.pages.iter().sum::<usize>() <= p);
            let recomputed: u64 = curves
                .iter()
                .zip(&e.pages)
                .map(|(c, &k)| gain_at(c, k))
                .sum();
            assert_eq!(recomputed, e.gain);
        }
    }

    #[test]
    fn greedy_leaves_useless_pages_free() {
        let curves = vec![vec![0, 10], vec![0, 5, 6]];
        let g = greedy(&curves, 10);
        assert_eq!(g.pages, vec![1, 2]);
        assert_eq!(g.gain, 16);
    }
}
