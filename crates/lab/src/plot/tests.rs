//! Tests of `plot`: charts drawn from result documents written by the real
//! writer (metrics::Recorder), checked as files (PNG signature, header and
//! pixels; SVG elements) and through the plotted series.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use super::*;
use crate::metrics::{At, IntervalSpec, LatOp, Recorder, RunMeta, RunResult};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    plot: PlotArgs,
}

fn args(a: &[&str]) -> PlotArgs {
    match Cli::try_parse_from(std::iter::once("plot").chain(a.iter().copied())) {
        Ok(c) => c.plot,
        Err(e) => panic!("{a:?}: {e}"),
    }
}

/// A fresh directory for one test's files.
fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cachalot-plot-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn at(seq: u64) -> At {
    At {
        seq,
        elapsed_us: seq * 10,
    }
}

/// 1100 requests in intervals of 100: in interval k < 10, request i hits
/// when i < 10k + extra (hit ratio (10k + extra) / 100); the last interval
/// holds only SETs. GET latencies of 1..100 us.
fn synthetic_run(label: &str, memory_mb: Option<u64>, extra: u64) -> RunResult {
    let mut rec = Recorder::new(IntervalSpec::Requests(100));
    for k in 0..10u64 {
        for i in 0..100u64 {
            let seq = k * 100 + i;
            rec.get(at(seq), i < 10 * k + extra, 100, 1 + (i % 3) as u32);
            rec.latency(at(seq), LatOp::Get, 1000 * (1 + i));
        }
    }
    for seq in 1000..1100 {
        rec.set(at(seq));
    }
    let meta = RunMeta {
        tool: "replay".into(),
        label: label.into(),
        model: "ycsb-b".into(),
        memory_mb,
        ..RunMeta::default()
    };
    rec.finish(meta, Duration::from_millis(11))
}

fn write(dir: &std::path::Path, name: &str, doc: &impl serde::Serialize) -> String {
    let p = dir.join(name);
    crate::metrics::write_json(&p, doc).unwrap();
    p.to_string_lossy().into_owned()
}

fn expected_hit(extra: u64) -> Vec<(f64, f64)> {
    (0..10u64)
        .map(|k| (k as f64 * 100.0 + 50.0, (10 * k + extra) as f64 / 100.0))
        .collect()
}

/// The exact RGB of series `i`.
fn rgb(i: usize) -> [u8; 3] {
    let c = render::color(i);
    [c.0, c.1, c.2]
}

#[test]
fn hit_ratio_over_time_png_and_svg_from_recorded_runs() {
    let dir = tmp("hit");
    let a = write(&dir, "mc.json", &synthetic_run("memcached", Some(64), 0));
    let b = write(&dir, "ca.json", &synthetic_run("cachalot", Some(64), 5));
    let png_path = dir.join("hit.png");
    let svg_path = dir.join("hit.svg");
    let json_path = dir.join("series.json");
    let png_s = png_path.to_string_lossy().into_owned();
    let svg_s = svg_path.to_string_lossy().into_owned();
    let json_s = json_path.to_string_lossy().into_owned();
    run(args(&[
        "--kind",
        "hit-ratio-over-time",
        "--out",
        &png_s,
        "--size",
        "640x400",
        &a,
        &b,
    ]))
    .unwrap();
    run(args(&[
        "--kind",
        "hit-ratio-over-time",
        "--out",
        &svg_s,
        "--json",
        &json_s,
        &a,
        &b,
    ]))
    .unwrap();

    // PNG: signature, IHDR first with the requested size, and pixels: the
    // two series' colours are drawn, a third colour is not, and the title
    // strip holds dark (text) pixels.
    let png_bytes = std::fs::read(&png_path).unwrap();
    assert_eq!(&png_bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(&png_bytes[12..16], b"IHDR");
    assert_eq!(
        u32::from_be_bytes(png_bytes[16..20].try_into().unwrap()),
        640
    );
    assert_eq!(
        u32::from_be_bytes(png_bytes[20..24].try_into().unwrap()),
        400
    );
    let decoder = png::Decoder::new(std::io::Cursor::new(&png_bytes));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut pixels).unwrap();
    assert_eq!((info.width, info.height), (640, 400));
    assert_eq!(info.color_type, png::ColorType::Rgb);
    let count = |c: [u8; 3]| pixels.chunks(3).filter(|p| *p == c).count();
    assert!(count(rgb(0)) > 100, "series 0 not drawn");
    assert!(count(rgb(1)) > 100, "series 1 not drawn");
    assert_eq!(count(rgb(2)), 0, "a third series appeared");
    let title_dark = pixels[..640 * 3 * 40]
        .chunks(3)
        .filter(|p| p.iter().all(|&v| v < 100))
        .count();
    assert!(
        title_dark > 50,
        "no title text rendered ({title_dark} dark pixels)"
    );

    // SVG: a document whose series are polylines: for each run, one with a
    // point per interval that has GETs (the SET-only one is left out) and
    // the legend's sample line.
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..80.min(svg.len())]);
    assert!(svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("Hit ratio over time: ycsb-b"));
    for (i, name) in [(0, "memcached"), (1, "cachalot")] {
        let (stroke, lens) = polylines(&svg, i);
        assert_eq!(lens, vec![10, 2], "{name}: {stroke}");
        assert!(svg.contains(name), "legend lacks {name}");
    }

    // The series written with --json are the per-interval hit ratios at
    // the middle of each interval.
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    let series = doc["chart"]["series"].as_array().unwrap();
    assert_eq!(series.len(), 2);
    for (s, extra, name) in [(&series[0], 0, "memcached"), (&series[1], 5, "cachalot")] {
        assert_eq!(s["label"], name);
        let pts: Vec<(f64, f64)> = serde_json::from_value(s["points"].clone()).unwrap();
        let want = expected_hit(extra);
        assert_eq!(pts.len(), want.len());
        for (p, w) in pts.iter().zip(&want) {
            assert!(
                (p.0 - w.0).abs() < 1e-9 && (p.1 - w.1).abs() < 1e-9,
                "{p:?} vs {w:?}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn interval_points_in_seconds_and_cumulative_requests() {
    let run: RunView = serde_json::from_str(
        r#"{"totals":{"elapsed_s":2.5},"intervals":[
            {"unit":"seconds","start":0,"end":1,"start_s":0.01,"hit_ratio":0.9,
             "counts":{"requests":10,"gets":10,"hits":5}},
            {"unit":"seconds","start":1,"end":2,"start_s":1.0,"hit_ratio":0.0,
             "counts":{"requests":20,"gets":0,"hits":0}},
            {"unit":"seconds","start":2,"end":3,"start_s":2.0,"hit_ratio":0.75}]}"#,
    )
    .unwrap();
    // The counts win over the stated ratio (0.5, not 0.9); an interval
    // without GETs is skipped; one without counts uses its stated ratio;
    // the last interval ends with the run (2.5 s), not at 3 s.
    assert_eq!(
        interval_points(&run, Metric::Hit, true),
        vec![(0.5, 0.5), (2.25, 0.75)]
    );
    // By requests: the intervals' request counts, accumulated (the last
    // has none, so it is a point at the end).
    assert_eq!(
        interval_points(&run, Metric::Hit, false),
        vec![(5.0, 0.5), (30.0, 0.75)]
    );
    // Request intervals on a time axis: from when each began to the next.
    let run: RunView = serde_json::from_str(
        r#"{"totals":{"elapsed_s":3.0},"intervals":[
            {"unit":"requests","start":0,"end":100,"start_s":0.0,"counts":{"gets":4,"hits":1,
             "cost_requested":10,"cost_hit":7}},
            {"unit":"requests","start":100,"end":200,"start_s":1.0,"counts":{"gets":4,"hits":2,
             "cost_requested":0,"cost_hit":0}}]}"#,
    )
    .unwrap();
    assert_eq!(
        interval_points(&run, Metric::Hit, true),
        vec![(0.5, 0.25), (2.0, 0.5)]
    );
    assert_eq!(
        interval_points(&run, Metric::CostHit, false),
        vec![(50.0, 0.7)]
    );
}

#[test]
fn series_names_from_labels_repetitions_memory_and_files() {
    let dir = tmp("names");
    let mut runs = Vec::new();
    for rep in 0..2u64 {
        for label in ["memcached", "cachalot"] {
            let mut r = synthetic_run(label, Some(64), rep);
            r.meta.settings.insert("repetition".into(), rep.into());
            runs.push(r);
        }
    }
    let cmp = write(
        &dir,
        "cmp.json",
        &serde_json::json!({"model": "ycsb-b", "runs": runs}),
    );
    let out = dir.join("x.svg").to_string_lossy().into_owned();
    let names = |a: &[&str]| -> Vec<String> {
        let a = args(a);
        let inputs: Vec<Input> = a.inputs.iter().map(|p| input::load(p).unwrap()).collect();
        build(&a, &inputs)
            .unwrap()
            .series
            .into_iter()
            .map(|s| s.label)
            .collect()
    };
    let k = ["--kind", "hit-ratio-over-time", "--out", &out];
    assert_eq!(
        names(&[&k[..], &[&cmp]].concat()),
        ["memcached #1", "cachalot #1", "memcached #2", "cachalot #2"]
    );
    assert_eq!(
        names(&[&k[..], &["--repetition", "2", &cmp]].concat()),
        ["memcached", "cachalot"]
    );
    assert_eq!(
        names(&[&k[..], &["--label", "a,b", &cmp]].concat()),
        ["a", "b", "memcached #2", "cachalot #2"]
    );
    let s4 = write(&dir, "s4.json", &synthetic_run("sim", Some(4), 0));
    let s8 = write(&dir, "s8.json", &synthetic_run("sim", Some(8), 0));
    let s8b = write(&dir, "s8b.json", &synthetic_run("sim", Some(8), 0));
    assert_eq!(
        names(&[&k[..], &[&s4, &s8]].concat()),
        ["sim, 4 MB", "sim, 8 MB"]
    );
    assert_eq!(
        names(&[&k[..], &[&s8, &s8b]].concat()),
        ["sim (s8)", "sim (s8b)"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn mrc_doc(cost: bool) -> serde_json::Value {
    let pts: Vec<serde_json::Value> = [(1u64 << 20, 0.8), (2 << 20, 0.5), (4 << 20, 0.25)]
        .iter()
        .map(|&(size, m)| {
            serde_json::json!({"size": size, "miss_ratio": m, "byte_miss_ratio": m / 2.0,
                "cost_miss_ratio": if cost { m * 0.9 } else { m }})
        })
        .collect();
    serde_json::json!({
        "source": "ycsb-b", "bytes_of": "value", "page_size": 1 << 20,
        "by_bytes": pts, "by_items": [],
        "classes": [
            {"id": 3, "chunk_size": 120, "chunks_per_page": 8738, "requests": {"count": 100},
             "hits_by_pages": [{"count": 0}, {"count": 30}, {"count": 60}]},
            {"id": 5, "chunk_size": 240, "chunks_per_page": 4369, "requests": {"count": 10},
             "hits_by_pages": [{"count": 0}, {"count": 9}]}
        ]
    })
}

#[test]
fn mrc_curves_cost_line_only_when_costs_vary_and_busiest_classes() {
    let dir = tmp("mrc");
    let unit = write(&dir, "unit.json", &mrc_doc(false));
    let costly = write(&dir, "costly.json", &mrc_doc(true));
    let out = dir.join("mrc.png").to_string_lossy().into_owned();
    let chart = |a: &[&str]| {
        let a = args(a);
        let inputs: Vec<Input> = a.inputs.iter().map(|p| input::load(p).unwrap()).collect();
        build(&a, &inputs).unwrap()
    };
    let c = chart(&["--kind", "mrc", "--out", &out, &unit]);
    assert_eq!(c.series.len(), 1);
    assert_eq!(c.series[0].label, "miss ratio");
    assert_eq!(
        c.series[0].points,
        vec![(1048576.0, 0.8), (2097152.0, 0.5), (4194304.0, 0.25)]
    );
    assert_eq!(c.title, "LRU miss-ratio curve: ycsb-b");
    assert_eq!(c.x.label, "cache size (bytes of values)");
    let c = chart(&[
        "--kind",
        "mrc",
        "--out",
        &out,
        "--per-class",
        "1",
        "--byte-miss",
        &costly,
    ]);
    let labels: Vec<&str> = c.series.iter().map(|s| s.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "miss ratio",
            "byte miss ratio",
            "cost miss ratio",
            "class 3 (120 B chunks)"
        ]
    );
    assert!((c.series[2].points[1].1 - 0.45).abs() < 1e-12);
    assert_eq!(c.series[1].points[0], (1048576.0, 0.4));
    // Class 3: 100 GETs, 30 hits with one page, 60 with two.
    assert_eq!(c.series[3].points, vec![(1048576.0, 0.7), (2097152.0, 0.4)]);
    assert!(c.series[3].thin);
    // Two files with the same source are told apart by file name.
    let c = chart(&["--kind", "mrc", "--out", &out, &unit, &costly]);
    assert_eq!(c.series[0].label, "unit: miss ratio");
    assert_eq!(c.series[1].label, "costly: miss ratio");
    // And it draws, on a log x axis too.
    run(args(&[
        "--kind",
        "mrc",
        "--out",
        &out,
        "--x-scale",
        "log",
        "--per-class",
        "2",
        &costly,
    ]))
    .unwrap();
    let bytes = std::fs::read(&out).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn latency_cdf_and_tail_from_the_histogram_points() {
    let dir = tmp("lat");
    let r = synthetic_run("cachalot", Some(64), 0);
    let all = &r.totals.latency["get"];
    let f = write(&dir, "run.json", &r);
    let out = dir.join("lat.svg").to_string_lossy().into_owned();
    let a = args(&["--kind", "latency-cdf", "--op", "get", "--out", &out, &f]);
    let c = build(&a, &[input::load(&a.inputs[0]).unwrap()]).unwrap();
    assert_eq!(c.series.len(), 1);
    assert_eq!(c.series[0].label, "cachalot get");
    assert!(c.x.log && !c.y.log);
    // The CDF is the document's quantile points, flipped to (latency, q).
    // (serde_json may round the last bit of a float.)
    let want: Vec<(f64, f64)> = all.cdf.iter().map(|p| (p[1], p[0])).collect();
    assert_eq!(c.series[0].points.len(), want.len());
    for (p, w) in c.series[0].points.iter().zip(&want) {
        assert!(
            (p.0 - w.0).abs() < 1e-9 && (p.1 - w.1).abs() < 1e-12,
            "{p:?} vs {w:?}"
        );
    }
    // 1000 GETs of 1..100 us, ten of each: the median is 50 us.
    let median = c.series[0].points.iter().find(|p| p.1 == 0.5).unwrap();
    assert!((median.0 - 50.0).abs() < 0.1, "{median:?}");
    assert!(!c.series[0].markers);
    run(a).unwrap();
    let svg = std::fs::read_to_string(&out).unwrap();
    assert!(svg.contains("<polyline") && svg.contains("Latency CDF"));

    // Tail: x = 1 / (1 - q); the maximum at x = count (1000 GETs).
    let pts = tail_points(&[(0.0, 1.0), (0.9, 5.0), (0.99, 7.0), (1.0, 9.0)], 1000);
    assert_eq!(pts.len(), 4);
    assert_eq!(pts[0], (1.0, 1.0));
    assert!((pts[1].0 - 10.0).abs() < 1e-9 && (pts[2].0 - 100.0).abs() < 1e-9);
    assert_eq!(pts[3], (1000.0, 9.0));
    // A maximum no deeper than the last quantile is not drawn backwards.
    assert_eq!(tail_points(&[(0.999, 5.0), (1.0, 9.0)], 10).len(), 1);
    let png_out = dir.join("tail.png").to_string_lossy().into_owned();
    run(args(&[
        "--kind",
        "latency-cdf",
        "--style",
        "tail",
        "--out",
        &png_out,
        &f,
    ]))
    .unwrap();
    assert_eq!(&std::fs::read(&png_out).unwrap()[..4], b"\x89PNG");

    // Only percentiles (no cdf points): drawn with markers (SVG circles).
    let doc = serde_json::json!({"meta": {"label": "old"}, "totals": {"latency": {"all": {
        "count": 10, "p50_us": 10.0, "p90_us": 20.0, "p99_us": 40.0, "p999_us": 50.0,
        "max_us": 60.0}}}});
    let old = write(&dir, "old.json", &doc);
    run(args(&["--kind", "latency-cdf", "--out", &out, &old])).unwrap();
    let svg = std::fs::read_to_string(&out).unwrap();
    assert_eq!(
        svg.matches("<circle").count(),
        5,
        "one marker per percentile"
    );

    // A sim result has no latency: a clear error, not an empty chart.
    let sim = write(
        &dir,
        "sim.json",
        &serde_json::json!({"meta": {"label": "sim"},
        "totals": {"latency": {}}}),
    );
    let e = run(args(&["--kind", "latency-cdf", "--out", &out, &sim])).unwrap_err();
    assert!(e.to_string().contains("no latency"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn wrong_inputs_and_outputs_are_refused() {
    let dir = tmp("errors");
    let mrc = write(&dir, "mrc.json", &mrc_doc(false));
    let runf = write(&dir, "run.json", &synthetic_run("x", None, 0));
    let svg = dir.join("a.svg").to_string_lossy().into_owned();
    let e = run(args(&[
        "--kind",
        "hit-ratio-over-time",
        "--out",
        &svg,
        &mrc,
    ]))
    .unwrap_err();
    assert!(e.to_string().contains("is an mrc report"), "{e}");
    let e = run(args(&["--kind", "mrc", "--out", &svg, &runf])).unwrap_err();
    assert!(e.to_string().contains("holds run results"), "{e}");
    let jpg = dir.join("a.jpg").to_string_lossy().into_owned();
    let e = run(args(&["--kind", "mrc", "--out", &jpg, &mrc])).unwrap_err();
    assert!(e.to_string().contains(".png or .svg"), "{e}");
    assert!(!std::path::Path::new(&jpg).exists());
    let missing = dir.join("missing.json").to_string_lossy().into_owned();
    assert!(run(args(&["--kind", "mrc", "--out", &svg, &missing])).is_err());
    let e = run(args(&[
        "--kind",
        "hit-ratio-over-time",
        "--repetition",
        "3",
        "--out",
        &svg,
        &runf,
    ]));
    // A plain run has no repetition: the filter does not apply to it.
    assert!(e.is_ok(), "{e:?}");
    assert_eq!(parse_dims("800x600"), Ok((800, 600)));
    assert!(parse_dims("800").is_err());
    assert!(parse_dims("10x10").is_err());
    assert!(parse_dims("99999x600").is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `sim --zzone true`-like run of `zexpander-switch`: 1000 requests in
/// intervals of 100, all GETs; in interval k, 50 + 4k hit, of which 20 - 2k
/// at the Z-zone; the Z-zone holds (10 + 5k)% of 4 000 000 bytes, the
/// N-zone (80 - 5k)%, and items of 3 000 000 + k x 200 000 bytes are cached.
fn zone_run() -> RunResult {
    let mut rec = Recorder::new(IntervalSpec::Requests(100));
    for k in 0..10u64 {
        for i in 0..100u64 {
            rec.get(at(k * 100 + i), i < 50 + 4 * k, 100, 1);
        }
    }
    let meta = RunMeta {
        tool: "sim".into(),
        label: "sim".into(),
        model: "zexpander-switch".into(),
        requests: 1000,
        params: [("switch".to_string(), "0.3".to_string())].into(),
        memory_mb: Some(4),
        ..RunMeta::default()
    };
    let mut r = rec.finish(meta, Duration::from_millis(5));
    let m = 4_000_000u64;
    for (k, iv) in r.intervals.iter_mut().enumerate() {
        let k = k as u64;
        iv.zzone = Some(crate::metrics::ZoneInterval {
            target_percent: 10 + 5 * k as u32,
            memory_limit: m,
            nzone_memory: m * (80 - 5 * k) / 100,
            zzone_memory: m * (10 + 5 * k) / 100,
            nzone_item_bytes: 2_000_000,
            zzone_item_bytes: 1_000_000 + k * 200_000,
            zzone_hits: 20 - 2 * k,
            ..Default::default()
        });
    }
    r
}

#[test]
fn zone_split_draws_the_zones_over_time() {
    let dir = tmp("zone");
    let f = write(&dir, "zz.json", &zone_run());
    let out = dir.join("zone.svg").to_string_lossy().into_owned();
    let a = args(&["--kind", "zone-split", "--out", &out, &f]);
    let c = build(&a, &[input::load(&a.inputs[0]).unwrap()]).unwrap();
    let labels: Vec<&str> = c.series.iter().map(|s| s.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "N-zone memory / -m",
            "Z-zone memory / -m",
            "Z-zone target share",
            "GET hits served by the N-zone",
            "hit ratio",
            "items cached (uncompressed) / -m",
            "switch to zipfian",
        ]
    );
    let close = |p: (f64, f64), w: (f64, f64)| {
        assert!(
            (p.0 - w.0).abs() < 1e-9 && (p.1 - w.1).abs() < 1e-9,
            "{p:?} vs {w:?}"
        )
    };
    for s in &c.series[..6] {
        assert_eq!(s.points.len(), 10, "{}", s.label);
    }
    // States at each interval's end, rates at its middle (interval 3:
    // requests 300..400).
    close(c.series[0].points[3], (400.0, 0.65));
    close(c.series[1].points[3], (400.0, 0.25));
    close(c.series[2].points[3], (400.0, 0.25));
    close(c.series[3].points[3], (350.0, (62.0 - 14.0) / 62.0));
    close(c.series[4].points[3], (350.0, 0.62));
    close(c.series[5].points[3], (400.0, 0.9));
    assert!(c.series[2].thin && !c.series[0].thin);
    // The switch: 30% of the 1000 requests, a line up to the highest point
    // (the items cached at the end: 4 800 000 / 4 000 000).
    assert_eq!(c.series[6].points, vec![(300.0, 0.0), (300.0, 1.2)]);
    assert_eq!(c.title, "N-zone / Z-zone split over time: zexpander-switch");
    // Room above the lines for the legend; none fixed on a log axis.
    assert_eq!(c.y.range, Some((0.0, 1.2 * 1.4)));
    let log = args(&[
        "--kind",
        "zone-split",
        "--y-scale",
        "log",
        "--out",
        &out,
        &f,
    ]);
    let cl = build(&log, &[input::load(&log.inputs[0]).unwrap()]).unwrap();
    assert!(cl.y.log && cl.y.range.is_none());
    // It draws: each series a polyline of its points in its colour, and
    // the legend's sample line.
    run(a).unwrap();
    let svg = std::fs::read_to_string(&out).unwrap();
    for (i, s) in c.series.iter().enumerate() {
        let (_, lens) = polylines(&svg, i);
        assert_eq!(lens, vec![s.points.len(), 2], "{}", s.label);
    }
    let png = dir.join("zone.png").to_string_lossy().into_owned();
    run(args(&["--kind", "zone-split", "--out", &png, &f])).unwrap();
    assert_eq!(&std::fs::read(&png).unwrap()[..4], b"\x89PNG");
    // Without Z-zone figures (a run without --zzone), a clear error.
    let plain = write(&dir, "plain.json", &synthetic_run("sim", Some(4), 0));
    let e = run(args(&["--kind", "zone-split", "--out", &out, &plain])).unwrap_err();
    assert!(e.to_string().contains("--zzone true"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The stroke attribute of series `i`'s colour, and the point counts of
/// the SVG's polylines drawn in it.
fn polylines(svg: &str, i: usize) -> (String, Vec<usize>) {
    let c = render::color(i);
    let stroke = format!("stroke=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2);
    let lens: Vec<usize> = svg
        .split("<polyline")
        .skip(1)
        .filter(|p| p.split('>').next().unwrap_or("").contains(&stroke))
        .map(|p| {
            let pts = p.split("points=\"").nth(1).unwrap_or("");
            pts.split('"')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .count()
        })
        .collect();
    (stroke, lens)
}
