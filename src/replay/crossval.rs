//! `shrike replay --cross-validate K`: detection on mail shrike has learned nothing of, the way
//! users start (teach it their existing mail, then receive new mail).
//!
//! The messages of each trained label (spam, ham) are split into K folds of near-equal size by a
//! hash of their names. Fold k learns every other fold of both labels through the path
//! `shrike learn` takes (`ScanWorker::learn`: a complaint or rescue against the message's keys
//! and a classifier step, duplicates refused; then `classifier.learn_passes` passes in all, as
//! `shrike learn` makes), into a fresh store and classifier on a simulated clock, then scores
//! its held-out messages and every message of the labels nobody trains on (hard ham,
//! unlabelled) as the daemon would, without user feedback.
//!
//! Owns: fold assignment, the learn-then-score pass of each fold, folds run side by side.
//! Never touches: what a learn or a scan records (`scan`), the reports' figures (`report`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{pipeline, score, Corpus, Label, Lane, ReplayError, ReplaySettings, SimulatedSweeper};
use crate::classify::passes::Passes;
use crate::classify::Class;
use crate::engine::RuleLocation;
use crate::shingle::hash_bytes;

/// Most folds: beyond this a fold's held-out share is too small to mean anything on a corpus
/// of a few thousand messages, and the passes multiply.
pub const MAX_FOLDS: usize = 20;

/// Per corpus item, the fold that holds it out (learned in every other fold), or `None` for
/// the labels nobody trains on (scored in every fold). Within each trained label the items are
/// ordered by a hash of (seed, name relative to the corpus path) and dealt round-robin, so the
/// folds differ in size by at most one per label and a run repeats wherever the corpus is.
pub fn assign(corpus: &Corpus, k: usize, seed: u64) -> Vec<Option<usize>> {
    let mut held = vec![None; corpus.items.len()];
    for label in [Label::Spam, Label::Ham] {
        let mut of: Vec<(u64, &str, usize)> = corpus
            .items
            .iter()
            .enumerate()
            .filter(|(_, item)| item.label == label)
            .map(|(i, item)| {
                let mut key = seed.to_le_bytes().to_vec();
                key.extend_from_slice(b"fold");
                key.extend_from_slice(item.key.as_bytes());
                (hash_bytes(&key), item.key.as_str(), i)
            })
            .collect();
        of.sort_unstable();
        for (n, &(_, _, i)) in of.iter().enumerate() {
            held[i] = Some(n % k);
        }
    }
    held
}

/// One fold's pass: the corpus items it scored (indices, in arrival order) and what each got.
#[derive(Debug)]
pub struct Fold {
    /// Corpus items it learned, in the order learned.
    pub learned: Vec<usize>,
    pub scored: Vec<usize>,
    pub lane: Lane,
    /// Messages of the other folds it could not read, so did not learn. (`lane.complaints` and
    /// `lane.rescues` count those it learned as spam and as ham, duplicates included.)
    pub unreadable: usize,
}

/// Every fold of a cross-validation (or the one pass of a split by date).
#[derive(Debug)]
pub struct CrossValidation {
    pub k: usize,
    /// A split by date (`run_split`): the share of each label learned, and the time of the last
    /// message learned. `None` for folds.
    pub split: Option<(f64, u64)>,
    /// Per corpus item, the fold that held it out (`assign`).
    pub held: Vec<Option<usize>>,
    pub folds: Vec<Fold>,
    /// Wall time of all the folds (they run side by side).
    pub elapsed: Duration,
}

/// Runs the K folds, as many at a time as the machine has cores.
pub fn run(
    settings: &ReplaySettings,
    rules: RuleLocation,
    corpus: &Corpus,
    k: usize,
    seed: u64,
) -> Result<CrossValidation, ReplayError> {
    let k = k.clamp(2, MAX_FOLDS);
    let held = assign(corpus, k, seed);
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(k);
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<Option<Result<Fold, ReplayError>>>> =
        Mutex::new((0..k).map(|_| None).collect());
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let fold = next.fetch_add(1, Ordering::Relaxed);
                if fold >= k {
                    break;
                }
                let result = run_fold(settings, rules.clone(), corpus, &held, fold);
                done.lock()[fold] = Some(result);
            });
        }
    });
    let mut folds = Vec::with_capacity(k);
    for result in done.into_inner() {
        folds.push(result.unwrap_or(Err(ReplayError::Panicked))?);
    }
    Ok(CrossValidation {
        k,
        split: None,
        held,
        folds,
        elapsed: started.elapsed(),
    })
}

/// The item held out of a split by date (scored); the others are learned.
const LATER: usize = 0;
const EARLIER: usize = 1;

/// Per corpus item of a split by date: the earliest `fraction` of the labelled messages by
/// arrival (their Date header, or their place in the corpus) are learned (`Some(EARLIER)`), the
/// rest scored (`Some(LATER)`); unlabelled messages are only scored. One cut for every label,
/// so nothing learned comes after anything scored.
pub fn assign_by_date(corpus: &Corpus, fraction: f64) -> Vec<Option<usize>> {
    let mut held = vec![Some(LATER); corpus.items.len()];
    let mut of: Vec<(u64, usize)> = corpus
        .items
        .iter()
        .enumerate()
        .filter(|(_, item)| item.label != Label::Unlabeled)
        .map(|(i, item)| (item.arrival, i))
        .collect();
    of.sort_unstable();
    let learned = (of.len() as f64 * fraction.clamp(0.0, 1.0)).floor() as usize;
    for &(_, i) in &of[..learned] {
        held[i] = Some(EARLIER);
    }
    held
}

/// `replay --split-by-date FRACTION`: the earliest `fraction` of the labelled mail is learned, as
/// `shrike learn` would teach an operator's existing mail, at the time of the last of them;
/// then the rest is scored at its arrival times, without feedback. The temporal protocol:
/// the model is judged on mail that came after everything it learned.
pub fn run_split(
    settings: &ReplaySettings,
    rules: RuleLocation,
    corpus: &Corpus,
    fraction: f64,
) -> Result<CrossValidation, ReplayError> {
    let held = assign_by_date(corpus, fraction);
    let learn_at = corpus
        .items
        .iter()
        .zip(&held)
        .filter(|(_, h)| **h == Some(EARLIER))
        .map(|(i, _)| i.arrival)
        .max()
        .or_else(|| corpus.items.first().map(|i| i.arrival))
        .unwrap_or(0);
    let started = Instant::now();
    let fold = run_fold_at(settings, rules, corpus, &held, LATER, learn_at)?;
    Ok(CrossValidation {
        k: 1,
        split: Some((fraction, learn_at)),
        held,
        folds: vec![fold],
        elapsed: started.elapsed(),
    })
}

/// Fold `fold`: a fresh store and classifier learn the other folds at the corpus's first
/// arrival time (a bulk learn takes moments), then the held-out and untrained messages are
/// scanned at their arrival times, in arrival order.
fn run_fold(
    settings: &ReplaySettings,
    rules: RuleLocation,
    corpus: &Corpus,
    held: &[Option<usize>],
    fold: usize,
) -> Result<Fold, ReplayError> {
    let start_time = corpus.items.first().map_or(0, |i| i.arrival);
    run_fold_at(settings, rules, corpus, held, fold, start_time)
}

/// `run_fold` with the learning done at `start_time`.
fn run_fold_at(
    settings: &ReplaySettings,
    rules: RuleLocation,
    corpus: &Corpus,
    held: &[Option<usize>],
    fold: usize,
    start_time: u64,
) -> Result<Fold, ReplayError> {
    let (clock, store, scanner) = pipeline(settings, rules, start_time)?;
    let mut worker = scanner.worker();
    let mut out = Fold {
        learned: Vec::new(),
        scored: Vec::new(),
        lane: Lane::empty(0),
        unreadable: 0,
    };
    let started = Instant::now();
    let passes = Passes::attach(scanner.classifier());
    for (i, (item, &h)) in corpus.items.iter().zip(held).enumerate() {
        if h.is_none() || h == Some(fold) {
            continue;
        }
        let Ok(raw) = item.raw() else {
            out.unreadable += 1;
            continue;
        };
        let class = if item.label == Label::Spam {
            out.lane.complaints += 1;
            Class::Spam
        } else {
            out.lane.rescues += 1;
            Class::Ham
        };
        worker.learn(&raw, crate::scan::learn_counter(class));
        out.learned.push(i);
    }
    passes.finish(scanner.classifier(), settings.scan.classifier.learn_passes);
    let mut sweeper = SimulatedSweeper {
        store: &store,
        cycle_secs: settings.sweep_cycle_secs.max(1),
        last: start_time,
        owed: 0.0,
        removed: 0,
    };
    let mut names = HashMap::new();
    for (i, (item, &h)) in corpus.items.iter().zip(held).enumerate() {
        if h.is_some() && h != Some(fold) {
            continue;
        }
        let at = item.arrival.max(start_time);
        clock.set(at);
        sweeper.advance(at);
        out.scored.push(i);
        out.lane
            .outcomes
            .push(score(&scanner, &mut worker, item, &mut names));
    }
    out.lane.elapsed = started.elapsed();
    out.lane.store_keys = store.stats().keys;
    out.lane.swept_keys = sweeper.removed;
    out.lane.learned = scanner.classifier().learned();
    drop(worker);
    Ok(out)
}

/// Which fold did what with which message: `fold,role,file,label` rows, role `learned` or
/// `scored`, in the order each fold did it.
pub fn write_roles(
    out: impl std::io::Write,
    corpus: &Corpus,
    cv: &CrossValidation,
) -> Result<(), csv::Error> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record(["fold", "role", "file", "label"])?;
    for (k, fold) in cv.folds.iter().enumerate() {
        for (role, of) in [("learned", &fold.learned), ("scored", &fold.scored)] {
            for &i in of {
                let item = &corpus.items[i];
                w.write_record([&k.to_string(), role, &item.name, item.label.as_str()])?;
            }
        }
    }
    w.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::corpus::{Item, Source};

    fn corpus(spam: usize, ham: usize, hard: usize) -> Corpus {
        let mut items = Vec::new();
        for (label, n) in [
            (Label::Spam, spam),
            (Label::Ham, ham),
            (Label::HardHam, hard),
        ] {
            for i in 0..n {
                let name = format!("{}/{i:04}", label.as_str());
                items.push(Item {
                    name: name.clone(),
                    key: name,
                    label,
                    arrival: i as u64,
                    envelope: Default::default(),
                    source: Source::Bytes(Vec::new()),
                });
            }
        }
        Corpus {
            items,
            ..Corpus::default()
        }
    }

    #[test]
    fn a_split_by_date_learns_the_earliest_mail_whatever_its_label() {
        let mut c = corpus(4, 10, 2);
        // Arrival times run backwards through the corpus: the split must follow them.
        let n = c.items.len() as u64;
        for (i, item) in c.items.iter_mut().enumerate() {
            item.arrival = 1_000 + (n - i as u64) * 60;
        }
        let held = assign_by_date(&c, 0.5);
        let times = |h: usize| -> Vec<u64> {
            c.items
                .iter()
                .zip(&held)
                .filter(|(_, x)| **x == Some(h))
                .map(|(i, _)| i.arrival)
                .collect()
        };
        let (learned, scored) = (times(EARLIER), times(LATER));
        assert_eq!(learned.len(), 8);
        assert_eq!(scored.len(), 8);
        assert!(learned.iter().max() < scored.iter().min());
    }

    #[test]
    fn folds_are_balanced_per_label_and_repeat() {
        let c = corpus(103, 500, 7);
        for k in [2, 3, 5] {
            let held = assign(&c, k, 1);
            assert_eq!(held, assign(&c, k, 1), "the same split every run");
            for label in [Label::Spam, Label::Ham] {
                let mut sizes = vec![0usize; k];
                for (item, h) in c.items.iter().zip(&held) {
                    if item.label == label {
                        sizes[h.expect("a trained label has a fold")] += 1;
                    }
                }
                let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                assert!(max - min <= 1, "{label:?} {k}: {sizes:?}");
            }
            assert!(c
                .items
                .iter()
                .zip(&held)
                .all(|(i, h)| (i.label == Label::HardHam) == h.is_none()));
        }
        // Another seed, another split of the same mail.
        assert_ne!(assign(&c, 2, 1), assign(&c, 2, 2));
    }
}
