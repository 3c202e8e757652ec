//! Running a generation's rules over one message: each scan worker's `RuleRunner`, its Lua
//! state (rebuilt when the generation changes), the per-rule counters, and the reading of what
//! the rules' loop (`ffi/rules.rs`) leaves: hits in other forms than the plain ones, errors,
//! timeouts.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;
use std::sync::Arc;

use mlua::{Function, Lua, Table, Value};

use super::ffi;
use super::hits::{error_value, interpret};
use super::preempt::Stop;
use super::state::{build_state, describe, BuildEnv, StateCtx};
use super::view::MessageData;
use super::{Engine, Generation, Hit, RuleMeta, RuleOutcome};
use crate::shingle::hash_bytes;

/// Per-rule counters are flushed to the generation after this many scans.
const FLUSH_EVERY: u32 = 256;
/// Rules' times are read on one scan in this many (the first after each flush of the counters),
/// and counted this many times: a clock read per rule cost ~2% of the rules' time.
const TIME_EVERY: u32 = 8;

/// Traced lines: (rule index, line, in the rule's `check` itself).
type LineSet = BTreeSet<(usize, u32, bool)>;

/// A built Lua state with a generation's rules registered.
struct LoadedState {
    generation: Arc<Generation>,
    lua: Lua,
    ctx: Rc<StateCtx>,
    begin: Function,
    /// The rules' checks, in order (a sequence).
    checks: Table,
    finish: Function,
    /// The prelude's `feature_compute(i, msg)`, for the features no rule read.
    feature_compute: Function,
    /// Sampling seeds of test-mode rules (hash of the rule name).
    rule_seeds: Vec<u64>,
    /// The rule whose check `profile_rule` wrapped in this state.
    profiled: Option<usize>,
}

#[derive(Debug, Clone, Copy, Default)]
struct LocalCounters {
    runs: u64,
    hits: u64,
    errors: u64,
    timeouts: u64,
    nanos: u64,
}

/// Runs rules for one scan thread. Not `Send`: it owns a Lua state.
pub struct RuleRunner {
    engine: Arc<Engine>,
    loaded: Option<LoadedState>,
    /// A generation whose state failed to build here: not tried again while an older state
    /// can serve (each try logs an error and costs a full build) until the next reload.
    failed: Option<u64>,
    /// The rule (0-based) whose calls go through `ffi::profiled` (`profile_rule`).
    profiled: Option<usize>,
    counters: Vec<LocalCounters>,
    scans: u32,
    /// Line coverage of the rules' own files (`trace_lines`): (rule index, line) pairs run
    /// since the last `take_lines`. None: not tracing (no hook is set).
    /// The flag: the line is in the rule's `check` function itself (called by the rules'
    /// loop), not in a helper it calls.
    lines: Option<Rc<RefCell<LineSet>>>,
}

impl RuleRunner {
    pub(super) fn new(engine: Arc<Engine>) -> Self {
        RuleRunner {
            engine,
            loaded: None,
            failed: None,
            profiled: None,
            counters: Vec::new(),
            scans: 0,
            lines: None,
        }
    }

    /// Records, from the next scan on, which lines of its own file each rule runs (a line
    /// hook: slow, for `shrike rules check` only; the rules' loop never checks for it).
    pub fn trace_lines(&mut self) {
        if self.lines.is_none() {
            self.lines = Some(Rc::default());
            if let Some(st) = &self.loaded {
                self.install_line_hook(st);
            }
        }
    }

    /// The (rule name, line, in `check` itself) run since the last call (empty when not
    /// tracing).
    pub fn take_lines(&mut self) -> Vec<(String, u32, bool)> {
        let (Some(lines), Some(st)) = (&self.lines, &self.loaded) else {
            return Vec::new();
        };
        let taken = std::mem::take(&mut *lines.borrow_mut());
        taken
            .into_iter()
            .filter_map(|(r, line, check)| {
                Some((st.generation.rules.get(r)?.name.clone(), line, check))
            })
            .collect()
    }

    fn install_line_hook(&self, st: &LoadedState) {
        let Some(lines) = &self.lines else { return };
        let lines = Rc::clone(lines);
        let ctx = Rc::clone(&st.ctx);
        // A rule's lines are those of the chunk of the file that declared it.
        let chunks: Vec<String> = st
            .generation
            .rules
            .iter()
            .map(|r| format!("@{}", r.file))
            .collect();
        let hooked = st
            .lua
            .set_hook(mlua::HookTriggers::EVERY_LINE, move |lua, debug| {
                let rule = ctx.scan.current_rule.get();
                let line = debug.current_line().and_then(|l| u32::try_from(l).ok());
                if let (Some(chunk), Some(line)) = (chunks.get(rule), line) {
                    if debug.source().source.as_deref() == Some(chunk.as_str()) {
                        // `check` is called from C (the rules' loop), a helper from Lua
                        let in_check = lua
                            .inspect_stack(1, |caller| caller.source().what == "C")
                            .unwrap_or(false);
                        lines.borrow_mut().insert((rule, line, in_check));
                    }
                }
                Ok(mlua::VmState::Continue)
            });
        if let Err(e) = hooked {
            tracing::warn!(error = %e, "cannot trace the rules' lines");
        }
    }

    /// The generation this runner's state holds (the one its last `run` used), if built.
    pub fn generation(&self) -> Option<&Arc<Generation>> {
        self.loaded.as_ref().map(|l| &l.generation)
    }

    /// Lua memory in use, bytes.
    pub fn memory(&self) -> usize {
        self.loaded.as_ref().map_or(0, |l| l.lua.used_memory())
    }

    /// Moves local per-rule counters into the generation's shared ones.
    pub fn flush_counters(&mut self) {
        self.scans = 0;
        let Some(l) = &self.loaded else { return };
        for (local, shared) in self.counters.iter_mut().zip(&l.generation.counters) {
            use std::sync::atomic::Ordering::Relaxed;
            shared.runs.fetch_add(local.runs, Relaxed);
            shared.hits.fetch_add(local.hits, Relaxed);
            shared.errors.fetch_add(local.errors, Relaxed);
            shared.timeouts.fetch_add(local.timeouts, Relaxed);
            shared.nanos.fetch_add(local.nanos, Relaxed);
            *local = LocalCounters::default();
        }
    }

    /// Makes sure the state holds the engine's current generation. `run` calls it; the scan
    /// workers also call it at start and when idle, so the first message after a start or a
    /// reload does not wait for the build (~100 ms).
    pub fn warm(&mut self) {
        let current = self.engine.generation();
        // Without any state (the first generation failed here) every message tries again.
        if (self.failed == Some(current.id) && self.loaded.is_some())
            || self
                .loaded
                .as_ref()
                .is_some_and(|l| l.generation.id == current.id)
        {
            return;
        }
        self.flush_counters();
        let env = BuildEnv {
            config: self.engine.config(),
            store: self.engine.store(),
            namespace: self.engine.namespace(),
            windows: self.engine.windows(),
        };
        match build_state(&current.sources, Some(&current), &env) {
            Ok((lua, ctx, registered, entry)) => {
                let rule_seeds = registered
                    .iter()
                    .map(|(m, _)| hash_bytes(m.name.as_bytes()))
                    .collect();
                self.engine.state_built();
                self.counters = vec![LocalCounters::default(); registered.len()];
                self.loaded = Some(LoadedState {
                    generation: current,
                    lua,
                    ctx,
                    begin: entry.begin,
                    checks: entry.checks,
                    finish: entry.finish,
                    feature_compute: entry.feature_compute,
                    rule_seeds,
                    profiled: None,
                });
                if let Some(rule) = self.profiled {
                    self.profile_rule(rule);
                }
                if let Some(st) = &self.loaded {
                    self.install_line_hook(st);
                }
            }
            Err(e) => {
                self.failed = Some(current.id);
                // Every worker builds its own state and most fail alike: logged by the first.
                if self.engine.first_state_failure(current.id) {
                    tracing::error!(generation = current.id, error = %e, "cannot build the Lua state of a new generation; staying on the previous one");
                } else {
                    tracing::debug!(generation = current.id, error = %e, "cannot build the Lua state of a new generation");
                }
            }
        }
    }

    /// Sends the calls of rule `rule` (0-based, in generation order) through a C function of
    /// their own, `profiled_call`, in this runner's states from now on: a profiling aid, so that
    /// callgrind's `--toggle-collect=*profiled_call` counts that rule's instructions alone, in
    /// the set as it runs (`rules_profile`, `SHRIKE_PROFILE_RULE`). Done to the state's table
    /// of checks, once per state: the rules' loop itself has no check for it.
    pub fn profile_rule(&mut self, rule: usize) {
        self.profiled = Some(rule);
        let Some(st) = &mut self.loaded else { return };
        if st.profiled.is_some() {
            // one rule per state; another one applies from the next state
            return;
        }
        let wrapped = st
            .checks
            .raw_get::<Function>(rule + 1)
            .and_then(|check| ffi::profiled(&st.lua, &check))
            .and_then(|f| st.checks.raw_set(rule + 1, f));
        match wrapped {
            Ok(()) => st.profiled = Some(rule),
            Err(e) => tracing::warn!(rule, error = %e, "cannot profile the rule"),
        }
    }

    /// Runs every rule of the current generation over one message. `sample` is a stable hash
    /// of the message, choosing where test-mode rules apply.
    pub fn run(&mut self, data: &MessageData<'_>, sample: u64) -> RuleOutcome {
        self.warm();
        let mut out = RuleOutcome::default();
        let Some(st) = &self.loaded else {
            out.errors
                .push(("(engine)".into(), "no rule set could be loaded".into()));
            return out;
        };
        out.generation = st.generation.id;
        let cfg = self.engine.config();
        let gen = &st.generation;
        let ctx = &st.ctx;
        let counters = &mut self.counters;
        let mut memory_error = false;
        // Rules that did not finish: stopped by a budget, skipped for the message's, or out of
        // memory. Each adds its declared positive scores (`unfinished_score`).
        let mut unfinished: Vec<usize> = Vec::new();
        ctx.begin_scan(
            gen.rules.iter().enumerate().map(|(i, meta)| {
                !meta.shadow
                    && meta
                        .share
                        .is_none_or(|s| selected(sample, st.rule_seeds[i], s))
            }),
            data.observe,
            self.scans.is_multiple_of(TIME_EVERY),
        );
        let guard = ctx.scan.slot.enter(data);
        ctx.preempt.begin_scan();
        let result = (|| -> mlua::Result<()> {
            let msg: Table = st.begin.call(())?;
            let mut skipped = 0usize;
            let n = gen.rules.len();
            // `run_checks` runs rules until one hits, fails or is stopped; each such rule is
            // read here, then the loop goes on after it.
            let mut next = 0usize;
            while next < n {
                ctx.scan.marks.borrow_mut().clear();
                // set by `run_checks` for each rule it starts
                ctx.scan.current_rule.set(usize::MAX);
                let (r, stop) = ctx
                    .preempt
                    .run(|| ffi::run_rules(&st.lua, ctx, &st.checks, &msg, next, n));
                // Runs and times of the rules this call started: a rule's end is the next
                // one's start, the last one's is now (after its result reached Rust).
                let t_end = ctx.now();
                // the plain hits `run_checks` read itself, before the rule it stopped at
                {
                    let mut plain = ctx.scan.plain_hits.borrow_mut();
                    let applies = ctx.scan.applies.borrow();
                    let mut last = usize::MAX;
                    for (i, si, w, options) in plain.drain(..) {
                        let (Some(meta), Some(c)) = (gen.rules.get(i), counters.get_mut(i)) else {
                            continue;
                        };
                        if i != last {
                            c.hits += 1;
                            last = i;
                        }
                        let s = &meta.symbols[si];
                        if s.off {
                            continue;
                        }
                        out.hits.push(Hit {
                            symbol: s.name.clone(),
                            score: s.score * w,
                            options,
                            action: s.action,
                            shadow: !applies.get(i).copied().unwrap_or(false),
                        });
                    }
                }
                {
                    // (on an untimed scan every mark is `epoch`: only the runs are counted)
                    let timed = ctx.scan.timed.get();
                    let marks = ctx.scan.marks.borrow();
                    for (k, &(i, t0)) in marks.iter().enumerate() {
                        if let Some(c) = counters.get_mut(i as usize) {
                            c.runs += 1;
                            if timed {
                                let t1 = marks.get(k + 1).map_or(t_end, |m| m.1);
                                c.nanos +=
                                    t1.duration_since(t0).as_nanos() as u64 * u64::from(TIME_EVERY);
                            }
                        }
                    }
                }
                let timeout = |meta: &RuleMeta, c: &mut LocalCounters, out: &mut RuleOutcome| {
                    c.timeouts += 1;
                    let why = if stop == Some(Stop::Call) {
                        format!("rule CPU budget of {} ms exhausted", cfg.rule_cpu_ms)
                    } else {
                        format!("message CPU budget of {} ms exhausted", cfg.message_cpu_ms)
                    };
                    out.timeouts.push((meta.name.clone(), why));
                };
                let values = match r {
                    Ok(values) => values,
                    Err(e) => {
                        // Raised outside every rule's own protected call (`exec_raw` failing):
                        // it belongs to the rule `run_checks` was running, if it had started
                        // one (so the loop moves on), else to the engine.
                        let i = ctx.scan.current_rule.get();
                        let (Some(meta), Some(c)) = (gen.rules.get(i), counters.get_mut(i)) else {
                            return Err(e);
                        };
                        if stop.is_some() {
                            unfinished.push(i);
                            timeout(meta, c, &mut out);
                        } else {
                            c.errors += 1;
                            if matches!(e, mlua::Error::MemoryError(_)) {
                                memory_error = true;
                                unfinished.push(i);
                            }
                            out.errors.push((meta.name.clone(), describe(&e)));
                        }
                        next = i + 1;
                        continue;
                    }
                };
                let mut values = values.into_iter();
                let code = match values.next() {
                    Some(Value::Integer(code)) => code,
                    other => {
                        return Err(mlua::Error::runtime(format!(
                            "rule loop returned {other:?}"
                        )))
                    }
                };
                if code == 0 {
                    break;
                }
                let i = code.unsigned_abs() as usize - 1;
                if code < 0 {
                    skipped += n.saturating_sub(i);
                    unfinished.extend(i..n);
                    break;
                }
                next = i + 1;
                let (Some(meta), Some(c)) = (gen.rules.get(i), counters.get_mut(i)) else {
                    return Err(mlua::Error::runtime(format!(
                        "rule loop returned rule {code}"
                    )));
                };
                if !matches!(values.next(), Some(Value::Boolean(true))) {
                    // the rule raised an error, which its protected call caught
                    if stop.is_some() {
                        unfinished.push(i);
                        timeout(meta, c, &mut out);
                        continue;
                    }
                    c.errors += 1;
                    let (text, memory) = error_value(values.next().unwrap_or(Value::Nil));
                    memory_error |= memory;
                    if memory {
                        unfinished.push(i);
                    }
                    out.errors.push((meta.name.clone(), text));
                    continue;
                }
                let applied = ctx.scan.applies.borrow().get(i).copied().unwrap_or(false);
                match interpret(meta, values.collect()) {
                    Ok(hits) => {
                        if !hits.is_empty() {
                            c.hits += 1;
                        }
                        for (si, weight, options) in hits {
                            let s = &meta.symbols[si];
                            if s.off {
                                continue;
                            }
                            if applied {
                                ctx.scan.applied.borrow_mut().push((i, si));
                            }
                            out.hits.push(Hit {
                                symbol: s.name.clone(),
                                score: s.score * weight,
                                options,
                                action: s.action,
                                shadow: !applied,
                            });
                        }
                    }
                    Err(e) => {
                        c.errors += 1;
                        out.errors
                            .push((meta.name.clone(), format!("{}: {e}", meta.file)));
                    }
                }
            }
            ctx.scan.current_rule.set(usize::MAX);
            let applies = ctx.scan.applies.borrow();
            (out.unfinished_score, out.unfinished) = unfinished_score(gen, &unfinished, |i| {
                applies.get(i).copied().unwrap_or(false)
            });
            drop(applies);
            if skipped > 0 {
                out.timeouts.push((
                    "(message)".into(),
                    format!("{skipped} rules skipped: message budget exhausted"),
                ));
            }
            // The features no rule read: their functions run now, each under the rule budget,
            // so that every message contributes to every feature.
            let n_features = ctx.features.borrow().slots.len();
            for i in 0..n_features {
                let pending = matches!(
                    ctx.features.borrow().slots.get(i),
                    Some(super::feature::Slot::Pending)
                );
                if !pending {
                    continue;
                }
                let (r, stop) = ctx
                    .preempt
                    .run(|| st.feature_compute.call::<()>((i + 1, &msg)));
                if let Err(e) = r {
                    let why = match stop {
                        Some(_) => format!("CPU budget of {} ms exhausted", cfg.rule_cpu_ms),
                        None => describe(&e),
                    };
                    if let Some(slot) = ctx.features.borrow_mut().slots.get_mut(i) {
                        *slot = super::feature::Slot::Failed(why);
                    }
                }
            }
            if n_features > 0 {
                out.feature_updates = super::feature::collect(
                    ctx,
                    self.engine.store(),
                    data.observe,
                    &mut out.errors,
                );
            }
            st.finish.call::<()>(())?;
            Ok(())
        })();
        ctx.preempt.end_scan();
        drop(guard);
        if let Err(e) = result {
            out.errors.push(("(engine)".into(), describe(&e)));
        }
        if let Some((p, features)) = ctx.scan.classified.borrow_mut().take() {
            out.probability = p;
            out.features = Some(features);
        }
        for (rule, error) in out.errors.iter().chain(&out.timeouts) {
            if ctx.log_permit().is_some() {
                tracing::warn!(rule = %rule, error = %error, "rule failed");
            }
        }
        if memory_error {
            let _ = st.lua.gc_collect();
        }
        self.scans += 1;
        if self.scans >= FLUSH_EVERY {
            self.flush_counters();
        }
        out
    }
}

impl Drop for RuleRunner {
    fn drop(&mut self) {
        self.flush_counters();
    }
}

/// What the rules that did not finish (`unfinished`, indices, in order) add: the sum of each
/// applied one's positive declared scores, and their names. A sender who makes a rule run out of
/// CPU or memory, or makes rules before it spend the message's budget, so gets at least what
/// the rule could have given (at weight 1), never less: the trick does not pay.
fn unfinished_score(
    gen: &Generation,
    unfinished: &[usize],
    applies: impl Fn(usize) -> bool,
) -> (f64, Vec<String>) {
    let mut score = 0.0;
    let mut names = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for &i in unfinished {
        let Some(meta) = gen.rules.get(i) else {
            continue;
        };
        if !applies(i) || !seen.insert(i) {
            continue;
        }
        let s: f64 = meta
            .symbols
            .iter()
            .filter(|s| !s.off && s.score > 0.0)
            .map(|s| s.score)
            .sum();
        if s > 0.0 {
            score += s;
            names.push(meta.name.clone());
        }
    }
    (score, names)
}

/// Whether a test-mode rule applies to this message.
fn selected(sample: u64, seed: u64, share: f64) -> bool {
    let mut h = sample ^ seed;
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    ((h % 1_000_000) as f64) < share * 1_000_000.0
}
