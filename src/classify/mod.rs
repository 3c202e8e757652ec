//! The online classifier: logistic regression over hashed features, trained one message at a
//! time by FTRL-Proximal (McMahan et al., "Ad Click Prediction: a View from the Trenches").
//!
//! Owns: the weight table, prediction, training, the cold-start rule, the snapshot format.
//! Never touches: mail parsing (features come from `features`), the store, Lua.
//!
//! The table holds FTRL's two numbers per coordinate, `z` and `n`, as `f32` bits in relaxed
//! atomics: a prediction reads them without a lock while a training step (serialized by a
//! mutex) writes them, so inference never waits on training and sees each update at once.

pub mod bayes;
pub mod features;
pub mod journal;
pub mod passes;
pub mod stack;

use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::store::persist::disk;

pub use features::{extract, learns_symbol, Features, FEATURE_VERSION};

/// Classifier settings (`[classifier]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClassifierConfig {
    pub enabled: bool,
    /// log2 of the number of weights (16..=26); memory is 17 bytes per weight (the FTRL
    /// model's 9 and naive Bayes' two counts).
    pub table_bits: u32,
    /// FTRL-Proximal learning-rate scale.
    pub alpha: f64,
    /// FTRL-Proximal learning-rate smoothing.
    pub beta: f64,
    /// L1 regularization: weights of rare features stay exactly zero.
    pub l1: f64,
    /// L2 regularization.
    pub l2: f64,
    /// L1 added for every 1,000 messages learned (both classes together). A fixed L1 weakens
    /// as the learned evidence grows; this keeps a well-taught model as sparse as a young one,
    /// so features seen in a few spam cannot push other bulk mail over.
    pub l1_per_thousand: f64,
    /// Messages a feature must have been trained on before it carries any weight (0..=255).
    pub min_feature_count: u8,
    /// Messages of each class the model must have learned before it gives an opinion.
    pub min_learned: u64,
    /// Passes of a bulk learn (`shrike learn` offline, `shrike replay --cross-validate`) over
    /// what it learned (1..=10): after the first, the classifier trains again on the same
    /// messages, shuffled, without counting them again (`passes`).
    pub learn_passes: u8,
    /// Learn spam from verdicts scoring at least this (autolearn); off when absent.
    pub autolearn_spam_at: Option<f64>,
    /// Learn ham from verdicts scoring at most this (autolearn); off when absent.
    pub autolearn_ham_at: Option<f64>,
    /// Autolearn skips messages the model itself scored between these probabilities (it
    /// would learn its own doubts).
    pub autolearn_doubt: [f64; 2],
}

impl Default for ClassifierConfig {
    fn default() -> Self {
        ClassifierConfig {
            enabled: true,
            table_bits: 20,
            alpha: 0.3,
            beta: 1.0,
            l1: 0.3,
            l2: 2.0,
            l1_per_thousand: 0.0,
            min_feature_count: 0,
            min_learned: 20,
            learn_passes: 2,
            autolearn_spam_at: None,
            autolearn_ham_at: None,
            autolearn_doubt: [0.2, 0.8],
        }
    }
}

/// Why the `[classifier]` options cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClassifierConfigError {
    #[error("classifier.table_bits must be 16..=26, got {0}")]
    TableBits(u32),
    #[error("classifier alpha, beta, l1, l2, l1_per_thousand must be finite, >= 0 (alpha > 0)")]
    Parameters,
    #[error("classifier.learn_passes must be 1..=10, got {0}")]
    LearnPasses(u8),
}

impl ClassifierConfig {
    /// Checks values that parse but make no sense.
    pub fn validate(&self) -> Result<(), ClassifierConfigError> {
        if !(16..=26).contains(&self.table_bits) {
            return Err(ClassifierConfigError::TableBits(self.table_bits));
        }
        let params = [
            self.alpha,
            self.beta,
            self.l1,
            self.l2,
            self.l1_per_thousand,
        ];
        if params.iter().any(|p| !p.is_finite() || *p < 0.0) || self.alpha == 0.0 {
            return Err(ClassifierConfigError::Parameters);
        }
        if !(1..=10).contains(&self.learn_passes) {
            return Err(ClassifierConfigError::LearnPasses(self.learn_passes));
        }
        Ok(())
    }
}

/// Which class a training example belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Spam,
    Ham,
}

/// Why a snapshot was refused.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("classifier snapshot {0}: {1}")]
    Io(String, std::io::Error),
    #[error("classifier snapshot {0} is not a shrike classifier snapshot (bad magic)")]
    Magic(String),
    #[error("classifier snapshot {0}: format version {1}, this build reads {2}")]
    Version(String, u32, u32),
    #[error(
        "classifier snapshot {0} was trained with feature hashing version {1}; this build hashes \
         features as version {2}, so its weights mean nothing here (remove it to start afresh)"
    )]
    FeatureVersion(String, u32, u32),
    #[error("classifier snapshot {0} has 2^{1} weights; the configuration asks for 2^{2}")]
    TableBits(String, u32, u32),
    #[error("classifier snapshot {0} is damaged (checksum mismatch)")]
    Checksum(String),
}

const MAGIC: &[u8; 8] = b"SHRKCLF\0";
/// 2: the remembered training keys follow the weights, so a restart (or the offline
/// `shrike learn` then the daemon) still refuses a message it has trained on. 3: each
/// coordinate's training count (one byte) follows the weights, before the keys, so
/// `min_feature_count` holds across a restart. 4: naive Bayes' counts (`bayes`) follow those,
/// before the keys. 5: the stack's weights (`stack`) follow Bayes'. 1 to 4 are still read
/// (Bayes, then the stack, start from nothing).
const FORMAT_VERSION: u32 = 5;

/// The model.
pub struct Classifier {
    config: ClassifierConfig,
    mask: u64,
    /// `z` and `n` of coordinate `i` at `2i` and `2i + 1`, as `f32` bits.
    table: Box<[AtomicU32]>,
    /// Training steps each coordinate took part in, saturating at 255.
    counts: Box<[AtomicU8]>,
    /// The naive Bayes second opinion over the same features (`bayes`).
    bayes: bayes::Bayes,
    /// The one verdict from the two (`stack`).
    stack: stack::Stack,
    spam: AtomicU64,
    ham: AtomicU64,
    /// Serializes training steps (each reads then writes its coordinates).
    train: Mutex<()>,
    /// Recently trained messages (autolearn and repeats of one mailing train once).
    seen: Mutex<lru::LruCache<u64, ()>>,
    /// The learn journal, when the model is saved to disk (`attach_journal`). Its lock orders
    /// a learn's training and its record against a snapshot.
    journal: Mutex<Option<journal::Journal>>,
    /// Told of every user learn that trained (a shared store publishes it to other daemons).
    learn_hook: std::sync::OnceLock<LearnHook>,
    /// While a bulk learn runs: keeps what trained for its further passes.
    collector: Mutex<Option<std::sync::Arc<passes::Passes>>>,
}

/// Which training a step is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// A first training on a labelled message: counted, and what the models said of it before
    /// is a held-out example for the stack.
    HeldOut,
    /// A first training on the filter's own verdict (autolearn): counted, not for the stack.
    First,
    /// A further pass over a message already trained on: nothing counted.
    Again,
}

/// What `Classifier::set_learn_hook` calls: (class, message key, features).
pub type LearnHook = Box<dyn Fn(Class, Option<u64>, &Features) + Send + Sync>;

/// The classifier shared through a Redis store's learn stream (`[store.redis]
/// shared_classifier`): its user learns published, the other daemons' applied quietly.
impl crate::store::redis::learns::SharedModel for Classifier {
    fn publish_learns(&self, publish: crate::store::redis::learns::Publish) {
        self.set_learn_hook(Box::new(move |class, key, features| {
            publish(class == Class::Spam, key, features.hashes());
        }));
    }

    fn apply_learn(&self, spam: bool, key: Option<u64>, hashes: Vec<u64>) -> std::io::Result<bool> {
        let class = if spam { Class::Spam } else { Class::Ham };
        self.learn_quietly(&Features::from_hashes(hashes), class, key)
    }
}

impl std::fmt::Debug for Classifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Classifier")
            .field("table_bits", &self.config.table_bits)
            .field("spam", &self.spam)
            .field("ham", &self.ham)
            .finish()
    }
}

/// Messages remembered as trained.
const SEEN_CAPACITY: usize = 100_000;

/// Fills `slots` from little-endian `u32`s (a snapshot's table section).
fn store_u32s(slots: &[AtomicU32], bytes: &[u8]) {
    for (slot, chunk) in slots.iter().zip(bytes.chunks_exact(4)) {
        slot.store(
            u32::from_le_bytes(chunk.try_into().expect("4 bytes")),
            Relaxed,
        );
    }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x.clamp(-35.0, 35.0)).exp())
}

impl Classifier {
    pub fn new(config: &ClassifierConfig) -> Classifier {
        let bits = config.table_bits.clamp(16, 26);
        let size = 1usize << bits;
        Classifier {
            config: config.clone(),
            mask: size as u64 - 1,
            table: (0..size * 2).map(|_| AtomicU32::new(0)).collect(),
            counts: (0..size).map(|_| AtomicU8::new(0)).collect(),
            bayes: bayes::Bayes::new(bits),
            stack: stack::Stack::default(),
            spam: AtomicU64::new(0),
            ham: AtomicU64::new(0),
            train: Mutex::new(()),
            seen: Mutex::new(lru::LruCache::new(
                std::num::NonZeroUsize::new(SEEN_CAPACITY).expect("nonzero"),
            )),
            journal: Mutex::new(None),
            learn_hook: std::sync::OnceLock::new(),
            collector: Mutex::new(None),
        }
    }

    pub fn config(&self) -> &ClassifierConfig {
        &self.config
    }

    /// Messages learned per class.
    pub fn learned(&self) -> (u64, u64) {
        (self.spam.load(Relaxed), self.ham.load(Relaxed))
    }

    /// Whether the model has seen enough of both classes to give an opinion.
    pub fn ready(&self) -> bool {
        self.enough(self.learned())
    }

    /// Whether `(spam, ham)` learned messages are enough for an opinion.
    fn enough(&self, (spam, ham): (u64, u64)) -> bool {
        let min = self.config.min_learned;
        self.config.enabled && spam >= min && ham >= min
    }

    /// The L1 in force: the configured one plus its growth with the messages learned.
    fn l1_now(&self) -> f64 {
        let (s, h) = self.learned();
        self.config.l1 + self.config.l1_per_thousand * (s + h) as f64 / 1000.0
    }

    fn weight(&self, slot: usize, l1: f64) -> f64 {
        let z = f64::from(f32::from_bits(self.table[2 * slot].load(Relaxed)));
        let n = f64::from(f32::from_bits(self.table[2 * slot + 1].load(Relaxed)));
        let c = &self.config;
        // The count is read only when a threshold is set: off, prediction touches no more
        // memory than before.
        if z.abs() <= l1
            || (c.min_feature_count > 0 && self.counts[slot].load(Relaxed) < c.min_feature_count)
        {
            0.0
        } else {
            -(z - z.signum() * l1) / ((c.beta + n.sqrt()) / c.alpha + c.l2)
        }
    }

    fn slot(&self, feature: u64) -> usize {
        (feature & self.mask) as usize
    }

    /// The spam probability of a feature set (whether or not the model is ready).
    pub fn probability(&self, features: &Features) -> f64 {
        let l1 = self.l1_now();
        let sum: f64 = features
            .hashes()
            .iter()
            .map(|&f| self.weight(self.slot(f), l1))
            .sum();
        sigmoid(sum)
    }

    /// The learned verdict: the FTRL model's and naive Bayes' probabilities combined by the
    /// stack (`stack`), or `None` during the cold start. FTRL's alone while naive Bayes or the
    /// stack has not learned `min_learned` messages of each class.
    pub fn classify(&self, features: &Features) -> Option<f64> {
        if !self.ready() {
            return None;
        }
        let ftrl = self.probability(features);
        // (Bayes is asked only when the stack would use its answer.)
        if !self.bayes_ready() || !self.stack.ready(self.config.min_learned) {
            return Some(ftrl);
        }
        let bayes = self.bayes.probability(features.hashes());
        Some(self.stack.combine(ftrl, bayes, self.config.min_learned))
    }

    /// The stack's weights (FTRL, Bayes, FTRL when Bayes is torn) and the held-out messages
    /// per class it learned them from.
    pub fn stack(&self) -> ([f64; 3], (u64, u64)) {
        (self.stack.weights(), self.stack.learned())
    }

    /// Naive Bayes' spam probability (`bayes`), or `None` until it has learned `min_learned`
    /// messages of each class itself.
    pub fn bayes(&self, features: &Features) -> Option<f64> {
        self.bayes_ready()
            .then(|| self.bayes.probability(features.hashes()))
    }

    /// Messages naive Bayes has counted per class.
    pub fn bayes_learned(&self) -> (u64, u64) {
        self.bayes.learned()
    }

    /// Whether naive Bayes has learned enough of both classes to give an opinion.
    pub fn bayes_ready(&self) -> bool {
        self.enough(self.bayes.learned())
    }

    /// Whether the message `key` is remembered as trained towards `class` (nothing changes).
    pub fn knows(&self, class: Class, key: Option<u64>) -> bool {
        key.is_some_and(|key| {
            let tagged = key ^ if class == Class::Spam { 0x5A } else { 0xA5 };
            self.seen.lock().contains(&tagged)
        })
    }

    /// One FTRL-Proximal step towards `class`. `key` identifies the message (Message-ID or
    /// body hash): a message trains once per class while it is remembered. Returns whether it
    /// trained.
    pub fn train(&self, features: &Features, class: Class, key: Option<u64>) -> bool {
        self.train_as(features, class, key, true)
    }

    /// `train` for autolearn: the class is the filter's own verdict, partly this model's, so
    /// the stack (`stack`) does not learn from it: it would learn to trust whatever decided.
    pub fn autotrain(&self, features: &Features, class: Class, key: Option<u64>) -> bool {
        self.train_as(features, class, key, false)
    }

    fn train_as(&self, features: &Features, class: Class, key: Option<u64>, held: bool) -> bool {
        if !self.config.enabled {
            return false;
        }
        if let Some(key) = key {
            let tagged = key ^ if class == Class::Spam { 0x5A } else { 0xA5 };
            if self.seen.lock().put(tagged, ()).is_some() {
                return false;
            }
        }
        self.step(
            features.hashes(),
            class,
            if held { Step::HeldOut } else { Step::First },
        );
        match class {
            Class::Spam => self.spam.fetch_add(1, Relaxed),
            Class::Ham => self.ham.fetch_add(1, Relaxed),
        };
        if let Some(c) = self.collector.lock().as_ref() {
            c.keep(class, features);
        }
        true
    }

    /// Another pass of a bulk learn over a message it trained on (`passes`): the FTRL step
    /// again, without counting the message or its coordinates again.
    pub fn retrain(&self, hashes: &[u64], class: Class) {
        if self.config.enabled {
            self.step(hashes, class, Step::Again);
        }
    }

    /// From now until `collect(None)`, every message `train` trains on is kept in `passes`.
    pub fn collect(&self, passes: Option<std::sync::Arc<passes::Passes>>) {
        *self.collector.lock() = passes;
    }

    /// One FTRL-Proximal step over a message's feature hashes.
    fn step(&self, hashes: &[u64], class: Class, step: Step) {
        let count = step != Step::Again;
        let _guard = self.train.lock();
        let y = if class == Class::Spam { 1.0 } else { 0.0 };
        let l1 = self.l1_now();
        let sum: f64 = hashes.iter().map(|&f| self.weight(self.slot(f), l1)).sum();
        let g = sigmoid(sum) - y;
        let alpha = self.config.alpha;
        for &f in hashes {
            let slot = self.slot(f);
            let w = self.weight(slot, l1);
            if count {
                let c = self.counts[slot].load(Relaxed);
                self.counts[slot].store(c.saturating_add(1), Relaxed);
            }
            let z = f64::from(f32::from_bits(self.table[2 * slot].load(Relaxed)));
            let n = f64::from(f32::from_bits(self.table[2 * slot + 1].load(Relaxed)));
            let sigma = ((n + g * g).sqrt() - n.sqrt()) / alpha;
            let z = z + g - sigma * w;
            let n = n + g * g;
            self.table[2 * slot].store((z as f32).to_bits(), Relaxed);
            self.table[2 * slot + 1].store((n as f32).to_bits(), Relaxed);
        }
        if count {
            // What both models said before learning this message: a held-out example for the
            // stack (`sum` was read before the step above changed any weight).
            if step == Step::HeldOut
                && self.enough(self.learned())
                && self.enough(self.bayes.learned())
            {
                let bayes = self.bayes.probability(hashes);
                self.stack.learn(sigmoid(sum), bayes, class == Class::Spam);
            }
            self.bayes.learn(hashes, class);
        }
    }

    /// From now on, `learn` records what it trains in `journal` before it returns, and `save`
    /// empties it. The caller trained the journal's earlier learns (`Journal::open`) first.
    pub fn attach_journal(&self, journal: journal::Journal) {
        *self.journal.lock() = Some(journal);
    }

    /// A user's learn: `train`, recorded in the journal (when one is attached) before it
    /// returns, so a killed process keeps it. Returns whether it trained.
    pub fn learn(
        &self,
        features: &Features,
        class: Class,
        key: Option<u64>,
    ) -> std::io::Result<bool> {
        let trained = self.learn_quietly(features, class, key)?;
        if trained {
            if let Some(hook) = self.learn_hook.get() {
                hook(class, key, features);
            }
        }
        Ok(trained)
    }

    /// Calls `hook` after each user learn that trained (once; later calls are ignored).
    pub fn set_learn_hook(&self, hook: LearnHook) {
        let _ = self.learn_hook.set(hook);
    }

    /// `learn` without telling the hook: a learn that came from another daemon.
    pub fn learn_quietly(
        &self,
        features: &Features,
        class: Class,
        key: Option<u64>,
    ) -> std::io::Result<bool> {
        let mut journal = self.journal.lock();
        let Some(j) = journal.as_mut() else {
            return Ok(self.train(features, class, key));
        };
        // A journal that cannot take the learn refuses it untrained.
        j.ready()?;
        if self.train(features, class, key) {
            j.append(class, key, features)?;
            Ok(true)
        } else {
            // A message learned before, sent again (a client retrying a refused learn): it is
            // acknowledged once its record, left over from a failed write, is written too.
            j.flush()?;
            Ok(false)
        }
    }

    /// Writes what failed journal writes left over and fsyncs the journal's appends (the
    /// `every_second` policy's tick).
    pub fn sync_journal(&self) -> std::io::Result<()> {
        self.journal
            .lock()
            .as_mut()
            .map_or(Ok(()), journal::Journal::sync)
    }

    /// Writes what failed journal writes left over, without an fsync.
    pub fn flush_journal(&self) -> std::io::Result<()> {
        self.journal
            .lock()
            .as_mut()
            .map_or(Ok(()), journal::Journal::flush)
    }

    /// Err when a user's learn would be refused before training (see `Journal::ready`).
    pub fn journal_ready(&self) -> std::io::Result<()> {
        self.journal
            .lock()
            .as_ref()
            .map_or(Ok(()), journal::Journal::ready)
    }

    /// Whether learns wait for a snapshot (the journal's fsync failed): save now.
    pub fn journal_needs_snapshot(&self) -> bool {
        self.journal
            .lock()
            .as_ref()
            .is_some_and(journal::Journal::needs_snapshot)
    }

    /// The checksum `save` wrote at the end of a snapshot file (what a journal marker names).
    pub fn file_crc(path: &Path) -> Option<u32> {
        use std::io::{Seek, SeekFrom};
        let mut f = std::fs::File::open(path).ok()?;
        f.seek(SeekFrom::End(-4)).ok()?;
        let mut tail = [0u8; 4];
        f.read_exact(&mut tail).ok()?;
        Some(u32::from_le_bytes(tail))
    }

    /// Writes the model to `path` atomically (a temporary file, fsync, rename). With a journal
    /// attached, learns wait meanwhile, and the journal is emptied once the file is in place.
    pub fn save(&self, path: &Path) -> Result<(), SnapshotError> {
        let mut journal = self.journal.lock();
        let name = path.display().to_string();
        let io = |e| SnapshotError::Io(name.clone(), e);
        let mut buf = Vec::with_capacity(
            64 + self.table.len() * 4 + self.counts.len() + self.bayes.encoded_len(),
        );
        buf.extend_from_slice(MAGIC);
        buf.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        buf.extend_from_slice(&FEATURE_VERSION.to_le_bytes());
        buf.extend_from_slice(&self.config.table_bits.to_le_bytes());
        let _guard = self.train.lock();
        buf.extend_from_slice(&self.spam.load(Relaxed).to_le_bytes());
        buf.extend_from_slice(&self.ham.load(Relaxed).to_le_bytes());
        for v in self.table.iter() {
            buf.extend_from_slice(&v.load(Relaxed).to_le_bytes());
        }
        buf.extend(self.counts.iter().map(|c| c.load(Relaxed)));
        self.bayes.write(&mut buf);
        self.stack.write(&mut buf);
        {
            let seen = self.seen.lock();
            buf.extend_from_slice(&(seen.len() as u32).to_le_bytes());
            // Oldest first, so loading in order keeps which are forgotten next.
            for (key, ()) in seen.iter().rev() {
                buf.extend_from_slice(&key.to_le_bytes());
            }
        }
        drop(_guard);
        let crc = crc32c::crc32c(&buf);
        buf.extend_from_slice(&crc.to_le_bytes());
        let tmp = path.with_extension("tmp");
        let written = (|| {
            let mut file = disk::create(&tmp)?;
            disk::write_all(&mut file, &tmp, &buf)?;
            disk::sync(&file, &tmp, true)?;
            drop(file);
            // The marker first: a kill before the rename leaves the old snapshot and every
            // learn.
            if let Some(j) = journal.as_mut() {
                j.mark(crc)?;
            }
            disk::rename(&tmp, path)
        })();
        if let Err(e) = written {
            let _ = disk::remove(&tmp);
            return Err(io(e));
        }
        // Until the rename is on disk the journal's learns are still needed.
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        disk::sync_dir(dir).map_err(io)?;
        if let Some(j) = journal.as_mut() {
            j.clear().map_err(io)?;
        }
        Ok(())
    }

    /// Reads a model written by `save`. Refuses a damaged file, another format, other feature
    /// hashing, or another table size, saying which.
    pub fn load(config: &ClassifierConfig, path: &Path) -> Result<Classifier, SnapshotError> {
        let name = path.display().to_string();
        let mut buf = Vec::new();
        std::fs::File::open(path)
            .and_then(|mut f| f.read_to_end(&mut buf))
            .map_err(|e| SnapshotError::Io(name.clone(), e))?;
        if buf.len() < 36 || &buf[..8] != MAGIC {
            return Err(SnapshotError::Magic(name));
        }
        let (body, tail) = buf.split_at(buf.len() - 4);
        let u32_at = |i: usize| u32::from_le_bytes(body[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(body[i..i + 8].try_into().expect("8 bytes"));
        if crc32c::crc32c(body) != u32::from_le_bytes(tail.try_into().expect("4 bytes")) {
            return Err(SnapshotError::Checksum(name));
        }
        let version = u32_at(8);
        if !(1..=FORMAT_VERSION).contains(&version) {
            return Err(SnapshotError::Version(name, version, FORMAT_VERSION));
        }
        if u32_at(12) != FEATURE_VERSION {
            return Err(SnapshotError::FeatureVersion(
                name,
                u32_at(12),
                FEATURE_VERSION,
            ));
        }
        let bits = u32_at(16);
        if bits != config.table_bits {
            return Err(SnapshotError::TableBits(name, bits, config.table_bits));
        }
        let model = Classifier::new(config);
        let table_end = 36 + model.table.len() * 4;
        let (values, rest) = match body.get(36..table_end) {
            Some(values) => (values, &body[table_end..]),
            None => return Err(SnapshotError::Checksum(name)),
        };
        let (counts, rest) = if version >= 3 {
            match rest.split_at_checked(model.counts.len()) {
                Some((counts, rest)) => (Some(counts), rest),
                None => return Err(SnapshotError::Checksum(name)),
            }
        } else {
            (None, rest)
        };
        let keys = if version >= 4 {
            match rest.split_at_checked(model.bayes.encoded_len()) {
                Some((bayes, keys)) if model.bayes.read(bayes) => keys,
                _ => return Err(SnapshotError::Checksum(name)),
            }
        } else {
            rest
        };
        let keys = if version >= 5 {
            match keys.split_at_checked(stack::Stack::ENCODED_LEN) {
                Some((stack, keys)) if model.stack.read(stack) => keys,
                _ => return Err(SnapshotError::Checksum(name)),
            }
        } else {
            keys
        };
        let keys = match version {
            1 if keys.is_empty() => keys,
            1 => return Err(SnapshotError::Checksum(name)),
            _ => match keys.split_first_chunk::<4>() {
                Some((n, rest)) if rest.len() == u32::from_le_bytes(*n) as usize * 8 => rest,
                _ => return Err(SnapshotError::Checksum(name)),
            },
        };
        {
            let mut seen = model.seen.lock();
            for key in keys.chunks_exact(8) {
                seen.put(u64::from_le_bytes(key.try_into().expect("8 bytes")), ());
            }
        }
        model.spam.store(u64_at(20), Relaxed);
        model.ham.store(u64_at(28), Relaxed);
        store_u32s(&model.table, values);
        match counts {
            Some(counts) => {
                for (slot, &c) in model.counts.iter().zip(counts) {
                    slot.store(c, Relaxed);
                }
            }
            // A model saved before counts were kept: every coordinate it trained carries its
            // weight as it did then (the count is unknown, not small).
            None => {
                for (i, slot) in model.counts.iter().enumerate() {
                    if model.table[2 * i + 1].load(Relaxed) != 0 {
                        slot.store(u8::MAX, Relaxed);
                    }
                }
            }
        }
        Ok(model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ClassifierConfig {
        ClassifierConfig {
            table_bits: 16,
            min_learned: 5,
            ..ClassifierConfig::default()
        }
    }

    /// A classifier with a learn journal in `dir`.
    fn journaled(dir: &Path) -> Classifier {
        let model = Classifier::new(&config());
        let (journal, _) = journal::Journal::open(&dir.join("j"), None, false).unwrap();
        model.attach_journal(journal);
        model
    }

    #[test]
    fn a_refused_learn_sent_again_is_acknowledged_only_once_written() {
        use crate::store::persist::disk::{inject, Fault};
        let dir = tempfile::tempdir().unwrap();
        let model = journaled(dir.path());
        let fault = inject(dir.path(), Fault::DiskFull { room: 0 });
        assert!(model
            .learn(&example(1, true), Class::Spam, Some(1))
            .is_err());
        // Trained already (it stays so), but its record is not written: the retry is refused
        // too, not taken as a duplicate that was acknowledged before.
        assert!(model
            .learn(&example(1, true), Class::Spam, Some(1))
            .is_err());
        drop(fault);
        assert!(!model
            .learn(&example(1, true), Class::Spam, Some(1))
            .unwrap());
        assert_eq!(model.learned(), (1, 0), "trained once");
        let (_, learns) = journal::Journal::open(&dir.path().join("j"), None, false).unwrap();
        assert_eq!(learns.len(), 1);
    }

    #[test]
    fn a_failed_save_leaves_the_journal_whole_and_no_temporary_file() {
        use crate::store::persist::disk::{inject, Fault};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bin");
        let model = journaled(dir.path());
        for i in 0..3 {
            model
                .learn(&example(i, true), Class::Spam, Some(i))
                .unwrap();
        }
        for fault in [Fault::Rename, Fault::Fsync, Fault::DiskFull { room: 100 }] {
            let guard = inject(dir.path(), fault);
            assert!(model.save(&path).is_err(), "{fault:?}");
            drop(guard);
            assert!(
                !path.exists() && !path.with_extension("tmp").exists(),
                "{fault:?}"
            );
        }
        assert!(!model.journal_needs_snapshot());
        // The journal's own fsync (the marker's) fails: learns wait for a snapshot.
        let guard = inject(&dir.path().join("j"), Fault::Fsync);
        assert!(model.save(&path).is_err());
        drop(guard);
        assert!(!path.exists() && !path.with_extension("tmp").exists());
        assert!(model.journal_needs_snapshot());
        assert!(model
            .learn(&example(9, true), Class::Spam, Some(9))
            .is_err());
        model.save(&path).unwrap();
        assert!(!model.journal_needs_snapshot());
        model
            .learn(&example(9, true), Class::Spam, Some(9))
            .unwrap();
        let crc = Classifier::file_crc(&path);
        let (_, after) = journal::Journal::open(&dir.path().join("j"), crc, false).unwrap();
        assert_eq!(after.len(), 1, "only the learn after the snapshot");
        let loaded = Classifier::load(&config(), &path).unwrap();
        assert_eq!(loaded.learned(), (3, 0));
    }

    /// `bytes` (a snapshot in the current format) as `version` would have written it: without
    /// the sections that version did not have, checksummed again.
    fn as_version(model: &Classifier, bytes: &[u8], version: u32) -> Vec<u8> {
        let table_end = 36 + model.table.len() * 4;
        let counts_end = table_end + model.counts.len();
        let bayes_end = counts_end + model.bayes.encoded_len();
        let stack_end = bayes_end + stack::Stack::ENCODED_LEN;
        let body = &bytes[..bytes.len() - 4];
        let mut out = body[..table_end].to_vec();
        out[8..12].copy_from_slice(&version.to_le_bytes());
        for (since, section) in [
            (3, &body[table_end..counts_end]),
            (4, &body[counts_end..bayes_end]),
            (5, &body[bayes_end..stack_end]),
            (2, &body[stack_end..]),
        ] {
            if version >= since {
                out.extend_from_slice(section);
            }
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// A synthetic two-class stream: each class draws tokens mostly from its own vocabulary,
    /// with a shared one mixed in.
    fn example(i: u64, spam: bool) -> Features {
        let mut f = Features::default();
        let own = if spam { "buy" } else { "meet" };
        for k in 0..8 {
            let word = (i.wrapping_mul(2_654_435_761).wrapping_add(k * 97)) % 40;
            f.add(features::Family::Word, format!("{own}{word}").as_bytes());
            f.add(
                features::Family::Word,
                format!("common{}", (i + k) % 30).as_bytes(),
            );
        }
        f.finish();
        f
    }

    #[test]
    fn separates_a_two_class_stream() {
        let model = Classifier::new(&config());
        assert_eq!(
            model.classify(&example(0, true)),
            None,
            "cold start: no opinion"
        );
        for i in 0..400 {
            model.train(
                &example(i, i % 2 == 0),
                if i % 2 == 0 { Class::Spam } else { Class::Ham },
                None,
            );
        }
        assert!(model.ready());
        let (mut right, mut total) = (0, 0);
        for i in 1_000..1_200 {
            let spam = i % 3 == 0;
            let p = model.classify(&example(i, spam)).unwrap();
            total += 1;
            if (p > 0.5) == spam {
                right += 1;
            }
        }
        assert!(right * 100 >= total * 95, "{right}/{total}");
    }

    #[test]
    fn learning_is_deterministic_and_snapshots_round_trip() {
        let a = Classifier::new(&config());
        let b = Classifier::new(&config());
        for i in 0..100 {
            let class = if i % 3 == 0 { Class::Spam } else { Class::Ham };
            a.train(&example(i, class == Class::Spam), class, None);
            b.train(&example(i, class == Class::Spam), class, None);
        }
        let probe = example(5_000, true);
        assert_eq!(a.probability(&probe), b.probability(&probe));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("classifier.bin");
        a.save(&path).unwrap();
        let c = Classifier::load(&config(), &path).unwrap();
        assert_eq!(c.learned(), a.learned());
        assert_eq!(c.probability(&probe), a.probability(&probe));
        // Other table size, other feature hashing, damage: refused, saying why.
        let bigger = ClassifierConfig {
            table_bits: 17,
            ..config()
        };
        let e = Classifier::load(&bigger, &path).unwrap_err();
        assert!(e.to_string().contains("2^16"), "{e}");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[12..16].copy_from_slice(&(FEATURE_VERSION + 1).to_le_bytes());
        let crc = crc32c::crc32c(&bytes[..bytes.len() - 4]);
        let n = bytes.len();
        bytes[n - 4..].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        let e = Classifier::load(&config(), &path).unwrap_err();
        assert!(e.to_string().contains("feature hashing"), "{e}");
        bytes[100] ^= 0xFF;
        std::fs::write(&path, &bytes).unwrap();
        let e = Classifier::load(&config(), &path).unwrap_err();
        assert!(e.to_string().contains("damaged"), "{e}");
        std::fs::write(&path, b"not a model").unwrap();
        assert!(matches!(
            Classifier::load(&config(), &path),
            Err(SnapshotError::Magic(_))
        ));
    }

    fn only(word: &str) -> Features {
        let mut f = Features::default();
        f.add(features::Family::Word, word.as_bytes());
        f.finish();
        f
    }

    #[test]
    fn a_feature_weighs_nothing_until_trained_min_feature_count_times() {
        let counted = ClassifierConfig {
            min_feature_count: 3,
            ..config()
        };
        let model = Classifier::new(&counted);
        let f = only("rare");
        for _ in 0..2 {
            model.train(&f, Class::Spam, None);
            assert_eq!(model.probability(&f), 0.5, "seen too few times");
        }
        // The count survives a snapshot: one more step makes it count.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("classifier.bin");
        model.save(&path).unwrap();
        let loaded = Classifier::load(&counted, &path).unwrap();
        assert_eq!(loaded.probability(&f), 0.5);
        loaded.train(&f, Class::Spam, None);
        assert!(loaded.probability(&f) > 0.5);
        // Without the threshold the same two steps already give it weight.
        let plain = Classifier::new(&config());
        plain.train(&f, Class::Spam, None);
        plain.train(&f, Class::Spam, None);
        assert!(plain.probability(&f) > 0.5);

        // A version-2 file (no counts) loads with every trained coordinate counted as seen
        // often enough, so an old model keeps its opinions.
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, as_version(&model, &bytes, 2)).unwrap();
        let old = Classifier::load(&counted, &path).unwrap();
        assert!(old.probability(&f) > 0.5);
        assert_eq!(old.probability(&only("never")), 0.5);
    }

    #[test]
    fn naive_bayes_learns_with_the_model_and_survives_a_snapshot() {
        let model = Classifier::new(&config());
        let probe = example(7_000, true);
        for i in 0..4 {
            model.train(&example(i, true), Class::Spam, None);
            model.train(&example(i, false), Class::Ham, None);
        }
        assert_eq!(model.bayes(&probe), None, "4 of each: below min_learned");
        for i in 4..60 {
            model.train(
                &example(i, i % 2 == 0),
                if i % 2 == 0 { Class::Spam } else { Class::Ham },
                None,
            );
        }
        let p = model.bayes(&probe).expect("ready");
        assert!(p > 0.9, "{p}");
        assert!(model.bayes(&example(7_001, false)).unwrap() < 0.1);
        // further passes of a bulk learn retrain the weights but count nothing twice
        let before = model.bayes.learned();
        model.retrain(probe.hashes(), Class::Spam);
        assert_eq!(model.bayes.learned(), before);
        assert_eq!(model.bayes(&probe), Some(p));

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("classifier.bin");
        model.save(&path).unwrap();
        let loaded = Classifier::load(&config(), &path).unwrap();
        assert_eq!(loaded.bayes(&probe), Some(p));

        // A version-3 file (no Bayes section) loads with the weights, and Bayes starts afresh.
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, as_version(&model, &bytes, 3)).unwrap();
        let old = Classifier::load(&config(), &path).unwrap();
        assert_eq!(old.probability(&probe), model.probability(&probe));
        assert_eq!(
            old.bayes(&probe),
            None,
            "no Bayes counts in a version-3 file"
        );
    }

    #[test]
    fn one_verdict_from_a_cold_start_and_across_a_snapshot() {
        // min_learned 5: nothing, then FTRL alone, then the stack once it has learned 5
        // held-out messages of each class (after both models were ready).
        let model = Classifier::new(&config());
        let probe = example(9_000, true);
        for i in 0..4 {
            model.train(&example(i, true), Class::Spam, None);
            model.train(&example(i, false), Class::Ham, None);
        }
        assert_eq!(model.classify(&probe), None, "cold start: no opinion");
        for i in 4..9 {
            model.train(&example(i, true), Class::Spam, None);
            model.train(&example(i, false), Class::Ham, None);
        }
        assert_eq!(
            model.stack().1,
            (4, 4),
            "held out only once both models were ready"
        );
        assert_eq!(model.classify(&probe), Some(model.probability(&probe)));
        for i in 9..80 {
            model.train(&example(i, true), Class::Spam, None);
            model.train(&example(i, false), Class::Ham, None);
        }
        let p = model.classify(&probe).expect("ready");
        let (f, b) = (model.probability(&probe), model.bayes(&probe).unwrap());
        let (lo, hi) = (
            stack::logit(f).min(stack::logit(b)),
            stack::logit(f).max(stack::logit(b)),
        );
        assert!(
            (lo - 1e-9..=hi + 1e-9).contains(&stack::logit(p)),
            "{f} {b} {p}"
        );
        assert!(p > 0.5, "{p}");
        // further passes of a bulk learn do not teach the stack (not held out), nor does
        // autolearn (its label is the filter's own verdict); both still train the models
        let before = model.stack();
        model.retrain(probe.hashes(), Class::Spam);
        assert_eq!(model.stack(), before);
        let learned = model.learned();
        assert!(model.autotrain(&example(5_000, true), Class::Spam, None));
        assert_eq!(model.stack(), before);
        assert_eq!(model.learned(), (learned.0 + 1, learned.1));
        assert!(model.train(&example(5_001, true), Class::Spam, None));
        assert_ne!(model.stack(), before, "a labelled learn is held out");

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("classifier.bin");
        model.save(&path).unwrap();
        let loaded = Classifier::load(&config(), &path).unwrap();
        assert_eq!(loaded.stack(), model.stack());
        assert_eq!(loaded.classify(&probe), model.classify(&probe));

        // A version-4 file (no stack) loads; the stack starts afresh: FTRL alone.
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, as_version(&model, &bytes, 4)).unwrap();
        let old = Classifier::load(&config(), &path).unwrap();
        assert_eq!(old.stack().1, (0, 0));
        assert_eq!(old.classify(&probe), Some(model.probability(&probe)));
    }

    #[test]
    fn l1_grows_with_the_messages_learned() {
        let growing = ClassifierConfig {
            l1_per_thousand: 1.0,
            ..config()
        };
        let plain = Classifier::new(&config());
        let sparse = Classifier::new(&growing);
        let rare = only("rare");
        // Three spam with a word nothing else has, while the models are young.
        for model in [&plain, &sparse] {
            for _ in 0..3 {
                model.train(&rare, Class::Spam, None);
            }
        }
        assert!(plain.probability(&rare) > 0.5);
        assert!(sparse.probability(&rare) > 0.5, "young: L1 still small");
        for i in 0..2_000 {
            let class = if i % 2 == 0 { Class::Spam } else { Class::Ham };
            for model in [&plain, &sparse] {
                model.train(&example(i, class == Class::Spam), class, None);
            }
        }
        assert!(plain.probability(&rare) > 0.5, "a fixed L1 keeps it");
        assert_eq!(sparse.probability(&rare), 0.5, "2,003 learned: L1 2.3");
        // The common evidence still separates the classes.
        assert!(sparse.probability(&example(9_001, true)) > 0.9);
        assert!(sparse.probability(&example(9_002, false)) < 0.1);
        let bad = ClassifierConfig {
            l1_per_thousand: -1.0,
            ..config()
        };
        assert_eq!(bad.validate(), Err(ClassifierConfigError::Parameters));
    }

    #[test]
    fn a_message_trains_once_per_class() {
        let model = Classifier::new(&config());
        let f = example(1, true);
        assert!(model.train(&f, Class::Spam, Some(42)));
        assert!(!model.train(&f, Class::Spam, Some(42)));
        assert!(
            model.train(&f, Class::Ham, Some(42)),
            "a rescue after a complaint counts"
        );
        assert!(model.train(&f, Class::Spam, None));
        assert_eq!(model.learned(), (2, 1));
    }

    #[test]
    fn trained_messages_are_remembered_across_a_snapshot() {
        let model = Classifier::new(&config());
        let f = example(1, true);
        assert!(model.train(&f, Class::Spam, Some(42)));
        assert!(model.train(&f, Class::Ham, Some(7)));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("classifier.bin");
        model.save(&path).unwrap();
        let loaded = Classifier::load(&config(), &path).unwrap();
        assert!(!loaded.train(&f, Class::Spam, Some(42)), "already trained");
        assert!(!loaded.train(&f, Class::Ham, Some(7)), "already trained");
        assert!(
            loaded.train(&f, Class::Spam, Some(7)),
            "other class, other key"
        );
        assert_eq!(loaded.learned(), (2, 1));

        // A version-1 file (weights only, no keys) still loads, remembering nothing.
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, as_version(&model, &bytes, 1)).unwrap();
        let old = Classifier::load(&config(), &path).unwrap();
        assert_eq!(old.learned(), model.learned());
        assert!(old.train(&f, Class::Spam, Some(42)));
        // A key list cut short is damage, not fewer keys.
        let mut cut = bytes[..bytes.len() - 12].to_vec();
        let crc = crc32c::crc32c(&cut);
        cut.extend_from_slice(&crc.to_le_bytes());
        std::fs::write(&path, &cut).unwrap();
        assert!(matches!(
            Classifier::load(&config(), &path),
            Err(SnapshotError::Checksum(_))
        ));
    }
}
