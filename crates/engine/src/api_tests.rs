//! Tests through the engine's public API: the reference model, GD-Wheel's
//! and SIEVE's reference implementations, chained items, rebalancing,
//! threads, the flash tier, access times and the fuzz corpus's replay.
//!
//! They are integration tests in all but place. As `tests/*.rs` they need
//! the crate built a second time with its `testing` feature (a dev-dependency
//! on itself), which the unit tests' build then waited for: half a minute of
//! every suite (docs/testing.md). Here they build once, with the unit tests,
//! and use nothing the public API does not offer.

mod access_time;
mod chained;
mod flash;
mod fuzz_corpus;
mod gdwheel;
mod model;
mod one_page;
mod rebalance;
mod sieve;
mod threads;
mod zone_help;
