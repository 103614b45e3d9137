//! The flash tier (SlimCache, issue 12): items that leave memory are
//! packed into compressed, checksummed containers, written in whole 1 MB
//! slabs to a file, and found again through a DRAM index of 8 bytes an
//! item.
//!
//! ```text
//! N-zone victim ──admit──▶ stage ──writer──▶ containers ──▶ slab buffer ──write──▶ file
//!                             ▲                                               │
//! GET miss ──▶ stage ─────────┘ (newest copies)                               │
//!          └─▶ index (tag → slab, container) ──read, check, decode, key?──────┘
//! ```
//!
//! - [`stage`]: items wait there, found by lookups, until their slab is
//!   written and indexed.
//! - [`container`]: SlimCache §3.3's compression unit, a Z-zone block
//!   under a CRC-32, about one flash page once compressed. Values that will
//!   not compress are recognised by their entropy and stored raw (§3.7,
//!   `codec::Recognizer`).
//! - [`log`]: the slabs and their DRAM table.
//! - [`index`]: tags and locations, no keys; the key is checked after the
//!   read.
//! - Hot and cold areas (§3.4): new items go to cold slabs, compressed;
//!   an item read while on a cold slab is moved to a hot slab (raw) when
//!   the garbage collector recycles its slab, not at once (§3.6: moving it
//!   at once would leave its old copy wasting space until then); an item
//!   of a hot slab that was read again stays hot, and goes cold otherwise.
//! - Two-stage garbage collection (§3.6): with fewer than `w_start` free
//!   slabs, the oldest slab is dropped whole (space-based eviction);
//!   otherwise, below `w_high`, it is read and its re-read items moved
//!   (locality-based recycling).
//!
//! Nothing here holds a lock across I/O: the writer reads and writes slabs
//! holding only its own state, lookups copy a container's place out of the
//! slab table and read without any lock, and every read is checked
//! (checksum, lengths, the block's walk, the key) before anything in it is
//! served: a fault is a miss.

pub mod container;
pub mod device;
pub mod fetch;
pub mod index;
pub mod log;
pub mod recover;
pub mod stage;

use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use crate::clock::Clock;
use crate::codec::{Codec, Coder, Recognizer};
use crate::item;
use crate::zzone::block;
use device::{AlignedBuf, Device, ALIGN};
use index::{FlashIndex, Loc};
use log::{Log, SlabHeader, SLAB, SLAB_HEADER};
use recover::Journal;
use stage::{Area, Stage, Taken};

/// The flash page a compressed container should fill (SlimCache §3.3).
pub const FLASH_PAGE: usize = 4096;
/// Raw container sizes are the page times the running ratio, within these.
const MIN_CONTAINER_RAW: usize = FLASH_PAGE;
const MAX_CONTAINER_RAW: usize = 16 * FLASH_PAGE;
/// Most containers in a slab (the index's container field).
const MAX_CONTAINERS: usize = 1 << index::CONTAINER_BITS;

/// `--flash-path`, `--flash-size` and the `-o flash_*` / `ext_*` options.
#[derive(Clone, Debug)]
pub struct FlashConfig {
    pub path: PathBuf,
    pub size: u64,
    /// Bytes per second the writer may write (0: no limit). Items that
    /// arrive faster wait in the stage, and are not admitted when it is
    /// full: the admission policy that keeps the budget.
    pub write_rate: u64,
    /// The hot area's share of the slabs, percent (SlimCache starts at 5).
    pub hot_percent: u8,
    /// Smallest item image admitted (memcached's `ext_item_size`).
    pub item_min: usize,
    /// Bytes the stage may hold (0: 1/32 of `-m`, within 2 MB..64 MB: an
    /// N-zone page emptied at once, 1 MB, must fit).
    pub stage_bytes: usize,
    /// Most DRAM the tier may take (0: half of `-m`): past it, the index
    /// stops growing and new entries push old ones out.
    pub memory_cap: usize,
    pub codec: Codec,
}

impl FlashConfig {
    pub fn new(path: PathBuf, size: u64) -> FlashConfig {
        FlashConfig {
            path,
            size,
            write_rate: 0,
            hot_percent: 5,
            item_min: 0,
            // 0: the engine sizes these from `-m`.
            stage_bytes: 0,
            memory_cap: 0,
            codec: Codec::Zstd,
        }
    }
}

/// The tier's part of `stats` (`stats flash`).
#[derive(Clone, Copy, Debug, Default)]
pub struct FlashStats {
    pub items: u64,
    pub staged: u64,
    pub slabs: u64,
    pub free_slabs: u64,
    pub hot_slabs: u64,
    pub cold_slabs: u64,
    /// DRAM the tier takes (index, stage, slab table, buffers).
    pub memory_bytes: u64,
    pub index_bytes: u64,
    /// Item bytes admitted and written (their images), and what the
    /// containers holding them took.
    pub admitted: u64,
    pub admit_refused: u64,
    pub raw_bytes: u64,
    pub stored_bytes: u64,
    /// Bytes written to the file, in all (slabs), and of items moved by
    /// the garbage collector.
    pub device_bytes: u64,
    pub moved_bytes: u64,
    pub containers_raw: u64,
    pub containers_compressed: u64,
    pub gc_recycled: u64,
    pub gc_evicted: u64,
    pub gc_promoted: u64,
    pub gc_demoted: u64,
    /// Items dropped: by the garbage collector, or pushed out of a full
    /// index bucket.
    pub evictions: u64,
    pub lookups: u64,
    pub hits: u64,
    pub stage_hits: u64,
    pub false_reads: u64,
    pub reads: u64,
    pub read_bytes: u64,
    pub read_errors: u64,
    pub io_errors: u64,
    pub write_errors: u64,
    /// How the last start found the file (`recover`).
    pub recovered_clean: bool,
    pub recovered_items: u64,
    pub recovery_us: u64,
    /// Read latency percentiles, microseconds.
    pub read_p50_us: u64,
    pub read_p90_us: u64,
    pub read_p99_us: u64,
}

#[derive(Default)]
struct Counters {
    admitted: AtomicU64,
    admit_refused: AtomicU64,
    raw_bytes: AtomicU64,
    stored_bytes: AtomicU64,
    device_bytes: AtomicU64,
    moved_bytes: AtomicU64,
    containers_raw: AtomicU64,
    containers_compressed: AtomicU64,
    gc_recycled: AtomicU64,
    gc_evicted: AtomicU64,
    gc_promoted: AtomicU64,
    gc_demoted: AtomicU64,
    evictions: AtomicU64,
    lookups: AtomicU64,
    hits: AtomicU64,
    stage_hits: AtomicU64,
    false_reads: AtomicU64,
    reads: AtomicU64,
    read_bytes: AtomicU64,
    read_errors: AtomicU64,
    io_errors: AtomicU64,
    write_errors: AtomicU64,
    /// Read latencies: bucket i counts reads of under 2^i microseconds.
    latency: [AtomicU64; 24],
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// The journal's mark for `flush_all` (a hash no key is expected to have).
const FLUSH_ALL: u64 = u64::MAX;

/// How the tier found its file at start.
#[derive(Clone, Copy, Debug, Default)]
pub struct Recovery {
    /// From a clean shutdown's snapshot (else a scan).
    pub clean: bool,
    pub items: u64,
    pub slabs: u64,
    pub bad_slabs: u64,
    pub bad_containers: u64,
    pub micros: u64,
}

/// What a lookup found.
#[derive(Debug, PartialEq, Eq)]
pub enum Probe {
    /// Not on flash.
    Absent,
    /// Staged: its image was copied out.
    Staged,
    /// Possibly at these places: read them ([`Flash::read`]).
    OnFlash(Vec<Loc>),
}

/// The writer's own state: only the writer thread uses it (a mutex makes
/// the tier `Sync`; only `sync` and `validate` ever wait for it).
struct Writer {
    gc: AlignedBuf,
    coder: Coder,
    recognizer: Recognizer,
    raw: Vec<u8>,
    packed: Vec<u8>,
    container: Vec<u8>,
    taken: Vec<Taken>,
    /// Running compression ratio of compressed containers (raw / stored).
    ratio: f64,
    /// The write budget: bytes that may still be written, refilled at
    /// `write_rate` per second.
    tokens: f64,
    refilled: Instant,
    /// The `flush_all`s it has caught up with.
    cleared: u64,
}

/// A slab being filled in DRAM: its containers are indexed and read from
/// here until it is written.
struct OpenSlab {
    slab: u32,
    seq: u64,
    buf: AlignedBuf,
    /// Where each container starts.
    offsets: Vec<u32>,
    at: usize,
    live: u32,
}

/// A slab being written: readable from DRAM until it is sealed.
struct Sealing {
    slab: u32,
    buf: Arc<AlignedBuf>,
    /// Container starts, then the end.
    offsets: Vec<u32>,
}

/// The slabs that live in DRAM (one open per area, one being written),
/// under a mutex readers hold only to copy a container out.
#[derive(Default)]
struct Dram {
    open: [Option<OpenSlab>; 2],
    sealing: Option<Sealing>,
    spare: Vec<AlignedBuf>,
}

impl Dram {
    /// Bytes of container `c` of `slab`, if that slab is in DRAM.
    fn container(&self, loc: Loc) -> Option<Option<&[u8]>> {
        let c = loc.container as usize;
        for o in self.open.iter().flatten() {
            if o.slab == loc.slab {
                let start = *o.offsets.get(c)? as usize;
                let end = o.offsets.get(c + 1).map_or(o.at, |&e| e as usize);
                return Some(Some(&o.buf.as_ref()[start..end]));
            }
        }
        let s = self.sealing.as_ref().filter(|s| s.slab == loc.slab)?;
        let range = s.offsets.get(c).zip(s.offsets.get(c + 1));
        Some(range.map(|(&a, &b)| &s.buf.as_ref().as_ref()[a as usize..b as usize]))
    }

    #[cfg(any(test, feature = "testing"))]
    fn slabs(&self) -> impl Iterator<Item = u32> + '_ {
        self.open
            .iter()
            .flatten()
            .map(|o| o.slab)
            .chain(self.sealing.as_ref().map(|s| s.slab))
    }
}

/// A thread's means to read containers: a buffer, a decoder.
#[derive(Default)]
pub struct Reader {
    coder: Coder,
    buf: Option<AlignedBuf>,
    raw: Vec<u8>,
}

thread_local! {
    static READER: RefCell<Reader> = RefCell::new(Reader::default());
}

pub struct Flash {
    config: FlashConfig,
    device: Arc<dyn Device>,
    index: FlashIndex,
    stage: Mutex<Stage>,
    log: Mutex<Log>,
    dram: Mutex<Dram>,
    writer: Mutex<Writer>,
    /// `flush_all`s so far: the writer drops its open slabs when it sees
    /// this change.
    cleared: AtomicU64,
    /// The largest CAS unique admitted (see [`Flash::max_cas`]).
    max_cas: AtomicU64,
    /// Tombstones not yet in the journal: (hash, sequence number).
    tombs: Mutex<Vec<(u64, u64)>>,
    journal: Mutex<Option<Journal>>,
    recovery: Mutex<Recovery>,
    counters: Counters,
    /// DRAM figures read without the locks (the engine's budget).
    index_bytes: AtomicUsize,
    log_bytes: AtomicUsize,
    /// The engine's clock; its start (the Unix time of relative time 0)
    /// is written in every slab header.
    clock: Arc<Clock>,
    w_start: usize,
    w_high: usize,
}

impl Flash {
    /// A tier over `device`, empty.
    pub fn new(config: FlashConfig, device: Arc<dyn Device>, clock: Arc<Clock>) -> Flash {
        let slabs = (device.size() / SLAB as u64) as usize;
        let slabs = slabs.min(1 << index::SLAB_BITS);
        // SlimCache: W_high 16 and W_start 2 of thousands of slabs; a
        // small file keeps a proportionate reserve.
        let w_high = (slabs / 32).clamp(2, 16);
        let log = Log::new(slabs);
        let f = Flash {
            index: FlashIndex::default(),
            stage: Mutex::new(Stage::default()),
            log_bytes: AtomicUsize::new(log.memory_bytes()),
            log: Mutex::new(log),
            dram: Mutex::default(),
            writer: Mutex::new(Writer {
                gc: AlignedBuf::new(SLAB),
                coder: Coder::default(),
                recognizer: Recognizer::new(4 * FLASH_PAGE, 1.1, 64),
                raw: Vec::new(),
                packed: Vec::new(),
                container: Vec::new(),
                taken: Vec::new(),
                ratio: 2.0,
                tokens: 0.0,
                refilled: Instant::now(),
                cleared: 0,
            }),
            cleared: AtomicU64::new(0),
            counters: Counters::default(),
            index_bytes: AtomicUsize::new(0),
            max_cas: AtomicU64::new(0),
            tombs: Mutex::new(Vec::new()),
            journal: Mutex::new(None),
            recovery: Mutex::new(Recovery::default()),
            clock,
            w_start: (w_high / 8).max(1),
            w_high,
            config,
            device,
        };
        f.recover();
        f.index_bytes
            .store(f.index.memory_bytes(), Ordering::Relaxed);
        f.log_bytes
            .store(f.log.lock().memory_bytes(), Ordering::Relaxed);
        f
    }

    /// What was on flash at start: the clean shutdown's snapshot if it is
    /// valid, else a scan of every slab (`recover`).
    fn recover(&self) {
        let t = Instant::now();
        let mut journal = Journal::open(&recover::journal_path(&self.config.path)).ok();
        let clean = match recover::take_snapshot(&recover::snapshot_path(&self.config.path)) {
            Some(snap) => self.load_snapshot(snap),
            None => false,
        };
        let tombs = journal.as_mut().map(Journal::records).unwrap_or_default();
        let mut r = Recovery {
            clean,
            ..Recovery::default()
        };
        if !clean {
            self.scan(&tombs, &mut r);
        }
        r.items = self.index.len() as u64;
        r.micros = t.elapsed().as_micros() as u64;
        // Only tombstones that can still shadow a slab on flash are kept.
        let oldest = self.log.lock().oldest_seq().unwrap_or(u64::MAX);
        if let Some(j) = journal.as_mut() {
            let keep: Vec<(u64, u64)> = tombs.into_iter().filter(|t| t.1 > oldest).collect();
            if j.rewrite(&keep).is_err() {
                bump(&self.counters.write_errors);
            }
        }
        *self.journal.lock() = journal;
        *self.recovery.lock() = r;
    }

    /// Install a clean shutdown's snapshot, if every slab it names still
    /// has that slab's header on flash.
    fn load_snapshot(&self, snap: recover::Snapshot) -> bool {
        let mut log = self.log.lock();
        if snap.slabs.len() != log.slabs.len() || snap.shards.len() != index::SHARDS {
            return false;
        }
        let mut head = AlignedBuf::new(ALIGN);
        for (i, s) in snap.slabs.iter().enumerate() {
            if s.area == 0xff {
                continue;
            }
            let ok = self
                .device
                .read_at(head.as_mut(), i as u64 * SLAB as u64)
                .ok()
                .and_then(|()| SlabHeader::read(head.as_ref()))
                .is_some_and(|h| h.seq == s.seq && h.area as u8 == s.area);
            if !ok {
                return false;
            }
        }
        for (m, s) in log.slabs.iter_mut().zip(snap.slabs) {
            *m = log::SlabMeta {
                area: match s.area {
                    0 => Some(Area::Cold),
                    1 => Some(Area::Hot),
                    _ => None,
                },
                seq: s.seq,
                epoch: s.epoch,
                offsets: s.offsets,
                live: s.live,
            };
        }
        log.relist();
        log.next_seq = log.next_seq.max(snap.next_seq);
        drop(log);
        self.index.import(&snap.shards);
        self.max_cas.fetch_max(snap.max_cas, Ordering::Relaxed);
        true
    }

    /// Rebuild the index from the slabs themselves (after a crash): oldest
    /// slab first, so a newer copy of a key replaces an older one; copies
    /// older than a tombstone of their key, or than a `flush_all`, stay
    /// out.
    fn scan(&self, tombs: &[(u64, u64)], r: &mut Recovery) {
        let mut newest_tomb: std::collections::HashMap<u64, u64> = Default::default();
        let mut flushed = 0;
        for &(h, seq) in tombs {
            if h == FLUSH_ALL {
                flushed = flushed.max(seq);
            } else {
                let e = newest_tomb.entry(h).or_insert(0);
                *e = (*e).max(seq);
            }
        }
        let slabs = self.log.lock().slabs.len();
        let mut found = Vec::new();
        let mut buf = AlignedBuf::new(SLAB);
        let mut coder = Coder::default();
        for i in 0..slabs {
            if self
                .device
                .read_at(buf.as_mut(), i as u64 * SLAB as u64)
                .is_err()
            {
                r.bad_slabs += 1;
                continue;
            }
            if let Some(s) = recover::scan_slab(buf.as_ref(), &mut coder) {
                r.bad_containers += s.bad_containers as u64;
                if s.header.seq >= flushed {
                    found.push((s.header.seq, i as u32, s));
                }
            }
        }
        found.sort_unstable_by_key(|f| f.0);
        let now = self.clock.started_unix();
        let mut log = self.log.lock();
        let mut max_cas = 0;
        for (seq, slab, s) in found {
            let mut live = 0;
            for (c, h, mut image) in s.items {
                if newest_tomb.get(&h).is_some_and(|&t| t > seq)
                    || !recover::rebase(&mut image, s.header.epoch, now)
                {
                    continue;
                }
                max_cas = max_cas.max(item::Header::read(&image).cas);
                // An older copy of the key (or of a key sharing its tag) goes.
                self.index.remove(h, |_| {});
                self.index.insert(h, recover::loc(slab, c), true);
                live += 1;
            }
            log.slabs[slab as usize] = log::SlabMeta {
                area: Some(s.header.area),
                seq,
                epoch: s.header.epoch,
                offsets: s.offsets,
                live,
            };
            r.slabs += 1;
        }
        log.relist();
        self.max_cas.fetch_max(max_cas, Ordering::Relaxed);
    }

    /// The largest CAS unique of an item on flash (the engine's counter
    /// starts above it after a restart).
    pub fn max_cas(&self) -> u64 {
        self.max_cas.load(Ordering::Relaxed)
    }

    /// Append the tombstones recorded since the last call to the journal
    /// and sync it; compact it when it has grown. The writer thread's.
    fn journal_step(&self) {
        let tombs = std::mem::take(&mut *self.tombs.lock());
        let mut j = self.journal.lock();
        let Some(journal) = j.as_mut() else {
            return;
        };
        if journal.append(&tombs).is_err() {
            bump(&self.counters.write_errors);
        }
        let limit = (self.config.size / 256).max(4 << 20);
        if journal.bytes() > limit {
            let oldest = self.log.lock().oldest_seq().unwrap_or(u64::MAX);
            let keep: Vec<(u64, u64)> = journal
                .records()
                .into_iter()
                .filter(|t| t.1 > oldest)
                .collect();
            if journal.rewrite(&keep).is_err() {
                bump(&self.counters.write_errors);
            }
        }
    }

    /// How the last start found the flash.
    pub fn recovery(&self) -> Recovery {
        *self.recovery.lock()
    }

    pub fn config(&self) -> &FlashConfig {
        &self.config
    }

    /// DRAM the tier takes for what it stores, counted in `-m`: the index,
    /// the slab table, and the stage at its cap, reserved whole (counting
    /// what it holds instead fed back: a page emptied for the budget filled
    /// the stage, which emptied the next page, until the stage was full).
    /// The writer's slab buffers (1 MB for each area's open slab, one
    /// being written, one for the collector) are a fixed overhead beside
    /// it, as connection buffers are (memcached's extstore write buffers
    /// are not in `-m` either).
    pub fn memory_bytes(&self) -> usize {
        self.index_bytes.load(Ordering::Relaxed)
            + self.config.stage_bytes
            + self.log_bytes.load(Ordering::Relaxed)
    }

    /// An item image leaves memory: stage it for the writer. False if not
    /// admitted (too small, too large for a slab, or the stage is full
    /// because the writer is behind or over its write budget).
    pub fn admit(&self, h: u64, image: &[u8]) -> bool {
        let max = SLAB - SLAB_HEADER - container::HEADER - block::encoded_len(1, 0);
        if image.len() < self.config.item_min || image.len() > max {
            return false;
        }
        let mut stage = self.stage.lock();
        if stage.bytes() + image.len() > self.config.stage_bytes {
            drop(stage);
            bump(&self.counters.admit_refused);
            return false;
        }
        stage.push(Area::Cold, h, Arc::from(image), None);
        self.max_cas
            .fetch_max(item::Header::read(image).cas, Ordering::Relaxed);
        true
    }

    /// The key of hash `h` was written to memory, deleted or flushed: no
    /// copy of it on flash may be served again. Takes out every index
    /// entry of its tag and its staged copy.
    pub fn forget(&self, h: u64) {
        let mut gone = Vec::new();
        let staged = {
            let mut stage = self.stage.lock();
            let staged = stage.remove(h).is_some();
            // Under the stage's lock: a publish of this key's copy either
            // happened before (its entry is removed here) or finds it gone.
            self.index.remove(h, |l| gone.push(l));
            staged
        };
        if staged || !gone.is_empty() {
            // A copy may be in a slab (written, or being written): after a
            // crash, the scan must not bring it back.
            let seq = self.log.lock().next_seq;
            self.tombs.lock().push((h, seq));
        }
        self.dead(&gone);
    }

    /// Entries at these places were removed: their slabs hold less.
    fn dead(&self, gone: &[Loc]) {
        if gone.is_empty() {
            return;
        }
        let mut log = self.log.lock();
        for l in gone {
            let m = &mut log.slabs[l.slab as usize];
            m.live = m.live.saturating_sub(1);
        }
    }

    /// Look `key` (hash `h`) up: the stage first (its image is copied into
    /// `image`), then the index.
    pub fn lookup(&self, h: u64, key: &[u8], image: &mut Vec<u8>) -> Probe {
        bump(&self.counters.lookups);
        {
            let stage = self.stage.lock();
            if let Some(im) = stage.get(h, key) {
                image.clear();
                image.extend_from_slice(im);
                bump(&self.counters.stage_hits);
                bump(&self.counters.hits);
                return Probe::Staged;
            }
        }
        let mut locs = Vec::new();
        self.index.find(h, &mut locs);
        if locs.is_empty() {
            Probe::Absent
        } else {
            Probe::OnFlash(locs)
        }
    }

    /// Where `key` (hash `h`) may be on flash, if it is not staged: a
    /// look-ahead for reads to come, counted nowhere.
    pub fn peek(&self, h: u64, key: &[u8]) -> Vec<Loc> {
        let mut locs = Vec::new();
        if self.stage.lock().get(h, key).is_none() {
            self.index.find(h, &mut locs);
        }
        locs
    }

    /// Read the item of `key` (hash `h`) from the first of `locs` that
    /// holds it, into `image`: I/O, so call it holding no lock. False when
    /// none does (a tag shared with another key, a slab recycled since the
    /// lookup, or a fault: an I/O error or a container that fails its
    /// checks).
    pub fn read(&self, h: u64, key: &[u8], locs: &[Loc], image: &mut Vec<u8>) -> bool {
        READER.with_borrow_mut(|r| {
            for &loc in locs {
                if self.read_one(r, h, key, loc, image) {
                    bump(&self.counters.hits);
                    self.index.mark_accessed(h, loc);
                    return true;
                }
            }
            false
        })
    }

    fn read_one(&self, r: &mut Reader, h: u64, key: &[u8], loc: Loc, image: &mut Vec<u8>) -> bool {
        // A slab still in DRAM: copy the container out, decode without
        // the lock.
        let in_dram = {
            let dram = self.dram.lock();
            dram.container(loc).map(|c| c.map(|b| b.to_vec()))
        };
        let now = self.clock.started_unix();
        if let Some(bytes) = in_dram {
            let Some(bytes) = bytes else {
                return false;
            };
            return self.decode(r, h, key, loc, &bytes, now, image);
        }
        let (range, epoch) = {
            let log = self.log.lock();
            let m = &log.slabs[loc.slab as usize];
            (m.container(loc.container), m.epoch)
        };
        let Some((start, end)) = range else {
            return false;
        };
        let base = loc.slab as u64 * SLAB as u64;
        let from = start / ALIGN * ALIGN;
        let len = (end - from).div_ceil(ALIGN) * ALIGN;
        let buf = r.buf.get_or_insert_with(|| AlignedBuf::new(len));
        if buf.len() < len {
            *buf = AlignedBuf::new(len);
        }
        let t = Instant::now();
        bump(&self.counters.reads);
        if self
            .device
            .read_at(&mut buf.as_mut()[..len], base + from as u64)
            .is_err()
        {
            bump(&self.counters.io_errors);
            return false;
        }
        self.note_latency(t);
        self.counters
            .read_bytes
            .fetch_add(len as u64, Ordering::Relaxed);
        let bytes = buf.as_ref()[start - from..end - from].to_vec();
        self.decode(r, h, key, loc, &bytes, epoch, image)
    }

    /// Check and decode a container read from `loc` (written under
    /// `epoch`), and find the key.
    #[allow(clippy::too_many_arguments)]
    fn decode(
        &self,
        r: &mut Reader,
        h: u64,
        key: &[u8],
        loc: Loc,
        bytes: &[u8],
        epoch: i64,
        image: &mut Vec<u8>,
    ) -> bool {
        if container::read(bytes, &mut r.coder, |_| None, &mut r.raw).is_err() {
            // A container that fails its checks is garbage: its entry goes.
            bump(&self.counters.read_errors);
            if self.index.remove_at(h, loc).is_some() {
                self.dead(&[loc]);
            }
            return false;
        }
        match block::find(&r.raw, h, key) {
            Ok(Some(found)) => {
                image.clear();
                image.extend_from_slice(found);
                // Expired while the server was down: a miss.
                recover::rebase(image, epoch, self.clock.started_unix())
            }
            _ => {
                bump(&self.counters.false_reads);
                false
            }
        }
    }

    fn note_latency(&self, t: Instant) {
        let us = t.elapsed().as_micros() as u64;
        let b = (64 - us.leading_zeros() as usize).min(self.counters.latency.len() - 1);
        bump(&self.counters.latency[b]);
    }

    /// The writer's work: pack the next staged items of one area into a
    /// container and append it to that area's open slab, sealing (writing)
    /// the slab first when it is full, and recycling an old slab first
    /// when free ones run low. Returns whether it did anything (false:
    /// nothing waits, or the write budget is spent, or the disk refuses).
    pub fn write_step(&self) -> bool {
        let mut w = self.writer.lock();
        let w = &mut *w;
        self.catch_up_with_clear(w);
        self.journal_step();
        let area = {
            let stage = self.stage.lock();
            if stage.has_waiting(Area::Hot) {
                Area::Hot
            } else if stage.has_waiting(Area::Cold) {
                Area::Cold
            } else {
                return false;
            }
        };
        let compress = area == Area::Cold && self.config.codec != Codec::Raw;
        let target = if compress {
            ((FLASH_PAGE as f64 * w.ratio) as usize).clamp(MIN_CONTAINER_RAW, MAX_CONTAINER_RAW)
        } else {
            FLASH_PAGE
        };
        w.taken.clear();
        self.stage.lock().take(area, target, &mut w.taken);
        let Some(first_seq) = w.taken.first().map(|t| t.0) else {
            return false;
        };
        let mut items: Vec<(u64, &[u8])> = w.taken.iter().map(|t| (t.1, &t.2[..])).collect();
        let (used, entropy, tried) = if compress {
            crate::zzone::flush::encode(
                &mut w.coder,
                &mut w.recognizer,
                self.config.codec,
                None,
                &mut items,
                &mut w.raw,
                &mut w.packed,
            )
        } else {
            block::build(&mut items, &mut w.raw);
            w.packed.clear();
            w.packed.extend_from_slice(&w.raw);
            (Codec::Raw, 0.0, false)
        };
        let count = items.len();
        drop(items);
        w.container.clear();
        container::write(used, None, count, w.raw.len(), &w.packed, &mut w.container);
        let Some((slab, c)) = self.append(w, area) else {
            // No room and no slab to open: the items wait.
            self.stage.lock().untake(area, first_seq);
            return false;
        };
        if tried {
            w.recognizer.record(entropy, w.raw.len(), w.packed.len());
        }
        if used == Codec::Raw {
            bump(&self.counters.containers_raw);
        } else {
            bump(&self.counters.containers_compressed);
            let r = w.raw.len() as f64 / w.packed.len().max(1) as f64;
            w.ratio = 0.9 * w.ratio + 0.1 * r;
        }
        self.counters
            .stored_bytes
            .fetch_add(w.container.len() as u64, Ordering::Relaxed);
        self.publish(w, area, Loc { slab, container: c });
        true
    }

    /// Append the writer's container to the open slab of `area`, sealing
    /// the full one and opening another as needed. Returns where it went.
    fn append(&self, w: &mut Writer, area: Area) -> Option<(u32, u16)> {
        let bytes = w.container.len();
        let fits = |o: &OpenSlab| o.at + bytes <= SLAB && o.offsets.len() < MAX_CONTAINERS;
        let full = matches!(&self.dram.lock().open[area as usize], Some(o) if !fits(o));
        if full && !self.seal(w, area, false) {
            return None;
        }
        if self.dram.lock().open[area as usize].is_none() {
            self.collect_garbage(w);
            let slab = self.log.lock().free.pop()?;
            let seq = {
                let mut log = self.log.lock();
                log.next_seq += 1;
                log.next_seq - 1
            };
            let mut dram = self.dram.lock();
            let mut buf = dram.spare.pop().unwrap_or_else(|| AlignedBuf::new(SLAB));
            buf.as_mut()[..SLAB_HEADER].fill(0);
            dram.open[area as usize] = Some(OpenSlab {
                slab,
                seq,
                buf,
                offsets: Vec::new(),
                at: SLAB_HEADER,
                live: 0,
            });
        }
        let mut dram = self.dram.lock();
        let o = dram.open[area as usize].as_mut()?;
        if !fits(o) {
            // A container larger than a slab cannot be (admit refuses
            // such items), but never write past the buffer.
            return None;
        }
        o.buf.as_mut()[o.at..o.at + bytes].copy_from_slice(&w.container);
        o.offsets.push(o.at as u32);
        o.at += bytes;
        Some((o.slab, (o.offsets.len() - 1) as u16))
    }

    /// Write the open slab of `area` to the file, whole, and seal it in
    /// the slab table. Its bytes stay readable from DRAM until then. On a
    /// write error (a full or failing disk) its items are dropped: they
    /// are evicted, and memory goes on serving. False if the write budget
    /// does not allow a slab now (the slab stays open).
    fn seal(&self, w: &mut Writer, area: Area, force: bool) -> bool {
        if !force && !self.budget_allows(w) {
            return false;
        }
        let (slab, seq, buf, offsets, live) = {
            let mut dram = self.dram.lock();
            let Some(mut o) = dram.open[area as usize].take() else {
                return true;
            };
            SlabHeader {
                area,
                seq: o.seq,
                epoch: self.clock.started_unix(),
                used: o.at as u32,
                containers: o.offsets.len() as u32,
            }
            .write(o.buf.as_mut());
            // Zero the tail, so no stale container follows the last one.
            o.buf.as_mut()[o.at..].fill(0);
            o.offsets.push(o.at as u32);
            let buf = Arc::new(o.buf);
            dram.sealing = Some(Sealing {
                slab: o.slab,
                buf: buf.clone(),
                offsets: o.offsets.clone(),
            });
            (o.slab, o.seq, buf, o.offsets, o.live)
        };
        let io = self
            .device
            .write_at(buf.as_ref().as_ref(), slab as u64 * SLAB as u64)
            .and_then(|()| match self.device.direct() {
                true => Ok(()),
                false => self.device.sync(),
            });
        match io {
            Ok(()) => {
                w.tokens -= SLAB as f64;
                self.counters
                    .device_bytes
                    .fetch_add(SLAB as u64, Ordering::Relaxed);
                let mut log = self.log.lock();
                log.seal(slab, area, seq, self.clock.started_unix(), offsets);
                log.slabs[slab as usize].live = live;
            }
            Err(_) => {
                bump(&self.counters.write_errors);
                let n = self.index.remove_slab(slab);
                self.counters
                    .evictions
                    .fetch_add(n as u64, Ordering::Relaxed);
                self.log.lock().release(slab);
            }
        }
        let mut dram = self.dram.lock();
        dram.sealing = None;
        if let Ok(b) = Arc::try_unwrap(buf) {
            dram_spare(&mut dram.spare, b);
        }
        drop(dram);
        self.log_bytes
            .store(self.log.lock().memory_bytes(), Ordering::Relaxed);
        true
    }

    /// Write whatever is staged and seal the open slabs, full or not: for
    /// a clean shutdown (and the tests). Returns false if the disk refused.
    pub fn sync(&self) -> bool {
        while self.write_step() {}
        let mut w = self.writer.lock();
        let before = self.counters.write_errors.load(Ordering::Relaxed);
        for area in [Area::Cold, Area::Hot] {
            self.seal(&mut w, area, true);
        }
        self.journal_step();
        self.counters.write_errors.load(Ordering::Relaxed) == before
    }

    /// A clean shutdown: [`Flash::sync`], then save the index and slab
    /// table, so the next start serves the flash contents at once
    /// (`recover`). Call it once nothing else uses the tier.
    pub fn shutdown(&self) -> bool {
        if !self.sync() {
            return false;
        }
        let _w = self.writer.lock();
        let log = self.log.lock();
        let snap = recover::Snapshot {
            slabs: log
                .slabs
                .iter()
                .map(|m| recover::SavedSlab {
                    area: m.area.map_or(0xff, |a| a as u8),
                    seq: m.seq,
                    epoch: m.epoch,
                    offsets: m.offsets.clone(),
                    live: m.live,
                })
                .collect(),
            shards: self.index.export(),
            next_seq: log.next_seq,
            max_cas: self.max_cas(),
        };
        drop(log);
        recover::save_snapshot(&recover::snapshot_path(&self.config.path), &snap).is_ok()
    }

    fn budget_allows(&self, w: &mut Writer) -> bool {
        let rate = self.config.write_rate as f64;
        if rate == 0.0 {
            return true;
        }
        let now = Instant::now();
        let secs = now.duration_since(w.refilled).as_secs_f64();
        w.refilled = now;
        // At most a second's worth saved up, and at least a slab's, so a
        // budget under 1 MB/s still writes (less often).
        w.tokens = (w.tokens + secs * rate).min(rate.max(SLAB as f64));
        w.tokens >= SLAB as f64
    }

    /// The writer's container is at `to`: index each of its items that is
    /// still staged (the rest were removed or replaced meanwhile).
    fn publish(&self, w: &mut Writer, area: Area, to: Loc) {
        let may_grow = self.memory_bytes() < self.config.memory_cap;
        let (mut live, mut raw, mut moved, mut dropped) = (0u32, 0u64, 0u64, Vec::new());
        {
            let mut stage = self.stage.lock();
            for t in &w.taken {
                let Some(s) = stage.publish(area, t.0) else {
                    continue;
                };
                match s.from {
                    Some(from) => {
                        if self.index.relocate(s.h, from, to) {
                            live += 1;
                            moved += s.image.len() as u64;
                        }
                    }
                    None => {
                        let r = self.index.insert(s.h, to, may_grow);
                        self.index_bytes.fetch_add(r.grew, Ordering::Relaxed);
                        live += 1;
                        raw += s.image.len() as u64;
                        bump(&self.counters.admitted);
                        self.counters
                            .evictions
                            .fetch_add(r.dropped.len() as u64, Ordering::Relaxed);
                        dropped.extend(r.dropped);
                    }
                }
            }
        }
        self.dead(&dropped);
        if let Some(o) = self
            .dram
            .lock()
            .open
            .iter_mut()
            .flatten()
            .find(|o| o.slab == to.slab)
        {
            o.live += live;
        }
        let c = &self.counters;
        c.raw_bytes.fetch_add(raw, Ordering::Relaxed);
        c.moved_bytes.fetch_add(moved, Ordering::Relaxed);
        w.taken.clear();
    }

    /// Keep at least `w_high` slabs free: recycle the oldest slab of the
    /// hot area while it is over its share, else of the cold area.
    fn collect_garbage(&self, w: &mut Writer) {
        let (free, victim, area) = {
            let mut log = self.log.lock();
            let free = log.free.len();
            if free >= self.w_high {
                return;
            }
            let hot_cap = (log.slabs.len() * self.config.hot_percent as usize / 100).max(1);
            let area = if log.sealed(Area::Hot) > hot_cap || log.sealed(Area::Cold) == 0 {
                Area::Hot
            } else {
                Area::Cold
            };
            match log.oldest(area) {
                Some(v) => (free, v, area),
                None => return,
            }
        };
        bump(&self.counters.gc_recycled);
        if free < self.w_start || !self.recycle(w, victim, area) {
            // Space-based eviction (or a slab that could not be read):
            // everything in it goes, found by a walk of the index.
            bump(&self.counters.gc_evicted);
            let n = self.index.remove_slab(victim);
            self.counters
                .evictions
                .fetch_add(n as u64, Ordering::Relaxed);
        }
        self.log.lock().release(victim);
    }

    /// Locality-based recycling of `victim` (§3.6): read it; items read
    /// since they were written move (cold ones to the hot area, hot ones
    /// stay hot), the rest are dropped. False if the slab could not be
    /// read or a container in it failed its checks (then the caller drops
    /// whatever the index still has there).
    fn recycle(&self, w: &mut Writer, victim: u32, area: Area) -> bool {
        let (offsets, epoch) = {
            let log = self.log.lock();
            let m = &log.slabs[victim as usize];
            (m.offsets.clone(), m.epoch)
        };
        let this_run = self.clock.started_unix();
        let Some(&end) = offsets.last() else {
            return true;
        };
        let len = (end as usize).div_ceil(ALIGN) * ALIGN;
        if self
            .device
            .read_at(&mut w.gc.as_mut()[..len], victim as u64 * SLAB as u64)
            .is_err()
        {
            bump(&self.counters.io_errors);
            return false;
        }
        let mut clean = true;
        for (c, pair) in offsets.windows(2).enumerate() {
            let bytes = &w.gc.as_ref()[pair[0] as usize..pair[1] as usize];
            if container::read(bytes, &mut w.coder, |_| None, &mut w.raw).is_err() {
                bump(&self.counters.read_errors);
                clean = false;
                continue;
            }
            let loc = Loc {
                slab: victim,
                container: c as u16,
            };
            let Ok(entries) = block::entries(&w.raw) else {
                clean = false;
                continue;
            };
            for e in entries {
                let Ok((h, image)) = e else {
                    clean = false;
                    break;
                };
                // A moved item is rewritten under this run's clock.
                let mut image = image.to_vec();
                let exp =
                    recover::rebase(&mut image, epoch, this_run).then(|| item::exptime(&image));
                let live_item = exp.is_some_and(|e| e == 0 || e > self.clock.now());
                let image = &image[..];
                match self.index.accessed(h, loc) {
                    None => {}
                    Some(true) if live_item => {
                        let to = match area {
                            Area::Cold => {
                                bump(&self.counters.gc_promoted);
                                Area::Hot
                            }
                            Area::Hot => Area::Hot,
                        };
                        let mut stage = self.stage.lock();
                        if stage.bytes() + image.len() <= self.config.stage_bytes {
                            stage.push(to, h, Arc::from(image), Some(loc));
                            continue;
                        }
                        drop(stage);
                        self.drop_item(h, loc);
                    }
                    Some(_) => {
                        if area == Area::Hot && live_item {
                            // Not read again while hot: back to the cold
                            // area, compressed.
                            bump(&self.counters.gc_demoted);
                            let mut stage = self.stage.lock();
                            if stage.bytes() + image.len() <= self.config.stage_bytes {
                                stage.push(Area::Cold, h, Arc::from(image), Some(loc));
                                continue;
                            }
                        }
                        self.drop_item(h, loc);
                    }
                }
            }
        }
        clean
    }

    fn drop_item(&self, h: u64, loc: Loc) {
        if self.index.remove_at(h, loc).is_some() {
            bump(&self.counters.evictions);
        }
    }

    /// Everything goes (`flush_all`): the stage and the index at once (so
    /// nothing is found from now on); the slabs when the writer next
    /// steps, since it may be writing one now and nobody waits for I/O.
    pub fn clear(&self) {
        let mut stage = self.stage.lock();
        stage.clear();
        self.index.clear();
        self.cleared.fetch_add(1, Ordering::AcqRel);
        let seq = self.log.lock().next_seq;
        self.tombs.lock().push((FLUSH_ALL, seq));
        self.index_bytes
            .store(self.index.memory_bytes(), Ordering::Relaxed);
    }

    /// The writer's part of a `flush_all`: every slab is free again.
    fn catch_up_with_clear(&self, w: &mut Writer) {
        let cleared = self.cleared.load(Ordering::Acquire);
        if w.cleared == cleared {
            return;
        }
        w.cleared = cleared;
        let mut dram = self.dram.lock();
        let Dram { open, spare, .. } = &mut *dram;
        for o in open.iter_mut() {
            if let Some(o) = o.take() {
                dram_spare(spare, o.buf);
            }
        }
        drop(dram);
        self.log.lock().clear();
    }

    pub fn stats(&self) -> FlashStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (staged, log) = {
            let stage = self.stage.lock();
            let log = self.log.lock();
            (
                stage.len() as u64,
                (
                    log.slabs.len() as u64,
                    log.free.len() as u64,
                    log.sealed(Area::Hot) as u64,
                    log.sealed(Area::Cold) as u64,
                ),
            )
        };
        let lat: Vec<u64> = c.latency.iter().map(get).collect();
        let pct = |p: f64| -> u64 {
            let total: u64 = lat.iter().sum();
            let want = (total as f64 * p).ceil() as u64;
            let mut seen = 0;
            for (i, n) in lat.iter().enumerate() {
                seen += n;
                if seen >= want && total > 0 {
                    return 1 << i;
                }
            }
            0
        };
        FlashStats {
            items: self.index.len() as u64,
            staged,
            slabs: log.0,
            free_slabs: log.1,
            hot_slabs: log.2,
            cold_slabs: log.3,
            memory_bytes: self.memory_bytes() as u64,
            index_bytes: self.index_bytes.load(Ordering::Relaxed) as u64,
            admitted: get(&c.admitted),
            admit_refused: get(&c.admit_refused),
            raw_bytes: get(&c.raw_bytes),
            stored_bytes: get(&c.stored_bytes),
            device_bytes: get(&c.device_bytes),
            moved_bytes: get(&c.moved_bytes),
            containers_raw: get(&c.containers_raw),
            containers_compressed: get(&c.containers_compressed),
            gc_recycled: get(&c.gc_recycled),
            gc_evicted: get(&c.gc_evicted),
            gc_promoted: get(&c.gc_promoted),
            gc_demoted: get(&c.gc_demoted),
            evictions: get(&c.evictions),
            lookups: get(&c.lookups),
            hits: get(&c.hits),
            stage_hits: get(&c.stage_hits),
            false_reads: get(&c.false_reads),
            reads: get(&c.reads),
            read_bytes: get(&c.read_bytes),
            read_errors: get(&c.read_errors),
            io_errors: get(&c.io_errors),
            write_errors: get(&c.write_errors),
            recovered_clean: self.recovery().clean,
            recovered_items: self.recovery().items,
            recovery_us: self.recovery().micros,
            read_p50_us: pct(0.5),
            read_p90_us: pct(0.9),
            read_p99_us: pct(0.99),
        }
    }

    #[cfg(any(test, feature = "testing"))]
    pub fn validate(&self) {
        let mut w = self.writer.lock();
        self.catch_up_with_clear(&mut w);
        self.stage.lock().validate();
        self.index.validate();
        let busy: Vec<u32> = self.dram.lock().slabs().collect();
        self.log.lock().validate(&busy);
        assert!(self.stage.lock().bytes() <= self.config.stage_bytes);
    }
}

/// Keep a spare slab buffer (one is enough: the next slab opened).
fn dram_spare(spare: &mut Vec<AlignedBuf>, buf: AlignedBuf) {
    if spare.is_empty() {
        spare.push(buf);
    }
}
