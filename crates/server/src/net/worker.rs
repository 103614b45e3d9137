//! A worker thread: one mio event loop serving the connections the acceptor
//! hands it (memcached's `worker_libevent` threads, with the connection queue
//! plus eventfd wake-up replaced by a mutex-protected inbox and a mio Waker).
//!
//! Sockets are registered once for both readable and writable edges, so a
//! connection never needs a re-registration syscall when it switches from
//! reading to waiting for a slow client to drain its replies.

use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cachalot_engine::Cache;
use mio::{Events, Interest, Poll, Token, Waker};
use parking_lot::Mutex;

use super::conn::{max_request, BufPool, Conn, Env, Status, Stream};
use super::flash_io::{FlashIo, Inbox, Readers};
use super::ring::Ring;
use super::uring::{self, Completion, NetRing, RingSocket};
use crate::handler::Ctx;
use crate::log::{self, Level};
use crate::settings::Settings;
use crate::stats::{ConnEntry, ConnState, NetPath, Shared, ThreadStats};

/// The waker's token; connection tokens are slot indexes below it.
pub const WAKE_TOKEN: Token = Token(usize::MAX);
/// The token of the worker's io_uring completions.
const RING_TOKEN: Token = Token(usize::MAX - 1);

/// A freshly accepted connection on its way to a worker.
pub struct NewConn {
    pub stream: Stream,
    /// memcached's `conn_to_str` of the peer.
    pub addr: String,
    /// The listener's name.
    pub listen_addr: String,
}

/// The acceptor's handle on a worker.
pub struct WorkerHandle {
    pub inbox: Arc<Mutex<Vec<NewConn>>>,
    pub waker: Arc<Waker>,
}

impl WorkerHandle {
    /// Queue a connection and wake the worker.
    pub fn send(&self, conn: NewConn) {
        self.inbox.lock().push(conn);
        let _ = self.waker.wake();
    }
}

pub struct Worker {
    poll: Poll,
    /// Our own reference to the waker: if only the acceptor held it, its
    /// exit would close the eventfd and could drop a pending wake-up.
    _waker: Arc<Waker>,
    inbox: Arc<Mutex<Vec<NewConn>>>,
    cache: Arc<Cache>,
    settings: Arc<Settings>,
    shared: Arc<Shared>,
    stats: Arc<ThreadStats>,
    /// Open client connections (shared with the acceptor for `-c`).
    clients: Arc<std::sync::atomic::AtomicUsize>,
    /// Connection slots; a token is an index.
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    pool: BufPool,
    /// Connections that yielded with work left (`-R`).
    ready: VecDeque<usize>,
    /// `watch` connections (slot, serial): serviced every `watchers::POLL_INTERVAL`
    /// at least, to send the lines logged meanwhile.
    watchers: Vec<(usize, u64)>,
    /// With the flash tier: how this worker reads it.
    flash: Option<FlashIo>,
    /// The network ring (`-o net_io=uring`), made on the worker's own
    /// thread when it starts: its plain TCP connections are read through
    /// it, and it waits for mio's poll too.
    net: Option<NetRing>,
    /// Connections whose `recv` found no free buffer: armed again once one
    /// is back.
    starved: Vec<usize>,
    /// The last connection's serial (`Conn::serial`; a ring connection's
    /// generation is its low bits, `uring::generation_of`).
    serials: u64,
}

impl Worker {
    /// Create a worker and the handle the acceptor uses to feed it. With
    /// the flash tier, its reads go through its own io_uring if `uring`
    /// and the kernel allow, else through `readers`.
    pub fn new(
        cache: Arc<Cache>,
        settings: Arc<Settings>,
        shared: Arc<Shared>,
        stats: Arc<ThreadStats>,
        clients: Arc<std::sync::atomic::AtomicUsize>,
        readers: Option<Arc<Readers>>,
        uring: bool,
    ) -> std::io::Result<(Worker, WorkerHandle)> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKE_TOKEN)?);
        let ring = match cache.has_flash() && uring {
            true => Ring::new(&cache)
                .and_then(|r| r.register(poll.registry(), RING_TOKEN).map(|()| r))
                .map_err(|e| {
                    if settings.verbose > 0 {
                        eprintln!("io_uring unavailable ({e}); flash reads use threads or block");
                    }
                })
                .ok(),
            false => None,
        };
        let flash = match (ring, readers) {
            (Some(ring), _) => Some(FlashIo::Ring(Box::new(ring))),
            (None, Some(r)) => {
                let inbox = Arc::new(Inbox {
                    done: Mutex::new(Vec::new()),
                    waker: waker.clone(),
                });
                Some(FlashIo::Threads(r, inbox))
            }
            (None, None) => None,
        };
        let inbox = Arc::new(Mutex::new(Vec::new()));
        let handle = WorkerHandle {
            inbox: inbox.clone(),
            waker: waker.clone(),
        };
        Ok((
            Worker {
                poll,
                _waker: waker,
                inbox,
                cache,
                settings,
                shared,
                stats,
                clients,
                conns: Vec::new(),
                free: Vec::new(),
                pool: BufPool::default(),
                ready: VecDeque::new(),
                watchers: Vec::new(),
                flash,
                net: None,
                starved: Vec::new(),
                serials: 0,
            },
            handle,
        ))
    }

    /// Serve until the shared shutdown flag is set, then close everything.
    pub fn run(mut self) {
        if self.settings.net_uring {
            // The probe at start-up passed, so a refusal here is this
            // worker's alone (a memlock or ring limit reached): said once,
            // and shown by `stats settings` (`net_io mixed`).
            self.net = NetRing::new(self.poll.as_raw_fd())
                .map_err(|e| eprintln!("a worker's io_uring was refused ({e}); it uses epoll"))
                .ok();
        }
        self.stats.set_net_path(match self.net {
            Some(_) => NetPath::Uring,
            None => NetPath::Epoll,
        });
        let mut events = Events::with_capacity(1024);
        let mut completions = Vec::new();
        let idle_timeout = self.settings.idle_timeout;
        let mut last_idle_check = Instant::now();
        // Trace events this worker holds (`capture::HOLD`).
        let mut trace_held = false;
        loop {
            let timeout = if !self.ready.is_empty() {
                Some(Duration::ZERO)
            } else if trace_held {
                Some(crate::capture::HOLD)
            } else if !self.watchers.is_empty() {
                Some(crate::watchers::POLL_INTERVAL)
            } else if idle_timeout > 0 {
                Some(Duration::from_secs(1))
            } else {
                None
            };
            if let Some(net) = &mut self.net {
                net.arm_poller();
                if let Err(e) = net.wait(timeout) {
                    eprintln!("worker ring wait failed: {e}");
                    break;
                }
                net.completions(&mut completions);
            } else if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    eprintln!("worker poll failed: {e}");
                    break;
                }
            }
            if self.shared.shutdown.load(Ordering::Acquire) {
                break;
            }
            if self.net.is_none() {
                self.handle_events(&events);
            }
            for c in completions.drain(..) {
                match c {
                    Completion::Poller => {
                        if self.poll.poll(&mut events, Some(Duration::ZERO)).is_ok() {
                            self.handle_events(&events);
                        }
                    }
                    Completion::Recv {
                        slot,
                        gen,
                        res,
                        buf,
                        more,
                    } => self.received(slot, gen, res, buf, more),
                    Completion::Sent { slot, gen, res } => self.sent(slot, gen, res),
                }
            }
            if !self.starved.is_empty() && self.net.as_ref().is_some_and(|n| n.has_free_buffers()) {
                for slot in std::mem::take(&mut self.starved) {
                    self.rearm(slot);
                }
            }
            for _ in 0..self.ready.len() {
                if let Some(slot) = self.ready.pop_front() {
                    if let Some(Some(c)) = self.conns.get_mut(slot) {
                        c.queued = false;
                    }
                    self.service(slot, false);
                }
            }
            // Watchers get their log lines whether or not they sent anything.
            for (slot, id) in std::mem::take(&mut self.watchers) {
                if matches!(self.conns.get(slot), Some(Some(c)) if c.serial == id) {
                    self.service(slot, false);
                }
            }
            if let Some(io) = &mut self.flash {
                io.flush();
            }
            // Trace events go to the writer in batches; a quiet worker
            // wakes to hand over what it holds.
            if let Some(c) = &self.shared.capture {
                trace_held = c.tick();
            }
            if idle_timeout > 0 && last_idle_check.elapsed() >= Duration::from_secs(1) {
                last_idle_check = Instant::now();
                self.close_idle(idle_timeout);
            }
        }
        self.close_all();
        if let Some(c) = &self.shared.capture {
            c.flush_local();
        }
    }

    /// mio's readiness events: the waker, the flash ring, and the
    /// connections mio watches (all of them without the network ring).
    fn handle_events(&mut self, events: &Events) {
        for event in events.iter() {
            match event.token() {
                WAKE_TOKEN => {
                    self.accept_new();
                    self.take_flash_reads();
                }
                RING_TOKEN => self.take_flash_reads(),
                Token(slot) => {
                    // Every reply we write is later followed by a
                    // writable edge; unless output is waiting, such an
                    // event has nothing for us (saves a read syscall).
                    let only_writable = event.is_writable()
                        && !event.is_readable()
                        && !event.is_read_closed()
                        && !event.is_error();
                    let waiting = matches!(
                        self.conns.get(slot),
                        Some(Some(c)) if c.has_pending_output()
                    );
                    if !only_writable || waiting {
                        self.service(slot, event.is_read_closed() || event.is_error());
                    }
                }
            }
        }
    }

    /// The network ring and the socket of the ring connection in `slot`,
    /// if it is one (of generation `gen`, where given: a completion for a
    /// closed connection must not reach the next one in its slot), with
    /// whether the connection waits for its socket and has stopped reading.
    fn ring_conn(
        &mut self,
        slot: usize,
        gen: Option<u32>,
    ) -> Option<(&mut NetRing, &mut RingSocket, bool, bool)> {
        let net = self.net.as_mut()?;
        let c = self.conns.get_mut(slot)?.as_mut()?;
        let (waits, paused) = (c.waits_for_socket(), c.reading_paused());
        match &mut c.stream {
            Stream::Ring(s) if gen.is_none_or(|g| g == s.gen) => Some((net, s, waits, paused)),
            _ => None,
        }
    }

    /// A `recv` completed: its bytes (or the end of the stream) go to the
    /// connection, which runs; a stale one only gives its buffer back.
    fn received(&mut self, slot: usize, gen: u32, res: i32, buf: Option<u16>, more: bool) {
        let Some((net, s, _, _)) = self.ring_conn(slot, Some(gen)) else {
            if let (Some(net), Some(b)) = (self.net.as_mut(), buf) {
                net.give_back(b);
            }
            return;
        };
        s.received(net, res, buf, more);
        if res == -libc::ENOBUFS || (res == -libc::EAGAIN && buf.is_none()) {
            self.starved.push(slot);
            return;
        }
        if res == -libc::ECANCELED {
            // Cancelled when the connection stopped reading; it may have
            // started again since (its `rearm` found the receive still
            // armed), so arm it again if it wants one.
            self.rearm(slot);
        } else {
            self.service(slot, false);
        }
    }

    /// A ring connection's send completed: the connection runs again if
    /// it waited for the socket (replies it could not queue, a close after
    /// them, reading stopped) or the socket broke.
    fn sent(&mut self, slot: usize, gen: u32, res: i32) {
        let Some((net, s, waited, _)) = self.ring_conn(slot, Some(gen)) else {
            return;
        };
        if s.sent(net, slot, res) || waited {
            self.service(slot, false);
        }
    }

    /// After a ring connection ran: send what it wrote, keep no provided
    /// buffer, and keep receiving unless it stopped reading.
    fn rearm(&mut self, slot: usize) {
        let Some((net, s, _, paused)) = self.ring_conn(slot, None) else {
            return;
        };
        s.send_queued(net, slot);
        s.spill_held(net);
        s.arm(net, slot, !paused);
    }

    fn accept_new(&mut self) {
        let new: Vec<NewConn> = std::mem::take(&mut *self.inbox.lock());
        let now = self.cache.clock().now();
        for nc in new {
            let mut stream = nc.stream;
            let fd = stream.as_raw_fd();
            self.serials += 1;
            let serial = self.serials;
            let slot = match self.free.pop() {
                Some(s) => s,
                None => {
                    self.conns.push(None);
                    self.conns.len() - 1
                }
            };
            if let (Some(_), Stream::Tcp(_)) = (&self.net, &stream) {
                // Read through the ring rather than watched by mio.
                if let Stream::Tcp(tcp) = stream {
                    stream = Stream::Ring(RingSocket::new(tcp, uring::generation_of(serial)));
                }
            } else if let Err(e) = self.poll.registry().register(
                &mut stream,
                Token(slot),
                Interest::READABLE | Interest::WRITABLE,
            ) {
                if self.settings.verbose > 0 {
                    eprintln!("failed to register connection: {e}");
                }
                self.free.push(slot);
                self.clients.fetch_sub(1, Ordering::AcqRel);
                continue;
            }
            let entry = Arc::new(ConnEntry::new(
                fd as u64,
                nc.addr,
                nc.listen_addr,
                ConnState::NewCmd,
                now,
            ));
            self.shared.register_conn(entry.clone());
            if self.shared.verbosity.load(Ordering::Relaxed) > 1 {
                // memcached's wording, period included or not.
                let kind = match self.settings.protocol {
                    crate::settings::ProtocolChoice::Auto => "auto-negotiating client connection",
                    crate::settings::ProtocolChoice::Ascii => "ascii client connection.",
                    crate::settings::ProtocolChoice::Binary => "binary client connection.",
                };
                log::emit(
                    self.settings.log_format,
                    Level::Info,
                    "conn_open",
                    format_args!("<{fd} new {kind}"),
                    &[
                        ("fd", &fd),
                        ("peer", &entry.addr),
                        ("listener", &entry.listen_addr),
                    ],
                );
            }
            self.conns[slot] = Some(Conn::new(stream, entry, serial));
            // Data may already be waiting; the registration's first edge
            // (or the ring's first receive) reports it.
            self.rearm(slot);
        }
    }

    /// Completed flash reads go to their connections; one whose reads are
    /// all in runs again (after this round's events).
    fn take_flash_reads(&mut self) {
        let Some(io) = &mut self.flash else {
            return;
        };
        let (conns, ready) = (&mut self.conns, &mut self.ready);
        io.completed(&self.cache, |d| {
            // The connection may have closed meanwhile, its slot reused.
            let Some(Some(c)) = conns.get_mut(d.slot) else {
                return;
            };
            if c.serial != d.conn {
                return;
            }
            if c.complete(d.key, d.image) && !c.queued {
                c.queued = true;
                ready.push_back(d.slot);
            }
        });
    }

    fn service(&mut self, slot: usize, peer_closed: bool) {
        let Some(Some(conn)) = self.conns.get_mut(slot) else {
            return; // closed earlier in this round
        };
        let mut env = Env {
            ctx: Ctx {
                cache: &self.cache,
                settings: &self.settings,
                shared: &self.shared,
                stats: &self.stats,
                conn_id: conn.entry.id,
                reads: None,
            },
            pool: &mut self.pool,
            max_request: max_request(&self.settings),
            now: self.cache.clock().now(),
            peer_closed,
            flash: self.flash.as_mut(),
            slot,
            net: self.net.as_mut(),
        };
        // A bug reachable from client input must cost that client its
        // connection, not every client of this worker: catch a panic, drop
        // the connection, keep serving. (The engine lock does not poison.)
        let status =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| conn.service(&mut env)))
                .unwrap_or_else(|_| {
                    log::emit(
                        self.settings.log_format,
                        Level::Error,
                        "conn_panic",
                        format_args!(
                            "<{} internal error while serving this connection; closing it",
                            slot
                        ),
                        &[("slot", &slot)],
                    );
                    Status::Close
                });
        if let Some(Some(c)) = self.conns.get(slot) {
            if c.is_watcher() && status != Status::Close {
                let id = c.serial;
                if !self.watchers.contains(&(slot, id)) {
                    self.watchers.push((slot, id));
                }
            }
        }
        match status {
            Status::Open => self.rearm(slot),
            Status::Yield => {
                self.rearm(slot);
                if let Some(Some(c)) = self.conns.get_mut(slot) {
                    if !c.queued {
                        c.queued = true;
                        self.ready.push_back(slot);
                    }
                }
            }
            Status::Close => self.close(slot),
        }
    }

    fn close(&mut self, slot: usize) {
        let Some(mut conn) = self.conns.get_mut(slot).and_then(Option::take) else {
            return;
        };
        match (&mut conn.stream, self.net.as_mut()) {
            (Stream::Ring(s), Some(net)) => s.close(net, slot),
            (stream, _) => {
                let _ = self.poll.registry().deregister(stream);
            }
        }
        // Unregister before the fd is closed (dropped) so the number cannot
        // be reused by a new connection while still listed.
        self.shared.unregister_conn(conn.entry.id);
        if self.shared.verbosity.load(Ordering::Relaxed) > 1 {
            let id = conn.entry.id;
            log::emit(
                self.settings.log_format,
                Level::Info,
                "conn_close",
                format_args!("<{id} connection closed."),
                &[("fd", &id), ("peer", &conn.entry.addr)],
            );
        }
        drop(conn);
        self.clients.fetch_sub(1, Ordering::AcqRel);
        self.free.push(slot);
    }

    /// `-o idle_timeout`: close connections waiting for a command too long
    /// (memcached's `conn_timeout_thread` only touches idle states as well).
    fn close_idle(&mut self, idle_timeout: u64) {
        let now = self.cache.clock().now();
        let stale: Vec<usize> = self
            .conns
            .iter()
            .enumerate()
            .filter_map(|(slot, c)| {
                let c = c.as_ref()?;
                let idle_for = now.saturating_sub(c.entry.last_cmd()) as u64;
                // A watcher waits for lines, not commands (memcached's
                // conn_watch state is never timed out either).
                (c.is_idle() && !c.is_watcher() && idle_for > idle_timeout).then_some(slot)
            })
            .collect();
        for slot in stale {
            if self.settings.verbose > 0 {
                if let Some(Some(c)) = self.conns.get(slot) {
                    let id = c.entry.id;
                    log::emit(
                        self.settings.log_format,
                        Level::Info,
                        "conn_idle_timeout",
                        format_args!("<{id} idle timeout, closing"),
                        &[("fd", &id), ("peer", &c.entry.addr)],
                    );
                }
            }
            self.close(slot);
        }
    }

    fn close_all(&mut self) {
        for nc in std::mem::take(&mut *self.inbox.lock()) {
            drop(nc);
            self.clients.fetch_sub(1, Ordering::AcqRel);
        }
        for slot in 0..self.conns.len() {
            if let Some(Some(conn)) = self.conns.get_mut(slot) {
                conn.flush_now(&self.stats);
            }
            self.close(slot);
        }
    }
}
