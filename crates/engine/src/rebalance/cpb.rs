//! The cost-per-byte rule of GD-Wheel (`../shared/seeds/001_*`, chapter 5.2).
//!
//! "Each slab class will maintain an average cost per byte information. Our
//! rebalancing policy will move slabs from the class with lowest average
//! cost to the classes with higher average cost. [...] Instead of making
//! periodic decisions, our rebalancing policy reacts immediately on
//! evictions. When an eviction occurs in a slab class with higher average
//! cost, our rebalancing policy will move a certain number of least
//! recently used slabs from the lowest cost class to the higher cost class.
//! The number of slabs to be moved is determined by the size of the evicted
//! key-value pair."
//!
//! Our reading: a class's average cost per byte is the sum of its live
//! items' costs over the memory they occupy (chunks); every eviction adds
//! the evicted item's size to its class's *debt*, and each time a class
//! owes a page's worth of evicted bytes, one page moves to it from the
//! class with the lowest cost per byte, provided that one is cheaper. So a
//! class whose items are worth more per byte stops losing items as fast as
//! memory can follow, and large evictions move pages sooner than small ones,
//! as the thesis says. The move itself happens on the next maintenance pass
//! (pages drain incrementally: a move never stalls a request); debts keep
//! accumulating meanwhile. A class keeps at least one page; a class with
//! pages and no items has cost 0 per byte and gives first.

/// Per class: live cost and the bytes of memory holding it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ClassValue {
    pub pages: u32,
    pub live_cost: u64,
    pub live_bytes: u64,
}

impl ClassValue {
    pub fn cost_per_byte(&self) -> f64 {
        if self.live_bytes == 0 {
            0.0
        } else {
            self.live_cost as f64 / self.live_bytes as f64
        }
    }
}

pub struct CostPerByte {
    page_size: u64,
    /// Evicted bytes per class not yet answered by a page.
    debt: Vec<u64>,
}

impl CostPerByte {
    pub fn new(nclasses: usize, page_size: usize) -> CostPerByte {
        CostPerByte {
            page_size: page_size as u64,
            debt: vec![0; nclasses],
        }
    }

    #[inline]
    pub fn evicted(&mut self, class: usize, bytes: usize) {
        if let Some(d) = self.debt.get_mut(class) {
            *d = d.saturating_add(bytes as u64);
        }
    }

    /// Some class owes a page.
    pub fn due(&self) -> bool {
        self.debt.iter().any(|&d| d >= self.page_size)
    }

    /// The move (from, to) answering the most valuable class that owes a
    /// page, if a cheaper class can give one; a class that cannot be helped
    /// (it is the cheapest itself) has its debt forgiven.
    pub fn decide(&mut self, classes: &[ClassValue]) -> Option<(usize, usize)> {
        let n = self.debt.len().min(classes.len());
        loop {
            let to = (0..n)
                .filter(|&i| self.debt[i] >= self.page_size)
                .max_by(|&a, &b| {
                    classes[a]
                        .cost_per_byte()
                        .total_cmp(&classes[b].cost_per_byte())
                })?;
            self.debt[to] -= self.page_size;
            let want = classes[to].cost_per_byte();
            let from = (0..n)
                .filter(|&i| i != to && classes[i].pages >= 2)
                .min_by(|&a, &b| {
                    classes[a]
                        .cost_per_byte()
                        .total_cmp(&classes[b].cost_per_byte())
                        .then(classes[b].pages.cmp(&classes[a].pages))
                });
            match from {
                Some(f) if classes[f].cost_per_byte() < want => return Some((f, to)),
                _ => self.debt[to] = 0,
            }
        }
    }

    pub fn debt(&self, class: usize) -> u64 {
        self.debt.get(class).copied().unwrap_or(0)
    }

    pub fn clear(&mut self) {
        self.debt.fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cv(pages: u32, cost: u64, bytes: u64) -> ClassValue {
        ClassValue {
            pages,
            live_cost: cost,
            live_bytes: bytes,
        }
    }

    #[test]
    fn a_page_per_page_of_evicted_bytes_from_the_cheapest_class() {
        let mut c = CostPerByte::new(3, 1000);
        let classes = [cv(5, 100, 1000), cv(5, 400, 1000), cv(5, 200, 1000)];
        c.evicted(1, 600);
        assert!(!c.due());
        assert_eq!(c.decide(&classes), None);
        c.evicted(1, 600);
        assert!(c.due());
        assert_eq!(c.decide(&classes), Some((0, 1)));
        assert_eq!(c.debt(1), 200);
        // A large eviction owes two pages at once.
        c.evicted(2, 2000);
        assert_eq!(c.decide(&classes), Some((0, 2)));
        assert_eq!(c.decide(&classes), Some((0, 2)));
        assert_eq!(c.decide(&classes), None);
    }

    #[test]
    fn the_cheapest_class_is_not_helped_and_single_pages_stay() {
        let mut c = CostPerByte::new(3, 1000);
        let classes = [cv(5, 100, 1000), cv(5, 400, 1000), cv(1, 0, 0)];
        c.evicted(0, 1000);
        assert_eq!(c.decide(&classes), None);
        assert_eq!(c.debt(0), 0, "debt forgiven");
        // Class 2 (no items) would be the cheapest but has only one page.
        c.evicted(1, 1000);
        assert_eq!(c.decide(&classes), Some((0, 1)));
        let idle = [cv(5, 100, 1000), cv(5, 400, 1000), cv(3, 0, 0)];
        c.evicted(1, 1000);
        assert_eq!(c.decide(&idle), Some((2, 1)));
        // Out-of-range classes are ignored.
        c.evicted(7, 1 << 30);
        assert!(!c.due());
    }
}
