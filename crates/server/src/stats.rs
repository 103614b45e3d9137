//! Server-side counters: per-thread command counters (written only by their
//! worker, summed when a client asks for `stats`) and process-wide state,
//! including the connection registry behind memcached's `stats conns`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
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
    /// GETs answered as misses because the flash read queue was full.
    pub get_aborted_flash: AtomicU64,
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
    /// This worker's hot-key counts (`hotkeys`; off unless the server
    /// turns them on).
    pub hot: crate::hotkeys::Sketch,
    /// This worker's requests by key prefix (`prefixes`; with `-D` or
    /// `stats detail on`).
    pub prefix_counts: crate::prefixes::Counts,
    /// The network path this worker serves plain TCP on ([`NetPath`]),
    /// once it has made (or failed to make) its ring.
    pub net_path: AtomicU8,
}

/// A worker's network path, as `stats settings` reports it (`net_io`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum NetPath {
    /// Not decided yet: the worker is starting.
    Starting = 0,
    Uring = 1,
    Epoll = 2,
}

impl ThreadStats {
    /// Add one to a counter (relaxed: only this thread writes it).
    #[inline]
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The worker's network path from now on.
    pub fn set_net_path(&self, path: NetPath) {
        self.net_path.store(path as u8, Ordering::Relaxed);
    }

    pub fn net_path(&self) -> NetPath {
        match self.net_path.load(Ordering::Relaxed) {
            1 => NetPath::Uring,
            2 => NetPath::Epoll,
            _ => NetPath::Starting,
        }
    }
}

/// Information about one open connection, for `stats conns` (a snapshot; see
/// [`Shared::conns_snapshot`]).
#[derive(Clone, Debug)]
pub struct ConnInfo {
    /// The socket's file descriptor number, as memcached prints it.
    pub id: u64,
    /// "tcp:127.0.0.1:54321" / "tcp6:[::1]:54321" / "unix:/path" (memcached's
    /// `conn_to_str`; a unix client prints as "?:<AF 0>" exactly like memcached).
    pub addr: String,
    /// The listener this connection came in on; empty for a listening socket
    /// itself (memcached prints no `listen_addr` line for those).
    pub listen_addr: String,
    /// memcached's state names ("conn_parse_cmd", "conn_nread", ...)
    pub state: &'static str,
    pub secs_since_last_cmd: u64,
}

/// A connection's state as `stats conns` names it (memcached's `conn_states`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ConnState {
    Listening = 0,
    NewCmd = 1,
    Waiting = 2,
    Read = 3,
    ParseCmd = 4,
    Write = 5,
    NRead = 6,
    Swallow = 7,
    Closing = 8,
    MWrite = 9,
    Closed = 10,
}

impl ConnState {
    pub fn name(self) -> &'static str {
        match self {
            ConnState::Listening => "conn_listening",
            ConnState::NewCmd => "conn_new_cmd",
            ConnState::Waiting => "conn_waiting",
            ConnState::Read => "conn_read",
            ConnState::ParseCmd => "conn_parse_cmd",
            ConnState::Write => "conn_write",
            ConnState::NRead => "conn_nread",
            ConnState::Swallow => "conn_swallow",
            ConnState::Closing => "conn_closing",
            ConnState::MWrite => "conn_mwrite",
            ConnState::Closed => "conn_closed",
        }
    }

    fn from_u8(v: u8) -> ConnState {
        match v {
            0 => ConnState::Listening,
            1 => ConnState::NewCmd,
            2 => ConnState::Waiting,
            3 => ConnState::Read,
            4 => ConnState::ParseCmd,
            5 => ConnState::Write,
            6 => ConnState::NRead,
            7 => ConnState::Swallow,
            8 => ConnState::Closing,
            9 => ConnState::MWrite,
            _ => ConnState::Closed,
        }
    }
}

/// A live registry entry: the owning worker updates state and last command
/// time with relaxed stores (no lock per request); `stats conns` reads them.
#[derive(Debug)]
pub struct ConnEntry {
    pub id: u64,
    pub addr: String,
    pub listen_addr: String,
    state: AtomicU8,
    /// Server clock (`Clock::now`) at the last command.
    last_cmd: AtomicU32,
}

impl ConnEntry {
    pub fn new(
        id: u64,
        addr: String,
        listen_addr: String,
        state: ConnState,
        now: u32,
    ) -> ConnEntry {
        ConnEntry {
            id,
            addr,
            listen_addr,
            state: AtomicU8::new(state as u8),
            last_cmd: AtomicU32::new(now),
        }
    }

    #[inline]
    pub fn set_state(&self, state: ConnState) {
        self.state.store(state as u8, Ordering::Relaxed);
    }

    #[inline]
    pub fn state(&self) -> ConnState {
        ConnState::from_u8(self.state.load(Ordering::Relaxed))
    }

    #[inline]
    pub fn touch(&self, now: u32) {
        self.last_cmd.store(now, Ordering::Relaxed);
    }

    #[inline]
    pub fn last_cmd(&self) -> u32 {
        self.last_cmd.load(Ordering::Relaxed)
    }
}

/// Process-wide state shared by all threads.
#[derive(Debug, Default)]
pub struct Shared {
    pub threads: Vec<Arc<ThreadStats>>,
    /// Open connections *including listening sockets*, as memcached counts
    /// them (one client on one listener reads 2).
    pub curr_connections: AtomicU64,
    /// Connections ever opened, listening sockets included (memcached's count).
    pub total_connections: AtomicU64,
    /// Connections closed at once because `-c` was reached.
    pub rejected_connections: AtomicU64,
    /// High-water mark of `curr_connections` (memcached's allocated conn structs).
    pub connection_structures: AtomicU64,
    /// Set when the server should stop (shutdown command, signal).
    pub shutdown: AtomicBool,
    pub verbosity: AtomicU8,
    /// Open connections and listening sockets (by id = fd), for `stats conns`.
    /// Read it with [`Shared::conns_snapshot`].
    pub conns: Mutex<BTreeMap<u64, Arc<ConnEntry>>>,
    /// `watch` connections and the lines they are sent.
    pub watchers: Arc<crate::watchers::Watchers>,
    /// With `-Z`: the certificates new connections get, and TLS counters.
    pub tls: Option<Arc<crate::tls::Tls>>,
    /// The key prefixes told apart, and the memory walk that adds up their
    /// bytes (`prefixes`).
    pub prefixes: crate::prefixes::Registry,
    /// The live miss-ratio curve (`-o mrc=1`, the default; `mrc`).
    pub mrc: Option<crate::mrc::Curve>,
    /// With `-o trace_file`: the trace being captured.
    pub capture: Option<Arc<crate::capture::Capture>>,
}

impl Shared {
    /// `stats conns`: every registered connection in fd order, with seconds
    /// since its last command computed against `now` (`Clock::now`).
    pub fn conns_snapshot(&self, now: u32) -> Vec<ConnInfo> {
        self.conns
            .lock()
            .values()
            .map(|e| ConnInfo {
                id: e.id,
                addr: e.addr.clone(),
                listen_addr: e.listen_addr.clone(),
                state: e.state().name(),
                secs_since_last_cmd: now.saturating_sub(e.last_cmd()) as u64,
            })
            .collect()
    }

    /// Add a connection (or listener) to the registry and the counters.
    pub fn register_conn(&self, entry: Arc<ConnEntry>) {
        self.conns.lock().insert(entry.id, entry);
        let curr = self.curr_connections.fetch_add(1, Ordering::Relaxed) + 1;
        self.total_connections.fetch_add(1, Ordering::Relaxed);
        self.connection_structures
            .fetch_max(curr, Ordering::Relaxed);
    }

    /// Remove a connection from the registry (before its fd is closed, so a
    /// new connection reusing the fd number cannot be removed by mistake).
    pub fn unregister_conn(&self, id: u64) {
        if self.conns.lock().remove(&id).is_some() {
            self.curr_connections.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Sum one counter over all worker threads.
    pub fn sum(&self, field: impl Fn(&ThreadStats) -> &AtomicU64) -> u64 {
        self.threads
            .iter()
            .map(|t| field(t).load(Ordering::Relaxed))
            .sum()
    }
}
