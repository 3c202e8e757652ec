//! Writing a snapshot: rotate the WAL, encode every shard (each locked only while it is
//! encoded) into a temporary file, fsync and rename it, then delete what it makes redundant.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

use super::format::{snapshot_end, SNAP_MAGIC};
use super::wal::WalWriter;
use super::{io_err, list, store_header, sync_dir, PersistError};
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
    // Rotate: everything in WAL generations up to `covered` is applied before any shard below
    // is encoded, so the snapshot holds it all.
    let covered = {
        let mut w = wal.lock();
        w.flush(store)?;
        w.sync()?;
        let covered = w.generation;
        *w = WalWriter::create(&w.dir.clone(), covered + 1, store)?;
        covered
    };
    let path = snapshot_path(dir, covered);
    let tmp = path.with_extension("tmp");
    let file = File::create(&tmp).map_err(io_err(&tmp))?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    out.write_all(&store_header(SNAP_MAGIC, store))
        .map_err(io_err(&tmp))?;
    let mut keys = 0u64;
    let mut block = Vec::new();
    for shard in 0..store.shard_count() {
        block.clear();
        keys += store.encode_shard(shard, &mut block);
        out.write_all(&block).map_err(io_err(&tmp))?;
    }
    out.write_all(&snapshot_end(keys)).map_err(io_err(&tmp))?;
    out.flush().map_err(io_err(&tmp))?;
    out.get_ref().sync_all().map_err(io_err(&tmp))?;
    fs::rename(&tmp, &path).map_err(io_err(&path))?;
    sync_dir(dir)?;
    for (generation, old) in list(dir, "wal-", ".log")? {
        if generation <= covered {
            fs::remove_file(&old).map_err(io_err(&old))?;
        }
    }
    for (generation, old) in list(dir, "snapshot-", ".bin")? {
        if generation < covered {
            fs::remove_file(&old).map_err(io_err(&old))?;
        }
    }
    Ok(path)
}
