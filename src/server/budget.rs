//! The byte budget: one bound, shared by every listener, on the message bytes the daemon holds
//! at once — raw bodies being read, compressed bodies and what they inflate to (with the
//! decoder's window), milter messages being collected, scan requests in the queue, and jobs in
//! the workers (their body and an estimate of their analysis).
//!
//! Owns: the budget (`[server] inflight_bytes`, its default from the machine's memory), the
//! [`Reservation`] a request holds (returned when dropped, whatever path the request took:
//! answered, refused, timed out, its client gone), growing a buffer only after its growth was
//! granted ([`grow`]), the refusals' counters and their rate-limited warning, and the
//! `shrike_budget_*` lines of `/metrics`. Never touches: sockets, wire formats.
//!
//! A count-bounded queue bounds how many messages wait, not how many bytes: a few kilobytes of
//! zstd can ask for 50 MB each. Every allocation that grows with what a client sends is granted
//! here first; beyond the budget new work is refused (HTTP 503, spamd `EX_TEMPFAIL`, the milter
//! fallback), never queued, so a refusal costs nothing and the memory held stays within the
//! budget plus a margin that does not depend on the clients.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::listen::LogThrottle;
use super::metrics::{counter_header, gauge};

/// The listener a refusal is counted under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http,
    Spamd,
    Milter,
}

impl Protocol {
    const ALL: [Protocol; 3] = [Protocol::Http, Protocol::Spamd, Protocol::Milter];

    fn name(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Spamd => "spamd",
            Protocol::Milter => "milter",
        }
    }
}

/// What a scan job is charged on top of its body while a worker holds it: parsing, decoded
/// parts, HTML turned into text. Measured with `shrike scan` (peak RSS over the process's
/// baseline) on 50 MB messages: one byte repeated costs nothing more, 50 MB of words in HTML
/// 2.6 times the body, a 37 MB base64 attachment 3.6 times; the charge is an estimate, counted
/// so that new bodies wait while the workers chew large ones.
pub const ANALYSIS_FACTOR: usize = 3;

/// The shared budget.
#[derive(Debug)]
pub struct Budget {
    limit: usize,
    used: AtomicUsize,
    refused: [AtomicU64; Protocol::ALL.len()],
    log: LogThrottle,
    /// Decompressions running at once.
    inflating: Arc<Semaphore>,
}

/// Message bytes granted to one request; given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<Budget>,
    bytes: usize,
}

/// Growth the budget did not grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the message bytes in flight fill the memory budget")]
pub struct OverBudget;

impl Budget {
    /// A budget of `limit` bytes, with `inflations` decompressions at most at once.
    pub fn new(limit: usize, inflations: usize) -> Arc<Budget> {
        Arc::new(Budget {
            limit: limit.max(1),
            used: AtomicUsize::new(0),
            refused: Default::default(),
            log: LogThrottle::new(Duration::from_secs(10)),
            inflating: Arc::new(Semaphore::new(inflations.max(1))),
        })
    }

    /// Waits for a turn to decompress a body (on a blocking thread, the permit moved there).
    /// Decompression is CPU work: more at once than cores only share them. And each thread
    /// keeps the memory it freed in its allocator heap until it allocates again: 300 bombs
    /// inflated on 300 blocking threads at once left the outputs of the refused ones resident,
    /// 2 GiB over a 2 GiB budget, where a few threads taking turns reuse what they freed.
    /// `None` after `wait`: a client is not kept in line for ever behind a flood of bombs.
    pub async fn inflation_turn(&self, wait: Duration) -> Option<OwnedSemaphorePermit> {
        tokio::time::timeout(wait, self.inflating.clone().acquire_owned())
            .await
            .ok()?
            .ok()
    }

    /// The bound, in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes granted now (above the limit only while workers hold forced charges).
    pub fn used(&self) -> usize {
        self.used.load(Relaxed)
    }

    /// A reservation of nothing, to grow as a body arrives.
    pub fn none(self: &Arc<Self>) -> Reservation {
        Reservation {
            budget: self.clone(),
            bytes: 0,
        }
    }

    /// `bytes` more, if they fit.
    pub fn reserve(self: &Arc<Self>, bytes: usize) -> Result<Reservation, OverBudget> {
        let mut r = self.none();
        r.resize(bytes)?;
        Ok(r)
    }

    /// Takes `more` bytes if the total stays within the limit.
    fn take(&self, more: usize) -> Result<(), OverBudget> {
        let mut used = self.used.load(Relaxed);
        loop {
            let after = used.checked_add(more).ok_or(OverBudget)?;
            if after > self.limit {
                return Err(OverBudget);
            }
            match self
                .used
                .compare_exchange_weak(used, after, Relaxed, Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(now) => used = now,
            }
        }
    }

    /// Counts a request refused over the budget and logs it, at most once per 10 s: an
    /// overload refuses thousands a second.
    pub fn refused(&self, protocol: Protocol) {
        self.refused[protocol as usize].fetch_add(1, Relaxed);
        if let Some(held) = self.log.allow() {
            tracing::warn!(
                protocol = protocol.name(),
                in_flight = self.used(),
                budget = self.limit,
                refused_since_last_line = held,
                "message refused: the message bytes in flight fill the memory budget \
                 (server.inflight_bytes)"
            );
        }
    }

    /// Refusals so far under `protocol`.
    pub fn refusals(&self, protocol: Protocol) -> u64 {
        self.refused[protocol as usize].load(Relaxed)
    }

    /// The `shrike_budget_*` lines of `/metrics`.
    pub fn render(&self, out: &mut String) {
        gauge(
            out,
            "shrike_budget_bytes",
            "Bound on the message bytes held at once (server.inflight_bytes).",
            self.limit,
        );
        gauge(
            out,
            "shrike_budget_inflight_bytes",
            "Message bytes held now: bodies being read or inflated, queued, in the workers.",
            self.used(),
        );
        counter_header(
            out,
            "shrike_budget_refused_total",
            "Requests refused because the message bytes in flight filled the budget.",
        );
        for p in Protocol::ALL {
            let _ = writeln!(
                out,
                "shrike_budget_refused_total{{protocol=\"{}\"}} {}",
                p.name(),
                self.refusals(p)
            );
        }
    }
}

impl Reservation {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Holds `total` bytes from now on: less always succeeds, more only if the budget has it
    /// (on refusal the reservation is as it was).
    pub fn resize(&mut self, total: usize) -> Result<(), OverBudget> {
        if total > self.bytes {
            self.budget.take(total - self.bytes)?;
        } else {
            self.budget.used.fetch_sub(self.bytes - total, Relaxed);
        }
        self.bytes = total;
        Ok(())
    }

    /// Holds `total` bytes even past the limit: for work already admitted that must not fail
    /// half-way (a scan job's analysis). New requests are refused until the total is back
    /// under the limit.
    pub fn force(&mut self, total: usize) {
        if total > self.bytes {
            self.budget.used.fetch_add(total - self.bytes, Relaxed);
        } else {
            self.budget.used.fetch_sub(self.bytes - total, Relaxed);
        }
        self.bytes = total;
    }

    /// Moves `bytes` of this reservation (at most all of it) into a new one, for a buffer that
    /// goes its own way (a milter message handed to the workers).
    pub fn split(&mut self, bytes: usize) -> Reservation {
        let bytes = bytes.min(self.bytes);
        self.bytes -= bytes;
        Reservation {
            budget: self.budget.clone(),
            bytes,
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.used.fetch_sub(self.bytes, Relaxed);
        }
    }
}

/// Makes room in `buf` for `more` bytes, the growth granted by `held` first. `held` covers
/// `buf`'s capacity: a growth doubles it (at most up to `cap`, and at least to what is
/// needed), and while the allocator moves the bytes both the old and the new block are live,
/// so both are charged for that moment. Refused: `buf` and `held` are as they were.
pub fn grow(
    buf: &mut Vec<u8>,
    held: &mut Reservation,
    more: usize,
    cap: usize,
) -> Result<(), OverBudget> {
    let need = buf.len().saturating_add(more);
    let old = buf.capacity();
    if need <= old {
        return Ok(());
    }
    let new = old.saturating_mul(2).min(cap).max(need);
    let others = held.bytes().saturating_sub(old);
    held.resize(others.saturating_add(old).saturating_add(new))?;
    buf.reserve_exact(new - buf.len());
    // The old block is gone: hold the new one (a `Vec` has the capacity it asked for).
    held.force(others.saturating_add(buf.capacity()));
    Ok(())
}

/// The default budget when `server.inflight_bytes` is 0: an eighth of the memory this process
/// may use (the machine's, or its cgroup's limit when lower), between 256 MiB and 2 GiB, and
/// at least two messages of the largest size a listener accepts (`largest`). The rest of the
/// memory is for what the budget does not count: the reputation store (up to `store.max_keys`),
/// the classifier's table, the Lua states, and the MTA or web server sharing the machine.
/// Above 2 GiB more bodies in flight buy nothing: the workers scan a few messages at a time,
/// and the others only wait.
pub fn default_limit(largest: usize) -> usize {
    const MIN: usize = 256 << 20;
    const MAX: usize = 2 << 30;
    let memory = memory_bytes().unwrap_or(2 << 30);
    let eighth = usize::try_from(memory / 8).unwrap_or(MAX);
    eighth.clamp(MIN, MAX).max(largest.saturating_mul(2))
}

/// The memory this process may use: the machine's (`/proc/meminfo`), or the cgroup's limit
/// when lower (a container's).
fn memory_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let total = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())?
        .saturating_mul(1024);
    let cgroup = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .filter_map(|p| std::fs::read_to_string(p).ok())
    .filter_map(|v| v.trim().parse::<u64>().ok())
    .min();
    Some(cgroup.map_or(total, |c| c.min(total)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_are_granted_within_the_limit_and_given_back_on_drop() {
        let b = Budget::new(1000, 1);
        let mut a = b.reserve(600).unwrap();
        assert_eq!(b.used(), 600);
        assert_eq!(b.reserve(401).unwrap_err(), OverBudget);
        assert_eq!(b.used(), 600, "a refusal takes nothing");
        let c = b.reserve(400).unwrap();
        assert_eq!(b.used(), 1000);
        assert!(a.resize(601).is_err());
        assert_eq!(a.bytes(), 600, "unchanged by a refused growth");
        a.resize(100).unwrap();
        assert_eq!(b.used(), 500);
        let d = a.split(60);
        assert_eq!((a.bytes(), d.bytes(), b.used()), (40, 60, 500));
        drop(c);
        drop(d);
        assert_eq!(b.used(), 40);
        drop(a);
        assert_eq!(b.used(), 0);
        assert!(b.reserve(usize::MAX).is_err(), "no overflow");
    }

    #[test]
    fn a_forced_charge_passes_the_limit_and_blocks_new_work_until_it_is_given_back() {
        let b = Budget::new(1000, 1);
        let mut job = b.reserve(400).unwrap();
        job.force(1600);
        assert_eq!(b.used(), 1600);
        assert!(b.reserve(1).is_err());
        assert_eq!(b.none().bytes(), 0, "an empty reservation costs nothing");
        drop(job);
        assert_eq!(b.used(), 0);
        assert!(b.reserve(1000).is_ok());
    }

    #[test]
    fn growth_is_charged_before_it_is_allocated_with_the_old_block_during_the_move() {
        let b = Budget::new(1 << 20, 1);
        let mut held = b.none();
        let mut buf = Vec::new();
        grow(&mut buf, &mut held, 1000, 1 << 20).unwrap();
        assert!(buf.capacity() >= 1000);
        assert_eq!(held.bytes(), buf.capacity());
        buf.extend_from_slice(&[1; 1000]);
        grow(&mut buf, &mut held, 10, 1 << 20).unwrap();
        assert_eq!(buf.capacity(), 2000, "doubled");
        assert_eq!(b.used(), 2000);
        // Doubling to 4000 needs 2000 + 4000 for the moment of the move: with 5000 left of a
        // 6000 budget (1000 held elsewhere) it is refused, and nothing changed.
        let small = Budget::new(6000, 1);
        let _other = small.reserve(1000).unwrap();
        let mut held = small.reserve(2000).unwrap();
        let mut buf = vec![0u8; 2000];
        buf.shrink_to_fit();
        assert_eq!(grow(&mut buf, &mut held, 1, 1 << 20), Err(OverBudget));
        assert_eq!(
            (buf.capacity(), held.bytes(), small.used()),
            (2000, 2000, 3000)
        );
        // Within the cap, the growth asks only for what is needed past it.
        grow(&mut buf, &mut held, 1, 2001).unwrap();
        assert_eq!((buf.capacity(), small.used()), (2001, 3001));
    }

    #[test]
    fn the_default_is_sized_for_the_machine_and_holds_two_of_the_largest_messages() {
        let d = default_limit(50 << 20);
        assert!((256 << 20..=2 << 30).contains(&d), "{d}");
        assert_eq!(default_limit(2 << 30), 4 << 30);
    }
}
