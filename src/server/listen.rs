//! Listeners shared by the HTTP and milter servers: TCP or unix sockets, one accept loop with
//! a connection limit and a stop signal.
//!
//! Owns: binding (a stale unix socket file is replaced; the new one gets `[access]`'s mode and
//! group, so that an MTA running as another user can reach it), who each peer is, TCP_NODELAY on accepted sockets, the connection permits
//! the shutdown waits for, and what a connection over the limit gets.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;

use super::access::Peer;
use super::ServeError;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

/// Where a server listens, as given on the command line or in the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    Tcp(String),
    Unix(PathBuf),
    Off,
}

impl Listen {
    pub fn parse(s: &str) -> Listen {
        let s = s.trim();
        if s.is_empty() || s == "off" || s == "none" {
            Listen::Off
        } else if let Some(path) = s.strip_prefix("unix:") {
            Listen::Unix(PathBuf::from(path))
        } else {
            Listen::Tcp(s.strip_prefix("inet:").unwrap_or(s).to_owned())
        }
    }
}

/// A bound listener.
pub enum Listener {
    Tcp(tokio::net::TcpListener),
    /// With the user id that owns the socket file: the daemon's own.
    Unix(tokio::net::UnixListener, u32),
}

/// The mode and group of the Unix sockets shrike creates (`[access] unix_socket_mode`, `_group`).
#[derive(Debug, Clone, Copy)]
pub struct SocketPerms {
    pub mode: u32,
    pub group: Option<u32>,
}

/// An accepted connection.
pub enum Stream {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

/// Binds `listen`; `what` names the server in errors.
pub async fn bind(
    listen: &Listen,
    what: &'static str,
    perms: SocketPerms,
) -> Result<Listener, ServeError> {
    Ok(match listen {
        Listen::Tcp(addr) => Listener::Tcp(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(ServeError::io(format!("{what}: cannot listen on {addr}")))?,
        ),
        Listen::Unix(path) => bind_unix(path, what, perms)?,
        Listen::Off => return Err(ServeError::ListenerOff(what)),
    })
}

fn bind_unix(path: &Path, what: &str, perms: SocketPerms) -> Result<Listener, ServeError> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_socket() {
            std::fs::remove_file(path).map_err(ServeError::io(format!(
                "{what}: removing stale socket {}",
                path.display()
            )))?;
        }
    }
    let listener = tokio::net::UnixListener::bind(path).map_err(ServeError::io(format!(
        "{what}: cannot listen on unix:{}",
        path.display()
    )))?;
    if let Some(gid) = perms.group {
        std::os::unix::fs::chown(path, None, Some(gid)).map_err(ServeError::io(format!(
            "{what}: chgrp {gid} {}",
            path.display()
        )))?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(perms.mode))
        .map_err(ServeError::io(format!("{what}: chmod {}", path.display())))?;
    let owner = std::fs::metadata(path)
        .map_err(ServeError::io(format!("{what}: stat {}", path.display())))?
        .uid();
    Ok(Listener::Unix(listener, owner))
}

impl Listener {
    /// The next connection and who is at its other end: a TCP peer's address, or whether a
    /// Unix-socket peer runs as the socket's owner (the daemon's user) or root.
    async fn accept(&self) -> std::io::Result<(Stream, Peer)> {
        match self {
            Listener::Tcp(l) => {
                let (s, peer) = l.accept().await?;
                s.set_nodelay(true)?;
                Ok((Stream::Tcp(s), Peer::Tcp(peer.ip())))
            }
            Listener::Unix(l, owner) => {
                let s = l.accept().await?.0;
                // No credentials (not on Linux): not the same user.
                let same_user = s
                    .peer_cred()
                    .is_ok_and(|c| c.uid() == *owner || c.uid() == 0);
                Ok((Stream::Unix(s), Peer::Unix { same_user }))
            }
        }
    }
}

/// Accepts until `stop` turns true. Each connection takes a permit of `limit` and runs `serve`
/// on its own task, holding the permit until it ends. A connection over the limit gets
/// `refusal` (HTTP: a 503 with Retry-After) and is closed; with no `refusal` (milter: the MTA
/// applies its default action), or while as many refusals as the limit are still lingering,
/// it is closed at once.
pub async fn accept_loop<F, Fut>(
    listener: Listener,
    limit: Arc<Semaphore>,
    mut stop: watch::Receiver<bool>,
    what: &'static str,
    refusal: Option<Bytes>,
    serve: F,
) where
    F: Fn(Stream, Peer) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    // As many connections over the limit may be answered at a time as the limit allows in.
    let refusing = Arc::new(Semaphore::new(limit.available_permits().clamp(16, 4096)));
    let refused_log = LogThrottle::new(LOG_INTERVAL);
    loop {
        let accepted = tokio::select! {
            _ = stop.changed() => break,
            a = listener.accept() => a,
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "{what}: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            if let Some(held) = refused_log.allow() {
                tracing::warn!(
                    ?peer,
                    refused_since_last_line = held,
                    "{what}: connection limit reached; refusing new connections"
                );
            }
            if let (Some(reply), Ok(slot)) = (&refusal, refusing.clone().try_acquire_owned()) {
                tokio::spawn(refuse(stream, reply.clone(), slot));
            }
            continue;
        };
        // `conn` ⊃ `scan` ⊃ `rule`: every line a connection causes says where it came from.
        let span = tracing::info_span!("conn", listener = what, peer = ?peer);
        let task = serve(stream, peer).instrument(span);
        tokio::spawn(hold(permit, task));
    }
}

async fn hold(permit: OwnedSemaphorePermit, task: impl Future<Output = ()>) {
    task.await;
    drop(permit);
}

/// How long an answered connection over the limit is kept to read what its client sends.
const LINGER: Duration = Duration::from_secs(1);
/// At most one warning a connection limit per this interval.
const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Writes `reply` to a connection over the limit and closes it. Closing a socket with unread
/// request bytes makes the kernel send a reset, which can reach the client before it has read
/// the reply, so the connection stops writing and then reads and drops what arrives, until the
/// client closes or `LINGER` passes (nginx's lingering close).
async fn refuse(stream: Stream, reply: Bytes, slot: OwnedSemaphorePermit) {
    let _ = tokio::time::timeout(LINGER, async {
        match stream {
            Stream::Tcp(s) => answer_and_close(s, &reply).await,
            Stream::Unix(s) => answer_and_close(s, &reply).await,
        }
    })
    .await;
    drop(slot);
}

async fn answer_and_close<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    reply: &[u8],
) -> std::io::Result<()> {
    s.write_all(reply).await?;
    s.shutdown().await?;
    let mut sink = [0u8; 4096];
    while s.read(&mut sink).await? > 0 {}
    Ok(())
}

/// Lets an event that can repeat thousands of times a second under overload (a refused
/// connection, a 503) reach the log once per interval, counting the ones held back between.
#[derive(Debug)]
pub struct LogThrottle {
    start: Instant,
    interval_ms: u64,
    /// Milliseconds since `start` from which the next event is logged.
    next_ms: AtomicU64,
    held: AtomicU64,
}

impl LogThrottle {
    pub fn new(interval: Duration) -> LogThrottle {
        LogThrottle {
            start: Instant::now(),
            interval_ms: interval.as_millis().max(1) as u64,
            next_ms: AtomicU64::new(0),
            held: AtomicU64::new(0),
        }
    }

    /// `Some(events held back since the last one logged)` when this one is to be logged.
    pub fn allow(&self) -> Option<u64> {
        let now = self.start.elapsed().as_millis() as u64;
        let next = self.next_ms.load(Relaxed);
        if now >= next
            && self
                .next_ms
                .compare_exchange(next, now + self.interval_ms, Relaxed, Relaxed)
                .is_ok()
        {
            Some(self.held.swap(0, Relaxed))
        } else {
            self.held.fetch_add(1, Relaxed);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throttled_log_lets_one_event_through_per_interval_and_counts_the_rest() {
        let t = LogThrottle::new(Duration::from_millis(200));
        assert_eq!(t.allow(), Some(0), "the first event is logged");
        for _ in 0..1000 {
            assert_eq!(t.allow(), None);
        }
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(
            t.allow(),
            Some(1000),
            "the next line says how many were held back"
        );
        assert_eq!(t.allow(), None);
    }
}
