//! The server's integration tests: each module starts the real `cachalot`
//! binary (`common`) and talks to it as clients, tools and packagers do.
//!
//! One test binary, not one per file: each of the 22 files was compiled
//! with its own copy of `common` and linked on its own (12 s more of a
//! cold suite's build on 2 cores, docs/testing.md). `cargo test --test it
//! flash::` runs one file's tests.

mod common;
mod diff;
mod meta_script;

mod auth;
mod binary;
mod capture;
mod differential;
mod ext_item_age;
mod flash;
mod hotkeys;
mod large_items;
mod malformed;
mod meta;
mod metrics;
mod mrc;
mod one_owner;
mod package;
mod pool;
mod prefixes;
mod server;
mod small_caches;
mod tls;
mod tools;
mod warm;
mod watch;
