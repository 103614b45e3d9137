//! What the writer keeps in DRAM: its own state (buffers, codec, write
//! budget), and the slabs being filled or written, which reads find
//! their containers in until the slab is sealed.

use std::sync::Arc;
use std::time::Instant;

use super::device::AlignedBuf;
use super::dict::Trainer;
use super::index::Loc;
use super::stage::{Area, Taken};
use crate::codec::{Coder, Recognizer};

/// The writer's own state: only the writer thread uses it (a mutex makes
/// the tier `Sync`; only `sync` and `validate` ever wait for it).
pub(super) struct Writer {
    pub(super) gc: AlignedBuf,
    pub(super) coder: Coder,
    pub(super) recognizer: Recognizer,
    pub(super) raw: Vec<u8>,
    pub(super) packed: Vec<u8>,
    pub(super) container: Vec<u8>,
    pub(super) taken: Vec<Taken>,
    /// Running compression ratio of compressed containers (raw / stored).
    pub(super) ratio: f64,
    /// The write budget: bytes that may still be written, refilled at
    /// `write_rate` per second.
    pub(super) tokens: f64,
    pub(super) refilled: Instant,
    /// The `flush_all`s it has caught up with.
    pub(super) cleared: u64,
    pub(super) trainer: Trainer,
}

/// A slab being filled in DRAM: its containers are indexed and read from
/// here until it is written.
pub(super) struct OpenSlab {
    pub(super) slab: u32,
    pub(super) seq: u64,
    pub(super) buf: AlignedBuf,
    /// Where each container starts.
    pub(super) offsets: Vec<u32>,
    pub(super) at: usize,
}

/// A slab being written: readable from DRAM until it is sealed.
pub(super) struct Sealing {
    pub(super) slab: u32,
    pub(super) area: Area,
    pub(super) buf: Arc<AlignedBuf>,
    /// Container starts, then the end.
    pub(super) offsets: Vec<u32>,
}

/// The slabs that live in DRAM (one open per area, one being written),
/// under a mutex readers hold only to copy a container out.
#[derive(Default)]
pub(super) struct Dram {
    pub(super) open: [Option<OpenSlab>; 2],
    pub(super) sealing: Option<Sealing>,
    pub(super) spare: Vec<AlignedBuf>,
}

impl Dram {
    /// Bytes of container `c` of `slab`, if that slab is in DRAM.
    pub(super) fn container(&self, loc: Loc) -> Option<(Area, Option<&[u8]>)> {
        let c = loc.container as usize;
        for (area, o) in [Area::Cold, Area::Hot].into_iter().zip(&self.open) {
            let Some(o) = o.as_ref().filter(|o| o.slab == loc.slab) else {
                continue;
            };
            let bytes = o.offsets.get(c).map(|&start| {
                let end = o.offsets.get(c + 1).map_or(o.at, |&e| e as usize);
                &o.buf.as_ref()[start as usize..end]
            });
            return Some((area, bytes));
        }
        let s = self.sealing.as_ref().filter(|s| s.slab == loc.slab)?;
        let range = s.offsets.get(c).zip(s.offsets.get(c + 1));
        Some((
            s.area,
            range.map(|(&a, &b)| &s.buf.as_ref().as_ref()[a as usize..b as usize]),
        ))
    }

    /// The bytes of `slab`, if it is in DRAM, and its containers' starts
    /// then the end of the last (a walk's: `flash::dump`).
    pub(super) fn slab(&self, slab: u32) -> Option<(&[u8], Vec<u32>)> {
        for o in self.open.iter().flatten() {
            if o.slab == slab {
                let mut offsets = o.offsets.clone();
                offsets.push(o.at as u32);
                return Some((o.buf.as_ref(), offsets));
            }
        }
        let s = self.sealing.as_ref().filter(|s| s.slab == slab)?;
        Some((s.buf.as_ref().as_ref(), s.offsets.clone()))
    }

    #[cfg(any(test, feature = "testing"))]
    pub(super) fn slabs(&self) -> impl Iterator<Item = u32> + '_ {
        self.open
            .iter()
            .flatten()
            .map(|o| o.slab)
            .chain(self.sealing.as_ref().map(|s| s.slab))
    }
}

/// Keep a spare slab buffer (one is enough: the next slab opened).
pub(super) fn dram_spare(spare: &mut Vec<AlignedBuf>, buf: AlignedBuf) {
    if spare.is_empty() {
        spare.push(buf);
    }
}
