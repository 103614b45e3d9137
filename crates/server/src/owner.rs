//! One server per file (issue 37): the flash file and the `-e` warm-restart
//! file each belong to one running process.
//!
//! Two servers on one `ext_path` would both write the same log and each
//! believe the other's slabs at its next crash scan; two on one `-e` file
//! would load and overwrite each other's items. So before the engine reads
//! or writes anything, and before any port is bound, the server takes an
//! exclusive `flock` on each such file and holds it until it exits.
//! memcached 1.6 does the same for extstore's file (`lockf`) and exits 1
//! with "extstore open: Resource temporarily unavailable".
//!
//! The lock belongs to the open file, so it dies with its holder: after a
//! kill -9 the next server starts at once. The flash file is locked
//! itself (it exists for the server's whole life, and its `.index`,
//! `.journal` and `.dict` files are only touched by its owner). The `-e`
//! file does not: it is removed once loaded and written again, beside its
//! name and renamed, at a clean stop, so a lock on it would be lost with
//! the inode. Its lock lives in `<file>.lock`, which is left in place: a
//! lock file removed at exit lets a third server lock a new inode while a
//! second still waits on the old one.

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::path::{Path, PathBuf};

/// An exclusive hold on a file, released when dropped (or at exit).
#[derive(Debug)]
pub struct Owned {
    _file: File,
    path: PathBuf,
}

impl Owned {
    /// Take `path` (created if missing, never truncated) for this process,
    /// without waiting. `WouldBlock` means another process holds it.
    pub fn take(path: &Path) -> io::Result<Owned> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        match file.try_lock() {
            Ok(()) => Ok(Owned {
                _file: file,
                path: path.to_path_buf(),
            }),
            Err(TryLockError::WouldBlock) => Err(io::ErrorKind::WouldBlock.into()),
            Err(TryLockError::Error(e)) => Err(e),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The lock file of a warm-restart file: `<file>.lock`.
pub fn warm_lock_path(file: &Path) -> PathBuf {
    let mut p = file.as_os_str().to_owned();
    p.push(".lock");
    PathBuf::from(p)
}

/// Why a file could not be taken, in the words an operator needs.
pub fn refusal(what: &str, path: &Path, e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::WouldBlock => format!(
            "{what} {} is in use by another running server (Resource temporarily \
             unavailable); two servers on one file would overwrite each other's data",
            path.display()
        ),
        _ => format!("{what} {}: cannot open to lock it: {e}", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_hold_is_refused_until_the_first_is_dropped() {
        let dir = std::env::temp_dir().join(format!("cachalot-owner-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("flash");
        std::fs::write(&path, b"kept").unwrap();
        let first = Owned::take(&path).unwrap();
        assert_eq!(first.path(), path.as_path());
        // flock conflicts between open files, in one process as in two.
        let second = Owned::take(&path).unwrap_err();
        assert_eq!(second.kind(), io::ErrorKind::WouldBlock);
        assert!(refusal("ext_path", &path, &second).contains("in use by another running server"));
        drop(first);
        let third = Owned::take(&path).unwrap();
        drop(third);
        // Taking never truncates.
        assert_eq!(std::fs::read(&path).unwrap(), b"kept");
        assert_eq!(
            warm_lock_path(&path),
            dir.join("flash.lock"),
            "the -e lock sits beside its file"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
