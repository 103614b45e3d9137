//! The engine's operations: what a memcached command does to the cache.
//!
//! Each operation is what memcached's `do_store_item`, `do_item_get`,
//! `do_add_delta` and friends do, on top of the slab allocator (`slab`), the
//! index (`index`) and CLOCK eviction (`evict`). The protocol handlers in the
//! server program against this API.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;

mod pages;
mod repartition;
mod restore;
mod zone;

/// `maintain` slices per maintainer period for the reclaimer's walk.
const RECLAIM_SLICES: usize = 8;

pub use repartition::RepartitionStats;
pub use restore::{Adopted, PageLayout, PageSource, SavedClock, SavedPage};
pub use zone::ZzoneStats;

use crate::chain::{self, Value};
use crate::clock::{Clock, Expiry, RelTime};
use crate::config::{Config, ConfigError, EvictionPolicy, DEFAULT_PAGE_SIZE, VALUE_MAX_LEN};
use crate::cost::Learner;
use crate::evict::{Policy, Victim};
use crate::index::Index;
use crate::item;
use crate::magazine::Magazines;
use crate::rebalance::Rebalancer;
use crate::shared::Shared;
use crate::slab::{class_sizes, PageId, SlabClassStats, Slabs};
use crate::stats::EngineStats;
use crate::stripe::{Counts, Stripe, Stripes};

/// Keys prefetched together by [`Engine::lookup_batch`]: enough loads in
/// flight to cover a memory latency (about ten line fill buffers per core),
/// few enough that the first lines are still cached when used.
pub const LOOKUP_BATCH: usize = 16;

/// See [`Engine::page_headroom`].
const ZONE_PAGE_HEADROOM: usize = 64 << 10;

/// A handle to a live item, valid until the engine is next mutated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ItemId(pub(crate) u64);

/// A read-only view of an item.
#[derive(Clone, Copy, Debug)]
pub struct ItemRef<'a> {
    pub id: ItemId,
    pub key: &'a [u8],
    /// The value (in one piece, or chained over several chunks).
    pub value: Value<'a>,
    /// 32-bit client flags.
    pub flags: u32,
    /// CAS unique (0 when CAS is disabled with `-C`).
    pub cas: u64,
    pub expiry: Expiry,
    /// The item's recomputation cost (dequantised; 1 when the client sent none).
    pub cost: u32,
    /// The item was read at least once since it was stored (meta `h`).
    pub fetched: bool,
    /// Marked stale by a meta invalidation (`md I`, `ms I`).
    pub stale: bool,
    /// A meta "win" token was already handed out for this item.
    pub win_sent: bool,
    /// Last access time, to the second (ages saturate at
    /// `item::ATIME_SATURATE`, 13.6 hours).
    pub last_access: RelTime,
}

/// How a store treats an existing item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreMode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
}

/// A store request.
#[derive(Clone, Copy, Debug)]
pub struct Store<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub flags: u32,
    pub expiry: Expiry,
    pub mode: StoreMode,
    /// Compare-and-swap: store only if the item's CAS equals this (0 = no check).
    pub cas: u64,
    /// Meta `E`: use this as the new item's CAS instead of the next counter value.
    pub new_cas: Option<u64>,
    /// Recomputation cost sent by the client (`w` meta flag / `cost=` token).
    pub cost: Option<u32>,
    /// Meta `I` on ms: if `cas` is older than the item's, store anyway but mark stale.
    pub invalidate: bool,
}

impl<'a> Store<'a> {
    /// A plain `set` with no expiry, flags, cas or cost.
    pub fn set(key: &'a [u8], value: &'a [u8]) -> Store<'a> {
        Store {
            key,
            value,
            flags: 0,
            expiry: Expiry::Never,
            mode: StoreMode::Set,
            cas: 0,
            new_cas: None,
            cost: None,
            invalidate: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOutcome {
    /// Stored; the new item's CAS.
    Stored { cas: u64 },
    /// add on an existing key, replace/append/prepend on a missing one.
    NotStored,
    /// cas mismatch.
    Exists,
    /// cas on a missing key.
    NotFound,
    /// The item exceeds `-I` (`SERVER_ERROR object too large for cache`).
    TooLarge,
    /// No memory and eviction impossible or disabled (`SERVER_ERROR out of memory storing object`).
    NoMemory,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteOutcome {
    Deleted,
    NotFound,
    /// cas given and it did not match.
    Exists,
}

/// An incr/decr request.
#[derive(Clone, Copy, Debug)]
pub struct Arith {
    pub incr: bool,
    pub delta: u64,
    /// Only apply if the item's CAS equals this (0 = no check).
    pub cas: u64,
    /// Meta `N`: create the item with `initial` and this expiry when missing.
    pub autovivify: Option<(u64, Expiry)>,
    /// Meta `T`: update the item's expiry.
    pub new_expiry: Option<Expiry>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArithOutcome {
    /// The new value and the item holding it.
    Value {
        value: u64,
        id: ItemId,
    },
    NotFound,
    /// The stored value is not a decimal number (`CLIENT_ERROR cannot increment or decrement non-numeric value`).
    NonNumeric,
    /// cas mismatch.
    Exists,
    NoMemory,
}

/// Options for a lookup.
#[derive(Clone, Copy, Debug)]
pub struct Lookup {
    /// Count this access for eviction (meta `u` turns it off).
    pub bump: bool,
    /// Mark the item fetched (for meta `h` and the unfetched counters).
    pub fetch: bool,
}

impl Lookup {
    pub const GET: Lookup = Lookup {
        bump: true,
        fetch: true,
    };
    pub const PEEK: Lookup = Lookup {
        bump: false,
        fetch: false,
    };
}

/// Answers to `slabs reassign` (memcached's words).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReassignOutcome {
    Ok,
    Busy,
    BadClass,
    NoSpare,
    Same,
}

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
    /// Background reclaimer position: (page number, chunk).
    reclaim_at: (usize, u32),
    /// Hot/cold re-partitioning within pages (`-o repartition=1` under
    /// CLOCK), which also does the reclaimer's work.
    repartition: Option<Box<repartition::Repartition>>,
    /// Page moves between classes: the rule (`rebalance`) and the page in
    /// transit (`engine/pages.rs`).
    rebal: Rebalancer,
    drain: Option<pages::Drain>,
    /// Pages granted beyond `-m` to classes below their floor
    /// (`floor_pages`), as memcached grants a class its first page.
    pub(super) granted: usize,
    /// Reused buffer for append/prepend/incr.
    scratch: Vec<u8>,
    /// Victim selection within a class (CLOCK or GD-Wheel), see `evict`.
    policy: Policy,
    /// Recent GET misses, to learn costs (`-o learn_costs=1`), see `cost`.
    learner: Option<Learner>,
    /// The compressed Z-zone (`-o zzone=1`), see `engine/zone.rs`.
    zone: Option<Box<zone::Zzone>>,
    /// The flash tier (`--flash-path`), see `flash`.
    flash: Option<Arc<crate::flash::Flash>>,
}

impl Drop for Engine {
    fn drop(&mut self) {
        // The stripes may outlive the engine (a `Cache` holds them too).
        self.release_stripes();
    }
}

/// A view of an item image held outside the slabs (a Z-zone copy): its id
/// names no N-zone item.
pub(crate) fn image_view(image: &[u8], cas_enabled: bool, now: RelTime) -> ItemRef<'_> {
    let value = Value::flat(&image[item::value_start(image)..]);
    item_view(image, ItemId(u64::MAX), value, cas_enabled, now)
}

/// The view of the item whose header, flags and key start `head`.
fn item_view<'a>(
    head: &'a [u8],
    id: ItemId,
    value: Value<'a>,
    cas_enabled: bool,
    now: RelTime,
) -> ItemRef<'a> {
    let h = item::Header::read(head);
    ItemRef {
        id,
        key: item::key(head),
        value,
        flags: item::flags(head),
        cas: if cas_enabled { h.cas } else { 0 },
        expiry: match h.exptime {
            0 => Expiry::Never,
            t => Expiry::At(t),
        },
        cost: item::dequantize_cost(h.cost),
        fetched: h.bits & item::FETCHED != 0,
        stale: h.bits & item::STALE != 0,
        win_sent: h.bits & item::WIN != 0,
        last_access: now.saturating_sub(item::atime_age(h.atime, now)),
    }
}

/// [`Engine::fits`] from the configuration alone (`-I` and `-C` never
/// change), so [`crate::Cache::fits`] needs no lock.
pub(crate) fn fits(config: &Config, key_len: usize, value_len: usize, flags: u32) -> bool {
    value_len <= VALUE_MAX_LEN
        && item::memcached_size(key_len, value_len, flags, config.cas_enabled)
            <= config.item_size_max
}

use crate::hash::hash;
use crate::inplace::{read_head, rewrite, Rewrite};

/// The expiry field of an item stored with `e`.
pub(crate) fn exptime_of(e: Expiry) -> u32 {
    match e {
        Expiry::Never => 0,
        Expiry::At(t) => t.max(1),
        // Relative time 1 is always in the past (the clock starts at 2).
        Expiry::Expired => 1,
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
        let zone = zone::Zzone::new(&config, page_size);
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
            locked_hits: self.policy.kind() == EvictionPolicy::GdWheel,
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
        // A new key's Z-zone copy must be removed, under the engine lock.
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

    fn find(&mut self, key: &[u8], h: u64) -> Option<u64> {
        let s = self.stripes.of(h);
        self.hold(s);
        let ix = &self.stripe_ref(s).index;
        ix.find(h, |loc| item::key(self.slabs.chunk(loc)) == key)
    }

    /// Find a live item, removing it if it expired.
    fn find_live(&mut self, key: &[u8], h: u64) -> Option<u64> {
        self.check_flush();
        let loc = self.find(key, h)?;
        let exp = item::exptime(self.slabs.chunk(loc));
        if exp != 0 && exp <= self.now() {
            self.counters.get_expired += 1;
            self.remove(loc);
            return None;
        }
        Some(loc)
    }

    /// Find a live item (expired ones are removed on the way).
    /// An item found in the Z-zone is moved to the N-zone first, so the
    /// item's id can be used to change it.
    pub fn lookup(&mut self, key: &[u8], how: Lookup) -> Option<ItemRef<'_>> {
        self.lookup_hashed(key, hash(key), how, true)
    }

    /// [`Engine::lookup`] for a read that only copies the item out: one in
    /// the Z-zone may be served from there, its id then naming no item.
    pub fn read(&mut self, key: &[u8], how: Lookup) -> Option<ItemRef<'_>> {
        self.lookup_hashed(key, hash(key), how, false)
    }

    /// Look up several keys, as a multi-get does, with their memory loads
    /// overlapped (MICA's batching, on the engine's own structures): first
    /// every key's index bucket is prefetched, then the first item its tag
    /// points at, then the keys are looked up in order, each exactly as by
    /// [`Engine::lookup`], and handed to `f` with their position. `f` may
    /// stop the batch before the next key (a full output buffer): keys not
    /// looked up are not counted or bumped. Batches of up to
    /// [`LOOKUP_BATCH`] keys are prefetched at a time; a batch of one key is
    /// not (nothing to overlap).
    pub fn lookup_batch<'k>(
        &mut self,
        keys: &[&'k [u8]],
        how: Lookup,
        mut f: impl FnMut(usize, &'k [u8], Option<ItemRef<'_>>) -> ControlFlow<()>,
    ) {
        let mut hashes = [0u64; LOOKUP_BATCH];
        for (b, batch) in keys.chunks(LOOKUP_BATCH).enumerate() {
            for (h, key) in hashes.iter_mut().zip(batch) {
                *h = hash(key);
            }
            // One key (a plain `get`): nothing to overlap its loads with.
            if batch.len() > 1 {
                for &h in &hashes[..batch.len()] {
                    self.stripe(h).index.prefetch(h);
                }
                for &h in &hashes[..batch.len()] {
                    if let Some(loc) = self.stripe(h).index.find(h, |_| true) {
                        let (page, chunk) = self.slabs.split(loc);
                        self.slabs.arena.prefetch_chunk(page, chunk);
                    }
                }
            }
            for (i, (&key, &h)) in batch.iter().zip(&hashes).enumerate() {
                let item = self.lookup_hashed(key, h, how, false);
                if f(b * LOOKUP_BATCH + i, key, item).is_break() {
                    return;
                }
            }
        }
    }

    fn lookup_hashed(
        &mut self,
        key: &[u8],
        h: u64,
        how: Lookup,
        promote: bool,
    ) -> Option<ItemRef<'_>> {
        let mut found = self.find_live(key, h);
        if found.is_none() && self.zone.is_some() {
            if promote {
                found = self.find_any(key, h);
            } else {
                match self.read_zone(key, h, how.bump && how.fetch) {
                    Some(Some(loc)) => found = Some(loc),
                    Some(None) => return Some(self.view_image()),
                    None => {}
                }
            }
        }
        let Some(loc) = found else {
            if how.fetch {
                if let Some(l) = &mut self.learner {
                    l.miss(h, self.clock.now_us());
                }
                self.rebal.miss(h);
            }
            return None;
        };
        self.access(loc, how);
        if how.fetch && self.rebal.wants_hits() {
            let class = self.slabs.class_of(loc);
            let cost = item::Header::read(self.slabs.chunk(loc)).cost;
            self.rebal.hit(h, class, cost);
        }
        Some(self.view(loc))
    }

    /// `get`: lookup that counts as an access.
    pub fn get(&mut self, key: &[u8]) -> Option<ItemRef<'_>> {
        self.lookup(key, Lookup::GET)
    }

    fn access(&mut self, loc: u64, how: Lookup) {
        let now = self.now();
        let class = self.slabs.class_of(loc);
        let chunk = self.slabs.chunk_mut(loc);
        let mut bits = item::bits(chunk);
        if how.bump {
            // memcached's do_item_bump: the first fetch only marks the item
            // fetched, later ones refresh its access time (meta `l`); other
            // bumps (a failed add, an in-place incr) always refresh it.
            if !how.fetch || bits & item::FETCHED != 0 {
                item::set_atime(chunk, item::atime_code(now));
            }
            bits |= item::REF;
        }
        if how.fetch {
            bits |= item::FETCHED;
        }
        item::set_bits(chunk, bits);
        if how.bump {
            if bits & item::GUESSED != 0 {
                if let Some(l) = &self.learner {
                    // A guessed cost follows the mean learned so far.
                    let q = l.default_code();
                    self.policy.recost(&mut self.slabs, class, loc, q);
                }
            }
            self.policy.touch(&mut self.slabs, class, loc);
        }
        if how.fetch {
            self.counters.get_hits[class] += 1;
        }
    }

    fn view(&self, loc: u64) -> ItemRef<'_> {
        let value = Value::of(&self.slabs, loc);
        let (cas_enabled, now) = (self.config.cas_enabled, self.now());
        item_view(self.slabs.chunk(loc), ItemId(loc), value, cas_enabled, now)
    }

    /// A view of the item a Z-zone read left in the zone (its id names no
    /// N-zone item).
    fn view_image(&self) -> ItemRef<'_> {
        image_view(self.zone_found(), self.config.cas_enabled, self.now())
    }

    /// View an item found earlier (valid until the next mutation).
    pub fn item(&self, id: ItemId) -> ItemRef<'_> {
        self.view(id.0)
    }

    fn next_cas(&mut self) -> u64 {
        item::next_cas(&self.cas_counter)
    }

    pub fn store(&mut self, req: &Store<'_>) -> StoreOutcome {
        // A page in transit drains a little with every store, before this
        // one looks anything up (see `engine/pages.rs`).
        if self.drain.is_some() {
            self.drain_on_store();
        }
        let h = hash(req.key);
        // A plain SET needs nothing of a Z-zone copy: it is only removed.
        let plain = req.mode == StoreMode::Set && req.cas == 0;
        let old = match plain {
            true => self.find_live(req.key, h),
            false => self.find_to_change(req.key, h),
        };
        let mut stale = false;
        if let Some(loc) = old {
            let class = self.slabs.class_of(loc);
            let old_cas = item::Header::read(self.slabs.chunk(loc)).cas;
            if req.mode == StoreMode::Add {
                // memcached: a failed add still counts as an access.
                self.access(
                    loc,
                    Lookup {
                        bump: true,
                        fetch: false,
                    },
                );
                return StoreOutcome::NotStored;
            }
            if req.cas != 0 && req.cas != old_cas {
                if req.invalidate && req.cas < old_cas {
                    stale = true;
                } else {
                    self.slabs.classes[class].stats.cas_badval += 1;
                    return StoreOutcome::Exists;
                }
            } else if req.cas != 0 {
                self.slabs.classes[class].stats.cas_hits += 1;
            }
        } else if req.cas != 0 {
            return StoreOutcome::NotFound;
        } else if req.mode != StoreMode::Set && req.mode != StoreMode::Add {
            return StoreOutcome::NotStored;
        }

        // Append/prepend build the new value from the old one, keeping its
        // flags and expiry (memcached's do_store_item).
        let mut flags = req.flags;
        let mut exptime = exptime_of(req.expiry);
        let mut cost = req.cost;
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        if let (Some(loc), StoreMode::Append | StoreMode::Prepend) = (old, req.mode) {
            let chunk = self.slabs.chunk(loc);
            let h = item::Header::read(chunk);
            flags = item::flags(chunk);
            exptime = h.exptime;
            cost = cost.or(Some(item::dequantize_cost(h.cost)));
            let old_value = Value::of(&self.slabs, loc);
            if req.mode == StoreMode::Prepend {
                scratch.extend_from_slice(req.value);
            }
            for part in old_value.parts() {
                scratch.extend_from_slice(part);
            }
            if req.mode == StoreMode::Append {
                scratch.extend_from_slice(req.value);
            }
        }
        let value: &[u8] = match req.mode {
            StoreMode::Append | StoreMode::Prepend => &scratch,
            _ => req.value,
        };
        let outcome = if !self.fits(req.key.len(), value.len(), flags) {
            if req.mode == StoreMode::Set {
                self.drop_failed_set(h, old);
            }
            StoreOutcome::TooLarge
        } else {
            let cas = match req.new_cas {
                Some(c) => c & item::CAS_MASK,
                None => self.next_cas(),
            };
            let mut bits = item::LIVE | if stale { item::STALE } else { 0 };
            let cost = item::quantize_cost(match cost {
                Some(c) => c,
                None => {
                    let (c, guessed) = self.unknown_cost(h, old);
                    if guessed {
                        bits |= item::GUESSED;
                    }
                    c
                }
            });
            let rewritten = bits == item::LIVE
                && req.mode == StoreMode::Set
                && self.rewrites_in_place()
                && old.is_some_and(|loc| {
                    let new = Rewrite {
                        value,
                        flags,
                        exptime,
                        cost,
                    };
                    self.rewrite(h, loc, &new, cas)
                });
            let written = match rewritten {
                true => Ok(0),
                false => self.write_new(h, req.key, &[value], flags, exptime, cas, cost, bits, old),
            };
            match written {
                Ok(_) => StoreOutcome::Stored {
                    cas: if self.config.cas_enabled { cas } else { 0 },
                },
                Err(e) => {
                    if req.mode == StoreMode::Set {
                        self.drop_failed_set(h, old);
                    }
                    e
                }
            }
        };
        // A chained value's copy is not kept around.
        if scratch.capacity() > self.slabs.page_size {
            scratch = Vec::new();
        }
        self.scratch = scratch;
        outcome
    }

    /// memcached drops the old item when a SET fails (for size or memory),
    /// so a stale value does not outlive the failed update: `old` if still
    /// live (eviction while allocating may have taken it), else the key's
    /// Z-zone copy (a plain SET did not look there).
    fn drop_failed_set(&mut self, h: u64, old: Option<u64>) {
        match old {
            Some(loc) if self.slabs.is_live(loc) => self.remove(loc),
            Some(_) => {}
            None => {
                self.tiers_forget(h, false);
                self.enforce_budget(None);
            }
        }
    }

    /// Overwrite the live item at `loc` (key hash `h`, stripe held) in its
    /// chunk when the new one belongs to the same class: no allocation, no
    /// index change (`crate::inplace::rewrite`). False if it cannot be.
    fn rewrite(&mut self, h: u64, loc: u64, new: &Rewrite<'_>, cas: u64) -> bool {
        debug_assert!(self.slabs.held[self.stripes.of(h)]);
        let Some(head) = read_head(&self.slabs.arena, self.slabs.chunk_bits, loc) else {
            return false;
        };
        let class = head.class;
        let prev = class
            .checked_sub(1)
            .map_or(0, |c| self.slabs.classes[c].chunk_size as usize);
        let Some(total) = head.rewritable(new, prev) else {
            return false;
        };
        // SAFETY: the engine holds the item's stripe (found through it).
        unsafe { rewrite(&self.slabs.arena, &head, new, cas, self.now()) };
        let old_total = head.header.total_len() as u64;
        self.rebal.stored(h, class, new.cost, false);
        let c = &mut self.slabs.classes[class];
        c.requested = c.requested + total as u64 - old_total;
        c.stats.cmd_set += 1;
        self.counters.total_items += 1;
        self.counters.bytes = self.counters.bytes + total as u64 - old_total;
        true
    }

    /// Whether stores may rewrite items in place (`-o in_place_sets`):
    /// nothing but the item changes under CLOCK without learned costs
    /// (GD-Wheel re-queues it, the learner re-costs it).
    fn rewrites_in_place(&self) -> bool {
        self.config.in_place_sets
            && self.policy.kind() == EvictionPolicy::Lru
            && self.learner.is_none()
    }

    /// Allocate, write and link a new item, replacing `old` if still live;
    /// returns its location. A new key's Z-zone copy, if any, goes.
    #[allow(clippy::too_many_arguments)]
    fn write_new(
        &mut self,
        h: u64,
        key: &[u8],
        value: &[&[u8]],
        flags: u32,
        exptime: u32,
        cas: u64,
        cost: u8,
        bits: u8,
        old: Option<u64>,
    ) -> Result<u64, StoreOutcome> {
        let vlen: usize = value.iter().map(|v| v.len()).sum();
        let total = item::total_len(key.len(), vlen, flags);
        let largest = self.largest_chunk();
        let loc = self.alloc(total.min(largest), old)?;
        // A chained item's segments: chunks of the same (largest) class, so
        // no page of theirs is taken away while the others are found.
        let nseg = chain::segments(total, largest);
        let mut segs = Vec::with_capacity(nseg);
        // A chunk handed out is no item until written (`Slabs::take_free`
        // clears the bits of chunks it hands out for the first time).
        while segs.len() < nseg {
            match self.alloc(largest, old) {
                Ok(s) => segs.push(s),
                Err(e) => {
                    for l in segs.into_iter().chain([loc]) {
                        self.slabs.free(l);
                    }
                    return Err(e);
                }
            }
        }
        // Eviction while allocating may have taken the old item already.
        if let Some(o) = old.filter(|&o| o != loc && self.slabs.is_live(o)) {
            self.remove(o);
        }
        let now = self.now();
        item::write(
            self.slabs.chunk_mut(loc),
            cas,
            item::atime_code(now),
            cost,
            bits,
            exptime,
            flags,
            key,
            value,
        );
        if nseg > 0 {
            chain::write(&mut self.slabs, loc, &segs, value);
            let class = self.slabs.class_of(loc);
            self.slabs.classes[class].segments += nseg as u64;
        }
        self.index_mut(h, |ix, slabs| {
            ix.insert(h, loc, &|l| hash(item::key(slabs.chunk(l))))
        });
        let class = self.slabs.class_of(loc);
        self.policy.link(&mut self.slabs, class, loc);
        self.rebal.stored(h, class, cost, old.is_none());
        let c = &mut self.slabs.classes[class];
        c.used += 1;
        c.requested += total as u64;
        c.stats.cmd_set += 1;
        self.counters.curr_items += 1;
        self.counters.total_items += 1;
        self.counters.bytes += total as u64;
        if old.is_none() {
            self.tiers_forget(h, false);
        }
        self.enforce_budget(Some(loc));
        if self.slabs.is_live(loc) {
            return Ok(loc);
        }
        // Its page was the last one to give: the item was moved to a free
        // chunk of its class, or, with none, given up (the policy's tables
        // having grown for it): then the store failed for lack of memory.
        match self.find(key, h) {
            Some(moved) => Ok(moved),
            None => Err(self.out_of_memory(class)),
        }
    }

    /// The largest chunk: items above it are chained.
    fn largest_chunk(&self) -> usize {
        self.slabs
            .classes
            .last()
            .map_or(0, |c| c.chunk_size as usize)
    }

    /// The pages a class in use may hold even beyond `-m`: one, or for the
    /// last class, what one item of `-I` bytes takes (its head and segments
    /// are all chunks of that class). memcached grants a class its first
    /// page beyond `-m` (`do_slabs_newslab`), so that a small cache stores
    /// every size it is sent, with fewer pages than classes in use, and a
    /// class that appears once memory is full does not take a page from the
    /// others; so does `chunk_of_class`, and the limit grows by the pages so
    /// granted (`allowance`), at most the classes' floors.
    pub(super) fn floor_pages(&self, class: usize) -> usize {
        let c = &self.slabs.classes[class];
        if class + 1 < self.slabs.classes.len() {
            return 1;
        }
        let chunks = 1 + chain::segments(self.config.item_size_max, c.chunk_size as usize);
        chunks.div_ceil(c.per_page.max(1) as usize)
    }

    /// The bytes granted beyond `-m` (`floor_pages`): the pages granted,
    /// at most the floors of the classes now in use.
    fn allowance(&self) -> usize {
        if self.granted == 0 {
            return 0;
        }
        self.granted.min(self.floor_pages_held()) * self.slabs.page_size
    }

    /// Pages the classes hold within their floors.
    fn floor_pages_held(&self) -> usize {
        (0..self.slabs.classes.len())
            .map(|c| self.slabs.classes[c].pages.len().min(self.floor_pages(c)))
            .sum()
    }

    /// Pages adopted from a warm restart file: those over `-m` that are
    /// classes' floors are granted again, as the last run had them.
    pub(super) fn regrant_floors(&mut self) {
        let used = self.slabs.pages_allocated() * self.slabs.page_size + self.aux_bytes();
        let over = used
            .saturating_sub(self.memory_limit)
            .div_ceil(self.slabs.page_size);
        self.granted = over.min(self.floor_pages_held());
    }

    /// Whether every page is within its class's floor: memory may then be
    /// over `-m` (`floor_pages`).
    #[cfg(any(test, feature = "testing"))]
    fn at_floors(&self) -> bool {
        self.slabs.pages_allocated() == self.floor_pages_held()
    }

    fn can_add_page(&self) -> bool {
        self.can_add_page_with(0)
    }

    /// Whether a new page and `extra` bytes more fit in the memory limit.
    /// The N-zone leaves the pages the Z-zone is still to be granted
    /// (`zone_wanted`), so that free memory goes to the zone its share.
    fn can_add_page_with(&self, extra: usize) -> bool {
        self.pages_fit(1 + self.zone_wanted(), extra)
    }

    /// Whether `pages` more pages and `extra` bytes fit in the memory
    /// limit, with [`Engine::page_headroom`] to spare.
    pub(super) fn pages_fit(&self, pages: usize, extra: usize) -> bool {
        (self.slabs.pages_allocated() + pages) * self.slabs.page_size
            + self.aux_bytes()
            + extra
            + self.page_headroom()
            <= self.memory_limit + self.allowance()
    }

    /// Room left beyond a new page. The Z-zone's metadata (descriptors,
    /// pending removals) grows a few bytes at a time: a page that fitted
    /// exactly was over the limit a store later, `enforce_budget` emptied an
    /// N-zone page for it, and the next store took a page again, round and
    /// round (1,468 pages emptied in 1.5 M YCSB-B requests). Without the
    /// zone, aux memory moves only in steps `enforce_budget` handles.
    fn page_headroom(&self) -> usize {
        if self.zone.is_some() {
            ZONE_PAGE_HEADROOM
        } else {
            0
        }
    }

    /// Memory counted in `-m` besides the pages: the index, the eviction
    /// policy's structures, the learned-cost table.
    fn aux_bytes(&self) -> usize {
        self.index_bytes
            + self.index_grown.load(Ordering::Relaxed)
            + self.policy.memory_bytes()
            + self.learner.as_ref().map_or(0, Learner::memory_bytes)
            + self.rebal.memory_bytes()
            + self.zone_memory()
            + self.flash.as_ref().map_or(0, |f| f.memory_bytes())
    }

    /// The cost of an item stored without one, and whether it is a guess:
    /// learned from a recent miss of its key when learning is on, else the
    /// replaced item's, else the mean learned cost (a guess); 1 (all equal:
    /// LRU) when learning is off.
    fn unknown_cost(&mut self, h: u64, old: Option<u64>) -> (u32, bool) {
        let Some(learner) = &mut self.learner else {
            return (1, false);
        };
        if learner.waiting(h) {
            if let Some(c) = learner.learn(h, self.clock.now_us()) {
                return (c, false);
            }
        }
        match old {
            Some(loc) => {
                let chunk = self.slabs.chunk(loc);
                let guessed = item::bits(chunk) & item::GUESSED != 0;
                (self.policy.cost_of(chunk), guessed)
            }
            None => (learner.default_cost(), true),
        }
    }

    /// A chunk for an item of `size` bytes: a free chunk, a new page, or an
    /// evicted item's chunk, else a page taken from another class.
    /// `protect` is never evicted.
    fn alloc(&mut self, size: usize, mut protect: Option<u64>) -> Result<u64, StoreOutcome> {
        let class = self.slabs.class_for(size).ok_or(StoreOutcome::TooLarge)?;
        let mut took_back = false;
        loop {
            if let Some(loc) = self.chunk_of_class(class, protect) {
                return Ok(loc);
            }
            // A class with no page, or nothing to evict, takes a page from
            // the largest class instead of failing (memcached needs
            // slab_reassign for the first case).
            if !self.config.evict || !self.steal_page_for(class, protect) {
                // The Z-zone gives the N-zone a page before a store fails.
                if self.zone_yield_page() {
                    continue;
                }
                // The chunks threads reserved (`magazine`) may be the
                // class's last ones (a class of a few large chunks).
                if !took_back {
                    took_back = true;
                    self.take_back_reserved();
                    continue;
                }
                // Last, the item being replaced may go, as in memcached
                // (a class of one chunk at its floor holds only it). The
                // new value is never read from it: callers copied it.
                if protect.take().is_some() {
                    continue;
                }
                return Err(self.out_of_memory(class));
            }
        }
    }

    /// A chunk of `class` without taking a page from another class: a free
    /// chunk, a spare or new page (within `-m`), or the chunk of the
    /// eviction policy's victim (`protect` never is). None if none is left.
    fn chunk_of_class(&mut self, class: usize, protect: Option<u64>) -> Option<u64> {
        loop {
            if let Some(loc) = self.slabs.take_free(class) {
                return Some(loc);
            }
            if let Some(p) = self.slabs.spare.pop() {
                self.slabs.assign(p, class);
                continue;
            }
            // The page and what the policy allocates for the class's first
            // item (GD-Wheel's wheels) must fit together in `-m`, unless
            // the class is below its floor: that page is granted beyond it.
            let fits = self.can_add_page_with(self.policy.first_item_bytes(class));
            if fits || self.slabs.classes[class].pages.len() < self.floor_pages(class) {
                if let Some(p) = self.slabs.new_page() {
                    self.granted += usize::from(!fits);
                    self.slabs.assign(p, class);
                    continue;
                }
            }
            if !self.config.evict {
                return None;
            }
            let now = self.now();
            return match self.policy.victim(&mut self.slabs, class, now, protect)? {
                // An in-place SET may have renewed it since the policy
                // looked: then it is an eviction.
                Victim::Expired(loc) if self.still_expired(loc, now) => {
                    self.unlink(loc);
                    self.counters.reclaimed += 1;
                    self.slabs.classes[class].stats.reclaimed += 1;
                    Some(loc)
                }
                Victim::Expired(loc) | Victim::Evicted(loc) => {
                    self.evict_victim(loc, class, now);
                    Some(loc)
                }
            };
        }
    }

    /// Whether the live item at `loc` is expired, read with its stripe.
    fn still_expired(&mut self, loc: u64, now: RelTime) -> bool {
        self.hold_item(loc);
        let exp = item::exptime(self.slabs.chunk(loc));
        exp != 0 && exp <= now
    }

    fn out_of_memory(&mut self, class: usize) -> StoreOutcome {
        self.counters.outofmemory += 1;
        self.slabs.classes[class].stats.outofmemory += 1;
        StoreOutcome::NoMemory
    }

    /// Evict the policy's victim at `loc` (class `class`): the eviction
    /// counters, the rebalancer's ghost set, then unlink. Its chunk is not
    /// freed (the caller reuses it).
    fn evict_victim(&mut self, loc: u64, class: usize, now: RelTime) {
        self.hold_item(loc);
        let hdr = item::Header::read(self.slabs.chunk(loc));
        let cost = self.policy.cost_of(self.slabs.chunk(loc)) as u64;
        // Per class: items leaving the class's pages (demoted or not, what
        // the rebalancers compare); the totals: items leaving the cache.
        let demoted = self.note_evicted(loc, class);
        let s = &mut self.slabs.classes[class].stats;
        s.evicted += 1;
        s.evicted_cost += cost;
        if hdr.exptime != 0 {
            s.evicted_nonzero += 1;
        }
        s.evicted_time = item::atime_age(hdr.atime, now) as u64;
        if hdr.bits & item::FETCHED == 0 {
            s.evicted_unfetched += 1;
            if !demoted {
                self.counters.evicted_unfetched += 1;
            }
        }
        if !demoted {
            self.counters.evictions += 1;
            if let Some(log) = self
                .eviction_log
                .as_mut()
                .filter(|l| l.len() < EVICTION_LOG_MAX)
            {
                let ttl = match hdr.exptime {
                    0 => -1,
                    t => i64::from(t.saturating_sub(now)),
                };
                log.push(Evicted {
                    key: self.slabs.key_of(loc).to_vec(),
                    fetched: hdr.bits & item::FETCHED != 0,
                    ttl,
                    age: item::atime_age(hdr.atime, now),
                    class: class as u32 + 1,
                    size: hdr.value_len,
                });
            }
        }
        self.unlink(loc);
    }

    /// `watch evictions`: start or stop recording evictions.
    pub fn log_evictions(&mut self, on: bool) {
        match (on, self.eviction_log.is_some()) {
            (true, false) => self.eviction_log = Some(Vec::new()),
            (false, true) => self.eviction_log = None,
            _ => {}
        }
    }

    /// The evictions recorded since the last call.
    pub fn take_evictions(&mut self) -> Vec<Evicted> {
        self.eviction_log
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// The slab class (from 1) an item of these sizes goes to; the largest
    /// class for a chained one. For `watch`'s `clsid`.
    pub fn class_id(&self, key_len: usize, value_len: usize, flags: u32) -> u32 {
        let classes = self.slabs.classes.len();
        let c = self
            .slabs
            .class_for(item::total_len(key_len, value_len, flags))
            .unwrap_or(classes.saturating_sub(1));
        c as u32 + 1
    }

    /// Remove an item from the index and the counters; its chunk is not freed.
    fn unlink(&mut self, loc: u64) {
        let h = hash(self.slabs.key_of(loc));
        let removed = self.index_mut(h, |ix, _| ix.remove(h, loc));
        let hdr = item::Header::read(self.slabs.chunk(loc));
        debug_assert!(removed, "unlinked item was indexed");
        let total = hdr.total_len() as u64;
        let class = self.slabs.class_of(loc);
        self.policy.unlink(&mut self.slabs, class, loc);
        if chain::is_head(self.slabs.chunk(loc)) {
            let segs = chain::segment_locs(&self.slabs, loc);
            self.slabs.classes[class].segments -= segs.len() as u64;
            for s in segs {
                self.slabs.free(s);
            }
        }
        let c = &mut self.slabs.classes[class];
        c.used -= 1;
        c.requested -= total;
        self.counters.curr_items -= 1;
        self.counters.bytes -= total;
        item::set_bits(self.slabs.chunk_mut(loc), 0);
    }

    /// Unlink and free an item.
    fn remove(&mut self, loc: u64) {
        self.hold_item(loc);
        let bits = item::bits(self.slabs.chunk(loc));
        let exp = item::exptime(self.slabs.chunk(loc));
        if bits & item::FETCHED == 0 && exp != 0 && exp <= self.now() {
            self.counters.expired_unfetched += 1;
            let class = self.slabs.class_of(loc);
            self.slabs.classes[class].stats.expired_unfetched += 1;
        }
        self.unlink(loc);
        self.slabs.free(loc);
    }

    /// An insert without the engine lock grew the index: count it, and
    /// keep to the memory limit.
    pub(crate) fn settle(&mut self) {
        self.fold_index_grown();
        self.enforce_budget(None);
    }

    /// Give pages back until items + index fit in the memory limit again.
    fn enforce_budget(&mut self, mut protect: Option<u64>) {
        // No rescues after a store: a rescue evicts the class's next
        // victim, which may be the item just stored, or moves that item.
        let rescue = protect.is_none();
        loop {
            let used = self.slabs.pages_allocated() * self.slabs.page_size + self.aux_bytes();
            // `allowance` walks the classes: only when over `-m` itself
            // (this runs after every store).
            if used <= self.memory_limit || used <= self.memory_limit + self.allowance() {
                return;
            }
            if let Some(p) = self.slabs.spare.pop() {
                self.slabs.release_page(p);
                continue;
            }
            // The largest class gives a page, one that does not hold the
            // item just stored if any can; else the Z-zone gives one; else
            // that item goes too (the memory limit comes first: a GD-Wheel
            // side array or the index may have just grown past it).
            let keep = protect.map_or_else(Vec::new, |l| self.pages_of_item(l));
            // A class keeps its floor, granted even beyond `-m`.
            let largest = |e: &Engine, keep: &[PageId]| {
                (0..e.slabs.classes.len())
                    .filter(|&c| e.slabs.classes[c].pages.len() > e.floor_pages(c))
                    .filter_map(|c| e.pick_page(c, keep).map(|p| (c, p)))
                    .max_by_key(|&(c, _)| e.slabs.classes[c].pages.len())
            };
            let mut pick = largest(self, &keep);
            if pick.is_none() {
                if self.zone_yield_page() {
                    continue;
                }
                pick = largest(self, &[]);
            }
            let Some((donor, page)) = pick else { return };
            if keep.contains(&page) {
                // The item just stored goes with its page.
                protect = None;
            }
            // Items that find no other chunk are evictions for lack of
            // memory, as memcached counts them (curr_items + evictions
            // stays equal to total_items when nothing is deleted).
            let moved_before = self.counters.reassign_evictions;
            let paused = self.pause_demotions(true);
            self.empty_page(page, rescue);
            self.pause_demotions(paused);
            let lost = self.counters.reassign_evictions - moved_before;
            self.counters.reassign_evictions = moved_before;
            self.counters.evictions += lost;
            self.slabs.classes[donor].stats.evicted += lost;
            self.slabs.unassign(page);
            self.slabs.release_page(page);
            self.slabs.classes[donor].stats.pages_out += 1;
        }
    }

    pub fn delete(&mut self, key: &[u8], cas: u64) -> DeleteOutcome {
        let h = hash(key);
        let Some(loc) = self.find_live(key, h) else {
            if let Some(f) = &self.flash {
                // A copy on flash is deleted as if it had been evicted
                // (docs/protocol.md, "The flash tier").
                f.forget(h);
            }
            let outcome = self.delete_in_zone(key, h, cas);
            self.enforce_budget(None);
            return outcome;
        };
        if cas != 0 && item::Header::read(self.slabs.chunk(loc)).cas != cas {
            return DeleteOutcome::Exists;
        }
        let class = self.slabs.class_of(loc);
        self.slabs.classes[class].stats.delete_hits += 1;
        self.remove(loc);
        DeleteOutcome::Deleted
    }

    /// Change an item's expiry (touch/gat); returns the item if it exists.
    pub fn touch(&mut self, key: &[u8], expiry: Expiry) -> Option<ItemRef<'_>> {
        let h = hash(key);
        let loc = self.find_to_change(key, h)?;
        item::set_exptime(self.slabs.chunk_mut(loc), exptime_of(expiry));
        self.access(loc, Lookup::GET);
        let class = self.slabs.class_of(loc);
        self.slabs.classes[class].stats.touch_hits += 1;
        Some(self.view(loc))
    }

    pub fn arith(&mut self, key: &[u8], req: &Arith) -> ArithOutcome {
        let h = hash(key);
        let Some(loc) = self.find_to_change(key, h) else {
            let Some((initial, expiry)) = req.autovivify else {
                return ArithOutcome::NotFound;
            };
            let digits = initial.to_string();
            let cas = self.next_cas();
            return match self.write_new(
                h,
                key,
                &[digits.as_bytes()],
                0,
                exptime_of(expiry),
                cas,
                item::quantize_cost(1),
                item::LIVE,
                None,
            ) {
                Ok(_) => match self.find(key, h) {
                    Some(loc) => ArithOutcome::Value {
                        value: initial,
                        id: ItemId(loc),
                    },
                    None => ArithOutcome::NoMemory,
                },
                Err(_) => ArithOutcome::NoMemory,
            };
        };
        if chain::is_head(self.slabs.chunk(loc)) {
            // Far longer than any number.
            return ArithOutcome::NonNumeric;
        }
        let p = item::parts(self.slabs.chunk(loc));
        // Like a chained one, an empty value is refused before the CAS is
        // compared (memcached's `do_add_delta`).
        if p.value.is_empty() {
            return ArithOutcome::NonNumeric;
        }
        if req.cas != 0 && p.header.cas != req.cas {
            return ArithOutcome::Exists;
        }
        let Some(current) = parse_decimal(p.value) else {
            return ArithOutcome::NonNumeric;
        };
        let value = if req.incr {
            current.wrapping_add(req.delta)
        } else {
            current.saturating_sub(req.delta)
        };
        let text = value.to_string();
        let digits = text.as_bytes();
        let (flags, old_len, cost) = (p.flags, p.value.len(), p.header.cost);
        let exptime = match req.new_expiry {
            Some(e) => exptime_of(e),
            None => p.header.exptime,
        };
        let class = self.slabs.class_of(loc);
        let s = &mut self.slabs.classes[class].stats;
        if req.incr {
            s.incr_hits += 1;
        } else {
            s.decr_hits += 1;
        }
        let cas = self.next_cas();
        if digits.len() <= old_len {
            // Fits: rewrite in place, padding with spaces like memcached
            // (`do_add_delta`), so a shrinking counter never reallocates.
            let chunk = self.slabs.chunk_mut(loc);
            let start = item::value_start(chunk);
            let field = &mut chunk[start..start + old_len];
            field[..digits.len()].copy_from_slice(digits);
            field[digits.len()..].fill(b' ');
            item::set_cas(chunk, cas);
            item::set_exptime(chunk, exptime);
            self.access(
                loc,
                Lookup {
                    bump: true,
                    fetch: false,
                },
            );
            return ArithOutcome::Value {
                value,
                id: ItemId(loc),
            };
        }
        // A longer result is a new item, not yet fetched (memcached: `h0`).
        match self.write_new(
            h,
            key,
            &[digits],
            flags,
            exptime,
            cas,
            cost,
            item::LIVE,
            Some(loc),
        ) {
            Ok(_) => match self.find(key, h) {
                Some(l) => ArithOutcome::Value {
                    value,
                    id: ItemId(l),
                },
                None => ArithOutcome::NoMemory,
            },
            Err(_) => ArithOutcome::NoMemory,
        }
    }

    fn live_id(&mut self, id: ItemId) -> Option<u64> {
        if !self.slabs.is_live(id.0) {
            return None;
        }
        self.hold_item(id.0);
        Some(id.0)
    }

    fn update_bits(&mut self, id: ItemId, f: impl FnOnce(u8) -> u8) {
        if let Some(loc) = self.live_id(id) {
            let chunk = self.slabs.chunk_mut(loc);
            let b = item::bits(chunk);
            item::set_bits(chunk, f(b));
        }
    }

    /// Meta helpers: change bits on a live item.
    pub fn set_expiry(&mut self, id: ItemId, expiry: Expiry) {
        if let Some(loc) = self.live_id(id) {
            item::set_exptime(self.slabs.chunk_mut(loc), exptime_of(expiry));
        }
    }

    pub fn set_stale(&mut self, id: ItemId, stale: bool) {
        self.update_bits(id, |b| {
            if stale {
                b | item::STALE
            } else {
                b & !item::STALE
            }
        });
    }

    pub fn set_win_sent(&mut self, id: ItemId, sent: bool) {
        self.update_bits(id, |b| if sent { b | item::WIN } else { b & !item::WIN });
    }

    /// Meta `md I`: mark stale, give a new CAS (`new_cas`, the client's
    /// `E`, or the next counter value), optionally a new expiry.
    pub fn invalidate(&mut self, id: ItemId, expiry: Option<Expiry>, new_cas: Option<u64>) {
        if self.live_id(id).is_none() {
            return;
        }
        let cas = match new_cas {
            Some(c) => c & item::CAS_MASK,
            None => self.next_cas(),
        };
        let chunk = self.slabs.chunk_mut(id.0);
        item::set_cas(chunk, cas);
        let b = item::bits(chunk);
        item::set_bits(chunk, (b | item::STALE) & !item::WIN);
        if let Some(e) = expiry {
            item::set_exptime(chunk, exptime_of(e));
        }
    }

    /// `flush_all [delay]`: drop everything now, or when the clock reaches `at`.
    pub fn flush_all(&mut self, at: Option<RelTime>) {
        // A delayed flush that is due happens first: a new delay must not
        // cancel it.
        self.check_flush();
        match at {
            Some(t) if t > self.now() => {
                self.pending_flush = Some(t);
                self.flush_at.store(t, Ordering::Release);
            }
            _ => {
                self.pending_flush = None;
                self.flush_at.store(0, Ordering::Release);
                self.flush_now();
            }
        }
    }

    fn check_flush(&mut self) {
        if let Some(t) = self.pending_flush {
            if t <= self.now() {
                self.pending_flush = None;
                self.flush_at.store(0, Ordering::Release);
                self.flush_now();
            }
        }
    }

    /// O(pages): every chunk becomes free by resetting the pages' cursors.
    fn flush_now(&mut self) {
        self.hold_all();
        self.take_back_reserved();
        for s in 0..self.stripes.len() {
            // SAFETY: as in `stripe`: every stripe is acquired.
            unsafe { self.stripes.stripe_mut(s) }.index.clear();
            self.index_shape[s] = self.shape_of(s);
        }
        self.index_grown.store(0, Ordering::Relaxed);
        self.index_bytes = self.index_memory();
        self.slabs.clear_items();
        self.policy.clear();
        self.counters.curr_items = 0;
        self.counters.bytes = 0;
        self.rebal.flushed();
        self.drain_after_flush();
        // The page in transit may have become a spare one, over `-m`.
        self.enforce_budget(None);
        if let Some(z) = self.zone.as_mut() {
            z.zone.lock().clear();
        }
        if let Some(f) = &self.flash {
            f.clear();
        }
    }

    /// Background work: pending delayed flush, reclaiming expired items (at most
    /// `budget` chunks visited), rebalancing (deciding a page move, draining
    /// at most `budget` chunks of the page in transit). Returns the chunks
    /// visited and drained.
    pub fn maintain(&mut self, budget: usize) -> usize {
        self.check_flush();
        let visited = match self.repartitions() {
            true => self.repartition_step(budget),
            false => self.reclaim_step(budget),
        };
        visited + self.rebalance_step(budget) + self.zone_step(budget)
    }

    /// How many `maintain` slices a maintainer runs per period (200 ms in
    /// the server) while each finds work: the reclaimer's walk needs few;
    /// re-partitioning gets more until a sweep over all pages finds little
    /// to trade (docs/benchmarks-history.md, "Cavast's layout").
    pub fn maintain_slices(&self) -> usize {
        self.repartition_slices().unwrap_or(RECLAIM_SLICES)
    }

    /// The expiry reclaimer: walk `budget` chunks on from where it stopped.
    fn reclaim_step(&mut self, budget: usize) -> usize {
        let now = self.now();
        let mut visited = 0;
        let npages = self.slabs.pages.len();
        let mut pages_seen = 0;
        while visited < budget && pages_seen <= npages && npages > 0 {
            let (p, c) = self.reclaim_at;
            if p >= npages {
                self.reclaim_at = (0, 0);
                pages_seen += 1;
                continue;
            }
            let bump = match &self.slabs.pages[p] {
                Some(page) if page.class != 0 => page.bump,
                _ => 0,
            };
            if c >= bump {
                self.reclaim_at = (p + 1, 0);
                pages_seen += 1;
                continue;
            }
            self.reclaim_at = (p, c + 1);
            visited += 1;
            let loc = self.slabs.loc(p as PageId, c);
            if self.slabs.bits(loc) & item::LIVE != 0 {
                self.reclaim_or_age(loc, now);
            }
        }
        visited
    }

    /// The reclaimer's work on the live item at `loc`: remove it if it
    /// expired (returns true), else keep its access time from wrapping.
    fn reclaim_or_age(&mut self, loc: u64, now: RelTime) -> bool {
        let exp = self.slabs.exptime(loc);
        if exp != 0 && exp <= now && self.still_expired(loc, now) {
            self.counters.crawler_reclaimed += 1;
            let class = self.slabs.class_of(loc);
            self.slabs.classes[class].stats.crawler_reclaimed += 1;
            self.remove(loc);
            return true;
        }
        if self.age_to_flash(loc, now) {
            return true;
        }
        // Keep the 16-bit access time from wrapping around.
        if item::atime_age(self.slabs.atime(loc), now) > item::ATIME_SATURATE {
            self.hold_item(loc);
            let code = item::atime_code(now).wrapping_sub(item::ATIME_SATURATE as u16);
            item::set_atime(self.slabs.chunk_mut(loc), code);
        }
        false
    }

    /// memcached's `ext_item_age`: the live item at `loc`, idle longer than
    /// it, goes to flash ahead of eviction, and memory keeps nothing of it
    /// but the tier's index entry (memcached keeps its header). False if
    /// it stays: fresher, chained, too small, or the tier's stage is full
    /// (the reclaimer's next pass tries again).
    fn age_to_flash(&mut self, loc: u64, now: RelTime) -> bool {
        let Some(age) = self.flash.as_ref().and_then(|f| f.config().item_age) else {
            return false;
        };
        if item::atime_age(self.slabs.atime(loc), now) <= age {
            return false;
        }
        self.hold_item(loc);
        let chunk = self.slabs.chunk(loc);
        if chain::is_head(chunk) {
            return false;
        }
        let image = &chunk[..item::stored_len(chunk)];
        let h = hash(item::key(image));
        if !self.flash.as_ref().is_some_and(|f| f.admit(h, image)) {
            return false;
        }
        self.unlink(loc);
        self.slabs.free(loc);
        true
    }

    /// `cache_memlimit`: change `-m` at run time. Shrinking frees pages.
    pub fn set_memory_limit(&mut self, bytes: usize) -> Result<(), ConfigError> {
        if bytes < self.slabs.page_size {
            return Err(ConfigError::MemoryLimit(bytes));
        }
        Self::check_addressable(&self.slabs, bytes)?;
        self.memory_limit = bytes;
        self.config.memory_limit = bytes;
        self.enforce_budget(None);
        Ok(())
    }

    /// Memory of every stripe's index table.
    fn index_memory(&self) -> usize {
        (0..self.stripes.len())
            .map(|s| self.stripe_ref(s).index.memory_bytes())
            .sum::<usize>()
            + self.stripes.memory_bytes()
    }

    pub fn stats(&self) -> EngineStats {
        let (mut buckets, mut expanding) = (0usize, false);
        for &(n, growing) in &self.index_shape {
            buckets += 1 << n.ilog2();
            expanding |= growing;
        }
        let c = &self.counters;
        let zs = self.zone_stats();
        let fs = self.flash.as_ref().map(|f| f.stats());
        // SETs made without the engine lock that it has not counted yet.
        let mut p = Counts::default();
        for n in self.stripes.pending_sum(self.slabs.classes.len()) {
            p.add(&n);
        }
        EngineStats {
            curr_items: c.curr_items
                + p.items
                + zs.map_or(0, |z| z.zone.items)
                + fs.map_or(0, |f| f.items + f.staged),
            total_items: c.total_items + p.sets,
            bytes: c.bytes.wrapping_add(p.requested),
            evictions: c.evictions
                + zs.map_or(0, |z| z.zone.evictions)
                + fs.map_or(0, |f| f.evictions),
            reclaimed: c.reclaimed,
            expired_unfetched: c.expired_unfetched,
            evicted_unfetched: c.evicted_unfetched,
            get_expired: c.get_expired,
            get_flushed: 0,
            crawler_reclaimed: c.crawler_reclaimed,
            limit_maxbytes: self.memory_limit as u64,
            total_malloced: (self.slabs.pages_allocated() * self.slabs.page_size) as u64,
            hash_bytes: (self.index_bytes + self.index_grown.load(Ordering::Relaxed)) as u64,
            hash_power_level: buckets.max(1).ilog2(),
            hash_is_expanding: expanding,
            slabs_moved: c.slabs_moved,
            slab_reassign_rescues: c.rescues,
            slab_reassign_evictions: c.reassign_evictions,
            slab_reassign_running: self.drain.is_some(),
            free_pages: self.slabs.spare.len() as u64,
            outofmemory: c.outofmemory,
            evicted_cost: self
                .slabs
                .classes
                .iter()
                .map(|c| c.stats.evicted_cost)
                .sum(),
            learned_costs: self.learner.as_ref().map_or(0, |l| l.learned),
            learn_table_bytes: self.learner.as_ref().map_or(0, Learner::memory_bytes) as u64,
            eviction_bytes: self.policy.memory_bytes() as u64,
            rebalance: self.rebal.policy().name(),
            capacity_misses: self.rebal.totals().capacity_misses,
            cost_capacity_misses: self.rebal.totals().cost_capacity_misses,
            rebalance_decisions: self.rebal.decisions,
            rebalance_bytes: self.rebal.memory_bytes() as u64,
            ghost_capacity: self.rebal.ghost_capacity() as u64,
            repartition: self.repartition.as_ref().map(|r| r.stats),
            zzone: zs,
            flash: fs,
        }
    }

    /// One entry per slab class that has ever held a page.
    pub fn slab_stats(&self) -> Vec<SlabClassStats> {
        let now = self.now();
        let pending = self.stripes.pending_sum(self.slabs.classes.len());
        (0..self.slabs.classes.len())
            .filter(|&c| {
                let cl = &self.slabs.classes[c];
                !cl.pages.is_empty() || cl.stats.pages_out > 0 || cl.stats.evicted > 0
            })
            .map(|c| {
                let mut s = self.slabs.class_stats(c);
                let p = &pending[c];
                s.cmd_set += p.sets;
                s.mem_requested = s.mem_requested.wrapping_add(p.requested);
                s.number += p.items;
                s.used_chunks += p.items;
                // Reserved chunks are free chunks a thread holds: neither
                // counted used nor on a free list (`magazine`).
                let reserved = self.magazines.count(self.stripes.slots_taken(), c);
                s.free_chunks += reserved;
                s.get_hits = self.counters.get_hits[c] + self.stripes.reader_hits(c);
                s.age = self.hand_age(c, now) as u64;
                s.avg_cost = match s.number {
                    0 => 0,
                    n => (self.policy.live_cost(c) + p.cost + n / 2) / n,
                };
                let rc = self.rebal.counts(c);
                s.capacity_misses = rc.capacity_misses;
                s.cost_capacity_misses = rc.cost_capacity_misses;
                s
            })
            .collect()
    }

    /// Age of the item under the class's CLOCK hand (memcached's items:age).
    fn hand_age(&self, class: usize, now: RelTime) -> u32 {
        if let Some(loc) = self.policy.peek(class) {
            return item::atime_age(self.slabs.atime(loc), now);
        }
        let c = &self.slabs.classes[class];
        if c.pages.is_empty() {
            return 0;
        }
        let page = c.pages[c.hand_page.min(c.pages.len() - 1)];
        let loc = self.slabs.loc(page, c.hand_chunk);
        if !self.slabs.is_live(loc) {
            return 0;
        }
        item::atime_age(self.slabs.atime(loc), now)
    }

    /// `stats cachedump <class> <limit>`: up to `limit` (0 = all) live items
    /// of a class as (key, value length, expiry), at most `max_bytes` of keys.
    pub fn cachedump(
        &mut self,
        class_id: u32,
        limit: usize,
        max_bytes: usize,
    ) -> Vec<(Vec<u8>, usize, Expiry)> {
        let mut out = Vec::new();
        self.hold_all();
        let Some(class) = (class_id as usize)
            .checked_sub(1)
            .and_then(|c| self.slabs.classes.get(c))
        else {
            return out;
        };
        let now = self.now();
        let mut bytes = 0;
        for &page in &class.pages {
            for loc in self.slabs.live_in_page(page) {
                let chunk = self.slabs.chunk(loc);
                let (h, key) = (item::Header::read(chunk), item::key(chunk));
                let exp = h.exptime;
                if exp != 0 && exp <= now {
                    continue;
                }
                if (limit != 0 && out.len() >= limit) || bytes + key.len() > max_bytes {
                    return out;
                }
                bytes += key.len() + 32;
                let expiry = if exp == 0 {
                    Expiry::Never
                } else {
                    Expiry::At(exp)
                };
                out.push((key.to_vec(), h.value_len as usize, expiry));
            }
        }
        out
    }

    /// `lru_crawler metadump`: the live items of the first page at or
    /// after `from` whose class `wanted` accepts (ids from 1), appended to
    /// `out`; returns the page to go on from, or None once every page has
    /// been visited. One page per call, so the engine lock is held for a
    /// page at a time however large the dump.
    pub fn metadump_page(
        &mut self,
        from: usize,
        wanted: impl Fn(u32) -> bool,
        out: &mut Vec<MetaItem>,
    ) -> Option<usize> {
        self.hold_all();
        let now = self.now();
        let cas = self.config.cas_enabled;
        for p in from..self.slabs.pages.len() {
            let Some(class) = self.slabs.pages[p].as_ref().map(|pg| pg.class) else {
                continue;
            };
            if class == 0 || !wanted(class as u32) {
                continue;
            }
            for loc in self.slabs.live_in_page(p as PageId) {
                let chunk = self.slabs.chunk(loc);
                let h = item::Header::read(chunk);
                if h.exptime != 0 && h.exptime <= now {
                    continue;
                }
                let flags = item::flags(chunk);
                out.push(MetaItem {
                    key: item::key(chunk).to_vec(),
                    exptime: h.exptime,
                    accessed: now.saturating_sub(item::atime_age(self.slabs.atime(loc), now)),
                    cas: if cas { h.cas } else { 0 },
                    fetched: h.bits & item::FETCHED != 0,
                    class: class as u32,
                    size: item::memcached_size(
                        h.key_len as usize,
                        h.value_len as usize,
                        flags,
                        cas,
                    ),
                });
            }
            return Some(p + 1);
        }
        None
    }

    /// Warm restart (`warm::save`): call `f` with each live item of the
    /// first page at or after `from` whose last access is at least
    /// `min_age` and less than `max_age` seconds ago; returns the page to
    /// go on from, or None once every page has been visited. One page per
    /// call, as `metadump_page`.
    pub fn export_page(
        &mut self,
        from: usize,
        min_age: u32,
        max_age: u32,
        mut f: impl FnMut(&ItemRef<'_>),
    ) -> Option<usize> {
        self.hold_all();
        let now = self.now();
        for p in from..self.slabs.pages.len() {
            match &self.slabs.pages[p] {
                Some(pg) if pg.class != 0 => {}
                _ => continue,
            }
            for loc in self.slabs.live_in_page(p as PageId) {
                let h = item::Header::read(self.slabs.chunk(loc));
                let age = item::atime_age(self.slabs.atime(loc), now);
                if (h.exptime != 0 && h.exptime <= now) || age < min_age || age >= max_age {
                    continue;
                }
                f(&self.view(loc));
            }
            return Some(p + 1);
        }
        None
    }

    /// Make every CAS handed out from now on larger than `cas` (items
    /// restored with their old CAS values must not see them reused).
    pub fn raise_cas(&self, cas: u64) {
        self.cas_counter
            .fetch_max(cas.saturating_add(1), std::sync::atomic::Ordering::Relaxed);
    }

    /// `stats sizes`: (size rounded up to 32 bytes, item count), ascending.
    pub fn size_histogram(&mut self) -> Vec<(u32, u64)> {
        self.hold_all();
        let mut hist = std::collections::BTreeMap::new();
        for (p, page) in self.slabs.pages.iter().enumerate() {
            let Some(page) = page else { continue };
            if page.class == 0 {
                continue;
            }
            for loc in self.slabs.live_in_page(p as PageId) {
                let size = item::Header::read(self.slabs.chunk(loc)).total_len() as u32;
                *hist.entry(size.div_ceil(32) * 32).or_insert(0u64) += 1;
            }
        }
        hist.into_iter().collect()
    }

    /// `stats reset`: clear the resettable counters.
    pub fn reset_stats(&mut self) {
        if let Some(z) = self.zone.as_mut() {
            z.reset_stats();
        }
        // First count what in-place SETs left in the stripes.
        self.hold_all();
        let c = &mut self.counters;
        c.total_items = 0;
        c.evictions = 0;
        c.reclaimed = 0;
        c.expired_unfetched = 0;
        c.evicted_unfetched = 0;
        c.get_expired = 0;
        c.crawler_reclaimed = 0;
        c.outofmemory = 0;
        if let Some(r) = &mut self.repartition {
            r.stats = Default::default();
        }
        c.get_hits.fill(0);
        self.stripes.reset_reader_hits();
        for class in &mut self.slabs.classes {
            let s = &mut class.stats;
            *s = SlabClassStats {
                id: s.id,
                chunk_size: s.chunk_size,
                chunks_per_page: s.chunks_per_page,
                total_pages: s.total_pages,
                ..Default::default()
            };
        }
        self.rebal.reset_stats();
    }
}

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
            let published = (z.zone.memory_bytes(), z.zone.wanted_pages());
            zone.validate();
            assert_eq!(
                published,
                (zone.memory_bytes(), zone.wanted_pages()),
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
        // Within `-m` and the pages granted beyond it, or over them only by
        // classes' floors.
        assert!(
            self.slabs.pages_allocated() * self.slabs.page_size + self.aux_bytes()
                <= self.memory_limit.max(self.slabs.page_size) + self.allowance()
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

/// Evictions kept for `watch` between two visits of the server's
/// maintainer; more are not recorded.
const EVICTION_LOG_MAX: usize = 4096;

/// An eviction as `watch evictions` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evicted {
    pub key: Vec<u8>,
    pub fetched: bool,
    /// Seconds it had left (-1: no expiry).
    pub ttl: i64,
    /// Seconds since its last access.
    pub age: u32,
    pub class: u32,
    pub size: u32,
}

/// An item as `lru_crawler metadump` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaItem {
    pub key: Vec<u8>,
    /// Relative expiry time (0: never).
    pub exptime: RelTime,
    /// Relative time of its last access.
    pub accessed: RelTime,
    pub cas: u64,
    pub fetched: bool,
    /// Its slab class id (from 1).
    pub class: u32,
    /// The size memcached would give it (`item::memcached_size`).
    pub size: usize,
}

/// memcached's incr/decr read the value with `safe_strtoull` on the item's
/// data, which C sees up to its first NUL and followed by `\r\n`: leading
/// white space, a sign, any number of leading zeros, and anything after a
/// white-space byte are fine (`" 5"`, `"007"`, `"12 ab"`, a padded result).
fn parse_decimal(v: &[u8]) -> Option<u64> {
    cachalot_protocol::text::strtoull(cachalot_protocol::text::until_nul(v))
}
