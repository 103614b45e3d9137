//! GETs that may park on a flash read, as the handlers ask them: each
//! GET's answer says found, missed or parked (`Cache::get_or_park`), and a
//! parked one's read is recorded in the connection's reads
//! ([`Ctx::reads`]), for the network layer to do before it runs the request
//! again (`net/conn.rs`). A connection whose requests may not park
//! (`Ctx::reads` None) has its GETs read flash in place.

use std::ops::ControlFlow;

use cachalot_engine::engine::Lookup;
use cachalot_engine::flash::fetch::Got;
use cachalot_engine::ItemRef;

use crate::handler::Ctx;

impl Ctx<'_> {
    /// Look `key` (of hash `h`, which the caller passes on to the
    /// observers: `watch::fetched`) up (`Cache::get`) and hand the item
    /// (None: a miss) to `f`; None if the key may be on flash and the
    /// request is parked (the read is recorded; `f` did not run, nothing
    /// was written).
    #[inline]
    pub fn get_or_park<R>(
        &self,
        key: &[u8],
        h: u64,
        how: Lookup,
        f: impl FnOnce(Option<ItemRef<'_>>) -> R,
    ) -> Option<R> {
        self.prefetch_observed(h);
        let Some(reads) = self.reads else {
            return Some(self.cache.get_with_hash(key, h, how, f));
        };
        let mut reads = reads.borrow_mut();
        match self.cache.get_or_park(key, h, how, &mut reads, f) {
            Got::Done(r) => Some(r),
            Got::Parked(want) => {
                reads.want(want);
                None
            }
        }
    }

    /// A request for the key of hash `h` comes soon: start loading what the
    /// observers will touch for it, its entry in the live curve's sample
    /// if it has one (`Curve::prefetch`) and its hot keys' counters.
    #[inline]
    pub fn prefetch_observed(&self, h: u64) {
        if let Some(curve) = &self.shared.mrc {
            curve.prefetch(h);
        }
        self.stats.hot.prefetch(h);
    }

    /// Look several keys up (`Cache::get_batch`); stops at a key that may
    /// be on flash: its position then (its read recorded, `f` not run for
    /// it), None when the batch ran to its end or `f` stopped it.
    pub fn get_batch_or_park<'k>(
        &self,
        keys: &[&'k [u8]],
        how: Lookup,
        f: impl FnMut(usize, &'k [u8], u64, Option<ItemRef<'_>>) -> ControlFlow<()>,
    ) -> Option<usize> {
        let Some(reads) = self.reads else {
            self.cache.get_batch(keys, how, f);
            return None;
        };
        let mut reads = reads.borrow_mut();
        let (at, want) = self.cache.get_batch_or_park(keys, how, &mut reads, f)?;
        reads.want(want);
        Some(at)
    }

    /// Whether the request waits for flash reads (it parked).
    pub fn parked(&self) -> bool {
        self.reads.is_some_and(|r| r.borrow().parked())
    }

    /// A request parked: the reads these keys will want too, so they are
    /// done together (`Cache::want_from_flash`).
    pub fn want_from_flash(&self, keys: &[&[u8]]) {
        if let Some(reads) = self.reads {
            self.cache.want_from_flash(keys, &mut reads.borrow_mut());
        }
    }
}
