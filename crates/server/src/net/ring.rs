//! A worker's own io_uring for flash reads (issue 12: "use io_uring where
//! the kernel allows it, with a plain thread-pool fallback").
//!
//! A parked GET's read is submitted by the worker that parked it and
//! completed in the same event loop: the kernel signals an eventfd that
//! sits in the worker's poll beside its sockets. Compared with the reader
//! threads (`flash_io::Readers`) this saves two thread wake-ups and a
//! futex per read, and the reads a worker queues in one round go to the
//! device in one `io_uring_enter` (one doorbell for the batch: on a
//! virtual disk each doorbell is a VM exit). What the read brings back is
//! checked and decoded here, by `Cache::flash_advance`, holding no lock.
//!
//! The `unsafe` of this module: creating the eventfd, and handing the
//! kernel a buffer it writes into later (see `push`).

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use cachalot_engine::flash::device::AlignedBuf;
use cachalot_engine::flash::fetch::{FlashStep, Want};
use cachalot_engine::flash::{Cursor, DeviceRead};
use cachalot_engine::Cache;
use io_uring::{opcode, types, IoUring};
use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};

use super::flash_read::{Done, Submitted};

/// Reads a worker has in flight at most; a GET that would be one more is
/// answered as a miss (`get_aborted_extstore`), as with the threads.
pub const MAX_IN_FLIGHT: usize = 256;

/// Whether this kernel (and its seccomp policy) lets us have a ring.
pub fn available() -> bool {
    IoUring::new(2).is_ok()
}

/// One read in flight: what it is for, how far it got, its buffer.
struct InFlight {
    want: Want,
    cursor: Cursor,
    buf: AlignedBuf,
    /// Bytes asked of the device.
    len: usize,
    slot: usize,
    conn: u64,
}

pub struct Ring {
    ring: IoUring,
    /// The flash file.
    fd: RawFd,
    /// Signalled by the kernel at each completion; in the worker's poll.
    event: File,
    reads: Vec<Option<InFlight>>,
    free: Vec<usize>,
    spare: Vec<AlignedBuf>,
    in_flight: usize,
    /// Entries pushed since the last `io_uring_enter`.
    unsubmitted: bool,
}

impl Ring {
    /// A ring over the flash file of `cache`. Fails where the kernel (or a
    /// seccomp policy) refuses io_uring: the caller falls back to threads.
    pub fn new(cache: &Cache) -> io::Result<Ring> {
        let fd = cache
            .flash_fd()
            .ok_or_else(|| io::Error::new(io::ErrorKind::Unsupported, "no flash file"))?;
        let ring = IoUring::new(MAX_IN_FLIGHT as u32)?;
        // SAFETY: eventfd takes no pointers; a non-negative result is a new
        // descriptor that nothing else owns, so OwnedFd may take it.
        let event = unsafe {
            let raw = libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC);
            if raw < 0 {
                return Err(io::Error::last_os_error());
            }
            File::from(OwnedFd::from_raw_fd(raw))
        };
        ring.submitter().register_eventfd(event.as_raw_fd())?;
        Ok(Ring {
            ring,
            fd,
            event,
            reads: Vec::new(),
            free: Vec::new(),
            spare: Vec::new(),
            in_flight: 0,
            unsubmitted: false,
        })
    }

    /// Put the completion signal in the worker's poll under `token`.
    pub fn register(&self, registry: &Registry, token: Token) -> io::Result<()> {
        registry.register(
            &mut SourceFd(&self.event.as_raw_fd()),
            token,
            Interest::READABLE,
        )
    }

    /// Begin reading `want` for the connection of `slot` (id `conn`).
    pub fn submit(&mut self, cache: &Cache, want: Want, slot: usize, conn: u64) -> Submitted {
        if self.in_flight >= MAX_IN_FLIGHT {
            return Submitted::Full(want);
        }
        let mut cursor = Cursor::default();
        let d = match cache.flash_advance(&want, &mut cursor, None) {
            FlashStep::Done(image) => return Submitted::Done((want.key, image)),
            FlashStep::Io(d) => d,
        };
        let i = self.free.pop().unwrap_or_else(|| {
            self.reads.push(None);
            self.reads.len() - 1
        });
        let buf = self.spare.pop().unwrap_or_else(|| AlignedBuf::new(d.len));
        self.reads[i] = Some(InFlight {
            want,
            cursor,
            buf,
            len: 0,
            slot,
            conn,
        });
        self.in_flight += 1;
        match self.push(i, d) {
            Ok(()) => Submitted::Queued,
            Err(r) => Submitted::Full(r.want),
        }
    }

    /// Queue the device read `d` of read `i` (submitted by [`Ring::flush`]).
    /// If the submission queue has no room even after a submit (it cannot:
    /// it has an entry for each read allowed in flight), the read is taken
    /// out and given back, for its caller to answer as a miss.
    fn push(&mut self, i: usize, d: DeviceRead) -> Result<(), Box<InFlight>> {
        let Some(r) = self.reads[i].as_mut() else {
            return Ok(());
        };
        if r.buf.len() < d.len {
            r.buf = AlignedBuf::new(d.len);
        }
        r.len = d.len;
        let into = r.buf.as_mut();
        let entry = opcode::Read::new(types::Fd(self.fd), into.as_mut_ptr(), d.len as u32)
            .offset(d.offset)
            .build()
            .user_data(i as u64);
        // SAFETY: the kernel writes `d.len` bytes (at most the buffer's
        // length, checked above) into the buffer of `reads[i]` until the
        // read's completion is reaped. That buffer is a heap allocation
        // that moves with nothing: `reads[i]` is neither dropped nor given
        // a new buffer before `reap` takes its completion, and `Drop` waits
        // for every read in flight before the buffers go.
        let mut pushed = unsafe { self.ring.submission().push(&entry).is_ok() };
        if !pushed {
            let _ = self.ring.submit();
            // SAFETY: as above.
            pushed = unsafe { self.ring.submission().push(&entry).is_ok() };
        }
        if pushed {
            self.unsubmitted = true;
            return Ok(());
        }
        self.free.push(i);
        self.in_flight -= 1;
        self.reads[i].take().map_or(Ok(()), |r| Err(Box::new(r)))
    }

    /// Hand the reads queued this round to the kernel in one system call.
    pub fn flush(&mut self) {
        // On an error (busy: completions to reap first; interrupted) the
        // entries stay queued, and the next round submits them.
        if self.unsubmitted && self.ring.submit().is_ok() {
            self.unsubmitted = false;
        }
    }

    /// Completed reads: each is checked and decoded; one that must try
    /// another place is queued again, a finished one goes to `f`.
    pub fn reap(&mut self, cache: &Cache, mut f: impl FnMut(Done)) {
        // Drain the signal first: a completion posted after the loop below
        // signals again.
        let mut count = [0u8; 8];
        let _ = (&self.event).read(&mut count);
        loop {
            let completed: Vec<(u64, i32)> = self
                .ring
                .completion()
                .map(|c| (c.user_data(), c.result()))
                .collect();
            if completed.is_empty() {
                break;
            }
            for (i, res) in completed {
                let i = i as usize;
                let Some(r) = self.reads.get_mut(i).and_then(Option::as_mut) else {
                    continue;
                };
                let io = match res {
                    n if n < 0 => Err(io::Error::from_raw_os_error(-n)),
                    n if n as usize != r.len => {
                        Err(io::Error::new(io::ErrorKind::UnexpectedEof, "short read"))
                    }
                    _ => Ok(&r.buf.as_ref()[..r.len]),
                };
                let (r, image) = match cache.flash_advance(&r.want, &mut r.cursor, Some(io)) {
                    FlashStep::Io(d) => match self.push(i, d) {
                        Ok(()) => continue,
                        Err(r) => (*r, None),
                    },
                    FlashStep::Done(image) => {
                        let Some(r) = self.reads[i].take() else {
                            continue;
                        };
                        self.free.push(i);
                        self.in_flight -= 1;
                        (r, image)
                    }
                };
                self.spare.push(r.buf);
                f(Done {
                    slot: r.slot,
                    conn: r.conn,
                    key: r.want.key,
                    image,
                });
            }
        }
        self.flush();
    }
}

impl Drop for Ring {
    /// The kernel may write into a read's buffer until its completion is
    /// posted: wait for every read in flight before the buffers are freed.
    fn drop(&mut self) {
        while self.in_flight > 0 {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    // Cannot wait: leak the buffers rather than free memory
                    // the kernel may still write.
                    for r in self.reads.drain(..).flatten() {
                        std::mem::forget(r.buf);
                    }
                    return;
                }
            }
            for c in self.ring.completion() {
                let i = c.user_data() as usize;
                if self.reads.get_mut(i).and_then(Option::take).is_some() {
                    self.in_flight -= 1;
                }
            }
        }
    }
}
