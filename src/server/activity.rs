//! Scans by action per minute over the last day, for the web UI's Status chart: a ring of
//! 1440 one-minute slots, each stamped with its minute.
//!
//! Owns: the ring and its reading. Every update is a relaxed atomic add (plus, once a minute,
//! one compare-and-swap that claims and clears the slot), so the scan workers never wait on
//! each other. A scan counted by another worker in the instant between a slot's claim and
//! its clearing may be lost: a figure for a chart, not an account (`/metrics` has exact totals).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::verdict::Action;

/// Minutes kept: one day.
pub const MINUTES: usize = 1440;
const ACTIONS: usize = Action::ALL.len();

/// The per-minute ring.
#[derive(Debug)]
pub struct Activity {
    /// The minute (since the Unix epoch) each slot counts, plus one; 0 for never used.
    stamps: Box<[AtomicU64]>,
    /// `MINUTES × ACTIONS` counts, slot-major, actions indexed like `Action::ALL`.
    counts: Box<[AtomicU64]>,
}

impl Default for Activity {
    fn default() -> Self {
        Activity {
            stamps: (0..MINUTES).map(|_| AtomicU64::new(0)).collect(),
            counts: (0..MINUTES * ACTIONS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

/// The current minute since the Unix epoch.
pub fn now_minute() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 60)
}

impl Activity {
    /// Counts one scan with action index `action` (`Action::ALL` order).
    pub fn count(&self, action: usize) {
        self.count_at(now_minute(), action);
    }

    fn count_at(&self, minute: u64, action: usize) {
        if action >= ACTIONS {
            return;
        }
        let slot = (minute % MINUTES as u64) as usize;
        let stamp = minute + 1;
        let seen = self.stamps[slot].load(Relaxed);
        if seen != stamp
            && seen < stamp
            && self.stamps[slot]
                .compare_exchange(seen, stamp, Relaxed, Relaxed)
                .is_ok()
        {
            for c in &self.counts[slot * ACTIONS..(slot + 1) * ACTIONS] {
                c.store(0, Relaxed);
            }
        }
        if self.stamps[slot].load(Relaxed) == stamp {
            self.counts[slot * ACTIONS + action].fetch_add(1, Relaxed);
        }
    }

    /// The last `n` minutes up to and including `now` (oldest first): per minute, the counts
    /// by action (`Action::ALL` order); minutes without scans are zeros.
    pub fn last(&self, now: u64, n: usize) -> Vec<[u64; ACTIONS]> {
        let n = n.min(MINUTES);
        (0..n as u64)
            .rev()
            .map(|back| {
                let mut out = [0; ACTIONS];
                let Some(minute) = now.checked_sub(back) else {
                    return out;
                };
                let slot = (minute % MINUTES as u64) as usize;
                if self.stamps[slot].load(Relaxed) == minute + 1 {
                    for (a, o) in out.iter_mut().enumerate() {
                        *o = self.counts[slot * ACTIONS + a].load(Relaxed);
                    }
                }
                out
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minutes_count_by_action_and_old_slots_are_cleared() {
        let a = Activity::default();
        let t = 28_000_000;
        a.count_at(t, 0);
        a.count_at(t, 0);
        a.count_at(t, 2);
        a.count_at(t + 1, 1);
        a.count_at(t, ACTIONS); // out of range: ignored
        let last = a.last(t + 1, 3);
        assert_eq!(last.len(), 3);
        assert_eq!(last[0], [0; ACTIONS]);
        assert_eq!(last[1][0], 2);
        assert_eq!(last[1][2], 1);
        assert_eq!(last[2][1], 1);
        // A day later the same slot counts afresh, and the old minute no longer shows.
        a.count_at(t + MINUTES as u64, 3);
        let now = a.last(t + MINUTES as u64, 1);
        assert_eq!(now[0][0], 0);
        assert_eq!(now[0][3], 1);
        // The day ending then starts at minute t + 1, still in the ring.
        assert_eq!(a.last(t + MINUTES as u64, MINUTES)[0][1], 1);
        // A late count for a minute whose slot was taken by a newer one is dropped.
        a.count_at(t, 0);
        assert_eq!(a.last(t + MINUTES as u64, 1)[0][0], 0);
        assert_eq!(a.last(t, 1)[0], [0; ACTIONS]);
    }
}
