//! Hot reload on change: watches a rule directory and reloads the engine when its files have
//! settled. Drop the `RuleWatcher` to stop watching.
//!
//! Only events that can change what a rule set holds count: a file created, written
//! (close-after-write, modify), removed or renamed. Opening, reading and closing a file
//! unwritten do not: the reload's own reads of the rule files raise exactly those, and counting
//! them made every reload trigger the next. An event starts (or extends) a quiet period of
//! `engine.reload_debounce_ms`; when it passes, the set is read again and a new generation is
//! built only if its bytes differ from the serving one (`Engine::reload_if_changed`), so a
//! `touch`, a file saved unchanged or an editor's swap file cost one read, not a generation.
//! A stream of edits that never pauses still reloads once every `MAX_DELAY_FACTOR` periods.

use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use notify::event::{AccessKind, AccessMode, EventKind, ModifyKind};
use notify::{RecommendedWatcher, RecursiveMode, Watcher};

use super::Engine;

/// A change pending longer than this many debounce periods reloads even if edits go on.
const MAX_DELAY_FACTOR: u32 = 10;

/// A running watcher: the OS watch and the thread that debounces its events.
pub struct RuleWatcher {
    watcher: Option<RecommendedWatcher>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for RuleWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RuleWatcher")
    }
}

impl Drop for RuleWatcher {
    fn drop(&mut self) {
        // Dropping the OS watcher drops the event sender: the thread's receive ends.
        drop(self.watcher.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Whether an event can change the content of the rule set.
pub fn changes_content(kind: &EventKind) -> bool {
    match kind {
        EventKind::Create(_) | EventKind::Remove(_) => true,
        EventKind::Modify(ModifyKind::Metadata(_)) => false,
        EventKind::Modify(_) => true,
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        // A rescan request (queue overflow) or an event the backend could not classify.
        EventKind::Any | EventKind::Other => true,
    }
}

/// Why the rule directory cannot be watched (the cause is the error's source).
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("cannot watch rules")]
    Start(#[source] notify::Error),
    #[error("cannot watch {}", path.display())]
    Path {
        path: std::path::PathBuf,
        #[source]
        source: notify::Error,
    },
    #[error("cannot start the rule watcher")]
    Thread(#[source] std::io::Error),
}

/// Starts watching the engine's rule directory (and its library directory). `None` for the
/// embedded rules, which cannot change.
pub fn watch(engine: &Arc<Engine>) -> Result<Option<RuleWatcher>, WatchError> {
    let paths = engine.location().watch_paths();
    if paths.is_empty() {
        return Ok(None);
    }
    // One pending signal is enough: the thread reads the whole set when the period ends.
    let (tx, rx) = crossbeam_channel::bounded::<()>(1);
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        match res {
            Ok(event) if changes_content(&event.kind) && !all_hidden(&event.paths) => {
                tracing::trace!(kind = ?event.kind, paths = ?event.paths, "rule file event");
                // Full: a signal is already pending. Disconnected: the watcher is stopping.
                let _ = tx.try_send(());
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "rule directory watch error"),
        }
    })
    .map_err(WatchError::Start)?;
    for p in &paths {
        watcher
            .watch(p, RecursiveMode::Recursive)
            .map_err(|source| WatchError::Path {
                path: p.clone(),
                source,
            })?;
    }
    let debounce = Duration::from_millis(engine.config().reload_debounce_ms.max(10));
    let target = Arc::downgrade(engine);
    let thread = std::thread::Builder::new()
        .name("shrike-watch".into())
        .spawn(move || debounce_loop(&rx, debounce, &target))
        .map_err(WatchError::Thread)?;
    Ok(Some(RuleWatcher {
        watcher: Some(watcher),
        thread: Some(thread),
    }))
}

/// Hidden files (editor swap and backup files, `.#locks`) are never read as rules.
fn all_hidden(paths: &[std::path::PathBuf]) -> bool {
    !paths.is_empty()
        && paths.iter().all(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('.'))
        })
}

fn debounce_loop(rx: &Receiver<()>, debounce: Duration, engine: &Weak<Engine>) {
    // Blocks until the first event of a burst; ends when the watcher is dropped.
    while rx.recv().is_ok() {
        let first = Instant::now();
        let mut quiet_until = first + debounce;
        let latest = first + debounce * MAX_DELAY_FACTOR;
        loop {
            let now = Instant::now();
            let until = quiet_until.min(latest);
            if now >= until {
                break;
            }
            match rx.recv_timeout(until - now) {
                Ok(()) => quiet_until = Instant::now() + debounce,
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
        let Some(engine) = engine.upgrade() else {
            return;
        };
        tracing::debug!("rule files changed; checking the set");
        // Errors are logged and kept for health by the engine.
        let _ = engine.reload_if_changed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{CreateKind, DataChange, MetadataKind, RemoveKind, RenameMode};
    use std::path::Path;

    #[test]
    fn only_content_changes_count() {
        let yes = [
            EventKind::Create(CreateKind::File),
            EventKind::Remove(RemoveKind::File),
            EventKind::Modify(ModifyKind::Data(DataChange::Any)),
            EventKind::Modify(ModifyKind::Name(RenameMode::To)),
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
        ];
        let no = [
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
            EventKind::Access(AccessKind::Read),
            EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any)),
        ];
        for k in yes {
            assert!(changes_content(&k), "{k:?}");
        }
        for k in no {
            assert!(!changes_content(&k), "{k:?}");
        }
        assert!(all_hidden(&[Path::new("/r/.a.lua.swp").to_path_buf()]));
        assert!(!all_hidden(&[Path::new("/r/a.lua").to_path_buf()]));
    }
}
