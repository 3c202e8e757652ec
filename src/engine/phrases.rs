//! Phrase lists searched together: one Aho-Corasick pass over a text finds the whole-word
//! occurrences of every phrase of several lists (`re.phrases` in Lua). The default rules'
//! body and subject phrase checks run on it; a regex alternation per list cost a pass per list.

use aho_corasick::automaton::{Automaton, StateID};
use aho_corasick::{dfa::DFA, Anchored, MatchKind};

/// Distinct phrases found per list stop being collected past this many (the count stops too).
const MAX_DISTINCT: usize = 1_000;
/// Texts from this long are walked as `LANES` stretches at once.
const SPLIT_MIN: usize = 256;
const LANES: usize = 4;

/// Several phrase lists behind one automaton.
#[derive(Debug)]
pub struct PhraseSets {
    dfa: DFA,
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

/// Why phrase lists could not be compiled: the automaton would be too large.
#[derive(Debug, thiserror::Error)]
#[error("phrase lists: {0}")]
pub struct PhraseError(#[from] aho_corasick::BuildError);

impl PhraseSets {
    /// Builds the matcher. Empty phrases are ignored. Fails only when the automaton would be
    /// too large.
    pub fn new(lists: &[Vec<Vec<u8>>]) -> Result<Self, PhraseError> {
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
        // A full DFA: one table lookup per text byte (a contiguous NFA, the crate's default for
        // this many phrases, was about twice as slow here). A few hundred phrases make a table
        // of a few hundred KB per Lua state. No prefilter: it cannot skip ahead in an
        // overlapping search, and without one the start state is no special state, so the
        // search loop checks one comparison a byte.
        let dfa = DFA::builder()
            .match_kind(MatchKind::Standard)
            .byte_classes(true)
            .prefilter(false)
            .build(&bytes)?;
        Ok(PhraseSets {
            dfa,
            patterns,
            lists: lists.len(),
        })
    }

    /// The distinct phrases of each list that occur in `text` as whole words (a phrase that
    /// starts or ends with a word byte must not be preceded or followed by one).
    pub fn search(&self, text: &[u8]) -> Vec<Found> {
        self.search_split(text, SPLIT_MIN)
    }

    /// `search`, walking texts from `split_min` bytes as `LANES` stretches at once.
    fn search_split(&self, text: &[u8], split_min: usize) -> Vec<Found> {
        let mut out = vec![Found::default(); self.lists];
        if self.patterns.is_empty() {
            return out;
        }
        // The overlapping search, written out over the DFA: the crate's iterator keeps its
        // state in memory between calls and cost ~16 instructions a byte here, this loop ~10
        // (callgrind). Every phrase ending at a byte is in that byte's
        // match state (Standard semantics), in the order the iterator reports them.
        //
        // A byte's step needs the state the byte before left, a table read that waits on the
        // one before it, so one walk runs at the table's load latency. A long text is walked
        // as `LANES` stretches of equal length at once: independent chains of reads. Each
        // stretch after the first starts `max_len` bytes before the part it reports on (the
        // matches that end there): by then its state is exact, since no phrase prefix the
        // automaton tracks is longer. The last stretch's walk goes on to the end of the text.
        let Ok(start) = self.dfa.start_state(Anchored::No) else {
            return out;
        };
        let n = text.len();
        let max_len = self.dfa.max_pattern_len();
        let mut events: [Vec<(usize, StateID)>; LANES] = Default::default();
        // each stretch's length, and the distance between their starts
        let len = (n + (LANES - 1) * max_len) / LANES;
        if n >= split_min && len > max_len {
            let step = len - max_len;
            let lanes: [&[u8]; LANES] = std::array::from_fn(|j| &text[j * step..j * step + len]);
            let mut states = [start; LANES];
            let mut at = 0;
            while at < len {
                at += advance_lanes(&self.dfa, &mut states, &lanes, at);
                for (j, &sid) in states.iter().enumerate() {
                    // (a lane after the first reports only past its first `max_len` bytes)
                    if self.dfa.is_match(sid) && (j == 0 || at > max_len) {
                        events[j].push((j * step + at, sid));
                    }
                }
            }
            let last = LANES - 1;
            walk(
                &self.dfa,
                states[last],
                text,
                last * step + len,
                &mut events[last],
            );
        } else {
            walk(&self.dfa, start, text, 0, &mut events[0]);
        }
        for (end, sid) in events.into_iter().flatten() {
            for k in 0..self.dfa.match_len(sid) {
                let pid = self.dfa.match_pattern(sid, k);
                let start = end - self.dfa.pattern_len(pid);
                let p = self.patterns[pid.as_usize()];
                if p.word_start && start > 0 && is_word(text[start - 1]) {
                    continue;
                }
                if p.word_end && text.get(end).is_some_and(|&b| is_word(b)) {
                    continue;
                }
                let found = &mut out[p.list].indices;
                if found.len() < MAX_DISTINCT && !found.contains(&p.index) {
                    found.push(p.index);
                }
            }
        }
        out
    }
}

/// Runs the DFA from state `sid` over `text[at..]` to the first special state (a match, or
/// the dead state): that state and the position after the byte that led to it. At the end of
/// the text with no special state: the state reached, and position 0 (no match ends at 0).
/// Apart from the search's bookkeeping, so that the loop keeps its few values in registers.
#[inline(never)]
fn advance(dfa: &DFA, mut sid: StateID, text: &[u8], at: usize) -> (StateID, usize) {
    for (i, &b) in text.iter().enumerate().skip(at) {
        sid = dfa.next_state(Anchored::No, sid, b);
        if dfa.is_special(sid) {
            return (sid, i + 1);
        }
    }
    (sid, 0)
}

/// Walks `text[at..]` from state `sid`, recording each match state reached with the position
/// after its byte.
fn walk(
    dfa: &DFA,
    mut sid: StateID,
    text: &[u8],
    mut at: usize,
    events: &mut Vec<(usize, StateID)>,
) {
    loop {
        (sid, at) = advance(dfa, sid, text, at);
        if at == 0 || dfa.is_dead(sid) {
            // (at 0: the text ran out)
            return;
        }
        if dfa.is_match(sid) {
            events.push((at, sid));
        }
    }
}

/// The walks of `lanes` (all of one length) at once, each from its state in `states`, from
/// byte `at` to the first byte after which any is in a special state (or to their end): the
/// bytes consumed. `states` holds the states reached.
#[inline(never)]
fn advance_lanes(
    dfa: &DFA,
    states: &mut [StateID; LANES],
    lanes: &[&[u8]; LANES],
    at: usize,
) -> usize {
    let [l0, l1, l2, l3] = lanes.map(|l| l.get(at..).unwrap_or_default());
    let [mut s0, mut s1, mut s2, mut s3] = *states;
    let mut n = 0;
    for (((&b0, &b1), &b2), &b3) in l0.iter().zip(l1).zip(l2).zip(l3) {
        s0 = dfa.next_state(Anchored::No, s0, b0);
        s1 = dfa.next_state(Anchored::No, s1, b1);
        s2 = dfa.next_state(Anchored::No, s2, b2);
        s3 = dfa.next_state(Anchored::No, s3, b3);
        n += 1;
        if dfa.is_special(s0) | dfa.is_special(s1) | dfa.is_special(s2) | dfa.is_special(s3) {
            break;
        }
    }
    *states = [s0, s1, s2, s3];
    n
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

    /// The search as the crate's own overlapping iterator runs it (what `search` replaced).
    fn reference(lists: &[&[&str]], text: &[u8]) -> Vec<Vec<usize>> {
        let mut pats = Vec::new();
        for (l, list) in lists.iter().enumerate() {
            for (i, p) in list.iter().enumerate() {
                if !p.is_empty() {
                    pats.push((l, i, p.as_bytes()));
                }
            }
        }
        let ac = aho_corasick::AhoCorasick::builder()
            .match_kind(MatchKind::Standard)
            .build(pats.iter().map(|p| p.2))
            .unwrap();
        let mut out = vec![Vec::new(); lists.len()];
        for m in ac.find_overlapping_iter(text) {
            let (l, i, p) = pats[m.pattern().as_usize()];
            let (first, last) = (p[0], p[p.len() - 1]);
            if is_word(first) && m.start() > 0 && is_word(text[m.start() - 1]) {
                continue;
            }
            if is_word(last) && text.get(m.end()).is_some_and(|&b| is_word(b)) {
                continue;
            }
            if !out[l].contains(&i) {
                out[l].push(i);
            }
        }
        out
    }

    proptest::proptest! {
        /// Same phrases, in the same order, as the crate's overlapping iterator: texts made of
        /// the phrases' own pieces, so that phrases overlap, nest and touch word bytes.
        #[test]
        fn search_matches_the_crates_overlapping_iterator(
            pieces in proptest::collection::vec(0usize..12, 0..80),
        ) {
            const PIECES: [&str; 12] = [
                "lose ", "weight", " loss", "viagra", "a", "% off", "_", " ", "free", "dom",
                "freedom", "!",
            ];
            let lists: [&[&str]; 3] = [
                &["lose weight", "weight loss", "viagra", "% off", "free"],
                &["freedom", "dom", "a", "weight", "eight", "free", "e"],
                &["loss", "ss", "s vi", " "],
            ];
            let text: String = pieces.iter().map(|&i| PIECES[i]).collect();
            let s = sets(&lists);
            let expected = reference(&lists, text.as_bytes());
            // one walk, and `LANES` stretches at once whenever the text is long enough
            for split_min in [usize::MAX, 0] {
                let got: Vec<Vec<usize>> = s
                    .search_split(text.as_bytes(), split_min)
                    .into_iter()
                    .map(|f| f.indices)
                    .collect();
                proptest::prop_assert_eq!(&got, &expected);
            }
        }
    }
}
