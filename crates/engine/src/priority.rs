//! The Z-zone writer's priority (issue 34): it runs on CPU time no request
//! wants (`SCHED_IDLE`), so a worker that wakes up preempts it at once, but
//! it holds the zone's lock at a priority no request has (`SCHED_FIFO` 1,
//! the lock's *priority ceiling*), so that no request preempts it while it
//! does. A `SCHED_IDLE` holder that a request preempted kept the lock for a
//! whole scheduler slice (3-5 ms, `perf sched timehist`): the requests
//! waiting on the lock slept, and nothing woke to preempt it again once it
//! ran. At normal priority, a worker's wakeup still preempted it now and
//! then (longest holds 0.2-3.7 ms, p99.9 128 µs, against 0.14-0.3 ms and
//! 64 µs at `SCHED_FIFO`: docs/benchmarks-history.md). A hold is a few
//! block copies or one block's install, tens of microseconds of CPU. While
//! its stage is more than half full it stays at the ceiling for up to
//! [`LINGER`] after a raise, so that the next hold costs no system call.
//!
//! The maintainer runs at normal priority (the expiry reclaimer must not
//! starve), but it too holds the engine's lock at the ceiling
//! ([`raised_holds`]): preempted by a worker's wakeup, its holds lasted up
//! to 2-37 ms of wall time on a loaded machine, against 0.27-0.29 ms
//! raised (`engine_background_hold_max_us` of `stats locks` during the
//! fill of `benches/fill-tail.sh`, with two compilers running beside it).

use std::cell::Cell;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Policy {
    Idle,
    Normal,
    Ceiling,
}

/// How a background thread runs: `rest` between its holds, `hold` while
/// it holds a lock that requests need.
#[derive(Clone, Copy, Debug)]
struct Levels {
    rest: Policy,
    hold: Policy,
}

thread_local! {
    /// This thread's levels, if it is a background thread that could raise.
    static LEVELS: Cell<Option<Levels>> = const { Cell::new(None) };
    /// [`Raised`] guards alive on this thread: the outermost raises and
    /// lowers (the maintainer takes the zone's lock inside the engine's).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// When the thread last went up to its hold level, if it is still
    /// there with no hold alive ([`LINGER`]).
    static UP_SINCE: Cell<Option<Instant>> = const { Cell::new(None) };
    /// Whether the holds that end from now on may linger ([`linger`]).
    static MAY_LINGER: Cell<bool> = const { Cell::new(false) };
}

/// How long a thread may stay at its hold level after a hold ends, so
/// that its next hold, microseconds later, needs no system call. Going up
/// and down around every hold, two `sched_setscheduler` calls, each a
/// reschedule, were a fifth of the Z-zone writer's samples under a churn
/// of new keys (memcaslap's set-heavy load: the writer 28% of the server's
/// samples, the scheduler's lock release 19%). Staying up for 50 µs at a
/// time took that load to 1.17 × the operations (paired median of 3);
/// 200 µs did no better there and raised YCSB-B's closed-loop GET p99 by
/// a sixth (docs/benchmarks-history.md). A thread that lingers goes down at
/// the first hold that ends after this, or at [`rest`]. Only threads that
/// rest idle (the Z-zone writer) linger, and only while they allow it
/// ([`linger`]).
pub const LINGER: Duration = Duration::from_micros(50);

/// Whether the calling thread's holds may linger at the ceiling from now
/// on ([`LINGER`]): the Z-zone writer allows it while its stage is more
/// than half full. Lingering always (200 µs), its compression between
/// holds at the ceiling took the place of requests: YCSB-B's closed-loop
/// GET p99 rose from 160 to about 250 µs (docs/benchmarks-history.md).
pub fn linger(on: bool) {
    MAY_LINGER.set(on);
}

/// Back to the rest level now if the thread lingers at its hold level
/// ([`LINGER`]): before it sleeps.
pub fn rest() {
    if let (Some(levels), Some(_)) = (LEVELS.get(), UP_SINCE.get()) {
        if DEPTH.get() == 0 {
            go_down(levels.rest);
        }
    }
}

/// Leave the hold level for `rest`.
fn go_down(rest: Policy) {
    UP_SINCE.set(None);
    set(rest);
}

/// Run the calling thread at idle priority from now on, but for the holds
/// of the locks that requests need ([`Raised`]). False if the system
/// refused. Going back up needs `CAP_SYS_NICE`, or an `RLIMIT_RTPRIO` of 1
/// (`SCHED_FIFO`) or an `RLIMIT_NICE` of 20 (normal priority): without
/// them the thread stays idle throughout, and says so.
pub fn idle_thread() -> bool {
    if !set(Policy::Idle) {
        return false;
    }
    let hold = [Policy::Ceiling, Policy::Normal]
        .into_iter()
        .find(|&p| set(p));
    if hold.is_none() {
        eprintln!("The Z-zone writer holds its lock at idle priority (no CAP_SYS_NICE)");
    }
    let levels = hold.map(|hold| Levels {
        rest: Policy::Idle,
        hold,
    });
    LEVELS.set(levels.filter(|_| set(Policy::Idle)));
    true
}

/// Run the calling thread at idle priority, holds included (a thread
/// that takes no lock requests need: the Z-zone's dictionary trainer).
/// False if the system refused.
pub fn idle_thread_for_good() -> bool {
    set(Policy::Idle)
}

/// The calling thread (the maintainer) runs at normal priority, but holds
/// the locks that requests need at their ceiling where allowed: a worker's
/// wakeup preempted it with the engine's lock held, for 1-9 ms of wall
/// time around 5-100 µs of work (a probe on `benches/fill-tail.sh`'s
/// fill). False if `SCHED_FIFO` is refused: it then holds at normal
/// priority.
pub fn raised_holds() -> bool {
    if !set(Policy::Ceiling) || !set(Policy::Normal) {
        return false;
    }
    LEVELS.set(Some(Levels {
        rest: Policy::Normal,
        hold: Policy::Ceiling,
    }));
    true
}

/// The lock's ceiling priority for as long as it lives, on a thread of
/// [`idle_thread`] or [`raised_holds`]; nothing on any other.
pub struct Raised(Option<Policy>);

impl Raised {
    #[inline]
    pub fn new() -> Raised {
        let Some(levels) = LEVELS.get() else {
            return Raised(None);
        };
        let depth = DEPTH.get();
        DEPTH.set(depth + 1);
        // Up already if a hold ended within LINGER.
        if depth == 0 && UP_SINCE.get().is_none() {
            if !set(levels.hold) {
                // Refused now (a limit lowered meanwhile): stay where we are.
                DEPTH.set(depth);
                return Raised(None);
            }
            UP_SINCE.set(Some(Instant::now()));
        }
        Raised(Some(levels.rest))
    }
}

impl Default for Raised {
    fn default() -> Self {
        Raised::new()
    }
}

impl Drop for Raised {
    #[inline]
    fn drop(&mut self) {
        if let Some(rest) = self.0 {
            let depth = DEPTH.get() - 1;
            DEPTH.set(depth);
            if depth == 0 {
                // Only a thread that rests idle lingers: the maintainer
                // yields to the workers between its slices, which a thread
                // still at the ceiling would not do.
                let up = match rest == Policy::Idle && MAY_LINGER.get() {
                    true => UP_SINCE.get().map_or(Duration::MAX, |t| t.elapsed()),
                    false => Duration::MAX,
                };
                if up >= LINGER {
                    go_down(rest);
                }
            }
        }
    }
}

/// The calling thread's CPU time (ns), from `CLOCK_THREAD_CPUTIME_ID`
/// (`holds`: how long a background hold was on the CPU; the load
/// generator's `jitter`: how much of a stall that clock counts); 0 if
/// refused.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to write; the clock id
    // is one every Linux has.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Set the calling thread's policy; false if refused.
fn set(policy: Policy) -> bool {
    #[cfg(target_os = "linux")]
    {
        let (policy, priority) = match policy {
            Policy::Idle => (libc::SCHED_IDLE, 0),
            Policy::Normal => (libc::SCHED_OTHER, 0),
            Policy::Ceiling => (libc::SCHED_FIFO, 1),
        };
        let param = libc::sched_param {
            sched_priority: priority,
        };
        // SAFETY: pid 0 is the calling thread; `param` is a valid
        // sched_param the call only reads.
        unsafe { libc::sched_setscheduler(0, policy, &param) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = policy;
        false
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn policy() -> i32 {
        // SAFETY: pid 0 is the calling thread.
        unsafe { libc::sched_getscheduler(0) }
    }

    #[test]
    fn an_idle_thread_holds_at_its_ceiling() {
        std::thread::spawn(|| {
            let other = Raised::new();
            assert_eq!(policy(), libc::SCHED_OTHER, "not an idle thread: unchanged");
            drop(other);
            assert!(idle_thread());
            assert_eq!(policy(), libc::SCHED_IDLE);
            linger(true);
            let raised = match LEVELS.get().map(|l| l.hold) {
                Some(Policy::Ceiling) => libc::SCHED_FIFO,
                Some(_) => libc::SCHED_OTHER,
                // Not allowed here: the holds stay idle.
                None => libc::SCHED_IDLE,
            };
            {
                let _outer = Raised::new();
                assert_eq!(policy(), raised);
                {
                    // One lock taken inside another.
                    let _inner = Raised::new();
                    assert_eq!(policy(), raised);
                }
                assert_eq!(policy(), raised, "the outer hold is still raised");
            }
            // Just after a short hold the thread may still be up (LINGER,
            // unless this thread was descheduled meanwhile), and knows it.
            let up = UP_SINCE.get().is_some();
            assert_eq!(policy(), if up { raised } else { libc::SCHED_IDLE });
            rest();
            assert_eq!(policy(), libc::SCHED_IDLE, "down before a sleep");
            {
                let _r = Raised::new();
                assert_eq!(policy(), raised);
                // Held until LINGER has passed since the raise.
                let since = Instant::now();
                while since.elapsed() <= LINGER {
                    std::hint::spin_loop();
                }
            }
            assert_eq!(
                policy(),
                libc::SCHED_IDLE,
                "a hold that ends LINGER after the raise goes down"
            );
            linger(false);
            {
                let _r = Raised::new();
                assert_eq!(policy(), raised);
            }
            assert_eq!(policy(), libc::SCHED_IDLE, "no lingering unless allowed");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_maintainer_holds_at_the_ceiling_and_rests_at_normal() {
        std::thread::spawn(|| {
            let allowed = raised_holds();
            assert_eq!(policy(), libc::SCHED_OTHER);
            {
                let _r = Raised::new();
                let held = if allowed {
                    libc::SCHED_FIFO
                } else {
                    libc::SCHED_OTHER
                };
                assert_eq!(policy(), held);
            }
            assert_eq!(policy(), libc::SCHED_OTHER);
        })
        .join()
        .unwrap();
    }
}
