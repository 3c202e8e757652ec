//! One message end to end: parse → entities → shingles → store reads → rules → verdict →
//! store updates, and the JSON report of `shrike scan`.
//!
//! Here: the scanner and its workers, the pipeline's order, what the store records. Beside it:
//! `settings.rs` (`ScanSettings` and its checks), `judge.rs` (hits to a verdict), `learn.rs`
//! (complaints, rescues, training, autolearn), `report.rs` (the `scan` JSON), `settle.rs`
//! (`[[settings]]`, antivirus, greylisting after the verdict), `late.rs` (store reads by kind),
//! `ruletest.rs` and `nearmiss.rs` (rule tests).
//!
//! Owns: the order of the pipeline stages, how the rules' hits become a verdict (score, forced
//! actions, thresholds; the types are `crate::verdict`'s), what the store records for a message,
//! the report, and `ScanSettings` (the options a scanner takes) with their checks. Never
//! touches: wire formats, sockets, the configuration file (`crate::config` composes
//! `ScanSettings`; this module does not know it).

mod judge;
mod late;
mod learn;
pub mod nearmiss;
mod report;
pub mod ruletest;
mod settings;
mod settle;

use judge::judge;
pub use judge::verdict;
pub use learn::{learn_counter, Learned};
pub use report::{Details, Report, ReportEntities};
pub use settings::{ScanSettings, SettingsError, TrafficConfig};

use std::sync::Arc;

use crate::classify::{Classifier, Features};
use crate::engine::{self, Engine, LoadError, MessageData, RuleLocation, RuleRunner};
use crate::entities::{self, EmailRole, Entities};
use crate::message::{self, Anomalies, Envelope, Limits, ParsedMessage, Prepared};
use crate::shingle::{self, Kind, Shingle};
use crate::store::{
    Counter, Increment, ReputationStore, Store, StoreConfig, StoreError, StoreKey, SystemClock,
    WindowCounts, COUNTERS,
};
use crate::verdict::{Action, Verdict, VerdictConfig};

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
                    verdict.note(
                        crate::outbound::OUTBOUND_LIMIT,
                        Some("the authenticated user is over an outbound limit"),
                        vec![user.to_string(), over.to_string()],
                    );
                }
            }
        }
        if store_unavailable {
            verdict.note(
                STORE_UNAVAILABLE,
                Some("the reputation store did not answer in time: scanned without reputation"),
                Vec::new(),
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

/// The recipients of a message: the envelope's, else the To and Cc addresses. Not
/// `Entities::recipients` (what rules see): settings and greylisting act on the SMTP envelope as
/// the MTA gave it, every recipient, where the entities keep parsed addresses up to
/// `entities::MAX_EMAILS` counted with the body's.
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
