//! Flash reads off the workers' threads (issue 12: "a GET served from
//! flash parks its connection and completes when the read does; the
//! worker keeps serving its other connections meanwhile").
//!
//! A worker hands the reads a parked request wants (`flash::fetch::Want`)
//! to this pool and goes on with its other connections. A reader thread
//! does the read (`Cache::flash_read`: a positioned read of the container,
//! its checks and decoding, no lock held), puts the result in the
//! worker's inbox and wakes it; the worker gives it to the connection,
//! which runs the request again once all its reads are in.
//!
//! Two ways, one interface ([`FlashIo`]): where the kernel allows it,
//! each worker has its own io_uring (`ring`) and completes the reads in
//! its event loop; otherwise (or with `-o flash_io=threads`) reads are
//! plain `pread`s on a few shared reader threads, which put the results in
//! the worker's inbox and wake it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use cachalot_engine::flash::fetch::Want;
use cachalot_engine::Cache;
use mio::Waker;
use parking_lot::{Condvar, Mutex};

use super::flash_read::{Done, Submitted};
use super::ring::Ring;

/// How a worker reads flash for its parked requests.
pub enum FlashIo {
    /// Its own io_uring.
    Ring(Box<Ring>),
    /// The shared reader threads, and where they put its reads.
    Threads(Arc<Readers>, Arc<Inbox>),
}

impl FlashIo {
    /// Begin reading `want` for the connection of `slot` (id `conn`).
    pub fn submit(&mut self, cache: &Cache, want: Want, slot: usize, conn: u64) -> Submitted {
        match self {
            FlashIo::Ring(ring) => ring.submit(cache, want, slot, conn),
            FlashIo::Threads(readers, inbox) => match readers.submit(want, slot, conn, inbox) {
                Ok(()) => Submitted::Queued,
                Err(want) => Submitted::Full(want),
            },
        }
    }

    /// The reads completed since the last call, to `f`.
    pub fn completed(&mut self, cache: &Cache, mut f: impl FnMut(Done)) {
        match self {
            FlashIo::Ring(ring) => ring.reap(cache, f),
            FlashIo::Threads(_, inbox) => {
                let done = std::mem::take(&mut *inbox.done.lock());
                done.into_iter().for_each(&mut f);
            }
        }
    }

    /// End of the worker's round: the reads it queued go to the kernel.
    pub fn flush(&mut self) {
        if let FlashIo::Ring(ring) = self {
            ring.flush();
        }
    }
}

/// Reads waiting at most (a few milliseconds of an SSD's reads).
pub const MAX_QUEUED: usize = 1024;

/// Where a worker receives its completed reads.
pub struct Inbox {
    pub done: Mutex<Vec<Done>>,
    pub waker: Arc<Waker>,
}

struct Job {
    want: Want,
    slot: usize,
    conn: u64,
    inbox: Arc<Inbox>,
}

#[derive(Default)]
struct Queue {
    jobs: Mutex<VecDeque<Job>>,
    ready: Condvar,
    stop: AtomicBool,
}

/// The reader threads.
pub struct Readers {
    queue: Arc<Queue>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Readers {
    /// Start `n` reader threads over `cache`.
    pub fn start(cache: Arc<Cache>, n: usize) -> std::io::Result<Readers> {
        let queue = Arc::new(Queue::default());
        let mut threads = Vec::new();
        for i in 0..n.max(1) {
            let (queue, cache) = (queue.clone(), cache.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("flash-reader-{i}"))
                    .spawn(move || read_loop(&queue, &cache))?,
            );
        }
        Ok(Readers {
            queue,
            threads: Mutex::new(threads),
        })
    }

    /// Queue a read for the connection of `slot` (id `conn`); gives the
    /// want back if [`MAX_QUEUED`] reads are waiting already (the caller
    /// answers it as a miss, as memcached does when its extstore queue is
    /// full: `get_aborted_extstore`), so that a GET never waits behind an
    /// unbounded backlog.
    pub fn submit(
        &self,
        want: Want,
        slot: usize,
        conn: u64,
        inbox: &Arc<Inbox>,
    ) -> Result<(), Want> {
        let mut jobs = self.queue.jobs.lock();
        if jobs.len() >= MAX_QUEUED {
            return Err(want);
        }
        jobs.push_back(Job {
            want,
            slot,
            conn,
            inbox: inbox.clone(),
        });
        drop(jobs);
        self.queue.ready.notify_one();
        Ok(())
    }

    /// Stop the threads (reads still queued are dropped: their
    /// connections are closing with the server).
    pub fn stop(&self) {
        self.queue.stop.store(true, Ordering::SeqCst);
        self.queue.ready.notify_all();
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
    }
}

/// Readers run at nice 10: a worker with memory hits to serve gets the
/// CPU before a reader decoding a container (issue 12, criterion 6: flash
/// reads must not hold up memory hits); the reads themselves wait on the
/// device, not on the CPU.
const READER_NICE: i32 = 10;

fn read_loop(queue: &Queue, cache: &Cache) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain system calls with no pointers: the calling thread's
        // id, then its nice value (on Linux, PRIO_PROCESS with a thread id
        // sets that thread's alone).
        let rc = unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, tid, READER_NICE)
        };
        if rc != 0 {
            eprintln!(
                "Could not lower a flash reader's priority: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    loop {
        let job = {
            let mut jobs = queue.jobs.lock();
            loop {
                if queue.stop.load(Ordering::SeqCst) {
                    return;
                }
                if let Some(j) = jobs.pop_front() {
                    break j;
                }
                queue.ready.wait(&mut jobs);
            }
        };
        let image = cache.flash_read(&job.want);
        job.inbox.done.lock().push(Done {
            slot: job.slot,
            conn: job.conn,
            key: job.want.key,
            image,
        });
        let _ = job.inbox.waker.wake();
    }
}
