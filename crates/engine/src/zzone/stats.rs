//! The Z-zone's counters (`stats zzone`).

/// The zone's counters (`stats zzone`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZoneStats {
    /// Items in blocks, less those removed but not yet dropped.
    pub items: u64,
    /// Leaf blocks.
    pub blocks: u64,
    /// Bytes of items in blocks, decoded and stored.
    pub raw_bytes: u64,
    pub stored_bytes: u64,
    pub pages: u64,
    /// Memory held: pages and metadata.
    pub memory_bytes: u64,
    /// Metadata: trie, descriptors, pending removals.
    pub metadata_bytes: u64,
    pub hits: u64,
    /// Client reads answered without decompressing (filter or pending
    /// removal): misses served at the N-zone's speed.
    pub filtered: u64,
    /// Lookups that decompressed a block and found nothing.
    pub false_positives: u64,
    pub promotions: u64,
    pub demotions: u64,
    /// Demotions the zone had no room for, or items too large for it
    /// ([`super::Zone::admits`], a record over its share of a page):
    /// evicted.
    pub refused: u64,
    /// Items stored apart from their blocks (`super::large`): held now,
    /// their stored and decoded bytes, and records written so far.
    pub large_items: u64,
    pub large_bytes: u64,
    pub large_raw_bytes: u64,
    pub large_written: u64,
    /// Items the sweep sent on to flash.
    pub spilled: u64,
    /// Demotions a zone that does not compress let go unsampled (it takes
    /// one in `PROBE_EVERY`): evicted.
    pub skipped: u64,
    /// Items the replacement sweep evicted.
    pub evictions: u64,
    /// Client reads that missed on a key the sweep evicted within its last
    /// step of memory (estimated from a sample: [`super::regret`]).
    pub ghost_hits: u64,
    pub expired: u64,
    pub splits: u64,
    /// Pairs of sibling leaves joined into one block.
    pub merges: u64,
    /// Removals waiting for their block's next rewrite.
    pub pending: u64,
    /// Demoted items waiting for theirs, and their memory.
    pub staged: u64,
    pub stage_bytes: u64,
    /// Block rewrites that packed staged items, and the items they packed.
    pub flushes: u64,
    pub flushed: u64,
    /// Of the flushes, those that appended a delta to their block rather
    /// than rewriting it (`super::frames`).
    pub deltas: u64,
    /// Blocks the writer rewrote, with nothing staged for them, to merge
    /// their deltas.
    pub frame_merges: u64,
    /// Of the flushes, those a demotion did itself, on a request's path,
    /// because the stage was full (the writer behind).
    pub sync_flushes: u64,
    /// Flushes dropped because their block or items changed while they
    /// compressed without the lock (redone later).
    pub flush_conflicts: u64,
    /// Bytes of the trie's pointer arrays and of the block descriptors.
    pub trie_bytes: u64,
    pub descriptor_bytes: u64,
    pub compactions: u64,
    pub sweeps: u64,
    /// Block writes by codec: (count, decoded bytes, stored bytes).
    pub written: [(u64, u64, u64); 3],
    pub decompressions: u64,
    /// Blocks that failed to decode (their items are lost, never misread).
    pub corrupt: u64,
    /// Dictionaries trained, alive now, and their memory.
    pub dictionaries_trained: u64,
    pub dictionaries: u64,
    pub dictionary_bytes: u64,
}
