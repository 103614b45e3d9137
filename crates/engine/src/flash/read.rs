//! Lookups and reads: the stage first, then the index; a container still
//! in DRAM is decoded at once, one on the device is read (with plain
//! `pread`s, or by the caller's own I/O one [`Step`] at a time) and
//! checked before anything in it is served. No lock is held across I/O.

use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::container;
use super::counters::bump;
use super::device::{AlignedBuf, ALIGN};
use super::index::Loc;
use super::log::{rebase, SLAB};
use super::stage::Area;
use super::tier::{Flash, RECENT_READS};
use crate::block;
use crate::codec::Coder;
use crate::item;

/// A read that found its key: where, and, if the item was read on flash
/// before and that read is remembered, how many items were admitted to
/// flash since (its reuse distance, in evictions from memory: compared
/// with memory's item count, it says whether the item would have stayed
/// in memory had it been there: `Engine::recache`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Read {
    pub loc: Loc,
    pub distance: Option<u64>,
}

/// What a lookup found.
#[derive(Debug, PartialEq, Eq)]
pub enum Probe {
    /// Not on flash.
    Absent,
    /// Staged: its image was copied out.
    Staged,
    /// Possibly at these places: read them ([`Flash::read`]).
    OnFlash(Vec<Loc>),
}

/// Where a read's container is (`Flash::locate`).
enum Located {
    /// In a slab still in DRAM, and decoded: the item was there.
    Dram(Area),
    /// On the device.
    Device(DeviceRead),
    /// Nowhere, or not the key's.
    Not,
}

/// A device read a flash read waits for: `len` bytes at `offset`, both
/// multiples of [`ALIGN`] (O_DIRECT), into an [`AlignedBuf`].
#[derive(Clone, Copy, Debug)]
pub struct DeviceRead {
    pub offset: u64,
    pub len: usize,
    loc: Loc,
    area: Area,
    epoch: i64,
    /// The container's bytes within the read.
    skip: usize,
    used: usize,
    issued: Instant,
}

/// How far a read has gone through its places (`Flash::advance`).
#[derive(Debug, Default)]
pub struct Cursor {
    next: usize,
    io: Option<DeviceRead>,
}

/// What a read needs next.
#[derive(Debug)]
pub enum Step {
    /// Finished: the item (in the image) and where it was, or None.
    Done(Option<Read>),
    /// This device read, then [`Flash::advance`] again with its bytes.
    Io(DeviceRead),
}

/// A decompression context and the decoded block.
#[derive(Default)]
struct Decoder {
    coder: Coder,
    raw: Vec<u8>,
}

thread_local! {
    static DECODER: RefCell<Decoder> = RefCell::new(Decoder::default());
    static READ_BUF: std::cell::Cell<Option<AlignedBuf>> = const { std::cell::Cell::new(None) };
}

impl Flash {
    /// Look `key` (hash `h`) up: the stage first (its image is copied into
    /// `image`), then the index.
    pub fn lookup(&self, h: u64, key: &[u8], image: &mut Vec<u8>) -> Probe {
        bump(&self.counters.lookups);
        bump(&self.counters.win_lookups);
        {
            let stage = self.stage.lock();
            if let Some(im) = stage.get(h, key) {
                image.clear();
                image.extend_from_slice(im);
                bump(&self.counters.stage_hits);
                bump(&self.counters.hits);
                return Probe::Staged;
            }
        }
        let mut locs = Vec::new();
        self.index.find(h, &mut locs);
        if locs.is_empty() {
            Probe::Absent
        } else {
            Probe::OnFlash(locs)
        }
    }

    /// Whether `key` (hash `h`) is staged or may be on flash (its index's
    /// tag matches), counted nowhere: `stats hotkeys`' tier.
    pub fn may_hold(&self, h: u64, key: &[u8]) -> bool {
        if self.stage.lock().get(h, key).is_some() {
            return true;
        }
        let mut locs = Vec::new();
        self.index.find(h, &mut locs);
        !locs.is_empty()
    }

    /// Where `key` (hash `h`) may be on flash, if it is not staged: a
    /// look-ahead for reads to come, counted nowhere.
    pub fn peek(&self, h: u64, key: &[u8]) -> Vec<Loc> {
        let mut locs = Vec::new();
        if self.stage.lock().get(h, key).is_none() {
            self.index.find(h, &mut locs);
        }
        locs
    }

    /// Read the item of `key` (hash `h`) from the first of `locs` that
    /// holds it, into `image`, with plain `pread`s: I/O, so call it holding
    /// no lock. None when none does (a tag shared with another key, a slab
    /// recycled since the lookup, or a fault: an I/O error or a container
    /// that fails its checks). [`Flash::advance`] is the same read for
    /// callers that do their own I/O.
    pub fn read(&self, h: u64, key: &[u8], locs: &[Loc], image: &mut Vec<u8>) -> Option<Read> {
        let mut buf = READ_BUF.take().unwrap_or_else(|| AlignedBuf::new(ALIGN));
        let mut cursor = Cursor::default();
        let mut done: Option<std::io::Result<usize>> = None;
        let read = loop {
            let io = done.take().map(|r| r.map(|n| &buf.as_ref()[..n]));
            match self.advance(h, key, locs, &mut cursor, io, image) {
                Step::Done(read) => break read,
                Step::Io(d) => {
                    if buf.len() < d.len {
                        buf = AlignedBuf::new(d.len);
                    }
                    let into = &mut buf.as_mut()[..d.len];
                    done = Some(self.device.read_at(into, d.offset).map(|()| d.len));
                }
            }
        };
        READ_BUF.set(Some(buf));
        read
    }

    /// One step of reading `key` from the first of `locs` that holds it:
    /// `io` is the outcome of the device read the previous step asked for
    /// (the bytes of [`DeviceRead::offset`]..+[`DeviceRead::len`]), None at
    /// the first step. A container still in DRAM is decoded at once; one
    /// on the device is asked for ([`Step::Io`]); the caller reads it its
    /// own way (a `pread`, an io_uring read) and calls again. Holds no lock
    /// across the caller's I/O.
    pub fn advance(
        &self,
        h: u64,
        key: &[u8],
        locs: &[Loc],
        cursor: &mut Cursor,
        io: Option<std::io::Result<&[u8]>>,
        image: &mut Vec<u8>,
    ) -> Step {
        DECODER.with_borrow_mut(|dec| {
            if let (Some(d), Some(io)) = (cursor.io.take(), io) {
                match io {
                    Ok(bytes) if bytes.len() >= d.skip + d.used => {
                        self.note_latency(d.issued);
                        self.counters
                            .read_bytes
                            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                        let bytes = &bytes[d.skip..d.skip + d.used];
                        if self.decode(dec, h, key, d.loc, bytes, d.epoch, image) {
                            return Step::Done(Some(self.hit(h, d.loc, d.area, d.issued, image)));
                        }
                    }
                    _ => bump(&self.counters.io_errors),
                }
            }
            while let Some(&loc) = locs.get(cursor.next) {
                cursor.next += 1;
                let t = Instant::now();
                match self.locate(dec, h, key, loc, image) {
                    Located::Dram(area) => {
                        return Step::Done(Some(self.hit(h, loc, area, t, image)));
                    }
                    Located::Device(d) => {
                        bump(&self.counters.reads);
                        cursor.io = Some(d);
                        return Step::Io(d);
                    }
                    Located::Not => {}
                }
            }
            Step::Done(None)
        })
    }

    /// A read found its item at `loc` (of `area`, since `t`): the counters,
    /// the access bit, and its reuse distance.
    fn hit(&self, h: u64, loc: Loc, area: Area, t: Instant, image: &[u8]) -> Read {
        bump(&self.counters.hits);
        bump(&self.counters.hits_since_recache);
        let again = self.index.mark_accessed(h, loc) == Some(true);
        self.note_hit(area, t, image);
        // The last read of each slot's key: high hash bits and the
        // admissions count then.
        let admitted = self.counters.admitted.load(Ordering::Relaxed);
        let slot = &self.recent[(h as usize) & (RECENT_READS - 1)];
        let mine = h & !0xffff_ffff;
        let prev = slot.swap(mine | (admitted & 0xffff_ffff), Ordering::Relaxed);
        let distance = (again && prev & !0xffff_ffff == mine)
            .then(|| (admitted as u32).wrapping_sub(prev as u32) as u64);
        Read { loc, distance }
    }

    /// A hit from `area` that took since `t`: the split's measurements
    /// (`split`): its area, its cost, and the item's own miss cost.
    fn note_hit(&self, area: Area, t: Instant, image: &[u8]) {
        let c = &self.counters;
        let us = t.elapsed().as_micros() as u64;
        let (hits, time) = match area {
            Area::Hot => (&c.win_hot_hits, &c.win_hot_us),
            Area::Cold => (&c.win_cold_hits, &c.win_cold_us),
        };
        bump(hits);
        time.fetch_add(us, Ordering::Relaxed);
        let cost = item::dequantize_cost(item::Header::read(image).cost);
        if cost > 0 {
            c.win_cost_us.fetch_add(u64::from(cost), Ordering::Relaxed);
            bump(&c.win_costs);
        }
    }

    /// Read `key` from `loc`; the area it was found in.
    /// Where the container of `loc` is: in a slab still in DRAM (decoded
    /// here, found or not), on the device (the aligned read to do), or
    /// nowhere any more (its slab was recycled).
    fn locate(
        &self,
        dec: &mut Decoder,
        h: u64,
        key: &[u8],
        loc: Loc,
        image: &mut Vec<u8>,
    ) -> Located {
        // A slab still in DRAM: copy the container out, decode without
        // the lock.
        let in_dram = {
            let dram = self.dram.lock();
            dram.container(loc)
                .map(|(area, c)| (area, c.map(|b| b.to_vec())))
        };
        if let Some((area, bytes)) = in_dram {
            let now = self.clock.started_unix();
            return match bytes {
                Some(b) if self.decode(dec, h, key, loc, &b, now, image) => Located::Dram(area),
                _ => Located::Not,
            };
        }
        let (range, epoch, area) = {
            let mut log = self.log.lock();
            let m = &mut log.slabs[loc.slab as usize];
            m.reads = m.reads.saturating_add(1);
            (m.container(loc.container), m.epoch, m.area)
        };
        let (Some((start, end)), Some(area)) = (range, area) else {
            return Located::Not;
        };
        let from = start / ALIGN * ALIGN;
        Located::Device(DeviceRead {
            offset: loc.slab as u64 * SLAB as u64 + from as u64,
            len: (end - from).div_ceil(ALIGN) * ALIGN,
            loc,
            area,
            epoch,
            skip: start - from,
            used: end - start,
            issued: Instant::now(),
        })
    }

    /// Check and decode a container read from `loc` (written under
    /// `epoch`), and find the key.
    #[allow(clippy::too_many_arguments)]
    fn decode(
        &self,
        d: &mut Decoder,
        h: u64,
        key: &[u8],
        loc: Loc,
        bytes: &[u8],
        epoch: i64,
        image: &mut Vec<u8>,
    ) -> bool {
        if container::read(bytes, &mut d.coder, |id| self.dictionary(id), &mut d.raw).is_err() {
            // A container that fails its checks is garbage: its entry goes.
            bump(&self.counters.read_errors);
            self.index.remove_at(h, loc);
            return false;
        }
        match block::find(&d.raw, h, key) {
            Ok(Some(found)) => {
                image.clear();
                image.extend_from_slice(found);
                // Expired while the server was down: a miss.
                rebase(image, epoch, self.clock.started_unix())
            }
            _ => {
                bump(&self.counters.false_reads);
                false
            }
        }
    }

    fn note_latency(&self, t: Instant) {
        let us = t.elapsed().as_micros() as u64;
        let b = (64 - us.leading_zeros() as usize).min(self.counters.latency.len() - 1);
        bump(&self.counters.latency[b]);
    }
}
