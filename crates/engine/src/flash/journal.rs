//! The tombstone journal (`<path>.journal`, see `recover`): batches of
//! (hash, sequence) records, each under a CRC-32, appended and synced by
//! the writer thread, and the marks it holds beside key hashes. Also what
//! the last start found (`Recovery`).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use super::index;
use crate::durable::{self, with_suffix};

const JOURNAL_MAGIC: [u8; 4] = *b"CTB1";

pub fn journal_path(path: &Path) -> PathBuf {
    with_suffix(path, ".journal")
}

/// The journal's mark for `flush_all` (a hash no key is expected to have).
pub(super) const FLUSH_ALL: u64 = u64::MAX;
/// The journal's marks for a slab given up (recycled, evicted, or a write
/// that failed), `RETIRED + slab`: its old contents stay on disk until it
/// is written again, and a crash scan must not bring back what they hold
/// (a key removed since would come back stale).
pub(super) const RETIRED: u64 = FLUSH_ALL - (1 << index::SLAB_BITS) - 1;

/// The journal's mark for the keys of [`index::prefix_of`] `prefix`, whose
/// entry the index dropped (it was full): the key is not known, so every
/// key that shares the prefix is shadowed (one in 2^34: a miss, at worst).
pub(super) fn dropped_mark(prefix: u64) -> u64 {
    prefix | 1
}

/// How the tier found its file at start.
#[derive(Clone, Copy, Debug, Default)]
pub struct Recovery {
    /// From a clean shutdown's snapshot (else a scan).
    pub clean: bool,
    pub items: u64,
    pub slabs: u64,
    pub bad_slabs: u64,
    pub bad_containers: u64,
    pub micros: u64,
}

/// A little-endian reader over a byte slice that reports running out.
pub(super) struct Cursor<'a>(pub(super) &'a [u8]);

impl<'a> Cursor<'a> {
    pub(super) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let all: &'a [u8] = self.0;
        if all.len() < n {
            return None;
        }
        let (a, b) = all.split_at(n);
        self.0 = b;
        Some(a)
    }
    pub(super) fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    pub(super) fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub(super) fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    }
}

/// The tombstone journal.
pub struct Journal {
    file: File,
    path: PathBuf,
    bytes: u64,
}

impl Journal {
    pub fn open(path: &Path) -> io::Result<Journal> {
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)?;
        let bytes = file.metadata()?.len();
        Ok(Journal {
            file,
            path: path.to_path_buf(),
            bytes,
        })
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Append a batch of (hash, sequence) records, and sync it.
    pub fn append(&mut self, records: &[(u64, u64)]) -> io::Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let b = encode_batch(records);
        self.file.write_all(&b)?;
        self.file.sync_data()?;
        self.bytes += b.len() as u64;
        Ok(())
    }

    /// Every valid record; reading stops at the first damaged batch (the
    /// tail a crash cut short).
    pub fn records(&mut self) -> Vec<(u64, u64)> {
        let mut b = Vec::new();
        let _ = File::open(&self.path).and_then(|mut f| f.read_to_end(&mut b));
        let mut out = Vec::new();
        let mut c = Cursor(&b);
        loop {
            let start = c.0;
            let Some(magic) = c.take(4) else {
                break;
            };
            let Some(n) = c.u32() else {
                break;
            };
            let n = n as usize;
            if magic != JOURNAL_MAGIC || n > 1 << 24 {
                break;
            }
            let Some(body) = c.take(n * 16) else {
                break;
            };
            let Some(crc) = c.u32() else {
                break;
            };
            if crc32fast::hash(&start[..8 + n * 16]) != crc {
                break;
            }
            out.extend(body.chunks_exact(16).map(|r| {
                let h = u64::from_le_bytes(r[..8].try_into().unwrap_or([0; 8]));
                let s = u64::from_le_bytes(r[8..].try_into().unwrap_or([0; 8]));
                (h, s)
            }));
        }
        out
    }

    /// Rewrite the journal with only `keep` (`durable::replace`).
    pub fn rewrite(&mut self, keep: &[(u64, u64)]) -> io::Result<()> {
        let written = durable::replace(&self.path, |f| {
            let mut written = 0;
            for chunk in keep.chunks(1 << 16) {
                let b = encode_batch(chunk);
                f.write_all(&b)?;
                written += b.len() as u64;
            }
            Ok(written)
        })?;
        *self = Journal::open(&self.path)?;
        debug_assert_eq!(self.bytes, written);
        Ok(())
    }
}

fn encode_batch(records: &[(u64, u64)]) -> Vec<u8> {
    let mut b = Vec::with_capacity(12 + records.len() * 16);
    b.extend_from_slice(&JOURNAL_MAGIC);
    b.extend_from_slice(&(records.len() as u32).to_le_bytes());
    for (h, s) in records {
        b.extend_from_slice(&h.to_le_bytes());
        b.extend_from_slice(&s.to_le_bytes());
    }
    let crc = crc32fast::hash(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("cachalot-journal-{}-{name}", std::process::id()))
    }

    #[test]
    fn the_journal_keeps_whole_batches_only() {
        let p = temp("journal");
        let _ = std::fs::remove_file(&p);
        let mut j = Journal::open(&p).expect("open");
        j.append(&[(1, 10), (2, 20)]).unwrap();
        j.append(&[(3, 30)]).unwrap();
        assert_eq!(j.records(), vec![(1, 10), (2, 20), (3, 30)]);
        // A torn last batch (a crash while appending) is ignored.
        let len = std::fs::metadata(&p).unwrap().len();
        OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(len - 3)
            .unwrap();
        let mut j = Journal::open(&p).expect("reopen");
        assert_eq!(j.records(), vec![(1, 10), (2, 20)]);
        j.rewrite(&[(2, 20)]).unwrap();
        assert_eq!(j.records(), vec![(2, 20)]);
        j.append(&[(4, 40)]).unwrap();
        assert_eq!(j.records(), vec![(2, 20), (4, 40)]);
        let _ = std::fs::remove_file(&p);
    }
}
