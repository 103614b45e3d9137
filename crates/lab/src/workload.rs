//! Workload models and the request source every lab command reads from.
//! (Being written: the models themselves; the `Source` interface is fixed.)

use std::path::PathBuf;

use crate::trace::Request;

/// Where requests come from: a model or a trace file. Flattened into the
/// arguments of `gen`, `replay`, `sim`, `mrc` and `compare`.
#[derive(clap::Args, Debug, Clone)]
pub struct Source {
    /// Workload model (see docs/lab.md): ycsb-a, ycsb-b, ycsb-c, ycsb-d, ycsb-f,
    /// etc, twitter, gdwheel-<1..12>, calcification, zexpander-switch.
    #[arg(long, conflicts_with = "trace")]
    pub model: Option<String>,
    /// Model parameter as key=value (repeatable), e.g. --param keys=100000.
    #[arg(long = "param", value_parser = parse_kv)]
    pub params: Vec<(String, String)>,
    /// Read requests from a trace file (.csv or .bin) instead of a model.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Number of requests to generate from a model.
    #[arg(long, default_value_t = 1_000_000)]
    pub requests: u64,
    /// Random seed: the same seed gives the same requests.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

fn parse_kv(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("expected key=value, got {s:?}"))
}

/// A stream of requests.
pub type Requests = Box<dyn Iterator<Item = Request> + Send>;

impl Source {
    /// Open the source: a model generator or a trace reader.
    pub fn open(&self) -> anyhow::Result<Requests> {
        anyhow::bail!("workload models are being written")
    }

    /// A short name for tables and JSON ("ycsb-b", "trace:foo.csv").
    pub fn name(&self) -> String {
        match (&self.model, &self.trace) {
            (Some(m), _) => m.clone(),
            (None, Some(t)) => format!("trace:{}", t.display()),
            (None, None) => "none".to_string(),
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct GenArgs {
    #[command(flatten)]
    pub source: Source,
}

pub fn run_gen(_args: GenArgs) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
