//! The WAL's writing side: the current WAL file (`WalWriter`), the flusher thread that moves
//! the store's buffered records into it and fsyncs by policy, and group commit (`Committer`).

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::format::WAL_MAGIC;
use super::{io_err, snapshot, store_header, sync_dir, FsyncPolicy, PersistConfig, PersistError};
use crate::store::Store;

pub(super) fn wal_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("wal-{generation:016x}.log"))
}

/// The WAL file being appended to.
pub(super) struct WalWriter {
    pub(super) dir: PathBuf,
    pub(super) generation: u64,
    path: PathBuf,
    file: BufWriter<File>,
    last_sync: Instant,
    dirty: bool,
}

impl WalWriter {
    pub(super) fn create(
        dir: &Path,
        generation: u64,
        store: &Store,
    ) -> Result<WalWriter, PersistError> {
        let path = wal_path(dir, generation);
        let file = OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(&path)
            .map_err(io_err(&path))?;
        let mut file = BufWriter::with_capacity(1 << 20, file);
        file.write_all(&store_header(WAL_MAGIC, store))
            .map_err(io_err(&path))?;
        file.flush().map_err(io_err(&path))?;
        file.get_ref().sync_all().map_err(io_err(&path))?;
        sync_dir(dir)?;
        Ok(WalWriter {
            dir: dir.to_path_buf(),
            generation,
            path,
            file,
            last_sync: Instant::now(),
            dirty: false,
        })
    }

    /// Moves the store's pending WAL records into the file (not yet fsynced).
    pub(super) fn flush(&mut self, store: &Store) -> Result<(), PersistError> {
        let mut result = Ok(());
        store.drain_logs(|bytes| {
            if result.is_ok() && !bytes.is_empty() {
                result = self.file.write_all(bytes);
                self.dirty = true;
            }
        });
        result.map_err(io_err(&self.path))?;
        self.file.flush().map_err(io_err(&self.path))
    }

    pub(super) fn sync(&mut self) -> Result<(), PersistError> {
        if self.dirty {
            self.file
                .get_ref()
                .sync_data()
                .map_err(io_err(&self.path))?;
            self.dirty = false;
        }
        self.last_sync = Instant::now();
        Ok(())
    }
}

/// Makes increments durable before they are acknowledged (a user's learn): `commit` returns
/// once everything recorded before the call is written to the WAL file (to the OS) and, under
/// `fsync = "always"`, fsynced; under `every_second` the flusher fsyncs within a second, as
/// Redis's `appendfsync everysec` does. So a killed process loses nothing acknowledged, and a
/// crashed OS at most the last second.
///
/// Group commit: callers that arrive while a write is under way wait for the WAL lock, and the
/// first to get it writes for all of them (every caller takes a ticket; one write covers every
/// ticket taken before it started), so a burst of learns costs one write, not one per learn.
#[derive(Clone)]
pub struct Committer {
    store: Arc<Store>,
    wal: Arc<Mutex<WalWriter>>,
    fsync: FsyncPolicy,
    tickets: Arc<Tickets>,
}

#[derive(Default)]
struct Tickets {
    /// Tickets taken (each by a caller whose increments are already in the WAL buffer).
    taken: AtomicU64,
    /// Every ticket up to this one is written.
    written: AtomicU64,
    /// WAL writes done by `commit` (so a test or metric can see the grouping).
    writes: AtomicU64,
}

impl Committer {
    pub(super) fn new(store: Arc<Store>, wal: Arc<Mutex<WalWriter>>, fsync: FsyncPolicy) -> Self {
        Committer {
            store,
            wal,
            fsync,
            tickets: Arc::default(),
        }
    }

    /// Writes (and fsyncs by policy) everything recorded before this call.
    pub fn commit(&self) -> Result<(), PersistError> {
        let ticket = self.tickets.taken.fetch_add(1, Ordering::SeqCst) + 1;
        let mut w = self.wal.lock();
        if self.tickets.written.load(Ordering::SeqCst) >= ticket {
            return Ok(());
        }
        // Every ticket up to `upto` was taken after its increments were logged, so this write
        // carries them all.
        let upto = self.tickets.taken.load(Ordering::SeqCst);
        w.flush(&self.store)?;
        if self.fsync == FsyncPolicy::Always {
            w.sync()?;
        }
        self.tickets.writes.fetch_add(1, Ordering::Relaxed);
        self.tickets.written.store(upto, Ordering::SeqCst);
        Ok(())
    }

    /// (commits asked for, WAL writes they took).
    pub fn counts(&self) -> (u64, u64) {
        (
            self.tickets.taken.load(Ordering::Relaxed),
            self.tickets.writes.load(Ordering::Relaxed),
        )
    }
}

/// Writes the store's WAL buffer to the file every `flush_ms`, fsyncs by policy, and snapshots
/// every `snapshot_secs`, until `stop`.
pub(super) fn flusher_loop(
    store: &Store,
    wal: &Mutex<WalWriter>,
    stop: &AtomicBool,
    dir: &Path,
    persist: &PersistConfig,
) {
    let mut last_snapshot = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(persist.flush_ms.max(1)));
        let result = {
            let mut w = wal.lock();
            w.flush(store).and_then(|()| match persist.fsync {
                FsyncPolicy::Always => w.sync(),
                FsyncPolicy::EverySecond if w.last_sync.elapsed() >= Duration::from_secs(1) => {
                    w.sync()
                }
                _ => Ok(()),
            })
        };
        if let Err(e) = result {
            tracing::error!(error = %e, "WAL write failed; will retry");
        }
        if persist.snapshot_secs > 0
            && last_snapshot.elapsed() >= Duration::from_secs(persist.snapshot_secs)
        {
            last_snapshot = Instant::now();
            if let Err(e) = snapshot::write(store, wal, dir) {
                tracing::error!(error = %e, "snapshot failed");
            }
        }
    }
}
