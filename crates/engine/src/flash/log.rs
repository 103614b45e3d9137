//! The flash as a log of 1 MB slabs (SlimCache §3.2, after Fatcache): each
//! slab is written whole, once, as a header and the containers packed into
//! it, and is only written again after the garbage collector has recycled
//! it. This module is the slab's on-flash header and the DRAM table of
//! slabs: their state, age and the offsets of their containers.
//!
//! Slab header, little-endian:
//!
//! ```text
//! 0   magic      4  b"CSL1"
//! 4   area       1  0 cold, 1 hot
//! 5   reserved   3  0
//! 8   seq        8  order of writing (restarts order slabs by it)
//! 16  epoch      8  Unix time of the engine clock's 0 (item times are relative)
//! 24  used       4  bytes of the slab in use, header included
//! 28  containers 4
//! 32  crc        4  CRC-32 of bytes 0..32
//! 36  reserved  28  0
//! ```

use std::collections::VecDeque;

use super::stage::Area;
use crate::item;

/// Bytes of a slab.
pub const SLAB: usize = 1 << 20;
/// Bytes of its header; containers follow.
pub const SLAB_HEADER: usize = 64;
pub const SLAB_MAGIC: [u8; 4] = *b"CSL1";

/// A slab header, as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlabHeader {
    pub area: Area,
    pub seq: u64,
    pub epoch: i64,
    pub used: u32,
    pub containers: u32,
}

impl SlabHeader {
    pub fn write(&self, out: &mut [u8]) {
        let h = &mut out[..SLAB_HEADER];
        h.fill(0);
        h[..4].copy_from_slice(&SLAB_MAGIC);
        h[4] = self.area as u8;
        h[8..16].copy_from_slice(&self.seq.to_le_bytes());
        h[16..24].copy_from_slice(&self.epoch.to_le_bytes());
        h[24..28].copy_from_slice(&self.used.to_le_bytes());
        h[28..32].copy_from_slice(&self.containers.to_le_bytes());
        let crc = crc32fast::hash(&h[..32]);
        h[32..36].copy_from_slice(&crc.to_le_bytes());
    }

    /// The header at the start of `b`, if it is one (magic, checksum and
    /// ranges all right).
    pub fn read(b: &[u8]) -> Option<SlabHeader> {
        let h = b.get(..SLAB_HEADER)?;
        let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let u64_at = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().unwrap_or([0; 8]));
        if h[..4] != SLAB_MAGIC || crc32fast::hash(&h[..32]) != u32_at(32) {
            return None;
        }
        let area = match h[4] {
            0 => Area::Cold,
            1 => Area::Hot,
            _ => return None,
        };
        let used = u32_at(24);
        if (used as usize) < SLAB_HEADER || used as usize > SLAB {
            return None;
        }
        Some(SlabHeader {
            area,
            seq: u64_at(8),
            epoch: u64_at(16) as i64,
            used,
            containers: u32_at(28),
        })
    }
}

/// What the DRAM table knows of a slab.
#[derive(Clone, Debug, Default)]
pub struct SlabMeta {
    /// None while free (or being written).
    pub area: Option<Area>,
    pub seq: u64,
    /// The Unix time of the item clock's 0 when it was written (its items'
    /// expiry times are relative to it: `rebase`).
    pub epoch: i64,
    /// Where each container starts, then where the last one ends.
    pub offsets: Vec<u32>,
    /// Reads of it this window (`split`).
    pub reads: u32,
}

impl SlabMeta {
    /// Byte range of container `c`, if the slab holds one.
    pub fn container(&self, c: u16) -> Option<(usize, usize)> {
        self.area?;
        let c = c as usize;
        let start = *self.offsets.get(c)? as usize;
        let end = *self.offsets.get(c + 1)? as usize;
        Some((start, end))
    }

    pub fn containers(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }
}

/// The table of slabs: free ones, and the sealed ones of each area oldest
/// first.
pub struct Log {
    pub slabs: Vec<SlabMeta>,
    pub free: Vec<u32>,
    pub areas: [VecDeque<u32>; 2],
    pub next_seq: u64,
}

impl Log {
    /// `count` slabs, all free.
    pub fn new(count: usize) -> Log {
        Log {
            slabs: vec![SlabMeta::default(); count],
            // Popped from the end: slab 0 first.
            free: (0..count as u32).rev().collect(),
            areas: Default::default(),
            next_seq: 1,
        }
    }

    /// Seal `slab` as written with these containers.
    pub fn seal(&mut self, slab: u32, area: Area, seq: u64, epoch: i64, offsets: Vec<u32>) {
        let m = &mut self.slabs[slab as usize];
        *m = SlabMeta {
            area: Some(area),
            seq,
            epoch,
            offsets,
            reads: 0,
        };
        self.areas[area as usize].push_back(slab);
    }

    /// Rebuild the lists from the table (after a restart): sealed slabs in
    /// their areas oldest first, the others free.
    pub fn relist(&mut self) {
        let mut sealed: Vec<(u64, u32)> = Vec::new();
        self.free.clear();
        self.areas = Default::default();
        for (i, m) in self.slabs.iter().enumerate().rev() {
            match m.area {
                Some(_) => sealed.push((m.seq, i as u32)),
                None => self.free.push(i as u32),
            }
        }
        sealed.sort_unstable();
        for (seq, s) in sealed {
            if let Some(a) = self.slabs[s as usize].area {
                self.areas[a as usize].push_back(s);
            }
            self.next_seq = self.next_seq.max(seq + 1);
        }
    }

    /// The oldest sequence number still on flash (sealed), if any.
    pub fn oldest_seq(&self) -> Option<u64> {
        self.areas
            .iter()
            .filter_map(|q| q.front())
            .map(|&s| self.slabs[s as usize].seq)
            .min()
    }

    /// The oldest sealed slab of `area`, taken out of it (to recycle).
    pub fn oldest(&mut self, area: Area) -> Option<u32> {
        self.areas[area as usize].pop_front()
    }

    /// `slab` is free again.
    pub fn release(&mut self, slab: u32) {
        self.slabs[slab as usize] = SlabMeta::default();
        self.free.push(slab);
    }

    /// Everything free (`flush_all`).
    pub fn clear(&mut self) {
        let n = self.slabs.len();
        *self = Log {
            next_seq: self.next_seq,
            ..Log::new(n)
        };
    }

    pub fn sealed(&self, area: Area) -> usize {
        self.areas[area as usize].len()
    }

    /// Bytes of DRAM the table takes.
    pub fn memory_bytes(&self) -> usize {
        self.slabs.len() * (std::mem::size_of::<SlabMeta>() + 8)
            + self
                .slabs
                .iter()
                .map(|m| m.offsets.capacity() * 4)
                .sum::<usize>()
    }

    #[cfg(any(test, feature = "testing"))]
    pub fn validate(&self, busy: &[u32]) {
        let mut seen = vec![false; self.slabs.len()];
        let mut mark = |s: u32| {
            assert!(!seen[s as usize], "slab {s} listed twice");
            seen[s as usize] = true;
        };
        for &s in &self.free {
            assert!(
                self.slabs[s as usize].area.is_none(),
                "free slab {s} has an area"
            );
            mark(s);
        }
        for (a, q) in self.areas.iter().enumerate() {
            let mut last = 0;
            for &s in q {
                let m = &self.slabs[s as usize];
                assert_eq!(
                    m.area.map(|a| a as usize),
                    Some(a),
                    "slab {s} in the wrong area"
                );
                assert!(m.seq > last, "area {a} out of order");
                last = m.seq;
                assert!(m.offsets.windows(2).all(|w| w[0] < w[1]));
                mark(s);
            }
        }
        for &b in busy {
            mark(b);
        }
        // Slabs being recycled are in none of the lists only inside a
        // step of the writer, which holds its own lock meanwhile.
        assert!(seen.iter().all(|&s| s), "a slab is lost");
    }
}

/// Move an item image's expiry from the clock of `from` (the Unix time of
/// its relative 0) to that of `to`; false if it has expired meanwhile.
pub fn rebase(image: &mut [u8], from: i64, to: i64) -> bool {
    let exp = item::exptime(image);
    match moved_expiry(exp, from, to) {
        Some(moved) if moved != exp => item::set_exptime(image, moved),
        Some(_) => {}
        None => return false,
    }
    true
}

/// A relative expiry `exp` (0: never) under the clock of `from`, on the
/// clock of `to`; None if it has passed meanwhile.
pub(super) fn moved_expiry(exp: u32, from: i64, to: i64) -> Option<u32> {
    if exp == 0 || from == to {
        return Some(exp);
    }
    let rel = from + i64::from(exp) - to;
    (rel > 0).then(|| u32::try_from(rel).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_damage_is_refused() {
        let h = SlabHeader {
            area: Area::Hot,
            seq: 42,
            epoch: 1_700_000_000,
            used: 5000,
            containers: 3,
        };
        let mut b = vec![0u8; SLAB_HEADER];
        h.write(&mut b);
        assert_eq!(SlabHeader::read(&b), Some(h));
        for i in 0..36 {
            for bit in 0..8 {
                let mut d = b.clone();
                d[i] ^= 1 << bit;
                assert_eq!(SlabHeader::read(&d), None, "byte {i} bit {bit}");
            }
        }
        assert_eq!(SlabHeader::read(&b[..10]), None);
        assert_eq!(SlabHeader::read(&[0u8; SLAB_HEADER]), None);
    }

    #[test]
    fn expiry_moves_to_the_new_clock() {
        let mut image = vec![0u8; 32];
        item::set_exptime(&mut image, 100);
        assert!(rebase(&mut image, 1000, 1030));
        assert_eq!(item::exptime(&image), 70);
        assert!(!rebase(&mut image, 1000, 1100));
        let mut forever = vec![0u8; 32];
        assert!(rebase(&mut forever, 1000, 99_999));
        assert_eq!(item::exptime(&forever), 0);
    }
}
