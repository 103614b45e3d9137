//! Counters the engine keeps, named after memcached's `stats` fields so the
//! server can print them unchanged. Per slab class counters are the slabs'
//! own (`slab::SlabClassStats`).

/// Engine-wide counters (a snapshot; see `Engine::stats`).
#[derive(Clone, Debug, Default)]
pub struct EngineStats {
    pub curr_items: u64,
    pub total_items: u64,
    /// Bytes used by live items (header + flags + key + value).
    pub bytes: u64,
    pub evictions: u64,
    /// Stores that reused the memory of an expired item.
    pub reclaimed: u64,
    pub expired_unfetched: u64,
    pub evicted_unfetched: u64,
    /// Items found expired on access.
    pub get_expired: u64,
    /// Items found flushed on access (always 0: flush is eager here).
    pub get_flushed: u64,
    /// Items removed by the background reclaimer.
    pub crawler_reclaimed: u64,
    /// `-m` in bytes.
    pub limit_maxbytes: u64,
    /// Bytes of pages handed to slab classes.
    pub total_malloced: u64,
    /// Bytes held by the hash index (counted inside `limit_maxbytes`).
    pub hash_bytes: u64,
    /// log2 of the number of primary index buckets (memcached's hash_power_level).
    pub hash_power_level: u32,
    pub hash_is_expanding: bool,
    /// Pages moved between slab classes.
    pub slabs_moved: u64,
    /// Items rescued into another chunk when their page moved.
    pub slab_reassign_rescues: u64,
    /// Items evicted because their page moved.
    pub slab_reassign_evictions: u64,
    pub slab_reassign_running: bool,
    /// Pages not yet given to any class.
    pub free_pages: u64,
    /// Stores refused for lack of memory.
    pub outofmemory: u64,
    /// Sum of the costs of evicted items (all classes).
    pub evicted_cost: u64,
    /// Items whose cost was learned from a miss (`-o learn_costs=1`).
    pub learned_costs: u64,
    /// Bytes of the learned-cost table (inside `limit_maxbytes`).
    pub learn_table_bytes: u64,
    /// Bytes of the eviction policy's own structures (inside `limit_maxbytes`).
    pub eviction_bytes: u64,
    /// The rebalancing rule (`-o rebalance=`).
    pub rebalance: &'static str,
    /// GET misses on keys evicted within the ghost set's window (`sas`).
    pub capacity_misses: u64,
    /// Their cost (that of the SETs that refilled them).
    pub cost_capacity_misses: u64,
    /// Page moves the rebalancing rule decided.
    pub rebalance_decisions: u64,
    /// Bytes of the rebalancer's ghost set and tables (inside `limit_maxbytes`).
    pub rebalance_bytes: u64,
    /// Hot/cold re-partitioning (`-o repartition=1`), if on.
    pub repartition: Option<crate::columns::RepartitionStats>,
    /// The compressed Z-zone (`-o zzone=1`), if on.
    pub zzone: Option<crate::zzone::split::ZzoneStats>,
    /// Evicted keys the ghost set can hold.
    pub ghost_capacity: u64,
    /// The flash tier's figures, if it is on (`stats flash`).
    pub flash: Option<crate::flash::FlashStats>,
}
