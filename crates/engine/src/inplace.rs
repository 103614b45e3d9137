//! Items read and rewritten in place, under their stripe only: the header a
//! GET reads without the engine lock ([`read_head`]) and the SET that
//! overwrites an item in its chunk ([`rewrite`], issue 10). Byte-level code
//! over the arena, below the index and the engine; the lock protocol that
//! makes it safe is in `stripe`. Its functions are `#[inline]`: they sit
//! on the GET and SET paths of `crate::cache`, in another codegen unit.

use std::sync::atomic::Ordering;

use crate::arena::Arena;
use crate::item;
use crate::slab::split_loc;

/// An item's header as a GET under its stripe reads it: `buf` holds the
/// 16 header bytes, the long length and the client flags.
pub(crate) struct Head {
    pub(crate) page: u32,
    pub(crate) start: usize,
    pub(crate) class: usize,
    pub(crate) chunk_size: usize,
    pub(crate) buf: [u8; 24],
    pub(crate) header: item::Header,
    /// Where the key starts in the chunk.
    pub(crate) key_at: usize,
}

/// Read the header of the item at `loc`, which the caller's hold on its
/// stripe (reading or writing) keeps linked: nobody writes these bytes
/// meanwhile but GETs, atomically, into the access byte and time (read so).
#[inline]
pub(crate) fn read_head(arena: &Arena, chunk_bits: u32, loc: u64) -> Option<Head> {
    let (page, chunk) = split_loc(loc, chunk_bits);
    let (class, cs) = arena.geometry(page)?;
    let start = chunk as usize * cs as usize;
    let mut buf = [0u8; 24];
    // SAFETY: the item is linked in the stripe we hold, so no writer
    // touches it (writers acquire the stripe first), and readers write
    // only bytes 5, 7 and 13, atomically: read so below.
    unsafe {
        buf[..5].copy_from_slice(arena.bytes(page, start, 5));
        buf[6] = arena.bytes(page, start + 6, 1)[0];
        buf[8..13].copy_from_slice(arena.bytes(page, start + 8, 5));
        buf[14..16].copy_from_slice(arena.bytes(page, start + 14, 2));
    }
    for b in [5, 7, 13] {
        buf[b] = arena.atomic(page, start + b).load(Ordering::Relaxed);
    }
    let long = u16::from_le_bytes([buf[14], buf[15]]) == item::LONG_VALUE as u16;
    let extra = if long { 4 } else { 0 } + item::code_width(buf[7]);
    // SAFETY: as above; these bytes follow the header inside the item.
    unsafe {
        buf[16..16 + extra].copy_from_slice(arena.bytes(page, start + 16, extra));
    }
    let header = item::Header::read(&buf);
    Some(Head {
        page,
        start,
        class,
        chunk_size: cs as usize,
        key_at: header.body_start() + header.flags_width(),
        buf,
        header,
    })
}

/// What a SET that replaces its item in place writes ([`rewrite`]).
pub(crate) struct Rewrite<'a> {
    pub value: &'a [u8],
    pub flags: u32,
    pub exptime: u32,
    /// Quantised cost.
    pub cost: u8,
}

impl Head {
    /// The new item's length if `new` may overwrite this item in its chunk
    /// (`prev_chunk`: the chunk size of the class below, 0 for the first).
    /// It must belong to the same class (memory per class stays as the
    /// allocator would have made it) and keep everything that readers
    /// without the stripe rely on: where the key is (flags width, long or
    /// short length), the cost byte, the alignment of the atomics.
    #[inline]
    pub(crate) fn rewritable(&self, new: &Rewrite<'_>, prev_chunk: usize) -> Option<usize> {
        let h = &self.header;
        let total = item::total_len(h.key_len as usize, new.value.len(), new.flags);
        let long = |n: usize| n >= item::LONG_VALUE as usize;
        (h.total_len() <= self.chunk_size
            && total <= self.chunk_size
            && total > prev_chunk
            && self.start.is_multiple_of(4)
            && h.flags_width() == item::flags_width(new.flags)
            && long(h.value_len as usize) == long(new.value.len())
            && h.cost == new.cost)
            .then_some(total)
    }
}

/// Overwrite the item of `head` with `new` and `cas`, as if a new item of
/// the same key had been stored: access time now, REF set (CLOCK gives a
/// rewritten item the second chance a freshly placed one gets from where
/// the allocator puts it, behind the hand), not fetched. The key, its
/// length and the cost byte are not written.
///
/// # Safety
/// The caller has acquired the item's stripe for writing (no reader, no
/// other writer) and `head.rewritable(new, ..)` said yes.
#[inline]
pub(crate) unsafe fn rewrite(arena: &Arena, head: &Head, new: &Rewrite<'_>, cas: u64, now: u32) {
    let (page, at) = (head.page, head.start);
    let vlen = new.value.len();
    // SAFETY: bytes 0..5 (CAS), the long length, the flags and the value
    // are read by nobody without the stripe, which the caller holds.
    unsafe {
        arena
            .bytes_mut(page, at, 5)
            .copy_from_slice(&(cas & item::CAS_MASK).to_le_bytes()[..5]);
        let body = head.header.body_start();
        if body > item::HEADER_LEN {
            arena
                .bytes_mut(page, at + item::HEADER_LEN, 4)
                .copy_from_slice(&(vlen as u32).to_le_bytes());
        }
        let fw = head.header.flags_width();
        arena
            .bytes_mut(page, at + body, fw)
            .copy_from_slice(&new.flags.to_le_bytes()[..fw]);
        arena
            .bytes_mut(page, at + head.key_at + head.header.key_len as usize, vlen)
            .copy_from_slice(new.value);
    }
    // The bytes the engine reads without the stripe, atomically.
    let [lo, hi] = item::atime_code(now).to_le_bytes();
    arena.atomic(page, at + 5).store(lo, Ordering::Relaxed);
    arena.atomic(page, at + 13).store(hi, Ordering::Relaxed);
    arena.store_u32(page, at + 8, new.exptime);
    arena.store_u16(page, at + 14, vlen.min(item::LONG_VALUE as usize) as u16);
    let bits = (head.header.bits & item::FLAGS_WIDTH_MASK) | item::LIVE | item::REF;
    arena.atomic(page, at + 7).store(bits, Ordering::Relaxed);
}
