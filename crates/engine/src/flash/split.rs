//! The hot area's size (SlimCache §3.5, Equation 6 and Algorithm 1).
//!
//! Items read from the hot area cost a raw read; from the cold area, a read
//! and a decompression; a miss, a fetch from the backend. Each window of
//! [`WINDOW`] flash lookups the tier measures the three costs and the share
//! of lookups each area served, and predicts the cost of moving the split
//! by one step `S` either way:
//!
//! - hot area + S: the cold area gives up the slabs it would recycle next
//!   (their hits, `H_c_head`), which hold `ratio` times fewer items once
//!   stored raw: `H_hot + H_c_head / ratio`, `H_cold - H_c_head`;
//! - hot area - S: the hot area gives up its next victims (`H_h_tail`),
//!   which compressed hold `ratio` times more: `H_hot - H_h_tail`,
//!   `H_cold + H_h_tail × ratio`.
//!
//! `Cost = H_hot·C_hot + H_cold·C_cold + (1 − H_hot − H_cold)·C_miss`; the
//! split moves to whichever option costs least by more than [`EPSILON`] of
//! the current cost, within [1 slab, [`MAX_HOT_SHARE`] of the slabs].
//!
//! `C_miss` is the items' own cost where they carry one (learned from the
//! gap between a miss and its SET, `-o learn_costs=1`, or sent by clients,
//! both taken as microseconds), else `-o flash_miss_cost` (1 ms).

use std::sync::atomic::{AtomicU64, Ordering};

use super::log::Log;
use super::stage::Area;
use super::tier::Flash;

/// Flash lookups per window.
pub const WINDOW: u64 = 20_000;
/// The split moves only for a gain above this share of the cost.
pub const EPSILON: f64 = 0.01;
/// The hot area's largest share of the slabs.
pub const MAX_HOT_SHARE: f64 = 0.5;

/// One window's measurements, as shares of its lookups and microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Inputs {
    pub h_hot: f64,
    pub h_cold: f64,
    /// Hits of the cold slabs next to be recycled (S of them).
    pub h_cold_head: f64,
    /// Hits of the hot slabs next to be recycled (S of them).
    pub h_hot_tail: f64,
    pub c_hot: f64,
    pub c_cold: f64,
    pub c_miss: f64,
    /// The cold area's compression ratio.
    pub ratio: f64,
}

/// Equation 6.
pub fn cost(i: &Inputs, h_hot: f64, h_cold: f64) -> f64 {
    let h_hot = h_hot.clamp(0.0, 1.0);
    let h_cold = h_cold.clamp(0.0, 1.0 - h_hot);
    h_hot * i.c_hot + h_cold * i.c_cold + (1.0 - h_hot - h_cold) * i.c_miss
}

/// Algorithm 1: +1 to grow the hot area by a step, -1 to shrink it, 0 to
/// stay; `can_grow`/`can_shrink` say whether the bounds allow it.
pub fn decide(i: &Inputs, can_grow: bool, can_shrink: bool) -> i8 {
    let ratio = i.ratio.max(1.0);
    let now = cost(i, i.h_hot, i.h_cold);
    let grow = cost(i, i.h_hot + i.h_cold_head / ratio, i.h_cold - i.h_cold_head);
    let shrink = cost(i, i.h_hot - i.h_hot_tail, i.h_cold + i.h_hot_tail * ratio);
    let (mut best, mut choice) = (now, 0);
    for (c, d, allowed) in [(grow, 1, can_grow), (shrink, -1, can_shrink)] {
        if allowed && c <= best && (now - c) > EPSILON * now {
            best = c;
            choice = d;
        }
    }
    choice
}

impl Flash {
    /// The writer's part: at the end of a window, move the split one step
    /// if the cost model says so. `ratio`: the cold area's running
    /// compression ratio.
    pub(super) fn adapt_split(&self, ratio: f64) {
        let c = &self.counters;
        let lookups = c.win_lookups.load(Ordering::Relaxed);
        if lookups < WINDOW {
            return;
        }
        let take = |a: &AtomicU64| a.swap(0, Ordering::Relaxed);
        take(&c.win_lookups);
        let (hot_hits, cold_hits) = (take(&c.win_hot_hits), take(&c.win_cold_hits));
        let (hot_us, cold_us) = (take(&c.win_hot_us), take(&c.win_cold_us));
        let (cost_us, costs) = (take(&c.win_cost_us), take(&c.win_costs));
        let mut log = self.log.lock();
        let slabs = log.slabs.len();
        let step = (slabs / 100).max(1);
        let next_victims = |log: &Log, area: Area| -> u64 {
            log.areas[area as usize]
                .iter()
                .take(step)
                .map(|&s| u64::from(log.slabs[s as usize].reads))
                .sum()
        };
        let n = lookups as f64;
        let mean = |us: u64, hits: u64| (hits > 0).then(|| us as f64 / hits as f64);
        let c_cold = mean(cold_us, cold_hits).unwrap_or(100.0);
        let inputs = Inputs {
            h_hot: hot_hits as f64 / n,
            h_cold: cold_hits as f64 / n,
            h_cold_head: next_victims(&log, Area::Cold) as f64 / n,
            h_hot_tail: next_victims(&log, Area::Hot) as f64 / n,
            c_hot: mean(hot_us, hot_hits).unwrap_or(c_cold),
            c_cold,
            c_miss: mean(cost_us, costs).unwrap_or(self.config.miss_cost_us as f64),
            ratio,
        };
        for m in &mut log.slabs {
            m.reads = 0;
        }
        drop(log);
        let target = self.hot_target.load(Ordering::Relaxed);
        let most = (slabs as f64 * MAX_HOT_SHARE) as usize;
        let d = decide(&inputs, target + step <= most, target > step);
        if d != 0 {
            let next = if d > 0 { target + step } else { target - step };
            self.hot_target.store(next, Ordering::Relaxed);
            c.split_moves.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> Inputs {
        Inputs {
            h_hot: 0.3,
            h_cold: 0.4,
            h_cold_head: 0.05,
            h_hot_tail: 0.05,
            c_hot: 400.0,
            c_cold: 900.0,
            c_miss: 300_000.0,
            ratio: 3.0,
        }
    }

    #[test]
    fn an_expensive_backend_wants_the_compressed_area() {
        // SlimCache §4.4.1: 300 ms misses; shrinking the hot area turns
        // its tail's hits into three times as many cold ones.
        assert_eq!(decide(&inputs(), true, true), -1);
        assert_eq!(decide(&inputs(), true, false), 0);
    }

    #[test]
    fn a_cheap_backend_and_slow_decompression_want_the_hot_area() {
        // Hardly any hit gained by compression, each cold read far dearer.
        let i = Inputs {
            c_miss: 1_200.0,
            c_cold: 5_000.0,
            h_hot_tail: 0.0,
            ratio: 1.05,
            ..inputs()
        };
        assert_eq!(decide(&i, true, true), 1);
        assert_eq!(decide(&i, false, true), 0);
    }

    #[test]
    fn no_gain_no_move() {
        let i = Inputs {
            h_cold_head: 0.0,
            h_hot_tail: 0.0,
            ..inputs()
        };
        assert_eq!(decide(&i, true, true), 0);
    }

    #[test]
    fn the_cost_is_equation_6() {
        let i = inputs();
        let c = cost(&i, 0.3, 0.4);
        assert!((c - (0.3 * 400.0 + 0.4 * 900.0 + 0.3 * 300_000.0)).abs() < 1e-6);
        // Shares outside [0, 1] are clamped, never negative misses.
        assert!(cost(&i, 0.9, 0.5) >= 0.9 * 400.0);
    }
}
