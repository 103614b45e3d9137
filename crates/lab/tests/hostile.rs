//! Hostile clients against cachalot, scaled down (issue 9): every probe of
//! `cachalot_lab::hostile` at `Scale::small`, each against a fresh
//! `cachalot -m 64`. Each must keep the server's peak resident memory
//! (VmHWM and VmRSS sampled every 5 ms) within -m + 16 MB, keep the watching
//! client answered throughout, and, where the probe stores nothing that the
//! cache keeps, leave RSS where it was once its clients are gone.
//!
//! Before the fix, `multiget_big` alone took the server past 200 MB. The full
//! sizes, side by side with memcached, are benches/hostile.sh's.
//!
//! The cachalot binary: see tests/replay_support (built if missing).

mod replay_support;

use cachalot_lab::hostile::{run_fresh, Probe, ProbeReport, Scale};
use cachalot_lab::servers::ServerKind;

const MEMORY_MB: u64 = 64;

/// Run `probe` and check the promises; `keeps_nothing`: the probe stores
/// nothing that stays in the cache, so RSS must come back down after it.
fn check(probe: Probe, keeps_nothing: bool) -> ProbeReport {
    let bin = replay_support::cachalot_bin();
    let r = run_fresh(
        probe,
        ServerKind::Cachalot,
        MEMORY_MB,
        2,
        &Scale::small(),
        Some(&bin),
    )
    .unwrap_or_else(|e| panic!("{}: {e:#}", probe.name()));
    eprintln!("{r:?}");
    assert!(
        r.peak_kb <= (MEMORY_MB + 16) * 1024,
        "{}: peak RSS {} kB over -m + 16 MB ({})",
        probe.name(),
        r.peak_kb,
        r.outcome
    );
    assert!(
        r.watch.failed == 0 && r.watch.answered > 0,
        "{}: the watching client was not served: {:?}",
        probe.name(),
        r.watch
    );
    if keeps_nothing {
        assert!(
            r.after_kb <= r.before_kb + 2048,
            "{}: RSS {} kB before, {} kB after the clients left",
            probe.name(),
            r.before_kb,
            r.after_kb
        );
    }
    r
}

#[test]
fn multiget_big() {
    let r = check(Probe::MultigetBig, true);
    // Its own output limit, not the cache size, is what bounds it: the
    // 200 MB reply must have left less than a few MB behind at its peak.
    assert!(r.peak_kb < r.before_kb + 8 * 1024, "{r:?}");
}

#[test]
fn never_reads() {
    let r = check(Probe::NeverReads, true);
    assert!(r.peak_kb < r.before_kb + 12 * 1024, "{r:?}");
}

#[test]
fn pipeline_flood() {
    check(Probe::PipelineFlood, false);
}

#[test]
fn idle_conns() {
    check(Probe::IdleConns, true);
}

#[test]
fn resets() {
    check(Probe::Resets, true);
}

#[test]
fn slowloris() {
    check(Probe::Slowloris, false);
}

#[test]
fn every_size() {
    check(Probe::EverySize, false);
}

#[test]
fn huge_bodies() {
    check(Probe::HugeBodies, true);
}
