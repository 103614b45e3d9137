//! What a handler tells the observers after a fetch, a store or a delete:
//! `watch` (memcached's log watchers), the hot keys (`hotkeys`), the live
//! miss-ratio curve (`mrc`) and the trace capture (`capture`); the key is
//! hashed once for all. The watchers' registry, kinds and lines are in
//! `watchers`; these take the request's [`Ctx`], so they sit above
//! `handler` while the registry sits below `stats`.

use cachalot_engine::engine::Lookup;
use cachalot_engine::hash::hash;
use cachalot_engine::mrc;
use cachalot_engine::{Store, StoreMode, StoreOutcome};

use crate::handler::Ctx;
use crate::hotkeys;
use crate::watchers::{DELETIONS, FETCHERS, MUTATIONS};

/// What the observers want of a request of `key`: its hash, when one of
/// them needs it (with all off, or the hot keys alone and this request
/// thinned out, a request hashes nothing more), and the weight the hot
/// keys count it with (None: not counted).
fn wanted(ctx: &Ctx<'_>, key: &[u8], h: Option<u64>) -> Option<(u64, Option<u32>)> {
    let hot = ctx.stats.hot.pick();
    let on = hot.is_some() || ctx.shared.mrc.is_some() || ctx.shared.capture.is_some();
    on.then(|| (h.unwrap_or_else(|| hash(key)), hot))
}

/// The hot keys: a request of `key` (hash `h`) did `access`, counted with
/// weight `w` if [`wanted`] picked it.
fn count_hot(ctx: &Ctx<'_>, key: &[u8], h: u64, w: Option<u32>, access: hotkeys::Access) {
    if let Some(w) = w {
        ctx.stats.hot.count(ctx.cache.clock(), h, key, access, w);
    }
}

/// Tell the live miss-ratio curve (`stats mrc`) what a request did to
/// `key` (of hash `h`), with its prefix when prefix stats are on.
fn observe_curve(ctx: &Ctx<'_>, key: &[u8], h: u64, access: mrc::Access) {
    if let Some(curve) = &ctx.shared.mrc {
        let prefixes = &ctx.shared.prefixes;
        let part = || {
            let p = crate::prefixes::prefix_of(key, prefixes.delimiter());
            prefixes.enabled().then(|| prefixes.id(p))
        };
        curve.record(h, access, ctx.cache.clock().now(), part);
    }
}

/// `fetchers`: a client looked `key` up (its hash `h`, if the caller has
/// it); `found` is the value's length and flags when it was there.
pub fn fetched(ctx: &Ctx<'_>, key: &[u8], h: Option<u64>, found: Option<(usize, u32)>) {
    if let Some((h, weight)) = wanted(ctx, key, h) {
        let (hot, curve) = match found {
            Some((len, _)) => (
                hotkeys::Access::Hit { size: len as u32 },
                mrc::Access::Hit {
                    size: mrc::item_size(key.len(), len),
                },
            ),
            None => (hotkeys::Access::Miss, mrc::Access::Miss),
        };
        count_hot(ctx, key, h, weight, hot);
        observe_curve(ctx, key, h, curve);
        if let Some(c) = &ctx.shared.capture {
            c.fetched(h, key, found.map(|(len, _)| len));
        }
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
    if let Some((h, weight)) = wanted(ctx, key, None) {
        if let Some(c) = &ctx.shared.capture {
            c.deleted(h, key);
        }
        count_hot(ctx, key, h, weight, hotkeys::Access::Other);
        observe_curve(ctx, key, h, mrc::Access::Delete);
    }
    let w = &ctx.shared.watchers;
    if let (true, Some((class, size))) = (w.wants(DELETIONS), described) {
        w.deletion(key, cmd, class, size);
    }
}

/// `mutations`: a store of `value_len` bytes by command `cmd` ended with
/// `outcome`.
pub fn stored(ctx: &Ctx<'_>, req: &Store<'_>, cmd: &str, outcome: &StoreOutcome) {
    if let Some((h, weight)) = wanted(ctx, req.key, None) {
        let size = req.value.len() as u32;
        count_hot(ctx, req.key, h, weight, hotkeys::Access::Store { size });
        if let StoreOutcome::Stored { .. } = outcome {
            let size = mrc::item_size(req.key.len(), req.value.len());
            observe_curve(ctx, req.key, h, mrc::Access::Store { size });
            if let Some(c) = &ctx.shared.capture {
                let append = matches!(req.mode, StoreMode::Append | StoreMode::Prepend);
                let ttl = ctx
                    .cache
                    .clock()
                    .ttl_remaining(req.expiry)
                    .clamp(0, u32::MAX as i64);
                let cost = req.cost.unwrap_or(0);
                c.stored(h, req.key, req.value.len(), append, ttl as u32, cost);
            }
        }
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
            .get_or_park(req.key, hash(req.key), Lookup::PEEK, |it| {
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
