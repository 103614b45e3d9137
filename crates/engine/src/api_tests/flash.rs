//! The flash tier through the cache (issue 12): items that leave memory
//! come back from flash byte for byte; overwritten, deleted and flushed
//! keys never come back stale; faults (flipped bytes, read errors, a full
//! disk) cost misses, never wrong bytes; the garbage collector recycles
//! slabs and moves re-read items to the hot area; the DRAM index stays
//! under 12 bytes an item; `lru_crawler metadump` lists the tier's items
//! once each (issue 34). `validate` checks the tier's structures after
//! each phase.

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::{Lookup, Store};
use crate::flash::device::{Device, Faulty, FileDevice};
use crate::flash::dict;
use crate::flash::{FlashConfig, FlashStats};
use crate::{item, Cache, Clock, Config, DumpAt, MetaItem, Tier};

struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str) -> TempFile {
        let p =
            std::env::temp_dir().join(format!("cachalot-flash-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        TempFile(p)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        for side in [".index", ".journal", ".dict"] {
            let mut p = self.0.as_os_str().to_owned();
            p.push(side);
            let _ = std::fs::remove_file(p);
        }
    }
}

fn config(path: &TempFile, memory_mb: usize, flash_mb: u64) -> Config {
    Config {
        memory_limit: memory_mb << 20,
        flash: Some(FlashConfig::new(path.0.clone(), flash_mb << 20)),
        // Memory and flash alone (`the_zzone_evictions_go_on_to_flash` adds the zone).
        zzone: false,
        ..Config::default()
    }
}

fn key(k: u64) -> Vec<u8> {
    format!("key:{k:08}").into_bytes()
}

/// A JSON-like value naming its key and version, with a token of hex
/// digits that does not repeat (so it compresses about 2.5x, as records
/// do, not 10x).
fn value(k: u64, version: u32) -> Vec<u8> {
    let mut x = k.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(version);
    let token: String = (0..4)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            format!("{x:016x}")
        })
        .collect();
    format!(
        "{{\"id\":{k},\"version\":{version},\"name\":\"user{k}\",\"token\":\"{token}\",\"active\":true,\"score\":{}}}",
        k % 1000
    )
    .into_bytes()
}

fn set(cache: &Cache, k: u64, version: u32) {
    let (key, value) = (key(k), value(k, version));
    cache.store(&Store::set(&key, &value));
}

fn get(cache: &Cache, k: u64) -> Option<Vec<u8>> {
    cache.get(&key(k), Lookup::GET, |item| item.map(|i| i.value.to_vec()))
}

/// Run the writers (the Z-zone's, if it is on, and flash's) until
/// nothing waits.
fn drain(cache: &Cache) {
    loop {
        let zone = cache.flush_zone(64);
        if !cache.flash_write_step() && zone == 0 {
            break;
        }
    }
}

/// SET keys `0..n` (version 1), letting the writer keep up (every 500)
/// as its thread does in the server.
fn fill(cache: &Cache, n: u64) {
    for k in 0..n {
        set(cache, k, 1);
        if k % 500 == 0 {
            drain(cache);
        }
    }
    drain(cache);
}

/// How many of keys `0..n` are found; every value found must be version
/// 1's, byte for byte.
fn found_intact(cache: &Cache, n: u64) -> u64 {
    let mut hits = 0;
    for k in 0..n {
        if let Some(v) = get(cache, k) {
            assert_eq!(v, value(k, 1), "key {k} read back wrong");
            hits += 1;
        }
    }
    hits
}

fn flash_stats(cache: &Cache) -> FlashStats {
    cache.lock().stats().flash.expect("flash is on")
}

#[test]
fn items_leaving_memory_come_back_from_flash() {
    let f = TempFile::new("back");
    let cache = Cache::new(config(&f, 8, 64), Arc::new(Clock::new())).expect("cache");
    let n = 100_000;
    fill(&cache, n);
    cache.lock().validate();
    let s = flash_stats(&cache);
    assert!(
        s.items > n / 2,
        "{} items on flash: {s:?} {:?}",
        s.items,
        cache.lock().stats().evictions
    );
    assert!(s.containers_compressed > 0);
    let ratio = s.raw_bytes as f64 / s.stored_bytes as f64;
    assert!(ratio > 1.8, "compression ratio {ratio}");
    let hits = found_intact(&cache, n);
    // 4 MB of memory holds under 20 K of these; flash holds the rest.
    assert!(
        hits > n * 95 / 100,
        "{hits} of {n} found: {:?}",
        flash_stats(&cache)
    );
    let s = flash_stats(&cache);
    assert!(s.hits > n / 2);
    let dram = s.index_bytes as f64 / s.items as f64;
    assert!(dram <= 12.0, "{dram} bytes of index per flash item");
    // A second read of an item on flash puts it back in memory (and takes
    // its flash copy out): read the first thousand keys twice more.
    for _ in 0..2 {
        for k in 0..1000 {
            if let Some(v) = get(&cache, k) {
                assert_eq!(v, value(k, 1), "key {k} after a recache");
            }
        }
    }
    let again = flash_stats(&cache);
    // At most one recache per 8 flash hits (the cap), and all the re-read
    // keys qualify: about 2,000 / 8.
    assert!(again.recached > 150, "{} recached", again.recached);
    assert!(
        again.items < s.items,
        "recached items still indexed on flash"
    );
    // Every item is in memory or on flash, and curr_items says so.
    let curr = cache.lock().stats().curr_items;
    assert!(curr >= hits, "curr_items {curr} < {hits} found");
    cache.lock().validate();
}

/// With the Z-zone on, memory is two tiers and flash the third: items
/// the Z-zone's sweep evicts go on to flash (the N-zone's go to the
/// Z-zone), and come back from there byte for byte.
#[test]
fn the_zzone_evictions_go_on_to_flash() {
    let f = TempFile::new("zzone");
    let config = Config {
        zzone: true,
        ..config(&f, 8, 64)
    };
    let cache = Cache::new(config, Arc::new(Clock::new())).expect("cache");
    let n = 90_000;
    for k in 0..n {
        set(&cache, k, 1);
        if k % 500 == 0 {
            // The maintainer's work: it gives the Z-zone its pages.
            cache.lock().maintain(1000);
            drain(&cache);
        }
    }
    drain(&cache);
    cache.lock().validate();
    let stats = cache.lock().stats();
    let zone = stats.zzone.expect("the Z-zone is on").zone;
    let s = stats.flash.expect("flash is on");
    assert!(zone.items > 0, "nothing in the Z-zone: {zone:?}");
    assert!(s.items > n / 4, "{} items on flash: {s:?}", s.items);
    let hits = found_intact(&cache, n);
    assert!(hits > n * 9 / 10, "{hits} of {n} found: {s:?}");
    assert!(flash_stats(&cache).hits > n / 4);
    cache.lock().validate();
}

#[test]
fn overwritten_deleted_and_flushed_keys_never_come_back() {
    let f = TempFile::new("stale");
    let cache = Cache::new(config(&f, 8, 32), Arc::new(Clock::new())).expect("cache");
    let n = 100_000;
    fill(&cache, n);
    // Half of them again (the flash copies are version 1), a quarter
    // deleted; some of it while the writer has items staged.
    for k in (0..n).filter(|k| k % 2 == 0) {
        set(&cache, k, 2);
        if k % 500 == 0 {
            cache.flash_write_step();
        }
    }
    for k in (0..n).filter(|k| k % 4 == 1) {
        cache.lock().delete(&key(k), 0);
    }
    drain(&cache);
    cache.lock().validate();
    let mut found = 0;
    for k in 0..n {
        let v = get(&cache, k);
        match k % 4 {
            1 => assert_eq!(v, None, "deleted key {k} came back"),
            0 | 2 => {
                if let Some(v) = &v {
                    assert_eq!(v, &value(k, 2), "key {k} came back stale");
                }
            }
            _ => {
                if let Some(v) = &v {
                    assert_eq!(v, &value(k, 1), "key {k}");
                }
            }
        }
        found += v.is_some() as u64;
    }
    assert!(found > n / 2, "{found} found: {:?}", flash_stats(&cache));
    cache.lock().flush_all(None);
    cache.lock().validate();
    for k in 0..n {
        assert_eq!(get(&cache, k), None, "key {k} survived flush_all");
    }
    drain(&cache);
    for k in 0..n {
        assert_eq!(get(&cache, k), None, "key {k} came back after flush_all");
    }
}

#[test]
fn the_garbage_collector_recycles_and_keeps_what_is_read() {
    let f = TempFile::new("gc");
    // 8 slabs of flash for several times as many items, and memory for
    // a few thousand: the hot keys go to flash between their reads.
    let cache = Cache::new(config(&f, 8, 8), Arc::new(Clock::new())).expect("cache");
    let hot: Vec<u64> = (0..2000).collect();
    for k in 0..hot.len() as u64 {
        set(&cache, k, 1);
    }
    let rounds = 12u64;
    for round in 0..rounds {
        for k in 10_000 + round * 20_000..10_000 + (round + 1) * 20_000 {
            set(&cache, k, 1);
            if k % 500 == 0 {
                drain(&cache);
            }
            // The hot keys are read once each, a tenth at a time, once
            // they are on flash and before its FIFO drops them: the read
            // marks their flash copy, which the collector then keeps (a
            // second read would put them back in memory instead).
            if k % 10_000 == 0 && (50_000..150_000).contains(&k) {
                let part = (k / 10_000 - 5) as usize;
                for &h in &hot[part * 200..(part + 1) * 200] {
                    if let Some(v) = get(&cache, h) {
                        assert_eq!(v, value(h, 1));
                    }
                }
            }
        }
        drain(&cache);
        cache.lock().validate();
    }
    let s = flash_stats(&cache);
    // The split (SlimCache's Algorithm 1) stays within its bounds.
    assert!((1..=s.slabs / 2).contains(&s.hot_target), "{s:?}");
    let es = cache.lock().stats();
    assert!(
        s.gc_recycled > 3,
        "{} slabs recycled: {s:?} evictions {} items {} total {} oom {}",
        s.gc_recycled,
        es.evictions,
        es.curr_items,
        es.total_items,
        es.outofmemory
    );
    assert!(s.gc_promoted > 0, "nothing promoted to the hot area: {s:?}");
    let kept = hot.iter().filter(|&&h| get(&cache, h).is_some()).count();
    assert!(kept > hot.len() * 9 / 10, "{kept} hot keys kept: {s:?}");
    // Old keys that were never read were dropped: flash is 8 MB.
    let old = (10_000..30_000)
        .filter(|&k| get(&cache, k).is_some())
        .count();
    assert!(old < 20_000 / 2, "{old} old keys kept");
}

#[test]
fn faults_cost_misses_never_wrong_bytes() {
    let f = TempFile::new("faults");
    let dev = Arc::new(Faulty::new(FileDevice::open(&f.0, 32 << 20).expect("open")));
    let cache = Cache::with_device(
        config(&f, 8, 32),
        Arc::new(Clock::new()),
        dev.clone() as Arc<dyn Device>,
    )
    .expect("cache");
    let n = 30_000;
    fill(&cache, n);
    let check_all = |cache: &Cache| found_intact(cache, n);
    // Everything on the file, none of it in the writer's open slab.
    assert!(cache.flash_sync());
    let on_flash = flash_stats(&cache).items;
    // Read errors: misses, and the items stay on flash.
    dev.fail_reads.store(true, Ordering::Relaxed);
    let with_errors = check_all(&cache);
    assert!(
        with_errors < n - on_flash / 2,
        "{with_errors} found with reads failing"
    );
    assert!(flash_stats(&cache).io_errors > 0);
    assert_eq!(flash_stats(&cache).items, on_flash);
    dev.fail_reads.store(false, Ordering::Relaxed);
    // A byte in every 512 flipped in every read: every container fails
    // its checks, and its entry goes.
    for at in [0u64, 30, 100, 511] {
        dev.flip.store(at, Ordering::Relaxed);
        check_all(&cache);
    }
    dev.flip.store(u64::MAX, Ordering::Relaxed);
    let s = flash_stats(&cache);
    assert!(s.read_errors > 0, "{s:?}");
    assert!(
        s.items < on_flash / 10,
        "damaged containers still indexed: {s:?}"
    );
    // A full disk: writes fail, memory keeps serving, nothing is lost
    // from memory and nothing wrong is read.
    dev.full.store(true, Ordering::Relaxed);
    for k in n..n + 20_000 {
        set(&cache, k, 1);
        cache.flash_write_step();
    }
    assert!(flash_stats(&cache).write_errors > 0);
    let recent = (n + 19_000..n + 20_000)
        .filter(|&k| get(&cache, k) == Some(value(k, 1)))
        .count();
    assert_eq!(
        recent, 1000,
        "memory stopped serving while the disk was full"
    );
    cache.lock().validate();
    dev.full.store(false, Ordering::Relaxed);
    drain(&cache);
    check_all(&cache);
    cache.lock().validate();
}

/// Fill keys `0..n` (version 1) and write everything out; returns the
/// cache (still open).
fn filled(f: &TempFile, n: u64) -> Cache {
    let cache = Cache::new(config(f, 8, 64), Arc::new(Clock::new())).expect("cache");
    fill(&cache, n);
    cache
}

#[test]
fn a_clean_shutdown_serves_the_flash_contents_again() {
    let f = TempFile::new("clean");
    let n = 80_000;
    let cache = filled(&f, n);
    let on_flash: Vec<u64> = {
        // What flash holds (memory's items are gone with the process).
        let s = flash_stats(&cache);
        assert!(s.items > n / 2);
        (0..n).collect()
    };
    let before: u64 = on_flash
        .iter()
        .filter(|&&k| get(&cache, k).is_some())
        .count() as u64;
    let flash_items = flash_stats(&cache).items;
    assert!(cache.flash_shutdown());
    drop(cache);
    let cache = Cache::new(config(&f, 8, 64), Arc::new(Clock::new())).expect("restart");
    let s = flash_stats(&cache);
    assert!(s.recovered_clean, "the snapshot was not used: {s:?}");
    assert_eq!(
        s.items,
        flash_items + s.staged,
        "items lost in the snapshot"
    );
    let mut after = 0;
    for k in 0..n {
        if let Some(v) = get(&cache, k) {
            assert_eq!(v, value(k, 1), "key {k} after a clean restart");
            after += 1;
        }
    }
    assert!(
        after * 100 >= flash_items * 99,
        "{after} of {flash_items} flash items back ({before} before)"
    );
    cache.lock().validate();
    // A second start without a clean shutdown scans instead (the snapshot
    // was consumed), and finds the same.
    drop(cache);
    let cache = Cache::new(config(&f, 8, 64), Arc::new(Clock::new())).expect("restart");
    let s = flash_stats(&cache);
    assert!(!s.recovered_clean);
    assert!(
        s.items * 100 >= flash_items * 99,
        "{} of {flash_items} after a scan",
        s.items
    );
}

#[test]
fn a_crash_brings_back_valid_items_and_no_removed_ones() {
    let f = TempFile::new("crash");
    let cfg = config(&f, 8, 64);
    let n = 80_000;
    let before = crash_after_removals(&cfg, n);
    // Everything was synced: all of it comes back (99.3% measured).
    restart_and_check(cfg, n, &before, 0.97);
}

/// The same with an index too small for the flash: its entries are
/// dropped (their copies stay on disk), and a removal of such a key finds
/// no entry; the crash scan must still not bring the old copy back.
#[test]
fn a_crash_does_not_bring_back_copies_the_index_dropped() {
    let f = TempFile::new("crash-capped");
    let mut cfg = config(&f, 8, 64);
    if let Some(fc) = cfg.flash.as_mut() {
        fc.memory_cap = 2_700_000;
    }
    let n = 80_000;
    let before = crash_after_removals(&cfg, n);
    assert!(
        before.evictions > 10_000 && before.gc_recycled == 0,
        "{before:?}"
    );
    // The index comes back as full as it was (the scan finds more copies
    // than it has room for).
    restart_and_check(cfg, n, &before, 0.95);
}

/// The same with copies the collector gave up: a slab it recycled or
/// evicted keeps its old contents on disk until it is written again (the
/// free slabs, and the open one: no sync before the crash). The keys it
/// dropped from those slabs are then removed: with no index entry there
/// is no tombstone, and only the slab's retired mark keeps the scan from
/// bringing their old copies back.
#[test]
fn a_crash_does_not_bring_back_copies_the_collector_gave_up() {
    let f = TempFile::new("crash-recycled");
    let cfg = config(&f, 8, 8);
    let cache = Cache::new(cfg.clone(), Arc::new(Clock::new())).expect("cache");
    let mut n = 250_000;
    fill(&cache, n);
    // Go on until the collector gives up one more slab, and stop there:
    // its old contents are on disk, its items gone from the index.
    let released = flash_stats(&cache).gc_recycled;
    assert!(released > 0, "nothing recycled: {:?}", flash_stats(&cache));
    while flash_stats(&cache).gc_recycled == released {
        for _ in 0..100 {
            set(&cache, n, 1);
            n += 1;
        }
        drain(&cache);
        assert!(n < 400_000, "no slab recycled: {:?}", flash_stats(&cache));
    }
    // Deletions first (they write nothing to flash, and make room in
    // memory for the overwrites, so these hardly evict anything): the
    // slabs given up are not written again before the crash.
    remove_some(&cache, n);
    let before = flash_stats(&cache);
    drop(cache);
    // Only the open slab's contents are lost (no sync): 92.8% measured.
    restart_and_check(cfg, n, &before, 0.8);
}

/// Fill `0..n`, remove some, sync the tier, and drop the cache without a
/// shutdown (a crash): what flash held then.
fn crash_after_removals(cfg: &Config, n: u64) -> FlashStats {
    let cache = Cache::new(cfg.clone(), Arc::new(Clock::new())).expect("cache");
    fill(&cache, n);
    remove_some(&cache, n);
    assert!(cache.flash_sync());
    flash_stats(&cache)
}

/// Delete every tenth key (+5) of `0..n`, then overwrite every tenth with
/// version 2, after their copies reached flash; the writer's steps journal
/// the tombstones.
fn remove_some(cache: &Cache, n: u64) {
    for k in (5..n).step_by(10) {
        cache.lock().delete(&key(k), 0);
    }
    for k in (0..n).step_by(10) {
        set(cache, k, 2);
    }
    drain(cache);
}

/// Start again from the file after a crash (no shutdown): at least
/// `back` of what flash held (`before`) comes back, every key found is
/// one that was recovered, and never a removed key or an old value.
fn restart_and_check(cfg: Config, n: u64, before: &FlashStats, back: f64) {
    let cache = Cache::new(cfg, Arc::new(Clock::new())).expect("restart");
    let s = flash_stats(&cache);
    assert!(!s.recovered_clean);
    let flash_items = before.items;
    assert!(
        s.items as f64 >= flash_items as f64 * back,
        "{} of {flash_items} recovered: {before:?}",
        s.items
    );
    assert!(
        s.items <= flash_items,
        "{} of {flash_items} recovered",
        s.items
    );
    let mut found = 0;
    for k in 0..n {
        let v = get(&cache, k);
        match k % 10 {
            // Version 2 was in memory (or on flash): never version 1.
            0 => assert!(
                v.is_none() || v == Some(value(k, 2)),
                "key {k} came back stale"
            ),
            5 => assert_eq!(v, None, "deleted key {k} came back"),
            _ => {
                if let Some(v) = &v {
                    assert_eq!(v, &value(k, 1), "key {k}");
                }
            }
        }
        found += v.is_some() as u64;
    }
    // Memory starts empty: what is found is what the scan recovered.
    assert!(
        found * 100 >= s.items * 99,
        "{found} keys found, {} recovered",
        s.items
    );
    cache.lock().validate();
}

/// Keys from `from` on, until the tier has trained its dictionary (on a
/// thread of its own, from the first megabyte the writer packs), then
/// `more` keys; returns the first key not set.
fn fill_past_the_dictionary(cache: &Cache, f: &TempFile, from: u64, more: u64) -> u64 {
    let trained = dict::dict_path(&f.0);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut k = from;
    while !trained.exists() {
        assert!(Instant::now() < deadline, "no dictionary after {k} keys");
        for _ in 0..500 {
            set(cache, k, 1);
            k += 1;
        }
        drain(cache);
        std::thread::sleep(Duration::from_millis(20));
    }
    for _ in 0..more {
        set(cache, k, 1);
        k += 1;
        if k.is_multiple_of(500) {
            drain(cache);
        }
    }
    drain(cache);
    k
}

#[test]
fn the_trained_dictionary_comes_back_and_without_it_its_containers_miss() {
    let f = TempFile::new("dict");
    // The smallest memory that trains one (`dict::worth_training`).
    let mb = 24;
    let cache = Cache::new(config(&f, mb, 64), Arc::new(Clock::new())).expect("cache");
    let n = fill_past_the_dictionary(&cache, &f, 0, 40_000);
    let s = flash_stats(&cache);
    assert!(
        s.dictionary_bytes > dict::DICT_BYTES as u64
            && s.dictionary_bytes != dict::SAMPLE_BYTES as u64,
        "the digested dictionary is counted: {s:?}"
    );
    let flash_items = s.items;
    let hits = found_intact(&cache, n);
    cache.lock().validate();

    // A clean restart and a crash (no shutdown: a scan) both load the
    // dictionary and decode the containers that name it.
    assert!(cache.flash_shutdown());
    drop(cache);
    let cache = Cache::new(config(&f, mb, 64), Arc::new(Clock::new())).expect("restart");
    assert!(flash_stats(&cache).recovered_clean);
    let clean = found_intact(&cache, n);
    assert!(
        clean * 100 >= flash_items * 99,
        "{clean} of {flash_items} ({hits} before)"
    );
    assert!(cache.flash_sync());
    drop(cache);
    let cache = Cache::new(config(&f, mb, 64), Arc::new(Clock::new())).expect("restart");
    let s = flash_stats(&cache);
    assert!(!s.recovered_clean);
    let scanned = found_intact(&cache, n);
    assert!(
        scanned * 100 >= flash_items * 99,
        "{scanned} of {flash_items} after a scan"
    );
    cache.lock().validate();
    drop(cache);

    // A damaged dictionary file is refused: the containers that name it
    // are misses, and those written before it was trained still read.
    let path = dict::dict_path(&f.0);
    let mut bytes = std::fs::read(&path).expect("dictionary file");
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(&path, bytes).expect("damage");
    let cache = Cache::new(config(&f, mb, 64), Arc::new(Clock::new())).expect("restart");
    let without = found_intact(&cache, n);
    assert!(
        without * 2 < scanned,
        "{without} found without the dictionary, {scanned} with it: containers do not use it"
    );
    cache.lock().validate();
}

#[test]
fn the_write_budget_is_kept_and_what_exceeds_it_is_not_admitted() {
    let f = TempFile::new("budget");
    let mut cfg = config(&f, 8, 64);
    let rate = 4u64 << 20;
    if let Some(fc) = cfg.flash.as_mut() {
        fc.write_rate = rate;
    }
    let cache = Cache::new(cfg, Arc::new(Clock::new())).expect("cache");
    let start = Instant::now();
    let mut k = 0;
    // Far more than 4 MB/s of evictions, the writer doing all it may after
    // every 2000 stores, for at least 1.5 s and until it has sealed two
    // slabs and refused items (however slowly a busy machine gets there).
    let deadline = start + Duration::from_secs(120);
    loop {
        for _ in 0..2000 {
            set(&cache, k, 1);
            k += 1;
        }
        while cache.flash_write_step() {}
        let s = flash_stats(&cache);
        if start.elapsed() >= Duration::from_millis(1500)
            && s.device_bytes >= 2 << 20
            && s.admit_refused > 0
        {
            break;
        }
        assert!(Instant::now() < deadline, "nothing written: {s:?}");
    }
    let secs = start.elapsed().as_secs_f64();
    let s = flash_stats(&cache);
    let allowed = (rate as f64 * secs) as u64 + (1 << 20);
    assert!(
        s.device_bytes <= allowed,
        "{} bytes written in {secs:.2} s",
        s.device_bytes
    );
    cache.lock().validate();
}

/// Every line a whole `lru_crawler metadump` lists, by key.
fn metadump(cache: &Cache) -> HashMap<Vec<u8>, Vec<MetaItem>> {
    let mut listed: HashMap<Vec<u8>, Vec<MetaItem>> = HashMap::new();
    let (mut at, mut items) = (Some(DumpAt::START), Vec::new());
    while let Some(here) = at {
        items.clear();
        at = cache.metadump_step(here, |_| true, &mut items);
        for it in items.drain(..) {
            listed.entry(it.key.clone()).or_default().push(it);
        }
    }
    listed
}

/// A metadump lists each key GETs find once and no other key, with the
/// size memcached would give the value found, and the class the slabs
/// give items of that size; returns how many it listed from flash.
fn metadump_matches_gets(cache: &Cache, keys: impl Iterator<Item = u64>, what: &str) -> u64 {
    let listed = metadump(cache);
    let mut classes = HashMap::new();
    for it in listed.values().flatten() {
        if it.tier == Tier::Memory {
            classes.insert(it.size, it.class);
        }
    }
    let (mut found, mut flash) = (0, 0);
    for k in keys {
        let key = key(k);
        let lines = listed.get(&key).map_or(&[][..], |l| &l[..]);
        match cache.get(&key, Lookup::PEEK, |it| it.map(|i| i.value.len())) {
            None => assert!(
                lines.is_empty(),
                "{what}: key {k} listed, not found: {lines:?}"
            ),
            Some(len) => {
                found += 1;
                assert_eq!(lines.len(), 1, "{what}: key {k} listed {lines:?}");
                let it = &lines[0];
                assert_eq!(
                    it.size,
                    item::memcached_size(key.len(), len, 0, true),
                    "{what}: key {k}"
                );
                if it.tier == Tier::Flash {
                    flash += 1;
                    if let Some(&class) = classes.get(&it.size) {
                        assert_eq!(it.class, class, "{what}: key {k} of {} bytes", it.size);
                    }
                }
            }
        }
    }
    assert_eq!(
        found,
        listed.len(),
        "{what}: keys listed that GETs do not find"
    );
    flash
}

/// `lru_crawler metadump` (issue 34) lists the flash tier's items, in its
/// slabs (on the device and still in DRAM) and its stage, each once and
/// marked `Flash`; overwritten and deleted keys' old copies are not
/// listed; a container damaged on the device is passed over, its items
/// not listed (GETs miss them too), and the rest still are.
#[test]
fn metadump_lists_the_flash_tier_s_items_once() {
    let f = TempFile::new("metadump");
    let cache = Cache::new(config(&f, 8, 64), Arc::new(Clock::new())).expect("cache");
    let n = 60_000;
    fill(&cache, n);
    // A quarter overwritten (back in memory), a quarter deleted, some
    // while the writer has items staged; then more keys, not written out:
    // some of them wait in the stage.
    for k in (0..n).filter(|k| k % 4 == 0) {
        set(&cache, k, 2);
        if k % 1000 == 0 {
            cache.flash_write_step();
        }
    }
    for k in (0..n).filter(|k| k % 4 == 1) {
        cache.delete(&key(k), 0);
    }
    drain(&cache);
    for k in n..n + 3000 {
        set(&cache, k, 1);
    }
    let s = flash_stats(&cache);
    assert!(s.staged > 0 && s.items > n / 3, "{s:?}");
    let all = n + 3000;
    let on_flash = metadump_matches_gets(&cache, 0..all, "with items staged");
    // At rest, the flash lines are the tier's items, staged or indexed.
    assert_eq!(on_flash, s.items + s.staged, "{s:?}");
    let listed = metadump(&cache);
    for k in (0..n).filter(|k| k % 4 == 1) {
        assert!(!listed.contains_key(&key(k)), "deleted key {k} listed");
    }
    assert!(listed.values().flatten().any(|it| it.tier == Tier::Memory));
    cache.lock().validate();

    // Everything written to the device; then bytes of two slabs damaged
    // there.
    assert!(cache.flash_sync());
    let s = flash_stats(&cache);
    let before = metadump_matches_gets(&cache, 0..all, "synced");
    assert_eq!((before, s.staged), (s.items, 0));
    drop(listed);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&f.0)
        .expect("open the flash file");
    for at in [8_000u64, (1 << 20) + 300_000] {
        let mut b = [0u8; 64];
        file.read_exact_at(&mut b, at).expect("read");
        b.iter_mut().for_each(|x| *x ^= 0x5a);
        file.write_all_at(&b, at).expect("damage");
    }
    file.sync_all().expect("sync");
    let after = metadump_matches_gets(&cache, 0..all, "damaged");
    let s = flash_stats(&cache);
    assert!(s.read_errors > 0, "no damaged container read: {s:?}");
    assert!(after > before / 2, "{after} listed of {before}");
    cache.lock().validate();
}

/// Items the garbage collector moved (to the hot area, through the stage)
/// are listed once, where they are now: in the stage, just after the
/// collector moved them there, and in their new slab once written.
#[test]
fn metadump_lists_what_the_collector_moved_once() {
    let f = TempFile::new("metadump-gc");
    let cache = Cache::new(config(&f, 8, 4), Arc::new(Clock::new())).expect("cache");
    let hot = 2000;
    for k in 0..hot {
        set(&cache, k, 1);
    }
    let mut k = 10_000;
    // The writer a step at a time, until a step moves items.
    'fill: loop {
        for _ in 0..500 {
            set(&cache, k, 1);
            k += 1;
        }
        loop {
            let promoted = flash_stats(&cache).gc_promoted;
            if !cache.flash_write_step() {
                break;
            }
            if flash_stats(&cache).gc_promoted > promoted {
                break 'fill;
            }
        }
        // The hot keys read once on flash: the collector keeps them.
        if k == 50_000 {
            (0..hot).for_each(|h| drop(get(&cache, h)));
        }
        assert!(k < 1_000_000, "nothing moved: {:?}", flash_stats(&cache));
    }
    let s = flash_stats(&cache);
    assert!(s.staged > 0, "{s:?}");
    let on_flash = metadump_matches_gets(&cache, (0..hot).chain(10_000..k), "moved");
    // An item moved and staged is indexed where it was until written:
    // the stats count it twice meanwhile, the dump once.
    assert!(
        on_flash > 0 && on_flash <= s.items + s.staged,
        "{on_flash}: {s:?}"
    );
    drain(&cache);
    let s = flash_stats(&cache);
    let on_flash = metadump_matches_gets(&cache, (0..hot).chain(10_000..k), "written");
    assert!(s.gc_promoted > 0 && on_flash > 0, "{s:?}");
    cache.lock().validate();
}
