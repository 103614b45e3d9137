//! What a protocol handler sees: the interface between a connection and the
//! handler that serves it, and the context every request is served in.
//!
//! The network layer owns sockets and buffers; a handler sees the bytes read so
//! far and appends replies to the output buffer. Handlers keep per-connection
//! state (e.g. how many bytes of an oversized value are left to swallow).
//!
//! Output is bounded per connection: a handler starts no request while
//! [`out_full`], and a request whose reply has no size limit (a multi-get
//! naming a large value thousands of times) stops between keys, returns
//! [`Step::Blocked`] and resumes where it stopped on the next call, once the
//! network layer has written the output. So a connection holds at most
//! `OUT_HIGH_WATER` plus one reply (one value of at most `-I`) whatever its
//! client asks, and a client that does not read stops being read.
//!
//! This sits below the handlers (`text`, `meta`, `binary`, ...) so that they
//! share it without importing `session`, which chooses among them.

use std::cell::RefCell;
use std::sync::Arc;

use cachalot_engine::flash::fetch::Fetches;
use cachalot_engine::Cache;

use crate::settings::Settings;
use crate::stats::{Shared, ThreadStats};

/// What a handler did with the input it was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Consumed this many bytes (one or more whole requests); call again with the rest.
    Consumed(usize),
    /// Needs more bytes before it can make progress (nothing consumed).
    NeedMore,
    /// Consumed this many bytes; flush the output, then close the connection.
    Close(usize),
    /// Consumed this many bytes and stopped because [`out_full`]: call again
    /// with the rest once the output has drained (a request cut short
    /// resumes; its bytes stay in the input until it is complete).
    Blocked(usize),
    /// Consumed this many bytes; the next request waits for flash reads
    /// (`cachalot_engine::flash::fetch`, `Ctx::reads`): call again with the
    /// rest once they are done. Only from a handler that [`Handler::parks`].
    Parked(usize),
}

/// Unsent output at which handlers stop producing replies and the network
/// layer stops reading from the client until the socket drains.
pub const OUT_HIGH_WATER: usize = 256 * 1024;

/// Whether `out` (the connection's unsent output) is at the high-water mark.
pub fn out_full(out: &[u8]) -> bool {
    out.len() >= OUT_HIGH_WATER
}

/// Everything a handler may touch while serving one request.
pub struct Ctx<'a> {
    pub cache: &'a Cache,
    pub settings: &'a Settings,
    pub shared: &'a Arc<Shared>,
    pub stats: &'a ThreadStats,
    /// This connection's id (for `stats conns`).
    pub conn_id: u64,
    /// The flash reads of this connection's parked request, when its
    /// requests may park (`crate::parking`); None: GETs read flash in place.
    pub reads: Option<&'a RefCell<Fetches>>,
}

/// The test knob `-o zzone_demote_all` (`Settings::zzone_demote_all`): a
/// command is done, so every item of the N-zone goes to the Z-zone, and
/// the next command reads it from a compressed block.
pub fn demote_all_if_asked(ctx: &Ctx<'_>) {
    if ctx.settings.zzone_demote_all {
        ctx.cache.demote_all();
    }
}

/// A protocol handler bound to one connection.
pub trait Handler: Send {
    /// Handle as many complete requests at the front of `input` as it wants,
    /// appending replies to `out` (which holds only unsent output).
    fn step(&mut self, ctx: &Ctx<'_>, input: &[u8], out: &mut Vec<u8>) -> Step;

    /// Whether this is a `watch` connection.
    fn watching(&self) -> bool {
        false
    }

    /// A `watch` connection: move its pending lines to `out`, about `room`
    /// bytes at most.
    fn watch_lines(&mut self, _out: &mut Vec<u8>, _room: usize) {}

    /// Whether it has output to go on with that no input asks for (an
    /// `lru_crawler metadump` past the output's high-water mark): the
    /// connection steps it again once the output drains, input or not.
    fn busy(&self) -> bool {
        false
    }

    /// Whether it parks a GET whose item is on flash ([`Step::Parked`]);
    /// a handler that does not gets flash reads done in place.
    fn parks(&self) -> bool {
        false
    }
}
