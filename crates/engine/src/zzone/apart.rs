//! The zone's side of items stored apart (`super::large`, zExpander
//! §3.1, footnote 3): storing a staged large item's record and staging its
//! stub (the writer's job, in three steps as a block's rewrite), freeing a
//! record when its stub goes (or a block's records when it goes without
//! being decoded), dropping a record alone, and reading one, under the
//! zone's lock or copied out to be decoded without it.

use std::sync::Arc;

use super::large::{
    is_stub, make_stub, matches, stub_of, PackedCopy, Record, RecordJob, Stub, MOVING, RECORD_BIT,
    STAGED,
};
use super::log::NOWHERE;
use super::zone::Zone;
use crate::codec::Codec;

impl Zone {
    /// Step 1 of storing a staged large item apart (the writer's flush
    /// takes these first: each frees the most stage): None if none waits.
    pub(super) fn begin_record(&mut self, now: u32) -> Option<RecordJob> {
        let (h, push, image) = self.stage.next_large()?;
        // It copies no block: no rewrite makes it stale.
        let ticket = self.ticket([NOWHERE; 2]);
        let dict_slot = match self.cfg.codec {
            Codec::Zstd => self.dict,
            _ => 0,
        };
        Some(RecordJob {
            ticket,
            h,
            push,
            image,
            codec: self.cfg.codec,
            dict_slot,
            dict: self.dict_arc(dict_slot),
            recognizer: self.recognizer.clone(),
            now,
            packed: Vec::new(),
            used: Codec::Raw,
            entropy: 0.0,
            tried: false,
        })
    }

    /// Step 3: store the record and stage its stub in place of the item,
    /// unless the item was replaced or removed, or the dictionary retired,
    /// meanwhile (then the job is dropped and the item waits for another).
    /// A record the zone has no room for (or over a quarter of a page:
    /// [`super::config::RECORD_SHARE`]) is handed down the zone's pipe, or
    /// evicted. False if the job was dropped.
    pub(super) fn finish_record(&mut self, job: RecordJob) -> bool {
        let Some(at) = self.tickets.iter().position(|t| t.0 == job.ticket) else {
            // The zone was cleared.
            return false;
        };
        self.tickets.swap_remove(at);
        let same = self.stage.push_of(job.h) == Some(job.push)
            && (job.used != Codec::Zstd
                || job.dict_slot == 0
                || match (&job.dict, self.dict_arc(job.dict_slot)) {
                    (Some(a), Some(b)) => Arc::ptr_eq(a, &b),
                    _ => false,
                });
        if !same {
            self.stats.flush_conflicts += 1;
            return false;
        }
        let (raw, stored) = (job.image.len(), job.bytes().len());
        self.note_record(raw, stored);
        match job.tried {
            true => self.recognizer.record(job.entropy, raw, stored),
            false => {
                self.recognizer.worth_trying(job.entropy);
            }
        }
        let dict = match job.used {
            Codec::Zstd => job.dict_slot,
            _ => 0,
        };
        let fits = stored <= self.log.page_size() / super::config::RECORD_SHARE;
        // Its dictionary must outlive the room made for it: a sweep may
        // rewrite the last blocks that named it (as a flush's, `finish_block`).
        if let Some(Some(x)) = self.dicts.get_mut(dict as usize) {
            x.1 += 1;
        }
        // Blocks take room the same way: a zone that does not compress
        // keeps nothing (`write_out`).
        let room = fits && self.worth_growing() && self.make_room(stored, job.now);
        let id = self.records.next_id();
        let loc = match room {
            true => self.log.append(id | RECORD_BIT, job.bytes()),
            false => None,
        };
        let Some(loc) = loc else {
            if let Some(Some(x)) = self.dicts.get_mut(dict as usize) {
                x.1 -= 1;
            }
            self.release_dict(dict as usize);
            self.stage.discard(job.h);
            self.stats.items -= 1;
            let sent = self
                .spill
                .as_ref()
                .is_some_and(|pipe| pipe.send(job.h, &job.image));
            match sent {
                true => self.stats.spilled += 1,
                false => {
                    self.stats.refused += 1;
                    self.stats.evictions += 1;
                    self.tell_evicted(&job.image);
                }
            }
            return true;
        };
        let (added, tag) = self.records.add(Record {
            h: job.h,
            loc,
            stored: stored as u32,
            raw: raw as u32,
            tag: 0,
            owner: STAGED,
            codec: job.used.code(),
            dict,
        });
        debug_assert_eq!(
            added, id,
            "the record took the id its bytes were logged under"
        );
        self.stats.large_written += 1;
        self.stage.replace(job.h, make_stub(&job.image, id, tag));
        true
    }

    /// Free the record `stub` names, if it still does (its stub is gone).
    pub(super) fn free_record(&mut self, stub: Stub) {
        if self.records.named(stub).is_some() {
            self.drop_record(stub.id);
        }
    }

    /// Free the record of `image` if it is a stub.
    pub(super) fn free_record_of(&mut self, image: &[u8]) {
        if let Some(s) = stub_of(image) {
            self.free_record(s);
        }
    }

    /// Free the records whose stubs are in block `id`, which goes without
    /// being decoded (it does not decode, or has no room to move to).
    pub(super) fn free_records_of(&mut self, id: u32) {
        let owned: Vec<u32> = self
            .records
            .iter()
            .filter(|(_, r)| r.owner == id)
            .map(|(i, _)| i)
            .collect();
        for i in owned {
            self.drop_record(i);
        }
    }

    /// Free record `id`'s bytes and slot.
    fn drop_record(&mut self, id: u32) -> Record {
        let r = self.records.take(id);
        self.log.kill(r.loc, r.stored as usize);
        if let Some(Some(x)) = self.dicts.get_mut(r.dict as usize) {
            x.1 -= 1;
        }
        self.release_dict(r.dict as usize);
        r
    }

    /// Record `log_id` is dropped while its stub stays (no room to move
    /// it): the stub becomes a known removal, so it reads as a miss and
    /// goes at its block's next rewrite (a staged stub goes now).
    pub(super) fn orphan(&mut self, log_id: u32) {
        let r = self.drop_record(log_id & !RECORD_BIT);
        match r.owner {
            STAGED => {
                debug_assert!(self.stage.get_hash(r.h).is_some_and(is_stub));
                self.stage.discard(r.h);
                self.drop_items(1);
            }
            block => {
                debug_assert_ne!(block, MOVING, "no record moves while a flush installs");
                // A flush that copied the block would keep the stub it
                // does not know is gone, and count it twice.
                for t in self.tickets.iter_mut().filter(|t| t.1.contains(&block)) {
                    t.2 = true;
                }
                let seen = self.pending.entry(r.h).or_insert(false);
                if !*seen {
                    *seen = true;
                    self.drop_items(1);
                }
            }
        }
    }

    /// The stubs a flush installs are between blocks until their block is
    /// written: no block's drop may take their records.
    pub(super) fn stubs_moving(&mut self, stubs: &[Stub]) {
        for &s in stubs {
            self.records.set_owner(s, MOVING);
        }
    }

    /// The stubs of block `id`, just written, are there.
    pub(super) fn stubs_in(&mut self, id: u32, stubs: &[Stub]) {
        for &s in stubs {
            self.records.set_owner(s, id);
        }
    }

    /// Decode the record `stub` (of `key`) names into `out`, under the
    /// zone's lock. False (`out` empty) if it is gone or is not the item.
    pub(super) fn read_record(&mut self, stub: Stub, key: &[u8], out: &mut Vec<u8>) -> bool {
        out.clear();
        let Some(r) = self.records.named(stub).copied() else {
            return false;
        };
        let ok = self.decode_packed(r.stored_at(), out) && matches(out, stub, key);
        if !ok {
            debug_assert!(false, "Z-zone record {} does not decode", stub.id);
            self.stats.corrupt += 1;
            out.clear();
        }
        ok
    }

    /// The middle of a read without the zone's lock that found a stub
    /// ([`super::Copied::find`]): copy the record's stored bytes and how
    /// to decode them. False if the stub names no record now (it was
    /// dropped since the block was copied: a miss).
    pub fn copy_record(&mut self, stub: Stub, out: &mut PackedCopy) -> bool {
        match self.records.named(stub).copied() {
            Some(r) => self.copy_packed(r.stored_at(), out),
            None => false,
        }
    }
}
