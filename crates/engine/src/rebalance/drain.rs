//! The page in transit: a page on its way out of its class, drained a few
//! chunks at a time (the mechanics are the engine's, `engine/pages.rs`).

use crate::slab::PageId;

/// A page on its way out of its class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Drain {
    pub page: PageId,
    pub from: usize,
    /// The class that gets it; None: the pool of unassigned pages.
    pub to: Option<usize>,
    /// Next chunk to look at.
    pub next: u32,
    /// Chunks that held a hot item when the move began (one bit each):
    /// CLOCK's hand keeps sweeping the page while it drains and clears REF
    /// bits, which must not make its hot items look cold.
    pub hot: Box<[u64]>,
    /// Chunks whose `hot` bit is set yet: the page is scanned a slice at
    /// a time before the cursor moves (a page of small items is thousands
    /// of headers, hundreds of microseconds in one go).
    pub scanned: u32,
    /// Drained because memory is over `-m` (`Engine::enforce_budget`):
    /// the items it cannot keep are evictions, as they would be had the
    /// page been emptied at once, not reassign evictions.
    pub nomem: bool,
}

impl Drain {
    pub(crate) fn was_hot(&self, chunk: u32) -> bool {
        self.hot
            .get(chunk as usize / 64)
            .is_some_and(|w| w >> (chunk % 64) & 1 != 0)
    }
}
