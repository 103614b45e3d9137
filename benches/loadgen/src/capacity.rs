//! The capacity benchmark's pieces: a fast pipelined fill, a verifying
//! re-read, `stats`, and resident-memory sampling of the server process.
//!
//! The fill follows the issue: sets are pipelined over one raw socket with
//! `noreply` (or meta `ms ... q`), and one final `version` request marks the
//! end, so the fill runs at the server's speed rather than at one round trip
//! per item. A reader thread drains the socket meanwhile, so that any reply
//! the server does send (an error) can never fill the socket buffers and
//! deadlock the writer; such replies are counted and shown.
//!
//! Resident memory is read from /proc/<pid>/status (VmRSS sampled every
//! 10 ms, plus the kernel's own high-water mark VmHWM), as the issue asks,
//! with `cachalot_lab::rss`.

use std::io::{self, Write};
use std::net::TcpStream;
use std::ops::Range;
use std::time::{Duration, Instant};

use cachalot_protocol::client::request::meta::{self, Flag};
use cachalot_protocol::client::request::text::{self, Retrieve, Store, StoreOp};
use cachalot_protocol::client::{Reply, ReplyParser};

use crate::keys::{KeyMaker, Values};

/// How sets are written during the fill.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetProto {
    /// `set <key> 0 0 <n> noreply`
    Text,
    /// `ms <key> <n> q`
    Meta,
}

impl SetProto {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(SetProto::Text),
            "meta" => Ok(SetProto::Meta),
            _ => Err(format!("unknown protocol {s:?} (text or meta)")),
        }
    }
}

pub fn connect(addr: &str) -> io::Result<TcpStream> {
    let s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// Appends one quiet set of `key` to `out`.
pub fn push_set(out: &mut Vec<u8>, key: &[u8], value: &[u8], proto: SetProto) {
    match proto {
        SetProto::Text => Store::new(StoreOp::Set, key, value)
            .noreply(true)
            .encode(out),
        SetProto::Meta => meta::set(out, key, value, &[Flag::Bare(b'q')]),
    }
}

#[derive(Debug, Default)]
pub struct FillResult {
    pub items: u64,
    pub secs: f64,
    /// Replies other than the final VERSION (errors the server chose to send
    /// despite noreply).
    pub unexpected: u64,
    pub first_unexpected: Vec<String>,
}

/// Writes keys `range` with `values` and waits until the server has
/// processed them all; at most `rate` items a second if given (a flash
/// tier's writer keeps up with a paced fill, not with a burst).
pub fn fill(
    addr: &str,
    keys: &KeyMaker,
    range: Range<u64>,
    values: &Values,
    proto: SetProto,
    rate: Option<u64>,
) -> io::Result<FillResult> {
    let mut stream = connect(addr)?;
    let reader_stream = stream.try_clone()?;
    let reader = std::thread::spawn(move || drain_until_version(reader_stream));
    let start = Instant::now();
    let mut out = Vec::with_capacity(1 << 18);
    let mut value = Vec::with_capacity(values.size);
    let mut key = Vec::with_capacity(keys.len());
    let items = range.end.saturating_sub(range.start);
    let first = range.start;
    for i in range {
        values.write(i, &mut value);
        key.clear();
        keys.write(i, &mut key);
        push_set(&mut out, &key, &value, proto);
        if out.len() >= 1 << 18 {
            stream.write_all(&out)?;
            out.clear();
            if let Some(r) = rate.filter(|&r| r > 0) {
                let due = start + Duration::from_secs_f64((i - first) as f64 / r as f64);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
            }
        }
    }
    text::line(&mut out, &[b"version"]);
    stream.write_all(&out)?;
    let (unexpected, first_unexpected) = reader
        .join()
        .map_err(|_| io::Error::other("reader thread panicked"))??;
    Ok(FillResult {
        items,
        secs: start.elapsed().as_secs_f64(),
        unexpected,
        first_unexpected,
    })
}

/// Reads replies until a VERSION line; returns how many other replies came
/// and the first few of them.
fn drain_until_version(mut stream: TcpStream) -> io::Result<(u64, Vec<String>)> {
    let mut p = ReplyParser::new();
    let mut unexpected = 0u64;
    let mut first = Vec::new();
    loop {
        let f = p.pull_from(&mut stream)?;
        if f.reply.code() == b"VERSION" {
            return Ok((unexpected, first));
        }
        unexpected += 1;
        if first.len() < 5 {
            first.push(shown(f.raw));
        }
    }
}

/// The start of a reply, for a message.
fn shown(raw: &[u8]) -> String {
    String::from_utf8_lossy(&raw[..raw.len().min(120)]).into_owned()
}

/// Result of re-reading a range of keys.
#[derive(Debug, Default, Clone)]
pub struct RereadResult {
    /// (hits, keys asked) for each of `bands` equal slices of the range, in
    /// write order: the last band holds the most recently written keys.
    pub bands: Vec<(u64, u64)>,
    /// Hits whose data differed from what was written.
    pub corrupt: u64,
    pub secs: f64,
}

/// Reads back `range` with multi-key `get`s of `batch` keys and checks data.
pub fn reread(
    addr: &str,
    keys: &KeyMaker,
    range: Range<u64>,
    values: &Values,
    batch: usize,
    bands: usize,
) -> io::Result<RereadResult> {
    let mut stream = connect(addr)?;
    let start_t = Instant::now();
    let total = range.end.saturating_sub(range.start);
    let bands = bands.max(1);
    let mut res = RereadResult {
        bands: vec![(0, 0); bands],
        ..Default::default()
    };
    let band_of = |i: u64| -> usize {
        let off = i - range.start;
        ((u128::from(off) * bands as u128 / u128::from(total.max(1))) as usize).min(bands - 1)
    };
    let mut p = ReplyParser::new();
    let mut expect = Vec::with_capacity(values.size);
    let mut names = Vec::with_capacity(batch * keys.len());
    let mut req = Vec::with_capacity(batch * (keys.len() + 1) + 8);
    let mut i = range.start;
    while i < range.end {
        let end = (i + batch.max(1) as u64).min(range.end);
        names.clear();
        for k in i..end {
            keys.write(k, &mut names);
            res.bands[band_of(k)].1 += 1;
        }
        req.clear();
        // Every key has the same length, so the names cut back apart.
        text::retrieve(&mut req, Retrieve::Get, names.chunks(keys.len()));
        stream.write_all(&req)?;
        // Read VALUEs until END; keys come back in request order, but match
        // them by name anyway so a reordering server is not misjudged.
        loop {
            let f = p.pull_from(&mut stream)?;
            match f.reply {
                Reply::Line(b"END") => break,
                Reply::Value { key, data, .. } => {
                    match parse_key_index(key).filter(|k| (i..end).contains(k)) {
                        Some(k) => {
                            values.write(k, &mut expect);
                            if data == expect.as_slice() {
                                res.bands[band_of(k)].0 += 1;
                            } else {
                                res.corrupt += 1;
                            }
                        }
                        None => res.corrupt += 1,
                    }
                }
                _ => {
                    return Err(io::Error::other(format!(
                        "unexpected reply to get: {:?}",
                        shown(f.raw)
                    )))
                }
            }
        }
        i = end;
    }
    res.secs = start_t.elapsed().as_secs_f64();
    Ok(res)
}

/// The index encoded in a benchmark key (`key:000123` -> 123).
pub fn parse_key_index(key: &[u8]) -> Option<u64> {
    let digits = key.strip_prefix(crate::keys::KEY_PREFIX)?;
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// `stats` as (name, value) pairs.
pub fn stats(addr: &str) -> io::Result<Vec<(String, String)>> {
    let mut stream = connect(addr)?;
    let mut req = Vec::new();
    text::line(&mut req, &[b"stats"]);
    stream.write_all(&req)?;
    let mut p = ReplyParser::new();
    let mut out = Vec::new();
    loop {
        let f = p.pull_from(&mut stream)?;
        let Reply::Line(line) = f.reply else {
            return Err(io::Error::other(format!(
                "unexpected reply to stats: {:?}",
                shown(f.raw)
            )));
        };
        if line == b"END" {
            return Ok(out);
        }
        if let Some((name, value)) = f.reply.stat() {
            let text = |b| String::from_utf8_lossy(b).into_owned();
            out.push((text(name), text(value)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_meta_sets_are_well_formed() {
        let keys = KeyMaker::new(14).unwrap();
        let mut out = Vec::new();
        push_set(&mut out, &keys.key(5), b"ab\r\ncdefgh", SetProto::Text);
        assert_eq!(
            out,
            b"set key:0000000005 0 0 10 noreply\r\nab\r\ncdefgh\r\n"
        );
        out.clear();
        push_set(&mut out, &keys.key(5), b"xyz", SetProto::Meta);
        assert_eq!(out, b"ms key:0000000005 3 q\r\nxyz\r\n");
    }

    #[test]
    fn key_index_round_trips() {
        let keys = KeyMaker::new(14).unwrap();
        assert_eq!(parse_key_index(&keys.key(1_234_567)), Some(1_234_567));
        assert_eq!(parse_key_index(b"key:"), None);
        assert_eq!(parse_key_index(b"foo:12"), None);
        assert_eq!(parse_key_index(b"key:12a"), None);
    }
}
