//! mail-auth's caches of parsed records (SPF and DMARC records, DKIM keys: parsing an RSA key is
//! the costly part of a DKIM check), each entry kept until its answer's TTL, each bounded in
//! entries. hickory's cache below still holds the raw answers.

use std::borrow::Borrow;
use std::hash::Hash;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::num::NonZeroUsize;
use std::time::Instant;

use lru::LruCache;
use mail_auth::{Parameters, RecordSet, ResolverCache, Txt, MX};
use parking_lot::Mutex;

/// One record type's entries, with the instant each expires.
pub struct TtlCache<K: Hash + Eq, V> {
    inner: Mutex<LruCache<K, (V, Instant)>>,
}

impl<K: Hash + Eq, V> TtlCache<K, V> {
    fn new(size: NonZeroUsize) -> Self {
        TtlCache {
            inner: Mutex::new(LruCache::new(size)),
        }
    }
}

impl<K: Hash + Eq, V: Clone> ResolverCache<K, V> for TtlCache<K, V> {
    fn get<Q>(&self, name: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut c = self.inner.lock();
        match c.get(name) {
            Some((v, until)) if *until > Instant::now() => Some(v.clone()),
            Some(_) => {
                c.pop(name);
                None
            }
            None => None,
        }
    }

    fn remove<Q>(&self, name: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.inner.lock().pop(name).map(|(v, _)| v)
    }

    fn insert(&self, key: K, value: V, valid_until: Instant) {
        if valid_until > Instant::now() {
            self.inner.lock().put(key, (value, valid_until));
        }
    }
}

/// The caches of one resolver, shared by every message.
pub struct AuthCaches {
    pub txt: TtlCache<Box<str>, Txt>,
    pub mx: TtlCache<Box<str>, RecordSet<MX>>,
    pub ptr: TtlCache<IpAddr, RecordSet<Box<str>>>,
    pub ipv4: TtlCache<Box<str>, RecordSet<Ipv4Addr>>,
    pub ipv6: TtlCache<Box<str>, RecordSet<Ipv6Addr>>,
    /// Finished results of unsigned messages.
    pub memo: super::memo::Memo,
}

/// `Parameters` of a verifier with every cache of `c`.
pub type Cached<'x, P> = Parameters<
    'x,
    P,
    TtlCache<Box<str>, Txt>,
    TtlCache<Box<str>, RecordSet<MX>>,
    TtlCache<Box<str>, RecordSet<Ipv4Addr>>,
    TtlCache<Box<str>, RecordSet<Ipv6Addr>>,
    TtlCache<IpAddr, RecordSet<Box<str>>>,
>;

impl AuthCaches {
    /// Caches of at most `size` entries each; unsigned messages' results kept `memo_ttl`.
    pub fn new(size: usize, memo_ttl: std::time::Duration) -> AuthCaches {
        let n = NonZeroUsize::new(size).unwrap_or(NonZeroUsize::MIN);
        AuthCaches {
            txt: TtlCache::new(n),
            mx: TtlCache::new(n),
            ptr: TtlCache::new(n),
            ipv4: TtlCache::new(n),
            ipv6: TtlCache::new(n),
            memo: super::memo::Memo::new(size, memo_ttl),
        }
    }

    /// A verifier's parameters with these caches.
    pub fn with<'x, P>(&'x self, p: P) -> Cached<'x, P> {
        Parameters::new(p)
            .with_txt_cache(&self.txt)
            .with_mx_cache(&self.mx)
            .with_ptr_cache(&self.ptr)
            .with_ipv4_cache(&self.ipv4)
            .with_ipv6_cache(&self.ipv6)
    }
}
