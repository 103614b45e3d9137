//! `cachalot-lab engine-bench` on tiny sizes: the report it prints is sane
//! (requests ran, hits were found, every lock acquisition is accounted for)
//! both for a timed run and for a fixed request count.

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
    // A GET takes the lock once, a SET (which fits) twice: fits, then store.
    assert_eq!(r.lock.request_acquisitions, r.gets + 2 * r.sets);
    // The maintainer runs as soon as the workers start.
    assert!(r.lock.maintainer_acquisitions >= 1, "{r:?}");
    assert!(r.lock.request_timed > 0 && r.lock.request_timed <= r.lock.request_acquisitions);
    assert!(r.lock.request_hold_p50_ns <= r.lock.request_hold_p99_ns);
    assert!(r.lock.request_hold_p99_ns <= r.lock.request_hold_max_ns);
    assert!(r.lock.maintainer_hold_max_ns <= r.lock.maintainer_hold_total_ns);
}

#[test]
fn a_timed_run_reports_sane_figures() {
    let r = run(&["--duration", "0.5"]);
    check(&r);
    assert!(r.elapsed_s >= 0.4 && r.elapsed_s < 3.0, "{r:?}");
    assert!(r.sets > 0, "a 0.9 get ratio gave no SETs: {r:?}");
}

#[test]
fn a_fixed_count_runs_exactly_that_many_requests() {
    let r = run(&["--ops", "20001", "--get-ratio", "1"]);
    check(&r);
    assert_eq!(r.ops, 20001);
    assert_eq!((r.gets, r.sets), (20001, 0));
    assert_eq!(r.lock.request_acquisitions, 20001);
}
