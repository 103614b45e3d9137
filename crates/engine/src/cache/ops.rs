//! The operations the server asks of the engine under its lock: each
//! [`Cache`] method here takes the engine lock for one operation, as the
//! handlers did themselves before (issue 33: "handlers go through `Cache`
//! alone"), and holds it no longer. The lock-free GET and SET paths are in
//! `cache.rs`; the multi-step changes of meta commands in `cache/meta.rs`.

use crate::api::{
    Arith, ArithOutcome, DeleteOutcome, Evicted, ItemRef, Lookup, ReassignOutcome, Store,
    StoreMode, StoreOutcome,
};
use crate::cache::Cache;
use crate::clock::{Expiry, RelTime};
use crate::config::ConfigError;
use crate::engine::maintain::MAINTAIN_SLICE;
use crate::slab::SlabClassStats;
use crate::stats::EngineStats;

/// What [`Cache::arith_or_add`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArithOrAdd {
    /// Changed: the new value and the item's CAS.
    Counted { value: u64, cas: u64 },
    /// Missing, so stored with the initial value (an `add`): its outcome.
    Added(StoreOutcome),
    /// Neither: why (never `Value`).
    Failed(ArithOutcome),
}

impl Cache {
    /// [`Engine::delete`](crate::Engine::delete).
    pub fn delete(&self, key: &[u8], cas: u64) -> DeleteOutcome {
        self.lock().delete(key, cas)
    }

    /// A delete whose item a watcher wants described: with `describe`, the
    /// item is looked at first (as `Lookup::PEEK`) and its slab class id and
    /// value length come back with the outcome (memcached's class numbers).
    pub fn delete_described(
        &self,
        key: &[u8],
        describe: bool,
    ) -> (DeleteOutcome, Option<(u32, usize)>) {
        let mut eng = self.lock();
        let shape = match describe {
            true => eng
                .lookup(key, Lookup::PEEK)
                .map(|it| (it.value.len(), it.flags)),
            false => None,
        };
        let outcome = eng.delete(key, 0);
        let class = shape.map(|(len, flags)| (eng.class_id(key.len(), len, flags), len));
        (outcome, class)
    }

    /// [`Engine::touch`], the item (None: a miss) handed to `f` under the
    /// lock, as [`Cache::get`] hands it.
    pub fn touch<R>(
        &self,
        key: &[u8],
        expiry: Expiry,
        f: impl FnOnce(Option<ItemRef<'_>>) -> R,
    ) -> R {
        f(self.lock().touch(key, expiry))
    }

    /// [`Engine::lookup`] with `Lookup::PEEK` (an item in the Z-zone moves
    /// to the N-zone, an expired one is removed), the item handed to `f`
    /// under the lock.
    pub fn peek<R>(&self, key: &[u8], f: impl FnOnce(Option<ItemRef<'_>>) -> R) -> R {
        f(self.lock().lookup(key, Lookup::PEEK))
    }

    /// [`Engine::arith`].
    pub fn arith(&self, key: &[u8], req: &Arith) -> ArithOutcome {
        self.lock().arith(key, req)
    }

    /// incr/decr as the binary protocol does it: a missing counter is
    /// created with `create`'s digits and expiry (an `add`), if given; the
    /// counter's CAS comes back with its value.
    pub fn arith_or_add(
        &self,
        key: &[u8],
        req: &Arith,
        create: Option<(&[u8], Expiry)>,
    ) -> ArithOrAdd {
        let mut eng = self.lock();
        match (eng.arith(key, req), create) {
            (ArithOutcome::Value { value, id }, _) => ArithOrAdd::Counted {
                value,
                cas: eng.item(id).cas,
            },
            (ArithOutcome::NotFound, Some((digits, expiry))) => {
                ArithOrAdd::Added(eng.store(&Store {
                    expiry,
                    mode: StoreMode::Add,
                    ..Store::set(key, digits)
                }))
            }
            (other, _) => ArithOrAdd::Failed(other),
        }
    }

    /// A text `cas` whose unique is 0: the engine reads 0 as "no check",
    /// memcached compares it with the item's CAS, which is never 0 unless
    /// CAS is off (`-C`): then it is a `replace` (NOT_STORED read as
    /// NOT_FOUND).
    pub fn store_cas_zero(&self, req: &Store<'_>) -> StoreOutcome {
        let mut eng = self.lock();
        if eng.config().cas_enabled {
            match eng.lookup(req.key, Lookup::PEEK) {
                Some(_) => StoreOutcome::Exists,
                None => StoreOutcome::NotFound,
            }
        } else {
            let replace = Store {
                mode: StoreMode::Replace,
                ..*req
            };
            match eng.store(&replace) {
                StoreOutcome::NotStored => StoreOutcome::NotFound,
                other => other,
            }
        }
    }

    /// [`Engine::flush_all`].
    pub fn flush_all(&self, at: Option<RelTime>) {
        self.lock().flush_all(at);
    }

    /// [`Engine::log_evictions`].
    pub fn log_evictions(&self, on: bool) {
        self.lock().log_evictions(on);
    }

    /// Log evictions while `watched`, and take those logged so far
    /// ([`Engine::take_evictions`]), in one lock round.
    pub fn evictions(&self, watched: bool) -> Vec<Evicted> {
        let mut eng = self.lock();
        eng.log_evictions(watched);
        eng.take_evictions()
    }

    /// [`Engine::set_eviction_tap`].
    pub fn set_eviction_tap(&self, tap: std::sync::Arc<dyn crate::api::EvictionTap>) {
        self.lock().set_eviction_tap(tap);
    }

    /// [`Engine::class_id`].
    pub fn class_id(&self, key_len: usize, value_len: usize, flags: u32) -> u32 {
        self.lock().class_id(key_len, value_len, flags)
    }

    /// [`Engine::memory_limit`].
    pub fn memory_limit(&self) -> usize {
        self.lock().memory_limit()
    }

    /// [`Engine::set_memory_limit`].
    pub fn set_memory_limit(&self, bytes: usize) -> Result<(), ConfigError> {
        self.lock().set_memory_limit(bytes)
    }

    /// [`Engine::slabs_reassign`].
    pub fn slabs_reassign(&self, src: i32, dst: i32) -> ReassignOutcome {
        self.lock().slabs_reassign(src, dst)
    }

    /// [`Engine::set_automove`].
    pub fn set_automove(&self, mode: u8) {
        self.lock().set_automove(mode);
    }

    /// [`Engine::maintain`] for the server's maintainer: a hold of the
    /// lock takes at most [`MAINTAIN_SLICE`] of work, and the rebalancing
    /// rule's arithmetic is done between two holds.
    pub fn maintain(&self, budget: usize) -> usize {
        let (done, plan) = self.lock().maintain_step(budget, Some(MAINTAIN_SLICE));
        if let Some(plan) = plan {
            let moves = plan.moves();
            self.lock().queue_moves(moves);
        }
        done
    }

    /// Whether the Z-zone is on.
    pub fn has_zone(&self) -> bool {
        self.shared.zone.is_some()
    }

    /// [`Engine::maintain_slices`].
    pub fn maintain_slices(&self) -> usize {
        self.lock().maintain_slices()
    }

    /// [`Engine::stats`].
    pub fn stats(&self) -> EngineStats {
        self.lock().stats()
    }

    /// [`Engine::slab_stats`].
    pub fn slab_stats(&self) -> Vec<SlabClassStats> {
        self.lock().slab_stats()
    }

    /// [`Engine::slab_stats`] and [`Engine::stats`] read in one lock round,
    /// so the totals agree with the classes.
    pub fn slab_and_engine_stats(&self) -> (Vec<SlabClassStats>, EngineStats) {
        let eng = self.lock();
        (eng.slab_stats(), eng.stats())
    }

    /// [`Engine::reset_stats`].
    pub fn reset_stats(&self) {
        self.lock().reset_stats();
        self.holds.reset();
        if let Some(z) = &self.shared.zone {
            z.holds().reset();
        }
    }

    /// [`Engine::size_histogram`].
    pub fn size_histogram(&self) -> Vec<(u32, u64)> {
        self.lock().size_histogram()
    }

    /// [`Engine::cachedump`].
    pub fn cachedump(
        &self,
        class_id: u32,
        limit: usize,
        max_bytes: usize,
    ) -> Vec<(Vec<u8>, usize, Expiry)> {
        self.lock().cachedump(class_id, limit, max_bytes)
    }
}
