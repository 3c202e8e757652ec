//! The verification of one message: SPF of the sender and of the HELO, DKIM and ARC run
//! concurrently (with the DMARC record fetched meanwhile), then DMARC from their outputs. Each
//! result is sent as soon as it is known, so a caller that stops waiting at its budget keeps
//! what arrived; the rest keeps running and fills the resolver's cache.

use std::net::IpAddr;

use mail_auth::dmarc::Policy;
use mail_auth::spf::verify::SpfParameters;
use mail_auth::{
    AuthenticatedMessage, DkimOutput, DkimResult, DmarcResult, MessageAuthenticator, SpfOutput,
    SpfResult,
};
use tokio::sync::mpsc::UnboundedSender;

use super::memo::{MemoKey, Memoized};
use super::{organizational, MethodResult, Status};
use crate::dns::DnsHealth;

/// One result, as it arrives.
#[derive(Debug, Clone)]
pub enum Piece {
    From(Option<String>),
    Spf(MethodResult),
    Helo(MethodResult),
    Dkim(Vec<MethodResult>),
    Arc(MethodResult),
    Dmarc(MethodResult),
    /// With a sealer: the ARC set for the message (header lines), or why there is none. Sent
    /// after `Dmarc`, as the seal's ARC-Authentication-Results carries every result.
    Seal(Result<String, String>),
}

/// Who sent a message, as SMTP said: the client address, its HELO name, the envelope sender
/// (empty: a bounce), and our own name (SPF's `%{r}`).
#[derive(Debug, Clone, Copy)]
pub struct Smtp<'a> {
    pub ip: Option<IpAddr>,
    pub helo: &'a str,
    pub mail_from: &'a str,
    pub host: &'a str,
}

/// Who a message is from, as authentication sees it.
struct Who<'a> {
    from_domain: Option<String>,
    helo: &'a str,
    /// The envelope sender, or for a bounce `postmaster@HELO` (RFC 7208 2.4).
    sender: String,
    /// The key of its results in the memo when it carries no signature (else None).
    memo_key: Option<MemoKey>,
}

fn identify<'a>(msg: &AuthenticatedMessage<'_>, smtp: Smtp<'a>) -> Who<'a> {
    let from_domain = msg
        .from
        .first()
        .and_then(|f| f.rsplit_once('@'))
        .map(|(_, d)| d.trim_end_matches('.').to_ascii_lowercase())
        .filter(|d| !d.is_empty());
    let helo = smtp.helo.trim();
    let sender = if smtp.mail_from.contains('@') {
        smtp.mail_from.to_string()
    } else {
        format!("postmaster@{helo}")
    };
    let unsigned = msg.dkim_headers.is_empty()
        && !msg.has_dkim_errors
        && msg.ams_headers.is_empty()
        && msg.as_headers.is_empty()
        && msg.aar_headers.is_empty()
        && !msg.has_arc_errors;
    let memo_key = unsigned.then(|| MemoKey {
        ip: smtp.ip,
        helo: helo.into(),
        sender: sender.as_str().into(),
        from_domain: from_domain.as_deref().map(Into::into),
    });
    Who {
        from_domain,
        helo,
        sender,
        memo_key,
    }
}

/// Every result of an unsigned message from the memo (no signature: DKIM none, ARC none).
fn memo_pieces(from_domain: Option<String>, m: Memoized) -> [Piece; 6] {
    [
        Piece::From(from_domain),
        Piece::Spf(m.spf),
        Piece::Helo(m.helo),
        Piece::Dkim(Vec::new()),
        Piece::Arc(MethodResult::of(Status::None)),
        Piece::Dmarc(m.dmarc),
    ]
}

/// The results of `msg` when it is unsigned and its sender's are in the memo, found without
/// a task, a channel or a copy of the message (a repeated sender's message is answered here
/// in full; None: `verify` must run).
pub fn memoized(
    caches: &super::AuthCaches,
    msg: &AuthenticatedMessage<'_>,
    smtp: Smtp<'_>,
) -> Option<[Piece; 6]> {
    if caches.memo.disabled() {
        return None;
    }
    let who = identify(msg, smtp);
    let m = caches.memo.get(who.memo_key.as_ref()?)?;
    Some(memo_pieces(who.from_domain, m))
}

/// Verifies `raw` as sent by `smtp`. Sends every `Piece` once on `tx`.
pub async fn verify(
    auth: &MessageAuthenticator,
    health: &DnsHealth,
    caches: &super::AuthCaches,
    raw: &[u8],
    smtp: Smtp<'_>,
    tx: &UnboundedSender<Piece>,
    sealer: Option<&crate::sign::Sealer>,
) {
    let Smtp { ip, host, .. } = smtp;
    let send = |p: Piece| {
        let _ = tx.send(p);
    };
    let Some(msg) = AuthenticatedMessage::parse(raw) else {
        let bad = MethodResult {
            result: Status::PermError,
            reason: Some("message headers cannot be parsed".into()),
            ..Default::default()
        };
        send(Piece::From(None));
        send(Piece::Spf(MethodResult::of(Status::None)));
        send(Piece::Helo(MethodResult::of(Status::None)));
        send(Piece::Dkim(Vec::new()));
        send(Piece::Arc(MethodResult::of(Status::None)));
        send(Piece::Dmarc(bad));
        if sealer.is_some() {
            send(Piece::Seal(Err("message headers cannot be parsed".into())));
        }
        return;
    };
    let Who {
        from_domain,
        helo,
        sender,
        memo_key,
    } = identify(&msg, smtp);
    // (A seal needs every method's output: no memo then.)
    if let Some(m) = memo_key
        .as_ref()
        .filter(|_| sealer.is_none())
        .and_then(|k| caches.memo.get(k))
    {
        for p in memo_pieces(from_domain, m) {
            send(p);
        }
        return;
    }
    send(Piece::From(from_domain.clone()));
    let spf = async {
        let Some(ip) = ip else {
            let r = MethodResult::of(Status::None);
            send(Piece::Spf(r.clone()));
            return (r, None);
        };
        let o = auth
            .verify_spf(caches.with(SpfParameters::verify_mail_from(ip, helo, host, &sender)))
            .await;
        let r = spf_result(&o, health);
        send(Piece::Spf(r.clone()));
        (r, Some(o))
    };
    let helo_spf = async {
        let result = match helo_checked(ip, helo) {
            Some(ip) => {
                let o = auth
                    .verify_spf(caches.with(SpfParameters::verify_ehlo(ip, helo, host)))
                    .await;
                spf_result(&o, health)
            }
            _ => MethodResult::of(Status::None),
        };
        send(Piece::Helo(result.clone()));
        result
    };
    let dkim = async {
        let o = auth.verify_dkim(caches.with(&msg)).await;
        let results = o
            .iter()
            .map(|d| dkim_result(d, from_domain.as_deref(), health))
            .collect();
        send(Piece::Dkim(results));
        o
    };
    let arc = async {
        let o = auth.verify_arc(caches.with(&msg)).await;
        let mut r = MethodResult {
            result: dkim_status(o.result()),
            reason: dkim_reason(o.result()),
            ..Default::default()
        };
        if let Some(last) = o.sets().last() {
            r.domain = Some(last.seal.header.d.clone());
            r.selector = Some(last.seal.header.s.clone());
        }
        dns_note(health, r.result);
        send(Piece::Arc(r));
        o
    };
    // The DMARC record is fetched while the others run, so that DMARC, which needs their
    // outputs, finds it in the cache.
    let prefetch = fetch_dmarc_record(auth, caches, from_domain.as_deref());
    let ((spf_r, spf_out), helo_r, dkim_out, arc_out, ()) =
        tokio::join!(spf, helo_spf, dkim, arc, prefetch);
    // The seal's ARC-Authentication-Results: what we found, in mail-auth's own form.
    let seal = |dmarc: Option<&mail_auth::DmarcOutput>, spf: Option<&SpfOutput>| {
        let Some(sealer) = sealer else { return };
        let mut results = mail_auth::AuthenticationResults::new(host)
            .with_dkim_results(&dkim_out, from_domain.as_deref().unwrap_or_default());
        if let (Some(spf), Some(ip)) = (spf, ip) {
            results = results.with_spf_mailfrom_result(spf, ip, &sender, helo);
        }
        if let Some(ip) = ip {
            results = results.with_arc_result(&arc_out, ip);
        }
        if let Some(d) = dmarc {
            results = results.with_dmarc_result(d);
        }
        send(Piece::Seal(sealer.seal(&msg, &results, &arc_out)));
    };
    let finish = |dmarc: MethodResult| {
        if let Some(key) = memo_key {
            caches.memo.put(
                key,
                Memoized {
                    spf: spf_r,
                    helo: helo_r,
                    dmarc: dmarc.clone(),
                },
            );
        }
        send(Piece::Dmarc(dmarc));
    };
    let Some(from) = from_domain.clone() else {
        finish(MethodResult {
            result: Status::None,
            reason: Some("no From domain".into()),
            ..Default::default()
        });
        seal(None, spf_out.as_ref());
        return;
    };
    let mail_from_domain = sender
        .rsplit_once('@')
        .map_or(helo, |(_, d)| d)
        .to_ascii_lowercase();
    let spf_out = spf_out
        .unwrap_or_else(|| SpfOutput::new(mail_from_domain.clone()).with_result(SpfResult::None));
    let o = auth
        .verify_dmarc(caches.with(mail_auth::dmarc::verify::DmarcParameters::new(
            &msg,
            &dkim_out,
            &mail_from_domain,
            &spf_out,
        )))
        .await;
    let (s, d) = (o.spf_result(), o.dkim_result());
    let result = if matches!(s, DmarcResult::Pass) || matches!(d, DmarcResult::Pass) {
        Status::Pass
    } else if matches!(s, DmarcResult::TempError(_)) || matches!(d, DmarcResult::TempError(_)) {
        Status::TempError
    } else if o.dmarc_record().is_none() {
        if matches!(s, DmarcResult::PermError(_)) || matches!(d, DmarcResult::PermError(_)) {
            Status::PermError
        } else {
            Status::None
        }
    } else {
        Status::Fail
    };
    let reason = [s, d].iter().find_map(|r| match r {
        DmarcResult::Fail(e) | DmarcResult::TempError(e) | DmarcResult::PermError(e) => {
            Some(e.to_string())
        }
        _ => None,
    });
    dns_note(health, result);
    let policy = o.dmarc_record().map(|_| {
        match o.policy() {
            Policy::Reject => "reject",
            Policy::Quarantine => "quarantine",
            Policy::None | Policy::Unspecified => "none",
        }
        .to_string()
    });
    finish(MethodResult {
        result,
        domain: Some(from),
        policy,
        reason: if result == Status::Pass { None } else { reason },
        ..Default::default()
    });
    seal(Some(&o), Some(&spf_out));
}

fn dns_note(health: &DnsHealth, s: Status) {
    crate::dns::note_auth_error(health, s == Status::TempError);
}

fn spf_result(o: &SpfOutput, health: &DnsHealth) -> MethodResult {
    let result = match o.result() {
        SpfResult::Pass => Status::Pass,
        SpfResult::Fail => Status::Fail,
        SpfResult::SoftFail => Status::SoftFail,
        SpfResult::Neutral => Status::Neutral,
        SpfResult::TempError => Status::TempError,
        SpfResult::PermError => Status::PermError,
        SpfResult::None => Status::None,
    };
    dns_note(health, result);
    MethodResult {
        result,
        domain: Some(o.domain().to_string()).filter(|d| !d.is_empty()),
        reason: o.explanation().map(str::to_string),
        ..Default::default()
    }
}

fn dkim_status(r: &DkimResult) -> Status {
    use mail_auth::arc::ArcError;
    use mail_auth::dkim::DkimError;
    use mail_auth::Error;
    match r {
        DkimResult::Pass => Status::Pass,
        // mail-auth says neutral for a body that does not match its hash and for an expired
        // signature (RFC 6376 6.1: both fail verification), and for a signature it cannot
        // parse (a permanent error of the signature itself).
        DkimResult::Neutral(
            Error::Dkim(DkimError::FailedBodyHashMatch | DkimError::SignatureExpired)
            | Error::Arc(ArcError::FailedBodyHashMatch | ArcError::SignatureExpired),
        ) => Status::Fail,
        DkimResult::Neutral(_) => Status::PermError,
        DkimResult::Fail(_) => Status::Fail,
        DkimResult::PermError(_) => Status::PermError,
        DkimResult::TempError(_) => Status::TempError,
        DkimResult::None => Status::None,
    }
}

fn dkim_reason(r: &DkimResult) -> Option<String> {
    match r {
        DkimResult::Neutral(e)
        | DkimResult::Fail(e)
        | DkimResult::PermError(e)
        | DkimResult::TempError(e) => Some(e.to_string()),
        DkimResult::Pass | DkimResult::None => None,
    }
}

fn dkim_result(o: &DkimOutput<'_>, from: Option<&str>, health: &DnsHealth) -> MethodResult {
    let result = dkim_status(o.result());
    dns_note(health, result);
    let sig = o.signature();
    let domain = sig.map(|s| s.d.to_ascii_lowercase());
    let aligned = match (&domain, from) {
        (Some(d), Some(f)) => organizational(d) == organizational(f),
        _ => false,
    };
    MethodResult {
        result,
        domain,
        selector: sig.map(|s| s.s.clone()),
        reason: dkim_reason(o.result()),
        aligned,
        ..Default::default()
    }
}

/// Fetches what verifying a message whose header section is `msg` (parsed as a message with an
/// empty body) will ask of DNS, before its body has arrived: the SPF records of the sender and the HELO (by evaluating them), the From
/// domain's DMARC record, and the keys of its DKIM signatures and ARC sets. The answers land in
/// `caches` and the resolver's cache; nothing is returned. An unsigned message whose results
/// are memoized asks nothing.
pub async fn prefetch(
    auth: &MessageAuthenticator,
    caches: &super::AuthCaches,
    msg: &AuthenticatedMessage<'_>,
    smtp: Smtp<'_>,
) {
    use mail_auth::common::verify::{DomainKey, VerifySignature};
    let Who {
        from_domain,
        helo,
        sender,
        memo_key,
    } = identify(msg, smtp);
    if memo_key.is_some_and(|k| caches.memo.peek(&k)) {
        return;
    }
    let spf = async {
        if let Some(ip) = smtp.ip {
            let p = SpfParameters::verify_mail_from(ip, helo, smtp.host, &sender);
            auth.verify_spf(caches.with(p)).await;
        }
    };
    let helo_spf = async {
        if let Some(ip) = helo_checked(smtp.ip, helo) {
            auth.verify_spf(caches.with(SpfParameters::verify_ehlo(ip, helo, smtp.host)))
                .await;
        }
    };
    let dmarc = fetch_dmarc_record(auth, caches, from_domain.as_deref());
    let mut names: Vec<String> = Vec::new();
    for name in msg
        .dkim_headers
        .iter()
        .map(|h| h.header.domain_key())
        .chain(msg.ams_headers.iter().map(|h| h.header.domain_key()))
        .chain(msg.as_headers.iter().map(|h| h.header.domain_key()))
    {
        if !names.contains(&name) && names.len() < MAX_PREFETCHED_KEYS {
            names.push(name);
        }
    }
    let keys = async {
        for name in &names {
            let _ = auth
                .txt_lookup::<DomainKey>(name.as_str(), Some(&caches.txt))
                .await;
        }
    };
    tokio::join!(spf, helo_spf, dmarc, keys);
}

/// The client address when the HELO is a name SPF can check (not empty, not an address).
fn helo_checked(ip: Option<IpAddr>, helo: &str) -> Option<IpAddr> {
    ip.filter(|_| !helo.is_empty() && helo.parse::<IpAddr>().is_err())
}

/// Fetches the From domain's DMARC record into the cache.
async fn fetch_dmarc_record(
    auth: &MessageAuthenticator,
    caches: &super::AuthCaches,
    from_domain: Option<&str>,
) {
    if let Some(d) = from_domain {
        let _ = auth
            .txt_lookup::<mail_auth::dmarc::Dmarc>(format!("_dmarc.{d}."), Some(&caches.txt))
            .await;
    }
}

/// Signing keys fetched ahead at most (a message may carry any number of signatures).
const MAX_PREFETCHED_KEYS: usize = 8;
