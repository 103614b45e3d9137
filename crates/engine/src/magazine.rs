//! Per-thread chunk caches ("magazines", as in Bonwick's slab allocator
//! and jemalloc's tcache): chunks the engine hands a thread ahead of time,
//! so that a SET of a new key can place its item without the engine lock
//! (issue 10, stage B2; `crate::Cache::store`).
//!
//! A reserved chunk is no item (its LIVE bit is clear, so CLOCK's hand,
//! the reclaimer and page drains pass it by) and is on no free list: only
//! the thread whose magazine holds it writes it. The engine fills a
//! magazine under its lock ([`crate::Engine`]'s `refill`: free chunks, new
//! pages, CLOCK's victims) and takes every chunk back
//! ([`Magazines::drain_all`]) before anything that reuses chunks it cannot
//! see: a page leaving its class (drains, page moves, memory shrinking) and
//! `flush_all`.
//!
//! Each thread's magazine has a mutex of its own, on a line of its own.
//! Its thread holds it while it writes and links an item in a chunk it took
//! (so the engine cannot take the chunk back half written) and only tries
//! it, holding its key's stripe; the engine waits for it. The thread never
//! waits for anything while holding it, so there is no cycle with the
//! stripes the engine holds.

use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, MutexGuard};

use crate::stripe::MAX_READERS;

/// One thread's reserved chunks, by class.
#[derive(Default)]
pub struct Magazine {
    classes: Vec<Vec<u64>>,
}

impl Magazine {
    /// A reserved chunk of `class`.
    #[inline]
    pub fn pop(&mut self, class: usize) -> Option<u64> {
        self.classes.get_mut(class)?.pop()
    }

    pub fn push(&mut self, class: usize, loc: u64) {
        if self.classes.len() <= class {
            self.classes.resize_with(class + 1, Vec::new);
        }
        self.classes[class].push(loc);
    }

    pub fn len(&self, class: usize) -> usize {
        self.classes.get(class).map_or(0, Vec::len)
    }
}

/// Every thread's magazine, by the thread's slot (`Stripes::my_slot`).
pub struct Magazines {
    slots: Box<[CachePadded<Mutex<Magazine>>]>,
}

impl Default for Magazines {
    fn default() -> Self {
        Magazines {
            slots: (0..MAX_READERS).map(|_| CachePadded::default()).collect(),
        }
    }
}

impl Magazines {
    /// Slot `slot`'s magazine, if nobody holds it (the engine may be
    /// taking it back).
    #[inline]
    pub fn try_lock(&self, slot: usize) -> Option<MutexGuard<'_, Magazine>> {
        self.slots.get(slot)?.try_lock()
    }

    /// Slot `slot`'s magazine, waiting for its thread to finish an insert.
    pub fn lock(&self, slot: usize) -> Option<MutexGuard<'_, Magazine>> {
        Some(self.slots.get(slot)?.lock())
    }

    /// Take every reserved chunk of the first `slots` slots; `f` gets each
    /// with its class.
    pub fn drain_all(&self, slots: usize, mut f: impl FnMut(usize, u64)) {
        for m in &self.slots[..slots.min(self.slots.len())] {
            let mut m = m.lock();
            for (class, locs) in m.classes.iter_mut().enumerate() {
                for loc in locs.drain(..) {
                    f(class, loc);
                }
            }
        }
    }

    /// Every reserved chunk of the first `slots` slots, with its class
    /// (`Engine::validate`).
    #[cfg(any(test, feature = "testing"))]
    pub fn reserved(&self, slots: usize) -> Vec<(usize, u64)> {
        let mut all = Vec::new();
        for m in &self.slots[..slots.min(self.slots.len())] {
            for (class, locs) in m.lock().classes.iter().enumerate() {
                all.extend(locs.iter().map(|&loc| (class, loc)));
            }
        }
        all
    }

    /// Reserved chunks of `class` over the first `slots` slots.
    pub fn count(&self, slots: usize, class: usize) -> u64 {
        self.slots[..slots.min(self.slots.len())]
            .iter()
            .map(|m| m.lock().len(class) as u64)
            .sum()
    }
}
