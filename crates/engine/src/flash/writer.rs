//! The flash writer (one thread, `Flash::write_step`): staged items are
//! packed into containers of about one flash page times the running
//! compression ratio (SlimCache §3.3), compressed unless their entropy says
//! they will not compress (§3.7), appended to the open slab of their area,
//! and indexed; a full slab is written to the file whole, with no lock
//! held across the write.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::container::{self, FLASH_PAGE, MAX_CONTAINERS, MAX_CONTAINER_RAW, MIN_CONTAINER_RAW};
use super::counters::bump;
use super::device::AlignedBuf;
use super::dict;
use super::dram::{dram_spare, OpenSlab, Sealing, Writer};
use super::index::Loc;
use super::journal::dropped_mark;
use super::log::{SlabHeader, SLAB, SLAB_HEADER};
use super::stage::Area;
use super::tier::Flash;
use crate::block;
use crate::codec::Codec;

impl Flash {
    /// The writer's work: pack the next staged items of one area into a
    /// container and append it to that area's open slab, sealing (writing)
    /// the slab first when it is full, and recycling an old slab first
    /// when free ones run low. Returns whether it did anything (false:
    /// nothing waits, or the write budget is spent, or the disk refuses).
    pub fn write_step(&self) -> bool {
        let mut w = self.writer.lock();
        let w = &mut *w;
        self.catch_up_with_clear(w);
        self.journal_step();
        self.adapt_split(w.ratio);
        let area = {
            let stage = self.stage.lock();
            if stage.has_waiting(Area::Hot) {
                Area::Hot
            } else if stage.has_waiting(Area::Cold) {
                Area::Cold
            } else {
                return false;
            }
        };
        let compress = area == Area::Cold && self.config.codec != Codec::Raw;
        let target = if compress {
            ((FLASH_PAGE as f64 * w.ratio) as usize).clamp(MIN_CONTAINER_RAW, MAX_CONTAINER_RAW)
        } else {
            FLASH_PAGE
        };
        w.taken.clear();
        self.stage.lock().take(area, target, &mut w.taken);
        let Some(first_seq) = w.taken.first().map(|t| t.0) else {
            return false;
        };
        if compress && self.training.load(Ordering::Relaxed) {
            self.train_step(w);
        }
        let dict = self.dict.get();
        let mut items: Vec<(u64, &[u8])> = w.taken.iter().map(|t| (t.1, &t.2[..])).collect();
        let (used, entropy, tried) = if compress {
            block::encode(
                &mut w.coder,
                &mut w.recognizer,
                self.config.codec,
                dict,
                &mut items,
                &mut w.raw,
                &mut w.packed,
            )
        } else {
            block::build(&mut items, &mut w.raw);
            w.packed.clear();
            w.packed.extend_from_slice(&w.raw);
            (Codec::Raw, 0.0, false)
        };
        let count = items.len();
        drop(items);
        w.container.clear();
        container::write(used, dict, count, w.raw.len(), &w.packed, &mut w.container);
        let Some((slab, c)) = self.append(w, area) else {
            // No room and no slab to open: the items wait.
            self.stage.lock().untake(area, first_seq);
            return false;
        };
        if tried {
            w.recognizer.record(entropy, w.raw.len(), w.packed.len());
        }
        if used == Codec::Raw {
            bump(&self.counters.containers_raw);
        } else {
            bump(&self.counters.containers_compressed);
            let r = w.raw.len() as f64 / w.packed.len().max(1) as f64;
            w.ratio = 0.9 * w.ratio + 0.1 * r;
        }
        self.counters
            .stored_bytes
            .fetch_add(w.container.len() as u64, Ordering::Relaxed);
        self.publish(w, area, Loc { slab, container: c });
        true
    }

    /// Sample what the writer packs until a dictionary is trained on it;
    /// install it once it is saved (a container may name it only then: it
    /// must decode after a crash too).
    fn train_step(&self, w: &mut Writer) {
        if w.trainer.sampling() {
            for t in &w.taken {
                w.trainer.sample(&t.2);
            }
        }
        if let Some(bytes) = w.trainer.poll() {
            w.trainer.stop();
            if dict::save(&self.config.path, &bytes).is_ok() {
                let _ = self.dict.set(dict::digest(bytes, self.config.zstd_level));
            }
        }
        if w.trainer.finished() {
            self.training.store(false, Ordering::Relaxed);
        }
    }

    /// Append the writer's container to the open slab of `area`, sealing
    /// the full one and opening another as needed. Returns where it went.
    fn append(&self, w: &mut Writer, area: Area) -> Option<(u32, u16)> {
        let bytes = w.container.len();
        let fits = |o: &OpenSlab| o.at + bytes <= SLAB && o.offsets.len() < MAX_CONTAINERS;
        let full = matches!(&self.dram.lock().open[area as usize], Some(o) if !fits(o));
        if full && !self.seal(w, area, false) {
            return None;
        }
        if self.dram.lock().open[area as usize].is_none() {
            self.collect_garbage(w);
            let slab = self.log.lock().free.pop()?;
            let seq = {
                let mut log = self.log.lock();
                log.next_seq += 1;
                log.next_seq - 1
            };
            let mut dram = self.dram.lock();
            let mut buf = dram.spare.pop().unwrap_or_else(|| AlignedBuf::new(SLAB));
            buf.as_mut()[..SLAB_HEADER].fill(0);
            dram.open[area as usize] = Some(OpenSlab {
                slab,
                seq,
                buf,
                offsets: Vec::new(),
                at: SLAB_HEADER,
            });
        }
        let mut dram = self.dram.lock();
        let o = dram.open[area as usize].as_mut()?;
        if !fits(o) {
            // A container larger than a slab cannot be (admit refuses
            // such items), but never write past the buffer.
            return None;
        }
        o.buf.as_mut()[o.at..o.at + bytes].copy_from_slice(&w.container);
        o.offsets.push(o.at as u32);
        o.at += bytes;
        Some((o.slab, (o.offsets.len() - 1) as u16))
    }

    /// Write the open slab of `area` to the file, whole, and seal it in
    /// the slab table. Its bytes stay readable from DRAM until then. On a
    /// write error (a full or failing disk) its items are dropped: they
    /// are evicted, and memory goes on serving. False if the write budget
    /// does not allow a slab now (the slab stays open).
    fn seal(&self, w: &mut Writer, area: Area, force: bool) -> bool {
        if !force && !self.budget_allows(w) {
            return false;
        }
        let (slab, seq, buf, offsets) = {
            let mut dram = self.dram.lock();
            let Some(mut o) = dram.open[area as usize].take() else {
                return true;
            };
            SlabHeader {
                area,
                seq: o.seq,
                epoch: self.clock.started_unix(),
                used: o.at as u32,
                containers: o.offsets.len() as u32,
            }
            .write(o.buf.as_mut());
            // Zero the tail, so no stale container follows the last one.
            o.buf.as_mut()[o.at..].fill(0);
            o.offsets.push(o.at as u32);
            let buf = Arc::new(o.buf);
            dram.sealing = Some(Sealing {
                slab: o.slab,
                area,
                buf: buf.clone(),
                offsets: o.offsets.clone(),
            });
            (o.slab, o.seq, buf, o.offsets)
        };
        let io = self
            .device
            .write_at(buf.as_ref().as_ref(), slab as u64 * SLAB as u64)
            .and_then(|()| match self.device.direct() {
                true => Ok(()),
                false => self.device.sync(),
            });
        match io {
            Ok(()) => {
                w.tokens -= SLAB as f64;
                self.counters
                    .device_bytes
                    .fetch_add(SLAB as u64, Ordering::Relaxed);
                self.log
                    .lock()
                    .seal(slab, area, seq, self.clock.started_unix(), offsets);
            }
            Err(_) => {
                bump(&self.counters.write_errors);
                self.evict_slab(slab);
                self.release_slab(slab);
            }
        }
        let mut dram = self.dram.lock();
        dram.sealing = None;
        if let Ok(b) = Arc::try_unwrap(buf) {
            dram_spare(&mut dram.spare, b);
        }
        drop(dram);
        self.log_bytes
            .store(self.log.lock().memory_bytes(), Ordering::Relaxed);
        true
    }

    /// Write whatever is staged and seal the open slabs, full or not: for
    /// a clean shutdown (and the tests). Returns false if the disk refused.
    pub fn sync(&self) -> bool {
        while self.write_step() {}
        let mut w = self.writer.lock();
        let before = self.counters.write_errors.load(Ordering::Relaxed);
        for area in [Area::Cold, Area::Hot] {
            self.seal(&mut w, area, true);
        }
        self.journal_step();
        self.counters.write_errors.load(Ordering::Relaxed) == before
    }

    fn budget_allows(&self, w: &mut Writer) -> bool {
        let rate = self.config.effective_write_rate() as f64;
        if rate == 0.0 {
            return true;
        }
        let now = Instant::now();
        let secs = now.duration_since(w.refilled).as_secs_f64();
        w.refilled = now;
        // At most a second's worth saved up, and at least a slab's, so a
        // budget under 1 MB/s still writes (less often).
        w.tokens = (w.tokens + secs * rate).min(rate.max(SLAB as f64));
        w.tokens >= SLAB as f64
    }

    /// The writer's container is at `to`: index each of its items that is
    /// still staged (the rest were removed or replaced meanwhile).
    fn publish(&self, w: &mut Writer, area: Area, to: Loc) {
        let may_grow = self.memory_bytes() < self.config.memory_cap;
        let (mut raw, mut moved) = (0u64, 0u64);
        {
            let mut stage = self.stage.lock();
            for t in &w.taken {
                let Some(s) = stage.publish(area, t.0) else {
                    continue;
                };
                match s.from {
                    Some(from) => {
                        if self.index.relocate(s.h, from, to) {
                            moved += s.image.len() as u64;
                        }
                    }
                    None => {
                        let r = self.index.insert(s.h, to, may_grow);
                        self.index_bytes.fetch_add(r.grew, Ordering::Relaxed);
                        raw += s.image.len() as u64;
                        bump(&self.counters.admitted);
                        self.counters
                            .evictions
                            .fetch_add(r.dropped.len() as u64, Ordering::Relaxed);
                        if !r.dropped.is_empty() {
                            // Their copies stay in slabs: a crash scan must
                            // not bring them back past a later removal.
                            let seq = self.log.lock().next_seq;
                            let mut tombs = self.tombs.lock();
                            for (prefix, _) in r.dropped {
                                tombs.push((dropped_mark(prefix), seq));
                            }
                        }
                    }
                }
            }
        }
        let c = &self.counters;
        c.raw_bytes.fetch_add(raw, Ordering::Relaxed);
        c.moved_bytes.fetch_add(moved, Ordering::Relaxed);
        w.taken.clear();
    }
}
