//! [`Flash`]: the tier's state, its DRAM budget, and what goes in and
//! out of it (admission from memory, removals, `flush_all`). Reads are in
//! `read`, the writer in `writer`, the collector in `gc`, restarts in
//! `recover`, the hot/cold split in `split`.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use parking_lot::Mutex;

use super::config::FlashConfig;
use super::container::{self, FLASH_PAGE};
use super::counters::{bump, Counters};
use super::device::{AlignedBuf, Device};
use super::dict;
use super::dram::{dram_spare, Dram, Writer};
use super::index::{self, FlashIndex, Loc};
use super::journal::{Journal, Recovery, FLUSH_ALL, RETIRED};
use super::log::{Log, SLAB, SLAB_HEADER};
use super::stage::{Area, Stage};
use crate::block;
use crate::clock::Clock;
use crate::codec::{Coder, Dictionary, Recognizer};
use crate::item;
use crate::pipe::Pipe;

/// Slots of the table of recent flash reads (8 bytes each, in `-m`).
pub(super) const RECENT_READS: usize = 1 << 16;

/// The flash tier (see the module's doc).
pub struct Flash {
    pub(super) config: FlashConfig,
    pub(super) device: Arc<dyn Device>,
    pub(super) index: FlashIndex,
    pub(super) stage: Mutex<Stage>,
    pub(super) log: Mutex<Log>,
    pub(super) dram: Mutex<Dram>,
    pub(super) writer: Mutex<Writer>,
    /// `flush_all`s so far: the writer drops its open slabs when it sees
    /// this change.
    pub(super) cleared: AtomicU64,
    /// The largest CAS unique admitted (see [`Flash::max_cas`]).
    pub(super) max_cas: AtomicU64,
    /// Tombstones not yet in the journal: (hash, sequence number).
    pub(super) tombs: Mutex<Vec<(u64, u64)>>,
    pub(super) journal: Mutex<Option<Journal>>,
    pub(super) recovery: Mutex<Recovery>,
    pub(super) counters: Counters,
    /// DRAM figures read without the locks (the engine's budget).
    pub(super) index_bytes: AtomicUsize,
    pub(super) log_bytes: AtomicUsize,
    /// The engine's clock; its start (the Unix time of relative time 0)
    /// is written in every slab header.
    pub(super) clock: Arc<Clock>,
    pub(super) w_start: usize,
    pub(super) w_high: usize,
    /// Slabs the hot area may hold (SlimCache §3.5; moved by `split`).
    pub(super) hot_target: AtomicUsize,
    /// Recent flash reads, by key hash (see [`Read`]).
    pub(super) recent: Box<[AtomicU64]>,
    /// The containers' zstd dictionary, once trained or recovered
    /// ([`dict`]).
    pub(super) dict: OnceLock<Dictionary>,
    /// A dictionary is being sampled for or trained (its DRAM is reserved;
    /// the writer feeds the trainer only meanwhile).
    pub(super) training: AtomicBool,
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
    pub(super) fn dictionary_bytes(&self) -> usize {
        match self.dict.get() {
            Some(d) => d.memory_bytes(),
            None if self.training.load(Ordering::Relaxed) => dict::TRAINING_BYTES,
            None => 0,
        }
    }

    /// The dictionary a container names, if it is this tier's.
    pub(super) fn dictionary(&self, id: u16) -> Option<&Dictionary> {
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

    /// Everything in `slab` goes (it is given up unread: space-based
    /// eviction, or a write that failed): its entries leave the index and
    /// count as evictions.
    pub(super) fn evict_slab(&self, slab: u32) {
        let n = self.index.remove_slab(slab);
        self.counters
            .evictions
            .fetch_add(n as u64, Ordering::Relaxed);
    }

    /// `slab` is free again; what it held on disk is shadowed for a crash
    /// scan until it is written again ([`RETIRED`]).
    pub(super) fn release_slab(&self, slab: u32) {
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
    pub(super) fn catch_up_with_clear(&self, w: &mut Writer) {
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
