//! SAS, the Slab Allocation Scheme of Carra & Michiardi
//! (`../shared/seeds/003_*`, section 3.3, Algorithm 3), and our refinement.
//!
//! Per class the rule keeps `m_i`, the cost of its capacity misses, and
//! `r_i`, the cost of its requests (hits, plus the SETs that refill misses:
//! "Memcached does not hold information about the cost for requested
//! objects that result in a miss; therefore we consider the cost of the
//! storage operation"). Every `M` capacity misses it moves one page to the
//! "needy" class, the largest `m_i`, from a "rich" class. Two rules pick
//! them (`SasRule`):
//!
//! - `Paper`, Algorithm 3 as written: `m_i` counts every capacity miss the
//!   ghost set recognises (its whole window), the needy class has the
//!   largest `m_i`, the rich one the smallest `(m_i / r_i) / s_i`.
//! - `Marginal` (the default, chosen by measurement: docs/cost.md,
//!   "Rebalancing"): Algorithm 2's greedy criterion on-line. The ghost
//!   window is counted per class in pages, so the capacity misses of keys
//!   evicted within a class's last page of evictions, `g_i`, are what one
//!   more page would have saved: the needy class is the largest `g_i`. What
//!   a class loses with a page is at least its `g_i` (miss-ratio curves are
//!   convex) and, at a knee of its curve, much more: so the rich class is
//!   the smallest *loss*, `max(g_i, min(w_i, hits_i / s_i))`, where `w_i` is
//!   what its last received page was worth when it got it (`g_i` then,
//!   fading by 3% a decision, forgotten when it gives the page back) and
//!   `hits_i / s_i` bounds it (no page is worth more than the average page
//!   of a convex curve, and an idle class's pages are worth nothing). A
//!   move happens only when the gain beats the loss by two standard
//!   deviations of the counts (near the balance the differences are noise,
//!   and a move costs the donor's coldest page of items). The paper's
//!   `(m_i / r_i) / s_i` ignores how many items a page holds in each class
//!   and how steep each curve is; in the calcification experiment it leaves
//!   large-item classes with pages the optimum gives to small ones.
//!
//! Both rules: `M` counts capacity misses (default 2 000; the paper found
//! 5 000..20 000 equivalent at 1 GB and 200 M requests; fewer, earlier moves
//! follow a changing workload faster at the lab's smaller scales, measured);
//! after each decision the counters decay by `decay` (0.5; 0 is the paper's
//! literal "counters of the interval"); a class keeps at least one page (a
//! class with none takes a page back by a steal on its next SET), except
//! with `Marginal` a class nobody asked for in the last 64 decisions.

/// How SAS picks the classes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SasRule {
    /// Algorithm 3: needy = largest `m_i`, rich = smallest `(m_i/r_i)/s_i`.
    Paper,
    /// Needy = largest next-page gain, rich = smallest estimated loss.
    #[default]
    Marginal,
}

impl std::str::FromStr for SasRule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "paper" => Ok(SasRule::Paper),
            "marginal" => Ok(SasRule::Marginal),
            _ => Err(format!("unknown SAS rule {s:?} (paper, marginal)")),
        }
    }
}

/// Standard deviations a marginal move must clear.
const SIGNIFICANCE: f64 = 2.0;
/// Decisions without a request after which a class may give its last page.
const IDLE: u64 = 64;
/// How much a remembered page worth keeps per decision.
const WORTH_KEEP: f64 = 0.97;
/// Page moves one marginal decision may make. More than one per decision
/// follows a shifting workload no faster in the calcification experiment
/// (moves during the shift cost more than they bring), so one.
const MAX_MOVES: usize = 1;
/// Pages whose worth a class remembers.
const WORTH_MAX: usize = 64;

/// The rule's state.
pub struct Sas {
    /// Decide every this many capacity misses.
    pub every: u64,
    /// Counter decay per decision (0: reset, 1: never forget).
    pub decay: f64,
    pub rule: SasRule,
    /// Cost of capacity misses within the whole ghost window.
    m: Vec<f64>,
    /// The part of `m` one more page would have saved (the key was evicted
    /// within the class's last page of evictions), and the sum of its
    /// squared costs (its variance, for the significance test).
    g: Vec<f64>,
    q: Vec<f64>,
    /// Cost of requests (hits and refills), and of hits alone.
    r: Vec<f64>,
    hits: Vec<f64>,
    /// Per class, what each page it received was worth then (most recent
    /// last).
    worth: Vec<Vec<f64>>,
    since: u64,
    /// Decisions so far, and per class the one at its last request.
    decisions: u64,
    last_req: Vec<u64>,
}

impl Sas {
    pub fn new(nclasses: usize, every: u64, decay: f64, rule: SasRule) -> Sas {
        Sas {
            every: every.max(1),
            decay: decay.clamp(0.0, 1.0),
            rule,
            m: vec![0.0; nclasses],
            g: vec![0.0; nclasses],
            q: vec![0.0; nclasses],
            r: vec![0.0; nclasses],
            hits: vec![0.0; nclasses],
            worth: vec![Vec::new(); nclasses],
            since: 0,
            decisions: 0,
            last_req: vec![0; nclasses],
        }
    }

    /// A capacity miss (its cost and class arrive with the SET).
    #[inline]
    pub fn capacity_miss(&mut self) {
        self.since += 1;
    }

    /// The cost of a capacity miss of `class`; `next_page`: one more page
    /// would have saved it.
    #[inline]
    pub fn miss_cost(&mut self, class: usize, cost: u32, next_page: bool) {
        if let Some(m) = self.m.get_mut(class) {
            *m += cost as f64;
            if next_page {
                self.g[class] += cost as f64;
                self.q[class] += cost as f64 * cost as f64;
            }
        }
    }

    /// A request of `class` that missed (its refill SET).
    #[inline]
    pub fn request(&mut self, class: usize, cost: u32) {
        if let Some(r) = self.r.get_mut(class) {
            *r += cost as f64;
            self.last_req[class] = self.decisions;
        }
    }

    /// A request of `class` that hit.
    #[inline]
    pub fn hit(&mut self, class: usize, cost: u32) {
        if let Some(h) = self.hits.get_mut(class) {
            *h += cost as f64;
            self.r[class] += cost as f64;
            self.last_req[class] = self.decisions;
        }
    }

    /// M capacity misses since the last decision.
    pub fn due(&self) -> bool {
        self.since >= self.every
    }

    /// What taking a page from `class` (which has `pages`) would cost.
    fn loss(&self, class: usize, pages: u32) -> f64 {
        let g = self.g[class];
        let per_page = self.hits[class] / pages.max(1) as f64;
        match self.worth[class].last() {
            Some(&w) => g.max(w.min(per_page)),
            None => g,
        }
    }

    /// One decision on the current counters (`pages[i]` = s_i): the page
    /// moves (from, to), in order. `Paper` moves one page; `Marginal` pairs
    /// the neediest classes with the richest while the difference stays
    /// significant, each class in one move at most, up to `MAX_MOVES`. The
    /// interval restarts and the counters decay.
    pub fn decide(&mut self, pages: &[u32]) -> Vec<(usize, usize)> {
        let n = pages.len().min(self.g.len());
        let pages = &pages[..n];
        let moves: Vec<(usize, usize)> = match self.rule {
            SasRule::Paper => choose(&self.m, &self.r, pages).into_iter().collect(),
            SasRule::Marginal => {
                let loss: Vec<f64> = (0..n).map(|i| self.loss(i, pages[i])).collect();
                let idle = |i: usize| self.decisions - self.last_req[i] > IDLE;
                let mut floor: Vec<u32> = (0..n).map(|i| if idle(i) { 1 } else { 2 }).collect();
                let mut g = self.g[..n].to_vec();
                let mut moves = Vec::new();
                while moves.len() < MAX_MOVES {
                    let Some((from, to)) = choose_marginal(&g, &loss, &self.q, pages, &floor)
                    else {
                        break;
                    };
                    moves.push((from, to));
                    // Each class in one move per decision.
                    for c in [from, to] {
                        g[c] = 0.0;
                        floor[c] = u32::MAX;
                    }
                }
                moves
            }
        };
        self.decisions += 1;
        for &(from, to) in &moves {
            self.worth[from].pop();
            let w = &mut self.worth[to];
            if w.len() == WORTH_MAX {
                w.remove(0);
            }
            w.push(self.g[to]);
        }
        self.since = 0;
        for v in self
            .m
            .iter_mut()
            .chain(&mut self.g)
            .chain(&mut self.q)
            .chain(&mut self.r)
            .chain(&mut self.hits)
        {
            *v *= self.decay;
        }
        for w in self.worth.iter_mut().flatten() {
            *w *= WORTH_KEEP;
        }
        moves
    }

    /// (m_i, r_i) of a class (stats, tests).
    pub fn counters(&self, class: usize) -> (f64, f64) {
        (
            self.m.get(class).copied().unwrap_or(0.0),
            self.r.get(class).copied().unwrap_or(0.0),
        )
    }

    /// The next-page gain g_i of a class (tests).
    pub fn gain(&self, class: usize) -> f64 {
        self.g.get(class).copied().unwrap_or(0.0)
    }
}

/// Algorithm 3's two argmins/argmaxes. `m`, `r` and `pages` are per class.
pub fn choose(m: &[f64], r: &[f64], pages: &[u32]) -> Option<(usize, usize)> {
    let n = m.len().min(r.len()).min(pages.len());
    // Needy: the largest cost of capacity misses (ties: the lower class,
    // whose pages hold more items).
    let to = argmax((0..n).filter(|&i| m[i] > 0.0), |i| m[i])?;
    // Rich: the smallest miss ratio per page among classes that can spare
    // a page (ties: the class with more pages).
    let score = |i: usize| {
        if r[i] > 0.0 {
            m[i] / r[i] / pages[i] as f64
        } else {
            // Requested by nobody: richer than any class in use.
            -1.0
        }
    };
    let from = argmin_pages((0..n).filter(|&i| i != to && pages[i] >= 2), score, pages)?;
    Some((from, to))
}

/// The marginal rule: to the largest gain `g`, from the smallest `loss`
/// among classes with at least `floor[i]` pages, if the difference is
/// larger than `SIGNIFICANCE` standard deviations (`q`: summed squared
/// costs, the variance of a count of costs).
pub fn choose_marginal(
    g: &[f64],
    loss: &[f64],
    q: &[f64],
    pages: &[u32],
    floor: &[u32],
) -> Option<(usize, usize)> {
    let n = g
        .len()
        .min(loss.len())
        .min(q.len())
        .min(pages.len())
        .min(floor.len());
    let to = argmax((0..n).filter(|&i| g[i] > 0.0), |i| g[i])?;
    let from = argmin_pages(
        (0..n).filter(|&i| i != to && pages[i] >= floor[i].max(1)),
        |i| loss[i],
        pages,
    )?;
    (g[to] - loss[from] > SIGNIFICANCE * (q[to] + q[from]).sqrt()).then_some((from, to))
}

/// The first index with the largest value.
fn argmax(ids: impl Iterator<Item = usize>, v: impl Fn(usize) -> f64) -> Option<usize> {
    ids.fold(None, |best: Option<usize>, i| match best {
        Some(b) if v(b) >= v(i) => Some(b),
        _ => Some(i),
    })
}

/// The index with the smallest value, ties to the one with more pages.
fn argmin_pages(
    ids: impl Iterator<Item = usize>,
    v: impl Fn(usize) -> f64,
    pages: &[u32],
) -> Option<usize> {
    ids.fold(None, |best: Option<usize>, i| match best {
        Some(b) if v(b) < v(i) || (v(b) == v(i) && pages[b] >= pages[i]) => Some(b),
        _ => Some(i),
    })
}

#[cfg(any(test, feature = "testing"))]
impl Sas {
    /// Check the counters (tests and fuzzing): one of each per class, all
    /// finite and non-negative, the next-page gain part of the capacity
    /// misses, hits part of the requests, the remembered page worths
    /// bounded, no class requested after the last decision.
    pub fn validate(&self) {
        let n = self.m.len();
        for v in [&self.g, &self.q, &self.r, &self.hits] {
            assert_eq!(v.len(), n);
        }
        assert_eq!(self.worth.len(), n);
        assert_eq!(self.last_req.len(), n);
        for c in 0..n {
            let all = [self.m[c], self.g[c], self.q[c], self.r[c], self.hits[c]];
            assert!(all.iter().all(|v| v.is_finite() && *v >= 0.0), "class {c}");
            let slack = 1e-9 * self.m[c].max(self.r[c]).max(1.0);
            assert!(self.g[c] <= self.m[c] + slack, "class {c}: g > m");
            assert!(self.hits[c] <= self.r[c] + slack, "class {c}: hits > r");
            assert!(self.worth[c].len() <= WORTH_MAX);
            assert!(self.worth[c].iter().all(|w| w.is_finite() && *w >= 0.0));
            assert!(self.last_req[c] <= self.decisions);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_moves_from_least_miss_ratio_per_page_to_most_misses() {
        // Class 0: 10 pages, miss ratio 0.1 -> 0.01 per page.
        // Class 1: 2 pages, miss ratio 0.1 -> 0.05 per page.
        // Class 2: 4 pages, most capacity misses.
        let m = [10.0, 10.0, 50.0];
        let r = [100.0, 100.0, 100.0];
        assert_eq!(choose(&m, &r, &[10, 2, 4]), Some((0, 2)));
        // Same miss ratio, class 1 now has more pages: it is richer.
        assert_eq!(choose(&m, &r, &[2, 10, 4]), Some((1, 2)));
    }

    #[test]
    fn paper_idle_classes_give_first_and_single_pages_stay() {
        // Class 3 has pages and no requests: the richest.
        let m = [5.0, 0.0, 40.0, 0.0];
        let r = [100.0, 50.0, 100.0, 0.0];
        assert_eq!(choose(&m, &r, &[3, 3, 3, 2]), Some((3, 2)));
        // With one page only it cannot give; class 1 (no misses) does.
        assert_eq!(choose(&m, &r, &[3, 3, 3, 1]), Some((1, 2)));
        // Nobody can spare a page.
        assert_eq!(choose(&m, &r, &[1, 1, 5, 1]), None);
        // Nothing to do without capacity misses.
        assert_eq!(choose(&[0.0, 0.0], &[10.0, 10.0], &[4, 4]), None);
    }

    #[test]
    fn marginal_moves_only_on_a_significant_difference() {
        let floor = [2, 2, 2];
        // Gain 100 (variance 100) against loss 60 (variance 60): 40 > 2 x
        // sqrt(160) = 25.3: move.
        let g = [60.0, 100.0, 80.0];
        let q = [60.0, 100.0, 80.0];
        assert_eq!(
            choose_marginal(&g, &g, &q, &[5, 5, 5], &floor),
            Some((0, 1))
        );
        // 100 against 85: noise, no move.
        let g = [85.0, 100.0, 90.0];
        assert_eq!(choose_marginal(&g, &g, &g, &[5, 5, 5], &floor), None);
        // A knee: class 0's next page brings little but its loss is large,
        // so class 2 gives instead.
        let loss = [500.0, 100.0, 70.0];
        let g = [10.0, 300.0, 70.0];
        assert_eq!(
            choose_marginal(&g, &loss, &g, &[5, 5, 5], &floor),
            Some((2, 1))
        );
        // Single pages stay unless the floor allows it (an idle class).
        let g = [0.0, 300.0, 70.0];
        assert_eq!(
            choose_marginal(&g, &g, &g, &[1, 5, 5], &floor),
            Some((2, 1))
        );
        assert_eq!(
            choose_marginal(&g, &g, &g, &[1, 5, 5], &[1, 2, 2]),
            Some((0, 1))
        );
    }

    #[test]
    fn paper_decides_every_m_misses_and_decays() {
        let mut s = Sas::new(3, 4, 0.5, SasRule::Paper);
        s.request(0, 10);
        s.request(1, 10);
        s.miss_cost(1, 8, true);
        for _ in 0..3 {
            s.capacity_miss();
        }
        assert!(!s.due());
        s.capacity_miss();
        assert!(s.due());
        assert_eq!(s.decide(&[5, 5, 1]), vec![(0, 1)]);
        assert!(!s.due());
        assert_eq!(s.counters(1), (4.0, 5.0));
        // Out-of-range classes are ignored, not a panic.
        s.miss_cost(99, 1, true);
        s.request(99, 1);
        s.hit(99, 1);
        assert_eq!(s.counters(99), (0.0, 0.0));
    }

    #[test]
    fn marginal_remembers_what_a_received_page_was_worth() {
        let mut s = Sas::new(3, 1, 1.0, SasRule::Marginal);
        // Class 1 gains a lot, class 0 little; all are requested.
        for _ in 0..100 {
            s.miss_cost(1, 1, true);
            s.hit(0, 1);
            s.hit(2, 1);
        }
        for _ in 0..1000 {
            s.hit(1, 1);
        }
        for _ in 0..20 {
            s.miss_cost(0, 1, true);
            s.miss_cost(2, 1, true);
        }
        s.capacity_miss();
        assert_eq!(s.decide(&[5, 5, 5]), vec![(0, 1)]);
        // Now class 1's next page is worth nothing, but the page it got was
        // worth 100: it does not give it back to class 2 (gain 20).
        s.g[1] = 0.0;
        s.q[1] = 0.0;
        for _ in 0..30 {
            s.miss_cost(2, 1, true);
        }
        s.capacity_miss();
        let d = s.decide(&[4, 6, 5]);
        assert!(d.iter().all(|&(from, _)| from != 1), "{d:?}");
        assert!(s.gain(2) > 0.0);
    }
}
