use super::{Method, Protocol};
use crate::proto::headers::{is_spam_header, spam_headers};
use crate::verdict::{Action, Verdict};

/// `SPAMD/1.5 0 PONG\r\n` (`RSPAMD/1.3 0 PONG\r\n` in the legacy protocol).
pub fn pong(protocol: Protocol) -> Vec<u8> {
    match protocol {
        Protocol::Spamc => b"SPAMD/1.5 0 PONG\r\n".to_vec(),
        Protocol::Rspamc => b"RSPAMD/1.3 0 PONG\r\n".to_vec(),
    }
}

/// The reply to a TELL: `DidSet: local` when the message was learned, `DidRemove: local` when
/// forgotten; neither when there was nothing to do (spamc then says "already learned").
pub fn tell_reply(minor: u32, did_set: bool, did_remove: bool) -> Vec<u8> {
    let mut out = String::from("SPAMD/1.1 0 EX_OK\r\n");
    if did_set {
        out.push_str("DidSet: local\r\n");
    }
    if did_remove {
        out.push_str("DidRemove: local\r\n");
    }
    if minor >= 3 {
        out.push_str("Content-length: 0\r\n");
    }
    out.push_str("\r\n");
    out.into_bytes()
}

/// The score told to clients that compare it with the threshold themselves (Exim, amavis):
/// the verdict's, unless a forced action (GTUBE's reject, an allow-list's no action) makes it
/// disagree with the action, in which case it is moved to the threshold's side the action is
/// on: the threshold itself for spam, `step` (the reply's precision) below it otherwise.
pub fn client_score(verdict: &Verdict, threshold: f64, step: f64) -> f64 {
    let spam = is_spam(verdict);
    if spam && verdict.score < threshold {
        threshold
    } else if !spam && verdict.score >= threshold {
        threshold - step
    } else {
        verdict.score
    }
}

/// The reply to a scanned CHECK, SYMBOLS, REPORT or REPORT_IFSPAM request (`method`, protocol
/// `1.minor`): spam when the action is add header or worse, against the add-header
/// `threshold`. Content-length is sent from protocol 1.3 on, as spamd does.
pub fn verdict_reply(method: Method, minor: u32, verdict: &Verdict, threshold: f64) -> Vec<u8> {
    let spam = is_spam(verdict);
    let body = match method {
        Method::Symbols => {
            let mut names = verdict
                .symbols
                .keys()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(",");
            if minor < 3 {
                names.push_str("\r\n");
            }
            names
        }
        Method::Report => report(verdict, threshold),
        Method::ReportIfSpam if spam => report(verdict, threshold),
        _ => String::new(),
    };
    let mut out = format!("SPAMD/1.1 0 EX_OK\r\n{}", spam_line(verdict, threshold));
    if minor >= 3 {
        out.push_str(&format!("Content-length: {}\r\n", body.len()));
    }
    out.push_str("\r\n");
    out.push_str(&body);
    out.into_bytes()
}

/// Spam for spamd's clients: the action is add header or worse (the threshold reported is the
/// add-header one).
pub(super) fn is_spam(verdict: &Verdict) -> bool {
    verdict.action >= Action::AddHeader
}

/// `Spam: True ; 15.0 / 6.0`, with its line end: one decimal, as spamc and Exim parse it.
fn spam_line(verdict: &Verdict, threshold: f64) -> String {
    let spam = if is_spam(verdict) { "True" } else { "False" };
    let score = client_score(verdict, threshold, 0.1);
    format!("Spam: {spam} ; {score:.1} / {threshold:.1}\r\n")
}

/// The reply to a scanned PROCESS (`head_only` false) or HEADERS (true) request: the message
/// (or its header section) with the X-Spam-* headers the milter adds, forged ones removed
/// first. From protocol 1.3 the `Spam` header comes with it; before, only `Content-length`.
pub fn rewrite_reply(
    head_only: bool,
    minor: u32,
    verdict: &Verdict,
    threshold: f64,
    message: &[u8],
) -> Vec<u8> {
    let body = rewrite(message, &spam_headers(verdict, threshold), head_only);
    let mut out = String::from("SPAMD/1.1 0 EX_OK\r\n");
    if minor >= 3 {
        out.push_str(&spam_line(verdict, threshold));
    }
    out.push_str(&format!("Content-length: {}\r\n\r\n", body.len()));
    let mut out = out.into_bytes();
    out.extend_from_slice(&body);
    out
}

/// `message` with the X-Spam-* headers (and their continuation lines) removed and `headers`
/// appended to its header section, in the message's own line endings; only the header
/// section and the blank line after it when `head_only`.
pub(super) fn rewrite(message: &[u8], headers: &[(String, String)], head_only: bool) -> Vec<u8> {
    let crlf = message
        .iter()
        .position(|&b| b == b'\n')
        .is_none_or(|i| i > 0 && message[i - 1] == b'\r');
    let eol: &[u8] = if crlf { b"\r\n" } else { b"\n" };
    let mut out = Vec::with_capacity(message.len() + 256);
    let mut pos = 0;
    let mut dropping = false;
    let mut separator = None;
    while pos < message.len() {
        let end = message[pos..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(message.len(), |i| pos + i + 1);
        let line = &message[pos..end];
        if line == b"\n" || line == b"\r\n" {
            separator = Some(pos);
            break;
        }
        if line[0] == b' ' || line[0] == b'\t' {
            if !dropping {
                out.extend_from_slice(line);
            }
        } else {
            dropping = is_spam_header(line);
            if !dropping {
                out.extend_from_slice(line);
            }
        }
        pos = end;
    }
    if !out.is_empty() && !out.ends_with(b"\n") {
        out.extend_from_slice(eol);
    }
    for (name, value) in headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        for (i, part) in value.split('\n').enumerate() {
            if i > 0 {
                out.extend_from_slice(eol);
            }
            out.extend_from_slice(part.as_bytes());
        }
        out.extend_from_slice(eol);
    }
    match separator {
        Some(at) if head_only => {
            let blank = &message[at..];
            let len = if blank.starts_with(b"\r\n") { 2 } else { 1 };
            out.extend_from_slice(&blank[..len]);
        }
        Some(at) => out.extend_from_slice(&message[at..]),
        None => out.extend_from_slice(eol),
    }
    out
}

/// A short report in the shape of SpamAssassin's: the score, then one line a symbol.
pub(super) fn report(verdict: &Verdict, threshold: f64) -> String {
    let mut out = format!(
        "Content analysis details:   ({:.1} points, {:.1} required)\r\n\r\n \
         pts rule name              description\r\n\
         ---- ---------------------- --------------------------------------------------\r\n",
        verdict.score, threshold
    );
    for s in verdict.symbols.values() {
        out.push_str(&format!(
            "{:>4.1} {:<22} {}\r\n",
            s.score,
            s.name,
            s.description.as_deref().unwrap_or("")
        ));
    }
    out
}
