//! `stats mrc` (issue 36): the live miss-ratio curve of a server driven by
//! a look-aside client, and its switch.

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::time::{Duration, Instant};

use common::Server;

fn stats_mrc(server: &Server) -> BTreeMap<String, f64> {
    let reply = server.ask(b"stats mrc\r\n", b"END\r\n");
    String::from_utf8(reply)
        .expect("text")
        .lines()
        .filter_map(|l| {
            let mut w = l.strip_prefix("STAT ")?.split(' ');
            Some((w.next()?.to_string(), w.next()?.parse().ok()?))
        })
        .collect()
}

/// Three passes over 4,000 keys of 1,000 bytes, look-aside (a GET, and a
/// SET after a miss): 4 MB of data that an 8 MB cache holds whole, so
/// every GET after the first pass hits. The curve sees a third of the
/// GETs miss, and a cliff at the data's size: with a quarter or half of
/// the memory, an LRU would miss every GET of a scan; with more, as now.
/// So does each prefix's own curve, at its own size.
/// 3,600 keys under `big:`, 400 under `small:`.
fn key(k: usize) -> String {
    match k < 3600 {
        true => format!("big:{k}"),
        false => format!("small:{k}"),
    }
}

#[test]
fn a_scan_shows_its_cliff() {
    // 8 MB with -D: under the size where the curve is on by default.
    let server = Server::start(&["-m", "8", "-t", "1", "-o", "mrc=1", "-D", ":"]);
    let c = server.connect();
    let mut r = BufReader::new(c.try_clone().expect("clone"));
    let mut w = c;
    // Random values: the Z-zone cannot compress them, so half the memory
    // would hold half the data (compressible ones would still fit).
    let value = |k: usize| -> Vec<u8> {
        let mut rng = fastrand::Rng::with_seed(k as u64);
        (0..1000).map(|_| rng.u8(..)).collect()
    };
    for _ in 0..3 {
        for batch in (0..4000).collect::<Vec<_>>().chunks(100) {
            for &k in batch {
                w.write_all(format!("get {}\r\n", key(k)).as_bytes())
                    .expect("send");
            }
            let mut missed = Vec::new();
            for k in batch {
                let mut line = String::new();
                r.read_line(&mut line).expect("reply");
                if line.starts_with("VALUE") {
                    let mut rest = vec![0u8; 1000 + 2];
                    std::io::Read::read_exact(&mut r, &mut rest).expect("value");
                    line.clear();
                    r.read_line(&mut line).expect("END");
                } else {
                    missed.push(k);
                }
                assert_eq!(line, "END\r\n");
            }
            for &k in missed {
                w.write_all(format!("set {} 0 0 1000 noreply\r\n", key(k)).as_bytes())
                    .expect("send");
                w.write_all(&value(k)).expect("send");
                w.write_all(b"\r\n").expect("send");
            }
        }
    }
    // The maintainer passes the whole cache's GETs to the curve.
    let deadline = Instant::now() + Duration::from_secs(10);
    let m = loop {
        let m = stats_mrc(&server);
        if m.get("mrc_gets").copied().unwrap_or(0.0) >= 12_000.0 {
            break m;
        }
        assert!(Instant::now() < deadline, "the curve saw no GETs: {m:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let at = |pct: u32| m[&format!("mrc_miss_ratio_{pct}pct")];
    assert!((m["mrc_miss_ratio"] - 1.0 / 3.0).abs() < 0.001, "{m:?}");
    assert!((at(100) - 1.0 / 3.0).abs() < 0.001, "{m:?}");
    assert!(at(25) > 0.95 && at(50) > 0.95, "{m:?}");
    assert!(
        (at(200) - 1.0 / 3.0).abs() < 0.01 && (at(400) - 1.0 / 3.0).abs() < 0.01,
        "{m:?}"
    );
    assert!(
        m["mrc_sample_rate"] <= 0.0625 && m["mrc_sampled_keys"] > 100.0,
        "{m:?}"
    );
    // The data is 4 MB and more (keys and item headers).
    assert!(m["mrc_effective_bytes"] > 4.0e6, "{m:?}");
    // Each prefix's own curve: a scan of its own keys, its cliff at its
    // own data's size (3.6 MB and 0.4 MB, and their keys and headers).
    let part = |p: &str, f: &str| m[&format!("mrc:prefix:{p}:{f}")];
    assert!(
        (3.6e6..4.4e6).contains(&part("big", "effective_bytes")),
        "{m:?}"
    );
    assert!(
        (0.3e6..0.6e6).contains(&part("small", "effective_bytes")),
        "{m:?}"
    );
    for p in ["big", "small"] {
        let part = |f: &str| part(p, f);
        assert!((part("miss_ratio") - 1.0 / 3.0).abs() < 0.05, "{m:?}");
        assert!(part("miss_ratio_50pct") > 0.95, "{m:?}");
        assert!(
            (part("miss_ratio_200pct") - part("miss_ratio")).abs() < 0.01,
            "{m:?}"
        );
    }
}

#[test]
fn mrc_off_answers_as_an_unknown_group() {
    let server = Server::start(&["-o", "mrc=0"]);
    let off = server.ask(b"stats mrc\r\n", b"\r\n");
    let unknown = server.ask(b"stats nosuchgroup\r\n", b"\r\n");
    assert_eq!(off, unknown);
    let settings = server.ask(b"stats settings\r\n", b"END\r\n");
    assert!(String::from_utf8_lossy(&settings).contains("STAT mrc no\r\n"));
}
