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
//! block copies or one block's install, tens of microseconds of CPU.

use std::cell::Cell;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Policy {
    Idle,
    Normal,
    Ceiling,
}

thread_local! {
    /// The policy this thread holds the zone's lock at, if it runs idle.
    static RAISE: Cell<Option<Policy>> = const { Cell::new(None) };
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
    let raise = [Policy::Ceiling, Policy::Normal]
        .into_iter()
        .find(|&p| set(p));
    if raise.is_none() {
        eprintln!("The Z-zone writer holds its lock at idle priority (no CAP_SYS_NICE)");
    }
    RAISE.set(raise.filter(|_| set(Policy::Idle)));
    true
}

/// The lock's ceiling priority for as long as it lives, on a thread of
/// [`idle_thread`]; nothing on any other.
pub struct Raised(bool);

impl Raised {
    #[inline]
    pub fn new() -> Raised {
        Raised(RAISE.get().is_some_and(set))
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
        if self.0 {
            set(Policy::Idle);
        }
    }
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
            let raised = match RAISE.get() {
                Some(Policy::Ceiling) => libc::SCHED_FIFO,
                Some(_) => libc::SCHED_OTHER,
                // Not allowed here: the holds stay idle.
                None => libc::SCHED_IDLE,
            };
            {
                let _r = Raised::new();
                assert_eq!(policy(), raised);
            }
            assert_eq!(policy(), libc::SCHED_IDLE);
        })
        .join()
        .unwrap();
    }
}
