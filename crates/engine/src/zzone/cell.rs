//! The Z-zone behind its lock, with the two figures the engine's memory
//! budget reads on every store (the zone's memory, and the pages it is
//! still owed) published as atomics each time the lock is released. A
//! store holds the engine's lock while it checks the budget; reading the
//! zone's lock there made every store wait behind the zone's writer (a
//! sweep or a compaction), and every other request behind that store.

use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use std::sync::{Mutex, MutexGuard, TryLockError};

use super::zone::Zone;
use crate::holds::Holds;
use crate::priority::Raised;

thread_local! {
    /// Zone guards this thread holds ([`ZoneCell::held_here`]).
    static HELD: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

pub struct ZoneCell {
    /// std's futex lock, not parking_lot's, whose waiters `sched_yield`:
    /// see `crate::Cache`'s engine lock.
    zone: Mutex<Zone>,
    memory: AtomicUsize,
    wanted: AtomicUsize,
    pressed: AtomicUsize,
    /// [`Zone::stage_over`] as of the last release.
    over: AtomicBool,
    /// [`Zone::judged`] as of the last release.
    judged: AtomicBool,
    holds: Holds,
}

impl ZoneCell {
    pub fn new(zone: Zone) -> ZoneCell {
        let cell = ZoneCell {
            zone: Mutex::new(zone),
            memory: AtomicUsize::new(0),
            wanted: AtomicUsize::new(0),
            pressed: AtomicUsize::new(0),
            over: AtomicBool::new(false),
            judged: AtomicBool::new(false),
            holds: Holds::default(),
        };
        drop(cell.lock());
        cell
    }

    pub fn lock(&self) -> ZoneGuard<'_> {
        let raised = Raised::new();
        let zone = self.zone.lock().unwrap_or_else(|e| e.into_inner());
        self.guard(zone, raised)
    }

    /// The lock if no one holds it now.
    pub fn try_lock(&self) -> Option<ZoneGuard<'_>> {
        let raised = Raised::new();
        let zone = match self.zone.try_lock() {
            Ok(zone) => zone,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        Some(self.guard(zone, raised))
    }

    fn guard<'a>(&'a self, zone: MutexGuard<'a, Zone>, raised: Raised) -> ZoneGuard<'a> {
        HELD.set(HELD.get() + 1);
        ZoneGuard {
            zone: ManuallyDrop::new(zone),
            _raised: raised,
            cell: self,
            since: crate::holds::HoldStart::now(),
        }
    }

    /// Whether this thread holds a zone's lock (taking it again would
    /// wait forever).
    pub fn held_here() -> bool {
        HELD.get() > 0
    }

    /// Whether someone holds the lock now (the writer, most often).
    pub fn is_locked(&self) -> bool {
        matches!(self.zone.try_lock(), Err(TryLockError::WouldBlock))
    }

    /// How long the lock has been held, by requests and background work.
    pub fn holds(&self) -> &Holds {
        &self.holds
    }

    /// [`Zone::memory_bytes`] as of the last time the lock was released.
    /// Every change to the zone happens under the lock, so this is what
    /// taking the lock would have read, but for a holder's change in
    /// progress.
    pub fn memory_bytes(&self) -> usize {
        self.memory.load(Ordering::Relaxed)
    }

    /// [`Zone::stage_over`] as of the last release.
    pub fn stage_over(&self) -> bool {
        self.over.load(Ordering::Relaxed)
    }

    /// [`Zone::judged`] as of the last release.
    pub fn judged(&self) -> bool {
        self.judged.load(Ordering::Relaxed)
    }

    /// [`Zone::wanted_pages`] as of the last release.
    pub fn wanted_pages(&self) -> usize {
        self.wanted.load(Ordering::Relaxed)
    }

    /// [`Zone::pressed_pages`] as of the last release.
    pub fn pressed_pages(&self) -> usize {
        self.pressed.load(Ordering::Relaxed)
    }
}

/// The zone's lock held; its figures are published, and the hold
/// counted, when it drops. The Z-zone writer holds it at normal priority
/// (`crate::priority`): `_raised` drops after `zone`, the lock released.
pub struct ZoneGuard<'a> {
    /// Dropped in `drop`, before what the zone let go is freed.
    zone: ManuallyDrop<MutexGuard<'a, Zone>>,
    cell: &'a ZoneCell,
    since: crate::holds::HoldStart,
    _raised: Raised,
}

impl Deref for ZoneGuard<'_> {
    type Target = Zone;
    fn deref(&self) -> &Zone {
        &self.zone
    }
}

impl DerefMut for ZoneGuard<'_> {
    fn deref_mut(&mut self) -> &mut Zone {
        &mut self.zone
    }
}

impl Drop for ZoneGuard<'_> {
    fn drop(&mut self) {
        let z = &*self.zone;
        self.cell.memory.store(z.memory_bytes(), Ordering::Relaxed);
        self.cell.wanted.store(z.wanted_pages(), Ordering::Relaxed);
        self.cell
            .pressed
            .store(z.pressed_pages(), Ordering::Relaxed);
        self.cell.over.store(z.stage_over(), Ordering::Relaxed);
        self.cell.judged.store(z.judged(), Ordering::Relaxed);
        let to_free = std::mem::take(&mut self.zone.to_free);
        self.cell.holds.record(self.since);
        // SAFETY: `zone` is dropped here, once, and not used after.
        unsafe { ManuallyDrop::drop(&mut self.zone) };
        HELD.set(HELD.get() - 1);
        // Freed without the lock (`Zone::to_free`).
        drop(to_free);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Codec;
    use std::sync::Arc;

    /// Records, as it is dropped, whether its zone's lock was free.
    struct Witness(Arc<ZoneCell>, Arc<AtomicBool>);

    impl Drop for Witness {
        fn drop(&mut self) {
            self.1.store(!self.0.is_locked(), Ordering::Relaxed);
        }
    }

    #[test]
    fn what_the_zone_lets_go_is_freed_after_its_lock() {
        let cell = Arc::new(ZoneCell::new(super::super::zone::tests::zone(Codec::Zstd)));
        let unlocked = Arc::new(AtomicBool::new(false));
        {
            let mut zone = cell.lock();
            let witness = Witness(cell.clone(), unlocked.clone());
            zone.free_later(witness);
        }
        assert!(unlocked.load(Ordering::Relaxed), "freed under the lock");
        assert!(cell.lock().to_free.is_empty());
    }
}
