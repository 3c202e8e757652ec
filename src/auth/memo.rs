//! Finished verdicts of unsigned messages. A message with no DKIM signature and no ARC set is
//! authenticated by SPF (sender and HELO) and DMARC alone, and those depend only on who sent it
//! (client address, HELO, envelope sender) and its From domain, not on its bytes: a bulk run or
//! a regular correspondent repeats that tuple message after message. The record caches below
//! spare the network but not the evaluation (SPF's mechanisms, DMARC's tree walk, and lookups
//! of names with no record, which mail-auth does not cache), so a repeated tuple's results are
//! kept for a short time (`[dns] auth_memo_secs`). Only definite results are kept: a
//! temporary error is asked again next time.

use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use lru::LruCache;
use parking_lot::Mutex;

use super::MethodResult;

/// What identifies an unsigned message's authentication.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MemoKey {
    pub ip: Option<IpAddr>,
    pub helo: Box<str>,
    pub sender: Box<str>,
    pub from_domain: Option<Box<str>>,
}

/// The results of one unsigned message.
#[derive(Debug, Clone)]
pub struct Memoized {
    pub spf: MethodResult,
    pub helo: MethodResult,
    pub dmarc: MethodResult,
}

/// A bounded map of `MemoKey` to results, each kept `ttl` (zero: nothing kept).
pub struct Memo {
    ttl: Duration,
    hits: std::sync::atomic::AtomicU64,
    inner: Mutex<LruCache<MemoKey, (Memoized, Instant)>>,
}

impl Memo {
    pub fn new(size: usize, ttl: Duration) -> Memo {
        let n = NonZeroUsize::new(size).unwrap_or(NonZeroUsize::MIN);
        Memo {
            ttl,
            hits: Default::default(),
            inner: Mutex::new(LruCache::new(n)),
        }
    }

    /// Whether nothing is ever kept (`auth_memo_secs = 0`).
    pub fn disabled(&self) -> bool {
        self.ttl.is_zero()
    }

    pub fn get(&self, key: &MemoKey) -> Option<Memoized> {
        if self.ttl.is_zero() {
            return None;
        }
        let mut c = self.inner.lock();
        match c.get(key) {
            Some((v, until)) if *until > Instant::now() => {
                self.hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Some(v.clone())
            }
            Some(_) => {
                c.pop(key);
                None
            }
            None => None,
        }
    }

    /// Whether `key` has live results (counted as no hit).
    pub fn peek(&self, key: &MemoKey) -> bool {
        !self.ttl.is_zero()
            && self
                .inner
                .lock()
                .peek(key)
                .is_some_and(|(_, until)| *until > Instant::now())
    }

    /// Messages answered from the memo.
    pub fn hits(&self) -> u64 {
        self.hits.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Keeps `value` unless a result in it is a temporary error.
    pub fn put(&self, key: MemoKey, value: Memoized) {
        use super::Status::TempError;
        if self.ttl.is_zero()
            || [&value.spf, &value.helo, &value.dmarc]
                .iter()
                .any(|r| r.result == TempError)
        {
            return;
        }
        let until = Instant::now() + self.ttl;
        self.inner.lock().put(key, (value, until));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Status;

    fn key(sender: &str) -> MemoKey {
        MemoKey {
            ip: Some("192.0.2.1".parse().unwrap()),
            helo: "mx.example".into(),
            sender: sender.into(),
            from_domain: Some("example.org".into()),
        }
    }

    fn results(spf: Status) -> Memoized {
        Memoized {
            spf: MethodResult::of(spf),
            helo: MethodResult::of(Status::None),
            dmarc: MethodResult::of(Status::None),
        }
    }

    #[test]
    fn keeps_definite_results_for_their_key_only() {
        let m = Memo::new(8, Duration::from_secs(60));
        m.put(key("a@example.org"), results(Status::Fail));
        assert_eq!(
            m.get(&key("a@example.org")).unwrap().spf.result,
            Status::Fail
        );
        assert!(m.get(&key("b@example.org")).is_none());
    }

    #[test]
    fn never_keeps_temporary_errors_nor_with_a_zero_ttl() {
        let m = Memo::new(8, Duration::from_secs(60));
        m.put(key("a@example.org"), results(Status::TempError));
        assert!(m.get(&key("a@example.org")).is_none());
        let off = Memo::new(8, Duration::ZERO);
        off.put(key("a@example.org"), results(Status::Pass));
        assert!(off.get(&key("a@example.org")).is_none());
    }

    #[test]
    fn entries_expire() {
        let m = Memo::new(8, Duration::from_millis(20));
        m.put(key("a@example.org"), results(Status::Pass));
        assert!(m.get(&key("a@example.org")).is_some());
        std::thread::sleep(Duration::from_millis(40));
        assert!(m.get(&key("a@example.org")).is_none());
    }
}
