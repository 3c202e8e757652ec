//! Listeners shared by the HTTP and milter servers: TCP or unix sockets, one accept loop with
//! a connection limit and a stop signal.
//!
//! Owns: binding (a stale unix socket file is replaced; the new one is open to every local user,
//! as an MTA runs as another user), TCP_NODELAY on accepted sockets, and the connection permits
//! the shutdown waits for.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use anyhow::Context;
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
    Unix(tokio::net::UnixListener),
}

/// An accepted connection.
pub enum Stream {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

/// Binds `listen`; `what` names the server in errors.
pub async fn bind(listen: &Listen, what: &str) -> anyhow::Result<Listener> {
    Ok(match listen {
        Listen::Tcp(addr) => Listener::Tcp(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("{what}: cannot listen on {addr}"))?,
        ),
        Listen::Unix(path) => Listener::Unix(bind_unix(path, what)?),
        Listen::Off => anyhow::bail!("{what}: the listener is off"),
    })
}

fn bind_unix(path: &Path, what: &str) -> anyhow::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_socket() {
            std::fs::remove_file(path)
                .with_context(|| format!("{what}: removing stale socket {}", path.display()))?;
        }
    }
    let listener = tokio::net::UnixListener::bind(path)
        .with_context(|| format!("{what}: cannot listen on unix:{}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
        .with_context(|| format!("{what}: chmod {}", path.display()))?;
    Ok(listener)
}

impl Listener {
    /// The next connection; the peer address for TCP (a unix-socket client is local).
    async fn accept(&self) -> std::io::Result<(Stream, Option<SocketAddr>)> {
        match self {
            Listener::Tcp(l) => {
                let (s, peer) = l.accept().await?;
                s.set_nodelay(true)?;
                Ok((Stream::Tcp(s), Some(peer)))
            }
            Listener::Unix(l) => Ok((Stream::Unix(l.accept().await?.0), None)),
        }
    }
}

/// Accepts until `stop` turns true. Each connection takes a permit of `limit` (over the limit
/// it is closed at once) and runs `serve` on its own task, holding the permit until it ends.
pub async fn accept_loop<F, Fut>(
    listener: Listener,
    limit: Arc<Semaphore>,
    mut stop: watch::Receiver<bool>,
    what: &'static str,
    serve: F,
) where
    F: Fn(Stream, Option<SocketAddr>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
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
            tracing::warn!(
                ?peer,
                "{what}: connection limit reached; closing a new connection"
            );
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
