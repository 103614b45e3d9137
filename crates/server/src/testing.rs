//! The socket-less server the handlers' unit tests run: an engine whose
//! clock moves only when a test moves it (so TTLs are exact), process-wide
//! state holding this one worker's counters, and client connections over
//! the text handler, fed as the network layer feeds them.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

use cachalot_engine::{Cache, Clock};

use crate::handler::{out_full, Ctx, Handler, Step};
use crate::settings::Settings;
use crate::stats::{Shared, ThreadStats};
use crate::text::AsciiHandler;

/// The unit tests' allocator: the system's, counting each thread's
/// allocations, so a test can check that the request path makes none
/// ([`allocations`]; issue 35: parsing never allocates per request).
struct Counting;

thread_local! {
    /// Const-initialized and without a destructor: reading it allocates
    /// nothing, so the allocator itself may.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is passed on unchanged to `System`, which upholds
// `GlobalAlloc`'s contract; the count is a thread-local `Cell` that
// neither allocates nor unwinds.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's guarantees for `layout` are `System`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: as `alloc` and `dealloc`: `ptr` and `layout` are `System`'s.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Heap allocations (and reallocations) this thread has made so far.
pub fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

pub struct Rig {
    pub cache: Cache,
    pub settings: Settings,
    pub shared: Arc<Shared>,
    pub stats: Arc<ThreadStats>,
}

impl Rig {
    pub fn new() -> Rig {
        Rig::with(Settings::default())
    }

    pub fn with(settings: Settings) -> Rig {
        let cache = Cache::new(settings.engine.clone(), Arc::new(Clock::new())).unwrap();
        let stats = Arc::new(ThreadStats::default());
        let shared = Arc::new(Shared {
            threads: vec![stats.clone()],
            ..Shared::default()
        });
        Rig {
            cache,
            settings,
            shared,
            stats,
        }
    }

    pub fn ctx(&self) -> Ctx<'_> {
        Ctx {
            cache: &self.cache,
            settings: &self.settings,
            shared: &self.shared,
            stats: &self.stats,
            conn_id: 1,
            reads: None,
        }
    }

    /// Send `bytes` on `conn`; the replies they brought.
    pub fn send(&self, conn: &mut Conn, bytes: &[u8]) -> Vec<u8> {
        conn.feed(&self.ctx(), bytes)
    }

    /// Feed `input` to `conn` in pieces of `chunk` bytes, and return
    /// (output, closed).
    pub fn run_chunked(&self, conn: &mut Conn, input: &[u8], chunk: usize) -> (Vec<u8>, bool) {
        let ctx = self.ctx();
        let mut sent = Vec::new();
        for piece in input.chunks(chunk.max(1)) {
            sent.append(&mut conn.feed(&ctx, piece));
        }
        (sent, conn.closed)
    }

    /// `input` in one piece on a new connection: (output, closed).
    pub fn run(&self, input: &[u8]) -> (Vec<u8>, bool) {
        self.run_chunked(&mut Conn::default(), input, input.len())
    }

    /// The reply text of `input` sent in one piece on a new connection.
    pub fn ask(&self, input: &[u8]) -> String {
        let (out, _) = self.run(input);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Each request's reply, in order, on a new connection each: a
    /// conversation table.
    pub fn expect(&self, conversation: &[(&str, &str)]) {
        for (request, reply) in conversation {
            assert_eq!(self.ask(request.as_bytes()), *reply, "{request:?}");
        }
    }

    /// One field of `stats`.
    pub fn stat(&self, name: &str) -> String {
        let out = self.ask(b"stats\r\n");
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("STAT {name} ")).map(str::to_string))
            .unwrap_or_else(|| panic!("no stat {name} in {out}"))
    }
}

/// One client connection over the text handler (text and meta commands):
/// the input it has not consumed yet stays for the next feed.
#[derive(Default)]
pub struct Conn {
    pub handler: AsciiHandler,
    input: Vec<u8>,
    /// The handler closed the connection (nothing more is read).
    pub closed: bool,
}

impl Conn {
    /// Add `bytes` to the input and let the handler take what it can, as a
    /// network layer would (keeping unconsumed bytes, writing the output out
    /// when the handler is blocked on it, reading nothing after a close);
    /// the replies, in order. Asserts the handler's side of [`Step`].
    pub fn feed(&mut self, ctx: &Ctx<'_>, bytes: &[u8]) -> Vec<u8> {
        self.input.extend_from_slice(bytes);
        let mut sent = Vec::new();
        let mut out = Vec::new();
        while !self.closed {
            match self.handler.step(ctx, &self.input, &mut out) {
                Step::Consumed(n) => {
                    assert!(n > 0 && n <= self.input.len(), "bad consume {n}");
                    self.input.drain(..n);
                }
                Step::Blocked(n) => {
                    assert!(n <= self.input.len() && out_full(&out), "bad block {n}");
                    self.input.drain(..n);
                    sent.append(&mut out);
                }
                Step::NeedMore => break,
                Step::Parked(_) => panic!("no flash tier in these tests"),
                Step::Close(n) => {
                    assert!(n <= self.input.len());
                    self.closed = true;
                }
            }
        }
        sent.append(&mut out);
        sent
    }
}
