//! The engine's invariants across its structures, for tests and fuzzing.

use std::sync::atomic::Ordering;

use super::Engine;
use crate::hash::hash;
use crate::slab::PageId;
use crate::{chain, item};

#[cfg(any(test, feature = "testing"))]
impl Engine {
    /// Check the engine's invariants (tests and fuzzing; panics): each
    /// structure's own `validate` (slabs, index, eviction policy, rebalancer,
    /// page in transit), then across them: every live chunk is indexed under
    /// its key and sits in the class its size asks for, the index holds
    /// nothing else, and the counters and the memory budget agree with the
    /// chunks.
    pub fn validate(&mut self) {
        if let Some(f) = &self.flash {
            f.validate();
        }
        self.hold_all();
        self.fold_index_grown();
        let reserved = self.magazines.reserved(self.stripes.slots_taken());
        self.slabs
            .validate(self.drain.as_ref().map(|d| (d.page, d.next)), &reserved);
        let slabs = &self.slabs;
        let mut indexed = 0;
        for s in 0..self.stripes.len() {
            let st = self.stripe_ref(s);
            if let Err(e) = st.index.validate(&|l| hash(item::key(slabs.chunk(l)))) {
                panic!("index stripe {s}: {e}");
            }
            indexed += st.index.len();
        }
        assert_eq!(self.index_bytes, self.index_memory(), "index memory");
        for s in 0..self.stripes.len() {
            assert_eq!(self.index_shape[s], self.shape_of(s), "stripe {s}'s shape");
        }
        let pages: Vec<u32> = self
            .slabs
            .classes
            .iter()
            .map(|c| c.pages.len() as u32)
            .collect();
        self.rebal.validate(&pages);
        if let Some(z) = self.zone.as_mut() {
            // What the budget reads without the lock is the zone's own
            // figure: published when the lock was last released, and
            // nothing changes the zone until this guard is.
            let mut zone = z.zone.lock();
            let published = (
                z.zone.memory_bytes(),
                z.zone.wanted_pages(),
                z.zone.pressed_pages(),
            );
            zone.validate();
            assert_eq!(
                published,
                (
                    zone.memory_bytes(),
                    zone.wanted_pages(),
                    zone.pressed_pages()
                ),
                "published zone figures"
            );
        }
        let mut live = 0u64;
        let mut bytes = 0u64;
        let (mut chained_segments, mut marked_segments) = (0u64, 0u64);
        for (p, page) in self.slabs.pages.iter().enumerate() {
            let Some(page) = page else { continue };
            if page.class == 0 {
                continue;
            }
            let mut class_live = 0;
            for loc in self.slabs.live_in_page(p as PageId) {
                let chunk = self.slabs.chunk(loc);
                let key = item::key(chunk);
                let h = hash(key);
                let st = self.stripe_ref(self.stripes.of(h));
                let found = st.index.find(h, |l| item::key(self.slabs.chunk(l)) == key);
                assert_eq!(found, Some(loc), "item indexed in its key's stripe");
                live += 1;
                class_live += 1;
                let total = item::Header::read(chunk).total_len();
                bytes += total as u64;
                if chain::is_head(chunk) {
                    let class = self.slabs.class_of(loc);
                    assert_eq!(
                        class + 1,
                        self.slabs.classes.len(),
                        "head in the largest class"
                    );
                    let list = chain::segment_locs(&self.slabs, loc);
                    assert_eq!(
                        list.len(),
                        chain::segments(total, chunk.len()),
                        "segment count"
                    );
                    for s in &list {
                        let seg = self.slabs.chunk(*s);
                        assert!(item::is_segment(seg), "segment marked");
                        assert_eq!(chain::owner(seg), loc, "segment owner");
                        assert_eq!(self.slabs.class_of(*s), class, "segment class");
                    }
                    chained_segments += list.len() as u64;
                } else {
                    assert_eq!(
                        self.slabs.class_for(total),
                        Some(page.class as usize - 1),
                        "item of {total} bytes in the class of its size"
                    );
                }
            }
            marked_segments += self.slabs.segments_in_page(p as PageId).len() as u64;
            assert!(class_live <= page.bump);
        }
        assert_eq!(chained_segments, marked_segments, "no stray segments");
        let counted: u64 = self.slabs.classes.iter().map(|c| c.segments).sum();
        assert_eq!(counted, marked_segments, "class segment counts");
        assert_eq!(live, self.counters.curr_items, "curr_items");
        assert_eq!(live as usize, indexed, "index len");
        assert_eq!(bytes, self.counters.bytes, "bytes");
        let used: u64 = self.slabs.classes.iter().map(|c| c.used).sum();
        assert_eq!(used, live, "class used counts");
        // Within `-m` and the pages granted beyond it (and a page while one
        // drains), or over them only by classes' floors.
        assert!(
            self.slabs.pages_allocated() * self.slabs.page_size + self.aux_bytes()
                <= self.memory_limit.max(self.slabs.page_size)
                    + self.allowance()
                    + self.drain_slack()
                || self.at_floors(),
            "memory budget: {} pages ({:?} per class), index {}, policy {}, rebalancer {}, zone {}, flash {}",
            self.slabs.pages_allocated(),
            self.slabs.classes.iter().map(|c| c.pages.len()).collect::<Vec<_>>(),
            self.index_bytes + self.index_grown.load(Ordering::Relaxed),
            self.policy.memory_bytes(),
            self.rebal.memory_bytes(),
            self.zone_memory(),
            self.flash.as_ref().map_or(0, |f| f.memory_bytes()),
        );
        self.policy.validate(&self.slabs);
        self.validate_drain();
    }
}
