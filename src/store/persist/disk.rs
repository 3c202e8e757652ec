//! The file operations of the data directory that can fail under a running daemon (a write, an
//! fsync, a rename, a new file), in one place so that unit tests can make them fail.
//!
//! A real filesystem gives a full disk (a small tmpfs, `tests/persistence.rs`) and a read-only
//! one, but not a failed fsync or rename on demand: in test builds `inject` makes the
//! operations on paths under a directory fail as a disk would (a write cut short, then ENOSPC;
//! EIO; EROFS), each test in its own directory. Other builds call the OS directly.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

/// Writes `buf` at the file's position, retrying interrupted and short writes. On an error,
/// the bytes written before it are reported with it: the caller keeps the rest for the next
/// try, so the file stays a prefix of what it was given (never a gap).
pub(crate) fn write(file: &mut File, path: &Path, buf: &[u8]) -> (usize, std::io::Result<()>) {
    let mut done = 0;
    while done < buf.len() {
        let chunk = match faults::write_budget(path, buf.len() - done) {
            Ok(n) => &buf[done..done + n],
            Err(e) => return (done, Err(e)),
        };
        match file.write(chunk) {
            Ok(0) => return (done, Err(std::io::ErrorKind::WriteZero.into())),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return (done, Err(e)),
        }
    }
    (done, Ok(()))
}

/// `write`, all or an error.
pub(crate) fn write_all(file: &mut File, path: &Path, buf: &[u8]) -> std::io::Result<()> {
    write(file, path, buf).1
}

/// fsyncs a file's data (`all`: and its metadata).
pub(crate) fn sync(file: &File, path: &Path, all: bool) -> std::io::Result<()> {
    faults::check(path, faults::Op::Sync)?;
    if all {
        file.sync_all()
    } else {
        file.sync_data()
    }
}

pub(crate) fn rename(from: &Path, to: &Path) -> std::io::Result<()> {
    faults::check(to, faults::Op::Rename)?;
    std::fs::rename(from, to)
}

/// Creates `path` for writing, emptied if it was there (a temporary file).
pub(crate) fn create(path: &Path) -> std::io::Result<File> {
    faults::check(path, faults::Op::Create)?;
    File::create(path)
}

/// Creates `path`, which must not exist, for appending (a new WAL).
pub(crate) fn create_new_append(path: &Path) -> std::io::Result<File> {
    faults::check(path, faults::Op::Create)?;
    OpenOptions::new().append(true).create_new(true).open(path)
}

pub(crate) fn remove(path: &Path) -> std::io::Result<()> {
    faults::check(path, faults::Op::Remove)?;
    std::fs::remove_file(path)
}

/// Cuts a file back to `len` bytes.
pub(crate) fn truncate(file: &File, path: &Path, len: u64) -> std::io::Result<()> {
    faults::check(path, faults::Op::Truncate)?;
    file.set_len(len)
}

/// fsyncs a directory, so the names created, renamed or removed in it are on disk.
pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    faults::check(dir, faults::Op::Sync)?;
    File::open(dir)?.sync_all()
}

/// An operation a fault may fail (in test builds; every one succeeds otherwise).
#[cfg_attr(not(test), allow(dead_code))]
enum Op {
    Sync,
    Rename,
    Create,
    Remove,
    Truncate,
}

#[cfg(not(test))]
mod faults {
    use std::path::Path;

    pub(super) use super::Op;

    #[inline]
    pub(super) fn check(_: &Path, _: Op) -> std::io::Result<()> {
        Ok(())
    }

    #[inline]
    pub(super) fn write_budget(_: &Path, want: usize) -> std::io::Result<usize> {
        Ok(want)
    }
}

#[cfg(test)]
pub(crate) use faults::{inject, Fault};

#[cfg(test)]
mod faults {
    use std::path::{Path, PathBuf};

    pub(super) use super::Op;

    use parking_lot::Mutex;

    /// How the operations under a directory fail.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(crate) enum Fault {
        /// Writes take this many more bytes (the last one cut short), then fail with ENOSPC.
        DiskFull { room: usize },
        /// fsync fails with EIO.
        Fsync,
        /// rename fails with EIO.
        Rename,
        /// Writes, new files, renames, removals and truncations fail with EROFS.
        ReadOnly,
    }

    static FAULTS: Mutex<Vec<(PathBuf, Fault)>> = Mutex::new(Vec::new());

    /// Makes operations on paths under `dir` fail as `fault` says, until the guard is dropped.
    pub(crate) fn inject(dir: &Path, fault: Fault) -> Guard {
        FAULTS.lock().push((dir.to_path_buf(), fault));
        Guard(dir.to_path_buf())
    }

    #[must_use = "the fault lasts while the guard lives"]
    pub(crate) struct Guard(PathBuf);

    impl Drop for Guard {
        fn drop(&mut self) {
            FAULTS.lock().retain(|(dir, _)| *dir != self.0);
        }
    }

    fn os(code: i32) -> std::io::Error {
        std::io::Error::from_raw_os_error(code)
    }

    pub(super) fn check(path: &Path, op: Op) -> std::io::Result<()> {
        for (dir, fault) in FAULTS.lock().iter() {
            if !path.starts_with(dir) {
                continue;
            }
            match (fault, &op) {
                (Fault::Fsync, Op::Sync) | (Fault::Rename, Op::Rename) => {
                    return Err(os(libc::EIO))
                }
                (Fault::ReadOnly, Op::Rename | Op::Create | Op::Remove | Op::Truncate) => {
                    return Err(os(libc::EROFS))
                }
                _ => {}
            }
        }
        Ok(())
    }

    pub(super) fn write_budget(path: &Path, want: usize) -> std::io::Result<usize> {
        for (dir, fault) in FAULTS.lock().iter_mut() {
            if !path.starts_with(&*dir) {
                continue;
            }
            match fault {
                Fault::DiskFull { room: 0 } => return Err(os(libc::ENOSPC)),
                Fault::DiskFull { room } => {
                    let n = want.min(*room);
                    *room -= n;
                    return Ok(n);
                }
                Fault::ReadOnly => return Err(os(libc::EROFS)),
                _ => {}
            }
        }
        Ok(want)
    }
}
