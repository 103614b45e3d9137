//! A worker's network path through io_uring (issue 35: fewer system calls
//! per request), with the mio/epoll loop kept as the fallback where the
//! kernel refuses a ring or `-o net_io=epoll` asks for it.
//!
//! With epoll, a non-pipelined request costs three system calls: the
//! `epoll_wait` that reports the socket readable, the `read`, and the
//! `write` of the reply. Here the worker waits in `io_uring_enter`, where a
//! `recv` armed on each plain TCP socket has already put the request's bytes
//! into a buffer: the wait and the read are one call, and the arming of the
//! next `recv` rides on the same call. Replies go out the same way: what a
//! connection writes is copied into its socket's queue here, and one `send`
//! per connection is submitted with the next wait, so the replies of a
//! wake-up cost no system call of their own. A send the socket cannot take
//! at once waits in the kernel; the connection's next replies queue behind
//! it, at most `OUT_MAX` bytes, and then it stops (`WouldBlock`) as it
//! would on a full socket.
//!
//! Idle connections pin no memory: a `recv` names a buffer *group*, and the
//! kernel takes a buffer from the worker's ring of provided buffers only
//! when data arrives. The connection copies the bytes into its own read
//! buffer when it runs (`Conn::fill`) and the buffer goes straight back;
//! whatever a connection cannot take yet is copied aside (`RingSocket`'s
//! spill, at most one buffer) so that slow connections never hold the pool.
//!
//! TLS and unix-domain connections, the waker, and the flash ring's eventfd
//! stay in mio's poll; that poll's own descriptor is watched from the ring
//! (a `POLLIN` poll on the epoll fd), and readiness there runs mio's loop
//! with a zero timeout.
//!
//! The `unsafe` of this module: the provided-buffer ring, memory the kernel
//! reads (the entries) and writes (the buffers) while we run, and the bytes
//! of a send in flight, which the kernel reads until its completion.

use std::io::{self, ErrorKind, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use cachalot_engine::flash::device::AlignedBuf;

use crate::handler::OUT_HIGH_WATER;
use io_uring::types::{BufRingEntry, Fd, SubmitArgs, Timespec};
use io_uring::{cqueue, opcode, squeue, IoUring};

/// Provided buffers per worker, and their size (memcached's read buffer):
/// 512 KB a worker, whatever the number of connections.
const BUFS: u16 = 32;
const BUF_LEN: usize = 16 * 1024;
/// The worker's one buffer group.
const GROUP: u16 = 0;
/// Submission queue entries (completions get twice as many, and the kernel
/// keeps overflowing ones rather than drop them).
const ENTRIES: u32 = 256;

/// What a `user_data` is for: its low two bits.
const POLLER: u64 = 0;
const RECV: u64 = 1;
const SEND: u64 = 2;
const CANCEL: u64 = 3;
/// A connection's generation (its worker's serial for it, `Conn::serial`,
/// truncated) sits above the kind and below the slot, so a completion for a
/// closed connection is never given to the next one in its slot, though
/// that one may have the same descriptor number.
const GEN_MASK: u64 = (1 << 30) - 1;

/// The generation of the connection with `serial`.
pub fn generation_of(serial: u64) -> u32 {
    (serial & GEN_MASK) as u32
}

fn user_data(slot: usize, gen: u32, kind: u64) -> u64 {
    ((slot as u64) << 32) | ((gen as u64 & GEN_MASK) << 2) | kind
}

/// `user_data`'s slot and generation (its kind is `ud & 3`).
fn slot_and_gen(ud: u64) -> (usize, u32) {
    ((ud >> 32) as usize, ((ud >> 2) & GEN_MASK) as u32)
}

/// Whether this kernel (and its seccomp policy) gives us a network ring.
pub fn available() -> bool {
    NetRing::new(-1).is_ok()
}

/// A completion, decoded.
#[derive(Debug)]
pub enum Completion {
    /// mio's poll has events.
    Poller,
    /// A `recv` delivered: `res` bytes in provided buffer `buf`, 0 at end
    /// of stream, or `-errno` (`ENOBUFS`: the pool was empty); `more`: it
    /// stays armed.
    Recv {
        slot: usize,
        gen: u32,
        res: i32,
        buf: Option<u16>,
        more: bool,
    },
    /// A `send` finished: `res` bytes went out, or `-errno`.
    Sent { slot: usize, gen: u32, res: i32 },
}

pub struct NetRing {
    ring: IoUring,
    /// mio's epoll descriptor (-1 in `available`'s probe).
    epoll: RawFd,
    /// `BUFS` entries of the provided-buffer ring (page-aligned), whose
    /// first entry's last field is the tail we advance.
    entries: AlignedBuf,
    /// The buffers themselves; only `base` is used after construction.
    _bufs: Vec<u8>,
    base: *mut u8,
    /// Entries published so far (the tail, which wraps).
    tail: u16,
    /// Buffers the kernel may fill: published and not yet handed to us.
    free: u16,
    poller_armed: bool,
    /// Completions read but not yet taken.
    done: Vec<Completion>,
    /// The bytes of sends still in flight for connections that closed:
    /// kept until their completion (by its `user_data`).
    orphans: Vec<(u64, Vec<u8>)>,
}

// SAFETY: `base` points into `_bufs`, which the ring owns and never
// reallocates; a worker moves its ring to its thread once and only that
// thread uses it afterwards, so the pointer is never used from two threads.
unsafe impl Send for NetRing {}

impl NetRing {
    /// A ring with its provided buffers registered, watching `epoll`.
    pub fn new(epoll: RawFd) -> io::Result<NetRing> {
        // One thread submits and reaps (a worker), so the kernel may defer
        // its completion work to our wait rather than interrupt us; the
        // flag tells a submit without a wait to run that work too (else a
        // worker that always has ready connections would never see
        // another socket's data).
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag()
            .build(ENTRIES)
            .or_else(|_| IoUring::new(ENTRIES))?;
        let mut entries = AlignedBuf::new(BUFS as usize * std::mem::size_of::<BufRingEntry>());
        let mut bufs = vec![0u8; BUFS as usize * BUF_LEN];
        let base = bufs.as_mut_ptr();
        // SAFETY: `entries` is page-aligned (AlignedBuf's ALIGN), zeroed,
        // `BUFS` entries long, and lives as long as the ring: it is a field
        // dropped after `ring` (declaration order), and the group is never
        // unregistered before that.
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                entries.as_mut().as_mut_ptr() as u64,
                BUFS,
                GROUP,
                0,
            )?;
        }
        let mut net = NetRing {
            ring,
            epoll,
            entries,
            _bufs: bufs,
            base,
            tail: 0,
            free: 0,
            poller_armed: false,
            done: Vec::new(),
            orphans: Vec::new(),
        };
        for bid in 0..BUFS {
            net.give_back(bid);
        }
        Ok(net)
    }

    /// Return buffer `bid` to the kernel: write the entry at the tail, then
    /// publish it by advancing the tail (a release store, so the kernel
    /// sees the entry before the new tail).
    pub fn give_back(&mut self, bid: u16) {
        let ring = self.entries.as_mut().as_mut_ptr() as *mut BufRingEntry;
        let i = (self.tail & (BUFS - 1)) as usize;
        // SAFETY: `i < BUFS`, so the entry is inside `entries`; the kernel
        // reads only entries between its head and our tail, and `i` is past
        // the tail. The buffer `bid` names is ours again (the kernel handed
        // it over in a completion, or it was never published).
        unsafe {
            let e = &mut *ring.add(i);
            e.set_addr(self.base.add(bid as usize * BUF_LEN) as u64);
            e.set_len(BUF_LEN as u32);
            e.set_bid(bid);
            let tail = BufRingEntry::tail(ring) as *const AtomicU16;
            self.tail = self.tail.wrapping_add(1);
            (*tail).store(self.tail, Ordering::Release);
        }
        self.free += 1;
    }

    /// The first `len` bytes of buffer `bid`, which a completion gave us.
    pub fn buffer(&self, bid: u16, len: usize) -> &[u8] {
        let bid = bid.min(BUFS - 1) as usize;
        // SAFETY: the buffer is inside `_bufs` (bid < BUFS, len clamped to
        // BUF_LEN), and the kernel has finished writing it: it is not
        // published again until `give_back`, which takes `&mut self` and so
        // cannot run while this borrow lives.
        unsafe { std::slice::from_raw_parts(self.base.add(bid * BUF_LEN), len.min(BUF_LEN)) }
    }

    /// Buffers the kernel can fill right now.
    pub fn has_free_buffers(&self) -> bool {
        self.free > 0
    }

    fn push(&mut self, entry: squeue::Entry) {
        // SAFETY: an entry points at memory of ours only through the buffer
        // group (registered for the ring's life) or, for a `send`, at the
        // bytes of a `RingSocket`'s `sending`, which are neither changed nor
        // freed until its completion (`RingSocket::close` hands them to
        // `orphans`, a dropped socket or ring leaks them).
        let mut pushed = unsafe { self.ring.submission().push(&entry).is_ok() };
        if !pushed {
            let _ = self.ring.submit();
            // SAFETY: as above.
            pushed = unsafe { self.ring.submission().push(&entry).is_ok() };
        }
        // A full queue even after submitting (completions the kernel
        // cannot post yet): the entry is lost, so report it at once as the
        // operation's failure, which the worker already handles by trying
        // again later.
        if !pushed {
            let ud = entry.get_user_data();
            let (slot, gen) = slot_and_gen(ud);
            match ud & 3 {
                POLLER => {
                    self.poller_armed = false;
                    self.done.push(Completion::Poller);
                }
                RECV => self.done.push(Completion::Recv {
                    slot,
                    gen,
                    res: -libc::EAGAIN,
                    buf: None,
                    more: false,
                }),
                SEND => self.done.push(Completion::Sent {
                    slot,
                    gen,
                    res: -libc::EAGAIN,
                }),
                _ => {} // a lost cancel: the completion comes anyway, stale
            }
        }
    }

    /// Watch mio's poll: a completion when it has events (once; again after
    /// the next `arm_poller`).
    pub fn arm_poller(&mut self) {
        if !self.poller_armed {
            self.poller_armed = true;
            let e = opcode::PollAdd::new(Fd(self.epoll), libc::POLLIN as u32)
                .build()
                .user_data(POLLER);
            self.push(e);
        }
    }

    /// Receive into the buffer group for the connection in `slot`, each
    /// time data arrives, until cancelled (multishot: the kernel's poll of
    /// the socket stays armed, rather than being set up and torn down for
    /// every request).
    pub fn arm_recv(&mut self, fd: RawFd, slot: usize, gen: u32) {
        let e = opcode::RecvMulti::new(Fd(fd), GROUP)
            .build()
            .user_data(user_data(slot, gen, RECV));
        self.push(e);
    }

    /// Send `bytes`, which must stay as they are until the completion (see
    /// `push`).
    fn arm_send(&mut self, fd: RawFd, slot: usize, gen: u32, bytes: &[u8]) {
        let e = opcode::Send::new(Fd(fd), bytes.as_ptr(), bytes.len() as u32)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(user_data(slot, gen, SEND));
        self.push(e);
    }

    /// Cancel what a connection has armed (it closes, or stops reading);
    /// completions already posted for a closed one are recognized as stale
    /// by `gen`.
    pub fn cancel(&mut self, slot: usize, gen: u32, recv: bool, send: bool) {
        for (armed, kind) in [(recv, RECV), (send, SEND)] {
            if armed {
                let e = opcode::AsyncCancel::new(user_data(slot, gen, kind))
                    .build()
                    .flags(squeue::Flags::SKIP_SUCCESS)
                    .user_data(CANCEL);
                self.push(e);
            }
        }
    }

    /// Submit what was queued and wait for a completion, at most `timeout`
    /// (`Some(ZERO)`: do not wait; `None`: no limit).
    pub fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        let r = match timeout {
            Some(t) if t.is_zero() => self.ring.submit(),
            Some(t) => {
                let ts = Timespec::new().sec(t.as_secs()).nsec(t.subsec_nanos());
                let args = SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)
            }
            None => self.ring.submit_and_wait(1),
        };
        match r {
            Ok(_) => Ok(()),
            // Timed out, interrupted, or completions to reap first: all
            // are a normal wake-up.
            Err(e)
                if e.raw_os_error() == Some(libc::ETIME)
                    || e.raw_os_error() == Some(libc::EBUSY)
                    || e.kind() == ErrorKind::Interrupted =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// The completions since the last call, decoded, into `out`.
    pub fn completions(&mut self, out: &mut Vec<Completion>) {
        out.append(&mut self.done);
        for c in self.ring.completion() {
            let ud = c.user_data();
            let (slot, gen) = slot_and_gen(ud);
            match ud & 3 {
                POLLER => {
                    self.poller_armed = false;
                    out.push(Completion::Poller);
                }
                RECV => {
                    let buf = cqueue::buffer_select(c.flags());
                    if buf.is_some() {
                        self.free -= 1;
                    }
                    out.push(Completion::Recv {
                        slot,
                        gen,
                        res: c.result(),
                        buf,
                        more: cqueue::more(c.flags()),
                    });
                }
                SEND => match self.orphans.iter().position(|(u, _)| *u == ud) {
                    // A closed connection's last send: its bytes can go.
                    Some(i) => drop(self.orphans.swap_remove(i)),
                    None => out.push(Completion::Sent {
                        slot,
                        gen,
                        res: c.result(),
                    }),
                },
                _ => {} // a cancel's own result
            }
        }
    }
}

impl Drop for NetRing {
    /// A `recv` still armed could be handed a buffer while the ring winds
    /// down: unregister the group first so the kernel stops using the
    /// memory, and keep it (leak it) if that fails.
    fn drop(&mut self) {
        // Sends may still be read by the kernel as the ring winds down.
        std::mem::forget(std::mem::take(&mut self.orphans));
        if self.ring.submitter().unregister_buf_ring(GROUP).is_err() {
            std::mem::forget(std::mem::take(&mut self._bufs));
            std::mem::forget(std::mem::replace(&mut self.entries, AlignedBuf::new(0)));
        }
    }
}

/// A plain TCP connection served through the ring: its socket, and the
/// bytes the ring received that the connection has not taken yet.
pub struct RingSocket {
    pub tcp: mio::net::TcpStream,
    pub gen: u32,
    /// A provided buffer with `off..len` unread.
    held: Option<(u16, usize, usize)>,
    /// Unread bytes copied out of buffers, older than `held`'s (see the
    /// module doc).
    spill: Vec<u8>,
    spill_pos: usize,
    /// The peer closed its side (or the socket failed).
    eof: bool,
    /// A multishot `recv` is armed (until its last completion, `more` unset).
    recv_armed: bool,
    /// Its cancellation was asked for (the connection stopped reading).
    recv_cancelled: bool,
    /// The bytes of the send in flight (`sent` of them done), which the
    /// kernel reads until the completion; nothing touches them meanwhile.
    sending: Vec<u8>,
    sent: usize,
    send_armed: bool,
    /// Replies written since, sent when `sending` is done.
    queued: Vec<u8>,
    /// A send failed: the peer is gone.
    broken: bool,
}

/// Output a socket queues here (in flight and waiting) before writes to it
/// return `WouldBlock`: as much as a connection keeps before it stops
/// producing replies.
const OUT_MAX: usize = OUT_HIGH_WATER;
/// The largest send buffer kept while a connection idles.
const SEND_KEEP: usize = 64 * 1024;

/// Unread bytes a connection may have waiting here before its `recv` is
/// cancelled, as when it stops reading (a client that sends without
/// reading its replies); what arrives meanwhile is bounded by the pool.
const UNREAD_MAX: usize = 4 * BUF_LEN;

impl RingSocket {
    pub fn new(tcp: mio::net::TcpStream, gen: u32) -> RingSocket {
        RingSocket {
            tcp,
            gen,
            held: None,
            spill: Vec::new(),
            spill_pos: 0,
            eof: false,
            recv_armed: false,
            recv_cancelled: false,
            sending: Vec::new(),
            sent: 0,
            send_armed: false,
            queued: Vec::new(),
            broken: false,
        }
    }

    /// Output not yet sent: in flight, and queued behind it (none once the
    /// socket broke: it never will be, and a connection closing after its
    /// replies must not wait for it).
    pub fn pending(&self) -> usize {
        if self.broken {
            return 0;
        }
        self.sending.len() - self.sent + self.queued.len()
    }

    /// Submit what was written since the last send, unless one is in
    /// flight (its completion submits the rest).
    pub fn send_queued(&mut self, net: &mut NetRing, slot: usize) {
        if self.send_armed || self.broken || self.queued.is_empty() {
            return;
        }
        std::mem::swap(&mut self.sending, &mut self.queued);
        self.sent = 0;
        self.send_armed = true;
        net.arm_send(self.fd(), slot, self.gen, &self.sending);
    }

    /// The send in flight completed with `res`: send the rest of a short
    /// one, else what queued behind it. Returns whether the socket broke.
    pub fn sent(&mut self, net: &mut NetRing, slot: usize, res: i32) -> bool {
        self.send_armed = false;
        if res <= 0 {
            // An error, or nothing sent of a non-empty send: the peer is
            // gone (a send lost on a full queue is only tried again).
            if res != -libc::EAGAIN {
                self.broken = true;
                self.queued = Vec::new();
                return true;
            }
        } else {
            self.sent = (self.sent + res as usize).min(self.sending.len());
        }
        if self.sent < self.sending.len() {
            self.send_armed = true;
            net.arm_send(self.fd(), slot, self.gen, &self.sending[self.sent..]);
            return false;
        }
        self.sending.clear();
        self.sent = 0;
        if self.sending.capacity() > SEND_KEEP {
            self.sending = Vec::new();
        }
        self.send_queued(net, slot);
        false
    }

    /// The `recv` delivered `res` into `buf`; `more`: it stays armed.
    pub fn received(&mut self, net: &mut NetRing, res: i32, buf: Option<u16>, more: bool) {
        if !more {
            self.recv_armed = false;
            self.recv_cancelled = false;
        }
        match (res, buf) {
            (n, Some(b)) if n > 0 => {
                // Several may arrive before the connection runs: the
                // older go aside, in order.
                self.spill_held(net);
                self.held = Some((b, 0, n as usize));
            }
            (_, Some(b)) => net.give_back(b),
            // Out of buffers, lost on a full queue, or cancelled: armed
            // again later.
            (n, None) if n == -libc::ENOBUFS || n == -libc::EAGAIN || n == -libc::ECANCELED => {}
            // End of stream, ECONNRESET and the like.
            _ => self.eof = true,
        }
    }

    /// Bytes received and not yet taken.
    fn unread(&self) -> usize {
        self.spill.len() - self.spill_pos + self.held.map_or(0, |(_, off, len)| len - off)
    }

    /// Keep a `recv` armed while the connection reads (`reading`) and has
    /// little unread here, and cancel it otherwise.
    pub fn arm(&mut self, net: &mut NetRing, slot: usize, reading: bool) {
        let wanted = reading && !self.eof && self.unread() < UNREAD_MAX;
        if wanted && !self.recv_armed {
            self.recv_armed = true;
            net.arm_recv(self.fd(), slot, self.gen);
        } else if !wanted && self.recv_armed && !self.recv_cancelled {
            self.recv_cancelled = true;
            net.cancel(slot, self.gen, true, false);
        }
    }

    /// Read what the ring received, like `read(2)`: `WouldBlock` when
    /// nothing is waiting, `Ok(0)` at the end of the stream. A short read
    /// means nothing is left (the spill and then the held buffer are both
    /// taken in one call), as `Conn::fill` assumes of a socket.
    pub fn take(&mut self, net: &mut NetRing, out: &mut [u8]) -> io::Result<usize> {
        let mut n = 0;
        if self.spill_pos < self.spill.len() {
            n = out.len().min(self.spill.len() - self.spill_pos);
            out[..n].copy_from_slice(&self.spill[self.spill_pos..self.spill_pos + n]);
            self.spill_pos += n;
            if self.spill_pos == self.spill.len() {
                self.spill = Vec::new();
                self.spill_pos = 0;
            }
        }
        if let Some((bid, off, len)) = self.held.filter(|_| n < out.len()) {
            let m = (out.len() - n).min(len - off);
            out[n..n + m].copy_from_slice(&net.buffer(bid, len)[off..off + m]);
            n += m;
            if off + m == len {
                self.held = None;
                net.give_back(bid);
            } else {
                self.held = Some((bid, off + m, len));
            }
        }
        if n > 0 {
            Ok(n)
        } else if self.eof {
            Ok(0)
        } else {
            Err(ErrorKind::WouldBlock.into())
        }
    }

    /// Copy what the connection did not take out of its provided buffer,
    /// and give the buffer back.
    pub fn spill_held(&mut self, net: &mut NetRing) {
        if let Some((bid, off, len)) = self.held.take() {
            self.spill.extend_from_slice(&net.buffer(bid, len)[off..]);
            net.give_back(bid);
        }
    }

    /// The connection closes: give back a held buffer, cancel what is
    /// armed, and keep a send's bytes until the kernel is done with them.
    pub fn close(&mut self, net: &mut NetRing, slot: usize) {
        if let Some((bid, _, _)) = self.held.take() {
            net.give_back(bid);
        }
        net.cancel(slot, self.gen, self.recv_armed, self.send_armed);
        if !self.send_armed && !self.broken && !self.queued.is_empty() {
            // Replies made just before (a worker's last flush at a stop):
            // what the socket takes at once, as the epoll path does.
            let _ = self.tcp.write(&self.queued);
        }
        if self.send_armed {
            self.send_armed = false;
            let bytes = std::mem::take(&mut self.sending);
            net.orphans.push((user_data(slot, self.gen, SEND), bytes));
        }
    }

    pub fn fd(&self) -> RawFd {
        self.tcp.as_raw_fd()
    }
}

impl Drop for RingSocket {
    /// Dropped without `close` (a worker winding down): a send in flight
    /// may still read its bytes.
    fn drop(&mut self) {
        if self.send_armed {
            std::mem::forget(std::mem::take(&mut self.sending));
        }
    }
}

/// Writes queue the bytes for the ring's next `send` (`send_queued`).
impl Write for RingSocket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.broken {
            return Err(ErrorKind::BrokenPipe.into());
        }
        let n = buf.len().min(OUT_MAX.saturating_sub(self.pending()));
        if n == 0 && !buf.is_empty() {
            return Err(ErrorKind::WouldBlock.into());
        }
        self.queued.extend_from_slice(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// A client and the server's end of its connection, as a ring socket
    /// of generation `gen`.
    fn connected(listener: &std::net::TcpListener, gen: u32) -> (std::net::TcpStream, RingSocket) {
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        (
            client,
            RingSocket::new(mio::net::TcpStream::from_std(server), gen),
        )
    }

    /// Bytes sent to a socket come back through the ring's buffers, in
    /// order, across more buffers than the pool has; a closed peer reads
    /// as the end of the stream.
    #[test]
    fn recv_through_provided_buffers() {
        let Ok(mut net) = NetRing::new(-1) else {
            eprintln!("io_uring refused here; the epoll path is tested instead");
            return;
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (mut client, mut sock) = connected(&listener, 7);
        let sent: Vec<u8> = (0..(BUFS as usize * 3 * 1000)).map(|i| i as u8).collect();
        let writer = std::thread::spawn(move || {
            for chunk in sent.chunks(1000) {
                client.write_all(chunk).unwrap();
            }
            drop(client);
            sent
        });
        let mut got = Vec::new();
        let mut out = Vec::new();
        let mut small = [0u8; 700];
        let mut round = 0;
        loop {
            sock.arm(&mut net, 3, true);
            net.wait(Some(Duration::from_secs(5))).unwrap();
            net.completions(&mut out);
            for c in out.drain(..) {
                match c {
                    Completion::Recv {
                        slot,
                        gen,
                        res,
                        buf,
                        more,
                    } => {
                        assert_eq!((slot, gen), (3, 7));
                        sock.received(&mut net, res, buf, more);
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
            // Every other round, take part and spill the rest, as a busy
            // connection would; else several completions left older bytes
            // spilled and the newest held.
            round += 1;
            if round % 2 == 0 {
                if let Ok(n) = sock.take(&mut net, &mut small) {
                    got.extend_from_slice(&small[..n]);
                }
                sock.spill_held(&mut net);
            }
            loop {
                match sock.take(&mut net, &mut small) {
                    Ok(0) => {
                        assert_eq!(got, writer.join().unwrap());
                        assert_eq!(net.free, BUFS, "every buffer is back");
                        return;
                    }
                    Ok(n) => {
                        // A short read leaves nothing behind (`Conn::fill`
                        // stops reading on one).
                        assert!(n == small.len() || sock.unread() == 0);
                        got.extend_from_slice(&small[..n]);
                    }
                    Err(e) => {
                        assert_eq!(e.kind(), ErrorKind::WouldBlock);
                        break;
                    }
                }
            }
        }
    }

    /// Replies written to a ring socket reach a slow reader whole and in
    /// order; writes stop at `OUT_MAX` queued (`WouldBlock`) and go on as
    /// sends complete; a socket closed with a send in flight keeps its
    /// bytes until the completion, then frees them.
    #[test]
    fn send_through_the_ring() {
        let Ok(mut net) = NetRing::new(-1) else {
            eprintln!("io_uring refused here; the epoll path is tested instead");
            return;
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (mut client, mut sock) = connected(&listener, 5);
        // More than loopback's socket buffers hold, so that the writer
        // blocks before the reader starts.
        let total = 64 * OUT_MAX + 12_345;
        let (start, started) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut buf = [0u8; 65536];
            let _ = started.recv();
            while got.len() < total {
                let n = client.read(&mut buf).unwrap();
                assert!(n > 0, "closed early");
                got.extend_from_slice(&buf[..n]);
            }
            got
        });
        let data: Vec<u8> = (0..total).map(|i| (i % 251) as u8).collect();
        let (mut written, mut full) = (0, 0);
        let mut out = Vec::new();
        while written < total || sock.send_armed {
            if written < total {
                written += sock
                    .write(&data[written..(written + 7_000).min(total)])
                    .unwrap();
            }
            assert!(sock.pending() <= OUT_MAX);
            sock.send_queued(&mut net, 9);
            let wait = if written < total && sock.pending() < OUT_MAX {
                Duration::ZERO
            } else {
                if sock.pending() == OUT_MAX {
                    // Full: a write takes nothing until a send completes.
                    let e = sock.write(&data[..1]).unwrap_err();
                    assert_eq!(e.kind(), ErrorKind::WouldBlock);
                    full += 1;
                }
                // Only the reader can make room now.
                let _ = start.send(());
                Duration::from_secs(5)
            };
            net.wait(Some(wait)).unwrap();
            net.completions(&mut out);
            for c in out.drain(..) {
                match c {
                    Completion::Sent { slot, gen, res } => {
                        assert_eq!((slot, gen), (9, 5));
                        assert!(!sock.sent(&mut net, 9, res), "send failed: {res}");
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
        assert!(full > 0, "the writer never had to wait");
        let _ = start.send(());
        assert!(reader.join().unwrap() == data, "bytes lost or reordered");

        // A send to a peer that reads nothing stays in flight; closing the
        // socket cancels it and its bytes are freed at its completion.
        let (mut client, mut sock) = connected(&listener, 6);
        let mut queued = 0;
        while queued < 64 << 20 && net.orphans.is_empty() {
            queued += sock.write(&data[..OUT_MAX]).unwrap_or(0);
            sock.send_queued(&mut net, 2);
            net.wait(Some(Duration::from_millis(1))).unwrap();
            net.completions(&mut out);
            for c in out.drain(..) {
                if let Completion::Sent { res, .. } = c {
                    sock.sent(&mut net, 2, res);
                }
            }
            if sock.send_armed && sock.pending() == OUT_MAX {
                // Full and in flight: the socket's queue is full.
                sock.close(&mut net, 2);
            }
        }
        assert_eq!(net.orphans.len(), 1, "the send in flight is kept");
        net.wait(Some(Duration::from_secs(5))).unwrap();
        net.completions(&mut out);
        assert!(out.is_empty(), "{out:?}");
        assert!(net.orphans.is_empty(), "freed at its completion");
        client.set_nonblocking(true).unwrap();
        let _ = client.read(&mut [0u8; 16]);
    }
}
