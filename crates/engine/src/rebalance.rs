//! Rebalancing: which slab class gets the next page (`-o rebalance=`).
//!
//! memcached cuts memory into 1 MB pages and gives each page to one slab
//! class for good; when the popular sizes change, the classes that now need
//! memory cannot get it ("calcification"). cachalot moves pages on-line, by
//! one of four rules (`RebalancePolicy`):
//!
//! - `memcached`: memcached's automove ([`automove`]), the conservative
//!   baseline: a page only leaves a class that evicts nothing and has a
//!   page's worth of free chunks.
//! - `sas`: Carra & Michiardi's Slab Allocation Scheme
//!   (`../shared/seeds/003_*`, section 3.3, Algorithm 3; [`sas`]): every M
//!   capacity misses, a page goes from the class with the smallest
//!   `(m_i/r_i)/s_i` to the class with the largest cost-weighted capacity
//!   misses `m_i`. Capacity misses are told from compulsory ones by a ghost
//!   set of recently evicted keys ([`ghost`]).
//! - `cost-per-byte`: GD-Wheel's rule (`../shared/seeds/001_*`, chapter
//!   5.2; [`cpb`]): evictions in a class worth more per byte pull pages from
//!   the class worth least per byte.
//! - `mrc` (the default): Carra & Michiardi's offline optimum (section 3.2,
//!   Algorithm 2) computed on-line ([`mrc`]) from per-class LRU stack
//!   distances of a spatial sample of the keys ([`profile`]), pages moved
//!   towards it: every class's whole hit curve, not just its next page, so
//!   pages follow a shift in the popular sizes as it happens.
//!
//! This module decides; the engine moves (`engine/pages.rs`): a page is
//! drained a bounded number of chunks per maintenance call, its hot items
//! rescued into free chunks or over colder items of the class, so a move
//! never stalls the server.
//!
//! The engine tells the rebalancer about GET misses, hits, new items and
//! evictions through the `#[inline]` hooks below; each is O(1) and does
//! nothing the selected rule does not need (with `off`, `memcached` and
//! `cost-per-byte` a hit costs one branch; with `mrc`, a compare of 24
//! hash bits, and more for the sampled keys only).
//!
//! Memory: the ghost set (about 1/256 of `-m`, at most 16 MB) and a 4 KB
//! table of pending miss costs exist only with `sas`, the sampled stacks (at
//! most 1/256 of `-m`, at least 256 KB unless that is over 1/32 of it) only
//! with `mrc`; the engine counts them in `-m` (`memory_bytes`).

pub mod automove;
pub mod cpb;
pub(crate) mod drain;
pub mod ghost;
pub mod mrc;
pub mod profile;
pub mod sas;
pub mod tuning;

use crate::clock::RelTime;
use crate::config::RebalancePolicy;
use automove::{Automove, AutomoveClass};
use cpb::{ClassValue, CostPerByte};
use ghost::GhostSet;
use profile::{Curve, Profile};

/// Which GETs the rebalancer must see (its `hit` and `miss`), so which the
/// lock-free GET path (`crate::Cache::get`) hands to the engine.
#[derive(Clone, Debug)]
pub enum HitGate {
    /// None: no rule that counts GETs.
    Nothing,
    /// Those of keys in the MRC profile's sample, by the published
    /// threshold (`profile::is_sampled`).
    Sampled(std::sync::Arc<std::sync::atomic::AtomicU64>),
    /// All (SAS counts every hit, its ghost set every miss).
    Everything,
}
use sas::Sas;

pub use sas::SasRule;
pub use tuning::Tuning;

/// Per-class counters for `stats slabs`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassCounts {
    /// GET misses on keys this class evicted within the ghost's window.
    pub capacity_misses: u64,
    /// Their cost (that of the SET that refilled them).
    pub cost_capacity_misses: u64,
}

/// What a decision looks at, per class (filled by the engine).
#[derive(Clone, Copy, Debug, Default)]
pub struct ClassInfo {
    pub pages: u32,
    pub per_page: u32,
    pub free_chunks: u64,
    pub evicted: u64,
    pub live_cost: u64,
    /// Memory of the live items (chunks).
    pub live_bytes: u64,
}

/// Pending capacity misses waiting for the SET that tells their cost:
/// direct-mapped, 16-bit tag, class, valid bit.
const PENDING: usize = 1024;

/// A decision begun under the engine lock ([`Rebalancer::begin_plan`]),
/// to be finished with [`Plan::moves`] without it.
pub enum Plan {
    /// Decided already.
    Moves(Vec<(usize, usize)>),
    /// Algorithm 2 over these curves (`bin` pages a bin) and the classes'
    /// pages now.
    Mrc {
        curves: Vec<Curve>,
        bin: u32,
        pages: Vec<u32>,
    },
}

impl Plan {
    /// The moves (from, to), in order.
    pub fn moves(self) -> Vec<(usize, usize)> {
        match self {
            Plan::Moves(m) => m,
            Plan::Mrc { curves, bin, pages } => mrc::decide(&curves, bin, &pages),
        }
    }
}

pub struct Rebalancer {
    policy: RebalancePolicy,
    ghost: Option<GhostSet>,
    pending: Box<[u32]>,
    counts: Vec<ClassCounts>,
    sas: Option<Sas>,
    cpb: Option<CostPerByte>,
    profile: Option<Profile>,
    mrc_period: u64,
    automove: Automove,
    costs: Box<[u32; 256]>,
    /// Moves decided so far.
    pub decisions: u64,
    /// Moves decided and not started yet (a page moves at a time).
    queue: std::collections::VecDeque<(usize, usize)>,
}

impl Rebalancer {
    /// `per_page`: items per page of each class.
    pub fn new(
        policy: RebalancePolicy,
        tuning: &Tuning,
        per_page: &[u32],
        memory_limit: usize,
        page_size: usize,
    ) -> Rebalancer {
        let nclasses = per_page.len();
        let sas = policy == RebalancePolicy::Sas;
        let ghost_bytes = match tuning.ghost_bytes {
            0 => GhostSet::bytes_for(per_page, tuning.ghost_pages)
                .min((memory_limit / 256).clamp(64 << 10, 16 << 20)),
            b => b,
        };
        let mut costs = Box::new([0u32; 256]);
        for (q, c) in costs.iter_mut().enumerate() {
            *c = crate::item::dequantize_cost(q as u8);
        }
        Rebalancer {
            policy,
            ghost: sas.then(|| GhostSet::new(per_page, tuning.ghost_pages, ghost_bytes)),
            pending: if sas {
                vec![0; PENDING].into_boxed_slice()
            } else {
                Box::default()
            },
            counts: vec![ClassCounts::default(); nclasses],
            sas: sas.then(|| {
                Sas::new(
                    nclasses,
                    tuning.sas_misses,
                    tuning.sas_decay,
                    tuning.sas_rule,
                )
            }),
            cpb: (policy == RebalancePolicy::CostPerByte)
                .then(|| CostPerByte::new(nclasses, page_size)),
            profile: (policy == RebalancePolicy::Mrc).then(|| {
                // A budget that stays a small share of small caches too.
                let bytes = match tuning.mrc_bytes {
                    0 => (memory_limit / 256)
                        .clamp(256 << 10, 16 << 20)
                        .min(memory_limit / 32),
                    b => b,
                };
                Profile::new(per_page, (memory_limit / page_size.max(1)) as u32, bytes)
            }),
            mrc_period: tuning.mrc_period.max(1),
            automove: Automove::new(nclasses),
            costs,
            decisions: 0,
            queue: Default::default(),
        }
    }

    pub fn policy(&self) -> RebalancePolicy {
        self.policy
    }

    /// Memory held outside the pages (counted in `-m` by the engine).
    pub fn memory_bytes(&self) -> usize {
        self.ghost.as_ref().map_or(0, GhostSet::memory_bytes)
            + self.pending.len() * 4
            + self.profile.as_ref().map_or(0, Profile::memory_bytes)
    }

    /// Keys the ghost set can hold (0 without one).
    pub fn ghost_capacity(&self) -> usize {
        self.ghost.as_ref().map_or(0, GhostSet::capacity)
    }

    #[inline]
    fn pending_slot(h: u64) -> (usize, u32) {
        ((h >> 40) as usize % PENDING, (h >> 16) as u32 & 0xffff)
    }

    /// What a GET outside the engine lock must leave to it (see
    /// [`HitGate`]).
    pub fn hit_gate(&self) -> HitGate {
        match (&self.sas, &self.ghost, &self.profile) {
            (None, None, None) => HitGate::Nothing,
            (None, None, Some(p)) => HitGate::Sampled(p.published_threshold()),
            _ => HitGate::Everything,
        }
    }

    /// The MRC profile's published sampling threshold, if it profiles:
    /// stores of sampled keys must reach it (`stored`).
    pub fn profile_gate(&self) -> Option<std::sync::Arc<std::sync::atomic::AtomicU64>> {
        self.profile.as_ref().map(|p| p.published_threshold())
    }

    /// Whether `hit` does anything (the engine skips reading the cost).
    #[inline]
    pub fn wants_hits(&self) -> bool {
        self.sas.is_some() || self.profile.is_some()
    }

    /// Whether `evicted` needs the key's hash.
    #[inline]
    pub fn wants_keys(&self) -> bool {
        self.ghost.is_some()
    }

    /// A GET missed on the key with hash `h`.
    #[inline]
    pub fn miss(&mut self, h: u64) {
        if let Some(p) = &mut self.profile {
            // The sample's capacity misses, each standing for 1/rate.
            if let Some((class, n, cost)) = p.get(h, None, &self.costs) {
                if let Some(c) = self.counts.get_mut(class) {
                    c.capacity_misses += n;
                    c.cost_capacity_misses += cost;
                }
            }
        }
        let Some(ghost) = &mut self.ghost else { return };
        let Some(g) = ghost.take(h) else { return };
        if let Some(c) = self.counts.get_mut(g.class) {
            c.capacity_misses += 1;
        }
        if let Some(s) = &mut self.sas {
            s.capacity_miss();
        }
        if !self.pending.is_empty() {
            let (i, tag) = Self::pending_slot(h);
            let next_page = u32::from(g.age < ghost::EPOCHS_PER_PAGE);
            self.pending[i] = tag << 16 | (g.class as u32 & 0xff) << 8 | next_page << 1 | 1;
        }
    }

    /// A GET of key hash `h` hit an item of `class` whose cost byte is
    /// `cost_q`.
    #[inline]
    pub fn hit(&mut self, h: u64, class: usize, cost_q: u8) {
        if let Some(s) = &mut self.sas {
            s.hit(class, self.costs[cost_q as usize]);
        }
        if let Some(p) = &mut self.profile {
            p.get(h, Some((class, cost_q)), &self.costs);
        }
    }

    /// An item was stored in `class`; `new`: no older one was under its key.
    #[inline]
    pub fn stored(&mut self, h: u64, class: usize, cost_q: u8, new: bool) {
        if let Some(p) = &mut self.profile {
            p.set(h, class, cost_q);
        }
        if new {
            self.inserted(h, class, cost_q);
        }
    }

    #[inline]
    fn inserted(&mut self, h: u64, class: usize, cost_q: u8) {
        let Some(s) = &mut self.sas else { return };
        let cost = self.costs[cost_q as usize];
        s.request(class, cost);
        let (i, tag) = Self::pending_slot(h);
        let p = self.pending[i];
        if p & 1 != 0 && p >> 16 == tag {
            self.pending[i] = 0;
            let missed = (p >> 8 & 0xff) as usize;
            s.miss_cost(missed, cost, p & 2 != 0);
            if let Some(c) = self.counts.get_mut(missed) {
                c.cost_capacity_misses += cost as u64;
            }
        }
    }

    /// Whether every new item must be reported (`stored` with `new`): SAS
    /// counts insertions and matches them with capacity misses.
    pub fn counts_inserts(&self) -> bool {
        self.sas.is_some()
    }

    /// An item of `class` (hash `h`, `bytes` of chunk) was evicted, by the
    /// eviction policy or because its page moved.
    #[inline]
    pub fn evicted(&mut self, h: u64, class: usize, bytes: usize) {
        if let Some(g) = &mut self.ghost {
            g.insert(h, class);
        }
        if let Some(c) = &mut self.cpb {
            c.evicted(class, bytes);
        }
    }

    /// `class` received a page (its ghost window moves by a page).
    pub fn grew(&mut self, class: usize) {
        if let Some(g) = &mut self.ghost {
            g.grew(class, 1);
        }
    }

    /// `flush_all`: misses that follow are not capacity misses.
    pub fn flushed(&mut self) {
        if let Some(g) = &mut self.ghost {
            g.clear();
        }
        if let Some(p) = &mut self.profile {
            p.clear();
        }
        self.pending.fill(0);
    }

    /// Whether a decision is due (`automove`: memcached's slab_automove
    /// value, 2 = aggressive; the engine checks that moves are allowed).
    pub fn due(&self, now: RelTime, automove: u8) -> bool {
        match self.policy {
            RebalancePolicy::Off => false,
            RebalancePolicy::Memcached => self.automove.due(now, automove >= 2),
            RebalancePolicy::Sas => self.sas.as_ref().is_some_and(Sas::due),
            RebalancePolicy::CostPerByte => self.cpb.as_ref().is_some_and(CostPerByte::due),
            RebalancePolicy::Mrc => self
                .profile
                .as_ref()
                .is_some_and(|p| p.gets_since >= self.mrc_period),
        }
    }

    /// Whether the engine should look at the classes and `begin_plan`: no move
    /// is queued and the rule's decision is due.
    pub fn wants_decision(&self, now: RelTime, automove: u8) -> bool {
        self.queue.is_empty() && self.due(now, automove)
    }

    /// Queue the moves of a [`Plan`].
    pub fn queue_moves(&mut self, moves: Vec<(usize, usize)>) {
        self.decisions += moves.len() as u64;
        self.queue.extend(moves);
    }

    /// The next queued move (from, to). The engine asks only when no page
    /// is in transit (a page moves at a time).
    pub fn pop_move(&mut self) -> Option<(usize, usize)> {
        self.queue.pop_front()
    }

    /// Decide the moves (from, to) from the classes' state, at once.
    /// `spare`: the engine can still add a page without taking one from a
    /// class.
    pub fn decide(
        &mut self,
        now: RelTime,
        classes: &[ClassInfo],
        spare: bool,
    ) -> Vec<(usize, usize)> {
        let moves = self.begin_plan(now, classes, spare).moves();
        self.decisions += moves.len() as u64;
        moves
    }

    /// The half of a decision that reads the rule's state: the cheap
    /// rules decide here; `mrc` copies its curves for [`Plan::moves`] to
    /// work on without the engine lock (Algorithm 2 over every class's
    /// curve held it for 15-30 µs, the maintainer's longest regular holds
    /// during a fill: issue 34).
    pub fn begin_plan(&mut self, now: RelTime, classes: &[ClassInfo], spare: bool) -> Plan {
        let moves = match self.policy {
            RebalancePolicy::Off => Vec::new(),
            RebalancePolicy::Memcached => {
                let a: Vec<AutomoveClass> = classes
                    .iter()
                    .map(|c| AutomoveClass {
                        evicted: c.evicted,
                        pages: c.pages,
                        free_chunks: c.free_chunks,
                        per_page: c.per_page,
                    })
                    .collect();
                self.automove.decide(now, &a).into_iter().collect()
            }
            RebalancePolicy::Sas => {
                let pages: Vec<u32> = classes.iter().map(|c| c.pages).collect();
                self.sas
                    .as_mut()
                    .map(|s| s.decide(&pages))
                    .unwrap_or_default()
            }
            RebalancePolicy::CostPerByte => {
                let v: Vec<ClassValue> = classes
                    .iter()
                    .map(|c| ClassValue {
                        pages: c.pages,
                        live_cost: c.live_cost,
                        live_bytes: c.live_bytes,
                    })
                    .collect();
                self.cpb
                    .as_mut()
                    .and_then(|c| c.decide(&v))
                    .into_iter()
                    .collect()
            }
            RebalancePolicy::Mrc => {
                let Some(p) = &mut self.profile else {
                    return Plan::Moves(Vec::new());
                };
                let pages: Vec<u32> = classes.iter().map(|c| c.pages).collect();
                // While memory is left, classes grow by demand.
                let plan = match spare {
                    true => Plan::Moves(Vec::new()),
                    false => Plan::Mrc {
                        curves: p.curves(),
                        bin: p.bin_pages(),
                        pages,
                    },
                };
                p.decay(0.5);
                return plan;
            }
        };
        Plan::Moves(moves)
    }

    pub fn counts(&self, class: usize) -> ClassCounts {
        self.counts.get(class).copied().unwrap_or_default()
    }

    /// Totals over the classes.
    pub fn totals(&self) -> ClassCounts {
        self.counts
            .iter()
            .fold(ClassCounts::default(), |a, c| ClassCounts {
                capacity_misses: a.capacity_misses + c.capacity_misses,
                cost_capacity_misses: a.cost_capacity_misses + c.cost_capacity_misses,
            })
    }

    /// SAS counters (m_i, r_i) of a class, when SAS is the rule.
    pub fn sas_counters(&self, class: usize) -> Option<(f64, f64)> {
        self.sas.as_ref().map(|s| s.counters(class))
    }

    /// `stats reset`: the counters start again (the ghost keeps its keys).
    pub fn reset_stats(&mut self) {
        self.counts.fill(ClassCounts::default());
        self.automove.clear();
    }
}

#[cfg(any(test, feature = "testing"))]
impl Rebalancer {
    /// Check the rule's tables (tests and fuzzing): ghost set, sampled
    /// stacks and the curves `mrc` reads off them (`pages`: each class's
    /// pages now), SAS counters, the pending miss costs and the queued
    /// moves naming real classes.
    pub fn validate(&self, pages: &[u32]) {
        let n = self.counts.len();
        assert_eq!(pages.len(), n);
        if let Some(g) = &self.ghost {
            g.validate();
        }
        if let Some(p) = &self.profile {
            p.validate();
            mrc::validate(&p.curves(), p.bin_pages(), pages);
        }
        if let Some(s) = &self.sas {
            s.validate();
        }
        for &p in self.pending.iter() {
            assert!(p & 1 != 0 || p == 0, "pending slot without its valid bit");
            assert!(((p >> 8 & 0xff) as usize) < n.max(1), "pending class");
        }
        for &(from, to) in &self.queue {
            assert!(
                from < n && to < n && from != to,
                "queued move ({from}, {to})"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item::quantize_cost;

    fn h(i: u64) -> u64 {
        xxhash_rust::xxh3::xxh3_64(&i.to_le_bytes())
    }

    fn sas(every: u64) -> Rebalancer {
        let t = Tuning {
            sas_misses: every,
            sas_decay: 0.0,
            ghost_bytes: 64 << 10,
            ..Tuning::default()
        };
        Rebalancer::new(RebalancePolicy::Sas, &t, &[1000; 4], 64 << 20, 1 << 20)
    }

    #[test]
    fn capacity_misses_need_an_eviction_and_cost_comes_with_the_set() {
        let mut r = sas(2);
        // A miss on a key never evicted: compulsory.
        r.miss(h(1));
        assert_eq!(r.totals().capacity_misses, 0);
        // Evicted from class 2, missed, refilled with cost 100.
        r.evicted(h(1), 2, 100);
        r.miss(h(1));
        assert_eq!(r.counts(2).capacity_misses, 1);
        r.stored(h(1), 2, quantize_cost(100), true);
        let c = r.counts(2).cost_capacity_misses;
        assert!((95..=105).contains(&c), "{c}");
        // The SET of a key that did not miss adds no capacity miss cost.
        r.stored(h(9), 2, quantize_cost(100), true);
        assert_eq!(r.counts(2).cost_capacity_misses, c);
        // A second miss of the same key is compulsory: the ghost was consumed.
        r.miss(h(1));
        assert_eq!(r.counts(2).capacity_misses, 1);
        assert!(!r.due(0, 1));
        r.evicted(h(2), 1, 100);
        r.miss(h(2));
        assert!(r.due(0, 1));
    }

    #[test]
    fn sas_moves_pages_towards_capacity_misses() {
        let mut r = sas(20);
        // Class 0 is hit a lot and never misses; class 3 misses.
        for i in 0..100 {
            r.hit(h(0), 0, quantize_cost(1));
            r.evicted(h(i), 3, 100);
        }
        for i in 0..20 {
            r.miss(h(i));
            r.stored(h(i), 3, quantize_cost(1), true);
        }
        assert!(r.due(0, 1));
        let info = |pages| ClassInfo {
            pages,
            ..ClassInfo::default()
        };
        let classes = [info(10), info(1), info(1), info(3)];
        assert_eq!(r.decide(0, &classes, false), vec![(0, 3)]);
        assert_eq!(r.decisions, 1);
        assert!(!r.due(0, 1));
    }

    #[test]
    fn only_sas_pays_for_a_ghost() {
        let t = Tuning::default();
        for (p, ghost) in [
            (RebalancePolicy::Off, false),
            (RebalancePolicy::Memcached, false),
            (RebalancePolicy::CostPerByte, false),
            (RebalancePolicy::Sas, true),
        ] {
            let mut r = Rebalancer::new(p, &t, &[1000; 4], 64 << 20, 1 << 20);
            assert_eq!(r.memory_bytes() > 0, ghost, "{p:?}");
            r.evicted(h(1), 1, 10);
            r.miss(h(1));
            assert_eq!(r.totals().capacity_misses, u64::from(ghost));
        }
        // What the window needs, at most 1/256 of the memory limit (at
        // least 64 KB).
        let big = [30_000u32; 40];
        let r = Rebalancer::new(RebalancePolicy::Sas, &t, &big, 64 << 20, 1 << 20);
        assert_eq!(r.memory_bytes(), (256 << 10) + 4096);
        let r = Rebalancer::new(RebalancePolicy::Sas, &t, &big, 1 << 20, 1 << 20);
        assert_eq!(r.memory_bytes(), (64 << 10) + 4096);
        let r = Rebalancer::new(RebalancePolicy::Sas, &t, &[1000; 4], 1 << 30, 1 << 20);
        assert_eq!(r.memory_bytes(), GhostSet::bytes_for(&[1000; 4], 4) + 4096);
    }

    #[test]
    fn flush_forgets_evicted_keys() {
        let mut r = sas(10);
        r.evicted(h(1), 1, 10);
        r.flushed();
        r.miss(h(1));
        assert_eq!(r.totals().capacity_misses, 0);
    }
}
