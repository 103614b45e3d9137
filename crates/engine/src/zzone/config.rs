//! The Z-zone's settings, and the constants that tune it (with the
//! measurements that chose them).

use crate::codec::Codec;

/// Share of the zone's pages that live blocks may fill before the sweep
/// evicts: the rest is garbage for compaction to reclaim, so compacting a
/// page always gains at least a twentieth of it. (0.9 kept 5% fewer items
/// for the same CPU: docs/benchmarks-history.md.)
pub(super) const FILL: f64 = 0.95;
/// Share of its pages the zone's live bytes (with what is staged) reach
/// before it asks for another page: below it the writer compacts rather
/// than grows, and the gap to [`FILL`] is room for the demotions that
/// come while the N-zone drains the page it asked for.
pub(super) const GROW: f64 = 0.85;
/// Blocks compressed less than this hold no more items than the N-zone
/// would in the same pages: the zone keeps a twentieth of its pages free for
/// compaction, and its stage and metadata count in `-m` too.
pub const WORTH_RATIO: f64 = 1.25;
/// A zone whose blocks do not compress holds no page: pages of blocks
/// compressed less than [`WORTH_RATIO`] hold fewer items than the N-zone
/// would, and at a small `-m` even two such pages cost hits (+0.016 of
/// miss ratio on YCSB-B's random values at `-m 8`, `benches/zone-split.sh`).
/// It goes on measuring: it takes one demotion in [`PROBE_EVERY`] (the rest
/// are evicted as without a zone), stages at most [`PROBE_STAGE`] bytes,
/// and its writer compresses them into blocks that count in the ratio and
/// then, finding no page, are dropped.
pub(super) const PROBE_EVERY: u64 = 16;
pub(crate) const PROBE_STAGE: usize = 8 << 10;
/// The ratio that judges the zone (`zone::Held`) is taken over this many
/// blocks' worth of what it wrote lately, and not before it wrote
/// [`JUDGE_BLOCKS`]' worth.
pub(super) const HELD_BLOCKS: u32 = 64;
pub(super) const JUDGE_BLOCKS: u32 = 8;
/// Once below [`WORTH_RATIO`], the running ratio must climb back to this
/// before the zone grows again, so that values compressing about 1.25 ×
/// do not move the zone's share of `-m` back and forth.
pub(super) const WORTH_AGAIN: f64 = 1.3;

/// Unforced sweeps a demotion may run to make room before it evicts
/// regardless of the access filters, and the bound on both together.
pub(super) const GENTLE_SWEEPS: usize = 64;
/// Blocks a shrinking step moves off the page it empties.
pub(super) const EVACUATE_BLOCKS: usize = 32;
/// Bytes a step of the writer's compaction moves (about 5 µs of copying):
/// a page at once held the zone's lock up to 400 µs.
#[cfg(not(test))]
pub(super) const COMPACT_STEP: usize = 64 << 10;
/// The tests' pages are 64 KB: their compactions take a few steps too.
#[cfg(test)]
pub(super) const COMPACT_STEP: usize = 2 << 10;
/// Blocks' worth of room the writer keeps ahead of its flushes.
pub(super) const ROOM_BLOCKS: usize = 4;
pub(super) const MAX_SWEEPS: usize = 512;

/// A record (an item stored apart, `super::large`) takes at most
/// 1/RECORD_SHARE of a page once compressed: making room for it then needs
/// a page three quarters empty at worst, not a whole one, which a zone of
/// a few pages would sweep most of its items to find. Larger ones go down
/// the zone's pipe, or are evicted.
pub(super) const RECORD_SHARE: usize = 4;

/// Dictionaries (zstd): one demoted item in [`SAMPLE_EVERY`] is kept as a
/// training sample, up to [`SAMPLES`] of them; a dictionary of
/// [`DICT_BYTES`] is trained once they are in, and again after every
/// [`RETRAIN_DEMOTIONS`] demotions, so that it follows the data.
pub const SAMPLE_EVERY: u64 = 8;
pub const SAMPLES: usize = 2048;
/// The samples hold at most 1/[`SAMPLE_SHARE`] of `-m` (64 KB at least):
/// 2,048 samples of 1 KB items would be a quarter of `-m 8`.
pub const SAMPLE_SHARE: usize = 64;
pub const DICT_BYTES: usize = 16 << 10;
pub const RETRAIN_DEMOTIONS: u64 = 4 << 20;
/// Dictionaries alive at once (blocks name theirs in a byte; 0 is none).
pub(super) const DICT_SLOTS: usize = 255;

/// The Z-zone's settings.
#[derive(Clone, Copy, Debug)]
pub struct ZoneConfig {
    /// Bytes a block holds once compressed (zExpander: 2 KB; ours 4 KB by
    /// default, `-o zzone_block`). A block's
    /// raw capacity is this times the running compression ratio.
    pub block_bytes: usize,
    /// Flushes a block takes as deltas before one rewrites it
    /// (`super::frames`; at most `frames::MAX_DELTAS`).
    pub max_deltas: u8,
    pub codec: Codec,
    pub page_size: usize,
    /// Samples a dictionary is trained on ([`SAMPLES`]).
    pub dict_samples: usize,
    /// Bytes those samples may hold ([`SAMPLE_SHARE`]).
    pub sample_bytes: usize,
    /// Bytes demoted items may fill waiting for their blocks' rewrite
    /// ([`super::stage`]) before the demoting thread rewrites them itself.
    pub stage_bytes: usize,
    /// Bytes of the ghost of recent evictions ([`super::regret`]).
    pub ghost_bytes: usize,
    /// The largest item the zone takes (over half a block, it is stored
    /// apart: `super::large`): the engine's `-I`, at most a page, so that
    /// one staged item or one compression is never more than that.
    pub large_bytes: usize,
}
