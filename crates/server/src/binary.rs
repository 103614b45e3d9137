//! The binary protocol handler: runs decoded binary requests against the
//! engine and writes memcached's binary responses.
//!
//! Behaviour follows memcached 1.6.18's `proto_bin.c`, checked request by
//! request against the real server: which opcode answers what status and
//! text, which responses quiet opcodes suppress (successes, and get misses;
//! errors are always sent), which counters each command bumps, and its
//! quirks: requests that carry no value consume only header + extras + key
//! (extra body bytes are read as the next request), an unknown opcode
//! swallows its whole body length *after* the extras and key, an oversized
//! value is answered at once and then swallowed as it arrives, and a bad
//! magic byte closes the connection, dropping replies memcached had not
//! flushed yet.
//!
//! One deliberate difference in timing, not in bytes: while memcached reads
//! or swallows a value it holds the replies queued before it; here they go
//! out with the next write. The byte stream a client receives is the same.

use std::sync::atomic::AtomicU64;

use cachalot_engine::cache::ops::ArithOrAdd;
use cachalot_engine::engine::{Arith, ArithOutcome, DeleteOutcome, Lookup};
use cachalot_engine::hash::hash;
use cachalot_engine::{Expiry, ItemRef, Store, StoreMode, StoreOutcome};
use cachalot_protocol::binary::{
    c_int_len, parse_frame, write_error, write_response, write_response_header, Command, Header,
    Parsed, Status, StoreKind, ARITH_NO_CREATE, HEADER_LEN, REQ_MAGIC,
};

use crate::handler::{out_full, Ctx, Handler, Step};
use crate::stats::ThreadStats;
use crate::stats_cmd::{self, DetailOp};

/// Opcode of Stat responses (every packet of a stats reply carries it).
const OP_STAT: u8 = 0x10;

/// memcached's out-of-memory texts in the binary protocol (see `error_text`).
const OOM_ALLOCATING_ITEM: &str = "Out of memory allocating item";
const OOM_INCREMENTING: &str = "Out of memory incrementing value";
const OOM_NEW_ITEM: &str = "Out of memory allocating new item";

/// An error status with memcached's usual text for it.
fn fail(status: Status) -> (Status, &'static str) {
    (status, status.text())
}

/// memcached reads request heads into a fixed 16 KB buffer (`READ_BUFFER_SIZE`).
/// A head (header + extras + key) that cannot fit makes its next read return
/// 0 bytes, which it takes for end of stream: the connection is closed
/// without a reply once more than that many bytes are waiting. Keys longer
/// than 250 bytes are refused anyway; this also bounds what we buffer.
const READ_BUFFER_SIZE: usize = 16384;

/// One binary connection's protocol state.
#[derive(Debug, Default)]
pub struct BinaryHandler {
    /// Bytes still to discard: the rest of an oversized value, or the body of
    /// an unknown command (memcached's `conn_swallow` / `sbytes`).
    swallow: u64,
    /// Set by a request whose reply memcached writes out before reading on
    /// (No-op, and errors with nothing to swallow): a later bad magic byte
    /// cannot take those replies back.
    flush_point: bool,
}

/// What one request did to the connection.
enum Flow {
    /// Consumed this many bytes; go on with the next request.
    Next(usize),
    /// The request is not complete yet.
    NeedMore,
    /// Consumed this many bytes; flush and close.
    Close(usize),
    /// Not a request (first byte is not 0x80): close at once.
    BadMagic,
    /// A GET whose item may be on flash: nothing consumed or written; it
    /// runs again once the read is done (`flash::fetch`).
    Parked,
}

/// Request fields every response echoes.
#[derive(Clone, Copy)]
struct Reply {
    opcode: u8,
    opaque: u32,
}

impl Reply {
    /// A success with no body (suppressed when quiet).
    fn ok(self, out: &mut Vec<u8>, cas: u64, quiet: bool) {
        if !quiet {
            write_response(
                out,
                self.opcode,
                Status::NoError,
                self.opaque,
                cas,
                &[],
                &[],
                &[],
            );
        }
    }
}

fn bump(counter: &AtomicU64) {
    ThreadStats::bump(counter);
}

impl BinaryHandler {
    pub fn new() -> BinaryHandler {
        BinaryHandler::default()
    }

    /// Bytes of an oversized value or unknown body still to be discarded.
    pub fn swallowing(&self) -> u64 {
        self.swallow
    }

    /// Write an error reply (errors are never suppressed by quiet opcodes).
    fn error(&mut self, r: Reply, out: &mut Vec<u8>, status: Status) {
        self.error_text(r, out, status, status.text());
    }

    /// An error reply with its own text: memcached's out-of-memory replies
    /// carry the text protocol's message minus "SERVER_ERROR "
    /// (`out_of_memory` in memcached.c), not the generic "Out of memory".
    fn error_text(&mut self, r: Reply, out: &mut Vec<u8>, status: Status, text: &str) {
        write_response(
            out,
            r.opcode,
            status,
            r.opaque,
            0,
            &[],
            &[],
            text.as_bytes(),
        );
        self.flush_point = true;
    }

    /// Handle the request at the front of `input`.
    fn one(&mut self, ctx: &Ctx<'_>, input: &[u8], out: &mut Vec<u8>) -> Flow {
        if let Some(h) = Header::parse(input) {
            let head = HEADER_LEN + h.extras_len as usize + h.key_len as usize;
            if h.magic == REQ_MAGIC && head > READ_BUFFER_SIZE {
                return if input.len() > READ_BUFFER_SIZE {
                    Flow::Close(0)
                } else {
                    Flow::NeedMore
                };
            }
        }
        let frame = match parse_frame(input) {
            Parsed::Incomplete => return Flow::NeedMore,
            Parsed::BadMagic => return Flow::BadMagic,
            Parsed::Frame(f) => f,
        };
        let head = frame.head_len();
        let h = frame.header;
        let r = Reply {
            opcode: h.opcode,
            opaque: h.opaque,
        };
        let cmd = match Command::decode(&frame) {
            Ok(cmd) => cmd,
            Err(e) => {
                self.error(r, out, e.status());
                return Flow::Close(head);
            }
        };
        // With -C items carry no CAS (memcached's ITEM_get_cas is 0): a
        // store's CAS is ignored, and a delete/incr CAS can never match an
        // existing item. u64::MAX is outside the engine's 40-bit CAS range.
        let cas_enabled = ctx.settings.engine.cas_enabled;
        let store_cas = if cas_enabled { h.cas } else { 0 };
        let check_cas = if cas_enabled || h.cas == 0 {
            h.cas
        } else {
            u64::MAX
        };
        match cmd {
            Command::Get {
                key,
                quiet,
                with_key,
            } => {
                if self.get(ctx, r, key, None, quiet, with_key, true, out) {
                    return Flow::Parked;
                }
                Flow::Next(head)
            }
            Command::Gat {
                key,
                exptime,
                quiet,
                with_key,
            } => {
                let _ = self.get(ctx, r, key, Some(exptime), quiet, with_key, true, out);
                Flow::Next(head)
            }
            Command::Touch { key, exptime } => {
                let _ = self.get(ctx, r, key, Some(exptime), false, false, false, out);
                Flow::Next(head)
            }
            Command::Store {
                kind,
                key,
                flags,
                exptime,
                value_len,
                quiet,
            } => {
                let mode = match kind {
                    StoreKind::Set => StoreMode::Set,
                    StoreKind::Add => StoreMode::Add,
                    StoreKind::Replace => StoreMode::Replace,
                };
                self.store(
                    ctx, r, input, head, key, value_len, flags, exptime, store_cas, mode, quiet,
                    out,
                )
            }
            Command::Concat {
                append,
                key,
                value_len,
                quiet,
            } => {
                let mode = if append {
                    StoreMode::Append
                } else {
                    StoreMode::Prepend
                };
                self.store(
                    ctx, r, input, head, key, value_len, 0, 0, store_cas, mode, quiet, out,
                )
            }
            Command::Delete { key, quiet } => {
                stats_cmd::detail_record(ctx, key, DetailOp::Delete);
                let outcome = ctx.cache.delete(key, check_cas);
                match outcome {
                    DeleteOutcome::Deleted => {
                        // Not described: for the trace, not the watchers.
                        crate::watch::deleted(ctx, key, "delete", None);
                        bump(&ctx.stats.delete_hits);
                        r.ok(out, 0, quiet);
                    }
                    DeleteOutcome::NotFound => {
                        bump(&ctx.stats.delete_misses);
                        self.error(r, out, Status::KeyNotFound);
                    }
                    DeleteOutcome::Exists => self.error(r, out, Status::KeyExists),
                }
                Flow::Next(head)
            }
            Command::Arith {
                incr,
                key,
                delta,
                initial,
                exptime,
                quiet,
            } => {
                self.arith(
                    ctx, r, key, incr, delta, initial, exptime, check_cas, quiet, out,
                );
                Flow::Next(head)
            }
            Command::Quit { quiet } => {
                r.ok(out, 0, quiet);
                Flow::Close(head)
            }
            Command::Flush { exptime, quiet } => {
                if !ctx.settings.flush_enabled {
                    // `-F`: memcached answers "Auth failure." and counts nothing.
                    self.error(r, out, Status::AuthError);
                } else {
                    // A delay is a point in time by memcached's exptime rules;
                    // 0 (or no extras) flushes now. An absolute time already
                    // past makes memcached's oldest_live 0, i.e. no flush.
                    match ctx.cache.clock().expiry(exptime as i64) {
                        Expiry::Never => ctx.cache.flush_all(None),
                        Expiry::At(t) => ctx.cache.flush_all(Some(t)),
                        Expiry::Expired => {}
                    }
                    bump(&ctx.stats.cmd_flush);
                    r.ok(out, 0, quiet);
                }
                Flow::Next(head)
            }
            Command::Noop => {
                r.ok(out, 0, false);
                // memcached: "NOOP forces pipeline flush".
                self.flush_point = true;
                Flow::Next(head)
            }
            Command::Version => {
                write_response(
                    out,
                    r.opcode,
                    Status::NoError,
                    r.opaque,
                    0,
                    &[],
                    &[],
                    cachalot_protocol::text::MEMCACHED_COMPAT_VERSION.as_bytes(),
                );
                Flow::Next(head)
            }
            Command::Stat { key } => {
                self.stat(ctx, r, key, out);
                Flow::Next(head)
            }
            Command::Unknown { swallow } => {
                // Written out at once unless there is a body to swallow first.
                self.error(r, out, Status::UnknownCommand);
                self.swallow = swallow;
                Flow::Next(head)
            }
        }
    }

    /// Get / GetK / GAT / GATK (and quiet forms) and Touch. `touch` carries
    /// the new exptime for GAT and Touch; `with_value` is false for Touch,
    /// which answers with the flags only. True if a GET was parked on a
    /// flash read (nothing written or counted).
    #[allow(clippy::too_many_arguments)]
    fn get(
        &mut self,
        ctx: &Ctx<'_>,
        r: Reply,
        key: &[u8],
        touch: Option<u32>,
        quiet: bool,
        with_key: bool,
        with_value: bool,
        out: &mut Vec<u8>,
    ) -> bool {
        let expiry = touch.map(|t| ctx.cache.clock().expiry(t as i64));
        let reply = |item: Option<ItemRef<'_>>| match item {
            Some(it) => {
                let key_out: &[u8] = if with_key { key } else { &[] };
                let value_len = if with_value { it.value.len() } else { 0 };
                write_response_header(
                    out,
                    r.opcode,
                    Status::NoError,
                    r.opaque,
                    it.cas,
                    4,
                    key_out.len() as u16,
                    value_len as u32,
                );
                out.extend_from_slice(&it.flags.to_be_bytes());
                out.extend_from_slice(key_out);
                if with_value {
                    it.value.copy_to(out);
                }
                Some((it.value.len(), it.flags))
            }
            None => None,
        };
        let (found, h) = match expiry {
            Some(e) => (ctx.cache.touch(key, e, reply), None),
            // A GET reads its stripe only (`Cache::get`); on flash, it is
            // parked.
            None => {
                let h = hash(key);
                match ctx.get_or_park(key, h, Lookup::GET, reply) {
                    Some(found) => (found, Some(h)),
                    None => return true,
                }
            }
        };
        let hit = found.is_some();
        crate::watch::fetched(ctx, key, h, found);
        stats_cmd::detail_record(ctx, key, DetailOp::Get { hit });
        let s = ctx.stats;
        if touch.is_some() {
            bump(&s.cmd_touch);
            bump(if hit { &s.touch_hits } else { &s.touch_misses });
        } else {
            bump(&s.cmd_get);
            bump(if hit { &s.get_hits } else { &s.get_misses });
        }
        if !hit && !quiet {
            if with_key {
                // A GetK miss carries the key and no text.
                write_response(
                    out,
                    r.opcode,
                    Status::KeyNotFound,
                    r.opaque,
                    0,
                    &[],
                    key,
                    &[],
                );
            } else {
                self.error(r, out, Status::KeyNotFound);
            }
        }
        false
    }

    /// Set / Add / Replace / Append / Prepend. Refuses an oversized value as
    /// soon as the head is in (and swallows it), otherwise waits for the whole
    /// value before touching the engine.
    #[allow(clippy::too_many_arguments)]
    fn store(
        &mut self,
        ctx: &Ctx<'_>,
        r: Reply,
        input: &[u8],
        head: usize,
        key: &[u8],
        value_len: u32,
        flags: u32,
        exptime: u32,
        cas: u64,
        mode: StoreMode,
        quiet: bool,
        out: &mut Vec<u8>,
    ) -> Flow {
        let value = head
            .checked_add(value_len as usize)
            .and_then(|end| input.get(head..end));
        let Some(value) = value else {
            // Value not all here: decide "too large" now, as memcached's
            // item_alloc does before reading it.
            if ctx.cache.fits(key.len(), value_len as usize, flags) {
                return Flow::NeedMore;
            }
            // (A length of 2 GB or more is negative in memcached's `int`:
            // nothing is swallowed and the value is read as requests.)
            self.too_large(ctx, r, key, mode, c_int_len(value_len), out);
            return Flow::Next(head);
        };
        if !ctx.cache.fits(key.len(), value.len(), flags) {
            self.too_large(ctx, r, key, mode, 0, out);
            return Flow::Next(head + value.len());
        }
        stats_cmd::detail_record(ctx, key, DetailOp::Set);
        let concat = matches!(mode, StoreMode::Append | StoreMode::Prepend);
        // A non-zero CAS makes set/add/replace a plain compare-and-swap
        // (memcached's NREAD_CAS ignores which of the three it was).
        let mode = if cas != 0 && !concat {
            StoreMode::Set
        } else {
            mode
        };
        let req = Store {
            key,
            value,
            flags,
            expiry: ctx.cache.clock().expiry(exptime as i64),
            mode,
            cas,
            new_cas: None,
            cost: None,
            invalidate: false,
        };
        let outcome = ctx.cache.store(&req);
        let cmd = match (mode, cas != 0) {
            (StoreMode::Append, _) => "append",
            (StoreMode::Prepend, _) => "prepend",
            (_, true) => "cas",
            (StoreMode::Add, false) => "add",
            (StoreMode::Replace, false) => "replace",
            (StoreMode::Set, false) => "set",
        };
        crate::watch::stored(ctx, &req, cmd, &outcome);
        let s = ctx.stats;
        bump(&s.cmd_set);
        if cas != 0 && !concat {
            bump(match outcome {
                StoreOutcome::Stored { .. } => &s.cas_hits,
                StoreOutcome::Exists => &s.cas_badval,
                _ => &s.cas_misses,
            });
        }
        match outcome {
            StoreOutcome::Stored { cas } => r.ok(out, cas, quiet),
            StoreOutcome::Exists => self.error(r, out, Status::KeyExists),
            // A CAS append/prepend on a missing key is still just "not stored".
            StoreOutcome::NotFound if concat => self.error(r, out, Status::NotStored),
            StoreOutcome::NotFound => self.error(r, out, Status::KeyNotFound),
            // memcached maps a refused store by command: add -> exists,
            // replace -> not found, append/prepend -> not stored.
            StoreOutcome::NotStored => self.error(
                r,
                out,
                match mode {
                    StoreMode::Add => Status::KeyExists,
                    StoreMode::Replace => Status::KeyNotFound,
                    _ => Status::NotStored,
                },
            ),
            // For append/prepend, memcached only finds out while building
            // the combined item, and reports it as "Not stored.".
            StoreOutcome::TooLarge | StoreOutcome::NoMemory if concat => {
                self.error(r, out, Status::NotStored)
            }
            StoreOutcome::TooLarge => self.error(r, out, Status::TooLarge),
            StoreOutcome::NoMemory => {
                self.error_text(r, out, Status::OutOfMemory, OOM_ALLOCATING_ITEM)
            }
        }
        Flow::Next(head + value.len())
    }

    /// Answer "Too large." and arrange to discard `swallow` value bytes. A
    /// failed set also drops the old item, so a stale value does not outlive
    /// the update (memcached's process_bin_update).
    fn too_large(
        &mut self,
        ctx: &Ctx<'_>,
        r: Reply,
        key: &[u8],
        mode: StoreMode,
        swallow: u64,
        out: &mut Vec<u8>,
    ) {
        stats_cmd::detail_record(ctx, key, DetailOp::Set);
        if mode == StoreMode::Set {
            let _ = ctx.cache.delete(key, 0);
        }
        write_error(out, r.opcode, r.opaque, Status::TooLarge);
        self.swallow = swallow;
    }

    /// Increment / Decrement. memcached creates a missing counter itself (an
    /// `add` of the initial value, counted as neither hit nor miss) unless the
    /// expiration is 0xffffffff.
    #[allow(clippy::too_many_arguments)]
    fn arith(
        &mut self,
        ctx: &Ctx<'_>,
        r: Reply,
        key: &[u8],
        incr: bool,
        delta: u64,
        initial: u64,
        exptime: u32,
        cas: u64,
        quiet: bool,
        out: &mut Vec<u8>,
    ) {
        let s = ctx.stats;
        let result: Result<(u64, u64), (Status, &str)> = {
            let req = Arith {
                incr,
                delta,
                cas,
                autovivify: None,
                new_expiry: None,
            };
            // memcached creates a missing counter (an `add`).
            let digits = initial.to_string();
            let create = (exptime != ARITH_NO_CREATE)
                .then(|| (digits.as_bytes(), ctx.cache.clock().expiry(exptime as i64)));
            match ctx.cache.arith_or_add(key, &req, create) {
                ArithOrAdd::Counted { value, cas } => {
                    bump(if incr { &s.incr_hits } else { &s.decr_hits });
                    Ok((value, cas))
                }
                ArithOrAdd::Added(StoreOutcome::Stored { cas }) => Ok((initial, cas)),
                ArithOrAdd::Added(StoreOutcome::NoMemory | StoreOutcome::TooLarge) => {
                    Err((Status::OutOfMemory, OOM_NEW_ITEM))
                }
                ArithOrAdd::Added(_) => Err(fail(Status::NotStored)),
                ArithOrAdd::Failed(ArithOutcome::NotFound) => {
                    bump(if incr { &s.incr_misses } else { &s.decr_misses });
                    Err(fail(Status::KeyNotFound))
                }
                ArithOrAdd::Failed(ArithOutcome::NonNumeric) => Err(fail(Status::NonNumeric)),
                ArithOrAdd::Failed(ArithOutcome::Exists) => Err(fail(Status::KeyExists)),
                ArithOrAdd::Failed(_) => Err((Status::OutOfMemory, OOM_INCREMENTING)),
            }
        };
        match result {
            Ok((value, new_cas)) if !quiet => write_response(
                out,
                r.opcode,
                Status::NoError,
                r.opaque,
                new_cas,
                &[],
                &[],
                &value.to_be_bytes(),
            ),
            Ok(_) => {}
            Err((status, text)) => self.error_text(r, out, status, text),
        }
    }

    /// Stat: one packet per statistic, then an empty one. The group name is
    /// matched like memcached's process_bin_stat: "reset", "settings" and
    /// "detail" by prefix, the engine groups exactly, anything else (even
    /// "conns", which only the text protocol has) is "Not found". The pairs
    /// come from the generators behind text `stats`.
    fn stat(&mut self, ctx: &Ctx<'_>, r: Reply, key: &[u8], out: &mut Vec<u8>) {
        let mut terminate = true;
        let pairs: stats_cmd::Pairs = if key.is_empty() {
            stats_cmd::collect(ctx, b"").unwrap_or_default()
        } else if key.starts_with(b"reset") {
            stats_cmd::reset(ctx);
            Vec::new()
        } else if key.starts_with(b"settings") {
            stats_cmd::collect(ctx, b"settings").unwrap_or_default()
        } else if let Some(sub) = key.strip_prefix(b"detail") {
            let arg: &[u8] = if sub.starts_with(b" dump") {
                b"dump"
            } else if sub.starts_with(b" on") {
                b"on"
            } else if sub.starts_with(b" off") {
                b"off"
            } else {
                return self.error(r, out, Status::KeyNotFound);
            };
            let mut text = Vec::new();
            stats_cmd::handle(ctx, Some(b"detail"), Some(arg), None, &mut text);
            if arg == b"dump" {
                // The dump travels as one stat whose value is the text
                // protocol's "PREFIX ...\r\n...END\r\n" listing.
                vec![(
                    "detailed".to_string(),
                    String::from_utf8_lossy(&text).into_owned(),
                )]
            } else {
                Vec::new()
            }
        } else {
            match key {
                b"items" | b"slabs" | b"sizes" => match stats_cmd::collect(ctx, key) {
                    Some(p) => p,
                    None => return self.error(r, out, Status::KeyNotFound),
                },
                // memcached answers these with their one statistic and no
                // terminating packet (size tracking is a build option there;
                // cachalot always keeps the histogram).
                b"sizes_enable" | b"sizes_disable" => {
                    terminate = false;
                    let state = if key == b"sizes_enable" {
                        "enabled"
                    } else {
                        "disabled"
                    };
                    vec![("sizes_status".to_string(), state.to_string())]
                }
                _ => return self.error(r, out, Status::KeyNotFound),
            }
        };
        for (k, v) in &pairs {
            write_response(
                out,
                OP_STAT,
                Status::NoError,
                r.opaque,
                0,
                &[],
                k.as_bytes(),
                v.as_bytes(),
            );
        }
        if terminate {
            write_response(out, OP_STAT, Status::NoError, r.opaque, 0, &[], &[], &[]);
        }
    }
}

impl Handler for BinaryHandler {
    fn parks(&self) -> bool {
        true
    }

    fn step(&mut self, ctx: &Ctx<'_>, input: &[u8], out: &mut Vec<u8>) -> Step {
        let mut pos = 0usize;
        // Replies before this mark would already be on the wire in memcached.
        let mut mark = out.len();
        let budget = ctx.settings.reqs_per_event.max(1);
        let mut handled = 0usize;
        loop {
            if self.swallow > 0 {
                let avail = input.len().saturating_sub(pos);
                let n = self.swallow.min(avail as u64);
                self.swallow -= n;
                pos += n as usize;
                if self.swallow > 0 {
                    break;
                }
            }
            let rest = input.get(pos..).unwrap_or_default();
            if rest.is_empty() {
                break;
            }
            if out_full(out) {
                // A quiet pipeline of large values: write before reading on.
                return Step::Blocked(pos);
            }
            if handled >= budget {
                // Let the worker's other connections run (memcached's -R).
                bump(&ctx.stats.conn_yields);
                break;
            }
            handled += 1;
            self.flush_point = false;
            match self.one(ctx, rest, out) {
                Flow::Next(n) => {
                    pos += n;
                    if self.flush_point && self.swallow == 0 {
                        mark = out.len();
                    }
                    crate::handler::demote_all_if_asked(ctx);
                }
                Flow::NeedMore => break,
                Flow::Parked => return Step::Parked(pos),
                Flow::Close(n) => return Step::Close(pos + n),
                Flow::BadMagic => {
                    // memcached closes without a reply, dropping the replies
                    // of this batch it had not written out yet.
                    out.truncate(mark);
                    return Step::Close(input.len());
                }
            }
        }
        if pos == 0 {
            Step::NeedMore
        } else {
            Step::Consumed(pos)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use cachalot_engine::{Cache, Clock};
    use cachalot_protocol::binary::write_request;
    use cachalot_protocol::client::{parse_reply, Reply};

    use super::*;
    use crate::settings::Settings;
    use crate::stats::Shared;

    /// One connection against a fresh engine, fed the way the network layer
    /// feeds a handler: whatever bytes are buffered, until it needs more.
    struct Conn {
        cache: Cache,
        settings: Settings,
        shared: Arc<Shared>,
        h: BinaryHandler,
        buf: Vec<u8>,
        out: Vec<u8>,
        /// Output the network layer would have written (at `Step::Blocked`).
        sent: Vec<u8>,
        /// The most output the handler held at once.
        peak: usize,
        closed: bool,
    }

    impl Conn {
        fn new() -> Conn {
            Conn::with(Settings::default())
        }

        fn with(settings: Settings) -> Conn {
            let shared = Shared {
                threads: vec![Arc::new(ThreadStats::default())],
                ..Shared::default()
            };
            Conn {
                cache: Cache::new(settings.engine.clone(), Arc::new(Clock::new())).unwrap(),
                settings,
                shared: Arc::new(shared),
                h: BinaryHandler::new(),
                buf: Vec::new(),
                out: Vec::new(),
                sent: Vec::new(),
                peak: 0,
                closed: false,
            }
        }

        fn stats(&self) -> &ThreadStats {
            &self.shared.threads[0]
        }

        /// Send bytes; return the raw reply bytes produced.
        fn send(&mut self, bytes: &[u8]) -> Vec<u8> {
            assert!(!self.closed, "connection already closed");
            self.buf.extend_from_slice(bytes);
            loop {
                let ctx = Ctx {
                    cache: &self.cache,
                    settings: &self.settings,
                    shared: &self.shared,
                    stats: &self.shared.threads[0],
                    conn_id: 1,
                    reads: None,
                };
                let step = self.h.step(&ctx, &self.buf, &mut self.out);
                self.peak = self.peak.max(self.out.len());
                match step {
                    Step::Consumed(n) => {
                        assert!(n > 0 && n <= self.buf.len());
                        self.buf.drain(..n);
                    }
                    Step::Blocked(n) => {
                        assert!(n <= self.buf.len() && crate::handler::out_full(&self.out));
                        self.buf.drain(..n);
                        self.sent.append(&mut self.out);
                    }
                    Step::NeedMore => break,
                    Step::Close(n) => {
                        assert!(n <= self.buf.len());
                        self.buf.drain(..n);
                        self.closed = true;
                        break;
                    }
                    Step::Parked(_) => panic!("no flash tier in these tests"),
                }
            }
            self.sent.append(&mut self.out);
            std::mem::take(&mut self.sent)
        }

        /// Send bytes; return (opcode, status, opaque, cas, extras, key, value) of each reply.
        fn replies(&mut self, bytes: &[u8]) -> Vec<Rep> {
            let raw = self.send(bytes);
            parse_all(&raw)
        }
    }

    #[derive(Debug, PartialEq, Eq)]
    struct Rep {
        op: u8,
        status: u16,
        opaque: u32,
        cas: u64,
        extras: Vec<u8>,
        key: Vec<u8>,
        value: Vec<u8>,
    }

    fn parse_all(mut raw: &[u8]) -> Vec<Rep> {
        let mut v = Vec::new();
        while !raw.is_empty() {
            let Ok(Some((Reply::Binary(r), n))) = parse_reply(raw) else {
                panic!("not a whole response: {raw:?}")
            };
            v.push(Rep {
                op: r.header.opcode,
                status: r.header.vbucket_or_status,
                opaque: r.header.opaque,
                cas: r.header.cas,
                extras: r.extras.to_vec(),
                key: r.key.to_vec(),
                value: r.value.to_vec(),
            });
            raw = &raw[n..];
        }
        v
    }

    fn req(op: u8, opaque: u32, cas: u64, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        write_request(&mut v, op, opaque, cas, extras, key, value);
        v
    }

    #[test]
    fn quiet_pipeline_of_large_values_is_bounded() {
        let mut c = Conn::new();
        let value = vec![b'v'; 300_000];
        let r = c.replies(&req(0x01, 0, 0, &set_extras(0, 0), b"big", &value));
        assert_eq!(r[0].status, 0);
        let mut pipeline = req(0x09, 1, 0, &[], b"big", &[]).repeat(40);
        pipeline.extend(req(0x0a, 2, 0, &[], &[], &[]));
        let r = c.replies(&pipeline);
        assert_eq!(r.len(), 41);
        assert!(r[..40].iter().all(|r| r.value == value));
        assert!(
            c.peak < crate::handler::OUT_HIGH_WATER + value.len() + 64,
            "{}",
            c.peak
        );
    }

    fn set_extras(flags: u32, exptime: u32) -> Vec<u8> {
        [flags.to_be_bytes(), exptime.to_be_bytes()].concat()
    }

    fn arith_extras(delta: u64, initial: u64, exptime: u32) -> Vec<u8> {
        [
            &delta.to_be_bytes()[..],
            &initial.to_be_bytes()[..],
            &exptime.to_be_bytes()[..],
        ]
        .concat()
    }

    fn set(c: &mut Conn, key: &[u8], value: &[u8], flags: u32) -> u64 {
        let r = c.replies(&req(0x01, 0, 0, &set_extras(flags, 0), key, value));
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].status, 0);
        r[0].cas
    }

    fn text(r: &Rep) -> &str {
        std::str::from_utf8(&r.value).unwrap()
    }

    const NOOP: u8 = 0x0a;

    #[test]
    fn set_then_get_family() {
        let mut c = Conn::new();
        let cas = set(&mut c, b"k", b"hello", 0xdeadbeef);
        assert_ne!(cas, 0);
        let r = c.replies(&req(0x00, 42, 0, &[], b"k", &[]));
        assert_eq!(
            r,
            vec![Rep {
                op: 0x00,
                status: 0,
                opaque: 42,
                cas,
                extras: 0xdeadbeefu32.to_be_bytes().to_vec(),
                key: vec![],
                value: b"hello".to_vec()
            }]
        );
        // GetK returns the key, GetQ/GetKQ hits are sent with their own opcode.
        let r = c.replies(
            &[
                req(0x0c, 1, 0, &[], b"k", &[]),
                req(0x09, 2, 0, &[], b"k", &[]),
                req(0x0d, 3, 0, &[], b"k", &[]),
            ]
            .concat(),
        );
        assert_eq!(r.len(), 3);
        assert_eq!(
            (r[0].op, &r[0].key[..], &r[0].value[..]),
            (0x0c, &b"k"[..], &b"hello"[..])
        );
        assert_eq!((r[1].op, r[1].key.len(), r[1].opaque), (0x09, 0, 2));
        assert_eq!((r[2].op, &r[2].key[..], r[2].opaque), (0x0d, &b"k"[..], 3));
        let s = c.stats();
        assert_eq!(s.cmd_get.load(std::sync::atomic::Ordering::Relaxed), 4);
        assert_eq!(s.get_hits.load(std::sync::atomic::Ordering::Relaxed), 4);
    }

    #[test]
    fn misses_and_quiet_misses() {
        let mut c = Conn::new();
        let r = c.replies(
            &[
                req(0x00, 1, 0, &[], b"nope", &[]),
                req(0x0c, 2, 0, &[], b"nope", &[]),
                req(0x09, 3, 0, &[], b"nope", &[]),
                req(0x0d, 4, 0, &[], b"nope", &[]),
                req(NOOP, 5, 0, &[], &[], &[]),
            ]
            .concat(),
        );
        assert_eq!(r.len(), 3, "{r:?}");
        assert_eq!((r[0].status, text(&r[0]), r[0].cas), (1, "Not found", 0));
        // A GetK miss carries the key and no text.
        assert_eq!(
            (r[1].status, &r[1].key[..], r[1].value.len()),
            (1, &b"nope"[..], 0)
        );
        assert_eq!((r[2].op, r[2].opaque), (NOOP, 5));
        assert_eq!(
            c.stats()
                .get_misses
                .load(std::sync::atomic::Ordering::Relaxed),
            4
        );
    }

    #[test]
    fn store_modes_and_texts() {
        let mut c = Conn::new();
        let ex = set_extras(0, 0);
        let r = c.replies(&req(0x02, 0, 0, &ex, b"a", b"1"));
        assert_eq!(r[0].status, 0);
        let r = c.replies(&req(0x02, 0, 0, &ex, b"a", b"2"));
        assert_eq!((r[0].status, text(&r[0])), (2, "Data exists for key."));
        let r = c.replies(&req(0x03, 0, 0, &ex, b"b", b"2"));
        assert_eq!((r[0].status, text(&r[0])), (1, "Not found"));
        let r = c.replies(&req(0x0e, 0, 0, &[], b"b", b"2"));
        assert_eq!((r[0].status, text(&r[0])), (5, "Not stored."));
        let r = c.replies(&req(0x0e, 0, 0, &[], b"a", b"z"));
        assert_eq!(r[0].status, 0);
        let r = c.replies(&req(0x0f, 0, 0, &[], b"a", b"<"));
        assert_eq!(r[0].status, 0);
        let r = c.replies(&req(0x00, 0, 0, &[], b"a", &[]));
        assert_eq!(r[0].value, b"<1z");
        // Quiet stores: successes are silent, failures are not.
        let r = c.replies(
            &[
                req(0x11, 1, 0, &ex, b"q", b"v"),
                req(0x12, 2, 0, &ex, b"q", b"v"),
                req(0x13, 3, 0, &ex, b"q", b"w"),
                req(0x19, 4, 0, &[], b"q", b"x"),
                req(0x1a, 5, 0, &[], b"q", b"y"),
                req(0x13, 6, 0, &ex, b"missing", b"w"),
                req(NOOP, 7, 0, &[], &[], &[]),
            ]
            .concat(),
        );
        assert_eq!(r.len(), 3, "{r:?}");
        assert_eq!((r[0].op, r[0].opaque, r[0].status), (0x12, 2, 2));
        assert_eq!((r[1].op, r[1].opaque, r[1].status), (0x13, 6, 1));
        assert_eq!(r[2].op, NOOP);
        let r = c.replies(&req(0x00, 0, 0, &[], b"q", &[]));
        assert_eq!(r[0].value, b"ywx");
    }

    #[test]
    fn cas_rules() {
        let mut c = Conn::new();
        let ex = set_extras(3, 0);
        let cas = set(&mut c, b"k", b"v", 3);
        let r = c.replies(&req(0x01, 0, cas + 1000, &ex, b"k", b"x"));
        assert_eq!((r[0].status, r[0].cas), (2, 0));
        let r = c.replies(&req(0x01, 0, 77, &ex, b"missing", b"x"));
        assert_eq!((r[0].status, text(&r[0])), (1, "Not found"));
        // A CAS add on an existing item is a compare-and-swap, as in memcached.
        let r = c.replies(&req(0x02, 0, cas, &ex, b"k", b"new"));
        assert_eq!(r[0].status, 0);
        let new_cas = r[0].cas;
        assert!(new_cas != cas && new_cas != 0);
        // Append with a wrong CAS: exists.
        let r = c.replies(&req(0x0e, 0, cas, &[], b"k", b"!"));
        assert_eq!(r[0].status, 2);
        let r = c.replies(&req(0x0e, 0, new_cas, &[], b"k", b"!"));
        assert_eq!(r[0].status, 0);
        // Delete with a wrong CAS, then the right one.
        let cur = c.replies(&req(0x00, 0, 0, &[], b"k", &[]))[0].cas;
        let r = c.replies(&req(0x04, 0, cur + 1, &[], b"k", &[]));
        assert_eq!((r[0].status, text(&r[0])), (2, "Data exists for key."));
        let r = c.replies(&req(0x04, 9, cur, &[], b"k", &[]));
        assert_eq!((r[0].status, r[0].cas, r[0].opaque), (0, 0, 9));
        let s = c.stats();
        let ld = |a: &AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(
            (ld(&s.cas_hits), ld(&s.cas_badval), ld(&s.cas_misses)),
            (1, 1, 1)
        );
        assert_eq!(ld(&s.delete_hits), 1);
    }

    #[test]
    fn delete_and_deleteq() {
        let mut c = Conn::new();
        set(&mut c, b"k", b"v", 0);
        let r = c.replies(
            &[
                req(0x14, 1, 0, &[], b"k", &[]),
                req(0x14, 2, 0, &[], b"k", &[]),
                req(0x04, 3, 0, &[], b"k", &[]),
            ]
            .concat(),
        );
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].op, r[0].opaque, r[0].status), (0x14, 2, 1));
        assert_eq!((r[1].op, r[1].opaque, r[1].status), (0x04, 3, 1));
        assert_eq!(
            c.stats()
                .delete_misses
                .load(std::sync::atomic::Ordering::Relaxed),
            2
        );
    }

    #[test]
    fn incr_decr() {
        let mut c = Conn::new();
        // Missing with 0xffffffff: Not found, counted as a miss.
        let r = c.replies(&req(
            0x05,
            0,
            0,
            &arith_extras(1, 5, ARITH_NO_CREATE),
            b"n",
            &[],
        ));
        assert_eq!((r[0].status, text(&r[0])), (1, "Not found"));
        // Missing: created with the initial value (not the delta).
        let r = c.replies(&req(0x05, 0, 0, &arith_extras(1, 42, 0), b"n", &[]));
        assert_eq!(
            (r[0].status, &r[0].value[..]),
            (0, &42u64.to_be_bytes()[..])
        );
        assert_ne!(r[0].cas, 0);
        let r = c.replies(&req(0x05, 0, 0, &arith_extras(10, 42, 0), b"n", &[]));
        assert_eq!(r[0].value, 52u64.to_be_bytes());
        let r = c.replies(&req(0x06, 0, 0, &arith_extras(100, 42, 0), b"n", &[]));
        assert_eq!(r[0].value, 0u64.to_be_bytes(), "decr stops at 0");
        // memcached rewrites a shorter result in place, padded with spaces.
        let r = c.replies(&req(0x00, 0, 0, &[], b"n", &[]));
        assert_eq!(
            (&r[0].value[..], &r[0].extras[..]),
            (&b"0 "[..], &[0u8, 0, 0, 0][..])
        );
        // Wrap around at 2^64.
        c.replies(&req(0x05, 0, 0, &arith_extras(u64::MAX, 0, 0), b"n", &[]));
        let r = c.replies(&req(0x05, 0, 0, &arith_extras(2, 0, 0), b"n", &[]));
        assert_eq!(r[0].value, 1u64.to_be_bytes());
        // Quiet: silent on success.
        let r = c.replies(
            &[
                req(0x15, 1, 0, &arith_extras(1, 0, 0), b"n", &[]),
                req(0x16, 2, 0, &arith_extras(1, 0, 0), b"n", &[]),
                req(0x05, 3, 0, &arith_extras(0, 0, 0), b"n", &[]),
            ]
            .concat(),
        );
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].opaque, &r[0].value[..]), (3, &1u64.to_be_bytes()[..]));
        // Wrong CAS, non-numeric value.
        let r = c.replies(&req(
            0x05,
            0,
            r[0].cas + 1,
            &arith_extras(1, 0, 0),
            b"n",
            &[],
        ));
        assert_eq!((r[0].status, text(&r[0])), (2, "Data exists for key."));
        set(&mut c, b"s", b"abc", 0);
        let r = c.replies(&req(0x16, 0, 0, &arith_extras(1, 0, 0), b"s", &[]));
        assert_eq!(
            (r[0].status, text(&r[0])),
            (6, "Non-numeric server-side value for incr or decr")
        );
        let s = c.stats();
        let ld = |a: &AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(
            (ld(&s.incr_misses), ld(&s.incr_hits), ld(&s.decr_hits)),
            (1, 5, 2)
        );
    }

    #[test]
    fn touch_and_gat() {
        let mut c = Conn::new();
        set(&mut c, b"k", b"val", 7);
        let ex = 100u32.to_be_bytes();
        let r = c.replies(&req(0x1c, 1, 0, &ex, b"k", &[]));
        // Touch answers with the flags and no value.
        assert_eq!(
            (r[0].status, &r[0].extras[..], r[0].value.len()),
            (0, &7u32.to_be_bytes()[..], 0)
        );
        let r = c.replies(&req(0x1d, 1, 0, &ex, b"k", &[]));
        assert_eq!((&r[0].value[..], r[0].key.len()), (&b"val"[..], 0));
        let r = c.replies(&req(0x23, 1, 0, &ex, b"k", &[]));
        assert_eq!((&r[0].value[..], &r[0].key[..]), (&b"val"[..], &b"k"[..]));
        let r = c.replies(
            &[
                req(0x1e, 1, 0, &ex, b"nope", &[]),
                req(0x24, 2, 0, &ex, b"nope", &[]),
                req(0x23, 3, 0, &ex, b"nope", &[]),
                req(0x1c, 4, 0, &ex, b"nope", &[]),
            ]
            .concat(),
        );
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].opaque, r[0].status, &r[0].key[..]),
            (3, 1, &b"nope"[..])
        );
        assert_eq!((r[1].opaque, text(&r[1])), (4, "Not found"));
        // Expiry in the past through GAT: the item is gone.
        let past = (c.cache.clock().unix_now() - 100_000) as u32;
        let r = c.replies(&req(0x1d, 1, 0, &past.to_be_bytes(), b"k", &[]));
        assert_eq!(r[0].status, 0);
        let r = c.replies(&req(0x00, 1, 0, &[], b"k", &[]));
        assert_eq!(r[0].status, 1);
        let s = c.stats();
        let ld = |a: &AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(
            (ld(&s.cmd_touch), ld(&s.touch_hits), ld(&s.touch_misses)),
            (8, 4, 4)
        );
    }

    #[test]
    fn flush_noop_version_quit() {
        let mut c = Conn::new();
        set(&mut c, b"k", b"v", 0);
        let r = c.replies(
            &[
                req(0x18, 1, 0, &[], &[], &[]),
                req(NOOP, 2, 0, &[], &[], &[]),
            ]
            .concat(),
        );
        assert_eq!((r.len(), r[0].op, r[0].opaque), (1, NOOP, 2));
        assert_eq!(c.replies(&req(0x00, 0, 0, &[], b"k", &[]))[0].status, 1);
        set(&mut c, b"k", b"v", 0);
        // Flush with a delay: nothing goes until the time comes.
        let r = c.replies(&req(0x08, 3, 0, &10u32.to_be_bytes(), &[], &[]));
        assert_eq!((r[0].op, r[0].status, r[0].opaque), (0x08, 0, 3));
        assert_eq!(c.replies(&req(0x00, 0, 0, &[], b"k", &[]))[0].status, 0);
        c.cache.clock().advance(std::time::Duration::from_secs(11));
        assert_eq!(c.replies(&req(0x00, 0, 0, &[], b"k", &[]))[0].status, 1);
        // An absolute flush time in the past flushes nothing (memcached).
        set(&mut c, b"k", b"v", 0);
        let past = 30 * 24 * 3600 + 1u32;
        let r = c.replies(&req(0x08, 4, 0, &past.to_be_bytes(), &[], &[]));
        assert_eq!((r[0].status, r[0].opaque), (0, 4));
        assert_eq!(c.replies(&req(0x00, 0, 0, &[], b"k", &[]))[0].status, 0);
        let r = c.replies(&req(0x0b, 5, 0, &[], &[], &[]));
        assert_eq!((r[0].opaque, text(&r[0])), (5, "1.6.18"));
        let r = c.replies(&req(0x07, 6, 0, &[], &[], &[]));
        assert_eq!((r.len(), r[0].op, r[0].opaque), (1, 0x07, 6));
        assert!(c.closed);
        let mut c = Conn::new();
        assert!(c.replies(&req(0x17, 6, 0, &[], &[], &[])).is_empty());
        assert!(c.closed);
    }

    #[test]
    fn flush_disabled() {
        let mut c = Conn::with(Settings {
            flush_enabled: false,
            ..Settings::default()
        });
        let r = c.replies(&req(0x18, 1, 0, &[], &[], &[]));
        assert_eq!((r[0].status, text(&r[0])), (0x20, "Auth failure."));
    }

    #[test]
    fn protocol_errors_close() {
        for bad in [
            req(0x00, 1, 0, &[], &[b'k'; 251], &[]),
            req(0x01, 1, 0, &[0; 4], b"k", b"v"),
            req(0x00, 1, 0, &[1, 2, 3, 4], b"k", &[]),
            req(0x0a, 1, 0, &[], &[], b"x"),
            req(0x05, 1, 0, &[0; 16], b"k", &[]),
            req(0x1c, 1, 0, &[], b"k", &[]),
        ] {
            let mut c = Conn::new();
            let r = c.replies(&[bad, req(NOOP, 2, 0, &[], &[], &[])].concat());
            assert_eq!(r.len(), 1);
            assert_eq!(
                (r[0].status, text(&r[0]), r[0].opaque),
                (4, "Invalid arguments", 1)
            );
            assert!(c.closed);
        }
        // key + extras longer than the body: Unknown command, close.
        let mut c = Conn::new();
        let mut b = req(0x00, 1, 0, &[], b"k", &[]);
        b[8..12].copy_from_slice(&0u32.to_be_bytes());
        let r = c.replies(&b);
        assert_eq!((r[0].status, text(&r[0])), (0x81, "Unknown command"));
        assert!(c.closed);
    }

    #[test]
    fn unknown_opcodes_swallow_like_memcached() {
        let mut c = Conn::new();
        // Verbosity with its extras: Unknown command, then 4 more bytes eaten.
        let r = c.replies(
            &[
                req(0x1b, 1, 0, &1u32.to_be_bytes(), &[], &[]),
                vec![0; 4],
                req(NOOP, 2, 0, &[], &[], &[]),
            ]
            .concat(),
        );
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].op, r[0].status, text(&r[0])),
            (0x1b, 0x81, "Unknown command")
        );
        assert_eq!(r[1].opaque, 2);
        // SASL without SASL: unknown, value discarded exactly.
        let r = c.replies(
            &[
                req(0x20, 3, 0, &[], &[], &[]),
                req(0x21, 4, 0, &[], b"PLAIN", b"\0user\0pass"),
                req(NOOP, 5, 0, &[], &[], &[]),
            ]
            .concat(),
        );
        let got: Vec<_> = r.iter().map(|r| (r.op, r.status, r.opaque)).collect();
        assert_eq!(got, vec![(0x20, 0x81, 3), (0x21, 0x81, 4), (NOOP, 0, 5)]);
        // The swallow can span many reads.
        let big = req(0x40, 6, 0, &[], &[], &vec![b'x'; 10_000]);
        let mut r = Vec::new();
        for chunk in big.chunks(333) {
            r.extend(c.replies(chunk));
        }
        r.extend(c.replies(&req(NOOP, 7, 0, &[], &[], &[])));
        let got: Vec<_> = r.iter().map(|r| (r.op, r.status, r.opaque)).collect();
        assert_eq!(got, vec![(0x40, 0x81, 6), (NOOP, 0, 7)]);
        assert!(!c.closed);
    }

    #[test]
    fn oversized_values_are_swallowed() {
        let mut c = Conn::new();
        set(&mut c, b"k", b"old", 0);
        set(&mut c, b"a", b"old", 0);
        let big = vec![b'x'; 2 << 20];
        let ex = set_extras(0, 0);
        let mut stream = req(0x01, 1, 0, &ex, b"k", &big);
        stream.extend(req(0x02, 2, 0, &ex, b"a", &big));
        stream.extend(req(0x0e, 3, 0, &[], b"a", &big));
        stream.extend(req(0x00, 4, 0, &[], b"k", &[]));
        stream.extend(req(0x00, 5, 0, &[], b"a", &[]));
        let mut r = Vec::new();
        for chunk in stream.chunks(64 << 10) {
            r.extend(c.replies(chunk));
            // The handler never waits for a refused value to be buffered.
            assert!(c.buf.len() <= 64 << 10);
        }
        let got: Vec<_> = r.iter().map(|r| (r.op, r.status, r.opaque)).collect();
        assert_eq!(
            got,
            vec![
                (0x01, 3, 1),
                (0x02, 3, 2),
                (0x0e, 3, 3),
                (0x00, 1, 4),
                (0x00, 0, 5)
            ]
        );
        assert_eq!(text(&r[0]), "Too large.");
        // The failed set dropped the old "k"; the failed add kept "a".
        assert_eq!(r[4].value, b"old");
        assert_eq!(c.h.swallowing(), 0);
        assert_eq!(
            c.stats().cmd_set.load(std::sync::atomic::Ordering::Relaxed),
            2
        );
    }

    #[test]
    fn byte_at_a_time_matches_whole() {
        let ex = set_extras(1, 0);
        let stream = [
            req(0x01, 1, 0, &ex, b"key", b"value"),
            req(0x0d, 2, 0, &[], b"key", &[]),
            req(0x09, 3, 0, &[], b"nokey", &[]),
            req(0x05, 4, 0, &arith_extras(3, 10, 0), b"n", &[]),
            req(0x10, 5, 0, &[], b"nosuchgroup", &[]),
            req(0x30, 6, 0, &[], &[], b"vv"),
            req(NOOP, 7, 0, &[], &[], &[]),
            req(0x04, 8, 0, &[], b"key", &[]),
            req(0x0c, 9, 0, &[], b"key", &[]),
        ]
        .concat();
        let mut whole = Conn::new();
        let a = whole.send(&stream);
        let mut drip = Conn::new();
        let mut b = Vec::new();
        for byte in &stream {
            b.extend(drip.send(std::slice::from_ref(byte)));
        }
        assert!(!a.is_empty());
        // CAS values come from the same counter sequence in both.
        assert_eq!(a, b);
    }

    #[test]
    fn bad_magic_closes_and_drops_unflushed_replies() {
        let mut bad = req(NOOP, 9, 0, &[], &[], &[]);
        bad[0] = 0x81;
        // A hit is still in memcached's output buffer when the bad packet
        // arrives: it is never sent.
        let mut c = Conn::new();
        set(&mut c, b"k", b"v", 0);
        let r = c.replies(&[req(0x00, 1, 0, &[], b"k", &[]), bad.clone()].concat());
        assert!(r.is_empty() && c.closed);
        // An error reply is written out at once (so is a GetK miss not).
        let mut c = Conn::new();
        let r = c.replies(
            &[
                req(0x00, 1, 0, &[], b"miss", &[]),
                req(0x0c, 2, 0, &[], b"miss", &[]),
                bad.clone(),
            ]
            .concat(),
        );
        assert_eq!((r.len(), r[0].opaque, text(&r[0])), (1, 1, "Not found"));
        assert!(c.closed);
        let mut c = Conn::new();
        let r = c.replies(
            &[
                req(NOOP, 1, 0, &[], &[], &[]),
                req(0x09, 2, 0, &[], b"k", &[]),
                bad,
            ]
            .concat(),
        );
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].opaque, 1);
        assert!(c.closed);
    }

    #[test]
    fn out_of_memory_with_evictions_off() {
        let mut settings = Settings::default();
        settings.engine.memory_limit = 2 << 20;
        settings.engine.evict = false;
        let mut c = Conn::with(settings);
        let ex = set_extras(0, 0);
        let value = vec![b'x'; 100_000];
        let failed = (0..100).find_map(|i| {
            let r = c.replies(&req(0x01, i, 0, &ex, format!("k{i}").as_bytes(), &value));
            (r[0].status != 0).then(|| r.into_iter().next().unwrap())
        });
        let r = failed.expect("a 2 MB cache without eviction fills up");
        assert_eq!(
            (r.status, text(&r)),
            (0x82, "Out of memory allocating item")
        );
        // The connection goes on; small items may still fit elsewhere.
        assert_eq!(c.replies(&req(NOOP, 1, 0, &[], &[], &[]))[0].op, NOOP);
    }

    #[test]
    fn cas_disabled() {
        let mut settings = Settings::default();
        settings.engine.cas_enabled = false;
        let mut c = Conn::with(settings);
        let ex = set_extras(0, 0);
        let ax = arith_extras(1, 1, 0);
        let batch = [
            req(0x01, 1, 0, &ex, b"k", b"v1"),
            req(0x01, 2, 1, &ex, b"k", b"v2"), // CAS ignored: stored
            req(0x01, 3, 1, &ex, b"m", b"v2"), // even on a missing key
            req(0x02, 4, 1, &ex, b"k", b"v3"), // a plain add: exists
            req(0x0e, 5, 1, &[], b"k", b"+"),  // CAS ignored
            req(0x05, 6, 0, &ax, b"n", &[]),   // created
            req(0x05, 7, 1, &ax, b"n", &[]),   // CAS never matches
            req(0x04, 8, 1, &[], b"k", &[]),   // CAS never matches
            req(0x04, 9, 1, &[], b"gone", &[]), // missing: not found
            req(0x00, 10, 0, &[], b"k", &[]),
        ]
        .concat();
        let r = c.replies(&batch);
        let got: Vec<_> = r.iter().map(|r| (r.opaque, r.status, r.cas)).collect();
        assert_eq!(
            got,
            vec![
                (1, 0, 0),
                (2, 0, 0),
                (3, 0, 0),
                (4, 2, 0),
                (5, 0, 0),
                (6, 0, 0),
                (7, 2, 0),
                (8, 2, 0),
                (9, 1, 0),
                (10, 0, 0)
            ]
        );
        assert_eq!(r[9].value, b"v2+");
    }

    #[test]
    fn yields_after_reqs_per_event() {
        let mut c = Conn::with(Settings {
            reqs_per_event: 3,
            ..Settings::default()
        });
        let batch: Vec<u8> = (0..7)
            .flat_map(|i| req(NOOP, i, 0, &[], &[], &[]))
            .collect();
        let r = c.replies(&batch);
        // All answered, over three steps: two of them stopped for the budget.
        assert_eq!(
            r.iter().map(|r| r.opaque).collect::<Vec<_>>(),
            (0..7).collect::<Vec<_>>()
        );
        assert_eq!(
            c.stats()
                .conn_yields
                .load(std::sync::atomic::Ordering::Relaxed),
            2
        );
    }

    #[test]
    fn heads_larger_than_memcached_read_buffer_close_silently() {
        // A 16000-byte key fits memcached's 16 KB read buffer: it is read whole,
        // then refused as too long.
        let mut c = Conn::new();
        let r = c.replies(&req(0x00, 1, 0, &[], &vec![b'k'; 16000], &[]));
        assert_eq!((r.len(), r[0].status), (1, 4));
        assert!(c.closed);
        // One that cannot fit: nothing until more than 16 KB is waiting, then
        // the connection closes without a reply (earlier replies still go).
        let mut c = Conn::new();
        let big = [
            req(0x01, 1, 0, &set_extras(0, 0), b"k", b"v"),
            req(0x00, 2, 0, &[], &vec![b'k'; 16361], &[]),
        ]
        .concat();
        let first = c.replies(&big[..16384]);
        assert_eq!(first.len(), 1);
        assert!(!c.closed);
        assert!(c.replies(&big[16384..]).is_empty());
        assert!(c.closed);
    }

    #[test]
    fn two_gigabyte_bodies_swallow_nothing() {
        // memcached keeps body lengths in an `int`: 2 GB and up is negative,
        // so the value is not swallowed but parsed as the next request.
        let mut c = Conn::new();
        set(&mut c, b"k", b"old", 0);
        let mut head = req(0x01, 1, 0, &set_extras(0, 0), b"k", &[]);
        head[8..12].copy_from_slice(&0x8000_0009u32.to_be_bytes());
        let r = c.replies(&[head, req(NOOP, 2, 0, &[], &[], &[])].concat());
        let got: Vec<_> = r.iter().map(|r| (r.op, r.status, r.opaque)).collect();
        assert_eq!(got, vec![(0x01, 3, 1), (NOOP, 0, 2)]);
        assert_eq!(c.h.swallowing(), 0);
        assert_eq!(c.replies(&req(0x00, 3, 0, &[], b"k", &[]))[0].status, 1);
        let mut unknown = req(0x30, 4, 0, &[], &[], &[]);
        unknown[8..12].copy_from_slice(&0xffff_fff0u32.to_be_bytes());
        let r = c.replies(&[unknown.clone(), req(NOOP, 5, 0, &[], &[], &[])].concat());
        assert_eq!(r.iter().map(|r| r.opaque).collect::<Vec<_>>(), vec![4, 5]);
        // With nothing to swallow, that error is written out at once: a bad
        // magic byte right after it does not take it back.
        let r = c.replies(&[unknown, vec![0; 24]].concat());
        assert_eq!((r.len(), r[0].opaque), (1, 4));
        assert!(c.closed);
    }

    #[test]
    fn value_bytes_after_stat_and_gat_are_the_next_request() {
        let mut c = Conn::new();
        set(&mut c, b"k", b"v", 0);
        let noop = req(NOOP, 3, 0, &[], &[], &[]);
        let r = c.replies(&req(0x10, 1, 0, &[], b"nosuch", &noop));
        assert_eq!(r.iter().map(|r| r.op).collect::<Vec<_>>(), vec![0x10, NOOP]);
        assert_eq!(text(&r[0]), "Not found");
        let r = c.replies(&req(0x1d, 2, 0, &[0; 4], b"k", &noop));
        assert_eq!(r.iter().map(|r| r.op).collect::<Vec<_>>(), vec![0x1d, NOOP]);
    }

    #[test]
    fn stat_groups() {
        let mut c = Conn::new();
        set(&mut c, b"k", b"v", 0);
        let r = c.replies(&req(0x10, 7, 0, &[], &[], &[]));
        assert!(r.len() > 10);
        assert!(r
            .iter()
            .all(|r| r.op == 0x10 && r.status == 0 && r.opaque == 7));
        let last = r.last().unwrap();
        assert!(last.key.is_empty() && last.value.is_empty());
        let find = |r: &[Rep], k: &str| {
            r.iter()
                .find(|p| p.key == k.as_bytes())
                .map(|p| String::from_utf8(p.value.clone()).unwrap())
        };
        assert_eq!(find(&r, "version").as_deref(), Some("1.6.18"));
        assert_eq!(find(&r, "cmd_set").as_deref(), Some("1"));
        assert_eq!(find(&r, "curr_items").as_deref(), Some("1"));
        // reset (by prefix, like memcached): only the terminator.
        let r = c.replies(&req(0x10, 8, 0, &[], b"resetxyz", &[]));
        assert_eq!(r.len(), 1);
        assert!(r[0].key.is_empty());
        let r = c.replies(&req(0x10, 9, 0, &[], &[], &[]));
        assert_eq!(find(&r, "cmd_set").as_deref(), Some("0"));
        let r = c.replies(&req(0x10, 9, 0, &[], b"settings", &[]));
        assert_eq!(find(&r, "item_size_max").as_deref(), Some("1048576"));
        for bad in [&b"conns"[..], b"detail", b"itemsx", b"extstore"] {
            let r = c.replies(&req(0x10, 9, 0, &[], bad, &[]));
            assert_eq!((r.len(), r[0].status, text(&r[0])), (1, 1, "Not found"));
        }
        let r = c.replies(&req(0x10, 9, 0, &[], b"detail dump", &[]));
        assert_eq!(
            (&r[0].key[..], text(&r[0]), r.len()),
            (&b"detailed"[..], "END\r\n", 2)
        );
        let r = c.replies(&req(0x10, 9, 0, &[], b"sizes_enable", &[]));
        assert_eq!(r.len(), 1, "no terminator after sizes_enable");
        let r = c.replies(&req(0x10, 9, 0, &[], b"slabs", &[]));
        assert!(find(&r, "active_slabs").is_some());
        assert!(r.last().unwrap().key.is_empty());
    }
}
