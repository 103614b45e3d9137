//! Index stripes and the engine's lock protocol (issue 10).
//!
//! The index is split into stripes, each behind its own mutex, chosen by a
//! remix of the key's hash (the index itself uses the hash's top bits for
//! the bucket). Two locks exist on the request path:
//!
//! - the **engine lock** (`crate::Cache`'s mutex around [`crate::Engine`]):
//!   slabs, eviction policy, rebalancer, page moves, counters. Every change
//!   to the cache takes it;
//! - a **stripe lock**: its part of the index and the items linked in it.
//!   A GET takes only this one ([`crate::Cache::get`]); it never takes
//!   another lock while holding it, and never holds it across I/O.
//!
//! Order: engine lock, then any number of stripe locks (only the engine
//! lock's holder ever holds two stripes, so there is no cycle). The engine
//! takes the stripe of every item whose bytes it reads whole or writes
//! (its own key's, a victim's, a drained page's items), blocking: a GET holds
//! a stripe for a lookup and a copy, never waiting for anything.
//!
//! What may touch an item's bytes:
//! - bytes written only by a holder of the engine lock **and** the item's
//!   stripe (or of the engine lock alone while the chunk is linked in no
//!   stripe): everything, except
//! - the access byte (bits: REF, FETCHED, ...) and the access time (bytes 5
//!   and 13), which a GET sets under its stripe alone: they are read and
//!   written atomically ([`crate::arena::Arena::atomic`]) by anyone who does
//!   not hold the stripe, and CLOCK's hand clears REF with an atomic AND
//!   without it;
//! - GD-Wheel's trailer after the item, which only the engine lock's holder
//!   touches and a GET never reads.
//!
//! So a GET under its stripe reads a consistent item (nobody else can
//! unlink, free, move or rewrite it), and the engine, holding its lock and
//! the stripe, has the item to itself. `Slabs::chunk` checks in debug builds
//! that the stripe of a live item is held (`Slabs::check_held`).

use std::sync::Arc;

use parking_lot::Mutex;

use crate::index::Index;

/// The key hash every structure uses.
#[inline]
pub fn hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

/// Stripes by default (`-o lock_stripes=`; the server asks for four per
/// worker thread). Each stripe is an index of its own, and a small index
/// costs more per item than a large one: at 1.3 M items (`-m 64`, 10-byte
/// values) one index takes 9.18 bytes per item, 16 stripes 9.26, 64 stripes
/// 9.72 and 256 stripes 10.83 (random hashes, measured with
/// `Index::memory_bytes`). Two threads rarely meet on one of 16.
pub const DEFAULT_STRIPES: usize = 16;

/// One stripe: its part of the index and what a GET counts under it.
pub struct Stripe {
    pub index: Index,
    /// GET hits per slab class (summed by `stats slabs`).
    pub get_hits: Box<[u64]>,
}

/// [`Stripes::of`] with the stripes' shift.
#[inline]
pub fn stripe_of(h: u64, shift: u32) -> usize {
    (h.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .checked_shr(shift)
        .unwrap_or(0) as usize
}

pub type StripeGuard = parking_lot::ArcMutexGuard<parking_lot::RawMutex, Stripe>;

pub struct Stripes {
    locks: Box<[Arc<Mutex<Stripe>>]>,
    /// 64 - log2(stripes); 64 for one stripe.
    shift: u32,
}

impl Stripes {
    /// `n` stripes (a power of two) for `expected_items` items in all.
    pub fn new(n: usize, expected_items: usize, nclasses: usize) -> Stripes {
        assert!(n.is_power_of_two());
        Stripes {
            locks: (0..n)
                .map(|_| {
                    Arc::new(Mutex::new(Stripe {
                        index: Index::with_capacity(expected_items / n),
                        get_hits: vec![0; nclasses].into_boxed_slice(),
                    }))
                })
                .collect(),
            shift: 64 - n.trailing_zeros(),
        }
    }

    pub fn len(&self) -> usize {
        self.locks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.locks.is_empty()
    }

    /// The stripe of key hash `h`: the top bits of a multiplicative remix,
    /// independent of the bits the index routes by.
    #[inline]
    pub fn of(&self, h: u64) -> usize {
        stripe_of(h, self.shift)
    }

    pub fn shift(&self) -> u32 {
        self.shift
    }

    #[inline]
    pub fn lock(&self, s: usize) -> parking_lot::MutexGuard<'_, Stripe> {
        self.locks[s].lock()
    }

    /// A guard the engine can keep in itself.
    #[inline]
    pub fn lock_arc(&self, s: usize) -> StripeGuard {
        self.locks[s].lock_arc()
    }
}
