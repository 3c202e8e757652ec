//! One message end to end: parse → entities → shingles → store reads → rules → verdict →
//! store updates, and the JSON report of `shrike scan`.
//!
//! Owns: the order of the pipeline stages, the verdict (score, thresholds, forced actions), what
//! the store records for a message, and the report. Never touches: wire formats, sockets.

pub mod ruletest;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::classify::{Class, Classifier, Features};
use crate::engine::{self, Engine, LoadError, MessageData, RuleLocation, RuleOutcome, RuleRunner};
use crate::entities::{self, AttachmentEntity, Entities};
use crate::message::{self, Anomalies, Envelope, Limits, ParsedMessage, Prepared};
use crate::shingle::{self, Kind, Shingle};
use crate::store::{
    Counter, Increment, ReputationStore, Store, StoreKey, SystemClock, WindowCounts, COUNTERS,
};

pub use crate::engine::Action;

/// One symbol in a verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SymbolHit {
    pub name: String,
    pub score: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub options: Vec<String>,
}

/// The outcome of a scan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    pub score: f64,
    pub action: Action,
    pub symbols: BTreeMap<String, SymbolHit>,
    /// Hits of rules in shadow or test mode: counted and reported, not applied.
    pub shadow: BTreeMap<String, SymbolHit>,
    /// The score at which the message is rejected (rspamd's `required_score`).
    pub required_score: Option<f64>,
    /// The rule-set generation that judged it (0: no rules ran).
    pub generation: u64,
    /// The classifier's spam probability, when a rule asked and the model had an opinion.
    pub probability: Option<f64>,
}

impl Default for Verdict {
    fn default() -> Self {
        Verdict {
            score: 0.0,
            action: Action::NoAction,
            symbols: BTreeMap::new(),
            shadow: BTreeMap::new(),
            required_score: None,
            generation: 0,
            probability: None,
        }
    }
}

/// Score thresholds of the actions, and what the store counts as spam or ham.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VerdictConfig {
    pub reject: f64,
    /// Optional: a score at which to answer with a temporary failure.
    pub soft_reject: Option<f64>,
    /// Optional: a score at which to mark the subject.
    pub rewrite_subject: Option<f64>,
    pub add_header: f64,
    pub greylist: f64,
    /// A verdict scoring at least this is recorded as spam in the reputation store.
    pub count_spam_at: f64,
    /// A verdict scoring below this is recorded as ham (in between: only seen).
    pub count_ham_below: f64,
}

impl Default for VerdictConfig {
    fn default() -> Self {
        VerdictConfig {
            reject: 15.0,
            soft_reject: None,
            rewrite_subject: None,
            add_header: 6.0,
            greylist: 4.0,
            count_spam_at: 6.0,
            count_ham_below: 2.0,
        }
    }
}

impl VerdictConfig {
    /// The action a score earns by thresholds alone.
    pub fn action_for(&self, score: f64) -> Action {
        let at = |t: Option<f64>| t.is_some_and(|t| score >= t);
        if score >= self.reject {
            Action::Reject
        } else if at(self.soft_reject) {
            Action::SoftReject
        } else if at(self.rewrite_subject) {
            Action::RewriteSubject
        } else if score >= self.add_header {
            Action::AddHeader
        } else if score >= self.greylist {
            Action::Greylist
        } else {
            Action::NoAction
        }
    }

    /// Checks the thresholds are numbers and in order.
    pub fn validate(&self) -> Result<(), String> {
        let all = [
            Some(self.reject),
            self.soft_reject,
            self.rewrite_subject,
            Some(self.add_header),
            Some(self.greylist),
            Some(self.count_spam_at),
            Some(self.count_ham_below),
        ];
        if all.iter().flatten().any(|t| !t.is_finite()) {
            return Err("verdict thresholds must be finite numbers".into());
        }
        if !(self.greylist <= self.add_header && self.add_header <= self.reject) {
            return Err("verdict thresholds must satisfy greylist <= add_header <= reject".into());
        }
        if self.count_ham_below > self.count_spam_at {
            return Err("verdict.count_ham_below must not exceed count_spam_at".into());
        }
        Ok(())
    }

    /// Score, action and symbols from the rules' hits.
    pub fn verdict(&self, outcome: &RuleOutcome, generation: &engine::Generation) -> Verdict {
        let mut v = Verdict {
            required_score: Some(self.reject),
            generation: outcome.generation,
            probability: outcome.probability,
            ..Verdict::default()
        };
        let mut forced: Option<Action> = None;
        for hit in &outcome.hits {
            let description = generation
                .symbols
                .get(&hit.symbol)
                .map(|&(r, s)| generation.rules[r].symbols[s].description.clone())
                .filter(|d| !d.is_empty());
            let entry = SymbolHit {
                name: hit.symbol.clone(),
                score: hit.score,
                description,
                options: hit.options.clone(),
            };
            if hit.shadow {
                v.shadow.insert(hit.symbol.clone(), entry);
                continue;
            }
            v.score += hit.score;
            if let Some(a) = hit.action {
                forced = Some(forced.map_or(a, |f| f.max(a)));
            }
            v.symbols.insert(hit.symbol.clone(), entry);
        }
        for (symbol, list) in [
            (engine::RULE_ERROR, &outcome.errors),
            (engine::RULE_TIMEOUT, &outcome.timeouts),
        ] {
            if !list.is_empty() {
                v.symbols.insert(
                    symbol.to_string(),
                    SymbolHit {
                        name: symbol.to_string(),
                        score: 0.0,
                        description: None,
                        options: list.iter().map(|(r, e)| format!("{r}: {e}")).collect(),
                    },
                );
            }
        }
        v.score = (v.score * 1e4).round() / 1e4;
        v.action = forced.unwrap_or_else(|| self.action_for(v.score));
        v
    }
}

/// Where a scan's statistics go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScanConfig {
    /// Store namespace of this traffic (e.g. 0 inbound, 1 outbound).
    pub namespace: u8,
    /// Period of the distinct-recipient counts (paired shingles), seconds.
    pub unique_period_secs: u64,
}

impl Default for ScanConfig {
    fn default() -> Self {
        ScanConfig {
            namespace: 0,
            unique_period_secs: 86_400,
        }
    }
}

/// What the store records for a message after its verdict (off the reply path: the daemon
/// applies it after answering).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Updates {
    pub increments: Vec<Increment>,
    /// `(pair, unique)` keys of the paired shingles.
    pub pairs: Vec<(StoreKey, StoreKey)>,
}

/// Everything shared by the scan workers: configuration, rules, store.
pub struct Scanner {
    limits: Limits,
    verdict: VerdictConfig,
    scan: ScanConfig,
    engine: Arc<Engine>,
    store: Arc<dyn ReputationStore>,
    classifier: Arc<Classifier>,
    /// The store window the classifier's reputation features read (7 days, or the longest).
    reputation_window: usize,
}

impl std::fmt::Debug for Scanner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scanner")
            .field("engine", &self.engine)
            .finish()
    }
}

/// A scanned message.
#[derive(Debug)]
pub struct Scanned<'p> {
    pub analysis: Analysis<'p>,
    pub verdict: Verdict,
    pub updates: Updates,
    /// Wall time of each stage.
    pub times: StageTimes,
    /// The classifier's features as a rule weighed them (`msg:classify()`), if one did.
    pub features: Option<Features>,
    /// What the store said of each shingle before the scan (aligned with the shingles).
    pub stats: Vec<WindowCounts>,
}

/// Wall time of the stages of one scan (metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StageTimes {
    /// Parse, entities and shingles.
    pub analyze: std::time::Duration,
    /// The store reads.
    pub lookup: std::time::Duration,
    /// The rules and the verdict.
    pub rules: std::time::Duration,
}

impl Scanner {
    /// Loads the rules and wires them to the store.
    pub fn new(
        config: &crate::config::Config,
        rules: RuleLocation,
        store: Arc<dyn ReputationStore>,
    ) -> Result<Arc<Scanner>, LoadError> {
        let classifier = Arc::new(Classifier::new(&config.classifier));
        Scanner::with_classifier(config, rules, store, classifier)
    }

    /// As `new`, with a classifier restored from a snapshot.
    pub fn with_classifier(
        config: &crate::config::Config,
        rules: RuleLocation,
        store: Arc<dyn ReputationStore>,
        classifier: Arc<Classifier>,
    ) -> Result<Arc<Scanner>, LoadError> {
        let windows = store.windows_secs();
        let reputation_window = windows
            .iter()
            .position(|&w| w == 7 * 86_400)
            .unwrap_or(windows.len().saturating_sub(1));
        let engine = Engine::new(
            config.engine.clone(),
            rules,
            Arc::clone(&store),
            config.scan.namespace,
        )?;
        Ok(Arc::new(Scanner {
            limits: config.limits.clone(),
            verdict: config.verdict.clone(),
            scan: config.scan.clone(),
            engine,
            store,
            classifier,
            reputation_window,
        }))
    }

    /// A scanner over a fresh in-memory store on the system clock: offline scans and rule
    /// tests. The error says what failed (the store configuration or the rules).
    pub fn in_memory(
        config: &crate::config::Config,
        rules: RuleLocation,
    ) -> Result<Arc<Scanner>, String> {
        let store = Store::new(&config.store, Arc::new(SystemClock))
            .map_err(|e| format!("creating the store: {e}"))?;
        Scanner::new(config, rules, Arc::new(store)).map_err(|e| e.to_string())
    }

    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    pub fn store(&self) -> &Arc<dyn ReputationStore> {
        &self.store
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn classifier(&self) -> &Arc<Classifier> {
        &self.classifier
    }

    /// What the rules see of an analysed message.
    fn message_data<'a>(
        &'a self,
        analysis: &'a Analysis<'_>,
        stats: &'a [WindowCounts],
        envelope: &'a Envelope,
        observe: bool,
    ) -> MessageData<'a> {
        MessageData {
            message: &analysis.message,
            entities: &analysis.entities,
            shingles: &analysis.shingles,
            stats,
            anomalies: &analysis.anomalies,
            envelope,
            now: self.store.now(),
            max_html_bytes: self.engine.config().max_html_bytes,
            classifier: Some(&self.classifier),
            reputation_window: self.reputation_window,
            observe,
        }
    }

    /// A worker for one scan thread (owns a Lua state; not `Send`).
    pub fn worker(self: &Arc<Self>) -> ScanWorker {
        ScanWorker {
            scanner: Arc::clone(self),
            rules: self.engine.runner(),
            keys: Vec::new(),
        }
    }

    /// The store key of a shingle in this scanner's namespace.
    pub fn key(&self, s: &Shingle) -> StoreKey {
        StoreKey {
            namespace: self.scan.namespace,
            kind: s.kind.id(),
            hash: s.hash,
        }
    }

    /// Records a message's updates in the store.
    pub fn apply(&self, updates: &Updates) {
        if !updates.increments.is_empty() {
            self.store.record_many(&updates.increments);
        }
        for &(pair, unique) in &updates.pairs {
            self.store
                .increment_unique(pair, unique, self.scan.unique_period_secs);
        }
    }

    /// A user's complaint (`Counter::Complaint`) or rescue (`Counter::Rescue`) against every
    /// shingle of a message: each call counts once, also for the same message again.
    /// Returns the number of keys counted.
    pub fn learn(&self, analysis: &Analysis<'_>, counter: Counter) -> usize {
        let increments: Vec<Increment> = counted(&analysis.shingles)
            .map(|s| Increment::one(self.key(s), counter))
            .collect();
        self.store.record_many(&increments);
        increments.len()
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
    /// asked, or the model had no opinion yet) the message's features with all applied symbols.
    pub fn features<'s>(&self, scanned: &'s Scanned<'_>) -> std::borrow::Cow<'s, Features> {
        match &scanned.features {
            Some(f) => std::borrow::Cow::Borrowed(f),
            None => {
                let envelope = Envelope::default();
                std::borrow::Cow::Owned(
                    self.message_data(&scanned.analysis, &scanned.stats, &envelope, true)
                        .classifier_features(scanned.verdict.symbols.keys().map(String::as_str)),
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
    /// Whether the classifier trained on it (not when it already had this message).
    pub trained: bool,
    /// The classifier's journal could not record the training (the learn is not durable).
    pub journal_error: Option<String>,
}

/// Shingles whose keys count messages (the paired ones count distinct recipients instead).
fn counted(shingles: &[Shingle]) -> impl Iterator<Item = &Shingle> {
    shingles
        .iter()
        .filter(|s| !matches!(s.kind, Kind::PairSenderRcpt | Kind::UniqueSender))
}

/// A stable per-message number choosing where test-mode rules apply.
fn sample_of(analysis: &Analysis<'_>) -> u64 {
    match &analysis.entities.message_id {
        Some(id) => shingle::hash_bytes(id.as_bytes()),
        None => {
            let raw = analysis.message.raw;
            shingle::hash_bytes(&raw[..raw.len().min(4096)])
        }
    }
}

/// Scans on one thread.
pub struct ScanWorker {
    scanner: Arc<Scanner>,
    rules: RuleRunner,
    /// Store keys of the message being scanned (reused between scans).
    keys: Vec<StoreKey>,
}

impl ScanWorker {
    pub fn scanner(&self) -> &Arc<Scanner> {
        &self.scanner
    }

    pub fn rules(&mut self) -> &mut RuleRunner {
        &mut self.rules
    }

    /// Scans one prepared message: the pure stages, the store reads, the rules and the
    /// verdict. Nothing is recorded: pass `updates` to `Scanner::apply` (after replying).
    pub fn scan<'p>(&mut self, input: &'p Prepared<'_>, envelope: &Envelope) -> Scanned<'p> {
        self.scan_as(input, envelope, false)
    }

    /// `scan`, or with `observe` the scan of a learn: the rules run but record nothing.
    fn scan_as<'p>(
        &mut self,
        input: &'p Prepared<'_>,
        envelope: &Envelope,
        observe: bool,
    ) -> Scanned<'p> {
        let sc = &*self.scanner;
        let start = std::time::Instant::now();
        let analysis = analyze(input, envelope, &sc.limits);
        let analyzed = std::time::Instant::now();
        self.keys.clear();
        self.keys
            .extend(analysis.shingles.iter().map(|s| sc.key(s)));
        let stats: Vec<WindowCounts> = sc.store.lookup_many(&self.keys);
        let looked_up = std::time::Instant::now();
        let data = sc.message_data(&analysis, &stats, envelope, observe);
        let mut outcome = self.rules.run(&data, sample_of(&analysis));
        let features = outcome.features.take();
        // Descriptions come from the generation that judged the message, even if a reload
        // swapped in another one meanwhile.
        let verdict = match self.rules.generation() {
            Some(generation) => sc.verdict.verdict(&outcome, generation),
            None => sc.verdict.verdict(&outcome, &sc.engine.generation()),
        };
        let times = StageTimes {
            analyze: analyzed - start,
            lookup: looked_up - analyzed,
            rules: looked_up.elapsed(),
        };
        let updates = self.updates(&analysis, &verdict);
        Scanned {
            analysis,
            verdict,
            updates,
            times,
            features,
            stats,
        }
    }

    /// `/learnspam` and `/learnham`, and the simulated users of a replay: scans a raw message
    /// (recording nothing of the scan), records one complaint or rescue against each of its
    /// counted shingles, and trains the classifier on it.
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
        let scanned = self.scan_as(&input, &Envelope::default(), true);
        let keys = counter.map_or(0, |c| sc.learn(&scanned.analysis, c));
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
            journal_error,
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
        sc.train(scanned, class).then_some(class)
    }

    fn updates(&self, analysis: &Analysis<'_>, verdict: &Verdict) -> Updates {
        let sc = &*self.scanner;
        let mut counts = [0u64; COUNTERS];
        counts[Counter::Seen as usize] = 1;
        if verdict.score >= sc.verdict.count_spam_at {
            counts[Counter::Spam as usize] = 1;
        } else if verdict.score < sc.verdict.count_ham_below {
            counts[Counter::Ham as usize] = 1;
        }
        let increments = counted(&analysis.shingles)
            .map(|s| Increment {
                key: sc.key(s),
                counts,
            })
            .collect();
        let unique = analysis
            .shingles
            .iter()
            .find(|s| s.kind == Kind::UniqueSender)
            .map(|s| sc.key(s));
        let pairs = match unique {
            Some(u) => analysis
                .shingles
                .iter()
                .filter(|s| s.kind == Kind::PairSenderRcpt)
                .map(|s| (sc.key(s), u))
                .collect(),
            None => Vec::new(),
        };
        Updates { increments, pairs }
    }
}

/// A message after the pure stages of the pipeline.
#[derive(Debug)]
pub struct Analysis<'a> {
    pub message: ParsedMessage<'a>,
    pub entities: Entities,
    pub shingles: Vec<Shingle>,
    /// Anomalies of parsing and extraction together.
    pub anomalies: Anomalies,
}

/// Parses prepared input (`message::prepare`), extracts its entities and computes its shingles.
/// Never fails.
pub fn analyze<'p>(input: &'p Prepared<'_>, envelope: &Envelope, limits: &Limits) -> Analysis<'p> {
    let message = message::parse(input, limits);
    let entities = entities::extract(&message, envelope);
    let shingles = shingle::compute(&message, &entities, envelope);
    let mut anomalies = message.anomalies.clone();
    for &a in &entities.anomalies {
        anomalies.add(a);
    }
    Analysis {
        message,
        entities,
        shingles,
        anomalies,
    }
}

/// The JSON object `shrike scan` prints for one message (DESIGN.md §3).
#[derive(Debug, Serialize)]
pub struct Report<'r> {
    pub file: &'r str,
    pub score: f64,
    pub action: Action,
    pub symbols: &'r BTreeMap<String, SymbolHit>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub shadow: &'r BTreeMap<String, SymbolHit>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub required_score: Option<f64>,
    #[serde(skip_serializing_if = "is_zero")]
    pub generation: u64,
    pub subject: &'r str,
    pub subject_normalized: &'r str,
    /// The Date header's time and zone problem; left out without either.
    #[serde(skip_serializing_if = "message::DateFacts::is_empty")]
    pub date: &'r message::DateFacts,
    pub entities: ReportEntities<'r>,
    pub shingles: &'r [Shingle],
    pub anomalies: &'r Anomalies,
    pub mixed_script_words: &'r [String],
}

/// The `entities` object: the flat lists of DESIGN.md §3, then the detailed records.
#[derive(Debug, Serialize)]
pub struct ReportEntities<'r> {
    pub urls: Vec<&'r str>,
    pub hosts: &'r [String],
    pub domains: &'r [String],
    pub emails: Vec<&'r str>,
    pub ips: Vec<String>,
    pub attachments: &'r [AttachmentEntity],
    #[serde(flatten)]
    pub details: Details<'r>,
}

/// Detailed entity records with their sources and roles.
#[derive(Debug, Serialize)]
pub struct Details<'r> {
    pub links: &'r [entities::UrlEntity],
    pub addresses: &'r [entities::EmailEntity],
    pub received: &'r [entities::IpEntity],
    /// Every Received header's time and bare-HELO flag, top-down (`received[].hop` indexes it).
    pub hops: &'r [entities::ReceivedHop],
    pub anchors: &'r [entities::Anchor],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<&'r str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id_domain: Option<&'r str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mailer: Option<&'r str>,
}

impl Analysis<'_> {
    /// The message's URLs, each once, in order of appearance.
    pub fn distinct_urls(&self) -> Vec<&str> {
        distinct(self.entities.urls.iter().map(|u| u.url.as_str()))
    }

    /// The message's email addresses, each once, in order of appearance.
    pub fn distinct_emails(&self) -> Vec<&str> {
        distinct(self.entities.emails.iter().map(|m| m.address.as_str()))
    }

    /// The report for this analysis and verdict.
    pub fn report<'r>(&'r self, file: &'r str, verdict: &'r Verdict) -> Report<'r> {
        let e = &self.entities;
        let urls = self.distinct_urls();
        let emails = self.distinct_emails();
        let mut ips: Vec<String> = Vec::with_capacity(e.ips.len());
        for ip in &e.ips {
            let s = ip.ip.to_string();
            if !ips.contains(&s) {
                ips.push(s);
            }
        }
        Report {
            file,
            score: verdict.score,
            action: verdict.action,
            symbols: &verdict.symbols,
            shadow: &verdict.shadow,
            required_score: verdict.required_score,
            generation: verdict.generation,
            subject: &self.message.subject.display,
            subject_normalized: &self.message.subject.normalized,
            date: &self.message.date,
            entities: ReportEntities {
                urls,
                hosts: &e.hosts,
                domains: &e.domains,
                emails,
                ips,
                attachments: &e.attachments,
                details: Details {
                    links: &e.urls,
                    addresses: &e.emails,
                    received: &e.ips,
                    hops: &e.hops,
                    anchors: &e.anchors,
                    message_id: e.message_id.as_deref(),
                    message_id_domain: e.message_id_domain.as_deref(),
                    mailer: e.mailer.as_deref(),
                },
            },
            shingles: &self.shingles,
            anomalies: &self.anomalies,
            mixed_script_words: &self.message.mixed_script_words,
        }
    }
}

/// Each item once, first occurrence first.
fn distinct<'a>(items: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut seen = rustc_hash::FxHashSet::default();
    items.filter(|item| seen.insert(*item)).collect()
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
