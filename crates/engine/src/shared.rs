//! The lock-free readers' view of the engine: the arena, the index stripes
//! and the settings a GET or a SET without the engine lock needs
//! (`crate::cache`), built by `Engine::shared`, with the lookups they make
//! under their key's stripe. Below the engine, so that the engine builds it
//! without importing the cache on top.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use crate::arena::Arena;
use crate::flash::Flash;
use crate::inplace::{read_head, Head};
use crate::magazine::Magazines;
use crate::rebalance::HitGate;
use crate::stripe::{Stripe, Stripes};
use crate::zzone::ZoneCell;

/// What the GET path shares with the engine (`Engine::shared`).
pub(crate) struct Shared {
    pub arena: Arc<Arena>,
    pub stripes: Arc<Stripes>,
    pub chunk_bits: u32,
    /// A pending delayed flush's time (0: none).
    pub flush_at: Arc<CachePadded<AtomicU32>>,
    pub gate: HitGate,
    /// Every hit needs the engine (eager GD-Wheel re-queues the item).
    pub locked_hits: bool,
    /// Learned costs: misses and hits of guessed items need the engine.
    pub learner: bool,
    pub cas_enabled: bool,
    /// SETs may rewrite their item in place without the engine lock
    /// (CLOCK, no learned costs: nothing else to update).
    pub rewrites: bool,
    /// The MRC profile's published sampling threshold, if it profiles: a
    /// SET of a sampled key goes to the engine.
    pub store_gate: Option<Arc<AtomicU64>>,
    /// Chunk size of each class.
    pub class_sizes: Box<[u32]>,
    pub cas_counter: Arc<CachePadded<AtomicU64>>,
    /// SETs of new keys may place their items in chunks reserved for
    /// their thread (`magazine`) without the engine lock.
    pub inserts: bool,
    pub magazines: Arc<Magazines>,
    /// Index growth of those inserts, for the engine to count in `-m`.
    pub index_grown: Arc<CachePadded<AtomicUsize>>,
    /// The Z-zone, if on: a GET that misses the N-zone reads it.
    pub zone: Option<Arc<ZoneCell>>,
    /// The flash tier, if on: a GET that misses memory looks there.
    pub flash: Option<Arc<Flash>>,
}

impl Shared {
    #[inline]
    pub(crate) fn head(&self, loc: u64) -> Option<Head> {
        read_head(&self.arena, self.chunk_bits, loc)
    }

    /// The item of `key` (hash `h`) in `stripe`, which the caller holds
    /// (reading or writing), with its header: the one read to compare the
    /// key, so it is read once.
    #[inline]
    pub(crate) fn find(&self, stripe: &Stripe, h: u64, key: &[u8]) -> Option<(u64, Head)> {
        let mut matched = None;
        let loc = stripe.index.find(h, |loc| match self.head(loc) {
            Some(head) if self.key_of(&head) == key => {
                matched = Some(head);
                true
            }
            _ => false,
        })?;
        Some((loc, matched?))
    }

    /// A delayed flush is due: the engine must do it before anything is
    /// read or written.
    #[inline]
    pub(crate) fn flush_due(&self, now: u32) -> bool {
        let flush = self.flush_at.load(Ordering::Acquire);
        flush != 0 && flush <= now
    }

    /// `len` bytes of the item of `head` from `at` (key or value).
    #[inline]
    pub(crate) fn item_bytes(&self, head: &Head, at: usize, len: usize) -> &[u8] {
        // SAFETY: as in `read_head`: key and value bytes of a linked item are
        // written by no one while its stripe is held.
        unsafe { self.arena.bytes(head.page, head.start + at, len) }
    }

    #[inline]
    pub(crate) fn key_of(&self, head: &Head) -> &[u8] {
        self.item_bytes(head, head.key_at, head.header.key_len as usize)
    }
}
