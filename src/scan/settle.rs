//! `[[settings]]` applied to a scanned message: the rules ran once; each recipient's settings
//! entry judges their hits again with its own scores, switches and thresholds, and the answer
//! is the strictest of those verdicts (a milter can give one answer per message, and rspamd's
//! protocol one per request).
//!
//! The store records what the global settings made of the message (`Scanned::updates` uses the
//! verdict before settings): one recipient's preferences do not change the reputation every
//! recipient shares.

use crate::auth::AuthResults;
use crate::engine::{Generation, RuleOutcome};
use crate::message::Envelope;
use crate::settings::{Profile, Query, SETTINGS_ALLOW, SETTINGS_ALLOW_UNVERIFIED, SETTINGS_DENY};
use crate::verdict::{Action, Verdict};

/// What a settings entry can say about the message's senders: the addresses (envelope sender
/// and From), and those of them whose domain authentication vouches for.
#[derive(Debug, Default)]
pub(super) struct Senders<'a> {
    pub addresses: Vec<&'a str>,
    pub verified: Vec<&'a str>,
}

impl<'a> Senders<'a> {
    /// The envelope sender is verified by an SPF pass for its own domain; the From address by
    /// a valid DKIM signature aligned with it or an SPF pass for a domain of the same
    /// organization (DMARC's alignment). Without network checks nothing is verified.
    pub fn new(
        envelope: &'a Envelope,
        from: Option<&'a str>,
        auth: Option<&AuthResults>,
    ) -> Senders<'a> {
        let mut s = Senders::default();
        let domain_of = |a: &str| a.rsplit_once('@').map(|(_, d)| d.to_ascii_lowercase());
        let spf_pass = auth
            .and_then(|a| a.spf.as_ref())
            .filter(|r| r.result == crate::auth::Status::Pass)
            .and_then(|r| r.domain.as_deref())
            .map(str::to_ascii_lowercase);
        if let Some(mail_from) = envelope.mail_from.as_deref().filter(|m| !m.is_empty()) {
            s.addresses.push(mail_from);
            if spf_pass.is_some() && domain_of(mail_from) == spf_pass {
                s.verified.push(mail_from);
            }
        }
        if let Some(from) = from {
            s.addresses.push(from);
            let dkim = auth.is_some_and(|a| a.aligned_dkim_domain().is_some());
            let spf_aligned = match (spf_pass.as_deref(), domain_of(from)) {
                (Some(spf), Some(d)) => {
                    crate::auth::organizational(spf) == crate::auth::organizational(&d)
                }
                _ => false,
            };
            if dkim || spf_aligned {
                s.verified.push(from);
            }
        }
        s
    }
}

/// The entries that apply: the one `Settings-ID` names, else each recipient's (none for a
/// recipient no entry matches), without repeats.
fn chosen(generation: &Generation, envelope: &Envelope) -> Vec<Option<usize>> {
    let table = &generation.overrides.settings;
    if let Some(id) = envelope.settings_id.as_deref() {
        match table.by_name(id) {
            Some(i) => return vec![Some(i)],
            None => tracing::debug!(settings_id = id, "no settings entry of that name"),
        }
    }
    let query = |rcpt| Query {
        rcpt,
        user: envelope.user.as_deref(),
        sender: envelope.mail_from.as_deref(),
        client_ip: envelope.client_ip,
    };
    let mut out: Vec<Option<usize>> = if envelope.rcpt_to.is_empty() {
        vec![table.lookup(&query(None)).map(|(i, _)| i)]
    } else {
        envelope
            .rcpt_to
            .iter()
            .map(|r| table.lookup(&query(Some(r))).map(|(i, _)| i))
            .collect()
    };
    out.sort_unstable();
    out.dedup();
    out
}

/// The verdict to answer with: `base` (the global settings') when no entry applies, else the
/// strictest of the verdicts of the entries (and of the global settings, for recipients no
/// entry matched). Strictest: the most severe action, then the higher score.
pub(super) fn settle(
    base: Verdict,
    outcome: &RuleOutcome,
    generation: &Generation,
    lists: &[crate::dnsbl::ListHit],
    envelope: &Envelope,
    senders: &Senders<'_>,
) -> Verdict {
    let table = &generation.overrides.settings;
    if table.is_empty() {
        return base;
    }
    let chosen = chosen(generation, envelope);
    if chosen == [None] {
        return base;
    }
    let mut best: Option<Verdict> = None;
    for entry in chosen {
        let v = match entry.and_then(|i| table.profile(i)) {
            None => base.clone(),
            Some(profile) => judge(profile, outcome, generation, lists, senders),
        };
        let stricter = best
            .as_ref()
            .is_none_or(|b| (v.action, v.score) > (b.action, b.score));
        if stricter {
            best = Some(v);
        }
    }
    best.unwrap_or(base)
}

/// The verdict under one entry.
fn judge(
    profile: &Profile,
    outcome: &RuleOutcome,
    generation: &Generation,
    lists: &[crate::dnsbl::ListHit],
    senders: &Senders<'_>,
) -> Verdict {
    let (mut v, forced) = super::judge(&profile.verdict, outcome, generation, lists, Some(profile));
    v.settings = Some(profile.name.clone());
    if let Some(pattern) = senders
        .addresses
        .iter()
        .find_map(|a| profile.deny.matching(a))
    {
        v.note(
            SETTINGS_DENY,
            Some("the sender is in this recipient's deny_senders"),
            vec![pattern],
        );
        v.action = Action::Reject;
        return v;
    }
    if profile.allow.is_empty() {
        return v;
    }
    if let Some(pattern) = senders
        .verified
        .iter()
        .find_map(|a| profile.allow.matching(a))
    {
        v.note(
            SETTINGS_ALLOW,
            Some("the sender is in this recipient's allow_senders and authenticated"),
            vec![pattern],
        );
        // A rule's forced action (a virus, GTUBE) stands; the thresholds do not.
        v.action = forced.unwrap_or(Action::NoAction);
    } else if let Some(pattern) = senders
        .addresses
        .iter()
        .find_map(|a| profile.allow.matching(a))
    {
        v.note(
            SETTINGS_ALLOW_UNVERIFIED,
            Some("the sender is in allow_senders but not authenticated: not allowed"),
            vec![pattern],
        );
    }
    v
}

/// Greylisting of a judged message (`[greylist]` on): a message whose action is at most
/// `greylist` and whose score reaches `min_score` (default: the greylist threshold of the
/// settings that judged it) is deferred (`greylist`, symbol `GREYLIST`) until its triples pass,
/// then answered `no action` with `GREYLIST_PASS`. With greylisting on, the `greylist` action
/// means exactly that: a message exempt from it (an authenticated sender, settings that switch
/// `GREYLIST` off, a score below `min_score`) or that cannot be greylisted (no client address,
/// the store out of reach: fail open) gets `no action`. Higher actions stand.
pub(super) fn greylist(
    greylist: &crate::greylist::Greylist,
    verdict: &mut Verdict,
    generation: &Generation,
    global: &crate::verdict::VerdictConfig,
    envelope: &Envelope,
) {
    use crate::greylist::{Outcome, GREYLIST, GREYLIST_PASS};
    if verdict.action > Action::Greylist {
        return;
    }
    let table = &generation.overrides.settings;
    let profile = verdict
        .settings
        .as_deref()
        .and_then(|n| table.by_name(n))
        .and_then(|i| table.profile(i));
    let min_score = greylist
        .config()
        .min_score
        .unwrap_or_else(|| profile.map_or(global.greylist, |p| p.verdict.greylist));
    let exempt = envelope.user.is_some()
        || profile.is_some_and(|p| p.is_off(None, GREYLIST))
        || verdict.score < min_score;
    let outcome = if exempt {
        Outcome::Skipped("exempt")
    } else {
        greylist.check(envelope)
    };
    let (symbol, action, option, description) = match outcome {
        Outcome::Deferred { new, .. } => (
            GREYLIST,
            Action::Greylist,
            if new > 0 {
                "new".to_string()
            } else {
                format!("retried within {} s", greylist.config().delay_secs)
            },
            "greylisted: a new (network, sender, recipient) triple",
        ),
        Outcome::Passed { .. } => (
            GREYLIST_PASS,
            Action::NoAction,
            "passed".to_string(),
            "greylisting passed: the sender retried after the delay",
        ),
        Outcome::Skipped(why) => {
            if why != "exempt" {
                tracing::debug!(reason = why, "greylisting skipped");
            }
            if verdict.action == Action::Greylist {
                verdict.action = Action::NoAction;
            }
            return;
        }
    };
    verdict.action = action;
    verdict.note(symbol, Some(description), vec![option]);
}

/// clamd's finding on the verdict: a virus adds `CLAM_VIRUS` (score 0, the name as option)
/// and forces the configured action (reject by default) over whatever the scores or settings
/// said; a failure adds `CLAM_VIRUS_FAIL` (score 0) and changes nothing else: the scan goes
/// on without antivirus.
pub(super) fn antivirus(
    finding: &crate::antivirus::Finding,
    antivirus: Option<&crate::antivirus::Antivirus>,
    verdict: &mut Verdict,
) {
    use crate::antivirus::{Finding, CLAM_VIRUS, CLAM_VIRUS_FAIL};
    let (symbol, description, option) = match finding {
        Finding::Clean | Finding::TooLarge => return,
        Finding::Virus(name) => {
            if let Some(av) = antivirus {
                verdict.action = verdict.action.max(av.action());
            }
            (CLAM_VIRUS, "ClamAV found a virus", name.clone())
        }
        Finding::Failed(why) => (
            CLAM_VIRUS_FAIL,
            "ClamAV could not scan the message",
            why.clone(),
        ),
    };
    verdict.note(symbol, Some(description), vec![option]);
}
