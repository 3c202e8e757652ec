//! The milter server: Sendmail milter protocol v6 over TCP or a unix socket, for Postfix and
//! Sendmail.
//!
//! Owns: the I/O of a milter connection: reading the socket into the codec's `Decoder`, feeding
//! the decoded commands to a `proto::milter::session::Session`, handing each collected message
//! to the scan workers and the verdict (or its absence, after the scan timeout) back to the
//! session, and writing the replies. Each batch of replies goes out in one write on a
//! TCP_NODELAY socket, so no reply waits for the MTA's delayed ACK. Also the `[milter]` options.
//! What a command means and which replies a verdict earns is the session's (`proto::milter`).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{watch, Semaphore};

use super::budget::Protocol;
use super::listen::{accept_loop, Listener, Stream};
use super::pool::ScanRequest;
use super::Daemon;
use crate::proto::milter::session::{
    AuthHeader, Disposal, Fallback, Policy, PolicyError, Session, Step,
};
use crate::proto::milter::{encode, Command, Decoder, MilterError};

/// `[milter]`: the listener and its limits (here), and what each verdict does to the MTA (the
/// session's [`Policy`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MilterConfig {
    /// `ADDR:PORT`, `inet:ADDR:PORT`, `unix:PATH`, or `off`.
    pub listen: String,
    /// Open MTA connections; more are closed at once (the MTA applies its default action).
    pub max_connections: usize,
    /// Seconds a connection may stay silent before it is closed.
    pub read_timeout_secs: u64,
    /// Largest milter packet accepted; a bigger one closes the connection.
    pub max_packet_bytes: usize,
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

impl Default for MilterConfig {
    fn default() -> Self {
        let policy = Policy::default();
        MilterConfig {
            listen: "127.0.0.1:11332".into(),
            max_connections: 1024,
            read_timeout_secs: 600,
            max_packet_bytes: crate::proto::milter::DEFAULT_MAX_PACKET,
            fallback: policy.fallback,
            on_discard: policy.on_discard,
            on_quarantine: policy.on_quarantine,
            reject_reply: policy.reject_reply,
            tempfail_reply: policy.tempfail_reply,
            fallback_reply: policy.fallback_reply,
            add_headers: policy.add_headers,
            subject_prefix: policy.subject_prefix,
        }
    }
}

/// Why the `[milter]` options cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MilterConfigError {
    #[error(transparent)]
    Reply(#[from] PolicyError),
    #[error("milter.max_packet_bytes must hold a 64 KiB body chunk")]
    PacketLimit,
}

impl MilterConfig {
    /// What the sessions answer for each verdict.
    pub fn policy(&self) -> Policy {
        Policy {
            fallback: self.fallback,
            on_discard: self.on_discard,
            on_quarantine: self.on_quarantine,
            reject_reply: self.reject_reply.clone(),
            tempfail_reply: self.tempfail_reply.clone(),
            fallback_reply: self.fallback_reply.clone(),
            add_headers: self.add_headers,
            subject_prefix: self.subject_prefix.clone(),
        }
    }

    /// Checks values that parse but make no sense.
    pub fn validate(&self) -> Result<(), MilterConfigError> {
        self.policy().validate()?;
        if self.max_packet_bytes < 65_536 + 16 {
            return Err(MilterConfigError::PacketLimit);
        }
        Ok(())
    }
}

/// Why a milter connection was closed other than by the MTA's goodbye.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error("bad packet from the MTA: {0}")]
    Packet(MilterError),
    /// The MTA's option negotiation cannot be met.
    #[error("{0}")]
    Negotiation(MilterError),
    #[error("writing to the MTA: {0}")]
    Write(std::io::Error),
    #[error("reading from the MTA: {0}")]
    Read(std::io::Error),
    #[error("no data from the MTA for {0:?}")]
    Idle(Duration),
}

/// Serves MTA connections until `stop` turns true.
pub async fn run(
    listener: Listener,
    daemon: Arc<Daemon>,
    limit: Arc<Semaphore>,
    stop: watch::Receiver<bool>,
) {
    let stop_each = stop.clone();
    accept_loop(listener, limit, stop, "milter", None, move |stream, _| {
        daemon.metrics.milter_connections.fetch_add(1, Relaxed);
        let (daemon, stop) = (daemon.clone(), stop_each.clone());
        async move {
            let result = match stream {
                Stream::Tcp(s) => connection(s, &daemon, stop).await,
                Stream::Unix(s) => connection(s, &daemon, stop).await,
            };
            if let Err(e) = result {
                daemon.metrics.milter_protocol_errors.fetch_add(1, Relaxed);
                tracing::warn!(error = %e, "milter connection closed");
            }
        }
    })
    .await;
}

/// Whether an I/O error only means the peer closed the connection.
fn went_away(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(e.kind(), ConnectionReset | BrokenPipe | ConnectionAborted)
}

/// Acknowledge what was read at once. With the no-reply bits, Postfix sends a message as a
/// stream of small packets and waits only at end of message; its socket has Nagle on, so the
/// last packet waits for the ACK of the one before, and a delayed ACK (40 ms on Linux) would
/// stall every message: ~20 messages/s per connection. Linux clears quick-ACK mode on its own,
/// so it is set again after every read.
pub trait AckNow {
    fn ack_now(&self) {}
}

impl AckNow for tokio::net::TcpStream {
    fn ack_now(&self) {
        let _ = self.set_quickack(true);
    }
}

impl AckNow for tokio::net::UnixStream {}

/// Serves one MTA connection. Errors are protocol or I/O errors that closed it.
async fn connection<S>(
    mut io: S,
    daemon: &Daemon,
    mut stop: watch::Receiver<bool>,
) -> Result<(), ConnectionError>
where
    S: AsyncRead + AsyncWrite + Unpin + AckNow,
{
    let config = &daemon.config.milter;
    let limit = daemon.scanner.limits().max_message_bytes;
    let idle = Duration::from_secs(config.read_timeout_secs.max(1));
    let mut decoder = Decoder::new(config.max_packet_bytes);
    let policy = config.policy();
    // Our Authentication-Results (and the removal of forged ones), when configured.
    let authserv_id = (daemon.config.auth.milter_header).then(|| daemon.config.auth.authserv_id());
    let mut session = Session::default();
    // The session's message buffers' share of the byte budget, granted before each growth.
    let mut held = daemon.budget.none();
    let mut out = Vec::with_capacity(512);
    let mut buf = vec![0u8; 64 * 1024];
    let mut stopping = *stop.borrow();
    io.ack_now();
    loop {
        loop {
            let cmd = match decoder.next_command() {
                Ok(Some(cmd)) => cmd,
                Ok(None) => break,
                Err(e) => return Err(ConnectionError::Packet(e)),
            };
            let end_of_headers = matches!(cmd, Command::EndOfHeaders);
            let peak = session.peak(&cmd, limit);
            if peak > held.bytes() && held.resize(peak).is_err() {
                // No memory for this message: the rest of it is read and dropped, and its end
                // gets the fallback, as a full queue would.
                daemon.budget.refused(Protocol::Milter);
                session.give_up();
            }
            let step = session
                .command(cmd, limit)
                .map_err(ConnectionError::Negotiation)?;
            // What the buffers hold now, and the message handed over at its end.
            let message = match &step {
                Step::Scan(collected) => collected.raw.capacity(),
                _ => 0,
            };
            held.force(session.held() + message);
            if end_of_headers && !session.given_up() {
                // The lookups start now and run while the body arrives.
                if let Some(checker) = daemon.pool.checker() {
                    checker.prefetch(session.head(), &session.envelope());
                }
            }
            match step {
                Step::Quiet => {}
                Step::Reply(r) => encode(&r, &mut out),
                Step::Close => {
                    if !out.is_empty() {
                        let _ = io.write_all(&out).await;
                    }
                    return Ok(());
                }
                Step::Unscanned => {
                    daemon.metrics.milter_messages.fetch_add(1, Relaxed);
                    daemon.metrics.milter_fallbacks.fetch_add(1, Relaxed);
                    for r in session.verdict(None, &policy, daemon.config.scan.verdict.add_header) {
                        encode(&r, &mut out);
                    }
                }
                Step::Scan(collected) => {
                    let queue_id = session.queue_id().map(str::to_owned);
                    let sender = (
                        collected.envelope.mail_from.clone().unwrap_or_default(),
                        collected.envelope.helo.clone().unwrap_or_default(),
                    );
                    // The milter needs no URL or address lists (those are for rspamd's reply).
                    let request = ScanRequest {
                        held: held.split(message),
                        raw: collected.raw,
                        envelope: collected.envelope,
                        lists: false,
                        checks: None,
                        keep: Default::default(),
                    };
                    let result = daemon
                        .recorded("milter")
                        .scan(request, daemon.scan_timeout())
                        .await;
                    daemon.metrics.milter_messages.fetch_add(1, Relaxed);
                    match &result {
                        Ok(a) => tracing::debug!(
                            queue_id,
                            action = a.verdict.action.as_str(),
                            score = a.verdict.score,
                            "milter verdict"
                        ),
                        Err(e) => {
                            daemon.metrics.not_scanned(e);
                            daemon.metrics.milter_fallbacks.fetch_add(1, Relaxed);
                            tracing::warn!(
                                queue_id,
                                error = %e,
                                fallback = ?config.fallback,
                                "no verdict; answering with the fallback"
                            );
                        }
                    }
                    if let Some(authserv_id) = &authserv_id {
                        let value = (result.as_ref().ok())
                            .and_then(|a| a.checks.as_deref())
                            .filter(|c| c.ran)
                            .map(|c| {
                                crate::auth::authentication_results(
                                    authserv_id,
                                    &c.auth,
                                    &sender.0,
                                    &sender.1,
                                )
                            });
                        session.set_authentication_results(AuthHeader {
                            authserv_id: authserv_id.clone(),
                            value,
                        });
                    }
                    let verdict = result.as_ref().ok().map(|a| &a.verdict);
                    for r in
                        session.verdict(verdict, &policy, daemon.config.scan.verdict.add_header)
                    {
                        encode(&r, &mut out);
                    }
                }
            }
        }
        if !out.is_empty() {
            match io.write_all(&out).await {
                Ok(()) => {}
                Err(e) if went_away(&e) => return Ok(()),
                Err(e) => return Err(ConnectionError::Write(e)),
            }
            out.clear();
        }
        if stopping && !session.in_message() {
            return Ok(());
        }
        let n = tokio::select! {
            read = tokio::time::timeout(idle, io.read(&mut buf)) => match read {
                Ok(Ok(n)) => n,
                // A reset is the MTA going away (with our reply unread), not a protocol error.
                Ok(Err(e)) if went_away(&e) => return Ok(()),
                Ok(Err(e)) => return Err(ConnectionError::Read(e)),
                Err(_) => return Err(ConnectionError::Idle(idle)),
            },
            _ = stop.changed(), if !stopping => {
                stopping = true;
                continue;
            }
        };
        io.ack_now();
        if n == 0 {
            // The MTA went away; whatever it sent of a message is dropped with the session.
            return Ok(());
        }
        decoder.feed(&buf[..n]);
    }
}
