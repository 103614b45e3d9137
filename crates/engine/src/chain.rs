//! Items larger than the largest chunk, chained over several chunks
//! (memcached's `slab_chunk_max`: pages stay 1 MB whatever `-I` is).
//!
//! A chained item is a *head* and a list of *segments*, all chunks of the
//! largest class. The head is an ordinary item (header, flags, key: see
//! `item`), so the index, the eviction policies and the reclaimer see it as
//! one item of that class; its header gives the whole value length, which is
//! how a head is told from an inline item (the item does not fit its chunk).
//! After the key it holds the location of the first segment, then the first
//! bytes of the value up to the end of the chunk. A segment holds:
//!
//! ```text
//! byte  0..7   unused
//! byte  7      `item::SEGMENT` (the bits byte of an item: LIVE is clear, so every
//!              scan over items passes segments by)
//! byte  8..16  location of the head (a drain that meets a segment evicts
//!              the item it belongs to)
//! byte 16..24  location of the next segment (`NONE` for the last)
//! then the next bytes of the value
//! ```
//!
//! A segment list rather than a table in the head keeps the head's overhead
//! at 8 bytes whatever the chunk size (a 1 GB value over 16 KB chunks has
//! 65 536 segments).

use crate::item;
use crate::slab::Slabs;

/// Bytes before a segment's share of the value.
pub const SEG_HEADER: usize = 24;
/// No next segment.
pub const NONE: u64 = u64::MAX;
/// Smallest chunk the engine chains over (a smaller `-o slab_chunk_max` is
/// reported as given but chained over chunks of this size).
pub const MIN_CHAIN_CHUNK: usize = 16 << 10;

/// Whether the item whose header starts `chunk` is chained (does not fit).
#[inline]
pub fn is_head(chunk: &[u8]) -> bool {
    item::stored_len(chunk) > chunk.len()
}

/// Where a head keeps its first segment's location (then the value).
#[inline]
fn link_at(chunk: &[u8]) -> usize {
    item::value_start(chunk)
}

/// The first segment of the head in `chunk`.
#[inline]
pub fn first_segment(head: &[u8]) -> u64 {
    read_u64(head, link_at(head))
}

/// The head a segment belongs to.
#[inline]
pub fn owner(seg: &[u8]) -> u64 {
    read_u64(seg, 8)
}

/// The segment after `seg` (`NONE` for the last).
#[inline]
pub fn next(seg: &[u8]) -> u64 {
    read_u64(seg, 16)
}

#[inline]
pub fn set_owner(seg: &mut [u8], head: u64) {
    seg[8..16].copy_from_slice(&head.to_le_bytes());
}

#[inline]
fn read_u64(c: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&c[at..at + 8]);
    u64::from_le_bytes(b)
}

/// Segments an item of `total` bytes (`item::total_len`) needs in chunks of
/// `chunk` bytes: 0 when it fits one chunk.
pub fn segments(total: usize, chunk: usize) -> usize {
    if total <= chunk {
        return 0;
    }
    // The head spends 8 bytes on the link; each segment its header.
    (total + 8 - chunk).div_ceil(chunk - SEG_HEADER)
}

/// Write a chained item: the head chunk `head` (at `head_loc`) is already
/// written up to its key by `item::write` with an empty value list; `segs`
/// are the segment chunks, in order; `value` is the whole value.
pub fn write(slabs: &mut Slabs, head_loc: u64, segs: &[u64], value: &[&[u8]]) {
    let mut pieces = value.iter().copied().filter(|p| !p.is_empty());
    let mut cur: &[u8] = pieces.next().unwrap_or(&[]);
    // Copy from the value pieces into `dst`, advancing through them.
    let mut fill = |dst: &mut [u8]| {
        let mut at = 0;
        while at < dst.len() {
            if cur.is_empty() {
                match pieces.next() {
                    Some(p) => cur = p,
                    None => break,
                }
            }
            let n = cur.len().min(dst.len() - at);
            dst[at..at + n].copy_from_slice(&cur[..n]);
            cur = &cur[n..];
            at += n;
        }
    };
    let first = segs.first().copied().unwrap_or(NONE);
    let head = slabs.chunk_mut(head_loc);
    let at = link_at(head);
    head[at..at + 8].copy_from_slice(&first.to_le_bytes());
    fill(&mut head[at + 8..]);
    for (i, &s) in segs.iter().enumerate() {
        let next = segs.get(i + 1).copied().unwrap_or(NONE);
        let seg = slabs.chunk_mut(s);
        seg[..SEG_HEADER].fill(0);
        item::set_bits(seg, item::SEGMENT);
        set_owner(seg, head_loc);
        seg[16..24].copy_from_slice(&next.to_le_bytes());
        fill(&mut seg[SEG_HEADER..]);
    }
}

/// The locations of a head's segments, in order.
pub fn segment_locs(slabs: &Slabs, head: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut s = first_segment(slabs.chunk(head));
    while s != NONE {
        out.push(s);
        s = next(slabs.chunk(s));
    }
    out
}

/// A stored value: one slice for an item that fits its chunk, the head's
/// share and then each segment's for a chained one. Read it with
/// [`Value::parts`] (or copy it with [`Value::to_vec`]).
#[derive(Clone, Copy)]
pub struct Value<'a> {
    first: &'a [u8],
    /// Segments to follow (chained items only).
    chain: Option<(&'a Slabs, u64)>,
    len: usize,
}

impl std::fmt::Debug for Value<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Value({} bytes)", self.len)
    }
}

impl<'a> Value<'a> {
    /// A value in one piece.
    pub(crate) fn flat(bytes: &'a [u8]) -> Value<'a> {
        Value {
            first: bytes,
            chain: None,
            len: bytes.len(),
        }
    }

    /// The value of the item at `loc`.
    pub fn of(slabs: &'a Slabs, loc: u64) -> Value<'a> {
        let chunk = slabs.chunk(loc);
        let len = item::Header::read(chunk).value_len as usize;
        if !is_head(chunk) {
            let start = item::value_start(chunk);
            return Value {
                first: &chunk[start..start + len],
                chain: None,
                len,
            };
        }
        Value {
            first: &chunk[link_at(chunk) + 8..],
            chain: Some((slabs, first_segment(chunk))),
            len,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The value in order, as slices of the chunks that hold it.
    pub fn parts(&self) -> Parts<'a> {
        Parts {
            next: Some(self.first),
            chain: self.chain,
            left: self.len,
        }
    }

    /// The whole value in one slice, when it is stored in one piece.
    pub fn as_slice(&self) -> Option<&'a [u8]> {
        self.chain.is_none().then_some(self.first)
    }

    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        self.copy_to(&mut v);
        v
    }

    /// Append the value to `out`.
    pub fn copy_to(&self, out: &mut Vec<u8>) {
        out.reserve(self.len);
        for p in self.parts() {
            out.extend_from_slice(p);
        }
    }
}

impl<T: AsRef<[u8]> + ?Sized> PartialEq<T> for Value<'_> {
    fn eq(&self, other: &T) -> bool {
        let other = other.as_ref();
        if self.len != other.len() {
            return false;
        }
        let mut at = 0;
        self.parts().all(|p| {
            let same = *p == other[at..at + p.len()];
            at += p.len();
            same
        })
    }
}

/// Iterator over the pieces of a [`Value`].
pub struct Parts<'a> {
    next: Option<&'a [u8]>,
    chain: Option<(&'a Slabs, u64)>,
    left: usize,
}

impl<'a> Iterator for Parts<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        let piece = match self.next.take() {
            Some(p) => p,
            None => {
                let (slabs, loc) = self.chain?;
                if loc == NONE {
                    return None;
                }
                let seg = slabs.chunk(loc);
                self.chain = Some((slabs, next(seg)));
                &seg[SEG_HEADER..]
            }
        };
        let piece = &piece[..piece.len().min(self.left)];
        self.left -= piece.len();
        Some(piece)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_count_covers_the_value() {
        let c = 1000;
        assert_eq!(segments(1000, c), 0);
        // One byte over: the head gives 8 bytes to its link, a segment
        // carries chunk - SEG_HEADER bytes.
        assert_eq!(segments(1001, c), 1);
        assert_eq!(segments(c - 8 + (c - SEG_HEADER), c), 1);
        assert_eq!(segments(c - 8 + (c - SEG_HEADER) + 1, c), 2);
        for total in [1001usize, 5000, 123_457, 1 << 20] {
            let n = segments(total, c);
            assert!(c - 8 + n * (c - SEG_HEADER) >= total);
            assert!(c - 8 + (n - 1) * (c - SEG_HEADER) < total);
        }
    }
}
