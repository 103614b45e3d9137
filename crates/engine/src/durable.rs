//! Files the engine replaces whole (the flash tier's snapshot, journal and
//! dictionary, the warm restart file): written beside their name, synced,
//! renamed over it and the directory synced, so that a crash leaves the old
//! file or the new one, never part of one.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// `path` with `suffix` appended to its file name.
pub fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

/// Replace `path` with what `write` puts in a new file; on an error the
/// new file is removed and `path` is left as it was.
pub fn replace<T>(path: &Path, write: impl FnOnce(&mut File) -> io::Result<T>) -> io::Result<T> {
    let tmp = with_suffix(path, ".tmp");
    let written = File::create(&tmp).and_then(|mut f| {
        let out = write(&mut f)?;
        f.sync_all()?;
        Ok(out)
    });
    let out = match written {
        Ok(out) => out,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        File::open(dir)?.sync_all()?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_leaves_the_old_file() {
        let path = std::env::temp_dir().join(format!("cachalot-durable-{}", std::process::id()));
        replace(&path, |f| io::Write::write_all(f, b"old")).expect("first");
        let failed = replace(&path, |f| {
            io::Write::write_all(f, b"half")?;
            Err::<(), _>(io::Error::other("disk full"))
        });
        assert!(failed.is_err());
        assert_eq!(std::fs::read(&path).expect("read"), b"old");
        assert!(!with_suffix(&path, ".tmp").exists());
        assert_eq!(
            replace(&path, |f| io::Write::write_all(f, b"new").map(|_| 7)).expect("second"),
            7
        );
        assert_eq!(std::fs::read(&path).expect("read"), b"new");
        let _ = std::fs::remove_file(&path);
    }
}
