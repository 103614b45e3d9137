//! `watch` (memcached's log watchers): a connection that sends `watch
//! [fetchers] [mutations] [evictions] [deletions]` stops taking commands and receives a
//! line per event, in memcached 1.6's format:
//!
//! ```text
//! ts=<sec>.<usec> gid=<n> type=item_get key=<k> status=found|not_found clsid=<c> cfd=<fd> size=<n>
//! ts=<sec>.<usec> gid=<n> type=item_store key=<k> status=stored|... cmd=set|... ttl=<s> clsid=<c> cfd=<fd> size=<n>
//! ts=<sec>.<usec> gid=<n> type=eviction key=<k> fetch=yes|no ttl=<s> la=<s> clsid=<c> size=<n>
//! ts=<sec>.<usec> gid=<n> type=deleted key=<k> cmd=delete|md clsid=<c> size=<n>
//! ts=<sec>.<usec> gid=<n> type=hotkey rank=<r> key=<k> rate=<r/s> hits=<r/s> misses=<r/s> size=<n> tier=<t>
//! ```
//!
//! (`deletions` is memcached 1.6.45's; 1.6.18 refuses it. `hotkeys` is
//! cachalot's: the maintainer sends the ten hottest keys each second.)
//!
//! Requests write lines into each interested watcher's buffer (nothing is
//! formatted while nobody watches: one atomic load); the watcher's worker
//! moves them to the socket on its next turn, at least every
//! `POLL_INTERVAL`. A watcher that reads too slowly loses lines rather than
//! growing memory (memcached's `log_watcher_skipped`), and is told how many.
//! Evictions happen inside the engine: it records them while someone
//! watches, and the maintainer thread turns them into lines.
//!
//! This is the registry and the lines, below `stats` (whose `Shared` holds
//! it); what a request tells the watchers is in `watch`, above `handler`.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

pub const FETCHERS: u8 = 1;
pub const MUTATIONS: u8 = 2;
pub const EVICTIONS: u8 = 4;
/// memcached 1.6.45's `deletions` (protocol.txt: "Emits logs when an item is
/// successfully deleted from the cache using `delete` or `md` commands").
pub const DELETIONS: u8 = 8;
/// cachalot's own (issue 36): every second, the ten hottest keys
/// (`hotkeys`), a line each.
pub const HOTKEYS: u8 = 16;
/// memcached's `WATCHER_LIMIT`.
const MAX_WATCHERS: usize = 20;
/// Bytes of lines kept for a watcher that has not read them yet.
const BUFFER_MAX: usize = 256 << 10;
/// How often a worker with watchers moves their lines to the sockets.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// The kinds `watch` names; None for a word memcached does not know. Kinds
/// memcached 1.6 has that cachalot does not log (raw commands, system,
/// connection and proxy events) are accepted and stay silent.
pub fn kind(word: &[u8]) -> Option<u8> {
    Some(match word {
        b"fetchers" => FETCHERS,
        b"mutations" => MUTATIONS,
        b"evictions" => EVICTIONS,
        b"deletions" => DELETIONS,
        b"hotkeys" => HOTKEYS,
        b"rawcmds" | b"sysevents" | b"connevents" | b"proxyreqs" | b"proxyevents"
        | b"proxyuser" => 0,
        _ => return None,
    })
}

/// Every watcher, and the union of what they want.
#[derive(Debug, Default)]
pub struct Watchers {
    wanted: AtomicU8,
    list: Mutex<Vec<Arc<Watcher>>>,
    gid: AtomicU64,
    /// Lines delivered to watchers' buffers / dropped for lack of room
    /// (`stats`: `log_watcher_sent`, `log_watcher_skipped`).
    pub sent: AtomicU64,
    pub skipped: AtomicU64,
}

/// One watching connection's buffer.
#[derive(Debug, Default)]
pub struct Watcher {
    kinds: u8,
    lines: Mutex<Vec<u8>>,
    /// Lines dropped since the watcher was last told.
    skipped: AtomicU64,
}

impl Watchers {
    /// Whether anyone watches events of this kind.
    #[inline]
    pub fn wants(&self, kind: u8) -> bool {
        self.wanted.load(Ordering::Relaxed) & kind != 0
    }

    /// Number of watchers (`stats`: `log_watchers`).
    pub fn count(&self) -> usize {
        self.list.lock().len()
    }

    /// A new watcher of `kinds`; None when there are too many already.
    pub fn add(self: &Arc<Self>, kinds: u8) -> Option<WatchGuard> {
        let mut list = self.list.lock();
        if list.len() >= MAX_WATCHERS {
            return None;
        }
        let w = Arc::new(Watcher {
            kinds,
            ..Watcher::default()
        });
        list.push(w.clone());
        self.wanted.fetch_or(kinds, Ordering::Relaxed);
        Some(WatchGuard {
            watchers: self.clone(),
            watcher: w,
        })
    }

    fn remove(&self, w: &Arc<Watcher>) {
        let mut list = self.list.lock();
        list.retain(|x| !Arc::ptr_eq(x, w));
        let wanted = list.iter().fold(0, |m, x| m | x.kinds);
        self.wanted.store(wanted, Ordering::Relaxed);
    }

    /// Append one line to every watcher of `kind`; `body` writes what
    /// follows `ts=... gid=... `.
    fn emit(&self, kind: u8, body: impl Fn(&mut Vec<u8>)) {
        let gid = self.gid.fetch_add(1, Ordering::Relaxed) + 1;
        let ts = crate::log::unix_ts(SystemTime::now());
        let mut line = Vec::with_capacity(128);
        line.extend_from_slice(format!("ts={ts} gid={gid} ").as_bytes());
        body(&mut line);
        line.push(b'\n');
        for w in self.list.lock().iter().filter(|w| w.kinds & kind != 0) {
            let mut buf = w.lines.lock();
            if buf.len() + line.len() > BUFFER_MAX {
                w.skipped.fetch_add(1, Ordering::Relaxed);
                self.skipped.fetch_add(1, Ordering::Relaxed);
            } else {
                buf.extend_from_slice(&line);
                self.sent.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// A key looked up by a client (`fetchers`).
    pub fn fetch(&self, key: &[u8], found: Option<(u32, usize)>, cfd: u64) {
        let (status, class, size) = match found {
            Some((class, size)) => ("found", class, size),
            None => ("not_found", 0, 0),
        };
        self.emit(FETCHERS, |l| {
            l.extend_from_slice(b"type=item_get key=");
            push_key(l, key);
            let rest = format!(" status={status} clsid={class} cfd={cfd} size={size}");
            l.extend_from_slice(rest.as_bytes());
        });
    }

    /// A store (`mutations`); `ttl` in seconds, 0 for none.
    #[allow(clippy::too_many_arguments)]
    pub fn store(
        &self,
        key: &[u8],
        status: &str,
        cmd: &str,
        ttl: i64,
        class: u32,
        cfd: u64,
        size: usize,
    ) {
        self.emit(MUTATIONS, |l| {
            l.extend_from_slice(b"type=item_store key=");
            push_key(l, key);
            let rest =
                format!(" status={status} cmd={cmd} ttl={ttl} clsid={class} cfd={cfd} size={size}");
            l.extend_from_slice(rest.as_bytes());
        });
    }

    /// An item a client deleted (`deletions`): `cmd` is `delete` or `md`,
    /// `size` the length of the value. memcached 1.6.45's line.
    pub fn deletion(&self, key: &[u8], cmd: &str, class: u32, size: usize) {
        self.emit(DELETIONS, |l| {
            l.extend_from_slice(b"type=deleted key=");
            push_key(l, key);
            let rest = format!(" cmd={cmd} clsid={class} size={size}");
            l.extend_from_slice(rest.as_bytes());
        });
    }

    /// One of the hottest keys (`hotkeys`): its rank, and its requests,
    /// hits and misses per second.
    pub fn hotkey(&self, rank: usize, row: &crate::hotkeys::HotRow) {
        let h = &row.hot;
        self.emit(HOTKEYS, |l| {
            l.extend_from_slice(format!("type=hotkey rank={rank} key=").as_bytes());
            push_key(l, &h.key);
            let rest = format!(
                " rate={:.1} hits={:.1} misses={:.1} size={} tier={}",
                h.rate, h.hits, h.misses, h.size, row.tier
            );
            l.extend_from_slice(rest.as_bytes());
        });
    }

    /// An item the engine evicted (`evictions`).
    pub fn eviction(&self, e: &cachalot_engine::Evicted) {
        self.emit(EVICTIONS, |l| {
            l.extend_from_slice(b"type=eviction key=");
            push_key(l, &e.key);
            let fetch = if e.fetched { "yes" } else { "no" };
            let rest = format!(
                " fetch={fetch} ttl={} la={} clsid={} size={}",
                e.ttl, e.age, e.class, e.size
            );
            l.extend_from_slice(rest.as_bytes());
        });
    }
}

/// Keys from the binary protocol may hold any byte: those that would break
/// a line or a `key=value` pair are written as `%XX`.
pub(crate) fn push_key(out: &mut Vec<u8>, key: &[u8]) {
    for &b in key {
        if b.is_ascii_graphic() && b != b'%' {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
}

/// A connection's registration; dropping it (the connection closed)
/// removes the watcher.
#[derive(Debug)]
pub struct WatchGuard {
    watchers: Arc<Watchers>,
    watcher: Arc<Watcher>,
}

impl WatchGuard {
    /// Move pending lines to `out`, at most about `room` bytes of them.
    pub fn drain(&self, out: &mut Vec<u8>, room: usize) {
        let skipped = self.watcher.skipped.swap(0, Ordering::Relaxed);
        if skipped > 0 {
            out.extend_from_slice(format!("skipped={skipped}\n").as_bytes());
        }
        let mut buf = self.watcher.lines.lock();
        if buf.len() <= room {
            out.append(&mut buf);
        } else {
            // Whole lines only.
            let cut = buf[..room]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |p| p + 1);
            out.extend_from_slice(&buf[..cut]);
            buf.drain(..cut);
        }
    }
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.watchers.remove(&self.watcher);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_reach_the_watchers_that_asked_and_stop_at_the_bound() {
        let ws = Arc::new(Watchers::default());
        assert!(!ws.wants(FETCHERS));
        let fetchers = ws.add(FETCHERS).expect("first watcher");
        let evictions = ws.add(EVICTIONS | MUTATIONS).expect("second watcher");
        assert!(ws.wants(FETCHERS) && ws.wants(EVICTIONS) && ws.wants(MUTATIONS));
        ws.fetch(b"a b\n", Some((3, 10)), 7);
        ws.store(b"k", "stored", "set", 0, 1, 7, 2);
        let mut out = Vec::new();
        fetchers.drain(&mut out, usize::MAX);
        let text = String::from_utf8(out).expect("utf8");
        assert!(text.starts_with("ts="), "{text}");
        assert!(
            text.ends_with(
                " gid=1 type=item_get key=a%20b%0A status=found clsid=3 cfd=7 size=10\n"
            ),
            "{text}"
        );
        let mut out = Vec::new();
        evictions.drain(&mut out, usize::MAX);
        let text = String::from_utf8(out).expect("utf8");
        assert!(
            text.contains(
                " gid=2 type=item_store key=k status=stored cmd=set ttl=0 clsid=1 cfd=7 size=2\n"
            ),
            "{text}"
        );

        // Unread lines are bounded: the rest is skipped, and the watcher told.
        let line_len = {
            ws.fetch(b"x", None, 1);
            let mut one = Vec::new();
            fetchers.drain(&mut one, usize::MAX);
            one.len()
        };
        let n = BUFFER_MAX / line_len + 100;
        for _ in 0..n {
            ws.fetch(b"x", None, 1);
        }
        let mut out = Vec::new();
        fetchers.drain(&mut out, 1000);
        assert!(
            out.starts_with(b"skipped="),
            "{}",
            String::from_utf8_lossy(&out[..40])
        );
        assert!(out.ends_with(b"\n") && out.len() <= 1000 + 20);
        assert!(ws.skipped.load(Ordering::Relaxed) >= 100);

        drop(fetchers);
        assert!(!ws.wants(FETCHERS) && ws.wants(EVICTIONS));
        drop(evictions);
        assert_eq!(ws.count(), 0);
        assert!(!ws.wants(EVICTIONS | MUTATIONS | FETCHERS));
        let many: Vec<_> = (0..MAX_WATCHERS).map_while(|_| ws.add(FETCHERS)).collect();
        assert_eq!(many.len(), MAX_WATCHERS);
        assert!(ws.add(FETCHERS).is_none());
    }
}
