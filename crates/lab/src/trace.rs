//! The request record every workload model produces and every driver consumes,
//! and its two file forms: CSV with a header row `time,key,size,cost,op,ttl`
//! (libCacheSim's csv reader takes it with `time-col=1,obj-id-col=2,
//! obj-size-col=3`) and a compact little-endian binary form.
//!
//! CSV: `time` is microseconds since the trace start, `key` the numeric
//! object id, `size` the value size, `op` get/set/delete, `ttl` seconds. We
//! write a 7th column `key_size` (libCacheSim ignores extra columns); when a
//! trace lacks it, keys are 16 bytes (enough to render any u64 id in hex
//! without collisions). The reader finds columns by header name, so column
//! order does not matter, and it also takes memcached-style op names (gets,
//! add, replace, cas, append, prepend, incr, decr count as sets).
//!
//! Binary (`.bin`): an 8-byte magic `CLABTRC1`, then fixed 32-byte
//! little-endian records: time_us u64, key u64, value_size u32, cost u32,
//! ttl u32, key_size u16, op u8 (0 get, 1 set, 2 delete), one zero byte.
//!
//! A CSV `key` that is not a number is a key itself: its id is the engine's
//! hash of its bytes (`%XX` decoded first, as a server's `trace_keys=plain`
//! capture writes them), the id a hashed capture gives the same key, and
//! its `key_size` is at least 16 (the hex digits of a 64-bit id).
//!
//! oracleGeneral (libCacheSim's binary format; files named `*.oracleGeneral`
//! or `*.oracleGeneral.bin`, read only): packed 24-byte little-endian
//! records of u32 clock_time (seconds), u64 obj_id, u32 obj_size, i64
//! next_access_vtime (not used here). Every record is a GET (libCacheSim
//! inserts an object on every miss, as the look-aside fill does); its key
//! is 16 bytes and its value `obj_size - 16`, so the item holds the
//! object's bytes (a server capture's obj_size is key plus value).

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// What the application does with the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// Read; on a miss the look-aside application recomputes and SETs it.
    Get,
    /// Write (update) the value.
    Set,
    Delete,
}

impl Op {
    /// The operation a uniform draw `u` in [0, 1) picks from a mix of
    /// `set` SETs and `delete` DELETEs, GETs the rest.
    pub fn pick(u: f64, set: f64, delete: f64) -> Op {
        if u < set {
            Op::Set
        } else if u < set + delete {
            Op::Delete
        } else {
            Op::Get
        }
    }
}

/// One request of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// Microseconds since the start of the trace.
    pub time_us: u64,
    /// Object id; the key bytes are derived from it with [`key_bytes`].
    pub key: u64,
    /// Key length in bytes (the id is rendered to exactly this many bytes).
    pub key_size: u16,
    /// Value length in bytes.
    pub value_size: u32,
    /// Cost of recomputing the value on a miss (GD-Wheel's cost; microseconds
    /// in our models), 1 when the model has none.
    pub cost: u32,
    pub op: Op,
    /// Time to live in seconds, 0 = none.
    pub ttl: u32,
}

/// Render object id `key` as exactly `size` key bytes (at least 1): the id in
/// hexadecimal, left-padded with 'k' characters, truncated from the left if the
/// size is too small to hold it (so distinct ids may collide only below 16 bytes
/// of hex, which a model must then avoid by using large enough sizes).
/// Allocates nothing: the replay renders a key for every request.
pub fn key_bytes(key: u64, size: usize, out: &mut Vec<u8>) {
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

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Get => "get",
            Op::Set => "set",
            Op::Delete => "delete",
        }
    }

    /// Parse an operation name (case-insensitive); memcached's storage and
    /// arithmetic commands all count as sets.
    pub fn parse(s: &str) -> Option<Op> {
        match s.trim().to_ascii_lowercase().as_str() {
            "get" | "gets" | "read" | "0" => Some(Op::Get),
            "set" | "add" | "replace" | "cas" | "append" | "prepend" | "incr" | "decr"
            | "update" | "write" | "1" => Some(Op::Set),
            "delete" | "del" | "2" => Some(Op::Delete),
            _ => None,
        }
    }
}

/// The CSV header we write.
pub const CSV_HEADER: &str = "time,key,size,cost,op,ttl,key_size";
/// libCacheSim's `-t` options for our CSV (see docs/lab.md).
pub const LIBCACHESIM_CSV_OPTIONS: &str =
    "time-col=1,obj-id-col=2,obj-size-col=3,delimiter=,,has-header=true,obj-id-is-num=true";
/// Key size assumed when a trace does not give one.
pub const DEFAULT_KEY_SIZE: u16 = 16;

pub const BIN_MAGIC: &[u8; 8] = b"CLABTRC1";
pub const BIN_RECORD: usize = 32;
/// Bytes of an oracleGeneral record.
pub const ORACLE_RECORD: usize = 24;

/// Whether `path` names an oracleGeneral trace (`*.oracleGeneral` or
/// `*.oracleGeneral.bin`, any case).
pub fn is_oracle_general(path: &Path) -> bool {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    name.ends_with(".oraclegeneral") || name.ends_with(".oraclegeneral.bin")
}

/// One oracleGeneral record as a look-aside GET (see the module's text).
pub fn decode_oracle(b: &[u8; ORACLE_RECORD]) -> Request {
    let mut t = [0u8; 4];
    t.copy_from_slice(&b[0..4]);
    let mut id = [0u8; 8];
    id.copy_from_slice(&b[4..12]);
    let mut size = [0u8; 4];
    size.copy_from_slice(&b[12..16]);
    Request {
        time_us: u32::from_le_bytes(t) as u64 * 1_000_000,
        key: u64::from_le_bytes(id),
        key_size: DEFAULT_KEY_SIZE,
        value_size: u32::from_le_bytes(size).saturating_sub(DEFAULT_KEY_SIZE as u32),
        cost: 1,
        op: Op::Get,
        ttl: 0,
    }
}

/// The id of a CSV key that is not a number: the engine's hash of its
/// bytes, `%XX` decoded (anything else after a `%` is taken as it is).
pub fn key_id(text: &str) -> u64 {
    let b = text.as_bytes();
    let mut key = Vec::with_capacity(b.len());
    let hex = |c: u8| (c as char).to_digit(16);
    let mut i = 0;
    while i < b.len() {
        let escaped = match (b[i], b.get(i + 1), b.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) => hex(h).zip(hex(l)).map(|(h, l)| (h * 16 + l) as u8),
            _ => None,
        };
        match escaped {
            Some(c) => {
                key.push(c);
                i += 3;
            }
            None => {
                key.push(b[i]);
                i += 1;
            }
        }
    }
    cachalot_engine::hash::hash(&key)
}

/// Encode one binary record.
pub fn encode_bin(r: &Request) -> [u8; BIN_RECORD] {
    let mut b = [0u8; BIN_RECORD];
    b[0..8].copy_from_slice(&r.time_us.to_le_bytes());
    b[8..16].copy_from_slice(&r.key.to_le_bytes());
    b[16..20].copy_from_slice(&r.value_size.to_le_bytes());
    b[20..24].copy_from_slice(&r.cost.to_le_bytes());
    b[24..28].copy_from_slice(&r.ttl.to_le_bytes());
    b[28..30].copy_from_slice(&r.key_size.to_le_bytes());
    b[30] = match r.op {
        Op::Get => 0,
        Op::Set => 1,
        Op::Delete => 2,
    };
    b
}

/// Decode one binary record; None for an unknown op byte.
pub fn decode_bin(b: &[u8; BIN_RECORD]) -> Option<Request> {
    let u64_at = |i: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[i..i + 8]);
        u64::from_le_bytes(a)
    };
    let u32_at = |i: usize| {
        let mut a = [0u8; 4];
        a.copy_from_slice(&b[i..i + 4]);
        u32::from_le_bytes(a)
    };
    let op = match b[30] {
        0 => Op::Get,
        1 => Op::Set,
        2 => Op::Delete,
        _ => return None,
    };
    Some(Request {
        time_us: u64_at(0),
        key: u64_at(8),
        value_size: u32_at(16),
        cost: u32_at(20),
        ttl: u32_at(24),
        key_size: u16::from_le_bytes([b[28], b[29]]),
        op,
    })
}

/// One CSV line (without newline).
pub fn csv_line(r: &Request) -> String {
    format!(
        "{},{},{},{},{},{},{}",
        r.time_us,
        r.key,
        r.value_size,
        r.cost,
        r.op.as_str(),
        r.ttl,
        r.key_size
    )
}

/// Column positions found in a CSV header.
#[derive(Clone, Debug)]
pub struct CsvColumns {
    time: Option<usize>,
    key: usize,
    size: Option<usize>,
    cost: Option<usize>,
    op: Option<usize>,
    ttl: Option<usize>,
    key_size: Option<usize>,
}

impl CsvColumns {
    /// From a header row. `key` (or libCacheSim's `obj_id`/`id`) is required;
    /// the others default (time = line number, size 0, cost 1, op get, ttl 0).
    pub fn from_header(line: &str) -> anyhow::Result<CsvColumns> {
        let names: Vec<String> = line
            .split(',')
            .map(|s| s.trim().to_ascii_lowercase())
            .collect();
        let find = |alts: &[&str]| names.iter().position(|n| alts.contains(&n.as_str()));
        Ok(CsvColumns {
            time: find(&["time", "timestamp", "time_us"]),
            key: find(&["key", "obj_id", "id", "obj-id"])
                .ok_or_else(|| anyhow::anyhow!("CSV header {line:?} has no `key` column"))?,
            size: find(&["size", "value_size", "obj_size", "obj-size"]),
            cost: find(&["cost"]),
            op: find(&["op", "operation"]),
            ttl: find(&["ttl"]),
            key_size: find(&["key_size", "key-size"]),
        })
    }

    /// Parse one data line.
    pub fn parse(&self, line: &str, lineno: u64) -> anyhow::Result<Request> {
        let f: Vec<&str> = line.split(',').map(|s| s.trim()).collect();
        let get = |i: Option<usize>, what: &str| -> anyhow::Result<Option<&str>> {
            match i {
                None => Ok(None),
                Some(i) => f
                    .get(i)
                    .copied()
                    .map(Some)
                    .ok_or_else(|| anyhow::anyhow!("line {lineno}: no {what} column")),
            }
        };
        fn num<T: std::str::FromStr>(
            v: Option<&str>,
            d: T,
            what: &str,
            lineno: u64,
        ) -> anyhow::Result<T> {
            match v {
                None | Some("") => Ok(d),
                Some(s) => s
                    .parse()
                    .map_err(|_| anyhow::anyhow!("line {lineno}: bad {what} {s:?}")),
            }
        }
        let op = match get(self.op, "op")? {
            None | Some("") => Op::Get,
            Some(s) => {
                Op::parse(s).ok_or_else(|| anyhow::anyhow!("line {lineno}: bad op {s:?}"))?
            }
        };
        let mut key_size: u16 = num(
            get(self.key_size, "key_size")?,
            DEFAULT_KEY_SIZE,
            "key_size",
            lineno,
        )?;
        anyhow::ensure!(
            (1..=250).contains(&key_size),
            "line {lineno}: key_size {key_size} outside 1..=250"
        );
        let key = match get(Some(self.key), "key")? {
            None | Some("") => 0,
            Some(s) => match s.parse::<u64>() {
                Ok(id) => id,
                Err(_) => {
                    // A key, not an id: 16 bytes at least keep the ids
                    // of distinct keys apart (`key_bytes`).
                    key_size = key_size.max(DEFAULT_KEY_SIZE);
                    key_id(s)
                }
            },
        };
        Ok(Request {
            time_us: num(get(self.time, "time")?, lineno, "time", lineno)?,
            key,
            key_size,
            value_size: num(get(self.size, "size")?, 0, "size", lineno)?,
            cost: num(get(self.cost, "cost")?, 1, "cost", lineno)?,
            op,
            ttl: num(get(self.ttl, "ttl")?, 0, "ttl", lineno)?,
        })
    }
}

/// A trace reader: yields requests until the end or the first malformed
/// record, which it reports on stderr (an `Iterator` cannot return errors;
/// [`TraceReader::error`] keeps it for callers that check).
pub struct TraceReader {
    inner: ReaderKind,
    path: PathBuf,
    lineno: u64,
    error: Option<String>,
}

enum ReaderKind {
    Csv(BufReader<File>, CsvColumns, String),
    Bin(BufReader<File>),
    Oracle(BufReader<File>),
}

/// Read one fixed-size record: Ok(false) at a clean end, an error when the
/// file ends inside it (`what` names it).
fn read_record(rd: &mut BufReader<File>, b: &mut [u8], what: u64) -> Result<bool, String> {
    let mut got = 0;
    while got < b.len() {
        match rd.read(&mut b[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    match got {
        0 => Ok(false),
        n if n < b.len() => Err(format!("record {what} is truncated")),
        _ => Ok(true),
    }
}

impl TraceReader {
    pub fn open(path: &Path) -> anyhow::Result<TraceReader> {
        let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let mut rd = BufReader::with_capacity(1 << 20, file);
        if is_oracle_general(path) {
            return Ok(TraceReader {
                inner: ReaderKind::Oracle(rd),
                path: path.to_path_buf(),
                lineno: 1,
                error: None,
            });
        }
        let is_bin = match path.extension().and_then(|e| e.to_str()) {
            Some("bin") => true,
            Some("csv") => false,
            _ => rd.fill_buf()?.starts_with(BIN_MAGIC),
        };
        let inner = if is_bin {
            let mut magic = [0u8; 8];
            rd.read_exact(&mut magic)
                .with_context(|| format!("{}: too short for a binary trace", path.display()))?;
            anyhow::ensure!(
                &magic == BIN_MAGIC,
                "{}: not a cachalot-lab binary trace",
                path.display()
            );
            ReaderKind::Bin(rd)
        } else {
            let mut header = String::new();
            rd.read_line(&mut header)
                .with_context(|| format!("reading {}", path.display()))?;
            let cols = CsvColumns::from_header(header.trim_end())
                .with_context(|| format!("{}", path.display()))?;
            ReaderKind::Csv(rd, cols, String::new())
        };
        Ok(TraceReader {
            inner,
            path: path.to_path_buf(),
            lineno: 1,
            error: None,
        })
    }

    /// The error that ended the stream early, if any.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    fn fail(&mut self, e: String) -> Option<Request> {
        eprintln!(
            "cachalot-lab: {}: {e}; stopping the trace here",
            self.path.display()
        );
        self.error = Some(e);
        None
    }

    fn next_result(&mut self) -> Result<Option<Request>, String> {
        if self.error.is_some() {
            return Ok(None);
        }
        self.lineno += 1;
        let lineno = self.lineno;
        match &mut self.inner {
            ReaderKind::Oracle(rd) => {
                let mut b = [0u8; ORACLE_RECORD];
                Ok(read_record(rd, &mut b, lineno - 1)?.then(|| decode_oracle(&b)))
            }
            ReaderKind::Bin(rd) => {
                let mut b = [0u8; BIN_RECORD];
                if !read_record(rd, &mut b, lineno - 1)? {
                    return Ok(None);
                }
                decode_bin(&b)
                    .map(Some)
                    .ok_or_else(|| format!("record {}: bad op byte {}", lineno - 1, b[30]))
            }
            ReaderKind::Csv(rd, cols, buf) => loop {
                buf.clear();
                match rd.read_line(buf) {
                    Ok(0) => return Ok(None),
                    Ok(_) => {}
                    Err(e) => return Err(e.to_string()),
                }
                let line = buf.trim_end();
                if line.is_empty() {
                    continue;
                }
                return cols
                    .parse(line, lineno)
                    .map(Some)
                    .map_err(|e| e.to_string());
            },
        }
    }
}

impl Iterator for TraceReader {
    type Item = Request;
    fn next(&mut self) -> Option<Request> {
        match self.next_result() {
            Ok(r) => r,
            Err(e) => self.fail(e),
        }
    }
}

/// Open a trace file as a request stream (by name: `.oracleGeneral` or
/// `.oracleGeneral.bin`, then by extension: .csv or .bin; other names are
/// sniffed for the binary magic, else read as CSV).
pub fn open(path: &Path) -> anyhow::Result<crate::workload::Requests> {
    Ok(Box::new(TraceReader::open(path)?))
}

/// Read a whole trace into memory, failing on any malformed record.
pub fn read_all(path: &Path) -> anyhow::Result<Vec<Request>> {
    let mut rd = TraceReader::open(path)?;
    let v: Vec<Request> = rd.by_ref().collect();
    if let Some(e) = rd.error() {
        anyhow::bail!("{}: {e}", path.display());
    }
    Ok(v)
}

/// A trace writer, CSV or binary by the file's extension (.bin for binary).
pub enum Writer {
    Csv(BufWriter<File>),
    Bin(BufWriter<File>),
}

impl Writer {
    pub fn create(path: &Path) -> anyhow::Result<Writer> {
        anyhow::ensure!(
            !is_oracle_general(path),
            "{}: oracleGeneral is read only here; capture one with a server's \
             -o trace_file, or convert with libCacheSim's traceConv",
            path.display()
        );
        let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let mut w = BufWriter::with_capacity(1 << 20, file);
        if path.extension().and_then(|e| e.to_str()) == Some("bin") {
            w.write_all(BIN_MAGIC)?;
            Ok(Writer::Bin(w))
        } else {
            writeln!(w, "{CSV_HEADER}")?;
            Ok(Writer::Csv(w))
        }
    }

    pub fn write(&mut self, r: &Request) -> anyhow::Result<()> {
        match self {
            Writer::Csv(w) => writeln!(w, "{}", csv_line(r))?,
            Writer::Bin(w) => w.write_all(&encode_bin(r))?,
        }
        Ok(())
    }

    pub fn finish(self) -> anyhow::Result<()> {
        match self {
            Writer::Csv(mut w) | Writer::Bin(mut w) => w.flush()?,
        }
        Ok(())
    }
}

/// Write a whole trace.
pub fn write_all(path: &Path, reqs: impl IntoIterator<Item = Request>) -> anyhow::Result<()> {
    let mut w = Writer::create(path)?;
    for r in reqs {
        w.write(&r)?;
    }
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn key_bytes_pad_and_cut_the_hex_id() {
        let mut k = Vec::new();
        for (key, size, want) in [
            (0u64, 0usize, "0"),
            (0xbeef, 1, "f"),
            (0xbeef, 4, "beef"),
            (0xbeef, 7, "kkkbeef"),
            (u64::MAX, 16, "ffffffffffffffff"),
            (1 << 63, 17, "k8000000000000000"),
        ] {
            key_bytes(key, size, &mut k);
            assert_eq!(k, want.as_bytes(), "key {key:x} size {size}");
        }
        key_bytes(1, 250, &mut k);
        assert_eq!((k.len(), k[248], k[249]), (250, b'k', b'1'));
    }

    fn arb_request() -> impl Strategy<Value = Request> {
        (
            any::<u64>(),
            any::<u64>(),
            1u16..=250,
            any::<u32>(),
            any::<u32>(),
            0u8..3,
            any::<u32>(),
        )
            .prop_map(
                |(time_us, key, key_size, value_size, cost, op, ttl)| Request {
                    time_us,
                    key,
                    key_size,
                    value_size,
                    cost,
                    op: [Op::Get, Op::Set, Op::Delete][op as usize],
                    ttl,
                },
            )
    }

    fn tmp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("cachalot-lab-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn csv_round_trip(reqs in proptest::collection::vec(arb_request(), 0..50)) {
            let p = tmp("rt.csv");
            write_all(&p, reqs.clone()).unwrap();
            prop_assert_eq!(read_all(&p).unwrap(), reqs);
        }

        #[test]
        fn bin_round_trip(reqs in proptest::collection::vec(arb_request(), 0..50)) {
            let p = tmp("rt.bin");
            write_all(&p, reqs.clone()).unwrap();
            let len = std::fs::metadata(&p).unwrap().len();
            prop_assert_eq!(len, 8 + 32 * reqs.len() as u64);
            prop_assert_eq!(read_all(&p).unwrap(), reqs);
        }

        #[test]
        fn csv_lines_never_panic(line in "[0-9a-z,. -]{0,60}") {
            let cols = CsvColumns::from_header(CSV_HEADER).unwrap();
            let _ = cols.parse(&line, 2);
        }
    }

    #[test]
    fn binary_is_sniffed_without_extension_and_truncation_is_an_error() {
        let r = Request {
            time_us: 5,
            key: 7,
            key_size: 9,
            value_size: 11,
            cost: 13,
            op: Op::Delete,
            ttl: 17,
        };
        let p = tmp("t.bin");
        write_all(&p, vec![r, r]).unwrap();
        let q = tmp("t.trace");
        std::fs::copy(&p, &q).unwrap();
        assert_eq!(read_all(&q).unwrap(), vec![r, r]);
        let mut bytes = std::fs::read(&p).unwrap();
        bytes.pop();
        std::fs::write(&p, &bytes).unwrap();
        let e = read_all(&p).unwrap_err();
        assert!(format!("{e}").contains("truncated"), "{e}");
    }

    #[test]
    fn csv_reader_takes_libcachesim_style_and_reordered_columns() {
        let p = tmp("other.csv");
        std::fs::write(
            &p,
            "op,key,time,size\nGETS,3,10,100\nadd,4,11,50\n\nDELETE,3,12,0\n",
        )
        .unwrap();
        let v = read_all(&p).unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(
            (v[0].op, v[0].key, v[0].time_us, v[0].value_size),
            (Op::Get, 3, 10, 100)
        );
        assert_eq!(v[1].op, Op::Set);
        assert_eq!(v[2].op, Op::Delete);
        assert_eq!(v[0].key_size, DEFAULT_KEY_SIZE);
        assert_eq!(v[0].cost, 1);
        let bad = tmp("bad.csv");
        std::fs::write(
            &bad,
            "time,key,size,cost,op,ttl\n1,2,3,4,get,0\n1,2,x,4,get,0\n",
        )
        .unwrap();
        let e = read_all(&bad).unwrap_err();
        assert!(format!("{e}").contains("line 3"), "{e}");
        let nokey = tmp("nokey.csv");
        std::fs::write(&nokey, "time,size\n1,2\n").unwrap();
        assert!(read_all(&nokey).is_err());
    }

    #[test]
    fn csv_header_is_what_libcachesim_is_told() {
        // time-col=1, obj-id-col=2, obj-size-col=3 (1-based), header row.
        let cols: Vec<&str> = CSV_HEADER.split(',').collect();
        assert_eq!(&cols[..3], &["time", "key", "size"]);
        assert!(LIBCACHESIM_CSV_OPTIONS.contains("time-col=1,obj-id-col=2,obj-size-col=3"));
        assert!(LIBCACHESIM_CSV_OPTIONS.contains("has-header=true"));
    }

    #[test]
    fn oracle_general_records_are_look_aside_gets() {
        let mut bytes = Vec::new();
        for (t, id, size, next) in [(0u32, 7u64, 116u32, 3i64), (1, 9, 10, -1), (2, 7, 116, -1)] {
            bytes.extend_from_slice(&t.to_le_bytes());
            bytes.extend_from_slice(&id.to_le_bytes());
            bytes.extend_from_slice(&size.to_le_bytes());
            bytes.extend_from_slice(&next.to_le_bytes());
        }
        for name in ["c.oracleGeneral", "c.oracleGeneral.bin", "C.ORACLEGENERAL"] {
            let p = tmp(name);
            std::fs::write(&p, &bytes).unwrap();
            let v = read_all(&p).unwrap();
            let got: Vec<(u64, u64, u16, u32, Op)> = v
                .iter()
                .map(|r| (r.time_us, r.key, r.key_size, r.value_size, r.op))
                .collect();
            assert_eq!(
                got,
                vec![
                    (0, 7, 16, 100, Op::Get),
                    (1_000_000, 9, 16, 0, Op::Get),
                    (2_000_000, 7, 16, 100, Op::Get)
                ],
                "{name}"
            );
        }
        let p = tmp("cut.oracleGeneral");
        std::fs::write(&p, &bytes[..30]).unwrap();
        let e = read_all(&p).unwrap_err();
        assert!(format!("{e}").contains("truncated"), "{e}");
        assert!(Writer::create(&tmp("w.oracleGeneral")).is_err());
    }

    #[test]
    fn csv_keys_that_are_not_numbers_are_hashed() {
        let p = tmp("plain.csv");
        std::fs::write(
            &p,
            "time,key,size,cost,op,ttl,key_size\n1,user:1,5,1,get,0,6\n2,a%2Cb,5,1,get,0,20\n3,42,5,1,get,0,4\n",
        )
        .unwrap();
        let v = read_all(&p).unwrap();
        let h = cachalot_engine::hash::hash;
        assert_eq!((v[0].key, v[0].key_size), (h(b"user:1"), 16));
        assert_eq!((v[1].key, v[1].key_size), (h(b"a,b"), 20));
        // A number stays an id.
        assert_eq!((v[2].key, v[2].key_size), (42, 4));
        assert_eq!(key_id("50%"), h(b"50%"));
        assert_eq!(key_id("%zz%4"), h(b"%zz%4"));
    }
}
