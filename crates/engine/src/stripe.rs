//! Index stripes and the engine's lock protocol (issue 10).
//!
//! The index is split into stripes chosen by a remix of the key's hash (the
//! index itself routes by the hash's top bits). Four kinds of lock exist
//! on the request path:
//!
//! - the **engine lock** (`crate::Cache`'s mutex around [`crate::Engine`]):
//!   slabs, eviction policy, rebalancer, page moves, counters. Removals
//!   and moves in the index, resizes, every allocation and every SET that
//!   the two paths below cannot do take it;
//! - each stripe's **writer flag**, raised by one writer at a time
//!   ([`Stripes::acquire`]): the engine lock's holder for the stripes its
//!   operation touches, or a SET without the engine lock
//!   ([`Stripes::write`], `crate::Cache::store`), which either rewrites
//!   its key's item in place or, for a new key, writes the item into a
//!   chunk reserved for its thread and inserts it ([`WriteGuard::index_mut`],
//!   `Index::insert_fixed`: never a resize);
//! - each thread's **magazine** of reserved chunks (`crate::magazine`),
//!   which that thread only tries while it holds its key's stripe, and the
//!   engine lock's holder locks to take the chunks back;
//! - each stripe's **reader lock**, distributed: a GET
//!   ([`crate::Cache::get`]) announces "reading stripe s" in a slot of its
//!   own thread ([`Stripes::read`]), checks that no writer holds the stripe,
//!   reads, and clears its slot. A writer raises the stripe's flag and waits
//!   until no reader slot names the stripe. A GET therefore writes only its
//!   thread's slot line (never shared with another core) and, at most once
//!   per CLOCK revolution or second, its item's access byte and time: the
//!   issue's "a hit writes no shared cache line except the item's own access
//!   bit". This is the big-reader lock of Linux's brlock and of
//!   percpu-rwsem.
//!
//! Order: engine lock, then stripes for writing (in any order: only the
//! engine lock's holder takes more than one), then magazines. A SET
//! without the engine lock holds one stripe, waits for nothing but readers
//! and only tries its magazine; a reader never waits for anything while it
//! holds its slot. So there is no cycle.
//!
//! What may touch an item's bytes:
//! - written only by the writer of the item's stripe (or by the engine
//!   lock's holder while the chunk is linked in no stripe, or by the thread
//!   whose magazine holds the chunk): everything, with the exceptions
//!   below;
//! - the access byte (bits: REF, FETCHED, LIVE, ...) and the access time
//!   (bytes 5 and 13), which a GET sets while reading: everyone but the
//!   writer of the stripe reads and writes them atomically
//!   ([`crate::arena::Arena::atomic`]), and CLOCK's hand clears REF with an
//!   atomic AND without the stripe. A new item written without the engine
//!   lock gets its access byte last, with LIVE, by a release store: the
//!   engine, which reads that byte with acquire, sees its key once it sees
//!   LIVE, and passes the chunk by before;
//! - the expiry and the value length, which the engine lock's holder reads
//!   without the stripe (CLOCK's hand, the reclaimer, finding an item's
//!   key): an in-place SET writes them atomically, and those readers read
//!   them so (`Arena::load_u32`, `Arena::load_u16`). Such a reader takes
//!   the stripe and reads again before it acts on an expiry;
//! - the key, the key length and the cost byte, which the engine lock's
//!   holder also reads without the stripe: never changed while linked
//!   (only the engine unlinks);
//! - GD-Wheel's trailer after the item, which only the engine lock's holder
//!   touches (no SET without the engine lock under GD-Wheel).
//!
//! So a GET reads a consistent item (nobody can unlink, free, move or
//! rewrite it while it reads), and the writer of the stripe has its items
//! to itself. `Slabs::chunk` checks in debug builds that the stripe of a
//! live item is acquired (`Slabs::check_held`).

use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::hash::stripe_of;
use crate::index::Index;

/// Stripes by default (`-o lock_stripes=`). Each stripe is an index of its
/// own, and a small index costs more per item than a large one: at 1.3 M
/// items (`-m 64`, 10-byte values) one index takes 9.18 bytes per item, 16
/// stripes 9.26, 64 stripes 9.72 and 256 stripes 10.83 (random hashes,
/// measured with `Index::memory_bytes`). Readers do not exclude each other,
/// so stripes only need to be many enough that the engine's writes rarely
/// hold up a GET.
pub const DEFAULT_STRIPES: usize = 16;

/// Threads that can read without the engine lock; more fall back to it.
pub const MAX_READERS: usize = 128;

/// A reader slot's value while it reads every stripe ([`Stripes::read_all`]).
const ALL: u32 = u32::MAX;

/// One stripe: its part of the index, GET hits the engine counted in it,
/// the flag of its writer and what in-place SETs left for the engine.
#[repr(align(128))]
struct Part {
    writer: AtomicBool,
    stripe: UnsafeCell<Stripe>,
    pending: Pending,
}

/// Counter changes of SETs made without the engine lock (in place, or new
/// items in a thread's reserved chunks: `crate::Cache::store`): written by
/// the stripe's writer only, folded into the engine's counters when the
/// engine next takes the stripe ([`Stripes::take_pending`]) and added to
/// `stats` before that.
pub struct Pending {
    dirty: AtomicBool,
    /// Per class.
    classes: Box<[ClassPending]>,
}

#[derive(Default)]
struct ClassPending {
    /// Stores.
    sets: AtomicU64,
    /// The change of the bytes requested (two's complement).
    requested: AtomicU64,
    /// New items linked, and the sum of their (dequantised) costs.
    items: AtomicU64,
    cost: AtomicU64,
}

/// What [`Pending`] holds for one class, taken out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub sets: u64,
    /// Wrapping: a change of either sign.
    pub requested: u64,
    pub items: u64,
    pub cost: u64,
}

impl Counts {
    pub fn add(&mut self, o: &Counts) {
        self.sets += o.sets;
        self.requested = self.requested.wrapping_add(o.requested);
        self.items += o.items;
        self.cost += o.cost;
    }
}

/// One writer adds: no read-modify-write needed.
#[inline]
fn bump(a: &AtomicU64, by: u64) {
    a.store(
        a.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

impl Pending {
    fn new(nclasses: usize) -> Pending {
        Pending {
            dirty: AtomicBool::new(false),
            classes: (0..nclasses).map(|_| ClassPending::default()).collect(),
        }
    }

    #[inline]
    fn mark(&self) {
        if !self.dirty.load(Ordering::Relaxed) {
            self.dirty.store(true, Ordering::Relaxed);
        }
    }

    /// One store to `class` that changed its requested bytes by `delta`.
    /// The stripe's writer only.
    #[inline]
    pub fn stored(&self, class: usize, delta: i64) {
        let Some(c) = self.classes.get(class) else {
            return;
        };
        bump(&c.sets, 1);
        bump(&c.requested, delta as u64);
        self.mark();
    }

    /// One new item of `total` bytes and cost `cost` linked in `class`.
    /// The stripe's writer only.
    #[inline]
    pub fn linked(&self, class: usize, total: u64, cost: u64) {
        let Some(c) = self.classes.get(class) else {
            return;
        };
        bump(&c.sets, 1);
        bump(&c.requested, total);
        bump(&c.items, 1);
        bump(&c.cost, cost);
        self.mark();
    }

    fn read(&self, take: bool) -> impl Iterator<Item = Counts> + '_ {
        // Only the classes stored to are written back (no other writer now).
        let get = move |a: &AtomicU64| match a.load(Ordering::Relaxed) {
            0 => 0,
            v => {
                if take {
                    a.store(0, Ordering::Relaxed);
                }
                v
            }
        };
        self.classes.iter().map(move |c| Counts {
            sets: get(&c.sets),
            requested: get(&c.requested),
            items: get(&c.items),
            cost: get(&c.cost),
        })
    }
}

/// Per class, what the engine has not counted yet.
pub type PendingCounts = Vec<Counts>;

/// A reader's slot: 0, 1 + the stripe it reads, or [`ALL`]. On a line
/// (two, for the adjacent-line prefetcher) of its own.
#[repr(align(128))]
struct Slot(AtomicU32);

/// Per reader slot, its GET hits by class, in whole lines.
#[repr(align(64))]
struct HitRow([AtomicU64; 8]);

pub struct Stripe {
    pub index: Index,
}

pub struct Stripes {
    parts: Box<[Part]>,
    slots: Box<[Slot]>,
    /// Slots handed out (a writer checks these).
    taken: AtomicUsize,
    /// `rows` HitRows per slot.
    hits: Box<[HitRow]>,
    rows: usize,
    /// Tells the thread-local slot cache which `Stripes` a slot is for.
    id: usize,
    /// 64 - log2(stripes); 64 for one stripe.
    shift: u32,
}

// SAFETY: `Part::stripe` is only reached through `read` (readers, shared
// access, while no writer holds the stripe), through `write` (its caller
// holds the writer flag: no reader, no other writer) and through the
// unsafe `stripe_mut`/`stripe_ref`, whose callers hold the engine lock and
// have acquired the stripe (likewise). `Part::pending` is atomics.
unsafe impl Sync for Stripes {}
// SAFETY: nothing in Stripes is tied to a thread.
unsafe impl Send for Stripes {}

static NEXT_ID: AtomicUsize = AtomicUsize::new(1);

thread_local! {
    /// This thread's slot in the `Stripes` last read: (id, slot).
    static MY_SLOT: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
    /// Slots this thread took in other `Stripes` (rarely more than one).
    static MY_SLOTS: std::cell::RefCell<Vec<(usize, usize)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Spin briefly, then let other threads run (the holder may be
/// preempted), then sleep. The sleep is what lets a preempted reader run
/// when the waiter is a background thread holding the engine lock at the
/// `SCHED_FIFO` ceiling (`priority`): `sched_yield` only yields to threads
/// of its own priority, so a ceiling thread waiting for a normal worker on
/// the same CPU spun until the kernel's real-time throttling stopped it,
/// up to 0.95 s of every second (the maintainer's prefix walk under a
/// pipelined load, with the server on one CPU: 1 s of `sched_yield` in
/// 16 s, and throughput down by a third).
#[inline]
fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        std::hint::spin_loop();
    } else if *spins < 80 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(std::time::Duration::from_micros(20));
    }
}

impl Stripes {
    /// `n` stripes (a power of two) for `expected_items` items in all.
    pub fn new(n: usize, expected_items: usize, nclasses: usize) -> Stripes {
        assert!(n.is_power_of_two());
        let rows = nclasses.div_ceil(8).max(1);
        Stripes {
            parts: (0..n)
                .map(|_| Part {
                    writer: AtomicBool::new(false),
                    stripe: UnsafeCell::new(Stripe {
                        index: Index::with_capacity(expected_items / n),
                    }),
                    pending: Pending::new(nclasses),
                })
                .collect(),
            slots: (0..MAX_READERS).map(|_| Slot(AtomicU32::new(0))).collect(),
            taken: AtomicUsize::new(0),
            hits: (0..MAX_READERS * rows)
                .map(|_| HitRow(Default::default()))
                .collect(),
            rows,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            shift: 64 - n.trailing_zeros(),
        }
    }

    pub fn len(&self) -> usize {
        self.parts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// The stripe of key hash `h`: the top bits of a multiplicative remix,
    /// independent of the bits the index routes by.
    #[inline]
    pub fn of(&self, h: u64) -> usize {
        stripe_of(h, self.shift)
    }

    pub fn shift(&self) -> u32 {
        self.shift
    }

    /// Memory of the stripes' headers, the reader slots and the counters.
    pub fn memory_bytes(&self) -> usize {
        let pending: usize = self
            .parts
            .iter()
            .map(|p| std::mem::size_of_val(&*p.pending.classes))
            .sum();
        std::mem::size_of_val(&*self.parts)
            + std::mem::size_of_val(&*self.slots)
            + std::mem::size_of_val(&*self.hits)
            + pending
    }

    /// This thread's slot (reader slot, and its chunk magazine in
    /// `crate::magazine`), taken on first use; None when all are.
    #[inline]
    pub(crate) fn my_slot(&self) -> Option<usize> {
        let (id, slot) = MY_SLOT.get();
        if id == self.id {
            return Some(slot);
        }
        let slot = MY_SLOTS.with_borrow_mut(|mine| {
            if let Some(&(_, s)) = mine.iter().find(|(i, _)| *i == self.id) {
                return Some(s);
            }
            let s = self.taken.fetch_add(1, Ordering::SeqCst);
            if s >= MAX_READERS {
                self.taken.store(MAX_READERS, Ordering::SeqCst);
                return None;
            }
            mine.push((self.id, s));
            Some(s)
        })?;
        MY_SLOT.set((self.id, slot));
        Some(slot)
    }

    /// Read stripe `s`: waits while the engine writes it; None if this
    /// thread has no reader slot (the caller takes the engine lock).
    #[inline]
    pub fn read(&self, s: usize) -> Option<ReadGuard<'_>> {
        let slot = self.my_slot()?;
        let mine = &self.slots[slot].0;
        let writer = &self.parts[s].writer;
        let mut spins = 0;
        loop {
            // Dekker with the writer (`acquire`): announce, then look. With
            // both sides SeqCst, a reader and a writer cannot both miss the
            // other's store.
            mine.store(s as u32 + 1, Ordering::SeqCst);
            if !writer.load(Ordering::SeqCst) {
                return Some(ReadGuard {
                    stripes: self,
                    slot,
                    s,
                });
            }
            mine.store(0, Ordering::Release);
            while writer.load(Ordering::Relaxed) {
                backoff(&mut spins);
            }
        }
    }

    /// Read every stripe at once, if no writer holds any now (else None:
    /// the caller reads stripe by stripe). One announcement for a batch of
    /// keys: each [`Stripes::read`] is a full fence, which made a batch's
    /// index loads wait for one another instead of overlapping (the
    /// prefetch of a multi-get's buckets, `crate::Cache::prefetch`). Hold it
    /// briefly: it keeps every writer waiting.
    #[inline]
    pub fn read_all(&self) -> Option<ReadAll<'_>> {
        let slot = self.my_slot()?;
        let mine = &self.slots[slot].0;
        // Dekker with the writers, as in `read`.
        mine.store(ALL, Ordering::SeqCst);
        if self.parts.iter().any(|p| p.writer.load(Ordering::SeqCst)) {
            mine.store(0, Ordering::Release);
            return None;
        }
        Some(ReadAll {
            stripes: self,
            slot,
        })
    }

    /// Take stripe `s` for writing: raise its flag (waiting for the writer
    /// before, if any), then wait for its readers. Any number of
    /// stripes for the engine lock's holder, one for anyone else.
    pub(crate) fn acquire(&self, s: usize) {
        let writer = &self.parts[s].writer;
        let mut spins = 0;
        while writer
            .compare_exchange_weak(false, true, Ordering::SeqCst, Ordering::Relaxed)
            .is_err()
        {
            while writer.load(Ordering::Relaxed) {
                backoff(&mut spins);
            }
        }
        let n = self.taken.load(Ordering::SeqCst).min(MAX_READERS);
        let want = s as u32 + 1;
        for slot in &self.slots[..n] {
            let mut spins = 0;
            while matches!(slot.0.load(Ordering::SeqCst), v if v == want || v == ALL) {
                backoff(&mut spins);
            }
        }
    }

    /// Let readers and writers into stripe `s` again (after `acquire`).
    pub(crate) fn release(&self, s: usize) {
        self.parts[s].writer.store(false, Ordering::Release);
    }

    /// Write stripe `s` without the engine lock: the in-place SET
    /// (`crate::Cache::store`), which must not hold the engine lock.
    pub(crate) fn write(&self, s: usize) -> WriteGuard<'_> {
        self.acquire(s);
        WriteGuard { stripes: self, s }
    }

    /// The counter changes in-place SETs left in stripe `s`, zeroed; None
    /// if there are none. The caller has acquired `s`.
    pub(crate) fn take_pending(&self, s: usize) -> Option<PendingCounts> {
        let p = &self.parts[s].pending;
        if !p.dirty.load(Ordering::Relaxed) {
            return None;
        }
        p.dirty.store(false, Ordering::Relaxed);
        Some(p.read(true).collect())
    }

    /// Every stripe's pending counter changes, summed by class, as they
    /// are now (for `stats`; the engine counts them for good later).
    pub fn pending_sum(&self, nclasses: usize) -> PendingCounts {
        let mut sum = vec![Counts::default(); nclasses];
        for p in self.parts.iter().map(|p| &p.pending) {
            if !p.dirty.load(Ordering::Relaxed) {
                continue;
            }
            for (c, n) in sum.iter_mut().zip(p.read(false)) {
                c.add(&n);
            }
        }
        sum
    }

    /// Stripe `s`, to change.
    ///
    /// # Safety
    /// The caller holds the engine lock, has acquired `s` and holds no
    /// other reference to it (in-place SETs never make a `&mut Stripe`).
    #[allow(clippy::mut_from_ref)]
    #[inline]
    pub(crate) unsafe fn stripe_mut(&self, s: usize) -> &mut Stripe {
        // SAFETY: no reader is in the stripe (acquired) and the engine lock
        // makes the caller its only writer.
        unsafe { &mut *self.parts[s].stripe.get() }
    }

    /// Stripe `s`, to read.
    ///
    /// # Safety
    /// The caller holds the engine lock and has acquired `s` (SETs without
    /// the engine lock insert into a stripe they hold), and holds no
    /// `stripe_mut` of it meanwhile.
    #[inline]
    pub(crate) unsafe fn stripe_ref(&self, s: usize) -> &Stripe {
        // SAFETY: readers only read; the only writer is the caller.
        unsafe { &*self.parts[s].stripe.get() }
    }

    /// Slots handed out so far (threads that have read or written).
    pub(crate) fn slots_taken(&self) -> usize {
        self.taken.load(Ordering::Acquire).min(MAX_READERS)
    }

    /// GET hits of `class` counted by readers (all threads).
    pub fn reader_hits(&self, class: usize) -> u64 {
        let n = self.taken.load(Ordering::Acquire).min(MAX_READERS);
        (0..n)
            .map(|slot| {
                self.hits[slot * self.rows + class / 8].0[class % 8].load(Ordering::Relaxed)
            })
            .sum()
    }

    /// Zero the readers' hit counters (`stats reset`; a hit counted at the
    /// same instant may survive it).
    pub fn reset_reader_hits(&self) {
        for row in self.hits.iter() {
            for c in &row.0 {
                c.store(0, Ordering::Relaxed);
            }
        }
    }
}

/// A GET's hold on a stripe: shared with other readers, none writing.
pub struct ReadGuard<'a> {
    stripes: &'a Stripes,
    slot: usize,
    s: usize,
}

impl ReadGuard<'_> {
    /// Count a GET hit of `class` (this thread's own counter).
    #[inline]
    pub fn hit(&self, class: usize) {
        if let Some(row) = self
            .stripes
            .hits
            .get(self.slot * self.stripes.rows + class / 8)
        {
            let c = &row.0[class % 8];
            // One writer per slot: no read-modify-write needed.
            c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        }
    }
}

impl std::ops::Deref for ReadGuard<'_> {
    type Target = Stripe;
    #[inline]
    fn deref(&self) -> &Stripe {
        // SAFETY: our slot names the stripe and its writer flag was down
        // after we announced it, so no writer changes it until we leave.
        unsafe { &*self.stripes.parts[self.s].stripe.get() }
    }
}

impl Drop for ReadGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        self.stripes.slots[self.slot].0.store(0, Ordering::Release);
    }
}

/// A hold on every stripe for reading ([`Stripes::read_all`]).
pub struct ReadAll<'a> {
    stripes: &'a Stripes,
    slot: usize,
}

impl ReadAll<'_> {
    /// Stripe `s`.
    #[inline]
    pub fn stripe(&self, s: usize) -> &Stripe {
        // SAFETY: our slot names every stripe and no writer flag was up
        // after we announced it, so no writer changes any until we leave.
        unsafe { &*self.stripes.parts[s].stripe.get() }
    }
}

impl Drop for ReadAll<'_> {
    #[inline]
    fn drop(&mut self) {
        self.stripes.slots[self.slot].0.store(0, Ordering::Release);
    }
}

/// A SET's hold on a stripe without the engine lock: no reader, no other
/// writer.
pub struct WriteGuard<'a> {
    stripes: &'a Stripes,
    s: usize,
}

impl WriteGuard<'_> {
    /// The stripe's index, to insert a new item without the engine lock
    /// (`crate::Cache::store`).
    #[inline]
    pub fn index_mut(&mut self) -> &mut Index {
        // SAFETY: we raised the writer flag and waited out the readers, so
        // nobody else reads or writes this stripe until we lower it: the
        // engine makes references into a stripe only after acquiring it
        // (`Engine::hold`), or into the index shapes it keeps itself. The
        // `&mut self` borrow keeps our own `Deref` views out meanwhile.
        unsafe { &mut (*self.stripes.parts[self.s].stripe.get()).index }
    }

    /// Where this writer leaves its counter changes.
    #[inline]
    pub fn pending(&self) -> &Pending {
        &self.stripes.parts[self.s].pending
    }
}

impl std::ops::Deref for WriteGuard<'_> {
    type Target = Stripe;
    #[inline]
    fn deref(&self) -> &Stripe {
        // SAFETY: we raised the writer flag, so the engine (the only maker
        // of `&mut Stripe`, after raising it itself) does not change the
        // stripe until we leave; we only read it.
        unsafe { &*self.stripes.parts[self.s].stripe.get() }
    }
}

impl Drop for WriteGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        self.stripes.release(self.s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A writer never changes a stripe a reader is in: readers check that
    /// two keys the writer inserts and removes together are both indexed
    /// or both not. Every other read of the third reader holds all stripes
    /// at once (`read_all`), when no writer is up.
    #[test]
    fn readers_never_see_a_write_in_progress() {
        let st = Arc::new(Stripes::new(2, 0, 2));
        let stop = Arc::new(AtomicBool::new(false));
        // Two hashes per stripe, told apart by their locations.
        let hashes: Vec<[u64; 2]> = (0..2)
            .map(|s| {
                let mut pair = (1u64..)
                    .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
                    .filter(|&h| st.of(h) == s);
                [pair.next().unwrap(), pair.next().unwrap()]
            })
            .collect();
        let readers: Vec<_> = (0..3)
            .map(|r| {
                let (st, stop, hashes) = (st.clone(), stop.clone(), hashes.clone());
                std::thread::spawn(move || {
                    let (mut reads, mut whole) = (0u64, 0u64);
                    while !stop.load(Ordering::Relaxed) {
                        let s = reads as usize % 2;
                        if r == 2 && reads % 2 == 0 {
                            if let Some(all) = st.read_all() {
                                for pair in &hashes {
                                    let [a, b] = pair.map(|h| {
                                        let index = &all.stripe(st.of(h)).index;
                                        index.find(h, |_| true).is_some()
                                    });
                                    assert_eq!(a, b, "torn read of all stripes");
                                }
                                whole += 1;
                            }
                        }
                        let g = st.read(s).expect("slot");
                        let [a, b] = hashes[s].map(|h| g.index.find(h, |_| true).is_some());
                        assert_eq!(a, b, "torn read");
                        g.hit(0);
                        reads += 1;
                    }
                    (reads, whole)
                })
            })
            .collect();
        let spin = |i: u64| {
            for _ in 0..(i % 50) {
                std::hint::spin_loop();
            }
        };
        for i in 0..20_000u64 {
            if i % 500 == 0 {
                // A pause, in which a read of all stripes can get in (while
                // this thread writes, one stripe or the other is up).
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            let s = (i % 2) as usize;
            let [h1, h2] = hashes[s];
            let hash_of = |l: u64| if l == 1 { h1 } else { h2 };
            let mut w = st.write(s);
            if i % 4 < 2 {
                w.index_mut().insert(h1, 1, &hash_of);
                spin(i);
                w.index_mut().insert(h2, 2, &hash_of);
            } else {
                w.index_mut().remove(h1, 1);
                spin(i);
                w.index_mut().remove(h2, 2);
            }
        }
        stop.store(true, Ordering::Relaxed);
        let done: Vec<(u64, u64)> = readers.into_iter().map(|r| r.join().unwrap()).collect();
        let reads: u64 = done.iter().map(|d| d.0).sum();
        assert!(reads > 0);
        assert!(done[2].1 > 0, "no read of all stripes got in");
        assert_eq!(st.reader_hits(0), reads);
    }

    /// A background thread that holds a lock at the `SCHED_FIFO` ceiling
    /// and waits for a reader preempted on its CPU lets the reader finish:
    /// it sleeps rather than only yielding, which a real-time thread does
    /// to no normal one (before, the wait lasted until the kernel's
    /// real-time throttling, about 0.95 s).
    #[cfg(target_os = "linux")]
    #[test]
    fn a_ceiling_writer_lets_a_reader_on_its_cpu_finish() {
        use std::time::{Duration, Instant};
        // SAFETY: sched_getcpu only returns the calling thread's CPU.
        let cpu = unsafe { libc::sched_getcpu() }.max(0) as usize;
        let pin = move || {
            // SAFETY: `set` is a plain bit set the calls only write and
            // read; pid 0 is the calling thread.
            unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
            }
        };
        let st = Arc::new(Stripes::new(2, 0, 2));
        let inside = Arc::new(AtomicBool::new(false));
        let hold = Duration::from_millis(20);
        let reader = {
            let (st, inside) = (st.clone(), inside.clone());
            std::thread::spawn(move || {
                pin();
                let g = st.read(0).expect("slot");
                inside.store(true, Ordering::SeqCst);
                // Runnable all along: only the CPU it is pinned to decides.
                let t = Instant::now();
                while t.elapsed() < hold {
                    std::hint::spin_loop();
                }
                drop(g);
            })
        };
        pin();
        while !inside.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        let fifo = crate::priority::raised_holds();
        let t = Instant::now();
        {
            let _ceiling = crate::priority::Raised::new();
            st.acquire(0);
            st.release(0);
        }
        let waited = t.elapsed();
        reader.join().unwrap();
        assert!(
            waited < Duration::from_millis(400),
            "the writer (SCHED_FIFO: {fifo}) waited {waited:?} for a {hold:?} read"
        );
    }
}
