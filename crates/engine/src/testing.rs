//! The engine's reference model, and the operation sequences that the
//! property tests (`api_tests/model.rs`) and the operation fuzzer
//! (`crates/engine/fuzz`, target `engine_ops`) run against it. Built for
//! tests and fuzzing only (feature `testing`).
//!
//! The model is a HashMap with memcached's semantics written the obvious
//! way. A cache may forget: the engine may answer as if an item were
//! missing only when it has evicted something since the item was written
//! (its `evictions` and `slab_reassign_evictions` counters moved), and the
//! model then forgets the item too. Anything else must agree exactly:
//! bytes, flags, expiry, CAS uniques (new ones always larger), the outcome
//! of every add, replace, append, prepend, cas, incr, decr, touch and
//! delete, and no deleted, flushed or expired key ever comes back. So with
//! no memory pressure and no page moves the engine must match the model
//! exactly. After every step the engine's `validate()` checks its own
//! invariants.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::api::{Arith, ArithOutcome, DeleteOutcome, Lookup, Store, StoreMode, StoreOutcome};
use crate::cache::Cache;
use crate::cache::Fallback;
use crate::clock::{Clock, Expiry, RelTime};
use crate::codec::Codec;
use crate::config::{Config, EvictionPolicy, RebalancePolicy, KEY_MAX_LEN};
use crate::rebalance::Tuning;

/// Which CAS unique a conditional operation sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CasArg {
    /// None (0: unconditional).
    None,
    /// The last one seen for the key (or 12345 if none was).
    Last,
    /// One more than that: a stale unique.
    Wrong,
}

/// One operation on the engine.
#[derive(Clone, Debug)]
pub enum Op {
    Store {
        mode: StoreMode,
        key: u8,
        len: usize,
        flags: u32,
        ttl: i64,
        cas: CasArg,
        cost: Option<u32>,
    },
    Get {
        key: u8,
        /// Counts as an access (`get`) or not (meta `u`: a peek).
        bump: bool,
    },
    Delete {
        key: u8,
        cas: CasArg,
    },
    Arith {
        key: u8,
        incr: bool,
        delta: u64,
        cas: CasArg,
        /// Meta `N`: create the item with this value when missing.
        vivify: Option<u64>,
    },
    Touch {
        key: u8,
        ttl: i64,
    },
    /// `flush_all [delay]`.
    Flush {
        delay: Option<u32>,
    },
    Advance {
        secs: u64,
    },
    /// The background maintainer: delayed flush, reclaimer, rebalancing.
    Maintain {
        budget: usize,
    },
    /// `slabs reassign <src> <dst>` (memcached's class ids: 0 is the pool).
    Reassign {
        src: i32,
        dst: i32,
    },
    /// Start an incremental page move between class indexes.
    MovePage {
        from: u8,
        to: Option<u8>,
    },
    /// `cache_memlimit <mb>`: 8 MB or more, all the server accepts
    /// (memcached's `MEMLIMIT_TOO_SMALL`).
    Limit {
        mb: usize,
    },
}

/// The key of key number `k`: short ones, and every 16th the longest
/// memcached accepts.
pub fn key_bytes(k: u8) -> Vec<u8> {
    let mut key = format!("key:{k:03}").into_bytes();
    if k % 16 == 15 {
        key.resize(KEY_MAX_LEN, b'x');
    }
    key
}

/// The value of the `n`th write of `len` bytes to key `k`: a number for
/// short values of even keys (for incr/decr), else letters; it depends on
/// `n` so a stale value never reads as the current one.
pub fn value_bytes(k: u8, len: usize, n: u64) -> Vec<u8> {
    if k.is_multiple_of(2) && len < 64 {
        (len as u64 * 7 + n).to_string().into_bytes()
    } else {
        // The letters from `k + n` on, cycling: built by copying one cycle,
        // as values go up to 1 MB and the fuzzer makes many.
        let cycle: Vec<u8> = (0..26)
            .map(|i| b'a' + ((i + k as u64 + n) % 26) as u8)
            .collect();
        let mut v = cycle.repeat(len / 26 + 1);
        v.truncate(len);
        v
    }
}

/// memcached's incr/decr operand: what `safe_strtoull` reads (the
/// protocol crate's, checked against memcached by the differential test).
fn parse_decimal(v: &[u8]) -> Option<u64> {
    cachalot_protocol::text::strtoull(cachalot_protocol::text::until_nul(v))
}

/// A stored item's expiry as the model keeps it (`Entry::dies`).
fn dies_at(expiry: Expiry) -> Option<RelTime> {
    match expiry {
        Expiry::At(t) => Some(t),
        _ => None,
    }
}

#[derive(Clone, Debug)]
struct Entry {
    value: Vec<u8>,
    flags: u32,
    /// Relative second at which it dies (None = never, Some(0) = now).
    dies: Option<RelTime>,
    cas: u64,
    /// Evictions the engine had counted when the item was written.
    lost_at: u64,
}

/// An engine and the model it must agree with. The engine is driven as
/// the server drives it, through [`Cache`]: stores and GETs take the paths
/// without the engine lock where they can (in-place and new-key SETs,
/// lock-free GETs), everything else the lock.
pub struct Harness {
    pub clock: Arc<Clock>,
    pub cache: Cache,
    model: HashMap<Vec<u8>, Entry>,
    /// `flush_all <delay>` not yet due.
    pending_flush: Option<RelTime>,
    /// The last CAS unique seen per key (for `CasArg`).
    last_cas: HashMap<Vec<u8>, u64>,
    max_cas: u64,
    writes: u64,
    /// Stores made without the engine lock (`Cache::try_store`).
    pub unlocked_stores: u64,
}

impl Harness {
    pub fn new(config: Config) -> Harness {
        let clock = Arc::new(Clock::new());
        // Learned costs read the microsecond clock: drive it.
        clock.set_us(1);
        let cache = Cache::new(config, clock.clone()).expect("valid test config");
        Harness {
            clock,
            cache,
            model: HashMap::new(),
            pending_flush: None,
            last_cas: HashMap::new(),
            max_cas: 0,
            writes: 0,
            unlocked_stores: 0,
        }
    }

    /// Items the engine has let go of so far (evicted, or lost in a page
    /// move), and the items it sent towards flash: from the flash stage on
    /// only a GET finds them,
    /// and every other command acts as after an eviction (docs/protocol.md,
    /// "The flash tier"). A GET that answers must still give the latest
    /// bytes, flags, CAS and expiry.
    fn lost(&self) -> u64 {
        let s = self.cache.lock().stats();
        s.evictions + s.slab_reassign_evictions + s.flash.map_or(0, |f| f.staged_total)
    }

    /// Whether the engine may refuse a store for lack of memory: only
    /// with evictions off. With them on, every store memcached accepts is
    /// stored at every size of cache (a class's floor of pages is granted
    /// even beyond `-m`: `Engine::floor_pages`).
    fn may_refuse(&self) -> bool {
        !self.cache.lock().config().evict
    }

    fn dies(&self, ttl: i64) -> Option<RelTime> {
        match self.clock.expiry(ttl) {
            Expiry::Never => None,
            Expiry::At(t) => Some(t),
            Expiry::Expired => Some(0),
        }
    }

    fn cas_arg(&self, k: &[u8], c: CasArg) -> u64 {
        let last = self.last_cas.get(k).copied().unwrap_or(12345);
        match c {
            CasArg::None => 0,
            CasArg::Last => last,
            CasArg::Wrong => last + 1,
        }
    }

    /// A new CAS unique: larger than all before (when CAS is on).
    fn new_cas(&mut self, k: &[u8], cas: u64) {
        if self.cache.lock().config().cas_enabled {
            assert!(cas > self.max_cas, "CAS {cas} not above {}", self.max_cas);
            self.max_cas = cas;
        }
        self.last_cas.insert(k.to_vec(), cas);
    }

    /// Keep `entry` under `k`, unless it is already dead.
    fn put(&mut self, k: Vec<u8>, entry: Entry) {
        if entry.dies == Some(0) {
            self.model.remove(&k);
        } else {
            self.model.insert(k, entry);
        }
    }

    /// The model's state of `k` that explains the engine's answer (`fits`):
    /// the entry itself, or none at all if the engine may have evicted it
    /// (the model then forgets it too). Anything else is a bug.
    fn explain(
        model: &mut HashMap<Vec<u8>, Entry>,
        k: &[u8],
        lost: u64,
        what: &str,
        fits: impl Fn(Option<&Entry>) -> bool,
    ) -> Option<Entry> {
        let entry = model.get(k).cloned();
        if fits(entry.as_ref()) {
            return entry;
        }
        let forgettable = entry.as_ref().is_some_and(|e| lost > e.lost_at);
        assert!(
            forgettable && fits(None),
            "{what} of {:?}: no model state explains the engine's answer \
             (model: {:?}, evictions so far {lost})",
            String::from_utf8_lossy(k),
            entry
                .as_ref()
                .map(|e| (e.value.len(), e.flags, e.dies, e.cas, e.lost_at))
        );
        model.remove(k);
        None
    }

    /// Apply `op` to the engine and the model, check that they agree, then
    /// validate the engine.
    pub fn step(&mut self, op: &Op) {
        let now = self.clock.now();
        if self.pending_flush.is_some_and(|t| t <= now) {
            self.pending_flush = None;
            self.model.clear();
        }
        self.model.retain(|_, v| v.dies.is_none_or(|t| t > now));
        match *op {
            Op::Store {
                mode,
                key,
                len,
                flags,
                ttl,
                cas,
                cost,
            } => self.store(mode, key, len, flags, ttl, cas, cost),
            Op::Get { key, bump } => {
                let k = key_bytes(key);
                let how = if bump { Lookup::GET } else { Lookup::PEEK };
                let got = self.cache.get(&k, how, |i| {
                    i.map(|i| (i.value.to_vec(), i.flags, i.cas, dies_at(i.expiry)))
                });
                let lost = self.lost();
                let m = Self::explain(&mut self.model, &k, lost, "get", |m| {
                    m.is_some() == got.is_some()
                });
                if let (Some(m), Some(g)) = (m, got) {
                    assert_eq!(g, (m.value, m.flags, m.cas, m.dies), "get {k:?}");
                    self.last_cas.insert(k, g.2);
                }
            }
            Op::Delete { key, cas } => {
                let k = key_bytes(key);
                let c = self.cas_arg(&k, cas);
                let got = self.cache.lock().delete(&k, c);
                let lost = self.lost();
                let want = |m: Option<&Entry>| match m {
                    None => DeleteOutcome::NotFound,
                    Some(m) if c != 0 && c != m.cas => DeleteOutcome::Exists,
                    Some(_) => DeleteOutcome::Deleted,
                };
                Self::explain(&mut self.model, &k, lost, "delete", |m| want(m) == got);
                if got == DeleteOutcome::Deleted {
                    self.model.remove(&k);
                }
            }
            Op::Arith {
                key,
                incr,
                delta,
                cas,
                vivify,
            } => self.arith(key, incr, delta, cas, vivify),
            Op::Touch { key, ttl } => {
                let k = key_bytes(key);
                let got = self
                    .cache
                    .lock()
                    .touch(&k, self.clock.expiry(ttl))
                    .map(|i| (i.value.to_vec(), i.flags, i.cas));
                let lost = self.lost();
                let m = Self::explain(&mut self.model, &k, lost, "touch", |m| {
                    m.is_some() == got.is_some()
                });
                if let (Some(m), Some(g)) = (m, got) {
                    assert_eq!(g, (m.value.clone(), m.flags, m.cas), "touch {k:?}");
                    let dies = self.dies(ttl);
                    self.put(k, Entry { dies, ..m });
                }
            }
            Op::Flush { delay } => {
                let at = delay.map(|d| now + d);
                self.cache.lock().flush_all(at);
                match at {
                    Some(t) if t > now => self.pending_flush = Some(t),
                    _ => {
                        self.pending_flush = None;
                        self.model.clear();
                    }
                }
            }
            Op::Advance { secs } => {
                self.clock.advance(Duration::from_secs(secs));
                self.clock
                    .set_us(self.clock.now_us() + secs * 1_000_000 + 1);
            }
            Op::Maintain { budget } => {
                self.cache.lock().maintain(budget);
                self.cache.flush_zone(budget);
                self.cache.train_zone();
                // The flash writer's thread: a few steps.
                for _ in 0..budget.min(4) {
                    if !self.cache.flash_write_step() {
                        break;
                    }
                }
            }
            Op::Reassign { src, dst } => {
                self.cache.lock().slabs_reassign(src, dst);
            }
            Op::MovePage { from, to } => {
                self.cache
                    .lock()
                    .start_page_move(from as usize, to.map(usize::from));
            }
            Op::Limit { mb } => {
                let _ = self.cache.lock().set_memory_limit(mb << 20);
            }
        }
        // Learned costs see time pass between operations.
        self.clock.set_us(self.clock.now_us() + 137);
        self.cache.lock().validate();
    }

    #[allow(clippy::too_many_arguments)]
    fn store(
        &mut self,
        mode: StoreMode,
        key: u8,
        len: usize,
        flags: u32,
        ttl: i64,
        cas: CasArg,
        cost: Option<u32>,
    ) {
        let k = key_bytes(key);
        self.writes += 1;
        let v = value_bytes(key, len, self.writes);
        let c = self.cas_arg(&k, cas);
        let req = Store {
            key: &k,
            value: &v,
            flags,
            expiry: self.clock.expiry(ttl),
            mode,
            cas: c,
            new_cas: None,
            cost,
            invalidate: false,
        };
        // `Cache::store`, counting the stores made without the engine lock
        // (it may have to check the memory limit after one: `Settle`).
        let tried = self.cache.try_store(&req);
        if matches!(tried, Ok(_) | Err(Fallback::Settle(_))) {
            self.unlocked_stores += 1;
        }
        let got = match tried {
            Ok(got) => got,
            Err(f) => self.cache.finish_store(&mut self.cache.lock(), &req, f),
        };
        let lost = self.lost();
        let refuse = self.may_refuse();
        let engine = &self.cache;
        // memcached's do_store_item, in its order of checks.
        let want = |m: Option<&Entry>| match (m, mode) {
            (None, _) if c != 0 => StoreOutcome::NotFound,
            (Some(_), StoreMode::Add) => StoreOutcome::NotStored,
            (Some(m), _) if c != 0 && c != m.cas => StoreOutcome::Exists,
            (None, StoreMode::Replace | StoreMode::Append | StoreMode::Prepend) => {
                StoreOutcome::NotStored
            }
            (m, _) => {
                let (vlen, fl) = match (m, mode) {
                    (Some(m), StoreMode::Append | StoreMode::Prepend) => {
                        (m.value.len() + v.len(), m.flags)
                    }
                    _ => (v.len(), flags),
                };
                if engine.fits(k.len(), vlen, fl) {
                    StoreOutcome::Stored { cas: 0 }
                } else {
                    StoreOutcome::TooLarge
                }
            }
        };
        let fits = |m: Option<&Entry>| match (got, want(m)) {
            (StoreOutcome::Stored { .. }, StoreOutcome::Stored { .. }) => true,
            (StoreOutcome::NoMemory, StoreOutcome::Stored { .. }) => refuse,
            (g, w) => g == w,
        };
        let what = format!("{mode:?} (cas {c}) answered {got:?}");
        let old = Self::explain(&mut self.model, &k, lost, &what, fits);
        match got {
            StoreOutcome::Stored { cas } => {
                self.new_cas(&k, cas);
                let entry = match (mode, old) {
                    (StoreMode::Append, Some(old)) => Entry {
                        value: [old.value, v].concat(),
                        cas,
                        lost_at: lost,
                        ..old
                    },
                    (StoreMode::Prepend, Some(old)) => Entry {
                        value: [v, old.value].concat(),
                        cas,
                        lost_at: lost,
                        ..old
                    },
                    _ => Entry {
                        value: v,
                        flags,
                        dies: self.dies(ttl),
                        cas,
                        lost_at: lost,
                    },
                };
                self.put(k, entry);
            }
            // A failed set drops the old value (memcached does too).
            StoreOutcome::TooLarge | StoreOutcome::NoMemory if mode == StoreMode::Set => {
                self.model.remove(&k);
            }
            _ => {}
        }
    }

    fn arith(&mut self, key: u8, incr: bool, delta: u64, cas: CasArg, vivify: Option<u64>) {
        let k = key_bytes(key);
        let c = self.cas_arg(&k, cas);
        // The item as stored, not only the number, tells an updated item
        // from one vivified after an eviction: both can read 0.
        let (got, got_item, cas) = {
            let mut e = self.cache.lock();
            let got = e.arith(
                &k,
                &Arith {
                    incr,
                    delta,
                    cas: c,
                    autovivify: vivify.map(|v| (v, Expiry::Never)),
                    new_expiry: None,
                },
            );
            let (item, cas) = match got {
                ArithOutcome::Value { id, .. } => {
                    let i = e.item(id);
                    ((i.value.to_vec(), i.flags, dies_at(i.expiry)), i.cas)
                }
                _ => ((Vec::new(), 0, None), 0),
            };
            (got, item, cas)
        };
        let lost = self.lost();
        let refuse = self.may_refuse();
        let cache = &self.cache;
        // The new value and the item as stored: bytes (memcached pads a
        // shorter result with spaces, in place: `do_add_delta`), flags and
        // expiry; and whether it needs a new chunk. Or the outcome.
        type Stored = (Vec<u8>, u32, Option<RelTime>);
        let want = |m: Option<&Entry>| -> Result<(u64, Stored, bool), ArithOutcome> {
            let Some(m) = m else {
                let v = vivify.ok_or(ArithOutcome::NotFound)?;
                return Ok((v, (v.to_string().into_bytes(), 0, None), true));
            };
            // memcached's `do_add_delta` refuses empty and chained values
            // before it compares the CAS.
            let chained = cache.lock().chained(k.len(), m.value.len(), m.flags);
            if m.value.is_empty() || chained {
                return Err(ArithOutcome::NonNumeric);
            }
            if c != 0 && c != m.cas {
                return Err(ArithOutcome::Exists);
            }
            let n = parse_decimal(&m.value).ok_or(ArithOutcome::NonNumeric)?;
            let v = if incr {
                n.wrapping_add(delta)
            } else {
                n.saturating_sub(delta)
            };
            let mut digits = v.to_string().into_bytes();
            let grows = digits.len() > m.value.len();
            if !grows {
                digits.resize(m.value.len(), b' ');
            }
            Ok((v, (digits, m.flags, m.dies), grows))
        };
        let fits = |m: Option<&Entry>| match (got, want(m)) {
            (ArithOutcome::Value { value, .. }, Ok((v, item, _))) => value == v && got_item == item,
            (ArithOutcome::NoMemory, Ok((_, _, grows))) => grows && refuse,
            (g, Err(w)) => g == w,
            _ => false,
        };
        Self::explain(&mut self.model, &k, lost, "arith", fits);
        if let ArithOutcome::Value { .. } = got {
            self.new_cas(&k, cas);
            let (value, flags, dies) = got_item;
            let entry = Entry {
                value,
                flags,
                dies,
                cas,
                lost_at: lost,
            };
            self.put(k, entry);
        }
    }
}

/// Run `ops` on a fresh engine with `config`, checking every step.
pub fn run(ops: &[Op], config: Config) -> Harness {
    let mut h = Harness::new(config);
    for op in ops {
        h.step(op);
    }
    h
}

/// Reads the fuzzer's bytes; runs out as `None`.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes([
            self.u8()?,
            self.u8()?,
            self.u8()?,
            self.u8()?,
        ]))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(self.u32()? as u64 | (self.u32()? as u64) << 32)
    }

    fn cas(&mut self) -> Option<CasArg> {
        Some([CasArg::None, CasArg::Last, CasArg::Wrong][self.u8()? as usize % 3])
    }

    /// Relative, negative, and absolute (long past) exptimes.
    fn ttl(&mut self) -> Option<i64> {
        Some(match self.u8()? % 10 {
            0 => 0,
            b @ 1..=4 => b as i64,
            5 => -1,
            6 => 100_000,
            7 => 60 * 60 * 24 * 30,
            8 => 60 * 60 * 24 * 30 + 1,
            _ => 1_000_000_000,
        })
    }
}

/// Sizes of values: small ones of every length, and the edges of chunks
/// and of `-I` (1 MB, or 64 KB).
const LENS: [usize; 16] = [
    250, 1000, 4000, 16_000, 65_000, 65_400, 65_536, 100_000, 300_000, 600_000, 1_000_000,
    1_048_000, 1_048_300, 1_048_576, 512, 2048,
];
const COSTS: [u32; 8] = [1, 2, 10, 100, 1000, 65_535, 1 << 20, u32::MAX];

fn decode_op(b: &mut Bytes) -> Option<Op> {
    const MODES: [StoreMode; 5] = [
        StoreMode::Set,
        StoreMode::Add,
        StoreMode::Replace,
        StoreMode::Append,
        StoreMode::Prepend,
    ];
    // Keys 0..32: few enough that operations meet.
    let key = |b: &mut Bytes| b.u8().map(|k| k % 32);
    Some(match b.u8()? % 16 {
        0..=4 => Op::Store {
            mode: MODES[b.u8()? as usize % 5],
            key: key(b)?,
            len: match b.u8()? {
                l @ 0..=199 => l as usize,
                l => LENS[l as usize % LENS.len()],
            },
            flags: match b.u8()? % 4 {
                0 => 0,
                1 => 1,
                2 => u32::MAX,
                _ => b.u32()?,
            },
            ttl: b.ttl()?,
            cas: b.cas()?,
            cost: match b.u8()? % 10 {
                c @ 0..=7 => Some(COSTS[c as usize]),
                _ => None,
            },
        },
        5..=7 => Op::Get {
            key: key(b)?,
            bump: b.u8()? % 4 != 0,
        },
        8 => Op::Delete {
            key: key(b)?,
            cas: b.cas()?,
        },
        9 => Op::Arith {
            key: key(b)?,
            incr: b.u8()? % 2 == 0,
            delta: match b.u8()? % 4 {
                0 => u64::MAX,
                1 => 1 << 63,
                2 => b.u64()?,
                _ => b.u8()? as u64,
            },
            cas: b.cas()?,
            vivify: match b.u8()? % 3 {
                0 => Some(b.u64()?),
                _ => None,
            },
        },
        10 => Op::Touch {
            key: key(b)?,
            ttl: b.ttl()?,
        },
        11 => Op::Flush {
            delay: match b.u8()? % 3 {
                0 => None,
                d => Some(d as u32 * 2 - 2),
            },
        },
        12 => Op::Advance {
            secs: [0, 1, 2, 3, 60, 5 * 3600][b.u8()? as usize % 6],
        },
        13 => Op::Maintain {
            budget: [1, 8, 64, 1000, 100_000][b.u8()? as usize % 5],
        },
        14 => match b.u8()? % 3 {
            0 => Op::Reassign {
                src: b.u8()? as i8 as i32,
                dst: b.u8()? as i8 as i32,
            },
            1 => Op::MovePage {
                from: b.u8()? % 48,
                to: match b.u8()? {
                    t @ 0..=191 => Some(t % 48),
                    _ => None,
                },
            },
            // Above the fuzzer's memory sizes, then back to 8 MB: both ways.
            _ => Op::Limit {
                mb: [8, 9, 12, 16][b.u8()? as usize % 4],
            },
        },
        _ => Op::Get {
            key: key(b)?,
            bump: true,
        },
    })
}

/// The configuration the fuzzer's first bytes pick: each eviction policy
/// and rebalancing rule, a small memory (pressure from the first page),
/// `-I` of 1 MB or 64 KB, `-M`, and rules tuned to decide often.
fn decode_config(b: &mut Bytes) -> Option<Config> {
    let x = b.u8()?;
    let y = b.u8()?;
    Some(Config {
        memory_limit: [2, 3, 4, 8][(x >> 5 & 3) as usize] << 20,
        item_size_max: if y & 1 == 0 { 1 << 20 } else { 64 << 10 },
        evict: y & 0x0e != 0,
        slab_automove: 1 + (y >> 4 & 1),
        eviction: match (x & 1, x >> 7, y >> 7) {
            (0, _, _) => EvictionPolicy::Lru,
            (_, 0, _) => EvictionPolicy::GdWheel,
            (_, _, 0) => EvictionPolicy::GdWheelLazy,
            _ => EvictionPolicy::Sieve,
        },
        learn_costs: x & 2 != 0,
        rebalance: [
            RebalancePolicy::Off,
            RebalancePolicy::Memcached,
            RebalancePolicy::Sas,
            RebalancePolicy::CostPerByte,
            RebalancePolicy::Mrc,
        ][(x >> 2 & 7) as usize % 5],
        rebalance_tuning: Tuning {
            sas_misses: 1 + (y >> 5) as u64,
            ghost_pages: 1 + (y >> 6) as u32,
            mrc_period: 1 + (y >> 5) as u64 * 8,
            // Small ghost and sample tables: they fill up, and validating
            // them after every step stays cheap.
            ghost_bytes: 4 << 10,
            mrc_bytes: 16 << 10,
            ..Tuning::default()
        },
        // One stripe to many: the index per stripe, and the engine's
        // stripe bookkeeping (checked on every chunk access in debug).
        lock_stripes: [16, 1, 256, 4][((x ^ y) >> 3 & 3) as usize],
        in_place_sets: (x ^ y) & 0x40 == 0,
        lockfree_inserts: (x ^ y) & 0x20 == 0,
        repartition: (x ^ y) & 0x80 != 0,
        zzone: (x ^ y) & 0x04 != 0,
        // Small blocks: more of them, so splits and sweeps come early.
        zzone_block: [2048, 256][((x ^ y) & 1) as usize],
        zzone_codec: [Codec::Zstd, Codec::Lz4][((x ^ y) >> 1 & 1) as usize],
        zzone_deltas: [4, 0, 1, 15][((x >> 5) ^ (y >> 1)) as usize & 3],
        // Dictionaries trained early, so sequences this short meet them.
        zzone_dict_samples: 128,
        ..Config::default()
    })
}

/// The operation fuzzer's body (`crates/engine/fuzz`, and the replay of
/// its corpus in `tests/fuzz_corpus.rs`): a configuration, then operations,
/// from the bytes; every step is checked against the model.
pub fn fuzz_ops(data: &[u8]) {
    let mut b = Bytes(data);
    let Some(config) = decode_config(&mut b) else {
        return;
    };
    // FUZZ_TRACE=1 prints the decoded configuration and operations (to
    // read a crashing input).
    let trace = std::env::var_os("FUZZ_TRACE").is_some();
    if trace {
        eprintln!("{config:?}");
    }
    let mut h = Harness::new(config);
    while let Some(op) = decode_op(&mut b) {
        if trace {
            eprintln!("{op:?}");
        }
        h.step(&op);
    }
}
