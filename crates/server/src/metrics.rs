//! Prometheus metrics on an admin listener (`-o metrics_listen=HOST:PORT`,
//! issue 13): `GET /metrics` (or `HEAD`; a query string is ignored)
//! answers the text exposition in the format the scraper asks for:
//! OpenMetrics 1.0 when its `Accept` header prefers
//! `application/openmetrics-text` (Prometheus's does), else the classic
//! Prometheus text format 0.0.4 (`curl`, older scrapers). What it holds:
//!
//! - memcached's statistics under memcached_exporter's names
//!   (`memcached_current_items`, `memcached_commands_total{command,status}`,
//!   ...), so its dashboards work unchanged;
//! - the engine's own under `cachalot_`: the eviction policy and the
//!   rebalancer (`cachalot_info`, `cachalot_slabs_moved_total`), and every
//!   figure of `stats flash` and `stats zzone` when those tiers are on.
//!
//! Every scrape reads the same pairs `stats` prints (`stats_cmd::collect`):
//! one source for both.
//!
//! No client can hold the endpoint: the listener thread only accepts, and
//! each scrape runs on a thread of its own with a whole-request deadline
//! (its head within [`HEAD_DEADLINE`] of the accept, its reply taken within
//! [`REPLY_DEADLINE`]; every read and write waits only for what is left of
//! it). At most [`MAX_SCRAPES`] run at once; a connection beyond them is
//! answered `503` at once and closed. A client that trickles its request
//! therefore costs one slot for two seconds, and delays no other scrape.
//! The HTTP is hand-written with std (a request head of at most
//! [`MAX_HEAD`] bytes, one request per connection, `Connection: close`):
//! less code than any server crate's setup.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cachalot_engine::Cache;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};

use crate::handler::Ctx;
use crate::settings::Settings;
use crate::stats::{Shared, ThreadStats};
use crate::stats_cmd::{self, Pairs};

/// Largest request head read (a scraper sends a few hundred bytes); a
/// longer one is answered `431`.
const MAX_HEAD: usize = 8 * 1024;
/// From the accept to the end of the request head.
const HEAD_DEADLINE: Duration = Duration::from_secs(2);
/// For the whole reply to be taken.
const REPLY_DEADLINE: Duration = Duration::from_secs(2);
/// Scrapes served at once (Prometheus servers scrape a target one at a
/// time; a few leave room for a person with curl and an HA pair).
pub const MAX_SCRAPES: usize = 4;
/// How often the listener looks at the stop flag while no one connects.
const STOP_POLL: Duration = Duration::from_millis(50);

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const TEXT_004: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Bind the admin listener (at start: a bad address stops the server, as
/// a bad `-l` does).
pub fn bind(addr: &str) -> io::Result<TcpListener> {
    let l = TcpListener::bind(addr)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Accept scrapes until `stop`, each served on a thread of its own.
pub fn serve(
    listener: TcpListener,
    cache: Arc<Cache>,
    settings: Arc<Settings>,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
) {
    let active = Arc::new(AtomicUsize::new(0));
    let mut events = Events::with_capacity(4);
    // Without a poller, fall back to looking for connections every
    // STOP_POLL (at most that much later).
    let mut poll = Poll::new().ok().filter(|p| {
        let fd = listener.as_raw_fd();
        p.registry()
            .register(&mut SourceFd(&fd), Token(0), Interest::READABLE)
            .is_ok()
    });
    while !stop.load(Ordering::Relaxed) {
        match poll.as_mut() {
            Some(p) => {
                let _ = p.poll(&mut events, Some(STOP_POLL));
            }
            None => std::thread::sleep(STOP_POLL),
        }
        // Take every connection waiting (the listener does not block).
        while let Ok((stream, _)) = listener.accept() {
            if active.load(Ordering::Acquire) >= MAX_SCRAPES {
                busy(stream);
                continue;
            }
            let slot = Slot::take(&active);
            let (cache, settings, shared) = (cache.clone(), settings.clone(), shared.clone());
            // If the thread cannot be made, the closure is dropped with
            // the stream (closed) and the slot (freed).
            let _ = std::thread::Builder::new()
                .name("metrics-scrape".into())
                .spawn(move || {
                    let _slot = slot;
                    let stats = ThreadStats::default();
                    let ctx = Ctx {
                        cache: &cache,
                        settings: &settings,
                        shared: &shared,
                        stats: &stats,
                        conn_id: 0,
                        reads: None,
                    };
                    // A scraper that misbehaves loses its own scrape only.
                    let _ = respond(stream, &ctx);
                });
        }
    }
}

/// One of the [`MAX_SCRAPES`] places, given back when dropped.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(active: &Arc<AtomicUsize>) -> Slot {
        active.fetch_add(1, Ordering::AcqRel);
        Slot(active.clone())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Over the limit: `503` without waiting for anything. What the client
/// has sent is read first (without waiting), so that closing does not
/// reset the connection before it reads the answer.
fn busy(mut stream: TcpStream) {
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    let mut buf = [0u8; 1024];
    for _ in 0..MAX_HEAD / buf.len() {
        match stream.read(&mut buf) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
    let reply = response(
        "503 Service Unavailable",
        "text/plain",
        &["Retry-After: 1"],
        b"too many scrapes at once\n",
        false,
    );
    // A fresh socket's send buffer takes these few bytes at once.
    let _ = stream.write_all(&reply);
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

fn respond(mut stream: TcpStream, ctx: &Ctx<'_>) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    let reply = match read_head(&mut stream, Instant::now() + HEAD_DEADLINE)? {
        Head::Complete(head) => answer(&head, ctx),
        Head::TooLarge => response(
            "431 Request Header Fields Too Large",
            "text/plain",
            &[],
            b"request head too large\n",
            false,
        ),
        // Closed, or the deadline passed: close without a word.
        Head::Gone => return Ok(()),
    };
    write_by(&mut stream, &reply, Instant::now() + REPLY_DEADLINE)
}

enum Head {
    Complete(Vec<u8>),
    TooLarge,
    Gone,
}

/// Where a request head ends (after its blank line; bare `\n` line ends
/// accepted as HTTP/1.1 allows).
fn head_end(buf: &[u8]) -> Option<usize> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    let crlf = buf.windows(3).position(|w| w == b"\n\r\n").map(|i| i + 3);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Read the request head, waiting no longer than `deadline` in all.
fn read_head(stream: &mut TcpStream, deadline: Instant) -> io::Result<Head> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        if let Some(end) = head_end(&head) {
            if end > MAX_HEAD {
                return Ok(Head::TooLarge);
            }
            head.truncate(end);
            return Ok(Head::Complete(head));
        }
        if head.len() > MAX_HEAD {
            return Ok(Head::TooLarge);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(Head::Gone);
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut buf) {
            Ok(0) => return Ok(Head::Gone),
            Ok(n) => head.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if timed_out(&e) => return Ok(Head::Gone),
            Err(e) => return Err(e),
        }
    }
}

/// A socket timeout ran out (the deadline passed meanwhile).
fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Write all of `data`, giving up at `deadline`.
fn write_by(stream: &mut TcpStream, mut data: &[u8], deadline: Instant) -> io::Result<()> {
    while !data.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        stream.set_write_timeout(Some(left))?;
        match stream.write(data) {
            Ok(0) => return Ok(()),
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if timed_out(&e) => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The exposition formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0.0: counters' families named without `_total`,
    /// quotes escaped in `# HELP`, `# EOF` at the end.
    OpenMetrics,
    /// Prometheus's text format 0.0.4: families named as their samples.
    Text,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => OPENMETRICS,
            Format::Text => TEXT_004,
        }
    }
}

/// The format an `Accept` header asks for: the media range of highest
/// quality (the first of equals) among OpenMetrics, `text/plain` and the
/// wildcards; OpenMetrics only when that is it, as client_golang's
/// `expfmt.Negotiate` does. No header, or nothing known: 0.0.4 text.
pub fn negotiate(accept: &str) -> Format {
    let mut best: Option<(f64, Format)> = None;
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
            .map_or(Some(1.0), |(_, v)| v.trim().parse::<f64>().ok())
            .filter(|q| q.is_finite() && *q > 0.0);
        let format = match media.as_str() {
            "application/openmetrics-text" => Format::OpenMetrics,
            "text/plain" | "text/*" | "*/*" => Format::Text,
            _ => continue,
        };
        if let Some(q) = q {
            if best.is_none_or(|(b, _)| q > b) {
                best = Some((q, format));
            }
        }
    }
    best.map_or(Format::Text, |(_, f)| f)
}

/// The reply to a request head.
fn answer(head: &[u8], ctx: &Ctx<'_>) -> Vec<u8> {
    let head = String::from_utf8_lossy(head);
    let mut lines = head.lines();
    let mut request = lines.next().unwrap_or("").split(' ');
    let (method, target) = (request.next().unwrap_or(""), request.next().unwrap_or(""));
    let path = target.split(['?', '#']).next().unwrap_or("");
    let accept = lines
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .filter(|(name, _)| name.trim().eq_ignore_ascii_case("accept"))
        .map(|(_, value)| value.trim())
        .collect::<Vec<_>>()
        .join(",");
    let head_only = method == "HEAD";
    match (method, path) {
        ("GET" | "HEAD", "/metrics") => {
            let format = negotiate(&accept);
            let body = render(ctx, format);
            response(
                "200 OK",
                format.content_type(),
                &["Vary: Accept"],
                body.as_bytes(),
                head_only,
            )
        }
        ("GET" | "HEAD", _) => response(
            "404 Not Found",
            "text/plain",
            &[],
            b"not found: try /metrics\n",
            head_only,
        ),
        _ => response(
            "405 Method Not Allowed",
            "text/plain",
            &["Allow: GET, HEAD"],
            b"GET or HEAD only\n",
            false,
        ),
    }
}

/// An HTTP/1.1 response closing the connection; `head_only` leaves the
/// body out (HEAD), its length still announced.
fn response(status: &str, kind: &str, extra: &[&str], body: &[u8], head_only: bool) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status}\r\nContent-Type: {kind}\r\n");
    for line in extra {
        out.push_str(line);
        out.push_str("\r\n");
    }
    let _ = write!(
        out,
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut out = out.into_bytes();
    if !head_only {
        out.extend_from_slice(body);
    }
    out
}

/// The exposition, from the statistics as `stats` reads them now.
pub fn render(ctx: &Ctx<'_>, format: Format) -> String {
    let group = |g: &[u8]| stats_cmd::collect(ctx, g).unwrap_or_default();
    let snapshot = Snapshot {
        general: group(b""),
        settings: group(b"settings"),
        tiers: [group(b"flash"), group(b"zzone"), group(b"mrc")],
        locks: group(b"locks"),
        hot: stats_cmd::hot_rows(ctx, HOT_METRICS).unwrap_or_default(),
        prefixes: stats_cmd::prefix_rows(ctx)
            .map(|(mut rows, _)| {
                rows.truncate(PREFIX_METRICS);
                rows
            })
            .unwrap_or_default(),
    };
    encode(&snapshot.families(), format)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Gauge,
    Counter,
    Histogram,
}

/// A sample's labels.
type Labels<'a> = Vec<(&'a str, Cow<'a, str>)>;

/// A metric family: its name (a counter's without `_total`), help, type
/// and samples (labels, value); a histogram's samples also say which of
/// its series (`_bucket`, `_sum`, `_count`) each is, in `series`.
struct Family<'a> {
    name: String,
    help: &'a str,
    kind: Kind,
    samples: Vec<(Labels<'a>, f64)>,
    series: Vec<&'static str>,
}

impl<'a> Family<'a> {
    fn new(name: impl Into<String>, help: &'a str, kind: Kind) -> Family<'a> {
        Family {
            name: name.into(),
            help,
            kind,
            samples: Vec::new(),
            series: Vec::new(),
        }
    }

    fn one(name: impl Into<String>, help: &'a str, kind: Kind, value: f64) -> Family<'a> {
        let mut f = Family::new(name, help, kind);
        f.samples.push((Vec::new(), value));
        f
    }
}

/// The families in `format`. The two formats differ in: the content type;
/// a counter's family name (OpenMetrics `x` with samples `x_total`, 0.0.4
/// `x_total` throughout); `# HELP` escaping (OpenMetrics also escapes `"`);
/// and OpenMetrics's closing `# EOF`. Neither has `# UNIT` lines here (no
/// family names a unit in metadata). Families without samples are left out.
fn encode(families: &[Family<'_>], format: Format) -> String {
    let mut out = String::new();
    for f in families.iter().filter(|f| !f.samples.is_empty()) {
        let (sample, kind) = match f.kind {
            Kind::Counter => (format!("{}_total", f.name), "counter"),
            Kind::Gauge => (f.name.clone(), "gauge"),
            Kind::Histogram => (f.name.clone(), "histogram"),
        };
        let family = match format {
            Format::OpenMetrics => &f.name,
            Format::Text => &sample,
        };
        let help = escape(f.help, format == Format::OpenMetrics);
        let _ = writeln!(out, "# HELP {family} {help}");
        let _ = writeln!(out, "# TYPE {family} {kind}");
        for (i, (labels, value)) in f.samples.iter().enumerate() {
            out.push_str(&sample);
            out.push_str(f.series.get(i).copied().unwrap_or(""));
            if !labels.is_empty() {
                out.push('{');
                for (i, (k, v)) in labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{k}=\"{}\"", escape(v, true));
                }
                out.push('}');
            }
            let _ = writeln!(out, " {}", number_text(*value));
        }
    }
    if format == Format::OpenMetrics {
        out.push_str("# EOF\n");
    }
    out
}

/// Backslash and newline escaped, and `"` too where `quotes` (label
/// values in both formats, help text in OpenMetrics).
fn escape(s: &str, quotes: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quotes => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

/// A sample value: integers as integers (exact below 2^53), others in
/// Rust's shortest round-trip form (`0.25`, `1e300`), which both formats
/// accept.
fn number_text(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 9_007_199_254_740_992.0 {
        format!("{}", x as i64)
    } else {
        format!("{x:?}")
    }
}

/// A metric name from a `stats` field: anything outside `[a-zA-Z0-9_]`
/// becomes `_`.
fn metric_name(prefix: &str, field: &str) -> String {
    let mut name = String::from(prefix);
    name.extend(field.chars().map(|c| {
        if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '_'
        }
    }));
    name
}

#[derive(Debug)]
struct Snapshot {
    general: Pairs,
    settings: Pairs,
    tiers: [Pairs; 3],
    locks: Pairs,
    /// The hottest keys (`stats hotkeys`).
    hot: Vec<crate::hotkeys::HotRow>,
    /// The largest prefixes (`stats prefixes`).
    prefixes: Vec<stats_cmd::PrefixRow>,
}

/// Prefixes exported, the largest in bytes: a bounded number of series.
const PREFIX_METRICS: usize = 20;

/// Hot keys exported: a bounded number of series per scrape.
const HOT_METRICS: usize = 10;

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

impl Snapshot {
    /// `cachalot_lock_hold_seconds{lock,holder}`: the histogram `stats
    /// locks` prints, its microsecond bounds (four a power of two) in seconds.
    fn lock_holds(&self) -> Family<'_> {
        let mut f = Family::new(
            "cachalot_lock_hold_seconds",
            "how long the locks requests need are held, by requests and by background work (stats locks)",
            Kind::Histogram,
        );
        let l = &self.locks;
        for (field, count) in l {
            let Some((lock, holder)) = field
                .strip_suffix("_holds")
                .and_then(|p| p.rsplit_once('_'))
            else {
                continue;
            };
            let p = &field[..field.len() - "_holds".len()];
            let labels = |le: Option<String>| {
                let mut v: Labels<'_> = vec![("lock", lock.into()), ("holder", holder.into())];
                v.extend(le.map(|le| ("le", le.into())));
                v
            };
            let under = format!("{p}_le_");
            for (field, n) in l {
                let bound = field
                    .strip_prefix(&under)
                    .and_then(|b| b.strip_suffix("us"));
                if let (Some(us), Some(n)) = (bound.and_then(number), number(n)) {
                    // Display, never an exponent: `0.000064`.
                    f.samples.push((labels(Some(format!("{}", us / 1e6))), n));
                    f.series.push("_bucket");
                }
            }
            let (Some(n), Some(us)) = (
                number(count),
                find(l, &format!("{p}_hold_us")).and_then(number),
            ) else {
                continue;
            };
            f.samples.push((labels(Some("+Inf".into())), n));
            f.series.push("_bucket");
            f.samples.push((labels(None), us / 1e6));
            f.series.push("_sum");
            f.samples.push((labels(None), n));
            f.series.push("_count");
        }
        f
    }
}

fn number(v: &str) -> Option<f64> {
    v.parse::<f64>().ok().filter(|x| x.is_finite())
}

impl Snapshot {
    /// `cachalot_hotkey_{requests,hits,misses}_per_second{rank,key,tier}`:
    /// the ten hottest keys, so at most ten series each per scrape (the
    /// keys in them change as the hot set does).
    fn hot_keys(&self) -> [Family<'_>; 3] {
        let mut fams = [
            (
                "requests",
                "requests per second of the hottest keys (stats hotkeys)",
            ),
            (
                "hits",
                "GET hits per second of the hottest keys (stats hotkeys)",
            ),
            (
                "misses",
                "GET misses per second of the hottest keys (stats hotkeys)",
            ),
        ]
        .map(|(what, help)| {
            Family::new(
                format!("cachalot_hotkey_{what}_per_second"),
                help,
                Kind::Gauge,
            )
        });
        for (i, row) in self.hot.iter().enumerate() {
            let mut key = Vec::new();
            crate::watchers::push_key(&mut key, &row.hot.key);
            let labels: Labels<'_> = vec![
                ("rank", (i + 1).to_string().into()),
                ("key", String::from_utf8_lossy(&key).into_owned().into()),
                ("tier", row.tier.into()),
            ];
            let h = &row.hot;
            for (f, x) in fams.iter_mut().zip([h.rate, h.hits, h.misses]) {
                f.samples.push((labels.clone(), x));
            }
        }
        fams
    }

    /// `cachalot_prefix_items{prefix}`, `cachalot_prefix_bytes{prefix,tier}`
    /// `cachalot_prefix_requests_total{prefix,result}` and
    /// `cachalot_prefix_evictions_total{prefix}` for the 20 largest
    /// prefixes (`stats prefixes`).
    fn prefix_families(&self) -> [Family<'_>; 4] {
        use Kind::{Counter, Gauge};
        let mut items = Family::new(
            "cachalot_prefix_items",
            "items by key prefix (stats prefixes)",
            Gauge,
        );
        let mut bytes = Family::new(
            "cachalot_prefix_bytes",
            "bytes of items by key prefix and tier (stats prefixes)",
            Gauge,
        );
        let mut requests = Family::new(
            "cachalot_prefix_requests",
            "requests by key prefix and result (stats prefixes)",
            Counter,
        );
        let mut evictions = Family::new(
            "cachalot_prefix_evictions",
            "items by key prefix that left the cache for room (stats prefixes)",
            Counter,
        );
        for row in &self.prefixes {
            let mut name = Vec::new();
            crate::watchers::push_key(&mut name, &row.name);
            let p: Cow<'_, str> = String::from_utf8_lossy(&name).into_owned().into();
            items.samples.push((
                vec![("prefix", p.clone())],
                row.held.items.iter().sum::<u64>() as f64,
            ));
            for (tier, b) in ["memory", "zzone", "flash"].iter().zip(row.held.bytes) {
                bytes.samples.push((
                    vec![("prefix", p.clone()), ("tier", (*tier).into())],
                    b as f64,
                ));
            }
            evictions
                .samples
                .push((vec![("prefix", p.clone())], row.evictions as f64));
            let r = &row.requests;
            for (result, n) in [
                ("hit", r.hits),
                ("miss", r.gets - r.hits),
                ("set", r.sets),
                ("delete", r.deletes),
            ] {
                requests.samples.push((
                    vec![("prefix", p.clone()), ("result", result.into())],
                    n as f64,
                ));
            }
        }
        [items, bytes, requests, evictions]
    }

    fn families(&self) -> Vec<Family<'_>> {
        use Kind::{Counter, Gauge};
        let g = &self.general;
        let mut out = vec![Family::one(
            "memcached_up",
            "whether the server answered",
            Gauge,
            1.0,
        )];
        if let Some(v) = find(g, "version") {
            let mut f = Family::new("memcached_version", "the version of the server", Gauge);
            f.samples.push((vec![("version", v.into())], 1.0));
            out.push(f);
        }
        for &(name, field, help) in GAUGES {
            if let Some(x) = find(g, field).and_then(number) {
                out.push(Family::one(name, help, Gauge, x));
            }
        }
        if let Some(x) = find(&self.settings, "maxconns").and_then(number) {
            out.push(Family::one(
                "memcached_max_connections",
                "connection limit (-c)",
                Gauge,
                x,
            ));
        }
        for &(name, field, help) in COUNTERS {
            if let Some(x) = find(g, field).and_then(number) {
                out.push(Family::one(name, help, Counter, x));
            }
        }
        let mut commands = Family::new(
            "memcached_commands",
            "commands by command and outcome",
            Counter,
        );
        for &(command, status, field) in COMMANDS {
            if let Some(x) = find(g, field).and_then(number) {
                commands.samples.push((
                    vec![("command", command.into()), ("status", status.into())],
                    x,
                ));
            }
        }
        out.push(commands);
        // The engine's own: its policies as labels of an info metric, and
        // every numeric figure of the tiers that are on.
        let s = &self.settings;
        let info: Labels<'_> = [
            ("eviction", "eviction"),
            ("rebalance", "rebalance_policy"),
            ("zzone", "zzone"),
        ]
        .iter()
        .filter_map(|&(label, field)| find(s, field).map(|v| (label, v.into())))
        .collect();
        let mut f = Family::new(
            "cachalot_info",
            "the engine's policies (stats settings)",
            Gauge,
        );
        f.samples.push((info, 1.0));
        out.push(f);
        out.push(self.lock_holds());
        out.extend(self.hot_keys());
        out.extend(self.prefix_families());
        for tier in &self.tiers {
            for (field, value) in tier {
                if let Some(x) = number(value) {
                    out.push(Family::one(
                        metric_name("cachalot_", field),
                        "stats flash / stats zzone / stats mrc (docs/protocol.md)",
                        Gauge,
                        x,
                    ));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_follows_the_accept_header() {
        let prometheus = "application/openmetrics-text;version=1.0.0,\
            application/openmetrics-text;version=0.0.1;q=0.75,\
            text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(negotiate(prometheus), Format::OpenMetrics);
        assert_eq!(
            negotiate("Application/OpenMetrics-Text; version=1.0.0"),
            Format::OpenMetrics
        );
        assert_eq!(negotiate(""), Format::Text);
        assert_eq!(negotiate("*/*"), Format::Text);
        assert_eq!(negotiate("text/plain;version=0.0.4"), Format::Text);
        assert_eq!(
            negotiate("text/plain;q=0.9, application/openmetrics-text;q=0.5"),
            Format::Text
        );
        assert_eq!(
            negotiate("text/plain;q=0.2, application/openmetrics-text;q=0.5"),
            Format::OpenMetrics
        );
        assert_eq!(
            negotiate("application/openmetrics-text;q=0, text/plain"),
            Format::Text
        );
        assert_eq!(negotiate("application/json"), Format::Text);
        assert_eq!(negotiate("application/openmetrics-text;q=x"), Format::Text);
    }

    #[test]
    fn the_two_formats_differ_where_their_specifications_do() {
        let mut c = Family::new("x", "a \"quoted\" \\ help\nline", Kind::Counter);
        c.samples.push((vec![("l", "v\"\\\n".into())], 3.0));
        let families = [c, Family::one("g", "gauge", Kind::Gauge, 0.25)];
        assert_eq!(
            encode(&families, Format::OpenMetrics),
            "# HELP x a \\\"quoted\\\" \\\\ help\\nline\n# TYPE x counter\n\
             x_total{l=\"v\\\"\\\\\\n\"} 3\n\
             # HELP g gauge\n# TYPE g gauge\ng 0.25\n# EOF\n"
        );
        assert_eq!(
            encode(&families, Format::Text),
            "# HELP x_total a \"quoted\" \\\\ help\\nline\n# TYPE x_total counter\n\
             x_total{l=\"v\\\"\\\\\\n\"} 3\n\
             # HELP g gauge\n# TYPE g gauge\ng 0.25\n"
        );
    }

    #[test]
    fn heads_end_at_their_blank_line() {
        assert_eq!(
            head_end(b"GET / HTTP/1.1\r\nA: b\r\n\r\nrest\n\n"),
            Some(24)
        );
        assert_eq!(head_end(b"GET / HTTP/1.0\n\n"), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n"), None);
        assert_eq!(number_text(67108864.0), "67108864");
        assert_eq!(number_text(0.5), "0.5");
        assert_eq!(number_text(1e300), "1e300");
        assert_eq!(metric_name("cachalot_", "a.b-c"), "cachalot_a_b_c");
    }
}
