//! Text normalization: the one matching form that rules, entities and shingles share.
//!
//! `normalize` turns display text into a form in which look-alike spellings compare equal:
//!
//! 1. invisible characters are dropped: zero-width spaces and joiners, bidi controls, the soft
//!    hyphen, the BOM and other invisible format characters;
//! 2. Unicode NFKC (fullwidth "ＦＲＥＥ" becomes "FREE", ligatures split);
//! 3. full case folding (`caseless`);
//! 4. look-alike folding (UTS #39 confusables) inside words that are written in more than one
//!    script, or in Latin with non-ASCII look-alikes: the Cyrillic "а" and "р" in "PayPal" become
//!    the Latin letters, so the word normalizes exactly like the Latin spelling. Words wholly in
//!    one non-Latin script (ordinary Russian or Greek text) are left alone, so rule authors can
//!    still match them as written. Mixed-script words are reported so rules can score them;
//! 5. runs of whitespace and control characters collapse to one space; ends are trimmed.
//!
//! The work goes token by token (split at ASCII whitespace): ASCII tokens, most of any mail, are
//! only lower-cased; the Unicode steps are paid for only by the tokens that need them.

use std::sync::LazyLock;

use caseless::Caseless;
use rustc_hash::FxHashSet;
use unicode_normalization::{is_nfkc_quick, IsNormalized, UnicodeNormalization};
use unicode_security::mixed_script::AugmentedScriptSet;

/// Most mixed-script words listed for a message (`ParsedMessage::mixed_script_words`, the
/// subject's and the body's together): rules count them and quote a few, while a list that grew
/// with the text would make the report, and every rule that walks it, as long as the sender
/// likes (a megabyte of look-alike words is ~80,000 of them). The words past it are still
/// folded; they are only not listed.
pub const MAX_MIXED_WORDS: usize = 64;

/// Display text and its normalized matching form.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Text {
    /// The decoded text as a reader would see it.
    pub display: String,
    /// The normalized form (see the module docs).
    pub normalized: String,
}

impl Text {
    /// Builds both forms from display text, appending mixed-script words to `mixed`.
    pub fn new(display: String, mixed: &mut Vec<String>) -> Self {
        let normalized = normalize_into(&display, mixed);
        Text {
            display,
            normalized,
        }
    }
}

/// Normalizes `input` (see the module docs), discarding the list of mixed-script words.
pub fn normalize(input: &str) -> String {
    let mut ignored = Vec::new();
    normalize_into(input, &mut ignored)
}

/// Normalizes `input`, appending each distinct mixed-script word (case-folded) to `mixed`
/// while it holds fewer than `MAX_MIXED_WORDS`.
pub fn normalize_into(input: &str, mixed: &mut Vec<String>) -> String {
    let mut out = None;
    // (the thread's cache is in use only if this were re-entered, or gone at thread exit:
    // then the facts are looked up without it)
    let _ = FACTS.try_with(|cell| {
        if let Ok(mut facts) = cell.try_borrow_mut() {
            out = Some(normalize_with(input, mixed, &mut facts));
        }
    });
    out.unwrap_or_else(|| normalize_with(input, mixed, &mut Facts::uncached()))
}

fn normalize_with(input: &str, mixed: &mut Vec<String>, facts: &mut Facts) -> String {
    let mut n = Normalizer {
        out: String::with_capacity(input.len()),
        pending_space: false,
        scratch: String::new(),
        listed: mixed.iter().map(|w| word_key(w)).collect(),
        facts,
    };
    // One pass over the bytes: tokens end at ASCII whitespace. A run of tokens of printable
    // ASCII separated by single spaces is already in normal form (but for case) and is copied
    // whole; a token with anything else takes the slower paths.
    let bytes = input.as_bytes();
    let len = bytes.len();
    let class = |i: usize| CLASS[usize::from(bytes[i])];
    let mut i = 0;
    while i < len {
        while i < len && class(i) == SPACE {
            i += 1;
        }
        if i == len {
            break;
        }
        let start = i;
        // End of the plain run so far: its last token ended at `plain_end`.
        let mut plain_end = start;
        loop {
            let (next, last_space) = skip_plain_chunks(bytes, i);
            if let Some(space) = last_space {
                plain_end = space;
            }
            i = next;
            while i < len && class(i) == PRINTABLE {
                i += 1;
            }
            if i < len && class(i) == OTHER {
                break;
            }
            plain_end = i;
            if i + 1 < len && bytes[i] == b' ' && class(i + 1) == PRINTABLE {
                i += 1;
                continue;
            }
            break;
        }
        n.pending_space = true;
        if plain_end > start {
            n.separate();
            n.out.push_str(&input[start..plain_end]);
        }
        if i < len && class(i) == OTHER {
            // The token holding it starts after the plain run's last space.
            let token_start = if plain_end > start {
                plain_end + 1
            } else {
                start
            };
            while i < len && class(i) != SPACE {
                i += 1;
            }
            let token = &input[token_start..i];
            n.pending_space = true;
            if token.is_ascii() {
                n.push_ascii(token);
            } else {
                n.push_unicode(token, mixed);
            }
        }
    }
    // Unicode tokens are already case-folded, so this touches only the copied ASCII.
    n.out.make_ascii_lowercase();
    n.out
}

/// From `i`, inside a token of printable ASCII, skips eight bytes at a time while they are
/// printable tokens with single spaces between them, ending mid-token: what a byte loop over
/// such a run would walk through, at a third of its instructions on ordinary text. Returns where
/// it stopped and the last space it skipped (which ends a token).
pub(super) fn skip_plain_chunks(bytes: &[u8], mut i: usize) -> (usize, Option<usize>) {
    let mut last_space = None;
    while let Some(chunk) = bytes.get(i..i + 8) {
        let x = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
        let spaces = space_bytes(x);
        if !all_in_space_to_tilde(x) || spaces & (spaces >> 8) != 0 || spaces >> 63 != 0 {
            break;
        }
        if spaces != 0 {
            last_space = Some(i + (63 - spaces.leading_zeros() as usize) / 8);
        }
        i += 8;
    }
    (i, last_space)
}

/// Every byte's low bit and every byte's high bit: the masks of the eight-bytes-at-a-time scans
/// here and in `shingle::fuzzy`.
pub(crate) const LOW_BITS: u64 = 0x0101_0101_0101_0101;
pub(crate) const HIGH_BITS: u64 = 0x8080_8080_8080_8080;

/// Whether every byte of `x` is in `b' '..=b'~'` (printable ASCII or a space).
fn all_in_space_to_tilde(x: u64) -> bool {
    // A byte below 0x20 borrows into its high bit; a byte above 0x7e carries into it (or has
    // it set already). Exact as an any-test (Hacker's Delight / "Bit Twiddling Hacks").
    let below = x.wrapping_sub(LOW_BITS * 0x20) & !x;
    let above = x.wrapping_add(LOW_BITS) | x; // + (0x7f - 0x7e) in every byte
    (below | above) & HIGH_BITS == 0
}

/// The high bit of each byte of `x` that is a space, and no other bit (exact per byte: the
/// additions cannot carry from one byte into the next).
fn space_bytes(x: u64) -> u64 {
    let y = x ^ (LOW_BITS * u64::from(b' '));
    let t = ((y & !HIGH_BITS).wrapping_add(!HIGH_BITS)) | y;
    !t & HIGH_BITS
}

const PRINTABLE: u8 = 0;
const SPACE: u8 = 1;
const OTHER: u8 = 2;

/// Byte classes: printable ASCII, ASCII whitespace, anything else (controls, UTF-8 bytes).
static CLASS: [u8; 256] = {
    let mut table = [OTHER; 256];
    let mut b = 0x20;
    while b < 0x7f {
        table[b] = PRINTABLE;
        b += 1;
    }
    table[b' ' as usize] = SPACE;
    table[b'\t' as usize] = SPACE;
    table[b'\n' as usize] = SPACE;
    table[b'\r' as usize] = SPACE;
    table[0x0c] = SPACE;
    table
};

struct Normalizer<'f> {
    out: String,
    /// A separator was seen: one space goes before the next visible character.
    pending_space: bool,
    /// Reused buffer for the folded form of a Unicode token.
    scratch: String,
    /// `word_key` of each word in the mixed-script list: a search of the list for every word
    /// made a text of distinct look-alike words quadratic.
    listed: FxHashSet<u64>,
    facts: &'f mut Facts,
}

/// The dedupe key of a mixed-script word (64-bit: a collision is astronomically unlikely, and
/// would only leave a word out of the list).
fn word_key(word: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(word.as_bytes())
}

impl Normalizer<'_> {
    fn separate(&mut self) {
        if self.pending_space && !self.out.is_empty() {
            self.out.push(' ');
        }
        self.pending_space = false;
    }

    /// ASCII with control characters, which separate like whitespace.
    fn push_ascii(&mut self, token: &str) {
        for b in token.bytes() {
            if b.is_ascii_control() {
                self.pending_space = true;
            } else {
                self.separate();
                self.out.push(b as char);
            }
        }
    }

    fn push_unicode(&mut self, token: &str, mixed: &mut Vec<String>) {
        let mut folded = std::mem::take(&mut self.scratch);
        folded.clear();
        let visible = token.chars().filter(|&c| !is_invisible(c));
        if is_nfkc_quick(visible.clone()) == IsNormalized::Yes {
            push_case_folded(visible, &mut folded, self.facts);
        } else {
            push_case_folded(visible.nfkc(), &mut folded, self.facts);
        }
        let mut word_start = None;
        for (i, c) in folded.char_indices() {
            let in_word = if c.is_ascii() {
                c.is_ascii_alphanumeric()
            } else {
                self.facts.of(c).in_word
            };
            if in_word {
                word_start.get_or_insert(i);
                continue;
            }
            if let Some(start) = word_start.take() {
                self.push_word(&folded[start..i], mixed);
            }
            if c.is_whitespace() || c.is_control() {
                self.pending_space = true;
            } else {
                self.separate();
                self.out.push(c);
            }
        }
        if let Some(start) = word_start {
            self.push_word(&folded[start..], mixed);
        }
        self.scratch = folded;
    }

    /// Appends one word, folding look-alikes when the word mixes scripts or hides non-ASCII
    /// look-alikes in Latin.
    fn push_word(&mut self, word: &str, mixed: &mut Vec<String>) {
        self.separate();
        if word.is_ascii() {
            self.out.push_str(word);
            return;
        }
        let scripts = script_set(word, self.facts);
        let single_script = !scripts.is_empty();
        if single_script && !scripts.base.contains_script(unicode_script::Script::Latin) {
            // Wholly one non-Latin script (or only common characters): ordinary foreign text.
            self.out.push_str(word);
            return;
        }
        if !single_script && mixed.len() < MAX_MIXED_WORDS && self.listed.insert(word_key(word)) {
            mixed.push(word.to_string());
        }
        for c in word.chars() {
            push_folded(c, &mut self.out, self.facts);
        }
    }
}

/// What normalizing needs to know of a non-ASCII character. Each fact is a search of a Unicode
/// table (case folding, the script sets, the UTS #39 prototype through two NFD passes, the
/// alphabetic property), together ~150 ns a character, and a text of look-alike words or of a
/// non-Latin script asks about the same few dozen characters over and over: `Facts` keeps them.
#[derive(Clone, Copy)]
struct CharFacts {
    /// The character these are the facts of; `'\0'` in an empty slot (ASCII is never asked).
    c: char,
    /// Full case folding (one to three characters, `'\0'`-padded).
    case: [char; 3],
    /// `AugmentedScriptSet::for_char`.
    scripts: AugmentedScriptSet,
    /// It continues a word: alphanumeric or combining.
    in_word: bool,
    /// The look-alike prototype in lower-case ASCII, when it is all letters and digits; its
    /// length is `proto_len`: 0 when the character stands for itself, `LONG_PROTO` when the
    /// prototype does not fit (then it is computed at each use; none is longer than four
    /// letters in the current tables, "㏉" → "kcal").
    proto: [u8; 4],
    proto_len: u8,
}

const LONG_PROTO: u8 = u8::MAX;

impl CharFacts {
    fn empty() -> CharFacts {
        CharFacts {
            c: '\0',
            case: ['\0'; 3],
            scripts: AugmentedScriptSet::default(),
            in_word: false,
            proto: [0; 4],
            proto_len: 0,
        }
    }

    fn of(c: char) -> CharFacts {
        let mut facts = CharFacts {
            c,
            scripts: AugmentedScriptSet::for_char(c),
            in_word: c.is_alphanumeric() || is_combining(c),
            ..CharFacts::empty()
        };
        for (slot, f) in facts
            .case
            .iter_mut()
            .zip(std::iter::once(c).default_case_fold())
        {
            *slot = f;
        }
        let mut buf = [0u8; 4];
        let mut len = 0;
        for p in unicode_security::skeleton(c.encode_utf8(&mut buf)) {
            if !p.is_ascii_alphanumeric() {
                len = 0;
                break;
            }
            if len == facts.proto.len() {
                len = usize::from(LONG_PROTO);
                break;
            }
            facts.proto[len] = p.to_ascii_lowercase() as u8;
            len += 1;
        }
        facts.proto_len = len as u8;
        facts
    }
}

/// A direct-mapped cache of `CharFacts`, one per thread (the facts of a character never
/// change). 1,024 slots by the character's low bits: Latin-1, Greek and Cyrillic, the usual
/// look-alike alphabets, do not evict one another.
struct Facts {
    slots: Vec<CharFacts>,
    /// Where an uncached lookup puts its answer.
    spare: CharFacts,
}

const FACT_SLOTS: usize = 1024;

thread_local! {
    static FACTS: std::cell::RefCell<Facts> = std::cell::RefCell::new(Facts::new());
}

impl Facts {
    fn new() -> Facts {
        Facts {
            slots: vec![CharFacts::empty(); FACT_SLOTS],
            spare: CharFacts::empty(),
        }
    }

    fn uncached() -> Facts {
        Facts {
            slots: Vec::new(),
            spare: CharFacts::empty(),
        }
    }

    /// The facts of non-ASCII `c`.
    fn of(&mut self, c: char) -> &CharFacts {
        match self.slots.get_mut(c as usize % FACT_SLOTS) {
            Some(slot) => {
                if slot.c != c {
                    *slot = CharFacts::of(c);
                }
                slot
            }
            None => {
                self.spare = CharFacts::of(c);
                &self.spare
            }
        }
    }
}

/// Full case folding (`default_case_fold`) of `chars` onto `out`: each character maps on its
/// own, ASCII only from upper to lower case, the rest by its facts.
fn push_case_folded(chars: impl Iterator<Item = char>, out: &mut String, facts: &mut Facts) {
    for c in chars {
        if c.is_ascii() {
            out.push(c.to_ascii_lowercase());
        } else {
            (facts.of(c).case.iter())
                .take_while(|&&f| f != '\0')
                .for_each(|&f| out.push(f));
        }
    }
}

/// `AugmentedScriptSet::for_str(word)`, the ASCII characters' sets from a table and the rest
/// from their facts.
fn script_set(word: &str, facts: &mut Facts) -> AugmentedScriptSet {
    static ASCII: LazyLock<[AugmentedScriptSet; 128]> =
        LazyLock::new(|| std::array::from_fn(|b| AugmentedScriptSet::for_char(b as u8 as char)));
    let mut set = AugmentedScriptSet::default();
    for c in word.chars() {
        set.intersect_with(match ASCII.get(c as usize) {
            Some(&ascii) => ascii,
            None => facts.of(c).scripts,
        });
    }
    set
}

/// Appends the ASCII prototype of a look-alike character (lower-cased), or the character
/// itself when its prototype is not all ASCII letters and digits.
fn push_folded(c: char, out: &mut String, facts: &mut Facts) {
    if c.is_ascii() {
        out.push(c);
        return;
    }
    let f = facts.of(c);
    match f.proto_len {
        0 => out.push(c),
        LONG_PROTO => {
            let mut buf = [0u8; 4];
            let mark = out.len();
            for p in unicode_security::skeleton(c.encode_utf8(&mut buf)) {
                if !p.is_ascii_alphanumeric() {
                    out.truncate(mark);
                    break;
                }
                out.push(p.to_ascii_lowercase());
            }
            if out.len() == mark {
                out.push(c);
            }
        }
        n => (f.proto[..usize::from(n)].iter()).for_each(|&b| out.push(char::from(b))),
    }
}

/// Zero-width characters, bidi controls, soft hyphen, BOM and other invisible format
/// characters.
pub fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}'
        | '\u{180B}'..='\u{180F}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}'
        | '\u{FFA0}' | '\u{FFF0}'..='\u{FFF8}' | '\u{1D173}'..='\u{1D17A}'
        | '\u{E0000}'..='\u{E0FFF}')
}

/// Combining marks continue a word (accents after NFKC that did not compose).
fn is_combining(c: char) -> bool {
    matches!(c, '\u{0300}'..='\u{036F}' | '\u{1AB0}'..='\u{1AFF}' | '\u{1DC0}'..='\u{1DFF}'
        | '\u{20D0}'..='\u{20FF}' | '\u{FE20}'..='\u{FE2F}')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{pick, xorshift};

    #[test]
    fn ascii_is_lowercased_and_collapsed() {
        assert_eq!(normalize("  Hello\r\n\tWORLD  again "), "hello world again");
    }

    #[test]
    fn cyrillic_paypal_folds_to_latin() {
        // "PayPal" with Cyrillic Р (U+0420), а (U+0430) and р (U+0440).
        let mut mixed = Vec::new();
        let n = normalize_into("Your \u{0420}\u{0430}yPal account", &mut mixed);
        assert_eq!(n, "your paypal account");
        assert_eq!(mixed, vec!["\u{0440}\u{0430}ypal".to_string()]);
    }

    /// A text of many distinct look-alike words lists each once, the first `MAX_MIXED_WORDS`
    /// of them, across the subject and the body; every word is still folded.
    #[test]
    fn mixed_script_words_are_listed_once_and_at_most_the_cap() {
        let mut mixed = Vec::new();
        normalize_into("\u{0420}\u{0430}yPal p\u{0430}ypal", &mut mixed);
        assert_eq!(mixed, vec!["\u{0440}\u{0430}ypal", "p\u{0430}ypal"]);
        let words: Vec<String> = (0..10_000).map(|i| format!("p\u{0430}ypal{i}")).collect();
        let text = format!("{} \u{0420}\u{0430}yPal", words.join(" "));
        let n = normalize_into(&text, &mut mixed);
        assert_eq!(mixed.len(), MAX_MIXED_WORDS);
        assert_eq!(
            mixed[0], "\u{0440}\u{0430}ypal",
            "the subject's words stay first"
        );
        assert_eq!(mixed[2], "p\u{0430}ypal0");
        assert_eq!(
            mixed.iter().collect::<std::collections::HashSet<_>>().len(),
            MAX_MIXED_WORDS,
            "no word twice"
        );
        assert!(n.starts_with("paypal0 paypal1 "), "{}", &n[..40]);
        assert!(
            n.ends_with(" paypal9999 paypal"),
            "words past the cap are folded too"
        );
    }

    #[test]
    fn plain_russian_is_kept() {
        let mut mixed = Vec::new();
        assert_eq!(normalize_into("Привет, Мир", &mut mixed), "привет, мир");
        assert!(mixed.is_empty());
    }

    #[test]
    fn invisible_characters_are_removed() {
        assert_eq!(
            normalize("fr\u{200B}ee of\u{00AD}fer \u{202E}now"),
            "free offer now"
        );
    }

    #[test]
    fn fullwidth_is_nfkc_folded() {
        assert_eq!(normalize("ＦＲＥＥ ｍｏｎｅｙ"), "free money");
    }

    #[test]
    fn case_folding_is_full() {
        assert_eq!(normalize("STRASSE Straße"), "strasse strasse");
    }

    #[test]
    fn separators_collapse_across_token_kinds() {
        assert_eq!(normalize("a\u{a0}\u{a0}b  \u{3000} c\x00d"), "a b c d");
        assert_eq!(normalize("\u{200B}  x"), "x");
        assert_eq!(normalize("¡Hola!"), "¡hola!");
    }

    /// The token-by-token loop this module used before plain runs were copied whole.
    fn normalize_by_token(input: &str) -> String {
        let mut n = Normalizer {
            out: String::new(),
            pending_space: false,
            scratch: String::new(),
            listed: FxHashSet::default(),
            facts: &mut Facts::uncached(),
        };
        let mut mixed = Vec::new();
        for token in input.split([' ', '\t', '\n', '\r', '\x0c']) {
            if token.is_empty() {
                continue;
            }
            n.pending_space = true;
            if token.bytes().all(|b| CLASS[usize::from(b)] == PRINTABLE) {
                n.separate();
                n.out.push_str(token);
            } else if token.is_ascii() {
                n.push_ascii(token);
            } else {
                n.push_unicode(token, &mut mixed);
            }
        }
        n.out.make_ascii_lowercase();
        n.out
    }

    #[test]
    fn plain_runs_normalize_like_single_tokens() {
        let pieces = [
            "a", "Bc", " ", "  ", "\t", "\r\n", "\x01", "\x7f", "é", "\u{200B}", "Ｆ", "x.y",
            "\u{a0}",
        ];
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        for round in 0..80_000 {
            // Short texts, and long ones that cross the eight-byte steps.
            let n = if round % 2 == 0 { x % 10 } else { x % 60 };
            let text = pick(&mut x, &pieces, n);
            xorshift(&mut x);
            assert_eq!(normalize(&text), normalize_by_token(&text), "{text:?}");
        }
    }

    #[test]
    fn byte_tests_agree_with_the_class_table() {
        // Every byte value at every position, among fillers of each kind.
        for filler in [b'a', b' ', b'~', 0x7f, 0x1f, 0xc3] {
            for pos in 0..8 {
                for b in 0..=255u8 {
                    let mut chunk = [filler; 8];
                    chunk[pos] = b;
                    let x = u64::from_le_bytes(chunk);
                    let expect_all = chunk.iter().all(|&c| (b' '..=b'~').contains(&c));
                    assert_eq!(all_in_space_to_tilde(x), expect_all, "{chunk:?}");
                    let expect_spaces = chunk
                        .iter()
                        .enumerate()
                        .filter(|(_, &c)| c == b' ')
                        .fold(0u64, |m, (k, _)| m | 0x80 << (8 * k));
                    assert_eq!(space_bytes(x), expect_spaces, "{chunk:?}");
                }
            }
        }
    }

    /// The script sets, case folding, word characters and look-alike folding, from the ASCII
    /// shortcuts and the facts' cache (and without it), agree with the library's own functions, on words of ASCII mixed with look-alikes and other scripts.
    #[test]
    fn script_sets_and_folds_match_the_library() {
        // U+0830 and U+0C30 share U+0430's cache slot (and U+0430 U+0830's).
        let pieces = [
            "a",
            "Z",
            "7",
            "-",
            "\u{0430}",
            "\u{0440}",
            "\u{03bf}",
            "\u{0456}",
            "é",
            "ß",
            "ﬁ",
            "\u{3042}",
            "\u{4e2d}",
            "\u{ac00}",
            "\u{0301}",
            "\u{0661}",
            "ℓ",
            "\u{1d41a}",
            "\u{ff21}",
            "\u{0830}",
            "\u{0c30}",
            "İ",
            "ǅ",
            "㎒",
            "㏉",
            "\u{1e9e}",
            "\u{0130}\u{0307}",
        ];
        let mut cached = Facts::new();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for round in 0..20_000 {
            let facts = if round % 2 == 0 {
                &mut cached
            } else {
                &mut Facts::uncached()
            };
            let n = x % 8;
            let word = pick(&mut x, &pieces, n);
            xorshift(&mut x);
            assert_eq!(
                script_set(&word, facts),
                AugmentedScriptSet::for_str(&word),
                "{word:?}"
            );
            for c in word.chars().filter(|c| !c.is_ascii()) {
                assert_eq!(
                    facts.of(c).in_word,
                    c.is_alphanumeric() || is_combining(c),
                    "{c:?}"
                );
            }
            let mut folded = String::new();
            push_case_folded(word.chars(), &mut folded, facts);
            assert_eq!(
                folded,
                word.chars().default_case_fold().collect::<String>(),
                "{word:?}"
            );
            for c in word.chars() {
                let mut buf = [0u8; 4];
                let skeleton: String =
                    unicode_security::skeleton(c.encode_utf8(&mut buf)).collect();
                let expect = if c.is_ascii() {
                    c.to_string()
                } else if !skeleton.is_empty()
                    && skeleton.chars().all(|p| p.is_ascii_alphanumeric())
                {
                    skeleton.to_ascii_lowercase()
                } else {
                    c.to_string()
                };
                let mut out = String::from("x");
                push_folded(c, &mut out, facts);
                assert_eq!(out, format!("x{expect}"), "{c:?}");
            }
        }
    }

    #[test]
    fn accented_latin_is_kept() {
        assert_eq!(normalize("Café Crème"), "café crème");
    }
}
