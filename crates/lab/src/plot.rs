//! `cachalot-lab plot`: PNG and SVG charts from the lab's JSON results.
//!
//! Four kinds, each the figure the papers behind the lab use to make their
//! point:
//! - `hit-ratio-over-time`: the hit ratio (or byte / cost hit ratio) of each
//!   interval of `replay`, `sim` or `compare` runs, one line per run, as the
//!   calcification and zExpander papers show adaptation after a workload
//!   shift (`../shared/seeds/003_*` section 5, `../shared/seeds/000_*` 4.6).
//! - `mrc`: miss-ratio curves from `mrc --json` (miss ratio against cache
//!   size, the cost-miss ratio as a second line when costs differ from 1,
//!   optionally the busiest slab classes' own curves), as in Carra &
//!   Michiardi's figures.
//! - `zone-split`: the N-zone / Z-zone split of `sim --zzone true` runs over
//!   time (each zone's share of memory, the share of GET hits the N-zone
//!   serves, the hit ratio, the items cached against the memory), as
//!   zExpander's Fig. 15 shows its split adapting to a pattern switch
//!   (`../shared/seeds/000_*` section 4.6).
//! - `latency-cdf`: latency distributions from the runs' HDR histogram
//!   quantiles, either as a CDF (fraction of requests against latency) or
//!   as HdrHistogram's percentile spectrum (`--style tail`: latency against
//!   the quantile on a 1/(1-q) log axis, where 99%, 99.9%, 99.99% are evenly
//!   spaced), the way wrk2 and memtier report tails.
//!
//! The readers ([`input`]) accept older and newer result documents alike;
//! drawing ([`render`]) needs no installed font. `--json` writes the plotted
//! series, so a chart's numbers can be checked without reading pixels.

pub mod input;
pub mod render;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use input::{Doc, Input, IntervalView, MrcView, RunView};
use render::{Axis, Chart, Legend, Series, Ticks};

#[derive(clap::Args, Debug, Clone)]
#[command(
    about = "PNG and SVG charts from JSON results: hit ratio over time, miss-ratio curves, latency CDFs, the Z-zone split",
    long_about = "Draws a chart from the --json output of replay, sim and compare (hit ratio over \
                  time, latency CDF: one line per run) or of mrc (miss-ratio curves: one line per \
                  file, plus the cost-miss ratio when costs vary), or the N-zone / Z-zone split \
                  over time of `sim --zzone true` runs. The output format follows the \
                  file extension of --out (.png or .svg). Example:\n  \
                  cachalot-lab plot --kind hit-ratio-over-time --out hit.svg compare-etc.json"
)]
pub struct PlotArgs {
    /// What to draw.
    #[arg(long, value_enum)]
    pub kind: Kind,
    /// The chart file: .png or .svg.
    #[arg(long, short = 'o')]
    pub out: PathBuf,
    /// Chart title (default: from the kind and the workload).
    #[arg(long)]
    pub title: Option<String>,
    /// Image size in pixels, WIDTHxHEIGHT.
    #[arg(long, default_value = "960x560", value_parser = parse_dims)]
    pub size: (u32, u32),
    /// Series names in order, comma separated (default: each run's label,
    /// made unique with its repetition or file name).
    #[arg(long, value_delimiter = ',')]
    pub label: Vec<String>,
    /// hit-ratio-over-time: which ratio to draw.
    #[arg(long, value_enum, default_value_t = Metric::Hit)]
    pub metric: Metric,
    /// hit-ratio-over-time: x axis in requests or seconds (auto: the unit of
    /// the runs' intervals).
    #[arg(long, value_enum, default_value_t = XAxis::Auto)]
    pub x: XAxis,
    /// mrc: the curve by bytes of memory or by number of items.
    #[arg(long, value_enum, default_value_t = MrcBy::Bytes)]
    pub by: MrcBy,
    /// mrc: also draw the byte miss ratio.
    #[arg(long)]
    pub byte_miss: bool,
    /// mrc: also draw the miss-ratio curves of the N busiest slab classes
    /// (memory given to that class alone; needs `mrc --json` class data).
    #[arg(long, value_name = "N")]
    pub per_class: Option<usize>,
    /// latency-cdf: operations to draw (all, get, set, fill, delete), comma separated.
    #[arg(long, value_delimiter = ',', default_value = "all")]
    pub op: Vec<String>,
    /// latency-cdf: a CDF, or the percentile spectrum that spreads out the tail.
    #[arg(long, value_enum, default_value_t = CdfStyle::Cdf)]
    pub style: CdfStyle,
    /// compare results: draw only this repetition (1-based).
    #[arg(long)]
    pub repetition: Option<u64>,
    /// Scale of the x axis (auto: log for latency, linear otherwise).
    #[arg(long, value_enum, default_value_t = Scale::Auto)]
    pub x_scale: Scale,
    /// Scale of the y axis (auto: log for latency in the tail style, linear otherwise).
    #[arg(long, value_enum, default_value_t = Scale::Auto)]
    pub y_scale: Scale,
    /// Also write the plotted series as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Result files (--json output of replay, sim, compare or mrc).
    #[arg(required = true, num_args = 1..)]
    pub inputs: Vec<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    HitRatioOverTime,
    Mrc,
    LatencyCdf,
    /// `sim --zzone true`: the N-zone / Z-zone split over time.
    ZoneSplit,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    Hit,
    ByteHit,
    CostHit,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum XAxis {
    Auto,
    Requests,
    Seconds,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MrcBy {
    Bytes,
    Items,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CdfStyle {
    Cdf,
    Tail,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    Auto,
    Linear,
    Log,
}

impl Scale {
    fn log_or(self, auto: bool) -> bool {
        match self {
            Scale::Auto => auto,
            Scale::Linear => false,
            Scale::Log => true,
        }
    }
}

fn parse_dims(s: &str) -> Result<(u32, u32), String> {
    let (w, h) = s
        .split_once(['x', 'X'])
        .ok_or_else(|| format!("expected WIDTHxHEIGHT, got {s:?}"))?;
    let w: u32 = w
        .trim()
        .parse()
        .map_err(|_| format!("bad width in {s:?}"))?;
    let h: u32 = h
        .trim()
        .parse()
        .map_err(|_| format!("bad height in {s:?}"))?;
    // Small enough that the axes and legend fit, large enough to stay sane
    // in memory (an RGB buffer of 8000x8000 is 192 MB).
    if !(200..=8000).contains(&w) || !(150..=8000).contains(&h) {
        return Err(format!("size {w}x{h} out of range (200..8000 x 150..8000)"));
    }
    Ok((w, h))
}

/// The image format, from the output file's extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Png,
    Svg,
}

pub fn format_of(path: &Path) -> anyhow::Result<Format> {
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "png" => Ok(Format::Png),
        "svg" => Ok(Format::Svg),
        _ => bail!("{}: the output must end in .png or .svg", path.display()),
    }
}

pub fn run(args: PlotArgs) -> anyhow::Result<()> {
    let format = format_of(&args.out)?;
    let inputs = args
        .inputs
        .iter()
        .map(|p| input::load(p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let chart = build(&args, &inputs)?;
    let bytes = match format {
        Format::Png => render::png(&chart, args.size)?,
        Format::Svg => render::svg(&chart, args.size)?.into_bytes(),
    };
    if let Some(dir) = args.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&args.out, &bytes).with_context(|| format!("writing {}", args.out.display()))?;
    print!("{}", format_table(&chart));
    println!(
        "wrote {} ({}x{} {}, {} bytes)",
        args.out.display(),
        args.size.0,
        args.size.1,
        if format == Format::Png { "PNG" } else { "SVG" },
        bytes.len()
    );
    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "out": args.out,
            "kind": format!("{:?}", args.kind),
            "inputs": args.inputs,
            "chart": chart,
        });
        crate::metrics::write_json(path, &doc)?;
    }
    Ok(())
}

/// The chart for these arguments and inputs.
pub fn build(args: &PlotArgs, inputs: &[Input]) -> anyhow::Result<Chart> {
    let mut chart = match args.kind {
        Kind::HitRatioOverTime => hit_ratio_chart(args, &runs_of(args, inputs)?)?,
        Kind::LatencyCdf => latency_chart(args, &runs_of(args, inputs)?)?,
        Kind::Mrc => mrc_chart(args, &mrcs_of(inputs)?)?,
        Kind::ZoneSplit => zone_chart(args, &runs_of(args, inputs)?)?,
    };
    if let Some(t) = &args.title {
        chart.title = t.clone();
    }
    for (s, l) in chart.series.iter_mut().zip(&args.label) {
        s.label = l.clone();
    }
    if chart.series.iter().all(|s| s.points.is_empty()) {
        bail!("nothing to plot: the results hold no {:?} data", args.kind);
    }
    Ok(chart)
}

/// A run with the name it gets in the legend.
struct Named<'a> {
    name: String,
    run: &'a RunView,
}

/// The runs of the inputs, named: the run's label (or the file's name),
/// plus its repetition when a compare result repeats a label, plus the file
/// name when two files still give the same name.
fn runs_of<'a>(args: &PlotArgs, inputs: &'a [Input]) -> anyhow::Result<Vec<Named<'a>>> {
    let mut out = Vec::new();
    for inp in inputs {
        let runs = match &inp.doc {
            Doc::Runs(r) => r,
            Doc::Mrc(_) => bail!(
                "{} is an mrc report: --kind {:?} needs results of replay, sim or compare",
                inp.path.display(),
                args.kind
            ),
        };
        let mut per_label: HashMap<&str, usize> = HashMap::new();
        for r in runs {
            *per_label.entry(r.meta.label.as_str()).or_default() += 1;
        }
        for r in runs {
            let rep = r.meta.repetition();
            if let (Some(want), Some(rep)) = (args.repetition, rep) {
                if rep + 1 != want {
                    continue;
                }
            }
            let mut name = if r.meta.label.is_empty() {
                inp.stem()
            } else {
                r.meta.label.clone()
            };
            if per_label.get(r.meta.label.as_str()).copied().unwrap_or(0) > 1
                && args.repetition.is_none()
            {
                if let Some(rep) = rep {
                    name = format!("{name} #{}", rep + 1);
                }
            }
            out.push((name, inp.stem(), r));
        }
    }
    // Names still shared by runs of different files: their memory sizes
    // when those tell them apart (the usual "same workload at 4 MB and at
    // 8 MB"), else their file names.
    let mut groups: HashMap<String, Vec<Option<u64>>> = HashMap::new();
    for (n, _, r) in &out {
        groups.entry(n.clone()).or_default().push(r.meta.memory_mb);
    }
    let named: Vec<Named> = out
        .into_iter()
        .map(|(name, stem, run)| {
            let group = groups.get(&name).map(Vec::as_slice).unwrap_or(&[]);
            let by_memory = group.iter().all(Option::is_some)
                && group.iter().collect::<BTreeSet<_>>().len() == group.len();
            let name = match run.meta.memory_mb {
                _ if group.len() <= 1 => name,
                Some(mb) if by_memory => format!("{name}, {mb} MB"),
                _ => format!("{name} ({stem})"),
            };
            Named { name, run }
        })
        .collect();
    if named.is_empty() {
        bail!("no runs to plot (check --repetition)");
    }
    Ok(named)
}

fn mrcs_of(inputs: &[Input]) -> anyhow::Result<Vec<(String, &MrcView)>> {
    let mut out = Vec::new();
    for inp in inputs {
        match &inp.doc {
            Doc::Mrc(m) => out.push((inp.stem(), m)),
            Doc::Runs(_) => bail!(
                "{} holds run results: --kind mrc needs the --json output of `cachalot-lab mrc`",
                inp.path.display()
            ),
        }
    }
    // One file: its workload names it; several: their sources, or their
    // file names when the sources coincide.
    let sources: BTreeSet<&str> = out.iter().map(|(_, m)| m.source.as_str()).collect();
    let distinct = sources.len() == out.len() && !sources.contains("");
    Ok(out
        .into_iter()
        .map(|(stem, m)| {
            let name = if distinct { m.source.clone() } else { stem };
            (name, m)
        })
        .collect())
}

/// The models of these runs, for a default title.
fn models(runs: &[Named]) -> String {
    let set: BTreeSet<&str> = runs
        .iter()
        .map(|r| r.run.meta.model.as_str())
        .filter(|m| !m.is_empty())
        .collect();
    set.into_iter().collect::<Vec<_>>().join(", ")
}

fn titled(what: &str, detail: &str) -> String {
    if detail.is_empty() {
        what.to_string()
    } else {
        format!("{what}: {detail}")
    }
}

// ---------------------------------------------------------------------------
// Hit ratio over time

/// Whether the x axis is in seconds: as asked, or (auto) when every run's
/// intervals were cut in seconds.
fn seconds_axis(x: XAxis, runs: &[Named]) -> bool {
    match x {
        XAxis::Seconds => true,
        XAxis::Requests => false,
        XAxis::Auto => {
            runs.iter()
                .flat_map(|r| r.run.intervals.first())
                .all(|i| i.unit == "seconds")
                && runs.iter().any(|r| !r.run.intervals.is_empty())
        }
    }
}

fn time_axis(seconds: bool) -> Axis {
    if seconds {
        Axis::new("time since start", Ticks::Seconds)
    } else {
        Axis::new("requests", Ticks::Count)
    }
}

fn hit_ratio_chart(args: &PlotArgs, runs: &[Named]) -> anyhow::Result<Chart> {
    let seconds = seconds_axis(args.x, runs);
    let series = runs
        .iter()
        .map(|r| Series::line(r.name.clone(), interval_points(r.run, args.metric, seconds)))
        .collect();
    let (name, what) = match args.metric {
        Metric::Hit => ("hit ratio", "Hit ratio over time"),
        Metric::ByteHit => ("byte hit ratio", "Byte hit ratio over time"),
        Metric::CostHit => ("cost hit ratio", "Cost hit ratio over time"),
    };
    Ok(Chart {
        title: titled(what, &models(runs)),
        x: time_axis(seconds)
            .from_zero()
            .log(args.x_scale.log_or(false)),
        y: Axis::new(&format!("{name} per interval"), Ticks::Ratio).log(args.y_scale.log_or(false)),
        legend: Legend::LowerRight,
        series,
    })
}

/// One point per interval: the ratio over the interval, at the middle of
/// the stretch of requests (or time) it covers. Intervals where the ratio
/// has no denominator (no GETs, e.g. only SETs) are left out rather than
/// drawn as a drop to 0.
fn interval_points(run: &RunView, metric: Metric, seconds: bool) -> Vec<(f64, f64)> {
    run.intervals
        .iter()
        .zip(interval_spans(run, seconds))
        .filter_map(|(iv, (a, b))| Some(((a + b) / 2.0, interval_ratio(iv, metric)?)))
        .collect()
}

/// Where each interval starts and ends on the x axis: in requests or in
/// seconds, whatever unit the intervals were cut in.
fn interval_spans(run: &RunView, seconds: bool) -> Vec<(f64, f64)> {
    let ivs = &run.intervals;
    let elapsed = run.totals.elapsed_s;
    let mut cumulative = 0.0;
    let mut out = Vec::new();
    for (i, iv) in ivs.iter().enumerate() {
        let requests = iv.counts.requests.map(|n| n as f64);
        let span = if seconds {
            if iv.unit == "seconds" {
                // The last interval ends with the run, not at its nominal end.
                let end = if elapsed.is_finite() && elapsed > iv.start && elapsed < iv.end {
                    elapsed
                } else {
                    iv.end
                };
                (iv.start, end)
            } else {
                // Request intervals: when their first request completed.
                let next = ivs.get(i + 1).map(|n| n.start_s).unwrap_or(elapsed);
                (
                    iv.start_s,
                    if next.is_finite() && next > iv.start_s {
                        next
                    } else {
                        iv.start_s
                    },
                )
            }
        } else if iv.unit == "seconds" {
            let n = requests.unwrap_or(0.0);
            let a = cumulative;
            cumulative += n;
            (a, a + n)
        } else {
            (iv.start, requests.map(|n| iv.start + n).unwrap_or(iv.end))
        };
        out.push(span);
    }
    out
}

/// The interval's ratio from its counts when it has them (exact), else the
/// ratio the document states; None when nothing was requested.
fn interval_ratio(iv: &IntervalView, metric: Metric) -> Option<f64> {
    let c = &iv.counts;
    let (num, den, stated) = match metric {
        Metric::Hit => (c.hits, c.gets, iv.hit_ratio),
        Metric::ByteHit => (c.bytes_hit, c.bytes_requested, iv.byte_hit_ratio),
        Metric::CostHit => (c.cost_hit, c.cost_requested, iv.cost_hit_ratio),
    };
    match (num, den) {
        (_, Some(0)) => None,
        (Some(n), Some(d)) => Some(n as f64 / d as f64),
        _ => stated.is_finite().then_some(stated),
    }
}

// ---------------------------------------------------------------------------
// The N-zone / Z-zone split over time

/// zExpander's Fig. 15 with the hit ratio of its Fig. 16, from `sim --zzone
/// true` runs: per interval, each zone's share of `-m` and the Z-zone's
/// target share at the interval's end, the share of the interval's GET hits
/// the N-zone served and its hit ratio (at its middle), and the items cached
/// (uncompressed) against `-m`, which compression lets pass 1. Runs of the
/// `zexpander-switch` model get a vertical line where the pattern turns
/// from uniform to zipfian (on a requests axis).
fn zone_chart(args: &PlotArgs, runs: &[Named]) -> anyhow::Result<Chart> {
    let seconds = seconds_axis(args.x, runs);
    let mut series = Vec::new();
    let mut switches = Vec::new();
    for r in runs {
        let prefix = if runs.len() > 1 {
            format!("{}: ", r.name)
        } else {
            String::new()
        };
        let mut lines: [Vec<(f64, f64)>; 6] = Default::default();
        let spans = interval_spans(r.run, seconds);
        for (iv, &(a, b)) in r.run.intervals.iter().zip(&spans) {
            let Some(z) = iv.zzone.as_ref().filter(|z| z.memory_limit > 0) else {
                continue;
            };
            let m = z.memory_limit as f64;
            lines[0].push((b, z.nzone_memory as f64 / m));
            lines[1].push((b, z.zzone_memory as f64 / m));
            lines[2].push((b, z.target_percent as f64 / 100.0));
            if let Some(hits) = iv.counts.hits.filter(|&h| h > 0) {
                let at_n = hits.saturating_sub(z.zzone_hits) as f64 / hits as f64;
                lines[3].push(((a + b) / 2.0, at_n));
            }
            if let Some(h) = interval_ratio(iv, Metric::Hit) {
                lines[4].push(((a + b) / 2.0, h));
            }
            let cached = z.nzone_item_bytes.saturating_add(z.zzone_item_bytes);
            lines[5].push((b, cached as f64 / m));
        }
        if lines.iter().all(Vec::is_empty) {
            bail!(
                "{}: no Z-zone figures in its intervals (made by `sim --zzone true`)",
                r.name
            );
        }
        let names = [
            "N-zone memory / -m",
            "Z-zone memory / -m",
            "Z-zone target share",
            "GET hits served by the N-zone",
            "hit ratio",
            "items cached (uncompressed) / -m",
        ];
        for (i, (name, pts)) in names.iter().zip(lines).enumerate() {
            series.push(Series {
                thin: i == 2,
                ..Series::line(format!("{prefix}{name}"), pts)
            });
        }
        if let Some(x) = switch_at(r.run).filter(|_| !seconds) {
            if !switches.contains(&x) {
                switches.push(x);
            }
        }
    }
    let top = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .filter(|y| y.is_finite())
        .fold(1.0, f64::max);
    for x in switches {
        series.push(Series {
            thin: true,
            ..Series::line("switch to zipfian".to_string(), vec![(x, 0.0), (x, top)])
        });
    }
    let ylog = args.y_scale.log_or(false);
    let y = Axis::new("share", Ticks::Number).log(ylog);
    Ok(Chart {
        title: titled("N-zone / Z-zone split over time", &models(runs)),
        x: time_axis(seconds)
            .from_zero()
            .log(args.x_scale.log_or(false)),
        // Headroom above the lines for the legend's rows.
        y: if ylog { y } else { y.range(0.0, top * 1.4) },
        legend: Legend::UpperRight,
        series,
    })
}

/// The request at which a `zexpander-switch` run changed pattern.
fn switch_at(run: &RunView) -> Option<f64> {
    let m = &run.meta;
    if !matches!(m.model.as_str(), "zexpander-switch" | "zexpander") || m.requests == 0 {
        return None;
    }
    let share = match m.params.get("switch") {
        Some(v) => v.parse::<f64>().ok()?,
        None => crate::workload::phased::SWITCH,
    };
    Some(crate::workload::phased::switch_request(m.requests, share) as f64)
}

// ---------------------------------------------------------------------------
// Miss-ratio curves

fn mrc_chart(args: &PlotArgs, mrcs: &[(String, &MrcView)]) -> anyhow::Result<Chart> {
    let mut series = Vec::new();
    let mut bytes_of = BTreeSet::new();
    for (name, m) in mrcs {
        let curve = match args.by {
            MrcBy::Bytes => &m.by_bytes,
            MrcBy::Items => &m.by_items,
        };
        let mut pts: Vec<&input::CurvePointView> = curve.iter().collect();
        pts.sort_by(|a, b| a.size.total_cmp(&b.size));
        let prefix = if mrcs.len() > 1 {
            format!("{name}: ")
        } else {
            String::new()
        };
        series.push(Series::line(
            format!("{prefix}miss ratio"),
            pts.iter().map(|p| (p.size, p.miss_ratio)).collect(),
        ));
        if args.byte_miss {
            series.push(Series::line(
                format!("{prefix}byte miss ratio"),
                pts.iter().map(|p| (p.size, p.byte_miss_ratio)).collect(),
            ));
        }
        // With unit costs the cost-miss ratio is the miss ratio: a second,
        // identical line would only hide the first.
        let cost: Vec<(f64, f64)> = pts
            .iter()
            .filter_map(|p| Some((p.size, p.cost_miss_ratio?)))
            .collect();
        let differs = pts.iter().any(|p| {
            p.cost_miss_ratio
                .is_some_and(|c| (c - p.miss_ratio).abs() > 1e-9)
        });
        if differs {
            series.push(Series::line(format!("{prefix}cost miss ratio"), cost));
        }
        if let Some(n) = args.per_class {
            series.extend(class_curves(m, args.by, n, &prefix));
        }
        if !m.bytes_of.is_empty() {
            bytes_of.insert(m.bytes_of.clone());
        }
    }
    let x = match args.by {
        MrcBy::Items => Axis::new("cache size (items)", Ticks::Count),
        MrcBy::Bytes => {
            let of = if bytes_of.len() == 1 {
                bytes_of.iter().next().cloned().unwrap_or_default()
            } else {
                String::new()
            };
            let label = match of.as_str() {
                "value" => "cache size (bytes of values)",
                "item" => "cache size (bytes of items: header + key + value)",
                "chunk" => "cache size (bytes of slab chunks)",
                _ => "cache size (bytes)",
            };
            Axis::new(label, Ticks::Bytes)
        }
    };
    let detail = if mrcs.len() == 1 {
        mrcs[0].0.clone()
    } else {
        String::new()
    };
    Ok(Chart {
        title: titled("LRU miss-ratio curve", &detail),
        x: x.from_zero().log(args.x_scale.log_or(false)),
        y: Axis::new("miss ratio", Ticks::Ratio)
            .from_zero()
            .log(args.y_scale.log_or(false)),
        legend: Legend::UpperRight,
        series,
    })
}

/// The miss-ratio curves of the `n` slab classes with the most GETs: with
/// k pages (or k pages' worth of items) given to the class, the share of
/// its GETs that miss.
fn class_curves(m: &MrcView, by: MrcBy, n: usize, prefix: &str) -> Vec<Series> {
    let mut classes: Vec<&input::ClassView> = m
        .classes
        .iter()
        .filter(|c| c.requests.count > 0 && c.hits_by_pages.len() > 1)
        .collect();
    classes.sort_by_key(|c| std::cmp::Reverse(c.requests.count));
    classes
        .into_iter()
        .take(n)
        .map(|c| {
            let unit = match by {
                MrcBy::Bytes => m.page_size as f64,
                MrcBy::Items => c.chunks_per_page as f64,
            };
            let total = c.requests.count as f64;
            let pts = c
                .hits_by_pages
                .iter()
                .enumerate()
                .skip(1)
                .map(|(k, h)| (k as f64 * unit, 1.0 - h.count as f64 / total))
                .collect();
            Series {
                thin: true,
                ..Series::line(
                    format!("{prefix}class {} ({} B chunks)", c.id, c.chunk_size),
                    pts,
                )
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Latency

fn latency_chart(args: &PlotArgs, runs: &[Named]) -> anyhow::Result<Chart> {
    let tail = args.style == CdfStyle::Tail;
    let mut series = Vec::new();
    let mut missing = Vec::new();
    let show_op = args.op.len() > 1 || args.op.iter().any(|o| o != "all");
    for r in runs {
        for op in &args.op {
            let Some(lat) = r.run.totals.latency.get(op.as_str()) else {
                missing.push(format!("{} ({op})", r.name));
                continue;
            };
            let (points, dense) = lat.points();
            let pts = if tail {
                tail_points(&points, lat.count)
            } else {
                points.iter().map(|&(q, us)| (us, q)).collect()
            };
            let name = if show_op {
                format!("{} {op}", r.name)
            } else {
                r.name.clone()
            };
            series.push(Series {
                markers: !dense,
                ..Series::line(name, pts)
            });
        }
    }
    if series.is_empty() {
        bail!(
            "no latency figures for {} (sim measures none; replay and compare do)",
            missing.join(", ")
        );
    }
    if !missing.is_empty() {
        eprintln!("no latency for: {}", missing.join(", "));
    }
    let latency = Axis::new("latency", Ticks::Micros);
    let (x, y, legend) = if tail {
        (
            Axis::new("percentile", Ticks::Tail)
                .range(1.0, tail_extent(&series))
                .log(args.x_scale.log_or(true)),
            latency.log(args.y_scale.log_or(true)),
            Legend::UpperLeft,
        )
    } else {
        (
            latency.log(args.x_scale.log_or(true)),
            Axis::new("fraction of requests at or below", Ticks::Ratio)
                .range(0.0, 1.0)
                .log(args.y_scale.log_or(false)),
            Legend::LowerRight,
        )
    };
    let what = if tail {
        "Latency by percentile"
    } else {
        "Latency CDF"
    };
    Ok(Chart {
        title: titled(what, &models(runs)),
        x,
        y,
        legend,
        series,
    })
}

/// Percentile-spectrum points: (1 / (1 - q), latency). The maximum (q = 1)
/// sits at x = count: of `count` samples, it is the 1/count tail.
fn tail_points(points: &[(f64, f64)], count: u64) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = points
        .iter()
        .filter(|(q, _)| *q >= 0.0 && *q < 1.0)
        .map(|&(q, us)| (1.0 / (1.0 - q), us))
        .collect();
    if let Some(&(_, max)) = points.iter().find(|(q, _)| *q >= 1.0) {
        let last = out.last().map(|p| p.0).unwrap_or(1.0);
        if count as f64 > last {
            out.push((count as f64, max));
        }
    }
    out
}

/// The x range of a percentile spectrum: up to the next power of ten past
/// the deepest point, so the last decade is labelled.
fn tail_extent(series: &[Series]) -> f64 {
    let deepest = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .filter(|x| x.is_finite())
        .fold(10.0, f64::max);
    // 1 / (1 - 0.99999) is 100000.0000008: a hair past the decade it names.
    10f64.powf((deepest.log10() - 1e-6).ceil()).max(10.0)
}

// ---------------------------------------------------------------------------
// Table

/// One row per series: points, x extent, and the y values' range and last.
pub fn format_table(chart: &Chart) -> String {
    let mut rows = vec![[
        "series", "points", "x from", "x to", "y min", "y max", "y last",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect::<Vec<_>>()];
    let (xt, yt) = (chart.x.ticks, chart.y.ticks);
    let f = |t: Ticks, v: Option<f64>| {
        v.map(|v| {
            if t == Ticks::Ratio {
                format!("{v:.4}")
            } else {
                render::tick(t, v)
            }
        })
        .unwrap_or_else(|| "-".to_string())
    };
    for s in &chart.series {
        let p: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect();
        let ymin = p.iter().map(|q| q.1).reduce(f64::min);
        let ymax = p.iter().map(|q| q.1).reduce(f64::max);
        rows.push(vec![
            s.label.clone(),
            p.len().to_string(),
            f(xt, p.first().map(|q| q.0)),
            f(xt, p.last().map(|q| q.0)),
            f(yt, ymin),
            f(yt, ymax),
            f(yt, p.last().map(|q| q.1)),
        ]);
    }
    format!("{}\n{}", chart.title, crate::metrics::render(&rows))
}

#[cfg(test)]
mod tests;
