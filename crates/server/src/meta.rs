//! Execution of memcached's meta commands (`mg`, `ms`, `md`, `ma`, `me`, `mn`)
//! on the engine, writing memcached 1.6.18's replies byte for byte, and
//! memcached 1.6.45's where it gave flags a meaning 1.6.18 lacks (`mg C`,
//! `E`, `ms s`, `N` in append mode, `md x`; docs/protocol.md, "memcached
//! 1.6.45").
//!
//! The request is parsed by `cachalot_protocol::meta`; this module follows the
//! order of effects of memcached's `proto_text.c` (`process_mget_command` and
//! friends), checked against a running memcached 1.6.18:
//!
//! - Return flags come out in request order, and `T`/`N` change the TTL at
//!   their place in that order: `mg k t T30` prints the old TTL, `mg k T30 t`
//!   the new one. A too-long opaque on `mg`/`ma` is noticed only when the `O`
//!   is reached, after earlier `T`/`N` and the increment took effect.
//! - `h` and `l` report the item as it was before this access, so such requests
//!   look the item up without touching it and bump it afterwards (memcached's
//!   "locked" path with its delayed `do_item_bump`).
//! - Win/stale tokens: `W` goes to the first client that vivifies (`N`), sees a
//!   TTL below its `R`, or fetches a stale item; later clients see `Z`; `X`
//!   marks a stale item (`md I`, or `ms I` with an older CAS).
//! - `q` hides `EN` (mg), `HD` (ms, md) and successful `HD`/`VA` (ma, except
//!   when the item was just created); errors always show.
//! - Counters are the ones memcached bumps: `mg` counts as a get (or a touch
//!   when it hit with `T`), `ms` as a set (plus the cas counters in CAS mode),
//!   `md` as a delete (invalidation counts nothing), `ma` as incr/decr, and only
//!   `me` bumps `cmd_meta`.
//!
//! Engine gaps worked around here (docs/protocol.md, "Meta commands", lists
//! what is still different): memcached keeps the old TTL and win bit when
//! `ms I` stores a stale value; `C0` on ms means "compare with 0" rather than
//! "no compare"; an append that grows too large is `NS`; `E` on `ma` (new
//! CAS) and `md x` (an empty item) go through a store with `new_cas`.

use std::ops::ControlFlow;
use std::sync::atomic::AtomicU64;

use cachalot_engine::cache::meta::{Edit, MetaDelete, MetaDeleted};
use cachalot_engine::engine::{Arith, Lookup};
use cachalot_engine::hash::hash;
use cachalot_engine::item;
use cachalot_engine::{ArithOutcome, Expiry, ItemRef, RelTime, Store, StoreMode, StoreOutcome};
use cachalot_protocol::meta::{self, base64_encode, MetaCommand, MetaErrorKind, MetaOp};

use crate::handler::Ctx;
use crate::stats::ThreadStats;
use crate::stats_cmd::{self, DetailOp};

/// What the meta handler did with the bytes after the request line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaStep {
    /// Finished; `consumed` bytes of `rest` were used (the ms data block
    /// including its `\r\n`).
    Done { consumed: usize },
    /// The ms data block is incomplete: call again with the same line when
    /// more bytes arrived (nothing was written or changed).
    NeedMore,
    /// Finished with an error; `consumed` bytes of `rest` were used and
    /// `remaining` more must be discarded as they arrive (too-large value).
    Swallow { consumed: usize, remaining: usize },
    /// Close the connection after flushing the output.
    Close,
    /// The item may be on flash: nothing was written; run the request
    /// again once its read is done (`flash::fetch`).
    Parked,
}

/// Run one meta request. `line`: the request line without its `\r\n`;
/// `rest`: the bytes after the line's `\n`.
pub fn handle(ctx: &Ctx<'_>, line: &[u8], rest: &[u8], out: &mut Vec<u8>) -> MetaStep {
    let cmd = match meta::parse(line) {
        Ok(cmd) => cmd,
        Err(e) => {
            out.extend_from_slice(e.line());
            return discard(e.swallow, rest.len());
        }
    };
    match cmd.op {
        MetaOp::Noop => out.extend_from_slice(b"MN\r\n"),
        MetaOp::Get => {
            if mget(ctx, &cmd, out).is_break() {
                return MetaStep::Parked;
            }
        }
        MetaOp::Set => return mset(ctx, &cmd, rest, out),
        MetaOp::Delete => mdelete(ctx, &cmd, out),
        MetaOp::Arith => marith(ctx, &cmd, out),
        MetaOp::Debug => mdebug(ctx, &cmd, out),
    }
    MetaStep::Done { consumed: 0 }
}

/// Throw away `total` bytes of which `have` are already here.
fn discard(total: usize, have: usize) -> MetaStep {
    if have >= total {
        MetaStep::Done { consumed: total }
    } else {
        MetaStep::Swallow {
            consumed: have,
            remaining: total - have,
        }
    }
}

fn bump(counter: &AtomicU64) {
    ThreadStats::bump(counter);
}

// ---------------------------------------------------------------------------
// Reply helpers.

fn push_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

fn push_i64(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// ` <flag><number>`
fn push_flag_u64(out: &mut Vec<u8>, flag: u8, v: u64) {
    out.push(b' ');
    out.push(flag);
    push_u64(out, v);
}

/// ` k<key>`, base64 and followed by ` b` for binary keys (memcached's META_KEY).
fn push_key(out: &mut Vec<u8>, key: &[u8], binary: bool) {
    out.extend_from_slice(b" k");
    if binary {
        base64_encode(key, out);
        out.extend_from_slice(b" b");
    } else {
        out.extend_from_slice(key);
    }
}

/// The `O` and `k` tokens, the only ones echoed on misses and failures.
/// Returns false when the opaque is too long (memcached's error at that point).
fn push_opaque_and_key(out: &mut Vec<u8>, cmd: &MetaCommand<'_>) -> bool {
    for tok in cmd.tokens() {
        match tok.first() {
            Some(b'O') => {
                if tok.len() > meta::MAX_OPAQUE {
                    return false;
                }
                out.push(b' ');
                out.extend_from_slice(tok);
            }
            Some(b'k') => push_key(out, cmd.key(), cmd.base64),
            _ => {}
        }
    }
    true
}

/// An expiry as memcached's `exptime` field: 0 never, 1 already expired.
fn exptime_num(e: Expiry) -> u32 {
    match e {
        Expiry::Never => 0,
        Expiry::At(t) => t,
        Expiry::Expired => 1,
    }
}

/// ` t<remaining>`: -1 for never; memcached prints `exptime - now` as an
/// unsigned 32-bit number, so a TTL set in the past in this very request wraps.
fn push_ttl(out: &mut Vec<u8>, e: Expiry, now: RelTime) {
    out.extend_from_slice(b" t");
    match e {
        Expiry::Never => out.extend_from_slice(b"-1"),
        _ => push_u64(out, u64::from(exptime_num(e).wrapping_sub(now))),
    }
}

/// A client TTL through memcached's rules (negative = expired at once).
fn expiry(ctx: &Ctx<'_>, ttl: i32) -> Expiry {
    ctx.cache.clock().expiry(i64::from(ttl))
}

fn finish_line(out: &mut Vec<u8>) {
    out.extend_from_slice(b"\r\n");
}

// ---------------------------------------------------------------------------
// mg

/// What the flag loop decided, applied to the item afterwards.
struct GetEffects {
    exp: Expiry,
    ttl_set: bool,
    won: bool,
    /// The loop stopped at a too-long opaque.
    opaque_error: bool,
}

/// Break: the item may be on flash and the request is parked (nothing
/// written).
fn mget(ctx: &Ctx<'_>, cmd: &MetaCommand<'_>, out: &mut Vec<u8>) -> ControlFlow<()> {
    let key = cmd.key();
    let now = ctx.cache.clock().now();
    let new_ttl = cmd.ttl.map(|t| expiry(ctx, t));
    let vivify = cmd.vivify.map(|t| expiry(ctx, t));
    let recache = cmd.recache.map(|t| expiry(ctx, t));
    let bump_item = !cmd.has(b'u');
    // memcached's "locked" path: look without touching, bump at the end.
    let deferred = cmd.has(b'h')
        || cmd.has(b'l')
        || cmd.ttl.is_some()
        || cmd.vivify.is_some()
        || cmd.recache.is_some();
    let start = out.len();
    if bump_item && !deferred {
        // A plain mg changes nothing but what a GET changes: the path of
        // `get` without the engine lock (`Cache::get`), unless the item is
        // stale (its first reader wins the recache, which the engine marks).
        let h = hash(key);
        let done = ctx.get_or_park(key, h, Lookup::GET, |item| match item {
            None => Some(None),
            Some(it) if it.stale => None,
            Some(it) => {
                let fx = mget_reply(cmd, &it, false, now, None, None, None, out);
                Some(Some((fx, it.value.len(), it.flags)))
            }
        });
        // On flash: the request is parked.
        let Some(done) = done else {
            return ControlFlow::Break(());
        };
        match done {
            Some(None) => {
                mget_miss(ctx, cmd, start, out);
                return ControlFlow::Continue(());
            }
            Some(Some((fx, len, flags))) => {
                crate::watch::fetched(ctx, key, Some(h), Some((len, flags)));
                stats_cmd::detail_record(ctx, key, DetailOp::Get { hit: true });
                if fx.opaque_error {
                    out.truncate(start);
                    out.extend_from_slice(MetaErrorKind::OpaqueTooLong.line());
                } else {
                    bump(&ctx.stats.cmd_get);
                    bump(&ctx.stats.get_hits);
                }
                return ControlFlow::Continue(());
            }
            None => {}
        }
    }
    // Here the lookup only looks: a plain mg had its GET's access above
    // (a stale item comes back here), the others bump at the end.
    let done = ctx
        .cache
        .peek_edit(key, vivify.is_some(), cmd.new_cas, |it, created| {
            let shape = (it.value.len(), it.flags);
            let fx = mget_reply(cmd, it, created, now, new_ttl, vivify, recache, out);
            // An opaque too long answers an error and changes nothing more.
            let go_on = !fx.opaque_error;
            let edit = Edit {
                expiry: (fx.ttl_set || created).then_some(fx.exp),
                win_sent: go_on && fx.won,
                bump: go_on && bump_item && deferred,
            };
            ((shape, fx.ttl_set, fx.opaque_error), edit)
        });
    let Some((shape, ttl_set, opaque_error)) = done else {
        mget_miss(ctx, cmd, start, out);
        return ControlFlow::Continue(());
    };
    if opaque_error {
        out.truncate(start);
        out.extend_from_slice(MetaErrorKind::OpaqueTooLong.line());
        return ControlFlow::Continue(());
    }
    crate::watch::fetched(ctx, key, None, Some(shape));
    stats_cmd::detail_record(ctx, key, DetailOp::Get { hit: true });
    if ttl_set {
        bump(&ctx.stats.cmd_touch);
        bump(&ctx.stats.touch_hits);
    } else {
        bump(&ctx.stats.cmd_get);
        bump(&ctx.stats.get_hits);
    }
    ControlFlow::Continue(())
}

/// The `EN` reply (nothing with `q`) of an mg that missed; `start` is where
/// its reply begins in `out`.
fn mget_miss(ctx: &Ctx<'_>, cmd: &MetaCommand<'_>, start: usize, out: &mut Vec<u8>) {
    crate::watch::fetched(ctx, cmd.key(), None, None);
    stats_cmd::detail_record(ctx, cmd.key(), DetailOp::Get { hit: false });
    bump(&ctx.stats.cmd_get);
    bump(&ctx.stats.get_misses);
    out.extend_from_slice(b"EN");
    if !push_opaque_and_key(out, cmd) {
        out.truncate(start);
        out.extend_from_slice(MetaErrorKind::OpaqueTooLong.line());
        return;
    }
    finish_line(out);
    if cmd.has(b'q') {
        out.truncate(start);
    }
}

/// Write the `VA`/`HD` line (and the value) for a hit, walking the flags in
/// request order.
#[allow(clippy::too_many_arguments)]
fn mget_reply(
    cmd: &MetaCommand<'_>,
    it: &ItemRef<'_>,
    created: bool,
    now: RelTime,
    new_ttl: Option<Expiry>,
    vivify: Option<Expiry>,
    recache: Option<Expiry>,
    out: &mut Vec<u8>,
) -> GetEffects {
    // protocol.txt 1.6.45 (mg, "C(token): check CAS value against item,
    // remove 'v' flag if matches"): the reply is `HD` when the CAS matches.
    let with_value = cmd.has(b'v') && cmd.cas.is_none_or(|c| c != it.cas);
    if with_value {
        out.extend_from_slice(b"VA ");
        push_u64(out, it.value.len() as u64);
    } else {
        out.extend_from_slice(b"HD");
    }
    let mut fx = GetEffects {
        // A vivified item starts without expiry until its `N` is reached.
        exp: if created { Expiry::Never } else { it.expiry },
        ttl_set: false,
        won: false,
        opaque_error: false,
    };
    for tok in cmd.tokens() {
        let Some(&flag) = tok.first() else { continue };
        match flag {
            b'T' => {
                if let Some(e) = new_ttl {
                    fx.ttl_set = true;
                    fx.exp = e;
                }
            }
            b'N' => {
                if let (true, Some(e)) = (created, vivify) {
                    fx.exp = e;
                    fx.won = true;
                }
            }
            b'R' => {
                let below = recache.is_some_and(|r| exptime_num(fx.exp) < exptime_num(r));
                if !it.win_sent && !created && fx.exp != Expiry::Never && below {
                    fx.won = true;
                }
            }
            b's' => push_flag_u64(out, b's', it.value.len() as u64),
            b't' => push_ttl(out, fx.exp, now),
            b'c' => push_flag_u64(out, b'c', it.cas),
            b'f' => push_flag_u64(out, b'f', u64::from(it.flags)),
            b'l' => push_flag_u64(out, b'l', u64::from(now.saturating_sub(it.last_access))),
            b'h' => out.extend_from_slice(if it.fetched { b" h1" } else { b" h0" }),
            b'w' => push_flag_u64(out, b'w', u64::from(it.cost)),
            b'O' => {
                if tok.len() > meta::MAX_OPAQUE {
                    fx.opaque_error = true;
                    return fx;
                }
                out.push(b' ');
                out.extend_from_slice(tok);
            }
            // memcached prints the stored key; ours has no "binary" mark, so
            // the request's `b` decides the encoding.
            b'k' => push_key(out, it.key, cmd.base64),
            _ => {}
        }
    }
    // Z before X, and never W with Z (memcached's order).
    if it.win_sent {
        out.extend_from_slice(b" Z");
    }
    if it.stale {
        out.extend_from_slice(b" X");
        if !it.win_sent {
            fx.won = true;
        }
    }
    if fx.won {
        out.extend_from_slice(b" W");
    }
    finish_line(out);
    if with_value {
        it.value.copy_to(out);
        finish_line(out);
    }
    fx
}

// ---------------------------------------------------------------------------
// ms

fn mset(ctx: &Ctx<'_>, cmd: &MetaCommand<'_>, rest: &[u8], out: &mut Vec<u8>) -> MetaStep {
    let key = cmd.key();
    let len = cmd.datalen;
    let total = len + 2;
    let complete = rest.len() >= total;

    // memcached allocates the item before reading the data, so a value that
    // can never fit is refused at once (and the old item dropped, so a stale
    // value does not outlive the failed update).
    if !ctx.cache.fits(key.len(), len, cmd.client_flags) {
        ctx.cache.delete(key, 0);
        bump(&ctx.stats.store_too_large);
        out.extend_from_slice(b"SERVER_ERROR object too large for cache\r\n");
        return discard(total, rest.len());
    }
    if !complete {
        return MetaStep::NeedMore;
    }
    bump(&ctx.stats.cmd_set);
    let (data, end) = rest.split_at(len);
    if !end.starts_with(b"\r\n") {
        out.extend_from_slice(b"CLIENT_ERROR bad data chunk\r\n");
        return MetaStep::Done { consumed: total };
    }

    let mode = match cmd.mode {
        Some(b'E') => StoreMode::Add,
        Some(b'A') => StoreMode::Append,
        Some(b'P') => StoreMode::Prepend,
        Some(b'R') => StoreMode::Replace,
        _ => StoreMode::Set,
    };
    // A CAS with set or replace is memcached's `cas` command; add ignores it.
    let cas_mode = cmd.cas.is_some() && matches!(mode, StoreMode::Set | StoreMode::Replace);
    let cas = match mode {
        StoreMode::Add => 0,
        _ => cmd.cas.unwrap_or(0),
    };
    let mut req = Store {
        key,
        value: data,
        flags: cmd.client_flags,
        expiry: expiry(ctx, cmd.ttl.unwrap_or(0)),
        mode: if cas_mode { StoreMode::Set } else { mode },
        cas,
        // memcached stores with `E`'s CAS unless it is 0 (then a new one).
        new_cas: cmd.new_cas.filter(|&c| c != 0),
        cost: cmd.cost,
        invalidate: cas_mode && cmd.has(b'I'),
    };
    let appending = matches!(mode, StoreMode::Append | StoreMode::Prepend);
    // `s`: the size of the item stored, which an append makes larger.
    let mut stored_len = len;
    let outcome = if cas_mode {
        ctx.cache.store_meta_cas(&mut req)
    } else if appending {
        let vivify = cmd.vivify.map(|t| expiry(ctx, t));
        let (outcome, joined) = ctx.cache.append_vivify(&req, vivify);
        stored_len = joined.unwrap_or(len);
        outcome
    } else {
        // As a text `set`: without the engine lock when it can.
        ctx.cache.store(&req)
    };
    let name = match (mode, cas_mode) {
        (_, true) => "cas",
        (StoreMode::Add, _) => "add",
        (StoreMode::Replace, _) => "replace",
        (StoreMode::Append, _) => "append",
        (StoreMode::Prepend, _) => "prepend",
        (StoreMode::Set, _) => "set",
    };
    crate::watch::stored(ctx, &req, name, &outcome);
    stats_cmd::detail_record(ctx, req.key, DetailOp::Set);
    let outcome = match outcome {
        // memcached allocates the joined value while storing; when that
        // fails the append is just "not stored" and the old item stays.
        StoreOutcome::TooLarge | StoreOutcome::NoMemory if appending => StoreOutcome::NotStored,
        StoreOutcome::TooLarge | StoreOutcome::NoMemory => {
            ctx.cache.delete(key, 0);
            outcome
        }
        other => other,
    };

    if cas_mode {
        match outcome {
            StoreOutcome::Stored { .. } => bump(&ctx.stats.cas_hits),
            StoreOutcome::Exists => bump(&ctx.stats.cas_badval),
            StoreOutcome::NotFound => bump(&ctx.stats.cas_misses),
            _ => {}
        }
    }
    let start = out.len();
    let mut new_cas = 0;
    match outcome {
        StoreOutcome::Stored { cas } => {
            new_cas = cas;
            out.extend_from_slice(b"HD");
        }
        StoreOutcome::NotStored => out.extend_from_slice(b"NS"),
        StoreOutcome::Exists => out.extend_from_slice(b"EX"),
        // Append/prepend with a CAS on a missing item is "not stored".
        StoreOutcome::NotFound if !cas_mode => out.extend_from_slice(b"NS"),
        StoreOutcome::NotFound => out.extend_from_slice(b"NF"),
        StoreOutcome::TooLarge => {
            bump(&ctx.stats.store_too_large);
            out.extend_from_slice(b"SERVER_ERROR object too large for cache\r\n");
            return MetaStep::Done { consumed: total };
        }
        StoreOutcome::NoMemory => {
            bump(&ctx.stats.store_no_memory);
            out.extend_from_slice(b"SERVER_ERROR out of memory storing object\r\n");
            return MetaStep::Done { consumed: total };
        }
    }
    for tok in cmd.tokens() {
        match tok.first() {
            Some(b'O') => {
                out.push(b' ');
                out.extend_from_slice(tok);
            }
            Some(b'k') => push_key(out, key, cmd.base64),
            Some(b'c') => push_flag_u64(out, b'c', new_cas),
            // protocol.txt 1.6.45, ms: "s: return the size of the stored
            // item on success (ie; new size on append)". On a failure
            // memcached prints the size of the value sent.
            Some(b's') => push_flag_u64(out, b's', stored_len as u64),
            _ => {}
        }
    }
    finish_line(out);
    if cmd.has(b'q') && matches!(outcome, StoreOutcome::Stored { .. }) {
        out.truncate(start);
    }
    MetaStep::Done { consumed: total }
}

// ---------------------------------------------------------------------------
// md

fn mdelete(ctx: &Ctx<'_>, cmd: &MetaCommand<'_>, out: &mut Vec<u8>) {
    let key = cmd.key();
    let start = out.len();
    let md = MetaDelete {
        cas: cmd.cas,
        blank: cmd.has(b'x'),
        flags: cmd.client_flags,
        expiry: cmd.ttl.map(|t| expiry(ctx, t)),
        new_cas: cmd.new_cas,
        invalidate: cmd.has(b'I'),
    };
    let code: &[u8] = match ctx.cache.meta_delete(key, &md) {
        MetaDeleted::NotFound => {
            bump(&ctx.stats.delete_misses);
            b"NF"
        }
        MetaDeleted::Exists => {
            bump(&ctx.stats.delete_misses);
            b"EX"
        }
        MetaDeleted::NoMemory => {
            out.extend_from_slice(b"SERVER_ERROR out of memory\r\n");
            return;
        }
        MetaDeleted::Invalidated => b"HD",
        MetaDeleted::Deleted { class, len } => {
            bump(&ctx.stats.delete_hits);
            crate::watch::deleted(ctx, key, "md", Some((class, len)));
            stats_cmd::detail_record(ctx, key, DetailOp::Delete);
            b"HD"
        }
    };
    out.extend_from_slice(code);
    // The parser already refused a too-long opaque for md.
    push_opaque_and_key(out, cmd);
    finish_line(out);
    if cmd.has(b'q') && code == b"HD" {
        out.truncate(start);
    }
}

// ---------------------------------------------------------------------------
// ma

fn marith(ctx: &Ctx<'_>, cmd: &MetaCommand<'_>, out: &mut Vec<u8>) {
    let key = cmd.key();
    let now = ctx.cache.clock().now();
    let incr = !matches!(cmd.mode, Some(b'D' | b'-'));
    let new_ttl = cmd.ttl.map(|t| expiry(ctx, t));
    let vivify = cmd.vivify.map(|t| expiry(ctx, t));
    let start = out.len();

    let req = Arith {
        incr,
        delta: cmd.delta,
        cas: cmd.cas.unwrap_or(0),
        // Created without expiry: the `N` token sets it in flag order.
        autovivify: vivify.map(|_| (cmd.initial, Expiry::Never)),
        new_expiry: None,
    };
    let done = ctx
        .cache
        .arith_edit(key, &req, cmd.new_cas, |value, it, created| {
            let digits = itoa::Buffer::new().format(value).as_bytes().to_vec();
            let item_cas = it.cas;
            let mut exp = if created { Expiry::Never } else { it.expiry };
            let mut exp_set = false;
            let mut opaque_error = false;

            if cmd.has(b'v') {
                out.extend_from_slice(b"VA ");
                push_u64(out, digits.len() as u64);
            } else {
                out.extend_from_slice(b"HD");
            }
            for tok in cmd.tokens() {
                match tok.first() {
                    Some(b'c') => push_flag_u64(out, b'c', item_cas),
                    Some(b't') => push_ttl(out, exp, now),
                    Some(b'T') => {
                        if let Some(e) = new_ttl {
                            exp = e;
                            exp_set = true;
                        }
                    }
                    Some(b'N') => {
                        if let (true, Some(e)) = (created, vivify) {
                            exp = e;
                            exp_set = true;
                        }
                    }
                    Some(b'O') => {
                        if tok.len() > meta::MAX_OPAQUE {
                            opaque_error = true;
                            break;
                        }
                        out.push(b' ');
                        out.extend_from_slice(tok);
                    }
                    Some(b'k') => push_key(out, key, cmd.base64),
                    _ => {}
                }
            }
            if cmd.has(b'v') {
                finish_line(out);
                out.extend_from_slice(&digits);
            }
            finish_line(out);
            let edit = Edit {
                expiry: exp_set.then_some(exp),
                ..Edit::default()
            };
            ((created, opaque_error), edit)
        });
    let (created, opaque_error) = match done {
        Ok(done) => done,
        Err((other, existed)) => {
            let code: &[u8] = match other {
                ArithOutcome::NotFound => {
                    bump(if incr {
                        &ctx.stats.incr_misses
                    } else {
                        &ctx.stats.decr_misses
                    });
                    b"NF"
                }
                ArithOutcome::Exists => b"EX",
                ArithOutcome::NonNumeric => {
                    out.extend_from_slice(
                        b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
                    );
                    return;
                }
                _ => {
                    out.extend_from_slice(if existed {
                        &b"SERVER_ERROR out of memory\r\n"[..]
                    } else {
                        &b"SERVER_ERROR Out of memory allocating new item\r\n"[..]
                    });
                    return;
                }
            };
            out.extend_from_slice(code);
            if !push_opaque_and_key(out, cmd) {
                out.truncate(start);
                out.extend_from_slice(MetaErrorKind::OpaqueTooLong.line());
                return;
            }
            finish_line(out);
            return;
        }
    };
    if !created {
        bump(if incr {
            &ctx.stats.incr_hits
        } else {
            &ctx.stats.decr_hits
        });
    }
    if opaque_error {
        out.truncate(start);
        out.extend_from_slice(MetaErrorKind::OpaqueTooLong.line());
    } else if cmd.has(b'q') && !created {
        out.truncate(start);
    }
}

// ---------------------------------------------------------------------------
// me

fn mdebug(ctx: &Ctx<'_>, cmd: &MetaCommand<'_>, out: &mut Vec<u8>) {
    bump(&ctx.stats.cmd_meta);
    let key = cmd.key();
    let now = ctx.cache.clock().now();
    let cas_enabled = ctx.settings.engine.cas_enabled;
    let size = ctx.cache.peek(key, |it| {
        let it = it?;
        out.extend_from_slice(b"ME ");
        if cmd.base64 {
            base64_encode(it.key, out);
        } else {
            out.extend_from_slice(it.key);
        }
        // memcached prints `now - exptime` as a signed number (negative while alive).
        out.extend_from_slice(b" exp=");
        match it.expiry {
            Expiry::Never => out.extend_from_slice(b"-1"),
            e => push_i64(out, i64::from(now.wrapping_sub(exptime_num(e)) as i32)),
        }
        out.extend_from_slice(b" la=");
        push_u64(out, u64::from(now.saturating_sub(it.last_access)));
        out.extend_from_slice(b" cas=");
        push_u64(out, it.cas);
        out.extend_from_slice(if it.fetched {
            &b" fetch=yes"[..]
        } else {
            &b" fetch=no"[..]
        });
        // `me` reports memcached's figures, so tools reading it see what they
        // would see on memcached.
        Some(item::memcached_size(
            it.key.len(),
            it.value.len(),
            it.flags,
            cas_enabled,
        ))
    });
    let Some(size) = size else {
        out.extend_from_slice(b"EN\r\n");
        return;
    };
    let (factor, chunk_max) = (
        ctx.settings.engine.growth_factor,
        ctx.settings.engine.slab_chunk_max,
    );
    out.extend_from_slice(b" cls=");
    push_u64(out, u64::from(memcached_class(size, factor, chunk_max)));
    out.extend_from_slice(b" size=");
    push_u64(out, size as u64);
    finish_line(out);
}

/// The memcached slab class (`slabs_clsid`) for an item of `size` bytes with
/// default `-n 48`, growth `factor` and `slab_chunk_max`: classes start at
/// 96 bytes, grow by `factor` rounded up to 8, and the last one is the
/// largest chunk; bigger items are chunked into the last class.
fn memcached_class(size: usize, factor: f64, chunk_max: usize) -> u32 {
    let factor = if factor > 1.0 { factor } else { 1.25 };
    let mut class = 1u32;
    let mut chunk = 96usize;
    // memcached stops before MAX_NUMBER_OF_SLAB_CLASSES (64).
    while class < 63 && (chunk as f64) < chunk_max as f64 / factor {
        chunk = chunk.next_multiple_of(8);
        if size <= chunk {
            return class;
        }
        class += 1;
        chunk = (chunk as f64 * factor) as usize;
    }
    class
}

// The conversation table of tests/it/meta.rs, replayed in process by the tests below.
#[cfg(test)]
#[path = "../tests/it/meta_script/mod.rs"]
#[allow(dead_code)]
mod meta_script;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    use crate::testing::{Conn, Rig};

    use super::meta_script as script;

    /// A script's connection: the rig's, and the replies not read yet.
    struct RigConn<'a> {
        rig: &'a Rig,
        conn: Conn,
        out: Vec<u8>,
    }

    impl script::Conn for RigConn<'_> {
        fn send(&mut self, bytes: &[u8]) {
            let mut out = self.rig.send(&mut self.conn, bytes);
            self.out.append(&mut out);
        }

        fn recv(&mut self) -> Option<Vec<u8>> {
            let out = std::mem::take(&mut self.out);
            (!out.is_empty()).then_some(out)
        }

        fn wait(&mut self, secs: u64) {
            self.rig
                .cache
                .clock()
                .advance(std::time::Duration::from_secs(secs));
        }
    }

    #[test]
    fn case_table_in_process() {
        let rig = Rig::new();
        let cases = script::parse(script::CASES);
        let failures = script::run_all(&cases, true, &mut || {
            Box::new(RigConn {
                rig: &rig,
                conn: Conn::default(),
                out: Vec::new(),
            })
        });
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    fn count(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    #[test]
    fn counters() {
        let rig = Rig::new();
        let mut c = Conn::default();
        let s = &rig.stats;
        assert_eq!(rig.send(&mut c, b"mg a v\r\n"), b"EN\r\n");
        assert_eq!((count(&s.cmd_get), count(&s.get_misses)), (1, 1));
        assert_eq!(rig.send(&mut c, b"mg a N30 T60\r\n"), b"HD W\r\n");
        // A hit with T counts as a touch, not a get (vivified or not).
        assert_eq!((count(&s.cmd_touch), count(&s.touch_hits)), (1, 1));
        assert_eq!(rig.send(&mut c, b"mg a u\r\n"), b"HD Z\r\n");
        assert_eq!((count(&s.cmd_get), count(&s.get_hits)), (2, 1));
        assert_eq!(rig.send(&mut c, b"ms a 1 C999999\r\nx\r\n"), b"EX\r\n");
        assert_eq!((count(&s.cmd_set), count(&s.cas_badval)), (1, 1));
        assert_eq!(rig.send(&mut c, b"ms b 1 C1\r\nx\r\n"), b"NF\r\n");
        assert_eq!(count(&s.cas_misses), 1);
        assert_eq!(
            rig.send(&mut c, b"ms a 1 zz\r\nx\r\n"),
            b"CLIENT_ERROR invalid flag\r\n"
        );
        assert_eq!(count(&s.cmd_set), 2);
        assert_eq!(rig.send(&mut c, b"md a I\r\nmd b\r\n"), b"HD\r\nNF\r\n");
        assert_eq!((count(&s.delete_hits), count(&s.delete_misses)), (0, 1));
        // memcached 1.6.45: `md x` counts as a delete hit, `md I x` does not.
        assert_eq!(
            rig.send(&mut c, b"ms xd 1\r\nx\r\nmd xd x\r\nmd xd I x\r\n"),
            b"HD\r\nHD\r\nHD\r\n"
        );
        assert_eq!((count(&s.delete_hits), count(&s.delete_misses)), (1, 1));
        assert_eq!(rig.send(&mut c, b"ma n\r\nma n MD\r\n"), b"NF\r\nNF\r\n");
        assert_eq!((count(&s.incr_misses), count(&s.decr_misses)), (1, 1));
        assert_eq!(rig.send(&mut c, b"ma n N0\r\nma n\r\n"), b"HD\r\nHD\r\n");
        assert_eq!(count(&s.incr_hits), 1);
        let me = rig.send(&mut c, b"me n\r\nme x\r\nmn\r\n");
        let me = String::from_utf8_lossy(&me);
        assert!(me.starts_with("ME n exp=-1 la=0 cas="), "{me}");
        assert!(
            me.ends_with(" fetch=no cls=1 size=61\r\nEN\r\nMN\r\n"),
            "{me}"
        );
        assert_eq!(count(&s.cmd_meta), 2);
        let big = format!("ms big {}\r\n", 2 << 20);
        assert_eq!(
            rig.send(&mut c, big.as_bytes()),
            b"SERVER_ERROR object too large for cache\r\n"
        );
        assert_eq!(count(&s.store_too_large), 1);
    }

    #[test]
    fn set_waits_for_the_whole_data_block() {
        let rig = Rig::new();
        let ctx = rig.ctx();
        let mut out = Vec::new();
        assert_eq!(
            handle(&ctx, b"ms a 5 T0", b"hel", &mut out),
            MetaStep::NeedMore
        );
        assert_eq!(
            handle(&ctx, b"ms a 5 T0", b"hello\r", &mut out),
            MetaStep::NeedMore
        );
        assert!(out.is_empty(), "nothing written while waiting");
        assert_eq!(
            handle(&ctx, b"ms a 5 T0", b"hello\r\nmn\r\n", &mut out),
            MetaStep::Done { consumed: 7 }
        );
        assert_eq!(out, b"HD\r\n");
        out.clear();
        // A refused line swallows the data block it announced.
        assert_eq!(
            handle(&ctx, b"ms a 5 zz", b"hel", &mut out),
            MetaStep::Swallow {
                consumed: 3,
                remaining: 4
            }
        );
        assert_eq!(out, b"CLIENT_ERROR invalid flag\r\n");
        out.clear();
        // A format error before the length leaves the data alone.
        assert_eq!(
            handle(&ctx, b"ms a x", b"hello\r\n", &mut out),
            MetaStep::Done { consumed: 0 }
        );
    }

    #[test]
    fn memcached_sizes_and_classes() {
        // Checked against memcached 1.6.18 `me` output.
        assert_eq!(item::memcached_size(2, 3, 5, true), 68);
        assert_eq!(item::memcached_size(2, 3, 0, true), 64);
        assert_eq!(memcached_class(68, 1.25, 512 << 10), 1);
        assert_eq!(memcached_class(96, 1.25, 512 << 10), 1);
        assert_eq!(memcached_class(97, 1.25, 512 << 10), 2);
        assert_eq!(memcached_class(121, 1.25, 512 << 10), 3);
        // memcached -vv: class 39 is the 512 KB chunk class, 38 is 394840.
        assert_eq!(memcached_class(394_840, 1.25, 512 << 10), 38);
        assert_eq!(memcached_class(394_841, 1.25, 512 << 10), 39);
        assert_eq!(memcached_class(1 << 20, 1.25, 512 << 10), 39);
    }

    #[test]
    fn discard_counts_what_is_there() {
        assert_eq!(discard(0, 10), MetaStep::Done { consumed: 0 });
        assert_eq!(discard(4, 10), MetaStep::Done { consumed: 4 });
        assert_eq!(
            discard(10, 4),
            MetaStep::Swallow {
                consumed: 4,
                remaining: 6
            }
        );
    }

    #[test]
    fn ttl_printing() {
        let mut out = Vec::new();
        push_ttl(&mut out, Expiry::Never, 100);
        push_ttl(&mut out, Expiry::At(130), 100);
        push_ttl(&mut out, Expiry::Expired, 95);
        assert_eq!(out, b" t-1 t30 t4294967202");
    }

    #[test]
    fn keys_in_replies() {
        let mut out = Vec::new();
        push_key(&mut out, b"a", true);
        push_key(&mut out, b"ab", false);
        assert_eq!(out, b" kYQ== b kab");
    }
}
