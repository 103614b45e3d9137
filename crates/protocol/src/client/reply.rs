//! Incremental parser for what a memcached server sends back, in any of its
//! three protocols: text (`VALUE` blocks, `END`, `STORED`, ...), meta (`VA`
//! with its data block, `HD`, `EN`, `NF`, `NS`, `EX`, `MN`, `ME`, ...) and
//! binary (24-byte header and body). Formats: memcached's doc/protocol.txt
//! and protocol_binary.h.
//!
//! A reply stream is cut into *frames*, each one unit the server wrote: one
//! line, one line with its data block, or one binary packet. The frame's kind
//! is told by its bytes alone (a binary response starts with 0x81, which no
//! text line does), so the parser needs no knowledge of the requests and one
//! connection may mix protocols as memcached allows. A text retrieval reply is
//! several frames (`VALUE`s, then `END`); every other reply is one frame.
//!
//! A server under test may be buggy: nothing here trusts the bytes. A frame is
//! reported only once all its bytes are there, and a stream that cannot be a
//! reply (a line not ended by `\r\n`, a data block without its `\r\n`, binary
//! lengths that overrun the body, an overlong line) is an error, never a
//! panic. Whether a prefix is an error or "need more" never changes as more
//! bytes arrive, so however the stream is split, the frames are the same.

use std::io::Read;
use std::ops::Range;

use crate::binary::{Header, Response, HEADER_LEN, RES_MAGIC};

/// Longest reply line waited for. memcached's longest lines (`ME` and
/// `lru_crawler metadump` output, `VALUE` with a 250-byte key) are far below.
pub const MAX_LINE: usize = 64 * 1024;

/// Largest data block a `VALUE` or `VA` line may announce: memcached's `-I`
/// stops at 1 GB.
pub const MAX_DATA: u64 = 1 << 30;

/// One frame of a reply stream, borrowing the bytes it was parsed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply<'a> {
    /// Text `VALUE <key> <flags> <bytes> [<cas>]\r\n<data>\r\n`.
    Value {
        key: &'a [u8],
        flags: u32,
        cas: Option<u64>,
        data: &'a [u8],
    },
    /// Meta `VA <bytes> <flags>*\r\n<data>\r\n`; `flags` is the rest of the
    /// line after the length (empty, or the return flags such as `c5 t-1`).
    MetaValue { flags: &'a [u8], data: &'a [u8] },
    /// Any other line, without its `\r\n`: `END`, `STORED`, `HD c5`, `EN`,
    /// `MN`, `ME <key> ...`, `VERSION 1.6.18`, `CLIENT_ERROR ...`, `STAT ...`.
    Line(&'a [u8]),
    /// A binary response packet.
    Binary(Response<'a>),
}

impl<'a> Reply<'a> {
    /// The first word: `VALUE`, `VA`, `END`, `HD`, `SERVER_ERROR`, ...; empty
    /// for a binary packet.
    pub fn code(&self) -> &'a [u8] {
        match *self {
            Reply::Value { .. } => b"VALUE",
            Reply::MetaValue { .. } => b"VA",
            Reply::Line(l) => l.split(|&b| b == b' ').next().unwrap_or(l),
            Reply::Binary(_) => b"",
        }
    }

    /// The meta return flags: the tokens after the code (after the length
    /// for `VA`). Empty for text values and binary packets.
    pub fn meta_flags(&self) -> impl Iterator<Item = &'a [u8]> {
        let rest: &'a [u8] = match *self {
            Reply::MetaValue { flags, .. } => flags,
            Reply::Line(l) => l
                .iter()
                .position(|&b| b == b' ')
                .map_or(&[], |p| &l[p + 1..]),
            _ => &[],
        };
        rest.split(|&b| b == b' ').filter(|t| !t.is_empty())
    }

    /// The value of meta return flag `flag` (`c` gives the CAS digits of
    /// `HD c123`), if present.
    pub fn meta_flag(&self, flag: u8) -> Option<&'a [u8]> {
        self.meta_flags()
            .find(|t| t.first() == Some(&flag))
            .map(|t| &t[1..])
    }

    /// A `stats` line's name and value: `STAT curr_items 5` gives
    /// (`curr_items`, `5`); the value is the rest of the line.
    pub fn stat(&self) -> Option<(&'a [u8], &'a [u8])> {
        let Reply::Line(l) = *self else { return None };
        let rest = l.strip_prefix(b"STAT ")?;
        let p = rest.iter().position(|&b| b == b' ')?;
        Some((&rest[..p], &rest[p + 1..]))
    }
}

/// Why the bytes cannot be a reply stream. `offset` is where the bad frame
/// starts: in the buffer given to [`parse_reply`], or in the whole stream
/// for [`ReplyParser`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyError {
    pub offset: u64,
    pub reason: &'static str,
}

impl std::fmt::Display for ReplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "bad reply at byte {}: {}", self.offset, self.reason)
    }
}

impl std::error::Error for ReplyError {}

fn bad<T>(reason: &'static str) -> Result<T, ReplyError> {
    Err(ReplyError { offset: 0, reason })
}

/// A decimal number as memcached prints it: digits only, no sign.
#[inline]
fn number(tok: Option<&[u8]>) -> Option<u64> {
    let tok = tok?;
    if tok.is_empty() || tok.len() > 20 {
        return None;
    }
    tok.iter().try_fold(0u64, |n, &c| {
        c.is_ascii_digit()
            .then_some(())
            .and(n.checked_mul(10)?.checked_add(u64::from(c - b'0')))
    })
}

/// A data block of `len` bytes starting at `at`, followed by `\r\n`: its end.
#[inline]
fn data_block(buf: &[u8], at: usize, len: u64) -> Result<Option<usize>, ReplyError> {
    if len > MAX_DATA {
        return bad("data block longer than 1 GB");
    }
    let data_end = at + len as usize;
    let end = data_end + 2;
    if buf.len() < end {
        return Ok(None);
    }
    if &buf[data_end..end] != b"\r\n" {
        return bad("data block not followed by \\r\\n");
    }
    Ok(Some(end))
}

/// Parse the frame at the front of `buf`: `Ok(None)` while it is incomplete,
/// else the frame and the bytes it takes.
#[inline]
pub fn parse_reply(buf: &[u8]) -> Result<Option<(Reply<'_>, usize)>, ReplyError> {
    match buf.first() {
        None => Ok(None),
        Some(&RES_MAGIC) => parse_binary(buf),
        Some(_) => parse_line(buf),
    }
}

#[inline]
fn parse_binary(buf: &[u8]) -> Result<Option<(Reply<'_>, usize)>, ReplyError> {
    let Some(header) = Header::parse(buf) else {
        return Ok(None);
    };
    let ext_end = HEADER_LEN + header.extras_len as usize;
    let key_end = ext_end + header.key_len as usize;
    if u64::from(header.body_len) > MAX_DATA + 512 {
        return bad("binary body longer than 1 GB");
    }
    let end = HEADER_LEN + header.body_len as usize;
    if key_end > end {
        return bad("binary extras and key overrun the body");
    }
    if buf.len() < end {
        return Ok(None);
    }
    let response = Response {
        header,
        extras: &buf[HEADER_LEN..ext_end],
        key: &buf[ext_end..key_end],
        value: &buf[key_end..end],
    };
    Ok(Some((Reply::Binary(response), end)))
}

#[inline]
fn parse_line(buf: &[u8]) -> Result<Option<(Reply<'_>, usize)>, ReplyError> {
    let window = &buf[..buf.len().min(MAX_LINE)];
    let Some(nl) = memchr::memchr(b'\n', window) else {
        if buf.len() >= MAX_LINE {
            return bad("reply line longer than 64 KB");
        }
        return Ok(None);
    };
    if nl == 0 || buf[nl - 1] != b'\r' {
        return bad("line not ended by \\r\\n");
    }
    let line = &buf[..nl - 1];
    let after = nl + 1;
    if let Some(rest) = line.strip_prefix(b"VALUE ") {
        // The key may be long: find its end with memchr, then split the few
        // short numbers after it (the load generator's hot path).
        let (key, nums) = match memchr::memchr(b' ', rest) {
            Some(p) => (&rest[..p], &rest[p + 1..]),
            None => (rest, &rest[rest.len()..]),
        };
        let mut t = nums.split(|&b| b == b' ');
        let key = Some(key).filter(|k| !k.is_empty());
        let flags = number(t.next()).and_then(|f| u32::try_from(f).ok());
        let len = number(t.next());
        let cas = match t.next() {
            None => Some(None),
            some => number(some).map(Some),
        };
        let (Some(key), Some(flags), Some(len), Some(cas), None) = (key, flags, len, cas, t.next())
        else {
            return bad("malformed VALUE line");
        };
        return Ok(data_block(buf, after, len)?.map(|end| {
            let data = &buf[after..end - 2];
            let v = Reply::Value {
                key,
                flags,
                cas,
                data,
            };
            (v, end)
        }));
    }
    if let Some(rest) = line.strip_prefix(b"VA ") {
        let (len, flags) = match rest.iter().position(|&b| b == b' ') {
            Some(p) => (&rest[..p], &rest[p + 1..]),
            None => (rest, &rest[rest.len()..]),
        };
        let Some(len) = number(Some(len)) else {
            return bad("malformed VA line");
        };
        return Ok(data_block(buf, after, len)?.map(|end| {
            let data = &buf[after..end - 2];
            (Reply::MetaValue { flags, data }, end)
        }));
    }
    Ok(Some((Reply::Line(line), after)))
}

/// The whole reply to a single-key text `get`, `gets`, `gat` or `gats` at the
/// front of `buf`, where a caller wants one answer per request: a hit's
/// [`Reply::Value`] (its bytes include the `END` after it), or the one line
/// of a miss (`END`) or of an error. `Ok(None)` while incomplete.
pub fn parse_single_get(buf: &[u8]) -> Result<Option<(Reply<'_>, usize)>, ReplyError> {
    let Some((first, n)) = parse_reply(buf)? else {
        return Ok(None);
    };
    if !matches!(first, Reply::Value { .. }) {
        return Ok(Some((first, n)));
    }
    // The END that follows a hit, told at once: the load generator's hot
    // path (a fifth fewer instructions per hit under callgrind). Anything
    // else takes the general parse.
    if buf[n..].starts_with(b"END\r\n") {
        return Ok(Some((first, n + 5)));
    }
    match parse_reply(&buf[n..]) {
        Ok(None) => Ok(None),
        Ok(Some((Reply::Line(b"END"), m))) => Ok(Some((first, n + m))),
        Ok(Some(_)) => Err(ReplyError {
            offset: n as u64,
            reason: "a single-key get's VALUE not followed by END",
        }),
        Err(e) => Err(ReplyError {
            offset: e.offset + n as u64,
            ..e
        }),
    }
}

/// One frame pulled from a [`ReplyParser`]: the reply, its exact bytes, and
/// where they sit in the whole stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    pub reply: Reply<'a>,
    pub raw: &'a [u8],
    pub span: Range<u64>,
}

/// Buffers a reply stream fed in arbitrary pieces and hands out whole frames.
///
/// ```
/// use cachalot_protocol::client::{Reply, ReplyParser};
/// let mut p = ReplyParser::new();
/// p.feed(b"VALUE k 0 2\r\nhi\r\nEN");
/// assert!(matches!(p.pull().unwrap().unwrap().reply, Reply::Value { data: b"hi", .. }));
/// assert!(p.pull().unwrap().is_none()); // "EN" needs more
/// p.feed(b"D\r\n");
/// assert_eq!(p.pull().unwrap().unwrap().reply, Reply::Line(b"END"));
/// ```
#[derive(Debug, Default)]
pub struct ReplyParser {
    buf: Vec<u8>,
    /// Start of the unparsed bytes in `buf`.
    pos: usize,
    /// Stream offset of `buf[0]`.
    base: u64,
    /// Once the stream is broken it stays broken: later bytes are out of step.
    error: Option<ReplyError>,
}

impl ReplyParser {
    pub fn new() -> ReplyParser {
        ReplyParser::default()
    }

    /// Drop the bytes already handed out, once they are at least half the
    /// buffer (amortised O(1) per byte).
    fn compact(&mut self) {
        if self.pos > 0 && self.pos * 2 >= self.buf.len() {
            self.buf.drain(..self.pos);
            self.base += self.pos as u64;
            self.pos = 0;
        }
    }

    /// Append bytes as they arrived from the server.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.compact();
        self.buf.extend_from_slice(bytes);
    }

    /// One `read` from `r` straight into the buffer; returns what `read`
    /// returned (0 at end of stream).
    pub fn read_from(&mut self, r: &mut impl Read) -> std::io::Result<usize> {
        const CHUNK: usize = 64 * 1024;
        self.compact();
        let old = self.buf.len();
        self.buf.resize(old + CHUNK, 0);
        let n = r.read(&mut self.buf[old..]);
        self.buf.truncate(old + *n.as_ref().unwrap_or(&0));
        n
    }

    /// The next whole frame, `Ok(None)` if more bytes are needed.
    pub fn pull(&mut self) -> Result<Option<Frame<'_>>, ReplyError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let start = self.base + self.pos as u64;
        let rest = &self.buf[self.pos..];
        match parse_reply(rest) {
            Ok(None) => Ok(None),
            Ok(Some((reply, n))) => {
                self.pos += n;
                Ok(Some(Frame {
                    reply,
                    raw: &rest[..n],
                    span: start..start + n as u64,
                }))
            }
            Err(e) => {
                let e = ReplyError { offset: start, ..e };
                self.error = Some(e);
                Err(e)
            }
        }
    }

    /// Bytes received but not yet handed out as a frame.
    pub fn pending(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    /// Stream offset of the first byte not yet handed out.
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Blocking clients: the next whole frame, reading from `r` as long as
    /// it takes. End of stream before a whole frame is `UnexpectedEof`; a
    /// broken stream is `InvalidData` carrying the [`ReplyError`].
    pub fn pull_from(&mut self, r: &mut impl Read) -> std::io::Result<Frame<'_>> {
        use std::io::{Error, ErrorKind};
        // Look before taking: returning `pull()`'s borrow from inside the
        // loop is not accepted by the borrow checker (NLL problem case 3).
        while self.error.is_none() && matches!(parse_reply(self.pending()), Ok(None)) {
            if self.read_from(r)? == 0 {
                return Err(Error::new(
                    ErrorKind::UnexpectedEof,
                    "connection closed before a whole reply",
                ));
            }
        }
        match self.pull() {
            Ok(Some(f)) => Ok(f),
            Ok(None) => Err(Error::new(ErrorKind::UnexpectedEof, "no whole reply")),
            Err(e) => Err(Error::new(ErrorKind::InvalidData, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binary::{write_response, Status};
    use proptest::prelude::*;

    fn one(buf: &[u8]) -> (Reply<'_>, usize) {
        parse_reply(buf).unwrap().unwrap()
    }

    #[test]
    fn text_values_and_lines() {
        let s = b"VALUE key:1 7 5\r\nhello\r\nVALUE k 4294967295 4 99\r\n\r\n\r\n\r\nEND\r\n";
        let (r, n) = one(s);
        assert_eq!(
            r,
            Reply::Value {
                key: b"key:1",
                flags: 7,
                cas: None,
                data: b"hello"
            }
        );
        let (r, m) = one(&s[n..]);
        assert_eq!(
            r,
            Reply::Value {
                key: b"k",
                flags: u32::MAX,
                cas: Some(99),
                data: b"\r\n\r\n"
            }
        );
        assert_eq!(one(&s[n + m..]), (Reply::Line(b"END"), 5));
        assert_eq!(one(b"VALUE k 0 0\r\n\r\n").1, 15);
        let (r, _) = one(b"SERVER_ERROR object too large for cache\r\n");
        assert_eq!(r.code(), b"SERVER_ERROR");
        let (r, _) = one(b"STAT version 1.6.18 x\r\n");
        assert_eq!(r.stat(), Some((&b"version"[..], &b"1.6.18 x"[..])));
        assert_eq!(one(b"STAT pid\r\n").0.stat(), None);
        assert_eq!(one(b"STATS a b\r\n").0.stat(), None);
        assert_eq!(one(b"END\r\n").0.stat(), None);
        assert_eq!(one(b"STORED\r\nEND\r\n"), (Reply::Line(b"STORED"), 8));
        assert_eq!(one(b"\r\n"), (Reply::Line(b""), 2));
    }

    #[test]
    fn meta_replies() {
        let (r, n) = one(b"VA 2 c5 t-1 f0\r\nhi\r\nHD");
        assert_eq!(n, 20);
        assert_eq!(
            r,
            Reply::MetaValue {
                flags: b"c5 t-1 f0",
                data: b"hi"
            }
        );
        assert_eq!(r.code(), b"VA");
        assert_eq!(r.meta_flag(b'c'), Some(&b"5"[..]));
        assert_eq!(r.meta_flag(b't'), Some(&b"-1"[..]));
        assert_eq!(r.meta_flag(b'k'), None);
        let (r, _) = one(b"VA 0\r\n\r\n");
        assert_eq!(
            r,
            Reply::MetaValue {
                flags: b"",
                data: b""
            }
        );
        assert_eq!(r.meta_flags().count(), 0);
        for code in ["HD", "EN", "NF", "NS", "EX", "MN"] {
            let line = format!("{code} c7 Oab\r\n");
            let (r, n) = one(line.as_bytes());
            assert_eq!((r.code(), n), (code.as_bytes(), line.len()));
            assert_eq!(r.meta_flag(b'O'), Some(&b"ab"[..]));
        }
        let (r, _) = one(b"ME k exp=-1 la=3 cas=2 fetch=no cls=1 size=63\r\n");
        assert_eq!(r.code(), b"ME");
    }

    #[test]
    fn binary_packets() {
        let mut out = Vec::new();
        write_response(
            &mut out,
            0x0c,
            Status::NoError,
            9,
            77,
            &[0, 0, 0, 1],
            b"k",
            b"val",
        );
        crate::binary::write_error(&mut out, 0x00, 1, Status::KeyNotFound);
        let Ok(Some((Reply::Binary(r), n))) = parse_reply(&out) else {
            panic!("not a packet")
        };
        assert_eq!(n, HEADER_LEN + 8);
        assert_eq!(
            (r.header.cas, r.header.opaque, r.extras, r.key, r.value),
            (77, 9, &[0u8, 0, 0, 1][..], &b"k"[..], &b"val"[..])
        );
        let Ok(Some((Reply::Binary(r), m))) = parse_reply(&out[n..]) else {
            panic!("not a packet")
        };
        assert_eq!(m, HEADER_LEN + 9);
        assert_eq!(r.header.vbucket_or_status, Status::KeyNotFound as u16);
        for cut in 0..n {
            assert_eq!(parse_reply(&out[..cut]), Ok(None), "cut {cut}");
        }
    }

    #[test]
    fn garbage_is_an_error() {
        let e = |b: &[u8]| parse_reply(b).unwrap_err().reason;
        assert_eq!(e(b"END\n"), "line not ended by \\r\\n");
        assert_eq!(e(b"\n"), "line not ended by \\r\\n");
        assert_eq!(e(b"VALUE k 0\r\n"), "malformed VALUE line");
        assert_eq!(e(b"VALUE k 0 x\r\n"), "malformed VALUE line");
        assert_eq!(e(b"VALUE k 4294967296 1\r\n"), "malformed VALUE line");
        assert_eq!(e(b"VALUE k 0 1 2 3\r\n"), "malformed VALUE line");
        assert_eq!(e(b"VALUE  0 1\r\n"), "malformed VALUE line");
        assert_eq!(
            e(b"VALUE k 0 2\r\nabXY"),
            "data block not followed by \\r\\n"
        );
        assert_eq!(e(b"VA x\r\n"), "malformed VA line");
        assert_eq!(e(b"VA 1\r\nabc\r\n"), "data block not followed by \\r\\n");
        assert_eq!(e(b"VA 99999999999\r\n"), "data block longer than 1 GB");
        assert_eq!(
            e(b"VALUE k 0 99999999999999999999999\r\n"),
            "malformed VALUE line"
        );
        assert_eq!(e(&[b'x'; MAX_LINE]), "reply line longer than 64 KB");
        assert_eq!(parse_reply(&[b'x'; MAX_LINE - 1]), Ok(None));
        let mut h = Vec::new();
        Header {
            magic: RES_MAGIC,
            key_len: 5,
            extras_len: 4,
            body_len: 8,
            ..Header::default()
        }
        .encode(&mut h);
        assert_eq!(e(&h), "binary extras and key overrun the body");
    }

    #[test]
    fn parser_feeds_and_reports_spans() {
        let mut p = ReplyParser::new();
        p.feed(b"STORED\r\nVA 3 c1\r\nab");
        let f = p.pull().unwrap().unwrap();
        assert_eq!((f.raw, f.span), (&b"STORED\r\n"[..], 0..8));
        assert_eq!(p.pull(), Ok(None));
        assert_eq!(p.pending(), b"VA 3 c1\r\nab");
        p.feed(b"c\r\n");
        let f = p.pull().unwrap().unwrap();
        assert_eq!(f.span, 8..22);
        assert_eq!(p.offset(), 22);
        p.feed(b"junk\n");
        let err = p.pull().unwrap_err();
        assert_eq!(err.offset, 22);
        p.feed(b"END\r\n");
        assert_eq!(p.pull(), Err(err), "a broken stream stays broken");
    }

    #[test]
    fn read_from_a_reader() {
        let mut p = ReplyParser::new();
        let mut src: &[u8] = b"HD\r\nEN\r\n";
        assert_eq!(p.read_from(&mut src).unwrap(), 8);
        assert_eq!(p.pull().unwrap().unwrap().reply, Reply::Line(b"HD"));
        assert_eq!(p.pull().unwrap().unwrap().reply, Reply::Line(b"EN"));
        assert_eq!(p.read_from(&mut src).unwrap(), 0);
        assert_eq!(p.pull(), Ok(None));
    }

    #[test]
    fn single_key_gets() {
        let hit = b"VALUE k 0 2\r\nhi\r\nEND\r\nEND\r\n";
        let (r, n) = parse_single_get(hit).unwrap().unwrap();
        assert_eq!((r.code(), n), (&b"VALUE"[..], 22));
        assert!(matches!(r, Reply::Value { data: b"hi", .. }));
        for cut in 0..n {
            assert_eq!(parse_single_get(&hit[..cut]), Ok(None), "cut {cut}");
        }
        assert_eq!(
            parse_single_get(b"END\r\nEND\r\n"),
            Ok(Some((Reply::Line(b"END"), 5)))
        );
        let (r, _) = parse_single_get(b"SERVER_ERROR busy\r\n").unwrap().unwrap();
        assert_eq!(r.code(), b"SERVER_ERROR");
        let e = |b: &[u8]| parse_single_get(b).unwrap_err();
        assert_eq!(
            e(b"VALUE a 0 1\r\nx\r\nVALUE a 0 1\r\nx\r\n").offset,
            16,
            "a second value is not one key's reply"
        );
        assert_eq!(e(b"VALUE a 0 1\r\nx\r\nEND\n").offset, 16);
        assert_eq!(e(b"VALUE a 0 1\r\nxyz").offset, 0);
    }

    #[test]
    fn pull_from_a_blocking_reader() {
        // A reader that hands out one byte per read, as a slow socket may.
        struct Drip<'a>(&'a [u8]);
        impl Read for Drip<'_> {
            fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
                let n = self.0.len().min(1).min(out.len());
                out[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let mut p = ReplyParser::new();
        let mut src = Drip(b"VERSION 1.6.18\r\nVA 1\r\nx\r\nST");
        assert_eq!(p.pull_from(&mut src).unwrap().reply.code(), b"VERSION");
        let f = p.pull_from(&mut src).unwrap();
        assert_eq!(f.span, 16..25);
        let e = p.pull_from(&mut src).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
        let mut p = ReplyParser::new();
        let e = p.pull_from(&mut &b"END\n"[..]).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    }

    /// Spans and raw bytes of the frames, then the error if the stream broke.
    type Frames = (Vec<(Range<u64>, Vec<u8>)>, Option<ReplyError>);

    /// Every frame of `stream` fed in pieces cut at `cuts`.
    fn frames(stream: &[u8], cuts: &[usize]) -> Frames {
        let mut p = ReplyParser::new();
        let mut got = Vec::new();
        let mut at = 0;
        let mut bounds: Vec<usize> = cuts.iter().map(|c| c % (stream.len() + 1)).collect();
        bounds.sort_unstable();
        bounds.push(stream.len());
        for b in bounds {
            p.feed(&stream[at..b]);
            at = b;
            loop {
                match p.pull() {
                    Ok(Some(f)) => got.push((f.span.clone(), f.raw.to_vec())),
                    Ok(None) => break,
                    Err(e) => return (got, Some(e)),
                }
            }
        }
        (got, None)
    }

    /// Well-formed frames of every kind, to build streams from.
    fn frame() -> impl Strategy<Value = Vec<u8>> {
        let data = proptest::collection::vec(any::<u8>(), 0..40);
        prop_oneof![
            (
                data.clone(),
                any::<u32>(),
                proptest::option::of(any::<u64>())
            )
                .prop_map(|(d, f, c)| {
                    let mut v = format!("VALUE k{f} {f} {}", d.len()).into_bytes();
                    if let Some(c) = c {
                        v.extend_from_slice(format!(" {c}").as_bytes());
                    }
                    v.extend_from_slice(b"\r\n");
                    v.extend_from_slice(&d);
                    v.extend_from_slice(b"\r\n");
                    v
                }),
            (data.clone(), "( c[0-9]{1,5}| t-1| f[0-9]| k[a-z]{1,3})*").prop_map(|(d, fl)| {
                let mut v = format!("VA {}{fl}\r\n", d.len()).into_bytes();
                v.extend_from_slice(&d);
                v.extend_from_slice(b"\r\n");
                v
            }),
            "(END|STORED|NOT_FOUND|HD|EN|NF|NS|EX|MN|HD c12|ME k exp=-1|ERROR|VERSION 1.6.18)"
                .prop_map(|l| format!("{l}\r\n").into_bytes()),
            (any::<u8>(), any::<u16>(), data.clone(), data).prop_map(|(op, st, k, d)| {
                let mut v = Vec::new();
                let st = Status::from_u16(st % 8).unwrap_or(Status::NoError);
                write_response(&mut v, op, st, 3, 4, &[], &k[..k.len().min(250)], &d);
                v
            }),
        ]
    }

    proptest! {
        #[test]
        fn any_split_gives_the_same_frames(
            parts in proptest::collection::vec(frame(), 0..12),
            cuts in proptest::collection::vec(any::<usize>(), 0..8),
        ) {
            let stream = parts.concat();
            let whole = frames(&stream, &[]);
            prop_assert_eq!(&whole, &frames(&stream, &cuts));
            prop_assert!(whole.1.is_none());
            let raws: Vec<Vec<u8>> = whole.0.into_iter().map(|(_, r)| r).collect();
            prop_assert_eq!(raws, parts);
        }

        #[test]
        fn garbage_never_panics_and_splits_agree(
            parts in proptest::collection::vec(
                prop_oneof![frame(), proptest::collection::vec(any::<u8>(), 0..30)], 0..8),
            cuts in proptest::collection::vec(any::<usize>(), 0..8),
        ) {
            let stream = parts.concat();
            prop_assert_eq!(frames(&stream, &[]), frames(&stream, &cuts));
        }

        /// `parse_single_get` (with its fast `END`) says what the general
        /// parser's frames say: a value and the `END` after it, any other
        /// single frame, an error, or "need more", and a prefix of the
        /// stream never answers otherwise than "need more" or the same.
        #[test]
        fn single_get_agrees_with_the_frames(
            parts in proptest::collection::vec(prop_oneof![
                frame(),
                Just(b"END\r\n".to_vec()),
                "(END|VALUE k 0 1)(\r\n|\n|\r|x|)".prop_map(String::into_bytes),
                proptest::collection::vec(any::<u8>(), 0..12),
            ], 0..4),
        ) {
            let stream = parts.concat();
            let (got, err) = frames(&stream, &[]);
            let len = |i: usize| (got[i].0.end - got[i].0.start) as usize;
            let want = match got.first() {
                None => err.map_or(Ok(None), |e| Err(e.offset)),
                Some(_) if !got[0].1.starts_with(b"VALUE ") => Ok(Some(len(0))),
                Some(_) => match (got.get(1), err) {
                    (Some((_, raw)), _) if raw == b"END\r\n" => Ok(Some(len(0) + len(1))),
                    (Some(_), _) => Err(len(0) as u64),
                    (None, Some(e)) => Err(e.offset),
                    (None, None) => Ok(None),
                },
            };
            let parsed = parse_single_get(&stream);
            let seen = parsed.map(|o| o.map(|(_, n)| n)).map_err(|e| e.offset);
            prop_assert_eq!(seen, want);
            if let Ok(Some((r, _))) = parsed {
                prop_assert_eq!(Some(r), parse_reply(&stream).ok().flatten().map(|(r, _)| r));
            }
            for cut in 0..stream.len() {
                let p = parse_single_get(&stream[..cut]);
                prop_assert!(p == Ok(None) || p == parsed, "cut {}: {:?}", cut, p);
            }
        }

        /// The `VALUE` line as doc/protocol.txt has it, read token by token:
        /// the parser accepts exactly these lines, with these fields.
        #[test]
        fn value_lines_follow_the_grammar(
            toks in proptest::collection::vec(
                "[0-9]{0,3}|[0-9]{19,21}|4294967296|[a-z:]{1,8}|[ !-~]{0,6}", 0..6),
        ) {
            let line = format!("VALUE {}", toks.join(" "));
            let head = format!("{line}\r\n").into_bytes();
            let number = |t: &str| {
                (!t.is_empty() && t.len() <= 20 && t.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| t.parse::<u64>().ok())
                    .flatten()
            };
            let t: Vec<&str> = line["VALUE ".len()..].split(' ').collect();
            let want = match t[..] {
                [key, flags, len] | [key, flags, len, _] if !key.is_empty() => {
                    let flags = number(flags).and_then(|f| u32::try_from(f).ok());
                    match (flags, number(len), t.get(3).map(|c| number(c))) {
                        (_, _, Some(None)) => None,
                        (Some(f), Some(l), cas) => Some((key.as_bytes(), f, l, cas.flatten())),
                        _ => None,
                    }
                }
                _ => None,
            };
            let got = parse_reply(&head);
            match want {
                Some((key, flags, len, cas)) if len <= MAX_DATA => {
                    prop_assert_eq!(got, Ok(None), "{:?} waits for its data", line);
                    let mut buf = head.clone();
                    buf.resize(head.len() + len as usize, b'x');
                    buf.extend_from_slice(b"\r\n");
                    let data = &buf[head.len()..buf.len() - 2];
                    let v = Reply::Value { key, flags, cas, data };
                    prop_assert_eq!(parse_reply(&buf), Ok(Some((v, buf.len()))));
                }
                _ => prop_assert!(got.is_err(), "{:?} taken: {:?}", line, got),
            }
        }
    }
}
