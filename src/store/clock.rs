//! The injected clock: real time in the daemon, a hand-driven one in tests and replay.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch, as the store sees them.
pub trait Clock: Send + Sync {
    fn now_secs(&self) -> u64;
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_secs(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    }
}

/// A clock that moves only when told: a month of mail replays in seconds with correct windows.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    pub fn new(now_secs: u64) -> Self {
        ManualClock(AtomicU64::new(now_secs))
    }

    pub fn set(&self, now_secs: u64) {
        self.0.store(now_secs, Ordering::Relaxed);
    }

    pub fn advance(&self, secs: u64) {
        self.0.fetch_add(secs, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now_secs(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}
