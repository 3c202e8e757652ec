//! Keys for store benchmarks and load runs (benches/store.rs, examples/store_load.rs).

use shrike::store::StoreKey;

/// 01:00 on some day: a fixed start for `ManualClock`s.
pub const T0: u64 = 1_700_000_000 - 1_700_000_000 % 86_400 + 3_600;

/// SplitMix64: a fast, well-mixed deterministic stream.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Key number `i`: a uniform hash, one of eight shingle types.
pub fn key(i: u64) -> StoreKey {
    StoreKey {
        namespace: 0,
        kind: 1 + (i % 8) as u16,
        hash: splitmix64(i),
    }
}
