//! Last-access times, as memcached 1.6.18 keeps them (meta `l`, `h`, `me la=`,
//! `stats items` ages): which operations refresh an item's time, to the
//! second, and the saturation of very old ages by the reclaimer. The expected
//! behaviour was read off `/usr/bin/memcached` (docs/protocol.md, meta notes).

use std::sync::Arc;
use std::time::Duration;

use crate::engine::{Arith, Lookup};
use crate::item::ATIME_SATURATE;
use crate::{
    ArithOutcome, Clock, Config, Engine, EvictionPolicy, Expiry, Store, StoreMode, StoreOutcome,
};

fn engine(eviction: EvictionPolicy) -> (Arc<Clock>, Engine) {
    let clock = Arc::new(Clock::new());
    let config = Config {
        eviction,
        ..Config::default()
    };
    (clock.clone(), Engine::new(config, clock).unwrap())
}

/// (age in seconds, fetched) of `key`, without touching it.
fn age(e: &mut Engine, clock: &Clock, key: &[u8]) -> (u32, bool) {
    let it = e.lookup(key, Lookup::PEEK).expect("item");
    (clock.now() - it.last_access, it.fetched)
}

fn wait(clock: &Clock, secs: u64) {
    clock.advance(Duration::from_secs(secs));
}

fn set(e: &mut Engine, key: &[u8], value: &[u8]) {
    assert!(matches!(
        e.store(&Store::set(key, value)),
        StoreOutcome::Stored { .. }
    ));
}

#[test]
fn the_first_fetch_marks_the_item_later_fetches_refresh_it() {
    for policy in [EvictionPolicy::Lru, EvictionPolicy::GdWheel] {
        let (clock, mut e) = engine(policy);
        set(&mut e, b"k", b"v");
        assert_eq!(age(&mut e, &clock, b"k"), (0, false));
        wait(&clock, 7);
        assert_eq!(age(&mut e, &clock, b"k"), (7, false));
        // First fetch: fetched, time kept (memcached's do_item_bump).
        e.get(b"k").unwrap();
        wait(&clock, 2);
        assert_eq!(age(&mut e, &clock, b"k"), (9, true));
        // Second fetch: time refreshed.
        e.get(b"k").unwrap();
        assert_eq!(age(&mut e, &clock, b"k"), (0, true));
        wait(&clock, 601);
        assert_eq!(age(&mut e, &clock, b"k"), (601, true));
        // A touch is a fetch too.
        e.touch(b"k", Expiry::Never).unwrap();
        assert_eq!(age(&mut e, &clock, b"k"), (0, true));
        // A peek (meta `u`) changes nothing.
        wait(&clock, 3);
        e.lookup(b"k", Lookup::PEEK).unwrap();
        assert_eq!(age(&mut e, &clock, b"k"), (3, true));
    }
}

#[test]
fn touch_of_an_unfetched_item_only_marks_it() {
    let (clock, mut e) = engine(EvictionPolicy::Lru);
    set(&mut e, b"k", b"v");
    wait(&clock, 3);
    e.touch(b"k", Expiry::Never).unwrap();
    assert_eq!(age(&mut e, &clock, b"k"), (3, true));
}

#[test]
fn failed_add_and_in_place_incr_refresh_without_fetching() {
    let (clock, mut e) = engine(EvictionPolicy::Lru);
    set(&mut e, b"k", b"5");
    wait(&clock, 4);
    let add = Store {
        mode: StoreMode::Add,
        ..Store::set(b"k", b"x")
    };
    assert_eq!(e.store(&add), StoreOutcome::NotStored);
    assert_eq!(age(&mut e, &clock, b"k"), (0, false));
    wait(&clock, 4);
    let incr = |delta| Arith {
        incr: true,
        delta,
        cas: 0,
        autovivify: None,
        new_expiry: None,
    };
    assert!(matches!(
        e.arith(b"k", &incr(1)),
        ArithOutcome::Value { value: 6, .. }
    ));
    assert_eq!(age(&mut e, &clock, b"k"), (0, false));
    // Fetched, then grown by incr: a new item, not fetched (memcached `h0`).
    e.get(b"k").unwrap();
    wait(&clock, 2);
    assert!(matches!(
        e.arith(b"k", &incr(10)),
        ArithOutcome::Value { value: 16, .. }
    ));
    assert_eq!(age(&mut e, &clock, b"k"), (0, false));
    // A failed CAS leaves the item alone.
    wait(&clock, 5);
    let cas = Store {
        cas: 1 << 39,
        ..Store::set(b"k", b"y")
    };
    assert_eq!(e.store(&cas), StoreOutcome::Exists);
    assert_eq!(age(&mut e, &clock, b"k"), (5, false));
}

#[test]
fn ages_stay_exact_until_they_saturate() {
    let (clock, mut e) = engine(EvictionPolicy::Lru);
    set(&mut e, b"k", b"v");
    set(&mut e, b"big", &vec![b'x'; 100_000]);
    // Past 2^16 seconds in steps the reclaimer (visiting every item) follows:
    // exact up to ATIME_SATURATE, then pinned there, never wrapped.
    let mut waited = 0u32;
    for step in [
        1000u32, 20_000, 27_000, 1152, 1, 5000, 16_000, 16_000, 16_000,
    ] {
        wait(&clock, u64::from(step));
        waited += step;
        e.maintain(1 << 20);
        for key in [&b"k"[..], b"big"] {
            assert_eq!(
                age(&mut e, &clock, key).0,
                waited.min(ATIME_SATURATE),
                "after {waited} s"
            );
        }
    }
    assert!(waited > 1 << 16);
    // A fresh access starts again from zero.
    e.get(b"k").unwrap();
    e.get(b"k").unwrap();
    assert_eq!(age(&mut e, &clock, b"k").0, 0);
}
