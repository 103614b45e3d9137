//! Lookups: under the zone's lock ([`Zone::get`]), or in two halves, the
//! block copied under it ([`Zone::copy_block`]) and decoded without it
//! ([`Copied::find`]), so that a GET decompresses no block holding a
//! lock the writer or other readers wait for. A read also records what
//! the sweep and the promotion decision need (§3.3.2). An item stored
//! apart (`super::large`) is found as a stub: its record is then read
//! too, under the lock here, or copied under it and decoded without it.

use std::sync::Arc;

use super::desc::REUSE_TICK;
use super::frames;
use super::large::{stub_of, PackedCopy, Stub};
use super::zone::Zone;
use crate::block;
use crate::codec::Coder;
use crate::item;

/// A block copied out of the zone to be decoded without its lock
/// ([`Zone::copy_block`]).
#[derive(Default)]
pub struct Copied {
    /// The block's stored bytes.
    pub(super) block: PackedCopy,
    /// Or a staged item's image (shared with the stage: not copied).
    pub(super) staged: Option<Arc<[u8]>>,
    /// The record of a stub found, copied by `fetch` ([`Copied::find`]),
    /// and the stub, once its record decoded.
    record: PackedCopy,
    stub: Option<Stub>,
}

impl Copied {
    /// Decode the block into `raw` with `coder`, and find `key` (hash `h`)
    /// in it. None if it is not there, or the bytes do not decode. A stub
    /// found names a record stored apart: `fetch` copies it (under the
    /// zone's lock: [`Zone::copy_record`]; false if it is gone), and it
    /// is decoded into `raw` here, without the lock.
    pub fn find<'a>(
        &mut self,
        coder: &mut Coder,
        raw: &'a mut Vec<u8>,
        h: u64,
        key: &[u8],
        fetch: impl FnOnce(Stub, &mut PackedCopy) -> bool,
    ) -> Option<&'a [u8]> {
        self.stub = None;
        let stub = match &self.staged {
            Some(image) => {
                if item::key(image) != key {
                    return None;
                }
                match stub_of(image) {
                    Some(s) => s,
                    None => {
                        raw.clear();
                        raw.extend_from_slice(image);
                        return Some(raw);
                    }
                }
            }
            None => {
                // Where the item is, so that `raw` is free again for a
                // stub's record.
                let at = self.block.find(coder, raw, h, key)?;
                match stub_of(&raw[at.clone()]) {
                    Some(s) => s,
                    None => return Some(&raw[at]),
                }
            }
        };
        if !fetch(stub, &mut self.record) {
            return None;
        }
        let found = self.record.decode(coder, raw, stub, key)?;
        self.stub = Some(stub);
        Some(found)
    }

    /// What the last [`Copied::find`] decoded, for the promotion that may
    /// follow ([`Zone::get_known`]): `image`, the item it found, and the
    /// record's stub if the item was stored apart, else the block's bytes
    /// it decoded.
    pub fn known<'a>(&'a self, image: &'a [u8]) -> Known<'a> {
        match self.stub {
            Some(stub) => Known::Record(stub, image),
            None => Known::Block(&self.block, image),
        }
    }

    /// Give back a record's copy over [`KEEP`] bytes (and `raw`, the
    /// decoded item), so that each thread that read a large item does not
    /// hold up to `-I` twice outside `-m` until its next read.
    pub fn trim(&mut self, raw: &mut Vec<u8>) {
        self.record.trim(KEEP);
        if raw.capacity() > KEEP {
            *raw = Vec::new();
        }
    }
}

/// An item a read decoded without the zone's lock, and what it decoded it
/// from ([`Copied::known`]).
#[derive(Clone, Copy)]
pub enum Known<'a> {
    /// From the record of this stub.
    Record(Stub, &'a [u8]),
    /// From this copy of its block's stored bytes (empty for a staged
    /// item: the stage is looked at first, under the lock).
    Block(&'a PackedCopy, &'a [u8]),
}

/// Scratch a reader keeps between reads: a block's worth and more.
const KEEP: usize = 256 << 10;

/// How a lookup under the lock gets the item: decoded there, taken from
/// what a read decoded without the lock, or (for a stub) its header alone.
#[derive(Clone, Copy)]
enum Resolve<'a> {
    /// Decode its block, or its record if it is a stub.
    Decode,
    /// Take the image a read decoded without the lock, if what it decoded
    /// (a record, or a block's bytes) is still the item's.
    Known(Known<'a>),
    /// Keep the stub: its header is all the caller reads.
    Header,
}

impl Zone {
    /// Copy the stored bytes `(loc, len, codec, dictionary slot, decoded
    /// length)` of a block or a record to `out`, with what decodes them.
    /// False if their dictionary is gone.
    pub(super) fn copy_packed(
        &mut self,
        (loc, len, codec, dict, raw): (u32, usize, u8, u8, usize),
        out: &mut PackedCopy,
    ) -> bool {
        out.dict = match dict {
            0 => None,
            i => match self.dict_arc(i) {
                Some(d) => Some(d),
                None => return false,
            },
        };
        self.stats.decompressions += 1;
        out.bytes.clear();
        out.bytes.extend_from_slice(self.log.read(loc, len));
        out.code = codec;
        out.raw_len = raw;
        true
    }

    /// Decode the stored bytes `(loc, len, codec, dictionary slot, decoded
    /// length)` into `out`, under the lock; false if they do not.
    pub(super) fn decode_packed(
        &mut self,
        (loc, len, codec, dict, raw): (u32, usize, u8, u8, usize),
        out: &mut Vec<u8>,
    ) -> bool {
        self.stats.decompressions += 1;
        let src = self.log.read(loc, len);
        let dictionary = self
            .dicts
            .get(dict as usize)
            .and_then(|x| x.as_ref())
            .map(|x| &*x.0);
        (dict == 0 || dictionary.is_some())
            && frames::decompress(&mut self.coder, codec, dictionary, src, raw, out).is_ok()
    }

    /// Decode block `id` into `raw`. False (and the block emptied, its
    /// items counted lost) if it does not decode.
    pub(super) fn load(&mut self, id: u32) -> bool {
        let d = self.descs[id as usize];
        self.raw.clear();
        if d.count == 0 {
            return true;
        }
        let mut raw = std::mem::take(&mut self.raw);
        let ok = self.decode_packed(d.stored_at(), &mut raw)
            && block::entries(&raw).is_ok_and(|mut e| e.all(|x| x.is_ok()));
        self.raw = raw;
        if !ok {
            debug_assert!(false, "Z-zone block {id} does not decode");
            self.stats.corrupt += 1;
            self.raw.clear();
        }
        ok
    }

    /// Find `key` (hash `h`) in block `id`, its frames decoded into `raw`
    /// newest first (`super::frames::find`): its place there. Err (the
    /// block counted corrupt) if a frame does not decode.
    fn find_in(
        &mut self,
        id: u32,
        h: u64,
        key: &[u8],
    ) -> Result<Option<std::ops::Range<usize>>, ()> {
        if self.descs[id as usize].count == 0 {
            return Ok(None);
        }
        let (loc, len, code, dict, raw_len) = self.descs[id as usize].stored_at();
        self.stats.decompressions += 1;
        let dictionary = match dict {
            0 => None,
            i => Some(self.dict_arc(i).ok_or(())?),
        };
        let src = self.log.read(loc, len);
        let r = frames::find(
            &mut self.coder,
            code,
            dictionary.as_deref(),
            src,
            raw_len,
            h,
            key,
            &mut self.raw,
        );
        if r.is_err() {
            debug_assert!(false, "Z-zone block {id} does not decode");
            self.stats.corrupt += 1;
            self.raw.clear();
        }
        r
    }

    /// Look `key` up. On a hit the item's image is in [`Zone::found`] and
    /// the answer says whether to promote it: its reuse time (since the
    /// last read of its key in this block) is below `bench`, the N-zone's
    /// locality benchmark (§3.3.2). Time here is counted in demotions: an
    /// item read again within fewer demotions than the N-zone holds items
    /// would still be there had it been promoted (that is what zExpander's
    /// marker items measure, in seconds; counting evictions needs no
    /// markers and has no clock granularity). `read`: a client read
    /// (recorded in the access filter and reuse record), else a peek.
    pub fn get(&mut self, h: u64, key: &[u8], now: u32, bench: u32, read: bool) -> Option<bool> {
        self.lookup(h, key, now, bench, read, Resolve::Decode)
    }

    /// [`Zone::get`] as a peek, for the promotion that follows a read
    /// without the lock: if the key's entry is still the stub that read
    /// resolved, or its block's stored bytes are still the ones the read
    /// decoded, its image is `known`'s, so that nothing is decoded again
    /// under the lock. A block rewritten since is not decoded either: the
    /// item is not found (and not promoted).
    pub fn get_known(&mut self, h: u64, key: &[u8], now: u32, known: Known<'_>) -> Option<bool> {
        self.lookup(h, key, now, 0, false, Resolve::Known(known))
    }

    /// Whether `copy` holds block `id`'s stored bytes as they are, with
    /// the same code and dictionary: then it decodes to the same items.
    fn is_copy_of(&self, id: u32, copy: &PackedCopy) -> bool {
        let d = &self.descs[id as usize];
        let same_dict = match (&copy.dict, d.dict) {
            (None, 0) => true,
            (Some(a), i) if i != 0 => self.dict_arc(i).is_some_and(|b| Arc::ptr_eq(a, &b)),
            _ => false,
        };
        d.count > 0
            && !copy.bytes.is_empty()
            && d.codec == copy.code
            && d.raw as usize == copy.raw_len
            && same_dict
            && self.log.read(d.loc, d.stored as usize) == &copy.bytes[..]
    }

    /// The CAS of the live item of `key` (hash `h`), if the zone holds it
    /// (a peek): an item stored apart is not decoded for it, its stub has
    /// its header (a DELETE's check).
    pub fn cas_of(&mut self, h: u64, key: &[u8], now: u32) -> Option<u64> {
        self.lookup(h, key, now, 0, false, Resolve::Header)?;
        Some(item::Header::read(&self.found).cas)
    }

    /// The entry in [`Zone::found`] is the stub `stub`: put the item there
    /// as `how` says. False if its record is gone.
    fn resolve(&mut self, stub: Stub, key: &[u8], how: Resolve<'_>) -> bool {
        match how {
            Resolve::Header => self.records.named(stub).is_some(),
            Resolve::Known(Known::Record(s, image)) if s == stub => {
                self.found.clear();
                self.found.extend_from_slice(image);
                true
            }
            _ => {
                let mut found = std::mem::take(&mut self.found);
                let ok = self.read_record(stub, key, &mut found);
                self.found = found;
                ok
            }
        }
    }

    fn lookup(
        &mut self,
        h: u64,
        key: &[u8],
        now: u32,
        bench: u32,
        read: bool,
        how: Resolve<'_>,
    ) -> Option<bool> {
        let (_, id) = self.trie.leaf_of(h);
        self.found.clear();
        // A staged copy is the newest.
        if let Some(image) = self.stage.get(h, key) {
            self.found.extend_from_slice(image);
        } else {
            let d = &self.descs[id as usize];
            if !d.content.may_contain(h) || self.pending.contains_key(&h) {
                if read {
                    self.stats.filtered += 1;
                    self.note_miss(h);
                }
                return None;
            }
            if let Resolve::Known(Known::Block(copy, image)) = how {
                if !self.is_copy_of(id, copy) {
                    return None;
                }
                self.found.extend_from_slice(image);
            } else {
                match self.find_in(id, h, key) {
                    Ok(Some(at)) => self.found.extend_from_slice(&self.raw[at]),
                    Ok(None) => {
                        self.stats.false_positives += 1;
                        if read {
                            self.note_miss(h);
                        }
                        return None;
                    }
                    Err(()) => return None,
                }
            }
        }
        // Stored apart: its record (read under the lock here: the
        // engine's paths; plain GETs decode it without, `Copied::find`).
        if let Some(stub) = stub_of(&self.found) {
            if !self.resolve(stub, key, how) {
                return None;
            }
        }
        // Expired: a miss. The item goes when its block is next rewritten
        // (a read never grows the zone's memory).
        let exp = item::exptime(&self.found);
        if exp != 0 && exp <= now {
            return None;
        }
        if !read {
            return Some(false);
        }
        self.stats.hits += 1;
        Some(self.record_read(id, h, bench))
    }

    /// A client read of `h` in block `id`: the access filter, and the
    /// reuse record, which says whether to promote (see [`Zone::get`]).
    pub(super) fn record_read(&mut self, id: u32, h: u64, bench: u32) -> bool {
        // Ticks of demotions so far (wrapping; 0 marks an empty record).
        let now = ((self.stats.demotions / u64::from(REUSE_TICK)) as u16).max(1);
        let d = &mut self.descs[id as usize];
        d.access.insert(h);
        // The hash's low bits: its high ones are the trie's path, shared
        // by every item of the block.
        let sh = h as u16;
        let (last, at) = d.reuse;
        d.reuse = (sh, now);
        at != 0 && last == sh && bench > u32::from(now.wrapping_sub(at)) * REUSE_TICK
    }

    /// The first half of a read that decodes outside the zone's lock
    /// (`crate::Cache::get`): if `h`'s block may hold it, copy the block's
    /// bytes and how to decode them to `out`, note a client read (`read`)
    /// as [`Zone::get`] does, and say whether to promote the item if it is
    /// there (against [`Zone::bench`]). Then [`Copied::find`] without the
    /// lock, and [`Zone::note_read`].
    pub fn copy_block(&mut self, h: u64, read: bool, out: &mut Copied) -> Option<bool> {
        let (_, id) = self.trie.leaf_of(h);
        out.block.bytes.clear();
        out.staged = self.stage.shared(h);
        if out.staged.is_some() {
            return Some(read && self.record_read(id, h, self.bench));
        }
        let d = self.descs[id as usize];
        if !d.content.may_contain(h) || self.pending.contains_key(&h) {
            if read {
                self.stats.filtered += 1;
                self.note_miss(h);
            }
            return None;
        }
        if !self.copy_packed(d.stored_at(), &mut out.block) {
            return None;
        }
        Some(read && self.record_read(id, h, self.bench))
    }

    /// The end of a read of `h` that decoded outside the lock: whether it
    /// found the item.
    pub fn note_read(&mut self, h: u64, found: bool) {
        match found {
            true => self.stats.hits += 1,
            false => {
                self.stats.false_positives += 1;
                self.note_miss(h);
            }
        }
    }
}
