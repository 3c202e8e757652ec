//! Persistence: an append-only log (WAL) of applied increments and periodic snapshots, so no
//! statistics are lost on restart or host move.
//!
//! Each shard appends its increments, framed and checksummed (CRC32C), to its own buffer while
//! it holds its own lock, numbered by a per-shard sequence. A flusher thread moves the buffers
//! to the current WAL file every `flush_ms` and fsyncs by policy (default: every second, like
//! Redis `appendfsync everysec`). A snapshot first rotates the WAL, then writes every shard
//! (each under its lock only while it is encoded) with the shard's sequence, to a temporary file
//! that is fsynced and renamed into place; older WALs and snapshots are then removed. Replay
//! skips records a snapshot already holds (sequence ≤ the shard's snapshot sequence), so a
//! snapshot never has to stop the writers.
//!
//! Files carry a format version, the hash algorithm and the bucket layout; anything else is
//! refused with a clear message. On startup a torn last record of a WAL is cut off with a
//! warning; a bad checksum anywhere else, or a damaged snapshot, stops startup naming the file
//! and offset, unless `salvage` is set, which moves the bad file aside (`.corrupt`) and starts
//! from what is valid.
//!
//! Rate counters are not persisted: they cover minutes and restart empty.
//!
//! Faults in the directory (a full disk, a failed fsync or rename, a read-only filesystem)
//! lose nothing acknowledged: a WAL write that fails is kept and tried again, a commit fails
//! while its records are not on disk, a failed snapshot removes its temporary file and is tried
//! again until one goes through, and `PersistHealth` says which part is failing meanwhile.
//!
//! The parts: the byte format, with no I/O (`format.rs`); the WAL file, the flusher thread and
//! group commit (`wal.rs`); writing snapshots (`snapshot.rs`); loading them and replaying WALs
//! at startup (`recover.rs`); the file operations that can fail under a running daemon, with
//! the tests' fault seam (`disk.rs`); the directory's write health (`health.rs`). This file
//! holds the options, the errors, `Durable` and the file helpers the parts share.

pub(crate) mod disk;
mod format;
mod health;
mod recover;
mod snapshot;
mod wal;

use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::{Clock, Store, StoreConfig, StoreError};
pub(crate) use format::{begin_record, encode_group, encode_shard_block, finish_record};
pub use health::{Part, PersistHealth};
pub use recover::Recovery;
pub use wal::Committer;
use wal::{Stop, WalWriter};

/// When the WAL is fsynced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FsyncPolicy {
    /// After every flush (`flush_ms`).
    Always,
    /// At most once a second (the default).
    EverySecond,
    /// Never explicitly (the OS decides).
    Never,
}

/// Persistence options.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PersistConfig {
    pub fsync: FsyncPolicy,
    /// How often the buffered WAL records are written to the file.
    pub flush_ms: u64,
    /// How often a snapshot is written (0: only on `snapshot()` and at shutdown).
    pub snapshot_secs: u64,
}

impl Default for PersistConfig {
    fn default() -> Self {
        PersistConfig {
            fsync: FsyncPolicy::EverySecond,
            flush_ms: 100,
            snapshot_secs: 300,
        }
    }
}

/// Why persistent state could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// (The cause is in the message, not a `source`: printed with its chain it would show
    /// twice.)
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path} at byte {offset}: {what} (start with salvage to move it aside and use what is valid)")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        what: String,
    },
    #[error(
        "{path}: {what}; this build cannot use it (move the data directory aside to start empty)"
    )]
    Incompatible { path: PathBuf, what: String },
    #[error(transparent)]
    Config(#[from] StoreError),
    #[error("a failed WAL write or fsync left records off the disk; waiting for a snapshot to hold them")]
    NotSaved,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> PersistError + '_ {
    move |error| PersistError::Io {
        path: path.to_path_buf(),
        error,
    }
}

/// The header of this store's files.
fn store_header(magic: &[u8; 8], store: &Store) -> Vec<u8> {
    format::header(
        magic,
        store.shard_count() as u32,
        store.layout().resolutions(),
    )
}

// ---- files ------------------------------------------------------------------------------------

fn generation_of(path: &Path, prefix: &str, suffix: &str) -> Option<u64> {
    let name = path.file_name()?.to_str()?;
    let hex = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
    u64::from_str_radix(hex, 16).ok()
}

/// (generation, path) of files named `prefix{hex}suffix`, oldest first.
fn list(dir: &Path, prefix: &str, suffix: &str) -> Result<Vec<(u64, PathBuf)>, PersistError> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_err(dir))? {
        let path = entry.map_err(io_err(dir))?.path();
        if let Some(g) = generation_of(&path, prefix, suffix) {
            out.push((g, path));
        }
    }
    out.sort();
    Ok(out)
}

/// Removes the temporary files of snapshots a kill interrupted (a failed one removes its own).
fn remove_temporary_files(dir: &Path) -> Result<(), PersistError> {
    for (_, path) in list(dir, "snapshot-", ".tmp")? {
        tracing::warn!(file = %path.display(), "removing an unfinished snapshot");
        fs::remove_file(&path).map_err(io_err(&path))?;
    }
    Ok(())
}

fn move_aside(path: &Path) -> Result<(), PersistError> {
    let aside = path.with_extension("corrupt");
    tracing::warn!(file = %path.display(), to = %aside.display(), "moving damaged store file aside");
    fs::rename(path, &aside).map_err(io_err(path))
}

fn read_file(path: &Path) -> Result<Vec<u8>, PersistError> {
    let mut data = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut data))
        .map_err(io_err(path))?;
    Ok(data)
}

/// A store whose increments survive restarts: open it from a data directory, use `store()`.
pub struct Durable {
    store: Arc<Store>,
    dir: PathBuf,
    wal: Arc<Mutex<WalWriter>>,
    stop: Arc<Stop>,
    flusher: Option<JoinHandle<()>>,
    committer: Committer,
    health: Arc<PersistHealth>,
}

impl Durable {
    /// Opens (creating) `dir`, loads the newest snapshot, replays the WALs after it, and starts
    /// the flusher. `salvage` moves damaged files aside instead of refusing to start.
    pub fn open(
        dir: &Path,
        config: &StoreConfig,
        persist: &PersistConfig,
        clock: Arc<dyn Clock>,
        salvage: bool,
    ) -> Result<(Durable, Recovery), PersistError> {
        crate::secrets::private_dir(dir).map_err(io_err(dir))?;
        let store = Arc::new(Store::new(config, clock)?);
        let (recovery, next_generation) = recover::recover(dir, &store, salvage)?;
        remove_temporary_files(dir)?;
        let health = Arc::new(PersistHealth::default());
        let wal = WalWriter::create(dir, next_generation, &store, health.clone())?;
        store.enable_log();
        let wal = Arc::new(Mutex::new(wal));
        let stop = Arc::new(Stop::default());
        let flusher = {
            let (store, wal, stop) = (store.clone(), wal.clone(), stop.clone());
            let (thread_dir, persist) = (dir.to_path_buf(), persist.clone());
            std::thread::Builder::new()
                .name("shrike-wal".into())
                .spawn(move || wal::flusher_loop(&store, &wal, &stop, &thread_dir, &persist))
                .map_err(io_err(dir))?
        };
        let committer = Committer::new(store.clone(), wal.clone(), persist.fsync);
        Ok((
            Durable {
                store,
                dir: dir.to_path_buf(),
                wal,
                stop,
                flusher: Some(flusher),
                committer,
                health,
            },
            recovery,
        ))
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Whether the data directory takes the writes (shared with the classifier's journal and
    /// snapshots, read by `/health` and `/metrics`).
    pub fn health(&self) -> Arc<PersistHealth> {
        self.health.clone()
    }

    /// The handle that makes acknowledged increments durable (see `Committer`).
    pub fn committer(&self) -> Committer {
        self.committer.clone()
    }

    /// Writes and fsyncs everything applied so far. When it returns, those increments survive
    /// a crash.
    pub fn sync(&self) -> Result<(), PersistError> {
        let mut wal = self.wal.lock();
        wal.flush(&self.store)?;
        wal.sync()?;
        wal.check_saved()
    }

    /// Rotates the WAL, writes a snapshot, and removes the files it makes redundant.
    pub fn snapshot(&self) -> Result<PathBuf, PersistError> {
        snapshot::write(&self.store, &self.wal, &self.dir)
    }

    /// Flushes, fsyncs and writes a final snapshot (graceful shutdown).
    pub fn close(mut self) -> Result<(), PersistError> {
        self.stop_flusher();
        // The snapshot flushes and fsyncs the WAL first, and holds what a failed write left
        // off it.
        self.snapshot().map(|_| ())
    }

    fn stop_flusher(&mut self) {
        self.stop.stop();
        if let Some(handle) = self.flusher.take() {
            let _ = handle.join();
        }
    }
}

impl Drop for Durable {
    fn drop(&mut self) {
        self.stop_flusher();
        if let Err(e) = self.sync() {
            tracing::error!(error = %e, "final WAL sync failed");
        }
    }
}

#[cfg(test)]
mod tests;
