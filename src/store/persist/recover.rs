//! Recovery at startup: load the newest snapshot that is whole, replay the WALs after it
//! (skipping records the snapshot already holds), cut a torn WAL tail, and refuse or move aside
//! (`salvage`) anything else that is damaged.

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};

use super::format::{
    check_header, decode_record, decode_shard_block, header, is_snapshot_end, next_frame,
    HeaderError, PayloadError, SNAP_MAGIC, WAL_MAGIC,
};
use super::{io_err, list, move_aside, read_file, PersistError};
use crate::store::Store;

/// What `open` found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    pub snapshot: Option<PathBuf>,
    pub snapshot_keys: u64,
    pub wal_files: usize,
    /// WAL records read (one a message's change; in version 1 files, one a shard's change).
    pub wal_records: u64,
    /// Shards' changes in them that the snapshot already held.
    pub skipped_records: u64,
    pub truncated_tail: bool,
    pub moved_aside: Vec<PathBuf>,
}

/// Loads the newest whole snapshot of `dir` into `store` and replays the WALs after it.
/// Returns what it found and did, and the generation the next WAL takes.
pub(super) fn recover(
    dir: &Path,
    store: &Store,
    salvage: bool,
) -> Result<(Recovery, u64), PersistError> {
    let mut recovery = Recovery::default();
    let snapshots = list(dir, "snapshot-", ".bin")?;
    let mut base = 0;
    let mut snapshot_seqs = vec![0u64; store.shard_count()];
    for (generation, path) in snapshots.iter().rev() {
        match load_snapshot(path, store, &mut snapshot_seqs) {
            Ok(keys) => {
                base = *generation;
                recovery.snapshot = Some(path.clone());
                recovery.snapshot_keys = keys;
                break;
            }
            Err(e @ PersistError::Corrupt { .. }) if salvage => {
                tracing::warn!(error = %e, "damaged snapshot");
                store.clear();
                snapshot_seqs.iter_mut().for_each(|s| *s = 0);
                move_aside(path)?;
                recovery.moved_aside.push(path.clone());
            }
            Err(e) => return Err(e),
        }
    }
    let wals = list(dir, "wal-", ".log")?;
    let mut next_generation = base + 1;
    for (generation, path) in &wals {
        next_generation = next_generation.max(generation + 1);
        if *generation <= base {
            continue;
        }
        recovery.wal_files += 1;
        replay_wal(path, store, &snapshot_seqs, salvage, &mut recovery)?;
    }
    Ok((recovery, next_generation))
}

/// Checks a file's header against `store`, as a `PersistError` naming the file.
fn check_store_header(
    path: &Path,
    data: &[u8],
    magic: &[u8; 8],
    store: &Store,
) -> Result<(usize, u16), PersistError> {
    check_header(
        data,
        magic,
        store.shard_count() as u32,
        store.layout().resolutions(),
    )
    .map_err(|e| match e {
        HeaderError::Magic => PersistError::Corrupt {
            path: path.to_path_buf(),
            offset: 0,
            what: e.to_string(),
        },
        _ => PersistError::Incompatible {
            path: path.to_path_buf(),
            what: e.to_string(),
        },
    })
}

fn load_snapshot(path: &Path, store: &Store, seqs: &mut [u64]) -> Result<u64, PersistError> {
    let data = read_file(path)?;
    let corrupt = |offset: usize, what: &dyn std::fmt::Display| PersistError::Corrupt {
        path: path.to_path_buf(),
        offset: offset as u64,
        what: what.to_string(),
    };
    let (mut at, _) = check_store_header(path, &data, SNAP_MAGIC, store)?;
    let mut keys = 0u64;
    for _ in 0..store.shard_count() {
        let (payload, next) = match next_frame(&data, at) {
            Some(Ok(frame)) => frame,
            Some(Err(e)) => return Err(corrupt(at, &e)),
            None => return Err(corrupt(at, &"snapshot ends early")),
        };
        let block = match decode_shard_block(payload) {
            Ok(block) if (block.shard as usize) < seqs.len() => block,
            _ => return Err(corrupt(at, &PayloadError::ShardBlock)),
        };
        let shard = block.shard as usize;
        seqs[shard] = block.seq;
        keys += block.entries.len() as u64;
        store.load_shard(shard, block.seq, block.entries);
        at = next;
    }
    if !is_snapshot_end(&data[at..], keys) {
        return Err(corrupt(
            at,
            &"missing or bad end marker (incomplete snapshot)",
        ));
    }
    Ok(keys)
}

fn replay_wal(
    path: &Path,
    store: &Store,
    snapshot_seqs: &[u64],
    salvage: bool,
    recovery: &mut Recovery,
) -> Result<(), PersistError> {
    let data = read_file(path)?;
    let (header_len, version) = match check_store_header(path, &data, WAL_MAGIC, store) {
        Ok(found) => found,
        // A WAL cut off inside its own header holds no records.
        Err(PersistError::Corrupt { .. }) | Err(PersistError::Incompatible { .. })
            if data.len()
                < header(
                    WAL_MAGIC,
                    store.shard_count() as u32,
                    store.layout().resolutions(),
                )
                .len() =>
        {
            tracing::warn!(file = %path.display(), "empty WAL with a torn header; removing it");
            fs::remove_file(path).map_err(io_err(path))?;
            recovery.truncated_tail = true;
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let mut at = header_len;
    while let Some(frame) = next_frame(&data, at) {
        let (damage, truncated) = match frame {
            Ok((payload, next)) => match decode_record(version, payload) {
                Ok(groups)
                    if groups
                        .iter()
                        .all(|g| (g.shard as usize) < snapshot_seqs.len()) =>
                {
                    // One record a message (version 2) or a shard's change (version 1); a
                    // group already in the snapshot is skipped, shard by shard.
                    recovery.wal_records += 1;
                    for group in groups {
                        if group.seq > snapshot_seqs[group.shard as usize] {
                            store.replay(
                                group.shard as usize,
                                group.seq,
                                group.time,
                                &group.increments,
                            );
                        } else {
                            recovery.skipped_records += 1;
                        }
                    }
                    at = next;
                    continue;
                }
                _ => (PayloadError::Record.to_string(), false),
            },
            Err(e) => (e.to_string(), e.is_truncation()),
        };
        // Damage at the very end is a torn write: cut it off. Anywhere else it is corruption.
        let torn_tail = truncated || {
            let len = data
                .get(at..at + 4)
                .map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap_or_default()));
            at + 8 + len as usize >= data.len()
        };
        if torn_tail {
            tracing::warn!(file = %path.display(), offset = at, "torn WAL tail cut off");
            let file = OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(io_err(path))?;
            file.set_len(at as u64).map_err(io_err(path))?;
            file.sync_all().map_err(io_err(path))?;
            recovery.truncated_tail = true;
            return Ok(());
        }
        if salvage {
            move_aside(path)?;
            recovery.moved_aside.push(path.to_path_buf());
            return Ok(());
        }
        return Err(PersistError::Corrupt {
            path: path.to_path_buf(),
            offset: at as u64,
            what: damage,
        });
    }
    Ok(())
}
