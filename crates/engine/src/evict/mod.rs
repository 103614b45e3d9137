//! Eviction policies: which item of a slab class gives up its chunk.
//!
//! The contract (in the style of foyer's pluggable eviction): the engine owns
//! the memory and the index, and tells the policy about every item's life
//! through [`Policy`]:
//!
//! - `link` when an item is written (store, append, incr that reallocates),
//! - `touch` on every access that counts (`get`, `touch`, `gat`, a failed
//!   `add`, in-place incr/decr; not meta lookups with `u`, nor internal peeks),
//! - `unlink` when it leaves (evicted, deleted, expired, replaced, its page
//!   emptied),
//! - `relocate` when its bytes were copied to another chunk of the same class
//!   (a page move rescues it),
//! - `clear` when everything goes at once (`flush_all`),
//!
//! and asks `victim(class)` for a chunk when the class has no free one. A
//! victim is only chosen, not removed: the engine unlinks it. Items go to the
//! same class under every policy. Per-item state: CLOCK uses the header's
//! REF bit; GD-Wheel a 12-byte trailer in the chunk's slack after the item,
//! or in a per-page side array when the item fills its chunk. Whatever a
//! policy allocates it reports in [`Policy::memory_bytes`], which the engine
//! counts in `-m`.
//! Every hook is O(1) (amortised for GD-Wheel's victim search); the engine
//! calls them under its lock.
//!
//! Policies:
//! - [`clock`]: CLOCK over the chunks, the LRU approximation (`-o eviction=lru`,
//!   the default; no per-item cost beyond the 16-byte header).
//! - [`gdwheel`]: GreedyDual by recomputation cost with hierarchical cost
//!   wheels (`-o eviction=gdwheel`; GD-Wheel thesis chapters 3 and 4).
//!
//! Both also keep, per class, the sum of the costs of the live items, for the
//! `avg_cost` statistic and for cost-aware rebalancing.

pub mod clock;
pub mod gdwheel;

pub use clock::clock_victim;
pub use gdwheel::GdWheel;

use crate::config::EvictionPolicy;
use crate::item;
use crate::slab::Slabs;

/// Why a chunk was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Victim {
    /// Held an expired item.
    Expired(u64),
    /// Held a live item that the policy gives up.
    Evicted(u64),
}

/// `item::dequantize_cost` for every header byte.
pub fn cost_table() -> Box<[u32; 256]> {
    let mut t = Box::new([0u32; 256]);
    for (q, c) in t.iter_mut().enumerate() {
        *c = item::dequantize_cost(q as u8);
    }
    t
}

/// The engine's eviction policy and per-class cost gauges.
pub struct Policy {
    wheel: Option<GdWheel>,
    /// Per class: sum of the (dequantised) costs of its live items.
    live_cost: Vec<u64>,
    costs: Box<[u32; 256]>,
}

impl Policy {
    pub fn new(kind: EvictionPolicy, nclasses: usize) -> Policy {
        Policy {
            wheel: match kind {
                EvictionPolicy::Lru => None,
                EvictionPolicy::GdWheel => Some(GdWheel::new(nclasses, false)),
                EvictionPolicy::GdWheelLazy => Some(GdWheel::new(nclasses, true)),
            },
            live_cost: vec![0; nclasses],
            costs: cost_table(),
        }
    }

    pub fn kind(&self) -> EvictionPolicy {
        match &self.wheel {
            Some(w) if w.lazy() => EvictionPolicy::GdWheelLazy,
            Some(_) => EvictionPolicy::GdWheel,
            None => EvictionPolicy::Lru,
        }
    }

    /// Memory the policy holds outside the pages.
    pub fn memory_bytes(&self) -> usize {
        self.wheel.as_ref().map_or(0, GdWheel::memory_bytes) + self.live_cost.capacity() * 8
    }

    /// Memory the first item of `class` makes the policy allocate.
    pub fn first_item_bytes(&self, class: usize) -> usize {
        self.wheel.as_ref().map_or(0, |w| w.first_item_bytes(class))
    }

    /// The dequantised cost of the item in `chunk`.
    #[inline]
    pub fn cost_of(&self, chunk: &[u8]) -> u32 {
        self.costs[item::cost_code(chunk) as usize]
    }

    #[inline]
    pub fn link(&mut self, slabs: &mut Slabs, class: usize, loc: u64) {
        self.live_cost[class] += self.cost_of(slabs.chunk(loc)) as u64;
        if let Some(w) = &mut self.wheel {
            w.link(slabs, class, loc);
        }
    }

    #[inline]
    pub fn unlink(&mut self, slabs: &mut Slabs, class: usize, loc: u64) {
        let c = self.cost_of(slabs.chunk(loc)) as u64;
        self.live_cost[class] = self.live_cost[class].saturating_sub(c);
        if let Some(w) = &mut self.wheel {
            w.unlink(slabs, class, loc);
        }
    }

    /// Items linked without the engine lock (`crate::Cache::store`, CLOCK
    /// only) with costs summing to `cost`.
    pub fn add_live_cost(&mut self, class: usize, cost: u64) {
        debug_assert!(cost == 0 || self.wheel.is_none());
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
        if let Some(w) = &mut self.wheel {
            w.touch(slabs, class, loc);
        }
    }

    #[inline]
    pub fn relocate(&mut self, slabs: &mut Slabs, class: usize, from: u64, to: u64) {
        if let Some(w) = &mut self.wheel {
            w.relocate(slabs, class, from, to);
        }
    }

    pub fn clear(&mut self) {
        self.live_cost.fill(0);
        if let Some(w) = &mut self.wheel {
            w.clear();
        }
    }

    pub fn victim(
        &mut self,
        slabs: &mut Slabs,
        class: usize,
        now: u32,
        protect: Option<u64>,
    ) -> Option<Victim> {
        match &mut self.wheel {
            Some(w) => w.victim(slabs, class, now, protect),
            None => clock_victim(slabs, class, now, protect),
        }
    }

    /// The next victim of `class` if the policy can name it without moving
    /// (GD-Wheel); None for CLOCK, whose hand position the engine reads.
    pub fn peek(&self, class: usize) -> Option<u64> {
        self.wheel.as_ref().and_then(|w| w.peek(class))
    }

    /// Sum of the costs of `class`'s live items.
    pub fn live_cost(&self, class: usize) -> u64 {
        self.live_cost.get(class).copied().unwrap_or(0)
    }

    /// GreedyDual's credit of a live item under GD-Wheel: H - L, what is
    /// left of its cost before it becomes the victim (0 = next in line).
    /// None under CLOCK. A page move can keep the items with the most.
    pub fn credit(&self, slabs: &Slabs, class: usize, loc: u64) -> Option<u64> {
        let w = self.wheel.as_ref()?;
        Some(w.priority(slabs, class, loc)?.saturating_sub(w.hand(class)))
    }

    /// GD-Wheel's state, when that is the policy.
    pub fn gdwheel(&self) -> Option<&GdWheel> {
        self.wheel.as_ref()
    }
}

#[cfg(any(test, feature = "testing"))]
impl Policy {
    /// Check the policy's invariants against the slabs (tests and fuzzing):
    /// GD-Wheel's wheels, and the per-class live cost gauges.
    pub fn validate(&self, slabs: &Slabs) {
        if let Some(w) = &self.wheel {
            w.validate(slabs);
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
