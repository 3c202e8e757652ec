//! The spamd server: SpamAssassin's spamd protocol on a dedicated listener (`[spamd] listen`,
//! off by default), for `spamc` and what speaks like it.
//!
//! Owns: the I/O of a spamd connection: reading one request into the codec's `Decoder`,
//! handing the message to the scan workers as `/checkv2` does (no envelope), writing the reply
//! and closing (spamd serves one request a connection). Also the `[spamd]` options. The wire
//! format is `proto::spamd`'s.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{watch, Semaphore};

use super::access::Role;
use super::budget::{self, Reservation};
use super::listen::{accept_loop, Listener, LogThrottle, Stream};
use super::pool::{PoolError, ScanRequest};
use super::Daemon;
use crate::message::Envelope;
use crate::proto::compress::{unzlib, Inflate};
use crate::proto::rspamd::CheckRequest;
use crate::proto::spamd::{
    error_reply, legacy_reply, pong, rewrite_reply, tell_reply, verdict_reply, Decoder, Exit,
    MessageClass, Method, Protocol, Request, Tell,
};
use crate::store::Counter;

/// Warnings a client can cause at will (malformed requests, checks the pool refused) are
/// logged at most once per this interval each; the metrics count every one.
static BAD_REQUEST_LOG: LazyLock<LogThrottle> =
    LazyLock::new(|| LogThrottle::new(Duration::from_secs(10)));
static NOT_SCANNED_LOG: LazyLock<LogThrottle> =
    LazyLock::new(|| LogThrottle::new(Duration::from_secs(10)));

/// The largest request head (request line and headers) accepted.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// `[spamd]`: the listener and its limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SpamdConfig {
    /// `ADDR:PORT`, `unix:PATH`, or `off`.
    pub listen: String,
    /// Open connections; more are closed at once.
    pub max_connections: usize,
    /// Seconds a client has to send its whole request.
    pub read_timeout_secs: u64,
    /// Largest message accepted (beyond: `SPAMD/1.0 65 Message too big`).
    pub max_body_bytes: usize,
    /// Read spamc's `User` (`spamc -u`) as the authenticated sender, making the message
    /// outbound (`[outbound]`). Off by default: spamd's `User` names the local account a
    /// delivery is scanned for, which anyone on the host may set.
    pub user_is_sender: bool,
}

impl Default for SpamdConfig {
    fn default() -> Self {
        SpamdConfig {
            listen: "off".into(),
            max_connections: 1024,
            read_timeout_secs: 60,
            max_body_bytes: 50 * 1024 * 1024,
            user_is_sender: false,
        }
    }
}

/// Serves spamd connections until `stop` turns true.
pub async fn run(
    listener: Listener,
    daemon: Arc<Daemon>,
    limit: Arc<Semaphore>,
    stop: watch::Receiver<bool>,
) {
    accept_loop(listener, limit, stop, "spamd", None, move |stream, peer| {
        let daemon = daemon.clone();
        let role = daemon.access.network_role(daemon.access.client(peer, None));
        async move {
            let result = match stream {
                Stream::Tcp(s) => connection(s, &daemon, role).await,
                Stream::Unix(s) => connection(s, &daemon, role).await,
            };
            if let Err(e) = result {
                tracing::debug!(error = %e, "spamd connection closed");
            }
        }
    })
    .await;
}

/// Reads one request, answers it and closes. `role`: what `[access]` lets the client do by
/// its address (spamd has no password): TELL (learn) needs `Admin`.
pub(super) async fn connection<S>(mut io: S, daemon: &Daemon, role: Role) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let c = &daemon.config.spamd;
    let mut decoder = Decoder::new(MAX_HEAD_BYTES, c.max_body_bytes);
    // The decoder's buffer: its share of the byte budget, granted before each growth.
    let mut held = daemon.budget.none();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(c.read_timeout_secs.max(1));
    let request = loop {
        match decoder.request() {
            Ok(Some(r)) => break r,
            Ok(None) => {}
            Err(e) => {
                if let Some(held) = BAD_REQUEST_LOG.allow() {
                    tracing::warn!(error = %e, since_last_line = held, "spamd: bad request");
                }
                daemon.metrics.spamd_errors.fetch_add(1, Relaxed);
                return refuse(io, &e.reply()).await;
            }
        }
        let (capacity, next) = (decoder.capacity(), decoder.next_capacity());
        // Both blocks are live while the bytes move to the larger one.
        if next > capacity && held.resize(capacity + next).is_err() {
            let (exit, text) = over_budget(daemon);
            daemon.metrics.spamd_errors.fetch_add(1, Relaxed);
            return refuse(io, &error_reply(exit, &text)).await;
        }
        let buffer = decoder.buffer();
        held.force(buffer.capacity());
        let n = match tokio::time::timeout_at(deadline, io.read_buf(buffer)).await {
            Ok(read) => read?,
            Err(_) => {
                tracing::debug!("spamd: request not complete before the read timeout");
                return Ok(());
            }
        };
        if n == 0 {
            // The client half-closed: a SPAMC/1.0 or 1.1 message ends here.
            match decoder.finish() {
                Ok(Some(r)) => break r,
                Ok(None) => return Ok(()),
                Err(e) => {
                    daemon.metrics.spamd_errors.fetch_add(1, Relaxed);
                    io.write_all(&e.reply()).await?;
                    return io.shutdown().await;
                }
            }
        }
    };
    daemon.metrics.spamd_requests.fetch_add(1, Relaxed);
    if request.protocol == Protocol::Rspamc {
        daemon.metrics.spamd_legacy_requests.fetch_add(1, Relaxed);
    }
    let reply = match answer(request, held, daemon, role).await {
        Ok(reply) => reply,
        Err((exit, text)) => {
            daemon.metrics.spamd_errors.fetch_add(1, Relaxed);
            error_reply(exit, &text)
        }
    };
    io.write_all(&reply).await?;
    io.shutdown().await
}

/// Answers `reply` before the request was read whole, and closes. The client may still be
/// sending its message: it is read and dropped for a moment (a read's worth at a time), so
/// that closing with unread bytes does not reset the reply away.
async fn refuse<S>(mut io: S, reply: &[u8]) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    io.write_all(reply).await?;
    io.shutdown().await?;
    let mut sink = vec![0u8; 16 * 1024];
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while matches!(io.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
    Ok(())
}

/// Counts a request refused over the byte budget; its reply: `EX_TEMPFAIL`, as a full queue's.
fn over_budget(daemon: &Daemon) -> Refusal {
    daemon.budget.refused(budget::Protocol::Spamd);
    (
        Exit::TempFail,
        "Service busy (memory budget full); try again later".into(),
    )
}

/// An error reply's code and text.
type Refusal = (Exit, String);

/// The reply to a whole request; `held` is its body's share of the byte budget.
async fn answer(
    request: Request,
    held: Reservation,
    daemon: &Daemon,
    role: Role,
) -> Result<Vec<u8>, Refusal> {
    let threshold = daemon.config.scan.verdict.add_header;
    let method = request.method;
    match method {
        Method::Ping => return Ok(pong(request.protocol)),
        Method::Skip => return Ok(Vec::new()),
        _ => {}
    }
    let tell = match method {
        Method::Tell if role < Role::Admin => {
            daemon.access.denied.fetch_add(1, Relaxed);
            tracing::warn!("spamd: TELL from a client without the admin role refused");
            return Err((
                Exit::NoPerm,
                "TELL needs a client in access.admin_networks (or the daemon's user on a Unix socket)"
                    .into(),
            ));
        }
        Method::Tell => Some(request.tell().map_err(|e| {
            tracing::warn!(error = %e, "spamd: bad TELL");
            (e.exit(), e.to_string())
        })?),
        _ => None,
    };
    let envelope = match request.protocol {
        // The legacy protocol carries rspamd's envelope headers (Exim sends From, Rcpt, IP,
        // Helo, Hostname, Queue-Id and User).
        Protocol::Rspamc => CheckRequest::from_headers(&request.headers).envelope,
        // spamd's `User` is the local account to scan for, not the authenticated sender,
        // unless the operator says the submission path sets it (`user_is_sender`).
        Protocol::Spamc => Envelope {
            user: request
                .user()
                .filter(|_| daemon.config.spamd.user_is_sender)
                .map(str::to_string),
            ..Envelope::default()
        },
    };
    let (protocol, minor) = (request.protocol, request.minor);
    let coding = request.compression();
    let (message, held) = decompressed(request.body, held, coding, daemon).await?;
    if let Some(tell) = tell {
        return learn(message, held, tell, minor, envelope, daemon).await;
    }
    // PROCESS and HEADERS answer with the message: a copy kept beside the one scanned.
    let rewrite = matches!(method, Method::Process | Method::Headers);
    let original = match rewrite {
        true => {
            let copy_held = daemon
                .budget
                .reserve(message.len())
                .map_err(|_| over_budget(daemon))?;
            Some((message.clone(), copy_held))
        }
        false => None,
    };
    let scan = ScanRequest {
        raw: message,
        held,
        envelope,
        lists: false,
        checks: None,
        keep: Default::default(),
    };
    let answer = daemon
        .recorded("spamd")
        .scan(scan, daemon.scan_timeout())
        .await
        .map_err(|e| {
            daemon.metrics.not_scanned(&e);
            if let Some(held) = NOT_SCANNED_LOG.allow() {
                tracing::warn!(error = %e, since_last_line = held, "spamd: check not scanned");
            }
            (Exit::TempFail, e.to_string())
        })?;
    let verdict = &answer.verdict;
    Ok(match (protocol, original) {
        (Protocol::Rspamc, _) => legacy_reply(verdict, threshold),
        (Protocol::Spamc, Some((original, _held))) => rewrite_reply(
            method == Method::Headers,
            minor,
            verdict,
            threshold,
            &original,
        ),
        (Protocol::Spamc, None) => verdict_reply(method, minor, verdict, threshold),
    })
}

/// The message, decompressed under the body limit (and as far as the byte budget grants) when
/// the client sent `Compress: zlib`; with its share of the budget.
async fn decompressed(
    body: Vec<u8>,
    held: Reservation,
    coding: Option<String>,
    daemon: &Daemon,
) -> Result<(Vec<u8>, Reservation), Refusal> {
    let Some(coding) = coding else {
        return Ok((body, held));
    };
    if coding != "zlib" {
        return Err((
            Exit::Protocol,
            format!("Unsupported Compress: {coding} (zlib only)"),
        ));
    }
    let max = daemon.config.spamd.max_body_bytes;
    let budget = daemon.budget.clone();
    let Some(turn) = budget.inflation_turn(daemon.scan_timeout()).await else {
        daemon.metrics.not_scanned(&PoolError::Timeout);
        return Err((Exit::TempFail, PoolError::Timeout.to_string()));
    };
    // Off the runtime's threads: a large message takes milliseconds to inflate.
    let inflated = tokio::task::spawn_blocking(move || {
        let _turn = turn;
        let mut out = budget.none();
        let result = unzlib(&body, max, &mut |total| out.resize(total).is_ok());
        // The compressed form and its share go back once it is read.
        drop((body, held));
        result.map(|raw| (raw, out))
    })
    .await;
    match inflated {
        Ok(Ok(message)) => Ok(message),
        Ok(Err(Inflate::Refused)) => Err(over_budget(daemon)),
        Ok(Err(e @ Inflate::TooLarge(_))) => {
            tracing::warn!(error = %e, "spamd: compressed message refused");
            Err((Exit::DataErr, "Message too big".into()))
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "spamd: compressed message refused");
            Err((Exit::DataErr, e.to_string()))
        }
        Err(e) => Err((Exit::Software, e.to_string())),
    }
}

/// TELL: `Set` learns the message as its class, as `/learnspam` and `/learnham` do (durable
/// before the reply). `Remove` (forget) is refused: shrike's counters and classifier cannot
/// take a learn back; learning the other class corrects one.
async fn learn(
    message: Vec<u8>,
    held: Reservation,
    tell: Tell,
    minor: u32,
    envelope: Envelope,
    daemon: &Daemon,
) -> Result<Vec<u8>, Refusal> {
    if tell.remove {
        tracing::warn!("spamd: TELL Remove (forget) refused");
        return Err((
            Exit::Unavailable,
            "Forgetting is not supported; learn the message as the other class instead".into(),
        ));
    }
    let counter = match tell.class {
        Some(MessageClass::Ham) => Counter::Rescue,
        _ => Counter::Complaint,
    };
    match daemon
        .learn("spamd", message, held, counter, &envelope)
        .await
    {
        Ok(l) => Ok(tell_reply(minor, !l.duplicate, false)),
        Err(e) => Err((Exit::TempFail, e.to_string())),
    }
}
