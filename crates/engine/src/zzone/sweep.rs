//! Making room: the replacement sweep (§3.2), which evicts the cheaper
//! half of each block's items not read since it last passed (or hands
//! them down the zone's pipe); compaction of the log's pages; and
//! shrinking to a smaller target, a page at a time.

use super::config::{COMPACT_STEP, EVACUATE_BLOCKS, FILL, GENTLE_SWEEPS, MAX_SWEEPS, ROOM_BLOCKS};
use super::desc::{self, Entry};
use super::filter::Filter;
use super::large::{stub_of, RECORD_BIT};
use super::log::{self, NOWHERE};
use super::trie::{range_end, range_start, Node};
use super::zone::Zone;
use crate::block;
use crate::codec::Codec;
use crate::item;

impl Zone {
    /// The writer's step towards the zone's target: one page step if it
    /// is above it. False if it is not.
    pub fn shrink_step(&mut self, now: u32) -> bool {
        self.log.pages() > self.target_pages && self.shrink(now, 1) > 0
    }

    /// The writer's step ahead of its flushes: keep room for a few blocks
    /// at the log's head, under the fill limit, so that a flush swapping
    /// its blocks in rarely sweeps or compacts while it holds the lock.
    /// One sweep, one step of a compaction or one page per call; false if
    /// there was nothing to do.
    pub fn room_step(&mut self, now: u32) -> bool {
        let reserve = log::round(ROOM_BLOCKS * self.cfg.block_bytes);
        let page = self.log.page_size();
        if self.log.pages() == 0 || reserve + log::ALIGN > page {
            return false;
        }
        let allowed = (FILL * (self.log.pages() * page) as f64) as usize;
        let under = self.log.live_bytes() + reserve <= allowed;
        if self.log.compacting().is_some() {
            self.compact_step();
            return true;
        }
        if self.log.head_room() >= reserve && under {
            return false;
        }
        if under {
            if let Some((p, live)) = self.log.roomiest() {
                if page - live >= reserve {
                    self.begin_compact(p);
                    self.compact_step();
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
    pub(super) fn gather(&mut self, node: Node, id: u32, now: u32, entries: &mut Vec<Entry>) {
        if self.load(id) {
            let raw = std::mem::take(&mut self.raw);
            // `load` checked every entry.
            for (h, image) in block::entries(&raw).into_iter().flatten().flatten() {
                if let Some(known) = self.pending.remove(&h) {
                    if !known {
                        self.stats.items -= 1;
                    }
                    self.free_record_of(image);
                    continue;
                }
                let exp = item::exptime(image);
                if exp != 0 && exp <= now {
                    self.stats.items -= 1;
                    self.stats.expired += 1;
                    self.free_record_of(image);
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
            self.free_records_of(id);
        }
        // Removals of keys the block did not hold (filter false positives).
        let range = range_start(node)..=range_end(node);
        let stale: Vec<u64> = self.pending.range(range).map(|(&h, _)| h).collect();
        for h in stale {
            self.pending.remove(&h);
        }
        self.free_block(id);
    }

    pub(super) fn entry(&self, e: Entry) -> &[u8] {
        desc::entry(&self.work, e)
    }

    /// Write `entries` (a swept block's survivors) as block `id` (empty)
    /// over its old place (`loc`, `len`), where it fits unless compression
    /// did worse than before: then its items are evicted.
    pub(super) fn rewrite_in_place(
        &mut self,
        id: u32,
        entries: &mut [Entry],
        loc: u32,
        len: usize,
    ) {
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
        let (used, entropy, tried) = block::encode(
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
            for e in entries.iter() {
                if let Some(stub) = stub_of(desc::entry(&self.work, *e)) {
                    self.free_record(stub);
                }
            }
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

    /// The replacement sweep's next step (§3.2): at the leaf under the
    /// hand, do its pending removals, drop expired items, and evict the
    /// cheaper half of the items the access filter does not name (all of
    /// them when `force`), then clear the filter and move on. An item
    /// stored apart leaves with its record.
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
        let mut cold: Vec<(u8, std::cmp::Reverse<usize>, usize)> = entries
            .iter()
            .enumerate()
            .filter(|(_, e)| force || !d.access.may_contain(e.h))
            .map(|(i, e)| {
                let image = self.entry(*e);
                let freed = std::cmp::Reverse(self.freed_by(image));
                (item::cost_code(image), freed, i)
            })
            .collect();
        // The cheaper half first (GreedyDual's order, learned or client
        // costs), at least one; of equal costs the larger first, by the
        // bytes they free (a record's, for an item stored apart): the
        // same miss frees more memory (GreedyDual-Size's cost per byte,
        // without the division the cost byte's log scale does not need).
        cold.sort_unstable();
        let evict = cold.len().div_ceil(2);
        let mut gone: Vec<usize> = cold[..evict].iter().map(|c| c.2).collect();
        // Those the pipe takes (flash: a copy into its stage, its lock, no
        // I/O) leave the zone without leaving the cache: no evictions. An
        // item stored apart goes whole (its record decoded here, under the
        // lock, as the sweep decodes its blocks), and its record is freed.
        let mut spilled = 0;
        let mut whole = std::mem::take(&mut self.packed);
        for &i in &gone {
            let e = entries[i];
            let stub = stub_of(desc::entry(&self.work, e));
            let sent = match (self.spill.is_some(), stub) {
                (true, Some(s)) => {
                    let key = item::key(desc::entry(&self.work, e)).to_vec();
                    self.read_record(s, &key, &mut whole)
                        && self
                            .spill
                            .as_ref()
                            .is_some_and(|pipe| pipe.send(e.h, &whole))
                }
                (true, None) => self
                    .spill
                    .as_ref()
                    .is_some_and(|pipe| pipe.send(e.h, desc::entry(&self.work, e))),
                (false, _) => false,
            };
            spilled += u64::from(sent);
            if !sent {
                self.note_evicted(e.h);
            }
            if let Some(s) = stub {
                self.free_record(s);
            }
        }
        self.packed = whole;
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
            if self.log.compacting().is_some() {
                // The page choices below pass the page being compacted by.
                self.compact_step();
                continue;
            }
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
                    None => self.drop_items(1),
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
