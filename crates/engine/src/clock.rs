//! The server clock and memcached's expiration-time rules.
//!
//! Like memcached (`memcached.c`, `current_time`), time inside the cache is a
//! 32-bit count of seconds since the process started, advanced by a timer
//! thread, so hot paths read one atomic instead of calling into the kernel.
//!
//! Learned costs (`cost`) need finer time: [`Clock::now_us`] reads the
//! monotonic clock in microseconds, only on the paths that learn (a GET miss,
//! a SET that follows one). A simulator drives it instead with
//! [`Clock::set_us`], so that the gap between a miss and its SET is exactly
//! the backend delay it models.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Seconds since the server started.
pub type RelTime = u32;

/// Relative exptimes above this many seconds are absolute unix times
/// (memcached's `REALTIME_MAXDELTA`, 30 days).
pub const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;

/// When an item expires, after memcached's rules were applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// exptime 0: never expires.
    Never,
    /// Expires when the clock reaches this time (the item is dead at `now >= t`).
    At(RelTime),
    /// A negative exptime, or an absolute time in the past: expired at once.
    Expired,
}

pub struct Clock {
    /// Unix time (seconds) at process start, minus a couple of seconds so that
    /// relative time 0 is never "now" (memcached does the same: `process_started`).
    started_unix: AtomicI64,
    started: Instant,
    now: AtomicU32,
    /// Set by `set_us`: from then on `now_us` returns `us` (simulation).
    driven_us: AtomicBool,
    us: AtomicU64,
    /// `now_us` when `now` last changed ([`Clock::ticked_us`]).
    ticked_us: AtomicU64,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    pub fn new() -> Clock {
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        Clock {
            started_unix: AtomicI64::new(unix - 2),
            started: Instant::now(),
            now: AtomicU32::new(2),
            driven_us: AtomicBool::new(false),
            us: AtomicU64::new(0),
            ticked_us: AtomicU64::new(0),
        }
    }

    /// Microseconds since the clock was made (monotonic), or the value of
    /// the last `set_us` once a simulator drives the clock.
    #[inline]
    pub fn now_us(&self) -> u64 {
        if self.driven_us.load(Ordering::Relaxed) {
            self.us.load(Ordering::Relaxed)
        } else {
            self.started.elapsed().as_micros().min(u64::MAX as u128) as u64
        }
    }

    /// Drive the microsecond clock (simulators and tests); it no longer
    /// follows the monotonic clock afterwards. Independent of the seconds
    /// clock, which `advance` moves.
    pub fn set_us(&self, us: u64) {
        self.us.store(us, Ordering::Relaxed);
        self.driven_us.store(true, Ordering::Relaxed);
    }

    /// Current relative time in seconds.
    #[inline]
    pub fn now(&self) -> RelTime {
        self.now.load(Ordering::Relaxed)
    }

    /// Unix time of `now()`.
    pub fn unix_now(&self) -> i64 {
        self.started_unix.load(Ordering::Relaxed) + self.now() as i64
    }

    /// Unix time at which the process started (for `stats` `uptime`/`time`).
    pub fn started_unix(&self) -> i64 {
        self.started_unix.load(Ordering::Relaxed)
    }

    /// Recompute `now` from the monotonic clock; called by the timer thread
    /// (and by tests) rather than per request.
    pub fn tick(&self) {
        let secs = self.started.elapsed().as_secs() + 2;
        let secs = secs.min(u32::MAX as u64) as u32;
        if self.now.swap(secs, Ordering::Relaxed) != secs {
            self.ticked_us.store(self.now_us(), Ordering::Relaxed);
        }
    }

    /// Move the clock forward (tests of expiry use this instead of sleeping).
    pub fn advance(&self, by: Duration) {
        self.now
            .fetch_add(by.as_secs().min(u32::MAX as u64) as u32, Ordering::Relaxed);
        self.ticked_us.store(self.now_us(), Ordering::Relaxed);
    }

    /// [`Clock::now_us`] when `now` last changed (at most `now_us`): where
    /// the second `now` began for whatever counts by it. The timer ticks
    /// every 100 ms, so that is up to a tenth of a second after the whole
    /// second.
    pub fn ticked_us(&self) -> u64 {
        self.ticked_us.load(Ordering::Relaxed).min(self.now_us())
    }

    /// Make relative time 0 `secs` later in unix time (tests of warm
    /// restarts: a process that started that much later).
    #[cfg(test)]
    pub(crate) fn shift_start(&self, secs: i64) {
        self.started_unix.fetch_add(secs, Ordering::Relaxed);
    }

    /// Apply memcached's exptime rules (`realtime()` in memcached.c): 0 means
    /// never; negative means already expired; up to 30 days is relative to now;
    /// anything larger is an absolute unix time.
    pub fn expiry(&self, exptime: i64) -> Expiry {
        if exptime == 0 {
            return Expiry::Never;
        }
        if exptime < 0 {
            return Expiry::Expired;
        }
        let now = self.now() as i64;
        let rel = if exptime > REALTIME_MAXDELTA {
            let started = self.started_unix();
            if exptime <= started {
                return Expiry::Expired;
            }
            exptime - started
        } else {
            now + exptime
        };
        if rel <= now {
            return Expiry::Expired;
        }
        Expiry::At(rel.min(u32::MAX as i64) as RelTime)
    }

    /// Seconds until `exp`, as the meta `t` flag reports it (-1 = never).
    pub fn ttl_remaining(&self, exp: Expiry) -> i64 {
        match exp {
            Expiry::Never => -1,
            Expiry::Expired => 0,
            Expiry::At(t) => (t as i64 - self.now() as i64).max(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exptime_rules() {
        let c = Clock::new();
        assert_eq!(c.expiry(0), Expiry::Never);
        assert_eq!(c.expiry(-1), Expiry::Expired);
        assert_eq!(c.expiry(10), Expiry::At(c.now() + 10));
        // Absolute time one hour ahead.
        let abs = c.unix_now() + 3600;
        assert_eq!(c.expiry(abs), Expiry::At(c.now() + 3600));
        // Absolute time in the past (but above the 30-day threshold).
        assert_eq!(c.expiry(REALTIME_MAXDELTA + 1), Expiry::Expired);
    }

    #[test]
    fn microseconds_are_monotonic_or_driven() {
        let c = Clock::new();
        let a = c.now_us();
        std::thread::sleep(Duration::from_millis(2));
        let b = c.now_us();
        assert!(b >= a + 2000, "{a} then {b}");
        c.set_us(42);
        assert_eq!(c.now_us(), 42);
        std::thread::sleep(Duration::from_millis(1));
        assert_eq!(c.now_us(), 42);
    }

    #[test]
    fn advance_moves_time() {
        let c = Clock::new();
        let e = c.expiry(5);
        c.advance(Duration::from_secs(5));
        assert_eq!(c.ttl_remaining(e), 0);
    }
}
