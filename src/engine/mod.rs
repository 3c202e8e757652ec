//! The rules engine: Lua states, the rule-author API (docs/rules.md), the rule registry, the
//! sandbox and its limits, and rule-set generations with hot reload.
//!
//! Owns: everything Lua. Never touches: sockets; the filesystem at scan time (rule sets are
//! read when a generation is built, `source.rs`).
//!
//! A *generation* is a complete, validated rule set: sources, lists and the declarations found
//! by loading it once. `Engine` holds the current one behind an `ArcSwap`; a reload builds the
//! next one completely and swaps only when it loaded without error. Each scan worker owns a
//! `RuleRunner` (`runner.rs`), whose Lua state is built once per generation (`state.rs`): a scan in flight
//! finishes on the generation it started with.

#[cfg(test)]
mod annotations;
mod api;
mod declare;
pub mod feature;
mod ffi;
pub mod fields;
mod hits;
pub mod lists;
pub mod overlay;
pub mod patterns;
mod phrases;
mod preempt;
mod runner;
mod settings;
pub mod source;
mod state;
pub mod view;
pub mod watch;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use serde::Serialize;

use crate::store::ReputationStore;
// Engine-internal name: the rest of shrike imports it from `crate::verdict`.
use crate::verdict::Action;

pub use feature::{FeatureMeta, FeatureUpdates};
pub use fields::FieldId;
pub use overlay::{OverrideError, Overrides, RulesConfig};
pub use runner::RuleRunner;
pub use settings::{EngineConfig, EngineConfigError};
pub use source::RuleLocation;
pub use view::MessageData;

/// The symbol recorded when a rule raised an error or exhausted memory.
pub const RULE_ERROR: &str = "RULE_ERROR";
/// The symbol recorded when a rule ran out of its CPU budget.
pub const RULE_TIMEOUT: &str = "RULE_TIMEOUT";
/// The symbol recorded when rules did not finish (`RuleOutcome::unfinished`): their positive
/// scores, so that stopping them does not lower a message's score.
pub const RULES_SKIPPED: &str = "RULES_SKIPPED";
/// Store key type of `ratelimit()` counters (outside the shingle type table).
pub const RATELIMIT_KIND: u16 = 1_000;

/// The globals the sandbox (`prelude.lua`) adds to standard Lua 5.4, for tools that read rule
/// files without the engine: `rules check` hands them to luacheck. The annotations' drift test
/// holds this list to the globals a built state has, and to `.luacheckrc`'s.
pub const SANDBOX_GLOBALS: &[&str] = &[
    "rule",
    "feature",
    "re",
    "log",
    "list",
    "ratelimit",
    "char_counts",
    "is_private_ip",
];

/// Why a rule set could not be loaded. Messages carry file and line where Lua gives them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    #[error("{file}: {message}")]
    Read { file: String, message: String },
    #[error("{0}")]
    Lua(String),
    #[error("{0}")]
    List(String),
    #[error("{0}")]
    Declaration(String),
}

/// One symbol a rule may emit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SymbolMeta {
    pub name: String,
    pub score: f64,
    pub description: String,
    pub group: String,
    /// Action forced when the symbol hits.
    pub action: Option<Action>,
    /// Turned off by the configuration (`[scores]` 0, `[rules] disabled`): its hits are dropped.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub off: bool,
}

/// A rule's declaration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuleMeta {
    /// The rule's name (its symbol, for single-symbol rules).
    pub name: String,
    /// The file that declared it.
    pub file: String,
    pub symbols: Vec<SymbolMeta>,
    /// Declared with `scores = {…}`.
    pub multi: bool,
    pub shadow: bool,
    /// Test mode: the share of messages the rule applies to.
    pub share: Option<f64>,
}

/// Per-rule counters of a generation (summed over workers; workers flush periodically).
#[derive(Debug, Default)]
pub struct RuleCounters {
    pub runs: AtomicU64,
    pub hits: AtomicU64,
    pub errors: AtomicU64,
    pub timeouts: AtomicU64,
    pub nanos: AtomicU64,
}

/// A loaded, validated rule set.
#[derive(Debug)]
pub struct Generation {
    pub id: u64,
    pub location: RuleLocation,
    pub sources: source::Sources,
    /// The rules that run, in order, with the configuration's score changes applied.
    pub rules: Vec<RuleMeta>,
    /// Every rule the files declare, as declared (before `overrides`): `rules list`.
    pub declared: Vec<RuleMeta>,
    /// The configuration's changes this generation was built with.
    pub overrides: Arc<Overrides>,
    /// The windowed features the rule files declare (`feature{}`), in order.
    pub features: Vec<FeatureMeta>,
    /// Symbol name → (rule index, symbol index).
    pub symbols: HashMap<String, (usize, usize)>,
    pub counters: Vec<RuleCounters>,
    /// Wall time the build took.
    pub build_time: Duration,
    /// When the build ended: the counters count from about then (`/counters`' rates).
    pub built_at: std::time::Instant,
}

/// One symbol a rule emitted in a scan.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub symbol: String,
    /// Declared score times weight.
    pub score: f64,
    pub options: Vec<String>,
    pub action: Option<Action>,
    /// Counted, not applied (shadow mode, or test mode outside its share).
    pub shadow: bool,
}

/// What the rules said about one message.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuleOutcome {
    pub generation: u64,
    pub hits: Vec<Hit>,
    /// `(rule name, reason)` of rules that raised an error.
    pub errors: Vec<(String, String)>,
    /// `(rule name, reason)` of rules stopped by their CPU budget, or skipped because
    /// the message budget was spent.
    pub timeouts: Vec<(String, String)>,
    /// The rules that did not finish (stopped by a CPU budget, skipped when the message's was
    /// spent, out of memory) and have positive scores, and the sum of those scores: the engine's
    /// `RULES_SKIPPED` symbol, so that a message that makes rules stop scores no lower for it.
    pub unfinished: Vec<String>,
    pub unfinished_score: f64,
    /// The classifier's spam probability, when a rule asked for it (`msg:classify()`) and the
    /// model had an opinion.
    pub probability: Option<f64>,
    /// The features the classifier weighed, when a rule asked for it.
    pub features: Option<crate::classify::Features>,
    /// What the message adds to the windowed features (applied after the verdict).
    pub feature_updates: FeatureUpdates,
}

/// What `/health` and `/metrics` report about rule loading.
#[derive(Debug, Clone, Serialize)]
pub struct EngineHealth {
    pub generation: u64,
    pub rules: usize,
    pub location: String,
    pub reloads: u64,
    pub reload_failures: u64,
    pub last_error: Option<String>,
    pub last_build_ms: f64,
    /// Lua states built by the scan workers (one per worker per generation they served).
    pub states_built: u64,
}

/// Shared by every scan worker.
pub struct Engine {
    config: EngineConfig,
    location: RuleLocation,
    /// The configuration's score changes the next generation is built with.
    overrides: Mutex<Arc<Overrides>>,
    store: Arc<dyn ReputationStore>,
    namespace: u8,
    windows: view::WindowNames,
    current: ArcSwap<Generation>,
    next_id: AtomicU64,
    reload_lock: Mutex<()>,
    reloads: AtomicU64,
    reload_failures: AtomicU64,
    last_error: Mutex<Option<LastError>>,
    states_built: AtomicU64,
    /// The last generation whose Lua state failed to build in a worker (logged once).
    state_failed: AtomicU64,
}

/// The last reload's error, kept for `health()` until a reload succeeds or the rule set it was
/// about is fixed.
#[derive(Debug, Clone)]
struct LastError {
    message: String,
    /// It came from the rule files (reading or building them), not from the configuration
    /// file: a directory that loads again and equals the serving set clears it.
    rules: bool,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("location", &self.location)
            .field("generation", &self.current.load().id)
            .finish()
    }
}

impl Engine {
    /// Loads the first generation. `namespace` prefixes `ratelimit()` keys.
    pub fn new(
        config: EngineConfig,
        location: RuleLocation,
        store: Arc<dyn ReputationStore>,
        namespace: u8,
    ) -> Result<Arc<Engine>, LoadError> {
        Engine::with_overrides(config, location, Overrides::default(), store, namespace)
    }

    /// As `new`, with the configuration's `[scores]` and `[rules]` changes.
    pub fn with_overrides(
        config: EngineConfig,
        location: RuleLocation,
        overrides: Overrides,
        store: Arc<dyn ReputationStore>,
        namespace: u8,
    ) -> Result<Arc<Engine>, LoadError> {
        let windows = view::WindowNames::new(store.windows_secs());
        let sources = source::read(&location)?;
        let overrides = Arc::new(overrides);
        let first = state::build_generation(
            1, &location, sources, &config, &overrides, &store, namespace,
        )?;
        Ok(Arc::new(Engine {
            config,
            location,
            overrides: Mutex::new(overrides),
            store,
            namespace,
            windows,
            current: ArcSwap::from_pointee(first),
            next_id: AtomicU64::new(2),
            reload_lock: Mutex::new(()),
            reloads: AtomicU64::new(0),
            reload_failures: AtomicU64::new(0),
            states_built: AtomicU64::new(0),
            state_failed: AtomicU64::new(0),
            last_error: Mutex::new(None),
        }))
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    pub fn location(&self) -> &RuleLocation {
        &self.location
    }

    /// The generation new scans use.
    pub fn generation(&self) -> Arc<Generation> {
        self.current.load_full()
    }

    /// Builds the next generation from the rule location and swaps it in, whether or not the
    /// files changed (SIGHUP, `POST /reload`: the operator asked). On error the current
    /// generation keeps serving and the error is kept for `health()`.
    pub fn reload(&self) -> Result<u64, LoadError> {
        let _one_at_a_time = self.reload_lock.lock();
        let sources = self.read_sources()?;
        self.swap_in(sources)
    }

    /// As `reload`, with new score changes (the configuration read again). They are kept
    /// only when the generation built with them swaps in.
    pub fn reload_with(&self, overrides: Overrides) -> Result<u64, LoadError> {
        let _one_at_a_time = self.reload_lock.lock();
        let sources = self.read_sources()?;
        let previous = std::mem::replace(&mut *self.overrides.lock(), Arc::new(overrides));
        self.swap_in(sources)
            .inspect_err(|_| *self.overrides.lock() = previous)
    }

    /// Records a reload that failed before the rules were read (the configuration could not
    /// be read again): counted and kept for `health()` like a rule error.
    pub fn reload_failed(&self, e: &LoadError) {
        self.failed(e, false);
    }

    /// What the directory watcher calls: reads the rule set and builds a new generation only
    /// when it differs from the serving one (`Ok(None)` otherwise). A file saved unchanged, a
    /// `touch`, an editor's swap file or a reload's own reads then cost one read of the files,
    /// never a generation (which would reset every per-rule counter).
    pub fn reload_if_changed(&self) -> Result<Option<u64>, LoadError> {
        let _one_at_a_time = self.reload_lock.lock();
        let sources = self.read_sources()?;
        if sources.fingerprint == self.current.load().sources.fingerprint {
            // The files are back to the serving set (a broken file removed or repaired): an
            // error they caused no longer describes them. One from the configuration file
            // stays until a reload reads it.
            let mut last = self.last_error.lock();
            if last.as_ref().is_some_and(|e| e.rules) {
                *last = None;
                tracing::info!("rule files are back to the serving set; reload error cleared");
            } else {
                tracing::debug!("rule files unchanged; no reload");
            }
            return Ok(None);
        }
        self.swap_in(sources).map(Some)
    }

    fn read_sources(&self) -> Result<source::Sources, LoadError> {
        source::read(&self.location).inspect_err(|e| self.failed(e, true))
    }

    /// Counts a failed reload and keeps its error; `rules`: the rule files caused it.
    fn failed(&self, e: &LoadError, rules: bool) {
        self.reload_failures.fetch_add(1, Ordering::Relaxed);
        tracing::error!(error = %e, "rules reload failed; the previous generation keeps serving");
        *self.last_error.lock() = Some(LastError {
            message: e.to_string(),
            rules,
        });
    }

    fn swap_in(&self, sources: source::Sources) -> Result<u64, LoadError> {
        // Taken only when the generation swaps in (reloads run one at a time under
        // `reload_lock`): a failed build leaves no gap in the generations' numbers.
        let id = self.next_id.load(Ordering::Relaxed);
        let overrides = Arc::clone(&self.overrides.lock());
        match state::build_generation(
            id,
            &self.location,
            sources,
            &self.config,
            &overrides,
            &self.store,
            self.namespace,
        ) {
            Ok(generation) => {
                let ms = generation.build_time.as_secs_f64() * 1e3;
                let rules = generation.rules.len();
                self.current.store(Arc::new(generation));
                self.next_id.store(id + 1, Ordering::Relaxed);
                self.reloads.fetch_add(1, Ordering::Relaxed);
                *self.last_error.lock() = None;
                tracing::info!(generation = id, rules, ms, "rules reloaded");
                Ok(id)
            }
            Err(e) => {
                self.failed(&e, true);
                Err(e)
            }
        }
    }

    /// Counts a Lua state a scan worker built (see `RuleRunner::warm`).
    pub(crate) fn state_built(&self) {
        self.states_built.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether a worker's failure to build generation `id`'s state is the first one for it
    /// (the one that logs an error).
    pub(crate) fn first_state_failure(&self, id: u64) -> bool {
        self.state_failed.fetch_max(id, Ordering::Relaxed) < id
    }

    /// A runner for one scan thread.
    pub fn runner(self: &Arc<Self>) -> RuleRunner {
        RuleRunner::new(Arc::clone(self))
    }

    pub fn health(&self) -> EngineHealth {
        let g = self.current.load();
        EngineHealth {
            generation: g.id,
            rules: g.rules.len(),
            location: self.location.describe(),
            reloads: self.reloads.load(Ordering::Relaxed),
            reload_failures: self.reload_failures.load(Ordering::Relaxed),
            last_error: self.last_error.lock().as_ref().map(|e| e.message.clone()),
            last_build_ms: g.build_time.as_secs_f64() * 1e3,
            states_built: self.states_built.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn windows(&self) -> &view::WindowNames {
        &self.windows
    }

    pub(crate) fn store(&self) -> &Arc<dyn ReputationStore> {
        &self.store
    }

    pub(crate) fn namespace(&self) -> u8 {
        self.namespace
    }
}
