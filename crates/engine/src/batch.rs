//! MICA's batching: a multi-get's keys go [`LOOKUP_BATCH`] at a time, each
//! batch's keys hashed first, so that their index buckets and items can be
//! prefetched together before any of them is looked up (their memory loads
//! overlap). The one loop every batched lookup runs: the engine's under its
//! lock (`Engine::lookup_batch`), the cache's (`Cache::get_batch`) and the
//! prefetch of pipelined GETs (`Cache::prefetch_keys`).

use std::ops::ControlFlow;

use crate::api::LOOKUP_BATCH;
use crate::hash::hash;

/// Run `each` over `keys` in batches of up to [`LOOKUP_BATCH`]: the
/// position of the batch's first key, its keys and their hashes. Stops at
/// the first batch that breaks, with what it broke with.
#[inline]
pub(crate) fn batches<'k, B>(
    keys: &[&'k [u8]],
    mut each: impl FnMut(usize, &[&'k [u8]], &[u64]) -> ControlFlow<B>,
) -> ControlFlow<B> {
    let mut hashes = [0u64; LOOKUP_BATCH];
    for (b, batch) in keys.chunks(LOOKUP_BATCH).enumerate() {
        for (h, key) in hashes.iter_mut().zip(batch) {
            *h = hash(key);
        }
        each(b * LOOKUP_BATCH, batch, &hashes[..batch.len()])?;
    }
    ControlFlow::Continue(())
}
