//! `shrike replay`: a labelled corpus through the full pipeline on a simulated clock, with
//! simulated user feedback, scored test-then-train; and two rule sets side by side.
//!
//! Owns: the simulated timeline (arrivals, feedback events, store cleanup), the feedback model,
//! the per-message outcomes. Never touches: sockets, the real clock, the rules' contents.
//! Reports are built in `report`, corpora read in `corpus`.

pub mod corpus;
pub mod crossval;
pub mod report;
pub mod roc;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::classify::Class;
use crate::engine::{LoadError, RuleLocation};
use crate::message::prepare;
use crate::scan::{ScanSettings, ScanWorker, Scanner};
use crate::shingle::hash_bytes;
use crate::store::{Counter, ManualClock, Store, StoreConfig, StoreError};
use crate::verdict::Action;

pub use corpus::{Arrival, Corpus, Item, Label};

/// Shards of a replay's store when the configuration leaves it to size: one thread uses it,
/// and the simulated sweeper visits every shard.
const REPLAY_SHARDS: usize = 256;

/// Most sweeper steps between two messages: cleanup keeps pace with simulated time the way
/// the daemon's sweeper does with real time, without a long gap in the mail costing a
/// full pass per message.
const SWEEP_STEPS_PER_EVENT: u64 = 4;

/// What a replay reads of the configuration (`Config::replay_settings` composes it).
#[derive(Debug, Clone, PartialEq)]
pub struct ReplaySettings {
    /// The scanner's settings.
    pub scan: ScanSettings,
    /// The fresh store each replay scans with (`[store]`; `shards = 0` takes `REPLAY_SHARDS`).
    pub store: StoreConfig,
    /// Seconds a full sweep of the store takes (`[server] sweep_cycle_secs`), on the simulated
    /// clock.
    pub sweep_cycle_secs: u64,
}

/// The simulated users.
#[derive(Debug, Clone, PartialEq)]
pub struct Feedback {
    /// Chance that spam delivered to the inbox (no action, greylist) draws a complaint.
    pub complain: f64,
    /// Chance that ham filed as spam (add header, rewrite subject, quarantine) is rescued.
    /// Rejected or discarded mail is never seen, so never rescued.
    pub rescue: f64,
    /// Mean delay between delivery and the feedback (each is between half and one and a half
    /// times this).
    pub delay_secs: u64,
    /// Fixes who files feedback and when.
    pub seed: u64,
    /// What trains the classifier besides complaints and rescues.
    pub train: Train,
}

/// What the classifier learns from in a replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Train {
    /// Only the complaints and rescues of the simulated users (and autolearn if configured).
    #[default]
    Feedback,
    /// Every labelled message, with its label, after the feedback delay: progressive
    /// validation (each message is scored before the model learns it).
    All,
}

impl Default for Feedback {
    fn default() -> Self {
        Feedback {
            complain: 0.5,
            rescue: 0.5,
            delay_secs: 3_600,
            seed: 1,
            train: Train::Feedback,
        }
    }
}

/// What happened to one message of the stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub action: Action,
    pub score: f64,
    /// Applied symbols (not shadow ones) with their scores, by name.
    pub symbols: Vec<(Arc<str>, f64)>,
    /// The complaint or rescue a simulated user filed about it.
    pub feedback: Option<Counter>,
    /// Why the message was not scanned (unreadable file).
    pub error: Option<String>,
    /// The classifier's spam probability, when it had an opinion.
    pub probability: Option<f64>,
}

/// One rule set's pass over the stream.
#[derive(Debug)]
pub struct Lane {
    /// Per message, in stream order.
    pub outcomes: Vec<Outcome>,
    /// Wall time of the pass (scans, feedback, cleanup; not loading the corpus).
    pub elapsed: Duration,
    pub complaints: u64,
    pub rescues: u64,
    /// Keys in the store at the end, and those the sweeper removed on the way.
    pub store_keys: usize,
    pub swept_keys: u64,
    /// Messages the classifier learned: spam, ham.
    pub learned: (u64, u64),
}

impl Lane {
    /// A pass that has not started, room for `capacity` outcomes.
    pub fn empty(capacity: usize) -> Lane {
        Lane {
            outcomes: Vec::with_capacity(capacity),
            elapsed: Duration::ZERO,
            complaints: 0,
            rescues: 0,
            store_keys: 0,
            swept_keys: 0,
            learned: (0, 0),
        }
    }
}

/// A feedback event: (time, sequence) orders the queue, the item says which message.
type Event = Reverse<(u64, u64, usize, EventKind)>;

/// What a feedback event does (ordered, for the event heap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum EventKind {
    Complaint,
    Rescue,
    /// The label reaches the classifier only (`Train::All`).
    TrainSpam,
    TrainHam,
}

impl EventKind {
    fn counter(self) -> Option<Counter> {
        match self {
            EventKind::Complaint => Some(Counter::Complaint),
            EventKind::Rescue => Some(Counter::Rescue),
            _ => None,
        }
    }
}

/// Why a replay could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("creating the store: {0}")]
    Store(StoreError),
    #[error("{0}")]
    Rules(LoadError),
    #[error("the second replay panicked")]
    Panicked,
    /// The replay of the second rule set (`--compare-rules`) failed.
    #[error("--compare-rules: {0}")]
    Second(Box<ReplayError>),
}

/// Replays `corpus` through the rules at `rules` with a fresh store on a simulated clock.
/// Each message is scanned at its arrival time and its verdict recorded; feedback about it
/// applies later (test, then train). The error names what failed to load.
pub fn run(
    settings: &ReplaySettings,
    rules: RuleLocation,
    corpus: &Corpus,
    feedback: &Feedback,
) -> Result<Lane, ReplayError> {
    let start_time = corpus.items.first().map_or(0, |i| i.arrival);
    let (clock, store, scanner) = pipeline(settings, rules, start_time)?;
    let mut worker = scanner.worker();
    let mut sweeper = SimulatedSweeper {
        store: &store,
        cycle_secs: settings.sweep_cycle_secs.max(1),
        last: start_time,
        owed: 0.0,
        removed: 0,
    };
    let mut names: HashMap<String, Arc<str>> = HashMap::new();
    let mut events: BinaryHeap<Event> = BinaryHeap::new();
    let mut sequence = 0u64;
    let mut lane = Lane::empty(corpus.items.len());
    let started = Instant::now();
    for item in &corpus.items {
        // Feedback due before this message arrives trains the store first.
        while let Some(&Reverse((at, _, index, kind))) = events.peek() {
            if at > item.arrival {
                break;
            }
            events.pop();
            clock.set(at);
            sweeper.advance(at);
            if let Ok(raw) = corpus.items[index].raw() {
                match kind {
                    EventKind::Complaint => worker.learn(&raw, Counter::Complaint),
                    EventKind::Rescue => worker.learn(&raw, Counter::Rescue),
                    EventKind::TrainSpam => worker.train(&raw, Class::Spam),
                    EventKind::TrainHam => worker.train(&raw, Class::Ham),
                };
            }
        }
        clock.set(item.arrival);
        sweeper.advance(item.arrival);
        let mut outcome = score(&scanner, &mut worker, item, &mut names);
        if outcome.error.is_some() {
            lane.outcomes.push(outcome);
            continue;
        }
        let filed = user_feedback(item, outcome.action, feedback);
        let index = lane.outcomes.len();
        if let Some((counter, delay)) = filed {
            sequence += 1;
            events.push(Reverse((item.arrival + delay, sequence, index, counter)));
            match counter {
                EventKind::Complaint => lane.complaints += 1,
                _ => lane.rescues += 1,
            }
        }
        if feedback.train == Train::All && item.label != Label::Unlabeled {
            let class = if item.label == Label::Spam {
                EventKind::TrainSpam
            } else {
                EventKind::TrainHam
            };
            let delay = feedback_delay(item, feedback);
            sequence += 1;
            events.push(Reverse((item.arrival + delay, sequence, index, class)));
        }
        outcome.feedback = filed.and_then(|(c, _)| c.counter());
        lane.outcomes.push(outcome);
    }
    lane.elapsed = started.elapsed();
    lane.store_keys = store.stats().keys;
    lane.swept_keys = sweeper.removed;
    lane.learned = scanner.classifier().learned();
    Ok(lane)
}

/// A replay's clock, store and scanner.
type Pipeline = (Arc<ManualClock>, Arc<Store>, Arc<Scanner>);

/// A fresh store and scanner (with a fresh classifier) on a simulated clock set to `start`.
fn pipeline(
    settings: &ReplaySettings,
    rules: RuleLocation,
    start: u64,
) -> Result<Pipeline, ReplayError> {
    let clock = Arc::new(ManualClock::new(start));
    let mut store_config = settings.store.clone();
    if store_config.shards == 0 {
        store_config.shards = REPLAY_SHARDS;
    }
    let store = Arc::new(Store::new(&store_config, clock.clone()).map_err(ReplayError::Store)?);
    let scanner = Scanner::new(&settings.scan, rules, store.clone()).map_err(ReplayError::Rules)?;
    Ok((clock, store, scanner))
}

/// Scans one message at the clock's current time as the daemon would (its updates recorded,
/// autolearn as configured) and returns what it got, without feedback. An unreadable file is
/// an outcome with its error.
fn score(
    scanner: &Scanner,
    worker: &mut ScanWorker,
    item: &Item,
    names: &mut HashMap<String, Arc<str>>,
) -> Outcome {
    let raw = match item.raw() {
        Ok(raw) => raw,
        Err(e) => {
            tracing::warn!(file = %item.name, error = %e, "replay: cannot read message");
            return Outcome {
                action: Action::NoAction,
                score: 0.0,
                symbols: Vec::new(),
                feedback: None,
                error: Some(e.to_string()),
                probability: None,
            };
        }
    };
    let input = prepare(&raw, scanner.limits());
    let scanned = worker.scan(&input, &item.envelope);
    scanner.apply(&scanned.updates);
    worker.autolearn(&scanned);
    let verdict = scanned.verdict;
    let symbols = verdict
        .symbols
        .into_values()
        .map(|hit| {
            let name = match names.get(hit.name.as_str()) {
                Some(n) => n.clone(),
                None => {
                    let n: Arc<str> = Arc::from(hit.name.as_str());
                    names.insert(hit.name, n.clone());
                    n
                }
            };
            (name, hit.score)
        })
        .collect();
    Outcome {
        action: verdict.action,
        score: verdict.score,
        symbols,
        feedback: None,
        error: None,
        probability: verdict.probability,
    }
}

/// Replays the same stream through two rule sets, each with its own store and clock, on two
/// threads.
pub fn run_pair(
    settings: &ReplaySettings,
    a: RuleLocation,
    b: RuleLocation,
    corpus: &Corpus,
    feedback: &Feedback,
) -> Result<(Lane, Lane), ReplayError> {
    std::thread::scope(|s| {
        let other = s.spawn(|| run(settings, b, corpus, feedback));
        let first = run(settings, a, corpus, feedback);
        let second = other.join().unwrap_or(Err(ReplayError::Panicked));
        Ok((
            first?,
            second.map_err(|e| ReplayError::Second(Box::new(e)))?,
        ))
    })
}

/// Whether a simulated user files feedback about a delivered message, and after how long.
/// Decided by a hash of the seed and the message's name, so a replay repeats exactly and two
/// rule sets that treat a message alike get the same feedback for it.
fn user_feedback(item: &Item, action: Action, feedback: &Feedback) -> Option<(EventKind, u64)> {
    let in_inbox = matches!(action, Action::NoAction | Action::Greylist);
    let in_junk = matches!(
        action,
        Action::AddHeader | Action::RewriteSubject | Action::Quarantine
    );
    let (counter, chance) = match item.label {
        Label::Spam if in_inbox => (EventKind::Complaint, feedback.complain),
        l if l.is_ham() && in_junk => (EventKind::Rescue, feedback.rescue),
        _ => return None,
    };
    if unit(feedback.seed, &item.key, b"who") >= chance {
        return None;
    }
    Some((counter, feedback_delay(item, feedback)))
}

/// How long after delivery feedback about `item` lands: half to one and a half times the delay.
fn feedback_delay(item: &Item, feedback: &Feedback) -> u64 {
    let spread = 0.5 + unit(feedback.seed, &item.key, b"when");
    (feedback.delay_secs as f64 * spread) as u64
}

/// A stable number in [0, 1) for (seed, name, purpose).
fn unit(seed: u64, name: &str, purpose: &[u8]) -> f64 {
    let mut key = Vec::with_capacity(8 + name.len() + purpose.len());
    key.extend_from_slice(&seed.to_le_bytes());
    key.extend_from_slice(purpose);
    key.extend_from_slice(name.as_bytes());
    (hash_bytes(&key) >> 11) as f64 / (1u64 << 53) as f64
}

/// The store's cleanup, paced by simulated time: one full pass per sweep cycle, a few shards
/// at a time.
struct SimulatedSweeper<'s> {
    store: &'s Store,
    cycle_secs: u64,
    last: u64,
    owed: f64,
    removed: u64,
}

impl SimulatedSweeper<'_> {
    fn advance(&mut self, now: u64) {
        let shards = self.store.shard_count() as f64;
        let elapsed = now.saturating_sub(self.last) as f64;
        self.last = self.last.max(now);
        self.owed = (self.owed + shards * elapsed / self.cycle_secs as f64).min(shards);
        let steps = (self.owed as u64).min(SWEEP_STEPS_PER_EVENT);
        for _ in 0..steps {
            self.removed += self.store.sweep_step().removed as u64;
        }
        self.owed -= steps as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(name: &str, label: Label) -> Item {
        Item {
            name: name.into(),
            key: name.into(),
            label,
            arrival: 0,
            envelope: Default::default(),
            source: corpus::Source::Bytes(Vec::new()),
        }
    }

    #[test]
    fn feedback_follows_delivery() {
        let always = Feedback {
            complain: 1.0,
            rescue: 1.0,
            delay_secs: 100,
            seed: 7,
            train: Train::Feedback,
        };
        let spam = item("s", Label::Spam);
        let ham = item("h", Label::HardHam);
        let got = |i: &Item, a| user_feedback(i, a, &always).map(|(c, _)| c);
        assert_eq!(got(&spam, Action::NoAction), Some(EventKind::Complaint));
        assert_eq!(got(&spam, Action::Greylist), Some(EventKind::Complaint));
        assert_eq!(got(&spam, Action::AddHeader), None);
        assert_eq!(got(&ham, Action::AddHeader), Some(EventKind::Rescue));
        // Rejected ham never reaches a user: lost, not rescued.
        assert_eq!(got(&ham, Action::Reject), None);
        assert_eq!(got(&ham, Action::NoAction), None);
        assert_eq!(got(&item("u", Label::Unlabeled), Action::NoAction), None);
        let (_, delay) = user_feedback(&spam, Action::NoAction, &always).unwrap();
        assert!((50..150).contains(&delay), "{delay}");
        let never = Feedback {
            complain: 0.0,
            rescue: 0.0,
            ..always
        };
        assert_eq!(user_feedback(&spam, Action::NoAction, &never), None);
    }

    #[test]
    fn feedback_share_follows_the_probability() {
        let half = Feedback {
            complain: 0.3,
            ..Feedback::default()
        };
        let filed = (0..10_000)
            .filter(|i| {
                user_feedback(
                    &item(&format!("m{i}"), Label::Spam),
                    Action::NoAction,
                    &half,
                )
                .is_some()
            })
            .count();
        assert!((2_700..3_300).contains(&filed), "{filed}");
    }
}
