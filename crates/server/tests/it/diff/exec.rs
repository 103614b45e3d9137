//! Runs a sequence against memcached and cachalot side by side and compares
//! their replies byte for byte, batch by batch.
//!
//! Each batch (a pipeline) is written at once, followed by a sentinel (`mn`,
//! or a binary NOOP with opaque `SENTINEL`); the replies up to the sentinel's
//! are that batch's. CAS uniques are not masked but *mapped*: each server's
//! uniques are numbered in the order they first appear in its replies, and
//! the comparison sees the numbers, so a CAS that should have changed and
//! did not (or the reverse) still differs. A request that sends a CAS from an
//! earlier reply gets each server's own unique for the same position.

use std::collections::HashMap;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use cachalot_protocol::client::request::{binary, meta, text};
use cachalot_protocol::client::{Reply, ReplyParser};

use super::gen::{CasArg, Cmd, Key, MFlag, Seq, Step, TextStore};

/// Opaque of the binary NOOP that ends a batch (generated opaques are lower).
pub const SENTINEL: u32 = u32::MAX;

/// A reply slower than this is a hang (a release build answers in ms).
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// A CAS that neither server hands out during a run.
const BOGUS_CAS: u64 = 1 << 62;

/// Each server's uniques in order of first appearance, and the order they
/// were last seen in (for [`CasArg::Recent`]).
#[derive(Default)]
struct CasMap {
    number: HashMap<u64, usize>,
    unique: Vec<u64>,
    recent: Vec<usize>,
}

impl CasMap {
    fn see(&mut self, cas: u64) -> usize {
        let n = *self.number.entry(cas).or_insert_with(|| {
            self.unique.push(cas);
            self.unique.len()
        });
        self.recent.push(n);
        n
    }

    fn resolve(&self, arg: CasArg) -> u64 {
        match arg {
            CasArg::Recent(back) => self
                .recent
                .len()
                .checked_sub(back + 1)
                .map_or(BOGUS_CAS, |i| self.unique[self.recent[i] - 1]),
            CasArg::Bogus => BOGUS_CAS,
        }
    }
}

/// Append `cmd` as `prefix`'s keys and this server's CAS values make it.
pub fn render(cmd: &Cmd, prefix: &[u8], cas: &dyn Fn(CasArg) -> u64, out: &mut Vec<u8>) {
    let key = |k: &Key| k.render(prefix);
    match cmd {
        Cmd::Store {
            op,
            key: k,
            flags,
            exptime,
            value,
            noreply,
        } => {
            let op = match *op {
                TextStore::Set => text::StoreOp::Set,
                TextStore::Add => text::StoreOp::Add,
                TextStore::Replace => text::StoreOp::Replace,
                TextStore::Append => text::StoreOp::Append,
                TextStore::Prepend => text::StoreOp::Prepend,
                TextStore::Cas(a) => text::StoreOp::Cas(cas(a)),
            };
            text::Store::new(op, &key(k), value)
                .flags(*flags)
                .exptime(*exptime)
                .noreply(*noreply)
                .encode(out);
        }
        Cmd::Retrieve {
            cas: with_cas,
            exptime,
            keys,
        } => {
            let op = match (exptime, with_cas) {
                (None, false) => text::Retrieve::Get,
                (None, true) => text::Retrieve::Gets,
                (Some(e), false) => text::Retrieve::Gat(*e),
                (Some(e), true) => text::Retrieve::Gats(*e),
            };
            let keys: Vec<Vec<u8>> = keys.iter().map(key).collect();
            text::retrieve(out, op, keys.iter().map(Vec::as_slice));
        }
        Cmd::Delete { key: k, noreply } => text::delete(out, &key(k), *noreply),
        Cmd::Arith {
            incr,
            key: k,
            delta,
            noreply,
        } => text::arith(out, *incr, &key(k), *delta, *noreply),
        Cmd::Touch {
            key: k,
            exptime,
            noreply,
        } => text::touch(out, &key(k), *exptime, *noreply),
        Cmd::FlushAll { delay, noreply } => text::flush_all(out, *delay, *noreply),
        Cmd::Version => text::line(out, &[b"version"]),
        Cmd::Verbosity { noreply } => {
            let tokens: &[&[u8]] = if *noreply {
                &[b"verbosity", b"1", b"noreply"]
            } else {
                &[b"verbosity", b"1"]
            };
            text::line(out, tokens)
        }
        Cmd::Meta {
            op,
            key: k,
            value,
            flags,
        } => {
            let k = key(k);
            let flags: Vec<meta::Flag<'_>> = flags
                .iter()
                .map(|f| match f {
                    MFlag::Bare(c) => meta::Flag::Bare(*c),
                    MFlag::Int(c, n) => meta::Flag::Int(*c, *n),
                    MFlag::Cas(c, a) => meta::Flag::Uint(*c, cas(*a)),
                    MFlag::Token(c, t) => meta::Flag::Bytes(*c, t),
                })
                .collect();
            match *op {
                "mg" => meta::get(out, &k, &flags),
                "ms" => meta::set(out, &k, value.as_deref().unwrap_or_default(), &flags),
                "md" => meta::delete(out, &k, &flags),
                "ma" => meta::arith(out, &k, &flags),
                _ => meta::noop(out),
            }
        }
        Cmd::Binary {
            opcode,
            opaque,
            cas: c,
            extras,
            key: k,
            value,
        } => {
            let k = k.as_ref().map(key).unwrap_or_default();
            let c = c.map_or(0, cas);
            binary::request(out, *opcode, *opaque, c, extras, &k, value);
        }
        Cmd::Line { head, key: k, tail } => {
            out.extend_from_slice(head.as_bytes());
            out.extend_from_slice(&key(k));
            out.extend_from_slice(tail.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Cmd::Sleep { .. } => {}
    }
}

/// One server's side of a run: its connection and its CAS numbering.
struct Side {
    addr: SocketAddr,
    conn: Option<(TcpStream, ReplyParser)>,
    cas: CasMap,
}

impl Side {
    fn connect(&mut self) -> &mut (TcpStream, ReplyParser) {
        self.conn.get_or_insert_with(|| {
            let s = TcpStream::connect(self.addr).expect("connect to a server under test");
            s.set_nodelay(true).expect("nodelay");
            s.set_read_timeout(Some(REPLY_TIMEOUT)).expect("timeout");
            s.set_write_timeout(Some(REPLY_TIMEOUT)).expect("timeout");
            (s, ReplyParser::new())
        })
    }

    /// Send one batch and return its replies, normalized.
    fn batch(&mut self, steps: &[Step], prefix: &[u8], binary: bool) -> Vec<u8> {
        let mut req = Vec::new();
        for s in steps {
            let cas = |a| self.cas.resolve(a);
            render(&s.cmd, prefix, &cas, &mut req);
        }
        // Every `mn` answers `MN`, with or without extra tokens: miscounting
        // one leaves the rest of the batch running on the server after the
        // run (a trailing `flush_all` then hits the next sequence's keys).
        let mut want_mn = 1 + steps
            .iter()
            .filter(|s| match &s.cmd {
                Cmd::Meta { op, .. } => *op == "mn",
                Cmd::Line { head, .. } => head.trim_end() == "mn",
                _ => false,
            })
            .count();
        if binary {
            binary::request(&mut req, 0x0a, SENTINEL, 0, &[], &[], &[]);
        } else {
            meta::noop(&mut req);
        }
        let mut writer = self.connect().0.try_clone().expect("clone socket");
        let mut out = Vec::new();
        // A large pipeline is written from a second thread: the server may
        // answer (and fill its socket) before it has read it all.
        std::thread::scope(|sc| {
            // A failed write is not recorded: the server closed the
            // connection, which the reading side sees and records.
            let w = if req.len() > 32 * 1024 {
                Some(sc.spawn(|| writer.write_all(&req)))
            } else {
                let _ = writer.write_all(&req);
                None
            };
            self.read_until_sentinel(binary, &mut want_mn, &mut out);
            if let Some(w) = w {
                let _ = w.join();
            }
        });
        out
    }

    fn read_until_sentinel(&mut self, binary: bool, want_mn: &mut usize, out: &mut Vec<u8>) {
        let Some((stream, parser)) = self.conn.as_mut() else {
            return;
        };
        loop {
            match parser.pull() {
                Ok(Some(f)) => {
                    let done = match f.reply {
                        Reply::Binary(r) => {
                            binary && r.header.opcode == 0x0a && r.header.opaque == SENTINEL
                        }
                        Reply::Line(b"MN") if !binary => {
                            *want_mn -= 1;
                            *want_mn == 0
                        }
                        _ => false,
                    };
                    if done {
                        return;
                    }
                    normalize(&f.reply, f.raw, &mut self.cas, out);
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    out.extend_from_slice(format!("<{e}>").as_bytes());
                    self.conn = None;
                    return;
                }
            }
            match parser.read_from(stream) {
                Ok(0) => {
                    out.extend_from_slice(b"<connection closed>");
                    self.conn = None;
                    return;
                }
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // A server that closes with requests still unread sends a
                // reset instead of a FIN, depending on how much of the
                // pipeline it had read: the same outcome for the client.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    out.extend_from_slice(b"<connection closed>");
                    self.conn = None;
                    return;
                }
                Err(e) => {
                    out.extend_from_slice(format!("<read failed: {}>", e.kind()).as_bytes());
                    self.conn = None;
                    return;
                }
            }
        }
    }
}

/// The frame's bytes with every CAS unique replaced by its number.
fn normalize(reply: &Reply<'_>, raw: &[u8], cas: &mut CasMap, out: &mut Vec<u8>) {
    if let Reply::Binary(r) = reply {
        out.extend_from_slice(&raw[..16]);
        let n = if r.header.cas == 0 {
            0
        } else {
            cas.see(r.header.cas) as u64
        };
        out.extend_from_slice(&n.to_be_bytes());
        out.extend_from_slice(&raw[24..]);
        return;
    }
    let line_end = raw
        .windows(2)
        .position(|w| w == b"\r\n")
        .unwrap_or(raw.len());
    let (line, rest) = raw.split_at(line_end);
    let meta = matches!(reply.code(), b"VA" | b"HD" | b"EN" | b"NF" | b"NS" | b"EX");
    let text_cas = matches!(reply, Reply::Value { cas: Some(_), .. });
    let tokens: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
    for (i, t) in tokens.iter().enumerate() {
        if i > 0 {
            out.push(b' ');
        }
        let digits = |d: &[u8]| !d.is_empty() && d.iter().all(u8::is_ascii_digit);
        let number = |d: &[u8]| {
            std::str::from_utf8(d)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
        };
        if text_cas && i == 4 {
            if let Some(c) = number(t) {
                out.extend_from_slice(format!("#{}", cas.see(c)).as_bytes());
                continue;
            }
        }
        if meta && i > 0 && t.first() == Some(&b'c') && digits(&t[1..]) {
            if let Some(c) = number(&t[1..]) {
                out.extend_from_slice(format!("c#{}", cas.see(c)).as_bytes());
                continue;
            }
        }
        out.extend_from_slice(t);
    }
    out.extend_from_slice(rest);
}

/// Where two servers first disagreed.
pub struct Difference {
    /// Index of the first step of the batch.
    pub first_step: usize,
    pub steps: usize,
    pub memcached: Vec<u8>,
    pub cachalot: Vec<u8>,
    /// The (equal) replies of each earlier batch, normalized.
    pub earlier: Vec<Vec<u8>>,
}

/// The batches of `steps`: a batch starts at each step marked `new_batch`.
fn batches(steps: &[Step]) -> Vec<std::ops::Range<usize>> {
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        match out.last_mut() {
            Some(b) if !s.new_batch && !s.cmd.needs_fresh_batch() => b.end = i + 1,
            _ => out.push(i..i + 1),
        }
    }
    out
}

/// Run `steps` (keys under `prefix`) on both servers; the first batch whose
/// replies differ, if any.
pub fn run(
    memcached: SocketAddr,
    cachalot: SocketAddr,
    seq: &Seq,
    steps: &[Step],
    prefix: &[u8],
) -> Option<Difference> {
    let binary = seq.family == super::gen::Family::Binary;
    let mut sides = [memcached, cachalot].map(|addr| Side {
        addr,
        conn: None,
        cas: CasMap::default(),
    });
    let mut earlier = Vec::new();
    for b in batches(steps) {
        if let Cmd::Sleep { ms } = steps[b.start].cmd {
            std::thread::sleep(Duration::from_millis(ms));
        }
        let [m, c] = &mut sides;
        let (rm, rc) = std::thread::scope(|sc| {
            let h = sc.spawn(|| m.batch(&steps[b.clone()], prefix, binary));
            let rc = c.batch(&steps[b.clone()], prefix, binary);
            (h.join().expect("memcached side"), rc)
        });
        if rm != rc {
            return Some(Difference {
                first_step: b.start,
                steps: b.len(),
                memcached: rm,
                cachalot: rc,
                earlier,
            });
        }
        earlier.push(rm);
    }
    // One more sentinel: nothing may come before it. Otherwise the harness
    // lost count of a batch's replies, and its requests would still be
    // running on the server when the next sequence starts.
    for side in &mut sides {
        if side.conn.is_some() {
            let left = side.batch(&[], prefix, binary);
            assert!(
                left.is_empty(),
                "seed {}: replies left after the last batch from {}: {}",
                seq.seed,
                side.addr,
                show(&left, 300)
            );
        }
    }
    None
}

/// Bytes as an escaped string, long runs cut.
pub fn show(bytes: &[u8], max: usize) -> String {
    let mut s = String::new();
    for &b in bytes.iter().take(max) {
        match b {
            b'\r' => s.push_str("\\r"),
            b'\n' => s.push_str("\\n"),
            b'\\' => s.push_str("\\\\"),
            0x20..=0x7e => s.push(b as char),
            _ => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    if bytes.len() > max {
        s.push_str(&format!("...({} bytes)", bytes.len()));
    }
    s
}

/// A step as a reader wants it: the request bytes (a CAS taken from an
/// earlier reply shown as its position n, see the note), or the binary
/// header fields.
pub fn describe(step: &Step, prefix: &[u8]) -> String {
    let mark = if step.new_batch { "| " } else { "  " };
    match &step.cmd {
        Cmd::Binary {
            opcode,
            opaque,
            cas,
            extras,
            key,
            value,
        } => format!(
            "{mark}binary op=0x{opcode:02x} opaque={opaque} cas={cas:?} extras={} key={} value={}",
            show(extras, 40),
            key.map_or(String::new(), |k| show(&k.render(prefix), 60)),
            show(value, 60)
        ),
        Cmd::Sleep { ms } => format!("{mark}(sleep {ms} ms)"),
        cmd => {
            let mut b = Vec::new();
            render(
                cmd,
                prefix,
                &|a| match a {
                    CasArg::Recent(n) => n as u64,
                    CasArg::Bogus => BOGUS_CAS,
                },
                &mut b,
            );
            let cas_note = if cmd.needs_fresh_batch() {
                "  (CAS field n: the n-th latest CAS seen, 0 = the latest)"
            } else {
                ""
            };
            format!("{mark}{}{cas_note}", show(&b, 160))
        }
    }
}
