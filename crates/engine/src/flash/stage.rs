//! Items on their way to flash: admitted (they left memory) or moved by
//! the garbage collector, waiting for the writer to pack them into a slab.
//!
//! An item stays here, found by lookups, until the slab it went into is
//! written and indexed; only then is it removed (`publish`), so there is
//! no moment at which it is in neither place. A removal (a SET or DELETE
//! of its key, `flush_all`) takes it out at once; the writer then skips it
//! when it publishes, so a copy written meanwhile is never indexed.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::index::Loc;
use crate::item;

/// Which part of the flash an item goes to (SlimCache §3.4): new items and
/// demoted hot ones to the cold area (compressed), items re-read there to
/// the hot area (raw).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Area {
    Cold = 0,
    Hot = 1,
}

/// Bytes an entry costs beyond its image (the two maps' nodes).
const ENTRY_OVERHEAD: usize = 96;

pub struct Staged {
    pub h: u64,
    pub image: Arc<[u8]>,
    /// Where the garbage collector found it (a move), or None (admitted).
    pub from: Option<Loc>,
}

#[derive(Default)]
struct Queue {
    items: BTreeMap<u64, Staged>,
    /// Items below this sequence number are in the writer's hands.
    taken: u64,
}

#[derive(Default)]
pub struct Stage {
    queues: [Queue; 2],
    by_hash: HashMap<u64, (Area, u64)>,
    bytes: usize,
    next_seq: u64,
}

/// An item the writer took: its sequence number, hash, image and origin.
pub type Taken = (u64, u64, Arc<[u8]>, Option<Loc>);

impl Stage {
    /// Bytes the staged items take, with their bookkeeping.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }

    /// Whether an image of `len` bytes fits under `cap` bytes.
    pub fn fits(&self, len: usize, cap: usize) -> bool {
        self.bytes + len + ENTRY_OVERHEAD <= cap
    }

    /// Whether anything of `area` waits to be taken.
    pub fn has_waiting(&self, area: Area) -> bool {
        let q = &self.queues[area as usize];
        q.items.range(q.taken..).next().is_some()
    }

    /// Stage an item (replacing an older copy of its hash).
    pub fn push(&mut self, area: Area, h: u64, image: Arc<[u8]>, from: Option<Loc>) {
        self.remove(h);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.bytes += image.len() + ENTRY_OVERHEAD;
        self.by_hash.insert(h, (area, seq));
        self.queues[area as usize]
            .items
            .insert(seq, Staged { h, image, from });
    }

    /// Take out the item of hash `h`, if staged; returns where the garbage
    /// collector had found it (a move whose index entry must go too).
    pub fn remove(&mut self, h: u64) -> Option<Option<Loc>> {
        let (area, seq) = self.by_hash.remove(&h)?;
        let s = self.queues[area as usize].items.remove(&seq)?;
        self.bytes -= s.image.len() + ENTRY_OVERHEAD;
        Some(s.from)
    }

    /// The staged image of `key` (hash `h`), if any.
    pub fn get(&self, h: u64, key: &[u8]) -> Option<&[u8]> {
        let (area, seq) = self.by_hash.get(&h)?;
        let s = self.queues[*area as usize].items.get(seq)?;
        (item::key(&s.image) == key).then_some(&s.image[..])
    }

    /// Copy the images of `area`'s items from sequence number `from` on
    /// into `out`, back to back, until they come to `max_bytes` (at least
    /// one); the sequence number to go on from, None once done (a walk's:
    /// `flash::dump`).
    pub fn copy_from(
        &self,
        area: Area,
        from: u64,
        max_bytes: usize,
        out: &mut Vec<u8>,
    ) -> Option<u64> {
        let mut bytes = 0;
        for (&seq, s) in self.queues[area as usize].items.range(from..) {
            if bytes > 0 && bytes + s.image.len() > max_bytes {
                return Some(seq);
            }
            bytes += s.image.len();
            out.extend_from_slice(&s.image);
        }
        None
    }

    /// Hand the writer the next items of `area`, oldest first, until their
    /// images come to `max_bytes` (at least one item).
    pub fn take(&mut self, area: Area, max_bytes: usize, out: &mut Vec<Taken>) {
        let q = &mut self.queues[area as usize];
        let mut bytes = 0;
        let mut last = None;
        for (&seq, s) in q.items.range(q.taken..) {
            if bytes > 0 && bytes + s.image.len() > max_bytes {
                break;
            }
            bytes += s.image.len();
            out.push((seq, s.h, s.image.clone(), s.from));
            last = Some(seq);
        }
        if let Some(seq) = last {
            q.taken = seq + 1;
        }
    }

    /// The writer did not write the items of `area` from `seq` on: they
    /// wait again.
    pub fn untake(&mut self, area: Area, seq: u64) {
        let q = &mut self.queues[area as usize];
        q.taken = q.taken.min(seq);
    }

    /// The item `seq` of `area` was written: remove it and return it, unless
    /// it was removed or replaced meanwhile (then its copy is garbage).
    pub fn publish(&mut self, area: Area, seq: u64) -> Option<Staged> {
        let s = self.queues[area as usize].items.remove(&seq)?;
        self.bytes -= s.image.len() + ENTRY_OVERHEAD;
        if self.by_hash.get(&s.h) == Some(&(area, seq)) {
            self.by_hash.remove(&s.h);
        }
        Some(s)
    }

    /// Forget everything (`flush_all`); the writer's batch is skipped when
    /// it publishes.
    pub fn clear(&mut self) {
        for q in &mut self.queues {
            q.items.clear();
        }
        self.by_hash.clear();
        self.bytes = 0;
    }

    #[cfg(any(test, feature = "testing"))]
    pub fn validate(&self) {
        let mut bytes = 0;
        let mut n = 0;
        for (a, q) in self.queues.iter().enumerate() {
            for (seq, s) in &q.items {
                let area = if a == 0 { Area::Cold } else { Area::Hot };
                assert_eq!(
                    self.by_hash.get(&s.h),
                    Some(&(area, *seq)),
                    "staged item unindexed"
                );
                bytes += s.image.len() + ENTRY_OVERHEAD;
                n += 1;
            }
        }
        assert_eq!(n, self.by_hash.len(), "stage hash map");
        assert_eq!(bytes, self.bytes, "stage bytes");
    }
}
