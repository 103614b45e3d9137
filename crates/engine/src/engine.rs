//! The engine: the struct that owns every structure of the cache, its
//! construction, and the small helpers its operations share (stripes held,
//! the index's memory, CAS uniques).
//!
//! Each operation is what memcached's `do_store_item`, `do_item_get`,
//! `do_add_delta` and friends do, on top of the slab allocator (`slab`), the
//! index (`index`) and CLOCK eviction (`evict`). The protocol handlers in the
//! server program against this API, whose vocabulary (`Store`, `Lookup`,
//! `ItemRef`, the outcomes) is in `crate::api`. The operations are split by
//! concern into the files under `engine/`, each an `impl Engine`:
//! - `lookup.rs`: finding items and reading them (get, multi-get);
//! - `write.rs`: storing items, allocating chunks, evicting, unlinking;
//! - `update.rs`: delete, touch, incr/decr and the meta flag changes;
//! - `budget.rs`: the memory limit and the classes' floors;
//! - `maintain.rs`: flush_all and the background work;
//! - `report.rs`: stats and dumps;
//! - `pages.rs`: page moves between classes; `repartition.rs`: hot/cold
//!   columns within pages (`crate::columns`); `zone.rs`: the Z-zone; `restore.rs`: warm
//!   restart by pages; `validate.rs`: invariant checks (tests).

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;

mod budget;
mod lookup;
pub(crate) mod maintain;
mod pages;
mod repartition;
mod report;
mod restore;
mod update;
#[cfg(any(test, feature = "testing"))]
mod validate;
mod write;
mod zone;

/// `maintain` slices per maintainer period for the reclaimer's walk.
const RECLAIM_SLICES: usize = 8;

pub use crate::api::{
    Adopted, Arith, ArithOutcome, DeleteOutcome, Evicted, ItemId, ItemRef, Lookup, MetaItem,
    PageLayout, PageSource, ReassignOutcome, SavedClock, SavedPage, Store, StoreMode, StoreOutcome,
    LOOKUP_BATCH,
};
pub use crate::columns::RepartitionStats;
pub use crate::zzone::split::ZzoneStats;

use crate::api::fits;
use crate::arena::Arena;
use crate::chain;
use crate::clock::{Clock, RelTime};
use crate::columns::Repartition;
use crate::config::{Config, ConfigError, EvictionPolicy, DEFAULT_PAGE_SIZE, VALUE_MAX_LEN};
use crate::cost::Learner;
use crate::evict::Policy;
use crate::hash::hash;
use crate::index::Index;
use crate::item;
use crate::magazine::Magazines;
use crate::rebalance::drain::Drain;
use crate::rebalance::Rebalancer;
use crate::shared::Shared;
use crate::slab::{class_sizes, PageId, Slabs};
use crate::stripe::{Counts, Stripe, Stripes};
use crate::zzone::split::Zzone;

/// Counters kept as plain integers under the engine lock.
#[derive(Default)]
struct Counters {
    curr_items: u64,
    total_items: u64,
    bytes: u64,
    evictions: u64,
    reclaimed: u64,
    expired_unfetched: u64,
    evicted_unfetched: u64,
    get_expired: u64,
    crawler_reclaimed: u64,
    slabs_moved: u64,
    rescues: u64,
    /// Items `Engine::demote` kept in a tier below (a drain's work).
    demotions: u64,
    reassign_evictions: u64,
    outofmemory: u64,
    /// GET hits per class counted here (the locked path; readers count
    /// theirs in `Stripes`).
    get_hits: Vec<u64>,
}

/// The engine. Not thread-safe by itself: see [`crate::Cache`].
pub struct Engine {
    config: Config,
    clock: Arc<Clock>,
    slabs: Slabs,
    /// The index, in stripes shared with the GET path (`crate::stripe`).
    stripes: Arc<Stripes>,
    /// The stripes this engine has acquired for writing, in the order
    /// taken (`slabs.held` marks them by number); all released by
    /// [`Engine::release_stripes`].
    held_list: Vec<usize>,
    /// Memory of all stripes' index tables, as the engine counted it.
    index_bytes: usize,
    /// Index growth by inserts without the engine lock, not yet added to
    /// `index_bytes` (`crate::Cache::store`).
    index_grown: Arc<CachePadded<AtomicUsize>>,
    /// Per stripe, its index's primary buckets and whether it is resizing:
    /// kept here because only the engine changes them, so `stats` need
    /// not look into stripes that SETs may be inserting into.
    index_shape: Vec<(usize, bool)>,
    /// Chunks reserved for threads' new items (`magazine`).
    magazines: Arc<Magazines>,
    memory_limit: usize,
    /// The next CAS unique, shared with in-place SETs (`crate::Cache`).
    cas_counter: Arc<CachePadded<AtomicU64>>,
    pending_flush: Option<RelTime>,
    /// `pending_flush` for the GET path outside the lock (0: none).
    flush_at: Arc<CachePadded<AtomicU32>>,
    counters: Counters,
    /// Evictions for `watch evictions`, until the server takes them (None:
    /// nobody watches). Bounded by `EVICTION_LOG_MAX`.
    eviction_log: Option<Vec<Evicted>>,
    /// Told each key that leaves the cache for room ([`EvictionTap`]).
    pub(crate) tap: Option<Arc<dyn crate::api::EvictionTap>>,
    /// Background reclaimer position: (page number, chunk).
    reclaim_at: (usize, u32),
    /// Hot/cold re-partitioning within pages (`-o repartition=1` under
    /// CLOCK), which also does the reclaimer's work.
    repartition: Option<Box<Repartition>>,
    /// Page moves between classes: the rule (`rebalance`) and the page in
    /// transit (`rebalance/drain.rs`, drained by `engine/pages.rs`).
    rebal: Rebalancer,
    drain: Option<Drain>,
    /// When the maintainer's step in progress should let the lock go
    /// (`Engine::maintain_step`); None outside one.
    slice_end: Option<std::time::Instant>,
    /// Pages granted beyond `-m` to classes below their floor
    /// (`floor_pages`), as memcached grants a class its first page.
    pub(super) granted: usize,
    /// Reused buffer for append/prepend/incr.
    scratch: Vec<u8>,
    /// Victim selection within a class (CLOCK or GD-Wheel), see `evict`.
    policy: Policy,
    /// Recent GET misses, to learn costs (`-o learn_costs=1`), see `cost`.
    learner: Option<Learner>,
    /// The compressed Z-zone (`-o zzone=1`), see `engine/zone.rs`, and its
    /// share of memory (`zzone/split.rs`).
    zone: Option<Box<Zzone>>,
    /// The flash tier (`--flash-path`), see `flash`.
    flash: Option<Arc<crate::flash::Flash>>,
}

impl Drop for Engine {
    fn drop(&mut self) {
        // The stripes may outlive the engine (a `Cache` holds them too).
        self.release_stripes();
    }
}

impl Engine {
    pub fn new(config: Config, clock: Arc<Clock>) -> Result<Engine, ConfigError> {
        let device = match &config.flash {
            Some(f) => {
                let dev = crate::flash::device::FileDevice::open(&f.path, f.size).map_err(|e| {
                    ConfigError::Flash {
                        path: f.path.display().to_string(),
                        error: e.to_string(),
                    }
                })?;
                Some(Arc::new(dev) as Arc<dyn crate::flash::device::Device>)
            }
            None => None,
        };
        Self::with_device(config, clock, device)
    }

    /// An engine whose flash tier (if `config.flash` is set) uses `device`
    /// rather than opening its file: the fault tests pass a
    /// [`crate::flash::device::Faulty`] one.
    pub fn with_device(
        config: Config,
        clock: Arc<Clock>,
        device: Option<Arc<dyn crate::flash::device::Device>>,
    ) -> Result<Engine, ConfigError> {
        if config.growth_factor.is_nan() || config.growth_factor <= 1.0 {
            return Err(ConfigError::GrowthFactor(config.growth_factor));
        }
        let item_max = config.item_size_max;
        let max_allowed = (VALUE_MAX_LEN + 1).min(1 << 30);
        if !(1024..=max_allowed).contains(&item_max) {
            return Err(ConfigError::ItemSizeMax {
                size: item_max,
                max: max_allowed,
            });
        }
        // Pages stay 1 MB; items larger than the largest chunk are chained
        // (`chain`).
        let page_size = DEFAULT_PAGE_SIZE;
        let largest = item_max.min(
            config
                .slab_chunk_max
                .clamp(chain::MIN_CHAIN_CHUNK, page_size),
        );
        if config.memory_limit < page_size {
            return Err(ConfigError::MemoryLimit(config.memory_limit));
        }
        let sizes = class_sizes(
            item::HEADER_LEN + config.chunk_min_data,
            config.growth_factor,
            largest,
        );
        let hugepages = config.hugepages || config.prealloc;
        let mut slabs = Slabs::new(page_size, &sizes, config.memory_limit, hugepages);
        Self::check_addressable(&slabs, config.memory_limit)?;
        // The index starts small and grows with the item count; size the start
        // for one item per 256 bytes of memory (a fraction of the final size).
        let stripes = Arc::new(Stripes::new(
            config.lock_stripes.clamp(1, 4096).next_power_of_two(),
            (config.memory_limit / 256).min(1 << 20),
            sizes.len(),
        ));
        slabs.held = vec![false; stripes.len()];
        slabs.check_stripes = cfg!(debug_assertions).then_some(stripes.shift());
        // Only CLOCK keeps no per-chunk state outside the chunk
        // (`engine/repartition.rs`).
        let repartition =
            (config.repartition && config.eviction == EvictionPolicy::Lru).then(Box::default);
        let zone = Zzone::new(&config, page_size);
        let flash = match (&config.flash, device) {
            (Some(f), Some(d)) => {
                let mut f = f.clone();
                f.stage_bytes = f.stage_bytes_for(config.memory_limit);
                if f.memory_cap == 0 {
                    f.memory_cap = config.memory_limit / 2;
                }
                Some(Arc::new(crate::flash::Flash::new(f, d, clock.clone())))
            }
            _ => None,
        };
        if let (Some(z), Some(f)) = (&zone, &flash) {
            z.zone.lock().spill_to(f.clone());
        }
        let mut engine = Engine {
            zone,
            flash,
            memory_limit: config.memory_limit,
            rebal: Rebalancer::new(
                config.rebalance,
                &config.rebalance_tuning,
                &slabs.classes.iter().map(|c| c.per_page).collect::<Vec<_>>(),
                config.memory_limit,
                page_size,
            ),
            drain: None,
            slice_end: None,
            granted: 0,
            policy: Policy::new(config.eviction, sizes.len()),
            learner: config
                .learn_costs
                .then(|| Learner::new(config.memory_limit)),
            config,
            clock,
            slabs,
            held_list: Vec::new(),
            stripes,
            index_bytes: 0,
            index_grown: Arc::default(),
            index_shape: Vec::new(),
            magazines: Arc::default(),
            cas_counter: Arc::new(CachePadded::new(AtomicU64::new(1))),
            pending_flush: None,
            flush_at: Arc::new(CachePadded::new(AtomicU32::new(0))),
            eviction_log: None,
            tap: None,
            counters: Counters {
                get_hits: vec![0; sizes.len()],
                ..Counters::default()
            },
            reclaim_at: (0, 0),
            repartition,
            scratch: Vec::new(),
        };
        if let Some(f) = &engine.flash {
            // Items restored from flash keep their CAS uniques: new ones
            // start above them.
            engine
                .cas_counter
                .fetch_max(f.max_cas() + 1, Ordering::Relaxed);
        }
        engine.index_bytes = engine.index_memory();
        engine.index_shape = (0..engine.stripes.len())
            .map(|s| engine.shape_of(s))
            .collect();
        if engine.config.prealloc {
            while engine.can_add_page() {
                let Some(p) = engine.slabs.new_page() else {
                    break;
                };
                engine.slabs.spare.push(p);
            }
        }
        Ok(engine)
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Item locations are (page, chunk) packed in `index::LOC_BITS` bits,
    /// and the arena addresses a bounded number of regions.
    fn check_addressable(slabs: &Slabs, memory_limit: usize) -> Result<(), ConfigError> {
        let max_pages = 1usize << (crate::index::LOC_BITS - slabs.chunk_bits);
        if memory_limit / slabs.page_size >= max_pages
            || memory_limit > slabs.arena.capacity_bytes()
        {
            return Err(ConfigError::TooMuchMemory(memory_limit));
        }
        Ok(())
    }

    /// The current memory limit (`-m`, or the last `cache_memlimit`).
    pub fn memory_limit(&self) -> usize {
        self.memory_limit
    }

    /// Whether an item with this key and value length fits under `-I`, as
    /// in memcached (by its item size; ours is smaller).
    pub fn fits(&self, key_len: usize, value_len: usize, flags: u32) -> bool {
        fits(&self.config, key_len, value_len, flags)
    }

    /// Whether an item of this size is chained across chunks (memcached's
    /// `ITEM_CHUNKED`).
    pub fn chained(&self, key_len: usize, value_len: usize, flags: u32) -> bool {
        item::total_len(key_len, value_len, flags) > self.largest_chunk()
    }

    #[inline]
    fn now(&self) -> RelTime {
        self.clock.now()
    }

    /// Acquire stripe `s` for writing (waiting for the GETs reading it,
    /// which never wait for anything) unless already held; it stays held
    /// until [`Engine::release_stripes`].
    #[inline]
    fn hold(&mut self, s: usize) {
        if !self.slabs.held[s] {
            self.stripes.acquire(s);
            self.slabs.held[s] = true;
            self.held_list.push(s);
            if let Some(p) = self.stripes.take_pending(s) {
                self.count_pending(&p);
            }
        }
    }

    /// Count the stores that SETs made without the engine lock
    /// (`crate::Cache::store`), as `write_new` and `rewrite` count theirs.
    fn count_pending(&mut self, p: &[Counts]) {
        for (class, (c, n)) in self.slabs.classes.iter_mut().zip(p).enumerate() {
            c.stats.cmd_set += n.sets;
            c.requested = c.requested.wrapping_add(n.requested);
            c.used += n.items;
            self.counters.total_items += n.sets;
            self.counters.curr_items += n.items;
            self.counters.bytes = self.counters.bytes.wrapping_add(n.requested);
            self.policy.add_live_cost(class, n.cost);
        }
    }

    /// The stripe of key hash `h`, acquired.
    #[inline]
    fn stripe(&mut self, h: u64) -> &mut Stripe {
        let s = self.stripes.of(h);
        self.hold(s);
        // SAFETY: `&mut self` is the engine lock's holder (the engine is
        // only shared behind it), the stripe is acquired, and the borrow of
        // self keeps this the only reference the engine makes to it.
        unsafe { self.stripes.stripe_mut(s) }
    }

    /// `f` on the index of `h`'s stripe (acquired) with the slabs to read
    /// chunks from; the index's memory change is counted.
    fn index_mut<R>(&mut self, h: u64, f: impl FnOnce(&mut Index, &Slabs) -> R) -> R {
        let s = self.stripes.of(h);
        self.hold(s);
        // What inserts without the lock grew this stripe by is in
        // `index_grown` (they record it before letting go of the stripe).
        self.fold_index_grown();
        // SAFETY: as in `stripe`; `slabs` is a field apart from the stripes.
        let ix = unsafe { &mut self.stripes.stripe_mut(s).index };
        let before = ix.memory_bytes();
        let r = f(ix, &self.slabs);
        self.index_bytes = self.index_bytes + ix.memory_bytes() - before;
        self.index_shape[s] = (ix.bucket_count(), ix.is_expanding());
        r
    }

    /// Add the index growth of inserts made without the engine lock.
    fn fold_index_grown(&mut self) {
        if self.index_grown.load(Ordering::Relaxed) != 0 {
            self.index_bytes += self.index_grown.swap(0, Ordering::Relaxed);
        }
    }

    /// Stripe `s`'s index shape (`index_shape`), the stripe acquired or no
    /// thread yet running.
    fn shape_of(&self, s: usize) -> (usize, bool) {
        let ix = &self.stripe_ref(s).index;
        (ix.bucket_count(), ix.is_expanding())
    }

    /// Stripe `s`, to read (no GET writes a stripe; only this engine does).
    #[inline]
    fn stripe_ref(&self, s: usize) -> &Stripe {
        // SAFETY: the engine is only shared behind its lock, so `&self` is
        // its holder: no `stripe_mut` is alive while `&self` is borrowed.
        unsafe { self.stripes.stripe_ref(s) }
    }

    /// Take the stripe of the live item at `loc`, to read it whole or
    /// change it.
    #[inline]
    fn hold_item(&mut self, loc: u64) {
        let s = self.stripes.of(hash(self.slabs.key_of(loc)));
        self.hold(s);
    }

    /// Take every stripe (flush, validation, dumps), in order.
    fn hold_all(&mut self) {
        for s in 0..self.stripes.len() {
            self.hold(s);
        }
    }

    /// Let go of every stripe taken since the last call. `crate::Cache`
    /// calls this when a request is done with the engine; views of items
    /// (`ItemRef`) borrow the engine, so none outlives its stripe.
    pub fn release_stripes(&mut self) {
        for s in self.held_list.drain(..) {
            self.stripes.release(s);
            self.slabs.held[s] = false;
        }
    }

    /// From now on, the memory of pages the engine gives back is dropped
    /// by the lock's holder once it has let the lock go
    /// ([`Engine::take_released_pages`]); `crate::Cache` does.
    pub fn defer_page_release(&mut self) {
        self.slabs.defer_release();
    }

    /// The pages given back since the last call, for
    /// [`crate::arena::Arena::release_later`] (None if there are none).
    #[inline]
    pub fn take_released_pages(&mut self) -> Option<(Arc<Arena>, Vec<PageId>)> {
        let ids = self.slabs.take_releasing();
        (!ids.is_empty()).then(|| (self.slabs.arena.clone(), ids))
    }

    /// What the GET path of `crate::Cache` shares with the engine.
    pub(crate) fn shared(&self) -> Shared {
        Shared {
            arena: self.slabs.arena.clone(),
            stripes: self.stripes.clone(),
            chunk_bits: self.slabs.chunk_bits,
            flush_at: self.flush_at.clone(),
            gate: self.rebal.hit_gate(),
            // Eager GD-Wheel re-queues on every hit; learned costs need the
            // misses and re-cost guessed items on hits.
            locked_hits: self.policy.kind() == crate::config::EvictionPolicy::GdWheel,
            learner: self.learner.is_some(),
            cas_enabled: self.config.cas_enabled,
            rewrites: self.rewrites_in_place(),
            store_gate: self.rebal.profile_gate(),
            class_sizes: self.slabs.classes.iter().map(|c| c.chunk_size).collect(),
            cas_counter: self.cas_counter.clone(),
            inserts: self.inserts_without_lock(),
            magazines: self.magazines.clone(),
            index_grown: self.index_grown.clone(),
            zone: self.zone.as_ref().map(|z| z.zone.clone()),
            flash: self.flash.clone(),
        }
    }

    /// Whether SETs of new keys may place their items in reserved chunks
    /// without the engine lock (`-o lockfree_inserts`): as for in-place
    /// SETs, and no rebalancer that counts every insertion (SAS).
    fn inserts_without_lock(&self) -> bool {
        // A new key's Z-zone and flash copies are removed under the engine
        // lock. (Removing the zone's copy under the key's stripe instead
        // left an index entry into a page given to the zone, in
        // `gets_race_everything_else_with_a_zzone`: not yet understood.)
        self.config.lockfree_inserts
            && self.rewrites_in_place()
            && !self.rebal.counts_inserts()
            && self.zone.is_none()
            && self.flash.is_none()
    }

    /// Reserve up to `want` chunks of `class` for the thread of magazine
    /// slot `slot` (`magazine`), found as `alloc` finds one but never by
    /// taking a page from another class (that empties a page, which takes
    /// reserved chunks back). Returns how many it reserved.
    pub(crate) fn refill(&mut self, slot: usize, class: usize, want: usize) -> usize {
        debug_assert!(class < self.slabs.classes.len());
        let mut got = Vec::with_capacity(want);
        while got.len() < want {
            let Some(loc) = self.chunk_of_class(class, None) else {
                break;
            };
            // CLOCK's victim may lie on the page in transit. Reserved, its
            // chunk is no item, so the drain would pass it and hand the
            // page to another class while a thread still held it (the next
            // take-back freed it by the new class's geometry: a panic in
            // the engine's threads test). Freed, the drain takes it along.
            let in_transit = self.drain.as_ref().map(|d| d.page);
            if Some(self.slabs.split(loc).0) == in_transit {
                self.slabs.free(loc);
                break;
            }
            got.push(loc);
        }
        let n = got.len();
        match self.magazines.lock(slot) {
            Some(mut m) => got.into_iter().for_each(|loc| m.push(class, loc)),
            None => got.into_iter().for_each(|loc| self.slabs.free(loc)),
        }
        n
    }

    /// Take back every chunk reserved for threads (`magazine`): before a
    /// page leaves its class or every chunk is freed at once.
    fn take_back_reserved(&mut self) {
        let slabs = &mut self.slabs;
        self.magazines
            .drain_all(self.stripes.slots_taken(), |_, loc| slabs.free(loc));
    }

    fn next_cas(&mut self) -> u64 {
        item::next_cas(&self.cas_counter)
    }

    /// Whether stores may rewrite items in place (`-o in_place_sets`):
    /// nothing but the item changes under CLOCK without learned costs
    /// (GD-Wheel re-queues it, the learner re-costs it).
    fn rewrites_in_place(&self) -> bool {
        self.config.in_place_sets
            && self.policy.kind() == crate::config::EvictionPolicy::Lru
            && self.learner.is_none()
    }

    /// The largest chunk: items above it are chained.
    fn largest_chunk(&self) -> usize {
        self.slabs
            .classes
            .last()
            .map_or(0, |c| c.chunk_size as usize)
    }

    /// Memory of every stripe's index table.
    fn index_memory(&self) -> usize {
        (0..self.stripes.len())
            .map(|s| self.stripe_ref(s).index.memory_bytes())
            .sum::<usize>()
            + self.stripes.memory_bytes()
    }

    /// Make every CAS handed out from now on larger than `cas` (items
    /// restored with their old CAS values must not see them reused).
    pub fn raise_cas(&self, cas: u64) {
        self.cas_counter
            .fetch_max(cas.saturating_add(1), std::sync::atomic::Ordering::Relaxed);
    }
}
