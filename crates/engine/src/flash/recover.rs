//! Flash contents across restarts (issue 12: "after a clean shutdown the
//! flash contents are served again at once; after a crash the slabs are
//! scanned and validated by checksum").
//!
//! - **Clean shutdown**: the writer seals its open slabs, then the DRAM
//!   index and slab table are saved beside the file (`<path>.index`, under
//!   a CRC-32). At start they are loaded if every sealed slab's header on
//!   flash still has the sequence number the table gives, and the snapshot
//!   is deleted at once: after a crash it would be stale.
//! - **Crash**: every slab is read; a slab whose header fails its checks
//!   is free, a container that fails its checks is skipped, and the items
//!   of valid containers are indexed oldest slab first, so a newer copy of
//!   a key replaces an older one.
//! - **Tombstones** (`<path>.journal`): a key whose flash copy is removed
//!   (overwritten in memory, deleted, flushed) gets a record (hash, the
//!   sequence number slabs will have from then on), appended and synced by
//!   the writer thread within a few milliseconds. A scan drops copies in
//!   slabs older than a tombstone of their key, so a crash does not bring
//!   back a value that was replaced or deleted, except for the last few
//!   milliseconds' removals (docs/protocol.md, "The flash tier"). The
//!   journal keeps only records that can still shadow a slab on flash: it
//!   is rewritten without the others when it has grown.
//!
//! Item expiry times are relative to the engine clock's start; each slab
//! header records that start (its epoch), and items read from a slab of an
//! earlier run have their expiry moved to this run's clock (`rebase`).

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use super::container;
use super::counters::bump;
use super::device::{AlignedBuf, ALIGN};
use super::dict;
use super::index::{self, Loc};
use super::journal::{dropped_mark, journal_path, Cursor, Journal, Recovery, FLUSH_ALL, RETIRED};
use super::log::{self, moved_expiry, SlabHeader, SLAB, SLAB_HEADER};
use super::stage::Area;
use super::tier::Flash;
use crate::block;
use crate::codec::{Coder, Dictionary};
use crate::durable::{self, with_suffix};
use crate::item;

const SNAPSHOT_MAGIC: [u8; 4] = *b"CIX1";

pub fn snapshot_path(path: &Path) -> PathBuf {
    with_suffix(path, ".index")
}

/// What a snapshot holds of one slab.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedSlab {
    /// 0 cold, 1 hot, 0xff free.
    pub area: u8,
    pub seq: u64,
    pub epoch: i64,
    pub offsets: Vec<u32>,
}

/// The state a clean shutdown saves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub slabs: Vec<SavedSlab>,
    /// The index's shards, each as its raw entries.
    pub shards: Vec<Vec<u64>>,
    pub next_seq: u64,
    pub max_cas: u64,
}

impl Snapshot {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&SNAPSHOT_MAGIC);
        b.extend_from_slice(&(self.slabs.len() as u32).to_le_bytes());
        b.extend_from_slice(&(self.shards.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.next_seq.to_le_bytes());
        b.extend_from_slice(&self.max_cas.to_le_bytes());
        for s in &self.slabs {
            b.push(s.area);
            b.extend_from_slice(&s.seq.to_le_bytes());
            b.extend_from_slice(&s.epoch.to_le_bytes());
            b.extend_from_slice(&(s.offsets.len() as u32).to_le_bytes());
            for o in &s.offsets {
                b.extend_from_slice(&o.to_le_bytes());
            }
        }
        for shard in &self.shards {
            b.extend_from_slice(&(shard.len() as u32).to_le_bytes());
            for e in shard {
                b.extend_from_slice(&e.to_le_bytes());
            }
        }
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// The snapshot in `b`, if it is one (magic, checksum, lengths).
    pub fn decode(b: &[u8]) -> Option<Snapshot> {
        let (body, crc) = b.split_at(b.len().checked_sub(4)?);
        if crc32fast::hash(body).to_le_bytes() != crc {
            return None;
        }
        let mut c = Cursor(body);
        if c.take(4)? != SNAPSHOT_MAGIC {
            return None;
        }
        let nslabs = c.u32()? as usize;
        let nshards = c.u32()? as usize;
        let next_seq = c.u64()?;
        let max_cas = c.u64()?;
        let mut slabs = Vec::with_capacity(nslabs.min(1 << 24));
        for _ in 0..nslabs {
            let area = c.u8()?;
            let seq = c.u64()?;
            let epoch = c.u64()? as i64;
            let n = c.u32()? as usize;
            if n > SLAB {
                return None;
            }
            let offsets = (0..n).map(|_| c.u32()).collect::<Option<Vec<_>>>()?;
            slabs.push(SavedSlab {
                area,
                seq,
                epoch,
                offsets,
            });
        }
        let mut shards = Vec::with_capacity(nshards.min(1 << 16));
        for _ in 0..nshards {
            let n = c.u32()? as usize;
            let raw = c.take(n.checked_mul(8)?)?;
            shards.push(
                raw.chunks_exact(8)
                    .map(|e| u64::from_le_bytes(e.try_into().unwrap_or([0; 8])))
                    .collect(),
            );
        }
        c.0.is_empty().then_some(Snapshot {
            slabs,
            shards,
            next_seq,
            max_cas,
        })
    }
}

/// Write `snap` to `path` (`durable::replace`).
pub fn save_snapshot(path: &Path, snap: &Snapshot) -> io::Result<()> {
    durable::replace(path, |f| f.write_all(&snap.encode()))
}

/// Read the snapshot at `path`, if there is a valid one, and delete it
/// (from now on it would be stale).
pub fn take_snapshot(path: &Path) -> Option<Snapshot> {
    let bytes = std::fs::read(path).ok()?;
    let _ = std::fs::remove_file(path);
    Snapshot::decode(&bytes)
}

/// One slab as a scan finds it: its header and the containers that pass
/// their checks, each with its items (hash, image).
pub struct ScannedSlab {
    pub header: SlabHeader,
    pub offsets: Vec<u32>,
    /// Every item of a valid container: what recovery needs of it (the
    /// image itself stays on flash; copying 1.7 M of them out took most
    /// of a crash scan's time).
    pub items: Vec<ScannedItem>,
    pub bad_containers: usize,
}

/// How many items ahead of its inserts a crash scan prefetches their
/// index buckets.
const PREFETCH_AHEAD: usize = 8;

/// What one crash-scan thread found: (seq, slab, contents) of each valid
/// slab, and the damage.
#[derive(Default)]
struct ScanPart {
    found: Vec<(u64, u32, ScannedSlab)>,
    bad_slabs: u64,
    bad_containers: u64,
}

/// An item found by a scan.
pub struct ScannedItem {
    pub container: u16,
    pub h: u64,
    pub exptime: u32,
    pub cas: u64,
}

/// Walk the containers of a slab's bytes (`bytes`: the whole slab).
pub fn scan_slab(
    bytes: &[u8],
    coder: &mut Coder,
    dict: Option<&Dictionary>,
) -> Option<ScannedSlab> {
    let header = SlabHeader::read(bytes)?;
    let used = header.used as usize;
    let mut at = SLAB_HEADER;
    let mut offsets = Vec::new();
    let mut items = Vec::new();
    let mut bad = 0;
    let mut raw = Vec::new();
    while at < used && offsets.len() < header.containers as usize {
        // The header's stored length is only trusted once the checksum
        // over it and the payload passes; a bad container ends the walk
        // (where the next one starts is then unknown).
        let Ok(h) = container::header(&bytes[at..used]) else {
            bad += 1;
            break;
        };
        let end = at + h.bytes();
        if end > used {
            bad += 1;
            break;
        }
        let c = offsets.len() as u16;
        offsets.push(at as u32);
        match container::read(&bytes[at..end], coder, |id| dict::named(dict, id), &mut raw) {
            Ok(_) => {
                if let Ok(entries) = block::entries(&raw) {
                    for (h, image) in entries.flatten() {
                        items.push(ScannedItem {
                            container: c,
                            h,
                            exptime: item::exptime(image),
                            cas: item::Header::read(image).cas,
                        });
                    }
                }
            }
            Err(_) => bad += 1,
        }
        at = end;
    }
    offsets.push(at as u32);
    Some(ScannedSlab {
        header,
        offsets,
        items,
        bad_containers: bad,
    })
}

impl Flash {
    /// What was on flash at start: the clean shutdown's snapshot if it is
    /// valid, else a scan of every slab (`recover`).
    pub(super) fn recover(&self) {
        let t = Instant::now();
        if let Some(bytes) = dict::load(&self.config.path) {
            let _ = self.dict.set(dict::digest(bytes, self.config.zstd_level));
        }
        let mut journal = Journal::open(&journal_path(&self.config.path)).ok();
        let clean = match take_snapshot(&snapshot_path(&self.config.path)) {
            Some(snap) => self.load_snapshot(snap),
            None => false,
        };
        let tombs = journal.as_mut().map(Journal::records).unwrap_or_default();
        let mut r = Recovery {
            clean,
            ..Recovery::default()
        };
        if !clean {
            self.scan(&tombs, &mut r);
        }
        r.items = self.index.len() as u64;
        r.micros = t.elapsed().as_micros() as u64;
        if let Some(j) = journal.as_mut() {
            self.compact_journal(j, tombs);
        }
        *self.journal.lock() = journal;
        *self.recovery.lock() = r;
    }

    /// Install a clean shutdown's snapshot, if every slab it names still
    /// has that slab's header on flash.
    fn load_snapshot(&self, snap: Snapshot) -> bool {
        let mut log = self.log.lock();
        if snap.slabs.len() != log.slabs.len() || snap.shards.len() != index::SHARDS {
            return false;
        }
        let mut head = AlignedBuf::new(ALIGN);
        for (i, s) in snap.slabs.iter().enumerate() {
            if s.area == 0xff {
                continue;
            }
            let ok = self
                .device
                .read_at(head.as_mut(), i as u64 * SLAB as u64)
                .ok()
                .and_then(|()| SlabHeader::read(head.as_ref()))
                .is_some_and(|h| h.seq == s.seq && h.area as u8 == s.area);
            if !ok {
                return false;
            }
        }
        for (m, s) in log.slabs.iter_mut().zip(snap.slabs) {
            *m = log::SlabMeta {
                area: match s.area {
                    0 => Some(Area::Cold),
                    1 => Some(Area::Hot),
                    _ => None,
                },
                seq: s.seq,
                epoch: s.epoch,
                offsets: s.offsets,
                reads: 0,
            };
        }
        log.relist();
        log.next_seq = log.next_seq.max(snap.next_seq);
        drop(log);
        self.index.import(&snap.shards);
        self.max_cas.fetch_max(snap.max_cas, Ordering::Relaxed);
        true
    }

    /// A crash scan's share: the slabs it takes from `next` (below
    /// `slabs`), read and walked; those older than the last `flush_all`
    /// (`flushed`) are left out.
    fn scan_some(&self, next: &AtomicUsize, slabs: usize, flushed: u64) -> ScanPart {
        let mut part = ScanPart::default();
        let mut buf = AlignedBuf::new(SLAB);
        let mut coder = Coder::default();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= slabs {
                return part;
            }
            let at = i as u64 * SLAB as u64;
            if self.device.read_at(buf.as_mut(), at).is_err() {
                part.bad_slabs += 1;
                continue;
            }
            if let Some(s) = scan_slab(buf.as_ref(), &mut coder, self.dict.get()) {
                part.bad_containers += s.bad_containers as u64;
                if s.header.seq >= flushed {
                    part.found.push((s.header.seq, i as u32, s));
                }
            }
        }
    }

    /// Rebuild the index from the slabs themselves (after a crash): oldest
    /// slab first, so a newer copy of a key replaces an older one; copies
    /// older than a tombstone of their key, or than a `flush_all`, stay
    /// out.
    fn scan(&self, tombs: &[(u64, u64)], r: &mut Recovery) {
        let mut newest_tomb: std::collections::HashMap<u64, u64> = Default::default();
        let mut retired: std::collections::HashMap<u32, u64> = Default::default();
        let mut flushed = 0;
        for &(h, seq) in tombs {
            if h == FLUSH_ALL {
                flushed = flushed.max(seq);
            } else if h >= RETIRED {
                let e = retired.entry((h - RETIRED) as u32).or_insert(0);
                *e = (*e).max(seq);
            } else {
                let e = newest_tomb.entry(h).or_insert(0);
                *e = (*e).max(seq);
            }
        }
        // Slabs are read and decoded on every CPU (decompression is most
        // of a scan's time); the index is then built in slab order.
        let slabs = self.log.lock().slabs.len();
        let next = AtomicUsize::new(0);
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
        let scanned: Vec<ScanPart> = std::thread::scope(|sc| {
            let workers: Vec<_> = (0..threads)
                .map(|_| sc.spawn(|| self.scan_some(&next, slabs, flushed)))
                .collect();
            // A scanner that panicked (it must not: every length it reads
            // is checked) loses its slabs, not the server.
            workers
                .into_iter()
                .map(|w| w.join().unwrap_or_default())
                .collect()
        });
        let mut found = Vec::new();
        for part in scanned {
            r.bad_slabs += part.bad_slabs;
            r.bad_containers += part.bad_containers;
            found.extend(part.found);
        }
        // A slab given up and not written since holds nothing to serve.
        found.retain(|(seq, slab, _)| retired.get(slab).is_none_or(|&r| *seq >= r));
        found.sort_unstable_by_key(|f| f.0);
        self.index
            .reserve(found.iter().flat_map(|f| f.2.items.iter().map(|it| it.h)));
        let now = self.clock.started_unix();
        // The index is filled by as many threads, each owning the shards
        // of its residue: every key's copies are met in slab order, by one
        // thread.
        let max_cas = std::thread::scope(|sc| {
            let fillers: Vec<_> = (0..threads)
                .map(|t| {
                    let (found, newest_tomb) = (&found, &newest_tomb);
                    sc.spawn(move || {
                        let mut max_cas = 0;
                        for (seq, slab, s) in found {
                            let mine = |h: u64| index::shard_of(h) % threads == t;
                            let items = &s.items;
                            for (i, it) in items.iter().enumerate() {
                                if let Some(ahead) = items.get(i + PREFETCH_AHEAD) {
                                    if mine(ahead.h) {
                                        self.index.prefetch(ahead.h);
                                    }
                                }
                                if !mine(it.h) {
                                    continue;
                                }
                                let tombed = !newest_tomb.is_empty()
                                    && [it.h, dropped_mark(index::prefix_of(it.h))]
                                        .iter()
                                        .any(|k| newest_tomb.get(k).is_some_and(|&t| t > *seq));
                                if tombed || moved_expiry(it.exptime, s.header.epoch, now).is_none()
                                {
                                    continue;
                                }
                                max_cas = max_cas.max(it.cas);
                                // An older copy of the key (or of a key
                                // sharing its tag) goes.
                                let loc = Loc {
                                    slab: *slab,
                                    container: it.container,
                                };
                                self.index.replace(it.h, loc);
                            }
                        }
                        max_cas
                    })
                })
                .collect();
            fillers
                .into_iter()
                .map(|f| f.join().unwrap_or(0))
                .max()
                .unwrap_or(0)
        });
        let mut log = self.log.lock();
        for (seq, slab, s) in found {
            log.slabs[slab as usize] = log::SlabMeta {
                area: Some(s.header.area),
                seq,
                epoch: s.header.epoch,
                offsets: s.offsets,
                reads: 0,
            };
            r.slabs += 1;
        }
        log.relist();
        self.max_cas.fetch_max(max_cas, Ordering::Relaxed);
    }

    /// The largest CAS unique of an item on flash (the engine's counter
    /// starts above it after a restart).
    pub fn max_cas(&self) -> u64 {
        self.max_cas.load(Ordering::Relaxed)
    }

    /// Append the tombstones recorded since the last call to the journal
    /// and sync it; compact it when it has grown. The writer thread's.
    pub(super) fn journal_step(&self) {
        let tombs = std::mem::take(&mut *self.tombs.lock());
        let mut j = self.journal.lock();
        let Some(journal) = j.as_mut() else {
            return;
        };
        if journal.append(&tombs).is_err() {
            bump(&self.counters.write_errors);
        }
        let limit = (self.config.size / 256).max(4 << 20);
        if journal.bytes() > limit {
            let records = journal.records();
            self.compact_journal(journal, records);
        }
    }

    /// Rewrite the journal with the tombstones that can still shadow a
    /// slab: those newer than the oldest slab written or being filled (a
    /// tombstone shadows copies in slabs older than itself).
    fn compact_journal(&self, journal: &mut Journal, records: Vec<(u64, u64)>) {
        let open = self.dram.lock().open.iter().flatten().map(|o| o.seq).min();
        let log = self.log.lock();
        let oldest = log
            .oldest_seq()
            .into_iter()
            .chain(open)
            .min()
            .unwrap_or(u64::MAX);
        // A retired slab's mark stays until the slab is sealed again.
        let rewritten = |slab: u64, since: u64| {
            let m = log.slabs.get(slab as usize);
            m.is_some_and(|m| m.area.is_some() && m.seq >= since)
        };
        let keep: Vec<(u64, u64)> = records
            .into_iter()
            .filter(|&(h, seq)| {
                seq > oldest || (h >= RETIRED && h != FLUSH_ALL && !rewritten(h - RETIRED, seq))
            })
            .collect();
        drop(log);
        if journal.rewrite(&keep).is_err() {
            bump(&self.counters.write_errors);
        }
    }

    /// How the last start found the flash.
    pub fn recovery(&self) -> Recovery {
        *self.recovery.lock()
    }

    /// A clean shutdown: [`Flash::sync`], then save the index and slab
    /// table, so the next start serves the flash contents at once
    /// (`recover`). Call it once nothing else uses the tier.
    pub fn shutdown(&self) -> bool {
        if !self.sync() {
            return false;
        }
        let _w = self.writer.lock();
        let log = self.log.lock();
        let snap = Snapshot {
            slabs: log
                .slabs
                .iter()
                .map(|m| SavedSlab {
                    area: m.area.map_or(0xff, |a| a as u8),
                    seq: m.seq,
                    epoch: m.epoch,
                    offsets: m.offsets.clone(),
                })
                .collect(),
            shards: self.index.export(),
            next_seq: log.next_seq,
            max_cas: self.max_cas(),
        };
        drop(log);
        save_snapshot(&snapshot_path(&self.config.path), &snap).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_round_trip_and_damage_is_refused() {
        let snap = Snapshot {
            slabs: vec![
                SavedSlab {
                    area: 0,
                    seq: 7,
                    epoch: 1_700_000_000,
                    offsets: vec![64, 900, 2000],
                },
                SavedSlab {
                    area: 0xff,
                    seq: 0,
                    epoch: 0,
                    offsets: vec![],
                },
            ],
            shards: vec![vec![1, 2, 3], vec![], vec![u64::MAX]],
            next_seq: 8,
            max_cas: 99,
        };
        let b = snap.encode();
        assert_eq!(Snapshot::decode(&b), Some(snap));
        for i in 0..b.len() {
            let mut d = b.clone();
            d[i] ^= 0x10;
            assert_eq!(Snapshot::decode(&d), None, "byte {i}");
        }
        for n in 0..b.len() {
            assert_eq!(Snapshot::decode(&b[..n]), None, "{n} bytes");
        }
    }
}
