//! The Z-zone with a writer thread's arrangement (`Cache::start_zone_writer`)
//! but no writer running, as on a machine too busy to give the
//! `SCHED_IDLE` writer CPU: the stage fills past its limit, and the
//! threads that demote pack it once they have let the engine lock go
//! (`Cache::help_zone_writer`). One such release is inside a zone read,
//! whose promotion takes the engine lock while the thread's zone reader
//! is borrowed: helping there took the reader again and panicked
//! ("RefCell already borrowed"), which closed the client's connection.

use std::sync::Arc;

use crate::engine::{Lookup, Store};
use crate::{Cache, Clock, Config};

fn key(k: u64) -> Vec<u8> {
    format!("key:{k:08}").into_bytes()
}

/// A compressible value that names its key.
fn value(k: u64) -> Vec<u8> {
    format!(
        "{{\"id\":{k},\"name\":\"user {k}\",\"email\":\"user{k}@example.com\",\"active\":true,\"score\":{}}}",
        k % 1000
    )
    .into_bytes()
}

#[test]
fn zone_reads_promote_while_the_stage_is_over_its_limit() {
    let config = Config {
        memory_limit: 4 << 20,
        zzone: true,
        ..Config::default()
    };
    let cache = Cache::new(config, Arc::new(Clock::new())).expect("cache");
    assert!(cache.start_zone_writer(), "the zone is on");
    let n = 80_000;
    for k in 0..n {
        cache.store(&Store::set(&key(k), &value(k)));
        // The maintainer's steps grant the zone its pages.
        if k % 500 == 0 {
            cache.maintain(64);
        }
    }
    // Each key read twice in a row: the zone promotes an item read again
    // soon (its block's reuse record), under the engine lock, from inside
    // the read.
    let mut hits = 0;
    for i in 0..2 * n {
        let k = i / 2;
        let got = cache.get(&key(k), Lookup::GET, |item| {
            item.map(|i| (i.key.to_vec(), i.value.to_vec()))
        });
        if let Some((kk, v)) = got {
            assert_eq!(kk, key(k));
            assert_eq!(v, value(k), "key {k}'s value");
            hits += 1;
        }
    }
    let z = cache.stats().zzone.expect("zone stats").zone;
    assert!(z.items > 10_000, "the zone holds items: {}", z.items);
    assert!(z.sync_flushes > 0, "demotions found the stage full");
    assert!(
        z.promotions > 1_000,
        "zone reads promoted: {}",
        z.promotions
    );
    assert!(hits > n, "hits {hits}");
    cache.lock().validate();
}

/// A zone filling while the maintainer gets no turn after the first (a
/// server whose two cores the clients keep busy): the stores grant the
/// zone the pages it needs, from free memory or by draining the N-zone's.
/// Left to the maintainer, the zone stayed at 1 page of 14 and evicted
/// some 21,800 of these 120,000 items, which fit
/// (docs/benchmarks-history.md).
#[test]
fn a_zone_whose_maintainer_never_runs_keeps_what_fits() {
    let config = Config {
        memory_limit: 16 << 20,
        growth_factor: 2.0,
        zzone: true,
        zzone_target: 0,
        ..Config::default()
    };
    let cache = Cache::new(config, Arc::new(Clock::new())).expect("cache");
    assert!(cache.start_zone_writer(), "the zone is on");
    // The warm-restart test's values: 10 to 399 bytes of the alphabet.
    let value = |i: usize| -> Vec<u8> {
        let len = 10 + (i * 37) % 390;
        (0..len).map(|j| b'a' + ((i + j) % 26) as u8).collect()
    };
    let n = 120_000;
    cache.maintain(64);
    for i in 0..n {
        cache.store(&Store::set(format!("warm:{i}").as_bytes(), &value(i)));
    }
    let s = cache.stats();
    let z = s.zzone.expect("zone stats");
    assert!(z.zone.pages > 1, "the zone grew: {z:?}");
    assert_eq!((s.curr_items, s.evictions), (n as u64, 0), "{z:?}");
    for i in (0..n).step_by(7) {
        let got = cache.get(format!("warm:{i}").as_bytes(), Lookup::GET, |item| {
            item.map(|i| i.value.to_vec())
        });
        assert_eq!(got, Some(value(i)), "warm:{i}");
    }
    cache.lock().validate();
}
