//! One server per file (issue 37): a second cachalot on the flash file or
//! the `-e` file of a running one exits 1 before it binds a port, with a
//! message that says why (memcached 1.6 refuses a second extstore the same
//! way); the first keeps serving every value byte for byte. The lock dies
//! with its holder: after kill -9 a new server starts on the same file at
//! once and recovers what the crash scan finds.

use crate::common;

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{cachalot_bin, read_until, temp_path, wait_child, Server};

const ITEMS: u64 = 3_000;

/// Removes the files a test made, whatever happens.
struct Files(Vec<PathBuf>);

impl Drop for Files {
    fn drop(&mut self) {
        for base in &self.0 {
            for ext in ["", ".index", ".journal", ".dict", ".memory", ".lock"] {
                let mut p = base.clone().into_os_string();
                p.push(ext);
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

/// 2 KB that name their key, so a value served under another key shows,
/// and that do not compress, so that they fill flash slabs.
fn value(k: u64) -> Vec<u8> {
    let mut x = k.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let noise = std::iter::repeat_with(move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x as u8
    });
    let head = format!("value-of-{k}:");
    head.bytes().chain(noise).take(2048).collect()
}

fn fill(server: &Server) {
    let mut s = server.connect();
    let mut batch = Vec::new();
    for k in 0..ITEMS {
        let v = value(k);
        batch.extend_from_slice(format!("set k{k} 0 0 {}\r\n", v.len()).as_bytes());
        batch.extend_from_slice(&v);
        batch.extend_from_slice(b"\r\n");
        s.write_all(&batch).unwrap();
        batch.clear();
        assert_eq!(read_until(&mut s, b"\r\n"), b"STORED\r\n", "set k{k}");
    }
}

/// How many of the keys come back; panics on a value that is not the one
/// stored.
fn check(s: &mut TcpStream) -> u64 {
    let mut hits = 0;
    for k in 0..ITEMS {
        s.write_all(format!("get k{k}\r\n").as_bytes()).unwrap();
        let reply = read_until(s, b"END\r\n");
        if reply == b"END\r\n" {
            continue;
        }
        let v = value(k);
        let mut want = format!("VALUE k{k} 0 {}\r\n", v.len()).into_bytes();
        want.extend_from_slice(&v);
        want.extend_from_slice(b"\r\nEND\r\n");
        assert!(reply == want, "k{k}: not the value stored");
        hits += 1;
    }
    hits
}

/// Start a second server on `args` and expect a refusal: exit 1, the
/// reason on stderr, no port ever bound (its port file is never written).
fn refused(args: &[&str], what: &str) {
    let (port_file, log) = (temp_path("port"), temp_path("stderr"));
    let mut child = Command::new(cachalot_bin())
        .args(["-p", "-1", "-l", "127.0.0.1", "-U", "0", "-u", "root"])
        .args(args)
        .env("MEMCACHED_PORT_FILENAME", &port_file)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("run a second cachalot");
    let status = wait_child(&mut child, Duration::from_secs(10));
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    let bound = port_file.exists();
    let _ = std::fs::remove_file(&port_file);
    let status = status.unwrap_or_else(|| panic!("a second server on {what} started: {stderr}"));
    assert_eq!(status.code(), Some(1), "second server: {stderr}");
    assert!(
        stderr.contains(what) && stderr.contains("in use by another running server"),
        "the reason, on stderr: {stderr}"
    );
    assert!(!bound, "the refused server bound a port first");
}

fn path_arg(p: &Path) -> String {
    p.to_str().expect("utf-8 path").to_string()
}

#[test]
fn a_second_server_on_a_flash_file_is_refused_and_a_killed_one_is_not() {
    let flash = temp_path("owned-flash");
    let _files = Files(vec![flash.clone()]);
    let ext = format!("ext_path={}:64m", path_arg(&flash));
    // 6 MB of values in a 2 MB cache: most of them live on flash.
    let args = ["-m", "2", "-o", &ext];
    let mut first = Server::start(&args);
    fill(&first);
    let mut s = first.connect();
    let before = check(&mut s);
    // More than memory holds (about 3 MB with the class's first page):
    // flash serves the rest. Not nearly all: the flash writer runs at idle
    // priority, and on a loaded machine (the suite runs two server test
    // binaries at once) items evicted faster than it writes are dropped
    // (62% kept in one such run, where 90% was asked).
    assert!(before > ITEMS / 2, "{before} of {ITEMS} kept");
    assert!(
        first.stat("", "extstore_objects_written") > 0,
        "nothing on flash"
    );

    refused(&args, "ext_path");
    // The first server's file was not touched: every value as it was.
    assert_eq!(check(&mut s), before, "the first server lost items");
    assert!(first.try_wait().is_none(), "the first server is still up");

    // kill -9: the lock goes with the process, and the next server starts
    // at once on the same file and finds what the crash scan recovers.
    first.signal("KILL");
    assert!(first.wait_exit(Duration::from_secs(10)).is_some());
    let after = Server::start(&args);
    let mut s = after.connect();
    let recovered = check(&mut s);
    assert!(
        recovered > 0,
        "nothing recovered from flash after kill -9 ({before} held before)"
    );
    // And it, in turn, holds the file.
    refused(&args, "ext_path");
}

#[test]
fn a_second_server_on_a_memory_file_is_refused() {
    let file = temp_path("owned-memory");
    let _files = Files(vec![file.clone()]);
    let f = path_arg(&file);
    let args = ["-m", "64", "-e", &f];
    let first = Server::start(&args);
    fill(&first);
    refused(&args, "memory file (-e)");
    let mut s = first.connect();
    assert_eq!(check(&mut s), ITEMS, "the first server lost items");

    // A clean stop saves the items to the file; the next server owns it
    // and loads them.
    first.signal("TERM");
    let mut first = first;
    assert!(first.wait_exit(Duration::from_secs(30)).is_some());
    let next = Server::start(&args);
    let mut s = next.connect();
    assert_eq!(check(&mut s), ITEMS, "warm restart after the refusal");
    refused(&args, "memory file (-e)");
}
