//! Trace capture (issue 36) end to end: a server with `-o trace_file` serves
//! a small look-aside workload over the text, meta and binary protocols, is
//! stopped, and its file is checked against the requests sent: one record
//! per GET-like request and per update (fills are none), the keys' hashes,
//! key plus value sizes, and the next-access positions; then libCacheSim (the
//! PyPI package, `common::python`) reads the same file. A sampled capture
//! in the CSV form with plain keys keeps exactly the requests of its keys.
//!
//! Needs `cargo build -p cachalot` first (see `common`).

use crate::common;

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use cachalot_engine::hash::hash;
use common::{python, read_until, temp_path, Server};

/// One decoded oracleGeneral record: (clock_time, obj_id, obj_size,
/// next_access_vtime).
type Record = (u32, u64, u32, i64);

fn read_oracle(path: &Path) -> Vec<Record> {
    let bytes = std::fs::read(path).expect("the trace file");
    assert_eq!(bytes.len() % 24, 0, "{} bytes", bytes.len());
    bytes
        .chunks_exact(24)
        .map(|r| {
            (
                u32::from_le_bytes(r[0..4].try_into().unwrap()),
                u64::from_le_bytes(r[4..12].try_into().unwrap()),
                u32::from_le_bytes(r[12..16].try_into().unwrap()),
                i64::from_le_bytes(r[16..24].try_into().unwrap()),
            )
        })
        .collect()
}

/// Each position's next position of the same id, 1-based (libCacheSim's
/// traceConv), -1 for none: by looking ahead.
fn next_positions(ids: &[u64]) -> Vec<i64> {
    (0..ids.len())
        .map(|i| {
            ids[i + 1..]
                .iter()
                .position(|&x| x == ids[i])
                .map_or(-1, |d| (i + d + 2) as i64)
        })
        .collect()
}

/// Wait until `stats trace`'s `name` reaches `want` (workers hand their
/// events over at the end of each round of their loop).
fn wait_stat(server: &Server, name: &str, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = server.stat("trace", name);
        if got == want {
            return;
        }
        assert!(Instant::now() < deadline, "{name} stayed {got}, not {want}");
        std::thread::yield_now();
    }
}

/// Stop the server with SIGTERM and wait for it (the file is ended then).
fn stop(mut server: Server) {
    server.signal("TERM");
    let status = server.wait_exit(Duration::from_secs(20));
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}; stderr:\n{}",
        server.stderr()
    );
}

/// A binary-protocol GET of `key` (opcode 0x00) and whether it hit.
fn binary_get(s: &mut std::net::TcpStream, key: &[u8]) -> bool {
    let mut req = vec![0x80, 0x00];
    req.extend_from_slice(&(key.len() as u16).to_be_bytes());
    req.extend_from_slice(&[0, 0, 0, 0]);
    req.extend_from_slice(&(key.len() as u32).to_be_bytes());
    req.extend_from_slice(&[0; 12]);
    req.extend_from_slice(key);
    s.write_all(&req).unwrap();
    let mut head = [0u8; 24];
    std::io::Read::read_exact(s, &mut head).unwrap();
    let body = u32::from_be_bytes(head[8..12].try_into().unwrap()) as usize;
    let mut rest = vec![0u8; body];
    std::io::Read::read_exact(s, &mut rest).unwrap();
    u16::from_be_bytes([head[6], head[7]]) == 0
}

/// The look-aside workload: 1,500 requests over 60 keys of a few sizes, a
/// GET (text `get`, meta `mg` or binary, by turn) and on a miss a SET of the
/// key's value; every 50th request is instead an update (a SET of a new
/// size) or a delete. Returns the records the capture should hold, as the
/// CSV has them: (key, value size, `get`, `set` for an update or `delete`
/// for a delete that removed an item), how many SETs were fills, and how
/// many events the workers recorded.
fn look_aside(server: &Server) -> (Vec<(String, usize, &'static str)>, u64, u64) {
    // A connection speaks one protocol (its first byte chooses).
    let (mut s, mut b) = (server.connect(), server.connect());
    let mut rng = fastrand::Rng::with_seed(36);
    let mut sizes: HashMap<String, usize> = HashMap::new();
    let mut cached: HashMap<String, bool> = HashMap::new();
    let mut gets = Vec::new();
    let (mut fills, mut events) = (0, 0);
    for i in 0..1500u32 {
        let k = rng.u32(0..60);
        let key = format!("user:{k}:{}", "x".repeat(k as usize % 7));
        let size = *sizes
            .entry(key.clone())
            .or_insert(10 + 37 * (k as usize % 9));
        events += 1;
        if i % 50 == 49 {
            if i % 100 == 99 {
                s.write_all(format!("delete {key}\r\n").as_bytes()).unwrap();
                read_until(&mut s, b"\r\n");
                // A delete of a missing key is no event.
                if cached.insert(key.clone(), false).unwrap_or(false) {
                    gets.push((key, 0, "delete"));
                } else {
                    events -= 1;
                }
            } else {
                let size = size + 100;
                sizes.insert(key.clone(), size);
                let v = "u".repeat(size);
                s.write_all(format!("set {key} 0 0 {size}\r\n{v}\r\n").as_bytes())
                    .unwrap();
                assert_eq!(read_until(&mut s, b"\r\n"), b"STORED\r\n");
                cached.insert(key.clone(), true);
                gets.push((key, size, "set"));
            }
            continue;
        }
        let hit = match i % 3 {
            0 => {
                s.write_all(format!("get {key}\r\n").as_bytes()).unwrap();
                read_until(&mut s, b"END\r\n").starts_with(b"VALUE")
            }
            1 => {
                // The size, not the value: a reply of one line.
                s.write_all(format!("mg {key} s\r\n").as_bytes()).unwrap();
                let r = read_until(&mut s, b"\r\n");
                assert!(r == b"EN\r\n" || r.starts_with(b"HD s"), "{r:?}");
                r.starts_with(b"HD")
            }
            _ => binary_get(&mut b, key.as_bytes()),
        };
        assert_eq!(hit, cached.get(&key).copied().unwrap_or(false), "{key}");
        gets.push((key.clone(), size, "get"));
        if !hit {
            let v = "v".repeat(size);
            s.write_all(format!("set {key} 0 0 {size}\r\n{v}\r\n").as_bytes())
                .unwrap();
            assert_eq!(read_until(&mut s, b"\r\n"), b"STORED\r\n");
            cached.insert(key, true);
            fills += 1;
            events += 1;
        }
    }
    (gets, fills, events)
}

#[test]
fn a_look_aside_workload_is_captured_and_libcachesim_reads_it() {
    let path = temp_path("capture.oracleGeneral");
    let opt = format!("trace_file={}", path.display());
    // One worker: the two connections' requests reach the file in the
    // order they were sent (each worker hands its events over a round of
    // its loop at a time, so across workers the order is the batches').
    let server = Server::start(&["-m", "64", "-t", "1", "-o", &opt]);
    let (gets, fills, events) = look_aside(&server);
    wait_stat(&server, "trace_events", events);
    assert_eq!(server.stat("trace", "trace_dropped"), 0);
    wait_stat(&server, "trace_fills", fills);
    let settings = server.ask(b"stats settings\r\n", b"END\r\n");
    let settings = String::from_utf8_lossy(&settings);
    assert!(settings.contains(&format!("STAT trace_file {}\r\n", path.display())));
    assert!(settings.contains("STAT trace_format oracle\r\nSTAT trace_keys hashed\r\n"));
    stop(server);

    // Updates are accesses in oracleGeneral; deletes are not there.
    let gets: Vec<(String, usize)> = gets
        .into_iter()
        .filter(|r| r.2 != "delete")
        .map(|(k, size, _)| (k, size))
        .collect();
    let recs = read_oracle(&path);
    let ids: Vec<u64> = gets.iter().map(|(k, _)| hash(k.as_bytes())).collect();
    let want: Vec<(u64, u32, i64)> = gets
        .iter()
        .zip(next_positions(&ids))
        .map(|((k, size), next)| (hash(k.as_bytes()), (k.len() + size) as u32, next))
        .collect();
    let got: Vec<(u64, u32, i64)> = recs.iter().map(|r| (r.1, r.2, r.3)).collect();
    assert_same(&got, &want);
    assert!(recs.windows(2).all(|w| w[0].0 <= w[1].0), "time goes on");

    // libCacheSim's own reader: the same requests, and -1 read as "never".
    let script = r#"
import sys
import libcachesim as lcs
r = lcs.TraceReader(sys.argv[1], lcs.TraceType.ORACLE_GENERAL_TRACE)
print(r.get_num_of_req())
for q in r:
    print(q.obj_id, q.obj_size, q.next_access_vtime)
"#;
    let out = Command::new(python())
        .args(["-c", script])
        .arg(&path)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "libcachesim failed (python {}; is libcachesim installed? scripts/install-deps.sh):\n{}",
        python().display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some(gets.len().to_string().as_str()));
    let theirs: Vec<(u64, u32, i64)> = lines
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
            )
        })
        .collect();
    let mine: Vec<(u64, u32, i64)> = want
        .iter()
        .map(|&(id, size, next)| (id, size, if next < 0 { i64::MAX } else { next }))
        .collect();
    assert_same(&theirs, &mine);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn a_sampled_csv_capture_keeps_every_request_of_its_keys() {
    let path = temp_path("capture.csv");
    let opt = format!(
        "trace_file={},trace_sample=0.5,trace_keys=plain",
        path.display()
    );
    // One worker: the two connections' requests reach the file in the
    // order they were sent (each worker hands its events over a round of
    // its loop at a time, so across workers the order is the batches').
    let server = Server::start(&["-m", "64", "-t", "1", "-o", &opt]);
    let (gets, _, _) = look_aside(&server);
    stop(server);

    let text = std::fs::read_to_string(&path).expect("the trace file");
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("time,key,size,cost,op,ttl,key_size"));
    let half = 1u64 << 63;
    let want: Vec<(String, String, String)> = gets
        .iter()
        .filter(|(k, _, _)| hash(k.as_bytes()) < half)
        .map(|(k, size, op)| (k.clone(), size.to_string(), op.to_string()))
        .collect();
    let got: Vec<(String, String, String)> = lines
        .map(|l| l.split(',').map(str::to_string).collect::<Vec<_>>())
        .map(|f| (f[1].clone(), f[2].clone(), f[4].clone()))
        .collect();
    assert!(want.len() > gets.len() / 4 && want.len() < gets.len() * 3 / 4);
    assert!(want.iter().any(|r| r.2 == "set") && want.iter().any(|r| r.2 == "delete"));
    assert_same(&got, &want);
    let _ = std::fs::remove_file(&path);
}

/// `assert_eq!` on long lists, showing the first difference only.
fn assert_same<T: PartialEq + std::fmt::Debug>(got: &[T], want: &[T]) {
    if let Some(i) = (0..got.len().min(want.len())).find(|&i| got[i] != want[i]) {
        panic!(
            "record {i} of {}/{}: got {:?}, want {:?}",
            got.len(),
            want.len(),
            &got[i..(i + 3).min(got.len())],
            &want[i..(i + 3).min(want.len())]
        );
    }
    assert_eq!(got.len(), want.len(), "lengths");
}
