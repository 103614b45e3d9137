//! How a memory tier hands what it lets go to the tier below without
//! naming it (foyer's `Pipe`). The Z-zone's sweep sends the items it
//! evicts down a pipe; the flash tier is one; the engine connects the two
//! when it builds the Z-zone (issue 12: items leaving memory, the Z-zone
//! included, are admitted to flash). Neither tier imports the other.

/// Where a tier's evicted items go next.
///
/// The sender calls [`Pipe::send`] once per evicted item, holding its own
/// lock: an implementation must not wait for I/O (the flash tier copies
/// the image into its stage and returns).
pub trait Pipe: Send + Sync {
    /// Offer the item image `image` (key hash `h`) to the tier below.
    /// True if it took it: the item leaves the sender without leaving the
    /// cache (not an eviction); false: it is evicted.
    fn send(&self, h: u64, image: &[u8]) -> bool;
}
