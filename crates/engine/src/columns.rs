//! Cavast's page columns (section 4.1): each page is cut into [`COLUMNS`]
//! columns of equal chunk counts, hottest first, and the re-partitioner
//! (`-o repartition=1`) trades chunks so that items sit in the column
//! their temperature ranks them in. Here: the columns, temperatures, the
//! ranking, and the re-partitioner's state and counters; the passes over
//! pages, which move items, are the engine's (`engine/repartition.rs`).

use crate::slab::PageId;

/// Columns per page (Cavast: 16 columns of 128 KB in a 2 MB page; our pages
/// are 1 MB, so a column is 64 KB).
pub const COLUMNS: u32 = 16;

/// Where the re-partitioner is.
#[derive(Default)]
pub(crate) struct Repartition {
    /// The next page to visit.
    pub(crate) next_page: usize,
    pub(crate) work: Option<Work>,
    /// Second copy buffer for swaps (the engine's `scratch` is the first).
    pub(crate) scratch: Vec<u8>,
    pub(crate) stats: RepartitionStats,
    /// `stats.swaps` when the current sweep over all pages began, and the
    /// pages it has done.
    pub(crate) sweep_began_at: u64,
    pub(crate) sweep_pages: u64,
    /// The last sweep found little to trade: sweep at the reclaimer's
    /// pace until one finds more (`Engine::maintain_slices`).
    pub(crate) settled: bool,
}

/// Counters for `stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RepartitionStats {
    /// Pages passed over.
    pub pages: u64,
    /// Chunks whose temperature was read.
    pub scanned: u64,
    /// Pairs of items that traded chunks.
    pub swaps: u64,
}

/// The page being re-partitioned.
pub(crate) struct Work {
    pub(crate) page: PageId,
    pub(crate) class: usize,
    pub(crate) chunk_size: u32,
    pub(crate) nchunks: u32,
    /// Whether the page is re-partitioned after the scan, or only scanned
    /// for expired items (the largest class, and pages of few chunks).
    pub(crate) arrange: bool,
    pub(crate) phase: Phase,
}

pub(crate) enum Phase {
    /// Reading temperatures: the next chunk, and (temperature, chunk) of
    /// the live items so far, in chunk order.
    Scan {
        at: u32,
        seen: Vec<(u8, u32)>,
    },
    Place(Placing),
}

/// Trading chunks. `want[c]` is the column the item at chunk `c` should be
/// in and `temp[c]` its temperature (`NOWHERE` for no item); columns
/// before `column` are settled; `resident` walks column `column` for items
/// that belong further down, `incomer` walks the later columns for items
/// that belong in `column`.
pub(crate) struct Placing {
    pub(crate) want: Vec<u8>,
    pub(crate) temp: Vec<u8>,
    pub(crate) column: u32,
    pub(crate) resident: u32,
    pub(crate) incomer: u32,
}

pub(crate) const NOWHERE: u8 = u8::MAX;

impl Placing {
    /// From the scan's (temperature, chunk) of the live items, in chunk
    /// order, of a page of `n` chunks.
    pub(crate) fn new(seen: &[(u8, u32)], n: u32) -> Placing {
        let mut temp = vec![NOWHERE; n as usize];
        for &(t, c) in seen {
            temp[c as usize] = t;
        }
        Placing {
            want: targets(seen, n),
            temp,
            column: 0,
            resident: 0,
            incomer: column_start(1, n),
        }
    }
}

/// The column of chunk `c` in a page of `n` chunks.
#[inline]
pub(crate) fn column_of(c: u32, n: u32) -> u32 {
    (c as u64 * COLUMNS as u64 / n as u64) as u32
}

/// First chunk of column `z`.
#[inline]
pub(crate) fn column_start(z: u32, n: u32) -> u32 {
    // The smallest c with c * COLUMNS / n >= z.
    ((z as u64 * n as u64).div_ceil(COLUMNS as u64)) as u32
}

/// An item's temperature: 0 for an access this second, then one more for
/// each doubling of its age (lower is hotter).
#[inline]
pub(crate) fn temperature(age: u32) -> u8 {
    (u32::BITS - age.leading_zeros()) as u8
}

/// Which column each live item should be in: ranked by temperature (ties
/// in chunk order), the i-th hottest takes the i-th live chunk's column.
pub(crate) fn targets(seen: &[(u8, u32)], nchunks: u32) -> Vec<u8> {
    // A counting sort (temperatures are below 33): linear, so a page of
    // 32 768 items ranks within one bounded slice, and stable, so equal
    // temperatures keep their chunk order and stay put.
    let mut first = [0usize; 34];
    for &(t, _) in seen {
        first[t as usize + 1] += 1;
    }
    for t in 1..first.len() {
        first[t] += first[t - 1];
    }
    let mut want = vec![NOWHERE; nchunks as usize];
    for &(t, c) in seen {
        let rank = first[t as usize];
        first[t as usize] += 1;
        // `seen` is in chunk order: the rank-th live chunk's column.
        want[c as usize] = column_of(seen[rank].1, nchunks) as u8;
    }
    want
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_cover_the_page_in_order() {
        for n in [16u32, 17, 31, 32, 100, 32768] {
            assert_eq!(column_start(0, n), 0);
            for z in 0..COLUMNS {
                let (s, e) = (column_start(z, n), column_start(z + 1, n));
                assert!(s < e, "column {z} of {n} chunks is empty");
                assert!((s..e).all(|c| column_of(c, n) == z));
            }
            assert_eq!(column_start(COLUMNS, n), n);
        }
    }

    #[test]
    fn temperature_doubles() {
        let t: Vec<u8> = [0, 1, 2, 3, 4, 7, 8, 1000].map(temperature).to_vec();
        assert_eq!(t, [0, 1, 2, 2, 3, 3, 4, 10]);
    }

    #[test]
    fn targets_rank_the_hottest_first_and_keep_ties_in_place() {
        // 32 chunks, 2 per column; live items at every chunk but 5.
        let seen: Vec<(u8, u32)> = (0..32u32)
            .filter(|&c| c != 5)
            .map(|c| (if c == 30 || c == 31 { 0 } else { 3 }, c))
            .collect();
        let want = targets(&seen, 32);
        assert_eq!(want[5], NOWHERE);
        // The two hot items take the first two live chunks (column 0).
        assert_eq!((want[30], want[31]), (0, 0));
        // The rest keep their order, each pushed two live chunks down.
        assert_eq!(want[0], 1);
        assert_eq!(want[29], 15);
        let per_column = (0..COLUMNS as u8)
            .map(|z| want.iter().filter(|&&w| w == z).count())
            .collect::<Vec<_>>();
        // As many items want each column as it has live chunks.
        let live_in = |z: u32| seen.iter().filter(|s| column_of(s.1, 32) == z).count();
        assert_eq!(per_column, (0..COLUMNS).map(live_in).collect::<Vec<_>>());
    }
}
