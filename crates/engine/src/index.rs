//! The hash index (Cavast, section 4.3): 64-byte buckets of tagged slots with
//! localized expansion. See the module documentation below once implemented.

/// Location of an item: an opaque value below `1 << LOC_BITS` (page and chunk).
pub type Loc = u64;
/// Number of significant bits in a [`Loc`].
pub const LOC_BITS: u32 = 40;

/// The index. Placeholder until the real implementation lands.
pub struct Index {}

impl Index {
    /// An index sized for about `expected_items`.
    pub fn with_capacity(_expected_items: usize) -> Index {
        todo!()
    }
    /// Find the item with this key hash: every slot whose tag matches is offered to
    /// `is_match`; the first location it accepts is returned.
    pub fn find(&self, _hash: u64, _is_match: impl FnMut(Loc) -> bool) -> Option<Loc> {
        todo!()
    }
    /// Insert `loc` for `hash` (the caller guarantees the key is not present).
    /// `hash_of` gives the hash of any item already indexed (used when buckets move).
    pub fn insert(&mut self, _hash: u64, _loc: Loc, _hash_of: &dyn Fn(Loc) -> u64) {
        todo!()
    }
    /// Remove exactly the slot (hash, loc). Returns whether it was there.
    pub fn remove(&mut self, _hash: u64, _loc: Loc) -> bool {
        todo!()
    }
    /// Point the slot (hash, old) at `new` (the item moved). Returns whether found.
    pub fn relocate(&mut self, _hash: u64, _old: Loc, _new: Loc) -> bool {
        todo!()
    }
    pub fn len(&self) -> usize {
        todo!()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Bytes of memory the index holds.
    pub fn memory_bytes(&self) -> usize {
        todo!()
    }
    /// Drop every entry and shrink back to the initial size.
    pub fn clear(&mut self) {
        todo!()
    }
}
