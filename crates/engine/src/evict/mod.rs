//! Eviction policies: which item of a slab class gives up its chunk.
//!
//! Every policy implements one trait, [`Eviction`], whose contract is
//! written in [`policy`]: the engine tells it about every item's life (link,
//! touch, unlink, relocate, clear) and asks it for a victim when a class has
//! no free chunk. Per-item state: CLOCK uses the header's REF bit; GD-Wheel
//! a 12-byte trailer in the chunk's slack after the item, or in a per-page
//! side array when the item fills its chunk.
//!
//! Policies, one file each:
//! - [`clock`]: CLOCK over the chunks, the LRU approximation (`-o eviction=lru`,
//!   the default; no per-item cost beyond the 16-byte header).
//! - [`gdwheel`]: GreedyDual by recomputation cost with hierarchical cost
//!   wheels (`-o eviction=gdwheel`; GD-Wheel thesis chapters 3 and 4), and
//!   its variant with deferred hits (`-o eviction=gdwheel-lazy`), the same
//!   wheels with another `touch`.
//! - [`sieve`]: SIEVE (NSDI'24), a FIFO queue per class with a hand that
//!   keeps visited items in place (`-o eviction=sieve`; the queue's links in
//!   GD-Wheel's trailers, the visited bit is REF).
//!
//! The engine holds a [`Policy`]: the chosen one, dispatched statically (an
//! enum, so a hook costs a branch, as it did before the trait), and per
//! class the sum of the costs of the live items, for the `avg_cost`
//! statistic and for cost-aware rebalancing.

pub mod clock;
pub mod gdwheel;
pub mod policy;
pub mod sieve;

pub use clock::ClockPolicy;
pub use gdwheel::GdWheel;
pub use policy::{Eviction, Victim};
pub use sieve::Sieve;

use crate::config::EvictionPolicy;
use crate::item;
use crate::slab::Slabs;

/// The policies, as an enum: static dispatch on the hot path.
enum Chosen {
    Clock(ClockPolicy),
    GdWheel(GdWheel),
    Sieve(Sieve),
}

/// `$body` with `$p` bound to the chosen policy, whichever it is.
macro_rules! with_chosen {
    ($chosen:expr, $p:ident => $body:expr) => {
        match $chosen {
            Chosen::Clock($p) => $body,
            Chosen::GdWheel($p) => $body,
            Chosen::Sieve($p) => $body,
        }
    };
}

/// The engine's eviction policy and per-class cost gauges.
pub struct Policy {
    chosen: Chosen,
    /// Per class: sum of the (dequantised) costs of its live items.
    live_cost: Vec<u64>,
    costs: Box<[u32; 256]>,
}

impl Policy {
    pub fn new(kind: EvictionPolicy, nclasses: usize) -> Policy {
        Policy {
            chosen: match kind {
                EvictionPolicy::Lru => Chosen::Clock(ClockPolicy),
                EvictionPolicy::GdWheel => Chosen::GdWheel(GdWheel::new(nclasses, false)),
                EvictionPolicy::GdWheelLazy => Chosen::GdWheel(GdWheel::new(nclasses, true)),
                EvictionPolicy::Sieve => Chosen::Sieve(Sieve::new(nclasses)),
            },
            live_cost: vec![0; nclasses],
            costs: policy::cost_table(),
        }
    }

    pub fn kind(&self) -> EvictionPolicy {
        with_chosen!(&self.chosen, p => p.kind())
    }

    /// Memory the policy holds outside the pages.
    pub fn memory_bytes(&self) -> usize {
        with_chosen!(&self.chosen, p => p.memory_bytes()) + self.live_cost.capacity() * 8
    }

    /// Memory the first item of `class` makes the policy allocate.
    pub fn first_item_bytes(&self, class: usize) -> usize {
        with_chosen!(&self.chosen, p => p.first_item_bytes(class))
    }

    /// The dequantised cost of the item in `chunk`.
    #[inline]
    pub fn cost_of(&self, chunk: &[u8]) -> u32 {
        self.costs[item::cost_code(chunk) as usize]
    }

    #[inline]
    pub fn link(&mut self, slabs: &mut Slabs, class: usize, loc: u64) {
        self.live_cost[class] += self.cost_of(slabs.chunk(loc)) as u64;
        with_chosen!(&mut self.chosen, p => p.link(slabs, class, loc));
    }

    #[inline]
    pub fn unlink(&mut self, slabs: &mut Slabs, class: usize, loc: u64) {
        let c = self.cost_of(slabs.chunk(loc)) as u64;
        self.live_cost[class] = self.live_cost[class].saturating_sub(c);
        with_chosen!(&mut self.chosen, p => p.unlink(slabs, class, loc));
    }

    /// Items linked without the engine lock (`crate::Cache::store`, CLOCK
    /// only) with costs summing to `cost`.
    pub fn add_live_cost(&mut self, class: usize, cost: u64) {
        debug_assert!(cost == 0 || matches!(self.chosen, Chosen::Clock(_)));
        if let Some(c) = self.live_cost.get_mut(class) {
            *c += cost;
        }
    }

    /// Change a live item's cost byte (a guessed cost re-estimated); the
    /// next `touch` places it by the new cost.
    pub fn recost(&mut self, slabs: &mut Slabs, class: usize, loc: u64, q: u8) {
        let chunk = slabs.chunk_mut(loc);
        let old = item::cost_code(chunk);
        if old != q {
            item::set_cost_code(chunk, q);
            self.live_cost[class] = (self.live_cost[class] + self.costs[q as usize] as u64)
                .saturating_sub(self.costs[old as usize] as u64);
        }
    }

    /// An access that counts (CLOCK's REF bit is set by the engine).
    #[inline]
    pub fn touch(&mut self, slabs: &mut Slabs, class: usize, loc: u64) {
        with_chosen!(&mut self.chosen, p => p.touch(slabs, class, loc));
    }

    #[inline]
    pub fn relocate(&mut self, slabs: &mut Slabs, class: usize, from: u64, to: u64) {
        with_chosen!(&mut self.chosen, p => p.relocate(slabs, class, from, to));
    }

    pub fn clear(&mut self) {
        self.live_cost.fill(0);
        with_chosen!(&mut self.chosen, p => p.clear());
    }

    pub fn victim(
        &mut self,
        slabs: &mut Slabs,
        class: usize,
        now: u32,
        protect: Option<u64>,
    ) -> Option<Victim> {
        with_chosen!(&mut self.chosen, p => p.victim(slabs, class, now, protect))
    }

    /// The next victim of `class` if the policy can name it without moving
    /// (GD-Wheel); None for CLOCK, whose hand position the engine reads.
    pub fn peek(&self, class: usize) -> Option<u64> {
        with_chosen!(&self.chosen, p => p.peek(class))
    }

    /// Sum of the costs of `class`'s live items.
    pub fn live_cost(&self, class: usize) -> u64 {
        self.live_cost.get(class).copied().unwrap_or(0)
    }

    /// GreedyDual's credit of a live item under GD-Wheel: H - L, what is
    /// left of its cost before it becomes the victim (0 = next in line).
    /// None under CLOCK. A page move can keep the items with the most.
    pub fn credit(&self, slabs: &Slabs, class: usize, loc: u64) -> Option<u64> {
        with_chosen!(&self.chosen, p => p.credit(slabs, class, loc))
    }
}

#[cfg(any(test, feature = "testing"))]
impl Policy {
    /// Check the policy's invariants against the slabs (tests and fuzzing):
    /// GD-Wheel's wheels, SIEVE's queues, and the per-class live cost gauges.
    pub fn validate(&self, slabs: &Slabs) {
        match &self.chosen {
            Chosen::GdWheel(w) => w.validate(slabs),
            Chosen::Sieve(v) => v.validate(slabs),
            Chosen::Clock(_) => {}
        }
        for (class, &sum) in self.live_cost.iter().enumerate() {
            let mut want = 0u64;
            for &p in &slabs.classes[class].pages {
                for loc in slabs.live_in_page(p) {
                    want += self.cost_of(slabs.chunk(loc)) as u64;
                }
            }
            assert_eq!(sum, want, "live cost of class {class}");
        }
    }
}
