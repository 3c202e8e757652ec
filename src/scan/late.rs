//! Reading reputation by kind, for a store where every key read is a request (Redis: a command,
//! its reply parsed): before the rules, only the keys of the kinds that rules (or the
//! classifier) have asked for are read; a kind asked for the first time is read when asked, all
//! the message's keys of it at once, and read before the rules of every later scan. A message
//! has ~60 keys and the compiled-in rules read ~40 of them (the 32 `body_fuzzy` min-hashes
//! among them); the others (received IPs, URLs and hosts, recipients, mailers...) are written
//! as before, and read as soon as a rule asks for them. The answers are the same as reading
//! every key first: only when the keys are read differs.

use std::cell::{Cell, Ref, RefCell};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::engine::view::LateStats;
use crate::shingle::{Kind, Shingle};
use crate::store::{ReputationStore, StoreKey, WindowCounts, WindowSums};

/// A set of kinds (their numbers are below 128).
fn bit(kind: Kind) -> u128 {
    1u128.checked_shl(u32::from(kind.id())).unwrap_or(0)
}

/// The kinds some scan's rules asked for: grows, shared by the workers.
#[derive(Debug, Default)]
pub struct AskedKinds([AtomicU64; 2]);

impl AskedKinds {
    pub fn new(kinds: &[Kind]) -> AskedKinds {
        let asked = AskedKinds::default();
        asked.insert(kinds.iter().fold(0, |m, &k| m | bit(k)));
        asked
    }

    pub fn get(&self) -> u128 {
        u128::from(self.0[0].load(Relaxed)) | u128::from(self.0[1].load(Relaxed)) << 64
    }

    fn insert(&self, kinds: u128) {
        self.0[0].fetch_or(kinds as u64, Relaxed);
        self.0[1].fetch_or((kinds >> 64) as u64, Relaxed);
    }
}

/// One scan's stats, read by kind.
pub struct Late<'s> {
    store: &'s dyn ReputationStore,
    shingles: &'s [Shingle],
    keys: &'s [StoreKey],
    asked: &'s AskedKinds,
    values: RefCell<Vec<WindowCounts>>,
    /// Kinds read (or given up on).
    read: Cell<u128>,
    /// A read failed: the scan goes on without reputation and reads nothing more.
    unavailable: Cell<bool>,
}

impl<'s> Late<'s> {
    /// Reads the keys of the kinds asked for so far.
    pub fn prefetch(
        store: &'s dyn ReputationStore,
        shingles: &'s [Shingle],
        keys: &'s [StoreKey],
        asked: &'s AskedKinds,
    ) -> Late<'s> {
        let zeros = WindowCounts {
            windows: WindowSums::zeros(store.windows_secs().len()),
        };
        let late = Late {
            store,
            shingles,
            keys,
            asked,
            values: RefCell::new(vec![zeros; keys.len()]),
            read: Cell::new(0),
            unavailable: Cell::new(false),
        };
        late.fill(asked.get());
        late
    }

    /// Reads the keys of `kinds` not read yet (unless a read failed).
    fn fill(&self, kinds: u128) {
        let need = kinds & !self.read.get();
        if need == 0 {
            return;
        }
        let Ok(mut values) = self.values.try_borrow_mut() else {
            // Stats of this scan still lent out: cannot happen (no lender calls back); the
            // kinds stay unread and a later call reads them.
            return;
        };
        self.read.set(self.read.get() | need);
        if self.unavailable.get() {
            return;
        }
        let at: Vec<usize> = (self.shingles.iter().enumerate())
            .filter(|(_, s)| bit(s.kind) & need != 0)
            .map(|(i, _)| i)
            .collect();
        if at.is_empty() {
            return;
        }
        let keys: Vec<StoreKey> = at.iter().map(|&i| self.keys[i]).collect();
        match self.store.lookup_checked(&keys) {
            Ok(read) => {
                for (i, v) in at.into_iter().zip(read) {
                    values[i] = v;
                }
            }
            Err(_) => self.unavailable.set(true),
        }
    }

    /// Whether a read failed (the scan says `STORE_UNAVAILABLE`).
    pub fn unavailable(&self) -> bool {
        self.unavailable.get()
    }

    /// The stats, every kind not read left at zero.
    pub fn into_stats(self) -> Vec<WindowCounts> {
        self.values.into_inner()
    }
}

impl LateStats for Late<'_> {
    fn read(&self, kinds: &[Kind]) -> Ref<'_, [WindowCounts]> {
        let mask = kinds.iter().fold(0, |m, &k| m | bit(k));
        if mask & !self.read.get() != 0 {
            // Later scans read these kinds before their rules.
            self.asked.insert(mask);
            self.fill(mask);
        }
        Ref::map(self.values.borrow(), Vec::as_slice)
    }
}
