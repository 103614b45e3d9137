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
//! Module map (see docs/ARCHITECTURE.md):
//! - [`arena`]: the pages' memory, optionally on transparent huge pages.
//! - [`clock`]: the coarse server clock and memcached's exptime rules.
//! - [`hash`]: the key hash, the stripe a hash falls in, the prefetch hint.
//! - [`item`]: the 16-byte item header and item layout inside a chunk.
//! - [`chain`]: items larger than the largest chunk, over several chunks.
//! - [`codec`]: block compression (zstd with trained dictionaries, LZ4)
//!   and the entropy test that skips incompressible blocks.
//! - [`config`]: the engine's [`Config`] (memcached's flags), the policies'
//!   names, memcached's size limits.
//! - [`index`]: the hash index (Cavast section 4.3), in [`stripe`]s.
//! - [`cache`]: the engine shared by threads, and the GET path outside its
//!   lock.
//! - [`slab`]: pages, slab classes, free chunks, page moves.
//! - `inplace`: an item's header read, and the item rewritten, under its
//!   stripe only.
//! - [`magazine`]: chunks reserved per thread, for SETs of new keys
//!   without the engine lock.
//! - `shared`: what the lock-free paths of [`cache`] read of the engine.
//! - [`evict`]: eviction within a slab class: CLOCK (LRU) or GD-Wheel.
//! - [`cost`]: costs learned from the gap between a GET miss and its SET.
//! - [`rebalance`]: which class gets the next page (memcached's automove,
//!   SAS with a ghost set, GD-Wheel's cost per byte).
//! - [`block`]: the block format the Z-zone and flash tiers both store.
//! - [`pipe`]: how the Z-zone hands its evictions to flash, naming neither.
//! - [`zzone`]: the compressed Z-zone's parts (trie, filters, log), and
//!   the split of memory between it and the N-zone.
//! - [`columns`]: Cavast's hot/cold page columns, for re-partitioning.
//! - [`api`]: the engine's vocabulary (requests, outcomes, item views).
//! - [`engine`]: the operations (get/store/delete/arith/touch/flush) on top.
//! - `testing` (feature `testing`): the reference model the property tests
//!   and the fuzzer check the engine against; `validate()` on every structure.

pub mod api;
pub mod arena;
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
pub mod index;
mod inplace;
pub mod item;
pub mod magazine;
pub mod pipe;
pub mod rebalance;
mod shared;
pub mod slab;
pub mod stats;
pub mod stripe;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod warm;
pub mod zzone;

pub use api::{
    ArithOutcome, DeleteOutcome, Evicted, ItemId, ItemRef, MetaItem, Store, StoreMode, StoreOutcome,
};
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
