//! The flash tier (SlimCache, issue 12): items that leave memory are
//! packed into compressed, checksummed containers, written in whole 1 MB
//! slabs to a file, and found again through a DRAM index of 8 bytes an
//! item.
//!
//! ```text
//! N-zone victim ──admit──▶ stage ──writer──▶ containers ──▶ slab buffer ──write──▶ file
//!                             ▲                                               │
//! GET miss ──▶ stage ─────────┘ (newest copies)                               │
//!          └─▶ index (tag → slab, container) ──read, check, decode, key?──────┘
//! ```
//!
//! - [`stage`]: items wait there, found by lookups, until their slab is
//!   written and indexed.
//! - [`container`]: SlimCache §3.3's compression unit, a block
//!   ([`crate::block`], the Z-zone's format) under a CRC-32, about one
//!   flash page once compressed. Values that will not compress are
//!   recognised by their entropy and stored raw (§3.7,
//!   `codec::Recognizer`).
//! - [`log`]: the slabs and their DRAM table; `writer`: packing,
//!   appending, sealing, with its buffers and the slabs being filled in
//!   `dram`; `gc`: the two-stage garbage collector; [`recover`]: restarts,
//!   with the tombstone [`journal`].
//! - [`dump`]: the tier's items for `lru_crawler metadump`, a few
//!   containers at a time, then the stage.
//! - [`index`]: tags and locations, no keys; the key is checked after the
//!   read.
//! - `tier`: [`Flash`] itself (admission, removals, the DRAM budget);
//!   `read`: lookups and reads; [`config`], `counters` and `stats`:
//!   settings, counters and what `stats flash` reports; [`split`]: the
//!   hot area's share; [`dict`]: the containers' zstd dictionary.
//! - Hot and cold areas (§3.4): new items go to cold slabs, compressed;
//!   an item read while on a cold slab is moved to a hot slab (raw) when
//!   the garbage collector recycles its slab, not at once (§3.6: moving it
//!   at once would leave its old copy wasting space until then); an item
//!   of a hot slab that was read again stays hot, and goes cold otherwise.
//! - Two-stage garbage collection (§3.6): with fewer than `w_start` free
//!   slabs, the oldest slab is dropped whole (space-based eviction);
//!   otherwise, below `w_high`, it is read and its re-read items moved
//!   (locality-based recycling).
//!
//! Nothing here holds a lock across I/O: the writer reads and writes slabs
//! holding only its own state, lookups copy a container's place out of the
//! slab table and read without any lock, and every read is checked
//! (checksum, lengths, the block's walk, the key) before anything in it is
//! served: a fault is a miss.

pub mod config;
pub mod container;
mod counters;
pub mod device;
pub mod dict;
mod dram;
pub mod dump;
pub mod fetch;
mod gc;
pub mod index;
pub mod journal;
pub mod log;
mod read;
pub mod recover;
pub mod split;
pub mod stage;
mod stats;
mod tier;
mod writer;

pub use config::FlashConfig;
pub use container::FLASH_PAGE;
pub use journal::Recovery;
pub use read::{Cursor, DeviceRead, Probe, Read, Step};
pub use stats::FlashStats;
pub use tier::Flash;
