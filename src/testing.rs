//! Helpers shared by the unit tests.

/// The next value of a xorshift64 sequence: deterministic pseudo-random input for randomized
/// tests (`x` must not start at zero).
pub(crate) fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// `n` of `pieces`, picked by `xorshift`, joined.
pub(crate) fn pick(x: &mut u64, pieces: &[&str], n: u64) -> String {
    (0..n)
        .map(|_| pieces[(xorshift(x) % pieces.len() as u64) as usize])
        .collect()
}
