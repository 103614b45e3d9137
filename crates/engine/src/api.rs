//! The engine's vocabulary: the requests and outcomes of its operations
//! (`Store`, `Arith`, `Lookup`, the outcomes), the view of an item
//! (`ItemRef`, built only by [`ItemRef::new`]), what the dumps report, and
//! the saved pages of a warm restart.
//! Below the engine, so that `crate::cache`'s GET path and the tiers can
//! speak it without depending on the engine.

use crate::chain::Value;
use crate::clock::{Expiry, RelTime};
use crate::config::{Config, VALUE_MAX_LEN};
use crate::item;

/// Keys prefetched together by [`crate::engine::Engine::lookup_batch`]: enough loads in
/// flight to cover a memory latency (about ten line fill buffers per core),
/// few enough that the first lines are still cached when used.
pub const LOOKUP_BATCH: usize = 16;

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

/// A view of an item image held outside the slabs (a Z-zone copy): its id
/// names no N-zone item.
pub(crate) fn image_view(image: &[u8], cas_enabled: bool, now: RelTime) -> ItemRef<'_> {
    let value = Value::flat(&image[item::value_start(image)..]);
    item_view(image, ItemId(u64::MAX), value, cas_enabled, now)
}

/// The view of the item whose header, flags and key start `head`.
pub(crate) fn item_view<'a>(
    head: &'a [u8],
    id: ItemId,
    value: Value<'a>,
    cas_enabled: bool,
    now: RelTime,
) -> ItemRef<'a> {
    let h = item::Header::read(head);
    ItemRef::new(
        id,
        item::key(head),
        value,
        item::flags(head),
        &h,
        cas_enabled,
        now,
    )
}

impl<'a> ItemRef<'a> {
    /// The view of an item from its parts and header (`h`): the one place
    /// an `ItemRef` is assembled, for the engine's views and for the GET
    /// path outside the lock (`crate::cache`), which passes the header
    /// bits and access time as it just left them.
    #[inline]
    pub(crate) fn new(
        id: ItemId,
        key: &'a [u8],
        value: Value<'a>,
        flags: u32,
        h: &item::Header,
        cas_enabled: bool,
        now: RelTime,
    ) -> ItemRef<'a> {
        ItemRef {
            id,
            key,
            value,
            flags,
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
}

/// [`crate::engine::Engine::fits`] from the configuration alone (`-I` and `-C` never
/// change), so [`crate::Cache::fits`] needs no lock.
pub(crate) fn fits(config: &Config, key_len: usize, value_len: usize, flags: u32) -> bool {
    value_len <= VALUE_MAX_LEN
        && item::memcached_size(key_len, value_len, flags, config.cas_enabled)
            <= config.item_size_max
}

/// The expiry field of an item stored with `e`.
pub(crate) fn exptime_of(e: Expiry) -> u32 {
    match e {
        Expiry::Never => 0,
        Expiry::At(t) => t.max(1),
        // Relative time 1 is always in the past (the clock starts at 2).
        Expiry::Expired => 1,
    }
}

/// Told the key of each item that leaves the cache to make room (evicted
/// from the N-zone with no tier below taking it, or from the Z-zone): the
/// server's evictions per key prefix. Called with the engine's or the
/// Z-zone's lock held, so it must be quick and take none of the engine's
/// locks. Not told: the flash tier's evictions (its keys are inside
/// compressed containers it drops whole), nor the rare Z-zone items a
/// block rewrite loses for want of room in its page.
pub trait EvictionTap: Send + Sync {
    fn evicted(&self, key: &[u8]);
    /// Whether it counts now: the Z-zone keeps the keys of the blocks it
    /// packs only then.
    fn wanted(&self) -> bool {
        true
    }
}

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
    /// The bytes of its image (header, key, value): what `stats`' `bytes`
    /// sums over the N-zone's items and `zzone_bytes_in` over the
    /// Z-zone's (`stats prefixes` adds them up by prefix).
    pub stored: usize,
    /// Where it is.
    pub tier: Tier,
}

/// Where an item `lru_crawler metadump` lists is kept (issue 34).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    /// The slab pages (the N-zone).
    Memory,
    /// A compressed block of the Z-zone (its class: the N-zone class its
    /// image would take).
    Zzone,
    /// The flash tier.
    Flash,
}

// Warm restart by whole pages (`crate::warm`, `engine/restore.rs`).

/// How an engine cuts its pages into chunks: saved pages load as they are
/// only into an engine with the same layout (the same `-n`, `-f`, `-I` and
/// `slab_chunk_max`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageLayout {
    pub page_size: u32,
    pub chunk_bits: u32,
    pub item_size_max: u64,
    /// Chunk size of each class.
    pub sizes: Vec<u32>,
}

/// The clock the saved items' times are relative to.
#[derive(Clone, Copy, Debug)]
pub struct SavedClock {
    /// Unix time of the saving process's relative time 0.
    pub started_unix: i64,
    /// Its relative time when it saved.
    pub now: RelTime,
}

/// What [`crate::engine::Engine::adopt_pages`] brought back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Adopted {
    pub items: u64,
    /// Key and value bytes of those items.
    pub bytes: u64,
    /// Items whose TTL ran out while the server was down.
    pub expired: u64,
    pub max_cas: u64,
    /// Pages that failed their check.
    pub bad_pages: u64,
}

/// Where [`crate::engine::Engine::adopt_pages`] gets a saved page's bytes.
pub enum PageSource<'a> {
    /// Read a page's worth from the file where it stands.
    Read(&'a std::fs::File),
    /// Map a page's worth of a file on a RAM disk, from an offset that is
    /// a multiple of 4 KB (`Arena::map_file`): no copy, no memory to zero.
    Map(&'a std::fs::File, u64),
}

/// A page as `warm::save` wrote it.
pub struct SavedPage<'a> {
    pub class: usize,
    /// Chunks handed out.
    pub bump: u32,
    /// CRC-32 of its bytes.
    pub crc: u32,
    pub source: PageSource<'a>,
}
