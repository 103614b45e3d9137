//! `compare`: memcached and cachalot side by side on the same workload. Both
//! are started fresh for every repetition with the same `-m` and `-t`, the
//! order alternates between repetitions (so neither always runs on a warmer
//! machine), and the summary is the median over repetitions of each figure,
//! with the ratio cachalot / memcached.
//!
//! Why medians and alternation: the machine is shared (2 cores), so single
//! runs are noisy; repeating and alternating is the usual remedy (as in
//! Georges et al., "Statistically rigorous Java performance evaluation",
//! OOPSLA'07, and the bench harness of this repository).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::metrics::{self, RunResult};
use crate::pool::Pool;
use crate::replay::{self, DriveArgs};
use crate::servers::{LocalServer, ServerConfig, ServerKind};
use crate::workload::Source;

#[derive(clap::Args, Debug)]
pub struct CompareArgs {
    #[command(flatten)]
    pub source: Source,
    /// Memory limit of both servers (`-m`), MB.
    #[arg(long, default_value_t = 64)]
    pub memory: u64,
    /// Worker threads of both servers (`-t`).
    #[arg(long, default_value_t = 4)]
    pub threads: u32,
    /// Repetitions (fresh servers each time, alternating which goes first).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// The cachalot binary (default: $CACHALOT_BIN, or the one next to this program).
    #[arg(long)]
    pub cachalot_bin: Option<PathBuf>,
    /// An extra flag for both servers (repeatable), e.g. --server-arg=-I --server-arg=2m.
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    pub server_args: Vec<String>,
    /// An extra flag for cachalot only (repeatable), e.g.
    /// --cachalot-arg=-o --cachalot-arg=zzone=1.
    #[arg(long = "cachalot-arg", allow_hyphen_values = true)]
    pub cachalot_args: Vec<String>,
    /// A flash tier of this many MB for both servers, in a fresh file for
    /// every run (`-o ext_path=FILE:SIZE`: memcached's extstore, cachalot's
    /// flash tier), deleted after it.
    #[arg(long)]
    pub flash: Option<u64>,
    /// The directory of those files (default: the temporary directory).
    #[arg(long)]
    pub flash_dir: Option<PathBuf>,
    /// Run each side as a pool of this many nodes behind twemproxy
    /// (Debian's nutcracker, ketama over md5), each node with --memory MB
    /// and --threads; the clients talk to the proxy (text protocol).
    #[arg(long, default_value_t = 0)]
    pub pool: usize,
    #[command(flatten)]
    pub drive: DriveArgs,
    /// Write every run and the summary here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Remove a run's flash file and what cachalot keeps beside it (a
/// snapshot, a journal): the next run must start cold.
fn remove_flash_file(file: &std::path::Path) {
    for suffix in ["", ".index", ".journal", ".memory", ".dict", ".tmp"] {
        let mut p = file.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
}

/// What a repetition runs against: one server, or a pool behind a proxy.
enum Target {
    Single(LocalServer),
    Pool(Pool),
}

impl Target {
    fn start(cfg: &ServerConfig, pool: usize) -> anyhow::Result<Target> {
        Ok(match pool {
            0 => Target::Single(LocalServer::start(cfg)?),
            n => Target::Pool(Pool::start(cfg, n)?),
        })
    }

    fn addr(&self) -> std::net::SocketAddr {
        match self {
            Target::Single(s) => s.addr(),
            Target::Pool(p) => p.addr(),
        }
    }

    fn command_line(&self) -> Vec<String> {
        match self {
            Target::Single(s) => s.command_line(),
            Target::Pool(p) => p.command_line(),
        }
    }
}

/// One line of the summary: the medians and their ratio.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SummaryRow {
    pub metric: String,
    pub memcached: f64,
    pub cachalot: f64,
    /// cachalot / memcached (None when memcached's is 0).
    pub ratio: Option<f64>,
}

/// The `--json` document of `compare`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompareResult {
    pub command_line: Vec<String>,
    pub date: String,
    pub git_commit: Option<String>,
    pub model: String,
    pub memory_mb: u64,
    pub threads: u32,
    pub repeat: usize,
    /// The server command lines of the first repetition.
    pub servers: Vec<Vec<String>>,
    /// Median over repetitions of each figure.
    pub summary: Vec<SummaryRow>,
    /// Every run in the order it ran; `meta.label` says which server.
    pub runs: Vec<RunResult>,
}

pub fn run(args: CompareArgs) -> anyhow::Result<()> {
    // Fail early on a bad source, before starting servers.
    drop(args.source.open()?);
    if args.pool > 0 && args.flash.is_some() {
        anyhow::bail!("--pool and --flash together are not supported (one flash file per node)");
    }
    let repeat = args.repeat.max(1);
    let mut runs = Vec::new();
    let mut server_lines: Vec<Vec<String>> = Vec::new();
    for rep in 0..repeat {
        let order = if rep % 2 == 0 {
            [ServerKind::Memcached, ServerKind::Cachalot]
        } else {
            [ServerKind::Cachalot, ServerKind::Memcached]
        };
        for kind in order {
            eprintln!(
                "repetition {}/{repeat}: {} (-m {} -t {})",
                rep + 1,
                kind.name(),
                args.memory,
                args.threads
            );
            let mut extra_args = args.server_args.clone();
            if kind == ServerKind::Cachalot {
                extra_args.extend(args.cachalot_args.iter().cloned());
            }
            let flash_file = args.flash.map(|mb| {
                let dir = args.flash_dir.clone().unwrap_or_else(std::env::temp_dir);
                let file = dir.join(format!(
                    "cachalot-lab-flash-{}-{rep}-{}",
                    std::process::id(),
                    kind.name()
                ));
                remove_flash_file(&file);
                extra_args.push("-o".into());
                extra_args.push(format!("ext_path={}:{mb}m", file.display()));
                file
            });
            let cfg = ServerConfig {
                extra_args,
                cachalot_bin: args.cachalot_bin.clone(),
                ..ServerConfig::new(kind, args.memory, args.threads)
            };
            let server = Target::start(&cfg, args.pool)?;
            if rep == 0 {
                server_lines.push(server.command_line());
            }
            let proxied = matches!(server, Target::Pool(_));
            let mut result = replay::replay_source(
                server.addr(),
                kind,
                kind.name(),
                &args.source,
                &args.drive,
                proxied,
            )?;
            if let Target::Pool(pool) = &server {
                // The proxy has no `stats`: the pool's are its nodes' added up.
                let stats = pool.stats()?;
                result.meta.memory_mb = stats
                    .get("limit_maxbytes")
                    .and_then(|v| v.parse::<u64>().ok())
                    .map(|b| b >> 20);
                result.meta.server_stats = stats;
            }
            result.meta.tool = "compare".to_string();
            let s = &mut result.meta.settings;
            s.insert("repetition".into(), rep.into());
            s.insert("pool".into(), args.pool.into());
            s.insert("server_command_line".into(), server.command_line().into());
            drop(server);
            if let Some(f) = &flash_file {
                remove_flash_file(f);
            }
            runs.push(result);
        }
    }
    metrics::print_table(&runs);
    println!();
    let summary = summarize(&runs);
    print!("{}", format_summary(&summary, repeat));
    let checked = check_errors(&runs);
    if let Some(path) = &args.json {
        let doc = CompareResult {
            command_line: std::env::args().collect(),
            date: metrics::utc_now_rfc3339(),
            git_commit: metrics::git_commit(),
            model: args.source.name(),
            memory_mb: args.memory,
            threads: args.threads,
            repeat,
            servers: server_lines,
            summary,
            runs,
        };
        metrics::write_json(path, &doc)?;
    }
    checked
}

/// An error reply memcached did not give in the same repetition is a
/// defect, not a figure: the run fails (after its table and JSON are out).
fn check_errors(runs: &[RunResult]) -> anyhow::Result<()> {
    let rep = |r: &RunResult| r.meta.settings.get("repetition").and_then(|v| v.as_u64());
    let worse: Vec<String> = runs
        .iter()
        .filter(|c| c.meta.server_kind == ServerKind::Cachalot.name())
        .filter_map(|c| {
            let m = runs
                .iter()
                .find(|m| m.meta.server_kind == ServerKind::Memcached.name() && rep(m) == rep(c))?;
            (c.totals.errors > m.totals.errors).then(|| {
                format!(
                    "repetition {}: cachalot {} errors, memcached {}",
                    rep(c).map_or(0, |r| r + 1),
                    c.totals.errors,
                    m.totals.errors
                )
            })
        })
        .collect();
    if worse.is_empty() {
        Ok(())
    } else {
        anyhow::bail!(
            "cachalot returned errors memcached did not: {}",
            worse.join("; ")
        )
    }
}

/// The figures the summary compares, read from a run.
fn figures(r: &RunResult) -> Vec<(&'static str, f64)> {
    let t = &r.totals;
    let lat = t.latency.get("all");
    let l = |f: fn(&metrics::LatencySummary) -> f64| lat.map(f).unwrap_or(0.0);
    let stat = |k: &str| {
        r.meta
            .server_stats
            .get(k)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    vec![
        ("hit ratio", t.hit_ratio),
        ("byte hit ratio", t.byte_hit_ratio),
        ("cost hit ratio", t.cost_hit_ratio),
        ("recomputation cost", t.recomputation_cost as f64),
        ("throughput (req/s)", t.throughput_rps),
        ("p50 latency (us)", l(|s| s.p50_us)),
        ("p99 latency (us)", l(|s| s.p99_us)),
        ("p99.9 latency (us)", l(|s| s.p999_us)),
        ("items at end", stat("curr_items")),
        ("evictions", stat("evictions")),
        ("errors", t.errors as f64),
    ]
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Median of each figure per server, and cachalot / memcached.
pub fn summarize(runs: &[RunResult]) -> Vec<SummaryRow> {
    let of = |kind: ServerKind| -> Vec<Vec<(&'static str, f64)>> {
        runs.iter()
            .filter(|r| r.meta.server_kind == kind.name())
            .map(figures)
            .collect()
    };
    let (m, c) = (of(ServerKind::Memcached), of(ServerKind::Cachalot));
    let names: Vec<&str> = figures(&RunResult::default())
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let med = |runs: &Vec<Vec<(&str, f64)>>| median(runs.iter().map(|f| f[i].1).collect());
            let (mv, cv) = (med(&m), med(&c));
            SummaryRow {
                metric: name.to_string(),
                memcached: mv,
                cachalot: cv,
                ratio: (mv != 0.0).then(|| cv / mv),
            }
        })
        .collect()
}

/// The summary as a table.
pub fn format_summary(rows: &[SummaryRow], repeat: usize) -> String {
    let num = |v: f64| {
        if v.fract() == 0.0 && v.abs() < 1e15 {
            format!("{v:.0}")
        } else if v.abs() < 10.0 {
            format!("{v:.4}")
        } else {
            format!("{v:.1}")
        }
    };
    let mut table = vec![vec![
        format!("median of {repeat}"),
        "memcached".to_string(),
        "cachalot".to_string(),
        "cachalot/memcached".to_string(),
    ]];
    for r in rows {
        table.push(vec![
            r.metric.clone(),
            num(r.memcached),
            num(r.cachalot),
            r.ratio
                .map(|x| format!("{x:.3}"))
                .unwrap_or_else(|| "-".to_string()),
        ]);
    }
    metrics::render(&table)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{Counts, RunMeta, Totals};

    fn run(kind: &str, hits: u64, rps: f64) -> RunResult {
        let counts = Counts {
            requests: 100,
            gets: 100,
            hits,
            ..Counts::default()
        };
        RunResult {
            meta: RunMeta {
                server_kind: kind.to_string(),
                ..RunMeta::default()
            },
            totals: Totals {
                hit_ratio: counts.hit_ratio(),
                counts,
                throughput_rps: rps,
                ..Totals::default()
            },
            intervals: vec![],
        }
    }

    #[test]
    fn medians_and_ratios() {
        let runs = vec![
            run("memcached", 50, 1000.0),
            run("cachalot", 60, 900.0),
            run("cachalot", 70, 1100.0),
            run("memcached", 40, 3000.0),
            run("memcached", 90, 2000.0),
            run("cachalot", 65, 1000.0),
        ];
        let s = summarize(&runs);
        let hit = s.iter().find(|r| r.metric == "hit ratio").unwrap();
        assert_eq!((hit.memcached, hit.cachalot), (0.5, 0.65));
        assert!((hit.ratio.unwrap() - 1.3).abs() < 1e-12);
        let tp = s.iter().find(|r| r.metric == "throughput (req/s)").unwrap();
        assert_eq!((tp.memcached, tp.cachalot), (2000.0, 1000.0));
        assert_eq!(tp.ratio, Some(0.5));
        let p99 = s.iter().find(|r| r.metric == "p99 latency (us)").unwrap();
        assert_eq!(p99.ratio, None);
        assert_eq!(median(vec![4.0, 1.0]), 2.5);
        let text = format_summary(&s, 3);
        assert!(
            text.lines()
                .any(|l| l.starts_with("hit ratio") && l.ends_with("1.300")),
            "{text}"
        );
    }
}
