//! What the zone keeps of each block outside the block itself: its
//! descriptor (§3.2: where its bytes are, its filters, its last read);
//! and an entry of a block being rebuilt, by a flush or the sweep.

use super::filter::{Access, Content};
use crate::block;

/// A block: where its bytes are, how to decode them, its filters and its
/// most recent read (§3.3.2).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Desc {
    /// Log location ([`NOWHERE`] for an empty block).
    pub(super) loc: u32,
    /// Stored and decoded lengths (a block decodes to at most
    /// [`MAX_RAW`] bytes).
    pub(super) stored: u16,
    pub(super) raw: u16,
    pub(super) count: u16,
    /// The code byte of its frames: the base's codec and the deltas
    /// after it (`super::frames`).
    pub(super) codec: u8,
    /// The dictionary it was compressed with (0: none).
    pub(super) dict: u8,
    /// The last read of an item in the block: 16 bits of the key's hash,
    /// and the time in [`REUSE_TICK`]s of demotions (wrapping; 0 marks no
    /// read). One record is enough: with two, YCSB-B promoted 1.7 times
    /// as many items for the same hit ratio (docs/benchmarks-history.md).
    pub(super) reuse: (u16, u16),
    pub(super) content: Content,
    pub(super) access: Access,
}

/// Demotions per tick of a reuse record's clock: it wraps after 2^22
/// demotions, past any N-zone's item count (the benchmark reuse times
/// are compared with) that fits in `-m`.
pub(super) const REUSE_TICK: u32 = 64;
const _: () = assert!(std::mem::size_of::<Desc>() == 96);

impl Desc {
    /// Where its stored bytes are and what decodes them, as
    /// `Zone::copy_packed` and `Zone::decode_packed` take them.
    pub(super) fn stored_at(&self) -> (u32, usize, u8, u8, usize) {
        (
            self.loc,
            self.stored as usize,
            self.codec,
            self.dict,
            self.raw as usize,
        )
    }
}

/// The most a block decodes to (its length is 16 bits in the descriptor);
/// blocks split before they grow past it, and items over half of it are
/// not demoted.
pub(super) const MAX_RAW: usize = u16::MAX as usize;

/// An entry being rebuilt: key hash and its place in `Zone::work`.
#[derive(Clone, Copy)]
pub(super) struct Entry {
    pub(super) h: u64,
    pub(super) at: u32,
    pub(super) len: u32,
}

/// The image of entry `e` in `work`.
#[inline]
pub(super) fn entry(work: &[u8], e: Entry) -> &[u8] {
    &work[e.at as usize..(e.at + e.len) as usize]
}

/// Decoded size of a block of `entries`.
pub(super) fn block_len(entries: &[Entry]) -> usize {
    block::encoded_len(
        entries.len(),
        entries.iter().map(|e| e.len as usize).sum::<usize>(),
    )
}
