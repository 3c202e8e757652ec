//! Phrase lists searched together: one Aho-Corasick pass over a text finds the whole-word
//! occurrences of every phrase of several lists (`re.phrases` in Lua). The default rules'
//! body and subject phrase checks run on it; a regex alternation per list cost a pass per list.

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, AhoCorasickKind, MatchKind};

/// Distinct phrases found per list stop being collected past this many (the count stops too).
const MAX_DISTINCT: usize = 1_000;

/// Several phrase lists behind one automaton.
#[derive(Debug)]
pub struct PhraseSets {
    matcher: AhoCorasick,
    /// Per pattern: its list, its index within the list, and whether its first and last bytes
    /// are word bytes (then the text must not continue the word there).
    patterns: Vec<Pattern>,
    lists: usize,
}

#[derive(Debug, Clone, Copy)]
struct Pattern {
    list: usize,
    index: usize,
    word_start: bool,
    word_end: bool,
}

/// Word bytes as the regex crate's ASCII `\b` sees them.
fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// What one search found in one list: the number of distinct phrases, and their indices in
/// the list in order of first appearance.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Found {
    pub indices: Vec<usize>,
}

impl PhraseSets {
    /// Builds the matcher. Empty phrases are ignored. Fails only when the automaton would be
    /// too large.
    pub fn new(lists: &[Vec<Vec<u8>>]) -> Result<Self, String> {
        let mut bytes = Vec::new();
        let mut patterns = Vec::new();
        for (list, phrases) in lists.iter().enumerate() {
            for (index, p) in phrases.iter().enumerate() {
                let (Some(&first), Some(&last)) = (p.first(), p.last()) else {
                    continue;
                };
                bytes.push(p.as_slice());
                patterns.push(Pattern {
                    list,
                    index,
                    word_start: is_word(first),
                    word_end: is_word(last),
                });
            }
        }
        let matcher = AhoCorasickBuilder::new()
            .match_kind(MatchKind::Standard)
            // A full DFA: one table lookup per text byte (the default for this many phrases is
            // a contiguous NFA, about twice as slow here). A few hundred phrases make a table
            // of a few hundred KB per Lua state.
            .kind(Some(AhoCorasickKind::DFA))
            .byte_classes(true)
            .build(&bytes)
            .map_err(|e| format!("phrase lists: {e}"))?;
        Ok(PhraseSets {
            matcher,
            patterns,
            lists: lists.len(),
        })
    }

    /// The distinct phrases of each list that occur in `text` as whole words (a phrase that
    /// starts or ends with a word byte must not be preceded or followed by one).
    pub fn search(&self, text: &[u8]) -> Vec<Found> {
        let mut out = vec![Found::default(); self.lists];
        if self.patterns.is_empty() {
            return out;
        }
        for m in self.matcher.find_overlapping_iter(text) {
            let p = self.patterns[m.pattern().as_usize()];
            if p.word_start && m.start() > 0 && is_word(text[m.start() - 1]) {
                continue;
            }
            if p.word_end && text.get(m.end()).is_some_and(|&b| is_word(b)) {
                continue;
            }
            let found = &mut out[p.list].indices;
            if found.len() < MAX_DISTINCT && !found.contains(&p.index) {
                found.push(p.index);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sets(lists: &[&[&str]]) -> PhraseSets {
        let lists: Vec<Vec<Vec<u8>>> = lists
            .iter()
            .map(|l| l.iter().map(|p| p.as_bytes().to_vec()).collect())
            .collect();
        PhraseSets::new(&lists).unwrap()
    }

    #[test]
    fn whole_words_distinct_per_list_in_order() {
        let s = sets(&[
            &["cialis", "viagra", "% off", "lose weight"],
            &["weight loss", "viagra", ""],
        ]);
        let f = s.search(b"specialist: viagra, 50% off! viagra again; lose weight loss_x");
        // "cialis" inside "specialist" is no word; "loss_x" continues the word ("_" is a word
        // byte, as in regex \b); "viagra" counts once per list.
        assert_eq!(f[0].indices, vec![1, 2, 3]);
        assert_eq!(f[1].indices, vec![1]);
        let f = s.search(b"weight loss");
        assert_eq!(f[0].indices, Vec::<usize>::new());
        assert_eq!(f[1].indices, vec![0]);
        // Overlapping phrases are all found.
        let f = s.search(b"lose weight loss");
        assert_eq!(
            (f[0].indices.clone(), f[1].indices.clone()),
            (vec![3], vec![0])
        );
    }

    #[test]
    fn empty_inputs() {
        let s = sets(&[&[], &[""]]);
        assert_eq!(s.search(b"anything"), vec![Found::default(); 2]);
        let s = sets(&[&["a"]]);
        assert_eq!(s.search(b"").len(), 1);
        assert_eq!(s.search(b"a").first().map(|f| f.indices.len()), Some(1));
    }
}
