//! The uncompressed form of a block: the unit both tiers below the N-zone
//! compress and store. A Z-zone block (zExpander §3.2) and a flash
//! container's payload (SlimCache §3.3) are the same bytes, so an item
//! moves between memory and flash without being re-encoded. This module
//! sits below both tiers and knows neither: it imports only the item
//! layout, the key hash and the codecs.
//!
//! A block holds the items of one hash range (a trie leaf in the Z-zone),
//! sorted by key hash, as the N-zone stores them (header, flags, key,
//! value: `crate::item`), so an item keeps its CAS, expiry, flags and cost.
//! An offset index of up to [`INDEX_SLOTS`] evenly spaced entries lets a
//! lookup skip to the few items that could match, as zExpander's does:
//!
//! ```text
//! u16 item count   u8 index entries (n)
//! n × (u32 hash, u32 offset of the entry it names)
//! item images, by (hash, key), back to back
//! ```
//!
//! Entries carry no hash and no length of their own: an item's header
//! says how long it is, and its hash is its key's. Both would be bytes
//! per item that compress badly (a hash not at all), in blocks whose point
//! is to hold as many items as they can.
//!
//! Parsing trusts nothing: a block that does not parse is an error (the
//! tiers treat it as a miss), never a panic. [`encode`] builds a block and
//! compresses it, unless its entropy says that will not pay.

use crate::codec::{normalized_entropy, Codec, Coder, Dictionary, Recognizer};
use crate::hash::hash;
use crate::item;

/// Most offset-index entries per block (zExpander: up to 8).
pub const INDEX_SLOTS: usize = 8;

/// Bytes of block header before the index.
const HEAD: usize = 3;
/// Bytes of an index entry.
const SLOT: usize = 8;

/// Decoded size of a block of `count` items of `item_bytes` in all.
pub fn encoded_len(count: usize, item_bytes: usize) -> usize {
    HEAD + SLOT * count.min(INDEX_SLOTS) + item_bytes
}

/// The 32 bits of a 64-bit key hash an entry keeps: the high ones, the
/// trie's path, so that a block's order is the trie's order.
#[inline]
pub fn short_hash(h: u64) -> u32 {
    (h >> 32) as u32
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("malformed block")]
pub struct Malformed;

/// Build a block from `(key hash, item image)` pairs (any order; keys
/// distinct; each hash the key's) into `out` (cleared first).
pub fn build(items: &mut [(u64, &[u8])], out: &mut Vec<u8>) {
    debug_assert!(items.iter().all(|(h, im)| *h == hash(item::key(im))));
    items.sort_unstable_by(|a, b| {
        (short_hash(a.0), item::key(a.1)).cmp(&(short_hash(b.0), item::key(b.1)))
    });
    let n = items.len();
    assert!(n <= u16::MAX as usize, "{n} items in one block");
    let slots = n.min(INDEX_SLOTS);
    out.clear();
    out.extend_from_slice(&(n as u16).to_le_bytes());
    out.push(slots as u8);
    let index_at = out.len();
    out.resize(index_at + slots * SLOT, 0);
    let mut slot = 0;
    for (i, (h, image)) in items.iter().enumerate() {
        // Slot s names entry s * n / slots: evenly spaced, the first one 0.
        if slot < slots && i == slot * n / slots {
            let at = index_at + slot * SLOT;
            out[at..at + 4].copy_from_slice(&short_hash(*h).to_le_bytes());
            let here = out.len() as u32;
            out[at + 4..at + 8].copy_from_slice(&here.to_le_bytes());
            slot += 1;
        }
        out.extend_from_slice(image);
    }
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, Malformed> {
    let bytes = b.get(at..at + 4).ok_or(Malformed)?;
    Ok(u32::from_le_bytes(bytes.try_into().map_err(|_| Malformed)?))
}

/// The block's item count and where its entries start.
fn head(block: &[u8]) -> Result<(usize, usize, usize), Malformed> {
    let count = u16::from_le_bytes(
        block
            .get(0..2)
            .ok_or(Malformed)?
            .try_into()
            .map_err(|_| Malformed)?,
    );
    let slots = *block.get(2).ok_or(Malformed)? as usize;
    if slots > INDEX_SLOTS || slots > count as usize {
        return Err(Malformed);
    }
    let entries = HEAD + slots * SLOT;
    if entries > block.len() {
        return Err(Malformed);
    }
    Ok((count as usize, slots, entries))
}

/// The entries of a block, in order: (key hash, item image).
pub struct Entries<'a> {
    block: &'a [u8],
    at: usize,
    left: usize,
}

impl<'a> Iterator for Entries<'a> {
    type Item = Result<(u64, &'a [u8]), Malformed>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            // Bytes after the last entry: malformed, said once.
            let trailing = self.at != self.block.len();
            self.at = self.block.len();
            return trailing.then_some(Err(Malformed));
        }
        self.left -= 1;
        let e = self.entry();
        if e.is_err() {
            // Nothing after a bad entry can be found.
            self.left = 0;
            self.at = self.block.len();
        }
        Some(e)
    }
}

impl<'a> Entries<'a> {
    fn entry(&mut self) -> Result<(u64, &'a [u8]), Malformed> {
        let rest = self.block.get(self.at..).ok_or(Malformed)?;
        let len = item::image_len(rest).ok_or(Malformed)?;
        let image = rest.get(..len).ok_or(Malformed)?;
        self.at += len;
        Ok((hash(item::key(image)), image))
    }
}

/// Every entry of `block`; an error ends the walk (a block whose bytes
/// outlast its count is malformed too).
pub fn entries(block: &[u8]) -> Result<Entries<'_>, Malformed> {
    let (count, _, at) = head(block)?;
    Ok(Entries {
        block,
        at,
        left: count,
    })
}

/// The item of `key` (hash `h`) in `block`, if there: the index gives the
/// last named entry before the key's hash; the walk goes on from there
/// while hashes are not past it.
pub fn find<'a>(block: &'a [u8], h: u64, key: &[u8]) -> Result<Option<&'a [u8]>, Malformed> {
    let (count, slots, first) = head(block)?;
    let want = short_hash(h);
    // Slot 0 names the first entry; start from the last slot whose hash
    // is below the key's (entries of an equal hash may begin before a slot
    // that names one of them).
    let (mut at, mut from) = (first, 0);
    for s in 1..slots {
        if u32_at(block, HEAD + s * SLOT)? >= want {
            break;
        }
        at = u32_at(block, HEAD + s * SLOT + 4)? as usize;
        from = s * count / slots;
    }
    if at < first || at > block.len() {
        return Err(Malformed);
    }
    let mut walk = Entries {
        block,
        at,
        left: count - from,
    };
    while walk.left > 0 {
        walk.left -= 1;
        let (entry_h, image) = walk.entry()?;
        let sh = short_hash(entry_h);
        if sh > want {
            return Ok(None);
        }
        if sh == want && item::key(image) == key {
            return Ok(Some(image));
        }
    }
    Ok(None)
}

/// Build `items` into a block in `raw`, and store it in `packed`:
/// compressed, or as it is when its entropy says compression will not pay
/// (SlimCache's recognizer) or it did not. Returns the codec used, the
/// block's entropy and whether compression was tried.
pub fn encode(
    coder: &mut Coder,
    recognizer: &mut Recognizer,
    codec: Codec,
    dict: Option<&Dictionary>,
    items: &mut [(u64, &[u8])],
    raw: &mut Vec<u8>,
    packed: &mut Vec<u8>,
) -> (Codec, f64, bool) {
    build(items, raw);
    let entropy = normalized_entropy(raw);
    let tried = codec != Codec::Raw && recognizer.worth_trying(entropy);
    let dict = if codec == Codec::Zstd { dict } else { None };
    if tried && coder.compress(codec, dict, raw, packed) {
        return (codec, entropy, true);
    }
    packed.clear();
    packed.extend_from_slice(raw);
    (Codec::Raw, entropy, tried)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn image(key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut v = vec![0u8; item::total_len(key.len(), value.len(), 0)];
        item::write(&mut v, 1, 0, 0, item::LIVE, 0, 0, key, &[value]);
        v
    }

    fn block_of(model: &BTreeMap<Vec<u8>, Vec<u8>>) -> Vec<u8> {
        let images: Vec<(u64, Vec<u8>)> =
            model.iter().map(|(k, v)| (hash(k), image(k, v))).collect();
        let mut refs: Vec<(u64, &[u8])> = images.iter().map(|(h, i)| (*h, i.as_slice())).collect();
        let mut out = Vec::new();
        build(&mut refs, &mut out);
        out
    }

    /// Keys of 1 to 11 bytes with values of up to 63, `items` of them.
    fn model(items: std::ops::Range<usize>) -> impl Strategy<Value = BTreeMap<Vec<u8>, Vec<u8>>> {
        proptest::collection::btree_map(
            proptest::collection::vec(any::<u8>(), 1..12),
            proptest::collection::vec(any::<u8>(), 0..64),
            items,
        )
    }

    proptest! {
        /// Every stored key is found with its item, in hash order, and
        /// absent keys are not found.
        #[test]
        fn a_block_finds_what_it_holds(
            model in model(0..40),
            absent in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..12), 0..10),
        ) {
            let b = block_of(&model);
            for (k, v) in &model {
                let got = find(&b, hash(k), k).unwrap().expect("stored key found");
                prop_assert_eq!(item::parts(got).value, v.as_slice());
            }
            for k in absent.iter().filter(|k| !model.contains_key(*k)) {
                prop_assert_eq!(find(&b, hash(k), k).unwrap(), None);
            }
            let all: Vec<(u32, &[u8])> = entries(&b)
                .unwrap()
                .map(|e| e.map(|(h, im)| (short_hash(h), im)))
                .collect::<Result<_, _>>()
                .unwrap();
            prop_assert_eq!(all.len(), model.len());
            prop_assert!(all.windows(2).all(|w| w[0].0 <= w[1].0));
        }

        /// Damaged bytes never panic, and what parses is whole items.
        #[test]
        fn damaged_blocks_do_not_panic(
            model in model(1..20),
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
            cut in any::<usize>(),
        ) {
            let mut b = block_of(&model);
            for (at, x) in flips {
                let i = at % b.len();
                b[i] ^= x;
            }
            b.truncate(b.len() - cut % 8);
            if let Ok(walk) = entries(&b) {
                for (_, image) in walk.flatten() {
                    prop_assert!(item::is_whole(image));
                }
            }
            for k in model.keys() {
                if let Ok(Some(image)) = find(&b, hash(k), k) {
                    prop_assert!(item::is_whole(image));
                }
            }
        }
    }

    #[test]
    fn many_items_are_found_through_the_index() {
        // More items than the proptests make, so each index slot spans
        // dozens of entries.
        let model: BTreeMap<Vec<u8>, Vec<u8>> = (0..500)
            .map(|i| (format!("key:{i}").into_bytes(), vec![i as u8; i % 40]))
            .collect();
        let b = block_of(&model);
        for (k, v) in &model {
            let got = find(&b, hash(k), k).unwrap().expect("stored key found");
            assert_eq!(item::parts(got).value, v.as_slice());
        }
        assert_eq!(find(&b, hash(b"key:500"), b"key:500").unwrap(), None);
        assert_eq!(
            encoded_len(
                model.len(),
                entries(&b).unwrap().flatten().map(|(_, im)| im.len()).sum()
            ),
            b.len()
        );
    }
}
