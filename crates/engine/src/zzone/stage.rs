//! Demoted items waiting to be packed into their blocks.
//!
//! A demotion only copies the item here, under the zone's lock, for the
//! cost of a copy; the block rewrite it needs (decode, merge, compress,
//! about 20 µs for a 2 KB block) is done later by a writer off the request
//! path ([`super::Zone::flush_some`]), or by the demoting thread itself
//! once the stage is full. Items of the same block that wait together are
//! packed in one rewrite. Staged items are cached items: lookups find them
//! here first (they are the newest copies), removals drop them.
//!
//! An item too large for a block (`super::large`) waits here whole until
//! the writer has stored it apart; its image is then replaced by the
//! stub that names the record, which is packed into its block as any
//! small item is.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;
use std::sync::Arc;

use crate::item;

/// Bytes a staged item holds beyond its image: the map's entry and the
/// allocator's header, and the image's reference counts (shared, so that
/// a writer or a reader takes a large image without copying it under the
/// zone's lock).
const ENTRY_OVERHEAD: usize = 64;

#[derive(Default)]
pub struct Stage {
    /// Images by key hash (two keys with one 64-bit hash: the later one
    /// stays), each with the number of its push, which tells a writer
    /// whether the image it packed is still the one staged.
    items: BTreeMap<u64, (u64, Arc<[u8]>)>,
    /// The staged hashes whose images are to be stored apart, not yet
    /// stored (a block rewrite passes them by).
    large: BTreeSet<u64>,
    bytes: usize,
    pushes: u64,
    /// With a writer thread: images a flush has packed, freed by the
    /// writer once it has left the zone's lock ([`Stage::take_dropped`]).
    /// Freeing them under it, each an allocator call on the arena of the
    /// worker that staged it, was most of a block install's hold.
    defer: bool,
    dropped: Vec<Arc<[u8]>>,
}

fn cost(image: &[u8]) -> usize {
    image.len() + ENTRY_OVERHEAD
}

impl Stage {
    /// Stage `image` (key hash `h`), to be stored apart if `large`; the
    /// image it replaces, if any. The staged copy is marked LIVE: a stub
    /// is told from an item by that bit (`super::large`), whatever the
    /// image's owner left in it.
    pub fn push(&mut self, h: u64, image: &[u8], large: bool) -> Option<Arc<[u8]>> {
        // Copied straight into its shared allocation: a box turned into an
        // `Arc` afterwards is allocated and copied a second time.
        let mut copy: Arc<[u8]> = Arc::from(image);
        let im = Arc::get_mut(&mut copy).expect("a new Arc is not shared");
        let bits = item::bits(im) | item::LIVE;
        item::set_bits(im, bits);
        self.put(h, copy, large)
    }

    /// Stage the stub of a large item in place of its image (a new push:
    /// a writer that copied the image sees it changed).
    pub(super) fn replace(&mut self, h: u64, stub: Vec<u8>) {
        debug_assert!(self.items.contains_key(&h));
        self.put(h, stub.into(), false);
    }

    fn put(&mut self, h: u64, image: Arc<[u8]>, large: bool) -> Option<Arc<[u8]>> {
        self.bytes += cost(&image);
        self.pushes += 1;
        let old = self.items.insert(h, (self.pushes, image));
        let old = old.map(|o| o.1);
        if let Some(o) = &old {
            self.bytes -= cost(o);
        }
        match large {
            true => self.large.insert(h),
            false => self.large.remove(&h),
        };
        old
    }

    /// A staged image still to be stored apart: (hash, push number, image).
    pub(super) fn next_large(&self) -> Option<(u64, u64, Arc<[u8]>)> {
        let h = *self.large.first()?;
        let (n, im) = self.items.get(&h)?;
        Some((h, *n, im.clone()))
    }

    /// The staged image of hash `h`, shared (its key unchecked).
    pub(super) fn shared(&self, h: u64) -> Option<Arc<[u8]>> {
        self.items.get(&h).map(|(_, im)| im.clone())
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

    /// Images are freed by the caller of [`Stage::take_dropped`] from now.
    pub fn defer_frees(&mut self) {
        self.defer = true;
    }

    /// Whether a writer thread frees (and packs) for the stagers.
    pub fn deferred(&self) -> bool {
        self.defer
    }

    /// [`Stage::remove`], the image freed later if deferred.
    pub fn discard(&mut self, h: u64) {
        if let Some(im) = self.remove(h) {
            if self.defer {
                self.dropped.push(im);
            }
        }
    }

    /// The images discarded since the last call, to free without the lock.
    pub fn take_dropped(&mut self) -> Vec<Arc<[u8]>> {
        std::mem::take(&mut self.dropped)
    }

    /// Drop the staged image of hash `h`, if any.
    pub fn remove(&mut self, h: u64) -> Option<Arc<[u8]>> {
        let (_, old) = self.items.remove(&h)?;
        self.bytes -= cost(&old);
        self.large.remove(&h);
        Some(old)
    }

    /// The first staged hash at or after `from` (wrapping) that a block
    /// rewrite takes (not one still to be stored apart).
    pub fn next_from(&self, from: u64) -> Option<u64> {
        let packable = |(&h, _): (&u64, _)| (!self.large.contains(&h)).then_some(h);
        self.items
            .range(from..)
            .find_map(packable)
            .or_else(|| self.items.iter().find_map(packable))
    }

    /// The staged items in `range` (hash, push number, image), as many as
    /// fit `budget` bytes of images (at least one); with `packable`, only
    /// those a block rewrite takes.
    pub fn items_in(
        &self,
        range: RangeInclusive<u64>,
        budget: usize,
        packable: bool,
    ) -> Vec<(u64, u64, &[u8])> {
        let mut out = Vec::new();
        let mut bytes = 0;
        for (&h, (n, im)) in self.items.range(range) {
            if packable && self.large.contains(&h) {
                continue;
            }
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

    /// Its images, in no order (a stub, for an item stored apart).
    pub(super) fn each_image(&self) -> impl Iterator<Item = &[u8]> {
        self.items.values().map(|(_, im)| &**im)
    }

    /// Its images, after checking its byte count.
    #[cfg(any(test, feature = "testing"))]
    pub fn images(&self) -> impl Iterator<Item = (u64, &[u8])> {
        let bytes: usize = self.items.values().map(|(_, im)| cost(im)).sum();
        assert_eq!(bytes, self.bytes, "stage bytes");
        assert!(
            self.large.iter().all(|h| self.items.contains_key(h)),
            "large items are staged"
        );
        self.items.iter().map(|(&h, (_, im))| (h, &im[..]))
    }
}
