//! The knobs of the rebalancing rules, apart from the rules so that the
//! engine's `Config` (in `crate::config`, below the rules) can name them.

use super::sas::SasRule;

/// Knobs of the rules (defaults from the papers, checked by measurement:
/// docs/cost.md, "Rebalancing").
#[derive(Clone, Debug, PartialEq)]
pub struct Tuning {
    /// SAS: decide every this many capacity misses (the paper's M).
    pub sas_misses: u64,
    /// SAS: counter decay per decision (0 = the paper's per-interval counters).
    pub sas_decay: f64,
    /// SAS: how it picks the classes (Algorithm 3 as written, or by
    /// marginal value: see `sas`).
    pub sas_rule: SasRule,
    /// Ghost set window, in pages of each class's evictions.
    pub ghost_pages: u32,
    /// Ghost set bytes; 0 = what the window needs, at most 1/256 of the
    /// memory limit (at least 64 KB, at most 16 MB).
    pub ghost_bytes: usize,
    /// mrc: sampled GETs between two decisions.
    pub mrc_period: u64,
    /// mrc: bytes of the sampled stacks; 0 = 1/256 of the memory limit (at
    /// least 256 KB, at most 16 MB, and at most 1/32 of the limit).
    pub mrc_bytes: usize,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            sas_misses: 2_000,
            sas_decay: 0.5,
            sas_rule: SasRule::Marginal,
            ghost_pages: 4,
            ghost_bytes: 0,
            mrc_period: 4096,
            mrc_bytes: 0,
        }
    }
}
