//! Demoted items waiting to be packed into their blocks.
//!
//! A demotion only copies the item here, under the zone's lock, for the
//! cost of a copy; the block rewrite it needs (decode, merge, compress,
//! about 20 µs for a 2 KB block) is done later by a writer off the request
//! path ([`super::Zone::flush_some`]), or by the demoting thread itself
//! once the stage is full. Items of the same block that wait together are
//! packed in one rewrite. Staged items are cached items: lookups find them
//! here first (they are the newest copies), removals drop them.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use crate::item;

/// Bytes a staged item holds beyond its image: the map's entry and the
/// allocator's header.
const ENTRY_OVERHEAD: usize = 48;

#[derive(Default)]
pub struct Stage {
    /// Images by key hash (two keys with one 64-bit hash: the later one
    /// stays), each with the number of its push, which tells a writer
    /// whether the image it packed is still the one staged.
    items: BTreeMap<u64, (u64, Box<[u8]>)>,
    bytes: usize,
    pushes: u64,
}

fn cost(image: &[u8]) -> usize {
    image.len() + ENTRY_OVERHEAD
}

impl Stage {
    /// Stage `image` (key hash `h`); the image it replaces, if any.
    pub fn push(&mut self, h: u64, image: &[u8]) -> Option<Box<[u8]>> {
        self.bytes += cost(image);
        self.pushes += 1;
        let old = self.items.insert(h, (self.pushes, image.into()));
        let old = old.map(|o| o.1);
        if let Some(o) = &old {
            self.bytes -= cost(o);
        }
        old
    }

    /// The staged image of `key` (hash `h`).
    pub fn get(&self, h: u64, key: &[u8]) -> Option<&[u8]> {
        self.get_hash(h).filter(|im| item::key(im) == key)
    }

    /// The staged image of hash `h` (its key unchecked).
    pub fn get_hash(&self, h: u64) -> Option<&[u8]> {
        self.items.get(&h).map(|(_, im)| &im[..])
    }

    /// The push number of hash `h`'s staged image.
    pub fn push_of(&self, h: u64) -> Option<u64> {
        self.items.get(&h).map(|&(n, _)| n)
    }

    /// Drop the staged image of hash `h`, if any.
    pub fn remove(&mut self, h: u64) -> Option<Box<[u8]>> {
        let (_, old) = self.items.remove(&h)?;
        self.bytes -= cost(&old);
        Some(old)
    }

    /// The first staged hash at or after `from` (wrapping).
    pub fn next_from(&self, from: u64) -> Option<u64> {
        self.items
            .range(from..)
            .next()
            .or_else(|| self.items.iter().next())
            .map(|(&h, _)| h)
    }

    /// The staged items in `range` (hash, push number, image), as many as
    /// fit `budget` bytes of images (at least one).
    pub fn items_in(&self, range: RangeInclusive<u64>, budget: usize) -> Vec<(u64, u64, &[u8])> {
        let mut out = Vec::new();
        let mut bytes = 0;
        for (&h, (n, im)) in self.items.range(range) {
            if !out.is_empty() && bytes + im.len() > budget {
                break;
            }
            bytes += im.len();
            out.push((h, *n, &im[..]));
        }
        out
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Memory held (counted in `-m`).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Its images, after checking its byte count.
    #[cfg(any(test, feature = "testing"))]
    pub fn images(&self) -> impl Iterator<Item = (u64, &[u8])> {
        let bytes: usize = self.items.values().map(|(_, im)| cost(im)).sum();
        assert_eq!(bytes, self.bytes, "stage bytes");
        self.items.iter().map(|(&h, (_, im))| (h, &im[..]))
    }
}
