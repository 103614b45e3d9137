//! Trace capture (issue 36, `-o trace_file=PATH`): a sampled record of the
//! requests this server sees, in libCacheSim's oracleGeneral format or the
//! lab's CSV, so an operator can replay their own workload in the lab and in
//! libCacheSim.
//!
//! The request side (`Capture::fetched`, `stored`, `deleted`, called from
//! `watch`) appends a fixed-layout event to a buffer of its worker thread: no
//! lock, no allocation, no I/O. A full buffer, and what a worker has held
//! [`HOLD`] at the end of a round of its event loop ([`Capture::tick`]),
//! goes to the writer thread through a bounded channel; when the writer is
//! behind, the batch is dropped and its events counted (`trace_dropped`).
//!
//! Sampling is spatial, as in SHARDS (Waldspurger et al., FAST'15): a key is
//! recorded when its 64-bit hash (the engine's xxh3) is below R x 2^64, so a
//! sampled key has every one of its requests recorded and reuse is kept; a
//! trace sampled at R replays at R times the memory.
//!
//! What a record is (the look-aside view): a GET-like request (get, gets,
//! gat, gats, mg, binary get/gat) is a record. A SET that follows a GET miss
//! of its key is that miss's fill: it gives the miss its size (and, in CSV,
//! its TTL, and its cost: the client's, else the microseconds from the miss
//! to the fill) and is no record of its own. Any other SET is an update: a
//! `set` record in CSV, and in oracleGeneral, which has no operations, an
//! access like a GET's (libCacheSim inserts the object on a miss, as the
//! live SET did: the cache's contents follow the live ones, at the price
//! of counting updates among the requests). DELETEs are `delete` records in
//! CSV and left out of oracleGeneral. A miss no SET fills takes the size
//! its key's last SET gave (0 if none). The writer holds records back until
//! their miss is filled, at most [`WINDOW`] records.
//!
//! oracleGeneral records are 24 bytes, little-endian and packed: u32
//! clock_time (seconds since the capture started), u64 obj_id (the key's
//! hash), u32 obj_size (key length plus value length, as libCacheSim's
//! Twitter readers count an object), i64 next_access_vtime: the 1-based
//! position of the next record of the same object (libCacheSim's traceConv
//! convention), -1 when there is none. It is filled when the capture ends
//! (`trace_max` reached, or at shutdown), by a backward pass over the file
//! on the writer thread.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// The file's form (`-o trace_format=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// libCacheSim's oracleGeneral binary records.
    Oracle,
    /// The lab's trace CSV (`time,key,size,cost,op,ttl,key_size`).
    Csv,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Oracle => "oracle",
            Format::Csv => "csv",
        }
    }
}

/// What a record names its key by (`-o trace_keys=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keys {
    /// The key's 64-bit hash: the default, so no key leaves the server.
    Hashed,
    /// The key itself (CSV only), its bytes outside `!`..`~`, `,` and `%`
    /// written as `%XX`.
    Plain,
}

impl Keys {
    pub fn name(self) -> &'static str {
        match self {
            Keys::Hashed => "hashed",
            Keys::Plain => "plain",
        }
    }
}

/// `-o trace_file=PATH,trace_sample=R,trace_max=BYTES,trace_format=,trace_keys=`.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceConfig {
    pub path: PathBuf,
    /// The share of keys recorded, 0 < R <= 1.
    pub sample: f64,
    /// The file's bound in bytes: capture stops before it would pass it.
    pub max_bytes: u64,
    pub format: Format,
    pub keys: Keys,
}

/// `trace_max`'s default: 1 GB (44 M oracleGeneral records).
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

impl TraceConfig {
    /// Capture to `path`, every key, up to the default bound; CSV when the
    /// name ends in `.csv`, else oracleGeneral.
    pub fn new(path: PathBuf) -> TraceConfig {
        let csv = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
        TraceConfig {
            path,
            sample: 1.0,
            max_bytes: DEFAULT_MAX_BYTES,
            format: if csv { Format::Csv } else { Format::Oracle },
            keys: Keys::Hashed,
        }
    }
}

/// Bytes of one oracleGeneral record.
pub const ORACLE_RECORD: usize = 24;
/// Records the writer holds back waiting for a miss's fill, at most.
pub const WINDOW: usize = 1 << 17;
/// A worker's batch, in bytes of events.
const BATCH_BYTES: usize = 64 * 1024;
/// How long a worker keeps events that do not fill a batch before handing
/// them over: a batch per round of a busy loop would be a few events each,
/// and the channel's bound would then hold few events.
pub const HOLD: Duration = Duration::from_millis(5);
/// Batches in flight between the workers and the writer: at most 16 MB,
/// about 1.3 s of events at 400,000 requests a second in batches of HOLD.
const CHANNEL_BATCHES: usize = 256;
/// An event's fixed part: time u64, id u64, size u32, ttl u32, cost u32,
/// kind u8, key length u8.
const EVENT_HEAD: usize = 30;
/// The largest event: a 250-byte key after the head.
const EVENT_MAX: usize = EVENT_HEAD + 255;

const HIT: u8 = 0;
const MISS: u8 = 1;
const SET: u8 = 2;
const APPEND: u8 = 3;
const DELETE: u8 = 4;

/// `trace_state`: where the capture is.
const STATE_ON: u8 = 0;
const STATE_FULL: u8 = 1;
const STATE_FINISHED: u8 = 2;
const STATE_FAILED: u8 = 3;

/// The capture's counters (`stats trace`).
#[derive(Debug, Default)]
pub struct Counters {
    /// Sampled requests the workers recorded.
    pub events: AtomicU64,
    /// Events lost because the writer was behind (its channel full).
    pub dropped: AtomicU64,
    /// Records in the file.
    pub records: AtomicU64,
    /// Bytes in the file.
    pub bytes: AtomicU64,
    /// SETs taken as the fill of the miss before them.
    pub fills: AtomicU64,
}

/// One worker's events on their way to the writer.
struct Batch {
    buf: Vec<u8>,
    events: u64,
    /// When a round of the worker's loop first found events held.
    since: Option<Instant>,
}

thread_local! {
    /// This thread's events not yet handed to the writer: per thread, so
    /// recording one takes no lock.
    static LOCAL: RefCell<Batch> = const {
        RefCell::new(Batch { buf: Vec::new(), events: 0, since: None })
    };
}

/// A running capture: what the request path needs, and the counters.
#[derive(Debug)]
pub struct Capture {
    pub config: TraceConfig,
    /// Off once the bound is reached, the file failed, or at shutdown.
    on: AtomicBool,
    /// Keys whose hash is below this are sampled (with `all`, every key).
    threshold: u64,
    all: bool,
    plain: bool,
    started: Instant,
    tx: SyncSender<Batch>,
    /// Emptied batch buffers coming back from the writer, so workers
    /// allocate none once a few are in circulation.
    spare: Mutex<Vec<Vec<u8>>>,
    /// Set after the workers have stopped: the writer drains and finishes.
    closing: AtomicBool,
    state: AtomicU8,
    pub counters: Counters,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Batch({} events)", self.events)
    }
}

/// Whether a key of hash `h` is in a sample of share `sample`: below the
/// threshold (u64::MAX and `all` for the whole population).
pub fn threshold(sample: f64) -> (u64, bool) {
    if sample >= 1.0 {
        (u64::MAX, true)
    } else {
        // Saturating float-to-int conversion: 0.5 -> 2^63.
        ((sample * 18_446_744_073_709_551_616.0) as u64, false)
    }
}

impl Capture {
    /// Open (create or truncate) the file and start the writer thread.
    pub fn start(
        config: TraceConfig,
    ) -> std::io::Result<(Arc<Capture>, std::thread::JoinHandle<()>)> {
        // Read too: the next-access pass reads the records back.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&config.path)?;
        let (tx, rx) = std::sync::mpsc::sync_channel(CHANNEL_BATCHES);
        let (threshold, all) = threshold(config.sample);
        let cap = Arc::new(Capture {
            plain: config.keys == Keys::Plain,
            config,
            on: AtomicBool::new(true),
            threshold,
            all,
            started: Instant::now(),
            tx,
            spare: Mutex::new(Vec::new()),
            closing: AtomicBool::new(false),
            state: AtomicU8::new(STATE_ON),
            counters: Counters::default(),
        });
        let out = file.try_clone()?;
        let writer = Writer::new(cap.clone(), file, out);
        let handle = std::thread::Builder::new()
            .name("trace-writer".into())
            .spawn(move || writer.run(rx))?;
        Ok((cap, handle))
    }

    /// `trace_state`: on, full (the bound was reached), finished, failed.
    pub fn state(&self) -> &'static str {
        match self.state.load(Ordering::Relaxed) {
            STATE_ON => "on",
            STATE_FULL => "full",
            STATE_FINISHED => "finished",
            _ => "failed",
        }
    }

    /// A GET-like request for `key` (of engine hash `h`); `found` is the
    /// value's length on a hit.
    #[inline]
    pub fn fetched(&self, h: u64, key: &[u8], found: Option<usize>) {
        match found {
            Some(len) => self.record(HIT, h, key, len, 0, 0),
            None => self.record(MISS, h, key, 0, 0, 0),
        }
    }

    /// A store of `len` bytes that took (`append`: added to the value),
    /// expiring in `ttl` seconds (0: never), with the client's `cost` (0:
    /// none given).
    #[inline]
    pub fn stored(&self, h: u64, key: &[u8], len: usize, append: bool, ttl: u32, cost: u32) {
        self.record(if append { APPEND } else { SET }, h, key, len, ttl, cost);
    }

    /// A delete that removed `key`.
    #[inline]
    pub fn deleted(&self, h: u64, key: &[u8]) {
        self.record(DELETE, h, key, 0, 0, 0);
    }

    /// An event for the key of hash `id` (the engine's, which the obj_id
    /// of a hashed trace is).
    #[inline]
    fn record(&self, kind: u8, id: u64, key: &[u8], size: usize, ttl: u32, cost: u32) {
        if !self.on.load(Ordering::Relaxed) {
            return;
        }
        if !self.all && id >= self.threshold {
            return;
        }
        let time = self.started.elapsed().as_micros() as u64;
        // memcached keys are at most 250 bytes; the length always goes
        // (obj_size counts it), the bytes only when the keys are plain.
        let key_len = key.len().min(255);
        let bytes = if self.plain { &key[..key_len] } else { &[][..] };
        LOCAL.with(|b| {
            let mut b = b.borrow_mut();
            if b.buf.capacity() - b.buf.len() < EVENT_HEAD + bytes.len() {
                self.hand_over(&mut b);
            }
            let buf = &mut b.buf;
            buf.extend_from_slice(&time.to_le_bytes());
            buf.extend_from_slice(&id.to_le_bytes());
            buf.extend_from_slice(&(size.min(u32::MAX as usize) as u32).to_le_bytes());
            buf.extend_from_slice(&ttl.to_le_bytes());
            buf.extend_from_slice(&cost.to_le_bytes());
            buf.push(kind);
            buf.push(key_len as u8);
            buf.extend_from_slice(bytes);
            b.events += 1;
        });
    }

    /// Send this thread's batch to the writer (dropping it, counted, when
    /// the writer is behind) and give the thread an empty buffer.
    fn hand_over(&self, b: &mut Batch) {
        let fresh = self
            .spare
            .lock()
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(BATCH_BYTES));
        let full = Batch {
            buf: std::mem::replace(&mut b.buf, fresh),
            events: std::mem::take(&mut b.events),
            since: b.since.take(),
        };
        if full.events == 0 {
            self.recycle(full.buf);
            return;
        }
        self.counters
            .events
            .fetch_add(full.events, Ordering::Relaxed);
        match self.tx.try_send(full) {
            Ok(()) => {}
            Err(TrySendError::Full(f)) | Err(TrySendError::Disconnected(f)) => {
                self.counters.dropped.fetch_add(f.events, Ordering::Relaxed);
                self.recycle(f.buf);
            }
        }
    }

    /// Keep an emptied buffer for a worker (a bounded number of them).
    fn recycle(&self, mut buf: Vec<u8>) {
        // A thread's first buffer has no room: it is not worth keeping.
        if buf.capacity() < EVENT_MAX {
            return;
        }
        buf.clear();
        let mut spare = self.spare.lock();
        if spare.len() < 2 * CHANNEL_BATCHES {
            spare.push(buf);
        }
    }

    /// The end of a round of a worker's loop: hand this thread's events
    /// over once they have waited [`HOLD`]. Whether some are still held
    /// (the worker then wakes within `HOLD` to hand them over).
    pub fn tick(&self) -> bool {
        LOCAL.with(|b| {
            let mut b = b.borrow_mut();
            if b.events == 0 {
                return false;
            }
            let now = Instant::now();
            match b.since {
                None => b.since = Some(now),
                Some(t) if now.duration_since(t) >= HOLD => self.hand_over(&mut b),
                Some(_) => {}
            }
            b.events > 0
        })
    }

    /// Hand this thread's events to the writer now (a worker that exits).
    pub fn flush_local(&self) {
        LOCAL.with(|b| {
            let mut b = b.borrow_mut();
            if b.events > 0 {
                self.hand_over(&mut b);
            }
        });
    }

    /// The workers have stopped: the writer writes what it holds, fills
    /// in the next accesses and exits (join its thread to wait for it).
    pub fn close(&self) {
        self.closing.store(true, Ordering::Release);
    }
}

/// One oracleGeneral record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OracleRecord {
    pub clock_time: u32,
    pub obj_id: u64,
    pub obj_size: u32,
    pub next_access_vtime: i64,
}

impl OracleRecord {
    pub fn encode(&self) -> [u8; ORACLE_RECORD] {
        let mut b = [0u8; ORACLE_RECORD];
        b[0..4].copy_from_slice(&self.clock_time.to_le_bytes());
        b[4..12].copy_from_slice(&self.obj_id.to_le_bytes());
        b[12..16].copy_from_slice(&self.obj_size.to_le_bytes());
        b[16..24].copy_from_slice(&self.next_access_vtime.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; ORACLE_RECORD]) -> OracleRecord {
        let mut u32b = [0u8; 4];
        let mut u64b = [0u8; 8];
        u32b.copy_from_slice(&b[0..4]);
        let clock_time = u32::from_le_bytes(u32b);
        u64b.copy_from_slice(&b[4..12]);
        let obj_id = u64::from_le_bytes(u64b);
        u32b.copy_from_slice(&b[12..16]);
        let obj_size = u32::from_le_bytes(u32b);
        u64b.copy_from_slice(&b[16..24]);
        OracleRecord {
            clock_time,
            obj_id,
            obj_size,
            next_access_vtime: i64::from_le_bytes(u64b),
        }
    }
}

/// Hashes an object id, itself a hash, with one multiplication: SipHash
/// would be most of the writer's work per record. The multiplication
/// spreads the high bits a sample leaves at zero.
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A map keyed by object id.
type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// Records the next-access pass reads and writes back at a time.
const PASS_CHUNK: usize = 16 * 1024;

/// Fill every record's `next_access_vtime` in an oracleGeneral file of
/// `records` records: one backward pass, a chunk at a time, remembering
/// each object's nearest later position (1-based; -1 for none).
pub fn fill_next_access(file: &File, records: u64) -> std::io::Result<()> {
    let mut next: IdMap<u64> = IdMap::default();
    let mut buf = vec![0u8; PASS_CHUNK * ORACLE_RECORD];
    let mut end = records;
    while end > 0 {
        let start = end.saturating_sub(PASS_CHUNK as u64);
        let n = (end - start) as usize;
        let chunk = &mut buf[..n * ORACLE_RECORD];
        file.read_exact_at(chunk, start * ORACLE_RECORD as u64)?;
        for i in (0..n).rev() {
            let at = i * ORACLE_RECORD;
            let mut id = [0u8; 8];
            id.copy_from_slice(&chunk[at + 4..at + 12]);
            let position = start + i as u64 + 1;
            let vtime = match next.insert(u64::from_le_bytes(id), position) {
                Some(p) => p as i64,
                None => -1,
            };
            chunk[at + 16..at + 24].copy_from_slice(&vtime.to_le_bytes());
        }
        file.write_all_at(chunk, start * ORACLE_RECORD as u64)?;
        end = start;
    }
    Ok(())
}

/// `key` for a CSV `key` column: bytes outside `!`..`~`, and `,` and `%`,
/// as `%XX` (so a binary-protocol key with a comma or a newline cannot
/// break the line, and distinct keys stay distinct).
pub fn csv_key(key: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &c in key {
        if (b'!'..=b'~').contains(&c) && c != b',' && c != b'%' {
            out.push(c);
        } else {
            out.extend_from_slice(&[b'%', HEX[(c >> 4) as usize], HEX[(c & 15) as usize]]);
        }
    }
}

/// The lab renders a 64-bit id in 16 hex digits: a shorter key size would
/// make distinct ids collide there (`cachalot_lab::trace::key_bytes`).
pub const MIN_CSV_KEY_SIZE: usize = 16;

/// The CSV header the lab reads (`cachalot_lab::trace::CSV_HEADER`).
pub const CSV_HEADER: &str = "time,key,size,cost,op,ttl,key_size";

const NONE: u64 = u64::MAX;

/// A record the writer holds until it is due.
struct Held {
    time_us: u64,
    id: u64,
    /// Value bytes.
    size: u32,
    ttl: u32,
    cost: u32,
    /// get, set or delete, as the CSV's `op`.
    op: &'static str,
    key_len: u8,
    /// The key's bytes, when plain.
    key: Box<[u8]>,
    /// A miss whose fill has not come: its size is not known yet.
    waiting: bool,
    /// The earlier unfilled miss of the same key (concurrent misses share
    /// one fill), or NONE.
    prev: u64,
}

/// The writer thread's state.
struct Writer {
    cap: Arc<Capture>,
    file: File,
    out: BufWriter<File>,
    held: VecDeque<Held>,
    /// The sequence number of `held[0]`.
    base: u64,
    /// Each key's latest unfilled miss (sequence number).
    waiting: IdMap<u64>,
    /// Each key's last known value size: the last SET's (a hit's size is
    /// the SET's that stored it, and no map is touched for hits).
    sizes: IdMap<u32>,
    last_time: u64,
    /// Written so far: records and bytes.
    records: u64,
    bytes: u64,
    /// The bound was reached or a write failed: nothing more is written.
    stopped: bool,
    line: Vec<u8>,
}

impl Writer {
    /// `file` is read and written back by the next-access pass; `out`, a
    /// second handle of the same open file, takes the records through a
    /// buffer.
    fn new(cap: Arc<Capture>, file: File, out: File) -> Writer {
        let mut w = Writer {
            cap,
            file,
            out: BufWriter::with_capacity(1 << 20, out),
            held: VecDeque::new(),
            base: 0,
            waiting: IdMap::default(),
            sizes: IdMap::default(),
            last_time: 0,
            records: 0,
            bytes: 0,
            stopped: false,
            line: Vec::with_capacity(512),
        };
        if w.cap.config.format == Format::Csv {
            let header = format!("{CSV_HEADER}\n");
            w.emit_bytes(header.as_bytes(), false);
        }
        w
    }

    fn run(mut self, rx: Receiver<Batch>) {
        loop {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(batch) => self.take(batch),
                Err(RecvTimeoutError::Timeout) => {
                    if self.cap.closing.load(Ordering::Acquire) {
                        break;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        // The workers have handed over their last events.
        while let Ok(batch) = rx.try_recv() {
            self.take(batch);
        }
        self.cap.on.store(false, Ordering::Relaxed);
        self.finish(STATE_FINISHED);
    }

    fn take(&mut self, batch: Batch) {
        if !self.stopped {
            let mut at = 0;
            let buf = &batch.buf;
            while at + EVENT_HEAD <= buf.len() {
                let u64_at = |i: usize| {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(&buf[i..i + 8]);
                    u64::from_le_bytes(a)
                };
                let u32_at = |i: usize| {
                    let mut a = [0u8; 4];
                    a.copy_from_slice(&buf[i..i + 4]);
                    u32::from_le_bytes(a)
                };
                let kind = buf[at + 28];
                let key_len = buf[at + 29];
                let key_end = at + EVENT_HEAD + if self.cap.plain { key_len as usize } else { 0 };
                let key = buf.get(at + EVENT_HEAD..key_end).unwrap_or(&[]);
                self.event(
                    u64_at(at),
                    u64_at(at + 8),
                    u32_at(at + 16),
                    u32_at(at + 20),
                    u32_at(at + 24),
                    kind,
                    key_len,
                    key,
                );
                at = key_end;
            }
        }
        self.cap.recycle(batch.buf);
        self.publish();
    }

    #[allow(clippy::too_many_arguments)]
    fn event(
        &mut self,
        time_us: u64,
        id: u64,
        size: u32,
        ttl: u32,
        cost: u32,
        kind: u8,
        key_len: u8,
        key: &[u8],
    ) {
        // Workers hand their batches over in their own time: the file's
        // clock never goes back.
        let time_us = time_us.max(self.last_time);
        self.last_time = time_us;
        let csv = self.cap.config.format == Format::Csv;
        let held = |op, size, ttl, cost, waiting, prev| Held {
            time_us,
            id,
            size,
            ttl,
            cost,
            op,
            key_len,
            key: key.into(),
            waiting,
            prev,
        };
        match kind {
            // No map is touched for a hit (most records): a random access
            // to a map of every key was most of the writer's time.
            HIT => self.held.push_back(held("get", size, 0, 1, false, NONE)),
            MISS => {
                let seq = self.base + self.held.len() as u64;
                let prev = self.waiting.insert(id, seq).unwrap_or(NONE);
                self.held.push_back(held("get", 0, 0, 1, true, prev));
            }
            SET | APPEND => {
                let size = match (kind, self.sizes.get(&id)) {
                    (APPEND, Some(&old)) => old.saturating_add(size),
                    _ => size,
                };
                self.sizes.insert(id, size);
                let mut filled = false;
                let mut seq = self.waiting.remove(&id).unwrap_or(NONE);
                while seq != NONE && seq >= self.base {
                    let Some(h) = self.held.get_mut((seq - self.base) as usize) else {
                        break;
                    };
                    h.size = size;
                    h.ttl = ttl;
                    // The client's cost, else the time the fill took.
                    h.cost = if cost > 0 {
                        cost
                    } else {
                        (time_us - h.time_us).clamp(1, u32::MAX as u64) as u32
                    };
                    h.waiting = false;
                    seq = h.prev;
                    filled = true;
                }
                if filled {
                    self.cap.counters.fills.fetch_add(1, Ordering::Relaxed);
                } else {
                    self.held
                        .push_back(held("set", size, ttl, cost.max(1), false, NONE));
                }
            }
            DELETE if csv => self.held.push_back(held("delete", 0, 0, 1, false, NONE)),
            _ => {}
        }
        self.release(false);
    }

    /// Write the held records that are due: filled ones at the front, and
    /// the oldest whenever more than WINDOW wait (`all`: every one).
    fn release(&mut self, all: bool) {
        while let Some(front) = self.held.front() {
            if front.waiting && !all && self.held.len() <= WINDOW {
                break;
            }
            let Some(mut h) = self.held.pop_front() else {
                break;
            };
            let seq = self.base;
            self.base += 1;
            if h.waiting {
                // Never filled: the key's last known size.
                h.size = self.sizes.get(&h.id).copied().unwrap_or(0);
                if self.waiting.get(&h.id) == Some(&seq) {
                    self.waiting.remove(&h.id);
                }
            }
            if !self.stopped {
                self.write(&h);
            }
        }
    }

    fn write(&mut self, h: &Held) {
        match self.cap.config.format {
            Format::Oracle => {
                let r = OracleRecord {
                    clock_time: (h.time_us / 1_000_000).min(u32::MAX as u64) as u32,
                    obj_id: h.id,
                    obj_size: (h.key_len as u32).saturating_add(h.size),
                    next_access_vtime: -1,
                };
                self.emit_bytes(&r.encode(), true);
            }
            Format::Csv => {
                // itoa: formatting is most of a CSV record's cost.
                let mut line = std::mem::take(&mut self.line);
                let mut n = itoa::Buffer::new();
                line.clear();
                line.extend_from_slice(n.format(h.time_us).as_bytes());
                line.push(b',');
                if self.cap.plain {
                    csv_key(&h.key, &mut line);
                } else {
                    line.extend_from_slice(n.format(h.id).as_bytes());
                }
                let key_size = (h.key_len as u32).max(MIN_CSV_KEY_SIZE as u32);
                line.push(b',');
                line.extend_from_slice(n.format(h.size).as_bytes());
                line.push(b',');
                line.extend_from_slice(n.format(h.cost).as_bytes());
                line.push(b',');
                line.extend_from_slice(h.op.as_bytes());
                line.push(b',');
                line.extend_from_slice(n.format(h.ttl).as_bytes());
                line.push(b',');
                line.extend_from_slice(n.format(key_size).as_bytes());
                line.push(b'\n');
                self.emit_bytes(&line, true);
                self.line = line;
            }
        }
    }

    /// Append `bytes` to the file unless that would pass the bound, which
    /// ends the capture.
    fn emit_bytes(&mut self, bytes: &[u8], record: bool) {
        if self.bytes + bytes.len() as u64 > self.cap.config.max_bytes {
            self.stopped = true;
            self.cap.on.store(false, Ordering::Relaxed);
            self.finish(STATE_FULL);
            return;
        }
        if let Err(e) = self.out.write_all(bytes) {
            self.fail(&e);
            return;
        }
        self.bytes += bytes.len() as u64;
        self.records += u64::from(record);
    }

    /// Publish the file's figures (`stats trace`): once a batch.
    fn publish(&self) {
        let n = &self.cap.counters;
        n.bytes.store(self.bytes, Ordering::Relaxed);
        n.records.store(self.records, Ordering::Relaxed);
    }

    fn fail(&mut self, e: &std::io::Error) {
        eprintln!(
            "trace capture: writing {} failed: {e}; capture stopped",
            self.cap.config.path.display()
        );
        self.stopped = true;
        self.cap.on.store(false, Ordering::Relaxed);
        self.cap.state.store(STATE_FAILED, Ordering::Relaxed);
    }

    /// End the capture: write what is held (unless the bound stopped it),
    /// flush, and for oracleGeneral fill in the next accesses. `state` is
    /// what it ends in (full or finished), unless it already failed or
    /// ended.
    fn finish(&mut self, state: u8) {
        if self.cap.state.load(Ordering::Relaxed) != STATE_ON {
            return;
        }
        if !self.stopped {
            self.release(true);
            // Reaching the bound there has ended it already.
            if self.cap.state.load(Ordering::Relaxed) != STATE_ON {
                return;
            }
        }
        self.stopped = true;
        let done = self.out.flush().and_then(|()| {
            if self.cap.config.format == Format::Oracle {
                fill_next_access(&self.file, self.records)
            } else {
                Ok(())
            }
        });
        self.publish();
        match done {
            Ok(()) => self.cap.state.store(state, Ordering::Relaxed),
            Err(e) => self.fail(&e),
        }
        self.held.clear();
        self.waiting = IdMap::default();
        self.sizes = IdMap::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cachalot_engine::hash::hash as h;

    fn tmp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("cachalot-capture-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    #[test]
    fn oracle_records_are_24_packed_little_endian_bytes() {
        let r = OracleRecord {
            clock_time: 0x0403_0201,
            obj_id: 0x0c0b_0a09_0807_0605,
            obj_size: 0x100f_0e0d,
            next_access_vtime: -1,
        };
        let b = r.encode();
        let want: Vec<u8> = (1..=16).chain([0xff; 8]).collect();
        assert_eq!(b.to_vec(), want);
        assert_eq!(OracleRecord::decode(&b), r);
    }

    /// The next position (1-based) of each record's object, by looking.
    fn reference(ids: &[u64]) -> Vec<i64> {
        (0..ids.len())
            .map(|i| {
                ids[i + 1..]
                    .iter()
                    .position(|&x| x == ids[i])
                    .map_or(-1, |d| (i + 1 + d + 1) as i64)
            })
            .collect()
    }

    #[test]
    fn next_access_pass_matches_a_scan_across_chunks() {
        // More records than one chunk of the pass, few enough objects that
        // most reuse crosses a chunk's edge.
        let mut rng = fastrand::Rng::with_seed(7);
        for n in [0usize, 1, 5, PASS_CHUNK, 2 * PASS_CHUNK + 123] {
            let ids: Vec<u64> = (0..n).map(|_| rng.u64(0..(n as u64 / 3 + 2))).collect();
            let p = tmp(&format!("pass-{n}"));
            let mut bytes = Vec::new();
            for (i, &id) in ids.iter().enumerate() {
                let r = OracleRecord {
                    clock_time: i as u32,
                    obj_id: id,
                    obj_size: 7,
                    next_access_vtime: 0,
                };
                bytes.extend_from_slice(&r.encode());
            }
            std::fs::write(&p, &bytes).unwrap();
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&p)
                .unwrap();
            fill_next_access(&f, n as u64).unwrap();
            let out = std::fs::read(&p).unwrap();
            let got: Vec<i64> = out
                .chunks_exact(ORACLE_RECORD)
                .map(|c| OracleRecord::decode(c.try_into().unwrap()).next_access_vtime)
                .collect();
            assert_eq!(got, reference(&ids), "{n} records");
            // Nothing else changed.
            for (i, c) in out.chunks_exact(ORACLE_RECORD).enumerate() {
                let r = OracleRecord::decode(c.try_into().unwrap());
                assert_eq!((r.clock_time, r.obj_id, r.obj_size), (i as u32, ids[i], 7));
            }
        }
    }

    #[test]
    fn the_sample_threshold_takes_its_share_of_hashes() {
        assert_eq!(threshold(1.0), (u64::MAX, true));
        assert_eq!(threshold(0.5), (1 << 63, false));
        let (t, _) = threshold(0.1);
        let taken = (0..100_000u32)
            .filter(|i| cachalot_engine::hash::hash(format!("key:{i}").as_bytes()) < t)
            .count();
        assert!((9_500..10_500).contains(&taken), "{taken} of 100000");
    }

    #[test]
    fn plain_csv_keys_escape_what_would_break_a_line() {
        let mut out = Vec::new();
        csv_key(b"user:42", &mut out);
        csv_key(b"a,b%c d\n\xff", &mut out);
        assert_eq!(out, b"user:42a%2Cb%25c%20d%0A%FF");
    }

    /// Run `f` against a capture of `config`, end it, and return the file.
    fn capture(config: TraceConfig, f: impl FnOnce(&Capture)) -> (Vec<u8>, Arc<Capture>) {
        let (cap, writer) = Capture::start(config.clone()).unwrap();
        f(&cap);
        cap.flush_local();
        cap.close();
        writer.join().unwrap();
        (std::fs::read(&config.path).unwrap(), cap)
    }

    fn oracle(bytes: &[u8]) -> Vec<OracleRecord> {
        assert_eq!(bytes.len() % ORACLE_RECORD, 0);
        bytes
            .chunks_exact(ORACLE_RECORD)
            .map(|c| OracleRecord::decode(c.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn fills_give_their_miss_its_size_and_updates_are_accesses() {
        let h = cachalot_engine::hash::hash;
        let (bytes, cap) = capture(TraceConfig::new(tmp("looks.oracleGeneral")), |c| {
            c.fetched(h(b"a"), b"a", None); // miss, filled by the next set: 1 + 5
            c.stored(h(b"a"), b"a", 5, false, 0, 0);
            c.fetched(h(b"a"), b"a", Some(5));
            c.fetched(h(b"bb"), b"bb", None); // never filled, nothing known: 2 + 0
            c.stored(h(b"a"), b"a", 3, false, 0, 0); // an update: an access, 1 + 3
            c.stored(h(b"a"), b"a", 4, true, 0, 0); // appended: 1 + 3 + 4
            c.fetched(h(b"a"), b"a", Some(7));
            c.deleted(h(b"a"), b"a"); // no record in oracleGeneral
            c.fetched(h(b"a"), b"a", None); // the last size known: 1 + 7
        });
        let got: Vec<(u64, u32, i64)> = oracle(&bytes)
            .iter()
            .map(|r| (r.obj_id, r.obj_size, r.next_access_vtime))
            .collect();
        let (a, bb) = (h(b"a"), h(b"bb"));
        assert_eq!(
            got,
            vec![
                (a, 6, 2),
                (a, 6, 4),
                (bb, 2, -1),
                (a, 4, 5),
                (a, 8, 6),
                (a, 8, 7),
                (a, 8, -1)
            ]
        );
        let n = &cap.counters;
        assert_eq!(n.events.load(Ordering::Relaxed), 9);
        assert_eq!(n.fills.load(Ordering::Relaxed), 1);
        assert_eq!(n.records.load(Ordering::Relaxed), 7);
        assert_eq!(n.bytes.load(Ordering::Relaxed), 7 * 24);
        assert_eq!(cap.state(), "finished");
    }

    #[test]
    fn csv_keeps_updates_and_deletes_and_plain_keys() {
        let mut config = TraceConfig::new(tmp("looks.csv"));
        config.keys = Keys::Plain;
        assert_eq!(config.format, Format::Csv);
        let (bytes, _) = capture(config, |c| {
            c.fetched(h(b"k,1"), b"k,1", None);
            c.fetched(h(b"k,1"), b"k,1", None); // a second miss before the one fill
            c.stored(h(b"k,1"), b"k,1", 10, false, 60, 250);
            c.stored(h(b"other"), b"other", 3, false, 0, 0);
            c.deleted(h(b"other"), b"other");
        });
        let text = String::from_utf8(bytes).unwrap();
        let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split(',').collect()).collect();
        assert_eq!(rows[0].join(","), CSV_HEADER);
        // time is left out: it is the clock's.
        let rest: Vec<String> = rows[1..].iter().map(|r| r[1..].join(",")).collect();
        assert_eq!(
            rest,
            vec![
                "k%2C1,10,250,get,60,16",
                "k%2C1,10,250,get,60,16",
                "other,3,1,set,0,16",
                "other,0,1,delete,0,16",
            ]
        );
    }

    #[test]
    fn the_bound_stops_the_capture_with_whole_records() {
        let mut config = TraceConfig::new(tmp("bounded.oracleGeneral"));
        config.max_bytes = 10 * ORACLE_RECORD as u64 + 5;
        let (bytes, cap) = capture(config, |c| {
            for i in 0..100u32 {
                let k = format!("k{}", i % 4);
                c.fetched(h(k.as_bytes()), k.as_bytes(), Some(10));
                // Each round hands its events over, as a worker does.
                c.flush_local();
            }
        });
        let recs = oracle(&bytes);
        assert_eq!(recs.len(), 10);
        assert_eq!(cap.state(), "full");
        // The pass ran on what was written.
        let ids: Vec<u64> = recs.iter().map(|r| r.obj_id).collect();
        let next: Vec<i64> = recs.iter().map(|r| r.next_access_vtime).collect();
        assert_eq!(next, reference(&ids));
    }

    #[test]
    fn a_sampled_capture_keeps_every_request_of_its_keys() {
        let mut config = TraceConfig::new(tmp("sampled.oracleGeneral"));
        config.sample = 0.25;
        let (t, _) = threshold(0.25);
        let keys: Vec<String> = (0..2000).map(|i| format!("key:{i}")).collect();
        let (bytes, _) = capture(config, |c| {
            for round in 0..3 {
                for k in &keys {
                    c.fetched(h(k.as_bytes()), k.as_bytes(), Some(round));
                }
            }
        });
        let want: Vec<u64> = (0..3)
            .flat_map(|_| {
                keys.iter()
                    .map(|k| cachalot_engine::hash::hash(k.as_bytes()))
            })
            .filter(|&h| h < t)
            .collect();
        let got: Vec<u64> = oracle(&bytes).iter().map(|r| r.obj_id).collect();
        assert_eq!(got, want);
        assert!((400..600).contains(&(want.len() / 3)), "{}", want.len() / 3);
    }
}
