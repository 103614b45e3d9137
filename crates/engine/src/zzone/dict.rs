//! The zone's zstd dictionaries: sampling demoted items, and the slots
//! blocks name their dictionary by (a block keeps the one it was
//! compressed with until it is rewritten).

use std::sync::Arc;

use super::config::{DICT_SLOTS, RETRAIN_DEMOTIONS, SAMPLE_EVERY, WORTH_RATIO};
use super::zone::Zone;
use crate::codec::{Codec, Dictionary};

impl Zone {
    /// Whether demotions are being sampled: until the first dictionary,
    /// then only over the last demotions before a retraining is due, so
    /// that samples (counted in `-m`) are not held in between.
    pub(super) fn sampling(&self) -> bool {
        let window = SAMPLE_EVERY * self.cfg.dict_samples as u64;
        // Values that do not compress would only be held for a training
        // that finds nothing in common, again and again. (The ratio, not
        // `worth`: a dictionary may be what lifts it to WORTH_AGAIN.)
        self.ratio >= WORTH_RATIO
            && (self.dict == 0
                || self.stats.demotions + window >= self.trained_at + RETRAIN_DEMOTIONS)
    }

    /// Whether the samples are enough to train on: as many as configured,
    /// or as many bytes as they may hold, near enough that another
    /// demotable item would not fit.
    pub(super) fn samples_full(&self) -> bool {
        self.samples.len() >= self.cfg.dict_samples
            || self.sample_bytes + self.raw_capacity() / 2 > self.cfg.sample_bytes
    }

    /// Samples to train a dictionary on, when one is due (taken: train
    /// outside any lock with [`crate::codec::train_dictionary`], then
    /// [`Zone::install_dictionary`]).
    pub fn take_samples(&mut self) -> Option<Vec<Vec<u8>>> {
        let due = self.dict == 0 || self.stats.demotions >= self.trained_at + RETRAIN_DEMOTIONS;
        if self.cfg.codec != Codec::Zstd || !self.samples_full() || !due {
            return None;
        }
        self.trained_at = self.stats.demotions;
        Some(self.drop_samples())
    }

    /// `x` is dropped once the zone's lock is released ([`Zone::to_free`]).
    pub(super) fn free_later(&mut self, x: impl Send + 'static) {
        self.to_free.push(Box::new(x));
    }

    /// Let the samples go (counted in `-m` while held); they are returned.
    pub(super) fn drop_samples(&mut self) -> Vec<Vec<u8>> {
        self.sample_bytes = 0;
        std::mem::take(&mut self.samples)
    }

    /// New blocks use this dictionary from now on (its id becomes its
    /// slot's); old ones keep theirs until rewritten. False if all slots
    /// are taken by dictionaries old blocks still use. Built by the caller,
    /// without the lock: zstd digests a 16 KB dictionary in milliseconds.
    pub fn install_dictionary(&mut self, mut dict: Dictionary) -> bool {
        let free = (1..=DICT_SLOTS).find(|&i| self.dicts.get(i).is_none_or(|d| d.is_none()));
        let Some(slot) = free else {
            return false;
        };
        if slot >= self.dicts.len() {
            self.dicts.resize_with(slot + 1, || None);
        }
        let old = self.dict as usize;
        dict.id = slot as u32;
        self.dicts[slot] = Some((Arc::new(dict), 0));
        self.dict = slot as u8;
        self.stats.dictionaries_trained += 1;
        self.release_dict(old);
        // Samples taken while it trained (the server trains the first one
        // in the background, and demotions are sampled until a dictionary
        // is in) would wait, counted in `-m`, for a retraining millions of
        // demotions away: 640 KB held for nothing at `-m 40`, a zone page.
        if !self.sampling() {
            let samples = self.drop_samples();
            self.free_later(samples);
        }
        true
    }

    /// Drop dictionary `i` if it is not the current one and no block uses it.
    pub(super) fn release_dict(&mut self, i: usize) {
        if i != 0 && i != self.dict as usize {
            if let Some(Some((_, 0))) = self.dicts.get(i) {
                if let Some((d, _)) = self.dicts[i].take() {
                    self.free_later(d);
                }
            }
        }
    }
}
