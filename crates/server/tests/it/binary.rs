//! End-to-end tests of the binary protocol against a running `cachalot`.
//!
//! Every expectation here was first checked against memcached 1.6.18: set
//! `CACHALOT_BINARY_TEST_ADDR=127.0.0.1:PORT` to run this file against any
//! server (e.g. a real memcached) instead of a spawned cachalot. Requests are
//! encoded by hand here rather than with the codec under test, so a
//! symmetric bug in the codec cannot hide itself.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::common;

/// The server under test: spawned cachalot (stopped on drop) or an external one.
struct Server {
    addr: String,
    _guard: Option<common::Server>,
}

fn server() -> Server {
    if let Ok(addr) = std::env::var("CACHALOT_BINARY_TEST_ADDR") {
        return Server { addr, _guard: None };
    }
    let s = common::Server::start(&[]);
    Server {
        addr: s.addr().to_string(),
        _guard: Some(s),
    }
}

fn req(op: u8, opaque: u32, cas: u64, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut v = vec![0x80, op];
    v.extend_from_slice(&(key.len() as u16).to_be_bytes());
    v.push(extras.len() as u8);
    v.extend_from_slice(&[0, 0, 0]);
    v.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
    v.extend_from_slice(&opaque.to_be_bytes());
    v.extend_from_slice(&cas.to_be_bytes());
    v.extend_from_slice(extras);
    v.extend_from_slice(key);
    v.extend_from_slice(value);
    v
}

fn set_ex(flags: u32, exptime: u32) -> Vec<u8> {
    [flags.to_be_bytes(), exptime.to_be_bytes()].concat()
}

fn arith_ex(delta: u64, initial: u64, exptime: u32) -> Vec<u8> {
    [
        &delta.to_be_bytes()[..],
        &initial.to_be_bytes()[..],
        &exptime.to_be_bytes()[..],
    ]
    .concat()
}

const GET: u8 = 0x00;
const SET: u8 = 0x01;
const ADD: u8 = 0x02;
const REPLACE: u8 = 0x03;
const DELETE: u8 = 0x04;
const INCR: u8 = 0x05;
const DECR: u8 = 0x06;
const QUIT: u8 = 0x07;
const FLUSH: u8 = 0x08;
const GETQ: u8 = 0x09;
const NOOP: u8 = 0x0a;
const VERSION: u8 = 0x0b;
const GETK: u8 = 0x0c;
const GETKQ: u8 = 0x0d;
const APPEND: u8 = 0x0e;
const PREPEND: u8 = 0x0f;
const STAT: u8 = 0x10;
const SETQ: u8 = 0x11;
const ADDQ: u8 = 0x12;
const REPLACEQ: u8 = 0x13;
const DELETEQ: u8 = 0x14;
const INCRQ: u8 = 0x15;
const DECRQ: u8 = 0x16;
const QUITQ: u8 = 0x17;
const FLUSHQ: u8 = 0x18;
const APPENDQ: u8 = 0x19;
const PREPENDQ: u8 = 0x1a;
const VERBOSITY: u8 = 0x1b;
const TOUCH: u8 = 0x1c;
const GAT: u8 = 0x1d;
const GATQ: u8 = 0x1e;
const SASL_LIST: u8 = 0x20;
const SASL_AUTH: u8 = 0x21;
const SASL_STEP: u8 = 0x22;
const GATK: u8 = 0x23;
const GATKQ: u8 = 0x24;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Resp {
    op: u8,
    status: u16,
    opaque: u32,
    cas: u64,
    extras: Vec<u8>,
    key: Vec<u8>,
    value: Vec<u8>,
}

impl Resp {
    fn text(&self) -> &str {
        std::str::from_utf8(&self.value).unwrap_or("<binary>")
    }
}

struct Client {
    s: TcpStream,
}

impl Client {
    fn new(srv: &Server) -> Client {
        let s = TcpStream::connect(&srv.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_nodelay(true).unwrap();
        Client { s }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).expect("write");
    }

    fn recv(&mut self) -> Resp {
        let mut h = [0u8; 24];
        self.s.read_exact(&mut h).expect("response header");
        assert_eq!(h[0], 0x81, "response magic");
        assert_eq!(h[5], 0, "data type");
        let key_len = u16::from_be_bytes([h[2], h[3]]) as usize;
        let ext_len = h[4] as usize;
        let body_len = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
        let mut body = vec![0u8; body_len];
        self.s.read_exact(&mut body).expect("response body");
        Resp {
            op: h[1],
            status: u16::from_be_bytes([h[6], h[7]]),
            opaque: u32::from_be_bytes([h[12], h[13], h[14], h[15]]),
            cas: u64::from_be_bytes(h[16..24].try_into().unwrap()),
            extras: body[..ext_len].to_vec(),
            key: body[ext_len..ext_len + key_len].to_vec(),
            value: body[ext_len + key_len..].to_vec(),
        }
    }

    /// Send one request and read its one response.
    fn call(&mut self, bytes: &[u8]) -> Resp {
        self.send(bytes);
        self.recv()
    }

    /// Read responses up to and including the No-op with this opaque.
    fn until_noop(&mut self, opaque: u32) -> Vec<Resp> {
        let mut v = Vec::new();
        loop {
            let r = self.recv();
            let done = r.op == NOOP && r.opaque == opaque;
            v.push(r);
            if done {
                return v;
            }
        }
    }

    /// The server closed the connection (reading hits EOF) without sending more.
    fn expect_closed(&mut self) {
        let mut buf = [0u8; 64];
        match self.s.read(&mut buf) {
            Ok(0) => {}
            Ok(n) => panic!("expected close, got {n} more bytes: {:?}", &buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("expected close, got {e}"),
        }
    }

    fn set(&mut self, key: &[u8], value: &[u8], flags: u32) -> u64 {
        let r = self.call(&req(SET, 0, 0, &set_ex(flags, 0), key, value));
        assert_eq!((r.status, r.text()), (0, ""), "set {key:?}");
        assert_ne!(r.cas, 0);
        r.cas
    }
}

fn ops(rs: &[Resp]) -> Vec<(u8, u16, u32)> {
    rs.iter().map(|r| (r.op, r.status, r.opaque)).collect()
}

#[test]
fn noop_version_and_opaque_echo() {
    let srv = server();
    let mut c = Client::new(&srv);
    let r = c.call(&req(NOOP, 0xdeadbeef, 0, &[], &[], &[]));
    assert_eq!(
        (r.op, r.status, r.opaque, r.cas, r.value.len()),
        (NOOP, 0, 0xdeadbeef, 0, 0)
    );
    let r = c.call(&req(VERSION, 7, 99, &[], &[], &[]));
    assert_eq!((r.op, r.status, r.opaque, r.cas), (VERSION, 0, 7, 0));
    assert_eq!(r.text(), "1.6.18");
}

#[test]
fn set_get_getk_with_flags_and_cas() {
    let srv = server();
    let mut c = Client::new(&srv);
    let cas = c.set(b"e2e:k", b"hello", 0xcafef00d);
    let r = c.call(&req(GET, 1, 0, &[], b"e2e:k", &[]));
    assert_eq!(
        r,
        Resp {
            op: GET,
            status: 0,
            opaque: 1,
            cas,
            extras: 0xcafef00du32.to_be_bytes().to_vec(),
            key: vec![],
            value: b"hello".to_vec(),
        }
    );
    let r = c.call(&req(GETK, 2, 0, &[], b"e2e:k", &[]));
    assert_eq!(
        (&r.key[..], &r.value[..], r.cas),
        (&b"e2e:k"[..], &b"hello"[..], cas)
    );
    // Misses: Get says "Not found"; GetK carries the key and no text.
    let r = c.call(&req(GET, 3, 0, &[], b"e2e:missing", &[]));
    assert_eq!(
        (r.status, r.text(), r.extras.len(), r.cas),
        (1, "Not found", 0, 0)
    );
    let r = c.call(&req(GETK, 4, 0, &[], b"e2e:missing", &[]));
    assert_eq!(
        (r.status, &r.key[..], r.value.len()),
        (1, &b"e2e:missing"[..], 0)
    );
    // A binary-safe value and a 250-byte key round-trip.
    let value: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
    let key = vec![b'x'; 250];
    c.set(&key, &value, 1);
    let r = c.call(&req(GET, 5, 0, &[], &key, &[]));
    assert_eq!(r.value, value);
}

#[test]
fn add_replace_append_prepend() {
    let srv = server();
    let mut c = Client::new(&srv);
    let ex = set_ex(5, 0);
    assert_eq!(c.call(&req(ADD, 0, 0, &ex, b"e2e:a", b"1")).status, 0);
    let r = c.call(&req(ADD, 0, 0, &ex, b"e2e:a", b"2"));
    assert_eq!((r.op, r.status, r.text()), (ADD, 2, "Data exists for key."));
    let r = c.call(&req(REPLACE, 0, 0, &ex, b"e2e:none", b"2"));
    assert_eq!((r.op, r.status, r.text()), (REPLACE, 1, "Not found"));
    let r = c.call(&req(APPEND, 0, 0, &[], b"e2e:none", b"2"));
    assert_eq!((r.op, r.status, r.text()), (APPEND, 5, "Not stored."));
    let r = c.call(&req(PREPEND, 0, 0, &[], b"e2e:none", b"2"));
    assert_eq!((r.op, r.status, r.text()), (PREPEND, 5, "Not stored."));
    assert_eq!(c.call(&req(REPLACE, 0, 0, &ex, b"e2e:a", b"m")).status, 0);
    let r = c.call(&req(APPEND, 0, 0, &[], b"e2e:a", b">"));
    assert_eq!((r.status, r.value.len()), (0, 0));
    assert_ne!(r.cas, 0);
    assert_eq!(c.call(&req(PREPEND, 0, 0, &[], b"e2e:a", b"<")).status, 0);
    let r = c.call(&req(GET, 0, 0, &[], b"e2e:a", &[]));
    // Append/prepend keep the item's flags.
    assert_eq!(
        (&r.value[..], &r.extras[..]),
        (&b"<m>"[..], &5u32.to_be_bytes()[..])
    );
}

#[test]
fn compare_and_swap() {
    let srv = server();
    let mut c = Client::new(&srv);
    let ex = set_ex(0, 0);
    let cas = c.set(b"e2e:cas", b"v1", 0);
    let r = c.call(&req(SET, 0, cas + 1, &ex, b"e2e:cas", b"v2"));
    assert_eq!((r.status, r.text(), r.cas), (2, "Data exists for key.", 0));
    let r = c.call(&req(SET, 0, 12345, &ex, b"e2e:nocas", b"v2"));
    assert_eq!((r.status, r.text()), (1, "Not found"));
    let r = c.call(&req(SET, 0, cas, &ex, b"e2e:cas", b"v2"));
    assert_eq!(r.status, 0);
    assert!(r.cas != cas && r.cas != 0);
    let cas2 = r.cas;
    // A CAS on add/replace is a compare-and-swap whatever the opcode.
    let r = c.call(&req(ADD, 0, cas2, &ex, b"e2e:cas", b"v3"));
    assert_eq!(r.status, 0);
    let cas3 = r.cas;
    let r = c.call(&req(APPEND, 0, cas2, &[], b"e2e:cas", b"!"));
    assert_eq!((r.status, r.text()), (2, "Data exists for key."));
    let r = c.call(&req(DELETE, 0, cas2, &[], b"e2e:cas", &[]));
    assert_eq!((r.status, r.text()), (2, "Data exists for key."));
    let r = c.call(&req(DELETE, 0, cas3, &[], b"e2e:cas", &[]));
    assert_eq!((r.status, r.cas, r.value.len()), (0, 0, 0));
    let r = c.call(&req(DELETE, 0, 0, &[], b"e2e:cas", &[]));
    assert_eq!((r.status, r.text()), (1, "Not found"));
}

#[test]
fn incr_and_decr() {
    let srv = server();
    let mut c = Client::new(&srv);
    let r = c.call(&req(
        INCR,
        1,
        0,
        &arith_ex(1, 9, 0xffff_ffff),
        b"e2e:n",
        &[],
    ));
    assert_eq!((r.op, r.status, r.text()), (INCR, 1, "Not found"));
    let r = c.call(&req(INCR, 2, 0, &arith_ex(1, 9, 0), b"e2e:n", &[]));
    assert_eq!(
        (r.status, r.value.clone(), r.extras.len()),
        (0, 9u64.to_be_bytes().to_vec(), 0)
    );
    assert_ne!(r.cas, 0);
    let r = c.call(&req(INCR, 3, 0, &arith_ex(5, 9, 0), b"e2e:n", &[]));
    assert_eq!(r.value, 14u64.to_be_bytes());
    let r = c.call(&req(DECR, 4, 0, &arith_ex(100, 9, 0), b"e2e:n", &[]));
    assert_eq!((r.op, &r.value[..]), (DECR, &0u64.to_be_bytes()[..]));
    // The stored value is the decimal text, with flags 0; memcached rewrites
    // a shorter result in place, padded with spaces.
    let g = c.call(&req(GET, 5, 0, &[], b"e2e:n", &[]));
    assert_eq!((&g.value[..], &g.extras[..]), (&b"0 "[..], &[0u8; 4][..]));
    // Wrap-around at 2^64 and a length change of the text.
    c.set(b"e2e:big", b"18446744073709551615", 0);
    let r = c.call(&req(INCR, 6, 0, &arith_ex(2, 0, 0), b"e2e:big", &[]));
    assert_eq!(r.value, 1u64.to_be_bytes());
    let r = c.call(&req(
        INCR,
        7,
        r.cas + 1,
        &arith_ex(2, 0, 0),
        b"e2e:big",
        &[],
    ));
    assert_eq!((r.status, r.text()), (2, "Data exists for key."));
    c.set(b"e2e:text", b"abc", 0);
    let r = c.call(&req(DECR, 8, 0, &arith_ex(1, 0, 0), b"e2e:text", &[]));
    assert_eq!(
        (r.status, r.text()),
        (6, "Non-numeric server-side value for incr or decr")
    );
}

#[test]
fn touch_gat_gatk() {
    let srv = server();
    let mut c = Client::new(&srv);
    let cas = c.set(b"e2e:t", b"val", 42);
    let ex = 1000u32.to_be_bytes();
    let r = c.call(&req(TOUCH, 1, 0, &ex, b"e2e:t", &[]));
    assert_eq!(
        (
            r.op,
            r.status,
            &r.extras[..],
            r.key.len(),
            r.value.len(),
            r.cas
        ),
        (TOUCH, 0, &42u32.to_be_bytes()[..], 0, 0, cas)
    );
    let r = c.call(&req(GAT, 2, 0, &ex, b"e2e:t", &[]));
    assert_eq!(
        (&r.value[..], r.key.len(), &r.extras[..]),
        (&b"val"[..], 0, &42u32.to_be_bytes()[..])
    );
    let r = c.call(&req(GATK, 3, 0, &ex, b"e2e:t", &[]));
    assert_eq!((&r.value[..], &r.key[..]), (&b"val"[..], &b"e2e:t"[..]));
    let r = c.call(&req(TOUCH, 4, 0, &ex, b"e2e:none", &[]));
    assert_eq!((r.status, r.text()), (1, "Not found"));
    let r = c.call(&req(GAT, 5, 0, &ex, b"e2e:none", &[]));
    assert_eq!((r.status, r.text()), (1, "Not found"));
    let r = c.call(&req(GATK, 6, 0, &ex, b"e2e:none", &[]));
    assert_eq!(
        (r.status, &r.key[..], r.value.len()),
        (1, &b"e2e:none"[..], 0)
    );
    // A negative-looking (huge) exptime is an absolute time far ahead; a
    // small absolute time in the past expires the item at once.
    let r = c.call(&req(
        GAT,
        7,
        0,
        &(30 * 24 * 3600 + 1u32).to_be_bytes(),
        b"e2e:t",
        &[],
    ));
    assert_eq!(r.status, 0);
    let r = c.call(&req(GET, 8, 0, &[], b"e2e:t", &[]));
    assert_eq!(r.status, 1);
}

#[test]
fn quiet_commands_in_one_pipeline() {
    let srv = server();
    let mut c = Client::new(&srv);
    let ex = set_ex(0, 0);
    let ax = arith_ex(1, 0, 0);
    let t = 100u32.to_be_bytes();
    let batch = [
        req(SETQ, 1, 0, &ex, b"q:a", b"A"),
        req(ADDQ, 2, 0, &ex, b"q:a", b"x"), // exists: sent
        req(ADDQ, 3, 0, &ex, b"q:b", b"B"),
        req(REPLACEQ, 4, 0, &ex, b"q:b", b"b"),
        req(REPLACEQ, 5, 0, &ex, b"q:none", b"x"), // not found: sent
        req(APPENDQ, 6, 0, &[], b"q:b", b"+"),
        req(PREPENDQ, 7, 0, &[], b"q:b", b"-"),
        req(APPENDQ, 8, 0, &[], b"q:none", b"x"), // not stored: sent
        req(GETQ, 9, 0, &[], b"q:a", &[]),        // hit: sent
        req(GETQ, 10, 0, &[], b"q:none", &[]),
        req(GETKQ, 11, 0, &[], b"q:b", &[]), // hit: sent
        req(GETKQ, 12, 0, &[], b"q:none", &[]),
        req(INCRQ, 13, 0, &ax, b"q:n", &[]),
        req(DECRQ, 14, 0, &ax, b"q:n", &[]),
        req(INCRQ, 15, 0, &ax, b"q:a", &[]), // non-numeric: sent
        req(GATQ, 16, 0, &t, b"q:a", &[]),   // hit: sent
        req(GATKQ, 17, 0, &t, b"q:none", &[]),
        req(DELETEQ, 18, 0, &[], b"q:a", &[]),
        req(DELETEQ, 19, 0, &[], b"q:a", &[]), // not found: sent
        req(NOOP, 20, 0, &[], &[], &[]),
    ]
    .concat();
    c.send(&batch);
    let rs = c.until_noop(20);
    assert_eq!(
        ops(&rs),
        vec![
            (ADDQ, 2, 2),
            (REPLACEQ, 1, 5),
            (APPENDQ, 5, 8),
            (GETQ, 0, 9),
            (GETKQ, 0, 11),
            (INCRQ, 6, 15),
            (GATQ, 0, 16),
            (DELETEQ, 1, 19),
            (NOOP, 0, 20),
        ]
    );
    assert_eq!(rs[1].text(), "Not found");
    assert_eq!(rs[3].value, b"A");
    assert_eq!(
        (&rs[4].key[..], &rs[4].value[..]),
        (&b"q:b"[..], &b"-b+"[..])
    );
    let r = c.call(&req(GET, 0, 0, &[], b"q:n", &[]));
    assert_eq!(r.value, b"0");
    // FlushQ is silent too.
    c.send(
        &[
            req(FLUSHQ, 21, 0, &[], &[], &[]),
            req(NOOP, 22, 0, &[], &[], &[]),
        ]
        .concat(),
    );
    assert_eq!(ops(&c.until_noop(22)), vec![(NOOP, 0, 22)]);
    assert_eq!(c.call(&req(GET, 0, 0, &[], b"q:b", &[])).status, 1);
}

#[test]
fn deep_pipeline() {
    let srv = server();
    let mut c = Client::new(&srv);
    let ex = set_ex(0, 0);
    let mut batch = Vec::new();
    for i in 0..2000u32 {
        batch.extend(req(
            SETQ,
            i,
            0,
            &ex,
            format!("p:{i}").as_bytes(),
            &i.to_be_bytes(),
        ));
    }
    for i in 0..2000u32 {
        batch.extend(req(
            GETKQ,
            i,
            0,
            &[],
            format!("p:{}", i * 2).as_bytes(),
            &[],
        ));
    }
    batch.extend(req(NOOP, u32::MAX, 0, &[], &[], &[]));
    c.send(&batch);
    let rs = c.until_noop(u32::MAX);
    // Keys 0, 2, .., 1998 hit; 2000.. miss silently.
    assert_eq!(rs.len(), 1001);
    for (n, r) in rs[..1000].iter().enumerate() {
        let i = n as u32 * 2;
        assert_eq!((r.op, r.opaque), (GETKQ, n as u32));
        assert_eq!(r.key, format!("p:{i}").into_bytes());
        assert_eq!(r.value, i.to_be_bytes());
    }
}

#[test]
fn flush_and_delayed_flush() {
    let srv = server();
    let mut c = Client::new(&srv);
    c.set(b"f:a", b"1", 0);
    let r = c.call(&req(FLUSH, 3, 0, &[], &[], &[]));
    assert_eq!((r.op, r.status, r.opaque, r.cas), (FLUSH, 0, 3, 0));
    assert_eq!(c.call(&req(GET, 0, 0, &[], b"f:a", &[])).status, 1);
    c.set(b"f:a", b"1", 0);
    // Flush in 100 s: the item is still there now.
    let r = c.call(&req(FLUSH, 4, 0, &100u32.to_be_bytes(), &[], &[]));
    assert_eq!(r.status, 0);
    assert_eq!(c.call(&req(GET, 0, 0, &[], b"f:a", &[])).status, 0);
    // A zero delay in the extras flushes now.
    c.call(&req(FLUSH, 5, 0, &0u32.to_be_bytes(), &[], &[]));
    assert_eq!(c.call(&req(GET, 0, 0, &[], b"f:a", &[])).status, 1);
}

#[test]
fn stats_packets() {
    let srv = server();
    let mut c = Client::new(&srv);
    c.set(b"s:a", b"1", 0);
    let read_group = |c: &mut Client, key: &[u8], opaque: u32| {
        c.send(&req(STAT, opaque, 0, &[], key, &[]));
        let mut v = Vec::new();
        loop {
            let r = c.recv();
            assert_eq!(
                (r.op, r.opaque, r.cas, r.extras.len()),
                (STAT, opaque, 0, 0)
            );
            if r.status != 0 {
                v.push(r);
                return v;
            }
            let end = r.key.is_empty() && r.value.is_empty();
            v.push(r);
            if end {
                return v;
            }
        }
    };
    let get = |v: &[Resp], k: &str| {
        v.iter()
            .find(|r| r.key == k.as_bytes())
            .map(|r| r.text().to_string())
    };
    let all = read_group(&mut c, b"", 1);
    assert!(all.len() > 20);
    assert_eq!(get(&all, "version").as_deref(), Some("1.6.18"));
    assert!(get(&all, "pid").is_some() && get(&all, "curr_items").is_some());
    let settings = read_group(&mut c, b"settings", 2);
    assert_eq!(get(&settings, "item_size_max").as_deref(), Some("1048576"));
    let slabs = read_group(&mut c, b"slabs", 3);
    assert!(get(&slabs, "active_slabs").is_some());
    let items = read_group(&mut c, b"items", 4);
    assert!(items.iter().any(|r| r.key.ends_with(b":number")));
    for bad in [&b"nosuch"[..], b"conns", b"detail"] {
        let r = read_group(&mut c, bad, 5);
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].status, r[0].text()), (1, "Not found"));
    }
    // reset (matched by prefix): just the terminator, and counters restart.
    let r = read_group(&mut c, b"reset", 6);
    assert_eq!(r.len(), 1);
    c.call(&req(GET, 0, 0, &[], b"s:a", &[]));
    let all = read_group(&mut c, b"", 7);
    assert_eq!(get(&all, "get_hits").as_deref(), Some("1"));
    assert_eq!(get(&all, "cmd_get").as_deref(), Some("1"));
}

#[test]
fn unknown_commands_keep_the_connection() {
    let srv = server();
    let mut c = Client::new(&srv);
    for op in [VERBOSITY, SASL_LIST, 0x25, 0x30, 0x81, 0xff] {
        // A body-less unknown request: "Unknown command", nothing swallowed.
        let r = c.call(&req(op, 9, 0, &[], &[], &[]));
        assert_eq!(
            (r.op, r.status, r.text(), r.opaque),
            (op, 0x81, "Unknown command", 9)
        );
    }
    // SASL auth/step without SASL: unknown, the mechanism data is discarded.
    c.send(
        &[
            req(SASL_AUTH, 1, 0, &[], b"PLAIN", b"\0user\0secret"),
            req(SASL_STEP, 2, 0, &[], b"PLAIN", b"more"),
            req(NOOP, 3, 0, &[], &[], &[]),
        ]
        .concat(),
    );
    assert_eq!(
        ops(&c.until_noop(3)),
        vec![(SASL_AUTH, 0x81, 1), (SASL_STEP, 0x81, 2), (NOOP, 0, 3)]
    );
    // memcached swallows an unknown opcode's whole body length after its
    // extras and key: with only a value, exactly the value goes.
    c.send(
        &[
            req(0x42, 4, 0, &[], &[], b"payload"),
            req(NOOP, 5, 0, &[], &[], &[]),
        ]
        .concat(),
    );
    assert_eq!(ops(&c.until_noop(5)), vec![(0x42, 0x81, 4), (NOOP, 0, 5)]);
    // Verbosity with its 4 extras eats 4 more bytes.
    c.send(
        &[
            req(VERBOSITY, 6, 0, &1u32.to_be_bytes(), &[], &[]),
            vec![0; 4],
            req(NOOP, 7, 0, &[], &[], &[]),
        ]
        .concat(),
    );
    assert_eq!(
        ops(&c.until_noop(7)),
        vec![(VERBOSITY, 0x81, 6), (NOOP, 0, 7)]
    );
}

#[test]
fn oversized_values_are_refused_and_swallowed() {
    let srv = server();
    let mut c = Client::new(&srv);
    c.set(b"big:s", b"old", 0);
    c.set(b"big:a", b"old", 0);
    let big = vec![b'z'; 2 << 20];
    let ex = set_ex(0, 0);
    c.send(
        &[
            req(SET, 1, 0, &ex, b"big:s", &big),
            req(ADD, 2, 0, &ex, b"big:a", &big),
            req(APPENDQ, 3, 0, &[], b"big:a", &big),
            req(SETQ, 4, 0, &ex, b"big:new", &big),
            req(GET, 5, 0, &[], b"big:s", &[]),
            req(GET, 6, 0, &[], b"big:a", &[]),
            req(NOOP, 7, 0, &[], &[], &[]),
        ]
        .concat(),
    );
    let rs = c.until_noop(7);
    assert_eq!(
        ops(&rs),
        vec![
            (SET, 3, 1),
            (ADD, 3, 2),
            (APPENDQ, 3, 3),
            (SETQ, 3, 4),
            (GET, 1, 5),
            (GET, 0, 6),
            (NOOP, 0, 7)
        ]
    );
    assert_eq!(rs[0].text(), "Too large.");
    // The failed set removed the old value; the failed add left it.
    assert_eq!(rs[5].value, b"old");
    // A value just under the limit is stored and read back whole.
    let fits = vec![b'y'; 1_000_000];
    c.set(b"big:fits", &fits, 0);
    assert_eq!(c.call(&req(GET, 8, 0, &[], b"big:fits", &[])).value, fits);
}

#[test]
fn quit_and_quitq_close() {
    let srv = server();
    let mut c = Client::new(&srv);
    let r = c.call(&req(QUIT, 5, 0, &[], &[], &[]));
    assert_eq!((r.op, r.status, r.opaque), (QUIT, 0, 5));
    c.expect_closed();
    let mut c = Client::new(&srv);
    c.send(&req(QUITQ, 5, 0, &[], &[], &[]));
    c.expect_closed();
}

#[test]
fn protocol_errors_answer_then_close() {
    let srv = server();
    let invalid = [
        req(GET, 1, 0, &[], &[b'k'; 251], &[]), // key too long
        req(GET, 1, 0, &[], &[], &[]),          // no key
        req(GET, 1, 0, &[0; 4], b"k", &[]),     // extras on get
        req(SET, 1, 0, &[0; 4], b"k", b"v"),    // short set extras
        req(DELETE, 1, 0, &[], b"k", b"v"),     // value on delete
        req(INCR, 1, 0, &[0; 16], b"k", &[]),   // short incr extras
        req(NOOP, 1, 0, &[], &[], b"x"),        // body on noop
        req(TOUCH, 1, 0, &[], b"k", &[]),       // touch without extras
        req(FLUSH, 1, 0, &[0; 2], &[], &[]),    // odd flush extras
        req(SASL_AUTH, 1, 0, &[], &[], b"x"),   // auth without mechanism
    ];
    for bad in invalid {
        let mut c = Client::new(&srv);
        c.send(&[bad.clone(), req(NOOP, 2, 0, &[], &[], &[])].concat());
        let r = c.recv();
        assert_eq!(
            (r.status, r.text(), r.opaque),
            (4, "Invalid arguments", 1),
            "{bad:?}"
        );
        c.expect_closed();
    }
    // Key + extras longer than the body: "Unknown command", then close.
    let mut c = Client::new(&srv);
    let mut b = req(GET, 1, 0, &[], b"key", &[]);
    b[8..12].copy_from_slice(&1u32.to_be_bytes());
    c.send(&b);
    let r = c.recv();
    assert_eq!((r.status, r.text()), (0x81, "Unknown command"));
    c.expect_closed();
}

#[test]
fn bad_magic_closes_silently() {
    let srv = server();
    let mut c = Client::new(&srv);
    c.set(b"m:k", b"v", 0);
    let mut bad = req(NOOP, 1, 0, &[], &[], &[]);
    bad[0] = 0x81;
    c.send(&bad);
    c.expect_closed();
}

#[test]
fn requests_split_across_writes() {
    let srv = server();
    let mut c = Client::new(&srv);
    let stream = [
        req(SET, 1, 0, &set_ex(3, 0), b"split:k", &vec![b'v'; 3000]),
        req(GETK, 2, 0, &[], b"split:k", &[]),
        req(NOOP, 3, 0, &[], &[], &[]),
    ]
    .concat();
    for piece in stream.chunks(7) {
        c.send(piece);
        std::thread::sleep(Duration::from_micros(200));
    }
    let rs = c.until_noop(3);
    assert_eq!(ops(&rs), vec![(SET, 0, 1), (GETK, 0, 2), (NOOP, 0, 3)]);
    assert_eq!(rs[1].value.len(), 3000);
}
