//! One milter connection's state machine, sans I/O: fed decoded [`Command`]s, it answers with
//! [`Step`]s, and given a verdict (or none), with the end-of-message replies.
//!
//! Owns: negotiation (what we ask of the MTA), the macros kept per connection, the envelope
//! (client, HELO, sender, recipients, queue id, authenticated user), the header block and body
//! collected up to the message size limit, several messages per connection, abort and quit, and
//! turning a verdict into milter replies: 550 on reject, 451 on soft reject and greylist,
//! X-Spam-* headers (after removing forged ones) on the rest, discard and quarantine as the
//! [`Policy`] says, the fallback when no verdict came. Never touches: sockets, timeouts, the
//! scan workers (`server::milter` does the I/O and hands the collected message to them).

use std::net::IpAddr;

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use super::{actions, negotiate, protocol, Command, MilterError, OptNeg, Reply};
use crate::message::Envelope;
use crate::proto::headers::{is_spam_header, spam_headers};
use crate::verdict::{Action, Verdict};

/// What the MTA is told when no verdict is available (queue full, timeout, worker failure).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fallback {
    /// 451 4.7.1: the sender retries later (the default: nothing is lost).
    Tempfail,
    /// Let the message through unscanned.
    Accept,
    /// 550 5.7.1.
    Reject,
}

/// What the MTA does for a verdict of `discard` or `quarantine`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Disposal {
    /// Tell the sender it was accepted, then drop it.
    Discard,
    /// Accept into the MTA's hold queue.
    Quarantine,
    /// 550 5.7.1.
    Reject,
    /// Deliver with the X-Spam-* headers.
    Accept,
}

/// What a session answers for each verdict: the `[milter]` options of reply policy
/// (`server::milter::MilterConfig::policy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// What the MTA is told when no verdict is available.
    pub fallback: Fallback,
    /// What a `discard` verdict does.
    pub on_discard: Disposal,
    /// What a `quarantine` verdict does.
    pub on_quarantine: Disposal,
    /// SMTP reply for reject (5xx).
    pub reject_reply: String,
    /// SMTP reply for soft reject and greylist (4xx).
    pub tempfail_reply: String,
    /// SMTP reply when the fallback is tempfail (4xx).
    pub fallback_reply: String,
    /// Add X-Spam-Score, X-Spam-Status and X-Spam-Symbols to delivered messages (removing
    /// X-Spam-* headers that came from outside).
    pub add_headers: bool,
    /// Prefix put before the subject on `rewrite subject`.
    pub subject_prefix: String,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            fallback: Fallback::Tempfail,
            on_discard: Disposal::Discard,
            on_quarantine: Disposal::Quarantine,
            reject_reply: "550 5.7.1 Spam message rejected".into(),
            tempfail_reply: "451 4.7.1 Try again later".into(),
            fallback_reply: "451 4.7.1 Service temporarily unavailable, try again later".into(),
            add_headers: true,
            subject_prefix: "***SPAM*** ".into(),
        }
    }
}

/// A reply text of the policy that the MTA would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("milter.{name} must be one line starting with a {class}xx SMTP code, got {value:?}")]
pub struct PolicyError {
    /// The option's name (`reject_reply`, ...).
    pub name: &'static str,
    /// The reply class it needs: '5' or '4'.
    pub class: char,
    pub value: String,
}

impl Policy {
    /// Checks each reply is one line starting with an SMTP code of its class.
    pub fn validate(&self) -> Result<(), PolicyError> {
        for (name, value, class) in [
            ("reject_reply", &self.reject_reply, '5'),
            ("tempfail_reply", &self.tempfail_reply, '4'),
            ("fallback_reply", &self.fallback_reply, '4'),
        ] {
            let b = value.as_bytes();
            let ok = b.len() >= 3
                && b[0] == class as u8
                && b[1].is_ascii_digit()
                && b[2].is_ascii_digit()
                && (b.len() == 3 || b[3] == b' ')
                && !value.contains(['\r', '\n', '\0']);
            if !ok {
                return Err(PolicyError {
                    name,
                    class,
                    value: value.clone(),
                });
            }
        }
        Ok(())
    }
}

/// A message collected at end of message, for the scan workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collected {
    /// Header block, blank line and body, CRLF line ends, up to the size limit.
    pub raw: Vec<u8>,
    pub envelope: Envelope,
}
/// The actions and protocol steps we ask of the MTA: add and change headers, quarantine; no
/// reply to anything but end of message (the NR_* bits), header values with their leading
/// space, and no UNKNOWN commands.
pub const WANT_ACTIONS: u32 = actions::ADDHDRS | actions::CHGHDRS | actions::QUARANTINE;
pub const WANT_PROTOCOL: u32 = protocol::NR_CONN
    | protocol::NR_HELO
    | protocol::NR_MAIL
    | protocol::NR_RCPT
    | protocol::NR_DATA
    | protocol::NR_UNKN
    | protocol::NR_EOH
    | protocol::NR_HDR
    | protocol::NR_BODY
    | protocol::SKIP
    | protocol::HDR_LEADSPC
    | protocol::NOUNKNOWN;

/// Distinct macro names a session keeps.
const MAX_MACROS: usize = 256;

/// What the session wants next.
#[derive(Debug)]
pub enum Step {
    /// Nothing to send.
    Quiet,
    Reply(Reply),
    /// End of message: scan this, then call `Session::verdict`.
    Scan(Collected),
    /// End of a message that was given up ([`Session::give_up`]): answer it with
    /// `Session::verdict(None, ..)`, the fallback.
    Unscanned,
    /// The MTA said goodbye.
    Close,
}

/// One milter connection's state. Sans-IO: fed commands, it returns steps.
#[derive(Debug, Default)]
pub struct Session {
    negotiated: Option<OptNeg>,
    macros: FxHashMap<String, String>,
    client_ip: Option<IpAddr>,
    helo: Option<String>,
    mail_from: Option<String>,
    rcpts: Vec<String>,
    /// The header block as received, CRLF line ends.
    head: Vec<u8>,
    /// Occurrences per lower-case X-Spam-* header name (for CHGHDR indexes).
    header_counts: FxHashMap<String, u32>,
    /// X-Spam-* headers that came with the message: (name, index among its name).
    forged: Vec<(String, u32)>,
    /// Authentication-Results headers that came with the message: (index among them, value).
    auth_results: Vec<(u32, String)>,
    /// What `set_authentication_results` asked for this message's verdict.
    auth_header: Option<AuthHeader>,
    subject: Option<String>,
    body: Vec<u8>,
    /// Bytes dropped beyond the message size limit.
    dropped: u64,
    /// The message is not being collected ([`Session::give_up`]).
    given_up: bool,
    in_message: bool,
    /// Queue id (macro `i`), for the log.
    queue_id: Option<String>,
}

/// A session keeps head and body buffers up to this capacity between messages.
const KEEP_CAPACITY: usize = 256 * 1024;

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn bare_address(arg: &[u8]) -> Option<String> {
    let a = lossy(arg);
    let a = a
        .trim()
        .trim_start_matches('<')
        .trim_end_matches('>')
        .trim();
    (!a.is_empty()).then(|| a.to_owned())
}

/// Our `Authentication-Results` for the message being judged (RFC 8601).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthHeader {
    /// Incoming headers naming this authserv-id are removed (they claim to be ours).
    pub authserv_id: String,
    /// The value to add at the top of the header (None: only remove the forged ones).
    pub value: Option<String>,
}

impl Session {
    /// Sets what the next `verdict` does about `Authentication-Results` when it lets the
    /// message through: remove incoming ones that claim `authserv_id`, add `value` on top.
    pub fn set_authentication_results(&mut self, header: AuthHeader) {
        self.auth_header = Some(header);
    }

    fn has_protocol(&self, bit: u32) -> bool {
        self.negotiated.is_some_and(|n| n.protocol & bit != 0)
    }

    fn has_action(&self, bit: u32) -> bool {
        self.negotiated.is_some_and(|n| n.actions & bit != 0)
    }

    /// Continue, unless the MTA agreed not to wait for a reply to this step.
    fn cont(&self, no_reply_bit: u32) -> Step {
        if self.has_protocol(no_reply_bit) {
            Step::Quiet
        } else {
            Step::Reply(Reply::Continue)
        }
    }

    /// Whether a message is between MAIL and end of message.
    pub fn in_message(&self) -> bool {
        self.in_message
    }

    /// The header section received so far (CRLF line ends, without the blank line).
    pub fn head(&self) -> &[u8] {
        &self.head
    }

    /// The envelope as known so far (complete from end of headers on).
    pub fn envelope(&self) -> Envelope {
        Envelope {
            client_ip: self.client_ip,
            helo: self.helo.clone(),
            mail_from: self.mail_from.clone(),
            rcpt_to: self.rcpts.clone(),
            hostname: self
                .macros
                .get("client_name")
                .filter(|h| !h.is_empty() && !h.starts_with('[') && *h != "unknown")
                .cloned(),
            user: self
                .macros
                .get("auth_authen")
                .filter(|u| !u.is_empty())
                .cloned(),
            queue_id: self.queue_id.clone(),
            deliver_to: None,
            settings_id: None,
        }
    }

    pub fn queue_id(&self) -> Option<&str> {
        self.queue_id.as_deref()
    }

    fn reset_message(&mut self) {
        self.mail_from = None;
        self.rcpts.clear();
        self.head.clear();
        self.header_counts.clear();
        self.forged.clear();
        self.auth_results.clear();
        self.auth_header = None;
        self.subject = None;
        self.dropped = 0;
        self.given_up = false;
        self.in_message = false;
        self.release_buffers();
    }

    /// Empties the head and body buffers, keeping their allocations for the next message up
    /// to `KEEP_CAPACITY` each.
    fn release_buffers(&mut self) {
        for buf in [&mut self.head, &mut self.body] {
            buf.clear();
            if buf.capacity() > KEEP_CAPACITY {
                *buf = Vec::new();
            }
        }
    }

    /// Stops collecting the current message (the daemon cannot spare the memory for it): its
    /// bytes so far are freed, the rest is dropped as it arrives, and its end of message is
    /// [`Step::Unscanned`].
    pub fn give_up(&mut self) {
        self.given_up = true;
        self.head = Vec::new();
        self.body = Vec::new();
    }

    /// Whether the current message was given up.
    pub fn given_up(&self) -> bool {
        self.given_up
    }

    /// Bytes the session's message buffers hold (their capacity) between commands.
    pub fn held(&self) -> usize {
        self.head.capacity() + self.body.capacity()
    }

    /// The most the message buffers can hold while `cmd` is handled: [`Session::held`], plus
    /// the larger block a growing buffer moves to (both are live during the move), plus at
    /// end of message the message built from them. A caller that accounts for memory grants
    /// this before calling [`Session::command`].
    pub fn peak(&self, cmd: &Command, limit: usize) -> usize {
        let held = self.held();
        if self.given_up {
            return held;
        }
        let (part, more, end) = match cmd {
            Command::Header { name, value } => (
                Part::Head,
                name.len() + self.separator().len() + value.len() + 2,
                false,
            ),
            Command::Body(chunk) => (Part::Body, chunk.len(), false),
            Command::EndOfMessage(chunk) => (Part::Body, chunk.len(), true),
            _ => return held,
        };
        let kept = self.head.len() + self.body.len();
        let take = more.min(limit.saturating_sub(kept));
        let buf = match part {
            Part::Head => &self.head,
            Part::Body => &self.body,
        };
        let grown = grown(buf, take, limit);
        let moving = if grown > buf.capacity() { grown } else { 0 };
        let message = if end { kept + take + 2 } else { 0 };
        held + moving + message
    }

    /// What separates a header's name from its value as the session rebuilds it.
    fn separator(&self) -> &'static [u8] {
        if self.has_protocol(protocol::HDR_LEADSPC) {
            b":"
        } else {
            b": "
        }
    }

    /// Appends `pieces` to the head or body, up to `limit` bytes per message in all; the rest
    /// is counted as dropped (all of it when the message was given up).
    fn keep(&mut self, which: Part, pieces: &[&[u8]], limit: usize) {
        let total: usize = pieces.iter().map(|p| p.len()).sum();
        let kept = self.head.len() + self.body.len();
        let take = match self.given_up {
            true => 0,
            false => total.min(limit.saturating_sub(kept)),
        };
        let target = match which {
            Part::Head => &mut self.head,
            Part::Body => &mut self.body,
        };
        // Grown as `peak` said it would be.
        let capacity = grown(target, take, limit);
        if capacity > target.capacity() {
            target.reserve_exact(capacity - target.len());
        }
        let mut left = take;
        for bytes in pieces {
            let n = bytes.len().min(left);
            target.extend_from_slice(&bytes[..n]);
            left -= n;
        }
        self.dropped += (total - take) as u64;
    }

    /// Handles one command. `limit` bounds the bytes kept per message.
    /// The error is the MTA's offer that cannot be negotiated; the connection should close.
    pub fn command(&mut self, cmd: Command, limit: usize) -> Result<Step, MilterError> {
        Ok(match cmd {
            Command::OptNeg(offer) => {
                let reply = negotiate(&offer, WANT_ACTIONS, WANT_PROTOCOL)?;
                self.negotiated = Some(reply);
                Step::Reply(Reply::OptNeg(reply))
            }
            Command::Macro { pairs, .. } => {
                for (name, value) in pairs {
                    let name = String::from_utf8_lossy(&name); // borrowed when valid UTF-8: no copy
                    let name = name.trim_start_matches('{').trim_end_matches('}');
                    // Postfix repeats `i` before every header: an unchanged value costs nothing.
                    if self.macros.get(name).is_some_and(|v| v.as_bytes() == value) {
                        continue;
                    }
                    let value = lossy(&value);
                    if name == "i" {
                        self.queue_id = Some(value.clone());
                    }
                    // Bounded: a hostile client cannot grow the session with new names.
                    if self.macros.len() < MAX_MACROS || self.macros.contains_key(name) {
                        self.macros.insert(name.to_owned(), value);
                    }
                }
                Step::Quiet
            }
            Command::Connect {
                hostname,
                family,
                address,
                ..
            } => {
                self.client_ip = match family {
                    b'4' | b'6' => {
                        let a = lossy(&address);
                        let a = a.trim().trim_start_matches('[').trim_end_matches(']');
                        let a = a.strip_prefix("IPv6:").unwrap_or(a);
                        a.parse().ok()
                    }
                    _ => None,
                };
                self.macros.insert("client_name".into(), lossy(&hostname));
                self.cont(protocol::NR_CONN)
            }
            Command::Helo(name) => {
                self.helo = Some(lossy(&name)).filter(|h| !h.is_empty());
                self.cont(protocol::NR_HELO)
            }
            Command::Mail(args) => {
                self.reset_message();
                self.in_message = true;
                self.mail_from = args.first().and_then(|a| bare_address(a));
                self.cont(protocol::NR_MAIL)
            }
            Command::Rcpt(args) => {
                if let Some(r) = args.first().and_then(|a| bare_address(a)) {
                    if self.rcpts.len() < 10_000 {
                        self.rcpts.push(r);
                    }
                }
                self.cont(protocol::NR_RCPT)
            }
            Command::Data => self.cont(protocol::NR_DATA),
            Command::Header { name, value } => {
                if name.eq_ignore_ascii_case(b"authentication-results")
                    && self.auth_results.len() < 1000
                {
                    let index = self.auth_results.len() as u32 + 1;
                    self.auth_results.push((index, lossy(&value)));
                }
                if is_spam_header(&name) {
                    // CHGHDR indexes count the headers of one name; only ours are ever removed.
                    let name = lossy(&name);
                    let n = self
                        .header_counts
                        .entry(name.to_ascii_lowercase())
                        .or_insert(0);
                    *n += 1;
                    let index = *n;
                    self.forged.push((name, index));
                }
                let leadspc = self.has_protocol(protocol::HDR_LEADSPC);
                if self.subject.is_none() && name.eq_ignore_ascii_case(b"subject") {
                    let v = if leadspc {
                        value.strip_prefix(b" ").unwrap_or(&value)
                    } else {
                        &value[..]
                    };
                    self.subject = Some(lossy(v));
                }
                let separator = self.separator();
                self.keep(Part::Head, &[&name, separator, &value, b"\r\n"], limit);
                self.cont(protocol::NR_HDR)
            }
            Command::EndOfHeaders => self.cont(protocol::NR_EOH),
            Command::Body(chunk) => {
                self.keep(Part::Body, &[&chunk], limit);
                if self.has_protocol(protocol::NR_BODY) {
                    Step::Quiet
                } else if self.dropped > 0 && self.has_protocol(protocol::SKIP) {
                    Step::Reply(Reply::Skip)
                } else {
                    Step::Reply(Reply::Continue)
                }
            }
            Command::EndOfMessage(chunk) => {
                self.keep(Part::Body, &[&chunk], limit);
                if self.given_up {
                    return Ok(Step::Unscanned);
                }
                if self.dropped > 0 {
                    tracing::debug!(
                        queue_id = self.queue_id.as_deref(),
                        dropped = self.dropped,
                        "message beyond the size limit; scanning its first part"
                    );
                }
                // One allocation of the exact size; the session keeps its buffers (up to
                // KEEP_CAPACITY each) for the next message instead of growing them from empty.
                let mut raw = Vec::with_capacity(self.head.len() + 2 + self.body.len());
                raw.extend_from_slice(&self.head);
                raw.extend_from_slice(b"\r\n");
                raw.extend_from_slice(&self.body);
                self.release_buffers();
                Step::Scan(Collected {
                    raw,
                    envelope: self.envelope(),
                })
            }
            Command::Abort => {
                self.reset_message();
                Step::Quiet
            }
            Command::Unknown(_) => self.cont(protocol::NR_UNKN),
            Command::Quit => Step::Close,
            Command::QuitNewConnection => {
                // The MTA reuses the connection for a new SMTP session.
                let negotiated = self.negotiated;
                *self = Session::default();
                self.negotiated = negotiated;
                Step::Quiet
            }
        })
    }

    /// The end-of-message replies for a verdict, or for none (queue full, timeout, worker
    /// failure: the policy's fallback); resets for the next message. `add_header_at` is the
    /// required score the X-Spam-* headers show when the verdict has none.
    pub fn verdict(
        &mut self,
        verdict: Option<&Verdict>,
        config: &Policy,
        add_header_at: f64,
    ) -> Vec<Reply> {
        let replies = match verdict {
            Some(v) => self.replies_for(v, config, add_header_at),
            None => match config.fallback {
                Fallback::Tempfail => vec![Reply::ReplyCode(config.fallback_reply.clone())],
                Fallback::Accept => vec![Reply::Accept],
                Fallback::Reject => vec![Reply::ReplyCode(config.reject_reply.clone())],
            },
        };
        // The connection's state (negotiation, client, HELO, macros) stays for the next one,
        // except the message's queue id: the next `i` counts as new even if it repeats it.
        self.reset_message();
        self.queue_id = None;
        self.macros.remove("i");
        replies
    }

    fn replies_for(&self, v: &Verdict, config: &Policy, add_header_at: f64) -> Vec<Reply> {
        let disposal = match v.action {
            Action::Reject => {
                return vec![Reply::ReplyCode(match virus_name(v) {
                    // The name is printable ASCII of bounded length (`antivirus`): one line.
                    Some(name) => format!("550 5.7.1 Virus found: {name}"),
                    None => config.reject_reply.clone(),
                })];
            }
            Action::SoftReject | Action::Greylist => {
                return vec![Reply::ReplyCode(config.tempfail_reply.clone())]
            }
            Action::Discard => config.on_discard,
            Action::Quarantine => config.on_quarantine,
            _ => Disposal::Accept,
        };
        let mut out = Vec::new();
        match disposal {
            Disposal::Discard => return vec![Reply::Discard],
            Disposal::Reject => return vec![Reply::ReplyCode(config.reject_reply.clone())],
            Disposal::Quarantine if self.has_action(actions::QUARANTINE) => {
                out.push(Reply::Quarantine(format!(
                    "shrike: spam score {:.2}",
                    v.score
                )));
            }
            Disposal::Quarantine | Disposal::Accept => {}
        }
        let space = if self.has_protocol(protocol::HDR_LEADSPC) {
            " "
        } else {
            ""
        };
        if config.add_headers && self.has_action(actions::CHGHDRS) {
            // Highest index first, so the earlier indexes still point where they did.
            for (name, index) in self.forged.iter().rev() {
                out.push(Reply::ChangeHeader {
                    index: *index,
                    name: name.clone(),
                    value: String::new(),
                });
            }
        }
        if let Some(h) = &self.auth_header {
            if self.has_action(actions::CHGHDRS) {
                let claimed = self
                    .auth_results
                    .iter()
                    .filter(|(_, value)| crate::auth::claims_authserv_id(value, &h.authserv_id));
                // Highest index first, so the earlier indexes still point where they did.
                for (index, _) in claimed.collect::<Vec<_>>().into_iter().rev() {
                    out.push(Reply::ChangeHeader {
                        index: *index,
                        name: "Authentication-Results".into(),
                        value: String::new(),
                    });
                }
            }
            if let (Some(value), true) = (&h.value, self.has_action(actions::ADDHDRS)) {
                // On top, as a trace header (RFC 8601 5).
                out.push(Reply::InsertHeader {
                    index: 0,
                    name: "Authentication-Results".into(),
                    value: format!("{space}{value}"),
                });
            }
        }
        if let (Some(value), true) = (&v.dkim_signature, self.has_action(actions::ADDHDRS)) {
            // On top, where a signer's header goes.
            out.push(Reply::InsertHeader {
                index: 0,
                name: "DKIM-Signature".into(),
                value: format!("{space}{value}"),
            });
        }
        if !v.arc_seal.is_empty() && self.has_action(actions::ADDHDRS) {
            // Inserted on top in reverse, so that ARC-Seal ends first.
            for (name, value) in v.arc_seal.iter().rev() {
                out.push(Reply::InsertHeader {
                    index: 0,
                    name: name.clone(),
                    value: format!("{space}{value}"),
                });
            }
        }
        if v.action == Action::RewriteSubject {
            let subject = format!(
                "{space}{}{}",
                config.subject_prefix,
                self.subject.as_deref().unwrap_or("")
            );
            if self.subject.is_some() && self.has_action(actions::CHGHDRS) {
                out.push(Reply::ChangeHeader {
                    index: 1,
                    name: "Subject".into(),
                    value: subject,
                });
            } else if self.subject.is_none() && self.has_action(actions::ADDHDRS) {
                out.push(Reply::AddHeader {
                    name: "Subject".into(),
                    value: subject,
                });
            }
        }
        if config.add_headers && self.has_action(actions::ADDHDRS) {
            for (name, value) in spam_headers(v, add_header_at) {
                out.push(Reply::AddHeader {
                    name,
                    value: format!("{space}{value}"),
                });
            }
        }
        out.push(Reply::Accept);
        out
    }
}

enum Part {
    Head,
    Body,
}

/// The capacity `buf` grows to for `more` bytes: unchanged when they fit, else doubled (at most
/// to `limit`), and at least what is needed.
fn grown(buf: &Vec<u8>, more: usize, limit: usize) -> usize {
    let need = buf.len() + more;
    let capacity = buf.capacity();
    if need <= capacity {
        capacity
    } else {
        capacity.saturating_mul(2).min(limit).max(need)
    }
}

/// The virus clamd found in the message (`CLAM_VIRUS`'s option), if any.
fn virus_name(v: &Verdict) -> Option<&str> {
    v.symbols
        .get("CLAM_VIRUS")
        .and_then(|s| s.options.first())
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::milter::{encode, encode_command, Decoder, ReplyDecoder};
    use crate::verdict::SymbolHit;

    /// Postfix 3.7's side of two real connections (three messages), captured on the wire.
    const POSTFIX: &[u8] = include_bytes!("../../../tests/data/milter/postfix-3msgs-mta.bin");

    fn run(bytes: &[u8]) -> (Vec<Step>, Vec<Session>) {
        let mut d = Decoder::new(1 << 20);
        d.feed(bytes);
        let mut steps = Vec::new();
        let mut sessions = vec![Session::default()];
        while let Some(cmd) = d.next_command().unwrap() {
            if matches!(cmd, Command::OptNeg(_)) && sessions.last().unwrap().negotiated.is_some() {
                sessions.push(Session::default());
            }
            let s = sessions.last_mut().unwrap();
            let optneg = matches!(cmd, Command::OptNeg(_));
            let step = s.command(cmd, 1 << 20).unwrap();
            if optneg {
                // The capture's filter (pymilter) negotiated NOUNKNOWN | SKIP only, and Postfix
                // sent what followed accordingly: header values without their leading space,
                // and a reply expected at every step.
                s.negotiated = Some(OptNeg {
                    version: 6,
                    actions: WANT_ACTIONS,
                    protocol: protocol::NOUNKNOWN | protocol::SKIP,
                });
            }
            if let Step::Scan(_) = &step {
                let replies = s.verdict(Some(&Verdict::default()), &Policy::default(), 6.0);
                assert_eq!(replies.last(), Some(&Reply::Accept));
            }
            steps.push(step);
        }
        (steps, sessions)
    }

    #[test]
    fn captured_postfix_conversation_gives_three_messages() {
        let (steps, sessions) = run(POSTFIX);
        let scans: Vec<&Collected> = steps
            .iter()
            .filter_map(|s| match s {
                Step::Scan(r) => Some(r),
                _ => None,
            })
            .collect();
        assert_eq!(scans.len(), 3);
        assert_eq!(sessions.len(), 2, "two connections");
        // Without the no-reply bits every step but macros, abort and quit gets a continue.
        let continues = steps
            .iter()
            .filter(|s| matches!(s, Step::Reply(Reply::Continue)))
            .count();
        assert!(continues > 20, "{continues}");
        for scan in &scans {
            assert_eq!(scan.envelope.client_ip, Some("127.0.0.1".parse().unwrap()));
            assert!(!scan.envelope.rcpt_to.is_empty());
            assert!(scan.envelope.mail_from.is_some());
            let text = String::from_utf8_lossy(&scan.raw);
            assert!(text.contains("\r\nSubject: "), "{text}");
            assert!(text.contains("\r\n\r\n"), "{text}");
            assert!(text.contains("\r\nMessage-ID: <"), "{text}");
        }
    }

    #[test]
    fn message_bytes_are_bounded_and_sessions_reset() {
        let mut s = Session::default();
        let offer = OptNeg {
            version: 6,
            actions: 0x1ff,
            protocol: 0x1f_ffff,
        };
        s.command(Command::OptNeg(offer), 100).unwrap();
        s.command(Command::Mail(vec![b"<a@b.example>".to_vec()]), 100)
            .unwrap();
        s.command(
            Command::Header {
                name: b"Subject".to_vec(),
                value: b" hello".to_vec(),
            },
            100,
        )
        .unwrap();
        for _ in 0..10 {
            s.command(Command::Body(vec![b'x'; 50]), 100).unwrap();
        }
        let Step::Scan(req) = s.command(Command::EndOfMessage(vec![]), 100).unwrap() else {
            panic!("no scan at end of message")
        };
        assert!(req.raw.len() <= 102, "{}", req.raw.len());
        assert!(req.raw.starts_with(b"Subject: hello\r\n\r\n"));
        assert_eq!(req.envelope.mail_from.as_deref(), Some("a@b.example"));
        let replies = s.verdict(None, &Policy::default(), 6.0);
        assert!(matches!(&replies[..], [Reply::ReplyCode(t)] if t.starts_with("451 ")));
        assert!(!s.in_message());
        // Too many distinct macro names are not kept.
        for i in 0..1000 {
            let pairs = vec![(format!("{{m{i}}}").into_bytes(), b"v".to_vec())];
            s.command(Command::Macro { stage: b'C', pairs }, 100)
                .unwrap();
        }
        assert!(s.macros.len() <= MAX_MACROS);
    }

    #[test]
    fn buffers_are_reused_without_leftovers_and_big_ones_dropped() {
        let mut s = Session::default();
        let limit = 4 << 20;
        let message = |s: &mut Session, subject: &[u8], body: usize| {
            s.command(Command::Mail(vec![b"<a@b.example>".to_vec()]), limit)
                .unwrap();
            s.command(
                Command::Header {
                    name: b"Subject".to_vec(),
                    value: subject.to_vec(),
                },
                limit,
            )
            .unwrap();
            s.command(Command::Body(vec![b'x'; body]), limit).unwrap();
            let Step::Scan(req) = s.command(Command::EndOfMessage(vec![]), limit).unwrap() else {
                panic!("no scan at end of message")
            };
            s.verdict(None, &Policy::default(), 6.0);
            req
        };
        let first = message(&mut s, b"first", 1000);
        assert_eq!(first.raw.len(), "Subject: first\r\n\r\n".len() + 1000);
        assert!(s.body.capacity() >= 1000, "kept for the next message");
        // The next message gets exactly its own bytes, from the kept buffers.
        let second = message(&mut s, b"2nd", 10);
        assert_eq!(second.raw, b"Subject: 2nd\r\n\r\nxxxxxxxxxx");
        // A body over KEEP_CAPACITY is scanned whole, and its buffer is not kept.
        let big = message(&mut s, b"big", KEEP_CAPACITY + 1);
        assert_eq!(
            big.raw.len(),
            "Subject: big\r\n\r\n".len() + KEEP_CAPACITY + 1
        );
        assert!(s.body.capacity() <= KEEP_CAPACITY, "{}", s.body.capacity());
        assert_eq!(
            message(&mut s, b"after", 3).raw,
            b"Subject: after\r\n\r\nxxx"
        );
    }

    #[test]
    fn queue_id_follows_the_i_macro_across_messages() {
        let mut s = Session::default();
        let i = |id: &str| Command::Macro {
            stage: b'L',
            pairs: vec![(b"i".to_vec(), id.as_bytes().to_vec())],
        };
        let mail = || Command::Mail(vec![b"<a@b.example>".to_vec()]);
        s.command(mail(), 1000).unwrap();
        for _ in 0..3 {
            // Postfix sends `i` before every header; the repeats change nothing.
            s.command(i("AAA111"), 1000).unwrap();
            assert_eq!(s.queue_id(), Some("AAA111"));
        }
        s.command(Command::EndOfMessage(vec![]), 1000).unwrap();
        s.verdict(None, &Policy::default(), 6.0);
        assert_eq!(s.queue_id(), None, "cleared after the verdict");
        // The next message on the connection has its own id ...
        s.command(mail(), 1000).unwrap();
        s.command(i("BBB222"), 1000).unwrap();
        assert_eq!(s.queue_id(), Some("BBB222"));
        s.command(Command::EndOfMessage(vec![]), 1000).unwrap();
        s.verdict(None, &Policy::default(), 6.0);
        // ... and a value equal to the stored macro still sets the cleared id.
        s.command(mail(), 1000).unwrap();
        s.command(i("BBB222"), 1000).unwrap();
        assert_eq!(s.queue_id(), Some("BBB222"));
    }

    #[test]
    fn the_envelope_carries_queue_id_user_and_client_name() {
        let mut s = Session::default();
        s.command(
            Command::Connect {
                hostname: b"mx.sender.example".to_vec(),
                family: b'4',
                port: 25,
                address: b"192.0.2.9".to_vec(),
            },
            1000,
        )
        .unwrap();
        s.command(
            Command::Macro {
                stage: b'M',
                pairs: vec![
                    (b"i".to_vec(), b"4F2A1C".to_vec()),
                    (b"{auth_authen}".to_vec(), b"alice".to_vec()),
                ],
            },
            1000,
        )
        .unwrap();
        s.command(Command::Mail(vec![b"<a@b.example>".to_vec()]), 1000)
            .unwrap();
        let Step::Scan(req) = s.command(Command::EndOfMessage(vec![]), 1000).unwrap() else {
            panic!("no scan at end of message")
        };
        let e = &req.envelope;
        assert_eq!(e.queue_id.as_deref(), Some("4F2A1C"));
        assert_eq!(e.user.as_deref(), Some("alice"));
        assert_eq!(e.hostname.as_deref(), Some("mx.sender.example"));
        assert_eq!(e.client_ip, Some("192.0.2.9".parse().unwrap()));
    }

    /// Postfix's offer: everything.
    const OFFER: OptNeg = OptNeg {
        version: 6,
        actions: 0x1ff,
        protocol: 0x1f_ffff,
    };

    fn verdict(action: Action, score: f64) -> Verdict {
        let mut v = Verdict {
            score,
            action,
            required_score: Some(15.0),
            generation: 3,
            ..Verdict::default()
        };
        v.symbols.insert(
            "SOME_SYMBOL".into(),
            SymbolHit {
                name: "SOME_SYMBOL".into(),
                score,
                description: None,
                options: vec![],
            },
        );
        v
    }

    /// One message through a session as bytes: the MTA's packets in, the filter's packets out,
    /// with `answer` as the verdict at end of message (`None`: no verdict came).
    fn converse(commands: &[Command], answer: Option<&Verdict>, policy: &Policy) -> Vec<Reply> {
        let mut wire = Vec::new();
        for c in commands {
            encode_command(c, &mut wire);
        }
        let mut decoder = Decoder::new(1 << 20);
        decoder.feed(&wire);
        let mut session = Session::default();
        let mut out = Vec::new();
        while let Some(cmd) = decoder.next_command().unwrap() {
            match session.command(cmd, 1 << 20).unwrap() {
                Step::Quiet => {}
                Step::Reply(r) => encode(&r, &mut out),
                Step::Scan(_) => {
                    for r in session.verdict(answer, policy, 6.0) {
                        encode(&r, &mut out);
                    }
                }
                Step::Unscanned => unreachable!("nothing gives a message up here"),
                Step::Close => break,
            }
        }
        let mut replies = ReplyDecoder::new(1 << 20);
        replies.feed(&out);
        let mut all = Vec::new();
        while let Some(r) = replies.next_reply().unwrap() {
            all.push(r);
        }
        replies.finish().unwrap();
        all
    }

    /// A message with a subject and a forged X-Spam-Flag, as Postfix sends it.
    fn message(offer: OptNeg) -> Vec<Command> {
        vec![
            Command::OptNeg(offer),
            Command::Connect {
                hostname: b"mx.sender.example".to_vec(),
                family: b'4',
                port: 25,
                address: b"192.0.2.9".to_vec(),
            },
            Command::Helo(b"mx.sender.example".to_vec()),
            Command::Mail(vec![b"<a@sender.example>".to_vec()]),
            Command::Rcpt(vec![b"<b@rcpt.example>".to_vec()]),
            Command::Data,
            Command::Header {
                name: b"Subject".to_vec(),
                value: b" cheap pills".to_vec(),
            },
            Command::Header {
                name: b"X-Spam-Flag".to_vec(),
                value: b" NO".to_vec(),
            },
            Command::EndOfHeaders,
            Command::Body(b"buy now\r\n".to_vec()),
            Command::EndOfMessage(vec![]),
            Command::Quit,
        ]
    }

    #[test]
    fn negotiated_session_answers_only_at_end_of_message() {
        let replies = converse(
            &message(OFFER),
            Some(&verdict(Action::AddHeader, 7.0)),
            &Policy::default(),
        );
        let Reply::OptNeg(agreed) = &replies[0] else {
            panic!("{replies:?}")
        };
        assert_eq!(agreed.actions, WANT_ACTIONS);
        assert_eq!(agreed.protocol, WANT_PROTOCOL);
        // With every no-reply bit, the next packets are the end-of-message replies: the forged
        // header removed, our three headers added (values with their leading space), accept.
        assert_eq!(
            replies[1],
            Reply::ChangeHeader {
                index: 1,
                name: "X-Spam-Flag".into(),
                value: String::new(),
            }
        );
        let added: Vec<&str> = replies[2..5]
            .iter()
            .map(|r| match r {
                Reply::AddHeader { name, value } => {
                    assert!(value.starts_with(' '), "{value:?}");
                    name.as_str()
                }
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(added, ["X-Spam-Score", "X-Spam-Status", "X-Spam-Symbols"]);
        assert_eq!(replies[5..], [Reply::Accept]);
    }

    #[test]
    fn without_no_reply_bits_every_step_gets_a_continue() {
        let offer = OptNeg {
            protocol: 0,
            ..OFFER
        };
        let replies = converse(&message(offer), None, &Policy::default());
        // Connect, HELO, MAIL, RCPT, DATA, two headers, end of headers, one body chunk.
        let continues = replies.iter().filter(|r| **r == Reply::Continue).count();
        assert_eq!(continues, 9, "{replies:?}");
        // No verdict: the fallback, a tempfail with the configured text.
        assert_eq!(
            replies.last(),
            Some(&Reply::ReplyCode(Policy::default().fallback_reply))
        );
    }

    #[test]
    fn each_action_gets_its_replies_under_the_policy() {
        let p = Policy::default();
        let last = |action, policy: &Policy| {
            converse(&message(OFFER), Some(&verdict(action, 9.0)), policy).split_off(1)
        };
        assert_eq!(
            last(Action::Reject, &p),
            [Reply::ReplyCode(p.reject_reply.clone())]
        );
        for tempfail in [Action::SoftReject, Action::Greylist] {
            assert_eq!(
                last(tempfail, &p),
                [Reply::ReplyCode(p.tempfail_reply.clone())]
            );
        }
        assert_eq!(last(Action::Discard, &p), [Reply::Discard]);
        let quarantine = last(Action::Quarantine, &p);
        assert_eq!(
            quarantine[0],
            Reply::Quarantine("shrike: spam score 9.00".into())
        );
        assert_eq!(quarantine.last(), Some(&Reply::Accept));
        // Discard and quarantine do what the policy says.
        let strict = Policy {
            on_discard: Disposal::Reject,
            on_quarantine: Disposal::Accept,
            add_headers: false,
            ..Policy::default()
        };
        assert_eq!(
            last(Action::Discard, &strict),
            [Reply::ReplyCode(strict.reject_reply.clone())]
        );
        assert_eq!(last(Action::Quarantine, &strict), [Reply::Accept]);
        // Rewrite subject changes the first Subject, keeping its leading space.
        let rewritten = last(Action::RewriteSubject, &strict);
        assert_eq!(
            rewritten,
            [
                Reply::ChangeHeader {
                    index: 1,
                    name: "Subject".into(),
                    value: " ***SPAM*** cheap pills".into(),
                },
                Reply::Accept
            ]
        );
        // Without a verdict: the fallback.
        for (fallback, reply) in [
            (
                Fallback::Tempfail,
                Reply::ReplyCode(p.fallback_reply.clone()),
            ),
            (Fallback::Accept, Reply::Accept),
            (Fallback::Reject, Reply::ReplyCode(p.reject_reply.clone())),
        ] {
            let policy = Policy {
                fallback,
                ..Policy::default()
            };
            assert_eq!(converse(&message(OFFER), None, &policy)[1..], [reply]);
        }
    }

    #[test]
    fn policy_replies_must_be_smtp_codes_of_their_class() {
        assert!(Policy::default().validate().is_ok());
        let bad = Policy {
            tempfail_reply: "550 5.7.1 no".into(),
            ..Policy::default()
        };
        assert_eq!(
            bad.validate().unwrap_err().to_string(),
            "milter.tempfail_reply must be one line starting with a 4xx SMTP code, got \"550 5.7.1 no\""
        );
        let two_lines = Policy {
            reject_reply: "550 a\r\n550 b".into(),
            ..Policy::default()
        };
        assert!(two_lines.validate().is_err());
    }

    #[test]
    fn an_unusable_offer_is_an_error() {
        let mut s = Session::default();
        let old = OptNeg {
            version: 1,
            ..OFFER
        };
        assert_eq!(
            s.command(Command::OptNeg(old), 100).unwrap_err(),
            MilterError::VersionTooOld(1)
        );
    }

    /// A message as an MTA streams it: headers, body chunks, end of message.
    fn message_commands(body_chunks: usize, chunk: usize) -> Vec<Command> {
        let mut cmds = vec![
            Command::Mail(vec![b"<a@b.example>".to_vec()]),
            Command::Rcpt(vec![b"<c@d.example>".to_vec()]),
        ];
        for i in 0..40 {
            cmds.push(Command::Header {
                name: format!("X-Header-{i}").into_bytes(),
                value: vec![b'v'; 300],
            });
        }
        cmds.push(Command::EndOfHeaders);
        for i in 0..body_chunks {
            cmds.push(Command::Body(vec![b'a' + (i % 26) as u8; chunk]));
        }
        cmds.push(Command::EndOfMessage(b"end\r\n".to_vec()));
        cmds
    }

    #[test]
    fn peak_covers_every_allocation_of_a_message() {
        let limit = 1 << 20;
        let mut s = Session::default();
        s.command(Command::OptNeg(OFFER), limit).unwrap();
        // Within the limit, and past it (the rest dropped).
        for chunks in [3, 40] {
            let mut scanned = false;
            for cmd in message_commands(chunks, 65_535) {
                let (before, peak) = (s.held(), s.peak(&cmd, limit));
                assert!(peak >= before);
                let step = s.command(cmd, limit).unwrap();
                assert!(s.held() <= peak, "{} > {peak}", s.held());
                if let Step::Scan(c) = step {
                    assert!(s.held() + c.raw.capacity() <= peak);
                    assert_eq!(c.raw.capacity(), c.raw.len(), "built in one allocation");
                    assert!(c.raw.len() <= limit + 2);
                    scanned = true;
                    s.verdict(Some(&Verdict::default()), &Policy::default(), 6.0);
                }
            }
            assert!(scanned);
            assert!(s.held() <= 2 * KEEP_CAPACITY, "{}", s.held());
        }
    }

    #[test]
    fn a_message_given_up_frees_its_bytes_drops_the_rest_and_gets_the_fallback() {
        let limit = 1 << 20;
        let mut s = Session::default();
        s.command(Command::OptNeg(OFFER), limit).unwrap();
        let cmds = message_commands(10, 65_535);
        let mut steps = Vec::new();
        for (i, cmd) in cmds.into_iter().enumerate() {
            if i == 45 {
                assert!(s.held() > 64 * 1024);
                s.give_up();
                assert!(s.given_up());
                assert_eq!(s.held(), 0, "freed at once");
            }
            let peak = s.peak(&cmd, limit);
            steps.push(s.command(cmd, limit).unwrap());
            if i >= 45 {
                assert_eq!((s.held(), peak), (0, 0), "nothing kept after giving up");
            }
        }
        assert!(matches!(steps.last(), Some(Step::Unscanned)), "{steps:?}");
        assert!(!steps.iter().any(|s| matches!(s, Step::Scan(_))));
        let replies = s.verdict(None, &Policy::default(), 6.0);
        assert!(matches!(&replies[..], [Reply::ReplyCode(t)] if t.starts_with("451 ")));
        // The next message on the connection is collected and scanned as usual.
        assert!(!s.given_up());
        let last = message_commands(2, 1000)
            .into_iter()
            .map(|c| s.command(c, limit).unwrap())
            .last();
        let Some(Step::Scan(c)) = last else {
            panic!("the next message was not scanned: {last:?}")
        };
        assert!(c.raw.ends_with(b"end\r\n"));
    }

    #[test]
    fn an_aborted_large_message_does_not_keep_its_buffers() {
        let limit = 4 << 20;
        let mut s = Session::default();
        s.command(Command::OptNeg(OFFER), limit).unwrap();
        let mut cmds = message_commands(20, 65_535);
        cmds.pop();
        for cmd in cmds {
            s.command(cmd, limit).unwrap();
        }
        assert!(s.held() > 1 << 20);
        s.command(Command::Abort, limit).unwrap();
        assert!(s.held() <= 2 * KEEP_CAPACITY, "{}", s.held());
    }
}
