//! Parser for memcached's classic text protocol: one request line (without
//! its trailing `\n` / `\r\n`) becomes a [`TextCommand`] that borrows from the
//! line.
//!
//! The rules follow memcached 1.6.18's `proto_text.c` (`tokenize_command`,
//! `process_command_ascii` and the `process_*_command` functions) and
//! `util.c` (`safe_strtoul` & co.), checked against a running memcached: the
//! aim is that every request, well-formed or not, gets the bytes memcached
//! would send. Notable quirks reproduced on purpose:
//!
//! - Tokens are separated by spaces only. Tabs and other control bytes are part
//!   of a token, so `set a\tb 0 0 1` stores the key `a\tb` (memcached does the
//!   same); a NUL byte ends the line (memcached works on C strings).
//! - At most 23 tokens are seen; a longer line counts as 24 "tokens" and fails
//!   every command's token-count check, except `get`/`gets`/`gat`/`gats` whose
//!   key lists are unbounded.
//! - Numbers go through C `strtol`/`strtoul`/`strtoull` semantics (leading
//!   white space, a sign, 64-bit range, any white space byte may follow) and
//!   are then truncated to 32 bits where memcached stores them in 32 bits:
//!   `set k 4294967296 0 1` stores flags 0, exactly like memcached.
//! - A `noreply` seen before an error silences the error too.
//!
//! Our extension: storage commands accept an optional `cost=<N>` token after
//! the fixed fields (before or after `noreply`), see docs/protocol.md.

use crate::text::TextError::*;

/// Longest key memcached accepts.
pub const KEY_MAX_LENGTH: usize = 250;

/// memcached parses at most this many tokens per pass (`MAX_TOKENS`, which
/// includes the terminal token).
const MAX_TOKENS: usize = 24;

/// The memcached version cachalot answers to `version` and `stats`. Clients and
/// proxies feature-detect on it (gat, meta commands need 1.5/1.6), so we report
/// the memcached release whose behaviour we reproduce rather than our own
/// version number (which is in `stats settings` as `cachalot_version`).
pub const MEMCACHED_COMPAT_VERSION: &str = "1.6.18";

/// Why a request line was rejected. Each maps to memcached's exact reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextError {
    /// Unknown command or wrong number of tokens: `ERROR`.
    Unknown,
    /// `CLIENT_ERROR bad command line format`
    BadFormat,
    /// A key longer than 250 bytes: memcached says `bad command line format`.
    KeyTooLong,
    /// `CLIENT_ERROR bad data chunk` (data block not ending in `\r\n`).
    BadDataChunk,
    /// `CLIENT_ERROR invalid exptime argument`
    InvalidExptime,
    /// `CLIENT_ERROR invalid numeric delta argument`
    InvalidDelta,
    /// `delete` with extra tokens other than `0` / `noreply`.
    DeleteUsage,
    /// `CLIENT_ERROR bad command line` (`stats cachedump` with too few arguments).
    BadCommandLine,
    /// An HTTP request line: memcached closes the connection without a reply.
    Http,
}

impl TextError {
    /// The reply line memcached sends (without `\r\n`); empty for [`TextError::Http`].
    pub fn message(self) -> &'static str {
        match self {
            Unknown => "ERROR",
            BadFormat | KeyTooLong => "CLIENT_ERROR bad command line format",
            BadDataChunk => "CLIENT_ERROR bad data chunk",
            InvalidExptime => "CLIENT_ERROR invalid exptime argument",
            InvalidDelta => "CLIENT_ERROR invalid numeric delta argument",
            DeleteUsage => "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]",
            BadCommandLine => "CLIENT_ERROR bad command line",
            Http => "",
        }
    }

    /// Whether the connection must be closed instead of replying.
    pub fn closes(self) -> bool {
        self == Http
    }
}

impl std::fmt::Display for TextError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for TextError {}

/// A rejected line: the error, and whether `noreply` had already been seen
/// (memcached then sends nothing at all).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParseError {
    pub error: TextError,
    pub noreply: bool,
}

impl ParseError {
    fn new(error: TextError, noreply: bool) -> ParseError {
        ParseError { error, noreply }
    }
}

/// The storage commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

impl StoreKind {
    /// The command's name.
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Set => "set",
            StoreKind::Add => "add",
            StoreKind::Replace => "replace",
            StoreKind::Append => "append",
            StoreKind::Prepend => "prepend",
            StoreKind::Cas => "cas",
        }
    }
}

/// `flush_all`'s optional delay, kept unparsed-on-error because memcached
/// checks `-F` (flush disabled) before it looks at the argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushDelay {
    None,
    Seconds(i32),
    Invalid,
}

/// `shutdown`'s argument; memcached checks `-A` before validating it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownMode {
    Immediate,
    Graceful,
    Invalid,
}

/// `slabs automove` arguments.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AutomoveArg {
    /// 0, 1 or 2.
    Mode(u8),
    /// `slabs automove ratio <f>` (accepted and ignored by cachalot's automover).
    Ratio(f64),
    /// A number other than 0-2: memcached says `ERROR`.
    OutOfRange,
}

/// The keys of a retrieval command: every space-separated token of the rest
/// of the line (memcached re-tokenizes past its 24-token window, so there is
/// no limit). Yields keys of any length; callers check [`KEY_MAX_LENGTH`]
/// as they go, as memcached does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keys<'a> {
    rest: &'a [u8],
}

impl<'a> Keys<'a> {
    /// The keys of a space-separated list, e.g. the rest of [`Keys::as_bytes`]
    /// that a server kept to resume a multi-get after its output drained.
    pub fn new(list: &'a [u8]) -> Keys<'a> {
        Keys { rest: list }
    }

    /// The unparsed key list (space separated, possibly empty).
    pub fn as_bytes(&self) -> &'a [u8] {
        self.rest
    }
}

impl<'a> Iterator for Keys<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        let start = self.rest.iter().position(|&b| b != b' ')?;
        let rest = &self.rest[start..];
        let end = memchr::memchr(b' ', rest).unwrap_or(rest.len());
        let (key, tail) = rest.split_at(end);
        self.rest = tail;
        Some(key)
    }
}

/// One parsed request line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TextCommand<'a> {
    /// `get`/`bget` (cas = false) and `gets` (cas = true).
    Get {
        keys: Keys<'a>,
        cas: bool,
    },
    /// `gat`/`gats <exptime> <key>*`.
    Gat {
        exptime: i32,
        keys: Keys<'a>,
        cas: bool,
    },
    /// set/add/replace/append/prepend/cas; a data block of `bytes` + `\r\n` follows.
    Store {
        kind: StoreKind,
        key: &'a [u8],
        flags: u32,
        exptime: i32,
        bytes: usize,
        /// The compare-and-swap unique (`cas` only; 0 otherwise).
        cas_unique: u64,
        noreply: bool,
        /// Our `cost=<N>` extension.
        cost: Option<u32>,
    },
    /// `incr`/`decr <key> <delta> [noreply]`.
    Arith {
        incr: bool,
        key: &'a [u8],
        delta: u64,
        noreply: bool,
    },
    /// `delete <key> [0] [noreply]`.
    Delete {
        key: &'a [u8],
        noreply: bool,
    },
    /// `touch <key> <exptime> [noreply]`.
    Touch {
        key: &'a [u8],
        exptime: i32,
        noreply: bool,
    },
    /// `flush_all [delay] [noreply]`.
    FlushAll {
        delay: FlushDelay,
        noreply: bool,
    },
    /// `stats [sub [arg1 [arg2]]]` (further arguments are ignored, as in memcached).
    Stats {
        sub: Option<&'a [u8]>,
        arg1: Option<&'a [u8]>,
        arg2: Option<&'a [u8]>,
    },
    Version,
    /// `verbosity <n> [noreply]`.
    Verbosity {
        level: u32,
        noreply: bool,
    },
    Quit,
    /// `watch [kind...]`: the whole line; the server reads the kinds.
    Watch {
        line: &'a [u8],
    },
    /// `refresh_certs [noreply]`: reload the TLS certificates.
    RefreshCerts {
        noreply: bool,
    },
    Shutdown {
        mode: ShutdownMode,
    },
    /// `cache_memlimit <mb> [noreply]`; `mb` is None when it is not a number
    /// (memcached answers `ERROR`, or nothing with noreply).
    CacheMemlimit {
        mb: Option<u32>,
        noreply: bool,
    },
    /// `slabs reassign <src> <dst>`; None when not numbers (`-o slab_reassign`
    /// being off is reported before the format error, so the handler decides).
    SlabsReassign {
        classes: Option<(i32, i32)>,
    },
    /// `slabs automove <0|1|2>` or `slabs automove ratio <f>`.
    SlabsAutomove {
        arg: AutomoveArg,
        noreply: bool,
    },
    /// A meta command (`mg ms md ma mn me`): handled by the meta protocol code.
    Meta,
}

/// Position of the first `\n` in `buf` (memchr-accelerated; shared with the
/// server, which frames request lines with it).
pub fn find_newline(buf: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', buf)
}

/// The words of a line as memcached's tokenizer sees them: split on single
/// spaces, empty ones skipped (no token limit).
pub fn words(line: &[u8]) -> impl Iterator<Item = &[u8]> + Clone {
    line.split(|&b| b == b' ').filter(|w| !w.is_empty())
}

/// `buf` up to its first NUL byte: memcached handles request lines as C
/// strings, so anything after a NUL is invisible to it.
pub fn until_nul(buf: &[u8]) -> &[u8] {
    match memchr::memchr(0, buf) {
        Some(p) => &buf[..p],
        None => buf,
    }
}

/// Up to 23 tokens of a line, as memcached's `tokenize_command` sees them.
struct Tokens<'a> {
    toks: [&'a [u8]; MAX_TOKENS - 1],
    /// memcached's `ntokens`: visible tokens plus the terminal token.
    ntokens: usize,
    /// Where the token after the last visible one would start (for key lists).
    rest_at: usize,
}

impl<'a> Tokens<'a> {
    fn new(line: &'a [u8]) -> Tokens<'a> {
        let mut toks: [&'a [u8]; MAX_TOKENS - 1] = [&[]; MAX_TOKENS - 1];
        let mut n = 0;
        let mut i = 0;
        let mut rest_at = line.len();
        while i < line.len() {
            if line[i] == b' ' {
                i += 1;
                continue;
            }
            let end = memchr::memchr(b' ', &line[i..]).map_or(line.len(), |p| i + p);
            toks[n] = &line[i..end];
            n += 1;
            i = end;
            if n == MAX_TOKENS - 1 {
                // memcached stops here; the remainder stays unparsed.
                rest_at = (end + 1).min(line.len());
                break;
            }
        }
        Tokens {
            toks,
            ntokens: n + 1,
            rest_at,
        }
    }

    /// Token `i` (empty past the end, like memcached's terminal token).
    fn get(&self, i: usize) -> &'a [u8] {
        if i + 1 < self.ntokens {
            self.toks[i]
        } else {
            &[]
        }
    }

    fn opt(&self, i: usize) -> Option<&'a [u8]> {
        (i + 1 < self.ntokens).then(|| self.toks[i])
    }

    /// memcached's `set_noreply_maybe`: the last visible token is `noreply`.
    fn noreply(&self) -> bool {
        self.ntokens >= 2 && self.toks[self.ntokens - 2] == b"noreply"
    }
}

/// Parse one request line (without the line terminator).
///
/// The caller strips the line terminator: `\n`, or `\r\n` when the line
/// is longer than the `\r` alone (memcached's rule). Any further `\r` is
/// part of the last token, as in memcached (`verbosity 1\r` is level 1,
/// `stats detail\r` is an unknown stats group). The line ends at its first
/// NUL byte.
pub fn parse(line: &[u8]) -> Result<TextCommand<'_>, ParseError> {
    let line = until_nul(line);
    let t = Tokens::new(line);
    let nt = t.ntokens;
    if nt < 2 || t.get(0).len() < 2 {
        return fail(Unknown);
    }
    let cmd = t.get(0);
    if cmd[0] == b'm' && cmd.len() == 2 {
        return match cmd[1] {
            b'g' | b's' | b'd' | b'n' | b'a' | b'e' => Ok(TextCommand::Meta),
            _ => fail(Unknown),
        };
    }
    match cmd {
        b"get" | b"gets" | b"bget" | b"gat" | b"gats" => {
            want(nt >= 3)?;
            let cas = cmd == b"gets" || cmd == b"gats";
            if cmd.starts_with(b"gat") {
                let exptime = strtol32(t.get(1)).ok_or(ParseError::new(InvalidExptime, false))?;
                Ok(TextCommand::Gat {
                    exptime,
                    keys: keys_after(line, &t, 2),
                    cas,
                })
            } else {
                Ok(TextCommand::Get {
                    keys: keys_after(line, &t, 1),
                    cas,
                })
            }
        }
        _ if cmd[0] == b'g' => fail(Unknown),
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => parse_store(cmd, &t),
        b"incr" | b"decr" => {
            want(nt == 4 || nt == 5)?;
            let noreply = t.noreply();
            let key = key(&t, noreply)?;
            let delta = strtoull(t.get(2)).ok_or(ParseError::new(InvalidDelta, noreply))?;
            Ok(TextCommand::Arith {
                incr: cmd == b"incr",
                key,
                delta,
                noreply,
            })
        }
        b"delete" => {
            want((3..=5).contains(&nt))?;
            let mut noreply = false;
            if nt > 3 {
                let hold_is_zero = t.get(2) == b"0";
                noreply = t.noreply();
                let valid =
                    (nt == 4 && (hold_is_zero || noreply)) || (nt == 5 && hold_is_zero && noreply);
                if !valid {
                    return Err(ParseError::new(DeleteUsage, noreply));
                }
            }
            Ok(TextCommand::Delete {
                key: key(&t, noreply)?,
                noreply,
            })
        }
        b"touch" => {
            want(nt == 4 || nt == 5)?;
            let noreply = t.noreply();
            let key = key(&t, noreply)?;
            let exptime = strtol32(t.get(2)).ok_or(ParseError::new(InvalidExptime, noreply))?;
            Ok(TextCommand::Touch {
                key,
                exptime,
                noreply,
            })
        }
        b"stats" => Ok(TextCommand::Stats {
            sub: t.opt(1),
            arg1: t.opt(2),
            arg2: t.opt(3),
        }),
        b"shutdown" => Ok(TextCommand::Shutdown {
            mode: match (nt, t.get(1)) {
                (2, _) => ShutdownMode::Immediate,
                (3, b"graceful") => ShutdownMode::Graceful,
                _ => ShutdownMode::Invalid,
            },
        }),
        b"slabs" => parse_slabs(&t),
        b"cache_memlimit" => {
            want(nt == 3 || nt == 4)?;
            Ok(TextCommand::CacheMemlimit {
                mb: strtoul32(t.get(1)),
                noreply: t.noreply(),
            })
        }
        b"flush_all" => {
            want((2..=4).contains(&nt))?;
            let noreply = t.noreply();
            let delay = if nt == if noreply { 3 } else { 2 } {
                FlushDelay::None
            } else {
                strtol32(t.get(1)).map_or(FlushDelay::Invalid, FlushDelay::Seconds)
            };
            Ok(TextCommand::FlushAll { delay, noreply })
        }
        b"version" => Ok(TextCommand::Version),
        b"quit" => Ok(TextCommand::Quit),
        b"watch" => Ok(TextCommand::Watch { line }),
        b"refresh_certs" => Ok(TextCommand::RefreshCerts {
            noreply: t.noreply(),
        }),
        b"verbosity" => {
            want(nt == 3 || nt == 4)?;
            let noreply = t.noreply();
            let level = strtoul32(t.get(1)).ok_or(ParseError::new(BadFormat, noreply))?;
            Ok(TextCommand::Verbosity { level, noreply })
        }
        // memcached dispatches on the first letter first: unknown commands
        // starting with one of these answer ERROR without the HTTP check.
        _ if b"gsacidt".contains(&cmd[0]) => fail(Unknown),
        _ => {
            // memcached drops connections that look like HTTP requests.
            if t.get(nt - 2).starts_with(b"HTTP/") {
                fail(Http)
            } else {
                fail(Unknown)
            }
        }
    }
}

/// An error seen before any `noreply` could be.
fn fail<T>(e: TextError) -> Result<T, ParseError> {
    Err(ParseError::new(e, false))
}

/// memcached's `WANT_TOKENS*` checks: `ERROR` when the count is wrong.
fn want(ok: bool) -> Result<(), ParseError> {
    if ok {
        Ok(())
    } else {
        fail(Unknown)
    }
}

/// The key at token 1, checked for length.
fn key<'a>(t: &Tokens<'a>, noreply: bool) -> Result<&'a [u8], ParseError> {
    let key = t.get(1);
    if key.len() > KEY_MAX_LENGTH {
        return Err(ParseError::new(KeyTooLong, noreply));
    }
    Ok(key)
}

/// The key list of a retrieval command, from visible token `first` on.
fn keys_after<'a>(line: &'a [u8], t: &Tokens<'a>, first: usize) -> Keys<'a> {
    let start = if first + 1 < t.ntokens {
        // Offset of token `first` inside the line.
        let tok = t.toks[first];
        tok.as_ptr() as usize - line.as_ptr() as usize
    } else {
        t.rest_at
    };
    Keys {
        rest: &line[start.min(line.len())..],
    }
}

fn parse_store<'a>(cmd: &'a [u8], t: &Tokens<'a>) -> Result<TextCommand<'a>, ParseError> {
    let kind = match cmd {
        b"set" => StoreKind::Set,
        b"add" => StoreKind::Add,
        b"replace" => StoreKind::Replace,
        b"append" => StoreKind::Append,
        b"prepend" => StoreKind::Prepend,
        _ => StoreKind::Cas,
    };
    // Fixed tokens: command, key, flags, exptime, bytes [, cas unique].
    let fixed = if kind == StoreKind::Cas { 6 } else { 5 };
    let nt = t.ntokens;
    // memcached accepts one optional token (anything; `noreply` if it says so).
    // Our extension adds `cost=<N>`: with both, one more token is allowed.
    let mut cost = None;
    // memcached's set_noreply_maybe looks at the last token whatever it is:
    // with no optional token that is <bytes> (or the cas unique), so
    // `set k 0 0 noreply` is a silent format error.
    let mut noreply = t.noreply();
    if nt == fixed + 2 {
        // The optional slot is ignored unless it is noreply or a valid cost.
        cost = parse_cost(t.get(fixed));
    } else if nt == fixed + 3 {
        // Extension only: exactly one noreply and one valid cost=, any order.
        let (a, b) = (t.get(fixed), t.get(fixed + 1));
        let c = if a == b"noreply" {
            parse_cost(b)
        } else if b == b"noreply" {
            parse_cost(a)
        } else {
            None
        };
        match c {
            Some(c) => {
                cost = Some(c);
                noreply = true;
            }
            None => return Err(ParseError::new(Unknown, false)),
        }
    } else if nt != fixed + 1 {
        return Err(ParseError::new(Unknown, false));
    }
    let key = key(t, noreply)?;
    let bad = ParseError::new(BadFormat, noreply);
    let flags = strtoul32(t.get(2)).ok_or(bad)?;
    let exptime = strtol32(t.get(3)).ok_or(bad)?;
    let vlen = strtol32(t.get(4)).ok_or(bad)?;
    let cas_unique = if kind == StoreKind::Cas {
        strtoull(t.get(5)).ok_or(bad)?
    } else {
        0
    };
    if !(0..=i32::MAX - 2).contains(&vlen) {
        return Err(bad);
    }
    Ok(TextCommand::Store {
        kind,
        key,
        flags,
        exptime,
        bytes: vlen as usize,
        cas_unique,
        noreply,
        cost,
    })
}

/// `cost=<N>` with N a valid unsigned 32-bit number, else None.
fn parse_cost(tok: &[u8]) -> Option<u32> {
    let digits = tok.strip_prefix(b"cost=")?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v = strtoull(digits)?;
    u32::try_from(v).ok()
}

fn parse_slabs<'a>(t: &Tokens<'a>) -> Result<TextCommand<'a>, ParseError> {
    let nt = t.ntokens;
    if nt == 5 && t.get(1) == b"reassign" {
        let classes = strtol32(t.get(2)).zip(strtol32(t.get(3)));
        return Ok(TextCommand::SlabsReassign { classes });
    }
    if nt >= 4 && t.get(1) == b"automove" {
        let noreply = t.noreply();
        let arg = if t.get(2) == b"ratio" {
            match t.opt(3).and_then(strtod) {
                Some(r) if nt >= 5 => AutomoveArg::Ratio(r),
                _ => return Err(ParseError::new(Unknown, noreply)),
            }
        } else {
            match strtoul32(t.get(2)) {
                None => return Err(ParseError::new(BadFormat, noreply)),
                Some(l @ 0..=2) => AutomoveArg::Mode(l as u8),
                Some(_) => AutomoveArg::OutOfRange,
            }
        };
        return Ok(TextCommand::SlabsAutomove { arg, noreply });
    }
    Err(ParseError::new(Unknown, false))
}

// ---------------------------------------------------------------------------
// C number parsing, as memcached's safe_strto* wrappers see it (glibc, LP64).

/// C `isspace` in the "C" locale.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// What `strtoull`/`strtol` found: sign, magnitude (None on overflow of u64)
/// and whether the byte after the digits is acceptable to memcached (end of
/// token or white space). None when there are no digits at all.
struct CNumber {
    negative: bool,
    magnitude: Option<u64>,
}

fn c_number(tok: &[u8]) -> Option<CNumber> {
    let mut i = 0;
    while i < tok.len() && is_c_space(tok[i]) {
        i += 1;
    }
    let mut negative = false;
    if i < tok.len() && (tok[i] == b'+' || tok[i] == b'-') {
        negative = tok[i] == b'-';
        i += 1;
    }
    let start = i;
    let mut magnitude = Some(0u64);
    while i < tok.len() && tok[i].is_ascii_digit() {
        magnitude = magnitude
            .and_then(|m| m.checked_mul(10))
            .and_then(|m| m.checked_add(u64::from(tok[i] - b'0')));
        i += 1;
    }
    if i == start {
        return None; // no conversion: endptr == str
    }
    // memcached: `xisspace(*endptr) || *endptr == '\0'`.
    if i < tok.len() && !is_c_space(tok[i]) {
        return None;
    }
    Some(CNumber {
        negative,
        magnitude,
    })
}

/// `safe_strtoull`: unsigned 64-bit; "-N" wraps like C unless the result
/// looks negative as a signed number.
pub fn strtoull(tok: &[u8]) -> Option<u64> {
    let n = c_number(tok)?;
    let m = n.magnitude?; // ERANGE
    let v = if n.negative { m.wrapping_neg() } else { m };
    if (v as i64) < 0 && tok.contains(&b'-') {
        return None;
    }
    Some(v)
}

/// `safe_strtoul`: `strtoul` (64-bit on LP64) truncated to 32 bits.
pub fn strtoul32(tok: &[u8]) -> Option<u32> {
    strtoull(tok).map(|v| v as u32)
}

/// `safe_strtol`: `strtol` (64-bit) truncated to 32 bits.
pub fn strtol32(tok: &[u8]) -> Option<i32> {
    let n = c_number(tok)?;
    let m = n.magnitude?;
    let v: i64 = if n.negative {
        if m > i64::MAX as u64 + 1 {
            return None; // ERANGE
        }
        (m as i64).wrapping_neg()
    } else {
        i64::try_from(m).ok()? // ERANGE
    };
    Some(v as i32)
}

/// `safe_strtod` (only used for `slabs automove ratio`).
fn strtod(tok: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(tok).ok()?;
    let s = s.trim_start_matches(|c: char| c.is_ascii() && is_c_space(c as u8));
    s.parse::<f64>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(line: &[u8]) -> Result<TextCommand<'_>, ParseError> {
        parse(line)
    }

    fn e(line: &[u8]) -> (TextError, bool) {
        let err = parse(line).expect_err("expected an error");
        (err.error, err.noreply)
    }

    fn keys(line: &[u8]) -> Vec<Vec<u8>> {
        match parse(line).unwrap() {
            TextCommand::Get { keys, .. } | TextCommand::Gat { keys, .. } => {
                keys.map(|k| k.to_vec()).collect()
            }
            other => panic!("not a get: {other:?}"),
        }
    }

    #[test]
    fn empty_and_short_lines_are_errors() {
        assert_eq!(e(b""), (Unknown, false));
        assert_eq!(e(b"   "), (Unknown, false));
        assert_eq!(e(b"\r"), (Unknown, false));
        assert_eq!(e(b"verbosity \r"), (BadFormat, false));
        assert_eq!(
            p(b"stats detail\r"),
            Ok(TextCommand::Stats {
                sub: Some(b"detail\r"),
                arg1: None,
                arg2: None
            })
        );
        assert_eq!(e(b"x"), (Unknown, false));
        assert_eq!(e(b"ge"), (Unknown, false));
        assert_eq!(e(b"get"), (Unknown, false));
        assert_eq!(e(b"getx a"), (Unknown, false));
        assert_eq!(e(b"STATS"), (Unknown, false));
    }

    #[test]
    fn get_keys() {
        assert_eq!(keys(b"get a"), vec![b"a".to_vec()]);
        assert_eq!(keys(b"  get  a   b  "), vec![b"a".to_vec(), b"b".to_vec()]);
        assert!(matches!(
            p(b"gets a"),
            Ok(TextCommand::Get { cas: true, .. })
        ));
        assert!(matches!(
            p(b"bget a"),
            Ok(TextCommand::Get { cas: false, .. })
        ));
        // Tabs and control bytes belong to the key.
        assert_eq!(
            keys(b"get a\tb \x01"),
            vec![b"a\tb".to_vec(), b"\x01".to_vec()]
        );
        // A NUL ends the line; a CR left by the caller belongs to the key.
        assert_eq!(keys(b"get a\0b c"), vec![b"a".to_vec()]);
        assert_eq!(keys(b"get a\r"), vec![b"a\r".to_vec()]);
    }

    #[test]
    fn get_many_keys_past_the_token_window() {
        let names: Vec<String> = (0..100).map(|i| format!("k{i}")).collect();
        let line = format!("get {}", names.join(" "));
        let got = keys(line.as_bytes());
        assert_eq!(got.len(), 100);
        assert_eq!(got[22], b"k22".to_vec());
        assert_eq!(got[99], b"k99".to_vec());
        // Exactly at the window edge, with trailing spaces.
        let line = format!("get {}   ", names[..22].join(" "));
        assert_eq!(keys(line.as_bytes()).len(), 22);
        let line = format!("get {}  ", names[..23].join(" "));
        assert_eq!(keys(line.as_bytes()).len(), 23);
    }

    #[test]
    fn gat_parses_exptime_first() {
        match p(b"gats 10 a b").unwrap() {
            TextCommand::Gat { exptime, keys, cas } => {
                assert_eq!(exptime, 10);
                assert!(cas);
                assert_eq!(keys.count(), 2);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(keys(b"gat 10"), Vec::<Vec<u8>>::new());
        assert_eq!(e(b"gat abc a"), (InvalidExptime, false));
        assert_eq!(e(b"gat"), (Unknown, false));
    }

    #[test]
    fn storage_commands() {
        assert_eq!(
            p(b"set foo 5 10 3"),
            Ok(TextCommand::Store {
                kind: StoreKind::Set,
                key: b"foo",
                flags: 5,
                exptime: 10,
                bytes: 3,
                cas_unique: 0,
                noreply: false,
                cost: None
            })
        );
        assert_eq!(
            p(b"cas foo 0 0 3 77 noreply"),
            Ok(TextCommand::Store {
                kind: StoreKind::Cas,
                key: b"foo",
                flags: 0,
                exptime: 0,
                bytes: 3,
                cas_unique: 77,
                noreply: true,
                cost: None
            })
        );
        // memcached ignores any other token in the optional slot.
        assert!(matches!(
            p(b"set foo 0 0 3 x"),
            Ok(TextCommand::Store { noreply: false, .. })
        ));
        for cmd in ["add", "replace", "append", "prepend"] {
            let line = format!("{cmd} k 0 0 1");
            assert!(matches!(p(line.as_bytes()), Ok(TextCommand::Store { .. })));
        }
        assert_eq!(e(b"set foo 0 0"), (Unknown, false));
        assert_eq!(e(b"set foo 0 0 3 noreply x"), (Unknown, false));
        assert_eq!(e(b"cas foo 0 0 3"), (Unknown, false));
        assert_eq!(e(b"cas foo 0 0 3 x"), (BadFormat, false));
        assert_eq!(e(b"cas foo 0 0 3 -1"), (BadFormat, false));
    }

    #[test]
    fn cost_extension() {
        let cost = |line: &[u8]| match p(line).unwrap() {
            TextCommand::Store { cost, noreply, .. } => (cost, noreply),
            other => panic!("{other:?}"),
        };
        assert_eq!(cost(b"set k 0 0 1 cost=7"), (Some(7), false));
        assert_eq!(cost(b"set k 0 0 1 cost=7 noreply"), (Some(7), true));
        assert_eq!(cost(b"set k 0 0 1 noreply cost=7"), (Some(7), true));
        assert_eq!(
            cost(b"cas k 0 0 1 9 cost=4294967295"),
            (Some(u32::MAX), false)
        );
        // Malformed cost in memcached's optional slot is ignored like any token.
        assert_eq!(cost(b"set k 0 0 1 cost=x"), (None, false));
        assert_eq!(cost(b"set k 0 0 1 cost=4294967296"), (None, false));
        // With two optional tokens, both must be understood.
        assert_eq!(e(b"set k 0 0 1 cost=x noreply"), (Unknown, false));
        assert_eq!(e(b"set k 0 0 1 cost=1 cost=2"), (Unknown, false));
    }

    #[test]
    fn storage_number_quirks_match_memcached() {
        let f = |line: &[u8]| match p(line) {
            Ok(TextCommand::Store {
                flags,
                exptime,
                bytes,
                ..
            }) => Some((flags, exptime, bytes)),
            _ => None,
        };
        assert_eq!(f(b"set k 4294967296 0 3"), Some((0, 0, 3)));
        assert_eq!(f(b"set k 4294967295 0 3"), Some((u32::MAX, 0, 3)));
        assert_eq!(f(b"set k 18446744073709551615 0 3"), Some((u32::MAX, 0, 3)));
        assert_eq!(f(b"set k -0 0 3"), Some((0, 0, 3)));
        assert_eq!(f(b"set k -18446744073709551615 0 3"), Some((1, 0, 3)));
        assert_eq!(f(b"set k 0 4294967296 3"), Some((0, 0, 3)));
        assert_eq!(f(b"set k 0 -1 3"), Some((0, -1, 3)));
        assert_eq!(f(b"set k 0 0 4294967299"), Some((0, 0, 3)));
        assert_eq!(f(b"set k 0 0 +3"), Some((0, 0, 3)));
        assert_eq!(f(b"set k 0 0 \t3"), Some((0, 0, 3)));
        assert_eq!(f(b"set k 0 0 3\tzz"), Some((0, 0, 3)));
        assert_eq!(e(b"set k 0 0 3z"), (BadFormat, false));
        assert_eq!(e(b"set k -1 0 3"), (BadFormat, false));
        assert_eq!(e(b"set k 18446744073709551616 0 3"), (BadFormat, false));
        assert_eq!(e(b"set k 0 99999999999999999999 3"), (BadFormat, false));
        assert_eq!(e(b"set k 0 0 -1"), (BadFormat, false));
        assert_eq!(e(b"set k 0 0 2147483646"), (BadFormat, false));
        assert_eq!(f(b"set k 0 0 2147483645"), Some((0, 0, 2147483645)));
        assert_eq!(e(b"set k 0 0 abc noreply"), (BadFormat, true));
        // The last token is checked for noreply even when it is <bytes>.
        assert_eq!(e(b"set k 1 replace noreply"), (BadFormat, true));
        assert_eq!(e(b"cas k 0 0 1 noreply"), (BadFormat, true));
    }

    #[test]
    fn key_length_limit() {
        let ok = format!("set {} 0 0 1", "a".repeat(250));
        assert!(p(ok.as_bytes()).is_ok());
        let long = format!("set {} 0 0 1", "a".repeat(251));
        assert_eq!(e(long.as_bytes()), (KeyTooLong, false));
        let long = format!("incr {} 1 noreply", "a".repeat(251));
        assert_eq!(e(long.as_bytes()), (KeyTooLong, true));
        assert_eq!(KeyTooLong.message(), "CLIENT_ERROR bad command line format");
    }

    #[test]
    fn too_many_tokens() {
        let line = format!("set k 0 0 1 {}", "x ".repeat(30));
        assert_eq!(e(line.as_bytes()), (Unknown, false));
        let line = format!("delete k 0 {}", "1 ".repeat(30));
        assert_eq!(e(line.as_bytes()), (Unknown, false));
        // stats still works, with its first arguments.
        let line = format!("stats settings {}", "x ".repeat(30));
        assert!(matches!(
            p(line.as_bytes()),
            Ok(TextCommand::Stats {
                sub: Some(b"settings"),
                ..
            })
        ));
    }

    #[test]
    fn arith() {
        assert_eq!(
            p(b"incr n 5"),
            Ok(TextCommand::Arith {
                incr: true,
                key: b"n",
                delta: 5,
                noreply: false
            })
        );
        assert_eq!(
            p(b"decr n 18446744073709551615 noreply"),
            Ok(TextCommand::Arith {
                incr: false,
                key: b"n",
                delta: u64::MAX,
                noreply: true
            })
        );
        // The 5th token is ignored unless it is noreply.
        assert!(matches!(
            p(b"incr n 1 2"),
            Ok(TextCommand::Arith { noreply: false, .. })
        ));
        assert_eq!(e(b"incr n"), (Unknown, false));
        assert_eq!(e(b"incr n 1 2 3"), (Unknown, false));
        assert_eq!(e(b"incr n -1"), (InvalidDelta, false));
        assert_eq!(e(b"incr n 18446744073709551616"), (InvalidDelta, false));
        assert_eq!(e(b"incr n abc noreply"), (InvalidDelta, true));
    }

    #[test]
    fn delete_forms() {
        let d = |line: &[u8]| match p(line) {
            Ok(TextCommand::Delete { key, noreply }) => Ok((key.to_vec(), noreply)),
            Err(err) => Err((err.error, err.noreply)),
            Ok(other) => panic!("{other:?}"),
        };
        assert_eq!(d(b"delete k"), Ok((b"k".to_vec(), false)));
        assert_eq!(d(b"delete k 0"), Ok((b"k".to_vec(), false)));
        assert_eq!(d(b"delete k noreply"), Ok((b"k".to_vec(), true)));
        assert_eq!(d(b"delete k 0 noreply"), Ok((b"k".to_vec(), true)));
        assert_eq!(d(b"delete k 1"), Err((DeleteUsage, false)));
        assert_eq!(d(b"delete k 00"), Err((DeleteUsage, false)));
        assert_eq!(d(b"delete k 0 x"), Err((DeleteUsage, false)));
        assert_eq!(d(b"delete k noreply 0"), Err((DeleteUsage, false)));
        assert_eq!(d(b"delete k x noreply"), Err((DeleteUsage, true)));
        assert_eq!(d(b"delete k 0 1 2"), Err((Unknown, false)));
        assert_eq!(d(b"delete"), Err((Unknown, false)));
    }

    #[test]
    fn touch_flush_verbosity() {
        assert_eq!(
            p(b"touch k 10 x"),
            Ok(TextCommand::Touch {
                key: b"k",
                exptime: 10,
                noreply: false
            })
        );
        assert_eq!(e(b"touch k abc noreply"), (InvalidExptime, true));
        assert_eq!(e(b"touch k 1 x y"), (Unknown, false));
        let fl = |line: &[u8]| match p(line).unwrap() {
            TextCommand::FlushAll { delay, noreply } => (delay, noreply),
            other => panic!("{other:?}"),
        };
        assert_eq!(fl(b"flush_all"), (FlushDelay::None, false));
        assert_eq!(fl(b"flush_all noreply"), (FlushDelay::None, true));
        assert_eq!(fl(b"flush_all 10 noreply"), (FlushDelay::Seconds(10), true));
        assert_eq!(fl(b"flush_all 1 2"), (FlushDelay::Seconds(1), false));
        assert_eq!(fl(b"flush_all -1"), (FlushDelay::Seconds(-1), false));
        assert_eq!(fl(b"flush_all abc"), (FlushDelay::Invalid, false));
        assert_eq!(fl(b"flush_all noreply 5"), (FlushDelay::Invalid, false));
        assert_eq!(e(b"flush_all 1 2 3"), (Unknown, false));
        assert_eq!(
            p(b"verbosity 1 2"),
            Ok(TextCommand::Verbosity {
                level: 1,
                noreply: false
            })
        );
        assert_eq!(e(b"verbosity x"), (BadFormat, false));
        assert_eq!(e(b"verbosity"), (Unknown, false));
        assert_eq!(e(b"verbosity 1 2 3"), (Unknown, false));
    }

    #[test]
    fn admin_commands() {
        assert_eq!(p(b"version x"), Ok(TextCommand::Version));
        assert_eq!(p(b"quit now"), Ok(TextCommand::Quit));
        let sd = |line: &[u8]| match p(line).unwrap() {
            TextCommand::Shutdown { mode } => mode,
            other => panic!("{other:?}"),
        };
        assert_eq!(sd(b"shutdown"), ShutdownMode::Immediate);
        assert_eq!(sd(b"shutdown graceful"), ShutdownMode::Graceful);
        assert_eq!(sd(b"shutdown x"), ShutdownMode::Invalid);
        assert_eq!(sd(b"shutdown graceful x"), ShutdownMode::Invalid);
        assert_eq!(
            p(b"cache_memlimit 100 noreply"),
            Ok(TextCommand::CacheMemlimit {
                mb: Some(100),
                noreply: true
            })
        );
        assert_eq!(
            p(b"cache_memlimit x"),
            Ok(TextCommand::CacheMemlimit {
                mb: None,
                noreply: false
            })
        );
        assert_eq!(e(b"cache_memlimit"), (Unknown, false));
        assert_eq!(
            p(b"slabs reassign 1 -2"),
            Ok(TextCommand::SlabsReassign {
                classes: Some((1, -2))
            })
        );
        assert_eq!(
            p(b"slabs reassign x 2"),
            Ok(TextCommand::SlabsReassign { classes: None })
        );
        assert_eq!(e(b"slabs reassign 1 2 3"), (Unknown, false));
        assert_eq!(
            p(b"slabs automove 2"),
            Ok(TextCommand::SlabsAutomove {
                arg: AutomoveArg::Mode(2),
                noreply: false
            })
        );
        assert_eq!(
            p(b"slabs automove 3"),
            Ok(TextCommand::SlabsAutomove {
                arg: AutomoveArg::OutOfRange,
                noreply: false
            })
        );
        assert_eq!(
            p(b"slabs automove ratio 0.5"),
            Ok(TextCommand::SlabsAutomove {
                arg: AutomoveArg::Ratio(0.5),
                noreply: false
            })
        );
        assert_eq!(e(b"slabs automove ratio"), (Unknown, false));
        assert_eq!(e(b"slabs automove x"), (BadFormat, false));
        assert_eq!(e(b"slabs automove"), (Unknown, false));
        assert_eq!(e(b"slabs"), (Unknown, false));
    }

    #[test]
    fn stats_and_meta_and_http() {
        assert_eq!(
            p(b"stats"),
            Ok(TextCommand::Stats {
                sub: None,
                arg1: None,
                arg2: None
            })
        );
        assert_eq!(
            p(b"stats cachedump 1 2 3"),
            Ok(TextCommand::Stats {
                sub: Some(b"cachedump"),
                arg1: Some(b"1"),
                arg2: Some(b"2")
            })
        );
        for m in ["mg", "ms", "md", "ma", "mn", "me"] {
            assert_eq!(p(m.as_bytes()), Ok(TextCommand::Meta));
        }
        assert_eq!(e(b"mx a"), (Unknown, false));
        assert_eq!(e(b"GET / HTTP/1.1"), (Http, false));
        assert_eq!(e(b"sx / HTTP/1.1"), (Unknown, false));
        assert_eq!(e(b"misc HTTP/1.0"), (Http, false));
        assert!(Http.closes());
        assert_eq!(e(b"foo bar"), (Unknown, false));
    }

    #[test]
    fn c_number_rules() {
        assert_eq!(strtoull(b"0"), Some(0));
        assert_eq!(strtoull(b"-0"), Some(0));
        assert_eq!(strtoull(b"-1"), None);
        assert_eq!(strtoull(b" 5"), Some(5));
        assert_eq!(strtoull(b"5\r"), Some(5));
        assert_eq!(strtoull(b"5x"), None);
        assert_eq!(strtoull(b"+"), None);
        assert_eq!(strtoull(b""), None);
        assert_eq!(strtoull(b"0x10"), None);
        assert_eq!(strtol32(b"-2147483649"), Some(i32::MAX));
        assert_eq!(strtol32(b"9223372036854775807"), Some(-1));
        assert_eq!(strtol32(b"9223372036854775808"), None);
        assert_eq!(strtol32(b"-9223372036854775808"), Some(0));
        assert_eq!(strtol32(b"-9223372036854775809"), None);
        assert_eq!(strtoul32(b"4294967297"), Some(1));
    }

    #[test]
    fn every_error_has_memcacheds_text() {
        for (err, text) in [
            (Unknown, "ERROR"),
            (BadFormat, "CLIENT_ERROR bad command line format"),
            (BadDataChunk, "CLIENT_ERROR bad data chunk"),
            (InvalidExptime, "CLIENT_ERROR invalid exptime argument"),
            (InvalidDelta, "CLIENT_ERROR invalid numeric delta argument"),
            (BadCommandLine, "CLIENT_ERROR bad command line"),
        ] {
            assert_eq!(err.message(), text);
            assert_eq!(err.to_string(), text);
        }
    }
}
