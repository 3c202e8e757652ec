//! `feature { … }`: windowed features a rule file declares and any rule reads with
//! `msg:feature(name)` (docs/rules.md, "Windowed features").
//!
//! Extract → merge → build: for each message, a feature's `key` function names what it is
//! counted per (a sender, a client IP…) and its `value` function what this message adds. A
//! read gives the value over the feature's window from the store as it was before this message;
//! the message's own contribution is merged after the verdict, off the reply path, with the
//! store's other updates (`RuleOutcome::feature_updates`, applied by `Scanner::apply`), so
//! `shrike scan`, `serve` and `replay` see the same values.
//!
//! Storage is the reputation store's, through its feature methods: a feature key's `seen`
//! column counts the messages, its `spam` column sums their values (count, sum, ratio); a
//! distinct value is a paired key counted once per window (as `unique_sender` counts
//! recipients), so features persist, expire and sweep like the counters. Windows are the
//! store's (`10m`, `1h`, `24h`, `7d`, `14d` by default) and slide by its finest bucket.
//!
//! Failures stay inside the rules: a key or value function that raises (or returns a value of
//! the wrong type) fails that feature for the message. A rule reading it gets `RULE_ERROR`
//! naming the feature; a feature no rule read is reported as `RULE_ERROR` of `feature NAME`;
//! the scan goes on and the feature contributes nothing.

use std::rc::Rc;
use std::sync::Arc;

use mlua::{Lua, Table, Value};
use serde::Serialize;

use super::state::{describe, BuildEnv, StateCtx};
use crate::shingle::hash_pair;
use crate::store::{Counter, Increment, ReputationStore, StoreKey, COUNTERS};

/// Store key type of a feature's key (outside the shingle type table, beside `ratelimit`'s).
pub const FEATURE_KIND: u16 = 1_001;
/// Store key type of a distinct feature's (key, value) pairs.
pub const FEATURE_VALUE_KIND: u16 = 1_002;
/// `max_distinct` when a distinct feature gives none.
pub const DEFAULT_MAX_DISTINCT: u64 = 1_000;
/// Largest `max_distinct` (each distinct value is a store key).
pub const MAX_MAX_DISTINCT: u64 = 1_000_000;
/// Most features a rule set may declare.
pub const MAX_FEATURES: usize = 256;

/// What a feature computes over its window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FeatureKind {
    /// Messages with this key.
    Count,
    /// Sum of their values (non-negative integers; true is 1).
    Sum,
    /// Distinct values, exact up to `max_distinct`, then saturated.
    Distinct,
    /// Share of the messages whose value is true (or non-zero): sum / count.
    Ratio,
}

impl FeatureKind {
    fn parse(s: &str) -> Option<FeatureKind> {
        Some(match s {
            "count" => FeatureKind::Count,
            "sum" => FeatureKind::Sum,
            "distinct" => FeatureKind::Distinct,
            "ratio" => FeatureKind::Ratio,
            _ => return None,
        })
    }
}

/// A feature's declaration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FeatureMeta {
    pub name: String,
    /// The file that declared it.
    pub file: String,
    pub kind: FeatureKind,
    /// The window's name (`1h`).
    pub window: String,
    pub window_secs: u64,
    /// The window's index among the store's windows.
    #[serde(skip)]
    pub window_index: usize,
    /// Distinct features: values counted exactly before the feature saturates.
    pub max_distinct: u64,
}

/// What a scan adds to the features, applied after the verdict.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeatureUpdates {
    /// Count, sum and ratio contributions (`seen` 1, `spam` the value).
    pub adds: Vec<Increment>,
    /// Distinct values: `(pair, unique, window_secs)`.
    pub distinct: Vec<(StoreKey, StoreKey, u64)>,
}

impl FeatureUpdates {
    pub fn is_empty(&self) -> bool {
        self.adds.is_empty() && self.distinct.is_empty()
    }

    /// Applies them to `store` (`Scanner::apply`).
    pub fn apply(&self, store: &dyn ReputationStore) {
        if !self.adds.is_empty() {
            store.feature_add(&self.adds);
        }
        for &(pair, unique, window) in &self.distinct {
            store.feature_distinct(pair, unique, window);
        }
    }
}

/// Why a `feature { … }` table was refused (the text `feature()` raises).
fn bad(name: &str, problem: impl std::fmt::Display) -> String {
    format!("feature {name:?}: {problem}")
}

fn is_feature_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || c == b'-')
}

/// Validates one `feature { … }` table against the store's windows.
fn declaration(def: &Table, file: &str, windows: &[u64]) -> Result<FeatureMeta, String> {
    const FIELDS: &[&str] = &["name", "key", "value", "kind", "window", "max_distinct"];
    for pair in def.clone().pairs::<Value, Value>() {
        let (k, _) = pair.map_err(|e| describe(&e))?;
        let known =
            matches!(&k, Value::String(s) if s.to_str().is_ok_and(|s| FIELDS.contains(&&*s)));
        if !known {
            return Err(format!(
                "feature: unknown field {k:?} (fields: {})",
                FIELDS.join(", ")
            ));
        }
    }
    let name = match def.get::<Value>("name") {
        Ok(Value::String(s)) => s.to_string_lossy(),
        _ => return Err("feature: `name` (a string) is required".into()),
    };
    if !is_feature_name(&name) {
        return Err(bad(&name, "names are letters, digits, _ . -, at most 64"));
    }
    if !matches!(def.get::<Value>("key"), Ok(Value::Function(_))) {
        return Err(bad(&name, "`key` (a function of msg) is required"));
    }
    let kind = match def.get::<Value>("kind") {
        Ok(Value::String(s)) => FeatureKind::parse(&s.to_string_lossy()),
        _ => None,
    }
    .ok_or_else(|| {
        bad(
            &name,
            "`kind` must be \"count\", \"sum\", \"distinct\" or \"ratio\"",
        )
    })?;
    match (kind, def.get::<Value>("value")) {
        (FeatureKind::Count, Ok(Value::Nil | Value::Function(_))) => {}
        (_, Ok(Value::Function(_))) => {}
        (FeatureKind::Count, _) => return Err(bad(&name, "`value` must be a function")),
        _ => {
            return Err(bad(
                &name,
                "`value` (a function of msg) is required for this kind",
            ))
        }
    }
    let names = super::view::WindowNames::new(windows);
    let window = match def.get::<Value>("window") {
        Ok(Value::String(s)) => s.to_string_lossy(),
        _ => return Err(bad(&name, "`window` (a string such as \"1h\") is required")),
    };
    let window_index = names.index(window.as_bytes()).ok_or_else(|| {
        bad(
            &name,
            format!(
                "window {window:?} is not one of the store's windows ({}; [store] windows_secs)",
                names.names().join(", ")
            ),
        )
    })?;
    let max_distinct = match def.get::<Value>("max_distinct") {
        Ok(Value::Nil) => DEFAULT_MAX_DISTINCT,
        Ok(Value::Integer(n)) if (1..=MAX_MAX_DISTINCT as i64).contains(&n) => n as u64,
        Ok(Value::Number(n))
            if n.fract() == 0.0 && (1.0..=MAX_MAX_DISTINCT as f64).contains(&n) =>
        {
            n as u64
        }
        _ => {
            return Err(bad(
                &name,
                format!("`max_distinct` must be an integer in 1..={MAX_MAX_DISTINCT}"),
            ))
        }
    };
    if kind != FeatureKind::Distinct && !matches!(def.get::<Value>("max_distinct"), Ok(Value::Nil))
    {
        return Err(bad(&name, "`max_distinct` is for kind \"distinct\""));
    }
    Ok(FeatureMeta {
        name,
        file: file.to_string(),
        kind,
        window,
        window_secs: windows[window_index],
        window_index,
        max_distinct,
    })
}

/// What a message gives a feature, once its functions ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Contribution {
    /// Count, sum, ratio: `seen` 1 and this in `spam`.
    Add(u64),
    /// Distinct: the value's hash.
    Value(u64),
}

/// A feature's state in the current scan.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) enum Slot {
    /// Its functions have not run yet.
    #[default]
    Pending,
    /// Its key or value function failed: the reason.
    Failed(String),
    Done {
        /// None: the message has no key for this feature (nothing read, nothing added).
        key: Option<StoreKey>,
        add: Option<Contribution>,
        /// `(count, sum)` over the window before this message, once read.
        read: Option<(u64, u64)>,
    },
}

/// The features of a Lua state and their state in the current scan.
#[derive(Debug, Default)]
pub(super) struct Features {
    /// Declared while the rule files load, in order.
    pub(super) metas: Vec<FeatureMeta>,
    /// One per feature during a scan; empty outside scans.
    pub(super) slots: Vec<Slot>,
}

/// The value a read gives and whether a distinct feature is saturated.
fn value_of(meta: &FeatureMeta, count: u64, sum: u64) -> (Value, bool) {
    let int = |n: u64| Value::Integer(i64::try_from(n).unwrap_or(i64::MAX));
    match meta.kind {
        FeatureKind::Count => (int(count), false),
        FeatureKind::Sum => (int(sum), false),
        FeatureKind::Ratio if count == 0 => (Value::Nil, false),
        FeatureKind::Ratio => (Value::Number(sum.min(count) as f64 / count as f64), false),
        FeatureKind::Distinct => (
            int(count.min(meta.max_distinct)),
            count >= meta.max_distinct,
        ),
    }
}

/// A key or a distinct value as text: strings as they are, numbers as Lua prints them.
fn text_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.to_string_lossy()),
        Value::Integer(i) => Some(i.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Reads the features' windows from the store (for `msg:feature` and the merge).
struct Reader {
    store: Arc<dyn ReputationStore>,
}

impl Reader {
    fn read(&self, meta: &FeatureMeta, key: StoreKey) -> (u64, u64) {
        let sums = self.store.feature_read(&[key]);
        let window = sums
            .first()
            .and_then(|w| w.windows.get(meta.window_index).copied())
            .unwrap_or([0; COUNTERS]);
        (
            window[Counter::Seen as usize],
            window[Counter::Spam as usize],
        )
    }
}

/// Puts `feature`, `feature_state`, `feature_set` and `feature_read` into `rust`.
pub(super) fn install(
    lua: &Lua,
    ctx: &Rc<StateCtx>,
    rust: &Table,
    env: &BuildEnv<'_>,
) -> mlua::Result<()> {
    let windows = env.store.windows_secs().to_vec();
    let c = Rc::clone(ctx);
    rust.raw_set(
        "feature",
        lua.create_function(move |_, def: Value| {
            let Value::Table(def) = def else {
                return Ok((
                    Some("feature: expects a table: feature { name = …, … }".to_string()),
                    None,
                ));
            };
            let file = c.loading_file.borrow().clone();
            let mut f = c.features.borrow_mut();
            match declaration(&def, &file, &windows) {
                Ok(_) if f.metas.len() >= MAX_FEATURES => Ok((
                    Some(format!("feature: more than {MAX_FEATURES} features")),
                    None,
                )),
                Ok(meta) => {
                    if let Some(other) = f.metas.iter().find(|m| m.name == meta.name) {
                        return Ok((
                            Some(format!(
                                "feature {:?} is already declared in {}",
                                meta.name, other.file
                            )),
                            None,
                        ));
                    }
                    f.metas.push(meta);
                    Ok((None, Some(f.metas.len())))
                }
                Err(e) => Ok((Some(e), None)),
            }
        })?,
    )?;

    let c = Rc::clone(ctx);
    rust.raw_set(
        "feature_state",
        lua.create_function(move |_, i: usize| {
            let f = c.features.borrow();
            match f.slots.get(i.wrapping_sub(1)) {
                Some(Slot::Pending) => Ok(0),
                Some(Slot::Done { .. }) => Ok(1),
                Some(Slot::Failed(_)) => Ok(2),
                None => Err(mlua::Error::runtime("msg used outside its scan")),
            }
        })?,
    )?;

    let c = Rc::clone(ctx);
    let namespace = env.namespace;
    rust.raw_set(
        "feature_set",
        lua.create_function(move |_, (i, ok, key, value): (usize, bool, Value, Value)| {
            let mut f = c.features.borrow_mut();
            let Some(meta) = f.metas.get(i.wrapping_sub(1)).cloned() else {
                return Err(mlua::Error::runtime("msg used outside its scan"));
            };
            let slot = if !ok {
                Slot::Failed(text_of(&key).unwrap_or_else(|| "error".into()))
            } else {
                contribution(&meta, namespace, &key, &value)
            };
            if let Some(s) = f.slots.get_mut(i - 1) {
                *s = slot;
            }
            Ok(())
        })?,
    )?;

    let c = Rc::clone(ctx);
    let reader = Reader {
        store: Arc::clone(env.store),
    };
    rust.raw_set(
        "feature_read",
        lua.create_function(move |_, i: usize| {
            let mut f = c.features.borrow_mut();
            let Features { metas, slots } = &mut *f;
            let (Some(meta), Some(slot)) = (
                metas.get(i.wrapping_sub(1)),
                slots.get_mut(i.wrapping_sub(1)),
            ) else {
                return Err(mlua::Error::runtime("msg used outside its scan"));
            };
            match slot {
                Slot::Pending => Err(mlua::Error::runtime(format!(
                    "feature {}: not computed",
                    meta.name
                ))),
                Slot::Failed(why) => Err(mlua::Error::runtime(format!(
                    "feature {}: {why}",
                    meta.name
                ))),
                Slot::Done { key: None, .. } => Ok((Value::Nil, false)),
                Slot::Done {
                    key: Some(key),
                    read,
                    ..
                } => {
                    let (count, sum) = *read.get_or_insert_with(|| reader.read(meta, *key));
                    Ok(value_of(meta, count, sum))
                }
            }
        })?,
    )?;
    Ok(())
}

/// A message's key and value for `meta`, as the slot they make.
fn contribution(meta: &FeatureMeta, namespace: u8, key: &Value, value: &Value) -> Slot {
    if matches!(key, Value::Nil) {
        return Slot::Done {
            key: None,
            add: None,
            read: None,
        };
    }
    let Some(key_text) = text_of(key) else {
        return Slot::Failed(format!(
            "key must return a string or a number, got {}",
            key.type_name()
        ));
    };
    let store_key = StoreKey {
        namespace,
        kind: FEATURE_KIND,
        hash: hash_pair(&meta.name, &key_text),
    };
    let add = match (meta.kind, value) {
        (FeatureKind::Count, _) => Some(Contribution::Add(0)),
        (_, Value::Nil) => None,
        (FeatureKind::Sum | FeatureKind::Ratio, Value::Boolean(b)) => {
            Some(Contribution::Add(u64::from(*b)))
        }
        (FeatureKind::Sum, Value::Integer(n)) => Some(Contribution::Add((*n).max(0) as u64)),
        (FeatureKind::Sum, Value::Number(n)) if n.is_finite() => {
            Some(Contribution::Add(n.max(0.0).round() as u64))
        }
        (FeatureKind::Ratio, Value::Integer(n)) => Some(Contribution::Add(u64::from(*n != 0))),
        (FeatureKind::Ratio, Value::Number(n)) => Some(Contribution::Add(u64::from(*n != 0.0))),
        (FeatureKind::Distinct, v) => match text_of(v) {
            Some(t) => Some(Contribution::Value(xxhash_rust::xxh3::xxh3_64_with_seed(
                t.as_bytes(),
                store_key.hash,
            ))),
            None => {
                return Slot::Failed(format!(
                    "value must return a string or a number, got {}",
                    v.type_name()
                ))
            }
        },
        (_, v) => {
            return Slot::Failed(format!(
                "value must return a number or a boolean, got {}",
                v.type_name()
            ))
        }
    };
    Slot::Done {
        key: Some(store_key),
        add,
        read: None,
    }
}

/// After the rules: the failures to report and, unless the scan only observes, what the
/// message adds. Distinct features not read yet are read here (a saturated one adds no value).
pub(super) fn collect(
    ctx: &StateCtx,
    store: &Arc<dyn ReputationStore>,
    observe: bool,
    errors: &mut Vec<(String, String)>,
) -> FeatureUpdates {
    let mut out = FeatureUpdates::default();
    let mut f = ctx.features.borrow_mut();
    let Features { metas, slots } = &mut *f;
    let reader = Reader {
        store: Arc::clone(store),
    };
    for (meta, slot) in metas.iter().zip(slots.iter_mut()) {
        match slot {
            Slot::Pending => {}
            Slot::Failed(why) => errors.push((format!("feature {}", meta.name), why.clone())),
            Slot::Done {
                key: Some(key),
                add: Some(add),
                read,
            } if !observe => match *add {
                Contribution::Add(v) => {
                    let mut counts = [0; COUNTERS];
                    counts[Counter::Seen as usize] = 1;
                    counts[Counter::Spam as usize] = v;
                    out.adds.push(Increment { key: *key, counts });
                }
                Contribution::Value(hash) => {
                    let (count, _) = *read.get_or_insert_with(|| reader.read(meta, *key));
                    if count < meta.max_distinct {
                        let pair = StoreKey {
                            namespace: key.namespace,
                            kind: FEATURE_VALUE_KIND,
                            hash,
                        };
                        out.distinct.push((pair, *key, meta.window_secs));
                    }
                }
            },
            Slot::Done { .. } => {}
        }
    }
    out
}
