//! cachalot's storage engine.
//!
//! The engine keeps items in an arena of fixed-size pages (1 MB by default) carved
//! into slab classes, finds them through a Cavast-style hash index of 64-byte
//! tagged buckets, and evicts with a per-class CLOCK. Everything it stores (items
//! and index) is counted against one memory limit (`-m`).
//!
//! Concurrency model: the engine itself is single-threaded (`&mut Engine`); the
//! server shares it through [`Cache`]: a mutex around the engine, and index
//! stripes with their own locks, so that a GET takes only its key's stripe
//! and so does a plain SET (in place, or a new key in a chunk reserved for
//! its thread: `magazine`); the rest takes the mutex (`stripe` has the lock
//! protocol). No lock is held across network I/O.
//!
//! Module map, from the bottom up: each module imports only from modules
//! below it (`scripts/layers.py` checks that no two import each other;
//! `scripts/layers.py --floors` prints the exact floors; see
//! docs/ARCHITECTURE.md).
//! 1. Foundations: [`hash`]: the key hash, the stripe a hash falls in, the
//!    prefetch hint; [`clock`]: the coarse server clock and memcached's
//!    exptime rules; [`item`]: the 16-byte item header and item layout inside
//!    a chunk; [`codec`]: block compression (zstd with trained dictionaries,
//!    LZ4) and the entropy test that skips incompressible blocks;
//!    [`durable`]: files replaced whole; [`pipe`]: how the Z-zone hands its
//!    evictions to flash, naming neither; [`holds`]: how long the locks
//!    requests need are held, by requests and by background work;
//!    [`stack`]: Mattson's LRU stack as a counting tree (item and byte
//!    distances), for the lab's exact curves and [`mrc`], the live curve
//!    of the whole cache (issue 36).
//! 2. Memory: [`arena`]: the pages' memory, optionally on transparent huge
//!    pages; [`slab`]: pages, slab classes, free chunks, page moves;
//!    [`chain`]: items larger than the largest chunk, over several chunks;
//!    `inplace`: an item's header read, and the item rewritten, under its
//!    stripe only; [`columns`]: Cavast's page columns; [`cost`]: costs
//!    learned from the gap between a GET miss and its SET.
//! 3. Index: [`index`]: the hash index (Cavast section 4.3), in
//!    [`stripe`]s, each with its lock protocol; [`magazine`]: chunks reserved
//!    per thread, for SETs of new keys without the engine lock.
//! 4. Tiers: [`block`]: the block format the Z-zone and flash tiers both
//!    store; [`zzone`]: the compressed Z-zone; [`flash`]: the flash tier.
//! 5. Policies and configuration: [`rebalance`]: which class gets the next
//!    page (memcached's automove, SAS with a ghost set, GD-Wheel's cost per
//!    byte, MRC); [`config`]: the engine's [`Config`] (memcached's flags),
//!    the policies' names, memcached's size limits; [`evict`]: eviction
//!    within a slab class, CLOCK (LRU) or GD-Wheel, behind one trait.
//! 6. `shared`: what the lock-free paths of [`cache`] read of the engine;
//!    [`api`]: the engine's vocabulary (requests, outcomes, `ItemRef`);
//!    [`stats`]: the engine's counters.
//! 7. [`engine`]: the operations (get/store/delete/arith/touch/flush),
//!    split by concern under `engine/`.
//! 8. [`cache`]: the engine shared by threads, and the GET and SET paths
//!    outside its lock; [`warm`]: warm restart.
//! - `testing` (feature `testing`): the reference model the property tests
//!   and the fuzzer check the engine against; `validate()` on every structure.

pub mod api;
#[cfg(test)]
mod api_tests;
pub mod arena;
mod batch;
pub mod block;
pub mod cache;
pub mod chain;
pub mod clock;
pub mod codec;
pub mod columns;
pub mod config;
pub mod cost;
pub mod durable;
pub mod engine;
pub mod evict;
pub mod flash;
pub mod hash;
pub mod holds;
pub mod index;
mod inplace;
pub mod item;
pub mod magazine;
pub mod mrc;
pub mod pipe;
pub mod priority;
pub mod rebalance;
mod shared;
pub mod slab;
pub mod stack;
pub mod stats;
pub mod stripe;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod warm;
pub mod zzone;

pub use api::{
    ArithOutcome, DeleteOutcome, Evicted, EvictionTap, ItemId, ItemRef, MetaItem, Store, StoreMode,
    StoreOutcome, Tier,
};
pub use cache::dump::DumpAt;
pub use cache::{Cache, EngineGuard, Footprint};
pub use clock::{Clock, Expiry, RelTime};
pub use columns::RepartitionStats;
pub use config::{
    Config, ConfigError, EvictionPolicy, RebalancePolicy, DEFAULT_PAGE_SIZE, KEY_MAX_LEN,
    VALUE_MAX_LEN,
};
pub use engine::Engine;
pub use slab::SlabClassStats;
pub use stats::EngineStats;
