//! A process's resident memory, from /proc/<pid>/status: VmRSS, and the
//! kernel's own high-water mark VmHWM; read once, or sampled on a thread for
//! the largest VmRSS over a run. The hostile-client probes (`hostile`) and
//! the capacity benchmark (`benches/loadgen`) both measure the server so.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// VmRSS and VmHWM of a process, in kB.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rss {
    pub rss_kb: u64,
    pub hwm_kb: u64,
}

/// Parse /proc/<pid>/status text (a field it lacks reads 0).
pub fn parse_status(text: &str) -> Rss {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    Rss {
        rss_kb: field("VmRSS:"),
        hwm_kb: field("VmHWM:"),
    }
}

/// The resident memory of process `pid` now.
pub fn read(pid: u32) -> io::Result<Rss> {
    Ok(parse_status(&std::fs::read_to_string(format!(
        "/proc/{pid}/status"
    ))?))
}

/// Samples VmRSS of a process every `every` on a thread until stopped (once
/// more as it stops); [`Sampler::finish`] gives the largest sample seen.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<u64>,
}

impl Sampler {
    pub fn start(pid: u32, every: Duration) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::spawn(move || {
            let mut max = 0;
            loop {
                if let Ok(r) = read(pid) {
                    max = max.max(r.rss_kb);
                }
                if flag.load(Ordering::Relaxed) {
                    return max;
                }
                std::thread::sleep(every);
            }
        });
        Sampler { stop, handle }
    }

    /// Stop sampling; the largest VmRSS seen, in kB.
    pub fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_parsing() {
        let text = "Name:\tmemcached\nVmHWM:\t   81234 kB\nVmRSS:\t   70000 kB\n";
        assert_eq!(
            parse_status(text),
            Rss {
                rss_kb: 70000,
                hwm_kb: 81234
            }
        );
        assert_eq!(parse_status("garbage"), Rss::default());
    }

    #[test]
    fn own_rss_is_readable() {
        let r = read(std::process::id()).unwrap();
        assert!(r.rss_kb > 0 && r.hwm_kb >= r.rss_kb, "{r:?}");
    }
}
