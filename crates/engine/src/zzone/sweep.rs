//! Making room: the replacement sweep (§3.2), which evicts the cheaper
//! half of each block's items not read since it last passed (or hands
//! them down the zone's pipe); compaction of the log's pages; and
//! shrinking to a smaller target, a page at a time.
//!
//! A sweep is a block rewrite, done as a flush is (`super::flush`): the
//! block is copied under the zone's lock, decoded, thinned and compressed
//! without it, and written back over its old place under it again, unless
//! the block changed meanwhile. The writer thread holds the lock for the
//! copies alone (issue 34: no background hold of tens of microseconds).

use std::cmp::Reverse;

use super::config::{COMPACT_STEP, EVACUATE_BLOCKS, FILL, GENTLE_SWEEPS, MAX_SWEEPS, ROOM_BLOCKS};
use super::desc;
use super::flush::{BlockJob, Job, Sweep};
use super::large::{stub_of, RECORD_BIT};
use super::log::{self, NOWHERE};
use super::trie::range_end;
use super::zone::Zone;
use crate::block;
use crate::codec::Coder;
use crate::item;

/// The writer's next piece of background work, chosen under the zone's
/// lock ([`Zone::writer_step`]).
pub enum WriterStep {
    /// Nothing to do.
    Idle,
    /// Done under the lock (a step of a compaction, of an evacuation).
    Done,
    /// A job to run without the lock and finish under it.
    Job(Job),
}

impl Zone {
    /// The writer's next step, in this order: shrink towards the target,
    /// keep room ahead of the flushes, pack staged items, merge a block's
    /// deltas. `batched`: pack only a stage more than half full. A flush
    /// packs the staged items of one block, and a stage packed as soon as
    /// it holds anything gives it one or two: left to fill to half its
    /// limit, YCSB-B's flushes fell from 145,000 to 116,000 and the
    /// writer's CPU by a third (docs/benchmarks-history.md).
    pub fn writer_step(&mut self, now: u32, batched: bool) -> WriterStep {
        match self.shrink_step(now) {
            WriterStep::Idle => {}
            step => return step,
        }
        match self.room_step(now) {
            WriterStep::Idle => {}
            step => return step,
        }
        if batched && !self.stage_busy() {
            return WriterStep::Idle;
        }
        if let Some(job) = self.begin_flush(now) {
            return WriterStep::Job(job);
        }
        match self.merge_step(now) {
            Some(job) => WriterStep::Job(Job::Block(Box::new(job))),
            None if self.framed > 0 && self.stage.is_empty() => WriterStep::Done,
            None => WriterStep::Idle,
        }
    }

    /// The writer's step towards the zone's target: one page step if it
    /// is above it.
    pub fn shrink_step(&mut self, now: u32) -> WriterStep {
        if self.log.pages() <= self.target_pages {
            return WriterStep::Idle;
        }
        match self.shrink_next(false) {
            Some(force) => self.sweep_job(now, force),
            None => WriterStep::Done,
        }
    }

    /// The writer's step ahead of its flushes: keep room for a few blocks
    /// at the log's head, under the fill limit, so that a flush swapping
    /// its blocks in rarely sweeps or compacts while it holds the lock.
    /// One sweep, one step of a compaction or one page per call.
    pub fn room_step(&mut self, now: u32) -> WriterStep {
        let reserve = log::round(ROOM_BLOCKS * self.cfg.block_bytes);
        let page = self.log.page_size();
        if self.log.pages() == 0 || reserve + log::ALIGN > page {
            return WriterStep::Idle;
        }
        let allowed = (FILL * (self.log.pages() * page) as f64) as usize;
        let under = self.log.live_bytes() + reserve <= allowed;
        if self.log.compacting().is_some() {
            self.compact_step();
            return WriterStep::Done;
        }
        if self.log.head_room() >= reserve && under {
            return WriterStep::Idle;
        }
        if under {
            if let Some((p, live)) = self.log.roomiest() {
                if page - live >= reserve {
                    self.begin_compact(p);
                    self.compact_step();
                    return WriterStep::Done;
                }
            }
        }
        if self.block_items() == 0 {
            return WriterStep::Idle;
        }
        self.sweep_job(now, false)
    }

    fn sweep_job(&mut self, now: u32, force: bool) -> WriterStep {
        match self.begin_sweep(now, force) {
            Some(job) => WriterStep::Job(job),
            None => WriterStep::Done,
        }
    }

    /// Make `need` bytes of room at the log's head: a new page if one was
    /// granted and the zone is below its target, else compaction of the page with the most
    /// garbage, after the sweep has brought the live bytes under [`FILL`]
    /// of the pages. False if it cannot (no pages allowed).
    pub(super) fn make_room(&mut self, need: usize, now: u32) -> bool {
        let need = log::round(need);
        if need + log::ALIGN > self.log.page_size() {
            return false;
        }
        for round in 0..MAX_SWEEPS {
            if self.log.head_room() >= need {
                return true;
            }
            // The writer's compaction, a step at a time: done now.
            if self.finish_compaction() {
                continue;
            }
            if self.log.pages() == 0 {
                return false;
            }
            let allowed = (FILL * (self.log.pages() * self.log.page_size()) as f64) as usize;
            if self.log.live_bytes() + need <= allowed {
                if let Some((p, live)) = self.log.roomiest() {
                    if self.log.page_size() - live >= need {
                        self.compact(p);
                        continue;
                    }
                }
            }
            if self.block_items() == 0 && self.pending.is_empty() {
                // Nothing to evict: only garbage, all of it in the head.
                let p = self.log.roomiest().map(|(p, _)| p);
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

    /// Compact log page `p` in place, at once (a flush needs the room
    /// now); it becomes the head.
    pub(super) fn compact(&mut self, p: u32) {
        debug_assert!(self.log.compacting().is_none(), "finished first");
        self.begin_compact(p);
        self.finish_compaction();
    }

    /// Begin compacting log page `p` ([`Zone::compact_step`]).
    pub(super) fn begin_compact(&mut self, p: u32) {
        self.stats.compactions += 1;
        self.log.begin_compact(p);
    }

    /// Finish the compaction in progress, at once; false if there was none.
    fn finish_compaction(&mut self) -> bool {
        if self.log.compacting().is_none() {
            return false;
        }
        while !self.compact_step() {}
        true
    }

    /// Go on with the log's compaction (if one is in progress) by about
    /// [`COMPACT_STEP`] bytes; true once it is done.
    pub(super) fn compact_step(&mut self) -> bool {
        let (descs, records) = (&self.descs, &self.records);
        let mut moved = std::mem::take(&mut self.moved);
        let done = self.log.compact_step(
            COMPACT_STEP,
            |id, loc| match id & RECORD_BIT {
                0 => {
                    let d = descs.get(id as usize)?;
                    (d.loc == loc).then_some(d.stored as usize)
                }
                _ => records.at(id, loc),
            },
            &mut moved,
        );
        for (id, loc) in moved.drain(..) {
            match id & RECORD_BIT {
                0 => self.descs[id as usize].loc = loc,
                _ => self.records.moved(id, loc),
            }
        }
        self.moved = moved;
        done
    }

    /// The replacement sweep's next step (§3.2), at once (under the lock
    /// the caller holds): see [`Zone::begin_sweep`].
    pub fn sweep_one(&mut self, now: u32, force: bool) {
        if let Some(mut job) = self.begin_sweep(now, force) {
            job.run(&mut self.coder, &mut self.raw);
            let ok = self.finish_flush(job);
            debug_assert!(ok, "nothing can change a job under one lock hold");
        }
    }

    /// Step 1 of the replacement sweep's next step (§3.2): at the leaf
    /// under the hand, a job that does its pending removals, drops
    /// expired items, and evicts the cheaper half of the items the access
    /// filter does not name (all of them when `force`); the hand moves on.
    /// None if the leaf's block is empty (its filter is cleared).
    pub fn begin_sweep(&mut self, now: u32, force: bool) -> Option<Job> {
        self.stats.sweeps += 1;
        let (node, id) = self.trie.leaf_of(self.hand);
        self.hand = range_end(node).wrapping_add(1);
        let d = self.descs[id as usize];
        if d.count == 0 {
            self.descs[id as usize].access.clear();
            return None;
        }
        let mut job = self.job_for(node, id, None, now);
        // Written back in place: never split, whatever the capacity now.
        job.capacity = usize::MAX;
        job.sweep = Some(Sweep {
            force,
            access: d.access,
            gone: Vec::new(),
        });
        Some(Job::Block(Box::new(job)))
    }

    /// Step 3 of a sweep, once the job is known to be current
    /// (`Zone::finish_flush`): the evicted items leave, an item stored
    /// apart with its record, and the survivors are written over the old
    /// block, which they never outgrow unless compression did worse than
    /// before: then they go too.
    pub(super) fn finish_sweep(&mut self, job: &mut BlockJob) {
        let Some(sweep) = job.sweep.take() else {
            return;
        };
        // Those the pipe takes (flash: a copy into its stage, its lock, no
        // I/O) leave the zone without leaving the cache: no evictions. An
        // item stored apart goes whole (its record decoded here, under the
        // lock: with flash only), and its record is freed.
        let mut spilled = 0;
        let mut whole = std::mem::take(&mut self.packed);
        for &e in &sweep.gone {
            let image = desc::entry(&job.work, e);
            let stub = stub_of(image);
            let sent = match (self.spill.is_some(), stub) {
                (true, Some(s)) => {
                    self.read_record(s, item::key(image), &mut whole)
                        && self
                            .spill
                            .as_ref()
                            .is_some_and(|pipe| pipe.send(e.h, &whole))
                }
                (true, None) => self
                    .spill
                    .as_ref()
                    .is_some_and(|pipe| pipe.send(e.h, image)),
                (false, _) => false,
            };
            spilled += u64::from(sent);
            if !sent {
                self.note_evicted(e.h);
                self.tell_evicted(image);
            }
            if let Some(s) = stub {
                self.free_record(s);
            }
        }
        self.packed = whole;
        self.drop_items(sweep.gone.len() as u64 - spilled);
        self.stats.items -= spilled;
        self.stats.spilled += spilled;
        let id = job.id;
        let old = self.descs[id as usize];
        self.free_block(id);
        self.descs[id as usize].access.clear();
        let Some(o) = job.out.first().filter(|o| o.count > 0) else {
            return;
        };
        self.note_out(o);
        if log::round(o.packed.len()) > log::round(old.stored as usize) {
            self.drop_items(o.count as u64);
            self.tell_keys(&o.keys);
            for &s in &o.stubs {
                self.free_record(s);
            }
            return;
        }
        self.log.revive(old.loc, &o.packed);
        self.place(id, old.loc, o);
    }

    /// Shrink towards `target_pages` (the split moved towards the N-zone):
    /// sweep until the live bytes fit in one page fewer, then move the
    /// emptiest page's blocks to the others and give it back. At most
    /// `budget` steps; returns the steps taken.
    pub fn shrink(&mut self, now: u32, budget: usize) -> usize {
        let mut steps = 0;
        while self.log.pages() > self.target_pages && steps < budget {
            steps += 1;
            if let Some(force) = self.shrink_next(steps > GENTLE_SWEEPS) {
                self.sweep_one(now, force);
            }
        }
        steps
    }

    /// One step of [`Zone::shrink`] (above its target): done here, or a
    /// sweep it needs (`Some(force)`; `force` if `hard` or the last page
    /// must empty).
    fn shrink_next(&mut self, hard: bool) -> Option<bool> {
        if self.log.compacting().is_some() {
            // The page choices below pass the page being compacted by.
            self.compact_step();
            return None;
        }
        let page = self.log.page_size();
        let keep = self.log.pages() - 1;
        let allowed = (FILL * (keep * page) as f64) as usize;
        if self.log.live_bytes() > allowed && self.block_items() > 0 {
            return Some(hard);
        }
        let Some((p, _)) = self.log.emptiest() else {
            // One page left, the head: it goes once nothing lives in it
            // (a target of no pages).
            if self.log.live_bytes() == 0 || self.block_items() == 0 {
                // Staged items go with it (the stage is memory too).
                self.stats.evictions += self.stage.len() as u64;
                for image in self.stage.each_image() {
                    self.tell_evicted(image);
                }
                self.clear();
                return None;
            }
            return Some(true);
        };
        self.evacuate(p);
        None
    }

    /// Where the log entry `id` (a block, or a record: [`RECORD_BIT`])
    /// is, [`NOWHERE`] if it is gone.
    fn loc_of(&self, id: u32) -> u32 {
        match id & RECORD_BIT {
            0 => self.descs[id as usize].loc,
            _ => self
                .records
                .get(id & !RECORD_BIT)
                .map_or(NOWHERE, |r| r.loc),
        }
    }

    /// Block `id`'s items leave the cache (no room to move it), and the
    /// records its stubs name with them. Decoded, so that items already
    /// counted gone (known removals) are not counted again.
    pub(super) fn drop_block(&mut self, id: u32) {
        if self.load(id) {
            let raw = std::mem::take(&mut self.raw);
            // `load` checked every entry.
            for (h, image) in block::entries(&raw).into_iter().flatten().flatten() {
                match self.pending.remove(&h) {
                    Some(true) => {}
                    Some(false) => self.stats.items -= 1,
                    None => {
                        self.drop_items(1);
                        self.tell_evicted(image);
                    }
                }
                self.free_record_of(image);
            }
            self.raw = raw;
        } else {
            self.drop_items(self.descs[id as usize].count as u64);
            self.free_records_of(id);
        }
        self.free_block(id);
    }

    /// Move up to [`EVACUATE_BLOCKS`] of page `p`'s blocks to the head
    /// (compacting other pages for room); give `p` back once it is empty.
    /// A step at a time, so that the writer holds the zone's lock for a
    /// few blocks' copies, not a page's.
    pub(super) fn evacuate(&mut self, p: u32) {
        let (descs, records) = (&self.descs, &self.records);
        let blocks = self.log.blocks_of(p, |id, loc| match id & RECORD_BIT {
            0 => {
                let d = descs.get(id as usize)?;
                (d.loc == loc).then_some(d.stored as usize)
            }
            _ => records.at(id, loc),
        });
        let last = blocks.len() <= EVACUATE_BLOCKS;
        for (id, len) in blocks.into_iter().take(EVACUATE_BLOCKS) {
            // A record listed may have gone since, with a block dropped
            // before it for want of room (its stub was there).
            if self.loc_of(id) == NOWHERE {
                continue;
            }
            if self.log.head_room() < log::round(len) {
                self.finish_compaction();
            }
            if self.log.head_room() < log::round(len) {
                let other = self
                    .log
                    .emptiest_except(p)
                    .filter(|&(_, live)| self.log.page_size() - live >= log::round(len));
                match other {
                    Some((q, _)) => self.compact(q),
                    None if id & RECORD_BIT != 0 => {
                        // No room anywhere: the item stored apart goes
                        // (its stub reads as a miss until it is dropped).
                        self.orphan(id);
                        continue;
                    }
                    None => {
                        // No room anywhere: the block's items go.
                        self.drop_block(id);
                        continue;
                    }
                }
            }
            let at = self.loc_of(id);
            let bytes = self.log.read(at, len).to_vec();
            self.log.kill(at, len);
            let loc = self.log.append(id, &bytes).expect("room was made");
            match id & RECORD_BIT {
                0 => self.descs[id as usize].loc = loc,
                _ => self.records.moved(id, loc),
            }
        }
        if last {
            self.log.release(p);
        }
    }
}

impl BlockJob {
    /// Step 2 of a sweep, without the zone's lock: decode the block, drop
    /// what is removed or expired, choose the evictions, compress the rest.
    pub(super) fn run_sweep(&mut self, coder: &mut Coder, raw: &mut Vec<u8>) {
        let mut entries = std::mem::take(&mut self.entries);
        let dropped = self.gather(0, 0, &mut entries, coder, raw);
        self.dropped.add(dropped);
        let Some(sweep) = self.sweep.as_mut() else {
            return;
        };
        let work = &self.work;
        // The cheaper half first (GreedyDual's order, learned or client
        // costs), at least one; of equal costs the larger first, by the
        // bytes they free (an item stored apart: its whole image's): the
        // same miss frees more memory (GreedyDual-Size's cost per byte,
        // without the division the cost byte's log scale does not need).
        let mut cold: Vec<(u8, Reverse<usize>, usize)> = entries
            .iter()
            .enumerate()
            .filter(|(_, e)| sweep.force || !sweep.access.may_contain(e.h))
            .map(|(i, e)| {
                let image = desc::entry(work, *e);
                let bytes = stub_of(image).map_or(image.len(), |s| s.raw as usize);
                (item::cost_code(image), Reverse(bytes), i)
            })
            .collect();
        cold.sort_unstable();
        let mut gone: Vec<usize> = cold[..cold.len().div_ceil(2)].iter().map(|c| c.2).collect();
        gone.sort_unstable_by(|a, b| b.cmp(a));
        for i in gone {
            sweep.gone.push(entries.swap_remove(i));
        }
        let node = self.node;
        self.pack(node, entries, coder, raw);
    }
}
