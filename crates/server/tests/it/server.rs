//! End-to-end tests of the network layer against the real `cachalot` binary:
//! command line, unix socket, `-c`, concurrency, pipelining, slow and abrupt
//! clients, shutdown, signals, pid file and daemon mode.
//!
//! Expected replies and exit codes were checked against memcached 1.6.18 on
//! this machine (see net/cli.rs for the messages). The binary is found by
//! `common` (CACHALOT_BIN or target/<profile>/cachalot).

use crate::common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{cachalot_bin, read_some, read_until, spawn_server, temp_path, Server};

/// Run the binary to completion with these arguments: (exit code, stdout, stderr).
fn run_cli(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(cachalot_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run cachalot");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().skip(1).any(|id| id == "0"))
        })
        .unwrap_or(false)
}

/// One request/reply exchange on an open connection.
fn ask(s: &mut TcpStream, req: &[u8], end: &[u8]) -> String {
    s.write_all(req).unwrap();
    String::from_utf8_lossy(&read_until(s, end)).into_owned()
}

/// The value of one `stats` line.
fn stat(s: &mut TcpStream, name: &str) -> u64 {
    let all = ask(s, b"stats\r\n", b"END\r\n");
    let prefix = format!("STAT {name} ");
    all.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no stat {name} in {all}"))
}

#[test]
fn version_and_help_flags() {
    let (code, out, _) = run_cli(&["-V"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("cachalot "), "{out}");
    let (code, out, _) = run_cli(&["-h"]);
    assert_eq!(code, 0);
    for flag in [
        "-p, --port",
        "-m, --memory-limit",
        "-c, --conn-limit",
        "idle_timeout",
    ] {
        assert!(out.contains(flag), "help lacks {flag}");
    }
    // Long form too.
    assert_eq!(run_cli(&["--version"]).0, 0);
}

#[test]
fn bad_flags_fail_with_a_message() {
    let (code, _, err) = run_cli(&["-Q"]);
    assert_eq!(code, 1);
    assert!(err.contains("invalid option -- 'Q'"), "{err}");
    let (code, _, err) = run_cli(&["--no-such-flag"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("unrecognized option '--no-such-flag'"),
        "{err}"
    );
    let (code, _, err) = run_cli(&["-p", "99999"]);
    assert_eq!(code, 64);
    assert!(err.contains("Invalid port number 99999"), "{err}");
    let (code, _, err) = run_cli(&["-o", "no_such_option"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("Illegal suboption \"no_such_option\""),
        "{err}"
    );
    let (code, _, err) = run_cli(&["-c", "0"]);
    assert_eq!(code, 1);
    assert!(err.contains("Maximum connections must be greater than 0"));
    let (code, _, err) = run_cli(&["-t"]);
    assert_eq!(code, 1);
    assert!(err.contains("option requires an argument -- 't'"), "{err}");
}

/// memcached refuses to run as root without `-u`; cachalot deliberately
/// only warns (net/os.rs: the README's plain start command works on a
/// fresh machine, where everything runs as root), and refuses a `-u`
/// naming no user as memcached does. Not root, both ignore `-u`.
#[test]
fn as_root_without_user_flag_cachalot_warns_where_memcached_refuses() {
    if !is_root() {
        let (code, _, err) = run_cli(&["-u", "nobody", "-V"]);
        assert_eq!(code, 0, "{err}");
        return;
    }
    // memcached 1.6.18: exit 64 (EX_USAGE) before it listens.
    let mut memcached = Command::new(common::memcached_bin())
        .args(["-p", "0", "-U", "0", "-l", "127.0.0.1"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run memcached");
    let Some(status) = common::wait_child(&mut memcached, Duration::from_secs(10)) else {
        let _ = memcached.kill();
        let _ = memcached.wait();
        panic!("memcached started as root without -u");
    };
    let mut err = String::new();
    memcached
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("memcached's stderr");
    assert_eq!(status.code(), Some(64), "{err}");
    assert!(
        err.contains("can't run as root without the -u switch"),
        "{err}"
    );
    // cachalot: serves, with a warning that says what memcached would do.
    let server = spawn_server(&["-u", ""]);
    assert_eq!(server.ask(b"version\r\n", b"\r\n"), b"VERSION 1.6.18\r\n");
    assert!(
        server
            .stderr()
            .contains("running as root without the -u switch (memcached would refuse"),
        "{}",
        server.stderr()
    );
    let (code, _, err) = run_cli(&["-p", "0", "-u", "no-such-user-here"]);
    assert_eq!(code, 67);
    assert!(err.contains("can't find the user no-such-user-here to switch to"));
}

#[test]
fn port_in_use_is_reported() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let (code, _, err) = run_cli(&["-u", "root", "-p", &port, "-l", "127.0.0.1"]);
    assert_eq!(code, 71);
    assert!(
        err.contains("failed to listen on one of interface(s) 127.0.0.1"),
        "{err}"
    );
}

/// `-o net_io` chooses the network path and `stats settings` names the
/// one in use; both serve the same bytes (the suite runs every test on
/// each path too: scripts/test.sh).
#[test]
fn the_network_path_is_chosen_and_reported() {
    let (code, _, err) = run_cli(&["-o", "net_io=kqueue"]);
    assert_eq!(code, 1);
    assert!(err.contains("net_io must be uring or epoll"), "{err}");
    let out = Command::new(cachalot_bin())
        .env("CACHALOT_NET_IO", "io_uring")
        .stdin(Stdio::null())
        .output()
        .expect("run cachalot");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("CACHALOT_NET_IO must be uring or epoll"),
        "{err}"
    );
    for path in ["uring", "epoll"] {
        let server = Server::start(&["-o", &format!("net_io={path}")]);
        let mut s = server.connect();
        let settings = ask(&mut s, b"stats settings\r\n", b"END\r\n");
        let in_use = settings
            .lines()
            .find_map(|l| l.strip_prefix("STAT net_io "))
            .unwrap_or_else(|| panic!("no net_io in {settings}"));
        if path == "uring" && in_use == "epoll" {
            eprintln!("io_uring refused here: the server runs on epoll");
        } else {
            assert_eq!(in_use, path);
        }
        // Replies larger than a provided buffer, pipelined behind requests
        // split across reads.
        let value = "v".repeat(40_000);
        let mut req = Vec::new();
        for i in 0..20 {
            req.extend_from_slice(
                format!("set k{i} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes(),
            );
        }
        for i in 0..20 {
            req.extend_from_slice(format!("get k{i}\r\n").as_bytes());
        }
        let want: String = (0..20)
            .map(|_| "STORED\r\n".to_string())
            .chain((0..20).map(|i| format!("VALUE k{i} 0 {}\r\n{value}\r\nEND\r\n", value.len())))
            .collect();
        // Sent from a thread: the server stops reading while its replies
        // wait for us.
        let mut w = s.try_clone().expect("clone");
        let writer = std::thread::spawn(move || w.write_all(&req));
        let end = format!("k19 0 40000\r\n{value}\r\nEND\r\n");
        let got = String::from_utf8_lossy(&read_until(&mut s, end.as_bytes())).into_owned();
        writer.join().expect("writer").expect("send");
        assert!(
            got == want,
            "{path}: {} bytes back, {} wanted",
            got.len(),
            want.len()
        );
    }
}

#[test]
fn serves_and_pipelines() {
    let server = spawn_server(&[]);
    let mut s = server.connect();
    // 500 sets and 500 gets in one write: all answered, in order.
    let mut req = Vec::new();
    let mut want = String::new();
    for i in 0..500 {
        req.extend_from_slice(
            format!(
                "set key{i} {i} 0 {}\r\nvalue{i}\r\n",
                5 + i.to_string().len()
            )
            .as_bytes(),
        );
        want.push_str("STORED\r\n");
    }
    for i in 0..500 {
        req.extend_from_slice(format!("get key{i}\r\n").as_bytes());
        want.push_str(&format!(
            "VALUE key{i} {i} {}\r\nvalue{i}\r\nEND\r\n",
            5 + i.to_string().len()
        ));
    }
    req.extend_from_slice(b"version\r\n");
    s.write_all(&req).unwrap();
    let got = read_until(&mut s, b"VERSION 1.6.18\r\n");
    let got = String::from_utf8_lossy(&got);
    assert_eq!(got.strip_suffix("VERSION 1.6.18\r\n"), Some(want.as_str()));
}

#[test]
fn request_budget_yields_but_answers_everything() {
    // -R 2: the connection yields every two requests (memcached's
    // conn_yields) and is resumed until the whole pipeline is answered,
    // while another client is served in between.
    let server = spawn_server(&["-R", "2", "-t", "1"]);
    let mut busy = server.connect();
    let mut other = server.connect();
    busy.write_all(&b"version\r\n".repeat(3000)).unwrap();
    assert_eq!(
        ask(&mut other, b"version\r\n", b"\r\n"),
        "VERSION 1.6.18\r\n"
    );
    let want = b"VERSION 1.6.18\r\n".repeat(3000);
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while got.len() < want.len() {
        let n = read_some(&mut busy, &mut buf).unwrap();
        assert!(n > 0, "EOF after {} bytes", got.len());
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got == want);
    assert!(stat(&mut other, "conn_yields") >= 1000);
}

#[test]
fn request_sent_byte_by_byte() {
    let server = spawn_server(&[]);
    let mut s = server.connect();
    s.set_nodelay(true).unwrap();
    for b in b"set slow 7 0 5\r\nhello\r\nget slow\r\n" {
        s.write_all(&[*b]).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    let got = read_until(&mut s, b"END\r\n");
    assert_eq!(got, b"STORED\r\nVALUE slow 7 5\r\nhello\r\nEND\r\n");
}

#[test]
fn large_value_round_trip() {
    // Bigger than the 16 KiB read buffer: it must grow for this request and
    // the reply must come back intact.
    let server = spawn_server(&["-I", "2m"]);
    let mut s = server.connect();
    let value: Vec<u8> = (0..1_500_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let mut req = format!("set big 0 0 {}\r\n", value.len()).into_bytes();
    req.extend_from_slice(&value);
    req.extend_from_slice(b"\r\nget big\r\n");
    s.write_all(&req).unwrap();
    let got = read_until(&mut s, b"END\r\n");
    let mut want = format!("STORED\r\nVALUE big 0 {}\r\n", value.len()).into_bytes();
    want.extend_from_slice(&value);
    want.extend_from_slice(b"\r\nEND\r\n");
    assert!(got == want, "got {} bytes, want {}", got.len(), want.len());
}

#[test]
fn binary_protocol_is_detected() {
    let server = spawn_server(&[]);
    let mut s = server.connect();
    // Binary "version" request: magic 0x80, opcode 0x0b, no body.
    let mut req = vec![0x80, 0x0b];
    req.extend_from_slice(&[0; 22]);
    s.write_all(&req).unwrap();
    let mut header = [0u8; 24];
    s.read_exact(&mut header).unwrap();
    assert_eq!(header[0], 0x81, "response magic");
    assert_eq!(header[1], 0x0b);
    let body_len = u32::from_be_bytes([header[8], header[9], header[10], header[11]]) as usize;
    let mut body = vec![0; body_len];
    s.read_exact(&mut body).unwrap();
    assert_eq!(body, b"1.6.18");
}

#[test]
fn many_concurrent_clients() {
    let server = spawn_server(&["-t", "4"]);
    let addr = server.addr();
    let threads: Vec<_> = (0..40)
        .map(|t| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                for i in 0..100 {
                    let v = format!("t{t}-i{i}");
                    let r = ask(
                        &mut s,
                        format!("set c{t}_{i} 0 0 {}\r\n{v}\r\n", v.len()).as_bytes(),
                        b"\r\n",
                    );
                    assert_eq!(r, "STORED\r\n");
                    let r = ask(&mut s, format!("get c{t}_{i}\r\n").as_bytes(), b"END\r\n");
                    assert_eq!(r, format!("VALUE c{t}_{i} 0 {}\r\n{v}\r\nEND\r\n", v.len()));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("client thread");
    }
    let mut s = server.connect();
    assert_eq!(stat(&mut s, "cmd_set"), 4000);
    assert_eq!(stat(&mut s, "get_hits"), 4000);
}

#[test]
fn max_connections_rejects_extra_clients() {
    // One worker: connections are registered in accept order, so once
    // `stats` says this is the only client, the helper's readiness probe
    // (accepted earlier) has been closed and no longer holds a slot.
    let server = spawn_server(&["-c", "3", "-t", "1"]);
    let mut first = server.connect();
    let deadline = Instant::now() + Duration::from_secs(5);
    while stat(&mut first, "curr_connections") != 1 {
        assert!(Instant::now() < deadline, "probe connection never closed");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut open = vec![first, server.connect(), server.connect()];
    for s in &mut open {
        assert_eq!(ask(s, b"version\r\n", b"\r\n"), "VERSION 1.6.18\r\n");
    }
    // The fourth is accepted, told why, and closed (memcached's maxconns_fast).
    let mut extra = server.connect();
    let mut got = Vec::new();
    extra.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"ERROR Too many open connections\r\n");
    // Closing one makes room again.
    drop(open.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut s = server.connect();
        let r = ask(&mut s, b"version\r\n", b"\r\n");
        if r == "VERSION 1.6.18\r\n" {
            assert!(stat(&mut s, "rejected_connections") >= 1);
            break;
        }
        assert!(Instant::now() < deadline, "no room after a close: {r:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn abrupt_disconnect_mid_value_harms_no_one() {
    let server = spawn_server(&[]);
    let mut other = server.connect();
    assert_eq!(
        ask(&mut other, b"set k 0 0 1\r\nx\r\n", b"\r\n"),
        "STORED\r\n"
    );
    for _ in 0..20 {
        let mut s = server.connect();
        s.write_all(b"set big 0 0 100000\r\n").unwrap();
        s.write_all(&[b'z'; 5000]).unwrap();
        // Gone half-way through the value: the server sees EOF mid-request.
        let _ = s.shutdown(Shutdown::Both);
        drop(s);
        assert_eq!(
            ask(&mut other, b"get k\r\n", b"END\r\n"),
            "VALUE k 0 1\r\nx\r\nEND\r\n"
        );
    }
    // The half-sent value was never stored.
    assert_eq!(ask(&mut other, b"get big\r\n", b"END\r\n"), "END\r\n");
    // Clients that leave with replies unread (the server's write fails with
    // EPIPE/ECONNRESET) do not hurt either.
    for _ in 0..20 {
        let mut s = server.connect();
        s.write_all(&b"get k\r\n".repeat(2000)).unwrap();
        drop(s);
    }
    assert_eq!(
        ask(&mut other, b"get k\r\n", b"END\r\n"),
        "VALUE k 0 1\r\nx\r\nEND\r\n"
    );
}

#[test]
fn slow_reader_is_throttled_not_buffered_without_bound() {
    let server = spawn_server(&["-I", "1m"]);
    let mut setter = server.connect();
    let value = vec![b'v'; 500_000];
    let mut req = format!("set fat 0 0 {}\r\n", value.len()).into_bytes();
    req.extend_from_slice(&value);
    req.extend_from_slice(b"\r\n");
    assert_eq!(ask(&mut setter, &req, b"\r\n"), "STORED\r\n");

    // 200 gets of 500 KB = 100 MB of replies that the client does not read yet.
    let mut slow = server.connect();
    let writer = {
        let mut w = slow.try_clone().unwrap();
        std::thread::spawn(move || w.write_all(&b"get fat\r\n".repeat(200)))
    };
    // Wait until the server has stopped on this client: its output at the
    // high-water mark, the connection in memcached's conn_mwrite.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let conns = ask(&mut setter, b"stats conns\r\n", b"END\r\n");
        if conns.contains(":state conn_mwrite\r\n") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the slow reader was never throttled; got {} get hits\n{conns}",
            stat(&mut setter, "get_hits")
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // And it stays there: of the 200 gets, the few whose replies the
    // socket buffers and the mark hold were answered, and no more are
    // while others come and go. A send in flight when the state turned
    // may still land (the kernel grows a socket's buffers as it goes: a
    // suite run saw 8 hits, then 9), so the count is read once it has
    // held still for half a second: nothing outside the server tells
    // that its last send has landed, so that stillness is the condition,
    // polled as the state was above.
    let mut hits = stat(&mut setter, "get_hits");
    let mut still_since = Instant::now();
    while still_since.elapsed() < Duration::from_millis(500) {
        assert!(Instant::now() < deadline, "get hits kept growing: {hits}");
        std::thread::sleep(Duration::from_millis(10));
        let now = stat(&mut setter, "get_hits");
        if now != hits {
            (hits, still_since) = (now, Instant::now());
        }
    }
    assert!(
        hits < 100,
        "{hits} of 200 gets answered to a client that reads nothing"
    );
    for _ in 0..5 {
        assert_eq!(stat(&mut server.connect(), "get_hits"), hits);
    }
    // Meanwhile others are served promptly.
    let t = Instant::now();
    assert_eq!(
        ask(&mut setter, b"version\r\n", b"\r\n"),
        "VERSION 1.6.18\r\n"
    );
    assert!(t.elapsed() < Duration::from_secs(2));
    // The server did not buffer the 100 MB: its resident memory stays far below.
    let rss_kb = std::fs::read_to_string(format!("/proc/{}/status", server.pid()))
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("VmRSS:").map(|v| {
                v.trim()
                    .trim_end_matches(" kB")
                    .trim()
                    .parse::<u64>()
                    .unwrap()
            })
        })
        .unwrap();
    assert!(
        rss_kb < 60_000,
        "server RSS {rss_kb} kB while a client does not read"
    );
    // Now read everything: all 200 replies arrive intact.
    let mut total = 0usize;
    let mut buf = vec![0u8; 1 << 20];
    let want = 200 * (b"VALUE fat 0 500000\r\n".len() + 500_000 + b"\r\nEND\r\n".len());
    while total < want {
        let n = read_some(&mut slow, &mut buf).unwrap();
        assert!(n > 0, "EOF after {total} of {want} bytes");
        total += n;
    }
    assert_eq!(total, want);
    writer.join().unwrap().unwrap();
}

#[test]
fn unix_socket_with_mask() {
    let path = temp_path("unix.sock");
    let path_s = path.to_str().unwrap();
    let port = common::free_port();
    let port_s = port.to_string();
    let mut server = spawn_server(&["-s", path_s, "-a", "770", "-p", &port_s]);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o770);
    let mut s = UnixStream::connect(&path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"set u 0 0 2\r\nhi\r\nget u\r\n").unwrap();
    let got = read_until(&mut s, b"END\r\n");
    assert_eq!(got, b"STORED\r\nVALUE u 0 2\r\nhi\r\nEND\r\n");
    s.write_all(b"stats conns\r\n").unwrap();
    let got = String::from_utf8_lossy(&read_until(&mut s, b"END\r\n")).into_owned();
    assert!(got.contains(&format!(":addr unix:{path_s}\r\n")), "{got}");
    assert!(
        got.contains(&format!(":listen_addr unix:{path_s}\r\n")),
        "{got}"
    );
    // -s disables TCP entirely, even with -p.
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
    // SIGTERM: clean exit, socket file removed.
    server.signal("TERM");
    let status = server
        .wait_exit(Duration::from_secs(10))
        .expect("exit on SIGTERM");
    assert!(status.success(), "{status}");
    assert!(!path.exists(), "unix socket left behind");
}

#[test]
fn shutdown_command_needs_dash_a() {
    let server = spawn_server(&[]);
    let mut s = server.connect();
    assert_eq!(
        ask(&mut s, b"shutdown\r\n", b"\r\n"),
        "ERROR: shutdown not enabled\r\n"
    );

    let mut server = spawn_server(&["-A"]);
    let mut s = server.connect();
    let mut idle = server.connect();
    s.write_all(b"shutdown\r\n").unwrap();
    let status = server
        .wait_exit(Duration::from_secs(10))
        .expect("exit on shutdown");
    assert!(status.success(), "{status}");
    // Other connections were closed, and nothing listens any more.
    let mut rest = Vec::new();
    let _ = idle.read_to_end(&mut rest);
    assert!(TcpStream::connect(server.addr()).is_err());
}

/// SIGHUP's bit in /proc's signal masks.
const SIGHUP_BIT: u64 = 1;

/// A signal mask (`SigCgt`, `ShdPnd`, `SigPnd`) of /proc/<pid>/status, or of
/// a task's (`pid` as "pid/task/tid").
fn signal_mask(pid: impl std::fmt::Display, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0)
}

/// Whether a SIGHUP waits for delivery: to the process, or to one of its
/// threads.
fn sighup_pending(pid: u32) -> bool {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
        .unwrap_or_default();
    signal_mask(pid, "ShdPnd") & SIGHUP_BIT != 0
        || tasks.iter().any(|t| {
            signal_mask(format!("{pid}/task/{}", t.to_string_lossy()), "SigPnd") & SIGHUP_BIT != 0
        })
}

#[test]
fn pid_file_written_and_removed() {
    let pid_path = temp_path("cachalot.pid");
    let mut server = spawn_server(&["-P", pid_path.to_str().unwrap()]);
    let written = std::fs::read_to_string(&pid_path).expect("pid file");
    assert_eq!(written, format!("{}\n", server.pid()));
    // SIGHUP is survived, as by memcached: caught, and once the kernel has
    // delivered it (no longer pending), the server still answers.
    assert!(
        signal_mask(server.pid(), "SigCgt") & SIGHUP_BIT != 0,
        "SIGHUP is not caught"
    );
    server.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while sighup_pending(server.pid()) {
        assert!(Instant::now() < deadline, "SIGHUP never delivered");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        ask(&mut server.connect(), b"version\r\n", b"\r\n"),
        "VERSION 1.6.18\r\n"
    );
    assert!(server.try_wait().is_none(), "SIGHUP killed the server");
    server.signal("INT");
    let status = server
        .wait_exit(Duration::from_secs(10))
        .expect("exit on SIGINT");
    assert!(status.success(), "{status}");
    assert!(!pid_path.exists(), "pid file left behind");
}

#[test]
fn idle_timeout_closes_quiet_clients() {
    let server = spawn_server(&["-o", "idle_timeout=1"]);
    let mut quiet = server.connect();
    assert_eq!(
        ask(&mut quiet, b"version\r\n", b"\r\n"),
        "VERSION 1.6.18\r\n"
    );
    let t = Instant::now();
    let mut rest = Vec::new();
    quiet.read_to_end(&mut rest).expect("closed, not timed out");
    assert!(rest.is_empty());
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(6),
        "{waited:?}"
    );
}

#[test]
fn stats_conns_lists_listener_and_clients() {
    let server = spawn_server(&[]);
    let mut a = server.connect();
    // One client in the middle of a value, as memcached reports it.
    let mut b = server.connect();
    b.write_all(b"set half 0 0 10\r\nabc").unwrap();
    let port = server.port();
    let listen_line = format!(":listen_addr tcp:127.0.0.1:{port}\r\n");
    // A connect() returns before the server registered the connection, and
    // the helper's probe may not be closed yet: wait for exactly two.
    let deadline = Instant::now() + Duration::from_secs(5);
    let got = loop {
        let got = ask(&mut a, b"stats conns\r\n", b"END\r\n");
        if got.matches(&listen_line).count() == 2 && got.contains(":state conn_nread\r\n") {
            break got;
        }
        assert!(Instant::now() < deadline, "{got}");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(
        got.contains(&format!(":addr tcp:127.0.0.1:{port}\r\n")),
        "{got}"
    );
    assert!(got.contains(":state conn_listening\r\n"), "{got}");
    assert!(got.contains(":state conn_parse_cmd\r\n"), "{got}");
    assert_eq!(stat(&mut a, "curr_connections"), 2);
}

#[test]
fn daemon_mode_with_pid_file() {
    let pid_path = temp_path("daemon.pid");
    let port_path = temp_path("daemon.port");
    let status = Command::new(cachalot_bin())
        .args([
            "-d",
            "-u",
            "root",
            "-p",
            "-1",
            "-l",
            "127.0.0.1",
            "-U",
            "0",
            "-P",
        ])
        .arg(&pid_path)
        .env("MEMCACHED_PORT_FILENAME", &port_path)
        .stdin(Stdio::null())
        .status()
        .expect("run cachalot -d");
    // The parent returns at once; the daemon carries on.
    assert!(status.success(), "{status}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let (pid, port) = loop {
        let pid = std::fs::read_to_string(&pid_path)
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok());
        if let (Some(pid), Some(port)) = (pid, common::read_port_file(&port_path)) {
            break (pid, port);
        }
        assert!(
            Instant::now() < deadline,
            "no pid/port file from the daemon"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = std::fs::remove_file(&port_path);
    let r = TcpStream::connect(("127.0.0.1", port)).map(|mut s| {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        ask(&mut s, b"version\r\n", b"\r\n")
    });
    // Stop it before asserting, so a failure leaves no daemon behind.
    let killed = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert_eq!(r.expect("connect to daemon"), "VERSION 1.6.18\r\n");
    while pid_path.exists() {
        assert!(
            Instant::now() < deadline + Duration::from_secs(5),
            "daemon did not stop"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `-vv` in both log formats: memcached's connection lines as they are
/// (`text`, the default), or as logfmt events carrying those lines.
#[test]
fn connection_events_in_both_log_formats() {
    let wait_for = |server: &Server, needle: &str| {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let log = server.stderr();
            if log.contains(needle) {
                return log;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{needle:?} not in\n{log}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let text = Server::start(&["-vv"]);
    drop(text.connect());
    let log = wait_for(&text, "connection closed.");
    assert!(
        log.lines()
            .any(|l| l.starts_with('<') && l.ends_with(" new auto-negotiating client connection")),
        "{log}"
    );

    let structured = Server::start(&["-vv", "-o", "log_format=logfmt"]);
    drop(structured.connect());
    let log = wait_for(&structured, "event=conn_close");
    let open = log
        .lines()
        .find(|l| l.contains(" event=conn_open "))
        .unwrap_or_else(|| panic!("no conn_open in\n{log}"));
    assert!(
        open.starts_with("ts=") && open.contains(" level=info "),
        "{open}"
    );
    assert!(open.contains(" peer=tcp:127.0.0.1:"), "{open}");
    assert!(
        open.ends_with(" new auto-negotiating client connection\""),
        "{open}"
    );
    for line in log.lines() {
        assert!(
            line.starts_with("ts="),
            "a line that is not logfmt: {line:?}"
        );
    }
    let (code, _, err) = run_cli(&["-o", "log_format=json"]);
    assert_eq!((code, err.trim()), (1, "log_format must be text or logfmt"));
}
