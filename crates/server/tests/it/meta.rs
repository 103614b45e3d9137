//! End-to-end tests of the meta commands (mg ms md ma me mn) against the real
//! `cachalot` binary, replaying the conversation table `tests/meta_cases.txt`
//! (format in `tests/it/meta_script/mod.rs`).
//!
//! The table was recorded from memcached 1.6.18; `memcached_agrees` replays
//! it against a real memcached (`$MEMCACHED_BIN` or /usr/bin/memcached) so it
//! stays honest.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::common;
use crate::meta_script;

use meta_script::{Case, Conn};

/// A TCP connection for the script runner.
struct Tcp(TcpStream);

impl Tcp {
    fn open(addr: SocketAddr) -> Tcp {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_nodelay(true).expect("nodelay");
        // Long enough for a slow debug build, short enough to fail a test
        // that waits for a reply that never comes.
        s.set_read_timeout(Some(Duration::from_secs(3)))
            .expect("timeout");
        Tcp(s)
    }
}

impl Conn for Tcp {
    fn send(&mut self, bytes: &[u8]) {
        self.0.write_all(bytes).expect("send");
    }

    fn recv(&mut self) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; 1 << 16];
        match self.0.read(&mut buf) {
            Ok(0) | Err(_) => None,
            Ok(n) => {
                buf.truncate(n);
                Some(buf)
            }
        }
    }

    fn wait(&mut self, secs: u64) {
        std::thread::sleep(Duration::from_secs(secs));
    }
}

fn cases() -> Vec<Case> {
    meta_script::parse(meta_script::CASES)
}

fn replay(addr: SocketAddr, with_ext: bool) -> Vec<String> {
    let cases = cases();
    assert!(cases.len() > 30, "the case table is missing cases");
    meta_script::run_all(&cases, with_ext, &mut || Box::new(Tcp::open(addr)))
}

#[test]
fn cachalot_answers_like_memcached() {
    let server = common::Server::start(&[]);
    let failures = replay(server.addr(), true);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn memcached_agrees() {
    let mc = common::Memcached::start(&[]);
    let failures = replay(mc.addr(), false);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A request, its exact reply, and the counters it moves (by how much).
type CounterStep = (&'static str, &'static str, &'static [(&'static str, i64)]);

/// Counter changes a sequence of meta commands causes, as `stats` reports
/// them. Expected deltas were read off memcached 1.6.18.
#[test]
fn counters_follow_memcached() {
    let server = common::Server::start(&[]);
    let mut conn = Tcp::open(server.addr());
    let stats = |conn: &mut Tcp| -> Vec<(String, i64)> {
        conn.send(b"stats\r\n");
        let mut got = Vec::new();
        while !got.ends_with(b"END\r\n") {
            got.extend(conn.recv().expect("stats reply"));
        }
        String::from_utf8_lossy(&got)
            .lines()
            .filter_map(|l| {
                let mut w = l.split(' ');
                let (_, name, value) = (w.next()?, w.next()?, w.next()?);
                Some((name.to_string(), value.parse().ok()?))
            })
            .collect()
    };
    let watched = [
        "cmd_get",
        "cmd_set",
        "cmd_touch",
        "get_hits",
        "get_misses",
        "touch_hits",
        "delete_hits",
        "delete_misses",
        "incr_hits",
        "incr_misses",
        "decr_hits",
        "decr_misses",
        "cas_hits",
        "cas_misses",
        "cas_badval",
    ];
    let steps: &[CounterStep] = &[
        (
            "mg s1 v\r\n",
            "EN\r\n",
            &[("cmd_get", 1), ("get_misses", 1)],
        ),
        (
            "mg s1 v q\r\nmn\r\n",
            "MN\r\n",
            &[("cmd_get", 1), ("get_misses", 1)],
        ),
        (
            "mg s1 v T10\r\n",
            "EN\r\n",
            &[("cmd_get", 1), ("get_misses", 1)],
        ),
        (
            "mg s1 N10\r\n",
            "HD W\r\n",
            &[("cmd_get", 1), ("get_hits", 1)],
        ),
        ("mg s1\r\n", "HD Z\r\n", &[("cmd_get", 1), ("get_hits", 1)]),
        (
            "mg s1 T10\r\n",
            "HD Z\r\n",
            &[("cmd_touch", 1), ("touch_hits", 1)],
        ),
        (
            "mg s1 u\r\n",
            "HD Z\r\n",
            &[("cmd_get", 1), ("get_hits", 1)],
        ),
        ("ms s1 1\r\nx\r\n", "HD\r\n", &[("cmd_set", 1)]),
        (
            "ms s1 1 C1\r\nx\r\n",
            "EX\r\n",
            &[("cmd_set", 1), ("cas_badval", 1)],
        ),
        (
            "ms s9 1 C1\r\nx\r\n",
            "NF\r\n",
            &[("cmd_set", 1), ("cas_misses", 1)],
        ),
        ("ms s1 1 ME\r\nx\r\n", "NS\r\n", &[("cmd_set", 1)]),
        ("ms s1 1 zz\r\nx\r\n", "CLIENT_ERROR invalid flag\r\n", &[]),
        (
            "ms s1 1\r\nxyz\r\n",
            "CLIENT_ERROR bad data chunk\r\nERROR\r\n",
            &[("cmd_set", 1)],
        ),
        ("md s9\r\n", "NF\r\n", &[("delete_misses", 1)]),
        ("md s1 C1\r\n", "EX\r\n", &[("delete_misses", 1)]),
        ("md s1 I\r\n", "HD\r\n", &[]),
        ("md s1\r\n", "HD\r\n", &[("delete_hits", 1)]),
        ("ma s2\r\n", "NF\r\n", &[("incr_misses", 1)]),
        ("ma s2 MD\r\n", "NF\r\n", &[("decr_misses", 1)]),
        ("ma s2 N0\r\n", "HD\r\n", &[]),
        ("ma s2\r\n", "HD\r\n", &[("incr_hits", 1)]),
        ("ma s2 MD\r\n", "HD\r\n", &[("decr_hits", 1)]),
        ("ma s2 C1\r\n", "EX\r\n", &[]),
        ("mn\r\n", "MN\r\n", &[]),
    ];
    for (req, reply, deltas) in steps {
        let before = stats(&mut conn);
        conn.send(req.as_bytes());
        let mut got = Vec::new();
        while got.len() < reply.len() {
            got.extend(conn.recv().expect("reply"));
        }
        assert_eq!(String::from_utf8_lossy(&got), *reply, "{req:?}");
        let after = stats(&mut conn);
        for name in watched {
            let get = |s: &[(String, i64)]| {
                s.iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| *v)
                    .unwrap_or_else(|| panic!("stats has no {name}"))
            };
            let want = deltas
                .iter()
                .find(|(n, _)| *n == name)
                .map_or(0, |(_, d)| *d);
            assert_eq!(get(&after) - get(&before), want, "{name} after {req:?}");
        }
    }
}
