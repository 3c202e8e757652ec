//! One message end to end: parse → entities → shingles → store reads → rules → verdict →
//! store updates, and the JSON report of `shrike scan`.
//!
//! Owns: the order of the pipeline stages, how the rules' hits become a verdict (score, forced
//! actions, thresholds; the types are `crate::verdict`'s), what the store records for a message,
//! the report, and `ScanSettings` (the options a scanner takes) with their checks. Never
//! touches: wire formats, sockets, the configuration file (`crate::config` composes
//! `ScanSettings`; this module does not know it).

mod late;
pub mod nearmiss;
pub mod ruletest;
mod settle;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::classify::{Class, Classifier, ClassifierConfig, ClassifierConfigError, Features};
use crate::engine::{
    self, Engine, EngineConfig, EngineConfigError, LoadError, MessageData, RuleLocation,
    RuleOutcome, RuleRunner,
};
use crate::entities::{self, AttachmentEntity, EmailRole, Entities};
use crate::message::{self, Anomalies, Envelope, Limits, ParsedMessage, Prepared};
use crate::shingle::{self, Kind, Shingle};
use crate::store::{
    Counter, Increment, ReputationStore, Store, StoreConfig, StoreError, StoreKey, SystemClock,
    WindowCounts, COUNTERS,
};
use crate::verdict::{Action, SymbolHit, Verdict, VerdictConfig, VerdictConfigError};

/// Everything a scanner is configured by: the configuration's `[limits]`, `[verdict]`,
/// `[scan]`, `[engine]` and `[classifier]` sections (`Config::scan_settings` composes them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScanSettings {
    /// Limits on the work done per message.
    pub limits: Limits,
    /// Action thresholds and what the store counts as spam or ham.
    pub verdict: VerdictConfig,
    /// Store namespace and unique-count period of the scanned traffic.
    pub traffic: TrafficConfig,
    /// Lua limits: CPU budgets, memory, caches.
    pub engine: EngineConfig,
    /// The online classifier.
    pub classifier: ClassifierConfig,
    /// The configuration's `[scores]` and `[rules]` changes to the rule set.
    pub overrides: engine::Overrides,
    /// `[greylist]`.
    pub greylist: crate::greylist::GreylistConfig,
    /// `[antivirus]`.
    pub antivirus: crate::antivirus::AntivirusConfig,
    /// `[outbound]`: which mail is our users' own, its thresholds, replies, limits.
    pub outbound: crate::outbound::OutboundConfig,
}

/// Why scan settings cannot be used. Each message names the option.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SettingsError {
    #[error("{0} must be greater than 0")]
    Zero(&'static str),
    #[error(transparent)]
    Verdict(#[from] VerdictConfigError),
    #[error(transparent)]
    Engine(#[from] EngineConfigError),
    #[error(transparent)]
    Classifier(#[from] ClassifierConfigError),
    #[error(transparent)]
    Greylist(#[from] crate::greylist::GreylistConfigError),
    #[error(transparent)]
    Outbound(#[from] crate::outbound::OutboundConfigError),
}

impl ScanSettings {
    /// Checks values that parse but make no sense, in the order of the sections.
    pub fn validate(&self) -> Result<(), SettingsError> {
        let l = &self.limits;
        for (name, value) in [
            ("limits.max_message_bytes", l.max_message_bytes),
            ("limits.max_parts", l.max_parts),
            ("limits.max_depth", l.max_depth),
            ("limits.max_text_bytes", l.max_text_bytes),
            ("limits.max_header_bytes", l.max_header_bytes),
            ("limits.max_headers", l.max_headers),
        ] {
            if value == 0 {
                return Err(SettingsError::Zero(name));
            }
        }
        self.verdict.validate()?;
        self.engine.validate()?;
        if self.traffic.unique_period_secs == 0 {
            return Err(SettingsError::Zero("scan.unique_period_secs"));
        }
        self.classifier.validate()?;
        self.greylist.validate()?;
        self.outbound.validate()?;
        self.outbound.verdict(&self.verdict)?;
        Ok(())
    }
}

/// Why an in-memory scanner could not be made.
#[derive(Debug, thiserror::Error)]
pub enum InMemoryError {
    /// (The cause is in the message, not a `source`: printed with its chain it would show
    /// twice.)
    #[error("creating the store: {0}")]
    Store(StoreError),
    #[error(transparent)]
    Rules(#[from] LoadError),
}

/// Score, action and symbols from the rules' hits and the DNS list hits that `[[dnsbl]]
/// scores` gives a score (for symbols no rule gave), the action by `thresholds` unless a
/// symbol forced one.
pub fn verdict(
    thresholds: &VerdictConfig,
    outcome: &RuleOutcome,
    generation: &engine::Generation,
    lists: &[crate::dnsbl::ListHit],
) -> Verdict {
    judge(thresholds, outcome, generation, lists, None).0
}

/// `verdict`, under a `[[settings]]` entry when one is given (its scores and switched-off
/// symbols; the caller passes its thresholds), with the action a symbol forced, if any.
fn judge(
    thresholds: &VerdictConfig,
    outcome: &RuleOutcome,
    generation: &engine::Generation,
    lists: &[crate::dnsbl::ListHit],
    profile: Option<&crate::settings::Profile>,
) -> (Verdict, Option<Action>) {
    let mut v = Verdict {
        required_score: Some(thresholds.reject),
        generation: outcome.generation,
        probability: outcome.probability,
        ..Verdict::default()
    };
    let mut forced: Option<Action> = None;
    for hit in &outcome.hits {
        let meta = generation.symbols.get(&hit.symbol).and_then(|&(r, s)| {
            Some((
                generation.rules.get(r)?,
                generation.rules[r].symbols.get(s)?,
            ))
        });
        let mut score = hit.score;
        if let Some(p) = profile {
            if p.is_off(meta.map(|(r, _)| r.name.as_str()), &hit.symbol) {
                continue;
            }
            if let Some(new) = p.score(&hit.symbol) {
                // The rule's weight stays: a hit at half the declared score gets half the new one.
                let declared = meta.map_or(0.0, |(_, s)| s.score);
                score = if declared != 0.0 {
                    new * (hit.score / declared)
                } else {
                    new
                };
            }
        }
        let description = meta
            .map(|(_, s)| s.description.clone())
            .filter(|d| !d.is_empty());
        let entry = SymbolHit {
            name: hit.symbol.clone(),
            score,
            description,
            options: hit.options.clone(),
        };
        if hit.shadow {
            v.shadow.insert(hit.symbol.clone(), entry);
            continue;
        }
        v.score += score;
        if let Some(a) = hit.action {
            forced = Some(forced.map_or(a, |f| f.max(a)));
        }
        v.symbols.insert(hit.symbol.clone(), entry);
    }
    let mut scored_lists: BTreeMap<&str, SymbolHit> = BTreeMap::new();
    for hit in lists {
        let Some(score) = hit.score else { continue };
        if profile.is_some_and(|p| p.is_off(None, &hit.symbol)) {
            continue;
        }
        let score = crate::dnsbl::ListScore(
            profile
                .and_then(|p| p.score(&hit.symbol))
                .unwrap_or(score.0),
        );
        if v.symbols.contains_key(&hit.symbol) {
            // A rule gave it: the rule's score stands.
            continue;
        }
        scored_lists
            .entry(&hit.symbol)
            .or_insert_with(|| SymbolHit {
                name: hit.symbol.clone(),
                score: score.0,
                description: Some(format!("listed by {} (score from [[dnsbl]])", hit.zone)),
                options: Vec::new(),
            })
            .options
            .push(hit.name.clone());
    }
    for (symbol, entry) in scored_lists {
        v.score += entry.score;
        v.symbols.insert(symbol.to_string(), entry);
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
    if !outcome.unfinished.is_empty() {
        v.score += outcome.unfinished_score;
        v.symbols.insert(
            engine::RULES_SKIPPED.to_string(),
            SymbolHit {
                name: engine::RULES_SKIPPED.to_string(),
                score: outcome.unfinished_score,
                description: Some(
                    "rules that did not finish, at their positive scores".to_string(),
                ),
                options: outcome.unfinished.clone(),
            },
        );
    }
    v.score = (v.score * 1e4).round() / 1e4;
    v.action = forced.unwrap_or_else(|| thresholds.action_for(v.score));
    (v, forced)
}
/// `[scan]`: where a scan's statistics go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrafficConfig {
    /// Store namespace of this traffic (e.g. 0 inbound, 1 outbound).
    pub namespace: u8,
    /// Period of the distinct-recipient counts (paired shingles), seconds.
    pub unique_period_secs: u64,
}

impl Default for TrafficConfig {
    fn default() -> Self {
        TrafficConfig {
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
    /// The message's contributions to the rules' windowed features.
    pub features: engine::FeatureUpdates,
    /// An outbound message: `increments` are what replies are checked against, and nothing
    /// of it may train the classifier as received mail (autolearn skips it).
    pub outbound: bool,
}

/// The symbol (score 0) of a scan that went on without reputation: a shared store was down
/// or slower than its timeout.
pub const STORE_UNAVAILABLE: &str = "STORE_UNAVAILABLE";

/// Everything shared by the scan workers: configuration, rules, store.
pub struct Scanner {
    limits: Limits,
    verdict: VerdictConfig,
    traffic: TrafficConfig,
    engine: Arc<Engine>,
    store: Arc<dyn ReputationStore>,
    classifier: Arc<Classifier>,
    /// The store window the classifier's reputation features read (7 days, or the longest).
    reputation_window: usize,
    /// With a store that reads by kind (`ReputationStore::reads_by_kind`): the kinds read
    /// before the rules (`late.rs`).
    asked_kinds: late::AskedKinds,
    /// `[greylist]` when on.
    greylist: Option<crate::greylist::Greylist>,
    /// clamd, when `[antivirus]` names one.
    antivirus: Option<crate::antivirus::Antivirus>,
    /// `[outbound]`: direction, replies, correspondents, per-user limits.
    outbound: crate::outbound::Outbound,
    /// The thresholds of outbound mail (`[outbound.actions]` over `[verdict]`).
    outbound_verdict: VerdictConfig,
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
        settings: &ScanSettings,
        rules: RuleLocation,
        store: Arc<dyn ReputationStore>,
    ) -> Result<Arc<Scanner>, LoadError> {
        let classifier = Arc::new(Classifier::new(&settings.classifier));
        Scanner::with_classifier(settings, rules, store, classifier)
    }

    /// As `new`, with a classifier restored from a snapshot.
    pub fn with_classifier(
        settings: &ScanSettings,
        rules: RuleLocation,
        store: Arc<dyn ReputationStore>,
        classifier: Arc<Classifier>,
    ) -> Result<Arc<Scanner>, LoadError> {
        let windows = store.windows_secs();
        let reputation_window = windows
            .iter()
            .position(|&w| w == 7 * 86_400)
            .unwrap_or(windows.len().saturating_sub(1));
        let engine = Engine::with_overrides(
            settings.engine.clone(),
            rules,
            settings.overrides.clone(),
            Arc::clone(&store),
            settings.traffic.namespace,
        )?;
        let greylist = crate::greylist::Greylist::new(
            &settings.greylist,
            Arc::clone(&store),
            settings.traffic.namespace,
        );
        let outbound = crate::outbound::Outbound::new(&settings.outbound, Arc::clone(&store));
        Ok(Arc::new(Scanner {
            limits: settings.limits.clone(),
            verdict: settings.verdict.clone(),
            traffic: settings.traffic.clone(),
            engine,
            store,
            classifier,
            reputation_window,
            asked_kinds: late::AskedKinds::new(&crate::classify::features::REPUTATION_KINDS),
            greylist,
            antivirus: crate::antivirus::Antivirus::new(&settings.antivirus),
            outbound,
            outbound_verdict: settings
                .outbound
                .verdict(&settings.verdict)
                .unwrap_or_else(|_| settings.verdict.clone()),
        }))
    }

    /// A scanner over a fresh in-memory store (configured by `store`) on the system clock:
    /// offline scans and rule tests.
    pub fn in_memory(
        settings: &ScanSettings,
        store: &StoreConfig,
        rules: RuleLocation,
    ) -> Result<Arc<Scanner>, InMemoryError> {
        let store = Store::new(store, Arc::new(SystemClock)).map_err(InMemoryError::Store)?;
        Ok(Scanner::new(settings, rules, Arc::new(store))?)
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

    /// `[outbound]` ready for scans (the status page's users over a limit).
    pub fn outbound(&self) -> &crate::outbound::Outbound {
        &self.outbound
    }

    /// The clamd client, when `[antivirus]` is on.
    pub fn antivirus(&self) -> Option<&crate::antivirus::Antivirus> {
        self.antivirus.as_ref()
    }

    /// What the rules see of an analysed message.
    fn message_data<'a>(
        &'a self,
        analysis: &'a Analysis<'_>,
        stats: &'a [WindowCounts],
        late: Option<&'a dyn crate::engine::view::LateStats>,
        envelope: &'a Envelope,
        observe: bool,
        net: Option<&'a crate::netcheck::NetChecks>,
    ) -> MessageData<'a> {
        MessageData {
            message: &analysis.message,
            entities: &analysis.entities,
            shingles: &analysis.shingles,
            stats,
            late,
            anomalies: &analysis.anomalies,
            envelope,
            now: self.store.now(),
            max_html_bytes: self.engine.config().max_html_bytes,
            classifier: Some(&self.classifier),
            reputation_window: self.reputation_window,
            observe,
            net,
            traffic: Default::default(),
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
            namespace: self.traffic.namespace,
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
                .increment_unique(pair, unique, self.traffic.unique_period_secs);
        }
        updates.features.apply(&*self.store);
    }

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
        self.scan_as(input, envelope, false, None)
    }

    /// `scan` with the results of the message's network checks (`netcheck`), gathered
    /// before the message reached this worker: the rules read them, nothing here waits.
    pub fn scan_with<'p>(
        &mut self,
        input: &'p Prepared<'_>,
        envelope: &Envelope,
        net: Option<&crate::netcheck::NetChecks>,
    ) -> Scanned<'p> {
        self.scan_as(input, envelope, false, net)
    }

    /// A trial scan (the web UI's Test page): as `scan`, but `ratelimit` answers without
    /// counting, as for a learn. The caller applies none of its `updates`.
    pub fn trial<'p>(
        &mut self,
        input: &'p Prepared<'_>,
        envelope: &Envelope,
        net: Option<&crate::netcheck::NetChecks>,
    ) -> Scanned<'p> {
        self.scan_as(input, envelope, true, net)
    }

    /// `scan`, or with `observe` the scan of a learn: the rules run but record nothing.
    fn scan_as<'p>(
        &mut self,
        input: &'p Prepared<'_>,
        envelope: &Envelope,
        observe: bool,
        net: Option<&crate::netcheck::NetChecks>,
    ) -> Scanned<'p> {
        let sc = &*self.scanner;
        let start = std::time::Instant::now();
        // clamd reads the message as received; a learn or a trial scan does not ask it.
        let virus = sc
            .antivirus
            .as_ref()
            .filter(|_| !observe)
            .map(|av| av.scan(input.bytes()));
        let mut analysis = analyze(input, envelope, &sc.limits);
        if let Some(domain) = net.and_then(|n| n.auth.aligned_dkim_domain()) {
            let hashes = crate::shingle::of_value(crate::shingle::Kind::DkimDomain, domain);
            if let Some(&hash) = hashes.first() {
                analysis.shingles.push(Shingle {
                    kind: crate::shingle::Kind::DkimDomain,
                    hash,
                });
            }
        }
        let analyzed = std::time::Instant::now();
        self.keys.clear();
        self.keys
            .extend(analysis.shingles.iter().map(|s| sc.key(s)));
        // A shared store that cannot answer in time: the scan goes on without reputation.
        let by_kind = sc.store.reads_by_kind();
        let (stats, mut store_unavailable) = if by_kind {
            (Vec::new(), false)
        } else {
            match sc.store.lookup_checked(&self.keys) {
                Ok(stats) => (stats, false),
                Err(_) => (
                    self.keys
                        .iter()
                        .map(|_| WindowCounts {
                            windows: crate::store::WindowSums::zeros(sc.store.windows_secs().len()),
                        })
                        .collect(),
                    true,
                ),
            }
        };
        let late = by_kind.then(|| {
            late::Late::prefetch(&*sc.store, &analysis.shingles, &self.keys, &sc.asked_kinds)
        });
        let outbound = sc.outbound.direction(envelope) == crate::outbound::Direction::Outbound;
        let recipients = recipients(&analysis, envelope);
        let facts = if outbound {
            crate::outbound::InboundFacts::default()
        } else {
            let ids = reply_ids(&analysis.message);
            sc.outbound.inbound_facts(
                &ids,
                analysis.entities.from().map(|e| e.address.as_str()),
                &recipients,
                net.map(|n| &n.auth),
            )
        };
        let looked_up = std::time::Instant::now();
        let mut data = sc.message_data(
            &analysis,
            &stats,
            late.as_ref()
                .map(|l| l as &dyn crate::engine::view::LateStats),
            envelope,
            observe,
            net,
        );
        data.traffic = crate::engine::view::TrafficFacts {
            outbound,
            replied: facts.replied,
            correspondent: facts.correspondent,
        };
        let mut outcome = self.rules.run(&data, sample_of(&analysis));
        let stats = match late {
            Some(late) => {
                store_unavailable = late.unavailable();
                late.into_stats()
            }
            None => stats,
        };
        let features = outcome.features.take();
        let feature_updates = std::mem::take(&mut outcome.feature_updates);
        let lists = net.map_or(&[][..], |n| &n.lists[..]);
        // Descriptions come from the generation that judged the message, even if a reload
        // swapped in another one meanwhile.
        let current;
        let generation = match self.rules.generation() {
            Some(generation) => generation,
            None => {
                current = sc.engine.generation();
                &current
            }
        };
        let thresholds = if outbound {
            &sc.outbound_verdict
        } else {
            &sc.verdict
        };
        let base = verdict(thresholds, &outcome, generation, lists);
        let updates_from = base.score;
        // (What the senders are only matters to settings entries: none, no work.)
        let senders = if generation.overrides.settings.is_empty() {
            settle::Senders::default()
        } else {
            settle::Senders::new(
                envelope,
                analysis.entities.from().map(|e| e.address.as_str()),
                net.map(|n| &n.auth),
            )
        };
        let mut verdict = settle::settle(base, &outcome, generation, lists, envelope, &senders);
        if let Some(finding) = &virus {
            settle::antivirus(finding, sc.antivirus.as_ref(), &mut verdict);
        }
        if outbound {
            // Our own users' mail is never deferred to see whether it is retried.
            if verdict.action == Action::Greylist {
                verdict.action = Action::NoAction;
            }
        } else if !observe {
            if let Some(greylist) = &sc.greylist {
                settle::greylist(greylist, &mut verdict, generation, &sc.verdict, envelope);
            }
        }
        if !observe && outbound {
            if let Some(user) = envelope.user.as_deref().filter(|u| !u.trim().is_empty()) {
                let spam = verdict.action >= Action::AddHeader;
                if let Some(over) = sc.outbound.limit(user, &recipients, spam) {
                    let action = sc.outbound.config().limits.action;
                    verdict.action = verdict.action.max(action);
                    verdict.symbols.insert(
                        crate::outbound::OUTBOUND_LIMIT.to_string(),
                        SymbolHit {
                            name: crate::outbound::OUTBOUND_LIMIT.to_string(),
                            score: 0.0,
                            description: Some(
                                "the authenticated user is over an outbound limit".into(),
                            ),
                            options: vec![user.to_string(), over.to_string()],
                        },
                    );
                }
            }
        }
        if store_unavailable {
            verdict.symbols.insert(
                STORE_UNAVAILABLE.to_string(),
                crate::verdict::SymbolHit {
                    name: STORE_UNAVAILABLE.to_string(),
                    score: 0.0,
                    description: Some(
                        "the reputation store did not answer in time: scanned without reputation"
                            .into(),
                    ),
                    options: Vec::new(),
                },
            );
        }
        let times = StageTimes {
            analyze: analyzed - start,
            lookup: looked_up - analyzed,
            rules: looked_up.elapsed(),
        };
        // What the global settings made of the message: one recipient's settings do not move
        // the reputation all share (settle.rs).
        let mut updates = if outbound {
            // Our users' own mail is not received mail: it feeds none of the inbound
            // reputation, features or paired counts, only what replies are checked against,
            // and only once accepted (mail refused or held is not sent).
            let sent = verdict.action < Action::AddHeader;
            Updates {
                increments: if sent && !observe {
                    let from = analysis
                        .entities
                        .from()
                        .map(|e| e.address.as_str())
                        .or(envelope.mail_from.as_deref());
                    sc.outbound
                        .sent(analysis.entities.message_id.as_deref(), from, &recipients)
                } else {
                    Vec::new()
                },
                ..Updates::default()
            }
        } else {
            let mut updates = self.updates(&analysis, updates_from);
            updates.features = feature_updates;
            updates
        };
        updates.outbound = outbound;
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
        sc.train(scanned, class).then_some(class)
    }

    fn updates(&self, analysis: &Analysis<'_>, score: f64) -> Updates {
        let sc = &*self.scanner;
        let mut counts = [0u64; COUNTERS];
        counts[Counter::Seen as usize] = 1;
        if score >= sc.verdict.count_spam_at {
            counts[Counter::Spam as usize] = 1;
        } else if score < sc.verdict.count_ham_below {
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
        Updates {
            increments,
            pairs,
            features: engine::FeatureUpdates::default(),
            outbound: false,
        }
    }
}

/// The recipients of a message: the envelope's, else the To and Cc addresses.
fn recipients(analysis: &Analysis<'_>, envelope: &Envelope) -> Vec<String> {
    if !envelope.rcpt_to.is_empty() {
        return envelope.rcpt_to.clone();
    }
    analysis
        .entities
        .emails
        .iter()
        .filter(|e| matches!(e.role, EmailRole::To | EmailRole::Cc))
        .map(|e| e.address.clone())
        .collect()
}

/// The ids a message replies to: every id of `In-Reply-To`, then `References`' from the newest.
fn reply_ids<'m>(message: &'m message::ParsedMessage<'_>) -> Vec<&'m str> {
    let Some(mime) = &message.mime else {
        return Vec::new();
    };
    let list = |v: &'m mail_parser::HeaderValue<'_>| -> Vec<&'m str> {
        v.as_text_list()
            .map(|l| l.iter().map(|c| c.as_ref()).collect())
            .unwrap_or_default()
    };
    let mut ids = list(mime.in_reply_to());
    ids.truncate(crate::outbound::MAX_REPLY_IDS);
    let refs = list(mime.references());
    let room = crate::outbound::MAX_REPLY_IDS - ids.len();
    ids.extend(refs.iter().rev().take(room));
    ids
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

/// The JSON object `shrike scan` prints for one message (README.md, `shrike scan`).
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

/// The `entities` object: the flat lists README.md's `shrike scan` promises, then the detailed records.
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
