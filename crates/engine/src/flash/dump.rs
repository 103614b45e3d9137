//! The tier's items for `lru_crawler metadump` (issue 34), a bounded batch
//! at a time: the slabs in slab order, a few containers a step, then the
//! stage.
//!
//! A step holds no lock across I/O and none while it decodes: the
//! containers' places are copied out of the slab table (or, for a slab
//! still in DRAM, their bytes out of the writer's buffer) under a brief
//! hold, the device is read holding nothing, and the containers are
//! checked (`container::read`: checksum, lengths, the block's walk) and
//! decoded holding nothing. Then each item is kept only if, under a brief
//! hold of the stage's lock and its index shard's, the index still places
//! its key there and the stage holds no copy of it: an item removed or
//! replaced since, or moved by the garbage collector, is listed where it
//! is now (its new container, or the stage) or nowhere. A container that
//! fails its checks is passed over, as a GET passes it (its items are not
//! listed; they would miss).
//!
//! The stage comes last: an item waits there until its container is
//! indexed (`Stage::publish` moves it under the stage's lock), so at rest
//! every item is listed once. A dump that runs while the writer works may,
//! like memcached's crawler, list an item it moves twice or not at all.

use std::cell::RefCell;

use super::container;
use super::device::{AlignedBuf, ALIGN};
use super::index::Loc;
use super::log::{rebase, SLAB};
use super::stage::Area;
use super::tier::Flash;
use crate::block;
use crate::codec::Coder;
use crate::item;

/// Where a walk of the tier's items goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlashAt {
    /// The next container: its slab and its number within it.
    Slab(u32, u16),
    /// The next staged item of an area: its sequence number.
    Stage(Area, u64),
}

impl FlashAt {
    /// Where a walk starts.
    pub const START: FlashAt = FlashAt::Slab(0, 0);
}

/// Slabs without a container to list (free, or walked to their end) that
/// a step passes over at most, so that a step over a large, mostly empty
/// file stays short.
const SKIP_PER_STEP: u32 = 4096;

/// The containers of one slab a step lists.
enum Run {
    /// None at or after the cursor: the slab is free, or walked.
    Empty,
    /// Copied out of a slab still in DRAM: their bytes, and each one's
    /// start within them, then the end of the last.
    Dram { bytes: Vec<u8>, bounds: Vec<usize> },
    /// On the device: the aligned read to do, where the containers start
    /// within it, their bounds from there, and the slab's sequence number
    /// (checked again after the read: a slab recycled meanwhile holds
    /// other items) and epoch (its items' clock).
    Device {
        offset: u64,
        len: usize,
        skip: usize,
        bounds: Vec<usize>,
        seq: u64,
        epoch: i64,
    },
}

/// A walker's decompression context, decoded block and read buffer.
#[derive(Default)]
struct Walker {
    coder: Coder,
    raw: Vec<u8>,
    buf: Option<AlignedBuf>,
}

thread_local! {
    static WALKER: RefCell<Walker> = RefCell::new(Walker::default());
}

/// The containers from `first` that a step takes: at least one, and more
/// while their bytes stay within `budget`. `offsets` are the containers'
/// starts, then the end of the last. Their bounds relative to the first
/// one's start, or None if the slab has no container `first`.
pub(super) fn pick(offsets: &[u32], first: usize, budget: usize) -> Option<Vec<usize>> {
    let start = *offsets.get(first)? as usize;
    let mut last = first + 1;
    if last >= offsets.len() {
        return None;
    }
    while last + 1 < offsets.len() && offsets[last + 1] as usize - start <= budget {
        last += 1;
    }
    Some(
        offsets[first..=last]
            .iter()
            .map(|&o| o as usize - start)
            .collect(),
    )
}

impl Flash {
    /// One step of a walk of the tier's live items from `at` (see the
    /// module's doc): the images of a few containers' items (about
    /// `budget` bytes of containers, at least one) or of a few staged
    /// items (about `budget` bytes), appended to `out` back to back;
    /// where to go on, None once done. Expired items may be among them
    /// (the caller's clock decides). Reads the device: call it holding no
    /// lock.
    pub fn dump_step(&self, at: FlashAt, budget: usize, out: &mut Vec<u8>) -> Option<FlashAt> {
        match at {
            FlashAt::Slab(slab, c) => Some(self.dump_slabs(slab, c, budget, out)),
            FlashAt::Stage(area, seq) => {
                let next = self.stage.lock().copy_from(area, seq, budget, out);
                match (next, area) {
                    (Some(seq), _) => Some(FlashAt::Stage(area, seq)),
                    (None, Area::Cold) => Some(FlashAt::Stage(Area::Hot, 0)),
                    (None, Area::Hot) => None,
                }
            }
        }
    }

    /// The next run of containers at or after container `c` of `slab`,
    /// listed; where to go on.
    fn dump_slabs(&self, mut slab: u32, mut c: u16, budget: usize, out: &mut Vec<u8>) -> FlashAt {
        let slabs = self.log.lock().slabs.len() as u32;
        let mut skipped = 0;
        while slab < slabs {
            let run = self.dump_run(slab, c, budget);
            let Some(n) = self.dump_containers(slab, c, run, out) else {
                slab += 1;
                c = 0;
                skipped += 1;
                if skipped == SKIP_PER_STEP {
                    break;
                }
                continue;
            };
            return FlashAt::Slab(slab, c + n);
        }
        if slab < slabs {
            FlashAt::Slab(slab, 0)
        } else {
            FlashAt::Stage(Area::Cold, 0)
        }
    }

    /// Where the containers of `slab` from `c` are, within `budget`: the
    /// writer's DRAM first (a slab being filled or written), then the
    /// slab table.
    fn dump_run(&self, slab: u32, c: u16, budget: usize) -> Run {
        let first = c as usize;
        {
            let dram = self.dram.lock();
            if let Some((bytes, offsets)) = dram.slab(slab) {
                return match pick(&offsets, first, budget) {
                    Some(bounds) => {
                        let start = offsets[first] as usize;
                        let end = start + bounds[bounds.len() - 1];
                        Run::Dram {
                            bytes: bytes[start..end].to_vec(),
                            bounds,
                        }
                    }
                    None => Run::Empty,
                };
            }
        }
        let log = self.log.lock();
        let m = &log.slabs[slab as usize];
        if m.area.is_none() {
            return Run::Empty;
        }
        let Some(bounds) = pick(&m.offsets, first, budget) else {
            return Run::Empty;
        };
        let start = m.offsets[first] as usize;
        let end = start + bounds[bounds.len() - 1];
        let from = start / ALIGN * ALIGN;
        Run::Device {
            offset: slab as u64 * SLAB as u64 + from as u64,
            len: (end - from).div_ceil(ALIGN) * ALIGN,
            skip: start - from,
            bounds,
            seq: m.seq,
            epoch: m.epoch,
        }
    }

    /// Read (if on the device), check and decode the containers of `run`,
    /// the first of them container `c` of `slab`, and list their items
    /// still there; how many containers the run had (None: none).
    fn dump_containers(&self, slab: u32, c: u16, run: Run, out: &mut Vec<u8>) -> Option<u16> {
        WALKER.with_borrow_mut(|w| {
            let (bytes, bounds, epoch): (&[u8], _, _) = match &run {
                Run::Empty => return None,
                Run::Dram { bytes, bounds } => (bytes, bounds, self.clock.started_unix()),
                Run::Device {
                    offset,
                    len,
                    skip,
                    bounds,
                    seq,
                    epoch,
                } => {
                    let n = bounds.len() as u16 - 1;
                    if w.buf.as_ref().is_none_or(|b| b.len() < *len) {
                        w.buf = Some(AlignedBuf::new(*len));
                    }
                    let buf = w.buf.as_mut()?;
                    let read = self.device.read_at(&mut buf.as_mut()[..*len], *offset);
                    // Still the slab it was when its places were copied.
                    let same = {
                        let log = self.log.lock();
                        let m = &log.slabs[slab as usize];
                        m.area.is_some() && m.seq == *seq
                    };
                    if read.is_err() || !same {
                        return Some(n);
                    }
                    let end = skip + bounds[bounds.len() - 1];
                    (&w.buf.as_ref()?.as_ref()[*skip..end], bounds, *epoch)
                }
            };
            let n = bounds.len() - 1;
            for (i, pair) in bounds.windows(2).enumerate() {
                let loc = Loc {
                    slab,
                    container: c + i as u16,
                };
                let bytes = &bytes[pair[0]..pair[1]];
                if container::read(bytes, &mut w.coder, |id| self.dictionary(id), &mut w.raw)
                    .is_err()
                {
                    continue;
                }
                self.dump_block(&w.raw, loc, epoch, out);
            }
            Some(n as u16)
        })
    }

    /// The items of a decoded block read from `loc` (written under
    /// `epoch`) that are still there: indexed at `loc` and not staged
    /// (each checked under the stage's lock, which a publish and a
    /// removal hold too), appended to `out` on this run's clock.
    fn dump_block(&self, raw: &[u8], loc: Loc, epoch: i64, out: &mut Vec<u8>) {
        let Ok(entries) = block::entries(raw) else {
            return;
        };
        let now = self.clock.started_unix();
        for entry in entries {
            let Ok((h, image)) = entry else {
                return;
            };
            let here = {
                let stage = self.stage.lock();
                stage.get(h, item::key(image)).is_none() && self.index.accessed(h, loc).is_some()
            };
            if !here {
                continue;
            }
            let start = out.len();
            out.extend_from_slice(image);
            if !rebase(&mut out[start..], epoch, now) {
                out.truncate(start);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_takes_one_container_and_more_within_its_budget() {
        let offsets = [64, 100, 4000, 5000, 9000];
        assert_eq!(pick(&offsets, 0, 0), Some(vec![0, 36]));
        assert_eq!(pick(&offsets, 0, 4936), Some(vec![0, 36, 3936, 4936]));
        assert_eq!(pick(&offsets, 1, 1 << 20), Some(vec![0, 3900, 4900, 8900]));
        assert_eq!(pick(&offsets, 3, 10), Some(vec![0, 4000]));
        assert_eq!(pick(&offsets, 4, 1 << 20), None);
        assert_eq!(pick(&offsets, 9, 1 << 20), None);
        assert_eq!(pick(&[], 0, 1 << 20), None);
    }
}
