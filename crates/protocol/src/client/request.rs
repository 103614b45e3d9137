//! Request encoders: each appends one request to a caller's buffer, so a
//! client can build a pipeline in one reused `Vec` without allocating per
//! request. Formats: memcached's doc/protocol.txt (text and meta) and
//! protocol_binary.h (binary). The encoders write what they are given, valid
//! or not (a negative exptime, a 300-byte key): testing a server needs both.

/// Append `n` in decimal.
fn push_num(out: &mut Vec<u8>, n: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// The classic text protocol.
pub mod text {
    use super::push_num;

    /// A storage command's verb; `cas` carries the unique it checks.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum StoreOp {
        Set,
        Add,
        Replace,
        Append,
        Prepend,
        Cas(u64),
    }

    /// `<op> <key> <flags> <exptime> <bytes> [<cas>] [cost=<N>] [noreply]`
    /// and the data block. Built with [`Store::new`] and the setters.
    #[derive(Clone, Copy, Debug)]
    pub struct Store<'a> {
        pub op: StoreOp,
        pub key: &'a [u8],
        pub value: &'a [u8],
        pub flags: u32,
        pub exptime: i64,
        pub noreply: bool,
        /// cachalot's `cost=<N>` extension (docs/protocol.md); memcached
        /// refuses it, so send it only to cachalot.
        pub cost: Option<u32>,
    }

    impl<'a> Store<'a> {
        /// Flags 0, exptime 0, with a reply, no cost.
        pub fn new(op: StoreOp, key: &'a [u8], value: &'a [u8]) -> Store<'a> {
            Store {
                op,
                key,
                value,
                flags: 0,
                exptime: 0,
                noreply: false,
                cost: None,
            }
        }

        pub fn flags(self, flags: u32) -> Self {
            Store { flags, ..self }
        }

        pub fn exptime(self, exptime: i64) -> Self {
            Store { exptime, ..self }
        }

        pub fn noreply(self, noreply: bool) -> Self {
            Store { noreply, ..self }
        }

        pub fn cost(self, cost: Option<u32>) -> Self {
            Store { cost, ..self }
        }

        pub fn encode(&self, out: &mut Vec<u8>) {
            out.extend_from_slice(match self.op {
                StoreOp::Set => b"set ",
                StoreOp::Add => b"add ",
                StoreOp::Replace => b"replace ",
                StoreOp::Append => b"append ",
                StoreOp::Prepend => b"prepend ",
                StoreOp::Cas(_) => b"cas ",
            });
            out.extend_from_slice(self.key);
            out.push(b' ');
            push_num(out, self.flags);
            out.push(b' ');
            push_num(out, self.exptime);
            out.push(b' ');
            push_num(out, self.value.len());
            if let StoreOp::Cas(unique) = self.op {
                out.push(b' ');
                push_num(out, unique);
            }
            if let Some(c) = self.cost {
                out.extend_from_slice(b" cost=");
                push_num(out, c);
            }
            if self.noreply {
                out.extend_from_slice(b" noreply");
            }
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(self.value);
            out.extend_from_slice(b"\r\n");
        }
    }

    /// A retrieval verb; the touching ones carry their exptime.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Retrieve {
        Get,
        Gets,
        Gat(i64),
        Gats(i64),
    }

    /// `get|gets <key>*` or `gat|gats <exptime> <key>*`.
    pub fn retrieve<'k>(out: &mut Vec<u8>, op: Retrieve, keys: impl IntoIterator<Item = &'k [u8]>) {
        match op {
            Retrieve::Get => out.extend_from_slice(b"get"),
            Retrieve::Gets => out.extend_from_slice(b"gets"),
            Retrieve::Gat(e) | Retrieve::Gats(e) => {
                out.extend_from_slice(if matches!(op, Retrieve::Gat(_)) {
                    b"gat "
                } else {
                    b"gats "
                });
                push_num(out, e);
            }
        }
        for k in keys {
            out.push(b' ');
            out.extend_from_slice(k);
        }
        out.extend_from_slice(b"\r\n");
    }

    /// `get <key>`.
    pub fn get(out: &mut Vec<u8>, key: &[u8]) {
        retrieve(out, Retrieve::Get, [key]);
    }

    fn tail(out: &mut Vec<u8>, noreply: bool) {
        if noreply {
            out.extend_from_slice(b" noreply");
        }
        out.extend_from_slice(b"\r\n");
    }

    /// `delete <key> [noreply]`.
    pub fn delete(out: &mut Vec<u8>, key: &[u8], noreply: bool) {
        out.extend_from_slice(b"delete ");
        out.extend_from_slice(key);
        tail(out, noreply);
    }

    /// `incr|decr <key> <delta> [noreply]`.
    pub fn arith(out: &mut Vec<u8>, incr: bool, key: &[u8], delta: u64, noreply: bool) {
        out.extend_from_slice(if incr { b"incr " } else { b"decr " });
        out.extend_from_slice(key);
        out.push(b' ');
        push_num(out, delta);
        tail(out, noreply);
    }

    /// `touch <key> <exptime> [noreply]`.
    pub fn touch(out: &mut Vec<u8>, key: &[u8], exptime: i64, noreply: bool) {
        out.extend_from_slice(b"touch ");
        out.extend_from_slice(key);
        out.push(b' ');
        push_num(out, exptime);
        tail(out, noreply);
    }

    /// `flush_all [<delay>] [noreply]`.
    pub fn flush_all(out: &mut Vec<u8>, delay: Option<i64>, noreply: bool) {
        out.extend_from_slice(b"flush_all");
        if let Some(d) = delay {
            out.push(b' ');
            push_num(out, d);
        }
        tail(out, noreply);
    }

    /// Any other command line (`version`, `verbosity 1`, `stats slabs`):
    /// the tokens joined by spaces, then `\r\n`.
    pub fn line(out: &mut Vec<u8>, tokens: &[&[u8]]) {
        for (i, t) in tokens.iter().enumerate() {
            if i > 0 {
                out.push(b' ');
            }
            out.extend_from_slice(t);
        }
        out.extend_from_slice(b"\r\n");
    }
}

/// The meta protocol: `<op> <key> [<datalen>] <flags>*\r\n[<data>\r\n]`.
pub mod meta {
    use super::push_num;

    /// One meta flag token: a letter, maybe followed by a value.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Flag<'a> {
        /// `v`, `q`, `c`, `k`, ...
        Bare(u8),
        /// `T-1`, `N30`, `J13`
        Int(u8, i64),
        /// `C<cas>`, `D<delta>`, `F<flags>`
        Uint(u8, u64),
        /// `O<opaque>`, `M<mode>`, `b`-encoded tokens: the letter then bytes.
        Bytes(u8, &'a [u8]),
    }

    impl Flag<'_> {
        fn encode(&self, out: &mut Vec<u8>) {
            match *self {
                Flag::Bare(c) => out.push(c),
                Flag::Int(c, n) => {
                    out.push(c);
                    push_num(out, n);
                }
                Flag::Uint(c, n) => {
                    out.push(c);
                    push_num(out, n);
                }
                Flag::Bytes(c, b) => {
                    out.push(c);
                    out.extend_from_slice(b);
                }
            }
        }
    }

    fn request(out: &mut Vec<u8>, op: &[u8], key: &[u8], len: Option<usize>, flags: &[Flag<'_>]) {
        out.extend_from_slice(op);
        out.push(b' ');
        out.extend_from_slice(key);
        if let Some(n) = len {
            out.push(b' ');
            push_num(out, n);
        }
        for f in flags {
            out.push(b' ');
            f.encode(out);
        }
        out.extend_from_slice(b"\r\n");
    }

    /// `mg <key> <flags>*`.
    pub fn get(out: &mut Vec<u8>, key: &[u8], flags: &[Flag<'_>]) {
        request(out, b"mg", key, None, flags);
    }

    /// `ms <key> <datalen> <flags>*` and the data block.
    pub fn set(out: &mut Vec<u8>, key: &[u8], value: &[u8], flags: &[Flag<'_>]) {
        request(out, b"ms", key, Some(value.len()), flags);
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }

    /// `md <key> <flags>*`.
    pub fn delete(out: &mut Vec<u8>, key: &[u8], flags: &[Flag<'_>]) {
        request(out, b"md", key, None, flags);
    }

    /// `ma <key> <flags>*`.
    pub fn arith(out: &mut Vec<u8>, key: &[u8], flags: &[Flag<'_>]) {
        request(out, b"ma", key, None, flags);
    }

    /// `me <key>` (meta debug).
    pub fn debug(out: &mut Vec<u8>, key: &[u8]) {
        request(out, b"me", key, None, &[]);
    }

    /// `mn`: answered `MN`, after every earlier reply (ends a quiet pipeline).
    pub fn noop(out: &mut Vec<u8>) {
        out.extend_from_slice(b"mn\r\n");
    }
}

/// The binary protocol: a 24-byte header, extras, key and value.
pub mod binary {
    pub use crate::binary::{write_request as request, Opcode};

    /// Extras of set/add/replace (and their quiet forms): flags, exptime.
    pub fn store_extras(flags: u32, exptime: u32) -> [u8; 8] {
        let mut e = [0; 8];
        e[..4].copy_from_slice(&flags.to_be_bytes());
        e[4..].copy_from_slice(&exptime.to_be_bytes());
        e
    }

    /// Extras of incr/decr: delta, initial value, exptime (`0xffffffff`:
    /// do not create a missing key).
    pub fn arith_extras(delta: u64, initial: u64, exptime: u32) -> [u8; 20] {
        let mut e = [0; 20];
        e[..8].copy_from_slice(&delta.to_be_bytes());
        e[8..16].copy_from_slice(&initial.to_be_bytes());
        e[16..].copy_from_slice(&exptime.to_be_bytes());
        e
    }

    /// Extras of touch, gat and flush (its delay): one 32-bit time.
    pub fn time_extras(t: u32) -> [u8; 4] {
        t.to_be_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::meta::Flag;
    use super::text::{Retrieve, Store, StoreOp};
    use super::*;

    #[test]
    fn text_requests() {
        let mut o = Vec::new();
        Store::new(StoreOp::Set, b"k1", b"abc").encode(&mut o);
        Store::new(StoreOp::Cas(77), b"k1", b"")
            .flags(u32::MAX)
            .exptime(-1)
            .noreply(true)
            .encode(&mut o);
        Store::new(StoreOp::Set, b"k1", b"abc")
            .exptime(60)
            .cost(Some(250))
            .encode(&mut o);
        Store::new(StoreOp::Prepend, b"k", b"x").encode(&mut o);
        text::get(&mut o, b"k1");
        text::retrieve(&mut o, Retrieve::Gats(-5), [&b"a"[..], b"b"]);
        text::retrieve(&mut o, Retrieve::Gets, [&b"a"[..], b"b", b"a"]);
        text::delete(&mut o, b"k", true);
        text::arith(&mut o, true, b"k", u64::MAX, false);
        text::arith(&mut o, false, b"k", 1, true);
        text::touch(&mut o, b"k", 10, false);
        text::flush_all(&mut o, None, false);
        text::flush_all(&mut o, Some(2), true);
        text::line(&mut o, &[b"verbosity", b"1"]);
        assert_eq!(
            String::from_utf8(o).unwrap(),
            "set k1 0 0 3\r\nabc\r\ncas k1 4294967295 -1 0 77 noreply\r\n\r\n\
             set k1 0 60 3 cost=250\r\nabc\r\nprepend k 0 0 1\r\nx\r\nget k1\r\n\
             gats -5 a b\r\ngets a b a\r\ndelete k noreply\r\n\
             incr k 18446744073709551615\r\ndecr k 1 noreply\r\ntouch k 10\r\n\
             flush_all\r\nflush_all 2 noreply\r\nverbosity 1\r\n"
        );
    }

    #[test]
    fn meta_requests() {
        let mut o = Vec::new();
        meta::get(&mut o, b"k1", &[Flag::Bare(b'v')]);
        meta::set(
            &mut o,
            b"k1",
            b"abc",
            &[Flag::Int(b'T', -1), Flag::Uint(b'w', 9)],
        );
        meta::set(&mut o, b"k1", b"", &[]);
        meta::delete(&mut o, b"k1", &[Flag::Bare(b'q'), Flag::Bytes(b'O', b"x1")]);
        meta::arith(
            &mut o,
            b"n",
            &[Flag::Uint(b'D', 5), Flag::Bytes(b'M', b"-")],
        );
        meta::debug(&mut o, b"k1");
        meta::noop(&mut o);
        assert_eq!(
            String::from_utf8(o).unwrap(),
            "mg k1 v\r\nms k1 3 T-1 w9\r\nabc\r\nms k1 0\r\n\r\nmd k1 q Ox1\r\n\
             ma n D5 M-\r\nme k1\r\nmn\r\n"
        );
    }

    #[test]
    fn binary_requests() {
        use crate::binary::{parse_frame, Command, Parsed};
        let mut o = Vec::new();
        let extras = binary::store_extras(7, 30);
        binary::request(
            &mut o,
            binary::Opcode::SetQ as u8,
            5,
            9,
            &extras,
            b"k",
            b"val",
        );
        let Parsed::Frame(f) = parse_frame(&o) else {
            panic!("no frame")
        };
        assert_eq!((f.header.opaque, f.header.cas, f.key), (5, 9, &b"k"[..]));
        assert!(matches!(
            Command::decode(&f),
            Ok(Command::Store {
                flags: 7,
                exptime: 30,
                quiet: true,
                ..
            })
        ));
        assert_eq!(
            &binary::arith_extras(1, 2, 3)[..],
            &[0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 3]
        );
        assert_eq!(binary::time_extras(258), [0, 0, 1, 2]);
    }
}
