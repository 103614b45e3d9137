//! memcached's own operator tool against cachalot (issue 13): Debian's
//! `memcached-tool` (`display`, `stats`, `settings`, `dump`), with
//! memcached 1.6.18 as the oracle for what `dump` prints; and `lru_crawler
//! metadump`, which `dump` reads, over many items (written a page at a
//! time as the client reads them).

use crate::common;

use std::io::Write;
use std::net::SocketAddr;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use common::{read_until, Memcached, Server};

const TOOL: &str = "/usr/share/memcached/scripts/memcached-tool";

fn tool(addr: SocketAddr, mode: &str) -> String {
    let out = Command::new("perl")
        .args([TOOL, &addr.to_string(), mode])
        .output()
        .expect("run memcached-tool (Debian package memcached)");
    assert!(out.status.success(), "memcached-tool {mode}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn fill(addr: SocketAddr, requests: &[u8]) {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.write_all(requests).expect("send");
    s.write_all(b"mn\r\n").expect("send");
    let got = read_until(&mut s, b"MN\r\n");
    assert!(got.ends_with(b"MN\r\n"));
}

#[test]
fn memcached_tool_dumps_what_memcached_would() {
    let at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
        + 3600;
    let requests = format!(
        "set plain 0 0 5 noreply\r\nhello\r\nset a:b/c%d~e 7 0 3 noreply\r\nodd\r\n\
         set later 42 {at} 4 noreply\r\nsoon\r\nset gone 0 0 1 noreply\r\nx\r\ndelete gone noreply\r\n"
    );
    let memcached = Memcached::start(&[]);
    let cachalot = Server::start(&[]);
    fill(memcached.addr(), requests.as_bytes());
    fill(cachalot.addr(), requests.as_bytes());
    let sorted = |text: String| {
        // One `add` (two lines) per item, in the order the server walks.
        let lines: Vec<&str> = text.split("\r\n").filter(|l| !l.is_empty()).collect();
        let mut items: Vec<String> = lines.chunks(2).map(|c| c.join("|")).collect();
        items.sort();
        items
    };
    let want = sorted(tool(memcached.addr(), "dump"));
    assert_eq!(want.len(), 3, "{want:?}");
    assert_eq!(sorted(tool(cachalot.addr(), "dump")), want);

    // The other modes run and show what they should.
    assert!(tool(cachalot.addr(), "display").contains("Item_Size"));
    let stats = tool(cachalot.addr(), "stats");
    assert!(
        stats.contains("curr_items") && stats.contains("cmd_set"),
        "{stats}"
    );
    assert!(tool(cachalot.addr(), "settings").contains("maxconns"));
}

#[test]
fn metadump_walks_every_item_whatever_the_output_size() {
    let server = Server::start(&["-m", "64"]);
    let n = 60_000;
    let mut req = Vec::new();
    for i in 0..n {
        req.extend_from_slice(
            format!("set key:{i:06} 0 0 {} noreply\r\n", 10 + i % 200).as_bytes(),
        );
        req.extend(std::iter::repeat_n(b'v', 10 + i % 200));
        req.extend_from_slice(b"\r\n");
    }
    fill(server.addr(), &req);
    let text = metadump_all(&server);
    let (lines, distinct) = dump_lines(&text);
    assert_eq!(lines.len(), n, "every item once");
    assert_eq!(distinct, n, "no item twice");
    assert!(lines
        .iter()
        .all(|l| l.contains(" exp=-1 ") && l.contains(" fetch=no ")));
    // With nothing after it in the input (as memcached-tool sends it): the
    // dump goes on each time its output drains.
    let mut s = server.connect();
    s.write_all(b"lru_crawler metadump all\r\n").expect("send");
    let alone = read_until(&mut s, b"END\r\n");
    let listed = String::from_utf8_lossy(&alone)
        .lines()
        .filter(|l| l.starts_with("key="))
        .count();
    assert_eq!(listed, n, "a dump alone in its input");
    // Classes one by one, and refusals as memcached's.
    assert_eq!(
        server.ask(b"lru_crawler metadump 0\r\n", b"\r\n"),
        b"BADCLASS invalid class id\r\n"
    );
    assert_eq!(
        server.ask(b"lru_crawler metadump\r\n", b"\r\n"),
        b"ERROR\r\n"
    );
    let one = server.ask(b"lru_crawler metadump 1\r\n", b"END\r\n");
    assert!(String::from_utf8_lossy(&one)
        .lines()
        .all(|l| l == "END" || l.contains(" cls=1 ")));
    let off = Server::start(&["-X"]);
    assert_eq!(
        off.ask(b"lru_crawler metadump all\r\n", b"\r\n"),
        b"ERROR metadump not allowed\r\n"
    );
}

#[test]
fn metadump_lists_the_z_zone_s_items_once_and_memcached_tool_reads_them() {
    // Compressible values in 16 MB, the Z-zone taking all it may: it holds
    // what the N-zone could not (the N-zone takes free memory first).
    let server = Server::start(&["-m", "16", "-f", "2", "-o", "zzone=1,zzone_target=0"]);
    let n = 100_000;
    let mut req = Vec::new();
    for i in 0..n {
        let value = format!("{{\"id\":{i},\"pad\":\"{}\"}}", "xy".repeat(i % 100));
        req.extend_from_slice(
            format!("set zkey:{i:06} 0 0 {} noreply\r\n", value.len()).as_bytes(),
        );
        req.extend_from_slice(value.as_bytes());
        req.extend_from_slice(b"\r\n");
    }
    fill(server.addr(), &req);
    assert_eq!(server.stat("", "evictions"), 0, "the fill fits");
    assert_eq!(server.stat("", "curr_items"), n as u64);
    // Nothing was evicted, so the zone holds what the N-zone could not.
    // It may still be draining the N-zone into itself: items move while
    // the dump runs, and each is listed once all the same.
    let in_zone = server.stat("zzone", "zzone_items");
    assert!(in_zone as usize * 4 >= n, "only {in_zone} in the zone");
    let text = metadump_all(&server);
    let (lines, keys) = dump_lines(&text);
    assert_eq!((lines.len(), keys), (n, n), "every item once");
    let zoned = lines.iter().filter(|l| l.ends_with(" tier=zzone")).count();
    assert!(zoned * 4 >= n, "{zoned} lines of the zone's items");
    assert!(fields_ok(&lines, "zzone"));
    // memcached-tool reads every line, the zone's among them: one `add`
    // (two lines) per item.
    let dumped = tool(server.addr(), "dump");
    let adds = dumped.lines().filter(|l| l.starts_with("add ")).count();
    assert_eq!(adds, n, "memcached-tool dump");
}

#[test]
fn metadump_lists_the_flash_tier_s_items_marked_and_memcached_tool_reads_them() {
    // 8 MB of memory and a flash file: most of the items leave memory for
    // flash.
    let path = common::temp_path("metadump-flash");
    let _files = FlashFiles(path.clone());
    let ext = format!("ext_path={}:64m", path.display());
    let server = Server::start(&["-m", "8", "-o", &ext]);
    let n = 60_000;
    let mut req = Vec::new();
    for i in 0..n {
        let value = format!(
            "{{\"id\":{i:06},\"name\":\"user{i:06}\",\"pad\":\"{}\"}}",
            "ab".repeat(40)
        );
        req.extend_from_slice(
            format!("set fkey:{i:06} 0 0 {} noreply\r\n", value.len()).as_bytes(),
        );
        req.extend_from_slice(value.as_bytes());
        req.extend_from_slice(b"\r\n");
        if i % 5_000 == 4_999 {
            fill(server.addr(), &req);
            req.clear();
            settle(&server);
        }
    }
    fill(server.addr(), &req);
    settle(&server);
    let counts = |server: &Server| {
        (
            server.stat("", "curr_items"),
            server.stat("", "extstore_objects_used"),
            server.stat("flash", "flash_staged"),
        )
    };
    let (curr, on_flash, staged) = counts(&server);
    assert!(on_flash as usize > n / 2, "{on_flash} items on flash");
    let text = metadump_all(&server);
    assert_eq!(counts(&server), (curr, on_flash, staged), "the cache moved");
    let (lines, keys) = dump_lines(&text);
    // `curr_items` counts every tier's items, flash's (indexed or staged)
    // among them: each listed once.
    assert_eq!(
        (lines.len(), keys),
        (curr as usize, curr as usize),
        "every item once"
    );
    let flashed = lines.iter().filter(|l| l.ends_with(" tier=flash")).count();
    assert_eq!(flashed as u64, on_flash + staged, "flash's lines");
    assert!(fields_ok(&lines, "flash"));
    // memcached-tool reads every line and fetches every key, flash's
    // among them: one `add` (two lines) per item.
    let dumped = tool(server.addr(), "dump");
    let adds = dumped.lines().filter(|l| l.starts_with("add ")).count();
    assert_eq!(adds, curr as usize, "memcached-tool dump");
}

/// The flash file and what the server keeps beside it, removed at the
/// end.
struct FlashFiles(std::path::PathBuf);

impl Drop for FlashFiles {
    fn drop(&mut self) {
        for side in ["", ".index", ".journal", ".dict", ".memory"] {
            let mut p = self.0.clone().into_os_string();
            p.push(side);
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Wait until the flash writer has nothing staged.
fn settle(server: &Server) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while server.stat("flash", "flash_staged") > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "still staged after 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A metadump's item lines, and how many distinct keys they name.
fn dump_lines(text: &str) -> (Vec<&str>, usize) {
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("key=")).collect();
    let mut keys: Vec<&str> = lines
        .iter()
        .map(|l| l.split(' ').next().unwrap_or_default())
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let distinct = keys.len();
    (lines, distinct)
}

/// Every line has memcached's seven fields, and at most an eighth,
/// `tier=<tier>`.
fn fields_ok(lines: &[&str], tier: &str) -> bool {
    let marked = format!("tier={tier}");
    lines.iter().all(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        f.len() == 7 || (f.len() == 8 && f[7] == marked)
    })
}

/// `lru_crawler metadump all` with a command after it, as the text read
/// until that command's reply.
fn metadump_all(server: &Server) -> String {
    let mut s = server.connect();
    s.write_all(b"lru_crawler metadump all\r\nversion\r\n")
        .expect("send");
    String::from_utf8_lossy(&read_until(&mut s, b"END\r\nVERSION ")).into_owned()
}
