//! Writing a snapshot: rotate the WAL, encode every shard (each locked only while it is
//! encoded) into a temporary file, fsync and rename it, then delete what it makes redundant.
//! A snapshot that fails removes its temporary file; startup removes any a kill left.

use std::path::{Path, PathBuf};

use parking_lot::Mutex;

use super::format::{snapshot_end, SNAP_MAGIC};
use super::health::Part;
use super::wal::WalWriter;
use super::{disk, io_err, list, store_header, PersistError};
use crate::store::Store;

pub(super) fn snapshot_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("snapshot-{generation:016x}.bin"))
}

/// Rotates the WAL, writes a snapshot, and removes the files it makes redundant.
pub(super) fn write(
    store: &Store,
    wal: &Mutex<WalWriter>,
    dir: &Path,
) -> Result<PathBuf, PersistError> {
    let health = wal.lock().health.clone();
    let result = rotate_and_write(store, wal, dir);
    match &result {
        Ok((_, covered)) => {
            wal.lock().saved_up_to(*covered);
            health.ok(Part::Snapshot);
        }
        Err(e) => health.failed(Part::Snapshot, e),
    }
    result.map(|(path, _)| path)
}

fn rotate_and_write(
    store: &Store,
    wal: &Mutex<WalWriter>,
    dir: &Path,
) -> Result<(PathBuf, u64), PersistError> {
    // Rotate: everything in WAL generations up to `covered` is applied before any shard below
    // is encoded, so the snapshot holds it all.
    let covered = {
        let mut w = wal.lock();
        w.flush(store)?;
        w.sync()?;
        if w.holds_no_record() && w.generation > 1 {
            // A snapshot that failed after its rotation left this WAL empty: it covers the
            // WALs before it as well as a new rotation would, without one more file for each
            // try while the fault lasts. (Records logged meanwhile that reach this WAL too are
            // skipped at replay by their sequence numbers, as for any snapshot.)
            w.generation - 1
        } else {
            let covered = w.generation;
            *w = w.rotate(store)?;
            covered
        }
    };
    let path = snapshot_path(dir, covered);
    let tmp = path.with_extension("tmp");
    if let Err(e) = write_tmp(store, &tmp).and_then(|()| {
        disk::rename(&tmp, &path)?;
        disk::sync_dir(dir)
    }) {
        // The rename is the last step that can leave the temporary file; after it this is a
        // no-op.
        let _ = disk::remove(&tmp);
        return Err(io_err(&path)(e));
    }
    for (generation, old) in list(dir, "wal-", ".log")? {
        if generation <= covered {
            disk::remove(&old).map_err(io_err(&old))?;
        }
    }
    for (generation, old) in list(dir, "snapshot-", ".bin")? {
        if generation < covered {
            disk::remove(&old).map_err(io_err(&old))?;
        }
    }
    Ok((path, covered))
}

/// Encodes every shard into `tmp`, fsynced.
fn write_tmp(store: &Store, tmp: &Path) -> std::io::Result<()> {
    /// Shards' blocks are gathered to about this size before a write.
    const CHUNK: usize = 1 << 20;
    let mut file = disk::create(tmp)?;
    let mut buf = store_header(SNAP_MAGIC, store);
    let mut keys = 0u64;
    for shard in 0..store.shard_count() {
        keys += store.encode_shard(shard, &mut buf);
        if buf.len() >= CHUNK {
            disk::write_all(&mut file, tmp, &buf)?;
            buf.clear();
        }
    }
    buf.extend_from_slice(&snapshot_end(keys));
    disk::write_all(&mut file, tmp, &buf)?;
    disk::sync(&file, tmp, true)
}
