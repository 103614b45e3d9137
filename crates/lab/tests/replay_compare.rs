//! `compare` end to end: memcached and cachalot started by servers.rs, the
//! same YCSB-C workload against each, repeated with alternating order, and
//! the JSON document it writes.
//!
//! With a cache far larger than the data nothing is evicted, so both servers
//! must report exactly the same hits: every key misses once, then always
//! hits. That pins the look-aside driver, the per-server plumbing and the
//! summary's medians and ratios to numbers known without running anything.
//!
//! The cachalot binary: see tests/replay_support (built if missing).
//! memcached: from PATH, installed with apt-get by servers.rs when missing
//! and running as root.

mod replay_support;

use std::collections::HashSet;

use cachalot_lab::compare::{self, CompareArgs, CompareResult};
use cachalot_lab::metrics::IntervalSpec;
use cachalot_lab::replay::{DriveArgs, Protocol};
use cachalot_lab::trace::Op;
use cachalot_lab::values::ValueKind;
use cachalot_lab::workload::Source;

#[test]
fn compare_runs_both_servers_alternating_and_writes_the_document() {
    compare_and_check(0);
}

/// The same against three nodes of each behind twemproxy (nutcracker): the
/// same hits, and the pool's stats are its nodes' added up.
#[test]
fn compare_runs_pools_behind_twemproxy() {
    compare_and_check(3);
}

fn compare_and_check(pool: usize) {
    let source = Source {
        model: Some("ycsb-c".to_string()),
        params: vec![
            ("keys".to_string(), "2000".to_string()),
            ("value_size".to_string(), "100".to_string()),
        ],
        trace: None,
        requests: 20_000,
        seed: 5,
    };
    // What look-aside without eviction gives: one miss per distinct key.
    let reqs: Vec<_> = source.open().expect("ycsb-c").collect();
    assert!(reqs.iter().all(|r| r.op == Op::Get));
    let distinct = reqs.iter().map(|r| r.key).collect::<HashSet<_>>().len() as u64;
    let want_hit = 1.0 - distinct as f64 / reqs.len() as f64;

    let json =
        std::env::temp_dir().join(format!("replay-compare-{}-{pool}.json", std::process::id()));
    let args = CompareArgs {
        source,
        memory: 64,
        threads: 2,
        repeat: 2,
        cachalot_bin: Some(replay_support::cachalot_bin()),
        server_args: vec![],
        cachalot_args: vec![],
        flash: None,
        flash_dir: None,
        pool,
        drive: DriveArgs {
            protocol: Protocol::Text,
            connections: 2,
            pipeline: 4,
            rate: None,
            values: ValueKind::Text,
            interval: IntervalSpec::Requests(10_000),
            client_threads: 1,
            backend_us_per_cost: 0.0,
            show_intervals: false,
        },
        json: Some(json.clone()),
    };
    compare::run(args).expect("compare");
    let doc: CompareResult =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written"))
            .expect("parses");
    let _ = std::fs::remove_file(&json);

    let order: Vec<&str> = doc.runs.iter().map(|r| r.meta.label.as_str()).collect();
    assert_eq!(order, ["memcached", "cachalot", "cachalot", "memcached"]);
    assert_eq!(doc.servers.len(), 2);
    assert!(doc.servers[0].iter().any(|a| a.ends_with("memcached")));
    for r in &doc.runs {
        let t = &r.totals;
        assert_eq!(t.counts.requests, 20_000, "{}", r.meta.label);
        assert_eq!(t.counts.gets - t.counts.hits, distinct, "{}", r.meta.label);
        assert_eq!(t.fills, distinct);
        assert_eq!(t.errors, 0);
        assert_eq!(r.intervals.len(), 2);
        // A pool's memory is its nodes' together.
        assert_eq!(r.meta.memory_mb, Some(64 * pool.max(1) as u64));
        assert_eq!(r.meta.server_kind, r.meta.label);
        assert_eq!(r.meta.tool, "compare");
        assert!(t.throughput_rps > 0.0);
        assert!(t.latency["get"].count == t.counts.gets);
        // The server saw what the client counted.
        assert_eq!(r.meta.server_stats["get_hits"], t.counts.hits.to_string());
        // Costs go to cachalot only, and not through twemproxy.
        let costs = r.meta.settings["send_costs"].as_bool();
        assert_eq!(costs, Some(r.meta.label == "cachalot" && pool == 0));
    }
    let hit = doc
        .summary
        .iter()
        .find(|s| s.metric == "hit ratio")
        .expect("hit ratio row");
    assert!(
        (hit.memcached - want_hit).abs() < 1e-12,
        "{hit:?} vs {want_hit}"
    );
    assert!(
        (hit.cachalot - want_hit).abs() < 1e-12,
        "{hit:?} vs {want_hit}"
    );
    assert_eq!(hit.ratio, Some(1.0));
    let items = doc
        .summary
        .iter()
        .find(|s| s.metric == "items at end")
        .unwrap();
    assert_eq!(
        (items.memcached, items.cachalot),
        (distinct as f64, distinct as f64)
    );
}
