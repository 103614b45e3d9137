//! `cachalot-lab engine-bench` on tiny sizes: the report it prints is sane
//! (requests ran, hits were found, every lock acquisition is accounted for)
//! both for a timed run and for a fixed request count, with GETs on their
//! stripes and with `--locked-gets`.

use cachalot_lab::enginebench::{bench, Report};
use cachalot_lab::{Cli, Command};
use clap::Parser;

fn run(extra: &[&str]) -> Report {
    let mut argv = vec![
        "cachalot-lab",
        "engine-bench",
        "-m",
        "8",
        "--dataset",
        "1",
        "--threads",
        "2",
        "--warm",
        "--ring",
        "4096",
        "--time-every",
        "4",
        // No rule that samples GETs (MRC samples every key of so small a
        // cache, and a sampled GET takes the engine lock).
        "--rebalance",
        "off",
    ];
    argv.extend_from_slice(extra);
    let Command::EngineBench(args) = Cli::parse_from(argv).command else {
        panic!("engine-bench did not parse as itself");
    };
    bench(&args).expect("engine-bench runs")
}

/// What holds for any run: the counts add up and the lock figures cover them.
fn check(r: &Report) {
    assert!(r.ops > 0, "no requests ran: {r:?}");
    assert_eq!(r.gets + r.sets, r.ops);
    assert_eq!(r.per_thread_ops_per_s.len(), 2);
    assert!(r.per_thread_ops_per_s.iter().all(|&x| x > 0.0), "{r:?}");
    assert!(r.hit_ratio > 0.0 && r.hit_ratio <= 1.0, "{r:?}");
    // 1 MB of 116-byte items fits in -m 8: every key is cached, every GET hits.
    assert_eq!(r.curr_items, r.items);
    assert_eq!(r.hits, r.gets);
    // A GET reads its bucket line, and a sub-bucket at times; its item of
    // 16 + 16 + 100 bytes spans three lines or four.
    let (index, item) = r.lines_per_get;
    assert!((1.0..1.5).contains(&index), "{r:?}");
    assert!((3.0..=4.0).contains(&item), "{r:?}");
    // Every key is cached with a value of one size, so a SET rewrites its
    // item in place under its stripe (`Cache::try_store`), unless that is
    // switched off; then it takes the engine lock once.
    let in_place = r.lock.unlocked_sets;
    let locked_sets = r.sets - in_place;
    assert_eq!(in_place, if r.in_place_sets { r.sets } else { 0 }, "{r:?}");
    // With --locked-gets, a GET takes the engine lock once; a multi-get of
    // --batch keys once for all of them (each thread may end with one
    // partial batch). Otherwise GETs take none (they read their stripe).
    let acq = r.lock.request_acquisitions;
    if r.locked_gets {
        let batches = r.gets.div_ceil(r.batch as u64);
        assert!(acq >= batches + locked_sets, "{r:?}");
        assert!(acq <= batches + r.threads as u64 + locked_sets, "{r:?}");
        if r.batch == 1 {
            assert_eq!(acq, r.gets + locked_sets);
        }
    } else {
        assert_eq!(acq, locked_sets, "{r:?}");
        assert!(r.lock.stripe_gets_timed > 0, "{r:?}");
        assert!(r.lock.stripe_get_p50_ns <= r.lock.stripe_get_p99_ns);
    }
    // The maintainer runs as soon as the workers start (a run of a few
    // milliseconds may end before its thread is first scheduled).
    assert!(
        r.lock.maintainer_acquisitions >= 1 || r.elapsed_s < 0.1,
        "{r:?}"
    );
    assert!(r.lock.request_timed <= r.lock.request_acquisitions);
    assert!(r.lock.request_timed > 0 || acq == 0, "{r:?}");
    assert!(r.lock.request_hold_p50_ns <= r.lock.request_hold_p99_ns);
    assert!(r.lock.request_hold_p99_ns <= r.lock.request_hold_max_ns);
    assert!(r.lock.maintainer_hold_max_ns <= r.lock.maintainer_hold_total_ns);
}

#[test]
fn a_timed_run_reports_sane_figures() {
    let r = run(&["--duration", "0.5", "--in-place-sets", "true"]);
    check(&r);
    assert!(r.lock.unlocked_sets > 0, "{r:?}");
    assert!(r.elapsed_s >= 0.4 && r.elapsed_s < 3.0, "{r:?}");
    assert!(r.sets > 0, "a 0.9 get ratio gave no SETs: {r:?}");
}

#[test]
fn a_timed_run_with_locked_gets_and_sets_reports_sane_figures() {
    let r = run(&[
        "--duration",
        "0.5",
        "--locked-gets",
        "--in-place-sets",
        "false",
    ]);
    check(&r);
    assert!(r.lock.request_acquisitions > r.sets, "{r:?}");
}

#[test]
fn a_fixed_count_runs_exactly_that_many_requests() {
    for locked in [false, true] {
        let mut args = vec!["--ops", "20001", "--get-ratio", "1"];
        if locked {
            args.push("--locked-gets");
        }
        let r = run(&args);
        check(&r);
        assert_eq!(r.ops, 20001);
        assert_eq!((r.gets, r.sets), (20001, 0));
        let want = if locked { 20001 } else { 0 };
        assert_eq!(r.lock.request_acquisitions, want, "{r:?}");
    }
}

#[test]
fn multi_gets_take_the_lock_once_per_batch() {
    // Without --locked-gets, multi-gets take no engine lock at all.
    let r = run(&["--ops", "20000", "--get-ratio", "1", "--batch", "4"]);
    check(&r);
    assert_eq!(r.lock.request_acquisitions, 0, "{r:?}");
    for prefetch in ["true", "false"] {
        let r = run(&[
            "--ops",
            "20000",
            "--get-ratio",
            "1",
            "--batch",
            "4",
            "--prefetch",
            prefetch,
            "--locked-gets",
        ]);
        check(&r);
        assert_eq!((r.gets, r.sets), (20000, 0));
        // 10 000 requests per thread: 2 500 multi-gets of 4 keys each.
        assert_eq!(r.lock.request_acquisitions, 5000, "{r:?}");
    }
    // A batch left partial when the run ends is still served.
    let r = run(&[
        "--ops",
        "20002",
        "--get-ratio",
        "1",
        "--batch",
        "4",
        "--locked-gets",
    ]);
    check(&r);
    assert_eq!(r.gets, 20002);
    assert_eq!(r.lock.request_acquisitions, 2 * 2501, "{r:?}");
}
