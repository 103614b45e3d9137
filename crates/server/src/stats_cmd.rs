//! The `stats` command family: `stats`, `stats settings|items|slabs|sizes|conns|
//! reset|detail|cachedump`, printed with memcached 1.6.18's names, order and
//! number formats so dashboards, exporters and `memcached-tool` read them
//! unchanged.
//!
//! Where memcached reports machinery cachalot does not have (segmented LRU,
//! extstore, logger, read-buffer pools) the field is still printed, with the
//! value that machinery would show when idle (0, or memcached's default
//! setting), because exporters fail a scrape when an expected key is missing.
//! The idea and field lists come from memcached's `server_stats`,
//! `process_stat_settings`, `item_stats`, `do_slabs_stats` and `stats_prefix.c`.

use std::fmt::Display;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use cachalot_engine::holds::{HoldStats, Holder};
use cachalot_protocol::text::{TextError, MEMCACHED_COMPAT_VERSION};

use crate::handler::Ctx;
use crate::hotkeys::HotRow;
use crate::stats::{NetPath, ThreadStats};

/// The (name, value) pairs of one stats group, in memcached's order.
pub type Pairs = Vec<(String, String)>;

/// Add one statistic.
fn stat(out: &mut Pairs, name: impl Display, value: impl Display) {
    out.push((name.to_string(), value.to_string()));
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn line(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The statistics of one group as (name, value) pairs: `""` is plain
/// `stats`, then `settings`, `items`, `slabs`, `sizes`, `conns`. None for a
/// group memcached does not know. Shared with the binary protocol, which
/// sends the same pairs as STAT packets.
pub fn collect(ctx: &Ctx<'_>, group: &[u8]) -> Option<Pairs> {
    let mut out = Pairs::new();
    match group {
        b"" => general(ctx, &mut out),
        b"settings" => settings(ctx, &mut out),
        b"items" => items(ctx, &mut out),
        b"slabs" => slabs(ctx, &mut out),
        b"sizes" => sizes(ctx, &mut out),
        b"conns" => conns(ctx, &mut out),
        // cachalot's own group, with `-o zzone=1`.
        b"zzone" => zzone(ctx, &mut out)?,
        // cachalot's own, with the flash tier on.
        b"flash" => flash(ctx, &mut out)?,
        // cachalot's own: how long the locks requests need are held.
        b"locks" => locks(ctx, &mut out),
        // cachalot's own, with `-o mrc=1` (the default): the miss ratio
        // at other memory sizes.
        b"mrc" => {
            let names = ctx.shared.prefixes.names();
            out = ctx.shared.mrc.as_ref()?.report(ctx.cache, &names)
        }
        // cachalot's own, with `-o trace_file` (issue 36).
        b"trace" => trace(ctx, &mut out)?,
        // memcached 1.6.18 answers it with no lines, extstore on or off.
        b"extstore" => {}
        _ => return None,
    }
    Some(out)
}

/// `stats reset`: clear the counters memcached clears (command counters,
/// byte counts, connection totals, engine counters, per-prefix stats),
/// keeping gauges such as curr_items.
pub fn reset(ctx: &Ctx<'_>) {
    ctx.cache.reset_stats();
    ctx.shared.prefixes.clear_evictions();
    for t in &ctx.shared.threads {
        reset_thread(t);
    }
    // The stats of the thread serving us may not be in `threads` (tests).
    reset_thread(ctx.stats);
    ctx.shared.total_connections.store(0, Ordering::Relaxed);
    ctx.shared.rejected_connections.store(0, Ordering::Relaxed);
}

/// Run `stats [sub [arg1 [arg2]]]`, appending the whole text reply.
pub fn handle(
    ctx: &Ctx<'_>,
    sub: Option<&[u8]>,
    arg1: Option<&[u8]>,
    arg2: Option<&[u8]>,
    out: &mut Vec<u8>,
) {
    let sub = sub.unwrap_or(b"");
    match sub {
        b"reset" => {
            reset(ctx);
            line(out, "RESET");
        }
        b"detail" => detail(ctx, arg1.unwrap_or(b""), out),
        b"prefixes" => prefixes(ctx, out),
        b"hotkeys" => hotkeys(ctx, arg1, out),
        b"cachedump" => cachedump(ctx, arg1, arg2, out),
        _ => match collect(ctx, sub) {
            Some(pairs) => {
                for (name, value) in pairs {
                    // Writing into a Vec cannot fail.
                    let _ = write!(out, "STAT {name} {value}\r\n");
                }
                line(out, "END");
            }
            None => line(out, TextError::Unknown.message()),
        },
    }
}

/// CPU time used by the process, as (user, system) `seconds.micros` strings.
fn rusage() -> (String, String) {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage only writes into the struct we pass, which is valid
    // for writes and correctly sized; RUSAGE_SELF is always a valid target.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    if rc != 0 {
        return ("0.000000".into(), "0.000000".into());
    }
    // SAFETY: getrusage succeeded, so the struct is initialised (it was
    // zeroed before anyway, and all-zero is a valid rusage).
    let ru = unsafe { ru.assume_init() };
    let tv = |t: libc::timeval| format!("{}.{:06}", t.tv_sec, t.tv_usec);
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

/// Plain `stats`, in memcached 1.6.18's order.
fn general(ctx: &Ctx<'_>, out: &mut Pairs) {
    let sh = ctx.shared;
    let set = ctx.settings;
    let clock = ctx.cache.clock();
    let e = ctx.cache.stats();
    let sum = |f: fn(&ThreadStats) -> &AtomicU64| sh.sum(f);
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let (ru_user, ru_sys) = rusage();
    // memcached's count includes the listening socket and prints it minus one.
    let curr = load(&sh.curr_connections).saturating_sub(1);

    stat(out, "pid", std::process::id());
    stat(out, "uptime", clock.now());
    stat(out, "time", clock.unix_now());
    stat(out, "version", MEMCACHED_COMPAT_VERSION);
    stat(out, "libevent", "mio");
    stat(out, "pointer_size", usize::BITS);
    stat(out, "rusage_user", ru_user);
    stat(out, "rusage_system", ru_sys);
    stat(out, "max_connections", set.max_conns);
    stat(out, "curr_connections", curr);
    stat(out, "total_connections", load(&sh.total_connections));
    stat(out, "rejected_connections", load(&sh.rejected_connections));
    stat(
        out,
        "connection_structures",
        load(&sh.connection_structures),
    );
    // memcached's response-object and read-buffer pools have no equivalent.
    for name in [
        "response_obj_oom",
        "response_obj_count",
        "response_obj_bytes",
        "read_buf_count",
        "read_buf_bytes",
        "read_buf_bytes_free",
        "read_buf_oom",
        "reserved_fds",
    ] {
        stat(out, name, 0);
    }
    stat(out, "cmd_get", sum(|t| &t.cmd_get));
    stat(out, "cmd_set", sum(|t| &t.cmd_set));
    stat(out, "cmd_flush", sum(|t| &t.cmd_flush));
    stat(out, "cmd_touch", sum(|t| &t.cmd_touch));
    stat(out, "cmd_meta", sum(|t| &t.cmd_meta));
    stat(out, "get_hits", sum(|t| &t.get_hits));
    stat(out, "get_misses", sum(|t| &t.get_misses));
    // The engine sees expired/flushed items on lookup; handlers cannot.
    stat(out, "get_expired", e.get_expired + sum(|t| &t.get_expired));
    stat(out, "get_flushed", e.get_flushed + sum(|t| &t.get_flushed));
    if let Some(f) = &e.flash {
        // memcached's extstore counters, for dashboards built on them.
        stat(out, "get_extstore", f.hits - f.stage_hits);
        stat(out, "get_aborted_extstore", sum(|t| &t.get_aborted_flash));
        stat(out, "get_oom_extstore", 0);
        stat(out, "recache_from_extstore", f.recached);
        stat(out, "miss_from_extstore", f.false_reads);
        stat(out, "badcrc_from_extstore", f.read_errors);
    }
    stat(out, "delete_misses", sum(|t| &t.delete_misses));
    stat(out, "delete_hits", sum(|t| &t.delete_hits));
    stat(out, "incr_misses", sum(|t| &t.incr_misses));
    stat(out, "incr_hits", sum(|t| &t.incr_hits));
    stat(out, "decr_misses", sum(|t| &t.decr_misses));
    stat(out, "decr_hits", sum(|t| &t.decr_hits));
    stat(out, "cas_misses", sum(|t| &t.cas_misses));
    stat(out, "cas_hits", sum(|t| &t.cas_hits));
    stat(out, "cas_badval", sum(|t| &t.cas_badval));
    stat(out, "touch_hits", sum(|t| &t.touch_hits));
    stat(out, "touch_misses", sum(|t| &t.touch_misses));
    stat(out, "store_too_large", sum(|t| &t.store_too_large));
    stat(out, "store_no_memory", sum(|t| &t.store_no_memory));
    stat(out, "auth_cmds", sum(|t| &t.auth_cmds));
    stat(out, "auth_errors", sum(|t| &t.auth_errors));
    stat(out, "bytes_read", sum(|t| &t.bytes_read));
    stat(out, "bytes_written", sum(|t| &t.bytes_written));
    stat(out, "limit_maxbytes", e.limit_maxbytes);
    let accepting = (curr as usize) < set.max_conns;
    stat(out, "accepting_conns", u8::from(accepting));
    stat(out, "listen_disabled_num", 0);
    stat(out, "time_in_listen_disabled_us", 0);
    stat(out, "threads", set.threads);
    stat(out, "conn_yields", sum(|t| &t.conn_yields));
    stat(out, "hash_power_level", e.hash_power_level);
    stat(out, "hash_bytes", e.hash_bytes);
    stat(out, "hash_is_expanding", u8::from(e.hash_is_expanding));
    if set.engine.slab_reassign {
        stat(out, "slab_reassign_rescues", e.slab_reassign_rescues);
        stat(out, "slab_reassign_chunk_rescues", 0);
        stat(
            out,
            "slab_reassign_evictions_nomem",
            e.slab_reassign_evictions,
        );
        stat(out, "slab_reassign_inline_reclaim", 0);
        stat(out, "slab_reassign_busy_items", 0);
        stat(out, "slab_reassign_busy_deletes", 0);
        stat(
            out,
            "slab_reassign_running",
            u8::from(e.slab_reassign_running),
        );
        stat(out, "slabs_moved", e.slabs_moved);
    }
    // The engine's background reclaimer plays the LRU crawler's part.
    stat(out, "lru_crawler_running", 0);
    stat(out, "lru_crawler_starts", 0);
    stat(out, "lru_maintainer_juggles", 0);
    for name in ["malloc_fails", "log_worker_dropped", "log_worker_written"] {
        stat(out, name, 0);
    }
    let w = &sh.watchers;
    stat(out, "log_watcher_skipped", load(&w.skipped));
    stat(out, "log_watcher_sent", load(&w.sent));
    stat(out, "log_watchers", w.count());
    if let Some(tls) = &sh.tls {
        stat(out, "ssl_handshake_errors", load(&tls.handshake_errors));
        stat(
            out,
            "time_since_server_cert_refresh",
            tls.since_refresh(clock.now()),
        );
    }
    stat(out, "unexpected_napi_ids", 0);
    stat(out, "round_robin_fallback", 0);
    stat(out, "bytes", e.bytes);
    stat(out, "curr_items", e.curr_items);
    stat(out, "total_items", e.total_items);
    stat(out, "slab_global_page_pool", e.free_pages);
    stat(out, "expired_unfetched", e.expired_unfetched);
    stat(out, "evicted_unfetched", e.evicted_unfetched);
    stat(out, "evicted_active", 0);
    stat(out, "evictions", e.evictions);
    stat(out, "reclaimed", e.reclaimed);
    stat(out, "crawler_reclaimed", e.crawler_reclaimed);
    for name in [
        "crawler_items_checked",
        "lrutail_reflocked",
        "moves_to_cold",
        "moves_to_warm",
        "moves_within_lru",
        "direct_reclaims",
        "lru_bumps_dropped",
    ] {
        stat(out, name, 0);
    }
    // cachalot's cost-aware caching (issue 4; docs/cost.md): the summed
    // cost of evicted items, how many costs were learned from a miss and
    // the SET after it, and the memory (inside limit_maxbytes) that the
    // learned-cost table and the eviction policy's own structures take.
    stat(out, "evicted_cost", e.evicted_cost);
    stat(out, "learned_costs", e.learned_costs);
    stat(out, "learn_table_bytes", e.learn_table_bytes);
    stat(out, "eviction_bytes", e.eviction_bytes);
    // Rebalancing (docs/cost.md, "Rebalancing"): the rule, GET misses on
    // keys evicted recently (ghost set, with `sas`) and their cost, the
    // moves the rule decided (slabs_moved also counts `slabs reassign`),
    // and the ghost set's memory (inside limit_maxbytes).
    stat(out, "rebalance_policy", e.rebalance);
    stat(out, "capacity_misses", e.capacity_misses);
    stat(out, "cost_capacity_misses", e.cost_capacity_misses);
    stat(out, "rebalance_decisions", e.rebalance_decisions);
    stat(out, "rebalance_bytes", e.rebalance_bytes);
    // Cavast's re-partitioning within pages (`-o repartition=1`): pages
    // passed over, chunks read, items that traded chunks.
    if let Some(r) = e.repartition {
        stat(out, "repartition_pages", r.pages);
        stat(out, "repartition_scanned", r.scanned);
        stat(out, "repartition_swaps", r.swaps);
    }
    if let Some(f) = &e.flash {
        extstore(f, out);
    }
}

/// memcached's `extstore_*` lines of plain `stats`, from the flash tier's
/// figures (a page there is a slab here, 1 MB).
fn extstore(f: &cachalot_engine::flash::FlashStats, out: &mut Pairs) {
    let slab = cachalot_engine::flash::log::SLAB as u64;
    stat(out, "extstore_compact_lost", 0);
    stat(
        out,
        "extstore_compact_rescues",
        f.gc_promoted + f.gc_demoted,
    );
    stat(out, "extstore_compact_skipped", 0);
    stat(out, "extstore_page_allocs", f.device_bytes / slab);
    stat(out, "extstore_page_evictions", f.gc_evicted);
    stat(out, "extstore_page_reclaims", f.gc_recycled - f.gc_evicted);
    stat(out, "extstore_pages_free", f.free_slabs);
    stat(out, "extstore_pages_used", f.slabs - f.free_slabs);
    stat(out, "extstore_objects_evicted", f.evictions);
    stat(out, "extstore_objects_read", f.hits - f.stage_hits);
    stat(out, "extstore_objects_written", f.admitted);
    stat(out, "extstore_objects_used", f.items);
    stat(out, "extstore_bytes_evicted", 0);
    stat(out, "extstore_bytes_written", f.device_bytes);
    stat(out, "extstore_bytes_read", f.read_bytes);
    stat(
        out,
        "extstore_bytes_used",
        f.stored_bytes.min((f.slabs - f.free_slabs) * slab),
    );
    stat(out, "extstore_bytes_fragmented", 0);
    stat(out, "extstore_limit_maxbytes", f.slabs * slab);
    stat(out, "extstore_io_queue", 0);
}

/// `stats flash`: the flash tier (`--flash-path`; None without it).
/// `stats locks`: for each lock requests need (`engine`, and `zzone` with
/// the Z-zone on), by requests and by background work: how many holds,
/// their total and longest time, the bucket bounds 99% and 99.9% of them
/// are under, and the cumulative count under each bound (four a power of two) up
/// to the longest (`<lock>_<holder>_le_<N>us`, the histogram
/// `/metrics` exports as `cachalot_lock_hold_seconds`).
fn locks(ctx: &Ctx<'_>, out: &mut Pairs) {
    for (lock, holder, h) in ctx.cache.lock_holds() {
        let p = format!("{lock}_{}", holder.name());
        stat(out, format!("{p}_holds"), h.holds());
        stat(out, format!("{p}_hold_us"), h.total_ns / 1000);
        stat(out, format!("{p}_hold_max_us"), h.max_ns / 1000);
        if holder == Holder::Background {
            stat(out, format!("{p}_hold_max_cpu_us"), h.max_cpu_ns / 1000);
        }
        stat(out, format!("{p}_hold_p99_us"), h.quantile_us(0.99));
        stat(out, format!("{p}_hold_p999_us"), h.quantile_us(0.999));
        let last = h.buckets.iter().rposition(|&c| c > 0).unwrap_or(0);
        let mut under = 0;
        for (i, c) in h.buckets.iter().enumerate().take(last + 1) {
            under += c;
            stat(out, format!("{p}_le_{}us", HoldStats::bound_us(i)), under);
        }
    }
}

/// `stats trace`: the trace capture (`-o trace_file`; None without it).
fn trace(ctx: &Ctx<'_>, out: &mut Pairs) -> Option<()> {
    let c = ctx.shared.capture.as_ref()?;
    let n = &c.counters;
    stat(out, "trace_state", c.state());
    stat(out, "trace_events", n.events.load(Ordering::Relaxed));
    stat(out, "trace_dropped", n.dropped.load(Ordering::Relaxed));
    stat(out, "trace_fills", n.fills.load(Ordering::Relaxed));
    stat(out, "trace_records", n.records.load(Ordering::Relaxed));
    stat(out, "trace_bytes", n.bytes.load(Ordering::Relaxed));
    Some(())
}

fn flash(ctx: &Ctx<'_>, out: &mut Pairs) -> Option<()> {
    let f = ctx.cache.stats().flash?;
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    stat(out, "flash_items", f.items);
    stat(out, "flash_staged", f.staged);
    stat(out, "flash_slabs", f.slabs);
    stat(out, "flash_free_slabs", f.free_slabs);
    stat(out, "flash_hot_slabs", f.hot_slabs);
    stat(out, "flash_cold_slabs", f.cold_slabs);
    stat(out, "flash_hot_target_slabs", f.hot_target);
    stat(out, "flash_split_moves", f.split_moves);
    stat(out, "flash_memory_bytes", f.memory_bytes);
    stat(out, "flash_index_bytes", f.index_bytes);
    stat(out, "flash_dictionary_bytes", f.dictionary_bytes);
    stat(
        out,
        "flash_dram_per_item",
        format!("{:.2}", ratio(f.index_bytes, f.items)),
    );
    stat(out, "flash_admitted", f.admitted);
    stat(out, "flash_staged_total", f.staged_total);
    stat(out, "flash_admit_refused", f.admit_refused);
    stat(out, "flash_bytes_in", f.raw_bytes);
    stat(out, "flash_bytes_out", f.stored_bytes);
    stat(
        out,
        "flash_compression_ratio",
        format!("{:.2}", ratio(f.raw_bytes, f.stored_bytes)),
    );
    stat(out, "flash_containers_raw", f.containers_raw);
    stat(out, "flash_containers_compressed", f.containers_compressed);
    stat(out, "flash_device_bytes_written", f.device_bytes);
    stat(out, "flash_device_bytes_read", f.read_bytes);
    // Bytes written to the device per byte of container admitted.
    stat(
        out,
        "flash_write_amplification",
        format!("{:.2}", ratio(f.device_bytes, f.stored_bytes)),
    );
    stat(out, "flash_moved_bytes", f.moved_bytes);
    stat(out, "flash_gc_recycled", f.gc_recycled);
    stat(out, "flash_gc_evicted", f.gc_evicted);
    stat(out, "flash_gc_promoted", f.gc_promoted);
    stat(out, "flash_gc_demoted", f.gc_demoted);
    stat(out, "flash_evictions", f.evictions);
    stat(out, "flash_lookups", f.lookups);
    stat(out, "flash_hits", f.hits);
    stat(out, "flash_stage_hits", f.stage_hits);
    stat(out, "flash_recached", f.recached);
    stat(out, "flash_false_reads", f.false_reads);
    stat(out, "flash_reads", f.reads);
    stat(out, "flash_read_errors", f.read_errors);
    stat(out, "flash_io_errors", f.io_errors);
    stat(out, "flash_write_errors", f.write_errors);
    stat(out, "flash_recovered_clean", u8::from(f.recovered_clean));
    stat(out, "flash_recovered_items", f.recovered_items);
    stat(out, "flash_recovery_us", f.recovery_us);
    stat(out, "flash_read_p50_us", f.read_p50_us);
    stat(out, "flash_read_p90_us", f.read_p90_us);
    stat(out, "flash_read_p99_us", f.read_p99_us);
    Some(())
}

/// `stats zzone`: the compressed Z-zone (`-o zzone=1`; None without it,
/// memcached's answer to a group it does not know).
fn zzone(ctx: &Ctx<'_>, out: &mut Pairs) -> Option<()> {
    let z = ctx.cache.stats().zzone?;
    let s = &z.zone;
    stat(out, "zzone_items", s.items);
    stat(out, "zzone_blocks", s.blocks);
    stat(out, "zzone_pages", s.pages);
    stat(out, "zzone_target_pages", z.target_pages);
    stat(out, "zzone_pressed_pages", z.pressed_pages);
    stat(out, "zzone_share_percent", z.share_percent);
    stat(out, "zzone_benchmark", z.benchmark);
    stat(out, "zzone_merges", s.merges);
    stat(out, "zzone_bytes_in", s.raw_bytes);
    stat(out, "zzone_bytes_out", s.stored_bytes);
    stat(out, "zzone_memory_bytes", s.memory_bytes);
    stat(out, "zzone_metadata_bytes", s.metadata_bytes);
    stat(out, "zzone_hits", s.hits);
    stat(out, "zzone_filtered", s.filtered);
    stat(out, "zzone_false_positives", s.false_positives);
    stat(out, "zzone_promotions", s.promotions);
    stat(out, "zzone_demotions", s.demotions);
    stat(out, "zzone_refused", s.refused);
    // Items stored apart from their blocks (zExpander §3.1, footnote 3):
    // held now, their bytes stored and decoded, records written so far.
    stat(out, "zzone_large_items", s.large_items);
    stat(out, "zzone_large_bytes", s.large_bytes);
    stat(out, "zzone_large_bytes_in", s.large_raw_bytes);
    stat(out, "zzone_large_written", s.large_written);
    stat(out, "zzone_skipped", s.skipped);
    stat(out, "zzone_staged", s.staged);
    stat(out, "zzone_stage_bytes", s.stage_bytes);
    stat(out, "zzone_flushes", s.flushes);
    stat(out, "zzone_sync_flushes", s.sync_flushes);
    stat(out, "zzone_flushed", s.flushed);
    stat(out, "zzone_deltas", s.deltas);
    stat(out, "zzone_frame_merges", s.frame_merges);
    stat(out, "zzone_evictions", s.evictions);
    stat(out, "zzone_ghost_hits", s.ghost_hits);
    stat(out, "zzone_expired", s.expired);
    stat(out, "zzone_splits", s.splits);
    stat(out, "zzone_compactions", s.compactions);
    stat(out, "zzone_sweeps", s.sweeps);
    stat(out, "zzone_decompressions", s.decompressions);
    stat(out, "zzone_corrupt", s.corrupt);
    // Blocks written per codec: count, bytes in, bytes out, ratio.
    for (name, (n, raw, stored)) in ["raw", "lz4", "zstd"].iter().zip(s.written) {
        stat(out, format!("zzone_{name}_blocks"), n);
        stat(out, format!("zzone_{name}_bytes_in"), raw);
        stat(out, format!("zzone_{name}_bytes_out"), stored);
        let ratio = if stored == 0 {
            0.0
        } else {
            raw as f64 / stored as f64
        };
        stat(out, format!("zzone_{name}_ratio"), format!("{ratio:.2}"));
    }
    Some(())
}

/// The network path the workers use (`-o net_io`): `uring` or `epoll`,
/// or `mixed` where some worker's ring was refused though the start-up
/// probe passed (a ring or locked-memory limit reached). A worker still
/// starting counts as what was asked for.
fn net_io(ctx: &Ctx<'_>) -> &'static str {
    let asked = match ctx.settings.net_uring {
        true => NetPath::Uring,
        false => NetPath::Epoll,
    };
    net_io_of(asked, ctx.shared.threads.iter().map(|t| t.net_path()))
}

/// [`net_io`] of the workers' `paths`.
fn net_io_of(asked: NetPath, paths: impl Iterator<Item = NetPath>) -> &'static str {
    let mut paths = paths.map(|p| match p {
        NetPath::Starting => asked,
        p => p,
    });
    let first = paths.next().unwrap_or(asked);
    match (paths.all(|p| p == first), first) {
        (false, _) => "mixed",
        (true, NetPath::Uring) => "uring",
        (true, _) => "epoll",
    }
}

/// `stats settings`, in memcached's order, plus `cachalot_version` at the end.
fn settings(ctx: &Ctx<'_>, out: &mut Pairs) {
    let s = ctx.settings;
    let ec = &s.engine;
    let maxbytes = ctx.cache.memory_limit();
    let inter = if s.listen.is_empty() {
        "NULL".to_string()
    } else {
        s.listen.join(",")
    };
    let domain = s
        .unix_socket
        .as_ref()
        .map_or("NULL".to_string(), |p| p.display().to_string());
    stat(out, "maxbytes", maxbytes);
    stat(out, "maxconns", s.max_conns);
    stat(out, "tcpport", s.port);
    stat(out, "udpport", s.udp_port);
    stat(out, "inter", inter);
    stat(
        out,
        "verbosity",
        ctx.shared.verbosity.load(Ordering::Relaxed),
    );
    stat(out, "oldest", 0);
    stat(out, "evictions", if ec.evict { "on" } else { "off" });
    stat(out, "domain_socket", domain);
    stat(out, "umask", format!("{:o}", s.unix_mask));
    stat(out, "shutdown_command", yes_no(s.shutdown_enabled));
    stat(out, "growth_factor", format!("{:.2}", ec.growth_factor));
    stat(out, "chunk_size", ec.chunk_min_data);
    stat(out, "num_threads", s.threads);
    stat(out, "num_threads_per_udp", s.threads);
    stat(out, "stat_key_prefix", s.prefix_delimiter);
    stat(out, "detail_enabled", yes_no(ctx.shared.prefixes.enabled()));
    stat(out, "reqs_per_event", s.reqs_per_event);
    stat(out, "cas_enabled", yes_no(ec.cas_enabled));
    stat(out, "tcp_backlog", s.backlog);
    stat(out, "binding_protocol", s.protocol.name());
    stat(out, "auth_enabled_sasl", "no");
    stat(out, "auth_enabled_ascii", yes_no(s.auth.is_some()));
    stat(out, "item_size_max", ec.item_size_max);
    stat(out, "maxconns_fast", yes_no(s.maxconns_fast));
    stat(out, "hashpower_init", s.hashpower_init);
    stat(out, "slab_reassign", yes_no(ec.slab_reassign));
    stat(out, "slab_automove", ec.slab_automove);
    stat(
        out,
        "slab_automove_ratio",
        format!("{:.2}", s.slab_automove_ratio),
    );
    stat(out, "slab_automove_window", s.slab_automove_window);
    stat(out, "slab_chunk_max", ec.slab_chunk_max);
    stat(out, "lru_crawler", yes_no(s.lru_crawler));
    stat(out, "lru_crawler_sleep", s.lru_crawler_sleep);
    stat(out, "lru_crawler_tocrawl", s.lru_crawler_tocrawl);
    stat(out, "tail_repair_time", s.tail_repair_time);
    stat(out, "flush_enabled", yes_no(s.flush_enabled));
    stat(out, "dump_enabled", yes_no(s.dump_enabled));
    stat(out, "hash_algorithm", "xxh3");
    stat(out, "lru_maintainer_thread", yes_no(s.lru_maintainer));
    stat(out, "lru_segmented", yes_no(s.lru_maintainer));
    stat(out, "hot_lru_pct", s.hot_lru_pct);
    stat(out, "warm_lru_pct", s.warm_lru_pct);
    stat(out, "hot_max_factor", format!("{:.2}", s.hot_max_factor));
    stat(out, "warm_max_factor", format!("{:.2}", s.warm_max_factor));
    stat(out, "temp_lru", "no");
    stat(out, "temporary_ttl", s.temporary_ttl);
    stat(out, "idle_timeout", s.idle_timeout);
    stat(out, "watcher_logbuf_size", s.watcher_logbuf_size);
    stat(out, "worker_logbuf_size", s.worker_logbuf_size);
    stat(out, "read_buf_mem_limit", s.read_buf_mem_limit);
    // The engine always keeps the size histogram (`stats sizes`).
    stat(out, "track_sizes", "yes");
    stat(out, "inline_ascii_response", "no");
    // memcached 1.6.18 as packaged (extstore and TLS built in, neither in
    // use) prints these defaults; with the flash tier, its item size and
    // reader threads are ours.
    let item_size = ec.flash.as_ref().map_or(512, |f| f.item_min);
    stat(out, "ext_item_size", item_size);
    let item_age = ec.flash.as_ref().and_then(|f| f.item_age);
    stat(out, "ext_item_age", item_age.unwrap_or(u32::MAX));
    let recache = ec.flash.as_ref().map_or(2000, |f| f.recache_rate);
    stat(out, "ext_recache_rate", recache);
    let wbuf = ec
        .flash
        .as_ref()
        .map_or(4 << 20, |f| f.stage_bytes_for(ec.memory_limit));
    stat(out, "ext_wbuf_size", wbuf);
    for (name, value) in [
        ("ext_low_ttl", "0"),
        ("ext_compact_under", "0"),
        ("ext_drop_under", "0"),
        ("ext_max_sleep", "1000000"),
        ("ext_max_frag", "0.80"),
        ("slab_automove_freeratio", "0.010"),
        ("ext_drop_unread", "no"),
    ] {
        stat(out, name, value);
    }
    // memcached prints unset paths as "(null)" or "NULL", and the verify
    // mode as OpenSSL's flags (2 = PEER | FAIL_IF_NO_PEER_CERT = 3).
    let tls = &s.tls;
    let path = |p: &Option<std::path::PathBuf>, none: &str| {
        p.as_ref()
            .map_or(none.to_string(), |p| p.display().to_string())
    };
    stat(out, "ssl_enabled", yes_no(tls.enabled));
    stat(out, "ssl_chain_cert", path(&tls.chain_cert, "(null)"));
    stat(out, "ssl_key", path(&tls.key, "(null)"));
    stat(
        out,
        "ssl_verify_mode",
        [0, 1, 3, 7][tls.verify_mode.min(3) as usize],
    );
    stat(out, "ssl_keyformat", tls.keyformat);
    stat(out, "ssl_ciphers", tls.ciphers.as_deref().unwrap_or("NULL"));
    stat(out, "ssl_ca_cert", path(&tls.ca_cert, "NULL"));
    stat(out, "ssl_wbuf_size", tls.wbuf_size);
    stat(out, "ssl_session_cache", yes_no(tls.session_cache));
    stat(out, "ssl_kernel_tls", yes_no(tls.kernel_tls));
    stat(out, "ssl_min_version", tls.min_version_name());
    stat(out, "num_napi_ids", "(null)");
    stat(out, "memory_file", path(&s.memory_file, "(null)"));
    // cachalot's own settings (docs/cost.md).
    stat(out, "eviction", ec.eviction.name());
    stat(out, "learn_costs", yes_no(ec.learn_costs));
    stat(out, "hugepages", yes_no(ec.hugepages || ec.prealloc));
    stat(out, "lock_stripes", ec.lock_stripes);
    stat(out, "log_format", s.log_format.name());
    stat(out, "in_place_sets", yes_no(ec.in_place_sets));
    stat(out, "lockfree_inserts", yes_no(ec.lockfree_inserts));
    stat(out, "repartition", yes_no(ec.repartition));
    stat(out, "zzone", yes_no(ec.zzone));
    stat(out, "zzone_block", ec.zzone_block);
    stat(out, "zzone_deltas", ec.zzone_deltas);
    stat(
        out,
        "zzone_codec",
        match ec.zzone_codec {
            cachalot_engine::codec::Codec::Raw => "none",
            cachalot_engine::codec::Codec::Lz4 => "lz4",
            cachalot_engine::codec::Codec::Zstd => "zstd",
        },
    );
    stat(out, "zzone_target", ec.zzone_target);
    stat(out, "hotkeys", yes_no(s.hotkeys));
    stat(out, "mrc", yes_no(s.mrc));
    stat(out, "net_io", net_io(ctx));
    if ec.flash.is_some() {
        stat(out, "ext_threads", s.flash_readers);
        stat(
            out,
            "flash_io",
            if s.flash_uring { "uring" } else { "threads" },
        );
    }
    if let Some(t) = &s.trace {
        stat(out, "trace_file", t.path.display());
        stat(out, "trace_sample", t.sample);
        stat(out, "trace_max", t.max_bytes);
        stat(out, "trace_format", t.format.name());
        stat(out, "trace_keys", t.keys.name());
    }
    stat(out, "rebalance", ec.rebalance.name());
    stat(
        out,
        "sas_rule",
        format!("{:?}", ec.rebalance_tuning.sas_rule).to_lowercase(),
    );
    stat(out, "sas_misses", ec.rebalance_tuning.sas_misses);
    stat(out, "cachalot_version", env!("CARGO_PKG_VERSION"));
}

/// `stats items`: one block per slab class holding items.
fn items(ctx: &Ctx<'_>, out: &mut Pairs) {
    let classes = ctx.cache.slab_stats();
    for c in classes.iter().filter(|c| c.number > 0) {
        let id = c.id;
        let mut st = |name: &str, v: u64| stat(out, format_args!("items:{id}:{name}"), v);
        // CLOCK has a single queue per class: everything is "cold".
        st("number", c.number);
        st("number_hot", 0);
        st("number_warm", 0);
        st("number_cold", c.number);
        st("age_hot", 0);
        st("age_warm", 0);
        st("age", c.age);
        st("mem_requested", c.mem_requested);
        st("evicted", c.evicted);
        st("evicted_nonzero", c.evicted_nonzero);
        st("evicted_time", c.evicted_time);
        st("outofmemory", c.outofmemory);
        st("tailrepairs", 0);
        st("reclaimed", c.reclaimed);
        st("expired_unfetched", c.expired_unfetched);
        st("evicted_unfetched", c.evicted_unfetched);
        st("evicted_active", 0);
        st("crawler_reclaimed", c.crawler_reclaimed);
        st("crawler_items_checked", 0);
        st("lrutail_reflocked", 0);
        st("moves_to_cold", 0);
        st("moves_to_warm", 0);
        st("moves_within_lru", 0);
        st("direct_reclaims", 0);
        st("hits_to_hot", 0);
        st("hits_to_warm", 0);
        st("hits_to_cold", c.get_hits);
        st("hits_to_temp", 0);
        // Not in memcached: the summed cost of the evicted items.
        st("evicted_cost", c.evicted_cost);
    }
}

/// `stats slabs`: classes that own pages, then the totals.
fn slabs(ctx: &Ctx<'_>, out: &mut Pairs) {
    let (classes, e) = ctx.cache.slab_and_engine_stats();
    let mut active = 0;
    for c in classes.iter().filter(|c| c.total_pages > 0) {
        active += 1;
        let id = c.id;
        let mut st = |name: &str, v: u64| stat(out, format_args!("{id}:{name}"), v);
        st("chunk_size", u64::from(c.chunk_size));
        st("chunks_per_page", u64::from(c.chunks_per_page));
        st("total_pages", c.total_pages);
        st("total_chunks", c.total_chunks);
        st("used_chunks", c.used_chunks);
        st("free_chunks", c.free_chunks);
        st("free_chunks_end", c.free_chunks_end);
        st("get_hits", c.get_hits);
        st("cmd_set", c.cmd_set);
        st("delete_hits", c.delete_hits);
        st("incr_hits", c.incr_hits);
        st("decr_hits", c.decr_hits);
        st("cas_hits", c.cas_hits);
        st("cas_badval", c.cas_badval);
        st("touch_hits", c.touch_hits);
        // Not in memcached: the live items' mean cost and the summed cost
        // of the items evicted (docs/cost.md).
        st("avg_cost", c.avg_cost);
        st("evicted_cost", c.evicted_cost);
        // Not in memcached: GET misses on keys this class evicted recently
        // (with rebalance=sas) and their cost, pages moved in and out.
        st("capacity_misses", c.capacity_misses);
        st("cost_capacity_misses", c.cost_capacity_misses);
        st("pages_in", c.pages_in);
        st("pages_out", c.pages_out);
    }
    stat(out, "active_slabs", active);
    stat(out, "total_malloced", e.total_malloced);
}

/// `stats sizes`: item counts by total size rounded up to 32 bytes (what
/// memcached prints with `-o track_sizes`).
fn sizes(ctx: &Ctx<'_>, out: &mut Pairs) {
    let hist = ctx.cache.size_histogram();
    for (size, count) in hist {
        stat(out, size, count);
    }
}

/// `stats conns`: every connection and listener, by file descriptor.
fn conns(ctx: &Ctx<'_>, out: &mut Pairs) {
    let now = ctx.cache.clock().now();
    for c in ctx.shared.conns_snapshot(now) {
        let id = c.id;
        stat(out, format_args!("{id}:addr"), &c.addr);
        if !c.listen_addr.is_empty() {
            stat(out, format_args!("{id}:listen_addr"), &c.listen_addr);
        }
        stat(out, format_args!("{id}:state"), c.state);
        stat(
            out,
            format_args!("{id}:secs_since_last_cmd"),
            c.secs_since_last_cmd,
        );
    }
}

fn reset_thread(t: &ThreadStats) {
    for c in [
        &t.cmd_get,
        &t.cmd_set,
        &t.cmd_flush,
        &t.cmd_touch,
        &t.cmd_meta,
        &t.get_hits,
        &t.get_misses,
        &t.get_expired,
        &t.get_flushed,
        &t.get_aborted_flash,
        &t.delete_hits,
        &t.delete_misses,
        &t.incr_hits,
        &t.incr_misses,
        &t.decr_hits,
        &t.decr_misses,
        &t.cas_hits,
        &t.cas_misses,
        &t.cas_badval,
        &t.touch_hits,
        &t.touch_misses,
        &t.store_too_large,
        &t.store_no_memory,
        &t.auth_cmds,
        &t.auth_errors,
        &t.bytes_read,
        &t.bytes_written,
        &t.conn_yields,
    ] {
        c.store(0, Ordering::Relaxed);
    }
    t.prefix_counts.clear();
}

// ---------------------------------------------------------------------------
// `stats detail`: per key-prefix counters (memcached's stats_prefix.c).

/// What a command did to a key, for per-prefix stats.
pub use crate::prefixes::Op as DetailOp;

/// Count a get/set/delete against the key's prefix when `stats detail` is on
/// (one relaxed load otherwise), in this worker's table (`prefixes`).
pub fn detail_record(ctx: &Ctx<'_>, key: &[u8], op: DetailOp) {
    if ctx.shared.prefixes.enabled() {
        ctx.stats
            .prefix_counts
            .record(&ctx.shared.prefixes, key, op);
    }
}

/// Every worker's per-prefix requests, summed by prefix id (and the
/// serving thread's, when it is not a worker: tests).
fn prefix_requests(ctx: &Ctx<'_>) -> Vec<crate::prefixes::Requests> {
    let mut sum = Vec::new();
    for t in &ctx.shared.threads {
        t.prefix_counts.add_to(&mut sum);
    }
    if !ctx
        .shared
        .threads
        .iter()
        .any(|t| std::ptr::eq(&**t, ctx.stats))
    {
        ctx.stats.prefix_counts.add_to(&mut sum);
    }
    sum
}

fn detail(ctx: &Ctx<'_>, arg: &[u8], out: &mut Vec<u8>) {
    match arg {
        b"on" => {
            crate::prefixes::switch(true);
            line(out, "OK");
        }
        b"off" => {
            crate::prefixes::switch(false);
            line(out, "OK");
        }
        b"dump" => {
            // memcached's lines: prefixes in name order, keys without a
            // delimiter not counted.
            let sums = prefix_requests(ctx);
            let names = ctx.shared.prefixes.names();
            let mut rows: Vec<_> = names
                .iter()
                .zip(&sums)
                .skip(1)
                .filter(|(_, c)| **c != crate::prefixes::Requests::default())
                .collect();
            rows.sort_by(|a, b| a.0.cmp(b.0));
            for (prefix, c) in rows {
                out.extend_from_slice(b"PREFIX ");
                out.extend_from_slice(prefix);
                let _ = write!(
                    out,
                    " get {} hit {} set {} del {}\r\n",
                    c.gets, c.hits, c.sets, c.deletes
                );
            }
            line(out, "END");
        }
        _ => line(out, "CLIENT_ERROR usage: stats detail on|off|dump"),
    }
}

/// One prefix's figures: items and bytes by tier (the last walk's) and
/// requests.
#[derive(Debug)]
pub struct PrefixRow {
    pub name: Box<[u8]>,
    pub held: crate::prefixes::Held,
    pub requests: crate::prefixes::Requests,
    /// Items of the prefix that left the cache for room.
    pub evictions: u64,
}

/// Every prefix with items or requests, largest in bytes first, and the
/// last walk (None while prefix stats are off).
pub fn prefix_rows(ctx: &Ctx<'_>) -> Option<(Vec<PrefixRow>, Option<crate::prefixes::Snapshot>)> {
    if !ctx.shared.prefixes.enabled() {
        return None;
    }
    let names = ctx.shared.prefixes.names();
    let requests = prefix_requests(ctx);
    let evictions = ctx.shared.prefixes.evictions();
    let snap = ctx.shared.prefixes.snapshot();
    let held = snap.as_ref().map(|s| s.held.as_slice()).unwrap_or(&[]);
    let mut rows: Vec<PrefixRow> = names
        .into_iter()
        .enumerate()
        .map(|(i, name)| PrefixRow {
            name,
            held: held.get(i).copied().unwrap_or_default(),
            requests: requests.get(i).copied().unwrap_or_default(),
            evictions: evictions.get(i).copied().unwrap_or(0),
        })
        .filter(|r| {
            r.held.items.iter().any(|&n| n > 0)
                || r.requests != Default::default()
                || r.evictions > 0
        })
        .collect();
    let bytes = |r: &PrefixRow| r.held.bytes.iter().sum::<u64>();
    rows.sort_by_key(|r| std::cmp::Reverse(bytes(r)));
    Some((rows, snap))
}

/// `stats prefixes`: for each prefix, its items and bytes in each tier
/// (from the last finished memory walk) and its requests, largest first.
fn prefixes(ctx: &Ctx<'_>, out: &mut Vec<u8>) {
    let Some((rows, snap)) = prefix_rows(ctx) else {
        return line(
            out,
            "CLIENT_ERROR prefix stats are off (-D <delimiter>, or stats detail on)",
        );
    };
    let mut stat = |name: &[u8], field: &str, v: u64| {
        out.extend_from_slice(b"STAT prefix:");
        crate::watchers::push_key(out, name);
        let _ = write!(out, ":{field} {v}\r\n");
    };
    for row in &rows {
        let (h, r, n) = (&row.held, &row.requests, &row.name);
        stat(n, "items", h.items.iter().sum());
        stat(n, "bytes_memory", h.bytes[0]);
        stat(n, "bytes_zzone", h.bytes[1]);
        stat(n, "bytes_flash", h.bytes[2]);
        stat(n, "gets", r.gets);
        stat(n, "hits", r.hits);
        stat(n, "misses", r.gets - r.hits);
        stat(n, "sets", r.sets);
        stat(n, "deletes", r.deletes);
        stat(n, "evictions", row.evictions);
    }
    // Evictions no prefix was told of: the flash tier's, and Z-zone items
    // whose block found no room while their keys were compressed
    // (`EvictionTap`); reassign evictions are evictions here too.
    let e = ctx.cache.stats();
    let told: u64 = rows.iter().map(|r| r.evictions).sum();
    let all = e.evictions + e.slab_reassign_evictions;
    let _ = write!(
        out,
        "STAT prefixes_evictions_unattributed {}\r\n",
        all.saturating_sub(told)
    );
    match snap {
        Some(s) => {
            let _ = write!(
                out,
                "STAT prefixes_walk_age_ms {}\r\nSTAT prefixes_walk_ms {}\r\n",
                s.ended.elapsed().as_millis(),
                s.took.as_millis()
            );
        }
        None => line(out, "STAT prefixes_walk_age_ms -1"),
    }
    line(out, "END");
}

// ---------------------------------------------------------------------------
// `stats hotkeys [N]` (issue 36): the keys asked for most, right now.

/// Keys `stats hotkeys` lists without a count, and the most it lists.
pub const HOTKEYS_DEFAULT: usize = 10;
pub const HOTKEYS_MAX: usize = 100;

/// The `n` hottest keys of every worker, with their tiers (None when the
/// sketches are off).
pub fn hot_rows(ctx: &Ctx<'_>, n: usize) -> Option<Vec<HotRow>> {
    hot_rows_of(ctx.cache, &ctx.shared.threads, n)
}

/// [`hot_rows`] for the maintainer (`watch hotkeys`), which has no `Ctx`.
pub fn hot_rows_of(
    cache: &cachalot_engine::Cache,
    threads: &[std::sync::Arc<crate::stats::ThreadStats>],
    n: usize,
) -> Option<Vec<HotRow>> {
    use cachalot_engine::api::Tier;
    if !threads.iter().any(|t| t.hot.is_on()) {
        return None;
    }
    let rows = crate::hotkeys::top(threads.iter().map(|t| &t.hot), cache.clock(), n)
        .into_iter()
        .map(|hot| {
            let tier = match cache.tier_of(&hot.key) {
                Some(Tier::Memory) => "memory",
                Some(Tier::Zzone) => "zzone",
                Some(Tier::Flash) => "flash",
                None => "none",
            };
            HotRow { hot, tier }
        })
        .collect();
    Some(rows)
}

fn hotkeys(ctx: &Ctx<'_>, n: Option<&[u8]>, out: &mut Vec<u8>) {
    let n = match n.map(|n| {
        std::str::from_utf8(n)
            .ok()
            .and_then(|n| n.parse::<usize>().ok())
    }) {
        None => HOTKEYS_DEFAULT,
        Some(Some(n)) if (1..=HOTKEYS_MAX).contains(&n) => n,
        Some(_) => return line(out, "CLIENT_ERROR usage: stats hotkeys [1-100]"),
    };
    let Some(rows) = hot_rows(ctx, n) else {
        return line(out, "CLIENT_ERROR hot keys are off (-o hotkeys=1)");
    };
    for (i, r) in rows.iter().enumerate() {
        let rank = i + 1;
        out.extend_from_slice(format!("STAT hotkeys:{rank}:key ").as_bytes());
        crate::watchers::push_key(out, &r.hot.key);
        let h = &r.hot;
        let _ = write!(
            out,
            "\r\nSTAT hotkeys:{rank}:requests_per_sec {:.1}\r\n\
             STAT hotkeys:{rank}:hits_per_sec {:.1}\r\n\
             STAT hotkeys:{rank}:misses_per_sec {:.1}\r\n\
             STAT hotkeys:{rank}:size {}\r\n\
             STAT hotkeys:{rank}:tier {}\r\n",
            h.rate, h.hits, h.misses, h.size, r.tier
        );
    }
    line(out, "END");
}

/// `stats cachedump <class> <limit>`: memcached's debugging dump of a class's
/// items, `ITEM <key> [<bytes> b; <unix exptime or 0> s]`, capped at 2 MB.
fn cachedump(ctx: &Ctx<'_>, class: Option<&[u8]>, limit: Option<&[u8]>, out: &mut Vec<u8>) {
    let (Some(class), Some(limit)) = (class, limit) else {
        line(out, "CLIENT_ERROR bad command line");
        return;
    };
    let parse = |b: &[u8]| std::str::from_utf8(b).ok()?.parse::<u32>().ok();
    let (Some(class), Some(limit)) = (parse(class), parse(limit)) else {
        line(out, "CLIENT_ERROR bad command line format");
        return;
    };
    if class >= 64 {
        line(out, "CLIENT_ERROR Illegal slab id");
        return;
    }
    let started = ctx.cache.clock().started_unix();
    let items = ctx.cache.cachedump(class, limit as usize, 2 << 20);
    for (key, bytes, expiry) in items {
        let exp = match expiry {
            cachalot_engine::Expiry::At(t) => started + t as i64,
            _ => 0,
        };
        out.extend_from_slice(b"ITEM ");
        out.extend_from_slice(&key);
        let _ = write!(out, " [{bytes} b; {exp} s]\r\n");
    }
    line(out, "END");
}

#[cfg(test)]
mod tests {
    //! The cost-aware caching fields (docs/cost.md): settings, per-class
    //! average and evicted cost, totals, learned costs.

    use std::collections::HashMap;
    use std::sync::Arc;

    use cachalot_engine::engine::Lookup;
    use cachalot_engine::{Cache, Clock, EvictionPolicy, Store};

    use super::*;
    use crate::settings::Settings;
    use crate::stats::Shared;

    fn pairs(settings: &Settings, cache: &Cache, group: &[u8]) -> HashMap<String, String> {
        let shared = Arc::new(Shared::default());
        let stats = ThreadStats::default();
        let ctx = Ctx {
            cache,
            settings,
            shared: &shared,
            stats: &stats,
            conn_id: 1,
            reads: None,
        };
        collect(&ctx, group)
            .expect("known group")
            .into_iter()
            .collect()
    }

    fn gdwheel(memory_limit: usize) -> (Settings, Cache, Arc<Clock>) {
        let mut s = Settings::default();
        s.engine.eviction = EvictionPolicy::GdWheel;
        s.engine.learn_costs = true;
        s.engine.memory_limit = memory_limit;
        // The N-zone's counters alone: with a Z-zone, the totals count
        // items leaving the cache, the classes items leaving their pages.
        s.engine.zzone = false;
        let clock = Arc::new(Clock::new());
        let cache = Cache::new(s.engine.clone(), clock.clone()).unwrap();
        (s, cache, clock)
    }

    #[test]
    fn net_io_names_what_the_workers_use() {
        use NetPath::{Epoll, Starting, Uring};
        let of = |asked, paths: &[NetPath]| net_io_of(asked, paths.iter().copied());
        assert_eq!(of(Uring, &[Uring, Uring]), "uring");
        assert_eq!(of(Uring, &[Uring, Starting]), "uring");
        assert_eq!(of(Uring, &[Uring, Epoll]), "mixed");
        assert_eq!(of(Uring, &[Epoll, Uring]), "mixed");
        assert_eq!(of(Uring, &[Epoll, Epoll]), "epoll");
        assert_eq!(of(Epoll, &[Starting, Epoll]), "epoll");
        assert_eq!(of(Uring, &[]), "uring");
    }

    #[test]
    fn settings_name_the_policy() {
        let s = Settings::default();
        let cache = Cache::new(s.engine.clone(), Arc::new(Clock::new())).unwrap();
        let p = pairs(&s, &cache, b"settings");
        assert_eq!(p["eviction"], "lru");
        assert_eq!(p["learn_costs"], "no");
        let (s, cache, _) = gdwheel(64 << 20);
        let p = pairs(&s, &cache, b"settings");
        assert_eq!(p["eviction"], "gdwheel");
        assert_eq!(p["learn_costs"], "yes");
    }

    #[test]
    fn average_and_evicted_costs_per_class_and_in_total() {
        let (s, cache, clock) = gdwheel(2 << 20);
        for (k, c) in [(&b"a"[..], 10), (b"b", 20), (b"c", 40)] {
            cache.store(&Store {
                cost: Some(c),
                ..Store::set(k, b"value")
            });
        }
        // Learned: a miss, then the SET 300 us later.
        clock.set_us(1_000);
        assert!(cache.get(b"d", Lookup::GET, |it| it.is_none()));
        clock.set_us(1_300);
        cache.store(&Store::set(b"d", b"value"));
        let slabs = pairs(&s, &cache, b"slabs");
        let class = slabs
            .keys()
            .find_map(|k| k.strip_suffix(":avg_cost").map(str::to_string))
            .expect("a class with items");
        // (10 + 20 + 40 + 300) / 4, each quantised: (10 + 21 + 41 + 304) / 4.
        assert_eq!(slabs[&format!("{class}:avg_cost")], "94");
        assert_eq!(slabs[&format!("{class}:evicted_cost")], "0");
        let general = pairs(&s, &cache, b"");
        assert_eq!(general["learned_costs"], "1");
        assert_eq!(general["evicted_cost"], "0");
        assert_ne!(general["learn_table_bytes"], "0");
        assert_ne!(general["eviction_bytes"], "0");
        // Fill the 2 MB cache with items of cost 7: the cheapest go first,
        // and every eviction is counted with its cost.
        for i in 0..40_000u32 {
            cache.store(&Store {
                cost: Some(7),
                ..Store::set(format!("k{i}").as_bytes(), b"value")
            });
        }
        assert!(cache.peek(b"c", |it| it.is_some()));
        let general = pairs(&s, &cache, b"");
        let evictions: u64 = general["evictions"].parse().unwrap();
        assert!(evictions > 0);
        assert_eq!(general["evicted_cost"], (7 * evictions).to_string());
        let items = pairs(&s, &cache, b"items");
        assert_eq!(
            items[&format!("items:{class}:evicted_cost")],
            general["evicted_cost"]
        );
        let slabs = pairs(&s, &cache, b"slabs");
        assert_eq!(
            slabs[&format!("{class}:evicted_cost")],
            general["evicted_cost"]
        );
    }

    #[test]
    fn rebalancing_fields_in_settings_slabs_and_stats() {
        let mut s = Settings::default();
        s.engine.memory_limit = 4 << 20;
        // Evicted keys come back as capacity misses: not from a Z-zone.
        s.engine.zzone = false;
        let cache = Cache::new(s.engine.clone(), Arc::new(Clock::new())).unwrap();
        assert_eq!(pairs(&s, &cache, b"settings")["rebalance"], "mrc");
        // SAS counts every capacity miss (mrc estimates them from its
        // sample: rebalance/profile.rs).
        s.engine.rebalance = cachalot_engine::RebalancePolicy::Sas;
        let cache = Cache::new(s.engine.clone(), Arc::new(Clock::new())).unwrap();
        let p = pairs(&s, &cache, b"settings");
        assert_eq!(p["rebalance"], "sas");
        assert_eq!(p["sas_rule"], "marginal");
        assert_eq!(p["sas_misses"], "2000");
        for i in 0..200_000u32 {
            cache.store(&Store::set(format!("key:{i:08}").as_bytes(), b"0123456789"));
        }
        // Without reads CLOCK evicts in write order: the last keys
        // evicted come back as capacity misses, with cost 5.
        let evicted = cache.stats().evictions as u32;
        for i in evicted - 10..evicted {
            let k = format!("key:{i:08}");
            assert!(cache.get(k.as_bytes(), Lookup::GET, |it| it.is_none()));
            cache.store(&Store {
                cost: Some(5),
                ..Store::set(k.as_bytes(), b"0123456789")
            });
        }
        assert_eq!(
            cache.slabs_reassign(-1, 20),
            cachalot_engine::engine::ReassignOutcome::Ok
        );
        assert!(evicted > 10);
        let slabs = pairs(&s, &cache, b"slabs");
        let class = slabs
            .iter()
            .find(|(k, v)| k.ends_with(":capacity_misses") && *v != "0")
            .map(|(k, _)| k.trim_end_matches(":capacity_misses").to_string())
            .expect("a class with capacity misses");
        assert_eq!(slabs[&format!("{class}:capacity_misses")], "10");
        assert_eq!(slabs[&format!("{class}:cost_capacity_misses")], "50");
        // The reassign's page, and any the index's growth took back from
        // the fullest class (`Engine::enforce_budget`).
        let out: u64 = slabs[&format!("{class}:pages_out")].parse().unwrap();
        assert!(out >= 1, "{out}");
        assert_eq!(slabs["20:pages_in"], "1");
        let general = pairs(&s, &cache, b"");
        assert_eq!(general["rebalance_policy"], "sas");
        assert_eq!(general["capacity_misses"], "10");
        assert_eq!(general["cost_capacity_misses"], "50");
        assert_eq!(general["slabs_moved"], "1");
        assert_ne!(general["rebalance_bytes"], "0");
    }
}
