//! Prometheus metrics on an admin listener (`-o metrics_listen=HOST:PORT`,
//! issue 13): `GET /metrics` answers the OpenMetrics text exposition
//! (which Prometheus scrapes), encoded by `prometheus-client`.
//!
//! - memcached's statistics under memcached_exporter's names
//!   (`memcached_current_items`, `memcached_commands_total{command,status}`,
//!   ...), so its dashboards work unchanged;
//! - the engine's own under `cachalot_`: the eviction policy and the
//!   rebalancer (`cachalot_info`, `cachalot_slabs_moved_total`), and every
//!   figure of `stats flash` and `stats zzone` when those tiers are on.
//!
//! Every scrape reads the same pairs `stats` prints (`stats_cmd::collect`):
//! one source for both. The listener runs on a thread of its own, one
//! request at a time, with short timeouts, so a slow or hostile scraper
//! holds up only other scrapes.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cachalot_engine::Cache;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::session::Ctx;
use crate::stats::{Shared, ThreadStats};
use crate::stats_cmd::{self, Pairs};
use crate::Settings;

/// Largest request head read (a scraper sends a few hundred bytes).
const MAX_HEAD: usize = 8 * 1024;
const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// Bind the admin listener (at start: a bad address stops the server, as
/// a bad `-l` does).
pub fn bind(addr: &str) -> io::Result<TcpListener> {
    let l = TcpListener::bind(addr)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Serve scrapes until `stop`.
pub fn serve(
    listener: TcpListener,
    cache: Arc<Cache>,
    settings: Arc<Settings>,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
) {
    let stats = ThreadStats::default();
    let ctx = Ctx {
        cache: &cache,
        settings: &settings,
        shared: &shared,
        stats: &stats,
        conn_id: 0,
    };
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            // A scraper that misbehaves loses its own scrape, nothing else.
            Ok((stream, _)) => {
                let _ = respond(stream, &ctx);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn respond(mut stream: TcpStream, ctx: &Ctx<'_>) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf)?;
        if n == 0 || head.len() + n > MAX_HEAD {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let first = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut words = first.split(|&b| b == b' ');
    let (method, path) = (words.next(), words.next());
    let (status, kind, body) = match (method, path) {
        (Some(b"GET"), Some(b"/metrics")) => (
            "200 OK",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            render(ctx),
        ),
        (Some(b"GET"), _) => ("404 Not Found", "text/plain", "not found\n".into()),
        _ => ("405 Method Not Allowed", "text/plain", "GET only\n".into()),
    };
    let mut reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    reply.push_str(&body);
    stream.write_all(reply.as_bytes())
}

/// The exposition, from the statistics as `stats` reads them now.
pub fn render(ctx: &Ctx<'_>) -> String {
    let group = |g: &[u8]| stats_cmd::collect(ctx, g).unwrap_or_default();
    let snapshot = Snapshot {
        general: group(b""),
        settings: group(b"settings"),
        tiers: [group(b"flash"), group(b"zzone")],
    };
    let mut registry = Registry::default();
    registry.register_collector(Box::new(snapshot));
    let mut out = String::new();
    match prometheus_client::encoding::text::encode(&mut out, &registry) {
        Ok(()) => out,
        // Writing into a String cannot fail; an encoder error is a bug.
        Err(_) => "# EOF\n".into(),
    }
}

#[derive(Debug)]
struct Snapshot {
    general: Pairs,
    settings: Pairs,
    tiers: [Pairs; 2],
}

fn find<'a>(pairs: &'a Pairs, name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// memcached_exporter's gauges and counters: (its name without `_total`,
/// the `stats` field, help).
/// (memcached_exporter exports uptime and CPU time as counters without the
/// `_total` that OpenMetrics requires of one: gauges keep their names.)
const GAUGES: &[(&str, &str, &str)] = &[
    (
        "memcached_uptime_seconds",
        "uptime",
        "seconds since the server started",
    ),
    (
        "memcached_rusage_user_seconds",
        "rusage_user",
        "user CPU time the process has used",
    ),
    (
        "memcached_rusage_system_seconds",
        "rusage_system",
        "system CPU time the process has used",
    ),
    (
        "memcached_time_seconds",
        "time",
        "current UNIX time according to the server",
    ),
    (
        "memcached_current_bytes",
        "bytes",
        "current number of bytes used to store items",
    ),
    (
        "memcached_limit_bytes",
        "limit_maxbytes",
        "number of bytes this server is allowed to use",
    ),
    (
        "memcached_current_items",
        "curr_items",
        "current number of items stored",
    ),
    (
        "memcached_current_connections",
        "curr_connections",
        "current number of open connections",
    ),
];
const COUNTERS: &[(&str, &str, &str)] = &[
    (
        "memcached_items",
        "total_items",
        "items stored since the server started",
    ),
    (
        "memcached_read_bytes",
        "bytes_read",
        "bytes read from the network",
    ),
    (
        "memcached_written_bytes",
        "bytes_written",
        "bytes written to the network",
    ),
    (
        "memcached_connections",
        "total_connections",
        "connections opened since the server started",
    ),
    (
        "memcached_connections_rejected",
        "rejected_connections",
        "connections refused at the connection limit",
    ),
    (
        "memcached_connections_yielded",
        "conn_yields",
        "times a connection yielded to others (-R)",
    ),
    (
        "memcached_items_evicted",
        "evictions",
        "valid items removed to free memory",
    ),
    (
        "memcached_items_reclaimed",
        "reclaimed",
        "times an expired item's memory was reused",
    ),
    (
        "memcached_item_expired_unfetched",
        "expired_unfetched",
        "items expired without being fetched",
    ),
    (
        "memcached_item_evicted_unfetched",
        "evicted_unfetched",
        "items evicted without being fetched",
    ),
    (
        "memcached_connections_listener_disabled",
        "listen_disabled_num",
        "times the listener stopped accepting at the connection limit",
    ),
    (
        "memcached_slabs_moved",
        "slabs_moved",
        "pages moved between slab classes",
    ),
    // cachalot's cost-aware caching and rebalancing (docs/cost.md).
    (
        "cachalot_evicted_cost",
        "evicted_cost",
        "summed cost of the items evicted",
    ),
    (
        "cachalot_learned_costs",
        "learned_costs",
        "costs learned from a miss and the SET after it",
    ),
    (
        "cachalot_capacity_misses",
        "capacity_misses",
        "GET misses on keys evicted recently",
    ),
    (
        "cachalot_cost_capacity_misses",
        "cost_capacity_misses",
        "the cost of those misses",
    ),
    (
        "cachalot_rebalance_decisions",
        "rebalance_decisions",
        "page moves the rebalancing rule decided",
    ),
];
/// `memcached_commands_total{command,status}`: (command, status, field).
const COMMANDS: &[(&str, &str, &str)] = &[
    ("get", "hit", "get_hits"),
    ("get", "miss", "get_misses"),
    ("get", "expired", "get_expired"),
    ("get", "flushed", "get_flushed"),
    ("set", "hit", "cmd_set"),
    ("delete", "hit", "delete_hits"),
    ("delete", "miss", "delete_misses"),
    ("incr", "hit", "incr_hits"),
    ("incr", "miss", "incr_misses"),
    ("decr", "hit", "decr_hits"),
    ("decr", "miss", "decr_misses"),
    ("cas", "hit", "cas_hits"),
    ("cas", "miss", "cas_misses"),
    ("cas", "badval", "cas_badval"),
    ("touch", "hit", "touch_hits"),
    ("touch", "miss", "touch_misses"),
    ("flush", "hit", "cmd_flush"),
];

fn number(v: &str) -> Option<f64> {
    v.parse::<f64>().ok().filter(|x| x.is_finite())
}

impl Collector for Snapshot {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let g = &self.general;
        gauge(&mut enc, "memcached_up", "whether the server answered", 1.0)?;
        if let Some(v) = find(g, "version") {
            let mut m = enc.encode_descriptor(
                "memcached_version",
                "the version of the server",
                None,
                MetricType::Gauge,
            )?;
            let labels = [("version", v)];
            ConstGauge::new(1i64).encode(m.encode_family(&labels)?)?;
        }
        for &(name, field, help) in GAUGES {
            if let Some(x) = find(g, field).and_then(number) {
                gauge(&mut enc, name, help, x)?;
            }
        }
        if let Some(x) = find(&self.settings, "maxconns").and_then(number) {
            gauge(
                &mut enc,
                "memcached_max_connections",
                "connection limit (-c)",
                x,
            )?;
        }
        for &(name, field, help) in COUNTERS {
            if let Some(x) = find(g, field).and_then(number) {
                counter(&mut enc, name, help, x)?;
            }
        }
        let mut m = enc.encode_descriptor(
            "memcached_commands",
            "commands by command and outcome",
            None,
            MetricType::Counter,
        )?;
        for &(command, status, field) in COMMANDS {
            if let Some(x) = find(g, field).and_then(number) {
                let labels = [("command", command), ("status", status)];
                ConstCounter::new(x).encode(m.encode_family(&labels)?)?;
            }
        }
        // The engine's own: its policies as labels of an info metric, and
        // every numeric figure of the tiers that are on.
        let s = &self.settings;
        let info: Vec<(&str, &str)> = [
            ("eviction", "eviction"),
            ("rebalance", "rebalance_policy"),
            ("zzone", "zzone"),
        ]
        .iter()
        .filter_map(|&(label, field)| find(s, field).map(|v| (label, v)))
        .collect();
        let mut m = enc.encode_descriptor(
            "cachalot_info",
            "the engine's policies (stats settings)",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(1i64).encode(m.encode_family(&info)?)?;
        for tier in &self.tiers {
            for (field, value) in tier {
                if let Some(x) = number(value) {
                    let name = format!("cachalot_{field}");
                    gauge(
                        &mut enc,
                        &name,
                        "stats flash / stats zzone (docs/protocol.md)",
                        x,
                    )?;
                }
            }
        }
        Ok(())
    }
}

fn gauge(enc: &mut DescriptorEncoder<'_>, name: &str, help: &str, x: f64) -> std::fmt::Result {
    metric(enc, name, help, ConstGauge::new(x))
}

fn counter(enc: &mut DescriptorEncoder<'_>, name: &str, help: &str, x: f64) -> std::fmt::Result {
    metric(enc, name, help, ConstCounter::new(x))
}

/// One metric without labels: its descriptor, then its value.
fn metric(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    m: impl EncodeMetric,
) -> std::fmt::Result {
    let e = enc.encode_descriptor(name, help, None, m.metric_type())?;
    m.encode(e)
}
