//! Parking a request on a flash read (issue 12: "a GET served from flash
//! parks its connection and completes when the read does").
//!
//! A worker keeps, per connection, the [`Fetches`] of its parked request.
//! A GET that misses memory and finds its key possibly on flash does not
//! read there when its caller lets it park (`Cache::get_or_park`): it
//! answers [`Got::Parked`] with the [`Want`], the read to do, and the
//! handler records it, takes the request back (it has written nothing for
//! it) and stops. The worker hands the wants to its reader threads, keeps
//! serving its other connections, and when the reads complete puts the
//! images in the connection's [`Fetches::done`] and runs the request again:
//! this time the lookup finds the image there. A caller that does not park
//! (`Cache::get`: the lab's simulator, tests, a worker without readers) has
//! the lookup read flash itself.

use super::index::Loc;

/// A flash read a request waits for.
#[derive(Debug, Clone)]
pub struct Want {
    pub h: u64,
    pub key: Box<[u8]>,
    pub locs: Vec<Loc>,
}

/// What a worker's own read of a [`Want`] needs next
/// (`Cache::flash_advance`).
#[derive(Debug)]
pub enum FlashStep {
    /// Finished: the item's image, or None if flash does not have it.
    Done(Option<Box<[u8]>>),
    /// This device read first.
    Io(super::DeviceRead),
}

/// A completed read: the key, and its image if flash had it.
pub type Fetched = (Box<[u8]>, Option<Box<[u8]>>);

/// A connection's completed and wanted reads.
#[derive(Debug, Default)]
pub struct Fetches {
    pub done: Vec<Fetched>,
    pub wanted: Vec<Want>,
}

/// A GET's answer to a caller that lets it park (`Cache::get_or_park`).
#[derive(Debug)]
pub enum Got<R> {
    /// Found or not: what the caller's closure made of the item (or None).
    Done(R),
    /// The key may be on flash: nothing was answered (the closure was not
    /// called); this read is to be done before the request runs again.
    Parked(Want),
}

impl Fetches {
    /// The request they were for is answered.
    pub fn clear(&mut self) {
        self.done.clear();
        self.wanted.clear();
    }

    /// Record a read the request waits for (once per key).
    pub fn want(&mut self, want: Want) {
        if !self.wanted.iter().any(|w| w.key == want.key) {
            self.wanted.push(want);
        }
    }

    /// Whether the request waits for reads: it is parked.
    pub fn parked(&self) -> bool {
        !self.wanted.is_empty()
    }

    /// The completed read of `key`, taken: its image, or None if flash did
    /// not have it after all. None if it was not read.
    pub(crate) fn take_done(&mut self, key: &[u8]) -> Option<Option<Box<[u8]>>> {
        let i = self.done.iter().position(|(k, _)| &k[..] == key)?;
        Some(self.done.swap_remove(i).1)
    }
}
