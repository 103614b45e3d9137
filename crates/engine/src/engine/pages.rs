//! Moving pages between slab classes: the mechanics behind `slabs reassign`,
//! memcached's automove and the rebalancing rules of `crate::rebalance`.
//!
//! A page leaves a class by being *drained*: the page is taken off its
//! class's free lists (no new item is placed in its free chunks) and a
//! cursor walks its chunks, a bounded number per `Engine::maintain` call,
//! so no request ever waits behind a whole page (a 1 MB page of 40-byte
//! chunks holds 26 214 items). Each live item the cursor meets either moves
//! or goes:
//!
//! - a *hot* item (read since the CLOCK hand last passed it: its REF bit;
//!   under GD-Wheel also any item costlier than its class's average) moves
//!   to a free chunk of its class elsewhere, or else over the item the
//!   eviction policy would evict next in that class (its coldest, or under
//!   GD-Wheel its cheapest), which is evicted instead;
//! - any other item is evicted (memcached's `slab_reassign_evictions_nomem`),
//!   and remembered by the ghost set like every eviction.
//!
//! So a move costs the class its least valuable items, not whatever lived
//! on the page: Carra & Michiardi (`../shared/seeds/003_*`, end of section
//! 3.3) note that evicting a page's popular objects makes the miss count rise
//! more than predicted, and leave the reorganisation out because doing it at
//! once "would lock the resources for a longer time"; done incrementally it
//! does not. The page to drain is the class's least valuable one by a
//! sample of its chunks (live items weighted by cost, four times more when
//! hot), which also keeps the copying small.
//!
//! Items placed on the page while it drains can only land on chunks ahead of
//! the cursor (an eviction victim there frees its chunk for the new item;
//! chunks behind the cursor are empty and never handed out), so when the
//! cursor reaches the end the page is empty and changes class. `flush_all`
//! empties it at once; a synchronous page removal (`steal_page_for`,
//! `enforce_budget`) that picks it cancels the drain.

use super::Engine;
use crate::api::ReassignOutcome;
use crate::chain;
use crate::evict::Victim;
use crate::hash::hash;
use crate::item;
use crate::rebalance::drain::Drain;
use crate::rebalance::{ClassInfo, Plan};
use crate::slab::PageId;
use crate::zzone::split::DrainPace;

/// Where a hot item can go.
enum Rescue {
    Chunk(u64),
    /// Out of budget: keep it for the next call.
    Later,
    /// No chunk for it: it is evicted.
    Nowhere,
}

/// Extra work units a rescued item counts for in a drain budget.
const RESCUE_WORK: usize = 2;

/// Page headers scanned for hot items per unit of a drain's budget (a
/// header is a few nanoseconds, a vacated item a microsecond or so).
const SCAN_PER_WORK: usize = 16;

/// Chunks a store drains from the page in transit.
const DRAIN_PER_STORE: usize = 8;

/// Pages and chunks per page sampled to find the least valuable page.
const SAMPLE_PAGES: usize = 16;
const SAMPLE_CHUNKS: u32 = 64;

impl Engine {
    /// Whether pages may move on their own (`slab_reassign`, and
    /// `slab_automove` not 0: `slabs automove 0` pauses every rule).
    fn moves_allowed(&self) -> bool {
        self.config.slab_reassign && self.config.slab_automove != 0
    }

    /// The maintainer's part: begin a decision when the rule says so
    /// (returned, to be finished without the lock and queued with
    /// [`Engine::queue_moves`]), start a queued move, then drain at most
    /// `budget` chunks. Returns the chunks drained.
    pub(super) fn rebalance_step(&mut self, budget: usize) -> (usize, Option<Plan>) {
        let now = self.now();
        let mut plan = None;
        if self.drain.is_none() && self.moves_allowed() {
            if self.rebal.wants_decision(now, self.config.slab_automove) {
                let info = self.class_infos();
                let spare = !self.slabs.spare.is_empty() || self.can_add_page();
                plan = Some(self.rebal.begin_plan(now, &info, spare));
            }
            self.start_queued_move();
        }
        (self.drain_some(budget), plan)
    }

    /// Queue the moves of a decision begun by [`Engine::maintain_step`],
    /// and start the first if no page is in transit.
    pub fn queue_moves(&mut self, moves: Vec<(usize, usize)>) {
        self.rebal.queue_moves(moves);
        if self.drain.is_none() && self.moves_allowed() {
            self.start_queued_move();
        }
    }

    /// Start the next queued move; one whose donor lost its pages
    /// meanwhile is dropped.
    fn start_queued_move(&mut self) {
        while let Some((from, to)) = self.rebal.pop_move() {
            if self.start_drain(from, Some(to)) {
                break;
            }
        }
    }

    /// What the rules look at, per class.
    fn class_infos(&self) -> Vec<ClassInfo> {
        (0..self.slabs.classes.len())
            .map(|c| {
                let cl = &self.slabs.classes[c];
                let free = cl
                    .pages
                    .iter()
                    .filter_map(|&p| self.slabs.pages[p as usize].as_ref())
                    .map(|pg| pg.free_count as u64 + (pg.nchunks - pg.bump) as u64)
                    .sum();
                ClassInfo {
                    pages: cl.pages.len() as u32,
                    per_page: cl.per_page,
                    free_chunks: free,
                    evicted: cl.stats.evicted,
                    live_cost: self.policy.live_cost(c),
                    live_bytes: cl.used * cl.chunk_size as u64,
                }
            })
            .collect()
    }

    /// The chunks of `page` that [`Engine::page_value`] samples.
    fn sampled_chunks(&self, page: PageId) -> impl Iterator<Item = u32> {
        let (step, bump) = self.slabs.pages[page as usize]
            .as_ref()
            .map_or((1, 0), |pg| ((pg.nchunks / SAMPLE_CHUNKS).max(1), pg.bump));
        (step / 2..bump).step_by(step as usize)
    }

    /// Value of keeping a page's items, estimated from a sample of chunks:
    /// under CLOCK each live item counts its cost, four times when hot;
    /// under GD-Wheel its GreedyDual credit (H - L) plus one.
    fn page_value(&self, page: PageId, class: usize) -> u64 {
        let mut value = 0u64;
        for c in self.sampled_chunks(page) {
            // A sample without the items' stripes (`crate::stripe`).
            let loc = self.slabs.loc(page, c);
            let bits = self.slabs.bits(loc);
            if bits & item::LIVE != 0 {
                value += match self.policy.credit(&self.slabs, class, loc) {
                    Some(credit) => credit + 1,
                    None => {
                        let q = self.slabs.cost_code(loc);
                        let cost = item::dequantize_cost(q).max(1) as u64;
                        if bits & item::REF != 0 {
                            4 * cost
                        } else {
                            cost
                        }
                    }
                };
            }
        }
        value
    }

    /// The page of `class` to drain: the least valuable of a spread of up
    /// to `SAMPLE_PAGES` pages (ties: the emptiest), avoiding `avoid`.
    /// Every sample's header line is requested before any is read: read
    /// one after another, the cold lines of 16 pages' samples took 31-60 µs
    /// of a drain's start, under the engine lock (issue 34 wants a hold
    /// under 20 µs).
    fn least_valuable_page(&self, class: usize, avoid: Option<PageId>) -> Option<PageId> {
        let pages = &self.slabs.classes[class].pages;
        let n = pages.len();
        let step = n.div_ceil(SAMPLE_PAGES).max(1);
        let candidates = || {
            (0..n)
                .step_by(step)
                .map(|i| pages[i])
                .filter(|&p| Some(p) != avoid)
        };
        for p in candidates() {
            for c in self.sampled_chunks(p) {
                self.slabs.arena.prefetch_line(p, c);
            }
        }
        candidates().min_by_key(|&p| {
            let used = self.slabs.pages[p as usize]
                .as_ref()
                .map_or(0, |pg| pg.bump - pg.free_count);
            (self.page_value(p, class), used)
        })
    }

    /// Whether the live item at `loc` is worth keeping when its page
    /// moves: under CLOCK, read since the hand last passed (REF); under
    /// GD-Wheel, any credit left (H > L: it is not next in line, so the
    /// class's victim is worth less).
    #[inline]
    fn is_hot(&self, loc: u64, class: usize) -> bool {
        match self.policy.credit(&self.slabs, class, loc) {
            Some(credit) => credit > 0,
            None => self.slabs.bits(loc) & item::REF != 0,
        }
    }

    /// Begin moving a page of class index `from` to `to` (None: the pool
    /// of unassigned pages) without waiting: `maintain` drains it. False
    /// when a move is already running or `from` has fewer than two pages.
    pub fn start_page_move(&mut self, from: usize, to: Option<usize>) -> bool {
        let n = self.slabs.classes.len();
        if from >= n || to.is_some_and(|t| t >= n || t == from) {
            return false;
        }
        if self.slabs.classes[from].pages.len() < 2 {
            return false;
        }
        self.start_drain(from, to)
    }

    /// Begin moving a page of `from` to `to` (None: the unassigned pool).
    pub(super) fn start_drain(&mut self, from: usize, to: Option<usize>) -> bool {
        // The rules keep a class's last page unless it is idle.
        if self.drain.is_some() || self.slabs.classes[from].pages.is_empty() {
            return false;
        }
        // No thread may keep a chunk of the page (`magazine`); refills
        // take no chunk of it while it drains (it is off `with_free`).
        self.take_back_reserved();
        let Some(page) = self.least_valuable_page(from, None) else {
            return false;
        };
        // Off the free lists: `Slabs::free` only re-lists unlisted pages.
        self.slabs.classes[from].with_free.retain(|&p| p != page);
        self.slabs.page_mut(page).listed = true;
        let bump = self.slabs.page_mut(page).bump;
        self.drain = Some(Drain {
            page,
            from,
            to,
            next: 0,
            hot: vec![0u64; (bump as usize).div_ceil(64)].into_boxed_slice(),
            scanned: 0,
            nomem: false,
        });
        true
    }

    /// Drain up to `budget` chunks of the page in transit; hand it over
    /// when empty. Returns the chunks looked at.
    fn drain_some(&mut self, budget: usize) -> usize {
        // Drained items are demoted: no faster than the Z-zone's writer
        // packs them, or the stores would pack them under the engine lock.
        let pace = match self.drain {
            Some(_) => self.drain_pace(),
            None => DrainPace::Go,
        };
        if pace == DrainPace::Wait {
            return 0;
        }
        let done = self.drain_chunks(budget);
        // Items demoted to the Z-zone may have grown it.
        self.enforce_budget(None);
        done
    }

    fn drain_chunks(&mut self, budget: usize) -> usize {
        let Some(mut d) = self.drain.take() else {
            return 0;
        };
        let bump = self.slabs.page_mut(d.page).bump;
        let budget = budget.max(1);
        // First the page's hot items, remembered before any leaves.
        if d.scanned < bump {
            let n = budget.saturating_mul(SCAN_PER_WORK).min(u32::MAX as usize) as u32;
            let end = bump.min(d.scanned.saturating_add(n));
            let mut c = d.scanned;
            while c < end {
                let loc = self.slabs.loc(d.page, c);
                if self.slabs.bits(loc) & item::LIVE != 0 && self.is_hot(loc, d.from) {
                    d.hot[c as usize / 64] |= 1 << (c % 64);
                }
                c += 1;
                // The clock every 64 chunks: a scan of 1,024 took 17 µs.
                if c % 64 == 0 && self.slice_over() {
                    break;
                }
            }
            d.scanned = c;
            self.drain = Some(d);
            return budget;
        }
        // Work: chunks the cursor passes plus victims a rescue evicts, and
        // items demoted (a copy into the Z-zone's stage, its lock).
        let mut work = 0usize;
        let start = d.next;
        let moved_before = self.counters.reassign_evictions;
        while d.next < bump && work < budget {
            let loc = self.slabs.loc(d.page, d.next);
            let bits = self.slabs.bits(loc);
            if bits & item::LIVE != 0 {
                let hot = Some(d.was_hot(d.next));
                let mut left = budget - work;
                let (rescues, demotions) = (self.counters.rescues, self.counters.demotions);
                let gone = self.vacate(loc, d.from, d.page, hot, &mut left);
                work = budget - left;
                if !gone {
                    // Out of budget while finding it a chunk: next call.
                    break;
                }
                // A rescue (a victim's eviction, a copy, the index and the
                // policy relinked) costs about three plain evictions, a
                // demotion as much.
                work += RESCUE_WORK * (self.counters.rescues - rescues) as usize;
                work += RESCUE_WORK * (self.counters.demotions - demotions) as usize;
                // The maintainer's hold has had its time: the rest later.
                if self.slice_over() {
                    work = work.max(budget);
                }
            } else if bits == item::SEGMENT {
                self.evict_owner(loc, d.from);
            }
            d.next += 1;
            work += 1;
        }
        if d.nomem {
            self.count_as_evictions(moved_before, d.from);
        }
        let done = work.max((d.next - start) as usize);
        let end = d.next;
        if end < bump {
            self.drain = Some(d);
            return done;
        }
        // Nothing can be live behind the cursor; check before handing over.
        if !self.slabs.live_in_page(d.page).is_empty()
            || !self.slabs.segments_in_page(d.page).is_empty()
        {
            debug_assert!(false, "live item behind the drain cursor");
            d.next = 0;
            self.drain = Some(d);
            return done;
        }
        self.hand_over(&d);
        done.max(1)
    }

    /// Give the emptied page of drain `d` to its class (or the pool), with
    /// the stats (a drain for memory is no move: see [`Drain::nomem`]).
    fn hand_over(&mut self, d: &Drain) {
        let (page, from, to) = (d.page, d.from, d.to);
        self.slabs.unassign(page);
        // A class taken below its floor gives back the allowance its floor
        // was granted (`Engine::allowance`): page moves never grow memory.
        if self.slabs.classes[from].pages.len() < self.floor_pages(from) {
            self.granted = self.granted.saturating_sub(1);
        }
        match to {
            Some(to) => {
                self.slabs.assign(page, to);
                self.slabs.classes[to].stats.pages_in += 1;
                self.rebal.grew(to);
            }
            None if self.page_for_zone(page) => {}
            None => self.slabs.spare.push(page),
        }
        self.slabs.classes[from].stats.pages_out += 1;
        if !d.nomem {
            self.counters.slabs_moved += 1;
        }
    }

    /// Stores help the maintainer: each drains a few chunks, so a page
    /// moves in step with the traffic that needs it (a few microseconds
    /// per store while a page is in transit, nothing otherwise). Not while
    /// the Z-zone's lock is taken: its drained items would be demoted, and
    /// the store would wait for the writer holding the engine lock, and
    /// every request behind it (`benches/fill-tail.sh`); a later store or
    /// the maintainer drains them.
    pub(super) fn drain_on_store(&mut self) {
        if self.zone.as_ref().is_some_and(|z| z.zone.is_locked()) {
            return;
        }
        self.drain_some(DRAIN_PER_STORE);
    }

    /// Run the drain in progress to its end (`slabs reassign`, tests).
    pub(super) fn finish_drain(&mut self) {
        while self.drain.is_some() {
            self.drain_chunks(usize::MAX);
            self.enforce_budget(None);
        }
    }

    /// Stop moving the page in transit out of `class`: it stays, with the
    /// chunks drained so far free. False if no page of `class` is in
    /// transit.
    pub(super) fn call_off_drain(&mut self, class: usize) -> bool {
        if self.drain.as_ref().is_none_or(|d| d.from != class) {
            return false;
        }
        if let Some(d) = self.drain.take() {
            self.slabs.call_off_move(d.page, d.next);
        }
        true
    }

    /// `flush_all` emptied every page: the page in transit moves now.
    pub(super) fn drain_after_flush(&mut self) {
        if let Some(d) = self.drain.take() {
            self.slabs.classes[d.from]
                .with_free
                .retain(|&p| p != d.page);
            self.hand_over(&d);
        }
    }

    /// Take the live item at `loc` (class `class`, on `page`, which is being
    /// emptied) off the page: move it to a free chunk of its class if there
    /// is one, else to a victim's chunk if it is hot, else evict it.
    /// `rescue`: None takes no victim; Some(was_hot): items hot now or then
    /// may.
    /// `budget`: victims the rescue may evict on the page itself; when it
    /// runs out the item stays (false: try again later).
    fn vacate(
        &mut self,
        loc: u64,
        class: usize,
        page: PageId,
        rescue: Option<bool>,
        budget: &mut usize,
    ) -> bool {
        self.hold_item(loc);
        let exp = item::exptime(self.slabs.chunk(loc));
        if exp != 0 && exp <= self.now() {
            self.unlink(loc);
            return true;
        }
        // A chained item with a segment on this page leaves with the page
        // anyway (`evict_owner`): rescuing its head would only evict another
        // item for nothing.
        let leaves_anyway = chain::is_head(self.slabs.chunk(loc))
            && chain::segment_locs(&self.slabs, loc)
                .iter()
                .any(|&s| self.slabs.split(s).0 == page);
        let hot = match rescue {
            None => false,
            Some(_) if leaves_anyway => false,
            Some(was_hot) => was_hot || self.is_hot(loc, class),
        };
        // Every item that can go to a free chunk of its class goes there,
        // as in memcached (`slab_rebalance_move`): that loses nothing. Only
        // a hot one may take a victim's chunk instead.
        let dst = if hot {
            match self.rescue_chunk(loc, class, page, budget) {
                Rescue::Chunk(dst) => Some(dst),
                Rescue::Later => return false,
                Rescue::Nowhere => None,
            }
        } else if leaves_anyway {
            None
        } else {
            self.slabs.take_free(class)
        };
        if let Some(dst) = dst {
            self.move_item(loc, dst, class);
            self.counters.rescues += 1;
            return true;
        }
        if !self.note_evicted(loc, class) {
            self.counters.reassign_evictions += 1;
        }
        self.unlink(loc);
        true
    }

    /// A chunk of `class` off `page` for the item at `loc`: a free one, or
    /// that of the class's next eviction victim (evicted here). Victims on
    /// the page itself are evicted on the way (they were leaving anyway;
    /// CLOCK's hand may be sweeping the page), each taking one unit of
    /// `budget`.
    fn rescue_chunk(&mut self, loc: u64, class: usize, page: PageId, budget: &mut usize) -> Rescue {
        if let Some(free) = self.slabs.take_free(class) {
            return Rescue::Chunk(free);
        }
        let now = self.now();
        loop {
            if *budget == 0 {
                return Rescue::Later;
            }
            let Some(victim) = self.policy.victim(&mut self.slabs, class, now, Some(loc)) else {
                return Rescue::Nowhere;
            };
            match victim {
                // Freed, not only unlinked: the chunk is ahead of the
                // cursor, and until the cursor passes it the page must
                // account for it (the page is off the free lists, so it is
                // not handed out).
                Victim::Expired(v) if self.slabs.split(v).0 == page => {
                    *budget -= 1;
                    self.unlink(v);
                    self.slabs.free(v);
                }
                Victim::Evicted(v) if self.slabs.split(v).0 == page => {
                    *budget -= 1;
                    if !self.note_evicted(v, class) {
                        self.counters.reassign_evictions += 1;
                    }
                    self.unlink(v);
                    self.slabs.free(v);
                }
                // Renewed in place since the policy looked (`Engine::alloc`).
                Victim::Expired(v) if !self.still_expired(v, now) => {
                    self.evict_victim(v, class, now);
                    return Rescue::Chunk(v);
                }
                Victim::Expired(v) => {
                    self.unlink(v);
                    self.counters.reclaimed += 1;
                    self.slabs.classes[class].stats.reclaimed += 1;
                    return Rescue::Chunk(v);
                }
                Victim::Evicted(v) => {
                    self.evict_victim(v, class, now);
                    return Rescue::Chunk(v);
                }
            }
        }
    }

    /// Copy the item at `from` into the free chunk `to` of the same class
    /// and point the index and the eviction policy at it.
    fn move_item(&mut self, from: u64, to: u64, class: usize) {
        let mut tmp = std::mem::take(&mut self.scratch);
        tmp.clear();
        tmp.extend_from_slice(self.slabs.chunk(from));
        self.slabs.chunk_mut(to).copy_from_slice(&tmp);
        let h = hash(item::key(&tmp));
        self.scratch = tmp;
        self.index_mut(h, |ix, _| ix.relocate(h, from, to));
        self.policy.relocate(&mut self.slabs, class, from, to);
        item::set_bits(self.slabs.chunk_mut(from), 0);
        if chain::is_head(self.slabs.chunk(to)) {
            for s in chain::segment_locs(&self.slabs, to) {
                chain::set_owner(self.slabs.chunk_mut(s), to);
            }
        }
    }

    /// Tell the rebalancer that the item at `loc` leaves by eviction (the
    /// ghost set remembers its key), and demote it to the Z-zone if there
    /// is one: true if it is kept there (then it is no eviction from the
    /// cache). Call before unlinking it.
    pub(super) fn note_evicted(&mut self, loc: u64, class: usize) -> bool {
        self.hold_item(loc);
        let chunk = self.slabs.chunk(loc);
        let size = chunk.len();
        let h = if self.rebal.wants_keys() {
            hash(item::key(chunk))
        } else {
            0
        };
        self.rebal.evicted(h, class, size);
        let demoted = self.demote(loc);
        if let (false, Some(tap)) = (demoted, &self.tap) {
            tap.evicted(item::key(self.slabs.chunk(loc)));
        }
        demoted
    }

    /// Remove every item of a page now, as `vacate` does: to free chunks of
    /// the class, hot ones over victims when `rescue` (synchronous: memory
    /// shrinking, a class with no page at all). A drain of the same page is
    /// cancelled: the page is empty afterwards.
    pub(super) fn empty_page(&mut self, page: PageId, rescue: bool) {
        self.take_back_reserved();
        let class = self.slabs.page_mut(page).class as usize - 1;
        if self.drain.as_ref().is_some_and(|d| d.page == page) {
            self.drain = None;
        }
        // Keep the page's own free chunks from being used as rescue targets.
        self.slabs.classes[class].with_free.retain(|&p| p != page);
        self.slabs.page_mut(page).listed = true;
        let mut unlimited = usize::MAX;
        for loc in self.slabs.live_in_page(page) {
            // A rescue may evict (and so free) a chunk of this page that
            // the list still names.
            if self.slabs.is_live(loc) {
                self.vacate(loc, class, page, rescue.then_some(false), &mut unlimited);
            }
        }
        for loc in self.slabs.segments_in_page(page) {
            if self.slabs.bits(loc) == item::SEGMENT {
                self.evict_owner(loc, class);
            }
        }
    }

    /// A page that leaves its class holds a segment of a chained item
    /// (whose head is elsewhere): the item is evicted, all its chunks freed.
    fn evict_owner(&mut self, seg: u64, class: usize) {
        let head = chain::owner(self.slabs.chunk(seg));
        if !self.note_evicted(head, class) {
            self.counters.reassign_evictions += 1;
        }
        self.unlink(head);
        self.slabs.free(head);
    }

    /// Take a page from the class with the most pages (its least valuable
    /// one) and give it to `class`, which has no page or nothing to evict.
    /// Its items are evicted; this runs inside a store, so it is the one
    /// move that is not incremental (a class gets its first page this way).
    pub(super) fn steal_page_for(&mut self, class: usize, protect: Option<u64>) -> bool {
        // A donor keeps its floor (`Engine::floor_pages`): taking a class's
        // last page would only start a chain of steals, pages ping-ponging
        // between classes, each steal evicting a page; a class below its
        // floor gets a page beyond `-m` instead (`chunk_of_class`).
        let donor = (0..self.slabs.classes.len())
            .filter(|&c| c != class && self.slabs.classes[c].pages.len() > self.floor_pages(c))
            .max_by_key(|&c| self.slabs.classes[c].pages.len());
        let Some(donor) = donor else { return false };
        let protected_page = protect.map(|l| self.slabs.split(l).0);
        let Some(page) = self.least_valuable_page(donor, protected_page) else {
            return false;
        };
        self.empty_page(page, false);
        self.slabs.unassign(page);
        self.slabs.assign(page, class);
        self.rebal.grew(class);
        self.counters.slabs_moved += 1;
        self.slabs.classes[donor].stats.pages_out += 1;
        self.slabs.classes[class].stats.pages_in += 1;
        true
    }

    /// The page of `class` at its CLOCK hand (its oldest items), avoiding the
    /// pages in `keep`.
    pub(super) fn pick_page(&self, class: usize, keep: &[PageId]) -> Option<PageId> {
        let c = &self.slabs.classes[class];
        let n = c.pages.len();
        (0..n)
            .map(|i| c.pages[(c.hand_page + i) % n])
            .find(|p| !keep.contains(p))
    }

    /// The pages that hold the item at `loc`: its head's and, for a chained
    /// item, its segments'.
    pub(super) fn pages_of_item(&self, loc: u64) -> Vec<PageId> {
        let mut pages = vec![self.slabs.split(loc).0];
        if chain::is_head(self.slabs.chunk(loc)) {
            for s in chain::segment_locs(&self.slabs, loc) {
                let p = self.slabs.split(s).0;
                if !pages.contains(&p) {
                    pages.push(p);
                }
            }
        }
        pages
    }

    /// `slabs reassign <src> <dst>` with memcached's rules and replies: class
    /// 0 is the pool of pages that belong to no class, -1 as source picks one.
    /// BUSY while a page is in transit, as memcached. The move runs to its
    /// end before the reply (one page: an operator's command).
    pub fn slabs_reassign(&mut self, src: i32, dst: i32) -> ReassignOutcome {
        let n = self.slabs.classes.len() as i32;
        // A page draining because memory is a little over `-m` (less
        // than a page: `Engine::enforce_budget`) is the engine's own
        // housekeeping, not a move the operator asked for: it is finished
        // here rather than answered BUSY.
        if self.drain.as_ref().is_some_and(|d| d.nomem) {
            self.finish_drain();
        }
        if !self.config.slab_reassign || self.drain.is_some() {
            return ReassignOutcome::Busy;
        }
        if src == dst {
            return ReassignOutcome::Same;
        }
        let src = if src == -1 {
            match (0..n as usize)
                .filter(|&c| c as i32 + 1 != dst && self.slabs.classes[c].pages.len() >= 2)
                .max_by_key(|&c| self.slabs.classes[c].pages.len())
            {
                Some(c) => c as i32 + 1,
                None => return ReassignOutcome::NoSpare,
            }
        } else {
            src
        };
        if !(0..=n).contains(&src) || !(0..=n).contains(&dst) {
            return ReassignOutcome::BadClass;
        }
        let pages = |c: i32| match c {
            0 => self.slabs.spare.len(),
            c => self.slabs.classes[(c - 1) as usize].pages.len(),
        };
        if pages(src) < 2 {
            return ReassignOutcome::NoSpare;
        }
        if src == 0 {
            if let Some(p) = self.slabs.spare.pop() {
                self.slabs.assign(p, (dst - 1) as usize);
                self.slabs.classes[(dst - 1) as usize].stats.pages_in += 1;
                self.rebal.grew((dst - 1) as usize);
                self.counters.slabs_moved += 1;
            }
            return ReassignOutcome::Ok;
        }
        let to = (dst > 0).then_some((dst - 1) as usize);
        if self.start_drain((src - 1) as usize, to) {
            self.finish_drain();
        }
        ReassignOutcome::Ok
    }

    pub fn set_automove(&mut self, mode: u8) {
        self.config.slab_automove = mode;
    }

    /// A page in transit: (page, from class, to class or None, cursor).
    pub fn page_in_transit(&self) -> Option<(PageId, usize, Option<usize>, u32)> {
        self.drain.as_ref().map(|d| (d.page, d.from, d.to, d.next))
    }
}

#[cfg(any(test, feature = "testing"))]
impl Engine {
    /// Invariants of the page in transit (`validate`).
    pub(super) fn validate_drain(&self) {
        let Some(d) = &self.drain else { return };
        let c = &self.slabs.classes[d.from];
        assert!(
            c.pages.contains(&d.page),
            "draining page belongs to its class"
        );
        assert!(
            !c.with_free.contains(&d.page),
            "draining page is off the free list"
        );
        for loc in self.slabs.live_in_page(d.page) {
            assert!(
                self.slabs.split(loc).1 >= d.next,
                "live item behind the cursor"
            );
        }
        for loc in self.slabs.segments_in_page(d.page) {
            assert!(
                self.slabs.split(loc).1 >= d.next,
                "segment behind the cursor"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::clock::Clock;
    use crate::{Config, Engine, Store};

    /// Refills that evict victims of a class with a page in transit never
    /// reserve a chunk of that page, and the page moves with none held.
    #[test]
    fn a_refill_reserves_no_chunk_of_the_page_in_transit() {
        let config = Config {
            memory_limit: 4 << 20,
            ..Config::default()
        };
        let mut e = Engine::new(config, Arc::new(Clock::new())).unwrap();
        let value = [b'v'; 200];
        for i in 0..40_000u32 {
            e.store(&Store::set(format!("key:{i:06}").as_bytes(), &value));
        }
        let key = b"key:039999";
        let loc = e.find(key, crate::hash::hash(key)).expect("stored");
        let class = e.slabs.class_of(loc);
        assert!(e.slabs.classes[class].pages.len() >= 2, "a class of pages");
        assert!(e.start_drain(class, None));
        let page = e.drain.as_ref().map(|d| d.page).expect("a page in transit");
        // Enough refills for CLOCK's hand to pass every page of the class.
        let chunks = e.slabs.classes[class].pages.len() * (1 << 20) / 200;
        let slot = e.stripes.my_slot().expect("a slot for this thread");
        let mut reserved = 0;
        while reserved < 2 * chunks && e.drain.is_some() {
            let got = e.refill(slot, class, 64);
            for (_, loc) in e.magazines.reserved(slot + 1) {
                assert_ne!(
                    e.slabs.split(loc).0,
                    page,
                    "a reserved chunk of the page in transit"
                );
            }
            e.take_back_reserved();
            reserved += got.max(1);
        }
        e.validate();
        e.finish_drain();
        e.validate();
    }
}
