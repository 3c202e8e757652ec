//! What the codec fuzz targets share: how a mode byte splits a stream into `feed` calls.

/// Size of the `step`-th chunk for a split pattern (a mode byte's bits 0-4).
pub fn chunk_len(pattern: u8, step: usize, remaining: usize) -> usize {
    match pattern {
        0 => remaining,
        1 => 1,
        2..=15 => usize::from(pattern),
        16..=23 => 1 + (step * 7 + usize::from(pattern)) % 61,
        _ => 1 << (step % 12),
    }
}
