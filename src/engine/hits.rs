//! What a rule's check returned, read into hits: `interpret` for any return value (the loop in
//! `ffi/rules.rs` reads the plain forms itself, `plain_hit`, and must agree with this), the
//! options' limits, and the text of a caught error.

use mlua::{MultiValue, Value};

use super::api::sequence;
use super::state::describe;
use super::RuleMeta;

/// Options kept per symbol, and bytes per option.
pub(super) const MAX_OPTIONS: usize = 32;
pub(super) const MAX_OPTION_BYTES: usize = 512;

/// A hit: (symbol index, weight, options).
pub(super) type Found = (usize, f64, Vec<String>);

/// Cuts an option to `MAX_OPTION_BYTES` at a character boundary.
pub(super) fn truncate_option(s: &mut String) {
    if s.len() > MAX_OPTION_BYTES {
        let mut end = MAX_OPTION_BYTES;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

/// Why a check's return values are no hits (recorded as the rule's error).
#[derive(Debug, thiserror::Error)]
pub(super) enum HitError {
    #[error("rule {rule} returned undeclared symbol {symbol}")]
    Undeclared { rule: String, symbol: String },
    #[error("rule {rule}: hit tables map symbol names")]
    KeyNotName { rule: String },
    #[error("rule {rule} returned {found} where a hit (true/false/weight) was expected")]
    NotWeight { rule: String, found: &'static str },
    #[error("rule {rule} declares several symbols: return a symbol name or a table of hits")]
    NotHits { rule: String },
    /// Reading the values raised (a metamethod of an options table).
    #[error("{0}")]
    Lua(String),
}

impl From<mlua::Error> for HitError {
    fn from(e: mlua::Error) -> Self {
        HitError::Lua(describe(&e))
    }
}

/// Reads a check's return values: `(symbol index, weight, options)` per hit.
pub(super) fn interpret(meta: &RuleMeta, values: MultiValue) -> Result<Vec<Found>, HitError> {
    let mut it = values.into_iter();
    let first = it.next().unwrap_or(Value::Nil);
    let symbol_index = |name: &str| -> Result<usize, HitError> {
        meta.symbols
            .iter()
            .position(|s| s.name == name)
            .ok_or_else(|| HitError::Undeclared {
                rule: meta.name.clone(),
                symbol: name.to_string(),
            })
    };
    match first {
        Value::Table(t) if meta.multi => {
            let mut hits = Vec::new();
            for pair in t.pairs::<Value, Value>() {
                let (k, v) = pair?;
                let name = match &k {
                    Value::String(s) => s.to_string_lossy(),
                    _ => {
                        return Err(HitError::KeyNotName {
                            rule: meta.name.clone(),
                        })
                    }
                };
                let si = symbol_index(&name)?;
                let (weight, options) = match v {
                    Value::Table(o) => {
                        let w = match o.raw_get::<Value>("weight")? {
                            Value::Nil => 1.0,
                            w => weight(&w, meta)?.unwrap_or(0.0),
                        };
                        (Some(w), options_of(std::iter::once(Value::Table(o)))?)
                    }
                    other => (weight(&other, meta)?, Vec::new()),
                };
                if let Some(w) = weight.filter(|w| *w != 0.0) {
                    hits.push((si, w, options));
                }
            }
            hits.sort_by_key(|h| h.0);
            Ok(hits)
        }
        Value::String(s) => {
            let name = s.to_string_lossy();
            let si = symbol_index(&name)?;
            let rest: Vec<Value> = it.collect();
            let (w, opts) = match rest.first() {
                Some(
                    v @ (Value::Boolean(_) | Value::Integer(_) | Value::Number(_) | Value::Nil),
                ) => (weight(v, meta)?, options_of(rest.into_iter().skip(1))?),
                _ => (Some(1.0), options_of(rest.into_iter())?),
            };
            Ok(match w.filter(|w| *w != 0.0) {
                Some(w) => vec![(si, w, opts)],
                None => Vec::new(),
            })
        }
        other if !meta.multi => match weight(&other, meta)? {
            Some(w) if w != 0.0 => Ok(vec![(0, w, options_of(it)?)]),
            _ => Ok(Vec::new()),
        },
        Value::Nil | Value::Boolean(false) => Ok(Vec::new()),
        _ => Err(HitError::NotHits {
            rule: meta.name.clone(),
        }),
    }
}

fn weight(v: &Value, meta: &RuleMeta) -> Result<Option<f64>, HitError> {
    match v {
        Value::Nil | Value::Boolean(false) => Ok(None),
        Value::Boolean(true) => Ok(Some(1.0)),
        Value::Integer(i) => Ok(Some(*i as f64)),
        Value::Number(n) if n.is_finite() => Ok(Some(*n)),
        other => Err(HitError::NotWeight {
            rule: meta.name.clone(),
            found: other.type_name(),
        }),
    }
}

fn options_of(values: impl Iterator<Item = Value>) -> Result<Vec<String>, HitError> {
    let mut out = Vec::new();
    let mut push = |v: &Value| {
        if out.len() >= MAX_OPTIONS {
            return;
        }
        let s = match v {
            Value::String(s) => s.to_string_lossy(),
            Value::Integer(i) => i.to_string(),
            Value::Number(n) => n.to_string(),
            Value::Boolean(b) => b.to_string(),
            _ => return,
        };
        let mut s = s;
        truncate_option(&mut s);
        out.push(s);
    };
    for v in values {
        match &v {
            Value::Table(t) => {
                for item in sequence(t)? {
                    push(&item);
                }
            }
            other => push(other),
        }
    }
    Ok(out)
}

/// The text of an error value a rule's protected call caught, and whether it is Lua's
/// out-of-memory error (the state is then collected after the scan).
pub(super) fn error_value(v: Value) -> (String, bool) {
    match v {
        Value::Error(e) => {
            let memory = matches!(*e, mlua::Error::MemoryError(_));
            (describe(&e), memory)
        }
        // what Lua raises when an allocation fails (here: the state's memory limit)
        Value::String(s) if s.as_bytes() == b"not enough memory" => {
            (describe(&mlua::Error::MemoryError(String::new())), true)
        }
        Value::String(s) => (s.to_string_lossy(), false),
        Value::Nil => ("nil".into(), false),
        other => (
            other
                .to_string()
                .unwrap_or_else(|_| format!("(error object: {})", other.type_name())),
            false,
        ),
    }
}
