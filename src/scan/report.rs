//! The JSON object `shrike scan` prints for a message: its verdict, text, entities, shingles
//! and anomalies.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::entities::{self, AttachmentEntity};
use crate::message::{self, Anomalies};
use crate::shingle::Shingle;
use crate::verdict::{Action, SymbolHit, Verdict};

use super::Analysis;

/// The JSON object `shrike scan` prints for one message (README.md, `shrike scan`).
#[derive(Debug, Serialize)]
pub struct Report<'r> {
    pub file: &'r str,
    pub score: f64,
    pub action: Action,
    pub symbols: &'r BTreeMap<String, SymbolHit>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub shadow: &'r BTreeMap<String, SymbolHit>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub required_score: Option<f64>,
    #[serde(skip_serializing_if = "is_zero")]
    pub generation: u64,
    pub subject: &'r str,
    pub subject_normalized: &'r str,
    /// The Date header's time and zone problem; left out without either.
    #[serde(skip_serializing_if = "message::DateFacts::is_empty")]
    pub date: &'r message::DateFacts,
    pub entities: ReportEntities<'r>,
    pub shingles: &'r [Shingle],
    pub anomalies: &'r Anomalies,
    pub mixed_script_words: &'r [String],
}

/// The `entities` object: the flat lists README.md's `shrike scan` promises, then the detailed records.
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
    /// Every Received header's time and bare-HELO flag, top-down (`received[].hop` indexes it).
    pub hops: &'r [entities::ReceivedHop],
    pub anchors: &'r [entities::Anchor],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<&'r str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id_domain: Option<&'r str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mailer: Option<&'r str>,
}

impl Analysis<'_> {
    /// The message's URLs, each once, in order of appearance.
    pub fn distinct_urls(&self) -> Vec<&str> {
        distinct(self.entities.urls.iter().map(|u| u.url.as_str()))
    }

    /// The message's email addresses, each once, in order of appearance.
    pub fn distinct_emails(&self) -> Vec<&str> {
        distinct(self.entities.emails.iter().map(|m| m.address.as_str()))
    }

    /// The report for this analysis and verdict.
    pub fn report<'r>(&'r self, file: &'r str, verdict: &'r Verdict) -> Report<'r> {
        let e = &self.entities;
        let urls = self.distinct_urls();
        let emails = self.distinct_emails();
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
            shadow: &verdict.shadow,
            required_score: verdict.required_score,
            generation: verdict.generation,
            subject: &self.message.subject.display,
            subject_normalized: &self.message.subject.normalized,
            date: &self.message.date,
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
                    hops: &e.hops,
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

/// Each item once, first occurrence first.
fn distinct<'a>(items: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut seen = rustc_hash::FxHashSet::default();
    items.filter(|item| seen.insert(*item)).collect()
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
