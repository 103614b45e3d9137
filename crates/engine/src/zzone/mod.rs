//! The Z-zone: items evicted from the N-zone (the slab engine), packed by
//! key hash into blocks and compressed as a whole (zExpander,
//! `../shared/seeds/000_*`; issue 11).
//!
//! - [`block`]: a block's uncompressed form: items sorted by key hash,
//!   with an offset index (§3.2).
//! - [`filter`]: the 16-byte content and access Bloom filters (§3.2).
//! - [`trie`]: the hashed binary trie of blocks, reached through two-level
//!   pointer segments (§3.1).
//! - [`log`]: the 1 MB pages the compressed blocks are appended to.
//!
//! [`Zone`] puts them together: a lookup goes from the key hash to its
//! leaf, answers from the content filter when it can, else decompresses
//! the block; a demotion rewrites the key's block with the item added
//! (splitting it when it outgrows its capacity); a removal is deferred
//! (§3.3.2): it is noted by key hash and done when the block is next
//! rewritten, by a demotion or by the replacement sweep (§3.2), which
//! evicts the cheaper half of each block's items that were not read since
//! it last passed.
//!
//! Items keep their N-zone form (header, flags, key, value), so they move
//! between the zones with their CAS, expiry, flags and cost unchanged.
//! Codecs and the compressibility test are in [`crate::codec`].

pub mod block;
mod cell;
pub mod filter;
pub mod flush;
pub mod log;
pub mod split;
pub mod stage;
pub mod trie;

pub use cell::{ZoneCell, ZoneGuard};

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::codec::{Codec, Coder, Dictionary, Recognizer};
#[cfg(any(test, feature = "testing"))]
use crate::hash::hash;
use crate::item;
use filter::Filter;
use log::{Log, NOWHERE};
use stage::Stage;
use trie::{Node, Trie};

/// Share of the zone's pages that live blocks may fill before the sweep
/// evicts: the rest is garbage for compaction to reclaim, so compacting a
/// page always gains at least a twentieth of it. (0.9 kept 5% fewer items
/// for the same CPU: docs/benchmarks-history.md.)
const FILL: f64 = 0.95;
/// Blocks compressed less than this hold no more items than the N-zone
/// would in the same pages: the zone keeps a twentieth of its pages free for
/// compaction, and its stage and metadata count in `-m` too.
pub const WORTH_RATIO: f64 = 1.25;
/// Pages a zone whose blocks do not compress keeps: enough to go on
/// measuring their ratio.
pub const PROBE_PAGES: usize = 2;
/// Such a zone takes one demotion in [`PROBE_EVERY`] (the rest are evicted
/// as without a zone: a block rewrite each would buy nothing) and stages
/// at most [`PROBE_STAGE`] bytes, so that its fixed cost in `-m` is about
/// its probe pages.
const PROBE_EVERY: u64 = 16;
pub(crate) const PROBE_STAGE: usize = 8 << 10;
/// Once below [`WORTH_RATIO`], the running ratio must climb back to this
/// before the zone grows again, so that values compressing about 1.25 ×
/// do not move the zone's share of `-m` back and forth.
const WORTH_AGAIN: f64 = 1.3;

/// Unforced sweeps a demotion may run to make room before it evicts
/// regardless of the access filters, and the bound on both together.
const GENTLE_SWEEPS: usize = 64;
/// Blocks a shrinking step moves off the page it empties.
const EVACUATE_BLOCKS: usize = 32;
/// Blocks' worth of room the writer keeps ahead of its flushes.
const ROOM_BLOCKS: usize = 4;
const MAX_SWEEPS: usize = 512;

/// Dictionaries (zstd): one demoted item in [`SAMPLE_EVERY`] is kept as a
/// training sample, up to [`SAMPLES`] of them; a dictionary of
/// [`DICT_BYTES`] is trained once they are in, and again after every
/// [`RETRAIN_DEMOTIONS`] demotions, so that it follows the data.
pub const SAMPLE_EVERY: u64 = 8;
pub const SAMPLES: usize = 2048;
pub const DICT_BYTES: usize = 16 << 10;
pub const RETRAIN_DEMOTIONS: u64 = 4 << 20;
/// Dictionaries alive at once (blocks name theirs in a byte; 0 is none).
const DICT_SLOTS: usize = 255;

/// The Z-zone's settings.
#[derive(Clone, Copy, Debug)]
pub struct ZoneConfig {
    /// Bytes a block holds once compressed (zExpander: 2 KB). A block's
    /// raw capacity is this times the running compression ratio.
    pub block_bytes: usize,
    pub codec: Codec,
    pub page_size: usize,
    /// Samples a dictionary is trained on ([`SAMPLES`]).
    pub dict_samples: usize,
    /// Bytes demoted items may fill waiting for their blocks' rewrite
    /// ([`stage`]) before the demoting thread rewrites them itself.
    pub stage_bytes: usize,
}

/// A block: where its bytes are, how to decode them, its filters and its
/// most recent read (§3.3.2).
#[derive(Clone, Copy, Debug, Default)]
struct Desc {
    /// Log location ([`NOWHERE`] for an empty block).
    loc: u32,
    /// Stored and decoded lengths (a block decodes to at most
    /// [`MAX_RAW`] bytes).
    stored: u16,
    raw: u16,
    count: u16,
    codec: u8,
    /// The dictionary it was compressed with (0: none).
    dict: u8,
    /// The last read of an item in the block: 16 bits of the key's hash,
    /// and the time in [`REUSE_TICK`]s of demotions (wrapping; 0 marks no
    /// read). One record keeps the descriptor at 48 bytes, its filters 32
    /// of them; with two, YCSB-B promoted 1.7 times as many items for the
    /// same hit ratio (docs/benchmarks-history.md).
    reuse: (u16, u16),
    content: Filter,
    access: Filter,
}

/// Demotions per tick of a reuse record's clock: it wraps after 2^22
/// demotions, past any N-zone's item count (the benchmark reuse times
/// are compared with) that fits in `-m`.
const REUSE_TICK: u32 = 64;
const _: () = assert!(std::mem::size_of::<Desc>() == 48);

/// The most a block decodes to (its length is 16 bits in the descriptor);
/// blocks split before they grow past it, and items over half of it are
/// not demoted.
const MAX_RAW: usize = u16::MAX as usize;

/// The codec a descriptor names (the zone writes only valid codes).
fn codec_of(c: u8) -> Codec {
    Codec::from_code(c).unwrap_or(Codec::Raw)
}

/// The zone's counters (`stats zzone`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZoneStats {
    /// Items in blocks, less those removed but not yet dropped.
    pub items: u64,
    /// Leaf blocks.
    pub blocks: u64,
    /// Bytes of items in blocks, decoded and stored.
    pub raw_bytes: u64,
    pub stored_bytes: u64,
    pub pages: u64,
    /// Memory held: pages and metadata.
    pub memory_bytes: u64,
    /// Metadata: trie, descriptors, pending removals.
    pub metadata_bytes: u64,
    pub hits: u64,
    /// Client reads answered without decompressing (filter or pending
    /// removal): misses served at the N-zone's speed.
    pub filtered: u64,
    /// Lookups that decompressed a block and found nothing.
    pub false_positives: u64,
    pub promotions: u64,
    pub demotions: u64,
    /// Demotions the zone had no room for, or items too large for a block
    /// ([`Zone::admits`]): evicted.
    pub refused: u64,
    /// Items the sweep sent on to flash.
    pub spilled: u64,
    /// Demotions a zone that does not compress let go unsampled (it takes
    /// one in [`PROBE_EVERY`]): evicted.
    pub skipped: u64,
    /// Items the replacement sweep evicted.
    pub evictions: u64,
    pub expired: u64,
    pub splits: u64,
    /// Pairs of sibling leaves joined into one block.
    pub merges: u64,
    /// Removals waiting for their block's next rewrite.
    pub pending: u64,
    /// Demoted items waiting for theirs, and their memory.
    pub staged: u64,
    pub stage_bytes: u64,
    /// Block rewrites that packed staged items, and the items they packed.
    pub flushes: u64,
    pub flushed: u64,
    /// Of the flushes, those a demotion did itself, on a request's path,
    /// because the stage was full (the writer behind).
    pub sync_flushes: u64,
    /// Flushes dropped because their block or items changed while they
    /// compressed without the lock (redone later).
    pub flush_conflicts: u64,
    /// Bytes of the trie's pointer arrays and of the block descriptors.
    pub trie_bytes: u64,
    pub descriptor_bytes: u64,
    pub compactions: u64,
    pub sweeps: u64,
    /// Block writes by codec: (count, decoded bytes, stored bytes).
    pub written: [(u64, u64, u64); 3],
    pub decompressions: u64,
    /// Blocks that failed to decode (their items are lost, never misread).
    pub corrupt: u64,
    /// Dictionaries trained, alive now, and their memory.
    pub dictionaries_trained: u64,
    pub dictionaries: u64,
    pub dictionary_bytes: u64,
}

/// A block copied out of the zone to be decoded without its lock
/// ([`Zone::copy_block`]).
#[derive(Default)]
pub struct Copied {
    /// The block's stored bytes, or a staged item's image (`staged`).
    bytes: Vec<u8>,
    staged: bool,
    codec: Codec,
    dict: Option<Arc<Dictionary>>,
    raw_len: usize,
}

impl Copied {
    /// Decode the block into `raw` with `coder`, and find `key` (hash `h`)
    /// in it. None if it is not there, or the bytes do not decode.
    pub fn find<'a>(
        &self,
        coder: &mut Coder,
        raw: &'a mut Vec<u8>,
        h: u64,
        key: &[u8],
    ) -> Option<&'a [u8]> {
        if self.staged {
            if item::key(&self.bytes) != key {
                return None;
            }
            raw.clear();
            raw.extend_from_slice(&self.bytes);
            return Some(raw);
        }
        coder
            .decompress(
                self.codec,
                self.dict.as_deref(),
                &self.bytes,
                self.raw_len,
                raw,
            )
            .ok()?;
        block::find(raw, h, key).ok().flatten()
    }
}

/// An entry being rebuilt: key hash and its place in `Zone::work`.
#[derive(Clone, Copy)]
struct Entry {
    h: u64,
    at: u32,
    len: u32,
}

pub struct Zone {
    cfg: ZoneConfig,
    trie: Trie,
    descs: Vec<Desc>,
    free_descs: Vec<u32>,
    log: Log,
    /// Removals not yet done, by key hash: whether the item was seen
    /// there (then already subtracted from `stats.items`).
    pending: BTreeMap<u64, bool>,
    /// Pages the zone may hold (the adaptive split sets it).
    target_pages: usize,
    /// Demoted items not yet in their blocks, and where the writer takes
    /// the next ones.
    stage: Stage,
    flush_hand: u64,
    /// Flush jobs begun and not finished: (ticket, the blocks they copied,
    /// whether one of those was rewritten since), and the last ticket.
    tickets: Vec<(u64, [u32; 2], bool)>,
    tickets_issued: u64,
    /// The N-zone's locality benchmark for reads that decode outside the
    /// lock (the engine keeps it current).
    pub bench: u32,
    /// The replacement sweep's position in hash order.
    hand: u64,
    /// Running compression ratio (decoded / stored), and whether it says
    /// the zone is worth growing (with hysteresis: [`WORTH_AGAIN`]).
    ratio: f64,
    worth: bool,
    /// Demotions offered while the zone is not worth growing.
    offered: u64,
    coder: Coder,
    recognizer: Recognizer,
    /// Scratch: a decoded block, a block being built, the entries being
    /// rebuilt, and the item a lookup found.
    raw: Vec<u8>,
    packed: Vec<u8>,
    work: Vec<u8>,
    entries: Vec<Entry>,
    found: Vec<u8>,
    stats: ZoneStats,
    /// Dictionaries by the byte blocks name them with, and how many blocks
    /// use each; `dict` is the one new blocks use (0: none yet).
    dicts: Vec<Option<(Arc<Dictionary>, u64)>>,
    dict: u8,
    /// Training samples (item images), and the demotions at the last
    /// training.
    samples: Vec<Vec<u8>>,
    /// Their bytes (kept, not summed: `-m` is checked on every store).
    sample_bytes: usize,
    trained_at: u64,
    /// The flash tier, where the items the sweep evicts go next (issue 12:
    /// items leaving memory, the Z-zone included, are admitted to flash).
    spill: Option<Arc<crate::flash::Flash>>,
}

/// The last hash of leaf `n`'s range.
fn range_end(n: Node) -> u64 {
    if n.depth == 0 {
        u64::MAX
    } else {
        (n.prefix << (64 - n.depth)) | (u64::MAX >> n.depth)
    }
}

fn range_start(n: Node) -> u64 {
    if n.depth == 0 {
        0
    } else {
        n.prefix << (64 - n.depth)
    }
}

impl Zone {
    pub fn new(cfg: ZoneConfig) -> Zone {
        Zone {
            trie: Trie::new(0),
            descs: vec![Desc {
                loc: NOWHERE,
                ..Desc::default()
            }],
            free_descs: Vec::new(),
            log: Log::new(cfg.page_size),
            pending: BTreeMap::new(),
            target_pages: 0,
            stage: Stage::default(),
            flush_hand: 0,
            tickets: Vec::new(),
            tickets_issued: 0,
            bench: 0,
            hand: 0,
            ratio: 2.0,
            worth: true,
            offered: 0,
            coder: Coder::default(),
            recognizer: Recognizer::new(cfg.block_bytes * 2, 1.1, 1024),
            raw: Vec::new(),
            packed: Vec::new(),
            work: Vec::new(),
            entries: Vec::new(),
            found: Vec::new(),
            stats: ZoneStats::default(),
            dicts: vec![None],
            dict: 0,
            samples: Vec::new(),
            sample_bytes: 0,
            trained_at: 0,
            spill: None,
            cfg,
        }
    }

    /// Send the items the sweep evicts to `flash`.
    pub fn spill_to(&mut self, flash: Arc<crate::flash::Flash>) {
        self.spill = Some(flash);
    }

    /// Whether demotions are being sampled: until the first dictionary,
    /// then only over the last demotions before a retraining is due, so
    /// that samples (counted in `-m`) are not held in between.
    fn sampling(&self) -> bool {
        let window = SAMPLE_EVERY * self.cfg.dict_samples as u64;
        // Values that do not compress would only be held for a training
        // that finds nothing in common, again and again. (The ratio, not
        // `worth`: a dictionary may be what lifts it to WORTH_AGAIN.)
        self.ratio >= WORTH_RATIO
            && (self.dict == 0
                || self.stats.demotions + window >= self.trained_at + RETRAIN_DEMOTIONS)
    }

    /// Whether the zone is worth more pages than [`PROBE_PAGES`]: its
    /// blocks lately compressed at least [`WORTH_RATIO`], or they are not
    /// meant to compress (`zzone_codec=none`).
    pub fn worth_growing(&self) -> bool {
        self.cfg.codec == Codec::Raw || self.worth
    }

    /// The stage's bound: a zone that does not compress holds few items,
    /// and needs no more than a few blocks' worth waiting.
    fn stage_limit(&self) -> usize {
        if self.worth_growing() {
            self.cfg.stage_bytes
        } else {
            self.cfg.stage_bytes.min(PROBE_STAGE)
        }
    }

    /// Samples to train a dictionary on, when one is due (taken: train
    /// outside any lock with [`crate::codec::train_dictionary`], then
    /// [`Zone::install_dictionary`]).
    pub fn take_samples(&mut self) -> Option<Vec<Vec<u8>>> {
        let due = self.dict == 0 || self.stats.demotions >= self.trained_at + RETRAIN_DEMOTIONS;
        if self.cfg.codec != Codec::Zstd || self.samples.len() < self.cfg.dict_samples || !due {
            return None;
        }
        self.trained_at = self.stats.demotions;
        self.sample_bytes = 0;
        Some(std::mem::take(&mut self.samples))
    }

    /// New blocks use this dictionary from now on; old ones keep theirs
    /// until rewritten. False if all slots are taken by dictionaries old
    /// blocks still use.
    pub fn install_dictionary(&mut self, bytes: Vec<u8>) -> bool {
        let free = (1..=DICT_SLOTS).find(|&i| self.dicts.get(i).is_none_or(|d| d.is_none()));
        let Some(slot) = free else {
            return false;
        };
        if slot >= self.dicts.len() {
            self.dicts.resize_with(slot + 1, || None);
        }
        let old = self.dict as usize;
        self.dicts[slot] = Some((Arc::new(Dictionary::new(slot as u32, bytes)), 0));
        self.dict = slot as u8;
        self.stats.dictionaries_trained += 1;
        self.release_dict(old);
        true
    }

    /// Drop dictionary `i` if it is not the current one and no block uses it.
    fn release_dict(&mut self, i: usize) {
        if i != 0 && i != self.dict as usize {
            if let Some(Some((_, 0))) = self.dicts.get(i) {
                self.dicts[i] = None;
            }
        }
    }

    pub fn config(&self) -> &ZoneConfig {
        &self.cfg
    }

    /// Everything the zone holds in memory (counted in `-m`).
    /// The stage counts at its full size once the zone is in use, so that
    /// its filling and emptying never move the engine's budget.
    pub fn memory_bytes(&self) -> usize {
        let active = self.log.pages() > 0 || !self.stage.is_empty();
        self.log.memory_bytes()
            + if active {
                self.stage.bytes().max(self.stage_limit())
            } else {
                0
            }
            + self.metadata_bytes()
    }

    /// The engine has counted one more page for the zone (it is below its
    /// target; the page came from the N-zone or from free memory): the
    /// zone adds it at once, so it grows only into memory the engine has
    /// made room for, and a writer without the engine's lock keeps within
    /// `-m`. Added now rather than when a flush needs room, so that the
    /// zone keeps asking for pages (and the N-zone keeps draining its
    /// items into the zone) while nothing is being demoted.
    pub fn grant_page(&mut self) {
        if self.log.pages() < self.target_pages {
            self.log.add_page();
        }
    }

    /// Whether the zone is below its target.
    /// (Pages come to it one at a time, as the N-zone gives them up, so
    /// that the N-zone's items leave it a few at a time, demoted.)
    pub fn wants_page(&self) -> bool {
        self.log.pages() < self.target_pages
    }

    /// Pages the zone is below its target by.
    pub fn wanted_pages(&self) -> usize {
        self.target_pages.saturating_sub(self.log.pages())
    }

    pub fn target_pages(&self) -> usize {
        self.target_pages
    }

    /// Pages the zone may hold (the adaptive split's decision).
    pub fn set_target_pages(&mut self, pages: usize) {
        self.target_pages = pages;
    }

    /// Items in blocks (the rest are staged).
    fn block_items(&self) -> u64 {
        self.stats.items - self.stage.len() as u64
    }

    /// The zone's metadata: trie, block descriptors, pending removals,
    /// dictionaries and training samples. An empty zone (no pages: new or
    /// cleared) holds only its fixed root segment and first descriptor,
    /// counted as fixed overhead like the engine's own structure, so that
    /// `-o zzone=1` with nothing demoted takes nothing from the N-zone.
    pub fn metadata_bytes(&self) -> usize {
        if self.log.pages() == 0
            && self.pending.is_empty()
            && self.samples.is_empty()
            && self.stage.is_empty()
        {
            return 0;
        }
        self.trie.memory_bytes()
            + self.descs.capacity() * std::mem::size_of::<Desc>()
            + self.free_descs.capacity() * 4
            // A BTreeMap entry: key, value and about a third of a node's
            // overhead.
            + self.pending.len() * 24
            + self.dicts.iter().flatten().map(|d| d.0.memory_bytes()).sum::<usize>()
            + self.sample_bytes
        // The scratch buffers (a block or two) are a fixed overhead, as
        // the engine's own scratch and the connections' buffers are.
    }

    pub fn pages(&self) -> usize {
        self.log.pages()
    }

    pub fn items(&self) -> u64 {
        self.stats.items
    }

    pub fn stats(&self) -> ZoneStats {
        let mut s = self.stats;
        s.blocks = self.trie.leaves() as u64;
        s.pages = self.log.pages() as u64;
        s.memory_bytes = self.memory_bytes() as u64;
        s.metadata_bytes = self.metadata_bytes() as u64;
        s.pending = self.pending.len() as u64;
        s.staged = self.stage.len() as u64;
        s.stage_bytes = self.stage.bytes() as u64;
        s.trie_bytes = self.trie.memory_bytes() as u64;
        s.descriptor_bytes = (self.descs.capacity() * std::mem::size_of::<Desc>()) as u64;
        s.dictionaries = self.dicts.iter().flatten().count() as u64;
        s.dictionary_bytes = self
            .dicts
            .iter()
            .flatten()
            .map(|d| d.0.memory_bytes() as u64)
            .sum();
        s
    }

    pub fn reset_stats(&mut self) {
        let keep = ZoneStats {
            items: self.stats.items,
            raw_bytes: self.stats.raw_bytes,
            stored_bytes: self.stats.stored_bytes,
            ..ZoneStats::default()
        };
        self.stats = keep;
    }

    /// The item [`Zone::get`] found was moved to the N-zone.
    pub fn note_promotion(&mut self) {
        self.stats.promotions += 1;
    }

    /// The item a successful [`Zone::get`] found (its N-zone image).
    pub fn found(&self) -> &[u8] {
        &self.found
    }

    /// A block's decoded capacity: the stored size times the running ratio.
    fn raw_capacity(&self) -> usize {
        ((self.cfg.block_bytes as f64 * self.ratio) as usize).min(MAX_RAW)
    }

    /// Decode block `id` into `raw`. False (and the block emptied, its
    /// items counted lost) if it does not decode.
    fn load(&mut self, id: u32) -> bool {
        let d = self.descs[id as usize];
        self.raw.clear();
        if d.count == 0 {
            return true;
        }
        self.stats.decompressions += 1;
        let src = self.log.read(d.loc, d.stored as usize);
        let dict = self
            .dicts
            .get(d.dict as usize)
            .and_then(|x| x.as_ref())
            .map(|x| &*x.0);
        let ok = (d.dict == 0 || dict.is_some())
            && self
                .coder
                .decompress(codec_of(d.codec), dict, src, d.raw as usize, &mut self.raw)
                .is_ok()
            && block::entries(&self.raw).is_ok_and(|mut e| e.all(|x| x.is_ok()));
        if !ok {
            debug_assert!(false, "Z-zone block {id} does not decode");
            self.stats.corrupt += 1;
            self.raw.clear();
        }
        ok
    }

    /// Look `key` up. On a hit the item's image is in [`Zone::found`] and
    /// the answer says whether to promote it: its reuse time (since the
    /// last read of its key in this block) is below `bench`, the N-zone's
    /// locality benchmark (§3.3.2). Time here is counted in demotions: an
    /// item read again within fewer demotions than the N-zone holds items
    /// would still be there had it been promoted (that is what zExpander's
    /// marker items measure, in seconds; counting evictions needs no
    /// markers and has no clock granularity). `read`: a client read
    /// (recorded in the access filter and reuse record), else a peek.
    pub fn get(&mut self, h: u64, key: &[u8], now: u32, bench: u32, read: bool) -> Option<bool> {
        let (_, id) = self.trie.leaf_of(h);
        self.found.clear();
        // A staged copy is the newest.
        if let Some(image) = self.stage.get(h, key) {
            self.found.extend_from_slice(image);
        } else {
            let d = &self.descs[id as usize];
            if !d.content.may_contain(h) || self.pending.contains_key(&h) {
                self.stats.filtered += u64::from(read);
                return None;
            }
            if !self.load(id) {
                return None;
            }
            match block::find(&self.raw, h, key) {
                Ok(Some(image)) => self.found.extend_from_slice(image),
                _ => {
                    self.stats.false_positives += 1;
                    return None;
                }
            }
        }
        // Expired: a miss. The item goes when its block is next rewritten
        // (a read never grows the zone's memory).
        let exp = item::exptime(&self.found);
        if exp != 0 && exp <= now {
            return None;
        }
        if !read {
            return Some(false);
        }
        self.stats.hits += 1;
        Some(self.record_read(id, h, bench))
    }

    /// A client read of `h` in block `id`: the access filter, and the
    /// reuse record, which says whether to promote (see [`Zone::get`]).
    fn record_read(&mut self, id: u32, h: u64, bench: u32) -> bool {
        // Ticks of demotions so far (wrapping; 0 marks an empty record).
        let now = ((self.stats.demotions / u64::from(REUSE_TICK)) as u16).max(1);
        let d = &mut self.descs[id as usize];
        d.access.insert(h);
        // The hash's low bits: its high ones are the trie's path, shared
        // by every item of the block.
        let sh = h as u16;
        let (last, at) = d.reuse;
        d.reuse = (sh, now);
        at != 0 && last == sh && bench > u32::from(now.wrapping_sub(at)) * REUSE_TICK
    }

    /// The first half of a read that decodes outside the zone's lock
    /// (`crate::Cache::get`): if `h`'s block may hold it, copy the block's
    /// bytes and how to decode them to `out`, note a client read (`read`)
    /// as [`Zone::get`] does, and say whether to promote the item if it is
    /// there (against [`Zone::bench`]). Then [`Copied::find`] without the
    /// lock, and [`Zone::note_read`].
    pub fn copy_block(&mut self, h: u64, read: bool, out: &mut Copied) -> Option<bool> {
        let (_, id) = self.trie.leaf_of(h);
        out.bytes.clear();
        if let Some(image) = self.stage.get_hash(h) {
            out.bytes.extend_from_slice(image);
            out.staged = true;
            return Some(read && self.record_read(id, h, self.bench));
        }
        out.staged = false;
        let d = self.descs[id as usize];
        if !d.content.may_contain(h) || self.pending.contains_key(&h) {
            self.stats.filtered += u64::from(read);
            return None;
        }
        self.stats.decompressions += 1;
        out.bytes
            .extend_from_slice(self.log.read(d.loc, d.stored as usize));
        out.codec = codec_of(d.codec);
        out.raw_len = d.raw as usize;
        out.dict = match d.dict {
            0 => None,
            i => Some(self.dicts.get(i as usize)?.as_ref()?.0.clone()),
        };
        Some(read && self.record_read(id, h, self.bench))
    }

    /// The end of a read that decoded outside the lock: whether it found
    /// the item.
    pub fn note_read(&mut self, found: bool) {
        match found {
            true => self.stats.hits += 1,
            false => self.stats.false_positives += 1,
        }
    }

    /// Note that the zone's copy of `h` (if any) is gone: it moved to the
    /// N-zone (`known`: it was found there, so it is subtracted from the
    /// count now) or was replaced or deleted there. Done when the block is
    /// next rewritten (§3.3.2).
    pub fn remove(&mut self, h: u64, mut known: bool) {
        if self.stage.remove(h).is_some() {
            // That was the copy found (the newest); an older one in the
            // block, if any, was not counted as found.
            self.stats.items -= 1;
            known = false;
        }
        let (_, id) = self.trie.leaf_of(h);
        if !self.descs[id as usize].content.may_contain(h) {
            return;
        }
        let seen = self.pending.entry(h).or_insert(false);
        if known && !*seen {
            *seen = true;
            self.stats.items -= 1;
        }
    }

    /// Whether an item of `len` bytes may be demoted: at most half a
    /// block's decoded capacity. zExpander stores larger items apart,
    /// compressed alone and referenced from their block (§3.1, footnote
    /// 3); until the zone does, they are evicted, since in a block they
    /// split leaves down to the trie's deepest levels, and the complete
    /// tree's pointer arrays grow with the deepest leaf.
    ///
    /// A zone that does not compress takes one demotion in
    /// [`PROBE_EVERY`], enough to go on measuring the ratio.
    pub fn admits(&mut self, len: usize) -> bool {
        let ok = len <= self.raw_capacity() / 2;
        self.stats.refused += u64::from(!ok);
        if ok && !self.worth_growing() {
            self.offered += 1;
            if !self.offered.is_multiple_of(PROBE_EVERY) {
                self.stats.skipped += 1;
                return false;
            }
        }
        ok
    }

    /// Demote `image` (key hash `h`) from the N-zone: it is staged, and
    /// packed into its block later ([`Zone::flush_some`]), or now, with
    /// other staged items, if the stage is full. A demotion the zone has
    /// no room for then evicts the items (counted in `evictions` and
    /// `refused`).
    pub fn push(&mut self, h: u64, image: &[u8], now: u32) {
        debug_assert!(item::is_whole(image));
        if let Some(old) = self.stage.push(h, image) {
            // The key's older staged copy, or another key of the same hash.
            self.stats.items -= 1;
            if item::key(&old) != item::key(image) {
                self.stats.evictions += 1;
            }
        }
        self.stats.items += 1;
        self.stats.demotions += 1;
        if self.cfg.codec == Codec::Zstd
            && self.samples.len() < self.cfg.dict_samples
            && self.stats.demotions.is_multiple_of(SAMPLE_EVERY)
            && self.sampling()
        {
            self.samples.push(image.to_vec());
            self.sample_bytes += image.len();
        }
        while self.stage.bytes() > self.stage_limit() {
            self.stats.sync_flushes += 1;
            self.flush_some(now, 1);
        }
    }

    /// Demotions waiting in the stage.
    pub fn staged(&self) -> usize {
        self.stage.len()
    }

    /// Whether the stage is more than half full.
    pub fn stage_busy(&self) -> bool {
        self.stage.bytes() * 2 > self.stage_limit()
    }

    /// The writer's step towards the zone's target: one page step if it
    /// is above it. False if it is not.
    pub fn shrink_step(&mut self, now: u32) -> bool {
        self.log.pages() > self.target_pages && self.shrink(now, 1) > 0
    }

    /// The writer's step ahead of its flushes: keep room for a few blocks
    /// at the log's head, under the fill limit, so that a flush swapping
    /// its blocks in rarely sweeps or compacts while it holds the lock.
    /// One sweep, one compaction or one page per call; false if there was
    /// nothing to do.
    pub fn room_step(&mut self, now: u32) -> bool {
        let reserve = log::round(ROOM_BLOCKS * self.cfg.block_bytes);
        let page = self.log.page_size();
        if self.log.pages() == 0 || reserve + log::ALIGN > page {
            return false;
        }
        let allowed = (FILL * (self.log.pages() * page) as f64) as usize;
        let under = self.log.live_bytes() + reserve <= allowed;
        if self.log.head_room() >= reserve && under {
            return false;
        }
        if under {
            if let Some((p, live)) = self.log.emptiest() {
                if page - live >= reserve {
                    self.compact(p);
                    return true;
                }
            }
        }
        if self.block_items() == 0 {
            return false;
        }
        self.sweep_one(now, false);
        true
    }

    /// Add block `id`'s surviving entries to `entries` (the sweep's; a
    /// flush gathers in [`flush::Job`]), copying them into `work`: pending
    /// removals in its range are done, expired items dropped. The block's
    /// bytes are freed.
    fn gather(&mut self, node: Node, id: u32, now: u32, entries: &mut Vec<Entry>) {
        if self.load(id) {
            let raw = std::mem::take(&mut self.raw);
            // `load` checked every entry.
            for (h, image) in block::entries(&raw).into_iter().flatten().flatten() {
                if let Some(known) = self.pending.remove(&h) {
                    if !known {
                        self.stats.items -= 1;
                    }
                    continue;
                }
                let exp = item::exptime(image);
                if exp != 0 && exp <= now {
                    self.stats.items -= 1;
                    self.stats.expired += 1;
                    continue;
                }
                entries.push(Entry {
                    h,
                    at: self.work.len() as u32,
                    len: image.len() as u32,
                });
                self.work.extend_from_slice(image);
            }
            self.raw = raw;
        } else {
            let d = self.descs[id as usize];
            self.stats.items -= d.count as u64;
        }
        // Removals of keys the block did not hold (filter false positives).
        let range = range_start(node)..=range_end(node);
        let stale: Vec<u64> = self.pending.range(range).map(|(&h, _)| h).collect();
        for h in stale {
            self.pending.remove(&h);
        }
        self.free_block(id);
    }

    fn entry(&self, e: Entry) -> &[u8] {
        flush::entry(&self.work, e)
    }

    /// Forget block `id`'s bytes (its descriptor stays, empty).
    fn free_block(&mut self, id: u32) {
        for t in self.tickets.iter_mut().filter(|t| t.1.contains(&id)) {
            t.2 = true;
        }
        let d = self.descs[id as usize];
        if d.loc != NOWHERE {
            self.log.kill(d.loc, d.stored as usize);
            self.stats.raw_bytes -= d.raw as u64;
            self.stats.stored_bytes -= d.stored as u64;
            if let Some(Some(x)) = self.dicts.get_mut(d.dict as usize) {
                x.1 -= 1;
            }
            self.release_dict(d.dict as usize);
        }
        self.descs[id as usize] = Desc {
            loc: NOWHERE,
            access: d.access,
            reuse: d.reuse,
            ..Desc::default()
        };
    }

    fn new_desc(&mut self) -> u32 {
        let d = Desc {
            loc: NOWHERE,
            ..Desc::default()
        };
        match self.free_descs.pop() {
            Some(id) => {
                self.descs[id as usize] = d;
                id
            }
            None => {
                // Grown by a thirty-second, not doubled: descriptors are
                // most of the zone's metadata, spare room included.
                if self.descs.len() == self.descs.capacity() {
                    self.descs.reserve_exact(self.descs.len() / 32 + 64);
                }
                self.descs.push(d);
                (self.descs.len() - 1) as u32
            }
        }
    }

    /// Write `entries` (a swept block's survivors) as block `id` (empty)
    /// over its old place (`loc`, `len`), where it fits unless compression
    /// did worse than before: then its items are evicted.
    fn rewrite_in_place(&mut self, id: u32, entries: &mut [Entry], loc: u32, len: usize) {
        let mut content = Filter::default();
        for e in entries.iter() {
            content.insert(e.h);
        }
        let d = &mut self.descs[id as usize];
        d.content = content;
        d.count = entries.len() as u16;
        if entries.is_empty() {
            return;
        }
        let dict = match self.cfg.codec {
            Codec::Zstd => self.dict,
            _ => 0,
        };
        let dictionary = self
            .dicts
            .get(dict as usize)
            .and_then(|x| x.as_ref())
            .map(|x| x.0.clone());
        let mut items: Vec<(u64, &[u8])> = entries
            .iter()
            .map(|e| (e.h, &self.work[e.at as usize..(e.at + e.len) as usize]))
            .collect();
        let (used, entropy, tried) = flush::encode(
            &mut self.coder,
            &mut self.recognizer,
            self.cfg.codec,
            dictionary.as_deref(),
            &mut items,
            &mut self.raw,
            &mut self.packed,
        );
        drop(items);
        if tried {
            self.recognizer
                .record(entropy, self.raw.len(), self.packed.len());
        }
        let (codec, dict) = (used.code(), if used == Codec::Zstd { dict } else { 0 });
        let d = &mut self.descs[id as usize];
        if log::round(self.packed.len()) > log::round(len) {
            d.count = 0;
            d.content = Filter::default();
            self.drop_items(entries.len() as u64);
            return;
        }
        self.log.revive(loc, &self.packed);
        d.loc = loc;
        d.codec = codec;
        d.dict = dict;
        if let Some(Some(x)) = self.dicts.get_mut(dict as usize) {
            x.1 += 1;
        }
        // A rewrite in place keeps a subset of the block's items: no
        // longer than it was.
        d.stored = self.packed.len() as u16;
        d.raw = self.raw.len() as u16;
        self.stats.raw_bytes += d.raw as u64;
        self.stats.stored_bytes += d.stored as u64;
        self.note_encoded(self.raw.len(), self.packed.len(), codec);
    }

    /// `n` items leave the cache from the zone.
    fn drop_items(&mut self, n: u64) {
        self.stats.items -= n;
        self.stats.evictions += n;
    }

    /// A block was written: the codec's counts, and the running ratio,
    /// which sizes the next blocks (zExpander's fixed 2 KB container, here
    /// counted after compression).
    fn note_encoded(&mut self, raw: usize, stored: usize, codec: u8) {
        let w = &mut self.stats.written[codec as usize];
        w.0 += 1;
        w.1 += raw as u64;
        w.2 += stored as u64;
        let r = raw as f64 / stored.max(1) as f64;
        self.ratio = (self.ratio * 63.0 + r.clamp(1.0, 8.0)) / 64.0;
        let worth = self.ratio >= if self.worth { WORTH_RATIO } else { WORTH_AGAIN };
        if self.worth && !worth {
            // Samples of values that do not compress would wait for a
            // training that never comes.
            self.samples = Vec::new();
            self.sample_bytes = 0;
        }
        self.worth = worth;
    }

    /// Make `need` bytes of room at the log's head: a new page if one was
    /// granted and the zone is below its target, else compaction of the page with the most
    /// garbage, after the sweep has brought the live bytes under [`FILL`]
    /// of the pages. False if it cannot (no pages allowed).
    fn make_room(&mut self, need: usize, now: u32) -> bool {
        let need = log::round(need);
        if need + log::ALIGN > self.log.page_size() {
            return false;
        }
        for round in 0..MAX_SWEEPS {
            if self.log.head_room() >= need {
                return true;
            }
            if self.log.pages() == 0 {
                return false;
            }
            let allowed = (FILL * (self.log.pages() * self.log.page_size()) as f64) as usize;
            if self.log.live_bytes() + need <= allowed {
                if let Some((p, live)) = self.log.emptiest() {
                    if self.log.page_size() - live >= need {
                        self.compact(p);
                        continue;
                    }
                }
            }
            if self.block_items() == 0 && self.pending.is_empty() {
                // Nothing to evict: only garbage, all of it in the head.
                let p = self.log.emptiest().map(|(p, _)| p);
                match p {
                    Some(p) => self.compact(p),
                    None => return false,
                }
                continue;
            }
            self.sweep_one(now, round >= GENTLE_SWEEPS);
        }
        false
    }

    /// Compact log page `p` in place; it becomes the head.
    fn compact(&mut self, p: u32) {
        self.stats.compactions += 1;
        let descs = &self.descs;
        let moved = self.log.compact(p, |id, loc| {
            let d = descs.get(id as usize)?;
            (d.loc == loc).then_some(d.stored as usize)
        });
        for (id, loc) in moved {
            self.descs[id as usize].loc = loc;
        }
    }

    /// The replacement sweep's next step (§3.2): at the leaf under the
    /// hand, do its pending removals, drop expired items, and evict the
    /// cheaper half of the items the access filter does not name (all of
    /// them when `force`), then clear the filter and move on.
    pub fn sweep_one(&mut self, now: u32, force: bool) {
        self.stats.sweeps += 1;
        let (node, id) = self.trie.leaf_of(self.hand);
        self.hand = range_end(node).wrapping_add(1);
        let d = self.descs[id as usize];
        if d.count == 0 {
            self.descs[id as usize].access.clear();
            return;
        }
        self.work.clear();
        let mut entries = std::mem::take(&mut self.entries);
        entries.clear();
        self.gather(node, id, now, &mut entries);
        let mut cold: Vec<(u8, usize)> = entries
            .iter()
            .enumerate()
            .filter(|(_, e)| force || !d.access.may_contain(e.h))
            .map(|(i, e)| (item::cost_code(self.entry(*e)), i))
            .collect();
        // The cheaper half first (GreedyDual's order, learned or client
        // costs), at least one.
        cold.sort_unstable();
        let evict = cold.len().div_ceil(2);
        let mut gone: Vec<usize> = cold[..evict].iter().map(|c| c.1).collect();
        // Those flash takes (a copy into its stage: its lock, no I/O) leave
        // the zone without leaving the cache: no evictions.
        let mut spilled = 0;
        if let Some(flash) = &self.spill {
            for &i in &gone {
                let e = entries[i];
                spilled += u64::from(flash.admit(e.h, flush::entry(&self.work, e)));
            }
        }
        gone.sort_unstable_by(|a, b| b.cmp(a));
        for i in gone {
            entries.swap_remove(i);
        }
        self.drop_items(evict as u64 - spilled);
        self.stats.items -= spilled;
        self.stats.spilled += spilled;
        self.descs[id as usize].access.clear();
        self.rewrite_in_place(id, &mut entries, d.loc, d.stored as usize);
        self.entries = entries;
    }

    /// Shrink towards `target_pages` (the split moved towards the N-zone):
    /// sweep until the live bytes fit in one page fewer, then move the
    /// emptiest page's blocks to the others and give it back. At most
    /// `budget` steps; returns the steps taken.
    pub fn shrink(&mut self, now: u32, budget: usize) -> usize {
        let mut steps = 0;
        while self.log.pages() > self.target_pages && steps < budget {
            steps += 1;
            let page = self.log.page_size();
            let keep = self.log.pages() - 1;
            let allowed = (FILL * (keep * page) as f64) as usize;
            if self.log.live_bytes() > allowed && self.block_items() > 0 {
                self.sweep_one(now, steps > GENTLE_SWEEPS);
                continue;
            }
            let Some((p, _)) = self.log.emptiest() else {
                // One page left, the head: it goes once nothing lives in
                // it (a target of no pages).
                if self.log.live_bytes() == 0 || self.block_items() == 0 {
                    // Staged items go with it (the stage is memory too).
                    self.stats.evictions += self.stage.len() as u64;
                    self.clear();
                } else {
                    self.sweep_one(now, true);
                }
                continue;
            };
            self.evacuate(p);
        }
        steps
    }

    /// Move up to [`EVACUATE_BLOCKS`] of page `p`'s blocks to the head
    /// (compacting other pages for room); give `p` back once it is empty.
    /// A step at a time, so that the writer holds the zone's lock for a
    /// few blocks' copies, not a page's.
    fn evacuate(&mut self, p: u32) {
        let descs = &self.descs;
        let blocks = self.log.blocks_of(p, |id, loc| {
            let d = descs.get(id as usize)?;
            (d.loc == loc).then_some(d.stored as usize)
        });
        let last = blocks.len() <= EVACUATE_BLOCKS;
        for (id, len) in blocks.into_iter().take(EVACUATE_BLOCKS) {
            if self.log.head_room() < log::round(len) {
                let other = self
                    .log
                    .emptiest_except(p)
                    .filter(|&(_, live)| self.log.page_size() - live >= log::round(len));
                match other {
                    Some((q, _)) => self.compact(q),
                    None => {
                        // No room anywhere: the block's items go.
                        self.drop_items(self.descs[id as usize].count as u64);
                        self.free_block(id);
                        continue;
                    }
                }
            }
            let d = self.descs[id as usize];
            let bytes = self.log.read(d.loc, len).to_vec();
            self.log.kill(d.loc, len);
            let loc = self.log.append(id, &bytes).expect("room was made");
            self.descs[id as usize].loc = loc;
        }
        if last {
            self.log.release(p);
        }
    }

    /// `flush_all`: everything goes.
    pub fn clear(&mut self) {
        let target = self.target_pages;
        let cfg = self.cfg;
        let stats = self.stats;
        let spill = self.spill.take();
        *self = Zone::new(cfg);
        self.target_pages = target;
        self.spill = spill;
        self.stats = ZoneStats {
            items: 0,
            raw_bytes: 0,
            stored_bytes: 0,
            ..stats
        };
    }

    /// The zone's invariants: the trie partitions the hash space, every
    /// leaf's block decodes to its recorded count of items, each in the
    /// right leaf and named by the content filter, the log's counts agree
    /// with the blocks, and the item count is the blocks' less the pending
    /// removals known to hit.
    #[cfg(any(test, feature = "testing"))]
    pub fn validate(&mut self) {
        // Validating reads every block: not counted.
        let decompressions = self.stats.decompressions;
        self.trie.validate();
        let leaves = self.trie.leaves_in_order();
        let mut located = Vec::new();
        let (mut items, mut raw, mut stored) = (0u64, 0u64, 0u64);
        let mut seen_ids = std::collections::HashSet::new();
        for &(node, id) in &leaves {
            assert!(seen_ids.insert(id), "block {id} in two leaves");
            let d = self.descs[id as usize];
            if d.count == 0 {
                assert_eq!(d.loc, NOWHERE, "an empty block has no bytes");
                continue;
            }
            located.push((d.loc, d.stored as usize));
            raw += d.raw as u64;
            stored += d.stored as u64;
            assert!(self.load(id), "block {id} decodes");
            let mut n = 0;
            for e in block::entries(&self.raw).expect("block parses") {
                let (h, _) = e.expect("entry parses");
                assert!(
                    (range_start(node)..=range_end(node)).contains(&h),
                    "item in its leaf"
                );
                assert!(d.content.may_contain(h), "content filter names its items");
                n += 1;
                if self.pending.get(&h) != Some(&true) {
                    items += 1;
                }
            }
            assert_eq!(n, d.count as usize, "block {id}'s count");
        }
        for (h, image) in self.stage.images() {
            assert_eq!(hash(item::key(image)), h, "staged under its key's hash");
            assert!(item::is_whole(image), "staged image parses");
            items += 1;
        }
        assert_eq!(items, self.stats.items, "zone item count");
        // Each dictionary's count of blocks, and none kept that is unused.
        for (i, d) in self.dicts.iter().enumerate().skip(1) {
            let using = leaves
                .iter()
                .filter(|&&(_, id)| {
                    let d = self.descs[id as usize];
                    d.count > 0 && d.dict as usize == i
                })
                .count() as u64;
            match d {
                Some((_, n)) => {
                    assert_eq!(*n, using, "dictionary {i}'s blocks");
                    assert!(
                        using > 0 || i == self.dict as usize,
                        "unused dictionary {i} kept"
                    );
                }
                None => assert_eq!(using, 0, "blocks name a dropped dictionary {i}"),
            }
        }
        assert_eq!(raw, self.stats.raw_bytes);
        assert_eq!(stored, self.stats.stored_bytes);
        self.log.validate(&located);
        let sampled: usize = self.samples.iter().map(|s| s.capacity()).sum();
        assert_eq!(sampled, self.sample_bytes, "sample bytes");
        self.stats.decompressions = decompressions;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[derive(Clone, Debug)]
    enum Op {
        /// The N-zone evicts key `k` (stored with a value of `len` bytes
        /// of pattern `fill`, and `ttl` seconds to live, 0: none).
        Demote {
            k: u16,
            len: usize,
            fill: u8,
            ttl: u32,
        },
        Get {
            k: u16,
        },
        /// A read that moves the item to the N-zone.
        Promote {
            k: u16,
        },
        /// A SET or DELETE in the N-zone.
        Remove {
            k: u16,
        },
        Sweep {
            force: bool,
        },
        Advance {
            secs: u32,
        },
        Target {
            pages: usize,
        },
        /// A dictionary trained on the images of keys from `seed` on.
        Train {
            seed: u16,
        },
        Clear,
        /// The writer packs staged items into `n` blocks.
        Flush {
            n: usize,
        },
        /// The writer begins a flush job and leaves the lock (the ops
        /// that follow run while it compresses)...
        Begin,
        /// ...and finishes it (dropped if what it copied changed).
        Finish,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => (0..300u16, 0..1500usize, 0..4u8, prop_oneof![Just(0u32), 1..20u32])
                .prop_map(|(k, len, fill, ttl)| Op::Demote { k, len, fill, ttl }),
            6 => (0..300u16).prop_map(|k| Op::Get { k }),
            2 => (0..300u16).prop_map(|k| Op::Promote { k }),
            2 => (0..300u16).prop_map(|k| Op::Remove { k }),
            1 => any::<bool>().prop_map(|force| Op::Sweep { force }),
            1 => (1..10u32).prop_map(|secs| Op::Advance { secs }),
            1 => (0..6usize).prop_map(|pages| Op::Target { pages }),
            1 => any::<u16>().prop_map(|seed| Op::Train { seed }),
            1 => Just(Op::Clear),
            3 => (1..8usize).prop_map(|n| Op::Flush { n }),
            3 => Just(Op::Begin),
            3 => Just(Op::Finish),
        ]
    }

    fn key(k: u16) -> Vec<u8> {
        format!("key:{k}").into_bytes()
    }

    /// An item image: a value of `len` bytes, text-like (`fill` 0..3) or
    /// pseudo-random (3), so blocks both compress and do not.
    fn image(k: u16, len: usize, fill: u8, exptime: u32, cas: u64) -> Vec<u8> {
        let key = key(k);
        let mut x = (k as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ cas;
        let value: Vec<u8> = (0..len)
            .map(|i| match fill {
                3 => {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                }
                f => {
                    let pat = b"{\"name\":\"user\",\"id\":12345,\"ok\":true}";
                    pat[(i + f as usize) % pat.len()]
                }
            })
            .collect();
        let mut v = vec![0u8; item::total_len(key.len(), len, 7)];
        item::write(
            &mut v,
            cas,
            0,
            (k % 5) as u8,
            item::LIVE,
            exptime,
            7,
            &key,
            &[&value],
        );
        v
    }

    fn zone(codec: Codec) -> Zone {
        let mut z = Zone::new(ZoneConfig {
            block_bytes: 512,
            codec,
            page_size: 64 << 10,
            dict_samples: SAMPLES,
            stage_bytes: 2048,
        });
        z.set_target_pages(3);
        z
    }

    /// The zone against a map: what it returns is exactly the last image
    /// demoted under the key (never an older one, never damaged), unless
    /// the key was removed, expired, or could have been evicted (the
    /// zone's evictions moved since it was demoted); after every step the
    /// zone validates.
    fn run(codec: Codec, ops: &[Op]) {
        let mut z = zone(codec);
        let mut model: HashMap<u16, (Vec<u8>, u64)> = HashMap::new();
        let mut now = 10u32;
        let mut cas = 0u64;
        let lost = |z: &Zone| z.stats().evictions + z.stats().refused;
        let mut job: Option<flush::Job> = None;
        let (mut coder, mut raw) = (Coder::default(), Vec::new());
        for op in ops {
            match *op {
                Op::Demote { k, len, fill, ttl } => {
                    cas += 1;
                    let exp = if ttl == 0 { 0 } else { now + ttl };
                    let im = image(k, len, fill, exp, cas);
                    let h = hash(&key(k));
                    // The key was in the N-zone: its old copy is gone.
                    z.remove(h, false);
                    // The engine counts a page for the zone, as it does
                    // on each demotion (a sync flush may refuse the item).
                    z.grant_page();
                    let at = lost(&z);
                    z.push(h, &im, now);
                    model.insert(k, (im, at));
                }
                Op::Begin => {
                    if job.is_none() {
                        job = z.begin_flush(now);
                    }
                }
                Op::Finish => {
                    if let Some(mut j) = job.take() {
                        j.run(&mut coder, &mut raw);
                        z.finish_flush(j);
                    }
                }
                Op::Flush { n } => {
                    z.flush_some(now, n);
                }
                Op::Get { k } | Op::Promote { k } => {
                    let h = hash(&key(k));
                    let got = z.get(h, &key(k), now, 5, true).map(|_| z.found().to_vec());
                    let want = model.get(&k).filter(|(im, _)| {
                        let e = item::exptime(im);
                        e == 0 || e > now
                    });
                    match (&got, want) {
                        (Some(g), Some((w, _))) => assert_eq!(g, w, "key {k}"),
                        (None, Some((_, at))) => {
                            assert!(lost(&z) > *at, "key {k} lost without an eviction")
                        }
                        (Some(_), None) => panic!("key {k} came back"),
                        (None, None) => {}
                    }
                    if got.is_none() {
                        model.remove(&k);
                    }
                    if matches!(op, Op::Promote { .. }) && got.is_some() {
                        z.remove(h, true);
                        model.remove(&k);
                    }
                }
                Op::Remove { k } => {
                    z.remove(hash(&key(k)), false);
                    model.remove(&k);
                }
                Op::Sweep { force } => z.sweep_one(now, force),
                Op::Advance { secs } => now += secs,
                Op::Target { pages } => {
                    z.set_target_pages(pages);
                    z.shrink(now, 10_000);
                    assert!(z.pages() <= pages.max(1), "shrunk to its target");
                }
                Op::Train { seed } => {
                    let samples: Vec<Vec<u8>> = (0..300u16)
                        .map(|i| {
                            image(
                                seed.wrapping_add(i),
                                80 + (i as usize % 300),
                                (i % 3) as u8,
                                0,
                                1,
                            )
                        })
                        .collect();
                    if let Some(d) = crate::codec::train_dictionary(&samples, 4096) {
                        z.install_dictionary(d);
                    }
                }
                Op::Clear => {
                    z.clear();
                    model.clear();
                }
            }
            z.validate();
            let live = model
                .values()
                .filter(|(im, _)| {
                    let e = item::exptime(im);
                    e == 0 || e > now
                })
                .count() as u64;
            // Expired items still count until found or swept.
            assert!(
                z.items() >= live || lost(&z) > 0,
                "count {} < {live}",
                z.items()
            );
        }
    }

    #[test]
    fn a_flush_keeps_its_dictionary_when_a_newer_one_retires_it() {
        use Op::*;
        run(
            Codec::Zstd,
            &[
                Demote {
                    k: 0,
                    len: 0,
                    fill: 0,
                    ttl: 0,
                },
                Demote {
                    k: 261,
                    len: 0,
                    fill: 0,
                    ttl: 0,
                },
                Demote {
                    k: 0,
                    len: 158,
                    fill: 0,
                    ttl: 0,
                },
                Finish,
                Demote {
                    k: 10,
                    len: 552,
                    fill: 0,
                    ttl: 0,
                },
                Train { seed: 0 },
                Demote {
                    k: 100,
                    len: 1054,
                    fill: 0,
                    ttl: 0,
                },
                Begin,
                Train { seed: 0 },
                Finish,
            ],
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn zone_agrees_with_a_map_lz4(ops in proptest::collection::vec(op(), 1..400)) {
            run(Codec::Lz4, &ops);
        }

        #[test]
        fn zone_agrees_with_a_map_zstd(ops in proptest::collection::vec(op(), 1..400)) {
            run(Codec::Zstd, &ops);
        }
    }

    /// Filling a zone far past its pages: it splits, compacts and sweeps,
    /// keeps to its pages, and what it returns is always right.
    #[test]
    fn fills_past_capacity() {
        let mut z = zone(Codec::Lz4);
        let mut last = HashMap::new();
        for i in 0..30_000u32 {
            // A quarter of the values random (incompressible): 15,000 keys
            // overflow 192 KB.
            let k = (i % 15_000) as u16;
            let im = image(k, 100 + (i as usize % 200), (i % 4) as u8, 0, i as u64 + 1);
            let h = hash(&key(k));
            z.remove(h, false);
            z.grant_page();
            z.push(h, &im, 10);
            last.insert(k, im);
            assert!(z.pages() <= 3);
        }
        z.validate();
        let s = z.stats();
        assert!(
            s.splits > 0 && s.compactions > 0 && s.evictions > 0,
            "{s:?}"
        );
        let mut hits = 0;
        for (k, im) in &last {
            if z.get(hash(&key(*k)), &key(*k), 10, 0, true).is_some() {
                assert_eq!(z.found(), &im[..]);
                hits += 1;
            }
        }
        // 192 KB of pages hold far more than 192 KB / 300 B of items.
        assert!(hits > 1000, "{hits} hits, {s:?}");
    }
}
