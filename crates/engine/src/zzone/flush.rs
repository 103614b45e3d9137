//! Packing staged items into their block, in three steps so that the slow
//! one holds no lock (issue 11: no slow work under a shared lock).
//!
//! 1. [`Zone::begin_flush`], under the zone's lock: pick a leaf with staged
//!    items, and copy what its rewrite needs: the items, the leaf's stored
//!    block (and its sibling's, when the two may join), the removals
//!    pending in their range, and the codec's state.
//! 2. [`Job::run`], without it: decode, drop removed, replaced and expired
//!    items, merge, split on the next hash bit while over capacity, and
//!    compress (tens of microseconds a block).
//! 3. [`Zone::finish_flush`], under the lock again: if nothing the job
//!    copied changed meanwhile (its blocks were not rewritten, its items
//!    are still staged as they were, the pending removals it applied are
//!    the same, its dictionary is still there), swap the new blocks in;
//!    else drop the job: the items stay staged for a later one.
//!
//! Reads meanwhile see the old block and the staged items, which stay put
//! until step 3. The writer thread runs the steps with the lock released
//! between them; a demotion that finds the stage full runs all three
//! under it.
//!
//! A staged item too large for a block is first stored apart the same
//! way, in three steps (`super::large`): a job compresses it alone, and
//! its stub takes its place in the stage, to be packed as any small item.
//! Stubs a rewrite drops (removed, replaced, expired, or in a block that
//! does not decode) free their records when the rewrite is swapped in.

use std::sync::Arc;

use super::desc::{block_len, entry, Entry, MAX_RAW};
use super::filter::{Access, Content};
use super::frames;
use super::large::{stub_of, RecordJob, Stub};
use super::log;
use super::trie::{range_end, range_start, Node, MAX_DEPTH};
use super::zone::{push_key, Zone};
use crate::block::{self, encode};
use crate::codec::{Codec, Coder, Dictionary, Recognizer};
use crate::item;

/// A stored block copied for a job.
struct Old {
    bytes: Vec<u8>,
    /// Its code byte (`super::frames`).
    code: u8,
    /// The dictionary it names (None: none, or `missing`).
    dict: Option<Arc<Dictionary>>,
    missing: bool,
    raw: usize,
    count: u64,
}

/// A block a job made, for the leaf `node`.
pub(super) struct Out {
    node: Node,
    pub(super) count: u16,
    content: Content,
    raw: u16,
    pub(super) packed: Vec<u8>,
    codec: u8,
    dict: u8,
    entropy: f64,
    tried: bool,
    /// The stubs it holds (their records follow it).
    pub(super) stubs: Vec<Stub>,
    /// The keys of the items packed into it, when the zone's eviction tap
    /// wants them (each after its length byte): told if the block finds
    /// no room. A delta's lists only its new items (the block's older
    /// ones are compressed).
    pub(super) keys: Vec<u8>,
}

/// What a job removed from the zone's count, by reason.
#[derive(Default, Clone, Copy)]
pub(super) struct Dropped {
    /// Removed, replaced or expired (counted items).
    items: u64,
    expired: u64,
    /// Lost to a block that did not decode.
    corrupt_items: u64,
    corrupt_blocks: u64,
    decompressions: u64,
}

impl Dropped {
    pub(super) fn add(&mut self, o: Dropped) {
        self.items += o.items;
        self.expired += o.expired;
        self.corrupt_items += o.corrupt_items;
        self.corrupt_blocks += o.corrupt_blocks;
        self.decompressions += o.decompressions;
    }
}

/// A sweep's part of a [`BlockJob`] (`super::sweep`).
pub(super) struct Sweep {
    /// Evict every item, read or not (a zone that must shrink, or that
    /// the gentle sweeps did not free).
    pub(super) force: bool,
    /// The block's access filter when the job began: items it names were
    /// read since the sweep last passed, and stay.
    pub(super) access: Access,
    /// The entries it evicts (their images in the job's `work`).
    pub(super) gone: Vec<Entry>,
}

/// A flush job: a leaf's rewrite, a delta appended to its block, or a
/// large item stored apart.
pub enum Job {
    Block(Box<BlockJob>),
    Delta(Box<DeltaJob>),
    Record(Box<RecordJob>),
}

impl Job {
    /// Step 2, without the zone's lock.
    pub fn run(&mut self, coder: &mut Coder, raw: &mut Vec<u8>) {
        match self {
            Job::Block(j) => j.run(coder, raw),
            Job::Delta(j) => j.run(coder, raw),
            Job::Record(j) => j.run(coder),
        }
    }
}

/// A leaf's staged items compressed on their own, to be appended to its
/// block as a delta (`super::frames`).
pub struct DeltaJob {
    ticket: u64,
    node: Node,
    id: u32,
    /// As a [`BlockJob`]'s: the staged items, their images and entries.
    fresh: Vec<(u64, u64)>,
    work: Vec<u8>,
    entries: Vec<Entry>,
    /// The block's codec and dictionary, which the delta uses too.
    codec: Codec,
    dict: Option<Arc<Dictionary>>,
    now: u32,
    /// What `run` made: the frame, its decoded length and its codec.
    packed: Vec<u8>,
    raw: usize,
    used: Codec,
}

/// One leaf's rewrite (see the module's doc).
pub struct BlockJob {
    ticket: u64,
    pub(super) node: Node,
    pub(super) id: u32,
    /// The sibling leaf, when the two may join into one block.
    sibling: Option<(Node, u32)>,
    old: Vec<Old>,
    /// Staged items: (hash, push number); their images are in `work`, and
    /// their entries first in `entries`.
    fresh: Vec<(u64, u64)>,
    /// Pending removals in the range of the leaf (and the sibling), by hash.
    pending: Vec<(u64, bool)>,
    dict_slot: u8,
    dict: Option<Arc<Dictionary>>,
    codec: Codec,
    pub(super) capacity: usize,
    page_size: usize,
    now: u32,
    recognizer: Recognizer,
    pub(super) work: Vec<u8>,
    pub(super) entries: Vec<Entry>,
    merged: bool,
    pub(super) out: Vec<Out>,
    pub(super) dropped: Dropped,
    /// Items dropped because a block outgrew a page, and their keys when
    /// the tap wants them (as `Out::keys`).
    evicted: u64,
    evicted_keys: Vec<u8>,
    /// The zone's eviction tap wants keys (`Out::keys`).
    tapped: bool,
    /// Stubs of the old blocks that it drops, and the old blocks that did
    /// not decode: their records go when it is swapped in.
    pub(super) freed: Vec<Stub>,
    corrupt: Vec<u32>,
    /// A sweep's rewrite (`super::sweep`): no staged items, the cold half
    /// evicted, the block written back in place.
    pub(super) sweep: Option<Sweep>,
}

/// Leaves the writer's merge step looks at per call.
const MERGE_SCAN: usize = 64;
/// Pending removals a block may keep while it takes deltas. During a fill
/// most are false positives of its content filter (a new key's store
/// removes any older copy the filter may name); none at all sent two
/// thirds of a fill's flushes to rewrites.
const PENDING_BEHIND: usize = 2;

impl Zone {
    /// Step 1: a job for a large staged item to store apart, else for the
    /// next leaf (in hash order from the flush hand) that has staged
    /// items. None if nothing is staged.
    pub fn begin_flush(&mut self, now: u32) -> Option<Job> {
        if let Some(j) = self.begin_record(now) {
            return Some(Job::Record(Box::new(j)));
        }
        let h = self.stage.next_from(self.flush_hand)?;
        let (node, id) = self.trie.leaf_of(h);
        self.flush_hand = range_end(node).wrapping_add(1);
        let capacity = self.raw_capacity();
        let mut work = Vec::new();
        let mut entries = Vec::new();
        let mut fresh = Vec::new();
        for (x, n, im) in self
            .stage
            .items_in(range_start(node)..=range_end(node), capacity, true)
        {
            entries.push(Entry {
                h: x,
                at: work.len() as u32,
                len: im.len() as u32,
            });
            work.extend_from_slice(im);
            fresh.push((x, n));
        }
        let desc_raw = |z: &Zone, i: u32| z.descs[i as usize].raw as usize;
        let sibling = self.trie.sibling_leaf(node).filter(|&(_, s)| {
            desc_raw(self, id) + desc_raw(self, s) + work.len() <= capacity * 3 / 4
        });
        if sibling.is_none() && self.takes_delta(node, id, &fresh, block_len(&entries), capacity) {
            let ticket = self.ticket([id, id]);
            let d = self.descs[id as usize];
            return Some(Job::Delta(Box::new(DeltaJob {
                ticket,
                node,
                id,
                fresh,
                work,
                entries,
                codec: frames::codec_of(d.codec),
                dict: self.dict_arc(d.dict),
                now,
                packed: Vec::new(),
                raw: 0,
                used: Codec::Raw,
            })));
        }
        let mut job = self.job_for(node, id, sibling, now);
        job.work = work;
        job.entries = entries;
        job.fresh = fresh;
        Some(Job::Block(Box::new(job)))
    }

    /// A ticket for a job that copied blocks `ids` (a rewrite of either
    /// makes it stale: `Zone::free_block`).
    pub(super) fn ticket(&mut self, ids: [u32; 2]) -> u64 {
        self.tickets_issued += 1;
        self.tickets.push((self.tickets_issued, ids, false));
        self.tickets_issued
    }

    /// The writer's step when nothing is staged: the next block (from
    /// the merge hand, a bounded scan) stored with deltas, rewritten whole
    /// so that it takes the room of one base again (`super::frames`). A
    /// fill leaves deltas behind where the writer had no time to spare.
    pub(super) fn merge_step(&mut self, now: u32) -> Option<BlockJob> {
        if self.framed == 0 || !self.stage.is_empty() {
            return None;
        }
        for _ in 0..MERGE_SCAN {
            let (node, id) = self.trie.leaf_of(self.merge_hand);
            self.merge_hand = range_end(node).wrapping_add(1);
            let d = self.descs[id as usize];
            if d.count > 0 && frames::deltas(d.codec) > 0 {
                return Some(self.job_for(node, id, None, now));
            }
        }
        None
    }

    /// Whether the staged items `fresh` of leaf `node` (block `id`), `add`
    /// bytes as a block of their own, go in a delta (`super::frames`)
    /// rather than a rewrite: the block has room for them and for another
    /// delta, none of them replaces a copy in it (pending removal), and at
    /// most [`PENDING_BEHIND`] removals are pending in it. A rewrite does
    /// the pending removals; left to pile up behind deltas they tripled
    /// the zone's metadata on USR at `-m 16` and cost 0.017 of miss ratio
    /// (docs/benchmarks-history.md).
    fn takes_delta(
        &self,
        node: Node,
        id: u32,
        fresh: &[(u64, u64)],
        add: usize,
        capacity: usize,
    ) -> bool {
        let d = &self.descs[id as usize];
        let grown = d.stored as usize + frames::delta_len(add, fresh.len());
        d.count > 0
            && frames::deltas(d.codec) < self.deltas_now()
            && d.raw as usize + add <= capacity
            && grown <= u16::MAX as usize
            && log::round(grown) + log::ALIGN <= self.log.page_size()
            && (d.dict == 0 || self.dict_arc(d.dict).is_some())
            && fresh.iter().all(|(h, _)| !self.pending.contains_key(h))
            && self
                .pending
                .range(range_start(node)..=range_end(node))
                .nth(PENDING_BEHIND)
                .is_none()
    }

    /// Deltas a block may take before a flush rewrites it: the configured
    /// number, or [`frames::MAX_DELTAS`] while the stage is more than half
    /// full (the writer behind the demotions). Under a churn of new keys
    /// a rewrite every fifth flush was most of the zone's CPU, and the
    /// zone's CPU most of the server's: memcaslap's set-heavy load ran at
    /// 0.6× memcached's throughput, 1.35× that with 15 deltas always and
    /// 1.16× with this rule (docs/benchmarks-history.md). Deltas compress worse and a read
    /// decodes them newest first, so a calm zone keeps few: the writer,
    /// idle, merges them (`Zone::merge_step`). 0 stays 0 (every flush
    /// rewrites).
    pub(super) fn deltas_now(&self) -> u8 {
        match self.cfg.max_deltas > 0 && self.stage_busy() {
            true => frames::MAX_DELTAS,
            false => self.cfg.max_deltas,
        }
    }

    /// A rewrite of leaf `node` (block `id`, and `sibling`'s when the two
    /// may join): what it copies of the zone, and its ticket.
    pub(super) fn job_for(
        &mut self,
        node: Node,
        id: u32,
        sibling: Option<(Node, u32)>,
        now: u32,
    ) -> BlockJob {
        let span = match sibling {
            Some(_) => node.parent(),
            None => node,
        };
        let pending = self
            .pending
            .range(range_start(span)..=range_end(span))
            .map(|(&h, &k)| (h, k))
            .collect();
        let old = std::iter::once(id)
            .chain(sibling.map(|s| s.1))
            .map(|i| self.copy_old(i))
            .collect();
        let ticket = self.ticket([id, sibling.map_or(id, |s| s.1)]);
        let dict = match self.cfg.codec {
            Codec::Zstd => self.dict,
            _ => 0,
        };
        BlockJob {
            ticket,
            node,
            id,
            sibling,
            old,
            fresh: Vec::new(),
            pending,
            dict_slot: dict,
            dict: self.dict_arc(dict),
            codec: self.cfg.codec,
            capacity: self.raw_capacity(),
            page_size: self.log.page_size(),
            now,
            recognizer: self.recognizer.clone(),
            work: Vec::new(),
            entries: Vec::new(),
            merged: false,
            out: Vec::new(),
            dropped: Dropped::default(),
            evicted: 0,
            evicted_keys: Vec::new(),
            tapped: self.tap.as_ref().is_some_and(|t| t.wanted()),
            freed: Vec::new(),
            corrupt: Vec::new(),
            sweep: None,
        }
    }

    pub(super) fn dict_arc(&self, slot: u8) -> Option<Arc<Dictionary>> {
        self.dicts
            .get(slot as usize)
            .and_then(|d| d.as_ref())
            .map(|d| d.0.clone())
    }

    fn copy_old(&self, id: u32) -> Old {
        let d = self.descs[id as usize];
        let dict = self.dict_arc(d.dict);
        Old {
            bytes: match d.count {
                0 => Vec::new(),
                _ => self.log.read(d.loc, d.stored as usize).to_vec(),
            },
            code: d.codec,
            missing: d.dict != 0 && dict.is_none(),
            dict,
            raw: d.raw as usize,
            count: d.count as u64,
        }
    }

    /// Step 3: swap the job's blocks in (or store its record), unless what
    /// it copied changed meanwhile. False if it was dropped (its items
    /// stay staged).
    pub fn finish_flush(&mut self, job: Job) -> bool {
        match job {
            Job::Block(j) => self.finish_block(*j),
            Job::Delta(j) => self.finish_delta(*j),
            Job::Record(j) => self.finish_record(*j),
        }
    }

    fn finish_delta(&mut self, job: DeltaJob) -> bool {
        let Some(at) = self.tickets.iter().position(|t| t.0 == job.ticket) else {
            return false;
        };
        let (_, _, dirty) = self.tickets.swap_remove(at);
        let same = !dirty
            && job
                .fresh
                .iter()
                .all(|&(h, n)| self.stage.push_of(h) == Some(n) && !self.pending.contains_key(&h));
        if !same {
            self.stats.flush_conflicts += 1;
            return false;
        }
        for &(h, _) in &job.fresh {
            self.stage.discard(h);
        }
        let id = job.id;
        let d = self.descs[id as usize];
        let added = frames::delta_len(job.packed.len(), job.entries.len());
        let mut packed = Vec::with_capacity(d.stored as usize + added);
        packed.extend_from_slice(self.log.read(d.loc, d.stored as usize));
        let hashes = job.entries.iter().map(|e| e.h);
        frames::append(&mut packed, &job.packed, job.raw, job.used, hashes);
        let mut content = d.content;
        for e in &job.entries {
            content.insert(e.h);
        }
        let stubs = job
            .entries
            .iter()
            .filter_map(|e| stub_of(entry(&job.work, *e)))
            .collect();
        let o = Out {
            node: job.node,
            count: d.count + job.entries.len() as u16,
            content,
            raw: d.raw + job.raw as u16,
            packed,
            codec: frames::code(
                frames::codec_of(d.codec).code(),
                frames::deltas(d.codec) + 1,
            ),
            dict: d.dict,
            entropy: 0.0,
            tried: false,
            stubs,
            keys: self.keys_if_tapped(job.entries.iter().map(|e| entry(&job.work, *e))),
        };
        self.stats.flushes += 1;
        self.stats.deltas += 1;
        self.stats.flushed += job.fresh.len() as u64;
        // Written as a new block in place of the old one, as a rewrite's
        // is; the dictionary must outlive the old block's release.
        let slot = d.dict as usize;
        if let Some(Some(x)) = self.dicts.get_mut(slot) {
            x.1 += 1;
        }
        self.free_block(id);
        let loc = match self.worth_growing() && self.make_room(o.packed.len(), job.now) {
            true => self.log.append(id, &o.packed),
            false => None,
        };
        match loc {
            Some(loc) => {
                self.stubs_in(id, &o.stubs);
                self.place(id, loc, &o);
            }
            None => self.drop_frames(job.node, id, &o),
        }
        if let Some(Some(x)) = self.dicts.get_mut(slot) {
            x.1 -= 1;
        }
        self.release_dict(slot);
        true
    }

    /// A block (`o`, of leaf `node`, block `id`, freed) found no room:
    /// its items go, undecoded, and with them the records of its stubs
    /// and the removals pending in it (those known to hit were counted).
    fn drop_frames(&mut self, node: Node, id: u32, o: &Out) {
        let range = range_start(node)..=range_end(node);
        let gone: Vec<(u64, bool)> = self.pending.range(range).map(|(&h, &k)| (h, k)).collect();
        let known = gone.iter().filter(|p| p.1).count() as u64;
        for (h, _) in gone {
            self.pending.remove(&h);
        }
        self.stats.refused += o.count as u64 - known;
        self.drop_items(o.count as u64 - known);
        self.tell_keys(&o.keys);
        self.free_records_of(id);
        for &s in &o.stubs {
            self.free_record(s);
        }
    }

    fn finish_block(&mut self, mut job: BlockJob) -> bool {
        let Some(at) = self.tickets.iter().position(|t| t.0 == job.ticket) else {
            // The zone was cleared.
            return false;
        };
        let (_, _, dirty) = self.tickets.swap_remove(at);
        let span = job.span();
        let same = !dirty
            && (job.dict_slot == 0
                || match (&job.dict, self.dict_arc(job.dict_slot)) {
                    (Some(a), Some(b)) => Arc::ptr_eq(a, &b),
                    _ => false,
                })
            && job
                .fresh
                .iter()
                .all(|&(h, n)| self.stage.push_of(h) == Some(n))
            && job
                .applied_pending(span)
                .all(|(h, k)| self.pending.get(&h) == Some(&k));
        if !same {
            self.stats.flush_conflicts += 1;
            return false;
        }
        for &(h, _) in &job.fresh {
            self.stage.discard(h);
        }
        for (h, _) in job.applied_pending(span).collect::<Vec<_>>() {
            self.pending.remove(&h);
        }
        // The new blocks' dictionary must outlive the old blocks' release,
        // and the records freed just below: a record may be the last
        // holder of the dictionary the job was given (a newer one
        // installed since), and the new blocks name it.
        let slot = job.dict_slot as usize;
        if let Some(Some(x)) = self.dicts.get_mut(slot) {
            x.1 += 1;
        }
        // Records whose stubs it dropped, or which were in a block that
        // did not decode; and those it keeps are between blocks until
        // their block is written (`write_out`).
        for &id in &job.corrupt {
            self.free_records_of(id);
        }
        for &s in &job.freed {
            self.free_record(s);
        }
        let d = job.dropped;
        self.stats.items -= d.items + d.corrupt_items + job.evicted;
        self.stats.expired += d.expired;
        self.stats.corrupt += d.corrupt_blocks;
        self.stats.decompressions += d.decompressions;
        self.stats.evictions += job.evicted;
        self.tell_keys(&job.evicted_keys);
        if job.sweep.is_some() {
            self.finish_sweep(&mut job);
        } else {
            for o in &job.out {
                self.stubs_moving(&o.stubs);
            }
            match job.fresh.is_empty() {
                // `Zone::merge_step`'s.
                true => self.stats.frame_merges += 1,
                false => self.stats.flushes += 1,
            }
            self.stats.flushed += job.fresh.len() as u64;
            self.free_block(job.id);
            let mut node = job.node;
            if let (true, Some((_, sid))) = (job.merged, job.sibling) {
                self.free_block(sid);
                self.trie.merge(node, job.id);
                self.free_descs.push(sid);
                node = span;
                self.stats.merges += 1;
            }
            let out = std::mem::take(&mut job.out);
            self.install(node, job.id, &out, job.now);
        }
        if let Some(Some(x)) = self.dicts.get_mut(slot) {
            x.1 -= 1;
        }
        self.release_dict(slot);
        true
    }

    /// Write `out` (blocks for `node` and its descendants, in hash order)
    /// as leaf `node` (id `id`, empty), splitting it as the job did.
    fn install(&mut self, node: Node, id: u32, out: &[Out], now: u32) {
        if let [o] = out {
            if o.node == node {
                self.write_out(id, o, now);
                return;
            }
        }
        let right = self.new_desc();
        // Both halves inherit the reads the sweep has not seen yet.
        let parent = self.descs[id as usize];
        self.descs[right as usize].access = parent.access;
        self.descs[right as usize].reuse = parent.reuse;
        let split = self.trie.split(node, id, right);
        debug_assert!(split, "the job split {node:?}");
        self.stats.splits += 1;
        let (l, r) = node.children();
        let mid = out.partition_point(|o| range_end(o.node) <= range_end(l));
        self.install(l, id, &out[..mid], now);
        self.install(r, right, &out[mid..], now);
    }

    /// Store block `o` as block `id` (empty: freed or new), making room
    /// for it first; without room its items go.
    fn write_out(&mut self, id: u32, o: &Out, now: u32) {
        if o.count == 0 {
            return;
        }
        // Measured whether it is kept or not: a zone with no page (its
        // blocks do not compress) goes on measuring with the blocks it drops.
        self.note_out(o);
        // A zone whose blocks do not compress keeps none of them, so that
        // its last page empties (`Zone::shrink`; `config::PROBE_EVERY`).
        let loc = match self.worth_growing() && self.make_room(o.packed.len(), now) {
            true => self.log.append(id, &o.packed),
            false => None,
        };
        let Some(loc) = loc else {
            self.stats.refused += o.count as u64;
            self.drop_items(o.count as u64);
            self.tell_keys(&o.keys);
            for &s in &o.stubs {
                self.free_record(s);
            }
            return;
        };
        self.stubs_in(id, &o.stubs);
        self.place(id, loc, o);
    }

    /// A block was made: the codec's counts and the recognizer's.
    pub(super) fn note_out(&mut self, o: &Out) {
        self.note_encoded(o.raw as usize, o.packed.len(), o.codec);
        match o.tried {
            true => self
                .recognizer
                .record(o.entropy, o.raw as usize, o.packed.len()),
            false => {
                self.recognizer.worth_trying(o.entropy);
            }
        }
    }

    /// Block `o`, just written at `loc`, is block `id` (empty).
    pub(super) fn place(&mut self, id: u32, loc: u32, o: &Out) {
        let d = &mut self.descs[id as usize];
        d.loc = loc;
        d.count = o.count;
        d.content = o.content;
        d.codec = o.codec;
        d.dict = o.dict;
        d.stored = o.packed.len() as u16;
        d.raw = o.raw;
        self.framed += usize::from(frames::deltas(o.codec) > 0);
        if let Some(Some(x)) = self.dicts.get_mut(o.dict as usize) {
            x.1 += 1;
        }
        self.stats.raw_bytes += o.raw as u64;
        self.stats.stored_bytes += o.packed.len() as u64;
    }

    /// Pack staged items into their blocks: up to `budget` block rewrites,
    /// all under this `&mut` (a demotion that found the stage full, or a
    /// single-threaded user). Returns the rewrites done.
    pub fn flush_some(&mut self, now: u32, budget: usize) -> usize {
        let mut done = 0;
        while done < budget {
            let Some(mut job) = self.begin_flush(now) else {
                break;
            };
            job.run(&mut self.coder, &mut self.raw);
            let ok = self.finish_flush(job);
            debug_assert!(ok, "nothing can change a job under one lock hold");
            done += 1;
        }
        done
    }
}

impl DeltaJob {
    /// Step 2, without the zone's lock: the delta, compressed with the
    /// block's codec and dictionary (stored as it is if that does not pay).
    pub fn run(&mut self, coder: &mut Coder, raw: &mut Vec<u8>) {
        let work = &self.work;
        let mut items: Vec<(u64, &[u8])> = self
            .entries
            .iter()
            .map(|e| (e.h, entry(work, *e)))
            .collect();
        block::build(&mut items, raw);
        self.raw = raw.len();
        let dict = match self.codec {
            Codec::Zstd => self.dict.as_deref(),
            _ => None,
        };
        self.used = match coder.compress(self.codec, dict, raw, &mut self.packed) {
            true => self.codec,
            false => {
                self.packed.clear();
                self.packed.extend_from_slice(raw);
                Codec::Raw
            }
        };
    }
}

impl BlockJob {
    /// The range the job rewrites: the leaf's, or with the sibling their
    /// parent's.
    fn span(&self) -> Node {
        match (self.merged, self.sibling) {
            (true, Some(_)) => self.node.parent(),
            _ => self.node,
        }
    }

    /// The pending removals the job applied (those in its span).
    fn applied_pending(&self, span: Node) -> impl Iterator<Item = (u64, bool)> + '_ {
        let range = range_start(span)..=range_end(span);
        self.pending
            .iter()
            .copied()
            .filter(move |(h, _)| range.contains(h))
    }

    /// Step 2, without the zone's lock: build the new blocks.
    pub fn run(&mut self, coder: &mut Coder, raw: &mut Vec<u8>) {
        if self.sweep.is_some() {
            return self.run_sweep(coder, raw);
        }
        let fresh = self.entries.len();
        let mut entries = std::mem::take(&mut self.entries);
        let leaf = self.gather(0, fresh, &mut entries, coder, raw);
        self.dropped.add(leaf);
        let mine = entries.len();
        if self.old.len() > 1 {
            let (freed, corrupt) = (self.freed.len(), self.corrupt.len());
            let sib = self.gather(1, fresh, &mut entries, coder, raw);
            if block_len(&entries) <= self.capacity * 3 / 4 {
                self.merged = true;
                self.dropped.add(sib);
            } else {
                // The sibling stays as it is, its stubs too.
                entries.truncate(mine);
                self.freed.truncate(freed);
                self.corrupt.truncate(corrupt);
            }
        }
        let span = self.span();
        self.pack(span, entries, coder, raw);
    }

    /// Add old block `which`'s surviving entries to `entries`: removed
    /// (pending), replaced (a fresh entry of the same key) and expired ones
    /// are dropped.
    pub(super) fn gather(
        &mut self,
        which: usize,
        fresh: usize,
        entries: &mut Vec<Entry>,
        coder: &mut Coder,
        raw: &mut Vec<u8>,
    ) -> Dropped {
        let mut dropped = Dropped::default();
        let old = &self.old[which];
        if old.count == 0 {
            return dropped;
        }
        dropped.decompressions += 1;
        let ok = !old.missing
            && frames::decompress(
                coder,
                old.code,
                old.dict.as_deref(),
                &old.bytes,
                old.raw,
                raw,
            )
            .is_ok()
            && block::entries(raw).is_ok_and(|mut e| e.all(|x| x.is_ok()));
        if !ok {
            debug_assert!(false, "a Z-zone block does not decode");
            dropped.corrupt_blocks += 1;
            dropped.corrupt_items += old.count;
            let id = match which {
                0 => self.id,
                _ => self.sibling.map_or(self.id, |s| s.1),
            };
            self.corrupt.push(id);
            return dropped;
        }
        for (h, image) in block::entries(raw).into_iter().flatten().flatten() {
            let key = item::key(image);
            let stub = stub_of(image);
            if let Ok(i) = self.pending.binary_search_by_key(&h, |p| p.0) {
                if !self.pending[i].1 {
                    dropped.items += 1;
                }
                self.freed.extend(stub);
                continue;
            }
            let work = &self.work;
            if entries[..fresh]
                .iter()
                .any(|e| e.h == h && item::key(entry(work, *e)) == key)
            {
                dropped.items += 1;
                self.freed.extend(stub);
                continue;
            }
            let exp = item::exptime(image);
            if exp != 0 && exp <= self.now {
                dropped.items += 1;
                dropped.expired += 1;
                self.freed.extend(stub);
                continue;
            }
            entries.push(Entry {
                h,
                at: self.work.len() as u32,
                len: image.len() as u32,
            });
            self.work.extend_from_slice(image);
        }
        dropped
    }

    /// Blocks for leaf `node` from `entries`: split on the next hash bit
    /// while over capacity (an empty half is an empty block).
    pub(super) fn pack(
        &mut self,
        node: Node,
        mut entries: Vec<Entry>,
        coder: &mut Coder,
        raw: &mut Vec<u8>,
    ) {
        if block_len(&entries) > self.capacity && entries.len() > 1 && node.depth < MAX_DEPTH {
            let bit = 63 - node.depth;
            let (l, r): (Vec<Entry>, Vec<Entry>) =
                entries.iter().partition(|e| e.h >> bit & 1 == 0);
            let (ln, rn) = node.children();
            self.pack(ln, l, coder, raw);
            self.pack(rn, r, coder, raw);
            return;
        }
        // At the deepest level a block that outgrows a page (or what a
        // descriptor can name) gives up its largest items.
        while block_len(&entries) + log::ALIGN > self.page_size || block_len(&entries) > MAX_RAW {
            let (i, _) = entries
                .iter()
                .enumerate()
                .max_by_key(|(_, e)| e.len)
                .expect("an oversized block has entries");
            let gone = entries.swap_remove(i);
            self.freed.extend(stub_of(entry(&self.work, gone)));
            self.evicted += 1;
            if self.tapped {
                push_key(&mut self.evicted_keys, entry(&self.work, gone));
            }
        }
        let stubs = entries
            .iter()
            .filter_map(|e| stub_of(entry(&self.work, *e)))
            .collect();
        let mut content = Content::default();
        for e in &entries {
            content.insert(e.h);
        }
        let mut o = Out {
            node,
            count: entries.len() as u16,
            content,
            raw: 0,
            packed: Vec::new(),
            codec: 0,
            dict: 0,
            entropy: 0.0,
            tried: false,
            stubs,
            keys: Vec::new(),
        };
        if self.tapped {
            for e in &entries {
                push_key(&mut o.keys, entry(&self.work, *e));
            }
        }
        if !entries.is_empty() {
            let mut items: Vec<(u64, &[u8])> = entries
                .iter()
                .map(|e| (e.h, entry(&self.work, *e)))
                .collect();
            let (used, entropy, tried) = encode(
                coder,
                &mut self.recognizer,
                self.codec,
                self.dict.as_deref(),
                &mut items,
                raw,
                &mut o.packed,
            );
            debug_assert!(raw.len() <= MAX_RAW && o.packed.len() <= raw.len());
            o.raw = raw.len() as u16;
            o.codec = used.code();
            o.dict = if used == Codec::Zstd {
                self.dict_slot
            } else {
                0
            };
            o.entropy = entropy;
            o.tried = tried;
        }
        self.out.push(o);
    }
}
