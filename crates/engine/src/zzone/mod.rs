//! The Z-zone: items evicted from the N-zone (the slab engine), packed by
//! key hash into blocks and compressed as a whole (zExpander,
//! `../shared/seeds/000_*`; issue 11).
//!
//! - [`crate::block`]: a block's uncompressed form: items sorted by key
//!   hash, with an offset index (§3.2); shared with the flash tier.
//! - [`filter`]: the content and access Bloom filters (§3.2).
//! - [`trie`]: the hashed binary trie of blocks, reached through two-level
//!   pointer segments (§3.1).
//! - [`log`]: the 1 MB pages the compressed blocks are appended to.
//! - [`stage`]: demoted items waiting for their block's rewrite, and
//!   [`flush`], the rewrite in three steps that compress outside the lock.
//! - `large`: items over half a block stored apart, compressed alone and
//!   named from their block by a stub (§3.1, footnote 3).
//! - [`export`]: the live items copied out a few blocks at a time, in
//!   hash order (warm restart, `lru_crawler metadump`); `refill`: a warm
//!   restart's items put back in bulk, each block built once ([`Refill`]).
//! - `zone`: [`Zone`], its state, budget and demotions; `read`: lookups,
//!   under the lock and outside it ([`Copied`]); `sweep`: the replacement
//!   sweep, compaction and shrinking; `dict`: zstd dictionaries; `desc`:
//!   the block descriptor; `config` and `stats`: settings and counters;
//!   `cell`: the zone behind its lock ([`ZoneCell`]); [`regret`]: the
//!   keys its sweep evicted lately, which tell the split what a smaller
//!   zone would cost.
//!
//! [`Zone`] puts them together: a lookup goes from the key hash to its
//! leaf, answers from the content filter when it can, else decompresses
//! the block; a demotion rewrites the key's block with the item added
//! (splitting it when it outgrows its capacity); a removal is deferred
//! (§3.3.2): it is noted by key hash and done when the block is next
//! rewritten, by a demotion or by the replacement sweep (§3.2), which
//! evicts the cheaper half of each block's items that were not read since
//! it last passed.
//!
//! Items keep their N-zone form (header, flags, key, value), so they move
//! between the zones with their CAS, expiry, flags and cost unchanged.
//! Codecs and the compressibility test are in [`crate::codec`].

mod apart;
mod cell;
pub(crate) mod config;
mod desc;
mod dict;
pub mod export;
pub mod filter;
pub mod flush;
mod frames;
mod large;
pub mod log;
mod read;
mod refill;
pub mod regret;
pub mod split;
pub mod stage;
mod stats;
mod sweep;
pub mod trie;
mod zone;

pub use cell::{ZoneCell, ZoneGuard};
#[cfg(test)]
pub(crate) use config::PROBE_STAGE;
pub use config::{ZoneConfig, DICT_BYTES, RETRAIN_DEMOTIONS, SAMPLES, SAMPLE_EVERY, WORTH_RATIO};
pub use large::{PackedCopy, Stub};
pub use read::{Copied, Known};
pub use refill::Refill;
pub use stats::ZoneStats;
pub use sweep::WriterStep;
pub use zone::Zone;
