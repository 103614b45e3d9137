//! The request side of `watch` (memcached's log watchers): what a handler
//! tells the watchers after a fetch, a store or a delete. The registry, its
//! kinds and the lines' format are in `watchers`; these take the request's
//! [`Ctx`], so they sit above `handler` while the registry sits below `stats`.

use cachalot_engine::engine::Lookup;
use cachalot_engine::{Store, StoreMode, StoreOutcome};

use crate::handler::Ctx;
use crate::watchers::{DELETIONS, FETCHERS, MUTATIONS};

/// `fetchers`: a client looked `key` up; `found` is the value's length and
/// flags when it was there.
pub fn fetched(ctx: &Ctx<'_>, key: &[u8], found: Option<(usize, u32)>) {
    if let Some(c) = &ctx.shared.capture {
        c.fetched(key, found.map(|(len, _)| len));
    }
    let w = &ctx.shared.watchers;
    if w.wants(FETCHERS) {
        let found = found.map(|(len, flags)| (ctx.cache.class_id(key.len(), len, flags), len));
        w.fetch(key, found, ctx.conn_id);
    }
}

/// `deletions`: `delete` or `md` (`cmd`) removed `key`, whose value of
/// `size` bytes was in slab class `class` (`described`: (class, size), when
/// the delete was asked to say; the watchers' line needs it).
pub fn deleted(ctx: &Ctx<'_>, key: &[u8], cmd: &str, described: Option<(u32, usize)>) {
    if let Some(c) = &ctx.shared.capture {
        c.deleted(key);
    }
    let w = &ctx.shared.watchers;
    if let (true, Some((class, size))) = (w.wants(DELETIONS), described) {
        w.deletion(key, cmd, class, size);
    }
}

/// `mutations`: a store of `value_len` bytes by command `cmd` ended with
/// `outcome`.
pub fn stored(ctx: &Ctx<'_>, req: &Store<'_>, cmd: &str, outcome: &StoreOutcome) {
    if let (Some(c), StoreOutcome::Stored { .. }) = (&ctx.shared.capture, outcome) {
        let append = matches!(req.mode, StoreMode::Append | StoreMode::Prepend);
        let ttl = ctx
            .cache
            .clock()
            .ttl_remaining(req.expiry)
            .clamp(0, u32::MAX as i64);
        let cost = req.cost.unwrap_or(0);
        c.stored(req.key, req.value.len(), append, ttl as u32, cost);
    }
    let w = &ctx.shared.watchers;
    if !w.wants(MUTATIONS) {
        return;
    }
    let status = match outcome {
        StoreOutcome::Stored { .. } => "stored",
        StoreOutcome::NotStored => "not_stored",
        StoreOutcome::Exists => "exists",
        StoreOutcome::NotFound => "not_found",
        StoreOutcome::TooLarge => "too_large",
        StoreOutcome::NoMemory => "no_memory",
    };
    // A stored item is described as it now is (an append's whole value and
    // the TTL it kept), a refused one as the request was.
    let mut shape = (req.value.len(), req.flags, req.expiry);
    if let StoreOutcome::Stored { .. } = outcome {
        // On flash, the request's shape (a parked look is not waited for).
        let now = ctx
            .get_or_park(req.key, Lookup::PEEK, |it| {
                it.map(|it| (it.value.len(), it.flags, it.expiry))
            })
            .flatten();
        shape = now.unwrap_or(shape);
    }
    let (len, flags, expiry) = shape;
    // memcached prints the seconds left, 0 for none.
    let ttl = ctx.cache.clock().ttl_remaining(expiry).max(0);
    let class = ctx.cache.class_id(req.key.len(), len, flags);
    w.store(req.key, status, cmd, ttl, class, ctx.conn_id, len);
}
