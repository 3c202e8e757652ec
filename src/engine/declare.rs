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

/// Validates one `rule { … }` table.
pub(super) fn declaration(def: &Table, file: &str) -> Result<(RuleMeta, Function), String> {
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
        let (k, _) = pair.map_err(|e| describe(&e))?;
        let known = match &k {
            Value::String(s) => s.to_str().is_ok_and(|s| FIELDS.contains(&&*s)),
            _ => false,
        };
        if !known {
            return Err(format!(
                "rule: unknown field {k:?} (fields: {})",
                FIELDS.join(", ")
            ));
        }
    }
    let name: String = match def.get::<Value>("name") {
        Ok(Value::String(s)) => s.to_str().map_err(|e| describe(&e))?.to_string(),
        _ => return Err("rule: `name` (a string) is required".into()),
    };
    if !is_symbol_name(&name) {
        return Err(format!(
            "rule {name:?}: names are A-Z, 0-9 and _, starting with a letter, at most 64"
        ));
    }
    let check: Function = match def.get::<Value>("check") {
        Ok(Value::Function(f)) => f,
        _ => return Err(format!("rule {name}: `check` (a function) is required")),
    };
    let text = |field: &str| -> Result<String, String> {
        match def.get::<Value>(field) {
            Ok(Value::Nil) => Ok(String::new()),
            Ok(Value::String(s)) => Ok(s.to_str().map_err(|e| describe(&e))?.to_string()),
            _ => Err(format!("rule {name}: `{field}` must be a string")),
        }
    };
    let description = text("description")?;
    let group = text("group")?;
    let action_of = |v: Value| -> Result<Option<Action>, String> {
        match v {
            Value::Nil => Ok(None),
            Value::String(s) => {
                let s = s.to_str().map_err(|e| describe(&e))?;
                Action::parse(&s)
                    .map(Some)
                    .ok_or_else(|| format!("rule {name}: unknown action {:?}", &*s))
            }
            _ => Err(format!("rule {name}: an action must be a string")),
        }
    };
    let shadow = match def.get::<Value>("shadow") {
        Ok(Value::Nil) => false,
        Ok(Value::Boolean(b)) => b,
        _ => return Err(format!("rule {name}: `shadow` must be a boolean")),
    };
    let share = match def.get::<Value>("share") {
        Ok(Value::Nil) => None,
        Ok(Value::Number(n)) if n > 0.0 && n <= 1.0 => Some(n),
        Ok(Value::Integer(1)) => Some(1.0),
        _ => return Err(format!("rule {name}: `share` must be a number in (0, 1]")),
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
            let score = number(s).ok_or_else(|| {
                format!("rule {name}: `score` (a number) or `scores` is required")
            })?;
            if !matches!(def.get::<Value>("actions"), Ok(Value::Nil)) {
                return Err(format!(
                    "rule {name}: `actions` is for rules with `scores`; use `action`"
                ));
            }
            let action = action_of(def.get::<Value>("action").unwrap_or(Value::Nil))?;
            (
                vec![SymbolMeta {
                    name: name.clone(),
                    score,
                    description: description.clone(),
                    group: group.clone(),
                    action,
                }],
                false,
            )
        }
        (Value::Nil, Value::Table(t)) => {
            let actions = match def.get::<Value>("actions") {
                Ok(Value::Nil) => None,
                Ok(Value::Table(a)) => Some(a),
                _ => return Err(format!("rule {name}: `actions` must be a table")),
            };
            if !matches!(def.get::<Value>("action"), Ok(Value::Nil)) {
                return Err(format!(
                    "rule {name}: use `actions = {{ SYMBOL = \"…\" }}` with `scores`"
                ));
            }
            let mut symbols = Vec::new();
            for pair in t.clone().pairs::<Value, Value>() {
                let (k, v) = pair.map_err(|e| describe(&e))?;
                let sym = match &k {
                    Value::String(s) => s.to_str().map_err(|e| describe(&e))?.to_string(),
                    _ => return Err(format!("rule {name}: `scores` keys must be symbol names")),
                };
                if !is_symbol_name(&sym) {
                    return Err(format!("rule {name}: bad symbol name {sym:?}"));
                }
                let score = number(&v)
                    .ok_or_else(|| format!("rule {name}: score of {sym} must be a number"))?;
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
                });
            }
            if symbols.is_empty() {
                return Err(format!("rule {name}: `scores` declares no symbol"));
            }
            if let Some(a) = &actions {
                for pair in a.clone().pairs::<String, Value>() {
                    let (k, _) = pair.map_err(|e| describe(&e))?;
                    if !symbols.iter().any(|s| s.name == k) {
                        return Err(format!("rule {name}: action for undeclared symbol {k}"));
                    }
                }
            }
            symbols.sort_by(|a, b| a.name.cmp(&b.name));
            (symbols, true)
        }
        _ => {
            return Err(format!(
                "rule {name}: give either `score` or `scores`, not both"
            ))
        }
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
