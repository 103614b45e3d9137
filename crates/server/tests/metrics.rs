//! The Prometheus endpoint (`-o metrics_listen`, issue 13): `GET /metrics`
//! is parsed by the Prometheus project's own Python parsers (OpenMetrics
//! and the classic text format, package `prometheus-client`, installed by
//! scripts/install-deps.sh), and its figures are the server's: items,
//! commands by outcome, the engine's policies, the flash tier's figures.

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, python, temp_path, Server};

/// An HTTP exchange: (status line, body).
fn http(port: u16, request: &str) -> (String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to metrics");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(request.as_bytes()).expect("send");
    let mut reply = String::new();
    s.read_to_string(&mut reply).expect("read the reply");
    let (head, body) = reply.split_once("\r\n\r\n").expect("a head and a body");
    (
        head.lines().next().unwrap_or_default().to_string(),
        body.to_string(),
    )
}

/// Samples as `name{label="v",...}` -> value, by the parser `module`.
fn parse(text: &str, module: &str) -> HashMap<String, f64> {
    let script = format!(
        "import sys\nfrom {module} import text_string_to_metric_families as parse\n\
         for fam in parse(sys.stdin.read()):\n\
         \x20   for s in fam.samples:\n\
         \x20       labels = ','.join(f'{{k}}=\"{{v}}\"' for k, v in sorted(s.labels.items()))\n\
         \x20       print(f'{{s.name}}{{{{{{labels}}}}}} {{s.value}}')\n"
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
    let out = child.wait_with_output().expect("parser output");
    assert!(
        out.status.success(),
        "{module} refused the exposition: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(k, v)| (k.to_string(), v.parse().expect("a number")))
        .collect()
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

    let (status, body) = http(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(body.ends_with("# EOF\n"), "OpenMetrics ends with # EOF");
    let om = parse(&body, "prometheus_client.openmetrics.parser");
    let classic = parse(&body, "prometheus_client.parser");
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
            om.get(name),
            Some(&want),
            "{name} (OpenMetrics parser)\n{body}"
        );
    }
    assert!(
        om.keys().any(|k| k.starts_with("cachalot_info{eviction=")),
        "{body}"
    );
    assert!(om.contains_key("memcached_items_evicted_total{}"));
    assert!(om.contains_key("memcached_uptime_seconds{}"));
    // The classic parser reads the same samples (it names counters' samples
    // as they are written, with `_total`).
    for (name, v) in &om {
        assert_eq!(classic.get(name), Some(v), "{name} (classic parser)");
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

    // Other paths and methods; a scraper that sends nothing holds up the
    // next scrape only until its timeout, and the cache serves throughout.
    assert_eq!(
        http(port, "GET /other HTTP/1.1\r\n\r\n").0,
        "HTTP/1.1 404 Not Found"
    );
    assert_eq!(
        http(port, "POST /metrics HTTP/1.1\r\n\r\n").0,
        "HTTP/1.1 405 Method Not Allowed"
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

#[test]
fn a_metrics_address_that_cannot_be_bound_stops_the_start() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let listen = format!("metrics_listen=127.0.0.1:{port}");
    let err = Server::try_start(&["-o", &listen]).err().expect("refused");
    assert!(err.contains("failed to listen on metrics_listen"), "{err}");
}
