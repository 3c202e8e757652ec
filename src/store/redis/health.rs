//! What the redis store reports: counters for `/metrics` and the word for `/health`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Counters of the redis store (all monotonic except `pending`).
#[derive(Debug, Default)]
pub struct Stats {
    /// Batches sent: one round trip each (a batch's per-node pipelines go out together and are
    /// waited for together).
    pub round_trips: AtomicU64,
    /// Pipelines sent: one per node a batch touches.
    pub pipelines: AtomicU64,
    /// Commands sent in those pipelines.
    pub commands: AtomicU64,
    /// Reads (and scripts) that did not answer within `timeout_ms`.
    pub timeouts: AtomicU64,
    /// Reads answered "unavailable" at once because one had just timed out.
    pub fast_failures: AtomicU64,
    /// Failed batches, replies and connects.
    pub errors: AtomicU64,
    /// Scans that went on without reputation.
    pub unavailable: AtomicU64,
    /// Increments and pairs dropped: the pending buffer was full.
    pub dropped: AtomicU64,
    /// Flushes that wrote something.
    pub flushes: AtomicU64,
    /// Increments and pairs waiting to be flushed (a gauge).
    pub pending: AtomicU64,
    /// Learn events of other daemons applied to the classifier.
    pub learns_applied: AtomicU64,
    /// Prefetches (one per scan).
    pub prefetches: AtomicU64,
    /// Batches of coalesced reads (`coalesce.rs`) and the reads they carried.
    pub read_batches: AtomicU64,
    pub reads: AtomicU64,
    /// Near cache (`near.rs`): keys served from it, keys read from Redis while it is on, the
    /// summed age of what it served (milliseconds), times it was full, and its size (a gauge).
    pub near_hits: AtomicU64,
    pub near_misses: AtomicU64,
    pub near_age_ms: AtomicU64,
    pub near_evictions: AtomicU64,
    pub near_entries: AtomicU64,
}

impl Stats {
    pub fn coalesced(&self, reads: usize) {
        self.read_batches.fetch_add(1, Relaxed);
        self.reads.fetch_add(reads as u64, Relaxed);
    }

    pub fn pipeline(&self, commands: usize) {
        self.pipelines.fetch_add(1, Relaxed);
        self.commands.fetch_add(commands as u64, Relaxed);
    }

    /// `(metric name, help, value, is a gauge)` for the Prometheus text.
    pub fn metrics(&self) -> Vec<(&'static str, &'static str, u64, bool)> {
        vec![
            (
                "shrike_redis_round_trips_total",
                "Batches sent to redis: one round trip each (their node pipelines in parallel).",
                self.round_trips.load(Relaxed),
                false,
            ),
            (
                "shrike_redis_pipelines_total",
                "Pipelines sent to redis nodes (one per node a batch touches).",
                self.pipelines.load(Relaxed),
                false,
            ),
            (
                "shrike_redis_commands_total",
                "Commands sent in those pipelines (pipeline sizes summed).",
                self.commands.load(Relaxed),
                false,
            ),
            (
                "shrike_redis_prefetches_total",
                "Reads of a message's keys before its rules.",
                self.prefetches.load(Relaxed),
                false,
            ),
            (
                "shrike_redis_read_batches_total",
                "Batches of reads (lookups, rate scripts) sent together: the reads waiting while one batch is out leave as the next.",
                self.read_batches.load(Relaxed),
                false,
            ),
            (
                "shrike_redis_reads_total",
                "Reads carried by those batches.",
                self.reads.load(Relaxed),
                false,
            ),
            (
                "shrike_redis_timeouts_total",
                "Redis reads or scripts that did not answer within timeout_ms.",
                self.timeouts.load(Relaxed),
                false,
            ),
            (
                "shrike_redis_fast_failures_total",
                "Reads that failed at once because a read had just timed out (one probe waits at a time).",
                self.fast_failures.load(Relaxed),
                false,
            ),
            (
                "shrike_redis_errors_total",
                "Failed redis batches, replies and connection attempts.",
                self.errors.load(Relaxed),
                false,
            ),
            (
                "shrike_redis_unavailable_scans_total",
                "Scans that went on without reputation (STORE_UNAVAILABLE).",
                self.unavailable.load(Relaxed),
                false,
            ),
            (
                "shrike_redis_dropped_increments_total",
                "Increments dropped because the pending buffer was full.",
                self.dropped.load(Relaxed),
                false,
            ),
            (
                "shrike_redis_flushes_total",
                "Flushes of aggregated increments.",
                self.flushes.load(Relaxed),
                false,
            ),
            (
                "shrike_redis_pending_increments",
                "Aggregated increments waiting for the next flush.",
                self.pending.load(Relaxed),
                true,
            ),
            (
                "shrike_redis_near_cache_hits_total",
                "Keys whose window sums the near cache served (near_cache_ms).",
                self.near_hits.load(Relaxed),
                false,
            ),
            (
                "shrike_redis_near_cache_misses_total",
                "Keys read from redis while the near cache is on.",
                self.near_misses.load(Relaxed),
                false,
            ),
            (
                "shrike_redis_near_cache_served_age_ms_total",
                "Summed age of the sums the near cache served, in ms (divided by its hits: the mean staleness).",
                self.near_age_ms.load(Relaxed),
                false,
            ),
            (
                "shrike_redis_near_cache_full_total",
                "Times the near cache was full and dropped entries.",
                self.near_evictions.load(Relaxed),
                false,
            ),
            (
                "shrike_redis_near_cache_entries",
                "Keys the near cache holds.",
                self.near_entries.load(Relaxed),
                true,
            ),
            (
                "shrike_redis_learns_applied_total",
                "Learns of other daemons applied to the classifier from the shared stream.",
                self.learns_applied.load(Relaxed),
                false,
            ),
        ]
    }
}
