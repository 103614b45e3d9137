//! `cachalot-lab`: the workload lab. See docs/lab.md.

use clap::Parser;

fn main() {
    let cli = cachalot_lab::Cli::parse();
    if let Err(e) = cachalot_lab::run(cli) {
        eprintln!("cachalot-lab: {e:#}");
        std::process::exit(1);
    }
}
