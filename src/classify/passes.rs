//! Further passes of a bulk learn (`shrike learn` offline, `shrike replay --cross-validate`)
//! over the messages it learned.
//!
//! One online pass underfits a small learned set: the messages learned first were learned by a
//! model that knew nothing, and nothing corrects it afterwards. A bulk learn has the whole set
//! at hand, so it trains the classifier again on the features each message trained on the first
//! time (`Classifier::retrain`: no count, no memory of the message, no journal record).
//!
//! Owns: which learned messages are kept for the passes (a uniform sample by a hash of their
//! features, within a memory budget), their order, the passes. Never touches: what a learn
//! records in the store, the first pass (`Classifier::train`).

use std::collections::BinaryHeap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::{Class, Classifier, Features};
use crate::shingle::hash_bytes;

/// Memory the kept features may take: about 20,000 messages of typical size. A larger learn
/// takes its further passes over a uniform sample of this size.
pub const BUDGET_BYTES: usize = 256 << 20;

/// A learned message kept for the further passes.
#[derive(Debug, PartialEq, Eq)]
struct Kept {
    /// The pass order and the sampling rank: a hash of the features.
    order: u64,
    spam: bool,
    hashes: Box<[u64]>,
}

impl Ord for Kept {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.order.cmp(&other.order)
    }
}

impl PartialOrd for Kept {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// Largest order on top, so the sample drops it first when over budget.
    kept: BinaryHeap<Kept>,
    bytes: usize,
    dropped: usize,
}

/// What the further passes did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassReport {
    /// Passes after the first.
    pub passes: u8,
    /// Messages each further pass trained on.
    pub messages: usize,
    /// Learned messages left out of them (over the memory budget).
    pub left_out: usize,
}

/// The learned messages' features, collected while a bulk learn's first pass runs (attach it
/// with `Classifier::collect`), then replayed by `run`.
#[derive(Debug)]
pub struct Passes {
    budget: usize,
    inner: Mutex<Inner>,
}

impl Passes {
    /// A collector keeping at most `budget` bytes of features.
    pub fn new(budget: usize) -> Passes {
        Passes {
            budget,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Attaches a collector of `BUDGET_BYTES` to `classifier`: from now on every message it
    /// trains on is kept for the further passes (`finish`).
    pub fn attach(classifier: &Classifier) -> Arc<Passes> {
        let passes = Arc::new(Passes::new(BUDGET_BYTES));
        classifier.collect(Some(passes.clone()));
        passes
    }

    /// Detaches the collector from `classifier` and trains it on what was kept until it has
    /// made `passes` passes in all.
    pub fn finish(self: Arc<Self>, classifier: &Classifier, passes: u8) -> PassReport {
        classifier.collect(None);
        Arc::into_inner(self).map_or_else(PassReport::default, |p| p.run(classifier, passes))
    }

    /// Keeps a message the classifier just trained on. The sample is the messages of lowest
    /// feature hash that fit the budget, so it does not depend on the order the learn's
    /// threads trained them in, nor on the order of the paths.
    pub fn keep(&self, class: Class, features: &Features) {
        let hashes: Box<[u64]> = features.hashes().into();
        let mut bytes = Vec::with_capacity(hashes.len() * 8);
        for h in hashes.iter() {
            bytes.extend_from_slice(&h.to_le_bytes());
        }
        let kept = Kept {
            order: hash_bytes(&bytes),
            spam: class == Class::Spam,
            hashes,
        };
        let size = kept.hashes.len() * 8 + std::mem::size_of::<Kept>();
        let mut inner = self.inner.lock();
        inner.kept.push(kept);
        inner.bytes += size;
        while inner.bytes > self.budget {
            let Some(out) = inner.kept.pop() else { break };
            inner.bytes -= out.hashes.len() * 8 + std::mem::size_of::<Kept>();
            inner.dropped += 1;
        }
    }

    /// Trains `classifier` `passes - 1` more times on the kept messages, in the order of their
    /// hashes (a shuffle of the learn's order, the same every run).
    pub fn run(self, classifier: &Classifier, passes: u8) -> PassReport {
        let inner = self.inner.into_inner();
        let kept = inner.kept.into_sorted_vec();
        let further = passes.saturating_sub(1);
        for _ in 0..further {
            for k in &kept {
                let class = if k.spam { Class::Spam } else { Class::Ham };
                classifier.retrain(&k.hashes, class);
            }
        }
        PassReport {
            passes: further,
            messages: kept.len(),
            left_out: inner.dropped,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::{features::Family, ClassifierConfig};

    fn message(words: &[&str]) -> Features {
        let mut f = Features::default();
        for w in words {
            f.add(Family::Word, w.as_bytes());
        }
        f.finish();
        f
    }

    #[test]
    fn the_sample_keeps_the_lowest_hashes_within_the_budget_whatever_the_order() {
        let msgs: Vec<Features> = (0..50)
            .map(|i| message(&[&format!("w{i}"), &format!("x{i}"), "common"]))
            .collect();
        let one = std::mem::size_of::<Kept>() + msgs[0].hashes().len() * 8;
        let run = |order: &mut dyn Iterator<Item = &Features>| {
            let p = Passes::new(one * 10);
            for f in order {
                p.keep(Class::Spam, f);
            }
            let inner = p.inner.into_inner();
            assert_eq!(inner.dropped, 40);
            assert!(inner.bytes <= one * 10);
            let mut orders: Vec<u64> = inner.kept.iter().map(|k| k.order).collect();
            orders.sort_unstable();
            orders
        };
        let forward = run(&mut msgs.iter());
        let backward = run(&mut msgs.iter().rev());
        assert_eq!(forward.len(), 10);
        assert_eq!(forward, backward, "the same sample in any order");
    }

    #[test]
    fn a_further_pass_fits_what_one_pass_left_wrong_without_counting_it() {
        let config = ClassifierConfig {
            table_bits: 16,
            min_learned: 1,
            ..ClassifierConfig::default()
        };
        // Spam learned first, then ham sharing most of its words: one online pass ends
        // leaning to whatever came last.
        let spam: Vec<Features> = (0..20)
            .map(|i| message(&["offer", "click", "now", &format!("s{i}")]))
            .collect();
        let ham: Vec<Features> = (0..20)
            .map(|i| message(&["offer", "click", "meeting", &format!("h{i}")]))
            .collect();
        let once = Classifier::new(&config);
        let twice = Classifier::new(&config);
        let passes = Passes::new(BUDGET_BYTES);
        for (model, collect) in [(&once, false), (&twice, true)] {
            for (set, class) in [(&spam, Class::Spam), (&ham, Class::Ham)] {
                for f in set.iter() {
                    assert!(model.train(f, class, None));
                    if collect {
                        passes.keep(class, f);
                    }
                }
            }
        }
        let report = passes.run(&twice, 3);
        assert_eq!(
            report,
            PassReport {
                passes: 2,
                messages: 40,
                left_out: 0
            }
        );
        let loss = |m: &Classifier| -> f64 {
            spam.iter()
                .map(|f| -m.probability(f).ln())
                .chain(ham.iter().map(|f| -(1.0 - m.probability(f)).ln()))
                .sum()
        };
        assert!(
            loss(&twice) < loss(&once) * 0.8,
            "{} against {}",
            loss(&twice),
            loss(&once)
        );
        assert_eq!(twice.learned(), (20, 20), "a further pass counts nothing");
        // One pass: nothing further.
        assert_eq!(Passes::new(BUDGET_BYTES).run(&once, 1).passes, 0);
    }
}
