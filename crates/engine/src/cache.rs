//! The engine shared by all worker threads, and the GET and SET paths that
//! do not take its lock (issue 10).
//!
//! Most changes to the cache go through [`Cache::lock`]: the engine lock,
//! then whatever index stripes the operation touches (`crate::stripe`).
//! A plain SET ([`Cache::store`]) holds only its key's stripe when it can
//! rewrite the key's item in its chunk, or when the key is new and its
//! thread has a chunk of the item's class reserved (`crate::magazine`),
//! which the engine refills up to 32 chunks at a time. A plain GET
//! ([`Cache::get`]) only reads its key's stripe, with the distributed
//! reader lock of `stripe`: it finds the item in the stripe's index, reads
//! it in place, sets its access bits and copies the value out while its
//! thread's slot says it is reading. GETs share only read-only
//! lines: a hit writes its thread's slot and hit counter and, the first time
//! after the CLOCK hand passed (or once a second), the item's access byte
//! and time. What needs the engine's structures goes to the locked
//! path instead: expired items (removed), chained items, a pending delayed
//! flush that is due, keys the MRC profile samples, and everything under
//! policies that count every GET (eager GD-Wheel, SAS, learned costs).

pub mod dump;
pub mod meta;
pub mod ops;

use std::mem::ManuallyDrop;
use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crate::api::{ItemId, ItemRef, Lookup, Store, StoreMode, StoreOutcome};
use crate::batch::batches;
use crate::chain::Value;
use crate::clock::{Clock, RelTime};
use crate::config::{Config, ConfigError};
use crate::engine::Engine;
use crate::flash::fetch::{Fetches, FlashStep, Got, Want};
use crate::flash::{Cursor, Step};
use crate::hash::hash;
use crate::holds::{HoldStats, Holder, Holds};
use crate::inplace::{rewrite, Rewrite};
use crate::item;
use crate::rebalance::profile::is_sampled;
use crate::rebalance::HitGate;
use crate::shared::Shared;
use crate::slab::split_loc;
use crate::stripe::WriteGuard;
use crate::zzone::flush::Job;
use crate::zzone::WriterStep;

/// Why a SET needs the engine lock after all ([`Cache::try_store`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// The engine does the SET (a new key's first page, another class,
    /// an expired item, a sampled key, a CAS, ...).
    Engine,
    /// A new key, but its thread has no chunk reserved in its class: the
    /// engine reserves some for magazine `slot`, then does the SET.
    Refill { slot: usize, class: usize },
    /// Stored, and the index grew by another `SETTLE_BYTES`: the engine
    /// checks the memory limit.
    Settle(StoreOutcome),
}

/// The cache lines a GET reads or writes that belong to the data (issue
/// 10's "lines touched per GET", Cavast section 3): those a large data set
/// leaves out of the CPU caches. The rest are the same few lines for every
/// GET, so always cached: the thread's reader slot and hit counters, the
/// stripe's writer flag and index header, the flush time and the clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Index lines read to the item's slot (to giving up, on a miss).
    pub index: usize,
    /// Lines of the item: its header, flags and key (compared) and its
    /// value (copied out); for a chained item, all of its chunks (an upper
    /// bound). 0 on a miss.
    pub item: usize,
}

/// 64-byte lines spanned by `len` bytes from offset `at` of a page (pages
/// are 2 MB-aligned, so offsets align as addresses do).
fn lines(at: usize, len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    (at + len - 1) / 64 - at / 64 + 1
}

/// Index growth by SETs without the engine lock after which the engine
/// checks the memory limit (`Fallback::Settle`): the most the index can
/// exceed `-m` by meanwhile (it counts the growth at once).
const SETTLE_BYTES: usize = 64 << 10;

/// Chunks of `chunk_size` bytes a refill reserves for a thread: about 16
/// KB worth (so a thread holds back little memory), 1 to 32 chunks.
fn refill_size(chunk_size: u32) -> usize {
    (16384 / chunk_size as usize).clamp(1, 32)
}

/// A thread's means to decode Z-zone blocks outside any lock.
#[derive(Default)]
struct ZoneReader {
    coder: crate::codec::Coder,
    copied: crate::zzone::Copied,
    raw: Vec<u8>,
}

thread_local! {
    static ZONE_READER: std::cell::RefCell<ZoneReader> = std::cell::RefCell::default();
    /// The image a flash lookup found (staged or read).
    static FLASH_IMAGE: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::default();
}

/// Where a GET stands after the N-zone (`Cache::get_hashed`).
enum Tier<R, F> {
    /// Found there: what `f` made of it.
    Hit(R),
    /// Not there: `f` back, to look in the next tier, and the time the GET
    /// started.
    Miss(F, RelTime),
    /// The engine must do this GET, under its lock.
    Locked(F),
}

/// Writer steps a thread does at most after a hold of the engine lock
/// that left the Z-zone's stage over its limit ([`Cache::help_zone_writer`]).
const HELP_STEPS: usize = 4;

/// An install of the Z-zone writer's that took longer than this leaves
/// the next step to a hold of its own: an install is 5-15 µs, the step
/// after it (the next flush's copy out) 5-8 µs, and together they were
/// the zone's only regular holds over 16 µs (issue 34).
const SHARED_HOLD: std::time::Duration = std::time::Duration::from_micros(8);

/// The engine shared by all worker threads.
pub struct Cache {
    /// A futex lock (std's): a waiter spins briefly, then sleeps, and the
    /// holder's release wakes it. parking_lot's spins with `sched_yield`,
    /// and a yielding waiter let the `SCHED_IDLE` Z-zone writer run to the
    /// next scheduler tick (measured: workers runnable for 5 ms behind it).
    engine: std::sync::Mutex<Engine>,
    /// How long the engine lock is held, by requests and background work.
    holds: Holds,
    clock: Arc<Clock>,
    /// A copy of the engine's configuration, for what it alone decides.
    config: Config,
    shared: Shared,
    /// A Z-zone dictionary being trained by a thread of its own
    /// ([`Cache::train_zone_in_background`]).
    training: std::sync::Mutex<Option<std::thread::JoinHandle<Option<Vec<u8>>>>>,
}

/// The engine, locked; gives back the stripes the operation took when
/// dropped, and counts the hold (`holds`).
pub struct EngineGuard<'a> {
    /// Dropped in `drop` before the pages it gave back are released.
    engine: ManuallyDrop<std::sync::MutexGuard<'a, Engine>>,
    /// A background thread's hold at the lock's ceiling
    /// (`crate::priority`): dropped after `engine`, the lock released.
    raised: Option<crate::priority::Raised>,
    cache: &'a Cache,
    since: crate::holds::HoldStart,
}

impl std::ops::Deref for EngineGuard<'_> {
    type Target = Engine;
    fn deref(&self) -> &Engine {
        &self.engine
    }
}

impl std::ops::DerefMut for EngineGuard<'_> {
    fn deref_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }
}

impl Drop for EngineGuard<'_> {
    fn drop(&mut self) {
        self.engine.release_stripes();
        let released = self.engine.take_released_pages();
        self.cache.holds.record(self.since);
        // SAFETY: `engine` is dropped here, once, and not used after.
        unsafe { ManuallyDrop::drop(&mut self.engine) };
        drop(self.raised.take());
        #[cfg(debug_assertions)]
        ENGINE_LOCKED.set(ENGINE_LOCKED.get() - 1);
        // Without the lock: the memory of the pages given back, and the
        // Z-zone's stage packed if this hold's demotions filled it.
        if let Some((arena, ids)) = released {
            arena.release_later(ids);
        }
        self.cache.help_zone_writer();
    }
}

#[cfg(debug_assertions)]
thread_local! {
    /// Engine guards this thread holds: a GET made meanwhile could wait
    /// forever for a stripe its own engine guard acquired.
    static ENGINE_LOCKED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

impl Cache {
    pub fn new(config: Config, clock: Arc<Clock>) -> Result<Cache, ConfigError> {
        let engine = Engine::new(config.clone(), clock.clone())?;
        Ok(Self::with_engine(engine, config, clock))
    }

    /// A cache whose flash tier uses `device` ([`Engine::with_device`]).
    pub fn with_device(
        config: Config,
        clock: Arc<Clock>,
        device: Arc<dyn crate::flash::device::Device>,
    ) -> Result<Cache, ConfigError> {
        let engine = Engine::with_device(config.clone(), clock.clone(), Some(device))?;
        Ok(Self::with_engine(engine, config, clock))
    }

    fn with_engine(mut engine: Engine, config: Config, clock: Arc<Clock>) -> Cache {
        engine.defer_page_release();
        let shared = engine.shared();
        Cache {
            engine: std::sync::Mutex::new(engine),
            holds: Holds::default(),
            clock,
            config,
            shared,
            training: std::sync::Mutex::new(None),
        }
    }

    /// [`Engine::fits`], without taking the lock: a SET checks its size
    /// before reading its value, and that should not cost a lock round.
    pub fn fits(&self, key_len: usize, value_len: usize, flags: u32) -> bool {
        crate::api::fits(&self.config, key_len, value_len, flags)
    }

    /// Lock the engine. Hold the guard only for engine work and copying out
    /// values, never across socket reads or writes. The server never calls
    /// this: its handlers go through the `Cache` methods that take the lock
    /// for one operation each (`cache/ops.rs`, `cache/meta.rs`); it stays
    /// public for the lab's benchmarks and the engine's tests, which drive
    /// the engine directly.
    #[inline]
    pub fn lock(&self) -> EngineGuard<'_> {
        // A panic under the lock leaves the engine as parking_lot's would:
        // every operation keeps its invariants step by step.
        let raised = crate::priority::Raised::new();
        let engine = self.engine.lock().unwrap_or_else(|e| e.into_inner());
        let guard = EngineGuard {
            engine: ManuallyDrop::new(engine),
            raised: Some(raised),
            cache: self,
            since: crate::holds::HoldStart::now(),
        };
        #[cfg(debug_assertions)]
        ENGINE_LOCKED.set(ENGINE_LOCKED.get() + 1);
        guard
    }

    pub fn clock(&self) -> &Arc<Clock> {
        &self.clock
    }

    /// How long the locks requests need have been held (`stats locks`):
    /// for each lock (the engine's; the Z-zone's, if on), by each kind of
    /// holder.
    pub fn lock_holds(&self) -> Vec<(&'static str, Holder, HoldStats)> {
        let mut locks = vec![("engine", &self.holds)];
        if let Some(z) = &self.shared.zone {
            locks.push(("zzone", z.holds()));
        }
        let mut out = Vec::new();
        for (name, holds) in locks {
            for holder in Holder::ALL {
                out.push((name, holder, holds.stats(holder)));
            }
        }
        out
    }

    /// [`Engine::store`]. A plain SET of a key whose item it can overwrite
    /// in place (same slab class, see `inplace::Head::rewritable`), and a SET or
    /// ADD of a new key while its thread has a chunk reserved in the item's
    /// class (`magazine`), hold only the key's stripe; anything else takes
    /// the engine lock. The thread must not hold the engine lock already.
    pub fn store(&self, req: &Store<'_>) -> StoreOutcome {
        match self.try_store(req) {
            Ok(outcome) => outcome,
            Err(fallback) => self.finish_store(&mut self.lock(), req, fallback),
        }
    }

    /// The engine's part of a SET that [`Cache::try_store`] could not do
    /// alone, under the engine lock (`engine`, from [`Cache::lock`]).
    pub fn finish_store(
        &self,
        engine: &mut Engine,
        req: &Store<'_>,
        fallback: Fallback,
    ) -> StoreOutcome {
        match fallback {
            Fallback::Engine => engine.store(req),
            Fallback::Refill { slot, class } => {
                engine.refill(slot, class, refill_size(self.shared.class_sizes[class]));
                engine.store(req)
            }
            Fallback::Settle(outcome) => {
                engine.settle();
                outcome
            }
        }
    }

    /// The SET without the engine lock, or why the engine must do it.
    pub fn try_store(&self, req: &Store<'_>) -> Result<StoreOutcome, Fallback> {
        #[cfg(debug_assertions)]
        assert_eq!(
            ENGINE_LOCKED.get(),
            0,
            "Cache::store while this thread holds the engine lock"
        );
        let sh = &self.shared;
        if !sh.rewrites
            || !matches!(req.mode, StoreMode::Set | StoreMode::Add)
            || req.cas != 0
            || req.new_cas.is_some()
            || req.invalidate
            || !self.fits(req.key.len(), req.value.len(), req.flags)
        {
            return Err(Fallback::Engine);
        }
        let h = hash(req.key);
        let now = self.clock.now();
        if sh.flush_due(now)
            || sh
                .store_gate
                .as_ref()
                .is_some_and(|t| is_sampled(h, t.load(Ordering::Relaxed)))
        {
            return Err(Fallback::Engine);
        }
        let stripe = sh.stripes.write(sh.stripes.of(h));
        let Some((_, head)) = sh.find(&stripe, h, req.key) else {
            return self.insert(stripe, h, req, now);
        };
        let old = &head.header;
        if req.mode != StoreMode::Set || (old.exptime != 0 && old.exptime <= now) {
            return Err(Fallback::Engine);
        }
        let new = Rewrite {
            value: req.value,
            flags: req.flags,
            exptime: crate::api::exptime_of(req.expiry),
            cost: item::quantize_cost(req.cost.unwrap_or(1)),
        };
        let prev = match head.class {
            0 => 0,
            c => sh.class_sizes[c - 1] as usize,
        };
        let total = head.rewritable(&new, prev).ok_or(Fallback::Engine)?;
        let cas = item::next_cas(&sh.cas_counter);
        // SAFETY: we hold the stripe for writing and `rewritable` agreed.
        unsafe { rewrite(&sh.arena, &head, &new, cas, now) };
        stripe
            .pending()
            .stored(head.class, total as i64 - old.total_len() as i64);
        Ok(StoreOutcome::Stored {
            cas: if sh.cas_enabled { cas } else { 0 },
        })
    }

    /// Store `req`'s key, which `stripe` (held) does not have, in a chunk
    /// reserved for this thread: write the item, index it, count it in
    /// the stripe's pending counters, then set its LIVE bit.
    fn insert(
        &self,
        mut stripe: WriteGuard<'_>,
        h: u64,
        req: &Store<'_>,
        now: u32,
    ) -> Result<StoreOutcome, Fallback> {
        let sh = &self.shared;
        // A resizing index moves other items' entries: the engine's work.
        if !sh.inserts || stripe.index.is_expanding() {
            return Err(Fallback::Engine);
        }
        let total = item::total_len(req.key.len(), req.value.len(), req.flags);
        let class = sh.class_sizes.partition_point(|&c| (c as usize) < total);
        if class == sh.class_sizes.len() {
            return Err(Fallback::Engine); // chained
        }
        let slot = sh.stripes.my_slot().ok_or(Fallback::Engine)?;
        // Held until the item is linked, so the engine cannot take the
        // chunk back half written (it waits; we wait for nothing).
        let mut magazine = sh.magazines.try_lock(slot).ok_or(Fallback::Engine)?;
        let loc = magazine
            .pop(class)
            .ok_or(Fallback::Refill { slot, class })?;
        let cost = item::quantize_cost(req.cost.unwrap_or(1));
        let cas = item::next_cas(&sh.cas_counter);
        let header = item::Header {
            cas,
            atime: item::atime_code(now),
            cost,
            bits: item::LIVE,
            exptime: crate::api::exptime_of(req.expiry),
            key_len: req.key.len() as u8,
            value_len: req.value.len() as u32,
        };
        let (page, chunk) = split_loc(loc, sh.chunk_bits);
        let start = chunk as usize * sh.class_sizes[class] as usize;
        debug_assert_eq!(
            sh.arena.geometry(page),
            Some((class, sh.class_sizes[class]))
        );
        let (head, head_len) = item::head_bytes(&header, req.flags);
        // SAFETY: the chunk was reserved for this thread (taken from its
        // magazine, which it holds): nobody else writes it, and the engine
        // reads only its access byte (byte 7, atomically) until LIVE is
        // set there, which we do last.
        unsafe {
            sh.arena
                .bytes_mut(page, start, 7)
                .copy_from_slice(&head[..7]);
            sh.arena
                .bytes_mut(page, start + 8, head_len - 8)
                .copy_from_slice(&head[8..head_len]);
            let at = start + head_len;
            sh.arena
                .bytes_mut(page, at, req.key.len())
                .copy_from_slice(req.key);
            sh.arena
                .bytes_mut(page, at + req.key.len(), req.value.len())
                .copy_from_slice(req.value);
        }
        let index = stripe.index_mut();
        let before = index.memory_bytes();
        if !index.insert_fixed(h, loc) {
            magazine.push(class, loc);
            return Err(Fallback::Engine);
        }
        // The index may have grown (a segment allocated, a pool grown):
        // the engine counts it in `-m` from `index_grown`, and checks the
        // limit each time another SETTLE_BYTES have piled up there.
        let grown = index.memory_bytes().saturating_sub(before);
        let settle = grown > 0 && {
            let was = sh.index_grown.fetch_add(grown, Ordering::Relaxed);
            (was + grown) / SETTLE_BYTES != was / SETTLE_BYTES
        };
        stripe
            .pending()
            .linked(class, total as u64, item::dequantize_cost(cost) as u64);
        sh.arena
            .atomic(page, start + 7)
            .store(head[7], Ordering::Release);
        drop(magazine);
        drop(stripe);
        let outcome = StoreOutcome::Stored {
            cas: if sh.cas_enabled { cas } else { 0 },
        };
        match settle {
            false => Ok(outcome),
            true => Err(Fallback::Settle(outcome)),
        }
    }

    /// Look `key` up as [`Engine::lookup`] does and hand the item (None: a
    /// miss) to `f`, which copies what it needs. A plain GET only reads
    /// the key's stripe; anything else takes the engine lock. `f` runs
    /// while the stripe is read or the lock held: it must not block, and
    /// the thread must not hold the engine lock (`Cache::lock`) already.
    /// An item on flash is read there before `f` runs.
    #[inline]
    pub fn get<R>(&self, key: &[u8], how: Lookup, f: impl FnOnce(Option<ItemRef<'_>>) -> R) -> R {
        self.get_with_hash(key, hash(key), how, f)
    }

    /// [`Cache::get`] of a key whose hash the caller has (`h` is
    /// `hash(key)`): a request that tells observers of the key too hashes
    /// it once.
    #[inline]
    pub fn get_with_hash<R>(
        &self,
        key: &[u8],
        h: u64,
        how: Lookup,
        f: impl FnOnce(Option<ItemRef<'_>>) -> R,
    ) -> R {
        debug_assert_eq!(h, hash(key));
        match self.get_hashed(key, h, how, None, f) {
            Got::Done(r) => r,
            Got::Parked(_) => unreachable!("only a caller with reads parks"),
        }
    }

    /// [`Cache::get`] for a request that may park (`flash::fetch`): a key
    /// that may be on flash and is not among `reads`' completed reads is
    /// not read, and the answer is [`Got::Parked`] with the read to do
    /// (`f` is not called).
    #[inline]
    pub fn get_or_park<R>(
        &self,
        key: &[u8],
        h: u64,
        how: Lookup,
        reads: &mut Fetches,
        f: impl FnOnce(Option<ItemRef<'_>>) -> R,
    ) -> Got<R> {
        debug_assert_eq!(h, hash(key));
        self.get_hashed(key, h, how, Some(reads), f)
    }

    /// The tier chain of a GET, the one walk down the tiers every GET
    /// takes: the N-zone, then the Z-zone, then flash, which re-caches
    /// what it reads again soon (`read_flash`). A GET the engine must do
    /// (`read_n_zone` says which) looks in the N-zone under the engine
    /// lock (`Engine::read_n_zone`), and goes on down the same chain
    /// without it; its miss is counted once both memory tiers missed
    /// (`Engine::missed`).
    #[inline]
    fn get_hashed<R>(
        &self,
        key: &[u8],
        h: u64,
        how: Lookup,
        reads: Option<&mut Fetches>,
        f: impl FnOnce(Option<ItemRef<'_>>) -> R,
    ) -> Got<R> {
        let (f, now) = match self.read_n_zone(key, h, how, f) {
            Tier::Hit(r) => return Got::Done(r),
            Tier::Miss(f, now) => match self.read_zone(key, h, how, now, f) {
                Ok(r) => return Got::Done(r),
                Err(f) => (f, now),
            },
            Tier::Locked(mut f) => {
                let mut engine = self.lock();
                if let Some(item) = engine.read_n_zone(key, h, how) {
                    return Got::Done(f(Some(item)));
                }
                let now = self.clock.now();
                // The Z-zone is read as by a lock-free GET, without the
                // engine lock; a miss there is counted under it again.
                if self.shared.zone.is_some() {
                    drop(engine);
                    f = match self.read_zone(key, h, how, now, f) {
                        Ok(r) => return Got::Done(r),
                        Err(f) => f,
                    };
                    engine = self.lock();
                }
                engine.missed(h, how);
                drop(engine);
                (f, now)
            }
        };
        self.read_flash(key, h, now, reads, f)
    }

    /// Look several keys up, as a multi-get does: each as by [`Cache::get`],
    /// with their memory loads overlapped as in [`Engine::lookup_batch`]
    /// (MICA's batching), which does the whole batch under the engine lock
    /// when GETs need it anyway: [`LOOKUP_BATCH`](crate::api::LOOKUP_BATCH) keys at a time, every
    /// key's index bucket is prefetched, then the item its tag points at
    /// (unless the batch is one key), then the keys are looked up in order.
    /// `f` gets each key's position and may stop the batch before the next
    /// key.
    pub fn get_batch<'k>(
        &self,
        keys: &[&'k [u8]],
        how: Lookup,
        f: impl FnMut(usize, &'k [u8], u64, Option<ItemRef<'_>>) -> ControlFlow<()>,
    ) {
        let _ = self.batch(keys, how, None, f);
    }

    /// [`Cache::get_batch`] for a request that may park, as
    /// [`Cache::get_or_park`]: the batch stops at the first key that parks,
    /// and its position and the read it wants come back (`f` was not called
    /// for it).
    pub fn get_batch_or_park<'k>(
        &self,
        keys: &[&'k [u8]],
        how: Lookup,
        reads: &mut Fetches,
        f: impl FnMut(usize, &'k [u8], u64, Option<ItemRef<'_>>) -> ControlFlow<()>,
    ) -> Option<(usize, Want)> {
        self.batch(keys, how, Some(reads), f)
    }

    fn batch<'k>(
        &self,
        keys: &[&'k [u8]],
        how: Lookup,
        mut reads: Option<&mut Fetches>,
        mut f: impl FnMut(usize, &'k [u8], u64, Option<ItemRef<'_>>) -> ControlFlow<()>,
    ) -> Option<(usize, Want)> {
        // A key that misses the N-zone is read in the Z-zone and on flash
        // without the lock, so with either tier keys go one at a time.
        let sh = &self.shared;
        if !self.lock_free(how) && sh.flash.is_none() && sh.zone.is_none() {
            self.lock().lookup_batch(keys, how, f);
            return None;
        }
        let stopped = batches(keys, |at, batch, hashes| {
            // One key (a plain `get`): nothing to overlap its loads with.
            if batch.len() > 1 {
                self.prefetch(hashes);
            }
            for (i, (&key, &h)) in batch.iter().zip(hashes).enumerate() {
                let (at, reads) = (at + i, reads.as_deref_mut());
                match self.get_hashed(key, h, how, reads, |item| f(at, key, h, item)) {
                    Got::Done(ControlFlow::Continue(())) => {}
                    Got::Done(ControlFlow::Break(())) => return ControlFlow::Break(None),
                    Got::Parked(want) => return ControlFlow::Break(Some((at, want))),
                }
            }
            ControlFlow::Continue(())
        });
        match stopped {
            ControlFlow::Break(parked) => parked,
            ControlFlow::Continue(()) => None,
        }
    }

    /// Start loading the index buckets and items of `keys` into the CPU
    /// cache for GETs that follow soon (MICA's batching across requests:
    /// the server calls this for the single-key GETs pipelined behind the
    /// one it serves, so their memory loads overlap). A hint only; `also`
    /// is given each key's hash, for the caller's own prefetches.
    pub fn prefetch_keys(&self, keys: &[&[u8]], mut also: impl FnMut(u64)) {
        let _ = batches::<()>(keys, |_, _, hashes| {
            self.prefetch(hashes);
            hashes.iter().for_each(|&h| also(h));
            ControlFlow::Continue(())
        });
    }

    /// Prefetch the segment descriptors of `hashes`, then their index
    /// buckets, then the item each one's first tag points at
    /// (`get_batch`): three passes, so that each pass's loads overlap. All
    /// under one hold of every stripe: a stripe's read is a full fence,
    /// which kept a batch's loads from overlapping (16-deep pipelined GET
    /// hits: 1.08 x the requests/s, docs/benchmarks.md). A hint only: with
    /// a writer in any stripe now, nothing is prefetched.
    fn prefetch(&self, hashes: &[u64]) {
        let sh = &self.shared;
        let Some(all) = sh.stripes.read_all() else {
            return;
        };
        let index = |h| &all.stripe(sh.stripes.of(h)).index;
        hashes.iter().for_each(|&h| index(h).prefetch_segment(h));
        hashes.iter().for_each(|&h| index(h).prefetch(h));
        for &h in hashes {
            if let Some(loc) = index(h).find(h, |_| true) {
                let (page, chunk) = split_loc(loc, sh.chunk_bits);
                sh.arena.prefetch_chunk(page, chunk);
            }
        }
    }

    /// The lines a GET of `key` touches ([`Footprint`]), found as the GET
    /// path finds them, without counting or bumping anything.
    pub fn footprint(&self, key: &[u8]) -> Footprint {
        let sh = &self.shared;
        let h = hash(key);
        let Some(stripe) = sh.stripes.read(sh.stripes.of(h)) else {
            return Footprint::default();
        };
        let Some((loc, head)) = sh.find(&stripe, h, key) else {
            return Footprint {
                index: stripe.index.probe_lines(h, None),
                item: 0,
            };
        };
        let total = head.header.total_len();
        let item = if total <= head.chunk_size {
            lines(head.start, total)
        } else {
            // Chained: the head chunk whole, then segments of the same size.
            total.div_ceil(head.chunk_size) * lines(0, head.chunk_size)
        };
        Footprint {
            index: stripe.index.probe_lines(h, Some(loc)),
            item,
        }
    }

    /// The tier that holds `key` now (`stats hotkeys`), looked up as a
    /// PEEK: nothing is counted, bumped or promoted, and flash is not read
    /// (its index's tag match is taken as the answer, so a rare false
    /// "flash" is possible).
    pub fn tier_of(&self, key: &[u8]) -> Option<crate::api::Tier> {
        use crate::api::Tier as Where;
        let h = hash(key);
        let found = |it: Option<ItemRef<'_>>| it.is_some();
        let in_memory = match self.read_n_zone(key, h, Lookup::PEEK, found) {
            Tier::Hit(hit) => hit,
            Tier::Miss(..) => false,
            Tier::Locked(_) => self.lock().read_n_zone(key, h, Lookup::PEEK).is_some(),
        };
        if in_memory {
            return Some(Where::Memory);
        }
        if let Ok(true) = self.read_zone(key, h, Lookup::PEEK, self.clock.now(), found) {
            return Some(Where::Zzone);
        }
        let flash = self.shared.flash.as_ref()?;
        flash.may_hold(h, key).then_some(Where::Flash)
    }

    /// A GET that missed the N-zone, without the engine lock: the block
    /// that may hold the key is copied under the Z-zone's lock and decoded
    /// without it (no request waits on another's decompression); a hit
    /// whose reuse time beats the benchmark is promoted afterwards, under
    /// the engine lock.
    fn read_zone<R, F: FnOnce(Option<ItemRef<'_>>) -> R>(
        &self,
        key: &[u8],
        h: u64,
        how: Lookup,
        now: crate::clock::RelTime,
        f: F,
    ) -> Result<R, F> {
        let Some(zone) = &self.shared.zone else {
            return Err(f);
        };
        let read = how.bump && how.fetch;
        ZONE_READER.with_borrow_mut(|z| {
            let Some(promote) = zone.lock().copy_block(h, read, &mut z.copied) else {
                return Err(f);
            };
            // An item stored apart: its record copied under the lock too,
            // decoded without it.
            let fetch = |stub, record: &mut _| zone.lock().copy_record(stub, record);
            let found = z
                .copied
                .find(&mut z.coder, &mut z.raw, h, key, fetch)
                .filter(|image| {
                    let exp = item::exptime(image);
                    exp == 0 || exp > now
                });
            if read {
                zone.lock().note_read(h, found.is_some());
            }
            match found {
                Some(image) => {
                    // A block is not rewritten for a read, so a first fetch
                    // is marked only if the item is promoted: promoting
                    // every first fetch turned a scan of the zone into a
                    // flood of promotions that evicted half of it (a
                    // capacity fill's read-back found 536,936 of 1,007,356
                    // protobuf-like items). docs/protocol.md says so.
                    let first = how.fetch && item::bits(image) & item::FETCHED == 0;
                    let item = crate::api::image_view(image, self.shared.cas_enabled, now);
                    let r = f(Some(item));
                    if promote {
                        // Promoted from the image decoded here, not
                        // decoded again under the locks.
                        self.lock().promote_read(key, first, z.copied.known(image));
                    }
                    z.copied.trim(&mut z.raw);
                    Ok(r)
                }
                None => {
                    z.copied.trim(&mut z.raw);
                    Err(f)
                }
            }
        })
    }

    /// A GET that missed memory: the flash tier, if on. Its stage is
    /// looked at, then its index; an item possibly on flash is read now,
    /// or, for a caller with `reads` (a request that may park), taken from
    /// its completed reads or else answered [`Got::Parked`] with the read
    /// to do (`flash::fetch`). No lock is held.
    fn read_flash<R>(
        &self,
        key: &[u8],
        h: u64,
        now: crate::clock::RelTime,
        reads: Option<&mut Fetches>,
        f: impl FnOnce(Option<ItemRef<'_>>) -> R,
    ) -> Got<R> {
        use crate::flash::Probe;
        let Some(flash) = &self.shared.flash else {
            return Got::Done(f(None));
        };
        FLASH_IMAGE.with_borrow_mut(|image| {
            let mut again = None;
            let found = match flash.lookup(h, key, image) {
                Probe::Absent => false,
                Probe::Staged => true,
                Probe::OnFlash(locs) => match reads.map(|r| r.take_done(key)) {
                    None => {
                        let read = flash.read(h, key, &locs, image);
                        again = read.filter(|r| r.distance.is_some());
                        read.is_some()
                    }
                    Some(Some(Some(im))) => {
                        image.clear();
                        image.extend_from_slice(&im);
                        true
                    }
                    Some(Some(None)) => false,
                    Some(None) => {
                        let key = key.into();
                        return Got::Parked(Want { h, key, locs });
                    }
                },
            };
            if !found || matches!(item::exptime(image), e if e != 0 && e <= now) {
                return Got::Done(f(None));
            }
            let r = f(Some(crate::api::image_view(
                image,
                self.shared.cas_enabled,
                now,
            )));
            if let Some(read) = again {
                self.recache(h, image, read);
            }
            Got::Done(r)
        })
    }

    /// An item read on flash again soon enough goes back to memory (its
    /// flash copy goes: `Engine::recache`), so a key that turned hot is not
    /// read from flash for ever: memcached's extstore recaches items too.
    /// Without it, hot items that had been evicted once were served from
    /// flash at every GET (a p50 of 340 us for keys that fit in memory,
    /// `benches/flash-stalls.sh`).
    fn recache(&self, h: u64, image: &[u8], read: crate::flash::Read) {
        let Some(flash) = &self.shared.flash else {
            return;
        };
        if !flash.recache_allowed() {
            return;
        }
        if self.lock().recache(h, image, read) {
            if let Some(f) = &self.shared.flash {
                f.note_recached();
            }
        }
    }

    /// A request is parked on a flash read: note the reads these keys
    /// will want too (keys later in its multi-get, GETs pipelined behind
    /// it), so they are done together rather than one park after another.
    /// A hint: keys in the N-zone, staged or absent are passed over (a key
    /// in the Z-zone has no flash copy: it goes to flash only when it
    /// leaves there); the request, run again, looks in memory first. A key
    /// whose read is among `reads`' completed ones is not wanted again (and
    /// its image is dropped, as a lookup that found it would have taken it).
    pub fn want_from_flash(&self, keys: &[&[u8]], reads: &mut Fetches) {
        let sh = &self.shared;
        let Some(flash) = &sh.flash else {
            return;
        };
        for key in keys {
            let h = hash(key);
            let in_memory = sh
                .stripes
                .read(sh.stripes.of(h))
                .is_some_and(|st| sh.find(&st, h, key).is_some());
            if in_memory {
                continue;
            }
            let locs = flash.peek(h, key);
            if !locs.is_empty() && reads.take_done(key).is_none() {
                let key = (*key).into();
                reads.want(Want { h, key, locs });
            }
        }
    }

    /// A worker's reader thread: read what a parked request wants
    /// (`flash::fetch`) with `pread`, holding no lock. The image, or None
    /// if flash does not have it after all.
    pub fn flash_read(&self, want: &Want) -> Option<Box<[u8]>> {
        let flash = self.shared.flash.as_ref()?;
        FLASH_IMAGE.with_borrow_mut(|image| {
            let read = flash.read(want.h, &want.key, &want.locs, image);
            self.fetched(want.h, image, read)
        })
    }

    /// The same read for a caller doing its own I/O (a worker's io_uring):
    /// one step, given the outcome of the device read the last step asked
    /// for (`Flash::advance`). `Done` with the image, or None if flash does
    /// not have it after all.
    pub fn flash_advance(
        &self,
        want: &Want,
        cursor: &mut Cursor,
        io: Option<std::io::Result<&[u8]>>,
    ) -> FlashStep {
        let Some(flash) = self.shared.flash.as_ref() else {
            return FlashStep::Done(None);
        };
        FLASH_IMAGE.with_borrow_mut(|image| {
            match flash.advance(want.h, &want.key, &want.locs, cursor, io, image) {
                Step::Io(d) => FlashStep::Io(d),
                Step::Done(read) => FlashStep::Done(self.fetched(want.h, image, read)),
            }
        })
    }

    /// The file flash reads go to, for a caller doing its own I/O: its
    /// descriptor (valid while this cache lives; O_DIRECT where the file
    /// system allows it, so reads go in `AlignedBuf`s). None without flash,
    /// or on a device that is no file.
    pub fn flash_fd(&self) -> Option<std::os::fd::RawFd> {
        self.shared.flash.as_ref()?.raw_fd()
    }

    /// A read of `h` came back: the image it found, which goes back to
    /// memory if it was read again soon enough (the parked request, run
    /// again, will find it there).
    fn fetched(&self, h: u64, image: &[u8], read: Option<crate::flash::Read>) -> Option<Box<[u8]>> {
        let read = read?;
        if read.distance.is_some() {
            self.recache(h, image, read);
        }
        Some(image.into())
    }

    /// The flash writer's work (its own thread): recycle a slab if free
    /// ones run low, then write one slab of staged items. False when there
    /// was nothing to do (or the write budget is spent): sleep a little.
    pub fn flash_write_step(&self) -> bool {
        match &self.shared.flash {
            Some(f) => f.write_step(),
            None => false,
        }
    }

    /// Write everything staged for flash and seal its open slabs, full or
    /// not (a clean shutdown). False if the disk refused a write.
    pub fn flash_sync(&self) -> bool {
        self.shared.flash.as_ref().is_none_or(|f| f.sync())
    }

    /// A clean shutdown of the flash tier: write what is staged, seal the
    /// open slabs, save the index beside the file (the next start serves
    /// the flash contents at once). False if any of it failed.
    pub fn flash_shutdown(&self) -> bool {
        self.shared.flash.as_ref().is_none_or(|f| f.shutdown())
    }

    /// Whether the flash tier is on.
    pub fn has_flash(&self) -> bool {
        self.shared.flash.is_some()
    }

    /// The Z-zone writer's work: pack demoted items into their blocks and
    /// shrink the zone to its target, one block rewrite or one page step
    /// at a time under the zone's lock alone (never the engine's), up to
    /// `budget` steps. Returns the steps done; 0 when nothing waits.
    pub fn flush_zone(&self, budget: usize) -> usize {
        self.zone_writer_steps(budget, false, || true)
    }

    /// [`Cache::flush_zone`] for a writer thread while demotions come:
    /// staged items are packed once the stage is half full, so that a
    /// flush finds more of them per block (`Zone::writer_step`). The thread
    /// packs the rest with [`Cache::flush_zone`] when demotions pause.
    pub fn flush_zone_batched(&self, budget: usize) -> usize {
        self.zone_writer_steps(budget, true, || true)
    }

    /// The Z-zone's stage is over its limit (demotions faster than the
    /// writer packs them, which a busy machine leaves little CPU): the
    /// thread that has just let the engine lock go does a few of the
    /// writer's steps, holding only the zone's lock, and that only to copy
    /// a block out and to swap it in (`Zone::push`).
    fn help_zone_writer(&self) {
        // One atomic load on every release of the engine lock; the rest
        // only when the stage is over.
        let Some(zone) = self.shared.zone.as_ref().filter(|z| z.stage_over()) else {
            return;
        };
        // Not from inside a zone read (its promotion takes the engine
        // lock while the thread's reader is borrowed; the step needs it),
        // nor with a zone's lock held.
        let reading = ZONE_READER.with(|r| r.try_borrow_mut().is_err());
        if reading || crate::zzone::ZoneCell::held_here() {
            return;
        }
        self.zone_writer_steps(HELP_STEPS, false, || zone.stage_over());
    }

    /// Up to `budget` of the writer's steps (`batched`: see
    /// [`Cache::flush_zone_batched`]), while `go_on` says so: the steps
    /// done. A job's rewrite runs without the lock; the hold that
    /// installs it also takes the next step if the install was short
    /// ([`SHARED_HOLD`]), so a flush mostly costs one hold, not two. A
    /// hold raises the writer's priority and lowers it again
    /// (`crate::priority`): two system calls, 15% of the writer's CPU on
    /// YCSB-B and a fifth of it under a churn of new keys. While the stage
    /// is more than half full it lowers only once a hold ends
    /// [`crate::priority::LINGER`] after the raise
    /// (docs/benchmarks-history.md).
    fn zone_writer_steps(&self, budget: usize, batched: bool, go_on: impl Fn() -> bool) -> usize {
        let Some(zone) = &self.shared.zone else {
            return 0;
        };
        let mut done = 0;
        let mut installing: Option<Job> = None;
        loop {
            let more = done < budget && go_on();
            if !more && installing.is_none() {
                return done;
            }
            // Pages given back are unmapped after the lock.
            let (step, _retired) = {
                let mut z = zone.lock();
                let since = Instant::now();
                if let Some(job) = installing.take() {
                    z.finish_flush(job);
                }
                let step = match more && since.elapsed() < SHARED_HOLD {
                    true => Some(z.writer_step(self.clock.now(), batched)),
                    false => None,
                };
                // Behind the demotions, the writer's next hold comes soon.
                crate::priority::linger(z.stage_busy());
                (step, z.take_retired())
            };
            match step {
                // A long install: the next step in a hold of its own.
                None if more => continue,
                None | Some(WriterStep::Idle) => return done,
                Some(WriterStep::Done) => {}
                Some(WriterStep::Job(mut job)) => {
                    // The rewrite's decoding and compression, without the lock.
                    ZONE_READER.with_borrow_mut(|r| job.run(&mut r.coder, &mut r.raw));
                    installing = Some(job);
                }
            }
            done += 1;
        }
    }

    /// Test knob: [`Engine::demote_all`] under the engine lock.
    pub fn demote_all(&self) -> usize {
        self.lock().demote_all()
    }

    /// A thread will call [`Cache::flush_zone`] from now on: the engine
    /// leaves shrinking the Z-zone to it. False if the Z-zone is off.
    pub fn start_zone_writer(&self) -> bool {
        self.shared.zone.is_some() && self.lock().zone_has_writer()
    }

    /// Train a Z-zone dictionary if one is due: the samples are taken
    /// under the engine lock and the dictionary installed under the
    /// zone's; the training (tens of milliseconds) and zstd's digest of
    /// it (milliseconds) run without either, on the calling thread (a
    /// warm restart's refill, the lab, tests; the server's maintainer
    /// uses [`Cache::train_zone_in_background`]).
    pub fn train_zone(&self) {
        // Not `if let`: its scrutinee's guard would be held through the
        // install, which takes the lock again.
        let Some(samples) = self.lock().zone_samples() else {
            return;
        };
        self.train_and_install(&samples);
    }

    /// [`Cache::train_zone`] for the server's maintainer: the training
    /// runs on a thread of its own at idle priority, and a later call
    /// installs its dictionary. The maintainer training it at normal
    /// priority took tens of milliseconds of the workers' CPU as the zone
    /// began, and GET p99 rose from 1.4 ms to 7-19 ms over the fill's
    /// last 100,000 requests (`benches/fill-tail.sh`, issue 34). Trains
    /// in place if no thread can be started.
    pub fn train_zone_in_background(&self) {
        let mut training = self.training.lock().unwrap_or_else(|e| e.into_inner());
        if training.as_ref().is_some_and(|t| !t.is_finished()) {
            return;
        }
        if let Some(done) = training.take() {
            if let Ok(Some(d)) = done.join() {
                self.install_zone_dictionary(d);
            }
        }
        let Some(samples) = self.lock().zone_samples() else {
            return;
        };
        let shared = Arc::new(samples);
        let theirs = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("zone-trainer".into())
            .spawn(move || {
                crate::priority::idle_thread_for_good();
                crate::codec::train_dictionary(&theirs, crate::zzone::DICT_BYTES)
            });
        match spawned {
            Ok(t) => *training = Some(t),
            Err(_) => self.train_and_install(&shared),
        }
    }

    /// Train a dictionary on `samples` here, and install it.
    fn train_and_install(&self, samples: &[Vec<u8>]) {
        if let Some(d) = crate::codec::train_dictionary(samples, crate::zzone::DICT_BYTES) {
            self.install_zone_dictionary(d);
        }
    }

    /// Under the zone's lock alone (under the engine's too, it held both
    /// for 2 ms): stores bring the zone's memory, grown by the
    /// dictionary, under `-m` as they read it (`crate::zzone::ZoneCell`).
    fn install_zone_dictionary(&self, d: Vec<u8>) {
        let dict = crate::codec::Dictionary::new(1, d);
        if let Some(z) = &self.shared.zone {
            z.lock().install_dictionary(dict);
        }
    }

    /// Whether GETs made this way may skip the engine lock at all.
    #[inline]
    fn lock_free(&self, how: Lookup) -> bool {
        let sh = &self.shared;
        !sh.locked_hits && how.bump && how.fetch && !matches!(sh.gate, HitGate::Everything)
    }

    /// The N-zone without the engine lock: a hit is handed to `f`; a miss
    /// gives `f` back to look in the next tier, or says the engine must do
    /// this GET (`Tier::Locked`).
    #[inline]
    fn read_n_zone<R, F: FnOnce(Option<ItemRef<'_>>) -> R>(
        &self,
        key: &[u8],
        h: u64,
        how: Lookup,
        f: F,
    ) -> Tier<R, F> {
        #[cfg(debug_assertions)]
        assert_eq!(
            ENGINE_LOCKED.get(),
            0,
            "Cache::get while this thread holds the engine lock"
        );
        let sh = &self.shared;
        if !self.lock_free(how) {
            return Tier::Locked(f);
        }
        let now = self.clock.now();
        if sh.flush_due(now) {
            return Tier::Locked(f);
        }
        if let HitGate::Sampled(t) = &sh.gate {
            if is_sampled(h, t.load(Ordering::Relaxed)) {
                return Tier::Locked(f);
            }
        }
        let Some(stripe) = sh.stripes.read(sh.stripes.of(h)) else {
            return Tier::Locked(f);
        };
        let Some((loc, head)) = sh.find(&stripe, h, key) else {
            // Learned costs count the miss.
            if sh.learner {
                return Tier::Locked(f);
            }
            return Tier::Miss(f, now);
        };
        let hdr = head.header;
        let expired = hdr.exptime != 0 && hdr.exptime <= now;
        let chained = hdr.total_len() > head.chunk_size;
        let guessed = sh.learner && hdr.bits & item::GUESSED != 0;
        if expired || chained || guessed {
            return Tier::Locked(f);
        }
        // The engine's `access` for a GET: the first fetch marks the item
        // fetched, later ones refresh its access time; REF for CLOCK (and
        // lazy GD-Wheel). Written only when they change, so a hot item's
        // line stays shared between cores.
        let mut bits = hdr.bits | item::REF | item::FETCHED;
        let mut atime = hdr.atime;
        if hdr.bits & item::FETCHED != 0 && atime != item::atime_code(now) {
            atime = item::atime_code(now);
            let [lo, hi] = atime.to_le_bytes();
            sh.arena
                .atomic(head.page, head.start + 5)
                .store(lo, Ordering::Relaxed);
            sh.arena
                .atomic(head.page, head.start + 13)
                .store(hi, Ordering::Relaxed);
        }
        if bits != hdr.bits {
            let old = sh
                .arena
                .atomic(head.page, head.start + 7)
                .fetch_or(item::REF | item::FETCHED, Ordering::Relaxed);
            bits = old | item::REF | item::FETCHED;
        }
        stripe.hit(head.class);
        let value_at = head.key_at + hdr.key_len as usize;
        let item = ItemRef::new(
            ItemId(loc),
            sh.key_of(&head),
            Value::flat(sh.item_bytes(&head, value_at, hdr.value_len as usize)),
            item::flags(&head.buf),
            &item::Header { bits, atime, ..hdr },
            sh.cas_enabled,
            now,
        );
        Tier::Hit(f(Some(item)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RebalancePolicy;

    fn cache(rebalance: RebalancePolicy) -> Cache {
        let config = Config {
            memory_limit: 8 << 20,
            rebalance,
            in_place_sets: true,
            // New keys skip the engine lock only without a Z-zone.
            zzone: false,
            ..Config::default()
        };
        Cache::new(config, Arc::new(Clock::new())).unwrap()
    }

    fn get(c: &Cache, key: &[u8]) -> Option<(Vec<u8>, u32, u64)> {
        c.get(key, Lookup::GET, |it| {
            it.map(|it| (it.value.to_vec(), it.flags, it.cas))
        })
    }

    /// A cache with a Z-zone whose blocks are stored as they are (so that
    /// one small item makes a block the zone keeps).
    fn zone_cache() -> Cache {
        let config = Config {
            memory_limit: 16 << 20,
            zzone: true,
            zzone_codec: crate::codec::Codec::Raw,
            ..Config::default()
        };
        Cache::new(config, Arc::new(Clock::new())).unwrap()
    }

    /// `tier_of` says where a key is, and leaves the counters and the
    /// item where they were (a PEEK: no hit, no promotion).
    #[test]
    fn tier_of_finds_the_tier_without_counting() {
        use crate::api::Tier as Where;
        let c = zone_cache();
        c.store(&Store::set(b"k", b"value"));
        assert_eq!(c.tier_of(b"k"), Some(Where::Memory));
        assert_eq!(c.tier_of(b"absent"), None);
        c.demote_all();
        c.flush_zone(usize::MAX);
        let zone = |c: &Cache| {
            let z = c.stats().zzone.expect("zone on").zone;
            (z.items, z.hits, z.filtered, z.false_positives, z.promotions)
        };
        let before = zone(&c);
        assert_eq!(before.0, 1);
        assert_eq!(c.tier_of(b"k"), Some(Where::Zzone));
        assert_eq!(c.tier_of(b"k"), Some(Where::Zzone), "not promoted");
        assert_eq!(c.tier_of(b"absent"), None);
        assert_eq!(zone(&c), before, "nothing counted");
        assert_eq!(get(&c, b"k").map(|g| g.0), Some(b"value".to_vec()));
        c.lock().validate();
    }

    /// The maintainer's dictionary is trained on a thread of its own and
    /// installed by a later call; meanwhile and after, values read back
    /// whole.
    #[test]
    fn a_dictionary_trained_in_the_background_is_installed_later() {
        let config = Config {
            memory_limit: 16 << 20,
            zzone: true,
            zzone_dict_samples: 128,
            ..Config::default()
        };
        let c = Cache::new(config, Arc::new(Clock::new())).unwrap();
        let value = |i: usize| {
            format!(
                "{{\"id\":{i},\"name\":\"user{}\",\"tags\":[\"a{}\",\"b\"]}}",
                i * 7,
                i % 13
            )
        };
        for i in 0..2000 {
            c.store(&Store::set(format!("k{i}").as_bytes(), value(i).as_bytes()));
        }
        c.demote_all();
        let trained = |c: &Cache| c.stats().zzone.expect("zone on").zone.dictionaries_trained;
        assert_eq!(trained(&c), 0);
        let deadline = Instant::now() + std::time::Duration::from_secs(60);
        while trained(&c) == 0 {
            assert!(Instant::now() < deadline, "no dictionary installed");
            c.train_zone_in_background();
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(c.training.lock().unwrap().is_none(), "installed and joined");
        for i in (0..2000).step_by(97) {
            let key = format!("k{i}");
            assert_eq!(
                get(&c, key.as_bytes()).map(|g| g.0),
                Some(value(i).into_bytes())
            );
        }
        c.lock().validate();
    }

    /// The test knob moves what the Z-zone takes into a block (a value
    /// over half a block stored apart, its stub in the block) and leaves
    /// the rest (here a chained value that, uncompressed, is more than a
    /// record may take of a page) where it was: nothing is evicted, and
    /// all read back whole.
    #[test]
    fn demote_all_moves_what_the_zone_takes_and_evicts_nothing() {
        let c = zone_cache();
        let big = vec![b'b'; 700 << 10];
        let mid = vec![b'm'; 100 << 10];
        c.store(&Store::set(b"small", b"value"));
        c.store(&Store::set(b"big", &big));
        c.store(&Store::set(b"mid", &mid));
        assert_eq!(c.demote_all(), 2);
        let s = c.stats();
        let z = s.zzone.expect("zone on").zone;
        assert_eq!((z.items, z.staged, z.flushed), (2, 0, 2), "{z:?}");
        assert_eq!(z.large_items, 1, "{z:?}");
        assert_eq!((s.curr_items, s.evictions), (3, 0));
        assert_eq!(get(&c, b"small").map(|g| g.0), Some(b"value".to_vec()));
        assert_eq!(get(&c, b"big").map(|g| g.0), Some(big));
        assert_eq!(get(&c, b"mid").map(|g| g.0), Some(mid));
        c.lock().validate();
    }

    /// An item stored apart is promoted whole by a GET whose reuse beats
    /// the benchmark, from the image that GET decoded without the lock
    /// (`Zone::get_known`), with its flags and CAS; a DELETE of one still
    /// in the zone checks its CAS on the stub.
    #[test]
    fn a_large_item_is_promoted_whole_and_deleted_by_its_cas() {
        let c = zone_cache();
        let value: Vec<u8> = (0..150_000u32).map(|i| b'a' + (i * 7 % 13) as u8).collect();
        let req = Store {
            flags: 42,
            ..Store::set(b"big", &value)
        };
        let StoreOutcome::Stored { cas } = c.store(&req) else {
            panic!("stored");
        };
        c.store(&Store::set(b"other", &value));
        c.store(&Store::set(b"small", b"value"));
        assert_eq!(c.demote_all(), 3);
        c.store(&Store::set(b"n-zone", b"v"));
        // The benchmark: the N-zone's items (one).
        c.maintain(64);
        let z = |c: &Cache| c.stats().zzone.expect("zone on").zone;
        assert_eq!((z(&c).large_items, z(&c).promotions), (2, 0));
        // A first read, then one within the benchmark: promoted.
        assert_eq!(get(&c, b"big"), Some((value.clone(), 42, cas)));
        assert_eq!(get(&c, b"big"), Some((value.clone(), 42, cas)));
        assert_eq!(z(&c).promotions, 1);
        assert_eq!(get(&c, b"big"), Some((value.clone(), 42, cas)));
        // A DELETE with the wrong CAS, then the right one.
        let other = get(&c, b"other").expect("in the zone").2;
        assert_eq!(c.delete(b"other", other + 1), crate::DeleteOutcome::Exists);
        assert_eq!(c.delete(b"other", other), crate::DeleteOutcome::Deleted);
        assert_eq!(get(&c, b"other"), None);
        c.lock().validate();
    }

    /// A GET that promotes an item of a Z-zone block promotes the image it
    /// decoded without the lock (`Zone::get_known`): the block is decoded
    /// once, for the read, and not again under the engine's and the
    /// zone's locks. A block rewritten between the read and the promotion
    /// is not decoded either: that read does not promote.
    #[test]
    fn a_promotion_decodes_nothing_under_the_locks() {
        use crate::api::Tier as Where;
        let c = zone_cache();
        for k in [&b"k"[..], b"j", b"other"] {
            c.store(&Store::set(k, b"value"));
        }
        assert_eq!(c.demote_all(), 3);
        c.store(&Store::set(b"n-zone", b"v"));
        // The benchmark: the N-zone's items (one).
        c.maintain(64);
        let z = |c: &Cache| c.stats().zzone.expect("zone on").zone;
        let value = |c: &Cache, k: &[u8]| get(c, k).map(|g| g.0);
        assert_eq!(value(&c, b"k").as_deref(), Some(&b"value"[..]));
        let before = z(&c).decompressions;
        assert_eq!(value(&c, b"k").as_deref(), Some(&b"value"[..]));
        assert_eq!(z(&c).promotions, 1, "read again within the benchmark");
        assert_eq!(z(&c).decompressions, before + 1, "the read's copy only");
        assert_eq!(c.tier_of(b"k"), Some(Where::Memory));
        // The read's copy of `j`'s block is stale once the block is
        // rewritten: the promotion finds nothing and decodes nothing.
        assert_eq!(value(&c, b"j").as_deref(), Some(&b"value"[..]));
        let h = crate::hash::hash(b"j");
        let mut copied = crate::zzone::Copied::default();
        let (mut coder, mut raw) = (crate::codec::Coder::default(), Vec::new());
        let zone = c.shared.zone.as_ref().expect("zone on");
        assert!(zone.lock().copy_block(h, false, &mut copied).is_some());
        let image = copied
            .find(&mut coder, &mut raw, h, b"j", |_, _| false)
            .expect("j in its block")
            .to_vec();
        let now = c.clock().now();
        let known = |z: &mut crate::zzone::Zone| z.get_known(h, b"j", now, copied.known(&image));
        assert_eq!(known(&mut zone.lock()), Some(false), "unchanged: found");
        // A SET of a key of the block, demoted: the block is rewritten.
        c.store(&Store::set(b"other", b"value 2"));
        c.demote_all();
        let before = z(&c).decompressions;
        assert_eq!(known(&mut zone.lock()), None, "rewritten: not found");
        assert_eq!(z(&c).decompressions, before);
        assert_eq!(value(&c, b"j").as_deref(), Some(&b"value"[..]));
        c.lock().validate();
    }

    /// A first fetch from a Z-zone block does not promote the item by
    /// itself: a scan of the zone must not expand every item it reads.
    #[test]
    fn a_first_fetch_from_the_zone_does_not_promote() {
        let c = zone_cache();
        c.store(&Store::set(b"k", b"value"));
        assert_eq!(c.demote_all(), 1);
        let got = c.get(b"k", Lookup::GET, |it| it.map(|it| it.fetched));
        assert_eq!(got, Some(false), "the GET sees it not fetched before");
        let zone = c.stats().zzone.map(|z| (z.zone.items, z.zone.promotions));
        assert_eq!(zone, Some((1, 0)), "still in the zone, not promoted");
    }

    /// A promoted item keeps its last access: `mg l` (a peek, which
    /// promotes) answered 0 for an item read 3 s before its demotion.
    #[test]
    fn a_promotion_keeps_the_last_access() {
        let c = zone_cache();
        c.store(&Store::set(b"k", b"value"));
        c.clock().advance(std::time::Duration::from_secs(3));
        c.demote_all();
        let age = |c: &Cache| {
            let now = c.clock().now();
            let mut e = c.lock();
            e.lookup(b"k", Lookup::PEEK).map(|it| now - it.last_access)
        };
        // The lookup under the engine lock promotes it.
        assert_eq!(age(&c), Some(3));
        assert_eq!(c.stats().zzone.map(|z| z.zone.promotions), Some(1));
        assert_eq!(age(&c), Some(3));
    }

    /// A GET's lines: one index line for a key alone in its bucket, and
    /// the lines the item spans from its chunk's start; a miss reads at
    /// most its bucket (none while its stripe's index has no table yet).
    #[test]
    fn footprint_counts_the_index_and_item_lines() {
        let c = cache(RebalancePolicy::Off);
        let miss = c.footprint(b"none");
        assert!(miss.index <= 1 && miss.item == 0, "{miss:?}");
        for len in [1usize, 40, 100, 1000] {
            let key = format!("key{len}");
            c.store(&Store::set(key.as_bytes(), &vec![b'v'; len]));
            let f = c.footprint(key.as_bytes());
            assert_eq!(f.index, 1, "{len}");
            let (start, total) = {
                let sh = &c.shared;
                let st = sh
                    .stripes
                    .read(sh.stripes.of(hash(key.as_bytes())))
                    .unwrap();
                let (_, head) = sh.find(&st, hash(key.as_bytes()), key.as_bytes()).unwrap();
                (head.start, head.header.total_len())
            };
            assert_eq!(total, 16 + key.len() + len);
            assert_eq!(f.item, (start + total - 1) / 64 - start / 64 + 1, "{len}");
            assert!(f.item >= total.div_ceil(64));
        }
    }

    /// A SET of a key whose new item stays in its class rewrites it in
    /// place without the engine lock, and reads, counters and invariants
    /// come out as if the engine had stored it.
    #[test]
    fn sets_of_the_same_class_rewrite_in_place() {
        for rebalance in [RebalancePolicy::Off, RebalancePolicy::Mrc] {
            let c = cache(rebalance);
            fn store(v: &[u8], flags: u32) -> Store<'_> {
                Store {
                    flags,
                    ..Store::set(b"key", v)
                }
            }
            // A new key, and no chunk reserved: the engine reserves some
            // and stores. (The MRC profile samples every key of so small a
            // cache: the engine.)
            let first = c.try_store(&store(b"first", 7));
            match rebalance {
                RebalancePolicy::Off => assert!(matches!(first, Err(Fallback::Refill { .. }))),
                _ => assert_eq!(first, Err(Fallback::Engine)),
            }
            c.lock().store(&store(b"first", 7));
            let (_, _, cas1) = get(&c, b"key").unwrap();
            let mut in_place = 0;
            for (i, v) in [&b"second"[..], b"third!", b"4th"].iter().enumerate() {
                let out = c.store(&store(v, 8 + i as u32));
                assert!(matches!(out, StoreOutcome::Stored { cas } if cas > cas1));
                let (value, flags, cas) = get(&c, b"key").unwrap();
                assert_eq!((value.as_slice(), flags), (*v, 8 + i as u32));
                assert!(cas > cas1);
                in_place += u32::from(c.try_store(&store(v, 8 + i as u32)).is_ok());
            }
            // The MRC profile's sampled keys go to the engine (a small
            // cache samples them all); without a profile, none does.
            if rebalance == RebalancePolicy::Off {
                assert_eq!(in_place, 3);
            }
            // Another class, another flags width: the engine.
            assert_eq!(c.try_store(&store(&[b'x'; 500], 9)), Err(Fallback::Engine));
            assert_eq!(c.try_store(&store(b"w", 0x1_0000)), Err(Fallback::Engine));
            let mut e = c.lock();
            e.validate();
            let s = e.stats();
            // One new item, three stores, and the retries that went in place.
            let stores = 4 + u64::from(in_place);
            assert_eq!((s.curr_items, s.total_items), (1, stores));
            let class = e.slab_stats();
            assert_eq!(class.iter().map(|c| c.cmd_set).sum::<u64>(), stores);
            assert_eq!(s.bytes, class.iter().map(|c| c.mem_requested).sum::<u64>());
        }
    }
}
