//! The few memcached requests a look-aside client sends (GET, SET, DELETE, in
//! the text or the meta protocol) and an incremental parser for their
//! replies, written into and read from reused buffers so the replay loop
//! allocates nothing per request.
//!
//! Formats: memcached's doc/protocol.txt ("Storage commands", "Retrieval
//! command", "Deletion", "Meta Get", "Meta Set", "Meta Delete"). The cost
//! travels as cachalot's extensions (docs/protocol.md): `cost=<N>` after a
//! text `set`, the `w<N>` flag on `ms`; memcached refuses both, so the caller
//! passes a cost only to cachalot.

/// Which protocol the requests use.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Protocol {
    /// `get` / `set` / `delete`.
    #[default]
    Text,
    /// `mg <key> v` / `ms <key> <n> T<ttl>` / `md <key>`.
    Meta,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Text => "text",
            Protocol::Meta => "meta",
        }
    }
}

/// What kind of reply a request waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    Get,
    Store,
    Delete,
}

/// A parsed reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    Hit,
    Miss,
    Stored,
    /// NOT_STORED / EXISTS / NOT_FOUND to a store (`NS`/`EX`/`NF` in meta).
    NotStored,
    Deleted,
    NotFound,
    /// ERROR, CLIENT_ERROR ..., SERVER_ERROR ... (e.g. "object too large for
    /// cache", "out of memory storing object").
    Error,
}

/// Append `v` in decimal.
pub fn push_u64(out: &mut Vec<u8>, mut v: u64) {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&tmp[i..]);
}

/// [`crate::trace::key_bytes`] without its temporary `String`: the same bytes
/// (hex id left-padded with 'k', truncated from the left), so replay stores
/// exactly the keys `sim` does. The replay clamps `size` to 250, memcached's
/// longest key, before calling.
pub fn render_key(key: u64, size: usize, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.clear();
    let size = size.max(1);
    let mut digits = [0u8; 16];
    let mut n = 0;
    let mut v = key;
    loop {
        digits[15 - n] = HEX[(v & 15) as usize];
        n += 1;
        v >>= 4;
        if v == 0 {
            break;
        }
    }
    let hex = &digits[16 - n..];
    if n >= size {
        out.extend_from_slice(&hex[n - size..]);
    } else {
        out.resize(size - n, b'k');
        out.extend_from_slice(hex);
    }
}

pub fn encode_get(p: Protocol, key: &[u8], out: &mut Vec<u8>) {
    match p {
        Protocol::Text => out.extend_from_slice(b"get "),
        Protocol::Meta => out.extend_from_slice(b"mg "),
    }
    out.extend_from_slice(key);
    match p {
        Protocol::Text => out.extend_from_slice(b"\r\n"),
        Protocol::Meta => out.extend_from_slice(b" v\r\n"),
    }
}

/// A SET with flags 0, exptime `ttl`, and the cost when given (cachalot only).
pub fn encode_set(
    p: Protocol,
    key: &[u8],
    value: &[u8],
    ttl: u32,
    cost: Option<u32>,
    out: &mut Vec<u8>,
) {
    match p {
        Protocol::Text => {
            out.extend_from_slice(b"set ");
            out.extend_from_slice(key);
            out.extend_from_slice(b" 0 ");
            push_u64(out, ttl as u64);
            out.push(b' ');
            push_u64(out, value.len() as u64);
            if let Some(c) = cost {
                out.extend_from_slice(b" cost=");
                push_u64(out, c as u64);
            }
        }
        Protocol::Meta => {
            out.extend_from_slice(b"ms ");
            out.extend_from_slice(key);
            out.push(b' ');
            push_u64(out, value.len() as u64);
            out.extend_from_slice(b" T");
            push_u64(out, ttl as u64);
            if let Some(c) = cost {
                out.extend_from_slice(b" w");
                push_u64(out, c as u64);
            }
        }
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

pub fn encode_delete(p: Protocol, key: &[u8], out: &mut Vec<u8>) {
    match p {
        Protocol::Text => out.extend_from_slice(b"delete "),
        Protocol::Meta => out.extend_from_slice(b"md "),
    }
    out.extend_from_slice(key);
    out.extend_from_slice(b"\r\n");
}

/// A reply the parser cannot make sense of (the run stops: the stream is out
/// of step with the requests).
#[derive(Debug, PartialEq, Eq)]
pub struct WireError(pub String);

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn unexpected(what: Expect, line: &[u8]) -> WireError {
    let shown: String = String::from_utf8_lossy(&line[..line.len().min(120)]).into_owned();
    WireError(format!("unexpected reply to {what:?}: {shown:?}"))
}

fn is_error_line(line: &[u8]) -> bool {
    line == b"ERROR" || line.starts_with(b"CLIENT_ERROR") || line.starts_with(b"SERVER_ERROR")
}

fn parse_len(tok: Option<&[u8]>) -> Option<usize> {
    let t = tok?;
    if t.is_empty() || t.len() > 12 || !t.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(t).ok()?.parse().ok()
}

/// Parse the reply at the start of `buf` to a request expecting `what`:
/// `Ok(None)` when it is not complete yet, else the reply and the bytes it
/// took.
pub fn parse(p: Protocol, what: Expect, buf: &[u8]) -> Result<Option<(Reply, usize)>, WireError> {
    let Some(eol) = buf.windows(2).position(|w| w == b"\r\n") else {
        // A reply line is short; a megabyte without CRLF is a broken stream.
        if buf.len() > 1 << 20 {
            return Err(unexpected(what, buf));
        }
        return Ok(None);
    };
    let line = &buf[..eol];
    let after = eol + 2;
    if is_error_line(line) {
        return Ok(Some((Reply::Error, after)));
    }
    let simple = |r: Reply| Ok(Some((r, after)));
    match (p, what) {
        (Protocol::Text, Expect::Get) => {
            if line == b"END" {
                return simple(Reply::Miss);
            }
            if !line.starts_with(b"VALUE ") {
                return Err(unexpected(what, line));
            }
            // VALUE <key> <flags> <bytes> [<cas>]
            let n = parse_len(line.split(|b| *b == b' ').nth(3))
                .ok_or_else(|| unexpected(what, line))?;
            let need = after + n + 2 + 5;
            if buf.len() < need {
                return Ok(None);
            }
            if &buf[after + n..need] != b"\r\nEND\r\n" {
                return Err(unexpected(what, &buf[after + n..need]));
            }
            Ok(Some((Reply::Hit, need)))
        }
        (Protocol::Meta, Expect::Get) => {
            if line == b"EN" {
                return simple(Reply::Miss);
            }
            if !line.starts_with(b"VA ") {
                return Err(unexpected(what, line));
            }
            let n = parse_len(line.split(|b| *b == b' ').nth(1))
                .ok_or_else(|| unexpected(what, line))?;
            let need = after + n + 2;
            if buf.len() < need {
                return Ok(None);
            }
            if &buf[after + n..need] != b"\r\n" {
                return Err(unexpected(what, &buf[after + n..need]));
            }
            Ok(Some((Reply::Hit, need)))
        }
        (Protocol::Text, Expect::Store) => match line {
            b"STORED" => simple(Reply::Stored),
            b"NOT_STORED" | b"EXISTS" | b"NOT_FOUND" => simple(Reply::NotStored),
            _ => Err(unexpected(what, line)),
        },
        (Protocol::Meta, Expect::Store) => match line.get(..2) {
            Some(b"HD") => simple(Reply::Stored),
            Some(b"NS") | Some(b"EX") | Some(b"NF") => simple(Reply::NotStored),
            _ => Err(unexpected(what, line)),
        },
        (Protocol::Text, Expect::Delete) => match line {
            b"DELETED" => simple(Reply::Deleted),
            b"NOT_FOUND" => simple(Reply::NotFound),
            _ => Err(unexpected(what, line)),
        },
        (Protocol::Meta, Expect::Delete) => match line.get(..2) {
            Some(b"HD") => simple(Reply::Deleted),
            Some(b"NF") => simple(Reply::NotFound),
            _ => Err(unexpected(what, line)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_key_matches_trace_key_bytes() {
        let mut a = Vec::new();
        let mut b = Vec::new();
        for key in [0u64, 1, 15, 16, 255, 0xdead_beef, u64::MAX, 1 << 63] {
            for size in [0usize, 1, 2, 7, 8, 15, 16, 17, 30, 250] {
                render_key(key, size, &mut a);
                crate::trace::key_bytes(key, size, &mut b);
                assert_eq!(a, b, "key {key:x} size {size}");
            }
        }
    }

    #[test]
    fn push_u64_decimal() {
        let mut v = Vec::new();
        for n in [0u64, 7, 10, 4_294_967_295, u64::MAX] {
            v.clear();
            push_u64(&mut v, n);
            assert_eq!(v, n.to_string().as_bytes());
        }
    }

    #[test]
    fn encodings() {
        let mut o = Vec::new();
        encode_get(Protocol::Text, b"k1", &mut o);
        encode_get(Protocol::Meta, b"k1", &mut o);
        encode_set(Protocol::Text, b"k1", b"abc", 0, None, &mut o);
        encode_set(Protocol::Text, b"k1", b"abc", 60, Some(250), &mut o);
        encode_set(Protocol::Meta, b"k1", b"abc", 0, None, &mut o);
        encode_set(Protocol::Meta, b"k1", b"", 5, Some(9), &mut o);
        encode_delete(Protocol::Text, b"k1", &mut o);
        encode_delete(Protocol::Meta, b"k1", &mut o);
        assert_eq!(
            String::from_utf8(o).unwrap(),
            "get k1\r\nmg k1 v\r\nset k1 0 0 3\r\nabc\r\nset k1 0 60 3 cost=250\r\nabc\r\n\
             ms k1 3 T0\r\nabc\r\nms k1 0 T5 w9\r\n\r\ndelete k1\r\nmd k1\r\n"
        );
    }

    /// Replies as memcached 1.6.18 sends them (checked against it by hand
    /// with the requests above), parsed whole and in every split.
    #[test]
    fn parses_replies_whole_and_split() {
        use Expect::*;
        use Protocol::*;
        use Reply::*;
        let cases: &[(Protocol, Expect, &[u8], Reply)] = &[
            (Text, Get, b"END\r\n", Miss),
            (Text, Get, b"VALUE k1 0 3\r\nabc\r\nEND\r\n", Hit),
            (Text, Get, b"VALUE k1 0 4 77\r\na\r\nb\r\nEND\r\n", Hit),
            (Meta, Get, b"EN\r\n", Miss),
            (Meta, Get, b"VA 3\r\nabc\r\n", Hit),
            (Meta, Get, b"VA 0 f0\r\n\r\n", Hit),
            (Text, Store, b"STORED\r\n", Stored),
            (Text, Store, b"NOT_STORED\r\n", NotStored),
            (
                Text,
                Store,
                b"SERVER_ERROR object too large for cache\r\n",
                Error,
            ),
            (Meta, Store, b"HD\r\n", Stored),
            (Meta, Store, b"NS\r\n", NotStored),
            (
                Meta,
                Store,
                b"SERVER_ERROR out of memory storing object\r\n",
                Error,
            ),
            (Text, Delete, b"DELETED\r\n", Deleted),
            (Text, Delete, b"NOT_FOUND\r\n", NotFound),
            (Meta, Delete, b"HD\r\n", Deleted),
            (Meta, Delete, b"NF\r\n", NotFound),
            (
                Text,
                Get,
                b"CLIENT_ERROR bad command line format\r\n",
                Error,
            ),
            (Text, Get, b"ERROR\r\n", Error),
        ];
        for (p, e, bytes, want) in cases {
            let mut buf = bytes.to_vec();
            buf.extend_from_slice(b"END\r\n"); // the next reply must be left alone
            assert_eq!(
                parse(*p, *e, &buf),
                Ok(Some((*want, bytes.len()))),
                "{p:?} {e:?} {:?}",
                String::from_utf8_lossy(bytes)
            );
            for cut in 0..bytes.len() {
                assert_eq!(
                    parse(*p, *e, &bytes[..cut]),
                    Ok(None),
                    "cut {cut} of {bytes:?}"
                );
            }
        }
    }

    #[test]
    fn out_of_step_replies_are_errors() {
        assert!(parse(Protocol::Text, Expect::Get, b"STORED\r\n").is_err());
        assert!(parse(Protocol::Text, Expect::Get, b"VALUE k 0 x\r\n").is_err());
        assert!(parse(Protocol::Text, Expect::Get, b"VALUE k 0 1\r\nab\r\nEND\r\n").is_err());
        assert!(parse(Protocol::Meta, Expect::Get, b"VA 1\r\nabc\r\n").is_err());
        assert!(parse(Protocol::Text, Expect::Store, b"END\r\n").is_err());
        assert!(parse(Protocol::Meta, Expect::Delete, b"EN\r\n").is_err());
        assert!(parse(Protocol::Text, Expect::Get, &vec![b'x'; (1 << 20) + 1]).is_err());
    }
}
