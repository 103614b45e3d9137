//! A parked request's flash read as a worker hands it over and gets it
//! back, whichever way reads it (its `ring`, or `flash_io`'s reader
//! threads). Below both ways, so that `flash_io`, which chooses between
//! them, imports `ring` and `ring` does not import `flash_io`.

use cachalot_engine::flash::fetch::{Fetched, Want};

/// What became of a read handed to `FlashIo::submit`.
pub enum Submitted {
    /// In flight; `FlashIo::completed` reports it.
    Queued,
    /// Finished at once (its container was still in DRAM, or it is not on
    /// flash after all): the key and the image or None.
    Done(Fetched),
    /// Too many reads wait already (`ring::MAX_IN_FLIGHT` on the worker's
    /// ring, `flash_io::MAX_QUEUED` for the threads): answer it as a miss.
    Full(Want),
}

/// A read done, for the connection of `slot` (if it is still `conn`, its
/// `Conn::serial`: a closed connection's slot and fd come back for others).
pub struct Done {
    pub slot: usize,
    pub conn: u64,
    pub key: Box<[u8]>,
    pub image: Option<Box<[u8]>>,
}
