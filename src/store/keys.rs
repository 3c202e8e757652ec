//! Store keys: what a key is (namespace, shingle type, 64-bit hash) and how it is hashed to a
//! table slot. The store knows nothing of what was hashed.

use super::timeline::Entry;

/// A store key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StoreKey {
    /// A configured traffic prefix (inbound, outbound, ...).
    pub namespace: u8,
    /// The shingle type number.
    pub kind: u16,
    pub hash: u64,
}

/// Table hash of a key. The key hash is already uniform; type and namespace are mixed in.
pub(super) fn table_hash(hash: u64, kind: u16, namespace: u8) -> u64 {
    let mut k =
        hash ^ ((u64::from(kind) << 8 | u64::from(namespace)).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^ (k >> 33)
}

pub(super) fn key_hash(key: &StoreKey) -> u64 {
    table_hash(key.hash, key.kind, key.namespace)
}

pub(super) fn entry_hash(e: &Entry) -> u64 {
    table_hash(e.hash, e.kind, e.namespace)
}

/// Whether an entry is `key`'s.
pub(super) fn matches(key: &StoreKey) -> impl Fn(&Entry) -> bool + '_ {
    move |e| e.hash == key.hash && e.kind == key.kind && e.namespace == key.namespace
}
