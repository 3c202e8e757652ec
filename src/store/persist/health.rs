//! Whether the data directory is taking the daemon's writes: each part that writes there
//! (the WAL, the store's snapshots, the classifier's journal and snapshots) reports every
//! failure and the success after it. `/health` says `degraded` while any part's last write
//! failed, `/metrics` counts the failures, and the log says so at most once per
//! `LOG_EVERY` for each part (a full disk fails every flush, ten times a second), then once when
//! the part works again.

use std::fmt::Display;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// The most a failing part logs: one line per this interval, counting the failures between.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// What writes to the data directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Wal,
    Snapshot,
    Journal,
    ClassifierSnapshot,
}

impl Part {
    const ALL: [Part; 4] = [
        Part::Wal,
        Part::Snapshot,
        Part::Journal,
        Part::ClassifierSnapshot,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Part::Wal => "WAL",
            Part::Snapshot => "store snapshot",
            Part::Journal => "classifier journal",
            Part::ClassifierSnapshot => "classifier snapshot",
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

#[derive(Default)]
struct PartState {
    /// The last failure while the part is failing.
    error: Option<String>,
    last_log: Option<Instant>,
    held_back: u64,
}

/// The data directory's write health, shared by its writers, `/health` and `/metrics`.
#[derive(Default)]
pub struct PersistHealth {
    errors: AtomicU64,
    /// One bit a failing part: `ok` costs an atomic load when nothing failed.
    failing: AtomicU8,
    parts: [Mutex<PartState>; 4],
}

impl PersistHealth {
    /// A write of `part` failed.
    pub fn failed(&self, part: Part, error: &dyn Display) {
        self.errors.fetch_add(1, Relaxed);
        let mut state = self.parts[part as usize].lock();
        self.failing.fetch_or(part.bit(), Relaxed);
        state.error = Some(error.to_string());
        let now = Instant::now();
        if state
            .last_log
            .is_none_or(|t| now.duration_since(t) >= LOG_EVERY)
        {
            tracing::error!(
                part = part.name(),
                error = %error,
                failures_not_logged = state.held_back,
                "data directory write failed (nothing is acknowledged until it is written)"
            );
            state.last_log = Some(now);
            state.held_back = 0;
        } else {
            state.held_back += 1;
        }
    }

    /// A write of `part` succeeded (after failures: the part works again).
    pub fn ok(&self, part: Part) {
        if self.failing.load(Relaxed) & part.bit() == 0 {
            return;
        }
        let mut state = self.parts[part as usize].lock();
        self.failing.fetch_and(!part.bit(), Relaxed);
        if state.error.take().is_some() {
            tracing::info!(
                part = part.name(),
                failures_not_logged = state.held_back,
                "data directory writes work again"
            );
        }
        *state = PartState::default();
    }

    /// `Some("<part>: <error>; …")` while any part's last write failed.
    pub fn degraded(&self) -> Option<String> {
        if self.failing.load(Relaxed) == 0 {
            return None;
        }
        let failing: Vec<String> = Part::ALL
            .iter()
            .filter_map(|p| {
                let error = self.parts[*p as usize].lock().error.clone()?;
                Some(format!("{}: {error}", p.name()))
            })
            .collect();
        (!failing.is_empty()).then(|| failing.join("; "))
    }

    /// Failed writes since start.
    pub fn errors(&self) -> u64 {
        self.errors.load(Relaxed)
    }
}

impl std::fmt::Debug for PersistHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistHealth")
            .field("errors", &self.errors())
            .field("degraded", &self.degraded())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn degraded_while_a_part_fails_and_ok_once_it_writes_again() {
        let h = PersistHealth::default();
        assert_eq!(h.degraded(), None);
        h.ok(Part::Wal);
        h.failed(Part::Wal, &"No space left on device");
        h.failed(Part::Snapshot, &"EIO");
        assert_eq!(
            h.degraded().as_deref(),
            Some("WAL: No space left on device; store snapshot: EIO")
        );
        h.ok(Part::Wal);
        assert_eq!(h.degraded().as_deref(), Some("store snapshot: EIO"));
        h.ok(Part::Journal);
        h.ok(Part::Snapshot);
        assert_eq!(h.degraded(), None);
        assert_eq!(h.errors(), 2, "failures stay counted");
    }
}
