//! The machine's floor under lock holds (issue 34, "Done when" 6): a fixed
//! few microseconds of arithmetic, timed again and again on one core. On a
//! quiet bare-metal core every run takes the same time; on this machine's
//! virtual CPUs some take ten or a thousand times longer (the host, other
//! guests, the kernel's own threads), and a lock hold of the same work
//! would have been as long. `benches/fill-tail.sh` prints this beside the
//! server's hold histogram, run on the server's core at the priority the
//! Z-zone's writer holds its lock at.
//!
//! Each run is also timed on the thread's CPU clock, as the server times
//! a background hold's "on CPU" figure. Where the host's stalls are
//! charged to the guest thread that was running (the Firecracker guests
//! here: an idle core's 5 µs runs reached 649 µs on that clock), a long
//! hold on the CPU is not by itself a slice of work too large; this says
//! how often the machine makes one.

use std::hint::black_box;
use std::time::Instant;

use cachalot_engine::priority::thread_cpu_ns;

/// One unit of work: a dependent chain of multiplications (no memory).
fn work(rounds: u64) -> u64 {
    let mut x = black_box(1u64);
    for _ in 0..rounds {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
    }
    black_box(x)
}

/// Rounds of [`work`] that take about `us` microseconds here.
fn calibrate(us: f64) -> u64 {
    let probe = 1_000_000;
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        work(probe);
        best = best.min(t.elapsed().as_secs_f64());
    }
    ((us * 1e-6 / best) * probe as f64).max(1.0) as u64
}

/// Time `iters` runs of about `work_us` µs each; print the quantiles and
/// the share of runs over 16 µs and over 100 µs (the hold bounds of
/// issue 34), and the longest run and the share over 100 µs on the
/// thread's CPU clock, as `name=value` lines.
pub fn run(iters: usize, work_us: f64) {
    let rounds = calibrate(work_us);
    let mut us: Vec<f64> = Vec::with_capacity(iters);
    let (mut cpu_max_ns, mut cpu_over_100) = (0, 0);
    for _ in 0..iters {
        let (t, cpu) = (Instant::now(), thread_cpu_ns());
        work(rounds);
        us.push(t.elapsed().as_secs_f64() * 1e6);
        let on_cpu = thread_cpu_ns().saturating_sub(cpu);
        cpu_max_ns = cpu_max_ns.max(on_cpu);
        cpu_over_100 += (on_cpu > 100_000) as usize;
    }
    us.sort_by(f64::total_cmp);
    let q = |f: f64| us[((f * iters as f64) as usize).min(iters - 1)];
    let over = |b: f64| us.iter().filter(|&&u| u > b).count() as f64 / iters as f64;
    println!("jitter_iters={iters}");
    println!("jitter_p50_us={:.1}", q(0.5));
    println!("jitter_p99_us={:.1}", q(0.99));
    println!("jitter_p999_us={:.1}", q(0.999));
    println!("jitter_max_us={:.1}", us[iters - 1]);
    println!("jitter_over_16us={:.5}", over(16.0));
    println!("jitter_over_100us={:.5}", over(100.0));
    println!("jitter_max_cpu_us={:.1}", cpu_max_ns as f64 / 1e3);
    println!(
        "jitter_cpu_over_100us={:.5}",
        cpu_over_100 as f64 / iters as f64
    );
}
