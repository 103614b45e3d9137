//! The engine's operations: what a memcached command does to the cache.
//!
//! PUBLIC API CONTRACT (the server's protocol handlers program against this).

use std::sync::Arc;

use crate::clock::{Clock, Expiry, RelTime};
use crate::stats::{EngineStats, SlabClassStats};
use crate::{Config, ConfigError};

/// A handle to a live item, valid until the engine is next mutated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ItemId(pub(crate) u64);

/// A read-only view of an item.
#[derive(Clone, Copy, Debug)]
pub struct ItemRef<'a> {
    pub id: ItemId,
    pub key: &'a [u8],
    pub value: &'a [u8],
    /// 32-bit client flags.
    pub flags: u32,
    /// CAS unique (0 when CAS is disabled with `-C`).
    pub cas: u64,
    pub expiry: Expiry,
    /// The item's recomputation cost (dequantised; 1 when the client sent none).
    pub cost: u32,
    /// The item was read at least once since it was stored (meta `h`).
    pub fetched: bool,
    /// Marked stale by a meta invalidation (`md I`, `ms I`).
    pub stale: bool,
    /// A meta "win" token was already handed out for this item.
    pub win_sent: bool,
    /// Last access time (coarse: minute resolution, saturating after a few hours).
    pub last_access: RelTime,
}

/// How a store treats an existing item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreMode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
}

/// A store request.
#[derive(Clone, Copy, Debug)]
pub struct Store<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub flags: u32,
    pub expiry: Expiry,
    pub mode: StoreMode,
    /// Compare-and-swap: store only if the item's CAS equals this (0 = no check).
    pub cas: u64,
    /// Meta `E`: use this as the new item's CAS instead of the next counter value.
    pub new_cas: Option<u64>,
    /// Recomputation cost sent by the client (`w` meta flag / `cost=` token).
    pub cost: Option<u32>,
    /// Meta `I` on ms: if `cas` is older than the item's, store anyway but mark stale.
    pub invalidate: bool,
}

impl<'a> Store<'a> {
    /// A plain `set` with no expiry, flags, cas or cost.
    pub fn set(key: &'a [u8], value: &'a [u8]) -> Store<'a> {
        Store {
            key,
            value,
            flags: 0,
            expiry: Expiry::Never,
            mode: StoreMode::Set,
            cas: 0,
            new_cas: None,
            cost: None,
            invalidate: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOutcome {
    /// Stored; the new item's CAS.
    Stored { cas: u64 },
    /// add on an existing key, replace/append/prepend on a missing one.
    NotStored,
    /// cas mismatch.
    Exists,
    /// cas on a missing key.
    NotFound,
    /// The item exceeds `-I` (`SERVER_ERROR object too large for cache`).
    TooLarge,
    /// No memory and eviction impossible or disabled (`SERVER_ERROR out of memory storing object`).
    NoMemory,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteOutcome {
    Deleted,
    NotFound,
    /// cas given and it did not match.
    Exists,
}

/// An incr/decr request.
#[derive(Clone, Copy, Debug)]
pub struct Arith {
    pub incr: bool,
    pub delta: u64,
    /// Only apply if the item's CAS equals this (0 = no check).
    pub cas: u64,
    /// Meta `N`: create the item with `initial` and this expiry when missing.
    pub autovivify: Option<(u64, Expiry)>,
    /// Meta `T`: update the item's expiry.
    pub new_expiry: Option<Expiry>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArithOutcome {
    /// The new value and the item holding it.
    Value { value: u64, id: ItemId },
    NotFound,
    /// The stored value is not a decimal number (`CLIENT_ERROR cannot increment or decrement non-numeric value`).
    NonNumeric,
    /// cas mismatch.
    Exists,
    NoMemory,
}

/// Options for a lookup.
#[derive(Clone, Copy, Debug)]
pub struct Lookup {
    /// Count this access for eviction (meta `u` turns it off).
    pub bump: bool,
    /// Mark the item fetched (for meta `h` and the unfetched counters).
    pub fetch: bool,
}

impl Lookup {
    pub const GET: Lookup = Lookup {
        bump: true,
        fetch: true,
    };
    pub const PEEK: Lookup = Lookup {
        bump: false,
        fetch: false,
    };
}

/// Answers to `slabs reassign` (memcached's words).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReassignOutcome {
    Ok,
    Busy,
    BadClass,
    NoSpare,
    Same,
}

/// The engine. Not thread-safe by itself: see [`crate::Cache`].
pub struct Engine {
    _clock: Arc<Clock>,
}

#[allow(unused_variables)]
impl Engine {
    pub fn new(config: Config, clock: Arc<Clock>) -> Result<Engine, ConfigError> {
        todo!()
    }

    pub fn config(&self) -> &Config {
        todo!()
    }

    /// Whether an item with this key and value length fits under `-I`.
    pub fn fits(&self, key_len: usize, value_len: usize, flags: u32) -> bool {
        todo!()
    }

    /// Find a live item (expired ones are removed on the way).
    pub fn lookup(&mut self, key: &[u8], how: Lookup) -> Option<ItemRef<'_>> {
        todo!()
    }

    /// `get`: lookup that counts as an access.
    pub fn get(&mut self, key: &[u8]) -> Option<ItemRef<'_>> {
        self.lookup(key, Lookup::GET)
    }

    /// View an item found earlier (valid until the next mutation).
    pub fn item(&self, id: ItemId) -> ItemRef<'_> {
        todo!()
    }

    pub fn store(&mut self, req: &Store<'_>) -> StoreOutcome {
        todo!()
    }

    pub fn delete(&mut self, key: &[u8], cas: u64) -> DeleteOutcome {
        todo!()
    }

    /// Change an item's expiry (touch/gat); returns the item if it exists.
    pub fn touch(&mut self, key: &[u8], expiry: Expiry) -> Option<ItemRef<'_>> {
        todo!()
    }

    pub fn arith(&mut self, key: &[u8], req: &Arith) -> ArithOutcome {
        todo!()
    }

    /// Meta helpers: change bits on a live item.
    pub fn set_expiry(&mut self, id: ItemId, expiry: Expiry) {
        todo!()
    }
    pub fn set_stale(&mut self, id: ItemId, stale: bool) {
        todo!()
    }
    pub fn set_win_sent(&mut self, id: ItemId, sent: bool) {
        todo!()
    }
    /// Meta `md I`: mark stale, give a new CAS, optionally a new expiry.
    pub fn invalidate(&mut self, id: ItemId, expiry: Option<Expiry>) {
        todo!()
    }

    /// `flush_all [delay]`: drop everything now, or when the clock reaches `at`.
    pub fn flush_all(&mut self, at: Option<RelTime>) {
        todo!()
    }

    /// Background work: pending delayed flush, reclaiming expired items (at most
    /// `budget` chunks visited), automove. Returns chunks visited.
    pub fn maintain(&mut self, budget: usize) -> usize {
        todo!()
    }

    pub fn slabs_reassign(&mut self, src: i32, dst: i32) -> ReassignOutcome {
        todo!()
    }
    pub fn set_automove(&mut self, mode: u8) {
        todo!()
    }
    /// `cache_memlimit`: change `-m` at run time. Shrinking frees pages.
    pub fn set_memory_limit(&mut self, bytes: usize) -> Result<(), ConfigError> {
        todo!()
    }

    pub fn stats(&self) -> EngineStats {
        todo!()
    }
    /// One entry per slab class that has ever held a page.
    pub fn slab_stats(&self) -> Vec<SlabClassStats> {
        todo!()
    }
    /// `stats sizes`: (size rounded up to 32 bytes, item count), ascending.
    pub fn size_histogram(&self) -> Vec<(u32, u64)> {
        todo!()
    }
    /// `stats reset`: clear the resettable counters.
    pub fn reset_stats(&mut self) {
        todo!()
    }
}
