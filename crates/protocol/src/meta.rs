//! Parser for memcached's meta commands (`mg`, `ms`, `md`, `ma`, `me`, `mn`):
//! one request line (without its trailing `\r\n`) becomes a [`MetaCommand`]
//! that borrows its flag tokens from the line.
//!
//! The rules follow memcached 1.6.18's `proto_text.c` (`process_mget_command`,
//! `process_mset_command`, `process_mdelete_command`,
//! `process_marithmetic_command`, `process_meta_command` and the shared
//! `_meta_flag_preparse`) and `base64.c`, checked byte for byte against a
//! running memcached 1.6.18. Quirks reproduced on purpose:
//!
//! - All four commands share one flag pre-parser, so every command accepts
//!   every known flag (`md k v` is fine, `v` is just ignored).
//! - Flags are checked left to right: an unknown flag (`invalid flag`) or a
//!   repeated one (`duplicate flag`, also any byte >= 127) stops at once, while
//!   a bad numeric token only records its message and parsing goes on, so the
//!   *last* recorded message wins (`F` records none: `bad command line format`).
//!   `md` and `ma` replace every pre-parse message by `invalid or duplicate flag`.
//! - At most 17 flag tokens (16 for `ms`, whose data length takes one slot);
//!   `mg` says `options flags are too long`, the others `options flags too long`.
//! - The opaque token may be 32 bytes including its `O`. For `ms` and `md` a
//!   longer one is an error before anything happens; `mg` and `ma` only notice
//!   while writing their reply, after the item was touched or incremented, so
//!   the parser leaves that check to the executor ([`MetaCommand::opaque_too_long`]).
//! - `b` keys go through memcached's lenient base64 decoder (junk bytes are
//!   skipped, decoding stops after the first padded block), not a strict one.
//!
//! Flags memcached 1.6.18 answers `CLIENT_ERROR invalid flag` to: `E<cas>`
//! (use this CAS for the item written) and `x` (`md`: leave an empty item),
//! from memcached 1.6.45's protocol.txt, and our extension `w<N>` on `ms`
//! (store a recomputation cost, u32; bare `w` on `mg` returns it). The
//! parser only collects flags; what they mean is the executor's
//! (`crates/server/src/meta.rs`). See docs/protocol.md.

use crate::text::{strtol32, strtoul32, strtoull, KEY_MAX_LENGTH};

/// Most flag tokens memcached accepts after the key (`MFLAG_MAX_OPT_LENGTH`
/// is 20 tokens counting the command, the key and the terminal token).
pub const MAX_FLAGS: usize = 17;

/// Longest opaque token, its `O` included (`MFLAG_MAX_OPAQUE_LENGTH`).
pub const MAX_OPAQUE: usize = 32;

/// Longest key after base64 decoding: 250 encoded bytes give at most 187.
const DECODED_KEY_MAX: usize = KEY_MAX_LENGTH / 4 * 3 + 3;

/// Which meta command a line holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaOp {
    /// `mg`
    Get,
    /// `ms`
    Set,
    /// `md`
    Delete,
    /// `ma`
    Arith,
    /// `me`
    Debug,
    /// `mn`
    Noop,
}

/// Why a meta request was rejected; each maps to memcached's exact reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaErrorKind {
    /// `ERROR`: unknown command or no key.
    Unknown,
    BadFormat,
    BadToken,
    InvalidFlag,
    DuplicateFlag,
    /// What `md` and `ma` say for every flag error.
    InvalidOrDuplicateFlag,
    DecodingKey,
    /// `mg`'s wording of "too many flags".
    FlagsAreTooLong,
    /// `ms`/`md`/`ma`'s wording of "too many flags".
    FlagsTooLong,
    OpaqueTooLong,
    MTokenLength,
    InvalidSetMode,
    InvalidArithMode,
    InvalidInitial,
    InvalidDelta,
}

impl MetaErrorKind {
    /// The reply line, `\r\n` included.
    pub fn line(self) -> &'static [u8] {
        use MetaErrorKind::*;
        match self {
            Unknown => b"ERROR\r\n",
            BadFormat => b"CLIENT_ERROR bad command line format\r\n",
            BadToken => b"CLIENT_ERROR bad token in command line format\r\n",
            InvalidFlag => b"CLIENT_ERROR invalid flag\r\n",
            DuplicateFlag => b"CLIENT_ERROR duplicate flag\r\n",
            InvalidOrDuplicateFlag => b"CLIENT_ERROR invalid or duplicate flag\r\n",
            DecodingKey => b"CLIENT_ERROR error decoding key\r\n",
            FlagsAreTooLong => b"CLIENT_ERROR options flags are too long\r\n",
            FlagsTooLong => b"CLIENT_ERROR options flags too long\r\n",
            OpaqueTooLong => b"CLIENT_ERROR opaque token too long\r\n",
            MTokenLength => b"CLIENT_ERROR incorrect length for M token\r\n",
            InvalidSetMode => b"CLIENT_ERROR invalid mode for ms M token\r\n",
            InvalidArithMode => b"CLIENT_ERROR invalid mode for ma M token\r\n",
            InvalidInitial => b"CLIENT_ERROR invalid numeric initial value\r\n",
            InvalidDelta => b"CLIENT_ERROR invalid numeric delta value\r\n",
        }
    }
}

/// A rejected meta request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaError {
    pub kind: MetaErrorKind,
    /// Bytes after the request line that memcached reads and throws away
    /// (an `ms` whose data length was understood: length + 2). Errors found
    /// before the length was parsed leave the data block to be read as
    /// commands, exactly like memcached.
    pub swallow: usize,
}

impl MetaError {
    fn new(kind: MetaErrorKind) -> MetaError {
        MetaError { kind, swallow: 0 }
    }

    /// The reply line, `\r\n` included.
    pub fn line(&self) -> &'static [u8] {
        self.kind.line()
    }
}

impl std::fmt::Display for MetaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let l = self.line();
        f.write_str(std::str::from_utf8(&l[..l.len() - 2]).unwrap_or("ERROR"))
    }
}

impl std::error::Error for MetaError {}

/// The set of single-letter flags present on a request (A-Z, a-z).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlagSet(u64);

impl FlagSet {
    fn bit(c: u8) -> u64 {
        match c {
            b'A'..=b'Z' => 1 << (c - b'A'),
            b'a'..=b'z' => 1 << (26 + c - b'a'),
            _ => 0,
        }
    }

    fn insert(&mut self, c: u8) {
        self.0 |= Self::bit(c);
    }

    /// Whether flag `c` was sent.
    #[inline]
    pub fn has(&self, c: u8) -> bool {
        let b = Self::bit(c);
        b != 0 && self.0 & b != 0
    }
}

#[derive(Clone, Copy, Debug)]
enum Key<'a> {
    Raw(&'a [u8]),
    Decoded([u8; DECODED_KEY_MAX], u8),
}

/// One parsed meta request. Numeric tokens are kept as the client sent them
/// (after memcached's C-number rules); turning TTLs into expiry times needs the
/// server clock and is the executor's job.
#[derive(Clone, Debug)]
pub struct MetaCommand<'a> {
    pub op: MetaOp,
    key: Key<'a>,
    /// The key was sent base64-encoded (`b`); replies encode it again.
    pub base64: bool,
    /// Flags present, for quick tests.
    pub flags: FlagSet,
    /// Flag tokens in request order (memcached answers in that order).
    tokens: [&'a [u8]; MAX_FLAGS],
    ntokens: usize,
    /// `ms`: length of the data block (without its `\r\n`).
    pub datalen: usize,
    /// `O`: the whole opaque token, `O` included (echoed as is).
    pub opaque: Option<&'a [u8]>,
    /// `T`: new TTL (mg/ma/md), or the item's TTL (ms).
    pub ttl: Option<i32>,
    /// `N`: vivify on miss with this TTL.
    pub vivify: Option<i32>,
    /// `R`: win the recache token when the remaining TTL is below this.
    pub recache: Option<i32>,
    /// `C`: compare CAS.
    pub cas: Option<u64>,
    /// `E` (memcached 1.6.45): CAS to give the item written.
    pub new_cas: Option<u64>,
    /// `F`: client flags (0 when absent).
    pub client_flags: u32,
    /// `M`: mode byte.
    pub mode: Option<u8>,
    /// `D`: delta (1 when absent).
    pub delta: u64,
    /// `J`: initial value (0 when absent).
    pub initial: u64,
    /// `w<N>` (extension): recomputation cost.
    pub cost: Option<u32>,
}

impl<'a> MetaCommand<'a> {
    fn new(op: MetaOp, key: &'a [u8]) -> MetaCommand<'a> {
        MetaCommand {
            op,
            key: Key::Raw(key),
            base64: false,
            flags: FlagSet::default(),
            tokens: [&[]; MAX_FLAGS],
            ntokens: 0,
            datalen: 0,
            opaque: None,
            ttl: None,
            vivify: None,
            recache: None,
            cas: None,
            new_cas: None,
            client_flags: 0,
            mode: None,
            delta: 1,
            initial: 0,
            cost: None,
        }
    }

    /// The key (decoded when `b` was sent). Empty for `mn`.
    pub fn key(&self) -> &[u8] {
        match &self.key {
            Key::Raw(k) => k,
            Key::Decoded(buf, n) => buf.get(..*n as usize).unwrap_or(&[]),
        }
    }

    /// The flag tokens in request order; each starts with its flag letter.
    pub fn tokens(&self) -> impl Iterator<Item = &'a [u8]> + '_ {
        self.tokens.iter().take(self.ntokens).copied()
    }

    /// Whether flag `c` was sent.
    #[inline]
    pub fn has(&self, c: u8) -> bool {
        self.flags.has(c)
    }

    /// The opaque token is longer than memcached allows. `mg` and `ma` report
    /// it only when they reach the `O` while writing the reply.
    pub fn opaque_too_long(&self) -> bool {
        self.opaque.is_some_and(|o| o.len() > MAX_OPAQUE)
    }
}

/// Parse one meta request line (no trailing `\r\n`). Never panics.
pub fn parse(line: &[u8]) -> Result<MetaCommand<'_>, MetaError> {
    use MetaErrorKind::*;
    // memcached works on a C string: a NUL ends the line.
    let line = match memchr::memchr(0, line) {
        Some(i) => &line[..i],
        None => line,
    };
    let mut words = crate::text::words(line);
    let op = match words.next() {
        Some([b'm', c]) => match c {
            b'g' => MetaOp::Get,
            b's' => MetaOp::Set,
            b'd' => MetaOp::Delete,
            b'a' => MetaOp::Arith,
            b'e' => MetaOp::Debug,
            b'n' => MetaOp::Noop,
            _ => return Err(MetaError::new(Unknown)),
        },
        _ => return Err(MetaError::new(Unknown)),
    };
    if op == MetaOp::Noop {
        // `mn` ignores whatever follows.
        return Ok(MetaCommand::new(op, &[]));
    }
    let Some(key) = words.next() else {
        // `me` checks its token count itself; the others use WANT_TOKENS.
        let kind = if op == MetaOp::Debug {
            BadFormat
        } else {
            Unknown
        };
        return Err(MetaError::new(kind));
    };
    if key.len() > KEY_MAX_LENGTH {
        return Err(MetaError::new(BadFormat));
    }
    let mut cmd = MetaCommand::new(op, key);
    if op == MetaOp::Debug {
        // `me <key> b`: only the token right after the key counts.
        if words.next() == Some(b"b") {
            decode_key(&mut cmd).map_err(|_| MetaError::new(BadFormat))?;
        }
        return Ok(cmd);
    }

    if op == MetaOp::Set {
        let Some(len) = words.next() else {
            return Err(MetaError::new(BadFormat));
        };
        // Count before looking at the length: memcached checks the token
        // count first.
        let rest = words.clone().count();
        if rest > MAX_FLAGS - 1 {
            return Err(MetaError::new(FlagsTooLong));
        }
        let vlen = strtol32(len).ok_or(MetaError::new(BadFormat))?;
        if !(0..=i32::MAX - 2).contains(&vlen) {
            return Err(MetaError::new(BadFormat));
        }
        cmd.datalen = vlen as usize;
    }
    let swallow = if op == MetaOp::Set {
        cmd.datalen + 2
    } else {
        0
    };
    let fail = |kind| MetaError { kind, swallow };

    for w in words {
        if cmd.ntokens == MAX_FLAGS {
            return Err(MetaError::new(if op == MetaOp::Get {
                FlagsAreTooLong
            } else {
                FlagsTooLong
            }));
        }
        cmd.tokens[cmd.ntokens] = w;
        cmd.ntokens += 1;
    }

    if let Err(kind) = preparse(&mut cmd) {
        return Err(fail(match op {
            MetaOp::Delete | MetaOp::Arith => InvalidOrDuplicateFlag,
            _ => kind,
        }));
    }

    let bad_mode = match op {
        MetaOp::Set => !matches!(cmd.mode, None | Some(b'E' | b'A' | b'P' | b'R' | b'S')),
        MetaOp::Arith => !matches!(cmd.mode, None | Some(b'I' | b'+' | b'D' | b'-')),
        _ => false,
    };
    if bad_mode {
        let kind = if op == MetaOp::Set {
            InvalidSetMode
        } else {
            InvalidArithMode
        };
        return Err(fail(kind));
    }
    // mg and ma only notice a long opaque while replying (see the module doc).
    if matches!(op, MetaOp::Set | MetaOp::Delete) && cmd.opaque_too_long() {
        return Err(fail(OpaqueTooLong));
    }
    Ok(cmd)
}

/// memcached's `_meta_flag_preparse`: validate the flags left to right and
/// pick up their tokens. Returns the message memcached would print.
fn preparse(cmd: &mut MetaCommand<'_>) -> Result<(), MetaErrorKind> {
    use MetaErrorKind::*;
    let mut seen: u128 = 0;
    let mut has_error = false;
    // The message of the last failed token; `F` fails without one.
    let mut message = BadFormat;
    for i in 0..cmd.ntokens {
        let tok = cmd.tokens[i];
        let Some((&o, arg)) = tok.split_first() else {
            continue;
        };
        if o >= 127 || seen & (1u128 << o) != 0 {
            return Err(DuplicateFlag);
        }
        seen |= 1u128 << o;
        let mut bad = |m: Option<MetaErrorKind>| {
            has_error = true;
            if let Some(m) = m {
                message = m;
            }
        };
        match o {
            b'b' => {
                if decode_key(cmd).is_err() {
                    bad(Some(DecodingKey));
                }
            }
            b'N' | b'T' | b'R' => match strtol32(arg) {
                Some(v) => match o {
                    b'N' => cmd.vivify = Some(v),
                    b'T' => cmd.ttl = Some(v),
                    _ => cmd.recache = Some(v),
                },
                None => bad(Some(BadToken)),
            },
            b'O' => cmd.opaque = Some(tok),
            b'P' | b'L' | b'l' | b'k' | b's' | b't' | b'c' | b'f' | b'v' | b'h' | b'u' | b'q'
            | b'I' | b'x' => {}
            b'F' => match strtoul32(arg) {
                Some(v) => cmd.client_flags = v,
                None => bad(None),
            },
            b'C' | b'E' => match strtoull(arg) {
                Some(v) if o == b'C' => cmd.cas = Some(v),
                Some(v) => cmd.new_cas = Some(v),
                None => bad(Some(BadToken)),
            },
            b'M' => match arg {
                [m] => cmd.mode = Some(*m),
                _ => bad(Some(MTokenLength)),
            },
            b'J' => match strtoull(arg) {
                Some(v) => cmd.initial = v,
                None => bad(Some(InvalidInitial)),
            },
            b'D' => match strtoull(arg) {
                Some(v) => cmd.delta = v,
                None => bad(Some(InvalidDelta)),
            },
            b'w' => {
                if !arg.is_empty() {
                    match parse_cost(arg) {
                        Some(v) => cmd.cost = Some(v),
                        None => bad(Some(BadToken)),
                    }
                }
            }
            _ => return Err(InvalidFlag),
        }
        cmd.flags.insert(o);
    }
    if has_error {
        Err(message)
    } else {
        Ok(())
    }
}

/// `w<N>`: decimal digits only, within u32 (same rule as the text `cost=`).
fn parse_cost(digits: &[u8]) -> Option<u32> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    u32::try_from(strtoull(digits)?).ok()
}

/// Replace the raw key by its base64 decoding.
fn decode_key(cmd: &mut MetaCommand<'_>) -> Result<(), ()> {
    let Key::Raw(raw) = cmd.key else {
        return Ok(());
    };
    let mut buf = [0u8; DECODED_KEY_MAX];
    let n = base64_decode_lenient(raw, &mut buf).ok_or(())?;
    cmd.key = Key::Decoded(buf, n as u8);
    cmd.base64 = true;
    Ok(())
}

/// Value of a base64 alphabet byte; `=` counts as a (zero) data byte, like
/// memcached's decode table. None for bytes the decoder skips.
fn b64_value(c: u8) -> Option<u8> {
    match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        b'=' => Some(0),
        _ => None,
    }
}

/// Decode base64 the way memcached's `base64_decode` does (its rules, our
/// code): bytes outside the alphabet are skipped; the number of alphabet bytes
/// (`=` included) must be a non-zero multiple of 4; decoding stops after the
/// first 4-byte group containing padding, which drops one byte per `=` (three
/// or four `=` in a group is an error). Returns the decoded length. A strict
/// decoder (the `base64` crate) would reject keys memcached accepts.
pub fn base64_decode_lenient(src: &[u8], out: &mut [u8]) -> Option<usize> {
    let count = src.iter().filter(|&&c| b64_value(c).is_some()).count();
    if count == 0 || count % 4 != 0 || count / 4 * 3 > out.len() {
        return None;
    }
    let mut block = [0u8; 4];
    let (mut n, mut pos, mut pad) = (0usize, 0usize, 0usize);
    for &c in src {
        let Some(v) = b64_value(c) else { continue };
        if c == b'=' {
            pad += 1;
        }
        block[n] = v;
        n += 1;
        if n == 4 {
            let bytes = [
                (block[0] << 2) | (block[1] >> 4),
                (block[1] << 4) | (block[2] >> 2),
                (block[2] << 6) | block[3],
            ];
            let keep = match pad {
                0 => 3,
                1 => 2,
                2 => 1,
                _ => return None,
            };
            out.get_mut(pos..pos + keep)?
                .copy_from_slice(bytes.get(..keep)?);
            pos += keep;
            n = 0;
            if pad > 0 {
                break;
            }
        }
    }
    if pos == 0 {
        return None;
    }
    Some(pos)
}

/// Standard padded base64, as memcached prints binary keys (`k` flag, `me`).
pub fn base64_encode(src: &[u8], out: &mut Vec<u8>) {
    use base64::Engine as _;
    let start = out.len();
    out.resize(start + src.len().div_ceil(3) * 4, 0);
    // The buffer is exactly the encoded size, so this cannot fail; on the
    // impossible error leave nothing half-written.
    match base64::engine::general_purpose::STANDARD.encode_slice(src, &mut out[start..]) {
        Ok(n) => out.truncate(start + n),
        Err(_) => out.truncate(start),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use MetaErrorKind::*;

    fn err(line: &str) -> MetaError {
        match parse(line.as_bytes()) {
            Ok(c) => panic!("{line:?} parsed as {c:?}"),
            Err(e) => e,
        }
    }

    fn kind(line: &str) -> MetaErrorKind {
        err(line).kind
    }

    fn ok(line: &str) -> MetaCommand<'_> {
        match parse(line.as_bytes()) {
            Ok(c) => c,
            Err(e) => panic!("{line:?} failed: {e}"),
        }
    }

    fn toks<'a>(c: &MetaCommand<'a>) -> Vec<&'a [u8]> {
        c.tokens().collect()
    }

    #[test]
    fn command_words() {
        assert_eq!(ok("mg k").op, MetaOp::Get);
        assert_eq!(ok("ms k 1").op, MetaOp::Set);
        assert_eq!(ok("md k").op, MetaOp::Delete);
        assert_eq!(ok("ma k").op, MetaOp::Arith);
        assert_eq!(ok("me k").op, MetaOp::Debug);
        assert_eq!(ok("mn").op, MetaOp::Noop);
        assert_eq!(ok("mn foo bar").op, MetaOp::Noop);
        assert_eq!(kind("mx k"), Unknown);
        assert_eq!(kind("mgg k"), Unknown);
        assert_eq!(kind(""), Unknown);
        assert_eq!(kind("mg"), Unknown);
        assert_eq!(kind("mg   "), Unknown);
        assert_eq!(kind("ms"), Unknown);
        assert_eq!(kind("md"), Unknown);
        assert_eq!(kind("ma"), Unknown);
        assert_eq!(kind("me"), BadFormat);
    }

    #[test]
    fn spaces_only_separate_tokens() {
        let c = ok("  mg   k   v  ");
        assert_eq!(c.key(), b"k");
        assert!(c.has(b'v'));
        // A tab is part of the key, as in memcached.
        assert_eq!(ok("mg k\tv").key(), b"k\tv");
        // A NUL ends the line.
        let c = ok("mg k v\0 zz");
        assert!(c.has(b'v'));
        assert_eq!(toks(&c), vec![&b"v"[..]]);
    }

    #[test]
    fn key_length() {
        let k250 = "a".repeat(250);
        assert_eq!(ok(&format!("mg {k250} v")).key().len(), 250);
        for cmd in ["mg", "md", "ma", "me"] {
            assert_eq!(kind(&format!("{cmd} {k250}a")), BadFormat, "{cmd}");
        }
        let e = err(&format!("ms {k250}a 1"));
        assert_eq!((e.kind, e.swallow), (BadFormat, 0));
    }

    #[test]
    fn flag_tokens_keep_request_order() {
        let c = ok("mg k t O12 v c k");
        assert_eq!(
            toks(&c),
            vec![&b"t"[..], &b"O12"[..], &b"v"[..], &b"c"[..], &b"k"[..]]
        );
        assert_eq!(c.opaque, Some(&b"O12"[..]));
        for f in *b"tOvck" {
            assert!(c.has(f), "{}", f as char);
        }
        assert!(!c.has(b's'));
        assert!(!c.has(b'1'));
    }

    #[test]
    fn too_many_flags() {
        let flags: Vec<String> = ('a'..='z').map(|c| c.to_string()).collect();
        let line = |cmd: &str, n: usize| format!("{cmd} k {}", flags[..n].join(" "));
        // 17 flags pass the count check (and then fail on the invalid `a`).
        assert_eq!(kind(&line("mg", 17)), InvalidFlag);
        assert_eq!(kind(&line("mg", 18)), FlagsAreTooLong);
        assert_eq!(kind(&line("md", 17)), InvalidOrDuplicateFlag);
        assert_eq!(kind(&line("md", 18)), FlagsTooLong);
        assert_eq!(kind(&line("ma", 18)), FlagsTooLong);
        // ms: the data length uses one of the slots.
        let ms = |n: usize| format!("ms k 1 {}", flags[..n].join(" "));
        assert_eq!(err(&ms(16)).kind, InvalidFlag);
        let e = err(&ms(17));
        assert_eq!((e.kind, e.swallow), (FlagsTooLong, 0));
        // The count is checked before the length.
        assert_eq!(
            kind(&format!("ms k abc {}", flags[..17].join(" "))),
            FlagsTooLong
        );
        // Valid 17-flag mg.
        let c = ok("mg k c f h k l O1 q s t u v N1 R1 T0 P L I");
        assert_eq!(c.tokens().count(), 17);
    }

    #[test]
    fn invalid_and_duplicate_flags() {
        assert_eq!(kind("mg k zz"), InvalidFlag);
        assert_eq!(kind("mg k 1"), InvalidFlag);
        assert_eq!(kind("mg k k k"), DuplicateFlag);
        assert_eq!(kind("mg k \u{80}"), DuplicateFlag);
        assert_eq!(kind("mg k \x7f"), DuplicateFlag);
        assert_eq!(kind("mg k O1 O2"), DuplicateFlag);
        assert_eq!(kind("ms k 1 zz"), InvalidFlag);
        assert_eq!(kind("md k zz"), InvalidOrDuplicateFlag);
        assert_eq!(kind("md k k k"), InvalidOrDuplicateFlag);
        assert_eq!(kind("ma k zz"), InvalidOrDuplicateFlag);
        // Every known flag is accepted by every command.
        for cmd in ["mg YQ==", "ms YQ== 1", "md YQ==", "ma YQ=="] {
            for flags in [
                "b l O1 P L k s t c f v h u q I x",
                "F1 C1 E1 M+ J1 D1 T1 N1 R1 w",
            ] {
                let mut line = format!("{cmd} {flags}");
                if cmd.starts_with("ms") {
                    line = line.replace("M+", "MS");
                }
                let c = ok(&line);
                assert_eq!(c.tokens().count(), flags.split(' ').count(), "{line}");
            }
        }
    }

    #[test]
    fn last_token_error_wins() {
        assert_eq!(kind("mg k T"), BadToken);
        assert_eq!(kind("mg k Tx"), BadToken);
        assert_eq!(kind("mg k T1x"), BadToken);
        assert_eq!(kind("mg k Fx"), BadFormat);
        assert_eq!(kind("mg k Tx Fx"), BadToken);
        assert_eq!(kind("mg k Fx Tx"), BadToken);
        assert_eq!(kind("mg k M Tx"), BadToken);
        assert_eq!(kind("mg k Tx M"), MTokenLength);
        assert_eq!(kind("mg k Tx b"), DecodingKey);
        assert_eq!(kind("mg k b Tx"), BadToken);
        assert_eq!(kind("mg k C"), BadToken);
        assert_eq!(kind("mg k C D"), InvalidDelta);
        assert_eq!(kind("mg k J"), InvalidInitial);
        // An invalid or duplicate flag stops at once, whatever came before.
        assert_eq!(kind("mg k Tx b zz"), InvalidFlag);
        assert_eq!(kind("ms k 2 Tx Fx k k"), DuplicateFlag);
    }

    #[test]
    fn numbers_follow_c_rules() {
        let c = ok("ms k 2 F4294967296 T4294967396 C18446744073709551615");
        assert_eq!(c.client_flags, 0);
        assert_eq!(c.ttl, Some(100));
        assert_eq!(c.cas, Some(u64::MAX));
        assert_eq!(ok("ms k 2 F-18446744073709551615").client_flags, 1);
        assert_eq!(ok("ms k 2 F+7").client_flags, 7);
        assert_eq!(ok("ms k 2 F-0").client_flags, 0);
        assert_eq!(kind("ms k 2 F-1"), BadFormat);
        assert_eq!(kind("ms k 2 F18446744073709551616"), BadFormat);
        assert_eq!(ok("ms k 2 T\t5").ttl, Some(5));
        assert_eq!(ok("ms k 2 T5\tx").ttl, Some(5));
        assert_eq!(ok("mg k T-5").ttl, Some(-5));
        assert_eq!(kind("ma k D-1"), InvalidOrDuplicateFlag);
        assert_eq!(kind("mg k D-1"), InvalidDelta);
        assert_eq!(ok("ma k D18446744073709551615").delta, u64::MAX);
        assert_eq!(ok("ma k").delta, 1);
        assert_eq!(ok("ma k").initial, 0);
        assert_eq!(ok("ma k J7").initial, 7);
    }

    #[test]
    fn set_length() {
        let c = ok("ms k 5 T0");
        assert_eq!(c.datalen, 5);
        assert_eq!(ok("ms k 01").datalen, 1);
        assert_eq!(ok("ms k +1").datalen, 1);
        assert_eq!(ok("ms k 1\t").datalen, 1);
        // 32-bit truncation, like memcached's safe_strtol.
        assert_eq!(ok("ms k 4294967298").datalen, 2);
        assert_eq!(ok("ms k 2147483645").datalen, 2147483645);
        for bad in ["ms k", "ms k abc", "ms k -1", "ms k 2147483646", "ms k\t2"] {
            let e = err(bad);
            assert_eq!((e.kind, e.swallow), (BadFormat, 0), "{bad}");
        }
    }

    #[test]
    fn set_errors_swallow_the_data_block() {
        for (line, k) in [
            ("ms k 2 Tx", BadToken),
            ("ms k 2 zz", InvalidFlag),
            ("ms k 2 MX", InvalidSetMode),
            ("ms k 2 MEE", MTokenLength),
            ("ms k 2 M", MTokenLength),
            ("ms k 2 O12345678901234567890123456789012", OpaqueTooLong),
            (
                "ms k 2 O12345678901234567890123456789012 MX",
                InvalidSetMode,
            ),
            ("ms k 2 O12345678901234567890123456789012 Fx", BadFormat),
            ("ms k 2 b", DecodingKey),
        ] {
            let e = err(line);
            assert_eq!((e.kind, e.swallow), (k, 4), "{line}");
        }
        for m in ["E", "A", "P", "R", "S"] {
            assert_eq!(ok(&format!("ms k 1 M{m}")).mode, Some(m.as_bytes()[0]));
        }
    }

    #[test]
    fn opaque_length() {
        let o31 = format!("O{}", "1".repeat(31));
        let o32 = format!("O{}", "1".repeat(32));
        assert!(!ok(&format!("mg k {o31}")).opaque_too_long());
        // mg and ma defer the check to the executor.
        assert!(ok(&format!("mg k {o32}")).opaque_too_long());
        assert!(ok(&format!("ma k {o32}")).opaque_too_long());
        assert_eq!(kind(&format!("md k {o32}")), OpaqueTooLong);
        assert_eq!(kind(&format!("md k q {o32}")), OpaqueTooLong);
        assert_eq!(ok("mg k O").opaque, Some(&b"O"[..]));
    }

    #[test]
    fn arith_modes() {
        for m in ["I", "+", "D", "-"] {
            assert!(ok(&format!("ma k M{m}")).mode.is_some());
        }
        assert_eq!(kind("ma k MX"), InvalidArithMode);
        assert_eq!(kind("ma k MII"), InvalidOrDuplicateFlag);
        // mg and md accept (and ignore) any mode byte.
        assert_eq!(ok("mg k MX").mode, Some(b'X'));
        assert_eq!(ok("md k MX").mode, Some(b'X'));
    }

    #[test]
    fn base64_keys() {
        let c = ok("mg YQ== b k v");
        assert_eq!(c.key(), b"a");
        assert!(c.base64);
        assert_eq!(ok("mg YWJj b").key(), b"abc");
        // memcached's decoder quirks.
        assert_eq!(ok("mg YW=j b").key(), b"a`");
        assert_eq!(ok("mg YQ==YQ== b").key(), b"a");
        assert_eq!(ok("mg Y!Q== b").key(), b"a");
        for bad in [
            "mg YQ b",
            "mg YQ= b",
            "mg YQ=== b",
            "mg Y b",
            "mg ==== b",
            "mg k b",
        ] {
            assert_eq!(kind(bad), DecodingKey, "{bad}");
        }
        assert_eq!(kind("md YQ b"), InvalidOrDuplicateFlag);
        // me: only a `b` right after the key counts, and failures are format errors.
        assert_eq!(ok("me YQ== b").key(), b"a");
        assert_eq!(ok("me YQ== x b").key(), b"YQ==");
        assert_eq!(kind("me a3 b"), BadFormat);
        // The longest key decodes without overflow.
        let long = "QUJD".repeat(62) + "QQ";
        assert_eq!(long.len(), 250);
        assert_eq!(kind(&format!("mg {long} b")), DecodingKey);
        let long = "QUJD".repeat(62);
        assert_eq!(ok(&format!("mg {long} b")).key().len(), 186);
    }

    #[test]
    fn base64_encode_matches_memcached() {
        let mut out = b"k".to_vec();
        base64_encode(b"a", &mut out);
        assert_eq!(out, b"kYQ==");
        let mut out = Vec::new();
        base64_encode(b"a`", &mut out);
        assert_eq!(out, b"YWA=");
        let mut out = Vec::new();
        base64_encode(b"abc", &mut out);
        assert_eq!(out, b"YWJj");
    }

    #[test]
    fn extension_flags() {
        let c = ok("ms k 1 w42 E99");
        assert_eq!(c.cost, Some(42));
        assert_eq!(c.new_cas, Some(99));
        let c = ok("mg k w");
        assert!(c.has(b'w'));
        assert_eq!(c.cost, None);
        assert_eq!(ok("ms k 1 w4294967295").cost, Some(u32::MAX));
        for bad in [
            "ms k 1 w4294967296",
            "ms k 1 wx",
            "ms k 1 w-1",
            "ms k 1 w+1",
        ] {
            assert_eq!(kind(bad), BadToken, "{bad}");
        }
        assert_eq!(kind("mg k Ex"), BadToken);
        assert!(ok("md k x").has(b'x'));
    }

    proptest::proptest! {
        #[test]
        fn never_panics(line in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let _ = parse(&line);
        }

        #[test]
        fn never_panics_on_meta_like_lines(
            cmd in proptest::sample::select(vec!["mg", "ms", "md", "ma", "me", "mn"]),
            words in proptest::collection::vec("[A-Za-z0-9=+/ -]{0,40}", 0..24),
        ) {
            let line = format!("{cmd} {}", words.join(" "));
            if let Ok(c) = parse(line.as_bytes()) {
                proptest::prop_assert!(c.key().len() <= KEY_MAX_LENGTH);
                proptest::prop_assert!(c.tokens().count() <= MAX_FLAGS);
            }
        }
    }
}
