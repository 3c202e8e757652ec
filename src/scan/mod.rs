//! One message end to end: parse → entities → shingles → (rules and store, as they land) →
//! verdict, and the JSON report of `shrike scan`.
//!
//! Owns: the order of the pipeline stages and the report. Never touches: wire formats, sockets.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::entities::{self, AttachmentEntity, Entities};
use crate::message::{self, Anomalies, Envelope, Limits, ParsedMessage, Prepared};
use crate::shingle::{self, Shingle};

/// What the rules decided, in rspamd's vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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
    #[serde(rename = "reject")]
    Reject,
}

/// One symbol a rule emitted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SymbolHit {
    pub name: String,
    pub score: f64,
    pub options: Vec<String>,
}

/// The outcome of a scan. Until the rules engine lands no rule runs: score 0, no action.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    pub score: f64,
    pub action: Action,
    pub symbols: BTreeMap<String, SymbolHit>,
}

impl Default for Verdict {
    fn default() -> Self {
        Verdict {
            score: 0.0,
            action: Action::NoAction,
            symbols: BTreeMap::new(),
        }
    }
}

/// A message after the pure stages of the pipeline.
#[derive(Debug)]
pub struct Analysis<'a> {
    pub message: ParsedMessage<'a>,
    pub entities: Entities,
    pub shingles: Vec<Shingle>,
    /// Anomalies of parsing and extraction together.
    pub anomalies: Anomalies,
}

/// Parses prepared input (`message::prepare`), extracts its entities and computes its shingles.
/// Never fails.
pub fn analyze<'p>(input: &'p Prepared<'_>, envelope: &Envelope, limits: &Limits) -> Analysis<'p> {
    let message = message::parse(input, limits);
    let entities = entities::extract(&message, envelope);
    let shingles = shingle::compute(&message, &entities, envelope);
    let mut anomalies = message.anomalies.clone();
    for &a in &entities.anomalies {
        anomalies.add(a);
    }
    Analysis {
        message,
        entities,
        shingles,
        anomalies,
    }
}

/// The JSON object `shrike scan` prints for one message (DESIGN.md §3).
#[derive(Debug, Serialize)]
pub struct Report<'r> {
    pub file: &'r str,
    pub score: f64,
    pub action: Action,
    pub symbols: &'r BTreeMap<String, SymbolHit>,
    pub subject: &'r str,
    pub subject_normalized: &'r str,
    pub entities: ReportEntities<'r>,
    pub shingles: &'r [Shingle],
    pub anomalies: &'r Anomalies,
    pub mixed_script_words: &'r [String],
}

/// The `entities` object: the flat lists of DESIGN.md §3, then the detailed records.
#[derive(Debug, Serialize)]
pub struct ReportEntities<'r> {
    pub urls: Vec<&'r str>,
    pub hosts: &'r [String],
    pub domains: &'r [String],
    pub emails: Vec<&'r str>,
    pub ips: Vec<String>,
    pub attachments: &'r [AttachmentEntity],
    #[serde(flatten)]
    pub details: Details<'r>,
}

/// Detailed entity records with their sources and roles.
#[derive(Debug, Serialize)]
pub struct Details<'r> {
    pub links: &'r [entities::UrlEntity],
    pub addresses: &'r [entities::EmailEntity],
    pub received: &'r [entities::IpEntity],
    pub anchors: &'r [entities::Anchor],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<&'r str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id_domain: Option<&'r str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mailer: Option<&'r str>,
}

impl Analysis<'_> {
    /// The report for this analysis and verdict.
    pub fn report<'r>(&'r self, file: &'r str, verdict: &'r Verdict) -> Report<'r> {
        let e = &self.entities;
        let mut urls: Vec<&str> = Vec::with_capacity(e.urls.len());
        for u in &e.urls {
            if !urls.contains(&u.url.as_str()) {
                urls.push(&u.url);
            }
        }
        let mut emails: Vec<&str> = Vec::with_capacity(e.emails.len());
        for m in &e.emails {
            if !emails.contains(&m.address.as_str()) {
                emails.push(&m.address);
            }
        }
        let mut ips: Vec<String> = Vec::with_capacity(e.ips.len());
        for ip in &e.ips {
            let s = ip.ip.to_string();
            if !ips.contains(&s) {
                ips.push(s);
            }
        }
        Report {
            file,
            score: verdict.score,
            action: verdict.action,
            symbols: &verdict.symbols,
            subject: &self.message.subject.display,
            subject_normalized: &self.message.subject.normalized,
            entities: ReportEntities {
                urls,
                hosts: &e.hosts,
                domains: &e.domains,
                emails,
                ips,
                attachments: &e.attachments,
                details: Details {
                    links: &e.urls,
                    addresses: &e.emails,
                    received: &e.ips,
                    anchors: &e.anchors,
                    message_id: e.message_id.as_deref(),
                    message_id_domain: e.message_id_domain.as_deref(),
                    mailer: e.mailer.as_deref(),
                },
            },
            shingles: &self.shingles,
            anomalies: &self.anomalies,
            mixed_script_words: &self.message.mixed_script_words,
        }
    }
}
