//! Random command sequences for the differential test, from a seed.
//!
//! A sequence speaks one *family*: text (classic commands, some meta), meta
//! (meta commands, some classic) or binary. Keys come from a small per-sequence
//! pool so commands collide: general keys (values always non-numeric), one
//! 250-byte key, one 251-byte key, and counter keys for incr/decr.
//!
//! What is never generated, and why:
//! - Times that depend on the clock's phase: exptimes are 0, negative, far
//!   past (absolute) or at least 100 s away, so an item is alive or dead on
//!   both servers whatever second they are in. Short TTLs and flush delays
//!   live in the timed sequences (`timed`), with sleeps and margins.
//! - Meta `t`, `l` and `me` (a TTL left, an age, `exp=`/`la=`): they count
//!   whole seconds of each server's own clock, and the two clocks tick out
//!   of phase, so a read right after a write may see 999 on one and 1000 on
//!   the other. `h` is generated, except on counters (see below).
//! - incr/decr of a stored value of 2^63 or more: memcached 1.6.18's
//!   `safe_strtoull` then looks for a `-` with `strchr`, past the end of the
//!   value into whatever memory follows the item, so its answer depends on
//!   the neighbours (docs/protocol.md, "Differences"). A small model of each
//!   counter's value tells when it is that large.
//! - Reads of a counter after incr/decr made its number shorter, and `ma`
//!   with `T` on an existing counter: memcached writes the result in place
//!   (padded with spaces, TTL applied) only if no reply still holds the item,
//!   and replies of earlier requests hold it for a time that depends on its
//!   network I/O; else it writes a new item (no padding) and `T` lands on the
//!   old one, and a new item was never fetched (`h`) (docs/protocol.md).
//!   The model tracks each counter's stored length.
//! - A 251-byte key in `get`/`gets`/`gat`/`gats`: memcached answers
//!   `CLIENT_ERROR` and drops the replies it has not sent, which depends on
//!   how the pipeline was read (cachalot follows it for a pipeline read at
//!   once: `text::tests::multiget_with_a_long_key_sends_only_the_error`);
//!   once, alone in its pipeline, it even sent two `END`s instead.
//! - Base64 (`b`) keys: memcached remembers an item was stored with one and
//!   prints its key base64-encoded to every later request (docs/protocol.md).
//! - cachalot's extensions (`cost=`, `w`) and `stats` (internals).
//! - What memcached 1.6.45 does differently from 1.6.18, which cachalot
//!   follows (docs/protocol.md, "memcached 1.6.45"; tested from its
//!   protocol.txt in `tests/meta_cases.txt`): `E`, `md x`, `ms s`, `N` in
//!   append mode, `mg C` with `v` and a matching CAS, `watch deletions`.
//! - A delayed `flush_all` after an immediate one: see `Gen::flush_delay`.

use fastrand::Rng;

/// `-I` of both servers (`mod.rs`'s `SERVER_FLAGS`): 2 MB, so values over a
/// page are stored chained over `slab_chunk_max` chunks by both.
pub const ITEM_MAX: usize = 2 * 1024 * 1024;

/// The largest value memcached 1.6.18 stores under `key` (its item header,
/// CAS, the key's NUL and the value's `\r\n`, the flags when not 0); one
/// byte more is refused, by cachalot too.
pub fn memcached_value_max(key: Key, flags: u32) -> usize {
    ITEM_MAX - 59 - key.len() - if flags == 0 { 0 } else { 4 }
}

/// Length of the prefix that makes keys unique per run (`{:08x}:`).
pub const PREFIX_LEN: usize = 9;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Text,
    Meta,
    Binary,
}

/// A key of the sequence's pool; the prefix that makes it unique per run is
/// added when it is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    General(u8),
    /// Exactly 250 bytes with its prefix.
    Longest,
    /// 251 bytes: refused.
    TooLong,
    Counter(u8),
}

const GENERAL_KEYS: u8 = 5;
const COUNTER_KEYS: u8 = 3;

impl Key {
    pub fn len(self) -> usize {
        self.render(&[b'p'; PREFIX_LEN]).len()
    }

    pub fn render(self, prefix: &[u8]) -> Vec<u8> {
        let mut k = prefix.to_vec();
        match self {
            Key::General(i) => k.extend_from_slice(format!("g{i}").as_bytes()),
            Key::Counter(i) => k.extend_from_slice(format!("n{i}").as_bytes()),
            Key::Longest | Key::TooLong => {
                let len = if self == Key::Longest { 250 } else { 251 };
                k.push(b'L');
                k.resize(len, b'x');
            }
        }
        k
    }
}

/// A CAS a request sends: one a server handed out earlier in this sequence
/// (each server's own value for the same position), or a value neither has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CasArg {
    /// The `n`-th most recent CAS seen in a reply (0: the latest).
    Recent(usize),
    Bogus,
}

/// Meta flag tokens; `Cas` is resolved per server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MFlag {
    Bare(u8),
    Int(u8, i64),
    Cas(u8, CasArg),
    Token(u8, Vec<u8>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextStore {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas(CasArg),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cmd {
    Store {
        op: TextStore,
        key: Key,
        flags: u32,
        exptime: i64,
        value: Vec<u8>,
        noreply: bool,
    },
    /// `get`, `gets`, `gat`, `gats` (`gat`: `exptime` is `Some`).
    Retrieve {
        cas: bool,
        exptime: Option<i64>,
        keys: Vec<Key>,
    },
    Delete {
        key: Key,
        noreply: bool,
    },
    Arith {
        incr: bool,
        key: Key,
        delta: u64,
        noreply: bool,
    },
    Touch {
        key: Key,
        exptime: i64,
        noreply: bool,
    },
    FlushAll {
        delay: Option<i64>,
        noreply: bool,
    },
    Version,
    Verbosity {
        noreply: bool,
    },
    /// `mg`, `ms`, `md`, `ma`, `mn` (`op` is the two letters).
    Meta {
        op: &'static str,
        key: Key,
        value: Option<Vec<u8>>,
        flags: Vec<MFlag>,
    },
    Binary {
        opcode: u8,
        opaque: u32,
        cas: Option<CasArg>,
        extras: Vec<u8>,
        key: Option<Key>,
        value: Vec<u8>,
    },
    /// A malformed or unusual request line: `head`, the key, `tail`.
    Line {
        head: &'static str,
        key: Key,
        tail: &'static str,
    },
    /// Timed sequences only: wait this long before the next batch.
    Sleep {
        ms: u64,
    },
}

impl Cmd {
    /// Whether the command must start a batch of its own: it uses a CAS from
    /// an earlier reply (which must have arrived), or it sleeps.
    pub fn needs_fresh_batch(&self) -> bool {
        match self {
            Cmd::Store {
                op: TextStore::Cas(CasArg::Recent(_)),
                ..
            } => true,
            Cmd::Meta { flags, .. } => flags
                .iter()
                .any(|f| matches!(f, MFlag::Cas(_, CasArg::Recent(_)))),
            Cmd::Binary { cas, .. } => matches!(cas, Some(CasArg::Recent(_))),
            Cmd::Sleep { .. } => true,
            _ => false,
        }
    }
}

/// One command and whether it starts a new pipeline (written separately
/// after every earlier reply arrived).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub cmd: Cmd,
    pub new_batch: bool,
}

#[derive(Clone, Debug)]
pub struct Seq {
    pub seed: u64,
    /// Run on the Z-zone pair (`sequence_for`).
    pub zone: bool,
    pub family: Family,
    pub steps: Vec<Step>,
}

/// A counter key's value, as far as incr/decr care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Counter {
    Absent,
    /// Holds `value` in `len` bytes (cachalot's; with memcached's padding);
    /// `shrunk`: incr/decr made the number shorter than that, so memcached
    /// may hold it unpadded (see the module comment).
    Num {
        value: u64,
        len: usize,
        shrunk: bool,
    },
    /// Not a number (too long for 64 bits): incr/decr fail alike.
    Other,
    /// Could be anything (a conditional command ran): no incr/decr until a
    /// set, a delete or a flush says what it holds.
    Unknown,
}

/// Exptimes whose effect does not depend on the clock's phase.
fn exptime(r: &mut Rng) -> (i64, bool) {
    // (value, whether the item is dead at once)
    match r.u8(0..10) {
        0..=3 => (0, false),
        4 => (-1, true),
        5 => (-r.i64(2..100_000), true),
        6 => (r.i64(100..100_000), false),
        // Absolute: far future, or a date in the past (2001).
        7 => (now() + r.i64(100_000..10_000_000), false),
        8 => (1_000_000_000, true),
        // 30 days is still relative; one more second is 1970 + 30 days.
        _ if r.bool() => (2_592_000, false),
        _ => (2_592_001, true),
    }
}

pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// A value for a general key: empty, or containing a letter, so it never
/// reads as a number (see the module comment).
fn general_value(r: &mut Rng) -> Vec<u8> {
    let len = match r.u8(0..100) {
        0..=9 => 0,
        10..=79 => r.usize(1..40),
        80..=95 => r.usize(40..5000),
        96..=97 => r.usize(5000..100_000),
        // Over a page (chained), around the -I limit, or at -I.
        98 => r.usize(1024 * 1024..ITEM_MAX - 100),
        _ if r.bool() => ITEM_MAX - r.usize(0..100),
        _ => ITEM_MAX + r.usize(0..3),
    };
    let mut v: Vec<u8> = (0..len).map(|_| r.u8(..)).collect();
    if let Some(first) = v.first_mut() {
        *first = b'a' + r.u8(0..26);
    }
    v
}

fn counter_value(r: &mut Rng) -> (Vec<u8>, Option<u64>) {
    let v: u64 = match r.u8(0..6) {
        0 => r.u64(0..10),
        1 => r.u64(0..100_000),
        2 => u64::MAX - r.u64(0..100),
        3 => r.u64(..),
        4 => 1 << 63,
        _ => r.u64(1_000_000_000..10_000_000_000),
    };
    let mut s = v.to_string();
    if r.u8(0..8) == 0 {
        s.insert_str(0, "00"); // leading zeros: a shorter result pads in memcached
    }
    if r.u8(0..20) == 0 {
        return (b"99999999999999999999999".to_vec(), None); // past 2^64
    }
    (s.into_bytes(), Some(v))
}

fn delta(r: &mut Rng) -> u64 {
    match r.u8(0..4) {
        0 => r.u64(0..10),
        1 => r.u64(0..1_000_000),
        2 => u64::MAX - r.u64(0..10),
        _ => r.u64(..),
    }
}

fn flags(r: &mut Rng) -> u32 {
    match r.u8(0..4) {
        0 | 1 => 0,
        2 => u32::MAX,
        _ => r.u32(..),
    }
}

fn cas_arg(r: &mut Rng) -> CasArg {
    if r.u8(0..5) == 0 {
        CasArg::Bogus
    } else {
        CasArg::Recent(if r.u8(0..3) == 0 { r.usize(1..4) } else { 0 })
    }
}

struct Gen {
    r: Rng,
    family: Family,
    counters: [Counter; COUNTER_KEYS as usize],
    /// An immediate flush happened: no delayed one may follow (see
    /// `flush_delay`).
    flushed: bool,
    /// For the Z-zone pair: no meta `h` (see `gen_meta`).
    zone: bool,
    steps: Vec<Step>,
}

impl Gen {
    fn key(&mut self) -> Key {
        match self.r.u8(0..40) {
            0 => Key::Longest,
            1 => Key::TooLong,
            _ => Key::General(self.r.u8(0..GENERAL_KEYS)),
        }
    }

    fn counter(&mut self) -> (Key, usize) {
        let i = self.r.u8(0..COUNTER_KEYS);
        (Key::Counter(i), i as usize)
    }

    /// A counter to incr/decr, unless the one picked holds 2^63 or more
    /// (see the module comment).
    fn arith_counter(&mut self) -> Option<(Key, usize)> {
        let (k, i) = self.counter();
        match self.counters[i] {
            Counter::Num { value, .. } if value >= 1 << 63 => None,
            Counter::Unknown => None,
            _ => Some((k, i)),
        }
    }

    /// Now and then, a value of exactly memcached's largest size for `key`,
    /// or one byte more.
    fn at_limit(&mut self, key: Key, flags: u32) -> Option<Vec<u8>> {
        (key != Key::TooLong && self.r.u8(0..60) == 0).then(|| {
            let len = memcached_value_max(key, flags) + self.r.usize(0..2);
            let mut v = vec![b'x'; len];
            v[0] = b'a' + self.r.u8(0..26);
            v
        })
    }

    /// Whether reading `key`'s value gives the same bytes on both servers.
    fn readable(&self, key: Key) -> bool {
        match key {
            Key::Counter(i) => !matches!(
                self.counters[i as usize],
                Counter::Num { shrunk: true, .. } | Counter::Unknown
            ),
            _ => true,
        }
    }

    fn push(&mut self, mut cmd: Cmd) {
        // A refused key leaves a text or meta data block to be read as
        // commands: keep it one harmless line.
        if let Cmd::Store {
            key: Key::TooLong,
            value,
            ..
        }
        | Cmd::Meta {
            key: Key::TooLong,
            value: Some(value),
            ..
        } = &mut cmd
        {
            *value = b"toolong".to_vec();
        }
        // A binary request with a 251-byte key closes the connection, and the
        // rest of its pipeline is never read: the model must not count it.
        let after_close = matches!(
            self.steps.last(),
            Some(Step {
                cmd: Cmd::Binary {
                    key: Some(Key::TooLong),
                    ..
                },
                ..
            })
        );
        let new_batch =
            cmd.needs_fresh_batch() || self.steps.is_empty() || after_close || self.r.u8(0..3) == 0;
        self.steps.push(Step { cmd, new_batch });
    }

    fn flush_model(&mut self) {
        self.counters = [Counter::Absent; COUNTER_KEYS as usize];
        self.flushed = true;
    }

    /// A flush delay: none, 0, or far enough never to fire during a run.
    /// Never a delay after an immediate flush: memcached keeps one flush
    /// deadline, so the later one brings back the items the first hid (those
    /// its background crawler has not reclaimed yet; docs/protocol.md).
    fn flush_delay(&mut self) -> Option<u32> {
        match self.r.u8(0..4) {
            0 => None,
            1 => Some(0),
            _ if self.flushed => Some(0),
            _ => Some(self.r.u32(100_000..1_000_000)),
        }
    }

    /// A counter was set to `bytes` (`value` if they are a number) and,
    /// unless `dead`, is now alive with it.
    fn counter_set(&mut self, i: usize, bytes: &[u8], value: Option<u64>, dead: bool) {
        self.counters[i] = match (dead, value) {
            (true, _) => Counter::Absent,
            (false, Some(value)) => Counter::Num {
                value,
                len: bytes.len(),
                shrunk: false,
            },
            (false, None) => Counter::Other,
        };
    }

    /// A counter created by incr/decr or `ma N` with this number.
    fn counter_created(&mut self, i: usize, value: u64) {
        self.counters[i] = Counter::Num {
            value,
            len: value.to_string().len(),
            shrunk: false,
        };
    }

    /// incr/decr on a counter: wraps at 2^64, stops at 0; a result that fits
    /// the stored bytes is written in place (memcached's `do_add_delta`).
    fn counter_arith(&mut self, i: usize, incr: bool, delta: u64) {
        if let Counter::Num { value, len, shrunk } = self.counters[i] {
            let value = if incr {
                value.wrapping_add(delta)
            } else {
                value.saturating_sub(delta)
            };
            let digits = value.to_string().len();
            self.counters[i] = Counter::Num {
                value,
                len: len.max(digits),
                shrunk: shrunk || digits < len,
            };
        }
    }

    fn gen_text(&mut self) {
        let r = self.r.u8(0..100);
        match r {
            0..=29 => {
                let key = self.key();
                let op = match self.r.u8(0..10) {
                    0..=3 => TextStore::Set,
                    4 => TextStore::Add,
                    5 => TextStore::Replace,
                    6 => TextStore::Append,
                    7 => TextStore::Prepend,
                    _ => TextStore::Cas(cas_arg(&mut self.r)),
                };
                let value = if matches!(op, TextStore::Append | TextStore::Prepend) {
                    general_value(&mut self.r)
                        .into_iter()
                        .take(50)
                        .chain(*b"z")
                        .collect()
                } else {
                    general_value(&mut self.r)
                };
                let flags = flags(&mut self.r);
                let value = match op {
                    TextStore::Append | TextStore::Prepend => value,
                    _ => self.at_limit(key, flags).unwrap_or(value),
                };
                let cmd = Cmd::Store {
                    op,
                    key,
                    flags,
                    exptime: exptime(&mut self.r).0,
                    value,
                    noreply: self.r.u8(0..5) == 0,
                };
                self.push(cmd);
            }
            30..=34 => {
                // A counter set, or add/replace.
                let (key, i) = self.counter();
                let (value, num) = counter_value(&mut self.r);
                let (exptime, dead) = exptime(&mut self.r);
                let op = [TextStore::Set, TextStore::Add, TextStore::Replace][self.r.usize(0..3)];
                let present = self.counters[i] != Counter::Absent;
                let takes = match op {
                    TextStore::Add => !present,
                    TextStore::Replace => present,
                    _ => true,
                };
                if op != TextStore::Set && self.counters[i] == Counter::Unknown {
                    // Stays unknown: whether it takes depends on the unknown.
                } else if takes {
                    self.counter_set(i, &value, num, dead);
                }
                let cmd = Cmd::Store {
                    op,
                    key,
                    flags: 0,
                    exptime,
                    value,
                    noreply: self.r.u8(0..5) == 0,
                };
                self.push(cmd);
            }
            35..=54 => {
                let n = if self.r.u8(0..3) == 0 {
                    self.r.usize(2..8)
                } else {
                    1
                };
                let mut keys = Vec::new();
                for _ in 0..n {
                    let k = if self.r.u8(0..4) == 0 {
                        self.counter().0
                    } else {
                        self.key()
                    };
                    // Never a 251-byte key: see the module comment.
                    if self.readable(k) && k != Key::TooLong {
                        keys.push(k);
                    }
                }
                if keys.is_empty() {
                    return;
                }
                let exptime = if self.r.u8(0..4) == 0 {
                    let (e, dead) = exptime(&mut self.r);
                    for k in &keys {
                        if let (Key::Counter(i), true) = (k, dead) {
                            self.counters[*i as usize] = Counter::Absent;
                        }
                    }
                    Some(e)
                } else {
                    None
                };
                let cas = self.r.bool();
                self.push(Cmd::Retrieve { cas, exptime, keys });
            }
            55..=62 => {
                let key = if self.r.bool() {
                    let (k, i) = self.counter();
                    self.counters[i] = Counter::Absent;
                    k
                } else {
                    self.key()
                };
                let noreply = self.r.u8(0..5) == 0;
                self.push(Cmd::Delete { key, noreply });
            }
            63..=79 => {
                let incr = self.r.bool();
                let delta = delta(&mut self.r);
                let key = match self.arith_counter() {
                    Some((k, i)) if self.r.u8(0..5) != 0 => {
                        self.counter_arith(i, incr, delta);
                        k
                    }
                    _ => self.key(),
                };
                let noreply = self.r.u8(0..5) == 0;
                self.push(Cmd::Arith {
                    incr,
                    key,
                    delta,
                    noreply,
                });
            }
            80..=86 => {
                let (exptime, dead) = exptime(&mut self.r);
                let key = if self.r.bool() {
                    let (k, i) = self.counter();
                    if dead {
                        self.counters[i] = Counter::Absent;
                    }
                    k
                } else {
                    self.key()
                };
                let noreply = self.r.u8(0..5) == 0;
                self.push(Cmd::Touch {
                    key,
                    exptime,
                    noreply,
                });
            }
            87..=90 => {
                let delay = self.flush_delay();
                if matches!(delay, None | Some(0)) {
                    self.flush_model();
                }
                let delay = delay.map(i64::from);
                let noreply = self.r.u8(0..4) == 0;
                self.push(Cmd::FlushAll { delay, noreply });
            }
            91 => self.push(Cmd::Version),
            92 => self.gen_line(),
            93 => {
                let noreply = self.r.bool();
                self.push(Cmd::Verbosity { noreply });
            }
            _ => self.gen_meta(),
        }
    }

    /// A line memcached answers with an error (or a quirk): bad numbers,
    /// missing or extra tokens, unknown, repeated or malformed meta flags.
    fn gen_line(&mut self) {
        const LINES: &[(&str, &str)] = &[
            ("set ", " abc 0 1"),
            ("set ", " 0 0"),
            ("add ", " 0 0 -1"),
            ("cas ", " 0 0 1"),
            ("incr ", " -1"),
            ("incr ", " abc"),
            ("decr ", ""),
            ("touch ", " abc"),
            ("touch ", " 10 noreply extra"),
            ("delete ", " 0"),
            ("delete ", " 5"),
            ("delete ", " noreply extra"),
            ("get ", " "),
            ("gat abc ", ""),
            ("gats ", ""),
            ("verbosity ", ""),
            ("foo ", " bar"),
            ("flush_all abc ", ""),
            ("mg ", " v v"),
            ("mg ", " !"),
            ("mg ", " T"),
            ("mg ", " Nabc v"),
            ("mg ", " Oabcdefghijklmnopqrstuvwxyz0123456789 v"),
            ("mg ", " v k c f s q u O1 O2"),
            ("mg ", " 1 2 3 4 5 6 7 8 9 a b c d e f g h"),
            ("mg ", " Cabc v"),
            ("mg ", " C1 v C2"),
            ("md ", " C"),
            ("md ", " I I"),
            ("md ", " Tx I"),
            ("md ", " q q"),
            ("ma ", " Dabc"),
            ("ma ", " MX"),
            ("ma ", " N"),
            ("mn ", " extra"),
        ];
        let (head, tail) = LINES[self.r.usize(0..LINES.len())];
        let key = match self.key() {
            // Not in a multiget: see the module comment.
            Key::TooLong if head.starts_with('g') => Key::Longest,
            k => k,
        };
        self.push(Cmd::Line { head, key, tail });
    }

    fn meta_common(&mut self, flags: &mut Vec<MFlag>, letters: &[u8]) {
        for &c in letters {
            if self.r.u8(0..4) == 0 {
                flags.push(MFlag::Bare(c));
            }
        }
        if self.r.u8(0..6) == 0 {
            let n = self.r.usize(1..31);
            let tok: Vec<u8> = (0..n).map(|_| b'a' + self.r.u8(0..26)).collect();
            flags.push(MFlag::Token(b'O', tok));
        }
    }

    fn gen_meta(&mut self) {
        let mut flags = Vec::new();
        match self.r.u8(0..100) {
            0..=34 => {
                // mg
                let counter = self.r.u8(0..4) == 0;
                let (key, ci) = if counter {
                    let (k, i) = self.counter();
                    (k, Some(i))
                } else {
                    (self.key(), None)
                };
                // No `h` on counters: whether incr/decr wrote a new item
                // (which was never fetched) is memcached's timing. Nor on
                // the Z-zone pair: a read from a block marks the item
                // fetched only if it promotes it (docs/protocol.md).
                let letters: &[u8] = match key {
                    Key::Counter(_) if self.readable(key) => b"vkcfsqu",
                    Key::Counter(_) => b"kcfqu", // no value, no size
                    _ if self.zone => b"vkcfsqu",
                    _ => b"vkcfsquh",
                };
                self.meta_common(&mut flags, letters);
                if self.r.u8(0..5) == 0 {
                    let (e, dead) = exptime(&mut self.r);
                    flags.push(MFlag::Int(b'T', e));
                    if let (Some(i), true) = (ci, dead) {
                        self.counters[i] = Counter::Absent;
                    }
                }
                if ci.is_none() && self.r.u8(0..6) == 0 {
                    flags.push(MFlag::Int(b'N', self.r.i64(100..10_000)));
                }
                if self.r.u8(0..8) == 0 {
                    flags.push(MFlag::Int(b'R', self.r.i64(1..30)));
                }
                if self.r.u8(0..6) == 0 {
                    // `C` on mg: 1.6.18 ignores it, 1.6.45 leaves the value
                    // out when it matches. Both send the value for a CAS
                    // that matches nothing, and nothing else depends on it.
                    let arg = match flags.contains(&MFlag::Bare(b'v')) {
                        true => CasArg::Bogus,
                        false => cas_arg(&mut self.r),
                    };
                    flags.push(MFlag::Cas(b'C', arg));
                }
                self.r.shuffle(&mut flags);
                self.push(Cmd::Meta {
                    op: "mg",
                    key,
                    value: None,
                    flags,
                });
            }
            35..=64 => {
                // ms
                let counter = self.r.u8(0..4) == 0;
                self.meta_common(&mut flags, b"ckqI");
                let (e, dead) = exptime(&mut self.r);
                if self.r.bool() {
                    flags.push(MFlag::Int(b'T', e));
                }
                let has_t = flags.iter().any(|f| matches!(f, MFlag::Int(b'T', _)));
                if self.r.u8(0..3) == 0 {
                    flags.push(MFlag::Int(b'F', flags_i64(&mut self.r)));
                }
                let (key, value) = if counter {
                    let (k, i) = self.counter();
                    let (v, num) = counter_value(&mut self.r);
                    // Plain set only, no CAS: the model knows the outcome.
                    flags.retain(|f| !matches!(f, MFlag::Bare(b'I')));
                    self.counter_set(i, &v, num, has_t && dead);
                    (k, v)
                } else {
                    let key = self.key();
                    let mut v = general_value(&mut self.r);
                    if self.r.u8(0..4) == 0 {
                        let mode = b"EAPRS"[self.r.usize(0..5)];
                        flags.push(MFlag::Token(b'M', vec![mode]));
                        if matches!(mode, b'A' | b'P') {
                            v.truncate(50);
                            v.push(b'z');
                        }
                        // `N` outside append mode: ignored by both. In
                        // append mode 1.6.45 vivifies, 1.6.18 does not.
                        if !matches!(mode, b'A' | b'P') && self.r.u8(0..4) == 0 {
                            flags.push(MFlag::Int(b'N', self.r.i64(100..10_000)));
                        }
                    }
                    if self.r.u8(0..3) == 0 {
                        flags.push(MFlag::Cas(b'C', cas_arg(&mut self.r)));
                    }
                    (key, v)
                };
                self.r.shuffle(&mut flags);
                self.push(Cmd::Meta {
                    op: "ms",
                    key,
                    value: Some(value),
                    flags,
                });
            }
            65..=76 => {
                // md
                let key = if self.r.bool() {
                    let (k, i) = self.counter();
                    self.counters[i] = Counter::Absent;
                    self.meta_common(&mut flags, b"kq");
                    k
                } else {
                    self.meta_common(&mut flags, b"kqI");
                    if self.r.u8(0..3) == 0 {
                        flags.push(MFlag::Cas(b'C', cas_arg(&mut self.r)));
                    }
                    if flags.contains(&MFlag::Bare(b'I')) && self.r.bool() {
                        flags.push(MFlag::Int(b'T', exptime(&mut self.r).0));
                    }
                    self.key()
                };
                self.r.shuffle(&mut flags);
                self.push(Cmd::Meta {
                    op: "md",
                    key,
                    value: None,
                    flags,
                });
            }
            77..=94 => {
                // ma
                self.meta_common(&mut flags, b"kqcv");
                let incr = self.r.u8(0..3) != 0;
                if !incr || self.r.bool() {
                    let m = if incr { b"I+" } else { b"D-" }[self.r.usize(0..2)];
                    flags.push(MFlag::Token(b'M', vec![m]));
                }
                let d = if self.r.u8(0..3) == 0 {
                    1
                } else {
                    delta(&mut self.r)
                };
                if d != 1 || self.r.bool() {
                    flags.push(MFlag::Token(b'D', d.to_string().into_bytes()));
                }
                let key = match self.arith_counter() {
                    // A general key: non-numeric or missing; no N, which would create.
                    Some(_) if self.r.u8(0..5) == 0 => self.key(),
                    None => self.key(),
                    Some((k, i)) => {
                        if self.counters[i] == Counter::Absent && self.r.bool() {
                            let init = if self.r.bool() { 0 } else { self.r.u64(..) };
                            flags.push(MFlag::Int(b'N', self.r.i64(100..10_000)));
                            flags.push(MFlag::Token(b'J', init.to_string().into_bytes()));
                            self.counter_created(i, init);
                        } else {
                            self.counter_arith(i, incr, d);
                        }
                        k
                    }
                };
                self.r.shuffle(&mut flags);
                self.push(Cmd::Meta {
                    op: "ma",
                    key,
                    value: None,
                    flags,
                });
            }
            95..=96 => self.gen_line(),
            _ => self.push(Cmd::Meta {
                op: "mn",
                key: Key::General(0),
                value: None,
                flags,
            }),
        }
    }

    fn gen_binary(&mut self) {
        use cachalot_protocol::client::request::binary as b;
        let opaque = self.r.u32(..);
        let quiet = self.r.u8(0..3) == 0;
        let cmd = |opcode: u8, cas, extras: Vec<u8>, key, value| Cmd::Binary {
            opcode,
            opaque,
            cas,
            extras,
            key,
            value,
        };
        let bexp = |r: &mut Rng| -> (u32, bool) {
            let (e, dead) = exptime(r);
            if e < 0 {
                // The binary exptime is unsigned: the nearest dead time is 1970 + 30 days + 1 s.
                (2_592_001, true)
            } else {
                (e as u32, dead)
            }
        };
        match self.r.u8(0..100) {
            0..=24 => {
                let key = self.key();
                let op = [0x01u8, 0x02, 0x03][self.r.usize(0..3)] | if quiet { 0x10 } else { 0 };
                let cas = (self.r.u8(0..4) == 0).then(|| cas_arg(&mut self.r));
                let flags = flags(&mut self.r);
                let extras = b::store_extras(flags, bexp(&mut self.r).0).to_vec();
                let value = self
                    .at_limit(key, flags)
                    .unwrap_or_else(|| general_value(&mut self.r));
                self.push(cmd(op, cas, extras, Some(key), value));
            }
            25..=29 => {
                let (key, i) = self.counter();
                let (value, num) = counter_value(&mut self.r);
                let (e, dead) = bexp(&mut self.r);
                self.counter_set(i, &value, num, dead);
                let op = if quiet { 0x11 } else { 0x01 };
                self.push(cmd(
                    op,
                    None,
                    b::store_extras(0, e).to_vec(),
                    Some(key),
                    value,
                ));
            }
            30..=36 => {
                let key = self.key();
                let op = [0x0eu8, 0x0f][self.r.usize(0..2)] + if quiet { 0x0b } else { 0 };
                let mut value: Vec<u8> = general_value(&mut self.r).into_iter().take(50).collect();
                value.push(b'z');
                let cas = (self.r.u8(0..5) == 0).then(|| cas_arg(&mut self.r));
                self.push(cmd(op, cas, vec![], Some(key), value));
            }
            37..=56 => {
                let key = if self.r.u8(0..4) == 0 {
                    self.counter().0
                } else {
                    self.key()
                };
                if !self.readable(key) {
                    return;
                }
                // get, getq, getk, getkq
                let op = [[0x00u8, 0x09], [0x0c, 0x0d]][self.r.usize(0..2)][quiet as usize];
                self.push(cmd(op, None, vec![], Some(key), vec![]));
            }
            57..=62 => {
                let cas = (self.r.u8(0..5) == 0).then(|| cas_arg(&mut self.r));
                let key = if self.r.bool() {
                    let (k, i) = self.counter();
                    // A delete with a CAS may or may not happen.
                    self.counters[i] = if cas.is_some() {
                        Counter::Unknown
                    } else {
                        Counter::Absent
                    };
                    k
                } else {
                    self.key()
                };
                let op = if quiet { 0x14 } else { 0x04 };
                self.push(cmd(op, cas, vec![], Some(key), vec![]));
            }
            63..=79 => {
                let incr = self.r.bool();
                let d = delta(&mut self.r);
                let initial = self.r.u64(..);
                let picked = self.arith_counter().filter(|_| self.r.u8(0..5) != 0);
                let (key, exp) = if let Some((k, i)) = picked {
                    let (e, dead) = if self.r.u8(0..3) == 0 {
                        (cachalot_protocol::binary::ARITH_NO_CREATE, false)
                    } else {
                        bexp(&mut self.r)
                    };
                    match self.counters[i] {
                        Counter::Absent if e != cachalot_protocol::binary::ARITH_NO_CREATE => {
                            self.counters[i] = if dead {
                                Counter::Absent
                            } else {
                                Counter::Num {
                                    value: initial,
                                    len: initial.to_string().len(),
                                    shrunk: false,
                                }
                            };
                        }
                        _ => self.counter_arith(i, incr, d),
                    }
                    (k, e)
                } else {
                    // Never creates on a general key (it would hold a number).
                    (self.key(), cachalot_protocol::binary::ARITH_NO_CREATE)
                };
                let op = if incr { 0x05 } else { 0x06 } + if quiet { 0x10 } else { 0 };
                let extras = b::arith_extras(d, initial, exp).to_vec();
                self.push(cmd(op, None, extras, Some(key), vec![]));
            }
            80..=87 => {
                let (e, dead) = bexp(&mut self.r);
                let key = if self.r.bool() {
                    self.counter().0
                } else {
                    self.key()
                };
                let op = match self.r.u8(0..3) {
                    0 => 0x1c, // touch
                    // gat reads the value before the new exptime applies
                    _ if !self.readable(key) => return,
                    1 => [0x1du8, 0x1e][quiet as usize],
                    _ => [0x23u8, 0x24][quiet as usize],
                };
                if let (Key::Counter(i), true) = (key, dead) {
                    self.counters[i as usize] = Counter::Absent;
                }
                self.push(cmd(op, None, b::time_extras(e).to_vec(), Some(key), vec![]));
            }
            88..=91 => {
                let op = if quiet { 0x18 } else { 0x08 };
                let delay = self.flush_delay();
                if matches!(delay, None | Some(0)) {
                    self.flush_model();
                }
                let extras = delay.map_or(vec![], |d| b::time_extras(d).to_vec());
                self.push(cmd(op, None, extras, None, vec![]));
            }
            92..=95 => self.push(cmd(0x0a, None, vec![], None, vec![])),
            _ => self.push(cmd(0x0b, None, vec![], None, vec![])),
        }
    }
}

fn flags_i64(r: &mut Rng) -> i64 {
    i64::from(flags(r))
}

/// The random sequence for `seed` (the family comes from the seed too),
/// to run on the Z-zone pair if `zone`.
pub fn sequence_for(seed: u64, zone: bool) -> Seq {
    let family = [Family::Text, Family::Meta, Family::Binary][(seed % 3) as usize];
    let mut g = Gen {
        r: Rng::with_seed(seed),
        family,
        counters: [Counter::Absent; COUNTER_KEYS as usize],
        flushed: false,
        zone,
        steps: Vec::new(),
    };
    let len = g.r.usize(5..60);
    while g.steps.len() < len {
        match g.family {
            Family::Text => g.gen_text(),
            Family::Meta if g.r.u8(0..8) == 0 => g.gen_text(),
            Family::Meta => g.gen_meta(),
            Family::Binary => g.gen_binary(),
        }
    }
    Seq {
        seed,
        zone,
        family,
        steps: g.steps,
    }
}
