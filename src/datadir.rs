//! The data directory's files and lock: what `shrike serve` and the offline `shrike learn` open
//! the same way, so state one of them leaves is the state the other finds.
//!
//! Owns: the directory's exclusive lock and its mode (made 0700; an existing one open to other
//! users is warned about, not changed), opening the durable store (`store::Durable`), the
//! classifier's snapshot file and its learn journal (loading, replaying, attaching). Never
//! touches: listeners, scanning, the store's own file formats.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::classify::{journal::Journal, Classifier, ClassifierConfig, SnapshotError};
use crate::store::{
    Durable, FsyncPolicy, PersistConfig, PersistError, Recovery, StoreConfig, SystemClock,
};

/// The classifier's weights in the data directory.
pub const CLASSIFIER_FILE: &str = "classifier.bin";
/// The learns since the classifier's last snapshot, beside it.
pub const JOURNAL_FILE: &str = "classifier.journal";
/// The file whose exclusive lock marks the directory as in use.
pub const LOCK_FILE: &str = "lock";

/// Why the data directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    /// An I/O step (`what` names it) failed.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{dir} is in use by another shrike (lock held on {lock}); give each daemon its own --data"
    )]
    InUse { dir: String, lock: String },
    #[error("opening the data directory {dir}")]
    OpenData {
        dir: String,
        #[source]
        source: PersistError,
    },
    #[error("loading the classifier (server.salvage moves it aside)")]
    LoadClassifier(#[source] SnapshotError),
}

impl DataDirError {
    /// An I/O error of the step `what`.
    fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DataDirError {
        let what = what.into();
        move |source| DataDirError::Io { what, source }
    }
}

/// An open data directory: locked for this process, its store recovered and logging to the
/// WAL, its classifier loaded with the journal's learns replayed and the journal attached.
/// Dropping it releases the lock; `Durable::close` and `Classifier::save` make it durable.
pub struct DataDir {
    pub durable: Durable,
    pub recovery: Recovery,
    pub classifier: Arc<Classifier>,
    /// Where `classifier` is saved.
    pub classifier_path: PathBuf,
    /// Held for the process's use of the directory (released by the OS, also on `kill -9`).
    pub lock: File,
}

/// Opens the data directory `dir` (`[server] data_dir`, creating it) the way the daemon keeps
/// it: the store as `[store]` and `[persist]` say, the classifier as `[classifier]` says;
/// `salvage` moves damaged files aside instead of refusing.
pub fn open(
    dir: &Path,
    store: &StoreConfig,
    persist: &PersistConfig,
    classifier: &ClassifierConfig,
    salvage: bool,
) -> Result<DataDir, DataDirError> {
    let lock = lock(dir)?;
    let (durable, recovery) = Durable::open(dir, store, persist, Arc::new(SystemClock), salvage)
        .map_err(|source| DataDirError::OpenData {
            dir: dir.display().to_string(),
            source,
        })?;
    tracing::info!(
        dir = %dir.display(),
        snapshot_keys = recovery.snapshot_keys,
        wal_records = recovery.wal_records,
        truncated_tail = recovery.truncated_tail,
        "reputation state loaded"
    );
    let classifier_path = dir.join(CLASSIFIER_FILE);
    // What a kill in the middle of a classifier snapshot leaves (a failed one removes its own).
    let unfinished = classifier_path.with_extension("tmp");
    if unfinished.exists() {
        tracing::warn!(file = %unfinished.display(), "removing an unfinished classifier snapshot");
        std::fs::remove_file(&unfinished).map_err(DataDirError::io(format!(
            "removing {}",
            unfinished.display()
        )))?;
    }
    let classifier = Arc::new(load_classifier(classifier, &classifier_path, salvage)?);
    open_learn_journal(persist.fsync, &classifier, &classifier_path, &durable)?;
    Ok(DataDir {
        durable,
        recovery,
        classifier,
        classifier_path,
        lock,
    })
}

/// Opens the classifier's learn journal, trains again what it holds beyond the snapshot just
/// loaded (the learns a killed process acknowledged but had not saved), and attaches it.
fn open_learn_journal(
    fsync: FsyncPolicy,
    classifier: &Classifier,
    snapshot: &Path,
    durable: &Durable,
) -> Result<(), DataDirError> {
    let path = snapshot.with_file_name(JOURNAL_FILE);
    let crc = Classifier::file_crc(snapshot);
    let sync_each = fsync == FsyncPolicy::Always;
    let (mut journal, learns) = Journal::open(&path, crc, sync_each).map_err(DataDirError::io(
        format!("opening the classifier journal {}", path.display()),
    ))?;
    journal.report_to(durable.health());
    let mut trained = 0;
    for l in &learns {
        trained += usize::from(classifier.train(&l.features, l.class, l.key));
    }
    if !learns.is_empty() {
        tracing::info!(
            learns = learns.len(),
            trained,
            "classifier journal replayed"
        );
    }
    classifier.attach_journal(journal);
    Ok(())
}

/// The classifier saved by the last shutdown, or a fresh one when there is none. A damaged or
/// incompatible file stops startup with the reason, unless `salvage` moves it aside.
fn load_classifier(
    config: &ClassifierConfig,
    path: &Path,
    salvage: bool,
) -> Result<Classifier, DataDirError> {
    if !path.exists() {
        return Ok(Classifier::new(config));
    }
    match Classifier::load(config, path) {
        Ok(model) => {
            let (spam, ham) = model.learned();
            tracing::info!(spam, ham, "classifier loaded");
            Ok(model)
        }
        Err(e) if salvage => {
            let aside = path.with_extension("bin.damaged");
            tracing::error!(error = %e, aside = %aside.display(), "classifier snapshot refused; moved aside, starting afresh");
            std::fs::rename(path, &aside)
                .map_err(DataDirError::io(format!("moving {} aside", path.display())))?;
            Ok(Classifier::new(config))
        }
        Err(e) => Err(DataDirError::LoadClassifier(e)),
    }
}

/// Two processes appending to one WAL would corrupt it: the first holds an exclusive lock on
/// `DIR/lock` for its lifetime (released by the OS, also on `kill -9`).
///
/// The directory holds the decision history (who mailed whom) and the history's hashing key:
/// it is created for the daemon's user alone (0700). One that exists keeps its modes, which
/// may be the operator's (a group allowed to run `shrike history`, a mount point), but if
/// every user of the host may enter it that is said, at every start.
pub fn lock(dir: &Path) -> Result<File, DataDirError> {
    let state = crate::secrets::private_dir(dir).map_err(DataDirError::io(format!(
        "creating the data directory {}",
        dir.display()
    )))?;
    if let Some(mode) = state.open_to_others() {
        tracing::warn!(
            dir = %dir.display(),
            mode = %format!("{mode:04o}"),
            "the data directory is open to every user of this host, and holds the decision \
             history; chmod o-rwx it (0700, or 0750 for a group allowed to read the history)"
        );
    }
    let path = dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(DataDirError::io(format!("opening {}", path.display())))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(DataDirError::InUse {
            dir: dir.display().to_string(),
            lock: path.display().to_string(),
        }),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(DataDirError::io(format!("locking {}", path.display()))(e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `dir` opened with the default options.
    fn open_default(dir: &Path) -> Result<DataDir, DataDirError> {
        open(
            dir,
            &StoreConfig::default(),
            &PersistConfig::default(),
            &ClassifierConfig::default(),
            false,
        )
    }

    #[test]
    fn a_data_directory_serves_one_process() {
        let dir = tempfile::tempdir().unwrap();
        let first = lock(dir.path()).unwrap();
        let err = lock(dir.path()).unwrap_err().to_string();
        assert!(err.contains("in use by another shrike"), "{err}");
        drop(first);
        assert!(lock(dir.path()).is_ok());
    }

    #[test]
    fn opening_removes_the_temporary_files_of_interrupted_snapshots() {
        let dir = tempfile::tempdir().unwrap();
        let data = &dir.path().join("data");
        drop(open_default(data).unwrap());
        for tmp in ["classifier.tmp", "snapshot-0000000000000005.tmp"] {
            std::fs::write(data.join(tmp), b"half").unwrap();
        }
        let _open = open_default(data).unwrap();
        for tmp in ["classifier.tmp", "snapshot-0000000000000005.tmp"] {
            assert!(!data.join(tmp).exists(), "{tmp}");
        }
        assert!(data.join(JOURNAL_FILE).exists(), "nothing else removed");
    }

    #[test]
    fn open_twice_is_refused_while_the_first_is_open() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let first = open_default(&data).unwrap();
        let err = open_default(&data).err().expect("second open refused");
        assert!(matches!(err, DataDirError::InUse { .. }), "{err}");
        drop(first);
        let again = open_default(&data).unwrap();
        assert!(again.classifier_path.ends_with(CLASSIFIER_FILE));
    }
}
