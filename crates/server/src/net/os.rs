//! The few process-level operations memcached performs at start-up that need
//! raw libc calls: daemonizing (`-d`, memcached's `daemon.c`), dropping root
//! (`-u`), resource limits (`-c`, `-r`), `mlockall` (`-k`), and glibc's
//! malloc tuning that gives connection buffers back to the kernel.
//!
//! This is the only module with `unsafe`: each block is one FFI call with
//! plain-data arguments, and all of them but `trim_heap` run before any
//! thread is started.

use std::ffi::CString;
use std::io;

use super::exit::{EX_NOUSER, EX_OSERR};

/// Whether the process runs as root (real or effective).
pub fn is_root() -> bool {
    // SAFETY: getuid/geteuid take no arguments and cannot fail.
    unsafe { libc::getuid() == 0 || libc::geteuid() == 0 }
}

/// With `-u` as root, become that user. memcached refuses to run as root
/// without `-u`; cachalot only warns, so the plain start command works on a
/// fresh machine where everything runs as root (scripts that pass `-u` behave
/// exactly as with memcached). Returns memcached's message and exit code on
/// failure.
pub fn drop_privileges(user: Option<&str>) -> Result<(), (String, i32)> {
    if !is_root() {
        return Ok(());
    }
    let Some(user) = user.filter(|u| !u.is_empty()) else {
        eprintln!(
            "warning: running as root without the -u switch (memcached would refuse; pass -u <user> to drop privileges)"
        );
        return Ok(());
    };
    let not_found = || {
        (
            format!("can't find the user {user} to switch to"),
            EX_NOUSER,
        )
    };
    let cname = CString::new(user).map_err(|_| not_found())?;
    // SAFETY: `cname` is a valid NUL-terminated string; getpwnam returns NULL
    // or a pointer to static storage that we read before any other call (and
    // no other thread exists yet that could call it concurrently).
    let pw = unsafe { libc::getpwnam(cname.as_ptr()) };
    if pw.is_null() {
        return Err(not_found());
    }
    // SAFETY: `pw` was just checked to be non-NULL and points to a passwd.
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    let fail = || {
        (
            format!("failed to assume identity of user {user}"),
            EX_OSERR,
        )
    };
    // The Z-zone writer runs at idle priority and holds the zone's lock at
    // SCHED_FIFO 1 (`cachalot_engine::priority`): the user needs an
    // RLIMIT_RTPRIO of 1 for that (or an RLIMIT_NICE of 20, for normal
    // priority), which only root may grant. Best effort: refused, the
    // writer holds the lock at the best priority it may.
    for (resource, max) in [(libc::RLIMIT_RTPRIO, 1), (libc::RLIMIT_NICE, 20)] {
        let lim = libc::rlimit {
            rlim_cur: max,
            rlim_max: max,
        };
        // SAFETY: `lim` is a valid rlimit the call only reads.
        unsafe { libc::setrlimit(resource, &lim) };
    }
    // SAFETY: setgroups with a zero count reads no memory; setgid/setuid take
    // plain integers. Order matters: groups and gid first, while still root.
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0 {
            return Err(fail());
        }
        if libc::setgid(gid) != 0 || libc::setuid(uid) != 0 {
            return Err(fail());
        }
    }
    Ok(())
}

/// Make sure `needed` file descriptors can be open (memcached raises
/// RLIMIT_NOFILE to `-c`). Raises the soft limit, and the hard one if allowed.
pub fn ensure_nofile(needed: u64) -> Result<(), (String, i32)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(("failed to getrlimit number of files".to_string(), EX_OSERR));
    }
    if lim.rlim_cur >= needed {
        return Ok(());
    }
    let wanted = libc::rlimit {
        rlim_cur: needed,
        rlim_max: lim.rlim_max.max(needed),
    };
    // SAFETY: `wanted` is a valid rlimit struct, read only.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &wanted) } != 0 {
        return Err((
            "failed to set rlimit for open files. Try starting as root or requesting smaller \
             maxconns value."
                .to_string(),
            EX_OSERR,
        ));
    }
    Ok(())
}

/// `-r`: allow core files as large as the hard limit permits.
pub fn raise_core_limit() -> io::Result<()> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid, writable rlimit struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_CORE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: valid rlimit struct, read only.
    if unsafe { libc::setrlimit(libc::RLIMIT_CORE, &lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Buffers of this size and more get their own mapping from glibc.
pub const MMAP_THRESHOLD: usize = 128 * 1024;

/// Make freed connection buffers go back to the kernel at once.
///
/// glibc serves a block of 128 KB or more with its own mmap, but its default
/// *dynamic* threshold rises to the size of any such block that is freed (up
/// to 32 MB), after which large buffers come from the heap arenas, which
/// keep freed memory: a burst of large replies or requests left the process
/// hundreds of MB larger for good. Setting the threshold fixes it
/// (mallopt(3)), so every large buffer (grown read buffers, output holding
/// a large value, the engine's 1 MB pages) is unmapped when freed and the
/// arenas only hold small objects. Other C libraries: nothing to do here.
pub fn return_large_frees() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt takes two integers; called before any thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as libc::c_int);
    }
}

/// Give free pages inside glibc's arenas back to the kernel (malloc_trim(3)):
/// thousands of closed connections leave their small allocations scattered
/// there, which the arenas would otherwise keep.
pub fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes an integer and locks each arena it trims.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// `-k`: lock current and future pages in memory.
pub fn lock_memory() -> io::Result<()> {
    // SAFETY: mlockall takes flags only.
    if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `-d`: fork, let the parent exit 0, start a new session; unless `keep_cwd`
/// change to `/`; unless `keep_stdio` (memcached keeps them when verbose)
/// point stdin/stdout/stderr at /dev/null. Must run before threads exist.
pub fn daemonize(keep_cwd: bool, keep_stdio: bool) -> io::Result<()> {
    use std::io::Write;
    let _ = io::stdout().flush();
    let _ = io::stderr().flush();
    // SAFETY: the process is single-threaded here, so the child inherits a
    // consistent state; the parent leaves with _exit, running no destructors
    // that would double-flush or remove files the child still uses.
    match unsafe { libc::fork() } {
        -1 => return Err(io::Error::last_os_error()),
        0 => {}
        // SAFETY: _exit never returns and touches no Rust state.
        _ => unsafe { libc::_exit(0) },
    }
    // SAFETY: setsid takes no arguments.
    if unsafe { libc::setsid() } == -1 {
        return Err(io::Error::last_os_error());
    }
    if !keep_cwd {
        std::env::set_current_dir("/")?;
    }
    if !keep_stdio {
        use std::os::fd::AsRawFd;
        let null = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")?;
        for fd in 0..3 {
            // SAFETY: both descriptors are open; dup2 replaces fd atomically.
            if unsafe { libc::dup2(null.as_raw_fd(), fd) } == -1 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}
