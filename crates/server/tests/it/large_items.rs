//! Values larger than a page with `-I 32m -m 64`, through the text, meta and
//! binary protocols: cachalot chains them over 512 KB chunks (pages stay
//! 1 MB), memcached over its `slab_chunk_max` chunks. The same conversation
//! runs against a real memcached (`$MEMCACHED_BIN` or /usr/bin/memcached).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use cachalot_protocol::client::request::binary;
use cachalot_protocol::client::{Reply, ReplyParser};

use crate::common;

const ARGS: [&str; 4] = ["-I", "32m", "-m", "64"];
/// memcached's largest value for a 1-byte key without flags under -I 32m:
/// its 48-byte header, 8 bytes of CAS, the key and its NUL, the CRLF.
const AT_LIMIT: usize = (32 << 20) - 48 - 8 - 2 - 2;

struct Conn(TcpStream);

impl Conn {
    fn open(addr: SocketAddr) -> Conn {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        Conn(s)
    }

    /// Send `req`, read exactly `want.len()` bytes and compare.
    fn expect(&mut self, req: &[u8], want: &[u8], what: &str) {
        self.0.write_all(req).expect("send");
        let mut got = vec![0u8; want.len()];
        if let Err(e) = self.0.read_exact(&mut got) {
            panic!("{what}: reply cut short: {e}");
        }
        if got != want {
            let at = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
            panic!(
                "{what}: reply differs at byte {at}: got {:?}, want {:?}",
                got[at..(at + 60).min(got.len())].escape_ascii().to_string(),
                want[at..(at + 60).min(want.len())]
                    .escape_ascii()
                    .to_string()
            );
        }
    }
}

/// A value with CRLFs and every byte value in it.
fn value(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| match i % 1000 {
            998 => b'\r',
            999 => b'\n',
            _ => (i as u8).wrapping_mul(31).wrapping_add(salt),
        })
        .collect()
}

fn with(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// A binary GET for `key` and its reply, through the client codec (flags
/// 0; the CAS is not checked).
fn binary_get(c: &mut Conn, key: &[u8], v: &[u8]) {
    let mut req = Vec::new();
    binary::request(&mut req, binary::Opcode::Get as u8, 0, 0, &[], key, &[]);
    c.0.write_all(&req).expect("send");
    let mut replies = ReplyParser::new();
    loop {
        match replies.pull() {
            Ok(Some(frame)) => {
                let Reply::Binary(r) = frame.reply else {
                    panic!("binary GET: not a binary reply: {:?}", frame.reply)
                };
                assert_eq!(r.header.vbucket_or_status, 0, "status");
                assert_eq!(r.extras, &[0; 4], "flags");
                assert!(r.value == v, "binary value");
                return;
            }
            Ok(None) => {
                let n = replies.read_from(&mut c.0).expect("binary reply");
                assert!(n > 0, "binary GET: connection closed");
            }
            Err(e) => panic!("binary GET: {e:?}"),
        }
    }
}

fn conversation(addr: SocketAddr) {
    let mut c = Conn::open(addr);
    // A connection's first byte picks its protocol.
    let mut bin = Conn::open(addr);
    for (i, len) in [(1 << 20) + 1, 2 << 20, 16 << 20, AT_LIMIT]
        .into_iter()
        .enumerate()
    {
        let v = value(len, i as u8);
        let n = len.to_string();
        let n = n.as_bytes();
        let what = format!("{len} bytes");
        c.expect(
            &with(&[b"set k 0 0 ", n, b"\r\n", &v, b"\r\n"]),
            b"STORED\r\n",
            &what,
        );
        c.expect(
            b"get k\r\n",
            &with(&[b"VALUE k 0 ", n, b"\r\n", &v, b"\r\nEND\r\n"]),
            &what,
        );
        c.expect(
            &with(&[b"ms m ", n, b" F0\r\n", &v, b"\r\n"]),
            b"HD\r\n",
            &what,
        );
        c.expect(
            b"mg m s f v\r\n",
            &with(&[b"VA ", n, b" s", n, b" f0\r\n", &v, b"\r\n"]),
            &what,
        );
        binary_get(&mut bin, b"m", &v);
    }
    // One byte over memcached's limit: refused, and the old value dropped.
    let over = (AT_LIMIT + 1).to_string();
    c.expect(
        &with(&[
            b"set k 0 0 ",
            over.as_bytes(),
            b"\r\n",
            &vec![b'x'; AT_LIMIT + 1],
            b"\r\n",
        ]),
        b"SERVER_ERROR object too large for cache\r\n",
        "over the limit",
    );
    c.expect(b"get k\r\n", b"END\r\n", "dropped by the failed set");
    // Append and prepend grow an item across the chunk limit and past a page.
    let (a, b, p) = (value(400_000, 1), value(700_000, 2), value(300_000, 3));
    c.expect(
        &with(&[b"set g 0 0 400000\r\n", &a, b"\r\n"]),
        b"STORED\r\n",
        "g",
    );
    c.expect(
        &with(&[b"append g 0 0 700000\r\n", &b, b"\r\n"]),
        b"STORED\r\n",
        "append",
    );
    c.expect(
        &with(&[b"prepend g 0 0 300000\r\n", &p, b"\r\n"]),
        b"STORED\r\n",
        "prepend",
    );
    c.expect(
        b"get g\r\n",
        &with(&[b"VALUE g 0 1400000\r\n", &p, &a, &b, b"\r\nEND\r\n"]),
        "grown",
    );
    // incr on it is refused; touch, gat, delete work as on any item.
    c.expect(
        b"incr g 1\r\n",
        b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
        "incr",
    );
    c.expect(b"touch g 100\r\n", b"TOUCHED\r\n", "touch");
    c.expect(
        b"gat 0 g\r\n",
        &with(&[b"VALUE g 0 1400000\r\n", &p, &a, &b, b"\r\nEND\r\n"]),
        "gat",
    );
    c.expect(b"delete g\r\n", b"DELETED\r\n", "delete");
    c.expect(b"get g\r\n", b"END\r\n", "deleted");
    c.expect(b"flush_all\r\n", b"OK\r\n", "flush");
    c.expect(b"mg m v\r\n", b"EN\r\n", "flushed");
}

/// `stats settings` and the slab classes: 512 KB chunks, 1 MB pages.
#[test]
fn cachalot_stores_values_over_pages() {
    let server = common::Server::start(&ARGS);
    conversation(server.addr());
    let settings = String::from_utf8(server.ask(b"stats settings\r\n", b"END\r\n")).unwrap();
    assert!(settings.contains("STAT item_size_max 33554432\r\n"));
    assert!(settings.contains("STAT slab_chunk_max 524288\r\n"));
    let slabs = String::from_utf8(server.ask(b"stats slabs\r\n", b"END\r\n")).unwrap();
    let largest = slabs
        .lines()
        .filter_map(|l| {
            l.split_once(":chunk_size ")
                .map(|(_, n)| n.trim().parse::<u64>().unwrap())
        })
        .max();
    assert_eq!(largest, Some(512 << 10), "{slabs}");
    let malloced: u64 = slabs
        .lines()
        .find_map(|l| l.strip_prefix("STAT total_malloced "))
        .and_then(|n| n.trim().parse().ok())
        .expect("total_malloced");
    assert!(
        malloced <= 64 << 20 && malloced.is_multiple_of(1 << 20),
        "{malloced}"
    );
}

#[test]
fn memcached_agrees() {
    let mc = common::Memcached::start(&ARGS);
    conversation(mc.addr());
}
