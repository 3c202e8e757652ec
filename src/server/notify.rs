//! systemd's service notifications (`Type=notify`): READY=1 once the rules and the data
//! directory are loaded and the listeners are up, RELOADING=1 and READY=1 around a SIGHUP
//! reload, STOPPING=1 at the start of shutdown, and WATCHDOG=1 at half of `WatchdogSec` while
//! the daemon can still scan. Outside systemd (no `NOTIFY_SOCKET`) every call does nothing.

use std::time::Duration;

use sd_notify::NotifyState;

fn send(states: &[NotifyState]) {
    // (false: keep NOTIFY_SOCKET, so later notifications still reach systemd)
    if let Err(e) = sd_notify::notify(false, states) {
        tracing::debug!(error = %e, "systemd notification not sent");
    }
}

/// The daemon serves.
pub fn ready(generation: u64) {
    send(&[
        NotifyState::Ready,
        NotifyState::Status(&format!("serving rules generation {generation}")),
    ]);
}

/// A reload started (SIGHUP).
pub fn reloading() {
    send(&[NotifyState::Reloading]);
}

/// Shutdown started.
pub fn stopping() {
    send(&[NotifyState::Stopping]);
}

/// Feeds systemd's watchdog while `WATCHDOG_USEC` asks for it, every half period, from the
/// I/O runtime: a runtime that no longer runs its timers gets the service restarted. (Stuck
/// scan workers are the pool supervisor's to replace.)
pub fn watchdog() {
    let mut usec = 0u64;
    if !sd_notify::watchdog_enabled(false, &mut usec) || usec == 0 {
        return;
    }
    let every = Duration::from_micros(usec / 2).max(Duration::from_millis(100));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            send(&[NotifyState::Watchdog]);
        }
    });
}
