//! `cachalot-lab advise HOST:PORT`: a running cachalot's miss-ratio curve
//! (`stats mrc`, issue 36) drawn as a chart (PNG and SVG), with what more
//! or less memory would do to its misses per second, in a sentence an
//! operator can act on.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::plot::render::{self, Axis, Chart, Legend, Series, Ticks};
use crate::servers;

#[derive(clap::Args, Debug)]
pub struct AdviseArgs {
    /// The cachalot to advise.
    pub server: SocketAddr,
    /// Where the chart goes: PREFIX.png and PREFIX.svg.
    #[arg(long, default_value = "advise")]
    pub out: PathBuf,
    /// Seconds over which the GET rate is measured.
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
}

/// One point of the curve: memory (bytes) and the miss ratio there.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    pub memory: f64,
    pub miss_ratio: f64,
}

/// The curve `stats mrc` gives, in memory order; an error when the server
/// keeps none or has not seen a GET yet.
pub fn curve(
    mrc: &std::collections::BTreeMap<String, String>,
    limit: f64,
) -> anyhow::Result<Vec<Point>> {
    if mrc.is_empty() {
        bail!("the server keeps no miss-ratio curve (cachalot with -o mrc=1, the default)");
    }
    let mut points = Vec::new();
    for (pct, x) in [(25, 0.25), (50, 0.5), (100, 1.0), (200, 2.0), (400, 4.0)] {
        let name = format!("mrc_miss_ratio_{pct}pct");
        let v: f64 = mrc
            .get(&name)
            .with_context(|| format!("stats mrc has no {name}"))?
            .parse()
            .with_context(|| format!("stats mrc's {name}"))?;
        if v < 0.0 {
            bail!("the curve has seen no GET yet");
        }
        points.push(Point {
            memory: x * limit,
            miss_ratio: v,
        });
    }
    Ok(points)
}

/// Bytes as an operator writes them.
fn bytes(b: f64) -> String {
    render::tick(Ticks::Bytes, b.abs())
}

/// The sentences: what twice the memory saves, and what half costs, in
/// misses per second at `gets_per_sec`.
pub fn sentences(points: &[Point], gets_per_sec: f64) -> Vec<String> {
    // `curve`'s third point is today's memory.
    let Some(now) = points.get(2) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for p in points.iter().filter(|p| p.memory != now.memory) {
        let delta = p.memory - now.memory;
        let change = p.miss_ratio - now.miss_ratio;
        let what = if change <= 0.0 { "save" } else { "cost" };
        out.push(format!(
            "{}{} ({} in all) would {what} about {:.0} misses/s ({:.0} per 1,000 GETs; \
             miss ratio {:.3} -> {:.3})",
            if delta > 0.0 { "+" } else { "-" },
            bytes(delta),
            bytes(p.memory),
            (change * gets_per_sec).abs(),
            (change * 1000.0).abs(),
            now.miss_ratio,
            p.miss_ratio
        ));
    }
    out
}

/// A prefix's own curve in `stats mrc` (`mrc:prefix:<p>:...`).
#[derive(Clone, Debug, PartialEq)]
pub struct PrefixCurve {
    pub prefix: String,
    pub miss_ratio: f64,
    pub effective_bytes: f64,
    pub at_half: f64,
    pub at_twice: f64,
}

/// The prefixes' curves `stats mrc` lists, those placed (no `-1`).
pub fn prefix_curves(mrc: &std::collections::BTreeMap<String, String>) -> Vec<PrefixCurve> {
    let mut out: Vec<PrefixCurve> = Vec::new();
    for (k, _) in mrc.iter().filter(|(k, _)| k.ends_with(":effective_bytes")) {
        let Some(p) = k
            .strip_prefix("mrc:prefix:")
            .and_then(|r| r.strip_suffix(":effective_bytes"))
        else {
            continue;
        };
        let f = |field: &str| -> Option<f64> {
            mrc.get(&format!("mrc:prefix:{p}:{field}"))?.parse().ok()
        };
        let (Some(m), Some(e), Some(h), Some(t)) = (
            f("miss_ratio"),
            f("effective_bytes"),
            f("miss_ratio_50pct"),
            f("miss_ratio_200pct"),
        ) else {
            continue;
        };
        if [m, e, h, t].iter().all(|v| *v >= 0.0) {
            out.push(PrefixCurve {
                prefix: p.to_string(),
                miss_ratio: m,
                effective_bytes: e,
                at_half: h,
                at_twice: t,
            });
        }
    }
    out
}

/// For each prefix: what giving up half of the LRU size it behaves as
/// would cost it, and what doubling it would save, per 1,000 of its GETs;
/// the one that would lose least first.
pub fn prefix_sentences(curves: &[PrefixCurve]) -> Vec<String> {
    let mut sorted: Vec<&PrefixCurve> = curves.iter().collect();
    sorted.sort_by(|a, b| (a.at_half - a.miss_ratio).total_cmp(&(b.at_half - b.miss_ratio)));
    sorted
        .iter()
        .map(|c| {
            format!(
                "prefix {} (behaves as an LRU of {}) could give up {} for {:.0} more misses per 1,000 of its GETs, \
                 or take {} more for {:.0} fewer (its miss ratio {:.3}: {:.3} with half, {:.3} with twice)",
                c.prefix,
                bytes(c.effective_bytes),
                bytes(c.effective_bytes / 2.0),
                (c.at_half - c.miss_ratio).max(0.0) * 1000.0,
                bytes(c.effective_bytes),
                (c.miss_ratio - c.at_twice).max(0.0) * 1000.0,
                c.miss_ratio,
                c.at_half,
                c.at_twice
            )
        })
        .collect()
}

fn gets(addr: SocketAddr) -> anyhow::Result<f64> {
    let s = servers::stats(addr, "stats")?;
    let n = |k: &str| -> anyhow::Result<f64> {
        s.get(k)
            .with_context(|| format!("stats has no {k}"))?
            .parse::<f64>()
            .with_context(|| format!("stats' {k}"))
    };
    Ok(n("get_hits")? + n("get_misses")?)
}

pub fn run(args: AdviseArgs) -> anyhow::Result<()> {
    let settings = servers::stats(args.server, "stats")?;
    let limit: f64 = settings
        .get("limit_maxbytes")
        .context("stats has no limit_maxbytes")?
        .parse()?;
    let before = (Instant::now(), gets(args.server)?);
    std::thread::sleep(Duration::from_secs_f64(args.seconds.max(0.1)));
    let after = (Instant::now(), gets(args.server)?);
    let rate = (after.1 - before.1).max(0.0) / after.0.duration_since(before.0).as_secs_f64();
    let mrc = servers::stats(args.server, "stats mrc").unwrap_or_default();
    let points = curve(&mrc, limit)?;

    let chart = Chart {
        title: format!("{}: miss ratio by memory (stats mrc)", args.server),
        x: Axis::new("memory (-m)", Ticks::Bytes).from_zero(),
        y: Axis::new("miss ratio", Ticks::Ratio).from_zero(),
        legend: Legend::UpperRight,
        series: vec![
            Series {
                markers: true,
                ..Series::line(
                    "predicted".to_string(),
                    points.iter().map(|p| (p.memory, p.miss_ratio)).collect(),
                )
            },
            Series {
                markers: true,
                ..Series::line(
                    "now".to_string(),
                    vec![(points[2].memory, points[2].miss_ratio)],
                )
            },
        ],
    };
    let png = args.out.with_extension("png");
    let svg = args.out.with_extension("svg");
    std::fs::write(&png, render::png(&chart, (900, 600))?)
        .with_context(|| format!("writing {}", png.display()))?;
    std::fs::write(&svg, render::svg(&chart, (900, 600))?)
        .with_context(|| format!("writing {}", svg.display()))?;

    println!("{:>12}  {:>10}", "memory", "miss ratio");
    for p in &points {
        println!("{:>12}  {:>10.4}", bytes(p.memory), p.miss_ratio);
    }
    println!("GETs now: {rate:.0}/s");
    for s in sentences(&points, rate) {
        println!("{s}");
    }
    for s in prefix_sentences(&prefix_curves(&mrc)) {
        println!("{s}");
    }
    println!("chart: {} and {}", png.display(), svg.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_curve_and_its_sentences() {
        let mrc: std::collections::BTreeMap<String, String> = [
            ("mrc_miss_ratio_25pct", "0.50"),
            ("mrc_miss_ratio_50pct", "0.30"),
            ("mrc_miss_ratio_100pct", "0.20"),
            ("mrc_miss_ratio_200pct", "0.15"),
            ("mrc_miss_ratio_400pct", "0.15"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let gib = 1024.0 * 1024.0 * 1024.0;
        let points = curve(&mrc, gib).unwrap();
        assert_eq!(points.len(), 5);
        assert_eq!(
            points[3],
            Point {
                memory: 2.0 * gib,
                miss_ratio: 0.15
            }
        );
        let s = sentences(&points, 10_000.0);
        assert_eq!(s.len(), 4);
        assert!(
            s[2].starts_with("+1 GB (2 GB in all) would save about 500 misses/s"),
            "{s:?}"
        );
        assert!(
            s[1].starts_with("-512 MB (512 MB in all) would cost about 1000 misses/s"),
            "{s:?}"
        );
        // A prefix's own curve, and one not placed yet (left out).
        let mut with = mrc.clone();
        for (k, v) in [
            ("mrc:prefix:b:miss_ratio", "0.01"),
            ("mrc:prefix:b:effective_bytes", "2147483648"),
            ("mrc:prefix:b:miss_ratio_50pct", "0.015"),
            ("mrc:prefix:b:miss_ratio_200pct", "0.01"),
            ("mrc:prefix:c:miss_ratio", "-1.0000"),
            ("mrc:prefix:c:effective_bytes", "-1"),
            ("mrc:prefix:c:miss_ratio_50pct", "-1.0000"),
            ("mrc:prefix:c:miss_ratio_200pct", "-1.0000"),
        ] {
            with.insert(k.into(), v.into());
        }
        let curves = prefix_curves(&with);
        assert_eq!(curves.len(), 1);
        let s = prefix_sentences(&curves);
        assert!(
            s[0].starts_with("prefix b (behaves as an LRU of 2 GB) could give up 1 GB for 5 more misses per 1,000 of its GETs"),
            "{s:?}"
        );
        // Before any GET, or with the curve off: an error, not a chart.
        let mut early = mrc.clone();
        early.insert("mrc_miss_ratio_50pct".into(), "-1.0000".into());
        assert!(curve(&early, gib).is_err());
        assert!(curve(&Default::default(), gib).is_err());
    }
}
