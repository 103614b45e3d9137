//! SAS, the Slab Allocation Scheme of Carra & Michiardi
//! (`../shared/seeds/003_*`, section 3.3, Algorithm 3).
//!
//! Per class the rule keeps `m_i`, the cost of its capacity misses, and
//! `r_i`, the cost of its requests (hits, plus the SETs that refill misses:
//! "Memcached does not hold information about the cost for requested
//! objects that result in a miss; therefore we consider the cost of the
//! storage operation"). Every `M` capacity misses it moves one page from the
//! "rich" class, the smallest `(m_i / r_i) / s_i` (miss ratio per page: what
//! losing a page costs), to the "needy" class, the largest `m_i`.
//!
//! What the paper leaves open and we chose:
//! - `M` counts capacity misses (what the ghost set recognises), default
//!   10 000, the middle of the 5 000..20 000 the paper found equivalent.
//! - The counters decay: after each decision they are multiplied by `decay`
//!   (0.5 by default), so the rule follows a workload that changes (the
//!   calcification experiment) while still averaging over a few intervals.
//!   `decay = 0` is the paper's literal "counters of the interval".
//! - A class keeps at least one page (a class with none would steal one
//!   back on its next SET), and a class with no requests at all in the
//!   window is the richest (its pages serve nobody).
//! - No move when the needy class is the rich one, or when no class has
//!   capacity misses.

/// Which class gives the page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SasDonor {
    /// Algorithm 3: the smallest `(m_i / r_i) / s_i`.
    #[default]
    Paper,
    /// The smallest `m_i`: the class whose next page would bring least.
    Marginal,
}

impl std::str::FromStr for SasDonor {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "paper" => Ok(SasDonor::Paper),
            "marginal" => Ok(SasDonor::Marginal),
            _ => Err(format!("unknown SAS donor rule {s:?} (paper, marginal)")),
        }
    }
}

/// The rule's state.
pub struct Sas {
    /// Decide every this many capacity misses.
    pub every: u64,
    /// Counter decay per decision (0: reset, 1: never forget).
    pub decay: f64,
    pub donor: SasDonor,
    m: Vec<f64>,
    r: Vec<f64>,
    since: u64,
}

impl Sas {
    pub fn new(nclasses: usize, every: u64, decay: f64, donor: SasDonor) -> Sas {
        Sas {
            every: every.max(1),
            decay: decay.clamp(0.0, 1.0),
            donor,
            m: vec![0.0; nclasses],
            r: vec![0.0; nclasses],
            since: 0,
        }
    }

    /// A capacity miss of `class` (its cost arrives later with the SET).
    #[inline]
    pub fn capacity_miss(&mut self) {
        self.since += 1;
    }

    #[inline]
    pub fn miss_cost(&mut self, class: usize, cost: u32) {
        if let Some(m) = self.m.get_mut(class) {
            *m += cost as f64;
        }
    }

    #[inline]
    pub fn request(&mut self, class: usize, cost: u32) {
        if let Some(r) = self.r.get_mut(class) {
            *r += cost as f64;
        }
    }

    /// M capacity misses since the last decision.
    pub fn due(&self) -> bool {
        self.since >= self.every
    }

    /// Algorithm 3 on the current counters (`pages[i]` = s_i): the page move
    /// (from, to), if any. The interval restarts and the counters decay.
    pub fn decide(&mut self, pages: &[u32]) -> Option<(usize, usize)> {
        let choice = match self.donor {
            SasDonor::Paper => choose(&self.m, &self.r, pages),
            SasDonor::Marginal => choose_marginal(&self.m, pages),
        };
        self.since = 0;
        for v in self.m.iter_mut().chain(self.r.iter_mut()) {
            *v *= self.decay;
        }
        choice
    }

    /// (m_i, r_i) of a class (stats, tests).
    pub fn counters(&self, class: usize) -> (f64, f64) {
        (
            self.m.get(class).copied().unwrap_or(0.0),
            self.r.get(class).copied().unwrap_or(0.0),
        )
    }

    pub fn clear(&mut self) {
        self.m.fill(0.0);
        self.r.fill(0.0);
        self.since = 0;
    }
}

/// Algorithm 3's two argmins/argmaxes. `m`, `r` and `pages` are per class.
pub fn choose(m: &[f64], r: &[f64], pages: &[u32]) -> Option<(usize, usize)> {
    let n = m.len().min(r.len()).min(pages.len());
    // Needy: the largest cost of capacity misses (ties: the lower class,
    // whose pages hold more items).
    let to = (0..n)
        .filter(|&i| m[i] > 0.0)
        .fold(None, |best: Option<usize>, i| match best {
            Some(b) if m[b] >= m[i] => Some(b),
            _ => Some(i),
        })?;
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
    let from = (0..n).filter(|&i| i != to && pages[i] >= 2).fold(
        None,
        |best: Option<usize>, i| match best {
            Some(b) if score(b) < score(i) || (score(b) == score(i) && pages[b] >= pages[i]) => {
                Some(b)
            }
            _ => Some(i),
        },
    )?;
    Some((from, to))
}

/// The marginal variant: from the class with the smallest `m_i` (with the
/// ghost window counted in pages, the hits its next page would bring), to
/// the largest, if that is clearly larger (by a quarter: `m` of the giver
/// underestimates what it loses, the value of the page it has).
pub fn choose_marginal(m: &[f64], pages: &[u32]) -> Option<(usize, usize)> {
    let n = m.len().min(pages.len());
    let to = (0..n)
        .filter(|&i| m[i] > 0.0)
        .fold(None, |best: Option<usize>, i| match best {
            Some(b) if m[b] >= m[i] => Some(b),
            _ => Some(i),
        })?;
    let from = (0..n).filter(|&i| i != to && pages[i] >= 2).fold(
        None,
        |best: Option<usize>, i| match best {
            Some(b) if m[b] < m[i] || (m[b] == m[i] && pages[b] >= pages[i]) => Some(b),
            _ => Some(i),
        },
    )?;
    (m[to] > 1.25 * m[from]).then_some((from, to))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_from_least_miss_ratio_per_page_to_most_misses() {
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
    fn idle_classes_give_first_and_single_pages_stay() {
        // Class 3 has pages and no requests: the richest.
        let m = [5.0, 0.0, 40.0, 0.0];
        let r = [100.0, 50.0, 100.0, 0.0];
        assert_eq!(choose(&m, &r, &[3, 3, 3, 2]), Some((3, 2)));
        // With one page only it cannot give; class 1 (no misses) does.
        assert_eq!(choose(&m, &r, &[3, 3, 3, 1]), Some((1, 2)));
        // Nobody can spare a page.
        assert_eq!(choose(&m, &r, &[1, 1, 5, 1]), None);
    }

    #[test]
    fn nothing_to_do_without_capacity_misses() {
        assert_eq!(choose(&[0.0, 0.0], &[10.0, 10.0], &[4, 4]), None);
    }

    #[test]
    fn decides_every_m_misses_and_decays() {
        let mut s = Sas::new(3, 4, 0.5, SasDonor::Paper);
        s.request(0, 10);
        s.request(1, 10);
        s.miss_cost(1, 8);
        for _ in 0..3 {
            s.capacity_miss();
        }
        assert!(!s.due());
        s.capacity_miss();
        assert!(s.due());
        assert_eq!(s.decide(&[5, 5, 1]), Some((0, 1)));
        assert!(!s.due());
        assert_eq!(s.counters(1), (4.0, 5.0));
        // Out-of-range classes are ignored, not a panic.
        s.miss_cost(99, 1);
        s.request(99, 1);
        assert_eq!(s.counters(99), (0.0, 0.0));
    }
}
