//! Items too large for a block, stored apart (zExpander §3.1, footnote 3:
//! "For KV items larger than half of a block's capacity, each of the items
//! is compressed and stored individually, and a pointer recording its
//! address is stored in the block where it is supposed to stay").
//!
//! An item over half a block's decoded capacity would split its leaf down
//! to the trie's deepest levels. It is staged whole; the writer compresses
//! it alone (the blocks' codec and dictionary; stored as it is when it
//! does not compress) into a *record* appended to the zone's log, and
//! stages in its place a *stub*: the item's header, flags and key, with a
//! 12-byte value naming the record (id, tag, decoded length) and the LIVE
//! bit clear, which no staged item has (`Stage::push` sets it). The stub
//! goes into the key's block like any small item, so filters, pending
//! removals, expiry, the sweep and promotion all see the item there.
//!
//! A record is named by its slot in [`Records`] and a tag drawn when it
//! is stored, so a stub whose record went (and whose slot was reused)
//! names nothing: a miss, never another item's bytes. Its log entry's id
//! carries [`RECORD_BIT`], so compaction and shrinking move records as
//! they move blocks; its lengths are `u32`s here (a block descriptor's are
//! 16 bits). Each record knows where its one stub is (`owner`: a block,
//! or the stage), so a block dropped without being decoded (corrupt, or
//! no room to move it) frees its records, and a record dropped alone (no
//! room to move it) makes its stub a known removal.

use std::sync::Arc;

use super::log::NOWHERE;
use crate::codec::{normalized_entropy, Codec, Coder, Dictionary, Recognizer};
use crate::item;

/// Log entries of records carry this bit in their id (block descriptors'
/// ids never reach it).
pub(super) const RECORD_BIT: u32 = 1 << 31;
/// A record's owner while its stub is staged.
pub(super) const STAGED: u32 = u32::MAX;
/// A record's owner while a flush installs the block its stub goes to.
pub(super) const MOVING: u32 = u32::MAX - 1;
/// Bytes of a stub's value: record id, tag, decoded length.
const STUB_VALUE: usize = 12;

/// What a stub names: its record, and what a read of the record checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stub {
    pub(super) id: u32,
    pub(super) tag: u32,
    /// The item's whole image length.
    pub(super) raw: u32,
    cas: u64,
    exptime: u32,
}

/// Whether the block entry or staged image `image` is a stub.
#[inline]
pub(super) fn is_stub(image: &[u8]) -> bool {
    item::bits(image) & item::LIVE == 0
}

/// The record `image` names, if it is a stub (a malformed one names none).
pub(super) fn stub_of(image: &[u8]) -> Option<Stub> {
    if !is_stub(image) {
        return None;
    }
    let p = item::parts(image);
    let word = |i: usize| {
        p.value
            .get(i * 4..i * 4 + 4)
            .and_then(|b| b.try_into().ok())
            .map_or(u32::MAX, u32::from_le_bytes)
    };
    let named = p.value.len() == STUB_VALUE;
    Some(Stub {
        id: if named { word(0) } else { u32::MAX },
        tag: word(1),
        raw: word(2),
        cas: p.header.cas,
        exptime: p.header.exptime,
    })
}

/// The stub of `image` (a whole item) for record `id` with `tag`.
pub(super) fn make_stub(image: &[u8], id: u32, tag: u32) -> Vec<u8> {
    let p = item::parts(image);
    let mut value = [0u8; STUB_VALUE];
    value[..4].copy_from_slice(&id.to_le_bytes());
    value[4..8].copy_from_slice(&tag.to_le_bytes());
    value[8..].copy_from_slice(&(image.len() as u32).to_le_bytes());
    let mut v = vec![0u8; item::total_len(p.key.len(), STUB_VALUE, p.flags)];
    let h = p.header;
    item::write(
        &mut v,
        h.cas,
        h.atime,
        h.cost,
        h.bits & !item::LIVE,
        h.exptime,
        p.flags,
        p.key,
        &[&value],
    );
    v
}

/// Whether `image`, a decoded record, is the item `stub` (of `key`) names.
pub(super) fn matches(image: &[u8], stub: Stub, key: &[u8]) -> bool {
    item::is_whole(image)
        && image.len() == stub.raw as usize
        && item::key(image) == key
        && item::bits(image) & item::LIVE != 0
        && {
            let h = item::Header::read(image);
            h.cas == stub.cas && h.exptime == stub.exptime
        }
}

/// A record: where its bytes are, how to decode them, and its stub.
#[derive(Clone, Copy, Debug)]
pub(super) struct Record {
    /// The key's hash.
    pub(super) h: u64,
    /// Log location ([`NOWHERE`]: the slot is free).
    pub(super) loc: u32,
    pub(super) stored: u32,
    pub(super) raw: u32,
    pub(super) tag: u32,
    /// The block (descriptor id) holding its stub, [`STAGED`] or
    /// [`MOVING`].
    pub(super) owner: u32,
    pub(super) codec: u8,
    /// The dictionary it was compressed with (0: none).
    pub(super) dict: u8,
}
const _: () = assert!(std::mem::size_of::<Record>() == 32);

impl Record {
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

/// The zone's records, by id (counted in the zone's metadata).
#[derive(Default)]
pub(super) struct Records {
    slots: Vec<Record>,
    free: Vec<u32>,
    tags: u32,
    live: u64,
    stored: u64,
    raw: u64,
}

impl Records {
    /// The id the next [`Records::add`] gives.
    pub(super) fn next_id(&self) -> u32 {
        self.free.last().copied().unwrap_or(self.slots.len() as u32)
    }

    /// Store `r` in a free slot with a new tag: its id and tag.
    pub(super) fn add(&mut self, mut r: Record) -> (u32, u32) {
        self.tags = self.tags.wrapping_add(1);
        r.tag = self.tags;
        self.live += 1;
        self.stored += u64::from(r.stored);
        self.raw += u64::from(r.raw);
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = r;
                id
            }
            None => {
                // Grown by a thirty-second, as the block descriptors are.
                if self.slots.len() == self.slots.capacity() {
                    self.slots.reserve_exact(self.slots.len() / 32 + 16);
                }
                self.slots.push(r);
                (self.slots.len() - 1) as u32
            }
        };
        debug_assert!(id < RECORD_BIT, "record ids stay below the log's mark");
        (id, r.tag)
    }

    /// Free record `id` (live); what it was.
    pub(super) fn take(&mut self, id: u32) -> Record {
        let r = self.slots[id as usize];
        debug_assert_ne!(r.loc, NOWHERE, "record {id} is live");
        self.slots[id as usize].loc = NOWHERE;
        self.free.push(id);
        self.live -= 1;
        self.stored -= u64::from(r.stored);
        self.raw -= u64::from(r.raw);
        r
    }

    /// Record `id` if live.
    pub(super) fn get(&self, id: u32) -> Option<&Record> {
        self.slots.get(id as usize).filter(|r| r.loc != NOWHERE)
    }

    /// The live record `stub` names.
    pub(super) fn named(&self, stub: Stub) -> Option<&Record> {
        self.get(stub.id).filter(|r| r.tag == stub.tag)
    }

    pub(super) fn set_owner(&mut self, stub: Stub, owner: u32) {
        if self.named(stub).is_some() {
            self.slots[stub.id as usize].owner = owner;
        }
    }

    /// The stored length of the record of log id `log_id` if it lives at
    /// `loc` (for the log's compaction and shrinking).
    pub(super) fn at(&self, log_id: u32, loc: u32) -> Option<usize> {
        let r = self.get(log_id & !RECORD_BIT)?;
        (r.loc == loc).then_some(r.stored as usize)
    }

    /// Record `log_id` (with [`RECORD_BIT`]) moved to `loc`.
    pub(super) fn moved(&mut self, log_id: u32, loc: u32) {
        self.slots[(log_id & !RECORD_BIT) as usize].loc = loc;
    }

    /// The live records: (id, record).
    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, &Record)> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, r)| r.loc != NOWHERE)
            .map(|(i, r)| (i as u32, r))
    }

    /// Records held, and their stored and decoded bytes.
    pub(super) fn counts(&self) -> (u64, u64, u64) {
        (self.live, self.stored, self.raw)
    }

    pub(super) fn memory_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Record>() + self.free.capacity() * 4
    }
}

/// A block's or a record's stored bytes, copied out of the zone with
/// what decodes them, to be decoded without its lock
/// ([`super::Zone::copy_block`], [`super::Zone::copy_record`]).
#[derive(Default)]
pub struct PackedCopy {
    pub(super) bytes: Vec<u8>,
    /// Its code byte (`super::frames`).
    pub(super) code: u8,
    pub(super) dict: Option<Arc<Dictionary>>,
    pub(super) raw_len: usize,
}

impl PackedCopy {
    /// Give back its bytes if over `keep` (`super::Copied::trim`).
    pub(super) fn trim(&mut self, keep: usize) {
        if self.bytes.capacity() > keep {
            self.bytes = Vec::new();
        }
    }

    /// Decode the bytes into `raw`; false if they do not decode.
    pub(super) fn decompress(&self, coder: &mut Coder, raw: &mut Vec<u8>) -> bool {
        super::frames::decompress(
            coder,
            self.code,
            self.dict.as_deref(),
            &self.bytes,
            self.raw_len,
            raw,
        )
        .is_ok()
    }

    /// Find `key` (hash `h`) in the block: its place in `raw`, where its
    /// frames were decoded (`super::frames::find`); None if not there or
    /// the bytes do not decode.
    pub(super) fn find(
        &self,
        coder: &mut Coder,
        raw: &mut Vec<u8>,
        h: u64,
        key: &[u8],
    ) -> Option<std::ops::Range<usize>> {
        super::frames::find(
            coder,
            self.code,
            self.dict.as_deref(),
            &self.bytes,
            self.raw_len,
            h,
            key,
            raw,
        )
        .ok()
        .flatten()
    }

    /// Decode the record into `raw`: the item `stub` (of `key`) names, or
    /// None if the bytes are not it.
    pub(super) fn decode<'a>(
        &self,
        coder: &mut Coder,
        raw: &'a mut Vec<u8>,
        stub: Stub,
        key: &[u8],
    ) -> Option<&'a [u8]> {
        (self.decompress(coder, raw) && matches(raw, stub, key)).then_some(&raw[..])
    }
}

/// A large staged item being stored apart: copied (shared) under the
/// zone's lock, compressed without it ([`RecordJob::run`]), stored under
/// it again unless the item was replaced or removed meanwhile
/// (`Zone::finish_record`).
pub struct RecordJob {
    pub(super) ticket: u64,
    pub(super) h: u64,
    pub(super) push: u64,
    pub(super) image: Arc<[u8]>,
    pub(super) codec: Codec,
    pub(super) dict_slot: u8,
    pub(super) dict: Option<Arc<Dictionary>>,
    pub(super) recognizer: Recognizer,
    pub(super) now: u32,
    pub(super) packed: Vec<u8>,
    pub(super) used: Codec,
    pub(super) entropy: f64,
    pub(super) tried: bool,
}

impl RecordJob {
    /// Without the zone's lock: compress the item alone, unless its
    /// entropy says it will not pay (as a block's, SlimCache §3.7) or it
    /// did not.
    pub(super) fn run(&mut self, coder: &mut Coder) {
        self.entropy = normalized_entropy(&self.image);
        self.tried = self.codec != Codec::Raw && self.recognizer.worth_trying(self.entropy);
        let dict = match self.codec {
            Codec::Zstd => self.dict.as_deref(),
            _ => None,
        };
        self.used =
            match self.tried && coder.compress(self.codec, dict, &self.image, &mut self.packed) {
                true => self.codec,
                false => {
                    self.packed = Vec::new();
                    Codec::Raw
                }
            };
    }

    /// The record's bytes.
    pub(super) fn bytes(&self) -> &[u8] {
        match self.used {
            Codec::Raw => &self.image,
            _ => &self.packed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(key: &[u8], value: &[u8], flags: u32) -> Vec<u8> {
        let mut v = vec![0u8; item::total_len(key.len(), value.len(), flags)];
        item::write(
            &mut v,
            77,
            5,
            9,
            item::LIVE | item::REF,
            1234,
            flags,
            key,
            &[value],
        );
        v
    }

    #[test]
    fn a_stub_names_its_record_and_keeps_the_header() {
        let im = image(b"big", &vec![b'x'; 100_000], 0x1_0000);
        assert!(!is_stub(&im) && stub_of(&im).is_none());
        let stub = make_stub(&im, 7, 42);
        assert!(item::is_whole(&stub) && is_stub(&stub));
        let s = stub_of(&stub).expect("a stub");
        assert_eq!((s.id, s.tag, s.raw as usize), (7, 42, im.len()));
        let (a, b) = (item::parts(&im), item::parts(&stub));
        assert_eq!((a.key, a.flags), (b.key, b.flags));
        assert_eq!(item::exptime(&im), item::exptime(&stub));
        assert_eq!(item::cost_code(&im), item::cost_code(&stub));
        assert!(matches(&im, s, b"big"));
        assert!(!matches(&im, s, b"bog"));
        let mut other = im.clone();
        item::set_cas(&mut other, 78);
        assert!(!matches(&other, s, b"big"), "another version of the key");
        // A malformed stub names no record.
        let mut bad = image(b"big", b"short", 0);
        let bits = item::bits(&bad) & !item::LIVE;
        item::set_bits(&mut bad, bits);
        assert_eq!(stub_of(&bad).map(|s| s.id), Some(u32::MAX));
    }
}
