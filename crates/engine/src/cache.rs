//! The engine shared by all worker threads, and the GET path that does not
//! take its lock (issue 10).
//!
//! Every change to the cache goes through [`Cache::lock`]: the engine lock,
//! then whatever index stripes the operation touches (`crate::stripe`). A
//! plain GET ([`Cache::get`]) only reads its key's stripe, with the
//! distributed reader lock of `stripe`: it finds the item in the stripe's
//! index, reads it in place, sets its access bits and copies the value out
//! while its thread's slot says it is reading. GETs share only read-only
//! lines: a hit writes its thread's slot and hit counter and, the first time
//! after the CLOCK hand passed (or once a second), the item's access byte
//! and time. What needs the engine's structures goes to the locked
//! path instead: expired items (removed), chained items, a pending delayed
//! flush that is due, keys the MRC profile samples, and everything under
//! policies that count every GET (eager GD-Wheel, SAS, learned costs).

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::arena::Arena;
use crate::chain::Value;
use crate::engine::{ItemId, ItemRef, Lookup, LOOKUP_BATCH};
use crate::rebalance::profile::is_sampled;
use crate::rebalance::HitGate;
use crate::slab::split_loc;
use crate::stripe::{hash, Stripes};
use crate::{item, Clock, Config, ConfigError, Engine, Expiry};

/// What the GET path shares with the engine ([`Engine::shared`]).
pub(crate) struct Shared {
    pub arena: Arc<Arena>,
    pub stripes: Arc<Stripes>,
    pub chunk_bits: u32,
    /// A pending delayed flush's time (0: none).
    pub flush_at: Arc<AtomicU32>,
    pub gate: HitGate,
    /// Every hit needs the engine (eager GD-Wheel re-queues the item).
    pub locked_hits: bool,
    /// Learned costs: misses and hits of guessed items need the engine.
    pub learner: bool,
    pub cas_enabled: bool,
}

/// An item's header as a GET under its stripe reads it: `buf` holds the
/// 16 header bytes, the long length and the client flags.
struct Head {
    page: u32,
    start: usize,
    class: usize,
    chunk_size: usize,
    buf: [u8; 24],
    header: item::Header,
    /// Where the key starts in the chunk.
    key_at: usize,
}

impl Shared {
    /// Read the header of the item at `loc`, which the caller's hold on
    /// its stripe keeps linked: nobody writes these bytes meanwhile but
    /// other GETs, atomically, into the access byte and time (read so).
    fn head(&self, loc: u64) -> Option<Head> {
        let (page, chunk) = split_loc(loc, self.chunk_bits);
        let (class, cs) = self.arena.geometry(page)?;
        let start = chunk as usize * cs as usize;
        let mut buf = [0u8; 24];
        // SAFETY: the item is linked in the stripe we read, so no writer
        // touches it (the engine acquires the stripe first), and other
        // readers write only bytes 5, 7 and 13, atomically: read so below.
        unsafe {
            buf[..5].copy_from_slice(self.arena.bytes(page, start, 5));
            buf[6] = self.arena.bytes(page, start + 6, 1)[0];
            buf[8..13].copy_from_slice(self.arena.bytes(page, start + 8, 5));
            buf[14..16].copy_from_slice(self.arena.bytes(page, start + 14, 2));
        }
        for b in [5, 7, 13] {
            buf[b] = self.arena.atomic(page, start + b).load(Ordering::Relaxed);
        }
        let long = u16::from_le_bytes([buf[14], buf[15]]) == item::LONG_VALUE as u16;
        let extra = if long { 4 } else { 0 } + item::code_width(buf[7]);
        // SAFETY: as above; these bytes follow the header inside the item.
        unsafe {
            buf[16..16 + extra].copy_from_slice(self.arena.bytes(page, start + 16, extra));
        }
        let header = item::Header::read(&buf);
        Some(Head {
            page,
            start,
            class,
            chunk_size: cs as usize,
            key_at: header.body_start() + header.flags_width(),
            buf,
            header,
        })
    }

    /// `len` bytes of the item of `head` from `at` (key or value).
    fn item_bytes(&self, head: &Head, at: usize, len: usize) -> &[u8] {
        // SAFETY: as in `head`: key and value bytes of a linked item are
        // written by no one while its stripe is held.
        unsafe { self.arena.bytes(head.page, head.start + at, len) }
    }

    fn key_of(&self, head: &Head) -> &[u8] {
        self.item_bytes(head, head.key_at, head.header.key_len as usize)
    }
}

/// The engine shared by all worker threads.
pub struct Cache {
    engine: parking_lot::Mutex<Engine>,
    clock: Arc<Clock>,
    /// A copy of the engine's configuration, for what it alone decides.
    config: Config,
    shared: Shared,
}

/// The engine, locked; gives back the stripes the operation took when
/// dropped.
pub struct EngineGuard<'a>(parking_lot::MutexGuard<'a, Engine>);

impl std::ops::Deref for EngineGuard<'_> {
    type Target = Engine;
    fn deref(&self) -> &Engine {
        &self.0
    }
}

impl std::ops::DerefMut for EngineGuard<'_> {
    fn deref_mut(&mut self) -> &mut Engine {
        &mut self.0
    }
}

impl Drop for EngineGuard<'_> {
    fn drop(&mut self) {
        self.0.release_stripes();
        #[cfg(debug_assertions)]
        ENGINE_LOCKED.set(ENGINE_LOCKED.get() - 1);
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
        let shared = engine.shared();
        Ok(Cache {
            engine: parking_lot::Mutex::new(engine),
            clock,
            config,
            shared,
        })
    }

    /// [`Engine::fits`], without taking the lock: a SET checks its size
    /// before reading its value, and that should not cost a lock round.
    pub fn fits(&self, key_len: usize, value_len: usize, flags: u32) -> bool {
        crate::engine::fits(&self.config, key_len, value_len, flags)
    }

    /// Lock the engine. Hold the guard only for engine work and copying out
    /// values, never across socket reads or writes.
    #[inline]
    pub fn lock(&self) -> EngineGuard<'_> {
        let guard = EngineGuard(self.engine.lock());
        #[cfg(debug_assertions)]
        ENGINE_LOCKED.set(ENGINE_LOCKED.get() + 1);
        guard
    }

    pub fn clock(&self) -> &Arc<Clock> {
        &self.clock
    }

    /// Look `key` up as [`Engine::lookup`] does and hand the item (None: a
    /// miss) to `f`, which copies what it needs. A plain GET only reads
    /// the key's stripe; anything else takes the engine lock. `f` runs
    /// while the stripe is read or the lock held: it must not block, and
    /// the thread must not hold the engine lock (`Cache::lock`) already.
    pub fn get<R>(&self, key: &[u8], how: Lookup, f: impl FnOnce(Option<ItemRef<'_>>) -> R) -> R {
        self.get_hashed(key, hash(key), how, f)
    }

    fn get_hashed<R>(
        &self,
        key: &[u8],
        h: u64,
        how: Lookup,
        f: impl FnOnce(Option<ItemRef<'_>>) -> R,
    ) -> R {
        match self.try_get(key, h, how, f) {
            Ok(r) => r,
            Err(f) => {
                let mut engine = self.lock();
                f(engine.lookup(key, how))
            }
        }
    }

    /// Look several keys up, as a multi-get does: each as by [`Cache::get`],
    /// with their memory loads overlapped as in [`Engine::lookup_batch`]
    /// (MICA's batching), which does the whole batch under the engine lock
    /// when GETs need it anyway: [`LOOKUP_BATCH`] keys at a time, every
    /// key's index bucket is prefetched, then the item its tag points at,
    /// then the keys are looked up in order. `f` gets each key's position
    /// and may stop the batch before the next key.
    pub fn get_batch<'k>(
        &self,
        keys: &[&'k [u8]],
        how: Lookup,
        mut f: impl FnMut(usize, &'k [u8], Option<ItemRef<'_>>) -> ControlFlow<()>,
    ) {
        if !self.lock_free(how) {
            self.lock().lookup_batch(keys, how, f);
            return;
        }
        let sh = &self.shared;
        let mut hashes = [0u64; LOOKUP_BATCH];
        for (b, batch) in keys.chunks(LOOKUP_BATCH).enumerate() {
            for (h, key) in hashes.iter_mut().zip(batch) {
                *h = hash(key);
                if let Some(st) = sh.stripes.read(sh.stripes.of(*h)) {
                    st.index.prefetch(*h);
                }
            }
            for &h in &hashes[..batch.len()] {
                if let Some(st) = sh.stripes.read(sh.stripes.of(h)) {
                    if let Some(loc) = st.index.find(h, |_| true) {
                        let (page, chunk) = split_loc(loc, sh.chunk_bits);
                        sh.arena.prefetch_chunk(page, chunk);
                    }
                }
            }
            for (i, (&key, &h)) in batch.iter().zip(&hashes).enumerate() {
                let at = b * LOOKUP_BATCH + i;
                if self
                    .get_hashed(key, h, how, |item| f(at, key, item))
                    .is_break()
                {
                    return;
                }
            }
        }
    }

    /// Whether GETs made this way may skip the engine lock at all.
    #[inline]
    fn lock_free(&self, how: Lookup) -> bool {
        let sh = &self.shared;
        !sh.locked_hits && how.bump && how.fetch && !matches!(sh.gate, HitGate::Everything)
    }

    /// The GET path without the engine lock; gives `f` back when the
    /// engine must do it.
    fn try_get<R, F: FnOnce(Option<ItemRef<'_>>) -> R>(
        &self,
        key: &[u8],
        h: u64,
        how: Lookup,
        f: F,
    ) -> Result<R, F> {
        #[cfg(debug_assertions)]
        assert_eq!(
            ENGINE_LOCKED.get(),
            0,
            "Cache::get while this thread holds the engine lock"
        );
        let sh = &self.shared;
        if !self.lock_free(how) {
            return Err(f);
        }
        let now = self.clock.now();
        let flush = sh.flush_at.load(Ordering::Acquire);
        if flush != 0 && flush <= now {
            return Err(f);
        }
        if let HitGate::Sampled(t) = &sh.gate {
            if is_sampled(h, t.load(Ordering::Relaxed)) {
                return Err(f);
            }
        }
        let Some(stripe) = sh.stripes.read(sh.stripes.of(h)) else {
            return Err(f);
        };
        // The header read to compare the key is the one used below.
        let mut matched = None;
        let found = stripe.index.find(h, |loc| match sh.head(loc) {
            Some(head) if sh.key_of(&head) == key => {
                matched = Some(head);
                true
            }
            _ => false,
        });
        let (Some(loc), Some(head)) = (found, matched) else {
            if sh.learner {
                return Err(f);
            }
            drop(stripe);
            return Ok(f(None));
        };
        let hdr = head.header;
        let expired = hdr.exptime != 0 && hdr.exptime <= now;
        let chained = hdr.total_len() > head.chunk_size;
        let guessed = sh.learner && hdr.bits & item::GUESSED != 0;
        if expired || chained || guessed {
            return Err(f);
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
        let item = ItemRef {
            id: ItemId(loc),
            key: sh.key_of(&head),
            value: Value::flat(sh.item_bytes(&head, value_at, hdr.value_len as usize)),
            flags: item::flags(&head.buf),
            cas: if sh.cas_enabled { hdr.cas } else { 0 },
            expiry: match hdr.exptime {
                0 => Expiry::Never,
                t => Expiry::At(t),
            },
            cost: item::dequantize_cost(hdr.cost),
            fetched: bits & item::FETCHED != 0,
            stale: bits & item::STALE != 0,
            win_sent: bits & item::WIN != 0,
            last_access: now.saturating_sub(item::atime_age(atime, now)),
        };
        Ok(f(Some(item)))
    }
}
