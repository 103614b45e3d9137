//! Reading the lab's JSON results for `plot`: the `RunResult` document of
//! `replay` and `sim` (crates/lab/src/metrics.rs), `compare`'s document (a
//! list of `RunResult`s with a summary, crates/lab/src/compare.rs) and `mrc`'s
//! report (crates/lab/src/mrc.rs).
//!
//! Why separate "view" structs rather than those types: the documents are
//! still growing, and older result files must keep plotting. Every field here
//! has a serde default, unknown fields are ignored, and numbers that
//! serde_json wrote as `null` (it writes NaN and infinities that way) read as
//! NaN and are dropped when plotting instead of failing the whole file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Deserializer};

/// A number that may be `null` (NaN or infinity on the writer's side).
fn num<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// Per-run counts; `None` when the document lacks them (then nothing is
/// filtered on them).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct CountsView {
    pub requests: Option<u64>,
    pub gets: Option<u64>,
    pub hits: Option<u64>,
    pub bytes_requested: Option<u64>,
    pub bytes_hit: Option<u64>,
    pub cost_requested: Option<u64>,
    pub cost_hit: Option<u64>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct MetaView {
    pub tool: String,
    pub label: String,
    pub model: String,
    pub server_kind: String,
    pub memory_mb: Option<u64>,
    /// The model's `--param`s and the requests asked of it.
    pub params: BTreeMap<String, String>,
    pub requests: u64,
    pub settings: BTreeMap<String, serde_json::Value>,
}

impl MetaView {
    /// `compare`'s repetition number (0-based), if any.
    pub fn repetition(&self) -> Option<u64> {
        self.settings.get("repetition").and_then(|v| v.as_u64())
    }
}

/// Latency of one operation: percentiles in microseconds and, when the
/// writer had the histogram, `[quantile, microseconds]` points for the CDF.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct LatencyView {
    pub count: u64,
    #[serde(deserialize_with = "num")]
    pub p50_us: f64,
    #[serde(deserialize_with = "num")]
    pub p90_us: f64,
    #[serde(deserialize_with = "num")]
    pub p99_us: f64,
    #[serde(deserialize_with = "num")]
    pub p999_us: f64,
    #[serde(deserialize_with = "num")]
    pub max_us: f64,
    pub cdf: Vec<[Option<f64>; 2]>,
}

impl LatencyView {
    /// The distribution as (quantile, microseconds) points, sorted by
    /// quantile: the CDF points when present, else the percentiles the
    /// document carries (fewer points, drawn with markers by the caller).
    pub fn points(&self) -> (Vec<(f64, f64)>, bool) {
        let cdf: Vec<(f64, f64)> = self
            .cdf
            .iter()
            .filter_map(|p| Some((p[0]?, p[1]?)))
            .filter(|(q, v)| q.is_finite() && v.is_finite())
            .collect();
        if !cdf.is_empty() {
            return (sorted(cdf), true);
        }
        let pts = vec![
            (0.5, self.p50_us),
            (0.9, self.p90_us),
            (0.99, self.p99_us),
            (0.999, self.p999_us),
            (1.0, self.max_us),
        ]
        .into_iter()
        .filter(|(_, v)| v.is_finite() && *v > 0.0)
        .collect();
        (sorted(pts), false)
    }
}

fn sorted(mut v: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct TotalsView {
    pub counts: CountsView,
    #[serde(deserialize_with = "num")]
    pub hit_ratio: f64,
    #[serde(deserialize_with = "num")]
    pub elapsed_s: f64,
    pub latency: BTreeMap<String, LatencyView>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct IntervalView {
    pub index: u64,
    /// "requests" or "seconds": what `start`/`end` count.
    pub unit: String,
    #[serde(deserialize_with = "num")]
    pub start: f64,
    #[serde(deserialize_with = "num")]
    pub end: f64,
    #[serde(deserialize_with = "num")]
    pub start_s: f64,
    pub counts: CountsView,
    #[serde(deserialize_with = "num")]
    pub hit_ratio: f64,
    #[serde(deserialize_with = "num")]
    pub byte_hit_ratio: f64,
    #[serde(deserialize_with = "num")]
    pub cost_hit_ratio: f64,
    /// The zones at the interval's end (`sim --zzone true`).
    pub zzone: Option<ZoneView>,
}

/// `metrics::ZoneInterval`: the N-zone / Z-zone split of one interval.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ZoneView {
    pub target_percent: u32,
    pub memory_limit: u64,
    pub nzone_memory: u64,
    pub zzone_memory: u64,
    pub nzone_item_bytes: u64,
    pub zzone_item_bytes: u64,
    pub zzone_hits: u64,
}

/// What `replay` and `sim` write (one run).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct RunView {
    pub meta: MetaView,
    pub totals: TotalsView,
    pub intervals: Vec<IntervalView>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
struct CompareView {
    runs: Vec<RunView>,
}

/// One point of a miss-ratio curve.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct CurvePointView {
    #[serde(deserialize_with = "num")]
    pub size: f64,
    #[serde(deserialize_with = "num")]
    pub miss_ratio: f64,
    #[serde(deserialize_with = "num")]
    pub byte_miss_ratio: f64,
    /// Absent in documents that have no costs.
    pub cost_miss_ratio: Option<f64>,
}

#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(default)]
pub struct TallyView {
    pub count: u64,
    pub cost: u64,
    pub bytes: u64,
}

/// One slab class's hit curve by pages.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ClassView {
    pub id: u32,
    pub chunk_size: u32,
    pub chunks_per_page: u32,
    pub requests: TallyView,
    pub hits_by_pages: Vec<TallyView>,
}

/// What `mrc --json` writes.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct MrcView {
    pub source: String,
    /// "value", "item" or "chunk": what the byte curve counts per object.
    pub bytes_of: String,
    pub page_size: u64,
    pub by_items: Vec<CurvePointView>,
    pub by_bytes: Vec<CurvePointView>,
    pub classes: Vec<ClassView>,
}

/// A result file's content.
#[derive(Clone, Debug)]
pub enum Doc {
    /// One or more runs (`replay`, `sim`, or every run of a `compare`).
    Runs(Vec<RunView>),
    Mrc(MrcView),
}

/// A result file and what it holds.
#[derive(Clone, Debug)]
pub struct Input {
    pub path: PathBuf,
    pub doc: Doc,
}

impl Input {
    /// The file's name without directory and extension, for labels.
    pub fn stem(&self) -> String {
        self.path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.path.display().to_string())
    }
}

/// Read and recognise a result file.
pub fn load(path: &Path) -> anyhow::Result<Input> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let doc = parse(&text).with_context(|| format!("reading {}", path.display()))?;
    Ok(Input {
        path: path.to_path_buf(),
        doc,
    })
}

/// Recognise a document by its fields: `runs` (compare), `by_items` /
/// `by_bytes` (mrc), `meta` / `totals` / `intervals` (one run), or a JSON
/// list of runs.
pub fn parse(text: &str) -> anyhow::Result<Doc> {
    let v: serde_json::Value = serde_json::from_str(text).context("not JSON")?;
    let has = |k: &str| v.get(k).is_some();
    if v.is_array() {
        let runs: Vec<RunView> = serde_json::from_value(v).context("a list of run results")?;
        return Ok(Doc::Runs(runs));
    }
    if has("runs") {
        let c: CompareView = serde_json::from_value(v).context("a compare result")?;
        return Ok(Doc::Runs(c.runs));
    }
    if has("by_items") || has("by_bytes") {
        let m: MrcView = serde_json::from_value(v).context("an mrc report")?;
        return Ok(Doc::Mrc(m));
    }
    if has("meta") || has("totals") || has("intervals") {
        let r: RunView = serde_json::from_value(v).context("a run result")?;
        return Ok(Doc::Runs(vec![r]));
    }
    anyhow::bail!(
        "not a result of replay, sim, compare or mrc (expected a `meta`/`totals`/`intervals`, `runs` or `by_bytes` field)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_each_document_and_tolerates_missing_and_null_fields() {
        // A run with a null ratio (NaN on the writer's side), an unknown
        // field and no `totals`.
        let run = r#"{"meta":{"label":"sim","future":1},
            "intervals":[{"unit":"requests","start":0,"end":10,"hit_ratio":null,
                          "counts":{"gets":0}}]}"#;
        match parse(run).unwrap() {
            Doc::Runs(r) => {
                assert_eq!(r.len(), 1);
                assert_eq!(r[0].meta.label, "sim");
                assert!(r[0].intervals[0].hit_ratio.is_nan());
                assert_eq!(r[0].intervals[0].counts.gets, Some(0));
                assert_eq!(r[0].intervals[0].counts.hits, None);
            }
            other => panic!("{other:?}"),
        }
        let cmp = r#"{"model":"etc","runs":[{"meta":{"label":"memcached","settings":{"repetition":1}}},
                                           {"meta":{"label":"cachalot"}}]}"#;
        match parse(cmp).unwrap() {
            Doc::Runs(r) => {
                assert_eq!(r.len(), 2);
                assert_eq!(r[0].meta.repetition(), Some(1));
                assert_eq!(r[1].meta.repetition(), None);
            }
            other => panic!("{other:?}"),
        }
        let mrc = r#"{"source":"ycsb-b","by_bytes":[{"size":1024,"miss_ratio":0.5}]}"#;
        match parse(mrc).unwrap() {
            Doc::Mrc(m) => {
                assert_eq!(m.by_bytes.len(), 1);
                assert_eq!(m.by_bytes[0].cost_miss_ratio, None);
                assert!(m.by_items.is_empty());
            }
            other => panic!("{other:?}"),
        }
        assert!(parse(r#"{"hello":1}"#).is_err());
        assert!(parse("not json").is_err());
    }

    #[test]
    fn latency_points_prefer_the_cdf_and_fall_back_to_percentiles() {
        let with_cdf = LatencyView {
            cdf: vec![
                [Some(0.9), Some(20.0)],
                [Some(0.5), Some(10.0)],
                [None, Some(1.0)],
            ],
            p50_us: 99.0,
            ..LatencyView::default()
        };
        assert_eq!(with_cdf.points(), (vec![(0.5, 10.0), (0.9, 20.0)], true));
        let only_pct = LatencyView {
            p50_us: 10.0,
            p90_us: 12.0,
            p99_us: 30.0,
            p999_us: f64::NAN,
            max_us: 80.0,
            ..LatencyView::default()
        };
        assert_eq!(
            only_pct.points(),
            (
                vec![(0.5, 10.0), (0.9, 12.0), (0.99, 30.0), (1.0, 80.0)],
                false
            )
        );
    }
}
