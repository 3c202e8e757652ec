//! Fuzzy body shingles: a min-hash sketch of the word 3-grams of the normalized body.
//!
//! Two messages that differ in a few words share most of their sketch values; unrelated messages
//! share almost none. The fraction of equal values estimates the Jaccard similarity of the two
//! sets of 3-word windows.
//!
//! The sketch is one-permutation min-hash (Li, Owen & Zhang 2012) with rotation densification
//! (Shrivastava & Li 2014): each window is hashed once, the top 5 bits of the hash pick one of 32
//! bins, and each bin keeps its minimum. A bin no window fell into borrows the value of the next
//! non-empty bin, salted with the distance. This costs one hash per window instead of 32 (rspamd's
//! 32 independent hashes), which matters at 20,000 messages a second.
//!
//! The constants below are part of the stored data: changing any of them changes every
//! `body_fuzzy` shingle.

use super::{fmix64, hash_bytes};
use crate::message::normalize::{HIGH_BITS, LOW_BITS};

/// Values per message.
pub const FUZZY_HASHES: usize = 32;
/// Words per window.
pub const FUZZY_WINDOW: usize = 3;
/// Fewer words than this give no fuzzy shingles: too short to say anything.
pub const FUZZY_MIN_WORDS: usize = 10;
/// Words beyond this are ignored (bounded work for huge bodies).
pub const FUZZY_MAX_WORDS: usize = 20_000;

const BIN_BITS: u32 = 5; // 2^5 = 32 bins
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// The fuzzy sketch of a normalized text: `FUZZY_HASHES` values, or none for short texts.
pub fn sketch(normalized: &str) -> Vec<u64> {
    // One pass: a rolling window of the last three word hashes.
    let mut window = [0u64; FUZZY_WINDOW];
    let mut words = 0usize;
    let mut mins = [u64::MAX; FUZZY_HASHES];
    for_each_word(normalized, |word| {
        window = [window[1], window[2], hash_bytes(word.as_bytes())];
        words += 1;
        if words >= FUZZY_WINDOW {
            let h = fmix64(
                window[0].wrapping_mul(GOLDEN)
                    ^ window[1].rotate_left(21)
                    ^ window[2].rotate_left(42).wrapping_add(GOLDEN),
            );
            let bin = (h >> (64 - BIN_BITS)) as usize;
            if h < mins[bin] {
                mins[bin] = h;
            }
        }
        words < FUZZY_MAX_WORDS
    });
    if words < FUZZY_MIN_WORDS {
        return Vec::new();
    }
    (0..FUZZY_HASHES)
        .map(|i| {
            if mins[i] != u64::MAX {
                return mins[i];
            }
            // Rotation densification: borrow from the next non-empty bin to the right.
            (1..FUZZY_HASHES)
                .map(|d| (d, mins[(i + d) % FUZZY_HASHES]))
                .find(|&(_, v)| v != u64::MAX)
                .map_or(0, |(d, v)| {
                    fmix64(v ^ (d as u64).wrapping_mul(GOLDEN) ^ ((i as u64) << 56))
                })
        })
        .collect()
}

/// Byte classes: an ASCII separator, an ASCII letter or digit, the start or continuation of a
/// multi-byte character (decoded to ask Unicode).
const SEP: u8 = 0;
const WORD: u8 = 1;
const NON_ASCII: u8 = 2;
static CLASS: [u8; 256] = {
    let mut table = [NON_ASCII; 256];
    let mut b = 0;
    while b < 128 {
        table[b] = if (b as u8).is_ascii_alphanumeric() {
            WORD
        } else {
            SEP
        };
        b += 1;
    }
    table
};

/// Calls `f` with each maximal run of alphanumeric characters until it returns false. ASCII is
/// split byte-wise; other characters by their Unicode class. Separators and words are skipped
/// eight bytes at a time (`ascii_alnum`): a byte loop paid a mispredicted branch at the end of
/// every word, and this runs over every byte of every body.
fn for_each_word(text: &str, mut f: impl FnMut(&str) -> bool) {
    let bytes = text.as_bytes();
    // Whether the character at `i` is part of a word, and its width.
    let class = |i: usize| -> (bool, usize) {
        let b = bytes[i];
        if b < 0x80 {
            (CLASS[usize::from(b)] == WORD, 1)
        } else {
            let c = text[i..].chars().next().unwrap_or(' ');
            (c.is_alphanumeric(), c.len_utf8())
        }
    };
    let mut i = 0;
    while i < bytes.len() {
        // Separators: up to the next ASCII letter or digit or non-ASCII byte.
        loop {
            i = skip(
                bytes,
                i,
                |x| ascii_alnum(x) | (x & HIGH_BITS),
                |b| CLASS[usize::from(b)] != SEP,
            );
            if i == bytes.len() {
                return;
            }
            let (word, width) = class(i);
            if word {
                break;
            }
            i += width;
        }
        // A word: up to the next byte that is no ASCII letter or digit, then on while it starts
        // an alphanumeric character.
        let start = i;
        loop {
            i = skip(
                bytes,
                i,
                |x| !ascii_alnum(x) & HIGH_BITS,
                |b| CLASS[usize::from(b)] != WORD,
            );
            if i == bytes.len() || bytes[i] < 0x80 {
                break;
            }
            let (word, width) = class(i);
            if !word {
                break;
            }
            i += width;
        }
        if !f(&text[start..i]) {
            return;
        }
    }
}

/// The high bit of each byte of `x` set where that byte is an ASCII letter or digit.
#[inline(always)]
fn ascii_alnum(x: u64) -> u64 {
    // On 7-bit bytes, `v + (0x80 - lo)` has its high bit set where `v >= lo`, and
    // `v + (0x7f - hi)` where `v > hi`; neither carries into the next byte.
    let in_range = |v: u64, lo: u8, hi: u8| {
        (v + LOW_BITS * u64::from(0x80 - lo)) & !(v + LOW_BITS * u64::from(0x7f - hi))
    };
    let v = x & !HIGH_BITS;
    let digit = in_range(v, b'0', b'9');
    // Setting bit 5 maps only 'A'..='Z' and 'a'..='z' onto 'a'..='z'.
    let letter = in_range(v | (LOW_BITS * 0x20), b'a', b'z');
    (digit | letter) & !x & HIGH_BITS
}

/// From `i`, the first index whose byte `stop` marks (high bit of its byte in `stop(chunk)`),
/// or the end: eight bytes at a time, the last few by `stop_byte`.
#[inline(always)]
fn skip(
    bytes: &[u8],
    mut i: usize,
    stop: impl Fn(u64) -> u64,
    stop_byte: impl Fn(u8) -> bool,
) -> usize {
    while let Some(chunk) = bytes.get(i..i + 8) {
        let x = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
        let m = stop(x);
        if m != 0 {
            return i + (m.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while let Some(&b) = bytes.get(i) {
        if stop_byte(b) {
            return i;
        }
        i += 1;
    }
    i
}

/// The fraction of equal values of two sketches (an estimate of Jaccard similarity).
pub fn similarity(a: &[u64], b: &[u64]) -> f64 {
    if a.is_empty() || a.len() != b.len() {
        return 0.0;
    }
    let same = a.iter().zip(b).filter(|(x, y)| x == y).count();
    same as f64 / a.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic pseudo-random text of `n` words from a vocabulary of 5,000.
    fn text(seed: u64, n: usize) -> Vec<String> {
        let mut x = seed.wrapping_mul(GOLDEN) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                format!("w{}", x % 5000)
            })
            .collect()
    }

    #[test]
    fn near_duplicates_share_most_values() {
        for seed in 1..20 {
            let a = text(seed, 150);
            let mut b = a.clone();
            b[30] = "changed".into();
            b[90] = "different".into();
            b.push("extra".into());
            let sa = sketch(&a.join(" "));
            let sb = sketch(&b.join(" "));
            assert_eq!(sa.len(), FUZZY_HASHES);
            let sim = similarity(&sa, &sb);
            assert!(sim >= 0.75, "seed {seed}: similarity {sim}");
        }
    }

    #[test]
    fn unrelated_texts_share_almost_nothing() {
        for seed in 1..20 {
            let sa = sketch(&text(seed, 150).join(" "));
            let sb = sketch(&text(seed + 1000, 150).join(" "));
            let sim = similarity(&sa, &sb);
            assert!(sim <= 0.1, "seed {seed}: similarity {sim}");
        }
    }

    #[test]
    fn words_split_on_non_alphanumerics() {
        let mut words = Vec::new();
        for_each_word("héllo, wörld—ok 42x", |w| {
            words.push(w.to_string());
            true
        });
        assert_eq!(words, ["héllo", "wörld", "ok", "42x"]);
    }

    /// Words of random texts as `for_each_word` finds them and as a split by characters does.
    #[test]
    fn words_split_like_a_split_by_characters() {
        use crate::testing::{pick, xorshift};
        // (with runs longer than the eight bytes taken at once, and the bytes either side of
        // the letter and digit ranges)
        let pieces = [
            "a",
            "word",
            "Caps",
            "42",
            " ",
            "  ",
            ",",
            "-",
            "\n",
            "é",
            "wörld",
            "—",
            "\u{a0}",
            "日本",
            "x.y",
            "\x01",
            "\u{200B}",
            "\u{7f}",
            "_",
            "abcdefghijklm",
            "0123456789",
            "ZYXWVUTSRQ",
            "/",
            ":",
            "@",
            "[",
            "`",
            "{",
            "Ω",
            "ﬁ",
        ];
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..20_000 {
            let n = xorshift(&mut x) % 40;
            let text = pick(&mut x, &pieces, n);
            let mut words = Vec::new();
            for_each_word(&text, |w| {
                words.push(w.to_string());
                true
            });
            let expect: Vec<&str> = text
                .split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
                .collect();
            assert_eq!(words, expect, "{text:?}");
        }
    }

    #[test]
    fn punctuation_between_words_does_not_matter() {
        let a = sketch("héllo wörld ok 42x one two three four five six seven");
        let b = sketch("héllo, wörld—ok (42x) one: two; three four five six seven!");
        assert_eq!(a, b);
        assert_ne!(
            a,
            sketch("héllo wörld ok 42y one two three four five six seven")
        );
    }

    /// Stored fuzzy statistics depend on these values never changing.
    #[test]
    fn sketch_test_vector_is_pinned() {
        let s = sketch("the quick brown fox jumps over the lazy dog and runs far away");
        assert_eq!(
            format!("{:016x} {:016x}", s[0], s[31]),
            "0182388b5a294953 f4980007d763fc84"
        );
    }

    #[test]
    fn short_texts_have_no_sketch() {
        assert!(sketch("only a few words here").is_empty());
    }

    #[test]
    fn short_but_eligible_texts_are_densified() {
        let s = sketch("one two three four five six seven eight nine ten eleven");
        assert_eq!(s.len(), FUZZY_HASHES);
        assert!(s.iter().all(|&v| v != u64::MAX && v != 0));
        let distinct: std::collections::HashSet<_> = s.iter().collect();
        assert_eq!(distinct.len(), FUZZY_HASHES);
    }
}
