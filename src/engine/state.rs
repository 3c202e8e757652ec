//! One Lua state: its construction (the sandbox, the primitives of `api/` and `ffi/` in the
//! table the prelude receives, the rule files loaded and their declarations checked against
//! the generation's) and the context its primitives share, by lifetime: `StateCtx`, built with
//! the state, and in it `ScanCtx`, reset when a scan starts. Generations are built here too: a
//! state loaded once to read and validate a rule set's declarations.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lru::LruCache;
use mlua::{Function, Lua, LuaOptions, StdLib, Table, Value};
use regex::bytes::Regex;

use super::ffi;
use super::preempt::Preempt;
use super::source::{self, RuleLocation, Sources};
use super::view::{MessageData, WindowNames};
use super::{
    EngineConfig, Generation, LoadError, Overrides, RuleCounters, RuleMeta, RULES_SKIPPED,
    RULE_ERROR, RULE_TIMEOUT,
};
use crate::store::ReputationStore;

/// CPU budget of a rule file's top-level code (it may compile large phrase sets and regexes).
const LOAD_CPU: Duration = Duration::from_secs(2);

const PRELUDE: &str = include_str!("prelude.lua");

/// The context the Rust primitives of one Lua state share, built with the state and kept for
/// its life: configuration, the rule set's names, caches that outlive scans, what loading
/// registered; and the part that lives for one scan (`scan`, reset when a scan starts).
pub(super) struct StateCtx {
    /// CPU budgets of rule calls and scans (a watchdog, no instruction hook).
    pub(super) preempt: Preempt,
    pub(super) rule_names: RefCell<Vec<String>>,
    pub(super) loading_file: RefCell<String>,
    /// (second, lines written in it, lines dropped since the last written one)
    pub(super) log_window: Cell<(u64, u32, u64)>,
    pub(super) log_limit: u32,
    /// Compiled patterns by source. `Rc`, not clones: cloning a `Regex` gives it a fresh
    /// (empty) matching cache, so every call would rebuild its lazy DFA.
    pub(super) regex: RefCell<LruCache<String, Rc<Regex>>>,
    pub(super) registered: RefCell<Vec<(RuleMeta, Function)>>,
    /// The generation whose rules run in this state (symbol names for `msg:classify()`).
    /// None in the state built only to validate a new generation's declarations.
    pub(super) generation: Option<Arc<Generation>>,
    pub(super) windows: WindowNames,
    pub(super) memory_limit: usize,
    /// What every mark of an untimed scan is (`ScanCtx::timed`).
    pub(super) epoch: Instant,
    /// Registry reference of the string "weight", read from hit tables without allocating.
    pub(super) weight_key: Cell<std::ffi::c_int>,
    /// The declared windowed features (loading) and their state in the current scan
    /// (`feature.rs`; its slots are reset with `scan`).
    pub(super) features: RefCell<super::feature::Features>,
    /// What lives for one scan.
    pub(super) scan: ScanCtx,
}

/// The part of a state's context that lives for one scan: set up by `StateCtx::begin_scan`
/// when `RuleRunner::run` starts one, written and read by the primitives during it.
#[derive(Default)]
pub(super) struct ScanCtx {
    /// The message being scanned, published by `RuleRunner::run` for the duration of the
    /// rules, and the raw field functions' buffers (`ffi::ScanSlot`).
    pub(super) slot: ffi::ScanSlot,
    /// Index of the running rule (for log lines), `usize::MAX` while loading and between
    /// rules.
    pub(super) current_rule: Cell<usize>,
    /// (rule, symbol) of the hits applied so far in the current scan, for `msg:classify()`.
    pub(super) applied: RefCell<Vec<(usize, usize)>>,
    /// What `msg:classify()` computed in the current scan: its probability and features.
    pub(super) classified: RefCell<Option<(Option<f64>, crate::classify::Features)>>,
    /// (rule index, start) of each rule `run_checks` started in the current call: the rules'
    /// run counts and times.
    pub(super) marks: RefCell<Vec<(u32, Instant)>>,
    /// Whether this scan reads the clock for `marks` (one in `TIME_EVERY`); else each mark is
    /// `StateCtx::epoch`.
    pub(super) timed: Cell<bool>,
    /// The scan's shingles by kind for `msg:stat`, built at its first call (`kinds_built`).
    pub(super) kinds: RefCell<super::view::KindIndex>,
    pub(super) kinds_built: Cell<bool>,
    /// The current scan only observes (a learn): `ratelimit` answers without counting.
    pub(super) observe: Rc<Cell<bool>>,
    /// Hits `run_checks` read itself (`plain_hit`), in order, for Rust to record when the loop
    /// returns: (rule, symbol, weight, options).
    pub(super) plain_hits: RefCell<Vec<PlainHit>>,
    /// Per rule, for the current scan: whether its hits apply (not shadow, and in its test
    /// share for this message).
    pub(super) applies: RefCell<Vec<bool>>,
}

/// A hit `run_checks` read: (rule, symbol, weight, options).
pub(super) type PlainHit = (usize, usize, f64, Vec<String>);

impl StateCtx {
    /// The context of a state under construction (`lua`, whose memory limit is `limit`).
    pub(super) fn new(
        lua: &Lua,
        config: &EngineConfig,
        generation: Option<&Arc<Generation>>,
        windows: &WindowNames,
        limit: usize,
    ) -> Self {
        StateCtx {
            preempt: Preempt::new(
                lua,
                Duration::from_millis(config.rule_cpu_ms),
                Duration::from_millis(config.message_cpu_ms),
            ),
            rule_names: RefCell::new(Vec::new()),
            loading_file: RefCell::new(String::new()),
            log_window: Cell::new((0, 0, 0)),
            log_limit: config.log_lines_per_sec,
            regex: RefCell::new(LruCache::new(
                NonZeroUsize::new(config.regex_cache.max(1)).unwrap_or(NonZeroUsize::MIN),
            )),
            registered: RefCell::new(Vec::new()),
            generation: generation.cloned(),
            windows: windows.clone(),
            memory_limit: limit,
            epoch: Instant::now(),
            weight_key: Cell::new(0),
            features: RefCell::new(super::feature::Features::default()),
            scan: ScanCtx {
                current_rule: Cell::new(usize::MAX),
                timed: Cell::new(true),
                ..ScanCtx::default()
            },
        }
    }

    /// Sets up the context of a scan: nothing applied, classified or hit yet, which rules'
    /// hits apply (`applies`, in rule order), whether it only observes and is timed, the
    /// features' slots pending and the shingles' index to be built.
    pub(super) fn begin_scan(
        &self,
        applies: impl Iterator<Item = bool>,
        observe: bool,
        timed: bool,
    ) {
        let s = &self.scan;
        s.applied.borrow_mut().clear();
        s.plain_hits.borrow_mut().clear();
        {
            let mut a = s.applies.borrow_mut();
            a.clear();
            a.extend(applies);
        }
        *s.classified.borrow_mut() = None;
        s.observe.set(observe);
        {
            let mut f = self.features.borrow_mut();
            let n = f.metas.len();
            f.slots.clear();
            f.slots.resize(n, super::feature::Slot::Pending);
        }
        s.kinds_built.set(false);
        s.timed.set(timed);
    }

    pub(super) fn rule_name(&self) -> String {
        let i = self.scan.current_rule.get();
        self.rule_names
            .borrow()
            .get(i)
            .cloned()
            .unwrap_or_else(|| format!("(loading {})", self.loading_file.borrow()))
    }

    /// `msg:classify()`: the classifier's probability over the message and the spam-sign
    /// symbols hit so far (`learns_symbol`); nil during the cold start (then no features are
    /// extracted either: training builds them itself when a scan has none).
    pub(super) fn classify(&self, data: &MessageData<'_>) -> mlua::Result<Value> {
        let Some(model) = data.classifier.filter(|m| m.ready()) else {
            return Ok(Value::Nil);
        };
        let Some(features) = self.features_so_far(data) else {
            return Ok(Value::Nil);
        };
        let p = model.classify(&features);
        *self.scan.classified.borrow_mut() = Some((p, features));
        Ok(p.map_or(Value::Nil, Value::Number))
    }

    /// `msg:bayes()`: naive Bayes' probability over the features `msg:classify()` weighed in
    /// this scan (or, asked first, the same features built now); nil until it has learned enough.
    pub(super) fn bayes(&self, data: &MessageData<'_>) -> mlua::Result<Value> {
        let Some(model) = data.classifier.filter(|m| m.bayes_ready()) else {
            return Ok(Value::Nil);
        };
        if let Some((_, features)) = self.scan.classified.borrow().as_ref() {
            return Ok(model.bayes(features).map_or(Value::Nil, Value::Number));
        }
        let Some(features) = self.features_so_far(data) else {
            return Ok(Value::Nil);
        };
        Ok(model.bayes(&features).map_or(Value::Nil, Value::Number))
    }

    /// The classifier's features of the message with the spam-sign symbols hit so far.
    fn features_so_far(&self, data: &MessageData<'_>) -> Option<crate::classify::Features> {
        let gen = self.generation.as_ref()?;
        let applied = self.scan.applied.borrow();
        let names = applied
            .iter()
            .map(|&(r, s)| &gen.rules[r].symbols[s])
            .filter(|m| crate::classify::learns_symbol(m.score))
            .map(|m| m.name.as_str());
        Some(data.classifier_features(names))
    }

    /// A rule's start or end for `marks`: the time on a timed scan, else `epoch`.
    pub(super) fn now(&self) -> Instant {
        if self.scan.timed.get() {
            Instant::now()
        } else {
            self.epoch
        }
    }

    /// Whether another log line may be written now; returns the number dropped before it.
    pub(super) fn log_permit(&self) -> Option<u64> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let (sec, n, dropped) = self.log_window.get();
        let (sec, n) = if sec == now { (sec, n) } else { (now, 0) };
        if n < self.log_limit {
            self.log_window.set((sec, n + 1, 0));
            Some(dropped)
        } else {
            self.log_window.set((sec, n, dropped + 1));
            None
        }
    }

    pub(super) fn regex(&self, pattern: &str) -> mlua::Result<Rc<Regex>> {
        let mut cache = self.regex.borrow_mut();
        if let Some(r) = cache.get(pattern) {
            return Ok(Rc::clone(r));
        }
        let r = Rc::new(
            regex::bytes::RegexBuilder::new(pattern)
                .size_limit(1 << 20)
                .build()
                .map_err(|e| mlua::Error::runtime(format!("bad regular expression: {e}")))?,
        );
        cache.put(pattern.to_string(), Rc::clone(&r));
        Ok(r)
    }
}

/// Lifts the state's memory limit while Rust builds values for Lua, and restores it on drop.
/// mlua wraps every API call in a protected call while a limit is set (an allocation could
/// fail); the values built here are bounded by the message limits, so the protection would
/// only cost time (a table of 6 fields: ~3 µs protected, ~0.3 µs not). Lua code itself always
/// runs under the limit.
pub(super) struct Unlimited<'l> {
    lua: &'l Lua,
    limit: usize,
}

impl<'l> Unlimited<'l> {
    pub(super) fn new(lua: &'l Lua, limit: usize) -> Self {
        let _ = lua.set_memory_limit(0);
        Unlimited { lua, limit }
    }
}

impl Drop for Unlimited<'_> {
    fn drop(&mut self) {
        let _ = self.lua.set_memory_limit(self.limit);
    }
}

/// Turns an mlua error into the message a rule author needs (file:line first when Lua gave
/// them).
pub(super) fn describe(e: &mlua::Error) -> String {
    match e {
        mlua::Error::RuntimeError(s) => match s.find("\nstack traceback:") {
            Some(i) => s[..i].to_string(),
            None => s.clone(),
        },
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        mlua::Error::MemoryError(_) => "out of memory (Lua state limit reached)".into(),
        mlua::Error::CallbackError { cause, .. } => describe(cause),
        mlua::Error::WithContext { context, cause } => format!("{context}: {}", describe(cause)),
        other => other.to_string(),
    }
}

pub(super) fn lua_err(e: mlua::Error) -> LoadError {
    LoadError::Lua(describe(&e))
}

/// A freshly built state: the Lua state, its context, the registered rules, and what a scan
/// calls.
pub(super) type Built = (Lua, Rc<StateCtx>, Vec<(RuleMeta, Function)>, Entry);

/// What a scan calls: the prelude's `begin` and `finish`, and the rules' checks in order.
pub(super) struct Entry {
    pub(super) begin: Function,
    pub(super) checks: Table,
    pub(super) finish: Function,
    /// Runs a feature's functions for a message (`feature.rs`).
    pub(super) feature_compute: Function,
    /// The prelude's table of functions (`msg_methods`, `globals` for the annotations' test).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) prelude: Table,
}

pub(super) struct BuildEnv<'a> {
    pub(super) config: &'a EngineConfig,
    pub(super) store: &'a Arc<dyn ReputationStore>,
    pub(super) namespace: u8,
    pub(super) windows: &'a WindowNames,
}

/// Builds a Lua state and loads `sources` into it.
pub(super) fn build_state(
    sources: &Sources,
    generation: Option<&Arc<Generation>>,
    env: &BuildEnv<'_>,
) -> Result<Built, LoadError> {
    crate::message::date::warm();
    let lua = Lua::new_with(
        StdLib::TABLE | StdLib::STRING | StdLib::MATH | StdLib::UTF8 | StdLib::OS,
        LuaOptions::default(),
    )
    .map_err(lua_err)?;
    let limit = env
        .config
        .memory_limit_mb
        .max(1)
        .saturating_mul(1024 * 1024);
    lua.set_memory_limit(limit).map_err(lua_err)?;
    let ctx = Rc::new(StateCtx::new(
        &lua,
        env.config,
        generation,
        env.windows,
        limit,
    ));
    ctx.weight_key
        .set(ffi::registry_string(&lua, c"weight").map_err(lua_err)?);

    let rust = lua.create_table().map_err(lua_err)?;
    super::api::install(&lua, &ctx, &rust, sources, env).map_err(lua_err)?;
    super::feature::install(&lua, &ctx, &rust, env).map_err(lua_err)?;
    ffi::install_fields(&lua, &ctx, &rust).map_err(lua_err)?;

    let prelude: Table = lua
        .load(PRELUDE)
        .set_name("@engine/prelude.lua")
        .call(rust)
        .map_err(lua_err)?;
    // What the prelude captured is all rules get; drop the dangerous rest from the globals.
    let g = lua.globals();
    for name in [
        "os",
        "load",
        "dofile",
        "loadfile",
        "require",
        "collectgarbage",
    ] {
        g.raw_set(name, Value::Nil).map_err(lua_err)?;
    }
    let load_file: Function = prelude.get("load_file").map_err(lua_err)?;
    let begin: Function = prelude.get("begin").map_err(lua_err)?;
    let finish: Function = prelude.get("finish").map_err(lua_err)?;
    let feature_compute: Function = prelude.get("feature_compute").map_err(lua_err)?;

    for file in &sources.rules {
        *ctx.loading_file.borrow_mut() = file.name.clone();
        let text = lua.create_string(&*file.text).map_err(lua_err)?;
        let (r, stop) = ctx.preempt.run_for(Some(LOAD_CPU), || {
            load_file.call::<()>((text, file.name.as_str()))
        });
        if let Err(e) = r {
            return Err(if stop.is_some() {
                LoadError::Lua(format!(
                    "{}: top-level code ran out of its CPU budget ({} ms)",
                    file.name,
                    LOAD_CPU.as_millis()
                ))
            } else {
                lua_err(e)
            });
        }
    }
    ctx.loading_file.borrow_mut().clear();
    let mut registered = ctx.registered.take();
    if let Some(g) = generation {
        // The configuration's changes, applied exactly as `build_generation` applied them: the
        // rules switched off are not in the state, and the indices stay the generation's.
        let mut metas: Vec<RuleMeta> = registered.iter().map(|(m, _)| m.clone()).collect();
        let runs = g.overrides.apply(&mut metas);
        registered = registered
            .into_iter()
            .zip(metas)
            .zip(runs)
            .filter_map(|(((_, f), m), run)| run.then_some((m, f)))
            .collect();
    }
    *ctx.rule_names.borrow_mut() = registered.iter().map(|(m, _)| m.name.clone()).collect();
    if let Some(g) = generation {
        if ctx.features.borrow().metas != g.features {
            return Err(LoadError::Declaration(
                "feature declarations differ from the generation's (do rule files declare features conditionally?)"
                    .into(),
            ));
        }
        let same = registered.len() == g.rules.len()
            && registered.iter().zip(&g.rules).all(|((m, _), r)| m == r);
        if !same {
            return Err(LoadError::Declaration(
                "rule declarations differ from the generation's (do rule files declare rules conditionally?)"
                    .into(),
            ));
        }
    }
    lua.gc_collect().map_err(lua_err)?;
    // Most of what a scan allocates dies with the scan: the generational collector suits it,
    // as long as scans store nothing new in old objects (the prelude's `begin` and `finish`).
    // A minor collection when the heap has doubled since the last one (Lua's default: grown by
    // a fifth): it visits only the objects made since, mostly the garbage of the last ~50 scans,
    // still in cache. A major collection only when the heap has grown to five times its size
    // after the last one (default: twice). With minor collections at 200% and the default
    // major multiplier, every collection was a major one, and its walk over the whole state
    // was 3-4% of the full scan's time; this way the collector takes under 1%. The memory
    // limit holds either way: Lua collects fully before it lets an allocation fail.
    lua.gc_gen(100, 400);
    let checks = lua
        .create_sequence_from(registered.iter().map(|(_, f)| f.clone()))
        .map_err(lua_err)?;
    ctx.scan.marks.borrow_mut().reserve(registered.len());
    Ok((
        lua,
        ctx,
        registered,
        Entry {
            begin,
            checks,
            finish,
            feature_compute,
            prelude,
        },
    ))
}

/// Reads and validates a rule set: the next generation.
pub(super) fn build_generation(
    id: u64,
    location: &RuleLocation,
    sources: source::Sources,
    config: &EngineConfig,
    overrides: &Arc<Overrides>,
    store: &Arc<dyn ReputationStore>,
    namespace: u8,
) -> Result<Generation, LoadError> {
    let start = Instant::now();
    // A state built only to read the declarations never scans: no windows needed.
    let windows = WindowNames::default();
    let env = BuildEnv {
        config,
        store,
        namespace,
        windows: &windows,
    };
    let (_lua, ctx, registered, _) = build_state(&sources, None, &env)?;
    let features = std::mem::take(&mut ctx.features.borrow_mut().metas);
    let declared: Vec<RuleMeta> = registered.into_iter().map(|(m, _)| m).collect();
    // Names are checked over every declaration, switched off or not.
    let mut names: HashMap<&str, usize> = HashMap::new();
    for (ri, r) in declared.iter().enumerate() {
        for s in &r.symbols {
            if s.name == RULE_ERROR || s.name == RULE_TIMEOUT || s.name == RULES_SKIPPED {
                return Err(LoadError::Declaration(format!(
                    "{}: {} is reserved for the engine",
                    r.file, s.name
                )));
            }
            if let Some(other) = names.insert(&s.name, ri) {
                return Err(LoadError::Declaration(format!(
                    "{}: symbol {} is already declared by rule {} in {}",
                    r.file, s.name, declared[other].name, declared[other].file
                )));
            }
        }
    }
    let mut rules = declared.clone();
    let runs = overrides.apply(&mut rules);
    let mut keep = runs.iter();
    rules.retain(|_| keep.next().copied().unwrap_or(true));
    let unknown = overrides.unknown(&declared);
    if !unknown.is_empty() {
        tracing::warn!(names = ?unknown, "[scores] or [rules] name symbols no rule declares");
    }
    // A settings entry naming a symbol no rule declares is refused, not warned about: the
    // recipients it was written for would silently keep the scores it meant to change.
    overrides
        .settings
        .check_symbols(|n| {
            names.contains_key(n)
                || declared.iter().any(|r| r.name == n)
                || [RULE_ERROR, RULE_TIMEOUT, RULES_SKIPPED].contains(&n)
                || crate::settings::SERVICE_SYMBOLS.contains(&n)
        })
        .map_err(|e| LoadError::Declaration(e.to_string()))?;
    let mut symbols = HashMap::new();
    for (ri, r) in rules.iter().enumerate() {
        for (si, s) in r.symbols.iter().enumerate() {
            symbols.insert(s.name.clone(), (ri, si));
        }
    }
    let counters = rules.iter().map(|_| RuleCounters::default()).collect();
    Ok(Generation {
        id,
        location: location.clone(),
        sources,
        rules,
        declared,
        overrides: Arc::clone(overrides),
        features,
        symbols,
        counters,
        build_time: start.elapsed(),
        built_at: std::time::Instant::now(),
    })
}
