//! The Z-zone writer's priority (issue 34): it runs on CPU time no request
//! wants (`SCHED_IDLE`), so a worker that wakes up preempts it at once, but
//! it holds the zone's lock at normal priority. A `SCHED_IDLE` holder that a
//! request preempted kept the lock for a whole scheduler slice (3-5 ms,
//! `perf sched timehist`): the requests waiting on the lock slept, and
//! nothing woke to preempt it again once it ran.

use std::cell::Cell;

thread_local! {
    static IDLE: Cell<bool> = const { Cell::new(false) };
}

/// Run the calling thread at idle priority from now on, but for the holds
/// of the locks that requests need ([`Raised`]). False if the system
/// refused (the reason printed). Going back to normal priority needs
/// `CAP_SYS_NICE` or an `RLIMIT_NICE` of 20: without them the thread stays
/// idle throughout, as it did before holds were raised.
pub fn idle_thread() -> bool {
    if !set(true) {
        return false;
    }
    let back = set(false);
    IDLE.set(back && set(true));
    if !back {
        eprintln!("The Z-zone writer holds its lock at idle priority (no CAP_SYS_NICE)");
    }
    true
}

/// Normal priority for as long as it lives, on a thread of
/// [`idle_thread`]; nothing on any other.
pub struct Raised(bool);

impl Raised {
    #[inline]
    pub fn new() -> Raised {
        Raised(IDLE.get() && set(false))
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
            set(true);
        }
    }
}

/// The calling thread's policy: `SCHED_IDLE` if `idle`, else `SCHED_OTHER`.
fn set(idle: bool) -> bool {
    #[cfg(target_os = "linux")]
    {
        let policy = match idle {
            true => libc::SCHED_IDLE,
            false => libc::SCHED_OTHER,
        };
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: pid 0 is the calling thread; `param` is a valid
        // sched_param the call only reads.
        let rc = unsafe { libc::sched_setscheduler(0, policy, &param) };
        if rc != 0 && idle {
            eprintln!(
                "Could not lower the Z-zone writer's priority: {}",
                std::io::Error::last_os_error()
            );
        }
        rc == 0
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = idle;
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
    fn an_idle_thread_holds_at_normal_priority() {
        std::thread::spawn(|| {
            let other = Raised::new();
            assert_eq!(policy(), libc::SCHED_OTHER, "not an idle thread: unchanged");
            drop(other);
            assert!(idle_thread());
            assert_eq!(policy(), libc::SCHED_IDLE);
            {
                let _r = Raised::new();
                assert_eq!(policy(), libc::SCHED_OTHER);
            }
            assert_eq!(policy(), libc::SCHED_IDLE);
        })
        .join()
        .unwrap();
    }
}
