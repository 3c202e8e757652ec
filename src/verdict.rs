//! What shrike decides about a message: the actions in rspamd's vocabulary, the symbols that
//! earned them, and the score thresholds that turn a score into an action.
//!
//! Owns: [`Action`], [`SymbolHit`], [`Verdict`] and the `[verdict]` thresholds
//! ([`VerdictConfig`]). Depends on nothing else in shrike, so every layer (engine, scan, proto,
//! server, replay) names these types by one path, `crate::verdict`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What to do with a message, in rspamd's vocabulary (plus shrike's `discard` and
/// `quarantine`). Ordered by severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Action {
    #[serde(rename = "no action")]
    NoAction,
    #[serde(rename = "greylist")]
    Greylist,
    #[serde(rename = "add header")]
    AddHeader,
    #[serde(rename = "rewrite subject")]
    RewriteSubject,
    #[serde(rename = "soft reject")]
    SoftReject,
    /// Accept and file into quarantine (the MTA holds it).
    #[serde(rename = "quarantine")]
    Quarantine,
    /// Shadow ban: tell the sender the message was accepted, then drop it.
    #[serde(rename = "discard")]
    Discard,
    #[serde(rename = "reject")]
    Reject,
}

impl Action {
    pub const ALL: [Action; 8] = [
        Action::NoAction,
        Action::Greylist,
        Action::AddHeader,
        Action::RewriteSubject,
        Action::SoftReject,
        Action::Quarantine,
        Action::Discard,
        Action::Reject,
    ];

    /// rspamd's string (with spaces).
    pub fn as_str(self) -> &'static str {
        match self {
            Action::NoAction => "no action",
            Action::Greylist => "greylist",
            Action::AddHeader => "add header",
            Action::RewriteSubject => "rewrite subject",
            Action::SoftReject => "soft reject",
            Action::Quarantine => "quarantine",
            Action::Discard => "discard",
            Action::Reject => "reject",
        }
    }

    /// Parses rspamd's strings; `_` may stand for the space.
    pub fn parse(s: &str) -> Option<Action> {
        let s = s.trim().replace('_', " ");
        Action::ALL.into_iter().find(|a| a.as_str() == s)
    }
}

/// One symbol in a verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SymbolHit {
    pub name: String,
    pub score: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub options: Vec<String>,
}

/// The outcome of a scan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    pub score: f64,
    pub action: Action,
    pub symbols: BTreeMap<String, SymbolHit>,
    /// Hits of rules in shadow or test mode: counted and reported, not applied.
    pub shadow: BTreeMap<String, SymbolHit>,
    /// The score at which the message is rejected (rspamd's `required_score`).
    pub required_score: Option<f64>,
    /// The rule-set generation that judged it (0: no rules ran).
    pub generation: u64,
    /// The classifier's spam probability, when a rule asked and the model had an opinion.
    pub probability: Option<f64>,
    /// The `DKIM-Signature` value for an authenticated sender's message (`sign.rs`), which
    /// the milter adds and rspamd's protocol returns as `dkim-signature`.
    pub dkim_signature: Option<String>,
    /// The ARC set (`[arc]`) sealing an accepted inbound message: its three header fields,
    /// `(name, value)`, in the order they go on top (ARC-Seal first).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub arc_seal: Vec<(String, String)>,
    /// The `[[settings]]` entry this verdict was judged under (none: the global settings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settings: Option<String>,
}

impl Verdict {
    /// Adds a symbol that reports without scoring (score 0): what a step after the rules found
    /// or did (a setting that matched, a signature, a virus), with its options.
    pub fn note(&mut self, symbol: &str, description: Option<&str>, options: Vec<String>) {
        self.symbols.insert(
            symbol.to_string(),
            SymbolHit {
                name: symbol.to_string(),
                score: 0.0,
                description: description.map(str::to_string),
                options,
            },
        );
    }
}

impl Default for Verdict {
    fn default() -> Self {
        Verdict {
            score: 0.0,
            action: Action::NoAction,
            symbols: BTreeMap::new(),
            shadow: BTreeMap::new(),
            required_score: None,
            generation: 0,
            probability: None,
            dkim_signature: None,
            arc_seal: Vec::new(),
            settings: None,
        }
    }
}

/// `[verdict]`: score thresholds of the actions, and what the store counts as spam or ham.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VerdictConfig {
    pub reject: f64,
    /// Optional: a score at which to answer with a temporary failure.
    pub soft_reject: Option<f64>,
    /// Optional: a score at which to mark the subject.
    pub rewrite_subject: Option<f64>,
    pub add_header: f64,
    pub greylist: f64,
    /// A verdict scoring at least this is recorded as spam in the reputation store.
    pub count_spam_at: f64,
    /// A verdict scoring below this is recorded as ham (in between: only seen).
    pub count_ham_below: f64,
}

impl Default for VerdictConfig {
    fn default() -> Self {
        VerdictConfig {
            reject: 15.0,
            soft_reject: None,
            rewrite_subject: None,
            add_header: 6.0,
            greylist: 4.0,
            count_spam_at: 6.0,
            count_ham_below: 2.0,
        }
    }
}

/// `[actions]`: the action thresholds in rspamd's form (`actions { reject = 15; … }`); each one
/// given replaces `[verdict]`'s, so a local file can move one threshold alone.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ActionsConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reject: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub soft_reject: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rewrite_subject: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub add_header: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub greylist: Option<f64>,
}

impl ActionsConfig {
    /// `verdict` with the thresholds given here in place of its own.
    pub fn apply(&self, verdict: &mut VerdictConfig) {
        if let Some(t) = self.reject {
            verdict.reject = t;
        }
        if let Some(t) = self.add_header {
            verdict.add_header = t;
        }
        if let Some(t) = self.greylist {
            verdict.greylist = t;
        }
        if self.soft_reject.is_some() {
            verdict.soft_reject = self.soft_reject;
        }
        if self.rewrite_subject.is_some() {
            verdict.rewrite_subject = self.rewrite_subject;
        }
    }
}

/// Why the `[verdict]` thresholds cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerdictConfigError {
    #[error("verdict thresholds must be finite numbers")]
    NotFinite,
    #[error("verdict thresholds must satisfy greylist <= add_header <= reject")]
    OutOfOrder,
    #[error("verdict.count_ham_below must not exceed count_spam_at")]
    CountsOutOfOrder,
}

impl VerdictConfig {
    /// The action a score earns by thresholds alone.
    pub fn action_for(&self, score: f64) -> Action {
        let at = |t: Option<f64>| t.is_some_and(|t| score >= t);
        if score >= self.reject {
            Action::Reject
        } else if at(self.soft_reject) {
            Action::SoftReject
        } else if at(self.rewrite_subject) {
            Action::RewriteSubject
        } else if score >= self.add_header {
            Action::AddHeader
        } else if score >= self.greylist {
            Action::Greylist
        } else {
            Action::NoAction
        }
    }

    /// Checks the thresholds are numbers and in order.
    pub fn validate(&self) -> Result<(), VerdictConfigError> {
        let all = [
            Some(self.reject),
            self.soft_reject,
            self.rewrite_subject,
            Some(self.add_header),
            Some(self.greylist),
            Some(self.count_spam_at),
            Some(self.count_ham_below),
        ];
        if all.iter().flatten().any(|t| !t.is_finite()) {
            return Err(VerdictConfigError::NotFinite);
        }
        if !(self.greylist <= self.add_header && self.add_header <= self.reject) {
            return Err(VerdictConfigError::OutOfOrder);
        }
        if self.count_ham_below > self.count_spam_at {
            return Err(VerdictConfigError::CountsOutOfOrder);
        }
        Ok(())
    }

    /// The action thresholds in rspamd's names (the `thresholds` of a `/checkv2` reply).
    pub fn thresholds(&self) -> BTreeMap<&'static str, f64> {
        let mut t = BTreeMap::new();
        t.insert(Action::Reject.as_str(), self.reject);
        t.insert(Action::AddHeader.as_str(), self.add_header);
        t.insert(Action::Greylist.as_str(), self.greylist);
        if let Some(s) = self.soft_reject {
            t.insert(Action::SoftReject.as_str(), s);
        }
        if let Some(s) = self.rewrite_subject {
            t.insert(Action::RewriteSubject.as_str(), s);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_parse_and_order() {
        assert_eq!(Action::parse("add header"), Some(Action::AddHeader));
        assert_eq!(Action::parse("soft_reject"), Some(Action::SoftReject));
        assert_eq!(Action::parse("bogus"), None);
        assert!(Action::Reject > Action::Discard && Action::Discard > Action::AddHeader);
        for a in Action::ALL {
            assert_eq!(Action::parse(a.as_str()), Some(a));
            assert_eq!(
                serde_json::to_string(&a).unwrap(),
                format!("\"{}\"", a.as_str())
            );
        }
    }

    #[test]
    fn thresholds_choose_actions_and_are_checked() {
        let v = VerdictConfig {
            rewrite_subject: Some(10.0),
            ..VerdictConfig::default()
        };
        assert_eq!(v.action_for(1.0), Action::NoAction);
        assert_eq!(v.action_for(4.0), Action::Greylist);
        assert_eq!(v.action_for(6.0), Action::AddHeader);
        assert_eq!(v.action_for(10.0), Action::RewriteSubject);
        assert_eq!(v.action_for(15.0), Action::Reject);
        assert!(v.validate().is_ok());
        let nan = VerdictConfig {
            greylist: f64::NAN,
            ..VerdictConfig::default()
        };
        assert_eq!(nan.validate(), Err(VerdictConfigError::NotFinite));
        let disordered = VerdictConfig {
            add_header: 20.0,
            ..VerdictConfig::default()
        };
        assert_eq!(disordered.validate(), Err(VerdictConfigError::OutOfOrder));
        assert_eq!(
            v.thresholds().keys().copied().collect::<Vec<_>>(),
            ["add header", "greylist", "reject", "rewrite subject"]
        );
    }
}
