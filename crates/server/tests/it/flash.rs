//! The flash tier through the real server (issue 12): items that leave
//! memory are served again from flash by text `get` (single, pipelined and
//! multi-key, through parked requests), meta `mg` and binary GET, byte for
//! byte; bytes damaged or cut off in the flash file cost misses, never
//! wrong values, and the server keeps serving; `stats flash` and
//! memcached's `extstore_*` lines report the tier.

use crate::common;

use std::collections::HashMap;
use std::io::{ErrorKind, Write};
use std::net::TcpStream;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{read_until, spawn_server, temp_path, Server};

struct FlashFile(PathBuf);

impl Drop for FlashFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn key(k: u64) -> String {
    format!("key:{k:07}")
}

/// A JSON-like value naming its key, with a token that does not repeat
/// (so it compresses like records do).
fn value(k: u64) -> Vec<u8> {
    let mut x = k.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let token: String = (0..3)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            format!("{x:016x}")
        })
        .collect();
    format!("{{\"id\":{k},\"name\":\"user{k}\",\"token\":\"{token}\",\"active\":true}}")
        .into_bytes()
}

fn start(memory_mb: &str, flash_mb: &str, extra: &[&str]) -> (Server, FlashFile) {
    let path = temp_path("flash");
    let p = path.to_str().expect("utf-8 path").to_string();
    let mut args = vec![
        "-m",
        memory_mb,
        "--flash-path",
        &p,
        "--flash-size",
        flash_mb,
    ];
    args.extend_from_slice(extra);
    let server = spawn_server(&args);
    (server, FlashFile(path))
}

/// SET keys `0..n`, pipelined, `noreply`; `mn` marks the end of each
/// 10,000, and the writer is let catch up then (at full pipelined speed
/// it cannot, and items that find its stage full are evicted).
fn fill(s: &mut TcpStream, n: u64) {
    let mut batch = Vec::new();
    for k in 0..n {
        if k % 10_000 == 9_999 {
            batch.extend_from_slice(b"mn\r\n");
            s.write_all(&batch).unwrap();
            batch.clear();
            assert!(read_until(s, b"MN\r\n").ends_with(b"MN\r\n"));
            settle(s);
        }
        let v = value(k);
        batch.extend_from_slice(format!("set {} 0 0 {} noreply\r\n", key(k), v.len()).as_bytes());
        batch.extend_from_slice(&v);
        batch.extend_from_slice(b"\r\n");
        if batch.len() > 32 << 10 {
            s.write_all(&batch).unwrap();
            batch.clear();
        }
    }
    batch.extend_from_slice(b"mn\r\n");
    s.write_all(&batch).unwrap();
    assert!(read_until(s, b"MN\r\n").ends_with(b"MN\r\n"));
}

/// One `stats <group>` as a map.
fn stats(s: &mut TcpStream, group: &str) -> HashMap<String, String> {
    s.write_all(format!("stats {group}\r\n").as_bytes())
        .unwrap();
    let reply = read_until(s, b"END\r\n");
    String::from_utf8_lossy(&reply)
        .lines()
        .filter_map(|l| {
            let mut w = l.strip_prefix("STAT ")?.splitn(2, ' ');
            Some((w.next()?.to_string(), w.next()?.to_string()))
        })
        .collect()
}

fn stat(s: &mut TcpStream, group: &str, name: &str) -> u64 {
    stats(s, group)
        .get(name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in stats {group}"))
}

/// Wait until the writer has nothing staged (it runs at idle priority: on
/// a busy machine that can take a while, but it must happen).
fn settle(s: &mut TcpStream) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let staged = stat(s, "flash", "flash_staged");
        if staged == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{staged} items still staged after 60 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The values in a text retrieval reply, by key; panics on anything
/// malformed.
fn parse_values(reply: &[u8]) -> HashMap<String, Vec<u8>> {
    let mut out = HashMap::new();
    let mut at = 0;
    while at < reply.len() {
        let nl = at
            + reply[at..]
                .windows(2)
                .position(|w| w == b"\r\n")
                .expect("line end");
        let line = std::str::from_utf8(&reply[at..nl]).expect("utf-8 line");
        at = nl + 2;
        if line == "END" {
            continue;
        }
        let w: Vec<&str> = line.split(' ').collect();
        assert_eq!(w[0], "VALUE", "unexpected line {line:?}");
        let len: usize = w[3].parse().expect("length");
        out.insert(w[1].to_string(), reply[at..at + len].to_vec());
        assert_eq!(&reply[at + len..at + len + 2], b"\r\n");
        at += len + 2;
    }
    out
}

/// GET every key `0..n` with multi-key gets of `per` keys, pipelined
/// `depth` requests at a time; every value found must be the key's.
fn read_all(s: &mut TcpStream, n: u64, per: u64, depth: u64) -> u64 {
    let mut hits = 0;
    let mut k = 0;
    while k < n {
        let mut req = Vec::new();
        let mut requests = 0;
        while requests < depth && k < n {
            req.extend_from_slice(b"get");
            for j in k..(k + per).min(n) {
                req.extend_from_slice(format!(" {}", key(j)).as_bytes());
            }
            req.extend_from_slice(b"\r\n");
            k = (k + per).min(n);
            requests += 1;
        }
        req.extend_from_slice(b"mn\r\n");
        s.write_all(&req).unwrap();
        let reply = read_until(s, b"MN\r\n");
        let body = &reply[..reply.len() - 4];
        assert_eq!(
            body.windows(5).filter(|w| w == b"END\r\n").count() as u64,
            requests
        );
        for (name, v) in parse_values(body) {
            let id: u64 = name[4..].parse().expect("key number");
            assert_eq!(v, value(id), "{name} came back wrong");
            hits += 1;
        }
    }
    hits
}

/// Each worker's own io_uring (where the kernel allows: `stats settings`
/// says which path is in use).
#[test]
fn items_come_back_from_flash_through_every_protocol() {
    every_protocol("uring");
}

/// The reader threads, the fallback.
#[test]
fn items_come_back_from_flash_through_reader_threads() {
    every_protocol("threads");
}

/// With the Z-zone between memory and flash (its evictions go on to
/// flash).
#[test]
fn items_come_back_from_flash_behind_the_zzone() {
    every_protocol("uring,zzone=1");
}

fn every_protocol(io: &str) {
    let (server, _file) = start("8", "64", &["-o", &format!("flash_io={io}")]);
    let mut s = server.connect();
    let in_use = &stats(&mut s, "settings")["flash_io"];
    let wanted = io.split(',').next().unwrap_or(io);
    if wanted == "uring" && in_use != "uring" {
        eprintln!("io_uring refused here: the test runs on reader threads");
    } else {
        assert_eq!(in_use, wanted);
    }
    // With the Z-zone, memory holds more of the keys (compressed), and
    // flash the rest.
    let n = if io.contains("zzone") {
        120_000
    } else {
        60_000
    };
    fill(&mut s, n);
    settle(&mut s);
    let on_flash = stat(&mut s, "flash", "flash_items");
    assert!(on_flash > n / 3, "{on_flash} of {n} on flash");
    // Single-key gets pipelined, and multi-key gets.
    let single = read_all(&mut s, n, 1, 64);
    let multi = read_all(&mut s, n, 40, 4);
    assert!(single > n * 95 / 100, "{single} of {n} found by get");
    // Reading churns memory: with the Z-zone, what it has no room for when
    // a read moves items around is evicted, not sent to flash (about 7%
    // of the keys after the first pass here).
    let kept = if io.contains("zzone") { 90 } else { 99 };
    assert!(
        multi >= single * kept / 100,
        "{multi} found by multi-get, {single} by get"
    );
    let f = stats(&mut s, "flash");
    let flash_hits: u64 = f["flash_hits"].parse().unwrap();
    assert!(flash_hits > n / 3, "{flash_hits} hits on flash");
    // memcached's names for the same.
    assert!(stat(&mut s, "", "get_extstore") > 0);
    assert!(stat(&mut s, "", "extstore_objects_used") > 0);

    // Meta: mg with a value, for keys on flash too.
    let mut found = 0;
    for k in (0..n).step_by(97) {
        s.write_all(format!("mg {} v\r\nmn\r\n", key(k)).as_bytes())
            .unwrap();
        let reply = read_until(&mut s, b"MN\r\n");
        if reply == b"EN\r\nMN\r\n" {
            continue;
        }
        let v = value(k);
        let mut want = format!("VA {}\r\n", v.len()).into_bytes();
        want.extend_from_slice(&v);
        want.extend_from_slice(b"\r\nMN\r\n");
        assert_eq!(reply, want, "mg {}", key(k));
        found += 1;
    }
    assert!(found as u64 > (n / 97) * 9 / 10, "{found} found by mg");

    // Binary GET, on a connection of its own (the protocol is chosen per
    // connection).
    let mut s = server.connect();
    let mut found = 0;
    for k in (0..n).step_by(211) {
        let kb = key(k).into_bytes();
        let mut req = vec![0x80, 0x00];
        req.extend_from_slice(&(kb.len() as u16).to_be_bytes());
        req.extend_from_slice(&[0, 0, 0, 0]);
        req.extend_from_slice(&(kb.len() as u32).to_be_bytes());
        req.extend_from_slice(&[0; 12]);
        req.extend_from_slice(&kb);
        s.write_all(&req).unwrap();
        let mut head = [0u8; 24];
        std::io::Read::read_exact(&mut s, &mut head).unwrap();
        let total = u32::from_be_bytes(head[8..12].try_into().unwrap()) as usize;
        let mut body = vec![0u8; total];
        std::io::Read::read_exact(&mut s, &mut body).unwrap();
        if head[7] == 0 {
            assert_eq!(&body[4..], &value(k)[..], "binary get {}", key(k));
            found += 1;
        }
    }
    assert!(
        found as u64 > (n / 211) * 9 / 10,
        "{found} found by binary get"
    );
}

#[test]
fn a_damaged_or_truncated_file_costs_misses_never_wrong_values() {
    let (server, file) = start("8", "64", &[]);
    let mut s = server.connect();
    let n = 120_000;
    fill(&mut s, n);
    settle(&mut s);
    let before = read_all(&mut s, n, 20, 8);
    assert!(
        before > n * 9 / 10,
        "{before} of {n} found: {:?}",
        stats(&mut s, "flash")
    );
    // Bytes overwritten all over the written part of the file.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&file.0)
        .expect("open the flash file");
    let written = stat(&mut s, "flash", "flash_device_bytes_written");
    assert!(written >= 2 << 20, "{written} bytes written");
    for at in (0..written).step_by(48 << 10) {
        f.write_all_at(b"garbage garbage garbage", at + 1000)
            .unwrap();
    }
    f.sync_all().unwrap();
    let damaged = read_all(&mut s, n, 20, 8);
    assert!(damaged < before, "damage went unnoticed");
    assert!(stat(&mut s, "", "badcrc_from_extstore") > 0);
    // Cut the file to 1 MB: reads past it fail.
    f.set_len(1 << 20).unwrap();
    let cut = read_all(&mut s, n, 20, 8);
    assert!(cut <= damaged);
    // Still serving: memory, and new items.
    s.write_all(b"set fresh 0 0 5\r\nhello\r\nget fresh\r\n")
        .unwrap();
    let reply = read_until(&mut s, b"END\r\n");
    assert_eq!(reply, b"STORED\r\nVALUE fresh 0 5\r\nhello\r\nEND\r\n");
}

/// How the writer of [`write_until_killed`] ended.
#[derive(Debug)]
struct WriterEnd {
    /// Batches acknowledged (`MN` read) before the kill.
    acked: u64,
    /// Writes attempted after the kill (the rest of the batch in flight,
    /// then whole batches).
    tried_after: u64,
    /// What ended it: the server gone (EOF, reset, broken pipe).
    error: ErrorKind,
    /// The first key not sent.
    next_key: u64,
}

/// One batch of 1000 SETs of keys from `from` (`noreply`), then `mn`,
/// whose `MN` acknowledges the batch.
fn batch(from: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for k in from..from + 1000 {
        let v = value(k);
        out.extend_from_slice(format!("set {} 0 0 {} noreply\r\n", key(k), v.len()).as_bytes());
        out.extend_from_slice(&v);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"mn\r\n");
    out
}

/// Read one batch's acknowledgement: Ok(()) for `MN`, else what failed.
fn read_ack(w: &mut TcpStream) -> Result<(), ErrorKind> {
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    while !got.ends_with(b"MN\r\n") {
        match common::read_some(w, &mut buf) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof),
            Ok(r) => got.extend_from_slice(&buf[..r]),
            Err(e) => return Err(e.kind()),
        }
    }
    assert_eq!(got, b"MN\r\n", "a noreply SET answered");
    Ok(())
}

/// SET keys from `from` on in batches until 5 are acknowledged, then
/// send half of the next batch, say so on `in_flight` and wait on
/// `killed` for the server's death; then go on writing (the batch's
/// other half, then whole batches) and reading acknowledgements until
/// the connection fails.
fn write_until_killed(
    w: &mut TcpStream,
    from: u64,
    in_flight: mpsc::Sender<()>,
    killed: mpsc::Receiver<()>,
) -> WriterEnd {
    w.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut k = from;
    let mut acked = 0;
    while acked < 5 {
        w.write_all(&batch(k)).expect("write a batch");
        k += 1000;
        read_ack(w).expect("a batch acknowledged");
        acked += 1;
    }
    let next = batch(k);
    k += 1000;
    let (half, rest) = next.split_at(next.len() / 2);
    w.write_all(half).expect("write half a batch");
    in_flight.send(()).expect("the test is gone");
    killed
        .recv_timeout(Duration::from_secs(120))
        .expect("no kill");
    let mut pending = rest.to_vec();
    let mut tried_after = 0;
    let error = loop {
        tried_after += 1;
        if let Err(e) = w.write_all(&pending) {
            break e.kind();
        }
        if let Err(e) = read_ack(w) {
            break e;
        }
        assert!(tried_after < 100, "the connection outlived the server");
        pending = batch(k);
        k += 1000;
    };
    WriterEnd {
        acked,
        tried_after,
        error,
        next_key: k,
    }
}

/// Every key of `0..n` that is found must have its value; returns how
/// many were found.
fn count_found(s: &mut TcpStream, n: u64) -> u64 {
    read_all(s, n, 20, 8)
}

#[test]
fn restarts_after_sigterm_and_kill_9_keep_the_flash_contents() {
    let path = temp_path("flash-restart");
    let _file = FlashFile(path.clone());
    let p = path.to_str().expect("utf-8 path").to_string();
    let args = ["-m", "8", "--flash-path", &p, "--flash-size", "64"];
    let mut server = spawn_server(&args);
    let mut s = server.connect();
    let n = 100_000;
    fill(&mut s, n);
    settle(&mut s);
    let on_flash = stat(&mut s, "flash", "flash_items");
    assert!(on_flash > n / 2, "{on_flash} on flash");

    // SIGTERM: a clean shutdown; the next start serves flash at once.
    server.signal("TERM");
    assert!(
        server.wait_exit(Duration::from_secs(20)).is_some(),
        "no exit on SIGTERM"
    );
    drop(server);
    let mut server = spawn_server(&args);
    let mut s = server.connect();
    assert_eq!(stat(&mut s, "flash", "flash_recovered_clean"), 1);
    let found = count_found(&mut s, n);
    eprintln!("kill -9: {found} back, {on_flash} were on flash");
    assert!(
        found * 100 >= on_flash * 99,
        "{found} found after SIGTERM, {on_flash} were on flash"
    );

    // kill -9 while a client is still writing: the scan brings back what
    // was on flash, every value checked by read_all.
    let before = stat(&mut s, "flash", "flash_items");
    let (in_flight, killed) = (mpsc::channel(), mpsc::channel());
    let writer = {
        let mut w = server.connect();
        let (in_flight, killed) = (in_flight.0, killed.1);
        std::thread::spawn(move || write_until_killed(&mut w, n, in_flight, killed))
    };
    // The writer has had batches acknowledged and is half-way through
    // sending one more: kill the server now.
    in_flight
        .1
        .recv_timeout(Duration::from_secs(120))
        .expect("the writer never got 5 batches acknowledged");
    server.signal("KILL");
    assert!(server.wait_exit(Duration::from_secs(10)).is_some());
    killed.0.send(()).expect("the writer is gone");
    let end = writer.join().expect("writer thread");
    assert!(end.acked >= 5 && end.tried_after >= 1, "{end:?}");
    assert!(
        matches!(
            end.error,
            ErrorKind::UnexpectedEof
                | ErrorKind::ConnectionReset
                | ErrorKind::BrokenPipe
                | ErrorKind::ConnectionAborted
        ),
        "the writer did not see the connection go: {end:?}"
    );
    drop(server);
    let server = spawn_server(&args);
    let mut s = server.connect();
    assert_eq!(stat(&mut s, "flash", "flash_recovered_clean"), 0);
    let recovered = stat(&mut s, "flash", "flash_recovered_items");
    assert!(
        recovered * 10 >= before * 9,
        "{recovered} recovered after kill -9, {before} were on flash"
    );
    // Every value found is the one written (read_all checks each).
    let found = count_found(&mut s, end.next_key);
    assert!(
        found >= recovered * 9 / 10,
        "{found} found, {recovered} recovered"
    );
}

/// A clean stop keeps the whole cache (issue 32): with a flash tier and no
/// `-e`, SIGTERM also saves what is in memory (`<ext_path>.memory`), and
/// the next start serves at least 99% of the entries that were readable
/// before, byte for byte; after a kill -9, at least what was on flash.
#[test]
fn a_clean_stop_with_flash_keeps_memory_too() {
    let path = temp_path("flash-clean-stop");
    let _file = FlashFile(path.clone());
    let memory = PathBuf::from(format!("{}.memory", path.display()));
    let _memory = FlashFile(memory.clone());
    let p = path.to_str().expect("utf-8 path").to_string();
    let args = ["-m", "8", "--flash-path", &p, "--flash-size", "256"];
    let mut server = spawn_server(&args);
    let mut s = server.connect();
    let n = 150_000;
    fill(&mut s, n);
    settle(&mut s);
    let readable = count_found(&mut s, n);
    let in_memory = stat(&mut s, "", "curr_items") - stat(&mut s, "flash", "flash_items");
    assert!(readable > n / 2, "{readable} readable");
    assert!(
        in_memory > 10_000,
        "{in_memory} in memory: the test needs some"
    );

    server.signal("TERM");
    assert!(
        server.wait_exit(Duration::from_secs(30)).is_some(),
        "no exit on SIGTERM"
    );
    drop(server);
    assert!(
        memory.exists(),
        "the memory was saved beside the flash file"
    );
    let mut server = spawn_server(&args);
    let mut s = server.connect();
    assert!(!memory.exists(), "loaded once, then removed");
    let found = count_found(&mut s, n);
    eprintln!("SIGTERM: {found} of {readable} readable entries back ({in_memory} were in memory)");
    assert!(
        found * 100 >= readable * 99,
        "{found} found after SIGTERM, {readable} were readable before"
    );

    // kill -9 keeps at least what was on flash; memory's items are lost.
    settle(&mut s);
    let on_flash = stat(&mut s, "flash", "flash_items");
    server.signal("KILL");
    assert!(server.wait_exit(Duration::from_secs(10)).is_some());
    drop(server);
    assert!(!memory.exists(), "nothing saved by a kill -9");
    let server = spawn_server(&args);
    let mut s = server.connect();
    let found = count_found(&mut s, n);
    eprintln!("kill -9: {found} back, {on_flash} were on flash");
    assert!(
        found * 100 >= on_flash * 99,
        "{found} found after kill -9, {on_flash} were on flash"
    );
}
