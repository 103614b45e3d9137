//! Server-side counters: per-thread command counters (written only by their
//! worker, summed when a client asks for `stats`) and process-wide state.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

/// One worker thread's counters. Only the owning worker writes them (relaxed
/// atomics, no contention); `stats` sums all workers.
#[derive(Default, Debug)]
pub struct ThreadStats {
    pub cmd_get: AtomicU64,
    pub cmd_set: AtomicU64,
    pub cmd_flush: AtomicU64,
    pub cmd_touch: AtomicU64,
    pub cmd_meta: AtomicU64,
    pub get_hits: AtomicU64,
    pub get_misses: AtomicU64,
    pub get_expired: AtomicU64,
    pub get_flushed: AtomicU64,
    pub delete_hits: AtomicU64,
    pub delete_misses: AtomicU64,
    pub incr_hits: AtomicU64,
    pub incr_misses: AtomicU64,
    pub decr_hits: AtomicU64,
    pub decr_misses: AtomicU64,
    pub cas_hits: AtomicU64,
    pub cas_misses: AtomicU64,
    pub cas_badval: AtomicU64,
    pub touch_hits: AtomicU64,
    pub touch_misses: AtomicU64,
    pub store_too_large: AtomicU64,
    pub store_no_memory: AtomicU64,
    pub auth_cmds: AtomicU64,
    pub auth_errors: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    pub conn_yields: AtomicU64,
}

impl ThreadStats {
    /// Add one to a counter (relaxed: only this thread writes it).
    #[inline]
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Information about one open connection, for `stats conns`.
#[derive(Clone, Debug)]
pub struct ConnInfo {
    pub id: u64,
    /// "tcp:127.0.0.1:54321" / "unix:/path"
    pub addr: String,
    pub listen_addr: String,
    /// memcached's state names ("conn_parse_cmd", "conn_nread", ...)
    pub state: &'static str,
    pub secs_since_last_cmd: u64,
}

/// Process-wide state shared by all threads.
#[derive(Debug, Default)]
pub struct Shared {
    pub threads: Vec<Arc<ThreadStats>>,
    pub curr_connections: AtomicU64,
    pub total_connections: AtomicU64,
    pub rejected_connections: AtomicU64,
    pub connection_structures: AtomicU64,
    /// Set when the server should stop (shutdown command, signal).
    pub shutdown: AtomicBool,
    pub verbosity: AtomicU8,
    /// Open connections (by id), for `stats conns`.
    pub conns: Mutex<Vec<ConnInfo>>,
}

impl Shared {
    /// Sum one counter over all worker threads.
    pub fn sum(&self, field: impl Fn(&ThreadStats) -> &AtomicU64) -> u64 {
        self.threads
            .iter()
            .map(|t| field(t).load(Ordering::Relaxed))
            .sum()
    }
}
