//! One client connection: its socket, read and write buffers and protocol
//! handler, and the read → parse → write cycle a worker runs when the socket
//! is ready.
//!
//! The shape follows memcached 1.6's connection state machine (`drive_machine`):
//! read what is available, run every complete request in the buffer
//! (pipelining), answer them with one write, yield after `-R` requests so one
//! busy client cannot starve the others, and stop reading from a client that
//! does not read its replies. Buffers come from a small per-worker pool and go
//! back to it when the connection is idle, so thousands of idle connections
//! cost almost nothing (memcached's `rbuf` release on idle does the same); a
//! connection waiting for the rest of a short request keeps only its bytes.
//!
//! Memory per connection is bounded: output stops at `OUT_HIGH_WATER` plus
//! one reply (see `handler`), input at `max_request`, and buffers that grew
//! past the pooled size are freed as soon as the connection is idle.

use std::io::{self, ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use std::cell::RefCell;

use cachalot_engine::flash::fetch::Fetches;

use super::flash_io::FlashIo;
use super::flash_read::Submitted;
use super::uring::{NetRing, RingSocket};
use crate::handler::{out_full, Ctx, Handler, Step, OUT_HIGH_WATER};
use crate::session;
use crate::settings::Settings;
use crate::stats::{ConnEntry, ConnState, ThreadStats};
use crate::tls::TlsStream;

/// Size of a pooled buffer (memcached's READ_BUFFER_SIZE).
pub const BUF_SIZE: usize = 16 * 1024;
/// Output buffers that grew beyond this are freed instead of pooled.
const OUT_KEEP: usize = 64 * 1024;
/// Pooled buffers kept per worker and kind; beyond that they are freed. A
/// worker serves one connection at a time and takes buffers back when it is
/// idle, so a few suffice; the cap bounds what a burst leaves behind
/// (at most 16 x 64 KB + 16 x 16 KB per worker).
const POOL_MAX: usize = 16;
/// A connection waiting for the rest of a request at most this long gives
/// its pooled read buffer back and keeps a copy of just those bytes, so
/// thousands of slow senders (slowloris) do not pin 16 KB each.
const PARTIAL_KEEP: usize = 4 * 1024;

/// A TCP, TLS-over-TCP or unix-domain stream, or a TCP stream that the
/// worker's io_uring reads (`uring`).
pub enum Stream {
    Tcp(mio::net::TcpStream),
    Unix(mio::net::UnixStream),
    Tls(Box<TlsStream>),
    Ring(RingSocket),
}

impl Stream {
    /// TLS keeps bytes of its own on both sides (see `tls`).
    fn is_tls(&self) -> bool {
        matches!(self, Stream::Tls(_))
    }

    /// Encrypted output waits inside TLS for the socket.
    /// Output the stream holds that the socket has not taken: TLS records
    /// (counted as one byte), or a ring socket's queued sends.
    fn pending(&self) -> usize {
        match self {
            Stream::Tls(s) => usize::from(s.wants_write()),
            Stream::Ring(s) => s.pending(),
            _ => 0,
        }
    }

    pub fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Tls(s) => s.socket().as_raw_fd(),
            Stream::Ring(s) => s.fd(),
        }
    }

    /// The socket the poller watches.
    fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Stream::Tcp(s) => s,
            Stream::Unix(s) => s,
            Stream::Tls(s) => s.socket_mut(),
            Stream::Ring(s) => &mut s.tcp,
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
            // Its bytes are in the worker's ring: `fill` takes them with
            // `RingSocket::take`.
            Stream::Ring(_) => Err(ErrorKind::WouldBlock.into()),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
            Stream::Ring(s) => s.write(buf),
        }
    }
    /// Pushes out what TLS holds; sockets have nothing to flush.
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tls(s) => s.flush(),
            _ => Ok(()),
        }
    }
}

impl mio::event::Source for Stream {
    fn register(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        self.source().register(registry, token, interests)
    }
    fn reregister(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        interests: mio::Interest,
    ) -> io::Result<()> {
        self.source().reregister(registry, token, interests)
    }
    fn deregister(&mut self, registry: &mio::Registry) -> io::Result<()> {
        self.source().deregister(registry)
    }
}

/// Per-worker free lists of buffers.
#[derive(Default)]
pub struct BufPool {
    read: Vec<Vec<u8>>,
    write: Vec<Vec<u8>>,
}

impl BufPool {
    /// A zero-filled read buffer of `BUF_SIZE` bytes.
    fn take_read(&mut self) -> Vec<u8> {
        self.read.pop().unwrap_or_else(|| vec![0; BUF_SIZE])
    }
    fn give_read(&mut self, buf: Vec<u8>) {
        // Grown buffers are dropped: this is how a connection shrinks back
        // after one large request.
        if buf.len() == BUF_SIZE && self.read.len() < POOL_MAX {
            self.read.push(buf);
        }
    }
    fn take_write(&mut self) -> Vec<u8> {
        self.write
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(BUF_SIZE))
    }
    fn give_write(&mut self, mut buf: Vec<u8>) {
        if buf.capacity() <= OUT_KEEP && self.write.len() < POOL_MAX {
            buf.clear();
            self.write.push(buf);
        }
    }
}

/// What the worker should do with a connection after servicing it.
#[derive(Debug, PartialEq, Eq)]
pub enum Status {
    /// Wait for the next readiness event.
    Open,
    /// Has more buffered work: service again after the other ready ones.
    Yield,
    /// Close it now.
    Close,
}

/// Everything a connection needs from its worker while being serviced.
pub struct Env<'a> {
    pub ctx: Ctx<'a>,
    pub pool: &'a mut BufPool,
    /// The largest buffered request allowed (see `max_request`).
    pub max_request: usize,
    /// Clock reading for last-command times.
    pub now: u32,
    /// The readiness event said the peer closed its side (EPOLLRDHUP): read
    /// until EOF instead of trusting a short read to mean "drained".
    pub peer_closed: bool,
    /// With the flash tier: how this worker reads it, and the connection's
    /// slot (where the reads come back to).
    pub flash: Option<&'a mut FlashIo>,
    pub slot: usize,
    /// The worker's network ring, which reads `Stream::Ring` sockets.
    pub net: Option<&'a mut NetRing>,
}

/// The largest request a connection may buffer before it is cut off: one
/// value of `-I` plus its command line, or a long multi-get line.
pub fn max_request(settings: &Settings) -> usize {
    settings.engine.item_size_max + 2 * settings.max_line.max(1 << 20)
}

pub struct Conn {
    pub stream: Stream,
    pub entry: Arc<ConnEntry>,
    /// This worker's number for the connection, never reused: what a
    /// flash read's completion and the watcher list name it by. Its fd
    /// (`entry.id`, as `stats conns` shows it) and its slot both come back
    /// for the next connection once it closes.
    pub serial: u64,
    handler: Option<Box<dyn Handler>>,
    /// Read buffer: bytes `rpos..rend` are received but not yet consumed.
    /// Empty (no allocation) while the connection is idle.
    rbuf: Vec<u8>,
    rpos: usize,
    rend: usize,
    /// Output: bytes `wpos..` are not yet written. `wpos` is 0 outside
    /// `flush`, so handlers see only unsent output (see `handler::out_full`).
    wbuf: Vec<u8>,
    wpos: usize,
    /// The peer closed its side; finish what was received, then close.
    eof: bool,
    /// The handler asked to close after the output is flushed.
    closing: bool,
    /// In the worker's queue of connections that yielded (`-R`).
    pub queued: bool,
    /// Flash reads its parked request wants and has got (`flash::fetch`),
    /// which its handler sees as `Ctx::reads`.
    fetches: RefCell<Fetches>,
    /// Flash reads still in flight: while any are, the request waits.
    waiting: usize,
}

enum Processed {
    /// Every complete request was run; more bytes are needed.
    NeedMore,
    /// `-R` requests were run and input remains.
    Budget,
    /// Enough output is pending that it must be written first.
    OutputFull,
    /// The handler asked to close.
    Closing,
    /// The next request waits for flash reads.
    Parked,
}

enum Filled {
    Data,
    /// Data, and the read came back short: the socket's queue is empty, so
    /// another read would only return EAGAIN (epoll(7): for stream sockets a
    /// short read means the edge was consumed; new data brings a new event).
    Drained,
    WouldBlock,
    Eof,
    /// The request does not fit in `max_request`.
    TooBig,
}

impl Conn {
    pub fn new(stream: Stream, entry: Arc<ConnEntry>, serial: u64) -> Conn {
        Conn {
            stream,
            entry,
            serial,
            handler: None,
            rbuf: Vec::new(),
            rpos: 0,
            rend: 0,
            wbuf: Vec::new(),
            wpos: 0,
            eof: false,
            closing: false,
            queued: false,
            fetches: RefCell::default(),
            waiting: 0,
        }
    }

    /// A flash read of the parked request is done; true when it was the
    /// last one (service the connection again).
    pub fn complete(&mut self, key: Box<[u8]>, image: Option<Box<[u8]>>) -> bool {
        self.fetches.get_mut().done.push((key, image));
        self.waiting = self.waiting.saturating_sub(1);
        self.waiting == 0
    }

    /// Bytes of output not yet written (at least 1 while TLS holds some).
    fn pending_out(&self) -> usize {
        self.wbuf.len() - self.wpos + self.stream.pending()
    }

    /// Whether replies are waiting for the socket to drain (or the
    /// connection is closing once they have).
    pub fn has_pending_output(&self) -> bool {
        self.pending_out() > 0 || self.closing
    }

    /// Whether this is a `watch` connection (its worker services it on a
    /// timer too).
    pub fn is_watcher(&self) -> bool {
        self.handler.as_ref().is_some_and(|h| h.watching())
    }

    /// Whether it stopped reading until its replies drain (`cycle`).
    pub fn reading_paused(&self) -> bool {
        self.pending_out() >= OUT_HIGH_WATER
    }

    /// Whether it waits for its socket to take output: replies it could not
    /// write yet, a close after them, or reading stopped (the network ring
    /// runs it again when a send completes).
    pub fn waits_for_socket(&self) -> bool {
        self.wbuf.len() > self.wpos || self.closing || self.reading_paused()
    }

    /// Whether the connection waits for a command (for `-o idle_timeout`).
    pub fn is_idle(&self) -> bool {
        self.rpos == self.rend && self.pending_out() == 0
    }

    /// Run the read → process → write cycle until the socket would block,
    /// the request budget is spent, or the connection must close.
    pub fn service(&mut self, env: &mut Env<'_>) -> Status {
        let status = self.cycle(env);
        if status != Status::Close {
            self.release_idle_buffers(env.pool);
        }
        status
    }

    fn cycle(&mut self, env: &mut Env<'_>) -> Status {
        let mut reqs = 0usize;
        let mut drained = false;
        if let Some(h) = self.handler.as_mut().filter(|h| h.watching()) {
            // A watcher's log lines, as much as the output has room for.
            let room = OUT_HIGH_WATER.saturating_sub(self.wbuf.len() - self.wpos);
            h.watch_lines(&mut self.wbuf, room);
        }
        if self.waiting > 0 {
            // Parked on flash reads: only replies already made go out.
            if self.pending_out() > 0 && self.flush(env.ctx.stats).is_err() {
                return Status::Close;
            }
            return Status::Open;
        }
        loop {
            // Replies are batched: write only when closing, when a lot is
            // pending, or (below) when the socket has nothing more to read.
            if (self.closing || self.pending_out() >= OUT_HIGH_WATER)
                && self.flush(env.ctx.stats).is_err()
            {
                return Status::Close;
            }
            if self.closing {
                return self.close_when_flushed();
            }
            if self.pending_out() >= OUT_HIGH_WATER {
                // A slow reader: stop reading and parsing until the socket
                // drains (a writable event brings us back).
                self.entry.set_state(ConnState::MWrite);
                return Status::Open;
            }
            match self.process(env, &mut reqs) {
                Processed::NeedMore => {}
                Processed::OutputFull | Processed::Closing => continue,
                Processed::Budget => return Status::Yield,
                Processed::Parked => {
                    if self.pending_out() > 0 && self.flush(env.ctx.stats).is_err() {
                        return Status::Close;
                    }
                    return Status::Open;
                }
            }
            if self.eof {
                // Everything complete was answered; the rest can never complete.
                self.closing = true;
                continue;
            }
            let filled = if drained {
                Filled::WouldBlock
            } else {
                self.fill(env)
            };
            match filled {
                Filled::Data => continue,
                Filled::Drained => {
                    drained = true;
                    continue;
                }
                Filled::Eof => {
                    self.eof = true;
                    continue;
                }
                Filled::TooBig => {
                    if env.ctx.settings.verbose > 0 {
                        let (id, max) = (self.entry.id, env.max_request);
                        crate::log::emit(
                            env.ctx.settings.log_format,
                            crate::log::Level::Warn,
                            "request_too_large",
                            format_args!("<{id} request larger than {max} bytes, closing"),
                            &[("fd", &id), ("max_bytes", &max), ("peer", &self.entry.addr)],
                        );
                    }
                    return Status::Close;
                }
                Filled::WouldBlock => {
                    if self.pending_out() > 0 && self.flush(env.ctx.stats).is_err() {
                        return Status::Close;
                    }
                    self.set_wait_state();
                    return Status::Open;
                }
            }
        }
    }

    fn close_when_flushed(&mut self) -> Status {
        if self.pending_out() == 0 {
            Status::Close
        } else {
            self.entry.set_state(ConnState::Closing);
            Status::Open
        }
    }

    /// The state `stats conns` shows while we wait for the socket.
    fn set_wait_state(&self) {
        let state = if self.pending_out() > 0 {
            ConnState::MWrite
        } else if self.rpos == self.rend {
            ConnState::Read
        } else {
            // A command line is buffered but its data block is incomplete
            // (text: a "\n" was seen; binary: a whole 24-byte header is in).
            let pending = &self.rbuf[self.rpos..self.rend];
            let binary = pending.first() == Some(&session::BINARY_REQUEST_MAGIC);
            if (binary && pending.len() >= 24) || (!binary && pending.contains(&b'\n')) {
                ConnState::NRead
            } else {
                ConnState::Read
            }
        };
        self.entry.set_state(state);
    }

    /// Run complete requests from the read buffer through the handler.
    fn process(&mut self, env: &mut Env<'_>, reqs: &mut usize) -> Processed {
        // A metadump goes on once its output drains, though nothing
        // follows it in the input (`Handler::busy`).
        let busy = self.handler.as_ref().is_some_and(|h| h.busy());
        if self.rpos == self.rend && !busy {
            return Processed::NeedMore;
        }
        if self.wbuf.capacity() == 0 {
            self.wbuf = env.pool.take_write();
        }
        self.entry.set_state(ConnState::ParseCmd);
        let handler = self.handler.get_or_insert_with(|| {
            session::new_handler(env.ctx.settings.protocol, self.rbuf[self.rpos])
        });
        // A handler that parks sees the connection's flash reads: a GET of
        // an item on flash answers "parked" with the read it wants, which
        // the handler records there, instead of doing it.
        let parks = env.flash.is_some() && handler.parks();
        let mut result = Processed::NeedMore;
        let mut ran = false;
        while self.rpos < self.rend || handler.busy() {
            let input = &self.rbuf[self.rpos..self.rend];
            // The text handler enforces `-R` itself and counts the yield; a
            // rise of conn_yields during the step is how we learn it stopped
            // for that reason rather than at an incomplete request.
            let yields_before = env.ctx.stats.conn_yields.load(Ordering::Relaxed);
            let wbuf = &mut self.wbuf;
            let ctx = Ctx {
                reads: parks.then_some(&self.fetches),
                ..env.ctx
            };
            let step = handler.step(&ctx, input, wbuf);
            if !matches!(step, Step::Parked(_)) {
                // What was read for a request that is now answered.
                self.fetches.get_mut().clear();
            }
            match step {
                // A handler that consumes nothing must not spin forever.
                Step::Consumed(0) | Step::NeedMore => break,
                Step::Consumed(n) => {
                    self.rpos += n.min(input.len());
                    ran = true;
                    *reqs += 1;
                }
                Step::Close(n) => {
                    self.rpos += n.min(input.len());
                    ran = true;
                    self.closing = true;
                    result = Processed::Closing;
                    break;
                }
                Step::Blocked(n) => {
                    self.rpos += n.min(input.len());
                    ran |= n > 0;
                    // The handler stops only at the mark, where `cycle`
                    // flushes; anything else would spin.
                    debug_assert!(out_full(&self.wbuf));
                    result = Processed::OutputFull;
                    break;
                }
                Step::Parked(n) => {
                    self.rpos += n.min(input.len());
                    ran |= n > 0;
                    let fetches = self.fetches.get_mut();
                    let wanted = std::mem::take(&mut fetches.wanted);
                    self.waiting = 0;
                    if let Some(io) = env.flash.as_deref_mut() {
                        for want in wanted {
                            match io.submit(env.ctx.cache, want, env.slot, self.serial) {
                                Submitted::Queued => self.waiting += 1,
                                Submitted::Done(fetched) => fetches.done.push(fetched),
                                Submitted::Full(w) => {
                                    // Too many reads waiting: a miss.
                                    ThreadStats::bump(&env.ctx.stats.get_aborted_flash);
                                    fetches.done.push((w.key, None));
                                }
                            }
                        }
                    }
                    if self.waiting == 0 {
                        // Nothing in flight: run the request again now.
                        continue;
                    }
                    result = Processed::Parked;
                    break;
                }
            }
            if self.rpos < self.rend {
                if env.ctx.stats.conn_yields.load(Ordering::Relaxed) != yields_before {
                    result = Processed::Budget;
                    break;
                }
                if *reqs >= env.ctx.settings.reqs_per_event {
                    // A handler without its own budget: count the yield here.
                    ThreadStats::bump(&env.ctx.stats.conn_yields);
                    result = Processed::Budget;
                    break;
                }
                if out_full(&self.wbuf) {
                    result = Processed::OutputFull;
                    break;
                }
            }
        }
        if ran {
            self.entry.touch(env.now);
        }
        if self.rpos == self.rend {
            self.rpos = 0;
            self.rend = 0;
        }
        result
    }

    /// Read what the socket has into the read buffer, growing it only when a
    /// single incomplete request fills it.
    fn fill(&mut self, env: &mut Env<'_>) -> Filled {
        if self.rbuf.len() < BUF_SIZE {
            // Idle (empty) or holding a short partial request (see
            // `release_idle_buffers`): back to a full-size buffer.
            let mut buf = env.pool.take_read();
            buf[..self.rend - self.rpos].copy_from_slice(&self.rbuf[self.rpos..self.rend]);
            self.rend -= self.rpos;
            self.rpos = 0;
            self.rbuf = buf;
        }
        if self.rend == self.rbuf.len() {
            if self.rpos > 0 {
                // Move the partial request to the front.
                self.rbuf.copy_within(self.rpos..self.rend, 0);
                self.rend -= self.rpos;
                self.rpos = 0;
            } else {
                // One request larger than the buffer: grow (doubling), capped.
                if self.rbuf.len() >= env.max_request {
                    return Filled::TooBig;
                }
                let new_len = (self.rbuf.len() * 2).min(env.max_request);
                self.rbuf.resize(new_len, 0);
            }
        }
        loop {
            let into = &mut self.rbuf[self.rend..];
            let read = match (&mut self.stream, env.net.as_deref_mut()) {
                (Stream::Ring(s), Some(net)) => s.take(net, into),
                (stream, _) => stream.read(into),
            };
            match read {
                Ok(0) => return Filled::Eof,
                Ok(n) => {
                    let space = self.rbuf.len() - self.rend;
                    self.rend += n;
                    env.ctx
                        .stats
                        .bytes_read
                        .fetch_add(n as u64, Ordering::Relaxed);
                    // TLS may hold decrypted bytes the socket no longer
                    // has, or the reverse: read on until WouldBlock.
                    if n < space && !env.peer_closed && !self.stream.is_tls() {
                        return Filled::Drained;
                    }
                    return Filled::Data;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Filled::WouldBlock,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // ECONNRESET and friends: nothing more will come.
                Err(_) => return Filled::Eof,
            }
        }
    }

    /// Write pending output; `Err` means the peer is gone.
    fn flush(&mut self, stats: &ThreadStats) -> io::Result<()> {
        while self.wpos < self.wbuf.len() {
            match self.stream.write(&self.wbuf[self.wpos..]) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.wpos += n;
                    stats.bytes_written.fetch_add(n as u64, Ordering::Relaxed);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        self.stream.flush()?;
        // Keep only the unsent tail, at the front: handlers measure `wbuf`
        // as the unsent output, and the buffer does not creep.
        self.wbuf.drain(..self.wpos);
        self.wpos = 0;
        Ok(())
    }

    /// Hand empty buffers back to the pool while waiting for the client.
    fn release_idle_buffers(&mut self, pool: &mut BufPool) {
        let partial = self.rend - self.rpos;
        if partial == 0 && !self.rbuf.is_empty() {
            pool.give_read(std::mem::take(&mut self.rbuf));
            self.rpos = 0;
            self.rend = 0;
        } else if partial <= PARTIAL_KEEP && self.rbuf.len() > partial {
            let kept = self.rbuf[self.rpos..self.rend].to_vec();
            pool.give_read(std::mem::replace(&mut self.rbuf, kept));
            self.rpos = 0;
            self.rend = partial;
        }
        // Its own buffer once empty, even while the stream still holds
        // output (TLS records, a ring socket's sends).
        if self.wpos == self.wbuf.len() && self.wbuf.capacity() > 0 {
            pool.give_write(std::mem::take(&mut self.wbuf));
            self.wpos = 0;
        }
    }

    /// Best-effort final write at shutdown (no waiting).
    pub fn flush_now(&mut self, stats: &ThreadStats) {
        let _ = self.flush(stats);
    }
}
