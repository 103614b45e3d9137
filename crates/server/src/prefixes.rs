//! Memory and requests per key prefix (issue 36): `stats prefixes`, and
//! the counters behind memcached's `stats detail dump`.
//!
//! A key's prefix is what comes before the first delimiter (`-D`, `:` by
//! default); keys without one are counted under `(none)`. At most
//! [`MAX_PREFIXES`] prefixes are told apart, in the order they are first
//! seen; later ones are counted under `(other)`, so the tables stay
//! bounded whatever keys clients send.
//!
//! Requests: each worker counts its own (gets, hits, sets, deletes) behind
//! a lock only it and a `stats` reader take, in a table indexed by the
//! prefix's id; a worker looks a prefix's id up in its own map, and asks
//! the shared registry only the first time it sees the prefix.
//!
//! Evictions: the engine tells [`Evicted`], its eviction tap, the key of
//! each item that leaves the cache for room (under its lock: a prefix
//! search, the registry's lock and an atomic add).
//!
//! Memory: the maintainer walks every item of every tier, the walk
//! `lru_crawler metadump` makes (`Cache::metadump_step`, a few hundred
//! items per hold of the engine's lock, flash read holding none), a few
//! steps a turn, and adds each item's bytes to its prefix and tier. A walk
//! ends in a snapshot that `stats prefixes` shows, with its age; the next
//! starts [`WALK_EVERY`] after the last began, or at once when a `stats
//! prefixes` found the last one more than a second old.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cachalot_engine::hash::KeyMap;
use cachalot_engine::{Cache, DumpAt, EvictionTap, MetaItem, Tier};
use parking_lot::Mutex;

/// Prefixes told apart; the rest are `(other)`.
pub const MAX_PREFIXES: usize = 256;
/// Ids of the two catch-alls.
const NONE: u16 = 0;
const OTHER: u16 = 1;
/// A memory walk starts at most this often.
pub const WALK_EVERY: Duration = Duration::from_secs(10);
/// A `stats prefixes` that finds the last walk older than this asks for
/// the next at once.
const FRESH: Duration = Duration::from_secs(1);
/// Walk steps per maintainer turn (each a few hundred items).
const STEPS_PER_TURN: usize = 32;

/// The most the registry and `workers` workers' tables take: each prefix's
/// name (a key is at most 250 bytes) in the registry and in each worker's
/// map, with their hash table entries, each worker's counters, and the
/// evictions' (counted in `-m` when `-D` turns the tables on from the
/// start).
pub fn memory_bytes(workers: usize) -> usize {
    let names = (MAX_PREFIXES + 2) * (250 + 64);
    let counters = workers * (MAX_PREFIXES + 2) * std::mem::size_of::<Requests>();
    names * (1 + workers) + counters + (MAX_PREFIXES + 2) * 8
}

/// What a request did to a key, for the per-prefix counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Get { hit: bool },
    Set,
    Delete,
}

/// Requests of one prefix, in one worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Requests {
    pub gets: u64,
    pub hits: u64,
    pub sets: u64,
    pub deletes: u64,
}

impl Requests {
    fn add(&mut self, o: &Requests) {
        self.gets += o.gets;
        self.hits += o.hits;
        self.sets += o.sets;
        self.deletes += o.deletes;
    }
}

/// Items and bytes of one prefix in each tier (memory, Z-zone, flash).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held {
    pub items: [u64; 3],
    pub bytes: [u64; 3],
}

fn tier_index(t: Tier) -> usize {
    match t {
        Tier::Memory => 0,
        Tier::Zzone => 1,
        Tier::Flash => 2,
    }
}

/// The prefix of `key` before `delim`, if it has one.
pub fn prefix_of<'k>(key: &'k [u8], delim: &[u8]) -> Option<&'k [u8]> {
    let end = match delim {
        [d] => key.iter().position(|b| b == d)?,
        _ => key.windows(delim.len()).position(|w| w == delim)?,
    };
    Some(&key[..end])
}

/// `stats detail on|off`: process-wide, like memcached's
/// `settings.detail_enabled` (0: as the command line said).
static SWITCH: AtomicU8 = AtomicU8::new(0);

/// `stats detail on` (true) or `off`.
pub fn switch(on: bool) {
    SWITCH.store(if on { 1 } else { 2 }, Ordering::Relaxed);
}

/// The prefixes told apart so far (names by id, ids by name), the
/// delimiter, and the memory walk.
#[derive(Debug)]
pub struct Registry {
    delim: Box<[u8]>,
    /// `-D` was given.
    configured: bool,
    inner: Arc<Mutex<Names>>,
    /// Evictions by prefix id, counted by the engine's tap ([`Evicted`]).
    evictions: Arc<[AtomicU64]>,
    walk: Mutex<Walk>,
}

#[derive(Debug)]
struct Names {
    ids: KeyMap<Box<[u8]>, u16>,
    names: Vec<Box<[u8]>>,
}

impl Names {
    /// The id of `prefix` (None: the key had no delimiter), registering it
    /// while there is room.
    fn id(&mut self, prefix: Option<&[u8]>) -> u16 {
        let Some(p) = prefix else {
            return NONE;
        };
        if let Some(&id) = self.ids.get(p) {
            return id;
        }
        if self.names.len() >= MAX_PREFIXES + 2 {
            return OTHER;
        }
        let id = self.names.len() as u16;
        self.names.push(p.into());
        self.ids.insert(p.into(), id);
        id
    }
}

/// The engine's eviction tap: counts each evicted key under its prefix
/// while prefix stats are on.
#[derive(Debug)]
pub struct Evicted {
    delim: Box<[u8]>,
    configured: bool,
    names: Arc<Mutex<Names>>,
    evictions: Arc<[AtomicU64]>,
}

impl EvictionTap for Evicted {
    fn evicted(&self, key: &[u8]) {
        if !enabled(self.configured) {
            return;
        }
        let id = self.names.lock().id(prefix_of(key, &self.delim));
        self.evictions[id as usize].fetch_add(1, Ordering::Relaxed);
    }

    fn wanted(&self) -> bool {
        enabled(self.configured)
    }
}

/// Whether per-prefix stats are kept now: `stats detail on|off` last
/// said, else the command line (`configured`: `-D`).
#[inline]
fn enabled(configured: bool) -> bool {
    match SWITCH.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => configured,
    }
}

/// The memory walk: where it is, what it has added up, and the last one's
/// result.
#[derive(Debug, Default)]
struct Walk {
    at: Option<DumpAt>,
    started: Option<Instant>,
    /// `stats prefixes` found the last walk older than [`FRESH`].
    asked: bool,
    sums: Vec<Held>,
    last: Option<Snapshot>,
}

/// A finished walk.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub held: Vec<Held>,
    pub ended: Instant,
    pub took: Duration,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new(':', false)
    }
}

impl Registry {
    /// Prefixes end at `delim`; counting is on from the start when
    /// `configured` (`-D`), else once `stats detail on` is sent.
    pub fn new(delim: char, configured: bool) -> Registry {
        let mut buf = [0u8; 4];
        Registry {
            delim: delim.encode_utf8(&mut buf).as_bytes().into(),
            configured,
            inner: Arc::new(Mutex::new(Names {
                ids: KeyMap::default(),
                names: vec![b"(none)"[..].into(), b"(other)"[..].into()],
            })),
            evictions: (0..MAX_PREFIXES + 2).map(|_| AtomicU64::new(0)).collect(),
            walk: Mutex::new(Walk::default()),
        }
    }

    /// Whether per-prefix stats are kept now (one relaxed load).
    #[inline]
    pub fn enabled(&self) -> bool {
        enabled(self.configured)
    }

    /// The engine's eviction tap for these prefixes.
    pub fn tap(&self) -> Arc<dyn EvictionTap> {
        Arc::new(Evicted {
            delim: self.delim.clone(),
            configured: self.configured,
            names: self.inner.clone(),
            evictions: self.evictions.clone(),
        })
    }

    /// Evictions by prefix id.
    pub fn evictions(&self) -> Vec<u64> {
        self.evictions
            .iter()
            .map(|e| e.load(Ordering::Relaxed))
            .collect()
    }

    /// `stats reset`.
    pub fn clear_evictions(&self) {
        for e in self.evictions.iter() {
            e.store(0, Ordering::Relaxed);
        }
    }

    pub fn delimiter(&self) -> &[u8] {
        &self.delim
    }

    /// The id of `prefix` (None: the key had no delimiter), registering it
    /// while there is room.
    pub fn id(&self, prefix: Option<&[u8]>) -> u16 {
        self.inner.lock().id(prefix)
    }

    /// The names by id.
    pub fn names(&self) -> Vec<Box<[u8]>> {
        self.inner.lock().names.clone()
    }

    /// One maintainer turn of the memory walk: a few steps, then, at its
    /// end, the snapshot.
    pub fn walk_turn(&self, cache: &Cache) {
        let delim = &*self.delim;
        let mut w = self.walk.lock();
        if w.at.is_none() {
            if !w.asked && w.started.is_some_and(|s| s.elapsed() < WALK_EVERY) {
                return;
            }
            w.asked = false;
            w.at = Some(DumpAt::START);
            w.started = Some(Instant::now());
            w.sums.clear();
        }
        let mut items: Vec<MetaItem> = Vec::new();
        for _ in 0..STEPS_PER_TURN {
            let Some(at) = w.at else {
                break;
            };
            items.clear();
            w.at = cache.metadump_step(at, |_| true, &mut items);
            for it in &items {
                let id = self.id(prefix_of(&it.key, delim)) as usize;
                if w.sums.len() <= id {
                    w.sums.resize(id + 1, Held::default());
                }
                let t = tier_index(it.tier);
                w.sums[id].items[t] += 1;
                w.sums[id].bytes[t] += it.stored as u64;
            }
        }
        if w.at.is_none() {
            let took = w.started.map_or(Duration::ZERO, |s| s.elapsed());
            let held = std::mem::take(&mut w.sums);
            w.last = Some(Snapshot {
                held,
                ended: Instant::now(),
                took,
            });
        }
    }

    /// The last finished walk; when it is older than [`FRESH`], the
    /// maintainer starts the next at its next turn.
    pub fn snapshot(&self) -> Option<Snapshot> {
        let mut w = self.walk.lock();
        if w.last.as_ref().is_none_or(|s| s.ended.elapsed() > FRESH) {
            w.asked = true;
        }
        w.last.clone()
    }
}

/// One worker's request counters by prefix id.
#[derive(Debug, Default)]
pub struct Counts {
    inner: Mutex<WorkerCounts>,
}

/// The longest prefix a worker remembers as its last.
const LAST_MAX: usize = 32;

#[derive(Debug, Default)]
struct WorkerCounts {
    /// This worker's own map of the prefixes it has seen to their ids.
    ids: KeyMap<Box<[u8]>, u16>,
    /// The last prefix looked up (when at most [`LAST_MAX`] bytes) and its
    /// id: most requests name the same prefix as the one before, and take
    /// one compare instead of a hash lookup (no allocation either way).
    last: Option<([u8; LAST_MAX], u8, u16)>,
    by_id: Vec<Requests>,
}

impl Counts {
    /// Count `op` on `key`'s prefix.
    pub fn record(&self, registry: &Registry, key: &[u8], op: Op) {
        let prefix = prefix_of(key, registry.delimiter());
        let mut c = self.inner.lock();
        let id = match prefix {
            None => NONE,
            Some(p) => match &c.last {
                Some((last, len, id)) if last[..*len as usize] == *p => *id,
                _ => {
                    let id = match c.ids.get(p) {
                        Some(&id) => id,
                        None => {
                            let id = registry.id(Some(p));
                            if id != OTHER {
                                c.ids.insert(p.into(), id);
                            }
                            id
                        }
                    };
                    if p.len() <= LAST_MAX {
                        let mut last = [0; LAST_MAX];
                        last[..p.len()].copy_from_slice(p);
                        c.last = Some((last, p.len() as u8, id));
                    }
                    id
                }
            },
        } as usize;
        if c.by_id.len() <= id {
            c.by_id.resize(id + 1, Requests::default());
        }
        let r = &mut c.by_id[id];
        match op {
            Op::Get { hit } => {
                r.gets += 1;
                r.hits += u64::from(hit);
            }
            Op::Set => r.sets += 1,
            Op::Delete => r.deletes += 1,
        }
    }

    /// Add this worker's counts into `into` (by id).
    pub fn add_to(&self, into: &mut Vec<Requests>) {
        let c = self.inner.lock();
        if into.len() < c.by_id.len() {
            into.resize(c.by_id.len(), Requests::default());
        }
        for (i, r) in c.by_id.iter().enumerate() {
            into[i].add(r);
        }
    }

    /// `stats reset`.
    pub fn clear(&self) {
        self.inner.lock().by_id.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_bounded_and_counted_per_worker() {
        let reg = Registry::default();
        let (a, b) = (Counts::default(), Counts::default());
        a.record(&reg, b"user:1", Op::Get { hit: true });
        b.record(&reg, b"user:2", Op::Get { hit: false });
        b.record(&reg, b"nodelim", Op::Set);
        a.record(&reg, b"sess:9", Op::Delete);
        let mut sum = Vec::new();
        a.add_to(&mut sum);
        b.add_to(&mut sum);
        let names = reg.names();
        let by = |n: &[u8]| sum[names.iter().position(|x| &**x == n).unwrap()];
        assert_eq!(
            by(b"user"),
            Requests {
                gets: 2,
                hits: 1,
                ..Requests::default()
            }
        );
        assert_eq!(by(b"(none)").sets, 1);
        assert_eq!(by(b"sess").deletes, 1);
        // Past the bound, new prefixes share (other); known ones keep theirs.
        for i in 0..MAX_PREFIXES + 10 {
            a.record(&reg, format!("p{i}:k").as_bytes(), Op::Set);
        }
        assert_eq!(reg.names().len(), MAX_PREFIXES + 2);
        let mut sum = Vec::new();
        a.add_to(&mut sum);
        assert_eq!(
            sum[OTHER as usize].sets, 12,
            "two earlier ones took the room"
        );
        a.record(&reg, b"user:3", Op::Set);
        let mut sum = Vec::new();
        a.add_to(&mut sum);
        assert_eq!(sum[reg.id(Some(b"user")) as usize].sets, 1);
        a.clear();
        let mut sum = Vec::new();
        a.add_to(&mut sum);
        assert!(sum.iter().all(|r| *r == Requests::default()));
    }

    #[test]
    fn a_delimiter_may_be_longer_than_a_byte() {
        assert_eq!(prefix_of(b"a::b", "::".as_bytes()), Some(&b"a"[..]));
        assert_eq!(prefix_of(b"ab", b":"), None);
        assert_eq!(prefix_of(b":x", b":"), Some(&b""[..]));
    }
}
