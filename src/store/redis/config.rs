//! `[store] backend` and `[store.redis]`: where the shared reputation lives and how the daemon
//! talks to it.

use serde::{Deserialize, Serialize};

use crate::secrets::redact;

/// Which store holds the reputation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// The embedded in-memory store with its WAL and snapshots in the data directory.
    #[default]
    Memory,
    /// A Redis or Valkey node or cluster shared by every daemon (`[store.redis]`).
    Redis,
}

/// `[store.redis]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    /// One node, or a cluster's seed nodes (`redis://[user:password@]host:port`).
    pub urls: Vec<String>,
    /// The nodes form a Redis Cluster (keys spread over hash slots).
    pub cluster: bool,
    /// Service prefix of every key, so inbound and outbound mail (or two installs) never mix.
    pub prefix: String,
    /// Longest wait for a read before the scan goes on without reputation.
    pub timeout_ms: u64,
    /// Multiplexed connections (per node). With two or more, the first carries the write-behind
    /// flushes and the others the reads a scan waits on, so a read never queues behind a flush.
    pub pool_size: usize,
    /// AUTH password (and `username` for ACL users); also accepted inside the URLs.
    pub password: Option<String>,
    pub username: Option<String>,
    /// How long increments are aggregated per key before being flushed as pipelines.
    pub flush_interval_ms: u64,
    /// Most distinct pending keys (increments and unique pairs) held while Redis is slow or
    /// down; past it, increments are dropped and counted.
    pub max_pending: usize,
    /// Share the classifier's learns through a Redis stream every daemon applies.
    pub shared_classifier: bool,
    /// How long window sums read from Redis are served again from memory (with this daemon's
    /// own increments added at once); 0 turns the near cache off. Other daemons' counts show
    /// here at most this much (plus their `flush_interval_ms`) late; rate limits and unique
    /// counts are never read from it.
    pub near_cache_ms: u64,
    /// Most keys the near cache holds.
    pub near_cache_keys: usize,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            urls: vec!["redis://127.0.0.1:6379".into()],
            cluster: false,
            prefix: "in".into(),
            timeout_ms: 50,
            pool_size: 2,
            password: None,
            username: None,
            flush_interval_ms: 100,
            max_pending: 1_000_000,
            shared_classifier: true,
            near_cache_ms: 1_000,
            near_cache_keys: 65_536,
        }
    }
}

/// Why a `[store.redis]` section cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RedisConfigError {
    #[error("store.redis.urls must name at least one node")]
    NoUrls,
    /// (The URL with its password masked, as every variant that quotes one.)
    #[error("store.redis.urls: {0:?} is not a redis:// URL")]
    BadUrl(String),
    #[error("store.redis.urls: {0:?}: TLS is not built into this shrike (use a local TLS proxy such as stunnel, or plain redis:// on a private network)")]
    Tls(String),
    #[error("store.redis.prefix must be 1 to 32 characters without '{{', '}}' or ':'")]
    Prefix,
    #[error("store.redis.timeout_ms must be 1 to 60000")]
    Timeout,
    #[error("store.redis.pool_size must be 1 to 64")]
    Pool,
    #[error("store.redis.flush_interval_ms must be 1 to 10000")]
    Flush,
    #[error("store.redis.max_pending must be greater than 0")]
    Pending,
    #[error("store.redis.near_cache_ms must be 0 (off) to 60000")]
    NearCache,
    #[error("store.redis.near_cache_keys must be 1 to 10000000")]
    NearCacheKeys,
}

impl RedisConfig {
    pub fn validate(&self) -> Result<(), RedisConfigError> {
        if self.urls.is_empty() {
            return Err(RedisConfigError::NoUrls);
        }
        for u in &self.urls {
            if u.starts_with("rediss://") || u.starts_with("valkeys://") {
                return Err(RedisConfigError::Tls(redact(u).into_owned()));
            }
            if !(u.starts_with("redis://") || u.starts_with("valkey://")) {
                return Err(RedisConfigError::BadUrl(redact(u).into_owned()));
            }
        }
        if self.prefix.is_empty() || self.prefix.len() > 32 || self.prefix.contains(['{', '}', ':'])
        {
            return Err(RedisConfigError::Prefix);
        }
        if !(1..=60_000).contains(&self.timeout_ms) {
            return Err(RedisConfigError::Timeout);
        }
        if !(1..=64).contains(&self.pool_size) {
            return Err(RedisConfigError::Pool);
        }
        if !(1..=10_000).contains(&self.flush_interval_ms) {
            return Err(RedisConfigError::Flush);
        }
        if self.max_pending == 0 {
            return Err(RedisConfigError::Pending);
        }
        if self.near_cache_ms > 60_000 {
            return Err(RedisConfigError::NearCache);
        }
        if !(1..=10_000_000).contains(&self.near_cache_keys) {
            return Err(RedisConfigError::NearCacheKeys);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_values_are_named() {
        let ok = RedisConfig::default();
        assert_eq!(ok.validate(), Ok(()));
        let with = |f: &dyn Fn(&mut RedisConfig)| {
            let mut c = RedisConfig::default();
            f(&mut c);
            c.validate().unwrap_err().to_string()
        };
        assert!(with(&|c| c.urls.clear()).contains("urls"));
        assert!(with(&|c| c.urls = vec!["http://x".into()]).contains("not a redis"));
        assert!(with(&|c| c.urls = vec!["rediss://x:6379".into()]).contains("TLS"));
        // The URL is quoted with its password masked.
        let e = with(&|c| c.urls = vec!["rediss://shrike:pw1@x:6379".into()]);
        assert!(
            e.contains("rediss://shrike:***@x:6379") && !e.contains("pw1"),
            "{e}"
        );
        let e = with(&|c| c.urls = vec!["http://shrike:pw1@x".into()]);
        assert!(
            e.contains("http://shrike:***@x") && !e.contains("pw1"),
            "{e}"
        );
        assert!(with(&|c| c.prefix = "a{b}".into()).contains("prefix"));
        assert!(with(&|c| c.timeout_ms = 0).contains("timeout_ms"));
        assert!(with(&|c| c.pool_size = 0).contains("pool_size"));
        assert!(with(&|c| c.max_pending = 0).contains("max_pending"));
        assert!(with(&|c| c.near_cache_ms = 60_001).contains("near_cache_ms"));
        assert!(with(&|c| c.near_cache_keys = 0).contains("near_cache_keys"));
        // Only checked when the backend is redis.
        let cfg: crate::config::Config =
            toml::from_str("[store]\nbackend = \"redis\"\n[store.redis]\nurls = []\n").unwrap();
        assert!(cfg.validate().unwrap_err().to_string().contains("store"));
        let cfg: crate::config::Config = toml::from_str("[store.redis]\nurls = []\n").unwrap();
        assert!(cfg.validate().is_ok());
    }
}
