//! Two-stage garbage collection (SlimCache §3.6): below `w_high` free
//! slabs the oldest slab of the hot area (while it is over its share) or
//! else of the cold area is recycled. Locality-based recycling reads it
//! and moves the items read since they were written (cold to hot, hot
//! stays hot; hot ones not read again go back to cold); below `w_start`
//! a slab is dropped without reading (space-based eviction).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::container;
use super::counters::bump;
use super::device::ALIGN;
use super::dram::Writer;
use super::index::Loc;
use super::log::{rebase, SLAB};
use super::stage::Area;
use super::tier::Flash;
use crate::block;
use crate::item;

impl Flash {
    /// Keep at least `w_high` slabs free: recycle the oldest slab of the
    /// hot area while it is over its share, else of the cold area.
    pub(super) fn collect_garbage(&self, w: &mut Writer) {
        let (free, victim, area) = {
            let mut log = self.log.lock();
            let free = log.free.len();
            if free >= self.w_high {
                return;
            }
            let hot_cap = self.hot_target.load(Ordering::Relaxed);
            let area = if log.sealed(Area::Hot) > hot_cap || log.sealed(Area::Cold) == 0 {
                Area::Hot
            } else {
                Area::Cold
            };
            match log.oldest(area) {
                Some(v) => (free, v, area),
                None => return,
            }
        };
        bump(&self.counters.gc_recycled);
        if free < self.w_start || !self.recycle(w, victim, area) {
            // Space-based eviction (or a slab that could not be read):
            // everything in it goes, found by a walk of the index.
            bump(&self.counters.gc_evicted);
            self.evict_slab(victim);
        }
        self.release_slab(victim);
    }

    /// Locality-based recycling of `victim` (§3.6): read it; items read
    /// since they were written move (cold ones to the hot area, hot ones
    /// stay hot), the rest are dropped. False if the slab could not be
    /// read or a container in it failed its checks (then the caller drops
    /// whatever the index still has there).
    fn recycle(&self, w: &mut Writer, victim: u32, area: Area) -> bool {
        let (offsets, epoch) = {
            let log = self.log.lock();
            let m = &log.slabs[victim as usize];
            (m.offsets.clone(), m.epoch)
        };
        let this_run = self.clock.started_unix();
        let Some(&end) = offsets.last() else {
            return true;
        };
        let len = (end as usize).div_ceil(ALIGN) * ALIGN;
        if self
            .device
            .read_at(&mut w.gc.as_mut()[..len], victim as u64 * SLAB as u64)
            .is_err()
        {
            bump(&self.counters.io_errors);
            return false;
        }
        let mut clean = true;
        for (c, pair) in offsets.windows(2).enumerate() {
            let bytes = &w.gc.as_ref()[pair[0] as usize..pair[1] as usize];
            if container::read(bytes, &mut w.coder, |id| self.dictionary(id), &mut w.raw).is_err() {
                bump(&self.counters.read_errors);
                clean = false;
                continue;
            }
            let loc = Loc {
                slab: victim,
                container: c as u16,
            };
            let Ok(entries) = block::entries(&w.raw) else {
                clean = false;
                continue;
            };
            for e in entries {
                let Ok((h, image)) = e else {
                    clean = false;
                    break;
                };
                // Read since written: it stays (cold ones go hot); not
                // read: a hot one goes back to the cold area, compressed,
                // a cold one is dropped.
                let to = match (self.index.accessed(h, loc), area) {
                    (None, _) => continue,
                    (Some(true), _) => Area::Hot,
                    (Some(false), Area::Hot) => Area::Cold,
                    (Some(false), Area::Cold) => {
                        self.drop_item(h, loc);
                        continue;
                    }
                };
                // A moved item is rewritten under this run's clock.
                let mut image = image.to_vec();
                let now = self.clock.now();
                let live = rebase(&mut image, epoch, this_run)
                    && matches!(item::exptime(&image), e if e == 0 || e > now);
                if live {
                    match (area, to) {
                        (Area::Cold, _) => bump(&self.counters.gc_promoted),
                        (Area::Hot, Area::Cold) => bump(&self.counters.gc_demoted),
                        (Area::Hot, Area::Hot) => {}
                    }
                    let mut stage = self.stage.lock();
                    if stage.fits(image.len(), self.config.stage_bytes) {
                        stage.push(to, h, Arc::from(image), Some(loc));
                        continue;
                    }
                }
                self.drop_item(h, loc);
            }
        }
        clean
    }

    fn drop_item(&self, h: u64, loc: Loc) {
        if self.index.remove_at(h, loc).is_some() {
            bump(&self.counters.evictions);
        }
    }
}
