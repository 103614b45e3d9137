//! cachalot-lab: measures any memcached-protocol server on the workloads of
//! the papers cachalot implements, and simulates cachalot's engine in-process.
//!
//! - [`trace`]: the request record, CSV (`time,key,size,cost,op,ttl`, readable
//!   by libCacheSim) and a compact binary form.
//! - [`workload`]: the workload models (YCSB, Facebook ETC, Twitter-like,
//!   GD-Wheel cost workloads, calcification, zExpander switch), all seeded.
//! - [`values`]: value contents with realistic compressibility.
//! - [`metrics`]: hit ratio, byte and cost hit ratios, per-interval figures,
//!   latency histograms; the JSON result format every command writes.
//! - [`replay`] (network), [`sim`] (in-process engine), [`mrc`] (miss-ratio
//!   curves and the offline optimal slab assignment), [`compare`] (memcached
//!   vs cachalot, single servers or [`pool`]s behind twemproxy), [`plot`]
//!   (PNG/SVG charts).
//! - [`enginebench`]: the engine in-process with N threads, its throughput
//!   and how its lock is held (issue 10).
//! - [`hostile`]: hostile-client probes with the server's resident memory
//!   sampled (issue 9); [`rss`]: that memory, read from /proc.
//! - [`oracle`]: the check that the memcached compared against is 1.6.18.
//! - [`hotkeys`]: how well `stats hotkeys` names a Zipf load's hottest keys
//!   (issue 36); [`advise`]: a server's live miss-ratio curve drawn, and
//!   what memory would buy.

use clap::{Parser, Subcommand};

pub mod advise;
pub mod compare;
pub mod enginebench;
pub mod hostile;
pub mod hotkeys;
pub mod metrics;
pub mod mrc;
pub mod oracle;
pub mod plot;
pub mod pool;
pub mod replay;
pub mod rss;
pub mod servers;
pub mod sim;
pub mod trace;
pub mod values;
pub mod workload;

#[derive(Parser, Debug)]
#[command(
    name = "cachalot-lab",
    version,
    about = "Workload lab for memcached-protocol servers"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Write a trace from a workload model.
    Gen(workload::GenArgs),
    /// Drive a trace or model against a server as a look-aside cache.
    Replay(replay::ReplayArgs),
    /// Run a trace or model through cachalot's engine in-process.
    Sim(sim::SimArgs),
    // `mrc`, `plot` and `engine-bench` carry their own about/long_about texts.
    Mrc(mrc::MrcArgs),
    /// Run the same workload against memcached and cachalot and print both.
    Compare(compare::CompareArgs),
    Plot(plot::PlotArgs),
    /// Attack servers as hostile clients would; print their peak memory.
    Hostile(hostile::HostileArgs),
    EngineBench(enginebench::EngineBenchArgs),
    /// How well a server's `stats hotkeys` names the hottest keys of a
    /// Zipf load (issue 36).
    Hotkeys(hotkeys::HotkeysArgs),
    /// A cachalot's miss-ratio curve (`stats mrc`) as a chart, and what
    /// more or less memory would do to its misses (issue 36).
    Advise(advise::AdviseArgs),
}

pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Gen(a) => workload::run_gen(a),
        Command::Replay(a) => replay::run(a),
        Command::Sim(a) => sim::run(a),
        Command::Mrc(a) => mrc::run(a),
        Command::Compare(a) => compare::run(a),
        Command::Plot(a) => plot::run(a),
        Command::Hostile(a) => hostile::run(a),
        Command::EngineBench(a) => enginebench::run(a),
        Command::Hotkeys(a) => hotkeys::run(a),
        Command::Advise(a) => advise::run(a),
    }
}
