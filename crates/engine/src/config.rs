//! The engine's configuration: [`Config`], filled from memcached's
//! command-line flags, its errors, the names of the eviction and
//! rebalancing policies (`-o eviction=`, `-o rebalance=`) and memcached's
//! size limits.
//!
//! It sits below the policies (`evict`, `rebalance`), which read their kind
//! from here, and above the components whose own settings it names
//! (`flash::config::FlashConfig`, `rebalance::tuning::Tuning`,
//! `codec::Codec`, the stripes' and the Z-zone's defaults), each in a module
//! that imports nothing above it.

use crate::codec;
use crate::flash::config::FlashConfig;
use crate::rebalance::tuning::Tuning;
use crate::stripe;
use crate::zzone::config::SAMPLES;

/// Default page size: memcached's 1 MB slab page.
pub const DEFAULT_PAGE_SIZE: usize = 1 << 20;
/// Longest key memcached accepts.
pub const KEY_MAX_LEN: usize = 250;
/// Largest value: memcached's largest `-I` (1 GB).
pub const VALUE_MAX_LEN: usize = 1 << 30;

/// Engine configuration, filled from memcached's command-line flags.
#[derive(Clone, Debug)]
pub struct Config {
    /// `-m`: bytes for everything the cache stores (items and index).
    pub memory_limit: usize,
    /// `-I`: the largest item (header + key + value) accepted.
    pub item_size_max: usize,
    /// `-o slab_chunk_max=`: the largest chunk; a larger item is chained
    /// over several chunks (memcached's default: half a page).
    pub slab_chunk_max: usize,
    /// `-f`: chunk size growth factor between slab classes.
    pub growth_factor: f64,
    /// `-n`: minimum space for key + value + flags in the smallest chunk.
    pub chunk_min_data: usize,
    /// `-C` turns CAS off (cas uniques are then reported as 0).
    pub cas_enabled: bool,
    /// `-M` sets this to false: return an error instead of evicting.
    pub evict: bool,
    /// `-o slab_reassign`: allow pages to move between classes.
    pub slab_reassign: bool,
    /// `-o slab_automove=N`: 0 off, 1 background rebalancing, 2 aggressive.
    pub slab_automove: u8,
    /// `-L`: preallocate all pages at start (and use huge pages, as `-L`
    /// does in memcached).
    pub prealloc: bool,
    /// `-o hugepages=0|1`: back pages with transparent huge pages
    /// (`MADV_HUGEPAGE`, Cavast section 6.1; see `arena`).
    pub hugepages: bool,
    /// `-o eviction=lru|gdwheel`: which item to evict within a slab class.
    pub eviction: EvictionPolicy,
    /// `-o rebalance=off|memcached|sas|cost-per-byte`: how pages move between classes.
    pub rebalance: RebalancePolicy,
    /// `-o learn_costs=0|1`: infer an item's cost from the gap between a GET
    /// miss and the SET that follows, when the client sends no cost.
    pub learn_costs: bool,
    /// Knobs of the rebalancing rules (SAS's M and decay, ghost set size).
    pub rebalance_tuning: Tuning,
    /// `-o lock_stripes=N`: index stripes, each with its own lock (rounded
    /// up to a power of two, at most 4096; see `stripe`).
    pub lock_stripes: usize,
    /// `-o in_place_sets=0|1`: a SET whose new item belongs to the slab
    /// class of the one it replaces overwrites it in its chunk, holding
    /// only its key's stripe (`Cache::store`; CLOCK without learned costs).
    /// On by default: it never lowered a hit ratio measured
    /// (docs/benchmarks-history.md, "Engine scaling: SETs in place").
    pub in_place_sets: bool,
    /// `-o lockfree_inserts=0|1`: a SET of a new key places its item in a
    /// chunk reserved for its thread, holding only its key's stripe
    /// (`magazine`; when in-place SETs are allowed, without SAS).
    pub lockfree_inserts: bool,
    /// `-o repartition=0|1`: the maintainer sorts each page's items into
    /// columns by temperature, hottest first, and reclaims expired items on
    /// the way (Cavast sections 4.1, 4.4 and 6.1; `engine/repartition.rs`;
    /// CLOCK only). Off by default: docs/benchmarks-history.md, "Cavast's layout".
    pub repartition: bool,
    /// `-o zzone=0|1`: items the N-zone (the slab engine) evicts go to a
    /// compressed Z-zone in the same memory, and GETs that miss look there
    /// (zExpander; `zzone`). On by default (issue 34): values that do not
    /// compress are refused by the zone's filter and cost a sample each.
    pub zzone: bool,
    /// `-o zzone_block=N`: bytes a Z-zone block may hold once compressed
    /// before it splits (binary splits leave blocks about two thirds full
    /// on average). 4 KB: with deltas (`zzone_deltas`) a larger block
    /// costs little more CPU per demotion, and at `-m 64` it keeps 10%
    /// more JSON rows than 2 KB with no fewer hits on YCSB-B and ETC
    /// (docs/benchmarks-history.md).
    pub zzone_block: usize,
    /// `-o zzone_deltas=N`: flushes a Z-zone block takes as deltas before
    /// one rewrites it whole (`zzone/frames.rs`; 0: every flush rewrites),
    /// while the writer keeps up (15 while it is behind:
    /// `Zone::deltas_now`).
    pub zzone_deltas: u8,
    /// `-o zzone_codec=lz4|zstd|none`.
    pub zzone_codec: codec::Codec,
    /// `-o zzone_target=P`: the share (percent) of the expensive
    /// operations the adaptive split wants served by the N-zone
    /// (zExpander §3.3.1: 90); 0 lets the Z-zone take all it can.
    pub zzone_target: u8,
    /// Demoted items sampled before a dictionary is trained (and between
    /// two trainings): `zzone::SAMPLES`; the tests take fewer.
    pub zzone_dict_samples: usize,
    /// `--flash-path`/`--flash-size` (or `-o ext_path=`): items leaving
    /// memory go to a flash tier in this file (SlimCache; `flash`).
    pub flash: Option<FlashConfig>,
    /// Bytes of `-m` the server's observers hold (the hot-key sketches of
    /// `stats hotkeys`): counted with the index and the tiers' own
    /// structures, so `-m` bounds them too.
    pub observer_bytes: usize,
}

/// Eviction within a slab class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EvictionPolicy {
    /// Recency only: CLOCK, an LRU approximation (memcached's behaviour).
    #[default]
    Lru,
    /// GreedyDual by cost with hierarchical cost wheels (GD-Wheel, ch. 3).
    GdWheel,
    /// GD-Wheel with deferred hits: a hit only sets the item's access bit,
    /// and the item is re-queued at L + cost when it reaches the front
    /// (`evict/gdwheel.rs`), so a hit writes nothing shared (issue 10).
    GdWheelLazy,
    /// SIEVE (Zhang et al., NSDI'24): a FIFO queue per class whose hand
    /// keeps visited items in place and evicts new ones not read since
    /// (`evict/sieve.rs`).
    Sieve,
}

/// Moving pages between slab classes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RebalancePolicy {
    /// Pages never move on their own (`slabs reassign` still works).
    Off,
    /// memcached's automove: towards the class that evicts most.
    Memcached,
    /// Carra & Michiardi's SAS (Algorithm 3): towards cost-weighted
    /// capacity misses.
    Sas,
    /// GD-Wheel chapter 5: by cost per byte.
    CostPerByte,
    /// Carra & Michiardi's offline optimum (Algorithm 2) on-line, over
    /// sampled hit curves of every class (the default, chosen by
    /// measurement: docs/cost.md, "Rebalancing").
    #[default]
    Mrc,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            memory_limit: 64 << 20,
            item_size_max: 1 << 20,
            slab_chunk_max: DEFAULT_PAGE_SIZE / 2,
            growth_factor: 1.25,
            chunk_min_data: 16,
            cas_enabled: true,
            evict: true,
            slab_reassign: true,
            slab_automove: 1,
            prealloc: false,
            hugepages: true,
            eviction: EvictionPolicy::default(),
            rebalance: RebalancePolicy::default(),
            learn_costs: false,
            rebalance_tuning: Tuning::default(),
            lock_stripes: stripe::DEFAULT_STRIPES,
            in_place_sets: true,
            lockfree_inserts: true,
            repartition: false,
            zzone: true,
            zzone_block: 4096,
            zzone_deltas: 4,
            zzone_codec: codec::Codec::Zstd,
            zzone_target: 90,
            zzone_dict_samples: SAMPLES,
            flash: None,
            observer_bytes: 0,
        }
    }
}

/// Errors in an engine [`Config`].
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    #[error("growth factor must be greater than 1.0 (got {0})")]
    GrowthFactor(f64),
    #[error("item size max {size} must be between 1024 bytes and {max} bytes")]
    ItemSizeMax { size: usize, max: usize },
    #[error("memory limit {0} bytes is smaller than one page")]
    MemoryLimit(usize),
    #[error("memory limit {0} bytes is more pages than item locations can address")]
    TooMuchMemory(usize),
    #[error("cannot open the flash file {path}: {error}")]
    Flash { path: String, error: String },
}

impl EvictionPolicy {
    const ALL: [EvictionPolicy; 4] = [
        EvictionPolicy::Lru,
        EvictionPolicy::GdWheel,
        EvictionPolicy::GdWheelLazy,
        EvictionPolicy::Sieve,
    ];

    /// The name `-o eviction=` takes and `stats settings` prints.
    pub fn name(self) -> &'static str {
        match self {
            EvictionPolicy::Lru => "lru",
            EvictionPolicy::GdWheel => "gdwheel",
            EvictionPolicy::GdWheelLazy => "gdwheel-lazy",
            EvictionPolicy::Sieve => "sieve",
        }
    }
}

impl std::str::FromStr for EvictionPolicy {
    type Err = String;

    /// By [`EvictionPolicy::name`], so the two never disagree.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_by_name(s, &Self::ALL, Self::name, "eviction")
    }
}

impl RebalancePolicy {
    const ALL: [RebalancePolicy; 5] = [
        RebalancePolicy::Off,
        RebalancePolicy::Memcached,
        RebalancePolicy::Sas,
        RebalancePolicy::CostPerByte,
        RebalancePolicy::Mrc,
    ];

    /// The name `-o rebalance=` takes and `stats settings` prints.
    pub fn name(self) -> &'static str {
        match self {
            RebalancePolicy::Off => "off",
            RebalancePolicy::Memcached => "memcached",
            RebalancePolicy::Sas => "sas",
            RebalancePolicy::CostPerByte => "cost-per-byte",
            RebalancePolicy::Mrc => "mrc",
        }
    }
}

impl std::str::FromStr for RebalancePolicy {
    type Err = String;

    /// By [`RebalancePolicy::name`], and `cpb` for `cost-per-byte`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "cpb" {
            return Ok(RebalancePolicy::CostPerByte);
        }
        parse_by_name(s, &Self::ALL, Self::name, "rebalance")
    }
}

/// The policy of `all` whose name is `s`, or the error that lists them.
fn parse_by_name<P: Copy>(
    s: &str,
    all: &[P],
    name: fn(P) -> &'static str,
    what: &str,
) -> Result<P, String> {
    all.iter().copied().find(|&p| name(p) == s).ok_or_else(|| {
        let names: Vec<&str> = all.iter().map(|&p| name(p)).collect();
        format!("unknown {what} policy {s:?} ({})", names.join(", "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rebalance_policy_names_round_trip() {
        for p in [
            RebalancePolicy::Off,
            RebalancePolicy::Memcached,
            RebalancePolicy::Sas,
            RebalancePolicy::CostPerByte,
        ] {
            assert_eq!(p.name().parse::<RebalancePolicy>(), Ok(p));
        }
        assert!("lru".parse::<RebalancePolicy>().is_err());
    }
}
