//! The zone's live items copied out a few blocks at a time, in key-hash
//! order: what a warm restart saves (`crate::warm`) and what `lru_crawler
//! metadump` lists (issue 34). Each call copies whole leaves under one
//! hold of the zone's lock and returns where to go on, so the caller
//! writes or formats them without the lock and the lock is held for a
//! bounded batch however large the zone.

use super::large::stub_of;
use super::trie::range_end;
use super::zone::Zone;
use crate::block;
use crate::item;

impl Zone {
    /// Append to `out` (item images, back to back) the live items with key
    /// hashes in `from..=to`, a leaf at a time until at least `budget`
    /// bytes are copied; returns the hash to go on from, None once the
    /// range is done. A leaf's items are its staged ones and those of its
    /// block that are neither staged (the staged copy is newer) nor
    /// pending removal, as [`Zone::get`] would find them; expired items
    /// (at `now`) are left out. Hashes outside the range are skipped, so
    /// ranges that cut leaves, or a trie that split or merged between two
    /// calls, list no item twice. A block that does not decode gives
    /// nothing (its items are misses to GETs too). An item stored apart
    /// is listed whole, its record decoded here (`super::large`).
    pub fn export(
        &mut self,
        from: u64,
        to: u64,
        now: u32,
        budget: usize,
        out: &mut Vec<u8>,
    ) -> Option<u64> {
        // Exports are not reads: the decompression count stays the GETs'.
        let decompressions = self.stats.decompressions;
        let start = out.len();
        let live = |image: &[u8]| {
            let exp = item::exptime(image);
            exp == 0 || exp > now
        };
        let mut at = from;
        let mut stubs = Vec::new();
        let mut whole = Vec::new();
        let next = loop {
            let (node, id) = self.trie.leaf_of(at);
            let end = range_end(node).min(to);
            if at > end {
                break None;
            }
            stubs.clear();
            for (_, _, image) in self.stage.items_in(at..=end, usize::MAX, false) {
                if live(image) {
                    match stub_of(image) {
                        Some(s) => stubs.push((s, item::key(image).to_vec())),
                        None => out.extend_from_slice(image),
                    }
                }
            }
            if self.descs[id as usize].count > 0 && self.load(id) {
                for entry in block::entries(&self.raw).into_iter().flatten() {
                    let Ok((h, image)) = entry else { break };
                    if (at..=end).contains(&h)
                        && self.stage.get_hash(h).is_none()
                        && !self.pending.contains_key(&h)
                        && live(image)
                    {
                        match stub_of(image) {
                            Some(s) => stubs.push((s, item::key(image).to_vec())),
                            None => out.extend_from_slice(image),
                        }
                    }
                }
            }
            for (s, key) in &stubs {
                if self.read_record(*s, key, &mut whole) {
                    out.extend_from_slice(&whole);
                }
            }
            match end.checked_add(1).filter(|_| end < to) {
                None => break None,
                Some(n) if out.len() - start >= budget => break Some(n),
                Some(n) => at = n,
            }
        };
        self.stats.decompressions = decompressions;
        next
    }
}

/// The item images [`Zone::export`] appended to `bytes`, one by one (a
/// copy made under the lock, walked without it).
pub fn images(mut bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        let len = item::image_len(bytes)?;
        let (image, rest) = bytes.split_at_checked(len)?;
        bytes = rest;
        Some(image)
    })
}
