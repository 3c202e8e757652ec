//! How the rules' hits become a verdict: scores (under a `[[settings]]` entry's when one
//! applies), the DNS lists' scores, forced actions, the thresholds.

use std::collections::BTreeMap;

use crate::engine::{self, RuleOutcome};
use crate::verdict::{Action, SymbolHit, Verdict, VerdictConfig};

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
pub(super) fn judge(
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
