//! How long the locks that requests need are held, and by whom (issue
//! 34): a log₂ histogram of microseconds per lock, one for requests and
//! one for background work (the maintainer, the Z-zone's and flash's
//! writers). A request that waits on a lock waits for its holder, so the
//! background's longest holds bound the tail it adds to requests; the
//! figures are `stats locks` and `cachalot_lock_hold_seconds`.
//!
//! A hold costs two clock reads (`Instant::now`, the vDSO's
//! `clock_gettime`, some 20 ns each) and two relaxed atomic adds.
//!
//! A background hold also reads the thread's CPU clock at both ends, and
//! its longest time on the CPU is kept beside its longest wall time: a
//! virtual machine's own stalls (a 5 µs loop here stalls past 100 µs
//! about twice a second: `benches/fill-tail.sh`'s floor) land in some
//! holds and lengthen them in wall time, but not on the CPU; the two
//! maxima tell a slice of work too large from a hold the machine stalled.
//! Where the kernel charges interrupts to the thread they interrupt
//! (`CONFIG_IRQ_TIME_ACCOUNTING` off, as on the machine of
//! docs/benchmarks.md), the CPU figure includes the softirqs that ran
//! during the hold.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::priority::thread_cpu_ns;
use std::time::Instant;

/// Buckets 0-3 count holds of [i, i + 1) µs; above 4 µs, each power of
/// two is cut in four ([16, 20), [20, 24), [24, 28), [28, 32) µs), so a
/// bound like issue 34's 20 µs can be read. The last bucket, [7, 8) ×
/// 2^20 µs, also counts all longer holds.
pub const BUCKETS: usize = 4 + 4 * 21;

/// Who held a lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder {
    Request = 0,
    Background = 1,
}

impl Holder {
    pub const ALL: [Holder; 2] = [Holder::Request, Holder::Background];

    pub fn name(self) -> &'static str {
        match self {
            Holder::Request => "request",
            Holder::Background => "background",
        }
    }
}

thread_local! {
    static BACKGROUND: Cell<bool> = const { Cell::new(false) };
}

/// The calling thread does background work from now on: the locks it
/// holds are counted as the background's.
pub fn background_thread() {
    BACKGROUND.set(true);
}

fn holder() -> Holder {
    match BACKGROUND.get() {
        true => Holder::Background,
        false => Holder::Request,
    }
}

/// When a hold began: the wall clock, and for background work the
/// thread's CPU clock (ns).
#[derive(Clone, Copy, Debug)]
pub struct HoldStart {
    at: Instant,
    cpu_ns: Option<u64>,
}

impl HoldStart {
    #[inline]
    pub fn now() -> HoldStart {
        HoldStart {
            at: Instant::now(),
            cpu_ns: BACKGROUND.get().then(thread_cpu_ns),
        }
    }
}

/// The holds of one lock.
#[derive(Default)]
pub struct Holds {
    by: [Histogram; 2],
}

struct Histogram {
    buckets: [AtomicU64; BUCKETS],
    total_ns: AtomicU64,
    max_ns: AtomicU64,
    /// The longest time on the CPU of one hold (background holds only).
    max_cpu_ns: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            total_ns: AtomicU64::new(0),
            max_ns: AtomicU64::new(0),
            max_cpu_ns: AtomicU64::new(0),
        }
    }
}

impl Holds {
    /// A hold that began at `since` ends now.
    #[inline]
    pub fn record(&self, since: HoldStart) {
        let ns = since.at.elapsed().as_nanos().min(u64::MAX as u128) as u64;
        let h = &self.by[holder() as usize];
        h.buckets[bucket(ns)].fetch_add(1, Ordering::Relaxed);
        h.total_ns.fetch_add(ns, Ordering::Relaxed);
        if ns > h.max_ns.load(Ordering::Relaxed) {
            h.max_ns.fetch_max(ns, Ordering::Relaxed);
        }
        if let Some(cpu) = since.cpu_ns {
            let on_cpu = thread_cpu_ns().saturating_sub(cpu);
            if on_cpu > h.max_cpu_ns.load(Ordering::Relaxed) {
                h.max_cpu_ns.fetch_max(on_cpu, Ordering::Relaxed);
            }
        }
    }

    pub fn stats(&self, holder: Holder) -> HoldStats {
        let h = &self.by[holder as usize];
        HoldStats {
            buckets: std::array::from_fn(|i| h.buckets[i].load(Ordering::Relaxed)),
            total_ns: h.total_ns.load(Ordering::Relaxed),
            max_ns: h.max_ns.load(Ordering::Relaxed),
            max_cpu_ns: h.max_cpu_ns.load(Ordering::Relaxed),
        }
    }

    /// `stats reset`.
    pub fn reset(&self) {
        for h in &self.by {
            for b in &h.buckets {
                b.store(0, Ordering::Relaxed);
            }
            h.total_ns.store(0, Ordering::Relaxed);
            h.max_ns.store(0, Ordering::Relaxed);
            h.max_cpu_ns.store(0, Ordering::Relaxed);
        }
    }
}

fn bucket(ns: u64) -> usize {
    let us = ns / 1000;
    if us < 4 {
        return us as usize;
    }
    let octave = (u64::BITS - 1 - us.leading_zeros()) as usize;
    let quarter = ((us >> (octave - 2)) & 3) as usize;
    (4 + 4 * (octave - 2) + quarter).min(BUCKETS - 1)
}

/// One lock's holds by one kind of holder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HoldStats {
    pub buckets: [u64; BUCKETS],
    pub total_ns: u64,
    pub max_ns: u64,
    /// The longest time on the CPU of one hold (0: not measured, for
    /// requests' holds).
    pub max_cpu_ns: u64,
}

impl Default for HoldStats {
    fn default() -> HoldStats {
        HoldStats {
            buckets: [0; BUCKETS],
            total_ns: 0,
            max_ns: 0,
            max_cpu_ns: 0,
        }
    }
}

impl HoldStats {
    /// The upper bound (µs) of the holds bucket `i` counts.
    pub fn bound_us(i: usize) -> u64 {
        if i < 4 {
            return i as u64 + 1;
        }
        let (octave, quarter) = ((i - 4) / 4 + 2, (i - 4) % 4);
        (5 + quarter as u64) << (octave - 2)
    }

    pub fn holds(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The smallest bucket bound (µs) that at least the share `q` of the
    /// holds are under; 0 with no holds.
    pub fn quantile_us(&self, q: f64) -> u64 {
        let n = self.holds();
        if n == 0 {
            return 0;
        }
        let want = (q * n as f64).ceil() as u64;
        let mut seen = 0;
        for (i, &c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= want {
                return Self::bound_us(i);
            }
        }
        Self::bound_us(BUCKETS - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_quarters_of_powers_of_two() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(999), 0);
        assert_eq!(bucket(1_000), 1);
        assert_eq!(bucket(3_999), 3);
        assert_eq!(bucket(4_000), 4);
        assert_eq!(HoldStats::bound_us(4), 5);
        assert_eq!(HoldStats::bound_us(bucket(19_999)), 20); // [16, 20)
        assert_eq!(HoldStats::bound_us(bucket(20_000)), 24);
        assert_eq!(HoldStats::bound_us(bucket(100_000)), 112); // [96, 112)
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        // Every hold falls in the bucket whose bounds enclose it.
        for us in 0..100_000u64 {
            let i = bucket(us * 1000 + 999);
            let low = match i {
                0 => 0,
                _ => HoldStats::bound_us(i - 1),
            };
            assert!(
                low <= us && us < HoldStats::bound_us(i),
                "{us} µs in bucket {i}"
            );
        }
        assert!((1..BUCKETS).all(|i| HoldStats::bound_us(i - 1) < HoldStats::bound_us(i)));
    }

    #[test]
    fn holds_are_counted_by_holder() {
        let holds = Holds::default();
        holds.record(HoldStart::now());
        std::thread::scope(|s| {
            s.spawn(|| {
                background_thread();
                // A hold of at least 3 ms off the CPU, however slow the
                // machine, then one of 2 ms on it.
                let since = HoldStart::now();
                std::thread::sleep(std::time::Duration::from_millis(3));
                holds.record(since);
                let since = HoldStart::now();
                let cpu = thread_cpu_ns();
                while thread_cpu_ns() < cpu + 2_000_000 {
                    std::hint::spin_loop();
                }
                holds.record(since);
            });
        });
        let (req, bg) = (
            holds.stats(Holder::Request),
            holds.stats(Holder::Background),
        );
        assert_eq!((req.holds(), bg.holds()), (1, 2));
        assert!(bg.max_ns >= 3_000_000, "{bg:?}");
        // 3 ms and a little: the [2560, 3072) µs bucket or a later one.
        assert!(bg.quantile_us(1.0) >= 3072, "{bg:?}");
        assert!(req.max_ns < bg.max_ns);
        // The sleep's hold was the longest, the spin's the longest on the
        // CPU; a request's is not measured there.
        assert!((2_000_000..3_000_000).contains(&bg.max_cpu_ns), "{bg:?}");
        assert_eq!(req.max_cpu_ns, 0);
        holds.reset();
        assert_eq!(holds.stats(Holder::Background), HoldStats::default());
    }

    #[test]
    fn quantiles_are_bucket_bounds() {
        let mut s = HoldStats::default();
        assert_eq!(s.quantile_us(0.999), 0);
        s.buckets[2] = 999; // [2, 3) µs
        s.buckets[bucket(600_000)] = 1; // [512, 640) µs
        assert_eq!(s.quantile_us(0.999), 3);
        assert_eq!(s.quantile_us(1.0), 640);
    }
}
