//! The eviction trait every policy implements, and what it answers with.
//!
//! The contract (in the style of foyer's pluggable eviction): the engine owns
//! the memory and the index, and tells the policy about every item's life
//! through [`Eviction`]:
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
//! victim is only chosen, not removed: the engine MUST unlink it. The caller
//! guarantees that `loc` holds a live item of `class` in every hook but
//! `relocate`'s `to` (a copy of `from`, still intact). Items go to the same
//! class under every policy. Whatever a policy allocates it reports in
//! `memory_bytes`, which the engine counts in `-m`. Every hook is O(1)
//! (amortised for GD-Wheel's victim search); the engine calls them under its
//! lock.

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

/// An eviction policy within slab classes (see the module documentation for
/// the contract).
pub trait Eviction {
    /// Which policy this is (`-o eviction=`).
    fn kind(&self) -> EvictionPolicy;

    /// Memory the policy holds outside the pages.
    fn memory_bytes(&self) -> usize;

    /// Memory the first item of `class` makes the policy allocate, so a
    /// page for a class without one can be refused in time.
    fn first_item_bytes(&self, class: usize) -> usize;

    /// A new item.
    fn link(&mut self, slabs: &mut Slabs, class: usize, loc: u64);

    /// The item leaves the cache (evicted, deleted, expired, replaced).
    fn unlink(&mut self, slabs: &mut Slabs, class: usize, loc: u64);

    /// An access that counts.
    fn touch(&mut self, slabs: &mut Slabs, class: usize, loc: u64);

    /// The chunk at `from` was copied to `to` (same class) when its page was
    /// emptied; `from` is still intact.
    fn relocate(&mut self, slabs: &mut Slabs, class: usize, from: u64, to: u64);

    /// Every item was dropped at once (`flush_all`).
    fn clear(&mut self);

    /// The chunk to take in `class` (expired items first): chosen, not
    /// removed. `protect` (an item the caller still needs) is never chosen.
    /// None when the class holds no evictable item.
    fn victim(
        &mut self,
        slabs: &mut Slabs,
        class: usize,
        now: u32,
        protect: Option<u64>,
    ) -> Option<Victim>;

    /// The next victim of `class` if the policy can name it without moving
    /// anything (for the `age` statistic); None if it cannot.
    fn peek(&self, class: usize) -> Option<u64>;

    /// What is left of a live item's cost before it becomes the victim (0 =
    /// next in line), for a policy that ranks by cost; None otherwise. A
    /// page move can keep the items with the most.
    fn credit(&self, slabs: &Slabs, class: usize, loc: u64) -> Option<u64>;
}
