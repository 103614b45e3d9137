//! The Prometheus endpoint (`-o metrics_listen`, issues 13 and 32):
//! `/metrics` in both exposition formats, each parsed by the Prometheus
//! project's own Python parser (package `prometheus-client`, pinned in
//! tests/clients/python/requirements.txt, installed into .venv by
//! scripts/install-deps.sh; without it the tests fail): OpenMetrics when the
//! `Accept` header asks for it, the 0.0.4 text format otherwise. Its figures
//! are the server's: items, commands by outcome, the engine's policies, the
//! flash tier's figures. `HEAD` and query strings; and no client can hold
//! it: a trickling client delays no other scrape, is closed at its
//! deadline, and scrapes beyond the bound are answered 503 at once.

use crate::common;

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{free_port, python, read_some, temp_path, Server};

/// What Prometheus 2.x/3.x sends (scrape_protocols' defaults, less protobuf).
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,\
    application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// An HTTP exchange: (status line, head, body).
fn exchange(port: u16, request: &str) -> (String, String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to metrics");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(request.as_bytes()).expect("send");
    let mut reply = String::new();
    s.read_to_string(&mut reply).expect("read the reply");
    let (head, body) = reply.split_once("\r\n\r\n").expect("a head and a body");
    (
        head.lines().next().unwrap_or_default().to_string(),
        head.to_string(),
        body.to_string(),
    )
}

/// An HTTP exchange: (status line, body).
fn http(port: u16, request: &str) -> (String, String) {
    let (status, _, body) = exchange(port, request);
    (status, body)
}

/// A header's value in a response head.
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim())
}

/// Samples as `name{label="v",...}` -> (value, its family's type), by the
/// parser `module`; panics with the parser's error if it refuses the text.
fn parse(text: &str, module: &str) -> HashMap<String, (f64, String)> {
    let out = run_parser(text, module);
    assert!(
        out.status.success(),
        "{module} refused the exposition: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (rest, kind) = l.rsplit_once(' ')?;
            let (name, v) = rest.rsplit_once(' ')?;
            Some((
                name.to_string(),
                (v.parse().expect("a number"), kind.to_string()),
            ))
        })
        .collect()
}

fn run_parser(text: &str, module: &str) -> std::process::Output {
    let script = format!(
        "import sys\nfrom {module} import text_string_to_metric_families as parse\n\
         for fam in parse(sys.stdin.read()):\n\
         \x20   for s in fam.samples:\n\
         \x20       labels = ','.join(f'{{k}}=\"{{v}}\"' for k, v in sorted(s.labels.items()))\n\
         \x20       print(f'{{s.name}}{{{{{{labels}}}}}} {{s.value}} {{fam.type}}')\n"
    );
    let mut child = Command::new(python())
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python (scripts/install-deps.sh makes .venv)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("feed the parser");
    child.wait_with_output().expect("parser output")
}

#[test]
fn metrics_parse_and_carry_the_servers_figures() {
    let port = free_port();
    let flash = temp_path("metrics-flash");
    let listen = format!("metrics_listen=127.0.0.1:{port}");
    let ext = format!("ext_path={}:16m", flash.display());
    let server = Server::start(&["-o", &listen, "-o", &ext]);
    let mut c = server.connect();
    c.write_all(b"set a 0 0 1\r\nx\r\nget a\r\nget b\r\ndelete b\r\n")
        .expect("send");
    let reply = common::read_until(&mut c, b"NOT_FOUND\r\n");
    assert!(reply.ends_with(b"NOT_FOUND\r\n"));
    // `stats locks`: the background's holds of the engine lock come from
    // the maintainer, which runs at start and every 200 ms.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        c.write_all(b"stats locks\r\n").expect("send");
        let reply = String::from_utf8(common::read_until(&mut c, b"END\r\n")).expect("text");
        let stat = |name: &str| {
            reply
                .lines()
                .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
                .and_then(|v| v.parse::<u64>().ok())
        };
        let holds = stat("engine_background_holds").expect("engine_background_holds");
        // Cumulative, up to the bucket of the longest hold, which holds all.
        let le: Vec<u64> = reply
            .lines()
            .filter(|l| l.starts_with("STAT engine_background_le_"))
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect();
        assert!(le.windows(2).all(|w| w[0] <= w[1]), "{reply}");
        assert_eq!(le.last().copied().unwrap_or(0), holds, "{reply}");
        if holds > 0 && stat("engine_request_holds").is_some_and(|n| n > 0) {
            break;
        }
        assert!(Instant::now() < deadline, "no holds counted: {reply}");
        std::thread::sleep(Duration::from_millis(50));
    }

    // Prometheus's Accept header: OpenMetrics.
    let (status, head, om_body) = exchange(
        port,
        &format!("GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: {PROMETHEUS_ACCEPT}\r\n\r\n"),
    );
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(
        header(&head, "content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8"),
        "{head}"
    );
    assert!(om_body.ends_with("# EOF\n"), "OpenMetrics ends with # EOF");
    assert!(om_body.contains("\n# TYPE memcached_items counter\n"));
    // No Accept header (curl, old scrapers): the 0.0.4 text format, whose
    // counter families are named as their samples, with no # EOF.
    let (status, head, text_body) = exchange(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(
        header(&head, "content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    assert!(!text_body.contains("# EOF"), "{text_body}");
    assert!(text_body.contains("\n# TYPE memcached_items_total counter\n"));
    // Asked for explicitly, lower-case or not.
    for accept in ["text/plain;version=0.0.4", "*/*"] {
        let (_, head, _) = exchange(
            port,
            &format!("GET /metrics HTTP/1.0\r\naccept: {accept}\r\n\r\n"),
        );
        assert!(
            head.contains("text/plain; version=0.0.4"),
            "{accept}: {head}"
        );
    }
    let (_, head, _) = exchange(
        port,
        "GET /metrics HTTP/1.0\r\nACCEPT: application/openmetrics-text\r\n\r\n",
    );
    assert!(head.contains("application/openmetrics-text"), "{head}");

    let om = parse(&om_body, "prometheus_client.openmetrics.parser");
    let classic = parse(&text_body, "prometheus_client.parser");
    // Each format is the other parser's error: the 0.0.4 text has no
    // # EOF and names a counter family `_total`, the OpenMetrics text read
    // as 0.0.4 leaves its counters' samples outside their families.
    assert!(
        !run_parser(&text_body, "prometheus_client.openmetrics.parser")
            .status
            .success(),
        "the OpenMetrics parser took the 0.0.4 text"
    );
    let crossed = parse(&om_body, "prometheus_client.parser");
    assert_eq!(
        crossed
            .get("memcached_items_total{}")
            .map(|(_, t)| t.as_str()),
        Some("unknown")
    );
    for (name, want) in [
        ("memcached_up{}", 1.0),
        ("memcached_current_items{}", 1.0),
        ("memcached_limit_bytes{}", 64.0 * 1024.0 * 1024.0),
        (
            r#"memcached_commands_total{command="get",status="hit"}"#,
            1.0,
        ),
        (
            r#"memcached_commands_total{command="get",status="miss"}"#,
            1.0,
        ),
        (
            r#"memcached_commands_total{command="set",status="hit"}"#,
            1.0,
        ),
        (
            r#"memcached_commands_total{command="delete",status="miss"}"#,
            1.0,
        ),
        (r#"memcached_version{version="1.6.18"}"#, 1.0),
        ("cachalot_flash_items{}", 0.0),
    ] {
        assert_eq!(
            om.get(name).map(|(v, _)| *v),
            Some(want),
            "{name} (OpenMetrics parser)\n{om_body}"
        );
    }
    assert!(
        om.keys().any(|k| k.starts_with("cachalot_info{eviction=")),
        "{om_body}"
    );
    assert_eq!(
        om.get("memcached_items_evicted_total{}")
            .map(|(_, t)| t.as_str()),
        Some("counter")
    );
    assert!(om.contains_key("memcached_uptime_seconds{}"));
    // The engine lock's holds (issue 34), a histogram whose +Inf bucket is
    // its count, by requests and by background work (the maintainer and
    // flash's writer hold it too).
    for holder in ["background", "request"] {
        let series = |s: &str, le: &str| {
            let le = match le {
                "" => String::new(),
                le => format!(",le=\"{le}\""),
            };
            format!(r#"cachalot_lock_hold_seconds{s}{{holder="{holder}"{le},lock="engine"}}"#)
        };
        let count = om.get(&series("_count", ""));
        assert_eq!(
            count.map(|(_, t)| t.as_str()),
            Some("histogram"),
            "{om_body}"
        );
        assert_eq!(
            om.get(&series("_bucket", "+Inf")).map(|(v, _)| v),
            count.map(|(v, _)| v)
        );
        assert!(count.is_some_and(|(n, _)| *n >= 1.0), "{holder}: {om_body}");
        assert!(om.contains_key(&series("_sum", "")), "{om_body}");
    }
    // The classic parser reads the same samples of the same types from the
    // 0.0.4 text (the figures that move between two scrapes aside).
    let moving = [
        "memcached_uptime_seconds{}",
        "memcached_time_seconds{}",
        "memcached_rusage_user_seconds{}",
        "memcached_rusage_system_seconds{}",
        "memcached_read_bytes_total{}",
        "memcached_written_bytes_total{}",
        "memcached_connections_total{}",
        "memcached_current_connections{}",
    ];
    assert_eq!(om.len(), classic.len(), "{om:?}\n{classic:?}");
    for (name, (v, kind)) in &om {
        let (cv, ckind) = classic
            .get(name)
            .unwrap_or_else(|| panic!("{name} not in the 0.0.4 text:\n{text_body}"));
        assert_eq!(ckind, kind, "{name}'s type (classic parser)");
        // Scrapes take the engine lock themselves; hot keys' rates are
        // over a window that moves with the clock, and the curve is fed
        // by the maintainer between two scrapes.
        let held = [
            "cachalot_lock_hold_seconds",
            "cachalot_hotkey_",
            "cachalot_mrc_",
        ]
        .iter()
        .any(|p| name.starts_with(p));
        if !moving.contains(&name.as_str()) && !held {
            assert_eq!(cv, v, "{name} (classic parser)");
        }
    }

    // Every metric the Grafana dashboard in docs/ queries is exported.
    let dashboard = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/grafana/cachalot.json"),
    )
    .expect("the dashboard");
    let names: std::collections::HashSet<&str> = om
        .keys()
        .map(|k| k.split('{').next().unwrap_or(k))
        .collect();
    let queried: Vec<&str> = dashboard
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("memcached_") || w.starts_with("cachalot_"))
        .collect();
    assert!(queried.len() >= 10, "{queried:?}");
    for name in queried {
        assert!(
            names.contains(name),
            "the dashboard queries {name}, not exported"
        );
    }

    // A query string changes nothing.
    let (status, body) = http(port, "GET /metrics?x=1&name[]=up HTTP/1.1\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(body.contains("\nmemcached_current_items 1\n"), "{body}");
    // HEAD: the same head, no body, announcing the length GET sends. The
    // page changes between scrapes (figures change their digits, the
    // lock-hold histograms grow a bucket line when a longer hold comes, on
    // a loaded machine more often), so a HEAD counts when the GETs on both
    // sides of it sent as many bytes as it announced. A HEAD that
    // announces another length never does. Where every scrape moves a
    // few figures' widths (a loaded machine: 50 tries in a suite run,
    // each page 3-30 bytes off the last), each HEAD must still announce
    // a length between the GETs around it, give or take those widths.
    const WIDTHS: usize = 64;
    let mut seen = Vec::new();
    let mut before = http(port, "GET /metrics HTTP/1.1\r\n\r\n").1.len();
    let agreed = (0..50).any(|_| {
        let (status, head, body) = exchange(port, "HEAD /metrics HTTP/1.1\r\n\r\n");
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert_eq!(body, "", "HEAD has no body");
        let announced: usize = header(&head, "content-length")
            .and_then(|v| v.parse().ok())
            .expect("Content-Length");
        let after = http(port, "GET /metrics HTTP/1.1\r\n\r\n").1.len();
        seen.push((before, announced, after));
        let agreed = before == announced && announced == after;
        before = after;
        agreed
    });
    let near = |&(b, a, g): &(usize, usize, usize)| {
        (b.min(g).saturating_sub(WIDTHS)..=b.max(g) + WIDTHS).contains(&a)
    };
    assert!(
        agreed || seen.iter().all(near),
        "(GET, HEAD, GET) lengths: {seen:?}"
    );

    // Other paths and methods; a scraper that sends nothing holds up
    // nothing, and the cache serves throughout.
    assert_eq!(
        http(port, "GET /other HTTP/1.1\r\n\r\n").0,
        "HTTP/1.1 404 Not Found"
    );
    let (status, head, _) = exchange(port, "POST /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 405 Method Not Allowed");
    assert_eq!(header(&head, "allow"), Some("GET, HEAD"));
    let huge = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(9000));
    assert_eq!(
        http(port, &huge).0,
        "HTTP/1.1 431 Request Header Fields Too Large"
    );
    let _silent = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let t = Instant::now();
    assert_eq!(
        server.ask(b"get a\r\n", b"END\r\n"),
        b"VALUE a 0 1\r\nx\r\nEND\r\n"
    );
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "the cache waited for a scraper"
    );
    assert_eq!(
        http(port, "GET /metrics HTTP/1.1\r\n\r\n").0,
        "HTTP/1.1 200 OK"
    );
    drop(server);
    for side in ["", ".index", ".journal", ".dict"] {
        let _ = std::fs::remove_file(format!("{}{side}", flash.display()));
    }
}

/// One whole scrape on a fresh connection: (status line, how long it
/// took); a scrape not answered within 3 s has an empty status.
fn timed_scrape(port: u16) -> (String, Duration) {
    let t = Instant::now();
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to metrics");
    s.set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").expect("send");
    let mut reply = String::new();
    let status = match s.read_to_string(&mut reply) {
        Ok(_) => reply.lines().next().unwrap_or_default().to_string(),
        Err(_) => String::new(),
    };
    (status, t.elapsed())
}

/// A client that sends a request head one byte every 100 ms and never
/// finishes it; `closed` is set when the server closes the connection.
struct Trickler {
    closed_after: std::sync::mpsc::Receiver<Duration>,
    sent: Arc<AtomicBool>,
}

fn trickle(port: u16) -> Trickler {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect the trickler");
    let started = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    let sent = Arc::new(AtomicBool::new(false));
    let sent2 = sent.clone();
    std::thread::spawn(move || {
        // The pace is the read timeout: each turn waits up to 100 ms for
        // the server to close, then sends the next byte.
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        let head = b"GET /metrics HTTP/1.1\r\nX-Slow: ";
        let mut buf = [0u8; 64];
        for i in 0.. {
            let byte = head.get(i).copied().unwrap_or(b'a');
            if s.write_all(&[byte]).is_err() {
                break;
            }
            sent2.store(true, Ordering::SeqCst);
            match read_some(&mut s, &mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => break,
            }
            if started.elapsed() > Duration::from_secs(30) {
                break;
            }
        }
        let _ = tx.send(started.elapsed());
    });
    Trickler {
        closed_after: rx,
        sent,
    }
}

#[test]
fn a_trickling_client_delays_no_scrape_and_is_closed_at_its_deadline() {
    let port = free_port();
    let listen = format!("metrics_listen=127.0.0.1:{port}");
    let _server = Server::start(&["-o", &listen]);
    // Connected first, so that a one-at-a-time listener takes it first.
    let slow = trickle(port);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !slow.sent.load(Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "the trickler sent nothing");
        std::thread::yield_now();
    }
    // Scrapes while it trickles: each whole within 100 ms.
    let scrapes: Vec<(String, Duration)> = (0..5).map(|_| timed_scrape(port)).collect();
    assert!(
        scrapes
            .iter()
            .all(|(status, took)| status == "HTTP/1.1 200 OK" && *took < Duration::from_millis(100)),
        "a trickling client delayed scrapes: {scrapes:?}"
    );
    // The trickler is closed at its 2 s deadline, though it never stopped
    // sending.
    let closed = slow
        .closed_after
        .recv_timeout(Duration::from_secs(40))
        .expect("the trickler thread ended");
    assert!(
        closed >= Duration::from_millis(1900) && closed < Duration::from_secs(4),
        "the trickler was closed after {closed:?}, not at its 2 s deadline"
    );
}

#[test]
fn scrapes_beyond_the_bound_are_refused_at_once() {
    // MAX_SCRAPES in crates/server/src/metrics.rs.
    const MAX_SCRAPES: usize = 4;
    let port = free_port();
    let listen = format!("metrics_listen=127.0.0.1:{port}");
    let _server = Server::start(&["-o", &listen]);
    let holders: Vec<TcpStream> = (0..MAX_SCRAPES)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).expect("connect"))
        .collect();
    // Accepted after the holders (the accept queue is first in, first
    // out), within their 2 s deadline: no slot is free.
    let t = Instant::now();
    let (status, body) = http(port, "GET /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 503 Service Unavailable", "{body}");
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "the refusal took {:?}",
        t.elapsed()
    );
    // Once they leave, their slots come back.
    drop(holders);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (status, _) = timed_scrape(port);
        if status == "HTTP/1.1 200 OK" {
            break;
        }
        assert!(Instant::now() < deadline, "slots not given back: {status}");
    }
}

#[test]
fn a_metrics_address_that_cannot_be_bound_stops_the_start() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let listen = format!("metrics_listen=127.0.0.1:{port}");
    let err = Server::try_start(&["-o", &listen]).err().expect("refused");
    assert!(err.contains("failed to listen on metrics_listen"), "{err}");
}
