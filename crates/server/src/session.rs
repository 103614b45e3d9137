//! The interface between a connection and a protocol handler.
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

use std::sync::Arc;

use cachalot_engine::Cache;

use crate::settings::{ProtocolChoice, Settings};
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
    /// (`cachalot_engine::flash::fetch`): call again with the rest once
    /// they are done. Only from a handler that [`Handler::parks`].
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

    /// Whether it parks a GET whose item is on flash ([`Step::Parked`]);
    /// a handler that does not gets flash reads done in place.
    fn parks(&self) -> bool {
        false
    }
}

/// Choose the handler for a new connection from its first byte (`-B auto`:
/// 0x80 is the binary protocol's request magic, anything else is text),
/// as memcached's `try_read_command_negotiate` does.
pub fn new_handler(choice: ProtocolChoice, first_byte: u8) -> Box<dyn Handler> {
    let binary = match choice {
        ProtocolChoice::Auto => first_byte == BINARY_REQUEST_MAGIC,
        ProtocolChoice::Binary => true,
        ProtocolChoice::Ascii => false,
    };
    if binary {
        Box::new(crate::binary::BinaryHandler::new())
    } else {
        Box::new(crate::text::AsciiHandler::new())
    }
}

/// The first byte of every binary-protocol request.
pub const BINARY_REQUEST_MAGIC: u8 = 0x80;
