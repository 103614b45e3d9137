//! The cachalot server: memcached's command line, listeners, worker event
//! loops and the protocol handlers that turn requests into engine calls.
//!
//! Request path: `net` (accept, per-worker mio loop, read/write buffers) ->
//! `session` (protocol detection, one handler per connection) -> `text` /
//! `meta` / `binary` (parse with cachalot-protocol, execute on the engine,
//! encode replies) -> `cachalot_engine::Engine`.

pub mod auth;
pub mod binary;
pub mod capture;
pub mod handler;
pub mod hotkeys;
pub mod log;
pub mod meta;
pub mod metrics;
pub mod mrc;
pub mod net;
pub mod owner;
pub mod parking;
pub mod prefixes;
pub mod session;
pub mod settings;
pub mod stats;
pub mod stats_cmd;
#[cfg(test)]
mod testing;
pub mod text;
pub mod tls;
pub mod watch;
pub mod watchers;

pub use settings::Settings;

/// Entry point of the `cachalot` binary: parse memcached-style arguments and
/// run until shutdown. Returns the process exit code.
pub fn main_with_args(args: Vec<std::ffi::OsString>) -> i32 {
    net::main_with_args(args)
}
