//! The daemon's operations, whatever protocol asks for them: learn, reload, reputation. HTTP,
//! spamd's `TELL` and the web UI only decode a request, call one of these, and encode its typed
//! result; so the same learn gets the same outcome, history record and metrics on each.
//! Who may call them is `access`'s; scanning goes through `record` (`Daemon::recorded`).

use std::time::Instant;

use super::budget::Reservation;
use super::pool::{LearnReply, PoolError};
use super::Daemon;
use crate::message::Envelope;
use crate::shingle::{self, Kind};
use crate::store::{Counter, StoreKey, COUNTERS};

/// A learn that was taken: trained, counted, durable and recorded.
#[derive(Debug, Clone)]
pub struct Learned {
    pub counter: Counter,
    /// Store keys that got the complaint or rescue.
    pub keys: usize,
    pub message_id: Option<String>,
    /// Whether the classifier trained on it.
    pub trained: bool,
    /// The classifier had already learned this message as this class (Message-ID, else
    /// body): not trained again, no complaint or rescue; counted apart
    /// (`shrike_learns_total{duplicate="true"}`) and marked in its history record.
    pub duplicate: bool,
}

impl Learned {
    /// `spam` or `ham`.
    pub fn class(&self) -> &'static str {
        if self.counter == Counter::Rescue {
            "ham"
        } else {
            "spam"
        }
    }
}

/// Why a learn was not taken. Nothing of it is acknowledged, recorded in the history or
/// counted as learned; each is counted in `shrike_learns_refused_total{reason}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LearnError {
    #[error("{0}")]
    Pool(PoolError),
    /// The shared store refused it (Redis down): nothing was learned.
    #[error("the reputation store is unavailable: {0}")]
    StoreUnavailable(String),
    /// Learned, but not written where a restart finds it (a full or failing data directory).
    #[error("{0}")]
    NotDurable(String),
}

impl LearnError {
    /// The `reason` label of `shrike_learns_refused_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            LearnError::Pool(PoolError::Busy) => "busy",
            LearnError::Pool(PoolError::Timeout) => "timeout",
            LearnError::Pool(PoolError::Stopped) => "stopping",
            LearnError::StoreUnavailable(_) => "store",
            LearnError::NotDurable(_) => "durability",
        }
    }
}

/// The reasons of [`LearnError::reason`], in the order `Metrics::learns_refused` counts them.
pub const LEARN_REFUSALS: [&str; 5] = ["busy", "timeout", "stopping", "store", "durability"];

/// Why an acknowledged learn might not survive a restart.
#[derive(Debug, thiserror::Error)]
enum NotDurable {
    #[error("learn not written to the classifier's journal: {0}")]
    Journal(String),
    #[error("learn not written to the WAL: {0}")]
    Wal(String),
}

impl Daemon {
    /// Learns `raw` as spam (`Counter::Complaint`) or ham (`Counter::Rescue`) for `listener`
    /// (`http`, `spamd`, `ui`): through a scan worker, refused as a whole when the shared
    /// store does not take it, acknowledged only once its classifier training is in the
    /// journal and its increments in the WAL; then counted and recorded in the history.
    pub async fn learn(
        &self,
        listener: &'static str,
        raw: Vec<u8>,
        held: Reservation,
        counter: Counter,
        envelope: &Envelope,
    ) -> Result<Learned, LearnError> {
        let start = Instant::now();
        let size = raw.len();
        let result = self.learn_durably(raw, held, counter).await;
        match &result {
            Ok(reply) => {
                self.metrics
                    .learned(counter == Counter::Rescue, reply.duplicate);
                self.record_learn(listener, counter, envelope, size, reply, start);
            }
            Err(e) => {
                self.metrics.learn_refused(e.reason());
                match e {
                    // The data directory's health logs its failures, at most once per 10 s; a
                    // full disk would otherwise log every learn.
                    LearnError::NotDurable(_) => {
                        tracing::debug!(listener, error = %e, "learn not made durable")
                    }
                    _ => tracing::warn!(listener, error = %e, "learn refused"),
                }
            }
        }
        result.map(|l| Learned {
            counter,
            keys: l.keys,
            message_id: l.message_id,
            trained: l.trained,
            duplicate: l.duplicate,
        })
    }

    async fn learn_durably(
        &self,
        raw: Vec<u8>,
        held: Reservation,
        counter: Counter,
    ) -> Result<LearnReply, LearnError> {
        let l = self
            .pool
            .learn(raw, held, counter, self.scan_timeout())
            .await
            .map_err(|e| {
                self.metrics.not_scanned(&e);
                LearnError::Pool(e)
            })?;
        if let Some(e) = &l.store_error {
            return Err(LearnError::StoreUnavailable(e.clone()));
        }
        self.durable(&l)
            .await
            .map_err(|e| LearnError::NotDurable(e.to_string()))?;
        Ok(l)
    }

    /// A learn is a user's explicit feedback: before it is acknowledged, its classifier
    /// training must be in the journal (the worker wrote it) and its increments in the WAL
    /// (written here, off the I/O threads).
    async fn durable(&self, l: &LearnReply) -> Result<(), NotDurable> {
        if let Some(e) = &l.journal_error {
            return Err(NotDurable::Journal(e.clone()));
        }
        let committer = self.committer.clone();
        match tokio::task::spawn_blocking(move || committer.commit()).await {
            Ok(result) => result.map_err(|e| NotDurable::Wal(e.to_string())),
            Err(e) => Err(NotDurable::Wal(e.to_string())),
        }
    }

    /// Rebuilds the rules off the I/O threads (`POST /reload`): the new generation, or why the
    /// previous one keeps serving.
    pub async fn reload_async(self: &std::sync::Arc<Self>) -> Result<u64, String> {
        let d = self.clone();
        match tokio::task::spawn_blocking(move || d.reload()).await {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// One entity's reputation (`?type=T&value=V`, or `&hash=H`, a key's 16 hex digits as
    /// `shrike scan` prints its shingles): its window sums and buckets. `Err`: what is wrong
    /// with the query.
    pub fn reputation(&self, query: &str) -> Result<serde_json::Value, String> {
        let mut kind = None;
        let mut value = None;
        let mut hash = None;
        for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
            match k.as_ref() {
                "type" => kind = Some(v.into_owned()),
                "value" => value = Some(v.into_owned()),
                "hash" => hash = Some(v.into_owned()),
                _ => {}
            }
        }
        let hash = match hash.map(|h| u64::from_str_radix(h.trim(), 16)) {
            None => None,
            Some(Ok(h)) => Some(h),
            Some(Err(_)) => return Err("hash must be 16 hex digits".into()),
        };
        let (Some(kind_arg), Some(value)) = (kind, value.or(hash.map(|h| format!("{h:016x}"))))
        else {
            return Err("need ?type=T&value=V or ?type=T&hash=H".into());
        };
        let kind =
            Kind::parse(&kind_arg).ok_or_else(|| format!("unknown shingle type {kind_arg:?}"))?;
        let hashes = match hash {
            Some(h) => vec![h],
            None => shingle::of_value(kind, &value),
        };
        if hashes.is_empty() {
            return Err(format!("{value:?} is not a valid {} value", kind.name()));
        }
        let namespace = self.config.scan.traffic.namespace;
        let windows: Vec<String> = self
            .store
            .windows_secs()
            .iter()
            .map(|&s| crate::engine::view::window_name(s))
            .collect();
        let resolutions = self.store.layout().resolutions();
        let counts = |c: &[u64; COUNTERS]| -> serde_json::Value {
            Counter::ALL
                .iter()
                .map(|k| (k.name().to_string(), serde_json::json!(c[*k as usize])))
                .collect::<serde_json::Map<_, _>>()
                .into()
        };
        let keys: Vec<serde_json::Value> = hashes
            .iter()
            .map(|&hash| {
                let key = StoreKey {
                    namespace,
                    kind: kind.id(),
                    hash,
                };
                let timeline = self.scanner.store().timeline(&key);
                let (window_sums, buckets) = match &timeline {
                    Some(t) => (
                        windows
                            .iter()
                            .zip(&t.windows.windows)
                            .map(|(name, c)| (name.clone(), counts(c)))
                            .collect::<serde_json::Map<_, _>>(),
                        t.buckets
                            .iter()
                            .map(|(res, start, c)| {
                                let mut b = counts(c);
                                b["start"] = serde_json::json!(start);
                                b["seconds"] = serde_json::json!(resolutions
                                    .get(*res)
                                    .map_or(0, |r| r.bucket_secs));
                                b
                            })
                            .collect::<Vec<_>>(),
                    ),
                    None => (
                        windows
                            .iter()
                            .map(|name| (name.clone(), counts(&[0; COUNTERS])))
                            .collect(),
                        Vec::new(),
                    ),
                };
                serde_json::json!({
                    "hash": format!("{hash:016x}"),
                    "known": timeline.is_some(),
                    "windows": window_sums,
                    "buckets": buckets,
                })
            })
            .collect();
        Ok(serde_json::json!({
            "type": kind.name(),
            "id": kind.id(),
            "value": value,
            "namespace": namespace,
            "now": self.store.now(),
            "keys": keys,
        }))
    }
}

/// Why a quarantine operation was not done.
#[derive(Debug, thiserror::Error)]
pub enum QuarantineOpError {
    #[error("the quarantine is off ([quarantine] enabled)")]
    Off,
    #[error("no such quarantined message")]
    NotFound,
    #[error("{0}")]
    Bad(String),
    #[error("already released (at {0}); add force=1 to release it again")]
    AlreadyReleased(String),
    #[error("a release of this message is under way")]
    Busy,
    #[error("{0}")]
    Body(#[from] crate::quarantine::store::BodyError),
    #[error("{0}")]
    Release(#[from] crate::quarantine::release::ReleaseError),
    #[error("{0}")]
    Learn(LearnError),
    #[error("the quarantine could not be read or written: {0}")]
    Io(String),
}

impl From<std::io::Error> for QuarantineOpError {
    fn from(e: std::io::Error) -> Self {
        QuarantineOpError::Io(e.to_string())
    }
}

/// What a release did.
#[derive(Debug, Clone)]
pub struct ReleasedTo {
    pub rcpt: Vec<String>,
    /// The relay's final reply.
    pub reply: String,
}

type QuarantineEntry = (crate::quarantine::Meta, crate::quarantine::store::Segment);

impl Daemon {
    fn quarantine_store(&self) -> Result<crate::quarantine::store::Store, QuarantineOpError> {
        self.quarantine
            .store()
            .cloned()
            .ok_or(QuarantineOpError::Off)
    }

    /// Runs `f` on the quarantine's store off the I/O threads.
    async fn on_store<T: Send + 'static>(
        &self,
        f: impl FnOnce(&crate::quarantine::store::Store) -> Result<T, QuarantineOpError>
            + Send
            + 'static,
    ) -> Result<T, QuarantineOpError> {
        let store = self.quarantine_store()?;
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| QuarantineOpError::Io(e.to_string()))?
    }

    /// The entry `id` (not deleted) and its bytes.
    async fn quarantined(
        &self,
        id: &str,
    ) -> Result<
        (
            QuarantineEntry,
            crate::quarantine::store::EntryState,
            Vec<u8>,
        ),
        QuarantineOpError,
    > {
        let id = id.to_string();
        self.on_store(move |store| {
            let state = store.state(&id)?;
            let Some((meta, seg)) = store.find(&id)?.filter(|_| !state.deleted) else {
                return Err(QuarantineOpError::NotFound);
            };
            let raw = store.body(&meta, &seg)?;
            Ok(((meta, seg), state, raw))
        })
        .await
    }

    /// `GET /quarantine?…`: a page of kept messages, newest first, with the query's filters
    /// (`rcpt`, `sender`, `symbol`, `since`, `until`, `limit`, `cursor`).
    pub async fn quarantine_list(
        &self,
        query: &str,
    ) -> Result<serde_json::Value, QuarantineOpError> {
        let pairs: Vec<(String, String)> = url::form_urlencoded::parse(query.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        let q = crate::quarantine::store::Query::parse(
            pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            crate::history::now_us(),
        )
        .map_err(QuarantineOpError::Bad)?;
        self.on_store(move |store| Ok(store.list(&q)?.to_json()))
            .await
    }

    /// The entries of one recipient (a per-recipient link's page), newest first.
    pub async fn quarantine_of(
        &self,
        rcpt: &str,
    ) -> Result<
        Vec<(
            crate::quarantine::Meta,
            crate::quarantine::store::EntryState,
        )>,
        QuarantineOpError,
    > {
        let q = crate::quarantine::store::Query {
            rcpt: Some(crate::quarantine::normal_address(rcpt)),
            limit: 500,
            ..Default::default()
        };
        self.on_store(move |store| Ok(store.list(&q)?.entries))
            .await
    }

    /// `GET /quarantine/ID`: the entry, its header fields and its text.
    pub async fn quarantine_view(&self, id: &str) -> Result<serde_json::Value, QuarantineOpError> {
        let ((meta, _), state, raw) = self.quarantined(id).await?;
        let mut v = crate::quarantine::render::view(&raw);
        v["entry"] = meta.to_json(&state);
        Ok(v)
    }

    /// `GET /quarantine/ID/raw`: the original bytes, and the entry.
    pub async fn quarantine_raw(
        &self,
        id: &str,
    ) -> Result<(crate::quarantine::Meta, Vec<u8>), QuarantineOpError> {
        let ((meta, _), _, raw) = self.quarantined(id).await?;
        Ok((meta, raw))
    }

    /// Releases `id` over SMTP to `[quarantine] release_relay` with its original envelope, or
    /// only to `only` (a per-recipient link, which must be one of its recipients). A second
    /// release (to that recipient) is refused unless `force`. Recorded in the history.
    pub async fn quarantine_release(
        &self,
        id: &str,
        by: &'static str,
        only: Option<&str>,
        force: bool,
    ) -> Result<ReleasedTo, QuarantineOpError> {
        let store = self.quarantine_store()?;
        let _claim = store.claim(id).ok_or(QuarantineOpError::Busy)?;
        let ((meta, _), state, raw) = self.quarantined(id).await?;
        let rcpt = match only {
            Some(r) if !meta.has_rcpt(r) => return Err(QuarantineOpError::NotFound),
            Some(r) => vec![crate::quarantine::normal_address(r)],
            None => meta.rcpt.clone(),
        };
        if !force && state.released_to(only) {
            let at = state.released.last().map_or(0, |r| r.time_us);
            return Err(QuarantineOpError::AlreadyReleased(
                crate::history::format_time(at),
            ));
        }
        let q = &self.config.quarantine;
        let (relay, helo) = (q.release_relay.clone(), q.release_helo.clone());
        let (sender, to) = (meta.sender.clone(), rcpt.clone());
        let size = raw.len();
        let reply = tokio::task::spawn_blocking(move || {
            crate::quarantine::release::send(relay.as_deref(), &helo, sender.as_deref(), &to, &raw)
        })
        .await
        .map_err(|e| QuarantineOpError::Io(e.to_string()))?;
        let reply = match reply {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(id, by, error = %e, "quarantine release failed");
                return Err(e.into());
            }
        };
        let (id_owned, rc) = (id.to_string(), rcpt.clone());
        self.on_store(move |store| Ok(store.mark_released(&id_owned, by, &rc)?))
            .await?;
        tracing::info!(
            id,
            by,
            rcpt = rcpt.len(),
            reply,
            "quarantined message released"
        );
        if self.history.enabled() {
            let mut r = crate::history::Record {
                time_us: crate::history::now_us(),
                kind: crate::history::Kind::Release,
                listener: by.to_string(),
                queue_id: meta.queue_id.clone(),
                message_id: meta.message_id.clone(),
                sender: meta.sender.clone(),
                rcpt: rcpt.clone(),
                from: meta.from.clone(),
                subject: meta.subject.clone(),
                size: size as u64,
                score: meta.score,
                ..Default::default()
            };
            r.ip = meta.ip.as_deref().and_then(|i| i.parse().ok());
            self.history.record(r);
        }
        Ok(ReleasedTo { rcpt, reply })
    }

    /// Learns the kept bytes of `id` as spam or ham, as `/learnspam` and `/learnham` do.
    pub async fn quarantine_learn(
        &self,
        id: &str,
        by: &'static str,
        counter: Counter,
    ) -> Result<Learned, QuarantineOpError> {
        let ((meta, _), _, raw) = self.quarantined(id).await?;
        let held = self
            .budget
            .reserve(raw.len())
            .map_err(|_| QuarantineOpError::Learn(LearnError::Pool(PoolError::Busy)))?;
        let envelope = Envelope {
            client_ip: meta.ip.as_deref().and_then(|i| i.parse().ok()),
            helo: meta.helo.clone(),
            mail_from: meta.sender.clone(),
            rcpt_to: meta.rcpt.clone(),
            user: meta.user.clone(),
            queue_id: meta.queue_id.clone(),
            ..Envelope::default()
        };
        self.learn(by, raw, held, counter, &envelope)
            .await
            .map_err(QuarantineOpError::Learn)
    }

    /// Deletes `id`: its body overwritten, the entry gone from every list.
    pub async fn quarantine_delete(
        &self,
        id: &str,
        by: &'static str,
    ) -> Result<(), QuarantineOpError> {
        let id = id.to_string();
        self.on_store(move |store| {
            let state = store.state(&id)?;
            let Some((meta, seg)) = store.find(&id)?.filter(|_| !state.deleted) else {
                return Err(QuarantineOpError::NotFound);
            };
            store.delete(&meta, &seg, by)?;
            tracing::info!(id, by, "quarantined message deleted");
            Ok(())
        })
        .await
    }
}
