//! Text normalization: the one matching form that rules, entities and shingles share.
//!
//! `normalize` turns display text into a form in which look-alike spellings compare equal:
//!
//! 1. invisible characters are dropped: zero-width spaces and joiners, bidi controls, the soft
//!    hyphen, the BOM and every other default-ignorable code point;
//! 2. Unicode NFKC (fullwidth "ＦＲＥＥ" becomes "FREE", ligatures split);
//! 3. full case folding (`caseless`);
//! 4. look-alike folding (UTS #39 confusables) inside words that are written in more than one
//!    script, or in Latin with non-ASCII look-alikes: the Cyrillic "а" and "р" in "PayPal" become
//!    the Latin letters, so the word normalizes exactly like the Latin spelling. Words wholly in
//!    one non-Latin script (ordinary Russian or Greek text) are left alone, so rule authors can
//!    still match them as written. Mixed-script words are reported so rules can score them;
//! 5. runs of whitespace collapse to one space; leading and trailing whitespace is trimmed.
//!
//! ASCII input takes a fast path (lower-case and collapse only): it is most mail.

use std::borrow::Cow;

use caseless::Caseless;
use unicode_normalization::UnicodeNormalization;
use unicode_security::mixed_script::AugmentedScriptSet;

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

/// Normalizes `input`, appending each distinct mixed-script word (as displayed) to `mixed`.
pub fn normalize_into(input: &str, mixed: &mut Vec<String>) -> String {
    if input.is_ascii() {
        return normalize_ascii(input);
    }
    let folded: String = input
        .chars()
        .filter(|&c| !is_invisible(c))
        .nfkc()
        .default_case_fold()
        .collect();
    let mut out = String::with_capacity(folded.len());
    let mut pending_space = false;
    let mut word_start = None;
    for (i, c) in folded.char_indices() {
        if c.is_alphanumeric() || is_combining(c) {
            if word_start.is_none() {
                if pending_space && !out.is_empty() {
                    out.push(' ');
                }
                pending_space = false;
                word_start = Some(i);
            }
            continue;
        }
        if let Some(start) = word_start.take() {
            push_word(&folded[start..i], &mut out, mixed);
        }
        if c.is_whitespace() || c.is_control() {
            pending_space = true;
        } else {
            if pending_space && !out.is_empty() {
                out.push(' ');
            }
            pending_space = false;
            out.push(c);
        }
    }
    if let Some(start) = word_start {
        push_word(&folded[start..], &mut out, mixed);
    }
    out
}

/// The ASCII fast path: lower-case, control characters as spaces, whitespace collapsed.
fn normalize_ascii(input: &str) -> String {
    let mut out = String::with_capacity(input.len());
    let mut pending_space = false;
    for b in input.bytes() {
        if b.is_ascii_whitespace() || b.is_ascii_control() {
            pending_space = true;
        } else {
            if pending_space && !out.is_empty() {
                out.push(' ');
            }
            pending_space = false;
            out.push(b.to_ascii_lowercase() as char);
        }
    }
    out
}

/// Appends one word, folding look-alikes when the word mixes scripts or hides non-ASCII
/// look-alikes in Latin.
fn push_word(word: &str, out: &mut String, mixed: &mut Vec<String>) {
    if word.is_ascii() {
        out.push_str(word);
        return;
    }
    let scripts = AugmentedScriptSet::for_str(word);
    let single_script = !scripts.is_empty();
    if single_script && !scripts.base.contains_script(unicode_script::Script::Latin) {
        // Wholly one non-Latin script (or only common characters): ordinary foreign text.
        out.push_str(word);
        return;
    }
    if !single_script && !mixed.iter().any(|w| w == word) {
        mixed.push(word.to_string());
    }
    for c in word.chars() {
        out.push_str(&fold_confusable(c));
    }
}

/// The ASCII prototype of a look-alike character, or the character itself.
fn fold_confusable(c: char) -> Cow<'static, str> {
    if c.is_ascii() {
        return Cow::Owned(c.to_string());
    }
    let mut buf = [0u8; 4];
    let skeleton: String = unicode_security::skeleton(c.encode_utf8(&mut buf)).collect();
    if !skeleton.is_empty() && skeleton.chars().all(|p| p.is_ascii_alphanumeric()) {
        Cow::Owned(skeleton.to_ascii_lowercase())
    } else {
        Cow::Owned(c.to_string())
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

    #[test]
    fn plain_russian_is_kept() {
        let mut mixed = Vec::new();
        assert_eq!(normalize_into("Привет, Мир", &mut mixed), "привет, мир");
        assert!(mixed.is_empty());
    }

    #[test]
    fn invisible_characters_are_removed() {
        assert_eq!(normalize("fr\u{200B}ee of\u{00AD}fer \u{202E}now"), "free offer now");
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
    fn accented_latin_is_kept() {
        assert_eq!(normalize("Café Crème"), "café crème");
    }
}
