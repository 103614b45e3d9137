//! The file the flash tier lives in, and the one place it does I/O.
//!
//! [`FileDevice`] opens the file with `O_DIRECT` where the filesystem
//! allows it (reads and writes then bypass the page cache, so the tier's
//! DRAM is what `-m` counts and no more), and falls back to buffered I/O
//! plus `fdatasync` where it does not (tmpfs, some overlay filesystems).
//! Either way every transfer is whole, at offsets and lengths that are
//! multiples of [`ALIGN`], from buffers aligned to it ([`AlignedBuf`]).
//!
//! [`Faulty`] wraps a device and injects the faults the tier must survive:
//! I/O errors, a full disk, flipped bytes on the way back. The tests use it
//! (issue 12's fault criteria); nothing else does.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Alignment of every transfer: the usual logical block of an SSD and the
/// page size, which `O_DIRECT` requires of offsets, lengths and buffers.
pub const ALIGN: usize = 4096;

/// Where the tier's slabs are stored.
pub trait Device: Send + Sync {
    /// Bytes the tier may use.
    fn size(&self) -> u64;
    /// Fill `buf` from `offset` (both multiples of [`ALIGN`]).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Write all of `buf` at `offset` (both multiples of [`ALIGN`]).
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Make what was written durable.
    fn sync(&self) -> io::Result<()>;
    /// Whether transfers bypass the page cache.
    fn direct(&self) -> bool;
    /// The file's descriptor, for callers that submit their own reads
    /// (io_uring); None for a device that is not one file.
    fn raw_fd(&self) -> Option<RawFd> {
        None
    }
}

/// A file opened for the tier.
pub struct FileDevice {
    file: File,
    len: u64,
    direct: bool,
}

impl FileDevice {
    /// Open (or create) `path` and give it `len` bytes (rounded down to
    /// [`ALIGN`]), reserved on disk with `fallocate` so that a full disk
    /// shows at start-up rather than as write errors later.
    pub fn open(path: &Path, len: u64) -> io::Result<FileDevice> {
        let len = len / ALIGN as u64 * ALIGN as u64;
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "flash size is smaller than one block",
            ));
        }
        let open = |flags: i32| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .custom_flags(flags)
                .open(path)
        };
        let (file, direct) = match open(libc::O_DIRECT) {
            Ok(f) => (f, true),
            // EINVAL: the filesystem does not do O_DIRECT (tmpfs).
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (open(0)?, false),
            Err(e) => return Err(e),
        };
        if file.metadata()?.len() != len {
            file.set_len(len)?;
        }
        reserve(&file, len)?;
        let dev = FileDevice { file, len, direct };
        if direct {
            // Some filesystems accept the flag and fail the first transfer.
            let mut probe = AlignedBuf::new(ALIGN);
            if dev.read_at(probe.as_mut(), 0).is_err() {
                return Ok(FileDevice {
                    file: open(0)?,
                    len,
                    direct: false,
                });
            }
        }
        Ok(dev)
    }
}

/// Reserve the file's blocks (`posix_fallocate`); filesystems that cannot
/// are left sparse.
fn reserve(file: &File, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain system call on a file descriptor we own, with no
    // pointers; it fails cleanly (an error code) on a bad descriptor.
    let r = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) };
    match r {
        0 | libc::EOPNOTSUPP | libc::EINVAL => Ok(()),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

impl Device for FileDevice {
    fn size(&self) -> u64 {
        self.len
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_range(buf.len(), offset, self.len)?;
        self.file.read_exact_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_range(buf.len(), offset, self.len)?;
        self.file.write_all_at(buf, offset)
    }

    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn direct(&self) -> bool {
        self.direct
    }

    fn raw_fd(&self) -> Option<RawFd> {
        Some(self.file.as_raw_fd())
    }
}

fn check_range(len: usize, offset: u64, dev_len: u64) -> io::Result<()> {
    let aligned = len.is_multiple_of(ALIGN) && offset.is_multiple_of(ALIGN as u64);
    if !aligned || offset + len as u64 > dev_len {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "flash transfer out of range or unaligned",
        ));
    }
    Ok(())
}

/// A buffer whose bytes start at an [`ALIGN`]ed address: a vector with
/// room to slide its start, so no allocator call needs a layout of ours.
pub struct AlignedBuf {
    v: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// `len` zero bytes (rounded up to [`ALIGN`]).
    pub fn new(len: usize) -> AlignedBuf {
        let len = len.div_ceil(ALIGN) * ALIGN;
        let v = vec![0u8; len + ALIGN];
        let start = v.as_ptr().align_offset(ALIGN);
        AlignedBuf { v, start, len }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        &self.v[self.start..self.start + self.len]
    }
}

impl AsMut<[u8]> for AlignedBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.v[self.start..self.start + self.len]
    }
}

/// The stride of [`Faulty::flip`].
pub const FLIP_EVERY: usize = 512;

/// A device that fails on request: for the fault tests.
pub struct Faulty<D> {
    pub inner: D,
    /// Reads fail with EIO.
    pub fail_reads: AtomicBool,
    /// Writes fail with EIO.
    pub fail_writes: AtomicBool,
    /// Writes fail with ENOSPC.
    pub full: AtomicBool,
    /// Reads come back with this byte of the transfer flipped, and every
    /// [`FLIP_EVERY`]th after it, so that any container read is damaged
    /// (u64::MAX: none).
    pub flip: AtomicU64,
}

impl<D: Device> Faulty<D> {
    pub fn new(inner: D) -> Faulty<D> {
        Faulty {
            inner,
            fail_reads: AtomicBool::new(false),
            fail_writes: AtomicBool::new(false),
            full: AtomicBool::new(false),
            flip: AtomicU64::new(u64::MAX),
        }
    }
}

impl<D: Device> Device for Faulty<D> {
    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if self.fail_reads.load(Ordering::Relaxed) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        self.inner.read_at(buf, offset)?;
        let flip = self.flip.load(Ordering::Relaxed);
        if let Ok(first) = usize::try_from(flip) {
            for b in buf.iter_mut().skip(first).step_by(FLIP_EVERY) {
                *b ^= 0x20;
            }
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.full.load(Ordering::Relaxed) {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        if self.fail_writes.load(Ordering::Relaxed) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        self.inner.write_at(buf, offset)
    }

    fn sync(&self) -> io::Result<()> {
        self.inner.sync()
    }

    fn direct(&self) -> bool {
        self.inner.direct()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_path(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("cachalot-dev-{}-{name}", std::process::id()))
    }

    #[test]
    fn aligned_buffers_are_aligned() {
        for len in [1, ALIGN, 3 * ALIGN + 5] {
            let mut b = AlignedBuf::new(len);
            assert_eq!(b.as_mut().as_ptr() as usize % ALIGN, 0);
            assert_eq!(b.len() % ALIGN, 0);
            assert!(b.len() >= len);
        }
    }

    #[test]
    fn writes_read_back_and_ranges_are_checked() {
        let path = temp_path("rw");
        let dev = FileDevice::open(&path, 1 << 20).expect("open");
        let mut w = AlignedBuf::new(2 * ALIGN);
        for (i, b) in w.as_mut().iter_mut().enumerate() {
            *b = i as u8;
        }
        dev.write_at(w.as_ref(), ALIGN as u64).expect("write");
        let mut r = AlignedBuf::new(2 * ALIGN);
        dev.read_at(r.as_mut(), ALIGN as u64).expect("read");
        assert_eq!(r.as_ref(), w.as_ref());
        // Unaligned, and past the end.
        assert!(dev.read_at(&mut r.as_mut()[..100], 0).is_err());
        assert!(dev.read_at(r.as_mut(), (1 << 20) - ALIGN as u64).is_err());
        drop(dev);
        // Reopening keeps the contents.
        let dev = FileDevice::open(&path, 1 << 20).expect("reopen");
        dev.read_at(r.as_mut(), ALIGN as u64).expect("read");
        assert_eq!(r.as_ref(), w.as_ref());
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn faults_are_injected() {
        let path = temp_path("faulty");
        let dev = Faulty::new(FileDevice::open(&path, 1 << 20).expect("open"));
        let mut b = AlignedBuf::new(ALIGN);
        b.as_mut()[7] = 1;
        dev.write_at(b.as_ref(), 0).expect("write");
        dev.flip.store(7, Ordering::Relaxed);
        let mut r = AlignedBuf::new(ALIGN);
        dev.read_at(r.as_mut(), 0).expect("read");
        assert_eq!(r.as_ref()[7], 1 ^ 0x20);
        assert_eq!(r.as_ref()[7 + FLIP_EVERY], 0x20);
        assert_eq!(r.as_ref()[8], 0);
        dev.fail_reads.store(true, Ordering::Relaxed);
        assert!(dev.read_at(r.as_mut(), 0).is_err());
        dev.full.store(true, Ordering::Relaxed);
        let e = dev.write_at(b.as_ref(), 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        let _ = std::fs::remove_file(path);
    }
}
