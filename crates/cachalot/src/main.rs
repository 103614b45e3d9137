//! The `cachalot` binary: a drop-in for the `memcached` executable. All the
//! work (memcached's command line, listeners, event loops) lives in
//! `cachalot_server`, so tests and tools can start a server in-process too.

fn main() {
    std::process::exit(cachalot_server::main_with_args(
        std::env::args_os().collect(),
    ));
}
