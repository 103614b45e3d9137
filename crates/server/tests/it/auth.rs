//! ASCII authentication (`-Y authfile`, issue 13) against memcached 1.6.18
//! as the oracle: the same scripts, sent to both servers on one
//! connection a chunk at a time, get the same bytes back, and the same
//! connections are closed. Then the start-up refusals, and a user's view:
//! wrong credentials are refused, right ones serve, and the counters agree.

use crate::common;

use std::io::{ErrorKind, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::{temp_path, Memcached, Server};

struct AuthFile(std::path::PathBuf);

impl AuthFile {
    fn new(contents: &str) -> AuthFile {
        let path = temp_path("authfile");
        std::fs::write(&path, contents).expect("write the auth file");
        AuthFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("utf-8 temp path")
    }
}

impl Drop for AuthFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// What a connection got back after each chunk: the bytes that arrived
/// until it went quiet, and "<closed>" once the server closed it.
fn run(addr: SocketAddr, chunks: &[&[u8]]) -> Vec<String> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_millis(150)))
        .expect("timeout");
    let mut got = Vec::new();
    for chunk in chunks {
        if s.write_all(chunk).is_err() {
            got.push("<closed>".to_string());
            break;
        }
        let mut bytes = Vec::new();
        let mut buf = [0u8; 4096];
        let closed = loop {
            match common::read_some(&mut s, &mut buf) {
                Ok(0) => break true,
                Ok(n) => bytes.extend_from_slice(&buf[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    break false
                }
                Err(_) => break true,
            }
        };
        got.push(String::from_utf8_lossy(&bytes).into_owned());
        if closed {
            got.push("<closed>".to_string());
            break;
        }
    }
    got
}

const USERS: &str = "alice:secret\nbob:a:b\n:anon\n";

/// One request per chunk before authentication: memcached 1.6.18 answers
/// only the last of several requests that arrive together then
/// (`pipelined_requests_before_authentication_each_get_a_reply`).
fn scripts() -> Vec<Vec<Vec<u8>>> {
    let big = |n: usize| {
        let mut v = format!("set x 0 0 {n}\r\nalice secret ").into_bytes();
        v.resize(v.len() + n - 13, b'a');
        v.extend_from_slice(b"\r\n");
        v
    };
    let s = |parts: &[&[u8]]| parts.iter().map(|p| p.to_vec()).collect::<Vec<_>>();
    vec![
        s(&[b"get foo\r\n", b"set foo 0 0 3\r\nbar\r\n", b"get foo\r\n"]),
        s(&[
            b"set x 0 0 12\r\nalice secret\r\n",
            b"set foo 0 0 3\r\nbar\r\n",
            b"get foo\r\n",
        ]),
        s(&[
            b"set x 0 0 11\r\nalice wrong\r\n",
            b"get foo\r\n",
            b"version\r\n",
        ]),
        s(&[b"quit\r\n", b"version\r\n"]),
        s(&[b"mg foo v\r\n", b"ms foo 2\r\n", b"hi\r\n", b"stats\r\n"]),
        s(&[
            b"add x 0 0 12\r\n",
            b"alice secret\r\n",
            b"set x 0 0 abc\r\n",
            b"set x 0 0 -1\r\n",
        ]),
        s(&[b"set x 0 0 12 noreply\r\nalice secret\r\n", b"version\r\n"]),
        s(&[b"set x 5 100 16\r\nalice  secret xx\r\n", b"version\r\n"]),
        s(&[b"set x 0 0 7\r\nbob a:b\r\n", b"version\r\n"]),
        s(&[b"set x 0 0 5\r\n anon\r\n", b"version\r\n"]),
        s(&[b"set x 0 0 12\r\nalice secret\n\n", b"get foo\r\n"]),
        s(&[
            b"set x 0 0 12\r\n\0lice secret\r\n",
            b"set x 0 0 12\r\nalice secre\0\r\n",
        ]),
        s(&[
            b"set x 0 0 12\r\nalice:secret\r\n",
            b"set x 0 0 5\r\nalice\r\n",
        ]),
        s(&[b"set x 0 0 12\n", b"alice secre", b"t\r\n", b"get foo\n"]),
        s(&[
            b"set x 0 0 12\r\nalice secret\r\nget foo\r\n",
            b"version\r\n",
        ]),
        s(&[b"\x80\x0b\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\r\n"]),
        vec![big(16_382), b"version\r\n".to_vec()],
        vec![big(16_383), b"version\r\n".to_vec()],
    ]
}

#[test]
fn replies_match_memcached() {
    let users = AuthFile::new(USERS);
    let memcached = Memcached::start(&["-Y", users.path()]);
    let cachalot = Server::start(&["-Y", users.path()]);
    for script in scripts() {
        let chunks: Vec<&[u8]> = script.iter().map(|c| &c[..]).collect();
        let want = run(memcached.addr(), &chunks);
        let got = run(cachalot.addr(), &chunks);
        assert_eq!(
            got,
            want,
            "script {:?}",
            chunks
                .iter()
                .map(|c| String::from_utf8_lossy(&c[..c.len().min(60)]).into_owned())
                .collect::<Vec<_>>()
        );
    }
    // The counters, as memcached keeps them.
    let counters = |addr| {
        let r = run(addr, &[b"set x 0 0 12\r\nalice secret\r\nstats\r\n"]);
        r[0].lines()
            .filter(|l| l.starts_with("STAT auth_"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(counters(cachalot.addr()), counters(memcached.addr()));
}

#[test]
fn a_user_with_the_wrong_password_is_refused_and_the_right_one_served() {
    let users = AuthFile::new(USERS);
    let server = Server::start(&["-Y", users.path()]);
    let r = run(
        server.addr(),
        &[
            b"set k 0 0 2\r\nhi\r\n",
            b"set u 0 0 11\r\nalice wrong\r\n",
            b"get k\r\n",
        ],
    );
    assert_eq!(
        r,
        [
            "CLIENT_ERROR bad authentication token format\r\n",
            "CLIENT_ERROR authentication failure\r\n",
            "CLIENT_ERROR unauthenticated\r\n"
        ]
    );
    let r = run(
        server.addr(),
        &[
            b"set u 0 0 12\r\nalice secret\r\n",
            b"set k 0 0 2\r\nhi\r\n",
            b"get k\r\n",
            b"stats settings\r\n",
        ],
    );
    assert_eq!(
        r[..3],
        ["STORED\r\n", "STORED\r\n", "VALUE k 0 2\r\nhi\r\nEND\r\n"]
    );
    assert!(r[3].contains("STAT auth_enabled_ascii yes\r\n"), "{}", r[3]);
    assert!(r[3].contains("STAT binding_protocol ascii\r\n"), "{}", r[3]);
}

#[test]
fn start_up_refusals_match_memcached() {
    let users = AuthFile::new(USERS);
    let bad = AuthFile::new("alice:secret\nnocolon\n");
    let missing = temp_path("no-such-authfile");
    let missing = missing.to_str().expect("utf-8");
    for (args, code, message) in [
        (
            vec!["-Y", users.path(), "-B", "binary"],
            64,
            "ERROR: You cannot allow the BINARY protocol while using ascii authentication tokens."
                .to_string(),
        ),
        (
            vec!["-Y", bad.path()],
            1,
            format!(
                "Authfile [{}] has a malformed entry. Should be 'user:password'",
                bad.path()
            ),
        ),
        (
            vec!["-Y", missing],
            1,
            format!(
                "Could not open authfile [{missing}] for reading, error No such file or \
                 directory: No such file or directory"
            ),
        ),
    ] {
        let out = std::process::Command::new(common::cachalot_bin())
            .args(["-p", "0", "-U", "0", "-u", "root"])
            .args(&args)
            .output()
            .expect("run cachalot");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(stderr.contains(&message), "{args:?}: {stderr}");
    }
}

/// Where cachalot differs from memcached on purpose (docs/protocol.md):
/// memcached 1.6.18 answers only the last of the requests that arrive
/// together before authentication; cachalot answers every one, in order.
#[test]
fn pipelined_requests_before_authentication_each_get_a_reply() {
    let users = AuthFile::new(USERS);
    let memcached = Memcached::start(&["-Y", users.path()]);
    let cachalot = Server::start(&["-Y", users.path()]);
    let script: &[&[u8]] = &[b"get a\r\nget b\r\nset x 0 0 12\r\nalice secret\r\nversion\r\n"];
    let unauth = "CLIENT_ERROR unauthenticated\r\n";
    let version = run(cachalot.addr(), &[b"version\r\n"]);
    assert_eq!(version, [unauth]);
    let got = run(cachalot.addr(), script);
    assert_eq!(
        got,
        [format!("{unauth}{unauth}STORED\r\nVERSION 1.6.18\r\n")]
    );
    // The oracle's side, so that the difference stays a known one.
    assert_eq!(
        run(memcached.addr(), script),
        ["STORED\r\nVERSION 1.6.18\r\n"]
    );
}
