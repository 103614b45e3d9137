//! The flash tier's zstd dictionary (issue 12: containers are compressed
//! "using the codecs and dictionaries of the Z-zone"). A container holds
//! a hundred or so small items; a dictionary trained on items like them
//! gives zstd the words and field names they share before the first byte
//! (docs/benchmarks-history.md: about a fifth more items on the lab's tweets).
//!
//! - It is trained once, on the first item images the writer packs
//!   ([`SAMPLE_BYTES`] of them), on a thread of its own: the writer goes
//!   on writing without it meanwhile.
//! - It is saved beside the file (`<path>.dict`, under a CRC-32) and synced
//!   before any container names it, so every container that names it can
//!   be decoded after a restart or a crash. A lost or damaged dictionary
//!   file makes its containers misses, never wrong bytes.
//! - Its id (the 16 bits a container records) comes from its bytes, so a
//!   container is never decoded with another run's dictionary; zstd also
//!   checks the dictionary's own id, written in every frame.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use super::config::FlashConfig;
use crate::codec::Dictionary;

const MAGIC: [u8; 4] = *b"CDI1";
/// Bytes of the dictionary: 64 KB stored the lab's tweets 6% smaller than
/// 16 KB (docs/benchmarks-history.md); its digested form counts in `-m`.
pub const DICT_BYTES: usize = 64 << 10;
/// Item bytes it is trained on, and most samples (zstd's trainer wants
/// about a hundred samples per KB of dictionary; more costs time only).
pub const SAMPLE_BYTES: usize = 1 << 20;
const MAX_SAMPLES: usize = 16_384;
/// Largest image sampled (a dictionary pays off on small items).
const MAX_SAMPLE: usize = 16 << 10;
/// DRAM a training takes at most, counted in `-m` until it is over: the
/// samples, their lengths, zstd's tables, the dictionary's buffer.
pub const TRAINING_BYTES: usize = SAMPLE_BYTES
    + MAX_SAMPLES * std::mem::size_of::<usize>()
    + crate::codec::TRAINER_BYTES
    + DICT_BYTES;
/// Trainings tried before giving up (zstd refuses samples with too
/// little in common, or too few).
const ATTEMPTS: u32 = 3;

/// Whether the tier trains a dictionary: with zstd, and DRAM enough that
/// the training's reservation takes at most a quarter of the tier's share
/// of `-m` (about `-m 22` and up): below that it would crowd the index out.
pub fn worth_training(config: &FlashConfig) -> bool {
    config.codec == crate::codec::Codec::Zstd && config.memory_cap >= 4 * TRAINING_BYTES
}

/// The dictionary `bytes` digested for the tier at zstd `level`, named by
/// [`id_of`].
pub fn digest(bytes: Vec<u8>, level: i32) -> Dictionary {
    Dictionary::with_level(id_of(&bytes).into(), bytes, level)
}

pub fn dict_path(path: &Path) -> PathBuf {
    crate::durable::with_suffix(path, ".dict")
}

/// `dict` if it is the one a container names by `id`.
pub fn named(dict: Option<&Dictionary>, id: u16) -> Option<&Dictionary> {
    dict.filter(|d| d.id == u32::from(id))
}

/// The id containers record for a dictionary: from its bytes, never 0.
pub fn id_of(bytes: &[u8]) -> u16 {
    (crc32fast::hash(bytes) % 0xffff) as u16 + 1
}

/// Samples item images and trains the dictionary off the writer's thread.
#[derive(Default)]
pub struct Trainer {
    /// The samples end to end, and their lengths (as zstd takes them).
    samples: Vec<u8>,
    sizes: Vec<usize>,
    job: Option<JoinHandle<Option<Vec<u8>>>>,
    attempts: u32,
}

impl Trainer {
    /// Whether it still takes samples.
    pub fn sampling(&self) -> bool {
        self.job.is_none() && self.attempts < ATTEMPTS
    }

    pub fn sample(&mut self, image: &[u8]) {
        if self.sampling() && !self.full() && image.len() <= MAX_SAMPLE {
            if self.samples.capacity() == 0 {
                // Reserved whole, as counted: never a doubling past it.
                self.samples.reserve_exact(SAMPLE_BYTES);
                self.sizes.reserve_exact(MAX_SAMPLES);
            }
            self.samples.extend_from_slice(image);
            self.sizes.push(image.len());
        }
    }

    fn full(&self) -> bool {
        self.samples.len() + MAX_SAMPLE > SAMPLE_BYTES || self.sizes.len() >= MAX_SAMPLES
    }

    /// Whether it is done: a dictionary is in place, or it gave up.
    pub fn finished(&self) -> bool {
        self.job.is_none() && self.attempts >= ATTEMPTS
    }

    /// Start training once the samples are in; the dictionary once a
    /// training has finished (None meanwhile, or if it failed: then it
    /// samples again, up to [`ATTEMPTS`] times).
    pub fn poll(&mut self) -> Option<Vec<u8>> {
        if let Some(job) = self.job.take_if(|j| j.is_finished()) {
            return job.join().ok().flatten();
        }
        if self.job.is_none() && self.full() && self.attempts < ATTEMPTS {
            self.attempts += 1;
            let samples = std::mem::take(&mut self.samples);
            let sizes = std::mem::take(&mut self.sizes);
            self.job = Some(std::thread::spawn(move || {
                crate::codec::train_flat(&samples, &sizes, DICT_BYTES)
            }));
        }
        None
    }

    /// Forget the samples and any training (a dictionary is in place).
    pub fn stop(&mut self) {
        self.samples = Vec::new();
        self.sizes = Vec::new();
        self.attempts = ATTEMPTS;
    }
}

/// Save `bytes` as the dictionary beside the tier's file, durably
/// (`durable::replace`).
pub fn save(path: &Path, bytes: &[u8]) -> io::Result<()> {
    crate::durable::replace(&dict_path(path), |f| {
        f.write_all(&MAGIC)?;
        f.write_all(&(bytes.len() as u32).to_le_bytes())?;
        f.write_all(&crc32fast::hash(bytes).to_le_bytes())?;
        f.write_all(bytes)
    })
}

/// The dictionary saved beside the tier's file, if there is one and it is
/// whole.
pub fn load(path: &Path) -> Option<Vec<u8>> {
    let b = fs::read(dict_path(path)).ok()?;
    let len = u32::from_le_bytes(b.get(4..8)?.try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(b.get(8..12)?.try_into().ok()?);
    let bytes = b.get(12..)?;
    (b[..4] == MAGIC && bytes.len() == len && len <= DICT_BYTES && crc32fast::hash(bytes) == crc)
        .then(|| bytes.to_vec())
}

/// Remove the saved dictionary (the tier starts empty: a new one is
/// trained on what it will hold).
pub fn remove(path: &Path) {
    let _ = fs::remove_file(dict_path(path));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("cachalot-dict-{}-{name}", std::process::id()))
    }

    fn samples(n: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| {
                format!("{{\"user\":{i},\"name\":\"user {}\",\"ok\":true}}", i * 7).into_bytes()
            })
            .collect()
    }

    #[test]
    fn a_saved_dictionary_loads_back_and_damage_is_refused() {
        let path = temp("save");
        let bytes: Vec<u8> = (0..5000u32).map(|i| (i * 31 % 251) as u8).collect();
        save(&path, &bytes).expect("saves");
        assert_eq!(load(&path).as_deref(), Some(&bytes[..]));
        let file = dict_path(&path);
        let mut b = fs::read(&file).unwrap();
        for at in [0, 5, 9, 12, 2000, b.len() - 1] {
            let mut bad = b.clone();
            bad[at] ^= 0x40;
            fs::write(&file, &bad).unwrap();
            assert_eq!(load(&path), None, "byte {at} flipped");
        }
        b.truncate(b.len() - 1);
        fs::write(&file, &b).unwrap();
        assert_eq!(load(&path), None, "truncated");
        remove(&path);
        assert_eq!(load(&path), None, "removed");
    }

    #[test]
    fn the_trainer_trains_once_its_samples_are_in() {
        let mut t = Trainer::default();
        let all = samples(MAX_SAMPLES);
        for s in &all[..MAX_SAMPLES - 1] {
            t.sample(s);
        }
        assert_eq!(t.poll(), None);
        assert!(t.sampling(), "one sample short: no training yet");
        t.sample(&all[MAX_SAMPLES - 1]);
        assert!(
            t.samples.capacity() <= SAMPLE_BYTES && t.sizes.capacity() <= MAX_SAMPLES,
            "the samples stay within what is counted"
        );
        assert_eq!(t.poll(), None, "training starts");
        assert!(!t.sampling() && !t.finished());
        let dict = loop {
            if let Some(d) = t.poll() {
                break d;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        assert!(!dict.is_empty() && dict.len() <= DICT_BYTES);
        assert_ne!(id_of(&dict), 0);
        t.stop();
        t.sample(&all[0]);
        assert!(t.finished() && t.samples.is_empty(), "stopped");
    }
}
