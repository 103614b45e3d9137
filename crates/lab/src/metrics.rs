//! Hit ratio, byte hit ratio, cost hit ratio and recomputation cost, overall
//! and per interval; the JSON result format shared by `replay`, `sim` and
//! `compare`.

use serde::{Deserialize, Serialize};

/// Counts over some stretch of requests.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    pub requests: u64,
    pub gets: u64,
    pub hits: u64,
    pub sets: u64,
    pub deletes: u64,
    /// Bytes of values requested by GETs, and of those that hit.
    pub bytes_requested: u64,
    pub bytes_hit: u64,
    /// Sum of costs of GETs, and of those that hit.
    pub cost_requested: u64,
    pub cost_hit: u64,
}

impl Counts {
    pub fn record_get(&mut self, hit: bool, size: u32, cost: u32) {
        self.requests += 1;
        self.gets += 1;
        self.bytes_requested += size as u64;
        self.cost_requested += cost as u64;
        if hit {
            self.hits += 1;
            self.bytes_hit += size as u64;
            self.cost_hit += cost as u64;
        }
    }

    pub fn hit_ratio(&self) -> f64 {
        ratio(self.hits, self.gets)
    }
    pub fn byte_hit_ratio(&self) -> f64 {
        ratio(self.bytes_hit, self.bytes_requested)
    }
    /// Sum of costs of hits over sum of costs of requests (Carra & Michiardi).
    pub fn cost_hit_ratio(&self) -> f64 {
        ratio(self.cost_hit, self.cost_requested)
    }
    /// Total cost paid recomputing misses (GD-Wheel's metric).
    pub fn recomputation_cost(&self) -> u64 {
        self.cost_requested - self.cost_hit
    }
    pub fn add(&mut self, o: &Counts) {
        self.requests += o.requests;
        self.gets += o.gets;
        self.hits += o.hits;
        self.sets += o.sets;
        self.deletes += o.deletes;
        self.bytes_requested += o.bytes_requested;
        self.bytes_hit += o.bytes_hit;
        self.cost_requested += o.cost_requested;
        self.cost_hit += o.cost_hit;
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}
