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
//! - [`container`]: SlimCache §3.3's compression unit, a block
//!   ([`crate::block`], the Z-zone's format) under a CRC-32, about one
//!   flash page once compressed. Values that will not compress are
//!   recognised by their entropy and stored raw (§3.7,
//!   `codec::Recognizer`).
//! - [`log`]: the slabs and their DRAM table; `writer`: packing,
//!   appending, sealing; `gc`: the two-stage garbage collector;
//!   [`recover`]: restarts.
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
pub mod dict;
pub mod fetch;
mod gc;
pub mod index;
pub mod log;
pub mod recover;
pub mod split;
pub mod stage;
mod writer;

use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use parking_lot::Mutex;

use crate::block;
use crate::clock::Clock;
use crate::codec::{Codec, Coder, Dictionary, Recognizer};
use crate::item;
use crate::pipe::Pipe;
use device::{AlignedBuf, Device, ALIGN};
use index::{FlashIndex, Loc};
use log::{Log, SLAB, SLAB_HEADER};
use recover::Journal;
use stage::{Area, Stage};
use writer::{dram_spare, Dram, Writer};

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
    /// The same budget as drive writes per day (0: none), for SSDs rated
    /// in them; the lower of the two applies.
    pub write_dwpd: f64,
    /// The hot area's share of the slabs, percent (SlimCache starts at 5).
    pub hot_percent: u8,
    /// Smallest item image admitted (memcached's `ext_item_size`).
    pub item_min: usize,
    /// memcached's `ext_item_age`: items idle longer than this many
    /// seconds go to flash ahead of eviction (None: only on eviction, as
    /// memcached's default, which is unlimited).
    pub item_age: Option<u32>,
    /// Flash hits per recache at most (memcached's `ext_recache_rate`:
    /// `Flash::recache_allowed`).
    pub recache_rate: u64,
    /// The cost of a miss, microseconds, for items that carry none
    /// (`split`).
    pub miss_cost_us: u64,
    /// Bytes the stage may hold (0: 1/32 of `-m`, within 2 MB..64 MB: an
    /// N-zone page emptied at once, 1 MB, must fit).
    pub stage_bytes: usize,
    /// Most DRAM the tier may take (0: half of `-m`): past it, the index
    /// stops growing and new entries push old ones out.
    pub memory_cap: usize,
    pub codec: Codec,
    /// zstd's level for containers, compressed on the writer's thread (the
    /// Z-zone compresses on the request path, at 1). 3 stores the lab's
    /// tweets 11% smaller than 1 for 14% more CPU; 6, 4% smaller again,
    /// for three times the CPU (docs/benchmarks-history.md).
    pub zstd_level: i32,
}

impl FlashConfig {
    /// The stage's size: as given, else 1/32 of `-m` within 2..64 MB.
    pub fn stage_bytes_for(&self, memory_limit: usize) -> usize {
        match self.stage_bytes {
            0 => (memory_limit / 32).clamp(2 << 20, 64 << 20),
            n => n,
        }
    }

    /// The write budget in bytes a second (0: none).
    pub fn effective_write_rate(&self) -> u64 {
        let dwpd = (self.write_dwpd * self.size as f64 / 86_400.0) as u64;
        match (self.write_rate, dwpd) {
            (0, d) => d,
            (r, 0) => r,
            (r, d) => r.min(d),
        }
    }

    pub fn new(path: PathBuf, size: u64) -> FlashConfig {
        FlashConfig {
            path,
            size,
            write_rate: 0,
            write_dwpd: 0.0,
            hot_percent: 5,
            miss_cost_us: 1000,
            item_min: 0,
            item_age: None,
            recache_rate: RECACHE_EVERY,
            // 0: the engine sizes these from `-m`.
            stage_bytes: 0,
            memory_cap: 0,
            codec: Codec::Zstd,
            zstd_level: 3,
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
    /// Slabs the hot area may hold, and how often the split moved.
    pub hot_target: u64,
    pub split_moves: u64,
    /// Items read on flash a second time and put back in memory.
    pub recached: u64,
    /// DRAM the tier takes (index, stage, slab table, buffers).
    pub memory_bytes: u64,
    /// The containers' dictionary (or the samples it is trained on).
    pub dictionary_bytes: u64,
    pub index_bytes: u64,
    /// Item bytes admitted and written (their images), and what the
    /// containers holding them took.
    pub admitted: u64,
    /// Items taken into the stage (on their way to flash; only a GET finds
    /// them from then on), and items refused there.
    pub staged_total: u64,
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
    staged_total: AtomicU64,
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
    /// The split's window (`split`): lookups, hits and their time per
    /// area, and the miss costs items carried.
    win_lookups: AtomicU64,
    win_hot_hits: AtomicU64,
    win_cold_hits: AtomicU64,
    win_hot_us: AtomicU64,
    win_cold_us: AtomicU64,
    win_cost_us: AtomicU64,
    win_costs: AtomicU64,
    split_moves: AtomicU64,
    recached: AtomicU64,
    hits_since_recache: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// The journal's mark for `flush_all` (a hash no key is expected to have).
const FLUSH_ALL: u64 = u64::MAX;
/// The journal's marks for a slab given up (recycled, evicted, or a write
/// that failed), `RETIRED + slab`: its old contents stay on disk until it
/// is written again, and a crash scan must not bring back what they hold
/// (a key removed since would come back stale).
const RETIRED: u64 = FLUSH_ALL - (1 << index::SLAB_BITS) - 1;

/// The journal's mark for the keys of [`index::prefix_of`] `prefix`, whose
/// entry the index dropped (it was full): the key is not known, so every
/// key that shares the prefix is shadowed (one in 2^34: a miss, at worst).
fn dropped_mark(prefix: u64) -> u64 {
    prefix | 1
}

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

/// A read that found its key: where, and, if the item was read on flash
/// before and that read is remembered, how many items were admitted to
/// flash since (its reuse distance, in evictions from memory: compared
/// with memory's item count, it says whether the item would have stayed
/// in memory had it been there: `Engine::recache`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Read {
    pub loc: Loc,
    pub distance: Option<u64>,
}

/// Flash hits per recache at most by default (`Flash::recache_allowed`;
/// memcached's `ext_recache_rate` defaults to 2000, for a tier that keeps
/// every item's header in memory and recaches at no memory cost).
const RECACHE_EVERY: u64 = 8;

/// Slots of the table of recent flash reads (8 bytes each, in `-m`).
const RECENT_READS: usize = 1 << 16;

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

/// Where a read's container is (`Flash::locate`).
enum Located {
    /// In a slab still in DRAM, and decoded: the item was there.
    Dram(Area),
    /// On the device.
    Device(DeviceRead),
    /// Nowhere, or not the key's.
    Not,
}

/// A device read a flash read waits for: `len` bytes at `offset`, both
/// multiples of [`ALIGN`] (O_DIRECT), into an [`AlignedBuf`].
#[derive(Clone, Copy, Debug)]
pub struct DeviceRead {
    pub offset: u64,
    pub len: usize,
    loc: Loc,
    area: Area,
    epoch: i64,
    /// The container's bytes within the read.
    skip: usize,
    used: usize,
    issued: Instant,
}

/// How far a read has gone through its places (`Flash::advance`).
#[derive(Debug, Default)]
pub struct Cursor {
    next: usize,
    io: Option<DeviceRead>,
}

/// What a read needs next.
#[derive(Debug)]
pub enum Step {
    /// Finished: the item (in the image) and where it was, or None.
    Done(Option<Read>),
    /// This device read, then [`Flash::advance`] again with its bytes.
    Io(DeviceRead),
}

/// A decompression context and the decoded block.
#[derive(Default)]
struct Decoder {
    coder: Coder,
    raw: Vec<u8>,
}

thread_local! {
    static DECODER: RefCell<Decoder> = RefCell::new(Decoder::default());
    static READ_BUF: std::cell::Cell<Option<AlignedBuf>> = const { std::cell::Cell::new(None) };
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
    /// Slabs the hot area may hold (SlimCache §3.5; moved by `split`).
    hot_target: AtomicUsize,
    /// Recent flash reads, by key hash (see [`Read`]).
    recent: Box<[AtomicU64]>,
    /// The containers' zstd dictionary, once trained or recovered
    /// ([`dict`]).
    dict: OnceLock<Dictionary>,
    /// A dictionary is being sampled for or trained (its DRAM is reserved;
    /// the writer feeds the trainer only meanwhile).
    training: AtomicBool,
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
        let mut f = Flash {
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
                trainer: dict::Trainer::default(),
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
            hot_target: AtomicUsize::new((slabs * config.hot_percent as usize / 100).max(1)),
            recent: (0..RECENT_READS).map(|_| AtomicU64::new(0)).collect(),
            dict: OnceLock::new(),
            training: AtomicBool::new(dict::worth_training(&config)),
            config,
            device,
        };
        f.recover();
        if f.dict.get().is_some() {
            if f.index.is_empty() {
                // An empty tier trains a dictionary on what it will hold.
                f.dict = OnceLock::new();
                dict::remove(&f.config.path);
            } else {
                f.training.store(false, Ordering::Relaxed);
            }
        }
        f.index_bytes
            .store(f.index.memory_bytes(), Ordering::Relaxed);
        f.log_bytes
            .store(f.log.lock().memory_bytes(), Ordering::Relaxed);
        f
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
            + RECENT_READS * 8
            + self.dictionary_bytes()
    }

    /// DRAM of the dictionary, digested; until there is one, what its
    /// training takes (reserved whole, as the stage is).
    fn dictionary_bytes(&self) -> usize {
        match self.dict.get() {
            Some(d) => d.memory_bytes(),
            None if self.training.load(Ordering::Relaxed) => dict::TRAINING_BYTES,
            None => 0,
        }
    }

    /// The dictionary a container names, if it is this tier's.
    fn dictionary(&self, id: u16) -> Option<&Dictionary> {
        dict::named(self.dict.get(), id)
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
        if !stage.fits(image.len(), self.config.stage_bytes) {
            drop(stage);
            bump(&self.counters.admit_refused);
            return false;
        }
        stage.push(Area::Cold, h, Arc::from(image), None);
        bump(&self.counters.staged_total);
        self.max_cas
            .fetch_max(item::Header::read(image).cas, Ordering::Relaxed);
        true
    }

    /// The key of hash `h` was written to memory, deleted or flushed: no
    /// copy of it on flash may be served again. Takes out every index
    /// entry of its tag and its staged copy.
    pub fn forget(&self, h: u64) {
        let mut indexed = false;
        let staged = {
            let mut stage = self.stage.lock();
            let staged = stage.remove(h).is_some();
            // Under the stage's lock: a publish of this key's copy either
            // happened before (its entry is removed here) or finds it gone.
            self.index.remove(h, |_| indexed = true);
            staged
        };
        if staged || indexed {
            // A copy may be in a slab (written, or being written): after a
            // crash, the scan must not bring it back.
            let seq = self.log.lock().next_seq;
            self.tombs.lock().push((h, seq));
        }
    }

    /// Look `key` (hash `h`) up: the stage first (its image is copied into
    /// `image`), then the index.
    pub fn lookup(&self, h: u64, key: &[u8], image: &mut Vec<u8>) -> Probe {
        bump(&self.counters.lookups);
        bump(&self.counters.win_lookups);
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
    /// holds it, into `image`, with plain `pread`s: I/O, so call it holding
    /// no lock. None when none does (a tag shared with another key, a slab
    /// recycled since the lookup, or a fault: an I/O error or a container
    /// that fails its checks). [`Flash::advance`] is the same read for
    /// callers that do their own I/O.
    pub fn read(&self, h: u64, key: &[u8], locs: &[Loc], image: &mut Vec<u8>) -> Option<Read> {
        let mut buf = READ_BUF.take().unwrap_or_else(|| AlignedBuf::new(ALIGN));
        let mut cursor = Cursor::default();
        let mut done: Option<std::io::Result<usize>> = None;
        let read = loop {
            let io = done.take().map(|r| r.map(|n| &buf.as_ref()[..n]));
            match self.advance(h, key, locs, &mut cursor, io, image) {
                Step::Done(read) => break read,
                Step::Io(d) => {
                    if buf.len() < d.len {
                        buf = AlignedBuf::new(d.len);
                    }
                    let into = &mut buf.as_mut()[..d.len];
                    done = Some(self.device.read_at(into, d.offset).map(|()| d.len));
                }
            }
        };
        READ_BUF.set(Some(buf));
        read
    }

    /// One step of reading `key` from the first of `locs` that holds it:
    /// `io` is the outcome of the device read the previous step asked for
    /// (the bytes of [`DeviceRead::offset`]..+[`DeviceRead::len`]), None at
    /// the first step. A container still in DRAM is decoded at once; one
    /// on the device is asked for ([`Step::Io`]); the caller reads it its
    /// own way (a `pread`, an io_uring read) and calls again. Holds no lock
    /// across the caller's I/O.
    pub fn advance(
        &self,
        h: u64,
        key: &[u8],
        locs: &[Loc],
        cursor: &mut Cursor,
        io: Option<std::io::Result<&[u8]>>,
        image: &mut Vec<u8>,
    ) -> Step {
        DECODER.with_borrow_mut(|dec| {
            if let (Some(d), Some(io)) = (cursor.io.take(), io) {
                match io {
                    Ok(bytes) if bytes.len() >= d.skip + d.used => {
                        self.note_latency(d.issued);
                        self.counters
                            .read_bytes
                            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                        let bytes = &bytes[d.skip..d.skip + d.used];
                        if self.decode(dec, h, key, d.loc, bytes, d.epoch, image) {
                            return Step::Done(Some(self.hit(h, d.loc, d.area, d.issued, image)));
                        }
                    }
                    _ => bump(&self.counters.io_errors),
                }
            }
            while let Some(&loc) = locs.get(cursor.next) {
                cursor.next += 1;
                let t = Instant::now();
                match self.locate(dec, h, key, loc, image) {
                    Located::Dram(area) => {
                        return Step::Done(Some(self.hit(h, loc, area, t, image)));
                    }
                    Located::Device(d) => {
                        bump(&self.counters.reads);
                        cursor.io = Some(d);
                        return Step::Io(d);
                    }
                    Located::Not => {}
                }
            }
            Step::Done(None)
        })
    }

    /// A read found its item at `loc` (of `area`, since `t`): the counters,
    /// the access bit, and its reuse distance.
    fn hit(&self, h: u64, loc: Loc, area: Area, t: Instant, image: &[u8]) -> Read {
        bump(&self.counters.hits);
        bump(&self.counters.hits_since_recache);
        let again = self.index.mark_accessed(h, loc) == Some(true);
        self.note_hit(area, t, image);
        // The last read of each slot's key: high hash bits and the
        // admissions count then.
        let admitted = self.counters.admitted.load(Ordering::Relaxed);
        let slot = &self.recent[(h as usize) & (RECENT_READS - 1)];
        let mine = h & !0xffff_ffff;
        let prev = slot.swap(mine | (admitted & 0xffff_ffff), Ordering::Relaxed);
        let distance = (again && prev & !0xffff_ffff == mine)
            .then(|| (admitted as u32).wrapping_sub(prev as u32) as u64);
        Read { loc, distance }
    }

    /// Everything in `slab` goes (it is given up unread: space-based
    /// eviction, or a write that failed): its entries leave the index and
    /// count as evictions.
    fn evict_slab(&self, slab: u32) {
        let n = self.index.remove_slab(slab);
        self.counters
            .evictions
            .fetch_add(n as u64, Ordering::Relaxed);
    }

    /// `slab` is free again; what it held on disk is shadowed for a crash
    /// scan until it is written again ([`RETIRED`]).
    fn release_slab(&self, slab: u32) {
        let seq = {
            let mut log = self.log.lock();
            log.release(slab);
            log.next_seq
        };
        self.tombs.lock().push((RETIRED + u64::from(slab), seq));
    }

    /// The tier's file descriptor (`Cache::flash_fd`).
    pub fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        self.device.raw_fd()
    }

    /// Whether the entry of `h` at `loc` is still indexed (no SET, DELETE
    /// or recycling has removed it since it was read).
    pub fn holds(&self, h: u64, loc: Loc) -> bool {
        self.index.accessed(h, loc).is_some()
    }

    /// An item read from flash went back to memory.
    pub fn note_recached(&self) {
        bump(&self.counters.recached);
    }

    /// Whether a recache may happen now: at most one per `recache_rate`
    /// flash hits (memcached's `ext_recache_rate` is such a cap), so that
    /// however many keys qualify, memory is not churned by them.
    pub fn recache_allowed(&self) -> bool {
        let c = &self.counters.hits_since_recache;
        let every = self.config.recache_rate;
        if c.load(Ordering::Relaxed) < every {
            return false;
        }
        c.swap(0, Ordering::Relaxed) >= every
    }

    /// A hit from `area` that took since `t`: the split's measurements
    /// (`split`): its area, its cost, and the item's own miss cost.
    fn note_hit(&self, area: Area, t: Instant, image: &[u8]) {
        let c = &self.counters;
        let us = t.elapsed().as_micros() as u64;
        let (hits, time) = match area {
            Area::Hot => (&c.win_hot_hits, &c.win_hot_us),
            Area::Cold => (&c.win_cold_hits, &c.win_cold_us),
        };
        bump(hits);
        time.fetch_add(us, Ordering::Relaxed);
        let cost = item::dequantize_cost(item::Header::read(image).cost);
        if cost > 0 {
            c.win_cost_us.fetch_add(u64::from(cost), Ordering::Relaxed);
            bump(&c.win_costs);
        }
    }

    /// Read `key` from `loc`; the area it was found in.
    /// Where the container of `loc` is: in a slab still in DRAM (decoded
    /// here, found or not), on the device (the aligned read to do), or
    /// nowhere any more (its slab was recycled).
    fn locate(
        &self,
        dec: &mut Decoder,
        h: u64,
        key: &[u8],
        loc: Loc,
        image: &mut Vec<u8>,
    ) -> Located {
        // A slab still in DRAM: copy the container out, decode without
        // the lock.
        let in_dram = {
            let dram = self.dram.lock();
            dram.container(loc)
                .map(|(area, c)| (area, c.map(|b| b.to_vec())))
        };
        if let Some((area, bytes)) = in_dram {
            let now = self.clock.started_unix();
            return match bytes {
                Some(b) if self.decode(dec, h, key, loc, &b, now, image) => Located::Dram(area),
                _ => Located::Not,
            };
        }
        let (range, epoch, area) = {
            let mut log = self.log.lock();
            let m = &mut log.slabs[loc.slab as usize];
            m.reads = m.reads.saturating_add(1);
            (m.container(loc.container), m.epoch, m.area)
        };
        let (Some((start, end)), Some(area)) = (range, area) else {
            return Located::Not;
        };
        let from = start / ALIGN * ALIGN;
        Located::Device(DeviceRead {
            offset: loc.slab as u64 * SLAB as u64 + from as u64,
            len: (end - from).div_ceil(ALIGN) * ALIGN,
            loc,
            area,
            epoch,
            skip: start - from,
            used: end - start,
            issued: Instant::now(),
        })
    }

    /// Check and decode a container read from `loc` (written under
    /// `epoch`), and find the key.
    #[allow(clippy::too_many_arguments)]
    fn decode(
        &self,
        d: &mut Decoder,
        h: u64,
        key: &[u8],
        loc: Loc,
        bytes: &[u8],
        epoch: i64,
        image: &mut Vec<u8>,
    ) -> bool {
        if container::read(bytes, &mut d.coder, |id| self.dictionary(id), &mut d.raw).is_err() {
            // A container that fails its checks is garbage: its entry goes.
            bump(&self.counters.read_errors);
            self.index.remove_at(h, loc);
            return false;
        }
        match block::find(&d.raw, h, key) {
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
        let recovery = self.recovery();
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
            hot_target: self.hot_target.load(Ordering::Relaxed) as u64,
            split_moves: get(&c.split_moves),
            recached: get(&c.recached),
            memory_bytes: self.memory_bytes() as u64,
            dictionary_bytes: self.dictionary_bytes() as u64,
            index_bytes: self.index_bytes.load(Ordering::Relaxed) as u64,
            admitted: get(&c.admitted),
            staged_total: get(&c.staged_total),
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
            recovered_clean: recovery.clean,
            recovered_items: recovery.items,
            recovery_us: recovery.micros,
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

/// The Z-zone's sweep hands its evictions to flash through this
/// (the engine connects them: the Z-zone's `Zone::spill_to`).
impl Pipe for Flash {
    fn send(&self, h: u64, image: &[u8]) -> bool {
        self.admit(h, image)
    }
}
