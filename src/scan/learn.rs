//! Learning from a message: a user's complaint or rescue counted against its shingles, the
//! classifier trained on it (`/learnspam`, `/learnham`, `shrike learn`, replay's simulated
//! users and labels), and autolearn from confident verdicts.

use crate::classify::{Class, Features};
use crate::message::{self, Envelope};
use crate::shingle::{self, Kind};
use crate::store::{Counter, Increment};

use super::{counted, Analysis, ScanWorker, Scanned, Scanner};

impl Scanner {
    /// A user's complaint (`Counter::Complaint`) or rescue (`Counter::Rescue`) against every
    /// shingle of a message: each call counts once, also for the same message again
    /// (`ScanWorker::learn` does not call it for a message the classifier already learned).
    /// Returns the number of keys counted.
    pub fn learn(&self, analysis: &Analysis<'_>, counter: Counter) -> usize {
        self.try_learn(analysis, counter).unwrap_or(0)
    }

    /// `learn`, confirmed by the store before it returns (a shared store may be unreachable).
    pub fn try_learn(
        &self,
        analysis: &Analysis<'_>,
        counter: Counter,
    ) -> Result<usize, crate::store::Unavailable> {
        let increments: Vec<Increment> = counted(&analysis.shingles)
            .map(|s| Increment::one(self.key(s), counter))
            .collect();
        self.store.record_confirmed(&increments)?;
        Ok(increments.len())
    }

    /// Trains the classifier on a scanned message (`features`). A message (by Message-ID, else
    /// exact body) trains once per class while remembered.
    pub fn train(&self, scanned: &Scanned<'_>, class: Class) -> bool {
        self.classifier
            .train(&self.features(scanned), class, training_key(scanned))
    }

    /// `train` for a user's learn: recorded in the classifier's journal (when the daemon keeps
    /// one) before it returns. An error means the training may not survive a restart.
    pub fn train_learned(&self, scanned: &Scanned<'_>, class: Class) -> std::io::Result<bool> {
        self.classifier
            .learn(&self.features(scanned), class, training_key(scanned))
    }

    /// The classifier's features of a scanned message: those a rule weighed, or (when no rule
    /// asked, or the model had no opinion yet) the message's features with the applied symbols it
    /// weighs (`learns_symbol`: the applied score's sign, the nominal one's when a rule asks).
    pub fn features<'s>(&self, scanned: &'s Scanned<'_>) -> std::borrow::Cow<'s, Features> {
        match &scanned.features {
            Some(f) => std::borrow::Cow::Borrowed(f),
            None => {
                let envelope = Envelope::default();
                std::borrow::Cow::Owned(
                    self.message_data(
                        &scanned.analysis,
                        &scanned.stats,
                        None,
                        &envelope,
                        true,
                        None,
                    )
                    .classifier_features(
                        scanned
                            .verdict
                            .symbols
                            .iter()
                            .filter(|(_, h)| crate::classify::learns_symbol(h.score))
                            .map(|(name, _)| name.as_str()),
                    ),
                )
            }
        }
    }
}

/// What identifies a message to the classifier: its Message-ID, else its exact body.
fn training_key(scanned: &Scanned<'_>) -> Option<u64> {
    let a = &scanned.analysis;
    match &a.entities.message_id {
        Some(id) => Some(shingle::hash_bytes(id.as_bytes())),
        None => a
            .shingles
            .iter()
            .find(|s| s.kind == Kind::BodyExact)
            .map(|s| s.hash),
    }
}

/// What a learn recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Learned {
    /// Store keys counted.
    pub keys: usize,
    pub message_id: Option<String>,
    /// Whether the classifier trained on it (not when it already had this message, nor when
    /// it is off).
    pub trained: bool,
    /// The classifier had already learned this message as this class (Message-ID, else body):
    /// it was not trained again and the store got no complaint or rescue for it.
    pub duplicate: bool,
    /// The classifier's journal could not record the training (the learn is not durable).
    pub journal_error: Option<String>,
    /// A shared store did not take the counts (nothing was learned).
    pub store_error: Option<String>,
}

/// A learn's counter, what `/learnspam` and `/learnham` record: a complaint for spam, a rescue
/// for ham (`ScanWorker::learn` maps it back to the class). `shrike learn` and replay's
/// cross-validation learn through it.
pub fn learn_counter(class: Class) -> Counter {
    match class {
        Class::Spam => Counter::Complaint,
        Class::Ham => Counter::Rescue,
    }
}

impl ScanWorker {
    /// `/learnspam` and `/learnham`, and the simulated users of a replay: scans a raw message
    /// (recording nothing of the scan), records one complaint or rescue against each of its
    /// counted shingles, and trains the classifier on it. A message the classifier already
    /// learned as this class is a duplicate: neither counted nor trained again.
    pub fn learn(&mut self, raw: &[u8], counter: Counter) -> Learned {
        let class = match counter {
            Counter::Rescue | Counter::Ham => Class::Ham,
            _ => Class::Spam,
        };
        self.learn_as(raw, Some(counter), class)
    }

    /// Trains only the classifier on a raw message (replay's labels, autolearn of stored mail).
    pub fn train(&mut self, raw: &[u8], class: Class) -> Learned {
        self.learn_as(raw, None, class)
    }

    fn learn_as(&mut self, raw: &[u8], counter: Option<Counter>, class: Class) -> Learned {
        let sc = self.scanner.clone();
        let input = message::prepare(raw, &sc.limits);
        let scanned = self.scan_as(&input, &Envelope::default(), true, None);
        // A message learned again (the classifier remembers it) adds no complaint or rescue:
        // relearning a folder must not multiply its keys' counts. Without a classifier there is
        // no memory of learned messages, so every learn counts. The store is asked first: a
        // learn it does not take (a shared store out of reach) is refused whole, untrained.
        let fresh =
            !sc.classifier.config().enabled || !sc.classifier.knows(class, training_key(&scanned));
        // A journal that cannot take the learn (failing writes) refuses it before anything is
        // counted, so the client's retry does not count it twice.
        if let (Some(_), Err(e)) = (counter, sc.classifier.journal_ready()) {
            return Learned {
                keys: 0,
                message_id: scanned.analysis.entities.message_id.clone(),
                trained: false,
                duplicate: !fresh,
                journal_error: Some(e.to_string()),
                store_error: None,
            };
        }
        let keys = match counter {
            Some(c) if fresh => match sc.try_learn(&scanned.analysis, c) {
                Ok(keys) => keys,
                Err(e) => {
                    return Learned {
                        keys: 0,
                        message_id: scanned.analysis.entities.message_id.clone(),
                        trained: false,
                        duplicate: false,
                        journal_error: None,
                        store_error: Some(e.to_string()),
                    };
                }
            },
            _ => 0,
        };
        let (trained, journal_error) = match counter {
            Some(_) => match sc.train_learned(&scanned, class) {
                Ok(t) => (t, None),
                Err(e) => (true, Some(e.to_string())),
            },
            None => (sc.train(&scanned, class), None),
        };
        Learned {
            keys,
            message_id: scanned.analysis.entities.message_id.clone(),
            trained,
            duplicate: !fresh,
            journal_error,
            store_error: None,
        }
    }

    /// Autolearn: trains the classifier on a verdict confident enough by the configured
    /// scores, unless the model itself was in doubt about the message. Returns the class
    /// learned.
    pub fn autolearn(&self, scanned: &Scanned<'_>) -> Option<Class> {
        let sc = &*self.scanner;
        let cfg = sc.classifier.config();
        let score = scanned.verdict.score;
        let class = if cfg.autolearn_spam_at.is_some_and(|t| score >= t) {
            Class::Spam
        } else if cfg.autolearn_ham_at.is_some_and(|t| score <= t) {
            Class::Ham
        } else {
            return None;
        };
        if let Some(p) = scanned.verdict.probability {
            if p > cfg.autolearn_doubt[0] && p < cfg.autolearn_doubt[1] {
                return None;
            }
        }
        sc.classifier
            .autotrain(&sc.features(scanned), class, training_key(scanned))
            .then_some(class)
    }
}
