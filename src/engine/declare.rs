//! `rule { ... }` declarations: the fields a rule table may have, and their checks.

use mlua::{Function, Table, Value};

use super::state::describe;
use super::{Action, RuleMeta, SymbolMeta};

fn is_symbol_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && b[0].is_ascii_uppercase()
        && b.iter()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_')
}

/// Why a `rule { … }` table was refused (the text `rule()` raises).
#[derive(Debug, thiserror::Error)]
pub(super) enum DeclarationError {
    /// Before the rule has a valid name.
    #[error("rule: {0}")]
    Unnamed(String),
    #[error("rule {0:?}: names are A-Z, 0-9 and _, starting with a letter, at most 64")]
    BadName(String),
    /// What is wrong with the rule called `rule`.
    #[error("rule {rule}: {problem}")]
    Rule { rule: String, problem: String },
    /// Reading the table raised (a metamethod, a string that is no UTF-8).
    #[error("{0}")]
    Lua(String),
}

impl From<mlua::Error> for DeclarationError {
    fn from(e: mlua::Error) -> Self {
        DeclarationError::Lua(describe(&e))
    }
}

/// Validates one `rule { … }` table.
pub(super) fn declaration(
    def: &Table,
    file: &str,
) -> Result<(RuleMeta, Function), DeclarationError> {
    const FIELDS: &[&str] = &[
        "name",
        "score",
        "scores",
        "description",
        "group",
        "check",
        "action",
        "actions",
        "shadow",
        "share",
    ];
    for pair in def.clone().pairs::<Value, Value>() {
        let (k, _) = pair?;
        let known = match &k {
            Value::String(s) => s.to_str().is_ok_and(|s| FIELDS.contains(&&*s)),
            _ => false,
        };
        if !known {
            return Err(DeclarationError::Unnamed(format!(
                "unknown field {k:?} (fields: {})",
                FIELDS.join(", ")
            )));
        }
    }
    let name: String = match def.get::<Value>("name") {
        Ok(Value::String(s)) => s.to_str()?.to_string(),
        _ => {
            return Err(DeclarationError::Unnamed(
                "`name` (a string) is required".into(),
            ))
        }
    };
    if !is_symbol_name(&name) {
        return Err(DeclarationError::BadName(name));
    }
    let bad = |problem: &dyn std::fmt::Display| DeclarationError::Rule {
        rule: name.clone(),
        problem: problem.to_string(),
    };
    let check: Function = match def.get::<Value>("check") {
        Ok(Value::Function(f)) => f,
        _ => return Err(bad(&"`check` (a function) is required")),
    };
    let text = |field: &str| -> Result<String, DeclarationError> {
        match def.get::<Value>(field) {
            Ok(Value::Nil) => Ok(String::new()),
            Ok(Value::String(s)) => Ok(s.to_str()?.to_string()),
            _ => Err(bad(&format!("`{field}` must be a string"))),
        }
    };
    let description = text("description")?;
    let group = text("group")?;
    let action_of = |v: Value| -> Result<Option<Action>, DeclarationError> {
        match v {
            Value::Nil => Ok(None),
            Value::String(s) => {
                let s = s.to_str()?;
                Action::parse(&s)
                    .map(Some)
                    .ok_or_else(|| bad(&format!("unknown action {:?}", &*s)))
            }
            _ => Err(bad(&"an action must be a string")),
        }
    };
    let shadow = match def.get::<Value>("shadow") {
        Ok(Value::Nil) => false,
        Ok(Value::Boolean(b)) => b,
        _ => return Err(bad(&"`shadow` must be a boolean")),
    };
    let share = match def.get::<Value>("share") {
        Ok(Value::Nil) => None,
        Ok(Value::Number(n)) if n > 0.0 && n <= 1.0 => Some(n),
        Ok(Value::Integer(1)) => Some(1.0),
        _ => return Err(bad(&"`share` must be a number in (0, 1]")),
    };
    let score = def.get::<Value>("score").unwrap_or(Value::Nil);
    let scores = def.get::<Value>("scores").unwrap_or(Value::Nil);
    let number = |v: &Value| -> Option<f64> {
        match v {
            Value::Integer(i) => Some(*i as f64),
            Value::Number(n) if n.is_finite() => Some(*n),
            _ => None,
        }
    };
    let (symbols, multi) = match (&score, &scores) {
        (s, Value::Nil) => {
            let score =
                number(s).ok_or_else(|| bad(&"`score` (a number) or `scores` is required"))?;
            if !matches!(def.get::<Value>("actions"), Ok(Value::Nil)) {
                return Err(bad(&"`actions` is for rules with `scores`; use `action`"));
            }
            let action = action_of(def.get::<Value>("action").unwrap_or(Value::Nil))?;
            (
                vec![SymbolMeta {
                    name: name.clone(),
                    score,
                    description: description.clone(),
                    group: group.clone(),
                    action,
                    off: false,
                }],
                false,
            )
        }
        (Value::Nil, Value::Table(t)) => {
            let actions = match def.get::<Value>("actions") {
                Ok(Value::Nil) => None,
                Ok(Value::Table(a)) => Some(a),
                _ => return Err(bad(&"`actions` must be a table")),
            };
            if !matches!(def.get::<Value>("action"), Ok(Value::Nil)) {
                return Err(bad(&"use `actions = { SYMBOL = \"…\" }` with `scores`"));
            }
            let mut symbols = Vec::new();
            for pair in t.clone().pairs::<Value, Value>() {
                let (k, v) = pair?;
                let sym = match &k {
                    Value::String(s) => s.to_str()?.to_string(),
                    _ => return Err(bad(&"`scores` keys must be symbol names")),
                };
                if !is_symbol_name(&sym) {
                    return Err(bad(&format!("bad symbol name {sym:?}")));
                }
                let score =
                    number(&v).ok_or_else(|| bad(&format!("score of {sym} must be a number")))?;
                let action = match &actions {
                    Some(a) => action_of(a.get::<Value>(sym.as_str()).unwrap_or(Value::Nil))?,
                    None => None,
                };
                symbols.push(SymbolMeta {
                    name: sym,
                    score,
                    description: description.clone(),
                    group: group.clone(),
                    action,
                    off: false,
                });
            }
            if symbols.is_empty() {
                return Err(bad(&"`scores` declares no symbol"));
            }
            if let Some(a) = &actions {
                for pair in a.clone().pairs::<String, Value>() {
                    let (k, _) = pair?;
                    if !symbols.iter().any(|s| s.name == k) {
                        return Err(bad(&format!("action for undeclared symbol {k}")));
                    }
                }
            }
            symbols.sort_by(|a, b| a.name.cmp(&b.name));
            (symbols, true)
        }
        _ => return Err(bad(&"give either `score` or `scores`, not both")),
    };
    Ok((
        RuleMeta {
            name,
            file: file.to_string(),
            symbols,
            multi,
            shadow,
            share,
        },
        check,
    ))
}
