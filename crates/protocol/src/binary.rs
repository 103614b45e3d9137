//! The memcached binary protocol codec: 24-byte request/response headers,
//! opcodes, status codes and the per-opcode extras.
//!
//! Wire format from memcached's `protocol_binary.h` and the binary protocol
//! wiki page; the validation rules (which length combinations are accepted,
//! which are "Invalid arguments" and which "Unknown command") follow
//! memcached 1.6's `proto_bin.c` (`try_read_command_binary` and
//! `dispatch_bin_command`), checked against a running memcached 1.6.18.
//!
//! Decoding is two-stage, like memcached's: [`parse_frame`] waits only for the
//! header, extras and key ("the head"); [`Command::decode`] then validates the
//! lengths for the opcode. A store command's value is read afterwards by the
//! caller, which lets it refuse an oversized value and swallow it as it
//! arrives instead of buffering it. Nothing here panics on any input.

/// Magic byte of every request.
pub const REQ_MAGIC: u8 = 0x80;
/// Magic byte of every response.
pub const RES_MAGIC: u8 = 0x81;
/// Size of a request or response header.
pub const HEADER_LEN: usize = 24;
/// Longest key memcached accepts (the binary header allows 65535).
pub const KEY_MAX_LEN: usize = 250;
/// The `expiration` of an incr/decr that means "do not create a missing item".
pub const ARITH_NO_CREATE: u32 = 0xffff_ffff;

/// Request opcodes memcached 1.6 knows about (`protocol_binary_command`).
/// Verbosity and the SASL commands are listed so they can be named, but a
/// memcached without SASL answers them "Unknown command".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Opcode {
    Get = 0x00,
    Set = 0x01,
    Add = 0x02,
    Replace = 0x03,
    Delete = 0x04,
    Increment = 0x05,
    Decrement = 0x06,
    Quit = 0x07,
    Flush = 0x08,
    GetQ = 0x09,
    Noop = 0x0a,
    Version = 0x0b,
    GetK = 0x0c,
    GetKQ = 0x0d,
    Append = 0x0e,
    Prepend = 0x0f,
    Stat = 0x10,
    SetQ = 0x11,
    AddQ = 0x12,
    ReplaceQ = 0x13,
    DeleteQ = 0x14,
    IncrementQ = 0x15,
    DecrementQ = 0x16,
    QuitQ = 0x17,
    FlushQ = 0x18,
    AppendQ = 0x19,
    PrependQ = 0x1a,
    Verbosity = 0x1b,
    Touch = 0x1c,
    Gat = 0x1d,
    GatQ = 0x1e,
    SaslListMechs = 0x20,
    SaslAuth = 0x21,
    SaslStep = 0x22,
    Gatk = 0x23,
    GatkQ = 0x24,
}

impl Opcode {
    /// Every known opcode (for tests and tables).
    pub const ALL: [Opcode; 36] = [
        Opcode::Get,
        Opcode::Set,
        Opcode::Add,
        Opcode::Replace,
        Opcode::Delete,
        Opcode::Increment,
        Opcode::Decrement,
        Opcode::Quit,
        Opcode::Flush,
        Opcode::GetQ,
        Opcode::Noop,
        Opcode::Version,
        Opcode::GetK,
        Opcode::GetKQ,
        Opcode::Append,
        Opcode::Prepend,
        Opcode::Stat,
        Opcode::SetQ,
        Opcode::AddQ,
        Opcode::ReplaceQ,
        Opcode::DeleteQ,
        Opcode::IncrementQ,
        Opcode::DecrementQ,
        Opcode::QuitQ,
        Opcode::FlushQ,
        Opcode::AppendQ,
        Opcode::PrependQ,
        Opcode::Verbosity,
        Opcode::Touch,
        Opcode::Gat,
        Opcode::GatQ,
        Opcode::SaslListMechs,
        Opcode::SaslAuth,
        Opcode::SaslStep,
        Opcode::Gatk,
        Opcode::GatkQ,
    ];

    pub fn from_u8(b: u8) -> Option<Opcode> {
        Opcode::ALL.iter().copied().find(|op| *op as u8 == b)
    }
}

/// Response status codes (`protocol_binary_response_status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Status {
    NoError = 0x00,
    KeyNotFound = 0x01,
    KeyExists = 0x02,
    TooLarge = 0x03,
    InvalidArguments = 0x04,
    NotStored = 0x05,
    NonNumeric = 0x06,
    AuthError = 0x20,
    AuthContinue = 0x21,
    UnknownCommand = 0x81,
    OutOfMemory = 0x82,
}

impl Status {
    /// The body memcached sends with an error status (`write_bin_error`).
    /// These are the exact strings a memcached 1.6.18 sends; clients such as
    /// libmemcached only look at the status, but proxies pass the text on.
    pub fn text(self) -> &'static str {
        match self {
            Status::NoError => "",
            Status::KeyNotFound => "Not found",
            Status::KeyExists => "Data exists for key.",
            Status::TooLarge => "Too large.",
            Status::InvalidArguments => "Invalid arguments",
            Status::NotStored => "Not stored.",
            Status::NonNumeric => "Non-numeric server-side value for incr or decr",
            Status::AuthError => "Auth failure.",
            Status::AuthContinue => "",
            Status::UnknownCommand => "Unknown command",
            Status::OutOfMemory => "Out of memory",
        }
    }

    pub fn from_u16(v: u16) -> Option<Status> {
        [
            Status::NoError,
            Status::KeyNotFound,
            Status::KeyExists,
            Status::TooLarge,
            Status::InvalidArguments,
            Status::NotStored,
            Status::NonNumeric,
            Status::AuthError,
            Status::AuthContinue,
            Status::UnknownCommand,
            Status::OutOfMemory,
        ]
        .into_iter()
        .find(|s| *s as u16 == v)
    }
}

#[inline]
fn be16(b: &[u8], at: usize) -> u16 {
    let mut a = [0u8; 2];
    if let Some(s) = b.get(at..at + 2) {
        a.copy_from_slice(s);
    }
    u16::from_be_bytes(a)
}

#[inline]
fn be32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        a.copy_from_slice(s);
    }
    u32::from_be_bytes(a)
}

#[inline]
fn be64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        a.copy_from_slice(s);
    }
    u64::from_be_bytes(a)
}

/// A request or response header. The two share one layout; in a request the
/// 16-bit field at offset 6 is the vbucket id (ignored by memcached), in a
/// response it is the status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Header {
    pub magic: u8,
    pub opcode: u8,
    pub key_len: u16,
    pub extras_len: u8,
    pub data_type: u8,
    /// vbucket (request) or status (response).
    pub vbucket_or_status: u16,
    /// extras + key + value.
    pub body_len: u32,
    /// Copied from request to response untouched.
    pub opaque: u32,
    pub cas: u64,
}

impl Header {
    /// Read a header from the first 24 bytes; `None` if fewer are available.
    pub fn parse(b: &[u8]) -> Option<Header> {
        if b.len() < HEADER_LEN {
            return None;
        }
        Some(Header {
            magic: b[0],
            opcode: b[1],
            key_len: be16(b, 2),
            extras_len: b[4],
            data_type: b[5],
            vbucket_or_status: be16(b, 6),
            body_len: be32(b, 8),
            opaque: be32(b, 12),
            cas: be64(b, 16),
        })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.magic);
        out.push(self.opcode);
        out.extend_from_slice(&self.key_len.to_be_bytes());
        out.push(self.extras_len);
        out.push(self.data_type);
        out.extend_from_slice(&self.vbucket_or_status.to_be_bytes());
        out.extend_from_slice(&self.body_len.to_be_bytes());
        out.extend_from_slice(&self.opaque.to_be_bytes());
        out.extend_from_slice(&self.cas.to_be_bytes());
    }

    /// Bytes of the value: the body minus extras and key (0 if they overrun it).
    pub fn value_len(&self) -> u32 {
        self.body_len
            .saturating_sub(self.key_len as u32 + self.extras_len as u32)
    }
}

/// A request whose header, extras and key have arrived. The value, if any,
/// follows `head_len` bytes from the start of the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    pub header: Header,
    pub extras: &'a [u8],
    pub key: &'a [u8],
}

impl Frame<'_> {
    /// Header + extras + key: what memcached consumes before dispatching.
    pub fn head_len(&self) -> usize {
        HEADER_LEN + self.extras.len() + self.key.len()
    }
}

/// Result of looking at the front of the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// Not even the head is complete yet.
    Incomplete,
    /// The first byte is not 0x80: memcached closes the connection silently.
    BadMagic,
    Frame(Frame<'a>),
}

/// Parse the head of the request at the front of `input`. Like memcached, the
/// head is complete once the header, extras and key are there, whatever the
/// body length says.
pub fn parse_frame(input: &[u8]) -> Parsed<'_> {
    let Some(header) = Header::parse(input) else {
        return Parsed::Incomplete;
    };
    if header.magic != REQ_MAGIC {
        return Parsed::BadMagic;
    }
    let ext_end = HEADER_LEN + header.extras_len as usize;
    let key_end = ext_end + header.key_len as usize;
    match (input.get(HEADER_LEN..ext_end), input.get(ext_end..key_end)) {
        (Some(extras), Some(key)) => Parsed::Frame(Frame {
            header,
            extras,
            key,
        }),
        _ => Parsed::Incomplete,
    }
}

/// A length as memcached's C code sees it after storing it in an `int`: body
/// lengths of 2 GB and more turn negative, and a negative swallow count means
/// "swallow nothing" (the bytes are then parsed as the next request).
pub fn c_int_len(n: u32) -> u64 {
    if n > i32::MAX as u32 {
        0
    } else {
        n as u64
    }
}

/// set / add / replace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    Set,
    Add,
    Replace,
}

/// A validated request. Keys borrow from the input; values are not included
/// (their length is): the caller reads or swallows them after the head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command<'a> {
    /// Get, GetQ, GetK, GetKQ.
    Get {
        key: &'a [u8],
        quiet: bool,
        with_key: bool,
    },
    /// GAT, GATQ, GATK, GATKQ: get and set a new expiration.
    Gat {
        key: &'a [u8],
        exptime: u32,
        quiet: bool,
        with_key: bool,
    },
    /// Touch: set a new expiration, reply with the flags but no value.
    Touch {
        key: &'a [u8],
        exptime: u32,
    },
    /// Set, Add, Replace and their quiet forms. A non-zero header CAS turns
    /// any of them into a compare-and-swap (memcached's `NREAD_CAS`).
    Store {
        kind: StoreKind,
        key: &'a [u8],
        flags: u32,
        exptime: u32,
        value_len: u32,
        quiet: bool,
    },
    /// Append, Prepend and their quiet forms.
    Concat {
        append: bool,
        key: &'a [u8],
        value_len: u32,
        quiet: bool,
    },
    Delete {
        key: &'a [u8],
        quiet: bool,
    },
    /// Increment, Decrement and their quiet forms.
    Arith {
        incr: bool,
        key: &'a [u8],
        delta: u64,
        initial: u64,
        /// [`ARITH_NO_CREATE`] means: fail with "Not found" if missing.
        exptime: u32,
        quiet: bool,
    },
    Quit {
        quiet: bool,
    },
    /// Flush / FlushQ; `exptime` is 0 when no extras were sent.
    Flush {
        exptime: u32,
        quiet: bool,
    },
    Noop,
    Version,
    /// Stat with an optional group name in the key ("" = general stats).
    Stat {
        key: &'a [u8],
    },
    /// Reply "Unknown command", then discard this many more bytes. For a truly
    /// unknown opcode memcached swallows the whole body length *after* the
    /// extras and key it already consumed (so it eats into the next request);
    /// this is reproduced on purpose.
    Unknown {
        swallow: u64,
    },
}

/// Why a head was refused. Both close the connection after the reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtocolError {
    /// key + extras longer than the body: "Unknown command", close.
    BadBodyLength,
    /// Lengths not valid for the opcode, or key over 250 bytes:
    /// "Invalid arguments", close.
    InvalidArguments,
}

impl ProtocolError {
    pub fn status(self) -> Status {
        match self {
            ProtocolError::BadBodyLength => Status::UnknownCommand,
            ProtocolError::InvalidArguments => Status::InvalidArguments,
        }
    }
}

impl<'a> Command<'a> {
    /// Validate a frame the way `dispatch_bin_command` does, in its order.
    pub fn decode(f: &Frame<'a>) -> Result<Command<'a>, ProtocolError> {
        let h = &f.header;
        let extlen = h.extras_len as u32;
        let keylen = h.key_len as u32;
        let bodylen = h.body_len;
        if keylen > bodylen || keylen + extlen > bodylen {
            return Err(ProtocolError::BadBodyLength);
        }
        if f.key.len() > KEY_MAX_LEN {
            return Err(ProtocolError::InvalidArguments);
        }
        let Some(op) = Opcode::from_u8(h.opcode) else {
            return Ok(Command::Unknown {
                swallow: c_int_len(bodylen),
            });
        };
        let key = f.key;
        let ex = f.extras;
        let ok = |valid: bool, cmd: Command<'a>| {
            if valid {
                Ok(cmd)
            } else {
                Err(ProtocolError::InvalidArguments)
            }
        };
        use Opcode::*;
        match op {
            Version => ok(extlen == 0 && keylen == 0 && bodylen == 0, Command::Version),
            Noop => ok(extlen == 0 && keylen == 0 && bodylen == 0, Command::Noop),
            Quit | QuitQ => ok(
                extlen == 0 && keylen == 0 && bodylen == 0,
                Command::Quit { quiet: op == QuitQ },
            ),
            Flush | FlushQ => ok(
                keylen == 0 && bodylen == extlen && (extlen == 0 || extlen == 4),
                Command::Flush {
                    exptime: be32(ex, 0),
                    quiet: op == FlushQ,
                },
            ),
            Set | SetQ | Add | AddQ | Replace | ReplaceQ => ok(
                extlen == 8 && keylen != 0 && bodylen >= keylen + 8,
                Command::Store {
                    kind: match op {
                        Set | SetQ => StoreKind::Set,
                        Add | AddQ => StoreKind::Add,
                        _ => StoreKind::Replace,
                    },
                    key,
                    flags: be32(ex, 0),
                    exptime: be32(ex, 4),
                    value_len: h.value_len(),
                    quiet: matches!(op, SetQ | AddQ | ReplaceQ),
                },
            ),
            Get | GetQ | GetK | GetKQ => ok(
                extlen == 0 && bodylen == keylen && keylen > 0,
                Command::Get {
                    key,
                    quiet: matches!(op, GetQ | GetKQ),
                    with_key: matches!(op, GetK | GetKQ),
                },
            ),
            Delete | DeleteQ => ok(
                keylen > 0 && extlen == 0 && bodylen == keylen,
                Command::Delete {
                    key,
                    quiet: op == DeleteQ,
                },
            ),
            Increment | IncrementQ | Decrement | DecrementQ => ok(
                keylen > 0 && extlen == 20 && bodylen == keylen + extlen,
                Command::Arith {
                    incr: matches!(op, Increment | IncrementQ),
                    key,
                    delta: be64(ex, 0),
                    initial: be64(ex, 8),
                    exptime: be32(ex, 16),
                    quiet: matches!(op, IncrementQ | DecrementQ),
                },
            ),
            Append | AppendQ | Prepend | PrependQ => ok(
                keylen > 0 && extlen == 0,
                Command::Concat {
                    append: matches!(op, Append | AppendQ),
                    key,
                    value_len: h.value_len(),
                    quiet: matches!(op, AppendQ | PrependQ),
                },
            ),
            // memcached does not check the body length here: any value bytes
            // are left in the input and parsed as the next request.
            Stat => ok(extlen == 0, Command::Stat { key }),
            Touch => ok(
                extlen == 4 && keylen != 0,
                Command::Touch {
                    key,
                    exptime: be32(ex, 0),
                },
            ),
            Gat | GatQ | Gatk | GatkQ => ok(
                extlen == 4 && keylen != 0,
                Command::Gat {
                    key,
                    exptime: be32(ex, 0),
                    quiet: matches!(op, GatQ | GatkQ),
                    with_key: matches!(op, Gatk | GatkQ),
                },
            ),
            // Without SASL, memcached checks the lengths, then answers
            // "Unknown command" and discards the value.
            SaslListMechs => ok(
                extlen == 0 && keylen == 0 && bodylen == 0,
                Command::Unknown { swallow: 0 },
            ),
            SaslAuth | SaslStep => ok(
                extlen == 0 && keylen != 0,
                Command::Unknown {
                    swallow: c_int_len(bodylen - keylen),
                },
            ),
            // memcached 1.6 has no handler for Verbosity.
            Verbosity => Ok(Command::Unknown {
                swallow: c_int_len(bodylen),
            }),
        }
    }
}

/// Append a response header for `opcode`. The caller then appends exactly
/// `extras_len + key_len + value_len` body bytes.
#[allow(clippy::too_many_arguments)]
pub fn write_response_header(
    out: &mut Vec<u8>,
    opcode: u8,
    status: Status,
    opaque: u32,
    cas: u64,
    extras_len: u8,
    key_len: u16,
    value_len: u32,
) {
    Header {
        magic: RES_MAGIC,
        opcode,
        key_len,
        extras_len,
        data_type: 0,
        vbucket_or_status: status as u16,
        body_len: extras_len as u32 + key_len as u32 + value_len,
        opaque,
        cas,
    }
    .encode(out);
}

/// Append a whole response. Lengths must fit the header fields (keys are at
/// most 250 bytes and values at most 1 GB here, so they always do).
/// One argument per header field, hence the allow.
#[allow(clippy::too_many_arguments)]
pub fn write_response(
    out: &mut Vec<u8>,
    opcode: u8,
    status: Status,
    opaque: u32,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) {
    write_response_header(
        out,
        opcode,
        status,
        opaque,
        cas,
        extras.len() as u8,
        key.len() as u16,
        value.len() as u32,
    );
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// Append an error response: status plus memcached's text for it, cas 0.
pub fn write_error(out: &mut Vec<u8>, opcode: u8, opaque: u32, status: Status) {
    write_response(
        out,
        opcode,
        status,
        opaque,
        0,
        &[],
        &[],
        status.text().as_bytes(),
    );
}

/// Append a request (for clients and tests).
pub fn write_request(
    out: &mut Vec<u8>,
    opcode: u8,
    opaque: u32,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) {
    Header {
        magic: REQ_MAGIC,
        opcode,
        key_len: key.len() as u16,
        extras_len: extras.len() as u8,
        data_type: 0,
        vbucket_or_status: 0,
        body_len: (extras.len() + key.len() + value.len()) as u32,
        opaque,
        cas,
    }
    .encode(out);
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// A decoded response (see `client::reply`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Response<'a> {
    pub header: Header,
    pub extras: &'a [u8],
    pub key: &'a [u8],
    pub value: &'a [u8],
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn req(op: u8, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        write_request(&mut v, op, 7, 0, extras, key, value);
        v
    }

    fn decode(buf: &[u8]) -> Result<Command<'_>, ProtocolError> {
        match parse_frame(buf) {
            Parsed::Frame(f) => Command::decode(&f),
            other => panic!("not a frame: {other:?}"),
        }
    }

    #[test]
    fn header_layout_matches_memcached() {
        // A Get for "Hello" as in the binary protocol document's example.
        let b = req(0x00, &[], b"Hello", &[]);
        assert_eq!(
            &b[..HEADER_LEN],
            &[
                0x80, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00,
                0x00, 0x07, 0, 0, 0, 0, 0, 0, 0, 0
            ]
        );
        let mut out = Vec::new();
        write_error(&mut out, 0x00, 0xdeadbeef, Status::KeyNotFound);
        assert_eq!(
            out,
            b"\x81\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x09\xde\xad\xbe\xef\0\0\0\0\0\0\0\0Not found"
        );
    }

    #[test]
    fn incomplete_heads() {
        let b = req(0x01, &[0; 8], b"key", b"value");
        for n in 0..HEADER_LEN + 8 + 3 {
            assert_eq!(parse_frame(&b[..n]), Parsed::Incomplete, "len {n}");
        }
        // The head is complete without the value.
        match parse_frame(&b[..HEADER_LEN + 11]) {
            Parsed::Frame(f) => {
                assert_eq!(f.key, b"key");
                assert_eq!(f.head_len(), HEADER_LEN + 11);
                assert_eq!(f.header.value_len(), 5);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_magic() {
        let mut b = req(0x0a, &[], &[], &[]);
        b[0] = 0x81;
        assert_eq!(parse_frame(&b), Parsed::BadMagic);
    }

    #[test]
    fn store_extras_and_quiet() {
        let mut ex = Vec::new();
        ex.extend_from_slice(&0xdeadbeefu32.to_be_bytes());
        ex.extend_from_slice(&3600u32.to_be_bytes());
        let b = req(0x12, &ex, b"k", b"abc");
        assert_eq!(
            decode(&b),
            Ok(Command::Store {
                kind: StoreKind::Add,
                key: b"k",
                flags: 0xdeadbeef,
                exptime: 3600,
                value_len: 3,
                quiet: true
            })
        );
        // Wrong extras length, or no key: Invalid arguments.
        assert_eq!(
            decode(&req(0x01, &ex[..4], b"k", b"v")),
            Err(ProtocolError::InvalidArguments)
        );
        assert_eq!(
            decode(&req(0x01, &ex, b"", b"v")),
            Err(ProtocolError::InvalidArguments)
        );
    }

    #[test]
    fn arith_extras() {
        let mut ex = Vec::new();
        ex.extend_from_slice(&5u64.to_be_bytes());
        ex.extend_from_slice(&42u64.to_be_bytes());
        ex.extend_from_slice(&ARITH_NO_CREATE.to_be_bytes());
        assert_eq!(
            decode(&req(0x16, &ex, b"n", &[])),
            Ok(Command::Arith {
                incr: false,
                key: b"n",
                delta: 5,
                initial: 42,
                exptime: ARITH_NO_CREATE,
                quiet: true
            })
        );
        // A value after the extras is not allowed.
        assert_eq!(
            decode(&req(0x05, &ex, b"n", b"x")),
            Err(ProtocolError::InvalidArguments)
        );
    }

    #[test]
    fn length_rules() {
        // key longer than the body: Unknown command (and close).
        let mut b = req(0x00, &[], b"k", &[]);
        b[8..12].copy_from_slice(&0u32.to_be_bytes());
        assert_eq!(decode(&b), Err(ProtocolError::BadBodyLength));
        // Key over 250 bytes: Invalid arguments, even for a valid opcode.
        assert_eq!(
            decode(&req(0x00, &[], &[b'k'; 251], &[])),
            Err(ProtocolError::InvalidArguments)
        );
        assert!(decode(&req(0x00, &[], &[b'k'; 250], &[])).is_ok());
        // Get needs a key and nothing else.
        assert_eq!(
            decode(&req(0x00, &[], &[], &[])),
            Err(ProtocolError::InvalidArguments)
        );
        assert_eq!(
            decode(&req(0x00, &[1, 2, 3, 4], b"k", &[])),
            Err(ProtocolError::InvalidArguments)
        );
        // Noop/Version/Quit take nothing.
        for op in [0x0a, 0x0b, 0x07, 0x17] {
            assert_eq!(
                decode(&req(op, &[], &[], b"x")),
                Err(ProtocolError::InvalidArguments)
            );
        }
        assert_eq!(decode(&req(0x0a, &[], &[], &[])), Ok(Command::Noop));
        // Flush: no extras or 4 of them, and nothing else.
        assert_eq!(
            decode(&req(0x18, &[0, 0, 0, 9], &[], &[])),
            Ok(Command::Flush {
                exptime: 9,
                quiet: true
            })
        );
        assert_eq!(
            decode(&req(0x08, &[0, 0], &[], &[])),
            Err(ProtocolError::InvalidArguments)
        );
        // Stat and GAT ignore trailing value bytes (they are not consumed).
        assert_eq!(
            decode(&req(0x10, &[], b"items", b"zz")),
            Ok(Command::Stat { key: b"items" })
        );
        assert_eq!(
            decode(&req(0x1c, &[0, 0, 0, 1], b"k", b"zz")),
            Ok(Command::Touch {
                key: b"k",
                exptime: 1
            })
        );
    }

    #[test]
    fn unknown_and_sasl() {
        // Unknown opcode: swallow the whole body length after extras + key.
        assert_eq!(
            decode(&req(0x30, &[1], b"ab", b"xyz")),
            Ok(Command::Unknown { swallow: 6 })
        );
        assert_eq!(
            decode(&req(0x1b, &[0, 0, 0, 1], &[], &[])),
            Ok(Command::Unknown { swallow: 4 })
        );
        assert_eq!(
            decode(&req(0x20, &[], &[], &[])),
            Ok(Command::Unknown { swallow: 0 })
        );
        assert_eq!(
            decode(&req(0x20, &[], &[], b"x")),
            Err(ProtocolError::InvalidArguments)
        );
        assert_eq!(
            decode(&req(0x21, &[], b"PLAIN", b"\0u\0p")),
            Ok(Command::Unknown { swallow: 4 })
        );
        assert_eq!(
            decode(&req(0x22, &[], &[], b"x")),
            Err(ProtocolError::InvalidArguments)
        );
        // A body length that is negative as a C int swallows nothing.
        let mut b = req(0x30, &[], &[], &[]);
        b[8..12].copy_from_slice(&0x8000_0000u32.to_be_bytes());
        assert_eq!(decode(&b), Ok(Command::Unknown { swallow: 0 }));
        b[8..12].copy_from_slice(&0x7fff_ffffu32.to_be_bytes());
        assert_eq!(
            decode(&b),
            Ok(Command::Unknown {
                swallow: 0x7fff_ffff
            })
        );
    }

    #[test]
    fn gets_and_gats() {
        assert_eq!(
            decode(&req(0x0d, &[], b"k", &[])),
            Ok(Command::Get {
                key: b"k",
                quiet: true,
                with_key: true
            })
        );
        assert_eq!(
            decode(&req(0x23, &[0, 0, 1, 0], b"k", &[])),
            Ok(Command::Gat {
                key: b"k",
                exptime: 256,
                quiet: false,
                with_key: true
            })
        );
        assert_eq!(
            decode(&req(0x1e, &[], b"k", &[])),
            Err(ProtocolError::InvalidArguments)
        );
    }

    #[test]
    fn status_texts() {
        assert_eq!(Status::KeyExists.text(), "Data exists for key.");
        assert_eq!(Status::OutOfMemory.text(), "Out of memory");
        for v in 0..=u16::MAX {
            if let Some(s) = Status::from_u16(v) {
                assert_eq!(s as u16, v);
            }
        }
        for b in 0..=u8::MAX {
            if let Some(op) = Opcode::from_u8(b) {
                assert_eq!(op as u8, b);
            }
        }
    }

    proptest! {
        #[test]
        fn request_round_trip(
            op in any::<u8>(),
            opaque in any::<u32>(),
            cas in any::<u64>(),
            extras in proptest::collection::vec(any::<u8>(), 0..32),
            key in proptest::collection::vec(any::<u8>(), 0..300),
            value in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let mut b = Vec::new();
            write_request(&mut b, op, opaque, cas, &extras, &key, &value);
            match parse_frame(&b) {
                Parsed::Frame(f) => {
                    prop_assert_eq!(f.header.opcode, op);
                    prop_assert_eq!(f.header.opaque, opaque);
                    prop_assert_eq!(f.header.cas, cas);
                    prop_assert_eq!(f.extras, &extras[..]);
                    prop_assert_eq!(f.key, &key[..]);
                    prop_assert_eq!(f.header.value_len() as usize, value.len());
                    prop_assert_eq!(&b[f.head_len()..], &value[..]);
                    // Decoding never panics, and a decoded key is the frame's.
                    match Command::decode(&f) {
                        Ok(Command::Get { key: k, .. }) | Ok(Command::Delete { key: k, .. }) => {
                            prop_assert_eq!(k, &key[..]);
                            prop_assert!(!key.is_empty() && key.len() <= KEY_MAX_LEN);
                            prop_assert!(extras.is_empty() && value.is_empty());
                        }
                        Ok(Command::Store { value_len, .. }) => {
                            prop_assert_eq!(value_len as usize, value.len());
                            prop_assert_eq!(extras.len(), 8);
                        }
                        Ok(_) => prop_assert!(key.len() <= KEY_MAX_LEN),
                        Err(ProtocolError::InvalidArguments) => {}
                        Err(ProtocolError::BadBodyLength) => prop_assert!(false, "lengths are consistent"),
                    }
                }
                other => prop_assert!(false, "{:?}", other),
            }
        }

        #[test]
        fn response_round_trip(
            op in any::<u8>(),
            status in prop::sample::select(vec![0u16, 1, 2, 3, 4, 5, 6, 0x20, 0x21, 0x81, 0x82]),
            opaque in any::<u32>(),
            cas in any::<u64>(),
            extras in proptest::collection::vec(any::<u8>(), 0..8),
            key in proptest::collection::vec(any::<u8>(), 0..300),
            value in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let status = Status::from_u16(status).unwrap();
            let mut b = Vec::new();
            write_response(&mut b, op, status, opaque, cas, &extras, &key, &value);
            let Ok(Some((crate::client::Reply::Binary(r), n))) = crate::client::parse_reply(&b) else {
                return Err(TestCaseError::fail("not a whole response"));
            };
            prop_assert_eq!(n, b.len());
            prop_assert_eq!(r.header.opcode, op);
            prop_assert_eq!(r.header.vbucket_or_status, status as u16);
            prop_assert_eq!(r.header.opaque, opaque);
            prop_assert_eq!(r.header.cas, cas);
            prop_assert_eq!(r.extras, &extras[..]);
            prop_assert_eq!(r.key, &key[..]);
            prop_assert_eq!(r.value, &value[..]);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            if let Parsed::Frame(f) = parse_frame(&bytes) {
                prop_assert!(f.head_len() <= bytes.len());
                let _ = Command::decode(&f);
            }
            let _ = crate::client::parse_reply(&bytes);
        }

        #[test]
        fn arbitrary_heads_never_panic(
            op in any::<u8>(),
            key_len in any::<u16>(),
            ext_len in any::<u8>(),
            body_len in any::<u32>(),
            tail in proptest::collection::vec(any::<u8>(), 0..600),
        ) {
            // Headers with random (inconsistent) lengths followed by random bytes.
            let mut b = Vec::new();
            Header { magic: REQ_MAGIC, opcode: op, key_len, extras_len: ext_len, data_type: 0,
                     vbucket_or_status: 0, body_len, opaque: 0, cas: 0 }.encode(&mut b);
            b.extend_from_slice(&tail);
            match parse_frame(&b) {
                Parsed::Frame(f) => {
                    prop_assert_eq!(f.head_len(), HEADER_LEN + ext_len as usize + key_len as usize);
                    if let Ok(Command::Unknown { swallow }) = Command::decode(&f) {
                        prop_assert!(swallow <= body_len as u64);
                    }
                }
                Parsed::Incomplete => prop_assert!(b.len() < HEADER_LEN + ext_len as usize + key_len as usize),
                Parsed::BadMagic => prop_assert!(false),
            }
        }
    }
}
