//! A block stored as frames: its base, compressed whole by a rewrite, and
//! up to [`MAX_DELTAS`] deltas appended after it, each holding the items
//! of one later flush compressed on their own (with the base's codec and
//! dictionary).
//!
//! A rewrite decodes a block, merges its new items and compresses it
//! whole: about 25 µs of CPU for a 6 KB block, for the two items a flush
//! brings on average during a fill (docs/benchmarks-history.md). A delta
//! compresses only those items, and copies the stored bytes it follows;
//! the block is rewritten whole once it has [`MAX_DELTAS`], so a rewrite
//! is paid once per that many flushes. zExpander (§3.2) rewrites the block
//! on every insertion; the stage and the deltas are what keep that cost
//! off a fill.
//!
//! A delta holds only keys that no older frame holds alive: a key whose
//! older copy is pending removal goes to a rewrite instead, so a block's
//! frames never disagree, and the pending removals keep meaning "the
//! block's copy" (`Zone::pending`).
//!
//! ```text
//! base frame (as a one-frame block's stored bytes)
//! per delta, oldest first: packed bytes, then n u16 tags, u8 n,
//!                          u16 packed length, u16 decoded length, u8 codec
//! ```
//!
//! A delta's tags are the low 16 bits of its items' hashes ([`tag`]; none,
//! and n = [`UNTAGGED`], past [`MAX_TAGS`] items), so that a GET decodes
//! only the frames that may hold its key: decoding every delta newest
//! first until the key turned up cost YCSB-B's look-aside fill (1 M keys,
//! `-m 64`) a quarter of its CPU, most reads being of keys in the base
//! behind several deltas (docs/benchmarks.md, issue 34). The blocks live
//! in memory only (a warm restart saves items, not blocks), so the layout
//! is the zone's own to change.
//!
//! Descriptors and copies name a block's frames by its code byte: the
//! codec of the base in the low two bits, the number of deltas above them.
//! A GET decodes the frames whose tags name its key (and the base) newest
//! first and stops at the one that holds it ([`find`]); a rewrite, the
//! sweep and an export decode them merged into one block
//! (`crate::block`'s form, [`decompress`]).

use std::ops::Range;

use crate::block;
use crate::codec::{Codec, Coder, Dictionary};

/// The most deltas a block may have (`-o zzone_deltas`, 4 by default,
/// sets how many it takes before a flush rewrites it whole). Each saves a
/// rewrite; each also compresses worse than the base would, makes every
/// read of the block look through its tags, and every merge decode it.
pub(super) const MAX_DELTAS: u8 = 15;
/// A delta's trailer after its tags: u8 n, u16 packed and decoded
/// lengths, u8 codec.
const TRAILER: usize = 6;
/// The most items a delta lists tags for.
pub(super) const MAX_TAGS: usize = 64;
/// The tag count of a delta that lists none (always decoded).
const UNTAGGED: u8 = u8::MAX;
const CODEC_BITS: u8 = 2;

/// An item's tag in its delta's list.
#[inline]
fn tag(h: u64) -> u16 {
    h as u16
}

/// A code byte: `codec` (its code) and `deltas`.
pub(super) fn code(codec: u8, deltas: u8) -> u8 {
    debug_assert!(codec < 1 << CODEC_BITS && deltas <= MAX_DELTAS);
    codec | deltas << CODEC_BITS
}

/// The base's codec a code byte names (the zone writes only valid codes).
#[inline]
pub(super) fn codec_of(code: u8) -> Codec {
    Codec::from_code(code & ((1 << CODEC_BITS) - 1)).unwrap_or(Codec::Raw)
}

/// The deltas a code byte names.
#[inline]
pub(super) fn deltas(code: u8) -> u8 {
    code >> CODEC_BITS
}

/// Stored bytes of a delta of `packed` bytes holding `items` items (at
/// most, for a bound).
pub(super) fn delta_len(packed: usize, items: usize) -> usize {
    packed + 2 * items.min(MAX_TAGS) + TRAILER
}

/// Append a delta (`packed`, decoding with `codec` to `raw` bytes) of the
/// items of hashes `hashes` to a block's stored bytes.
pub(super) fn append(
    stored: &mut Vec<u8>,
    packed: &[u8],
    raw: usize,
    codec: Codec,
    hashes: impl ExactSizeIterator<Item = u64>,
) {
    debug_assert!(packed.len() <= u16::MAX as usize && raw <= u16::MAX as usize);
    stored.extend_from_slice(packed);
    match hashes.len() {
        n if n <= MAX_TAGS => {
            hashes.for_each(|h| stored.extend_from_slice(&tag(h).to_le_bytes()));
            stored.push(n as u8);
        }
        _ => stored.push(UNTAGGED),
    }
    stored.extend_from_slice(&(packed.len() as u16).to_le_bytes());
    stored.extend_from_slice(&(raw as u16).to_le_bytes());
    stored.push(codec.code());
}

/// Decode a block's stored bytes (`code`, `dict`, `raw_len` as its
/// descriptor has them) into `out` as one block. Err if they do not
/// decode (`out` is then empty).
pub(super) fn decompress(
    coder: &mut Coder,
    code: u8,
    dict: Option<&Dictionary>,
    stored: &[u8],
    raw_len: usize,
    out: &mut Vec<u8>,
) -> Result<(), ()> {
    if deltas(code) == 0 {
        return coder
            .decompress(codec_of(code), dict, stored, raw_len, out)
            .map_err(|_| ());
    }
    let r = merge(coder, code, dict, stored, raw_len, out);
    if r.is_err() {
        out.clear();
    }
    r
}

/// One frame of a block: where its packed bytes are, how they decode,
/// and (a delta's) where its tags are (None: the base, or untagged).
struct Frame {
    packed: Range<usize>,
    codec: Codec,
    raw: usize,
    tags: Option<Range<usize>>,
}

impl Frame {
    /// Whether the frame may hold the item of hash `h`.
    fn may_hold(&self, stored: &[u8], h: u64) -> bool {
        let Some(tags) = &self.tags else {
            return true;
        };
        let want = tag(h).to_le_bytes();
        stored[tags.clone()].chunks_exact(2).any(|t| t == want)
    }
}

/// The frames of a block with deltas, newest first. Err if its trailers
/// do not add up.
fn frames(code: u8, stored: &[u8], raw_len: usize) -> Result<Vec<Frame>, ()> {
    let n = deltas(code);
    let mut frames = Vec::with_capacity(n as usize + 1);
    let mut end = stored.len();
    let mut delta_raw = 0usize;
    for _ in 0..n {
        let at = end.checked_sub(TRAILER).ok_or(())?;
        let t = stored.get(at..end).ok_or(())?;
        let packed = u16::from_le_bytes([t[1], t[2]]) as usize;
        let raw = u16::from_le_bytes([t[3], t[4]]) as usize;
        let codec = Codec::from_code(t[5]).ok_or(())?;
        let tags = match t[0] {
            UNTAGGED => None,
            n if n as usize <= MAX_TAGS => Some(at.checked_sub(2 * n as usize).ok_or(())?..at),
            _ => return Err(()),
        };
        let packed_end = tags.as_ref().map_or(at, |r| r.start);
        let start = packed_end.checked_sub(packed).ok_or(())?;
        frames.push(Frame {
            packed: start..packed_end,
            codec,
            raw,
            tags,
        });
        delta_raw += raw;
        end = start;
    }
    let base_raw = raw_len.checked_sub(delta_raw).ok_or(())?;
    frames.push(Frame {
        packed: 0..end,
        codec: codec_of(code),
        raw: base_raw,
        tags: None,
    });
    Ok(frames)
}

/// Find `key` (hash `h`) in a block's stored bytes: the frames that may
/// hold it (by their tags) are decoded into `out` newest first, up to the
/// first that holds the key (a read of a key in a delta does not decode
/// the base). The item's place in `out`; None if no frame holds it; Err
/// if a frame it decoded does not decode or parse.
#[allow(clippy::too_many_arguments)]
pub(super) fn find(
    coder: &mut Coder,
    code: u8,
    dict: Option<&Dictionary>,
    stored: &[u8],
    raw_len: usize,
    h: u64,
    key: &[u8],
    out: &mut Vec<u8>,
) -> Result<Option<Range<usize>>, ()> {
    let mut one = |range: Range<usize>, codec: Codec, raw: usize| {
        decode_frame(coder, dict, &stored[range], codec, raw, out)?;
        let found = block::find(out, h, key).map_err(|_| ())?;
        Ok(found.map(|image| {
            let at = image.as_ptr() as usize - out.as_ptr() as usize;
            at..at + image.len()
        }))
    };
    if deltas(code) == 0 {
        return one(0..stored.len(), codec_of(code), raw_len);
    }
    for f in frames(code, stored, raw_len)? {
        if !f.may_hold(stored, h) {
            continue;
        }
        if let Some(at) = one(f.packed, f.codec, f.raw)? {
            return Ok(Some(at));
        }
    }
    Ok(None)
}

/// One frame's bytes, stored with `codec` (the block's dictionary if
/// zstd), decoded into `out`.
fn decode_frame(
    coder: &mut Coder,
    dict: Option<&Dictionary>,
    bytes: &[u8],
    codec: Codec,
    raw: usize,
    out: &mut Vec<u8>,
) -> Result<(), ()> {
    let dict = if codec == Codec::Zstd { dict } else { None };
    coder
        .decompress(codec, dict, bytes, raw, out)
        .map_err(|_| ())
}

/// The frames of a block with deltas, decoded and merged into `out`.
fn merge(
    coder: &mut Coder,
    code: u8,
    dict: Option<&Dictionary>,
    stored: &[u8],
    raw_len: usize,
    out: &mut Vec<u8>,
) -> Result<(), ()> {
    let frames = frames(code, stored, raw_len)?;
    // Each frame decoded, back to back.
    let mut decoded = Vec::with_capacity(raw_len);
    let mut at = Vec::with_capacity(frames.len());
    for f in frames {
        decode_frame(coder, dict, &stored[f.packed], f.codec, f.raw, out)?;
        at.push(decoded.len()..decoded.len() + out.len());
        decoded.extend_from_slice(out);
    }
    // Newest first, so that a key in two frames (none should be: see the
    // module's doc) keeps its newest copy.
    let mut items: Vec<(u64, &[u8])> = Vec::new();
    for r in at {
        for e in block::entries(&decoded[r]).map_err(|_| ())? {
            let (h, image) = e.map_err(|_| ())?;
            items.push((h, image));
        }
    }
    let mut seen = std::collections::HashSet::with_capacity(items.len());
    items.retain(|(h, image)| seen.insert((*h, crate::item::key(image))));
    block::build(&mut items, out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::hash;
    use crate::item;

    fn image(key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut v = vec![0u8; item::total_len(key.len(), value.len(), 0)];
        item::write(&mut v, 1, 0, 0, item::LIVE, 0, 0, key, &[value]);
        v
    }

    /// A frame of `keys` (values `v`), compressed with `codec` if it pays.
    fn frame(coder: &mut Coder, keys: &[&str], v: &[u8], codec: Codec) -> (Vec<u8>, usize, Codec) {
        let images: Vec<Vec<u8>> = keys.iter().map(|k| image(k.as_bytes(), v)).collect();
        let mut items: Vec<(u64, &[u8])> = images
            .iter()
            .map(|im| (hash(item::key(im)), im.as_slice()))
            .collect();
        let mut raw = Vec::new();
        block::build(&mut items, &mut raw);
        let mut packed = Vec::new();
        match coder.compress(codec, None, &raw, &mut packed) {
            true => (packed, raw.len(), codec),
            false => (raw.clone(), raw.len(), Codec::Raw),
        }
    }

    #[test]
    fn frames_decode_to_one_block_of_all_their_items() {
        let mut coder = Coder::default();
        let v = b"value value value value value value".as_slice();
        for codec in [Codec::Raw, Codec::Lz4, Codec::Zstd] {
            let (base, base_raw, used) = frame(&mut coder, &["a", "b", "c"], v, codec);
            let mut stored = base;
            let mut raw_len = base_raw;
            let deltas: [&[&str]; 3] = [&["d"], &["e", "f"], &["g"]];
            for (i, keys) in deltas.iter().enumerate() {
                let (packed, raw, c) = frame(&mut coder, keys, b"other", codec);
                let hashes = keys.iter().map(|k| hash(k.as_bytes()));
                append(&mut stored, &packed, raw, c, hashes);
                raw_len += raw;
                let mut out = Vec::new();
                decompress(
                    &mut coder,
                    code(used.code(), i as u8 + 1),
                    None,
                    &stored,
                    raw_len,
                    &mut out,
                )
                .expect("frames decode");
                let n = block::entries(&out).expect("one block").count();
                assert_eq!(n, 3 + deltas[..=i].iter().map(|k| k.len()).sum::<usize>());
                let c = code(used.code(), i as u8 + 1);
                let mut one = Vec::new();
                for k in ["a", "b", "c"]
                    .iter()
                    .chain(deltas[..=i].iter().flat_map(|k| k.iter()))
                {
                    let (h, k) = (hash(k.as_bytes()), k.as_bytes());
                    let Ok(Some(merged)) = block::find(&out, h, k) else {
                        panic!("{k:?} in the merged block ({codec:?})");
                    };
                    // Found frame by frame, the same image.
                    let at = find(&mut coder, c, None, &stored, raw_len, h, k, &mut one);
                    let at = at.expect("frames decode").expect("found");
                    assert_eq!(&one[at], merged);
                }
                let absent = find(
                    &mut coder,
                    c,
                    None,
                    &stored,
                    raw_len,
                    hash(b"zz"),
                    b"zz",
                    &mut one,
                );
                assert_eq!(absent, Ok(None));
            }
        }
    }

    /// A read decodes only the deltas whose tags name its key: a delta
    /// of garbage is passed over by a read of a key in the base, and
    /// decoded (and refused) by a read of its own key. A delta of more
    /// items than it lists tags for is always decoded.
    #[test]
    fn a_read_decodes_only_the_deltas_tagged_with_its_key() {
        let mut coder = Coder::default();
        let v = b"value value value value value value".as_slice();
        let (base, base_raw, used) = frame(&mut coder, &["a", "b"], v, Codec::Zstd);
        let (packed, raw, c) = frame(&mut coder, &["d"], b"other", Codec::Zstd);
        let mut stored = base.clone();
        let garbage = vec![0xA5; packed.len()];
        append(&mut stored, &garbage, raw, c, [hash(b"d")].into_iter());
        let (code1, len) = (code(used.code(), 1), base_raw + raw);
        let mut out = Vec::new();
        // A read of key `k` in `stored`, `len` bytes decoded.
        let read = |k: &[u8], out: &mut Vec<u8>, coder: &mut Coder, stored: &[u8], len| {
            find(coder, code1, None, stored, len, hash(k), k, out)
        };
        let a = read(b"a", &mut out, &mut coder, &stored, len);
        assert!(matches!(a, Ok(Some(_))), "the garbage delta was decoded");
        assert!(read(b"d", &mut out, &mut coder, &stored, len).is_err());
        // Untagged: 65 items, and the read of "a" now decodes it.
        let many: Vec<String> = (0..MAX_TAGS + 1).map(|i| format!("k{i}")).collect();
        let names: Vec<&str> = many.iter().map(|k| k.as_str()).collect();
        let (packed, raw, c) = frame(&mut coder, &names, b"x", Codec::Zstd);
        let hashes = names.iter().map(|k| hash(k.as_bytes()));
        let mut stored = base;
        append(&mut stored, &vec![0xA5; packed.len()], raw, c, hashes);
        assert!(read(b"a", &mut out, &mut coder, &stored, base_raw + raw).is_err());
    }

    #[test]
    fn damaged_frames_do_not_decode() {
        let mut coder = Coder::default();
        let (base, base_raw, used) =
            frame(&mut coder, &["a", "b"], b"vvvvvvvvvvvvvvvv", Codec::Zstd);
        let (packed, raw, c) = frame(&mut coder, &["c"], b"w", Codec::Zstd);
        let mut stored = base;
        append(&mut stored, &packed, raw, c, [hash(b"c")].into_iter());
        let c1 = code(used.code(), 1);
        let mut out = Vec::new();
        for cut in 0..stored.len() {
            let r = decompress(
                &mut coder,
                c1,
                None,
                &stored[..cut],
                base_raw + raw,
                &mut out,
            );
            assert!(r.is_err() && out.is_empty(), "cut at {cut}");
        }
        // Claiming more deltas than stored, or another decoded length.
        assert!(decompress(
            &mut coder,
            code(used.code(), 3),
            None,
            &stored,
            base_raw + raw,
            &mut out
        )
        .is_err());
        assert!(decompress(&mut coder, c1, None, &stored, base_raw + raw + 1, &mut out).is_err());
        assert!(decompress(&mut coder, c1, None, &stored, base_raw + raw, &mut out).is_ok());
    }
}
