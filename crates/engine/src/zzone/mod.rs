//! The Z-zone: items evicted from the N-zone (the slab engine), packed by
//! key hash into blocks of about 2 KB and compressed as a whole
//! (zExpander, `../shared/seeds/000_*`; issue 11).
//!
//! - [`block`]: a block's uncompressed form: items sorted by key hash,
//!   with an offset index (§3.2).
//! - [`filter`]: the 16-byte content and access Bloom filters (§3.2).
//! - [`trie`]: the hashed binary trie of blocks, reached through two-level
//!   pointer segments (§3.1).
//!
//! Codecs and the compressibility test are in [`crate::codec`].

pub mod block;
pub mod filter;
pub mod trie;
