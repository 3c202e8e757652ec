//! rspamd's HTTP protocol, so `rspamc` and rspamd client plugins work unchanged: the request
//! headers of `/checkv2` and the JSON of its reply.
//!
//! Owns: mapping request headers to an envelope, and the reply's shape (rspamd's field names and
//! action strings, plus shrike's extras). Never touches: sockets, scanning.

use std::collections::BTreeMap;
use std::net::IpAddr;

use http::HeaderMap;
use serde::Serialize;

use crate::message::Envelope;
use crate::verdict::{Action, SymbolHit, Verdict};

/// What the request headers of `/checkv2` say about the message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckRequest {
    /// With `Hostname` (the client's reverse DNS name), `User` (the authenticated sender),
    /// `Queue-Id` and `Deliver-To`.
    pub envelope: Envelope,
    /// `Pass: all`: run every rule even after a forced action (we always do).
    pub pass_all: bool,
    /// Header values that could not be used, for the log: (header, value).
    pub ignored: Vec<(String, String)>,
}

fn text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

/// An address as the MTA gives it, without angle brackets.
fn address(value: &str) -> String {
    value
        .trim()
        .trim_start_matches('<')
        .trim_end_matches('>')
        .to_owned()
}

impl CheckRequest {
    /// Reads rspamd's request headers (case-insensitive; `Rcpt` repeatable, and also
    /// comma-separated as some clients send it).
    pub fn from_headers(headers: &HeaderMap) -> CheckRequest {
        let mut req = CheckRequest::default();
        if let Some(ip) = text(headers, "ip") {
            match ip
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<IpAddr>()
            {
                Ok(ip) => req.envelope.client_ip = Some(ip),
                Err(_) => req.ignored.push(("IP".into(), ip)),
            }
        }
        req.envelope.helo = text(headers, "helo");
        req.envelope.mail_from = text(headers, "from").map(|f| address(&f));
        for value in headers.get_all("rcpt") {
            let Ok(value) = value.to_str() else { continue };
            for rcpt in value.split(',') {
                let rcpt = address(rcpt);
                if !rcpt.is_empty() {
                    req.envelope.rcpt_to.push(rcpt);
                }
            }
        }
        req.envelope.hostname = text(headers, "hostname");
        req.envelope.user = text(headers, "user");
        req.envelope.queue_id = text(headers, "queue-id");
        req.envelope.deliver_to = text(headers, "deliver-to").map(|d| address(&d));
        // rspamd's name for a settings entry the client chooses (`rspamc --settings-id`).
        req.envelope.settings_id = text(headers, "settings-id");
        req.pass_all = text(headers, "pass").is_some_and(|p| p.eq_ignore_ascii_case("all"));
        req
    }
}

/// One symbol in rspamd's format.
#[derive(Debug, Serialize)]
pub struct Symbol<'a> {
    pub name: &'a str,
    pub score: f64,
    pub metric_score: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<&'a str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub options: &'a [String],
}

impl<'a> From<&'a SymbolHit> for Symbol<'a> {
    fn from(s: &'a SymbolHit) -> Self {
        Symbol {
            name: &s.name,
            score: s.score,
            metric_score: s.score,
            description: s.description.as_deref(),
            options: &s.options,
        }
    }
}

/// A header to add, as rspamd's milter block gives it.
#[derive(Debug, Serialize)]
pub struct AddHeader {
    pub value: String,
    pub order: u32,
}

/// What an MTA-side integration (rspamd's proxy, rmilter-style plugins) should do.
#[derive(Debug, Default, Serialize)]
pub struct Milter {
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub add_headers: BTreeMap<String, AddHeader>,
    /// Header name → how many (0: all) to remove.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub remove_headers: BTreeMap<String, u32>,
    /// `discard` or `quarantine` when the action asks for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reject: Option<&'static str>,
}

/// The `/checkv2` reply: rspamd's fields first, shrike's extras after.
#[derive(Debug, Serialize)]
pub struct CheckReply<'a> {
    pub is_skipped: bool,
    pub score: f64,
    pub required_score: f64,
    pub action: &'static str,
    pub thresholds: &'a BTreeMap<&'static str, f64>,
    pub symbols: BTreeMap<&'a str, Symbol<'a>>,
    pub messages: BTreeMap<&'static str, String>,
    #[serde(rename = "message-id", skip_serializing_if = "Option::is_none")]
    pub message_id: Option<&'a str>,
    pub time_real: f64,
    pub milter: Milter,
    /// rspamd's field for a signed message: the `DKIM-Signature` value.
    #[serde(rename = "dkim-signature", skip_serializing_if = "Option::is_none")]
    pub dkim_signature: Option<&'a str>,
    // shrike's extras
    pub generation: u64,
    /// The `[[settings]]` entry the verdict was judged under.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settings: Option<&'a str>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub shadow: BTreeMap<&'a str, Symbol<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<&'a str>,
    pub urls: &'a [String],
    pub emails: &'a [String],
}

/// Parts of a reply that do not come from the verdict.
#[derive(Debug)]
pub struct ReplyExtras<'a> {
    pub message_id: Option<&'a str>,
    pub subject: Option<&'a str>,
    pub urls: &'a [String],
    pub emails: &'a [String],
    pub time_real: f64,
    /// Action thresholds in rspamd's names.
    pub thresholds: &'a BTreeMap<&'static str, f64>,
    /// Headers an MTA integration should add, in order.
    pub add_headers: Vec<(String, String)>,
    /// Header names to remove first (the X-Spam-* a sender may have forged).
    pub remove_headers: Vec<String>,
}

/// Builds the reply for a verdict.
pub fn check_reply<'a>(verdict: &'a Verdict, extras: ReplyExtras<'a>) -> CheckReply<'a> {
    let mut milter = Milter::default();
    for (order, (name, value)) in extras.add_headers.into_iter().enumerate() {
        let order = u32::try_from(order).unwrap_or(u32::MAX);
        milter.add_headers.insert(name, AddHeader { value, order });
    }
    if let Some(value) = &verdict.dkim_signature {
        // On top of the header, where signers put it (order 0: before the others).
        milter.add_headers.insert(
            "DKIM-Signature".into(),
            AddHeader {
                value: value.clone(),
                order: 0,
            },
        );
    }
    for (name, value) in &verdict.arc_seal {
        // On top too, in their order (ARC-Seal first), over the DKIM signature.
        milter.add_headers.insert(
            name.clone(),
            AddHeader {
                value: value.clone(),
                order: 0,
            },
        );
    }
    for name in extras.remove_headers {
        milter.remove_headers.insert(name, 0);
    }
    milter.reject = match verdict.action {
        Action::Discard => Some("discard"),
        Action::Quarantine => Some("quarantine"),
        _ => None,
    };
    let mut messages = BTreeMap::new();
    if let Some(reason) = forced_reason(verdict) {
        messages.insert("smtp_message", reason);
    }
    CheckReply {
        is_skipped: false,
        score: round2(verdict.score),
        required_score: verdict
            .required_score
            .or_else(|| extras.thresholds.get("reject").copied())
            .unwrap_or(0.0),
        action: verdict.action.as_str(),
        thresholds: extras.thresholds,
        symbols: verdict
            .symbols
            .values()
            .map(|s| (s.name.as_str(), Symbol::from(s)))
            .collect(),
        messages,
        message_id: extras.message_id,
        time_real: extras.time_real,
        milter,
        dkim_signature: verdict.dkim_signature.as_deref(),
        generation: verdict.generation,
        settings: verdict.settings.as_deref(),
        shadow: verdict
            .shadow
            .values()
            .map(|s| (s.name.as_str(), Symbol::from(s)))
            .collect(),
        subject: extras.subject,
        urls: extras.urls,
        emails: extras.emails,
    }
}

/// The SMTP text for a rejected message.
pub fn forced_reason(verdict: &Verdict) -> Option<String> {
    if let Some(name) = verdict
        .symbols
        .get("CLAM_VIRUS")
        .and_then(|s| s.options.first())
        .filter(|_| verdict.action == Action::Reject)
    {
        return Some(format!("Virus found: {name}"));
    }
    match verdict.action {
        Action::Reject => Some("Spam message rejected".into()),
        Action::SoftReject | Action::Greylist => Some("Try again later".into()),
        _ => None,
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// An error body in rspamd's form.
pub fn error_body(message: &str) -> String {
    serde_json::json!({ "error": message }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn request_headers_map_to_the_envelope() {
        let mut h = HeaderMap::new();
        h.insert("IP", HeaderValue::from_static("192.0.2.7"));
        h.insert("Helo", HeaderValue::from_static("mx.example.net"));
        h.insert("From", HeaderValue::from_static("<a@example.net>"));
        h.append("Rcpt", HeaderValue::from_static("b@example.com"));
        h.append(
            "Rcpt",
            HeaderValue::from_static("<c@example.com>, d@example.com"),
        );
        h.insert("Queue-Id", HeaderValue::from_static("ABC123"));
        h.insert("Pass", HeaderValue::from_static("all"));
        let r = CheckRequest::from_headers(&h);
        assert_eq!(r.envelope.client_ip, Some("192.0.2.7".parse().unwrap()));
        assert_eq!(r.envelope.helo.as_deref(), Some("mx.example.net"));
        assert_eq!(r.envelope.mail_from.as_deref(), Some("a@example.net"));
        assert_eq!(
            r.envelope.rcpt_to,
            ["b@example.com", "c@example.com", "d@example.com"]
        );
        assert_eq!(r.envelope.queue_id.as_deref(), Some("ABC123"));
        assert!(r.pass_all);
        assert!(r.ignored.is_empty());

        let mut bad = HeaderMap::new();
        bad.insert("IP", HeaderValue::from_static("not-an-ip"));
        let r = CheckRequest::from_headers(&bad);
        assert_eq!(r.envelope.client_ip, None);
        assert_eq!(r.ignored, [("IP".to_string(), "not-an-ip".to_string())]);
    }

    #[test]
    fn reply_has_rspamd_fields_and_action_strings() {
        let mut verdict = Verdict {
            score: 16.004,
            action: Action::Reject,
            required_score: Some(15.0),
            generation: 3,
            ..Verdict::default()
        };
        verdict.symbols.insert(
            "GTUBE".into(),
            SymbolHit {
                name: "GTUBE".into(),
                score: 16.0,
                description: Some("test".into()),
                options: vec!["x".into()],
            },
        );
        let thresholds = BTreeMap::from([("reject", 15.0)]);
        let reply = check_reply(
            &verdict,
            ReplyExtras {
                message_id: Some("id@x"),
                subject: None,
                urls: &[],
                emails: &[],
                time_real: 0.001,
                thresholds: &thresholds,
                add_headers: vec![("X-Spam-Score".into(), "16.00".into())],
                remove_headers: vec!["X-Spam-Score".into()],
            },
        );
        let v = serde_json::to_value(&reply).unwrap();
        assert_eq!(v["action"], "reject");
        assert_eq!(v["score"], 16.0);
        assert_eq!(v["required_score"], 15.0);
        assert_eq!(v["is_skipped"], false);
        assert_eq!(v["message-id"], "id@x");
        assert_eq!(v["symbols"]["GTUBE"]["options"][0], "x");
        assert_eq!(v["symbols"]["GTUBE"]["metric_score"], 16.0);
        assert_eq!(v["milter"]["add_headers"]["X-Spam-Score"]["value"], "16.00");
        assert_eq!(v["milter"]["remove_headers"]["X-Spam-Score"], 0);
        assert_eq!(v["messages"]["smtp_message"], "Spam message rejected");
        assert_eq!(v["generation"], 3);
    }
}
