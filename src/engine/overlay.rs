//! Local changes to a rule set that need no copy of its files: the configuration's `[scores]`
//! (a symbol's score; 0 turns it off) and `[rules] disabled` (symbols or whole rules off), and
//! the effective set they make (`shrike rules list`). Files replaced or added by local rule
//! directories are `source.rs`'s layers; this module only changes declared scores.
//!
//! Overrides are applied where a generation's declarations are read (`state.rs`), to the
//! generation's own list and to each worker's state alike, so both keep the same rule indices.
//! A rule whose every symbol is off is not run at all; a symbol off in a rule that still runs
//! is dropped from its hits.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{Generation, RuleMeta};
use crate::settings::{Profile, SettingsTable};

/// `[rules]` of the configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RulesConfig {
    /// Symbols (or rule names) turned off, as if their score were 0.
    pub disabled: Vec<String>,
}

/// Why `[scores]` or `[rules]` cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OverrideError {
    #[error("scores.{0} must be a finite number")]
    NotFinite(String),
}

/// The score changes and switched-off symbols a generation is built with.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    /// Symbol → score (0: off).
    pub scores: BTreeMap<String, f64>,
    /// Symbols or rule names turned off.
    pub disabled: BTreeSet<String>,
    /// Where they were read (the configuration file), for `rules list`.
    pub origin: Option<String>,
    /// `[[settings]]`: per-recipient changes over these, read and swapped in with them.
    pub settings: Arc<SettingsTable>,
}

impl Overrides {
    /// From the configuration's `[scores]` and `[rules]`.
    pub fn new(
        scores: &BTreeMap<String, f64>,
        rules: &RulesConfig,
        origin: Option<String>,
    ) -> Result<Overrides, OverrideError> {
        if let Some((k, _)) = scores.iter().find(|(_, v)| !v.is_finite()) {
            return Err(OverrideError::NotFinite(k.clone()));
        }
        Ok(Overrides {
            scores: scores.clone(),
            disabled: rules.disabled.iter().cloned().collect(),
            origin,
            settings: Arc::default(),
        })
    }

    /// With `[[settings]]` (checked against the rules when a generation is built).
    pub fn with_settings(mut self, settings: SettingsTable) -> Overrides {
        self.settings = Arc::new(settings);
        self
    }

    pub fn is_empty(&self) -> bool {
        self.scores.is_empty() && self.disabled.is_empty() && self.settings.is_empty()
    }

    fn symbol_off(&self, rule: &str, symbol: &str) -> bool {
        self.disabled.contains(rule)
            || self.disabled.contains(symbol)
            || self.scores.get(symbol).is_some_and(|s| *s == 0.0)
    }

    /// Applies the overrides to declared rules: scores changed, symbols marked off. Returns,
    /// per rule, whether it still runs (some symbol is on).
    pub(super) fn apply(&self, rules: &mut [RuleMeta]) -> Vec<bool> {
        rules
            .iter_mut()
            .map(|r| {
                for s in &mut r.symbols {
                    if let Some(&score) = self.scores.get(&s.name) {
                        s.score = score;
                    }
                    s.off = self.symbol_off(&r.name, &s.name);
                }
                r.symbols.iter().any(|s| !s.off)
            })
            .collect()
    }

    /// Names in `[scores]` or `[rules] disabled` that no rule declares (likely typos).
    pub fn unknown(&self, declared: &[RuleMeta]) -> Vec<String> {
        let known = |n: &str| {
            declared
                .iter()
                .any(|r| r.name == n || r.symbols.iter().any(|s| s.name == n))
        };
        self.scores
            .keys()
            .chain(&self.disabled)
            .filter(|n| !known(n))
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }
}

/// One symbol of the effective set, as `shrike rules list` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ListedSymbol {
    pub symbol: String,
    pub rule: String,
    /// The score a hit adds (0 when off).
    pub score: f64,
    /// The score the rule file declares.
    pub declared: f64,
    pub enabled: bool,
    /// "shipped" or the local file's path.
    pub source: String,
    /// What changed it: a replaced file, a score or a switch in the configuration.
    pub overridden: Vec<String>,
}

/// The effective set of `generation`: every declared symbol with its score, file and changes.
pub fn list(generation: &Generation) -> Vec<ListedSymbol> {
    list_for(generation, None)
}

/// The effective set for recipients under `profile` (`rules list --settings NAME`): the
/// global set with the entry's scores and switches over it. A symbol the global set turns off
/// does not run, so an entry cannot turn it back on.
pub fn list_for(generation: &Generation, profile: Option<&Profile>) -> Vec<ListedSymbol> {
    let o = &generation.overrides;
    let origin = o.origin.as_deref().unwrap_or("the configuration");
    let mut out = Vec::new();
    for r in &generation.declared {
        let file = generation.sources.rules.iter().find(|f| f.name == r.file);
        let source = match file {
            Some(f) if f.shipped => "shipped".to_string(),
            _ => r.file.clone(),
        };
        for s in &r.symbols {
            let mut overridden = Vec::new();
            if let Some(old) = file.and_then(|f| f.replaces.as_deref()) {
                overridden.push(format!("file replaces {old}"));
            }
            let score = o.scores.get(&s.name).copied();
            if let Some(new) = score.filter(|&v| v != s.score && v != 0.0) {
                overridden.push(format!(
                    "score {} -> {new} by [scores] in {origin}",
                    s.score
                ));
            }
            let off = o.symbol_off(&r.name, &s.name);
            if o.disabled.contains(&s.name) || o.disabled.contains(&r.name) {
                overridden.push(format!("disabled by [rules] disabled in {origin}"));
            } else if off {
                overridden.push(format!("disabled by [scores] {} = 0 in {origin}", s.name));
            }
            let mut effective = score.unwrap_or(s.score);
            let mut off = off;
            if let Some(p) = profile.filter(|_| !off) {
                if p.is_off(Some(&r.name), &s.name) {
                    off = true;
                    overridden.push(format!("disabled by settings \"{}\"", p.name));
                } else if let Some(new) = p.score(&s.name).filter(|&v| v != effective) {
                    overridden.push(format!(
                        "score {effective} -> {new} by settings \"{}\"",
                        p.name
                    ));
                    effective = new;
                }
            }
            out.push(ListedSymbol {
                symbol: s.name.clone(),
                rule: r.name.clone(),
                score: if off { 0.0 } else { effective },
                declared: s.score,
                enabled: !off,
                source: source.clone(),
                overridden,
            });
        }
    }
    out
}
