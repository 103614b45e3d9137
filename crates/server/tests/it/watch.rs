//! `watch` (issue 13): the same client script against cachalot and memcached
//! 1.6.18, each with a watcher of fetchers, mutations and evictions. Every
//! line cachalot writes must be one memcached writes too, field for field
//! (but the timestamp, the ids, the connection's fd, the slab class and
//! eviction's last-access age, which depend on the server), lookups and
//! stores in the same order. memcached also logs the lookups its stores and
//! deletes make inside, which cachalot does not (docs/protocol.md).

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{Memcached, Server};

/// The script: stores of each kind, hits, misses, then enough 100 KB
/// values to evict the first ones from a 2 MB cache.
fn script(addr: SocketAddr) {
    let mut c = TcpStream::connect(addr).expect("connect");
    c.write_all(
        b"set foo 5 100 3\r\nbar\r\nget foo\r\nget nope\r\nadd foo 0 0 1\r\nx\r\n\
          append foo 0 0 1\r\nz\r\nreplace nope 0 0 1\r\nx\r\nmg foo v\r\nmg gone v\r\n",
    )
    .expect("send");
    let big = vec![b'x'; 100_000];
    for i in 0..60 {
        c.write_all(format!("set big{i} 0 0 {} noreply\r\n", big.len()).as_bytes())
            .expect("send");
        c.write_all(&big).expect("send");
        c.write_all(b"\r\n").expect("send");
        if i == 0 {
            c.write_all(b"get big0\r\n").expect("send");
        }
    }
    c.write_all(b"version\r\n").expect("send");
    c.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while !got.ends_with(b"\r\n") || !String::from_utf8_lossy(&got).contains("VERSION") {
        let n = c.read(&mut buf).expect("replies");
        assert!(n > 0, "closed");
        got.extend_from_slice(&buf[..n]);
    }
}

/// Watch while the script runs; the lines received, without the fields
/// that differ between servers.
fn watched(addr: SocketAddr) -> Vec<String> {
    let mut w = TcpStream::connect(addr).expect("connect watcher");
    w.write_all(b"watch fetchers mutations evictions\r\n")
        .expect("send");
    w.set_read_timeout(Some(Duration::from_millis(500)))
        .expect("timeout");
    let mut ok = [0u8; 4];
    w.read_exact(&mut ok).expect("OK");
    assert_eq!(&ok, b"OK\r\n");
    script(addr);
    let mut text = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut buf = [0u8; 65536];
    // Until a quiet half second after the evictions came in.
    while Instant::now() < deadline {
        match w.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => text.extend_from_slice(&buf[..n]),
            Err(_) if String::from_utf8_lossy(&text).contains("type=eviction") => break,
            Err(_) => {}
        }
    }
    String::from_utf8_lossy(&text)
        .lines()
        .map(|l| {
            l.split(' ')
                .filter(|f| {
                    !["ts=", "gid=", "cfd=", "clsid=", "la="]
                        .iter()
                        .any(|p| f.starts_with(p))
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

#[test]
fn every_watched_line_is_one_memcached_writes() {
    let flags = ["-m", "2", "-I", "512k"];
    // The N-zone's evictions: with the Z-zone on, the 100 KB values (of
    // x's) would be stored apart from its blocks, compressed, not evicted.
    let ours = watched(Server::start(&[&flags[..], &["-o", "zzone=0"]].concat()).addr());
    let theirs = watched(Memcached::start(&flags).addr());
    // Lookups and stores in the order the script made them; evictions
    // apart (cachalot reports them on its maintainer's next turn).
    let is_eviction = |l: &&String| l.starts_with("type=eviction");
    let mut at = 0;
    for line in ours.iter().filter(|l| !is_eviction(l)) {
        let found = theirs[at..].iter().position(|l| l == line);
        let Some(p) = found else {
            panic!(
                "{line:?} is not in memcached's lines (in order):\n{theirs:#?}\nours:\n{ours:#?}"
            );
        };
        at += p + 1;
    }
    // Which keys go depends on the policy and the item overhead: the form
    // of each eviction line must be one memcached writes.
    let form = |l: &String| -> String {
        l.split(' ')
            .filter(|f| !f.starts_with("key="))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let their_forms: Vec<String> = theirs.iter().filter(is_eviction).map(form).collect();
    for line in ours.iter().filter(is_eviction) {
        assert!(
            their_forms.contains(&form(line)),
            "{line:?}: memcached writes no such line"
        );
    }
    for want in [
        "type=item_store key=foo status=stored cmd=set ttl=100 size=3",
        "type=item_get key=foo status=found size=3",
        "type=item_get key=nope status=not_found size=0",
        "type=item_store key=foo status=not_stored cmd=add ttl=0 size=1",
        "type=item_store key=nope status=not_stored cmd=replace ttl=0 size=1",
        "type=item_get key=gone status=not_found size=0",
        "type=eviction key=big0 fetch=yes ttl=-1 size=100000",
        "type=eviction key=big1 fetch=no ttl=-1 size=100000",
    ] {
        assert!(
            ours.iter().any(|l| l == want),
            "{want:?} missing:\n{ours:#?}"
        );
    }
}

#[test]
fn watch_answers_as_memcached_does() {
    let ours = Server::start(&[]);
    let theirs = Memcached::start(&[]);
    let no_watch = Server::start(&["-W"]);
    let their_no_watch = Memcached::start(&["-W"]);
    let ask = |addr: SocketAddr, req: &[u8]| {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        s.write_all(req).expect("send");
        // The answer's line alone: memcached may send events in the same
        // read (its LRU crawler's sysevents, a conn_close of an earlier
        // connection), which cachalot does not produce (docs/protocol.md).
        let reply = String::from_utf8_lossy(&common::read_until(&mut s, b"\r\n")).into_owned();
        reply
            .split_inclusive("\r\n")
            .next()
            .unwrap_or("")
            .to_string()
    };
    for (req, note) in [
        (&b"watch bogus\r\n"[..], "an unknown kind"),
        (b"watch\r\n", "fetchers by default"),
        (
            b"watch sysevents connevents\r\n",
            "kinds that stay silent here",
        ),
    ] {
        assert_eq!(ask(ours.addr(), req), ask(theirs.addr(), req), "{note}");
    }
    assert_eq!(
        ask(no_watch.addr(), b"watch\r\n"),
        ask(their_no_watch.addr(), b"watch\r\n")
    );
    // A watcher counts in stats while it is connected.
    let mut w = TcpStream::connect(ours.addr()).expect("connect");
    w.write_all(b"watch\r\n").expect("send");
    assert_eq!(common::read_until(&mut w, b"\r\n"), b"OK\r\n");
    let stats = String::from_utf8_lossy(&ours.ask(b"stats\r\n", b"END\r\n")).into_owned();
    assert!(stats.contains("STAT log_watchers 1\r\n"), "{stats}");
    drop(w);
}

/// `-o idle_timeout` closes connections that send nothing, but a watcher
/// waits for lines, not commands: it stays (memcached does not time out
/// its watchers either).
#[test]
fn a_watcher_outlives_the_idle_timeout() {
    let server = Server::start(&["-o", "idle_timeout=1"]);
    let mut w = TcpStream::connect(server.addr()).expect("connect watcher");
    w.write_all(b"watch mutations\r\n").expect("send");
    assert_eq!(common::read_until(&mut w, b"\r\n"), b"OK\r\n");
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        server.ask(b"set late 0 0 1\r\nx\r\n", b"\r\n"),
        b"STORED\r\n"
    );
    w.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let line = String::from_utf8_lossy(&common::read_until(&mut w, b"\n")).into_owned();
    assert!(
        line.contains(" type=item_store key=late status=stored cmd=set "),
        "{line:?}"
    );
}

/// `watch deletions`, memcached 1.6.45's kind (1.6.18 answers `ERROR`), so
/// written from its protocol.txt (lines 1265-1266: "Emits logs when an item
/// is successfully deleted from the cache using `delete` or `md` commands.
/// delete misses wouldn't be logged") and the line of its logger.c
/// (`type=deleted key=%s cmd=%s clsid=%u size=%d`, cmd `delete` or `md`).
/// `md I` marks stale and deletes nothing; `md x` leaves an empty item and
/// logs it, as memcached's process_mdelete_cmd does.
#[test]
fn deletions_are_watched() {
    let server = Server::start(&[]);
    let mut w = TcpStream::connect(server.addr()).expect("connect watcher");
    w.write_all(b"watch deletions\r\n").expect("send");
    assert_eq!(common::read_until(&mut w, b"\r\n"), b"OK\r\n");
    let replies = server.ask(
        b"set a 0 0 3\r\nabc\r\ndelete a\r\ndelete a\r\n\
          ms b 2\r\nhi\r\nmd b q\r\nmd b\r\n\
          ms c 1\r\nx\r\nmd c I\r\n\
          ms d 4 F5\r\nabcd\r\nmd d x\r\n\
          ms e 1\r\nx\r\nmd e C1\r\nmd nope\r\n\
          set last 0 0 1\r\nz\r\ndelete last\r\nmn\r\n",
        b"MN\r\n",
    );
    assert_eq!(
        String::from_utf8_lossy(&replies),
        "STORED\r\nDELETED\r\nNOT_FOUND\r\nHD\r\nNF\r\nHD\r\nHD\r\nHD\r\nHD\r\n\
         HD\r\nEX\r\nNF\r\nSTORED\r\nDELETED\r\nMN\r\n"
    );
    w.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    // Lines come in order: the one for `last` ends them.
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !(got.ends_with(b"\n") && String::from_utf8_lossy(&got).contains(" key=last ")) {
        let n = w.read(&mut buf).expect("watched lines");
        assert!(n > 0, "watcher closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    let lines: Vec<String> = text
        .lines()
        .map(|l| {
            let fields: Vec<&str> = l.split(' ').collect();
            assert!(
                fields.len() == 7
                    && fields[0].starts_with("ts=")
                    && fields[1].starts_with("gid=")
                    && fields[5].starts_with("clsid="),
                "{l:?}"
            );
            [fields[2], fields[3], fields[4], fields[6]].join(" ")
        })
        .collect();
    assert_eq!(
        lines,
        [
            "type=deleted key=a cmd=delete size=3",
            "type=deleted key=b cmd=md size=2",
            "type=deleted key=d cmd=md size=0",
            "type=deleted key=last cmd=delete size=1",
        ],
        "{text}"
    );
}
