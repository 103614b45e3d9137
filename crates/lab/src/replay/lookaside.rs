//! The few memcached requests a look-aside client sends (GET, SET, DELETE, in
//! the text or the meta protocol) and what their replies mean to it. The
//! bytes are the protocol crate's client codec (`cachalot_protocol::client`):
//! its encoders write into the replay's reused buffers and its reply parser
//! cuts the frames, so the replay loop allocates nothing per request and this
//! module only maps frames to outcomes.
//!
//! The cost travels as cachalot's extensions (docs/protocol.md): `cost=<N>`
//! after a text `set`, the `w<N>` flag on `ms`; memcached refuses both, so
//! the caller passes a cost only to cachalot.

use cachalot_protocol::client::request::meta::{self, Flag};
use cachalot_protocol::client::request::text::{self, Store, StoreOp};
use cachalot_protocol::client::{parse_reply, parse_single_get};

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

/// What a reply means to the look-aside client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
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

pub fn encode_get(p: Protocol, key: &[u8], out: &mut Vec<u8>) {
    match p {
        Protocol::Text => text::get(out, key),
        Protocol::Meta => meta::get(out, key, &[Flag::Bare(b'v')]),
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
        Protocol::Text => Store::new(StoreOp::Set, key, value)
            .exptime(ttl.into())
            .cost(cost)
            .encode(out),
        Protocol::Meta => {
            let flags = [
                Flag::Uint(b'T', ttl.into()),
                Flag::Uint(b'w', cost.unwrap_or(0).into()),
            ];
            meta::set(out, key, value, &flags[..1 + usize::from(cost.is_some())]);
        }
    }
}

pub fn encode_delete(p: Protocol, key: &[u8], out: &mut Vec<u8>) {
    match p {
        Protocol::Text => text::delete(out, key, false),
        Protocol::Meta => meta::delete(out, key, &[]),
    }
}

/// What a reply with first word `code` means after a request expecting
/// `what`; `None` when it cannot be the reply to that request.
fn outcome(p: Protocol, what: Expect, code: &[u8]) -> Option<Outcome> {
    use Outcome::*;
    if matches!(code, b"ERROR" | b"CLIENT_ERROR" | b"SERVER_ERROR") {
        return Some(Error);
    }
    Some(match (p, what, code) {
        (Protocol::Text, Expect::Get, b"VALUE") | (Protocol::Meta, Expect::Get, b"VA") => Hit,
        (Protocol::Text, Expect::Get, b"END") | (Protocol::Meta, Expect::Get, b"EN") => Miss,
        (Protocol::Text, Expect::Store, b"STORED") | (Protocol::Meta, Expect::Store, b"HD") => {
            Stored
        }
        (Protocol::Text, Expect::Store, b"NOT_STORED" | b"EXISTS" | b"NOT_FOUND")
        | (Protocol::Meta, Expect::Store, b"NS" | b"EX" | b"NF") => NotStored,
        (Protocol::Text, Expect::Delete, b"DELETED") | (Protocol::Meta, Expect::Delete, b"HD") => {
            Deleted
        }
        (Protocol::Text, Expect::Delete, b"NOT_FOUND")
        | (Protocol::Meta, Expect::Delete, b"NF") => NotFound,
        _ => return None,
    })
}

/// Parse the reply at the start of `buf` to a request expecting `what`:
/// `Ok(None)` when it is not complete yet, else its outcome and the bytes it
/// took. An error says why the stream is out of step with the requests (the
/// run stops).
pub fn parse(p: Protocol, what: Expect, buf: &[u8]) -> Result<Option<(Outcome, usize)>, String> {
    let parsed = match (p, what) {
        (Protocol::Text, Expect::Get) => parse_single_get(buf),
        _ => parse_reply(buf),
    };
    let Some((reply, n)) = parsed.map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    match outcome(p, what, reply.code()) {
        Some(o) => Ok(Some((o, n))),
        None => {
            let shown = String::from_utf8_lossy(&buf[..n.min(120)]);
            Err(format!("unexpected reply to {what:?}: {shown:?}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        use Outcome::*;
        use Protocol::*;
        let cases: &[(Protocol, Expect, &[u8], Outcome)] = &[
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
